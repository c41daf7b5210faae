// W4A16LinearPlan (int4 weight-only linear, quant.hpp): m <= 16 runs the decode kernel
// (w4a16_decode.cu), which streams the packed weight once; larger m dequantizes the weight into the
// workspace with the family's per_group dequantize plan and hands it to GemmPlan (the weight's
// bytes are then small next to the GEMM's work). Both halves of the second path are plans of their
// own, selected once here.
#include <algorithm>
#include <cstdint>
#include <string>

#include "baracuda/ops/quant.hpp"
#include "core/plan_common.hpp"
#include "ops/quant/quant_launch.hpp"

namespace baracuda {
namespace {
using detail::invalid;
using detail::unsupported;

const char* kLabel = "w4a16_linear";
/// Rows of x the decode kernel takes (one MMA tile's rows).
constexpr int64_t kDecodeMaxM = 16;
/// k per step of the decode kernel (a 4-byte word of codes per lane, four lanes): the group size
/// must be a multiple of it so that no step straddles two groups.
constexpr int64_t kStepK = 32;

std::string dname(DType t) { return std::string(name(t)); }
std::string str(int64_t v) { return std::to_string(v); }
size_t round256(size_t b) { return (b + 255) / 256 * 256; }
bool aligned(const void* p, size_t n) { return reinterpret_cast<uintptr_t>(p) % n == 0; }

Result<void> check_desc(const W4A16LinearDesc& d) {
  const std::string label = kLabel;
  if (d.direction == Direction::Backward)
    return unsupported(
        "w4a16_linear_backward: w4a16_linear is inference-only (no backward plan; training uses fake_quantize "
        "followed by a floating-point GEMM)");
  const auto& in = info(QuantOp::w4a16_linear);
  if (!contains(in.fw_dtypes, d.dtype))
    return unsupported(label + ": dtype expected one of {" + detail::dtype_list(in.fw_dtypes) + "}, got " +
                       dname(d.dtype));
  if (!contains(in.q_dtypes, d.weight_dtype))
    return unsupported(label + ": weight_dtype expected one of {" + detail::dtype_list(in.q_dtypes) + "}, got " +
                       dname(d.weight_dtype));
  for (auto [nm, v] : {std::pair{"m", d.m}, std::pair{"n", d.n}, std::pair{"k", d.k}})
    if (v < 0) return invalid(label + ": " + nm + " expected >= 0, got " + str(v));
  if (d.group_size < kStepK || d.group_size % kStepK != 0)
    return invalid(label + ": group_size expected a positive multiple of 32, got " + str(d.group_size));
  if (d.k % d.group_size != 0)
    return invalid(label + ": k=" + str(d.k) + " expected a multiple of group_size=" + str(d.group_size));
  if (d.k / kStepK > INT32_MAX)
    return invalid(label + ": k=" + str(d.k) + " expected < 2^36 (32-element steps counted in 32 bits)");
  return {};
}

/// A tensor given (data or shape).
bool given(const TensorRef& t) { return t.data != nullptr || t.layout.rank != 0; }

/// Byte range [lo, hi) of a dense-or-strided tensor (non-negative strides: checked by the caller).
std::pair<uintptr_t, uintptr_t> bytes_of(const void* data, DType dt, const Layout& l) {
  if (!data || l.numel() == 0) return {0, 0};
  int64_t span = 0;
  for (int d = 0; d < l.rank; ++d) span += (l.shape[d] - 1) * l.stride[d];
  const int64_t elem = size_in_bytes(dt);
  const auto lo = reinterpret_cast<uintptr_t>(data);
  return {lo, lo + static_cast<uintptr_t>((span + 1) * elem)};
}
}  // namespace

Result<W4A16LinearPlan> W4A16LinearPlan::select(const Target& target, const W4A16LinearDesc& desc,
                                                const PlanPreference& pref) {
  BARACUDA_TRY(check_desc(desc));
  const std::string label = kLabel;
  if (pref.tf32 == Tristate::Require)
    return unsupported(label + ": preference tf32=Require cannot be honoured (16-bit activations)");
  if (pref.reduced_precision_reduction == Tristate::Require)
    return unsupported(label +
                       ": preference reduced_precision_reduction=Require cannot be honoured (sums accumulate in "
                       "float32)");
  if (target.sm < 80) return unsupported(label + ": target sm_" + str(target.sm) + " is below the minimum sm_80");

  W4A16LinearPlan p;
  p.desc_ = desc;
  KernelSku& s = p.sku_;
  s.category = "quant";
  s.op = kLabel;
  s.dtypes = dname(desc.dtype) + "," + dname(desc.weight_dtype) + "->" + dname(desc.dtype);
  s.epilogue = std::string("group scales (group=") + str(desc.group_size) + ")" +
               (desc.zero_point ? " + int32 zero points" : "") + (desc.bias ? " + bias" : "");
  s.arch = target.sm >= 90 ? "sm_90a" : "sm_80";

  if (desc.m <= kDecodeMaxM) {
    if (pref.backend != Backend::Any && pref.backend != Backend::Native)
      return unsupported(label + ": preference backend=" + to_string(pref.backend) +
                         " cannot be honoured (the m <= 16 decode kernel is native)");
    s.backend = Backend::Native;
    s.layout = std::string("decode: int4 codes as exact 16-bit integers in mma.m16n8k16, ") +
               (desc.group_size % 128 == 0 ? "128-k steps (16-byte loads)" : "32-k steps") +
               ", K split over 8 warps, x and group parameters staged in shared memory when they fit";
    PrecisionGuarantee& g = s.precision;
    g.math = desc.dtype;
    g.accumulator = DType::f32;
    g.deterministic = true;
    g.bit_stable = true;
    g.note =
        "x * (q - zp) exact products summed per group in float32 (tensor cores), times the float32 group scale, "
        "accumulated in float32; the 8 warps' partial sums added in a fixed order";
    return p;
  }

  // m > 16: dequantize (x's dtype) into the workspace, then the GEMM.
  PlanPreference qpref = pref;
  qpref.backend = Backend::Any;  // the backend preference is the GEMM's; dequantize is native only
  auto dq = QuantPlan::select(target,
                              QuantDesc::per_group(QuantOp::dequantize, desc.dtype, desc.weight_dtype,
                                                   Shape::of({desc.n, desc.k}), -1, desc.group_size, !desc.zero_point),
                              qpref);
  if (!dq) return make_error(dq.status(), label + ": weight dequantizer: " + dq.message());
  GemmDesc gd = GemmDesc::dense(desc.dtype, desc.dtype, desc.m, desc.n, desc.k, false, true);
  gd.bias = desc.bias;
  auto gm = GemmPlan::select(target, gd, pref);
  if (!gm)
    return make_error(gm.status(), label + ": the " + dname(desc.dtype) + " GEMM (GemmDesc{" + dname(desc.dtype) +
                                       ", trans_b" + (desc.bias ? ", bias" : "") +
                                       "}) is not available: " + gm.message());
  p.dequant_ = std::make_shared<QuantPlan>(std::move(dq.value()));
  p.gemm_ = std::make_shared<GemmPlan>(std::move(gm.value()));
  p.w_offset_ = 0;
  p.gemm_offset_ = round256(static_cast<size_t>(desc.n) * static_cast<size_t>(desc.k) *
                            static_cast<size_t>(size_in_bytes(desc.dtype)));
  p.workspace_bytes_ = p.gemm_offset_ + round256(p.gemm_->workspace_size());
  const KernelSku& gs = p.gemm_->sku();
  s.backend = gs.backend;
  s.layout = "dequantize (" + p.dequant_->sku().layout + ") + gemm " + gs.layout;
  s.precision = gs.precision;
  s.precision.note = "weights (q - zp) * scale rounded to " + dname(desc.dtype) + " in the workspace, then the GEMM" +
                     (gs.precision.note.empty() ? "" : ": " + gs.precision.note);
  return p;
}

Result<void> W4A16LinearPlan::can_implement(const W4A16LinearArgs& a) const {
  const std::string label = kLabel;
  const auto& d = desc_;
  const int64_t groups = d.group_size > 0 ? d.k / d.group_size : 0;
  auto check = [&](const char* role, const TensorRef& t, DType dt,
                   std::initializer_list<int64_t> shape) -> Result<void> {
    if (!given(t)) return invalid(label + ": " + role + " is required but was not given");
    if (t.dtype != dt) return invalid(label + ": " + role + " dtype expected " + dname(dt) + ", got " + dname(t.dtype));
    bool ok = t.layout.rank == static_cast<int>(shape.size());
    int i = 0;
    for (int64_t v : shape) ok = ok && t.layout.shape[i++] == v;
    if (!ok) {
      std::string want = "[";
      for (int64_t v : shape) want += (want.size() > 1 ? ", " : "") + str(v);
      return invalid(label + ": " + role + " shape expected " + want + "], got " + t.layout.shape_str());
    }
    for (int k = 0; k < t.layout.rank; ++k)
      if (t.layout.stride[k] < 0)
        return invalid(label + ": " + role + " stride[" + str(k) + "] expected >= 0, got " + str(t.layout.stride[k]));
    if (t.layout.numel() > 0 && !t.data)
      return invalid(label + ": " + role + " is null but has " + str(t.layout.numel()) + " elements");
    return {};
  };
  auto dense = [&](const char* role, const Layout& l) -> Result<void> {
    if (l.numel() > 0 && !l.is_contiguous())
      return invalid(label + ": " + role + " expected dense row-major, got strides " + l.stride_str() + " for shape " +
                     l.shape_str());
    return {};
  };
  BARACUDA_TRY(check("x", a.x, d.dtype, {d.m, d.k}));
  if (d.m > 0 && d.k > 1 && a.x.layout.stride[1] != 1)
    return invalid(label + ": x expected a unit column stride, got strides " + a.x.layout.stride_str());
  if (d.m > 1 && d.k > 0 && a.x.layout.stride[0] < d.k)
    return invalid(label + ": x row stride expected >= k=" + str(d.k) + ", got " + str(a.x.layout.stride[0]));
  BARACUDA_TRY(check("weight", a.weight, d.weight_dtype, {d.n, d.k / 2}));
  BARACUDA_TRY(dense("weight", a.weight.layout));
  BARACUDA_TRY(check("scale", a.scale, DType::f32, {d.n, groups}));
  BARACUDA_TRY(dense("scale", a.scale.layout));
  if (d.zero_point) {
    BARACUDA_TRY(check("zero_point", a.zero_point, DType::s32, {d.n, groups}));
    BARACUDA_TRY(dense("zero_point", a.zero_point.layout));
  } else if (given(a.zero_point)) {
    return invalid(label + ": zero_point given but desc.zero_point is false (symmetric)");
  }
  if (d.bias) {
    BARACUDA_TRY(check("bias", a.bias, d.dtype, {d.n}));
  } else if (given(a.bias)) {
    return invalid(label + ": bias given but desc.bias is false");
  }
  const TensorRef y{a.y.data, a.y.dtype, a.y.layout};
  BARACUDA_TRY(check("y", y, d.dtype, {d.m, d.n}));
  BARACUDA_TRY(dense("y", a.y.layout));
  // y may not share memory with any input.
  const auto yr = bytes_of(a.y.data, a.y.dtype, a.y.layout);
  if (yr.first != yr.second) {
    const std::pair<const char*, const TensorRef*> ins[] = {
        {"x", &a.x}, {"weight", &a.weight}, {"scale", &a.scale}, {"zero_point", &a.zero_point}, {"bias", &a.bias}};
    for (const auto& [role, t] : ins) {
      if (!given(*t)) continue;
      const DType dt = is_packed(t->dtype) ? DType::u8 : t->dtype;
      const auto r = bytes_of(t->data, dt, t->layout);
      if (r.first < yr.second && yr.first < r.second)
        return invalid(label + ": y overlaps " + role + " (the output must not share memory with an input)");
    }
  }
  if (!gemm_) {  // the decode kernel's vector loads
    if (d.m > 0 && d.k > 0 && (!aligned(a.x.data, 16) || (d.m > 1 && a.x.layout.stride[0] % 8 != 0)))
      return make_error(Status::MisalignedOperand,
                        label +
                            ": x expected 16-byte aligned rows (base and row stride a multiple of 8 elements), "
                            "got stride " +
                            str(a.x.layout.stride[0]));
    if (d.n > 0 && d.k > 0 && !aligned(a.weight.data, 4))
      return make_error(Status::MisalignedOperand, label + ": weight expected 4-byte aligned");
  }
  return {};
}

Result<void> W4A16LinearPlan::run(cudaStream_t stream, Workspace ws, const W4A16LinearArgs& a) const {
  BARACUDA_TRY(can_implement(a));
  const auto& d = desc_;
  if (!gemm_) {
    detail::W4A16Launch p;
    p.dtype = d.dtype;
    p.x = a.x.data;
    p.x_row = d.m > 1 ? a.x.layout.stride[0] : d.k;
    p.w = static_cast<const uint8_t*>(a.weight.data);
    p.scale = static_cast<const float*>(a.scale.data);
    p.zero_point = d.zero_point ? static_cast<const int32_t*>(a.zero_point.data) : nullptr;
    p.bias = d.bias ? a.bias.data : nullptr;
    p.y = a.y.data;
    p.m = d.m, p.n = d.n, p.k = d.k, p.group = d.group_size;
    p.signed_w = d.weight_dtype == DType::s4;
    const cudaError_t e = detail::w4a16_decode_launch(p, stream);
    if (e != cudaSuccess)
      return make_error(Status::CudaError, std::string(kLabel) + ": kernel launch failed: " + cudaGetErrorString(e));
    return {};
  }
  if (ws.bytes < workspace_bytes_ || (workspace_bytes_ > 0 && !ws.ptr))
    return make_error(Status::WorkspaceTooSmall,
                      std::string(kLabel) + ": workspace expected >= " + str(static_cast<int64_t>(workspace_bytes_)) +
                          " bytes, got " + str(static_cast<int64_t>(ws.bytes)));
  char* base = static_cast<char*>(ws.ptr);
  void* wd = base + w_offset_;
  QuantArgs qa;
  qa.q = a.weight;
  qa.scale = a.scale;
  if (d.zero_point) qa.zero_point = a.zero_point;
  qa.out = make_mut(wd, d.dtype, {d.n, d.k});
  if (auto r = dequant_->run(stream, {}, qa); !r)
    return make_error(r.status(), std::string(kLabel) + ": " + r.message());
  GemmArgs ga;
  ga.a = a.x;
  // B is the logical [k, n] matrix: the dequantized [n, k] weight viewed transposed.
  ga.b = make_ref(wd, d.dtype, {d.k, d.n});
  ga.b.layout.stride[0] = 1, ga.b.layout.stride[1] = d.k;
  ga.d = a.y;
  if (d.bias) ga.bias = a.bias;
  const Workspace gws{base + gemm_offset_, ws.bytes - gemm_offset_};
  if (auto r = gemm_->run(stream, gws, ga); !r) return make_error(r.status(), std::string(kLabel) + ": " + r.message());
  return {};
}

// ---- convenience ---------------------------------------------------------------------------------
namespace {
std::string desc_key(const W4A16LinearDesc& d) {
  std::string k;
  auto put = [&](const auto& v) { k.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  put(d.dtype), put(d.weight_dtype), put(d.m), put(d.n), put(d.k), put(d.group_size), put(d.zero_point), put(d.bias);
  put(d.direction);
  return k;
}
Result<const W4A16LinearPlan*> cached(const W4A16LinearDesc& desc, const PlanPreference& pref) {
  return detail::cached_plan<W4A16LinearPlan>(desc_key(desc), pref,
                                              [&](const Target& t) { return W4A16LinearPlan::select(t, desc, pref); });
}
}  // namespace

Result<void> w4a16_linear(cudaStream_t stream, const W4A16LinearDesc& desc, const W4A16LinearArgs& args, Workspace ws,
                          const PlanPreference& pref) {
  auto plan = cached(desc, pref);
  if (!plan) return plan.error();
  return (*plan)->run(stream, ws, args);
}

Result<size_t> w4a16_linear_workspace_size(const W4A16LinearDesc& desc, const PlanPreference& pref) {
  auto plan = cached(desc, pref);
  if (!plan) return plan.error();
  return (*plan)->workspace_size();
}

}  // namespace baracuda
