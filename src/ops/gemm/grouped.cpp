// GroupedGemmPlan: validation and launch of the one-launch grouped GEMM (mixture of experts).
#include <string>

#include "baracuda/ops/gemm.hpp"
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
}  // namespace

GroupedGemmDesc GroupedGemmDesc::normalized() const {
  GroupedGemmDesc d = *this;
  if (!d.lda) d.lda = d.k;
  if (!d.ldw) d.ldw = d.k;
  if (!d.w_group) d.w_group = d.n * d.ldw;
  if (!d.ldd) d.ldd = d.n;
  return d;
}

Result<GroupedGemmPlan> GroupedGemmPlan::select(const Target& target, const GroupedGemmDesc& in,
                                                const PlanPreference& pref) {
  const GroupedGemmDesc d = in.normalized();
  for (auto [nm, v] :
       {std::pair{"groups", d.groups}, std::pair{"rows", d.rows}, std::pair{"n", d.n}, std::pair{"k", d.k}}) {
    if (v < 0) return invalid(std::string(nm) + " expected >= 0, got " + str(v));
    if (v > INT32_MAX) return invalid(std::string(nm) + " expected <= 2^31-1, got " + str(v));
  }
  if (d.groups > 65535) return unsupported("groups expected <= 65535 (one scan per block), got " + str(d.groups));
  if (d.dtype != DType::f16 && d.dtype != DType::bf16)
    return unsupported("dtype expected float16 or bfloat16, got " + std::string(name(d.dtype)));
  if (d.k % 8 != 0) return unsupported("k expected a multiple of 8 (16-byte loads), got " + str(d.k));
  if (d.lda < d.k || d.lda % 8 != 0)
    return invalid("lda expected >= k and a multiple of 8, got " + str(d.lda) + " (k = " + str(d.k) + ")");
  if (d.ldw < d.k || d.ldw % 8 != 0)
    return invalid("ldw expected >= k and a multiple of 8, got " + str(d.ldw) + " (k = " + str(d.k) + ")");
  if (d.w_group % 8 != 0 || (d.groups > 1 && d.w_group < d.n * d.ldw))
    return invalid("w_group expected a multiple of 8 and >= n * ldw = " + str(d.n * d.ldw) + ", got " + str(d.w_group));
  if (d.n > int64_t{65535} * detail::kGroupedTileN)
    return unsupported("n expected <= " + str(int64_t{65535} * detail::kGroupedTileN) + " (grid y), got " + str(d.n));
  if (d.ldd < d.n) return invalid("ldd expected >= n, got " + str(d.ldd));
  int64_t sa, sw, sd;
  if (!span({{d.rows, d.lda}, {d.k, 1}}, &sa) || !span({{d.groups, d.w_group}, {d.n, d.ldw}, {d.k, 1}}, &sw) ||
      !span({{d.rows, d.ldd}, {d.n, 1}}, &sd) || sa > INT64_MAX / 2 || sw > INT64_MAX / 2 || sd > INT64_MAX / 2)
    return invalid("a footprint overflows 64 bits");
  if (pref.backend != Backend::Any && pref.backend != Backend::Native)
    return unsupported("backend expected any or native, got " + std::string(to_string(pref.backend)));
  if (pref.tf32 == Tristate::Require) return unsupported("tf32=Require applies to float32 GEMMs");
  if (pref.reduced_precision_reduction == Tristate::Require)
    return unsupported("reduced_precision_reduction=Require: the kernel accumulates in float32");
  if (pref.vectorized == Tristate::Forbid) return unsupported("vectorized=Forbid cannot be honoured");
  if (target.sm < 80) return unsupported("sm expected >= 80, got " + std::to_string(target.sm));
  GroupedGemmPlan p;
  p.desc_ = d;
  p.sku_.category = "gemm";
  p.sku_.op = kOp;
  p.sku_.dtypes = std::string(name(d.dtype)) + "->" + std::string(name(d.dtype));
  p.sku_.layout = "grouped 64x64 tiles (mma.m16n8k16, fragments from global, k-contiguous weights)";
  p.sku_.epilogue = "none";
  p.sku_.arch = target.sm >= 90 ? "sm_90a" : "sm_80";
  p.sku_.backend = Backend::Native;
  p.sku_.precision.math = DType::f32;
  p.sku_.precision.accumulator = DType::f32;
  p.sku_.precision.deterministic = true;
  p.sku_.precision.bit_stable = true;
  return p;
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
    for (int k = 0; k < want.rank; ++k)
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
  BARACUDA_TRY(check("D", a.d, d.dtype, {d.rows, d.n}, {d.ldd, 1}, static_cast<unsigned>(size_in_bytes(d.dtype))));
  const DType odt = a.offsets.dtype == DType::s32 ? DType::s32 : DType::s64;
  BARACUDA_TRY(check("offsets", a.offsets, odt, {d.groups + 1}, {1}, static_cast<unsigned>(size_in_bytes(odt))));
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

Result<void> GroupedGemmPlan::run(cudaStream_t stream, Workspace, const GroupedGemmArgs& a) const {
  BARACUDA_TRY(can_implement(a));
  const GroupedGemmDesc& d = desc_;
  detail::GroupedParams p;
  p.dt = d.dtype;
  p.groups = d.groups, p.rows = d.rows, p.n = d.n, p.k = d.k;
  p.a = a.a.data, p.lda = d.lda;
  p.w = a.w.data, p.ldw = d.ldw, p.w_group = d.w_group;
  p.offsets = a.offsets.data;
  p.offsets_i32 = a.offsets.dtype == DType::s32;
  p.d = a.d.data, p.ldd = d.ldd;
  const cudaError_t e = detail::launch_grouped(p, stream);
  if (e != cudaSuccess)
    return make_error(Status::CudaError, std::string(kOp) + ": kernel launch failed: " + cudaGetErrorString(e));
  return {};
}

}  // namespace baracuda
