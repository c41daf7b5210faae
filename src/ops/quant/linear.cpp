// QuantizedLinearPlan (W8A8): the dynamic per-token int8 quantizer of the activation into the
// plan's workspace, then GemmPlan's int8 x int8 product with per-row (token) and per-column
// (output channel) scales and the bias in its epilogue. Composition only: both halves are plans of
// their own, selected once here.
#include <algorithm>
#include <string>

#include "baracuda/ops/quant.hpp"
#include "core/plan_common.hpp"

namespace baracuda {
namespace {
using detail::invalid;
using detail::unsupported;

std::string dname(DType t) { return std::string(name(t)); }
std::string str(int64_t v) { return std::to_string(v); }
size_t round256(size_t b) { return (b + 255) / 256 * 256; }
const char* kLabel = "quantized_linear";

GemmDesc gemm_desc_of(const QuantizedLinearDesc& d) {
  // D[M, N] = A[M, K] * B[K, N], B = weight^T (weight stored [N, K] row-major: trans_b).
  GemmDesc g = GemmDesc::dense(DType::s8, d.dtype, d.m, d.n, d.k, false, true);
  g.scale_mode = GemmScaleMode::PerRowCol;
  g.bias = d.bias;
  return g;
}
}  // namespace

Result<QuantizedLinearPlan> QuantizedLinearPlan::select(const Target& target, const QuantizedLinearDesc& desc,
                                                        const PlanPreference& pref) {
  if (desc.direction == Direction::Backward)
    return unsupported(
        "quantized_linear_backward: quantized_linear is inference-only (no backward plan; training uses "
        "fake_quantize followed by a floating-point GEMM)");
  const DTypeSet allowed = info(QuantOp::quantized_linear).fw_dtypes;
  if (!contains(allowed, desc.dtype))
    return unsupported(std::string(kLabel) + ": dtype expected one of {" + detail::dtype_list(allowed) + "}, got " +
                       dname(desc.dtype));
  for (auto [nm, v] : {std::pair{"m", desc.m}, std::pair{"n", desc.n}, std::pair{"k", desc.k}})
    if (v < 0) return invalid(std::string(kLabel) + ": " + nm + " expected >= 0, got " + str(v));

  auto q =
      QuantPlan::select(target, QuantDesc::dynamic_per_token(desc.dtype, DType::s8, Shape::of({desc.m, desc.k})), pref);
  if (!q) return make_error(q.status(), std::string(kLabel) + ": activation quantizer: " + q.message());
  const GemmDesc gd = gemm_desc_of(desc);
  auto g = GemmPlan::select(target, gd, pref);
  if (!g)
    return make_error(g.status(), std::string(kLabel) +
                                      ": the int8 x int8 GEMM with per-row/per-column scales (GemmDesc{a=b=int8, d=" +
                                      dname(desc.dtype) + ", trans_b, scale_mode=PerRowCol" +
                                      (desc.bias ? ", bias" : "") + "}) is not available: " + g.message());

  QuantizedLinearPlan p;
  p.desc_ = desc;
  p.quant_ = std::make_shared<QuantPlan>(std::move(q.value()));
  p.gemm_ = std::make_shared<GemmPlan>(std::move(g.value()));
  p.xq_offset_ = 0;
  p.scale_offset_ = round256(static_cast<size_t>(desc.m) * static_cast<size_t>(desc.k));
  p.gemm_offset_ = p.scale_offset_ + round256(static_cast<size_t>(desc.m) * sizeof(float));
  p.workspace_bytes_ = p.gemm_offset_ + round256(p.gemm_->workspace_size());

  const KernelSku& gs = p.gemm_->sku();
  p.sku_.category = "quant";
  p.sku_.op = kLabel;
  p.sku_.dtypes = dname(desc.dtype) + ",int8->" + dname(desc.dtype);
  p.sku_.layout = "dynamic per-token int8 (" + p.quant_->sku().layout + ") + gemm " + gs.layout;
  p.sku_.epilogue = std::string("per-row x per-column scales") + (desc.bias ? " + bias" : "");
  p.sku_.arch = gs.arch;
  p.sku_.backend = gs.backend;
  p.sku_.precision = gs.precision;
  p.sku_.precision.note = "activation: scale = amax/127 per token, rint(x / scale); int8 products accumulate in " +
                          std::string(name(gs.precision.accumulator)) +
                          (gs.precision.note.empty() ? "" : "; gemm: " + gs.precision.note);
  return p;
}

Result<void> QuantizedLinearPlan::can_implement(const QuantizedLinearArgs& a) const {
  const std::string label = kLabel;
  const auto& d = desc_;
  auto check = [&](const char* role, const TensorRef& t, DType dt, int64_t r0, int64_t r1, int rank) -> Result<void> {
    if (!t.data && t.layout.rank == 0) return invalid(label + ": " + role + " is required but was not given");
    if (t.dtype != dt) return invalid(label + ": " + role + " dtype expected " + dname(dt) + ", got " + dname(t.dtype));
    const bool shape_ok = t.layout.rank == rank && t.layout.shape[0] == r0 && (rank == 1 || t.layout.shape[1] == r1);
    if (!shape_ok)
      return invalid(label + ": " + role + " shape expected [" + str(r0) + (rank == 2 ? ", " + str(r1) : "") +
                     "], got " + t.layout.shape_str());
    if (t.layout.numel() > 0 && !t.data)
      return invalid(label + ": " + role + " is null but has " + str(t.layout.numel()) + " elements");
    return {};
  };
  BARACUDA_TRY(check("x", a.x, d.dtype, d.m, d.k, 2));
  if (d.m > 1 && d.k > 1 && (a.x.layout.stride[1] != 1 || a.x.layout.stride[0] < d.k))
    return invalid(label + ": x expected rows of unit column stride and row stride >= k, got strides " +
                   a.x.layout.stride_str());
  BARACUDA_TRY(check("weight", a.weight, DType::s8, d.n, d.k, 2));
  if (a.weight.layout.numel() > 0 && !a.weight.layout.is_contiguous())
    return invalid(label + ": weight expected dense [n, k] (nn.Linear layout), got strides " +
                   a.weight.layout.stride_str());
  BARACUDA_TRY(check("w_scale", a.w_scale, DType::f32, d.n, 0, 1));
  if (a.w_scale.layout.numel() > 0 && !a.w_scale.layout.is_contiguous())
    return invalid(label + ": w_scale expected contiguous, got strides " + a.w_scale.layout.stride_str());
  if (d.bias) {
    BARACUDA_TRY(check("bias", a.bias, d.dtype, d.n, 0, 1));
  } else if (a.bias.data || a.bias.layout.rank != 0) {
    return invalid(label + ": bias given but desc.bias is false");
  }
  TensorRef y{a.y.data, a.y.dtype, a.y.layout};
  BARACUDA_TRY(check("y", y, d.dtype, d.m, d.n, 2));
  if (a.y.layout.numel() > 0 && !a.y.layout.is_contiguous())
    return invalid(label + ": y expected dense [m, n], got strides " + a.y.layout.stride_str());
  return {};
}

Result<void> QuantizedLinearPlan::run(cudaStream_t stream, Workspace ws, const QuantizedLinearArgs& a) const {
  BARACUDA_TRY(can_implement(a));
  if (ws.bytes < workspace_bytes_ || (workspace_bytes_ > 0 && !ws.ptr))
    return make_error(Status::WorkspaceTooSmall,
                      std::string(kLabel) + ": workspace expected >= " + str(static_cast<int64_t>(workspace_bytes_)) +
                          " bytes, got " + str(static_cast<int64_t>(ws.bytes)));
  const auto& d = desc_;
  char* base = static_cast<char*>(ws.ptr);
  void* xq = base + xq_offset_;
  void* xs = base + scale_offset_;
  QuantArgs qa;
  qa.x = a.x;
  qa.out = make_mut(xq, DType::s8, {d.m, d.k});
  qa.scale_out = make_mut(xs, DType::f32, {d.m});
  BARACUDA_TRY(quant_->run(stream, {}, qa));

  GemmArgs ga;
  ga.a = make_ref(xq, DType::s8, {d.m, d.k});
  // B is the logical [k, n] matrix: the [n, k] weight viewed transposed.
  ga.b = a.weight;
  ga.b.layout.shape[0] = d.k, ga.b.layout.shape[1] = d.n;
  ga.b.layout.stride[0] = 1, ga.b.layout.stride[1] = d.k;
  ga.d = a.y;
  if (d.bias) ga.bias = a.bias;
  ga.a_scale = make_ref(xs, DType::f32, {d.m});
  ga.b_scale = a.w_scale;
  const Workspace gws{base + gemm_offset_, ws.bytes - gemm_offset_};
  auto r = gemm_->run(stream, gws, ga);
  if (!r) return make_error(r.status(), std::string(kLabel) + ": " + r.message());
  return {};
}

// ---- convenience ---------------------------------------------------------------------------------
namespace {
std::string desc_key(const QuantizedLinearDesc& d) {
  std::string k;
  auto put = [&](const auto& v) { k.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  put(d.dtype), put(d.m), put(d.n), put(d.k), put(d.bias), put(d.direction);
  return k;
}
Result<const QuantizedLinearPlan*> cached(const QuantizedLinearDesc& desc, const PlanPreference& pref) {
  return detail::cached_plan<QuantizedLinearPlan>(
      desc_key(desc), pref, [&](const Target& t) { return QuantizedLinearPlan::select(t, desc, pref); });
}
}  // namespace

Result<void> quantized_linear(cudaStream_t stream, const QuantizedLinearDesc& desc, const QuantizedLinearArgs& args,
                              Workspace ws, const PlanPreference& pref) {
  auto plan = cached(desc, pref);
  if (!plan) return plan.error();
  return (*plan)->run(stream, ws, args);
}

Result<size_t> quantized_linear_workspace_size(const QuantizedLinearDesc& desc, const PlanPreference& pref) {
  auto plan = cached(desc, pref);
  if (!plan) return plan.error();
  return (*plan)->workspace_size();
}

}  // namespace baracuda
