// GGUF block formats (gguf.hpp): the format table, GgufDequantizePlan and GgufMatvecPlan (descriptor
// validation, the matvec's launch shape, argument checks, launch sequences), the one-line
// conveniences and the coverage rows (family "quant", ops gguf_dequantize / gguf_matvec).
#include <algorithm>
#include <cctype>
#include <string>
#include <type_traits>
#include <vector>

#include "baracuda/core/coverage.hpp"
#include "baracuda/ops/gguf.hpp"
#include "core/operands.hpp"
#include "core/plan_common.hpp"
#include "ops/quant/gguf_launch.hpp"

namespace baracuda {

// ---- the table ------------------------------------------------------------------------------------------
namespace {
const GgufFormatInfo kFormats[] = {
#define BARACUDA_X(e, n, t, b, s) {GgufFormat::e, n, t, b, s},
    BARACUDA_GGUF_FORMATS(BARACUDA_X)
#undef BARACUDA_X
};

// The kernels' shape table must agree with the public one.
#define BARACUDA_X(e, n, t, b, s)                                                                                  \
  static_assert(                                                                                                   \
      detail::gguf_shape(GgufFormat::e).block_size == (b) && detail::gguf_shape(GgufFormat::e).block_bytes == (s), \
      "gguf_launch.hpp's shape of " n " disagrees with BARACUDA_GGUF_FORMATS");
BARACUDA_GGUF_FORMATS(BARACUDA_X)
#undef BARACUDA_X

using detail::invalid;
using detail::unsupported;

std::string dname(DType t) { return std::string(name(t)); }
std::string str(int64_t v) { return std::to_string(v); }
size_t round16(size_t b) { return (b + 15) / 16 * 16; }
size_t round256(size_t b) { return (b + 255) / 256 * 256; }
bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
constexpr DTypeSet kFloats = bit(DType::f32) | bit(DType::f16) | bit(DType::bf16);
constexpr int64_t kMaxRows = 8;  // rows of x the matvec takes
}  // namespace

std::span<const GgufFormatInfo> gguf_formats() { return kFormats; }
const GgufFormatInfo& info(GgufFormat f) { return kFormats[static_cast<int>(f)]; }

std::optional<GgufFormat> gguf_format_from_name(std::string_view s) {
  std::string low(s);
  for (char& c : low) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const auto& r : kFormats) {
    std::string n = r.name;
    for (char& c : n) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (low == n) return r.format;
  }
  if (!low.empty() && std::all_of(low.begin(), low.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
      low.size() < 4)
    return gguf_format_from_ggml_type(std::stoi(low));
  return std::nullopt;
}

std::optional<GgufFormat> gguf_format_from_ggml_type(int t) {
  for (const auto& r : kFormats)
    if (r.ggml_type == t) return r.format;
  return std::nullopt;
}

int64_t gguf_packed_bytes(GgufFormat f, int64_t rows, int64_t cols) {
  const auto& in = info(f);
  if (rows < 0 || cols < 0 || cols % in.block_size != 0) return -1;
  return rows * (cols / in.block_size) * in.block_bytes;
}

// ---- shared checks ------------------------------------------------------------------------------------------
namespace {
bool valid_format(GgufFormat f) { return static_cast<int>(f) < kNumGgufFormats; }

/// "q4_K: 3 rows x 512 cols = 3 x 2 blocks of 144 bytes".
std::string layout_words(GgufFormat f, int64_t rows, int64_t cols) {
  const auto& in = info(f);
  return std::string(in.name) + ": " + str(rows) + " rows x " + str(cols) + " cols = " + str(rows) + " x " +
         str(cols / in.block_size) + " blocks of " + str(in.block_bytes) + " bytes";
}

Result<void> check_preferences(const std::string& label, const Target& target, const PlanPreference& pref) {
  if (pref.backend != Backend::Any && pref.backend != Backend::Native)
    return unsupported(label + ": preference backend=" + to_string(pref.backend) +
                       " cannot be honoured (the GGUF kernels are native)");
  if (pref.tf32 == Tristate::Require)
    return unsupported(label + ": preference tf32=Require cannot be honoured (no TF32 arithmetic here)");
  if (pref.reduced_precision_reduction == Tristate::Require)
    return unsupported(label +
                       ": preference reduced_precision_reduction=Require cannot be honoured (sums accumulate in "
                       "float32)");
  if (target.sm < 80) return unsupported(label + ": target sm_" + str(target.sm) + " is below the minimum sm_80");
  return {};
}

/// The packed operand: uint8 / int8, dense, exactly `bytes` bytes, 16-byte aligned when not empty.
Result<void> check_packed(const std::string& label, const char* role, const TensorRef& t, int64_t bytes,
                          const std::string& what) {
  if (!detail::given(t)) return invalid(label + ": " + role + " is required but was not given");
  if (t.dtype != DType::u8 && t.dtype != DType::s8)
    return invalid(label + ": " + role + " dtype expected uint8 (or int8) bytes, got " + dname(t.dtype));
  if (t.layout.numel() != bytes)
    return invalid(label + ": " + role + " expected " + str(bytes) + " bytes (" + what + "), got " +
                   str(t.layout.numel()));
  if (bytes > 0 && !t.layout.is_contiguous())
    return invalid(label + ": " + role + " expected dense bytes, got strides " + t.layout.stride_str() + " for shape " +
                   t.layout.shape_str());
  if (bytes > 0 && t.data && !aligned16(t.data))
    return make_error(Status::MisalignedOperand,
                      label + ": " + role + " expected a 16-byte aligned address (the kernels copy 16-byte units)");
  return {};
}

/// dtype and exact shape of a tensor (strides are checked by the caller).
Result<void> check_tensor(const std::string& label, const char* role, const TensorRef& t, DType dt,
                          std::initializer_list<int64_t> shape) {
  if (!detail::given(t)) return invalid(label + ": " + role + " is required but was not given");
  if (t.dtype != dt) return invalid(label + ": " + role + " dtype expected " + dname(dt) + ", got " + dname(t.dtype));
  bool ok = t.layout.rank == static_cast<int>(shape.size());
  int i = 0;
  for (int64_t v : shape) ok = ok && t.layout.shape[i++] == v;
  if (!ok) {
    std::string want = "[";
    for (int64_t v : shape) want += (want.size() > 1 ? ", " : "") + str(v);
    return invalid(label + ": " + role + " shape expected " + want + "], got " + t.layout.shape_str());
  }
  return {};
}

Result<void> check_dense(const std::string& label, const char* role, const Layout& l) {
  if (l.numel() > 0 && !l.is_contiguous())
    return invalid(label + ": " + role + " expected dense row-major, got strides " + l.stride_str() + " for shape " +
                   l.shape_str());
  return {};
}

PrecisionGuarantee exact_precision(DType out) {
  PrecisionGuarantee g;
  g.math = DType::f32;
  g.accumulator = DType::f32;
  g.deterministic = true;
  g.bit_stable = true;
  g.note = std::string("ggml's dequantize_row_* in float32, bit for bit") +
           (out == DType::f32 ? "" : "; rounded to " + dname(out) + " (nearest even)");
  return g;
}
}  // namespace

// ---- dequantize ---------------------------------------------------------------------------------------------
Result<GgufDequantizePlan> GgufDequantizePlan::select(const Target& target, const GgufDequantizeDesc& d,
                                                      const PlanPreference& pref) {
  const std::string label = "gguf_dequantize";
  if (!valid_format(d.format))
    return invalid(label + ": format expected one of the " + str(kNumGgufFormats) + " GGUF formats, got value " +
                   str(static_cast<int>(d.format)));
  const auto& in = info(d.format);
  if (d.direction == Direction::Backward)
    return unsupported("gguf_dequantize_backward: gguf_dequantize has no backward (GGUF weights are frozen)");
  if (!contains(kFloats, d.dtype))
    return unsupported(label + ": dtype expected one of {" + detail::dtype_list(kFloats) + "}, got " + dname(d.dtype));
  for (auto [nm, v] : {std::pair{"rows", d.rows}, std::pair{"cols", d.cols}})
    if (v < 0) return invalid(label + ": " + nm + " expected >= 0, got " + str(v));
  if (d.cols % in.block_size != 0)
    return invalid(label + ": cols=" + str(d.cols) + " expected a multiple of " + in.name + "'s block size " +
                   str(in.block_size));
  BARACUDA_TRY(check_preferences(label, target, pref));
  GgufDequantizePlan p;
  p.desc_ = d;
  p.num_sms_ = target.num_sms > 0 ? target.num_sms : 132;
  KernelSku& s = p.sku_;
  s.category = "quant";
  s.op = "gguf_dequantize";
  s.dtypes = std::string(in.name) + "->" + dname(d.dtype);
  s.layout =
      "blocks-per-warp-tile: cp.async 16-byte staging, one block region a lane, padded shared tile, "
      "16-byte stores";
  s.arch = target.sm >= 90 ? "sm_90a" : "sm_80";
  s.backend = Backend::Native;
  s.precision = exact_precision(d.dtype);
  return p;
}

Result<void> GgufDequantizePlan::can_implement(const GgufDequantizeArgs& a) const {
  const std::string label = "gguf_dequantize";
  const auto& d = desc_;
  const int64_t bytes = gguf_packed_bytes(d.format, d.rows, d.cols);
  BARACUDA_TRY(check_packed(label, "packed", a.packed, bytes, layout_words(d.format, d.rows, d.cols)));
  BARACUDA_TRY(check_tensor(label, "out", a.out, d.dtype, {d.rows, d.cols}));
  BARACUDA_TRY(check_dense(label, "out", a.out.layout));
  const detail::Operand ops[] = {
      {"packed", a.packed.data, a.packed.dtype, &a.packed.layout, false, false},
      {"out", a.out.data, a.out.dtype, &a.out.layout, true, false},
  };
  BARACUDA_TRY(detail::check_operands(label, ops));
  return {};
}

Result<void> GgufDequantizePlan::run(cudaStream_t stream, Workspace, const GgufDequantizeArgs& a) const {
  BARACUDA_TRY(can_implement(a));
  const auto& d = desc_;
  const auto& in = info(d.format);
  detail::GgufDequantLaunch p;
  p.format = d.format;
  p.out_dtype = d.dtype;
  p.packed = static_cast<const uint8_t*>(a.packed.data);
  p.out = a.out.data;
  p.blocks = d.rows * (d.cols / in.block_size);
  if (p.blocks == 0) return {};
  const auto shape = detail::gguf_shape(d.format);
  const int64_t tiles = (p.blocks + detail::gguf_step_blocks(shape) - 1) / detail::gguf_step_blocks(shape);
  // Enough CTAs for every SM to hold several; each warp then loops over tiles (grid-stride). Every
  // element is computed alone, so the grid does not change any result.
  p.grid = std::max<int64_t>(
      1, std::min<int64_t>((tiles + detail::kGgufWarps - 1) / detail::kGgufWarps, static_cast<int64_t>(num_sms_) * 8));
  const cudaError_t e = detail::gguf_dequant_launch(p, stream);
  if (e != cudaSuccess)
    return make_error(Status::CudaError,
                      std::string("gguf_dequantize: kernel launch failed: ") + cudaGetErrorString(e));
  return {};
}

// ---- matvec ------------------------------------------------------------------------------------------------
namespace detail {
GgufMatvecLaunch gguf_matvec_shape(GgufFormat f, DType dt, int64_t m, int64_t n, int64_t k, int num_sms) {
  (void)num_sms;  // the shape depends on the problem only (bit-stable across GPUs)
  const GgufShape s = gguf_shape(f);
  GgufMatvecLaunch p;
  p.format = f;
  p.dtype = dt;
  p.m = m, p.n = n, p.k = k;
  p.nb = k / s.block_size;
  p.m_tier = m <= 1 ? 1 : m <= 2 ? 2 : m <= 4 ? 4 : 8;
  // The x chunk a CTA holds: float32 padded tile rows (+ the sub-block sums) within kGgufXBudget;
  // K is cut into equal chunks of whole blocks.
  const int gpb = s.block_size / s.group;
  const size_t per_block = static_cast<size_t>(p.m_tier) * (4 * static_cast<size_t>(gguf_x_block_floats(s)) +
                                                            (s.has_min ? 4 * static_cast<size_t>(gpb) : 0));
  const int64_t max_chunk = std::max<int64_t>(1, static_cast<int64_t>(kGgufXBudget / per_block));
  p.splits = p.nb > 0 ? static_cast<int>((p.nb + max_chunk - 1) / max_chunk) : 0;
  p.chunk_blocks = p.splits > 0 ? (p.nb + p.splits - 1) / p.splits : 0;
  // Weight rows a warp streams: one for one or two x rows (small CTAs balance the SMs best); more
  // for 4 and 8 rows, whose x chunk (read from L2 by every CTA) is larger next to the weight bytes.
  p.rows_per_warp = p.m_tier <= 2 ? 1 : p.m_tier / 2;
  p.grid_x = (n + kGgufWarps * p.rows_per_warp - 1) / (kGgufWarps * p.rows_per_warp);
  p.xs_bytes = round16(static_cast<size_t>(p.m_tier) * static_cast<size_t>(p.chunk_blocks) * 4 *
                       static_cast<size_t>(gguf_x_block_floats(s)));
  p.xg_bytes =
      s.has_min
          ? round16(static_cast<size_t>(p.m_tier) * static_cast<size_t>(p.chunk_blocks) * static_cast<size_t>(gpb) * 4)
          : 0;
  p.smem_bytes = p.xs_bytes + p.xg_bytes + static_cast<size_t>(kGgufWarps) * kGgufStages * gguf_matvec_stage_bytes(s);
  return p;
}
}  // namespace detail

Result<GgufMatvecPlan> GgufMatvecPlan::select(const Target& target, const GgufMatvecDesc& d,
                                              const PlanPreference& pref) {
  const std::string label = "gguf_matvec";
  if (!valid_format(d.format))
    return invalid(label + ": format expected one of the " + str(kNumGgufFormats) + " GGUF formats, got value " +
                   str(static_cast<int>(d.format)));
  const auto& in = info(d.format);
  if (d.direction == Direction::Backward)
    return unsupported(
        "gguf_matvec_backward: gguf_matvec is inference-only (no backward plan; GGUF weights are frozen)");
  if (!contains(kFloats, d.dtype))
    return unsupported(label + ": dtype expected one of {" + detail::dtype_list(kFloats) + "}, got " + dname(d.dtype));
  for (auto [nm, v] : {std::pair{"m", d.m}, std::pair{"n", d.n}, std::pair{"k", d.k}})
    if (v < 0) return invalid(label + ": " + nm + " expected >= 0, got " + str(v));
  if (d.m > kMaxRows)
    return unsupported(label + ": m expected <= " + str(kMaxRows) +
                       " (the decode matvec; dequantize with GgufDequantizePlan and use GemmPlan for more rows), got " +
                       str(d.m));
  if (d.k % in.block_size != 0)
    return invalid(label + ": k=" + str(d.k) + " expected a multiple of " + in.name + "'s block size " +
                   str(in.block_size));
  if (d.n > INT32_MAX || d.k / in.block_size > INT32_MAX / 2)
    return invalid(label + ": n=" + str(d.n) + ", k=" + str(d.k) + " expected n < 2^31 and k / " + str(in.block_size) +
                   " < 2^30 (32-bit row and block counters)");
  BARACUDA_TRY(check_preferences(label, target, pref));

  GgufMatvecPlan p;
  p.desc_ = d;
  const detail::GgufMatvecLaunch shape = detail::gguf_matvec_shape(d.format, d.dtype, d.m, d.n, d.k, target.num_sms);
  p.geo_.m_tier = shape.m_tier;
  p.geo_.chunk_blocks = shape.chunk_blocks;
  p.geo_.splits = shape.splits;
  p.geo_.rows_per_warp = shape.rows_per_warp;
  p.geo_.grid_x = shape.grid_x;
  p.geo_.smem_bytes = shape.smem_bytes;
  if (shape.splits > 65535)
    return invalid(label + ": k=" + str(d.k) + " expected at most 65535 chunks of " + str(shape.chunk_blocks) +
                   " blocks for m=" + str(d.m) + " (grid.y), got " + str(shape.splits));
  const size_t smem_limit = target.sm >= 90 ? 227 * 1024 : target.sm >= 80 ? 163 * 1024 : 48 * 1024;
  if (shape.smem_bytes > smem_limit)
    return unsupported(label + ": the kernel needs " + str(static_cast<int64_t>(shape.smem_bytes)) +
                       " bytes of shared memory a CTA, sm_" + str(target.sm) + " has " +
                       str(static_cast<int64_t>(smem_limit)));
  p.workspace_bytes_ = shape.splits > 1 ? round256(static_cast<size_t>(shape.splits) * static_cast<size_t>(d.m) *
                                                   static_cast<size_t>(d.n) * sizeof(float))
                                        : 0;
  KernelSku& s = p.sku_;
  s.category = "quant";
  s.op = "gguf_matvec";
  s.dtypes = dname(d.dtype) + "," + in.name + "->" + dname(d.dtype);
  s.layout = "decode: m<=" + str(shape.m_tier) + ", warp streams " + str(shape.rows_per_warp) + " row(s) through a " +
             str(detail::kGgufStages) + "-stage cp.async ring, x chunk of " + str(shape.chunk_blocks * in.block_size) +
             " in shared memory" +
             (shape.splits > 1 ? ", " + str(shape.splits) + " K chunks + fixed-order reduction" : "");
  s.epilogue = d.bias ? "bias" : "";
  s.arch = target.sm >= 90 ? "sm_90a" : "sm_80";
  s.backend = Backend::Native;
  PrecisionGuarantee& g = s.precision;
  g.math = DType::f32;
  g.accumulator = DType::f32;
  g.deterministic = true;
  g.bit_stable = true;
  g.note =
      "per sub-block: scale * sum(code * x) (+ min * sum(x)) in float32, codes exact; lanes, rows of a "
      "warp and K chunks summed in a fixed order";
  return p;
}

Result<void> GgufMatvecPlan::can_implement(const GgufMatvecArgs& a) const {
  const std::string label = "gguf_matvec";
  const auto& d = desc_;
  BARACUDA_TRY(check_tensor(label, "x", a.x, d.dtype, {d.m, d.k}));
  if (d.m > 0 && d.k > 1 && a.x.layout.stride[1] != 1)
    return invalid(label + ": x expected a unit column stride, got strides " + a.x.layout.stride_str());
  if (d.m > 1 && d.k > 0 && a.x.layout.stride[0] < d.k)
    return invalid(label + ": x row stride expected >= k=" + str(d.k) + ", got " + str(a.x.layout.stride[0]));
  BARACUDA_TRY(
      check_packed(label, "weight", a.weight, gguf_packed_bytes(d.format, d.n, d.k), layout_words(d.format, d.n, d.k)));
  if (d.bias) {
    BARACUDA_TRY(check_tensor(label, "bias", a.bias, d.dtype, {d.n}));
    if (d.n > 1 && a.bias.layout.stride[0] != 1)
      return invalid(label + ": bias expected a unit stride, got " + a.bias.layout.stride_str());
  } else if (detail::given(a.bias)) {
    return invalid(label + ": bias given but desc.bias is false");
  }
  BARACUDA_TRY(check_tensor(label, "y", a.y, d.dtype, {d.m, d.n}));
  BARACUDA_TRY(check_dense(label, "y", a.y.layout));
  std::vector<detail::Operand> ops = {
      {"x", a.x.data, a.x.dtype, &a.x.layout, false, false},
      {"weight", a.weight.data, a.weight.dtype, &a.weight.layout, false, false},
      {"y", a.y.data, a.y.dtype, &a.y.layout, true, false},
  };
  if (d.bias) ops.push_back({"bias", a.bias.data, a.bias.dtype, &a.bias.layout, false, false});
  BARACUDA_TRY(detail::check_operands(label, ops));
  return {};
}

Result<void> GgufMatvecPlan::run(cudaStream_t stream, Workspace ws, const GgufMatvecArgs& a) const {
  BARACUDA_TRY(can_implement(a));
  const std::string label = "gguf_matvec";
  if (ws.bytes < workspace_bytes_ || (workspace_bytes_ > 0 && !ws.ptr))
    return make_error(Status::WorkspaceTooSmall,
                      label + ": workspace expected >= " + str(static_cast<int64_t>(workspace_bytes_)) +
                          " bytes, got " + str(static_cast<int64_t>(ws.bytes)));
  const auto& d = desc_;
  if (d.m == 0 || d.n == 0) return {};
  detail::GgufMatvecLaunch p = detail::gguf_matvec_shape(d.format, d.dtype, d.m, d.n, d.k, 0);
  p.x = a.x.data;
  p.x_row = d.m > 1 ? a.x.layout.stride[0] : d.k;
  p.w = static_cast<const uint8_t*>(a.weight.data);
  p.bias = d.bias ? a.bias.data : nullptr;
  p.y = a.y.data;
  p.partial = static_cast<float*>(ws.ptr);
  cudaError_t e = cudaSuccess;
  if (p.splits >= 1) {
    switch (d.dtype) {
      case DType::f32:
        e = detail::gguf_matvec_launch<DType::f32>(p, stream);
        break;
      case DType::f16:
        e = detail::gguf_matvec_launch<DType::f16>(p, stream);
        break;
      default:
        e = detail::gguf_matvec_launch<DType::bf16>(p, stream);
        break;
    }
  }
  // Split K: sum the chunks' partials (+ bias); k = 0 (no chunk): y = bias or zeros.
  if (e == cudaSuccess && p.splits != 1) e = detail::gguf_matvec_reduce_launch(p, stream);
  if (e != cudaSuccess)
    return make_error(Status::CudaError, label + ": kernel launch failed: " + cudaGetErrorString(e));
  return {};
}

// ---- conveniences -------------------------------------------------------------------------------------------
namespace {
template <class Desc>
std::string key_of(const Desc& d) {
  std::string k;
  auto put = [&](const auto& v) { k.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  if constexpr (std::is_same_v<Desc, GgufDequantizeDesc>) {
    put(d.format), put(d.dtype), put(d.rows), put(d.cols), put(d.direction);
  } else {
    put(d.format), put(d.dtype), put(d.m), put(d.n), put(d.k), put(d.bias), put(d.direction);
  }
  return k;
}
}  // namespace

Result<void> gguf_dequantize(cudaStream_t stream, const GgufDequantizeDesc& desc, const GgufDequantizeArgs& args,
                             Workspace ws, const PlanPreference& pref) {
  auto plan = detail::cached_plan<GgufDequantizePlan>(
      key_of(desc), pref, [&](const Target& t) { return GgufDequantizePlan::select(t, desc, pref); });
  if (!plan) return plan.error();
  return (*plan)->run(stream, ws, args);
}

Result<void> gguf_matvec(cudaStream_t stream, const GgufMatvecDesc& desc, const GgufMatvecArgs& args, Workspace ws,
                         const PlanPreference& pref) {
  auto plan = detail::cached_plan<GgufMatvecPlan>(
      key_of(desc), pref, [&](const Target& t) { return GgufMatvecPlan::select(t, desc, pref); });
  if (!plan) return plan.error();
  return (*plan)->run(stream, ws, args);
}

Result<size_t> gguf_matvec_workspace_size(const GgufMatvecDesc& desc, const PlanPreference& pref) {
  auto plan = detail::cached_plan<GgufMatvecPlan>(
      key_of(desc), pref, [&](const Target& t) { return GgufMatvecPlan::select(t, desc, pref); });
  if (!plan) return plan.error();
  return (*plan)->workspace_size();
}

// ---- coverage ---------------------------------------------------------------------------------------------------
namespace {
/// Rows "q4_K->bfloat16" (dequantize) and "bfloat16,q4_K->bfloat16" (matvec) for every (format,
/// dtype) select() accepts.
void gguf_coverage(const Target& target, std::vector<CoverageRow>& rows) {
  for (const auto& f : kFormats)
    for (int i = 0; i < kNumDTypes; ++i) {
      GgufDequantizeDesc d;
      d.format = f.format;
      d.dtype = static_cast<DType>(i);
      d.rows = 2, d.cols = f.block_size;
      if (auto p = GgufDequantizePlan::select(target, d))
        rows.push_back({"quant", "gguf_dequantize", Direction::Forward, p->sku().dtypes, p->sku().backend});
    }
  for (const auto& f : kFormats)
    for (int i = 0; i < kNumDTypes; ++i) {
      GgufMatvecDesc d;
      d.format = f.format;
      d.dtype = static_cast<DType>(i);
      d.m = 1, d.n = 8, d.k = f.block_size;
      if (auto p = GgufMatvecPlan::select(target, d))
        rows.push_back({"quant", "gguf_matvec", Direction::Forward, p->sku().dtypes, p->sku().backend});
    }
}

[[maybe_unused]] const bool registered = detail::register_coverage("quant", &gguf_coverage);
}  // namespace

}  // namespace baracuda
