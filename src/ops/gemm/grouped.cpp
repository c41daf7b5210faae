// GroupedGemmPlan: validation, the implementation list (CUTLASS Hopper grouped kernel, native
// kernel), the workspace layout of the per-group arrays, and the launch of the one-launch grouped
// GEMM (mixture of experts).
#include <algorithm>
#include <span>
#include <string>

#include "baracuda/ops/gemm.hpp"
#include "core/impl_list.hpp"
#include "ops/gemm/gemm_internal.hpp"

namespace baracuda {

namespace {
constexpr const char* kOp = "grouped_gemm";
Error invalid(std::string msg) { return make_error(Status::InvalidProblem, std::string(kOp) + ": " + msg); }
Error unsupported(std::string msg) { return make_error(Status::Unsupported, std::string(kOp) + ": " + msg); }
std::string str(int64_t v) { return std::to_string(v); }

/// Highest element offset + 1 of `dims` with `strides`; false on overflow.
bool span(std::initializer_list<std::pair<int64_t, int64_t>> dims, int64_t* out) {
  int64_t acc = 1, t;
  for (auto [n, st] : dims) {
    if (n == 0) {
      *out = 0;
      return true;
    }
    if (__builtin_mul_overflow(n - 1, st, &t) || __builtin_add_overflow(acc, t, &acc)) return false;
  }
  *out = acc;
  return true;
}

size_t align256(size_t n) { return (n + 255) / 256 * 256; }

// ---- workspace -----------------------------------------------------------------------------------
/// Byte offsets of the per-group arrays (GroupedArrays) and of CUTLASS's own workspace in the plan's
/// workspace, each 256-byte aligned (TMA descriptors need 64, the placeholder descriptors CUTLASS
/// builds from the pointer arrays' addresses need 16).
struct WorkspaceLayout {
  size_t shapes = 0, ptr_a = 0, ptr_w = 0, ptr_d = 0, stride_a = 0, stride_w = 0, stride_d = 0, cutlass = 0, total = 0;
};
WorkspaceLayout workspace_layout(int64_t groups, size_t cutlass_bytes) {
  const auto g = static_cast<size_t>(groups);
  WorkspaceLayout l;
  size_t at = 0;
  auto take = [&](size_t bytes) {
    const size_t here = at;
    at += align256(bytes);
    return here;
  };
  l.shapes = take(g * 3 * sizeof(int32_t));
  l.ptr_a = take(g * sizeof(void*));
  l.ptr_w = take(g * sizeof(void*));
  l.ptr_d = take(g * sizeof(void*));
  l.stride_a = take(g * sizeof(int64_t));
  l.stride_w = take(g * sizeof(int64_t));
  l.stride_d = take(g * sizeof(int64_t));
  l.cutlass = take(cutlass_bytes);
  l.total = at;
  return l;
}
detail::GroupedArrays arrays_in(void* ws, const WorkspaceLayout& l) {
  char* b = static_cast<char*>(ws);
  detail::GroupedArrays a;
  a.shapes = reinterpret_cast<int32_t*>(b + l.shapes);
  a.ptr_a = reinterpret_cast<const void**>(b + l.ptr_a);
  a.ptr_w = reinterpret_cast<const void**>(b + l.ptr_w);
  a.ptr_d = reinterpret_cast<void**>(b + l.ptr_d);
  a.stride_a = reinterpret_cast<int64_t*>(b + l.stride_a);
  a.stride_w = reinterpret_cast<int64_t*>(b + l.stride_w);
  a.stride_d = reinterpret_cast<int64_t*>(b + l.stride_d);
  return a;
}

// ---- CUTLASS grouped kernel ----------------------------------------------------------------------
/// The kernels of each dtype (gemm_cutlass_grouped_<dtype>.cu).
struct CutlassGroupedEntry {
  DType dt;
  detail::CutlassGroupedKernels (*kernels)();
};
constexpr CutlassGroupedEntry kCutlassGrouped[] = {
    {DType::bf16, &detail::cutlass_grouped_kernels<DType::bf16>},
    {DType::f16, &detail::cutlass_grouped_kernels<DType::f16>},
};
detail::CutlassGroupedKernels cutlass_grouped_for(DType dt) {
  for (const CutlassGroupedEntry& e : kCutlassGrouped)
    if (e.dt == dt) return e.kernels();
  return {};
}

/// The large tile when the groups are tall on average (at least twice its 256-row granularity, 128-row
/// tiles rounded to the 2-CTA cluster, so skewed routing wastes at most ~1/4 of a group), n fills its
/// 256 columns, and it gives at least a full wave; otherwise the 128x128 ping-pong tile (many small
/// experts, skewed routing, narrow problems). The split of the rows is on the device, so the average
/// is all the host knows.
int cutlass_grouped_config(const GroupedGemmDesc& d, int num_sms) {
  const detail::CutlassGroupedTile& big = detail::kCutlassGroupedTiles[detail::kCutlassGroupedLarge];
  const int64_t avg_rows = d.groups > 0 ? d.rows / d.groups : 0;
  const int64_t big_tiles = (d.rows + big.m - 1) / big.m * ((d.n + big.n - 1) / big.n);
  return avg_rows >= 2 * int64_t{big.m} * big.cluster_m && d.n >= big.n && big_tiles >= num_sms
             ? detail::kCutlassGroupedLarge
             : detail::kCutlassGroupedSmall;
}

detail::CutlassGroupedParams cutlass_params(const GroupedGemmDesc& d, int config, int sm_count) {
  detail::CutlassGroupedParams p;
  p.config = config;
  p.groups = static_cast<int>(d.groups);
  p.sm_count = sm_count;
  return p;
}

// ---- implementations ----------------------------------------------------------------------------
struct Ctx {
  const Target& t;
  const GroupedGemmDesc& d;
  const PlanPreference& p;
};

struct GroupedImpl {
  const char* name;
  GroupedGemmPlan::Path path;
  Result<void> (*check)(const Ctx&);
  Result<void> accepts(const Ctx& c) const { return check(c); }
};

Result<void> cutlass_accepts(const Ctx& c) {
  const GroupedGemmDesc& d = c.d;
  const std::string why = "cutlass-grouped: ";
  if (c.p.backend == Backend::Native) return unsupported(why + "backend=native requested");
  const detail::CutlassGroupedKernels kern = cutlass_grouped_for(d.dtype);
  if (!kern.built)
    return unsupported(why +
                       "baracuda was built without CUTLASS (pip install nvidia-cutlass, or configure with "
                       "-DBARACUDA_CUTLASS_DIR=<dir holding cutlass/cutlass.h>; BARACUDA_CUDA_ARCHS must include 90a)");
  if (c.t.sm != 90)
    return unsupported(why + "needs sm_90 (the kernel is built for sm_90a: TMA + WGMMA), got sm_" +
                       std::to_string(c.t.sm));
  // CUTLASS checks the per-group alignment only with host problem shapes; ours are on the device.
  if (d.n % 8 != 0) return unsupported(why + "n expected a multiple of 8 (16-byte TMA rows of D), got " + str(d.n));
  if (d.ldd % 8 != 0)
    return unsupported(why + "ldd expected a multiple of 8 (16-byte TMA row stride of D), got " + str(d.ldd));
  if (d.d_align < 16)
    return unsupported(why + "D expected a 16-byte aligned pointer (TMA stores), got d_align " +
                       std::to_string(d.d_align));
  if (d.rows > INT32_MAX / 2 || d.n > INT32_MAX / 2)
    return unsupported(why + "rows and n expected < 2^30 (int32 tile coordinates), got rows " + str(d.rows) + ", n " +
                       str(d.n));
  const detail::CutlassGroupedParams p = cutlass_params(d, cutlass_grouped_config(d, c.t.num_sms), c.t.num_sms);
  if (!kern.implementable(p))
    return unsupported(why + "CUTLASS can_implement refused groups=" + str(d.groups) + " n=" + str(d.n) +
                       " k=" + str(d.k));
  return {};
}

Result<void> native_accepts(const Ctx& c) {
  const GroupedGemmDesc& d = c.d;
  const std::string why = "native: ";
  if (c.p.backend == Backend::Cutlass) return unsupported(why + "backend=cutlass requested");
  if (d.n > int64_t{65535} * detail::kGroupedTileN)
    return unsupported(why + "n expected <= " + str(int64_t{65535} * detail::kGroupedTileN) + " (grid y), got " +
                       str(d.n));
  return {};
}

constexpr GroupedImpl kImpls[] = {
    {"cutlass-grouped", GroupedGemmPlan::Path::Cutlass, &cutlass_accepts},
    {"native", GroupedGemmPlan::Path::Native, &native_accepts},
};
}  // namespace

GroupedGemmDesc GroupedGemmDesc::normalized() const {
  GroupedGemmDesc d = *this;
  if (!d.lda) d.lda = d.k;
  if (!d.ldw) d.ldw = d.k;
  if (!d.w_group) d.w_group = d.n * d.ldw;
  if (!d.ldd) d.ldd = d.n;
  return d;
}

struct GroupedGemmPlanAccess {
  static Result<GroupedGemmPlan> select(const Target& target, const GroupedGemmDesc& in, const PlanPreference& pref) {
    const GroupedGemmDesc d = in.normalized();
    for (auto [nm, v] :
         {std::pair{"groups", d.groups}, std::pair{"rows", d.rows}, std::pair{"n", d.n}, std::pair{"k", d.k}}) {
      if (v < 0) return invalid(std::string(nm) + " expected >= 0, got " + str(v));
      if (v > INT32_MAX) return invalid(std::string(nm) + " expected <= 2^31-1, got " + str(v));
    }
    if (d.groups > 65535)
      return unsupported("groups expected <= 65535 (one offsets scan per block), got " + str(d.groups));
    if (d.dtype != DType::f16 && d.dtype != DType::bf16)
      return unsupported("dtype expected float16 or bfloat16, got " + std::string(name(d.dtype)));
    if (d.k % 8 != 0) return unsupported("k expected a multiple of 8 (16-byte loads), got " + str(d.k));
    if (d.lda < d.k || d.lda % 8 != 0)
      return invalid("lda expected >= k and a multiple of 8, got " + str(d.lda) + " (k = " + str(d.k) + ")");
    if (d.ldw < d.k || d.ldw % 8 != 0)
      return invalid("ldw expected >= k and a multiple of 8, got " + str(d.ldw) + " (k = " + str(d.k) + ")");
    if (d.w_group % 8 != 0 || (d.groups > 1 && d.w_group < d.n * d.ldw))
      return invalid("w_group expected a multiple of 8 and >= n * ldw = " + str(d.n * d.ldw) + ", got " +
                     str(d.w_group));
    if (d.ldd < d.n) return invalid("ldd expected >= n, got " + str(d.ldd));
    if (d.d_align == 0 || (d.d_align & (d.d_align - 1)) != 0)
      return invalid("d_align expected a power of two, got " + std::to_string(d.d_align));
    int64_t sa, sw, sd;
    if (!span({{d.rows, d.lda}, {d.k, 1}}, &sa) || !span({{d.groups, d.w_group}, {d.n, d.ldw}, {d.k, 1}}, &sw) ||
        !span({{d.rows, d.ldd}, {d.n, 1}}, &sd) || sa > INT64_MAX / 2 || sw > INT64_MAX / 2 || sd > INT64_MAX / 2)
      return invalid("a footprint overflows 64 bits");
    if (pref.backend != Backend::Any && pref.backend != Backend::Native && pref.backend != Backend::Cutlass)
      return unsupported("backend expected any, native or cutlass, got " + std::string(to_string(pref.backend)));
    if (pref.tf32 == Tristate::Require) return unsupported("tf32=Require applies to float32 GEMMs");
    if (pref.reduced_precision_reduction == Tristate::Require)
      return unsupported("reduced_precision_reduction=Require: the kernels accumulate in float32");
    if (pref.vectorized == Tristate::Forbid) return unsupported("vectorized=Forbid cannot be honoured");
    if (target.sm < 80) return unsupported("sm expected >= 80, got " + std::to_string(target.sm));
    const Ctx ctx{target, d, pref};
    auto impl = detail::first_accepting<GroupedImpl>(kOp, std::span<const GroupedImpl>(kImpls), ctx);
    if (!impl) return impl.error();

    GroupedGemmPlan p;
    p.desc_ = d;
    p.target_ = target;
    p.path_ = (*impl)->path;
    KernelSku& s = p.sku_;
    s.category = "gemm";
    s.op = kOp;
    s.dtypes = std::string(name(d.dtype)) + "->" + std::string(name(d.dtype));
    s.epilogue = "none";
    s.precision.math = DType::f32;
    s.precision.accumulator = DType::f32;
    s.precision.deterministic = true;
    s.precision.bit_stable = true;
    if (p.path_ == GroupedGemmPlan::Path::Cutlass) {
      p.cutlass_tile_ = static_cast<uint8_t>(cutlass_grouped_config(d, target.num_sms));
      s.layout = std::string("cutlass sm90 grouped TN (TMA + WGMMA, device-side group shapes) ") +
                 detail::kCutlassGroupedTiles[p.cutlass_tile_].name;
      s.arch = "sm_90a";
      s.backend = Backend::Cutlass;
      s.precision.note = "f32 accumulation, no split-K; one rounding to the output dtype";
      const size_t cws = cutlass_grouped_for(d.dtype).workspace(cutlass_params(d, p.cutlass_tile_, target.num_sms));
      p.workspace_bytes_ = workspace_layout(d.groups, cws).total;
    } else {
      s.layout = "grouped 64x64 tiles (mma.m16n8k16, fragments from global, k-contiguous weights)";
      s.arch = target.sm >= 90 ? "sm_90a" : "sm_80";
      s.backend = Backend::Native;
      s.precision.note = "f32 accumulation in a fixed k order; one rounding to the output dtype";
    }
    return p;
  }
};

Result<GroupedGemmPlan> GroupedGemmPlan::select(const Target& target, const GroupedGemmDesc& desc,
                                                const PlanPreference& pref) {
  return GroupedGemmPlanAccess::select(target, desc, pref);
}

Result<void> GroupedGemmPlan::can_implement(const GroupedGemmArgs& a) const {
  const GroupedGemmDesc& d = desc_;
  auto check = [&](const char* role, const TensorRef& t, DType dt, std::initializer_list<int64_t> shape,
                   std::initializer_list<int64_t> strides, unsigned align) -> Result<void> {
    if (t.dtype != dt)
      return invalid(std::string(role) + " dtype expected " + std::string(name(dt)) + ", got " +
                     std::string(name(t.dtype)));
    Layout want;
    want.rank = static_cast<int>(shape.size());
    int i = 0;
    for (auto v : shape) want.shape[i++] = v;
    i = 0;
    for (auto v : strides) want.stride[i++] = v;
    bool ok = t.layout.rank == want.rank;
    for (int k = 0; ok && k < want.rank; ++k) ok = t.layout.shape[k] == want.shape[k];
    if (!ok)
      return invalid(std::string(role) + " shape expected " + want.shape_str() + ", got " + t.layout.shape_str());
    // Strides of a size-1 dimension, or of a tensor without elements, address nothing.
    for (int k = 0; k < want.rank && t.numel() > 0; ++k)
      if (want.shape[k] > 1 && t.layout.stride[k] != want.stride[k])
        return invalid(std::string(role) + " strides expected " + want.stride_str() + ", got " + t.layout.stride_str());
    if (t.numel() > 0 && !t.data) return invalid(std::string(role) + " is null but has elements");
    if (reinterpret_cast<uintptr_t>(t.data) % align != 0)
      return make_error(Status::MisalignedOperand, std::string(kOp) + ": " + role + " pointer expected " +
                                                       std::to_string(align) + "-byte aligned");
    return {};
  };
  BARACUDA_TRY(check("A", a.a, d.dtype, {d.rows, d.k}, {d.lda, 1}, 16));
  BARACUDA_TRY(check("W", a.w, d.dtype, {d.groups, d.n, d.k}, {d.w_group, d.ldw, 1}, 16));
  const unsigned d_align = std::max<unsigned>(d.d_align, static_cast<unsigned>(size_in_bytes(d.dtype)));
  BARACUDA_TRY(check("D", a.d, d.dtype, {d.rows, d.n}, {d.ldd, 1}, d_align));
  const DType odt = a.offsets.dtype == DType::s32 ? DType::s32 : DType::s64;
  BARACUDA_TRY(check("offsets", a.offsets, odt, {d.ends_only ? d.groups : d.groups + 1}, {1},
                     static_cast<unsigned>(size_in_bytes(odt))));
  // D must not overlap the inputs (address ranges; D's rows are distinct by ldd >= n).
  auto range = [](const TensorRef& t) {
    int64_t lo = 0, hi = 0;
    t.layout.extent(&lo, &hi);
    const auto base = reinterpret_cast<uintptr_t>(t.data);
    const auto esz = static_cast<uintptr_t>(size_in_bytes(t.dtype));
    return std::pair<uintptr_t, uintptr_t>{base + static_cast<uintptr_t>(lo) * esz,
                                           base + static_cast<uintptr_t>(hi) * esz};
  };
  const auto rd = range(a.d);
  if (rd.first != rd.second)
    for (auto [role, t] : {std::pair{"A", a.a}, std::pair{"W", a.w}, std::pair{"offsets", a.offsets}}) {
      const auto r = range(t);
      if (r.first < rd.second && rd.first < r.second)
        return invalid(std::string("D overlaps ") + role + " (outputs need their own memory)");
    }
  return {};
}

Result<void> GroupedGemmPlan::run(cudaStream_t stream, Workspace ws, const GroupedGemmArgs& a) const {
  BARACUDA_TRY(can_implement(a));
  const GroupedGemmDesc& d = desc_;
  if (ws.bytes < workspace_bytes_ || (workspace_bytes_ && !ws.ptr))
    return make_error(Status::WorkspaceTooSmall, std::string(kOp) +
                                                     ": workspace expected >= " + std::to_string(workspace_bytes_) +
                                                     " bytes, got " + std::to_string(ws.bytes));
  if (workspace_bytes_ && reinterpret_cast<uintptr_t>(ws.ptr) % 256 != 0)
    return make_error(Status::MisalignedOperand,
                      std::string(kOp) + ": workspace pointer expected 256-byte aligned (TMA descriptors)");
  auto cuda_check = [&](cudaError_t e, const char* what) -> Result<void> {
    if (e != cudaSuccess)
      return make_error(Status::CudaError, std::string(kOp) + ": " + what + " failed: " + cudaGetErrorString(e));
    return {};
  };
  if (d.rows == 0 || d.n == 0) return {};  // D has no element

  detail::GroupedPrepareParams pp;
  detail::GroupedParams& p = pp.g;
  p.dt = d.dtype;
  p.groups = d.groups, p.rows = d.rows, p.n = d.n, p.k = d.k;
  p.a = a.a.data, p.lda = d.lda;
  p.w = a.w.data, p.ldw = d.ldw, p.w_group = d.w_group;
  p.offsets = a.offsets.data;
  p.offsets_i32 = a.offsets.dtype == DType::s32;
  p.ends_only = d.ends_only;
  p.d = a.d.data, p.ldd = d.ldd;
  pp.zero_all = d.k == 0 || d.groups == 0;  // D = 0: a sum over nothing, or no group
  pp.num_sms = target_.num_sms;

  // The device of the launch and its persistent grid: the plan's SM count when it was selected for
  // this device, else (selected offline or elsewhere) the device's own, capped at the plan's (the
  // workspace holds that many SMs' TMA descriptors).
  int device = 0, sms = target_.num_sms;
  const bool cutlass = path_ == Path::Cutlass && !pp.zero_all;
  if (cutlass) {
    BARACUDA_TRY(cuda_check(cudaGetDevice(&device), "cudaGetDevice"));
    if (device != target_.device) {
      int actual = 0;
      BARACUDA_TRY(
          cuda_check(cudaDeviceGetAttribute(&actual, cudaDevAttrMultiProcessorCount, device), "SM count query"));
      sms = std::min(actual, target_.num_sms);
    }
    pp.arrays = arrays_in(ws.ptr, workspace_layout(d.groups, 0));
  }
  BARACUDA_TRY(cuda_check(detail::launch_grouped_prepare(pp, stream), "preparation kernel launch"));
  if (pp.zero_all) return {};
  if (cutlass) {
    detail::CutlassGroupedParams cp = cutlass_params(d, cutlass_tile_, sms);
    cp.arrays = pp.arrays;
    cp.device = device;
    const detail::CutlassGroupedKernels kern = cutlass_grouped_for(d.dtype);
    void* cws = static_cast<char*>(ws.ptr) + workspace_layout(d.groups, 0).cutlass;
    return cuda_check(kern.launch(cp, cws, stream), "CUTLASS grouped GEMM launch");
  }
  return cuda_check(detail::launch_grouped(p, stream), "kernel launch");
}

}  // namespace baracuda
