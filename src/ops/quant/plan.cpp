// QuantPlan: descriptor validation, scale geometry, argument checks and the launch sequences of the
// quantization family (kernels: quant_kernel.cuh). QuantizedLinearPlan: linear.cpp.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "baracuda/ops/quant.hpp"
#include "core/impl_list.hpp"
#include "core/operands.hpp"
#include "core/plan_common.hpp"
#include "ops/quant/quant_launch.hpp"

namespace baracuda {

// ---- the table -------------------------------------------------------------------------------------
namespace {
const QuantOpInfo kOps[] = {
#define BARACUDA_QUANT(name, engine, fw, bw, q, gran, torch) \
  {QuantOp::name, #name, QuantEngine::engine, DTypeSet(fw), DTypeSet(bw), DTypeSet(q), gran, torch},
#include "baracuda/ops/quant_ops.def"
#undef BARACUDA_QUANT
};

using detail::dtype_list;
using detail::invalid;
using detail::unsupported;

std::string dname(DType t) { return std::string(name(t)); }
std::string str(int64_t v) { return std::to_string(v); }
std::string op_label(const QuantDesc& d) {
  return std::string(info(d.op).name) + (d.direction == Direction::Backward ? "_backward" : "");
}
bool is_fp8(DType t) { return t == DType::f8e4m3 || t == DType::f8e5m2; }
const char* gran_word(QuantGranularity g) {
  switch (g) {
    case QuantGranularity::per_tensor:
      return "tensor";
    case QuantGranularity::per_channel:
      return "channel";
    case QuantGranularity::per_token:
      return "token";
    case QuantGranularity::per_group:
      return "group";
  }
  return "?";
}
/// Packed dtypes hold 2 elements a byte along the last dim: q's shape halves it.
Shape q_shape_of(const QuantDesc& d) {
  Shape s = d.shape;
  if (is_packed(d.q_dtype) && s.rank > 0) s.dims[s.rank - 1] /= 2;
  return s;
}
}  // namespace

std::span<const QuantOpInfo> quant_ops() { return kOps; }
const QuantOpInfo& info(QuantOp op) { return kOps[static_cast<int>(op)]; }
std::optional<QuantOp> quant_op_from_name(std::string_view n) {
  for (const auto& r : kOps)
    if (n == r.name) return r.op;
  return std::nullopt;
}
bool QuantOpInfo::takes(QuantGranularity g) const { return std::strstr(granularities, gran_word(g)) != nullptr; }
const char* to_string(QuantGranularity g) {
  switch (g) {
    case QuantGranularity::per_tensor:
      return "per_tensor";
    case QuantGranularity::per_channel:
      return "per_channel";
    case QuantGranularity::per_token:
      return "per_token";
    case QuantGranularity::per_group:
      return "per_group";
  }
  return "?";
}

int64_t quant_min_of(DType q) {
  switch (q) {
    case DType::s8:
      return -128;
    case DType::u8:
    case DType::u4:
      return 0;
    case DType::s4:
      return -8;
    case DType::f8e4m3:
      return -448;
    case DType::f8e5m2:
      return -57344;
    default:
      return INT32_MIN;
  }
}
int64_t quant_max_of(DType q) {
  switch (q) {
    case DType::s8:
      return 127;
    case DType::u8:
      return 255;
    case DType::s4:
      return 7;
    case DType::u4:
      return 15;
    case DType::f8e4m3:
      return 448;
    case DType::f8e5m2:
      return 57344;
    default:
      return INT32_MAX;
  }
}

// ---- descriptors ------------------------------------------------------------------------------------
namespace {
QuantDesc base_desc(QuantOp op, DType dt, DType q, const Shape& shape, QuantGranularity g, bool symmetric,
                    Direction dir) {
  QuantDesc d;
  d.op = op;
  d.direction = dir;
  d.dtype = dt;
  d.q_dtype = q;
  d.shape = shape;
  d.granularity = g;
  d.q_min = quant_min_of(q);
  d.q_max = quant_max_of(q);
  // fp8 has no zero point; learnable zero points are float parameters.
  d.zero_point_kind = (symmetric || is_fp8(q))                 ? QuantZeroPoint::none
                      : op == QuantOp::fake_quantize_learnable ? QuantZeroPoint::float32
                                                               : QuantZeroPoint::int32;
  d.scale_on_device = g != QuantGranularity::per_tensor;
  return d;
}
}  // namespace

QuantDesc QuantDesc::per_tensor(QuantOp op, DType dt, DType q, const Shape& shape, double scale, int64_t zero_point,
                                Direction dir) {
  QuantDesc d = base_desc(op, dt, q, shape, QuantGranularity::per_tensor, false, dir);
  d.scale = scale;
  d.zero_point = zero_point;
  if (op == QuantOp::fake_quantize_learnable) d.scale_on_device = true;
  return d;
}
QuantDesc QuantDesc::per_channel(QuantOp op, DType dt, DType q, const Shape& shape, int axis, bool symmetric,
                                 Direction dir) {
  QuantDesc d = base_desc(op, dt, q, shape, QuantGranularity::per_channel, symmetric, dir);
  d.axis = axis;
  return d;
}
QuantDesc QuantDesc::per_token(QuantOp op, DType dt, DType q, const Shape& shape, bool symmetric, Direction dir) {
  QuantDesc d = base_desc(op, dt, q, shape, QuantGranularity::per_token, symmetric, dir);
  d.axis = -1;
  return d;
}
QuantDesc QuantDesc::per_group(QuantOp op, DType dt, DType q, const Shape& shape, int axis, int64_t group_size,
                               bool symmetric, Direction dir) {
  QuantDesc d = base_desc(op, dt, q, shape, QuantGranularity::per_group, symmetric, dir);
  d.axis = axis;
  d.group_size = group_size;
  return d;
}
QuantDesc QuantDesc::dynamic_per_token(DType dt, DType q, const Shape& shape, bool asymmetric, Direction dir) {
  return base_desc(QuantOp::dynamic_quantize, dt, q, shape, QuantGranularity::per_token, !asymmetric, dir);
}
QuantDesc QuantDesc::dynamic_per_group(DType dt, DType q, const Shape& shape, int64_t group_size, bool asymmetric,
                                       Direction dir) {
  QuantDesc d = base_desc(QuantOp::dynamic_quantize, dt, q, shape, QuantGranularity::per_group, !asymmetric, dir);
  d.axis = -1;
  d.group_size = group_size;
  return d;
}
QuantDesc QuantDesc::dynamic_per_tensor(DType dt, DType q, const Shape& shape, int64_t history_len) {
  QuantDesc d =
      base_desc(QuantOp::dynamic_quantize, dt, q, shape, QuantGranularity::per_tensor, true, Direction::Forward);
  d.scale_on_device = true;
  d.delayed = history_len > 0;
  d.history_len = history_len;
  return d;
}

// ---- select -------------------------------------------------------------------------------------------
namespace {
const char* linear_plan_of(QuantOp op) {
  return op == QuantOp::w4a16_linear ? "W4A16LinearPlan" : "QuantizedLinearPlan";
}

/// dynamic per-token / per-group forward: the rows kernel (one read of x per row or group).
bool rows_step(const QuantDesc& d) {
  return d.op == QuantOp::dynamic_quantize && d.direction == Direction::Forward &&
         (d.granularity == QuantGranularity::per_token || d.granularity == QuantGranularity::per_group);
}

bool host_scaled(const QuantDesc& d) {
  return info(d.op).engine == QuantEngine::affine && d.granularity == QuantGranularity::per_tensor &&
         !d.scale_on_device;
}

Result<void> check_desc(const QuantDesc& d) {
  const auto& in = info(d.op);
  const std::string label = op_label(d);
  const bool bw = d.direction == Direction::Backward;
  if (in.engine == QuantEngine::linear)
    return invalid(label + ": " + in.name + " is served by " + linear_plan_of(d.op) + ", not QuantPlan");
  BARACUDA_TRY(detail::check_shape(label, "input", d.shape));
  if (!in.takes(d.granularity))
    return unsupported(label + ": granularity expected one of {" + in.granularities + "}, got " +
                       to_string(d.granularity));
  const int r = d.shape.rank;
  if (d.granularity == QuantGranularity::per_channel || d.granularity == QuantGranularity::per_group) {
    if (r == 0) return invalid(label + ": " + to_string(d.granularity) + " needs an input of rank >= 1, got rank 0");
    if (d.axis < -r || d.axis >= r)
      return invalid(label + ": axis expected in [" + str(-r) + ", " + str(r) + ") for a rank-" + str(r) +
                     " input, got " + str(d.axis));
  }
  if (d.granularity == QuantGranularity::per_token && r == 0)
    return invalid(label + ": per_token needs an input of rank >= 1 (rows of the last dim), got rank 0");
  if (d.granularity == QuantGranularity::per_group) {
    const int a = d.axis < 0 ? d.axis + r : d.axis;
    if (d.group_size < 1) return invalid(label + ": group_size expected >= 1, got " + str(d.group_size));
    if (d.shape.dims[a] % d.group_size != 0)
      return invalid(label + ": per_group needs shape[axis]=" + str(d.shape.dims[a]) + " (axis " + str(a) +
                     ") to be a multiple of group_size=" + str(d.group_size));
  }
  if (is_packed(d.q_dtype) && (r == 0 || d.shape.dims[r - 1] % 2 != 0))
    return invalid(label + ": " + dname(d.q_dtype) +
                   " packs two elements per byte along the last dim: shape[-1] expected even, got " +
                   (r == 0 ? std::string("a rank-0 input") : str(d.shape.dims[r - 1])));
  // The integer range.
  if (!is_fp8(d.q_dtype)) {
    const int64_t lo = quant_min_of(d.q_dtype), hi = quant_max_of(d.q_dtype);
    if (d.q_max < d.q_min)
      return invalid(label + ": q_max expected >= q_min, got q_min=" + str(d.q_min) + " q_max=" + str(d.q_max));
    if (d.q_min < lo || d.q_max > hi)
      return invalid(label + ": [q_min, q_max] expected within " + dname(d.q_dtype) + "'s range [" + str(lo) + ", " +
                     str(hi) + "], got [" + str(d.q_min) + ", " + str(d.q_max) + "]");
  }
  // Zero points.
  const bool fake = d.op == QuantOp::fake_quantize || d.op == QuantOp::fake_quantize_learnable;
  if (is_fp8(d.q_dtype) && d.zero_point_kind != QuantZeroPoint::none)
    return invalid(label + ": " + dname(d.q_dtype) + " takes no zero point (expected zero_point_kind=none)");
  if (d.op == QuantOp::fake_quantize_learnable && d.zero_point_kind != QuantZeroPoint::float32)
    return invalid(label + ": the learnable zero point is a float32 tensor (expected zero_point_kind=float32)");
  if (d.zero_point_kind == QuantZeroPoint::float32 &&
      !(fake && (d.op == QuantOp::fake_quantize_learnable || d.granularity != QuantGranularity::per_tensor)))
    return invalid(label +
                   ": float32 zero points are taken by fake_quantize per_channel/per_group and "
                   "fake_quantize_learnable only (expected zero_point_kind none or int32)");
  if (host_scaled(d)) {
    if (!(d.scale >= FLT_MIN && d.scale <= FLT_MAX))
      return invalid(label + ": scale expected finite and >= " + std::to_string(FLT_MIN) +
                     " (a positive normal float32: torch computes in float32), got " + std::to_string(d.scale));
    if (d.zero_point_kind == QuantZeroPoint::none && d.zero_point != 0)
      return invalid(label + ": zero_point expected 0 for a symmetric descriptor, got " + str(d.zero_point));
    if (d.zero_point_kind != QuantZeroPoint::none && (d.zero_point < d.q_min || d.zero_point > d.q_max))
      return invalid(label + ": zero_point expected in [q_min, q_max] = [" + str(d.q_min) + ", " + str(d.q_max) +
                     "], got " + str(d.zero_point));
  }
  if (d.op == QuantOp::fake_quantize_learnable) {
    if (!d.scale_on_device)
      return invalid(label + ": the learnable scale and zero point are device tensors (expected scale_on_device)");
    if (bw && (d.q_min > 0 || d.q_max < 0))
      return invalid(label + ": the learnable backward needs q_min <= 0 <= q_max (torch's check), got [" +
                     str(d.q_min) + ", " + str(d.q_max) + "]");
    if (!std::isfinite(d.grad_factor))
      return invalid(label + ": grad_factor expected finite, got " + std::to_string(d.grad_factor));
  }
  if (in.engine == QuantEngine::dynamic) {
    const bool asym = d.zero_point_kind != QuantZeroPoint::none;
    if (asym && d.granularity == QuantGranularity::per_tensor)
      return invalid(label +
                     ": asymmetric dynamic quantization is per_token or per_group (expected zero_point_kind=none "
                     "for per_tensor)");
    if (asym && d.q_max <= d.q_min)
      return invalid(label + ": asymmetric dynamic quantization divides max - min by q_max - q_min: expected " +
                     "q_max > q_min, got [" + str(d.q_min) + ", " + str(d.q_max) + "]");
    if (!asym && !is_fp8(d.q_dtype) && d.q_min >= 0)
      return invalid(label + ": symmetric dynamic quantization to " + dname(d.q_dtype) +
                     " would clamp every negative value to q_min=" + str(d.q_min) +
                     " (expected a signed q_dtype, or zero_point_kind=int32: asymmetric)");
    if (!asym && !is_fp8(d.q_dtype) && d.q_max <= 0)
      return invalid(label + ": dynamic quantization divides amax by q_max: expected q_max > 0, got " + str(d.q_max));
    if (d.granularity == QuantGranularity::per_group) {
      if ((d.axis < 0 ? d.axis + r : d.axis) != r - 1)
        return invalid(label + ": dynamic per_group quantizes groups along the last dim: axis expected -1 (or " +
                       str(r - 1) + "), got " + str(d.axis));
      if (is_packed(d.q_dtype) && d.group_size % 2 != 0)
        return invalid(label + ": " + dname(d.q_dtype) + " groups must fill whole bytes (two codes a byte): " +
                       "group_size expected even, got " + str(d.group_size));
    }
    if (bw && d.delayed)
      return invalid(label + ": the backward reads the forward's scale (delayed scaling applies to the forward only)");
    if (d.delayed && d.granularity != QuantGranularity::per_tensor)
      return invalid(label + ": delayed scaling is per-tensor (expected granularity per_tensor)");
    if (d.delayed && d.history_len < 1)
      return invalid(label + ": delayed scaling needs history_len >= 1, got " + str(d.history_len));
  }
  if (!d.delayed && d.history_len != 0)
    return invalid(label + ": history_len expected 0 without delayed scaling, got " + str(d.history_len));
  if (d.delayed && in.engine != QuantEngine::dynamic)
    return invalid(label + ": delayed scaling belongs to dynamic_quantize");
  if (d.record_amax && (bw || (d.op != QuantOp::quantize && in.engine != QuantEngine::dynamic)))
    return invalid(label + ": record_amax applies to the forward of quantize and dynamic_quantize");
  return {};
}

Result<void> native_accepts(const Target& target, const QuantDesc& d, const PlanPreference& pref) {
  const std::string label = op_label(d);
  if (pref.backend != Backend::Any && pref.backend != Backend::Native)
    return unsupported(label + ": preference backend=" + to_string(pref.backend) +
                       " cannot be honoured (quantization has only the native backend)");
  if (pref.tf32 == Tristate::Require)
    return unsupported(label + ": preference tf32=Require cannot be honoured (no TF32 mode in quantization)");
  if (pref.reduced_precision_reduction == Tristate::Require)
    return unsupported(label +
                       ": preference reduced_precision_reduction=Require cannot be honoured (sums accumulate in "
                       "float32)");
  if (target.sm < 80) return unsupported(label + ": target sm_" + str(target.sm) + " is below the minimum sm_80");
  return {};
}

/// The op's declared dtypes (quant_ops.def), checked before the descriptor's combinations so an
/// undeclared dtype is reported as such.
Result<void> check_dtypes(const QuantDesc& d) {
  const auto& in = info(d.op);
  const std::string label = op_label(d);
  const bool bw = d.direction == Direction::Backward;
  if (bw && in.bw_dtypes == 0)
    return unsupported(label + ": " + in.name +
                       " has no backward (it is not differentiable; training uses "
                       "fake_quantize)");
  const DTypeSet allowed = bw ? in.bw_dtypes : in.fw_dtypes;
  if (!contains(allowed, d.dtype))
    return unsupported(label + ": dtype expected one of {" + dtype_list(allowed) + "}, got " + dname(d.dtype));
  if (!contains(in.q_dtypes, d.q_dtype))
    return unsupported(label + ": q_dtype expected one of {" + dtype_list(in.q_dtypes) + "}, got " + dname(d.q_dtype));
  return {};
}

struct QuantImpl {
  const char* name;
  Result<void> (*accepts)(const Target&, const QuantDesc&, const PlanPreference&);
};
constexpr QuantImpl kQuantImpls[] = {{"native", native_accepts}};

constexpr int64_t kLearnRowsPerSplit = 8192;  ///< elements a CTA reduces (rows mapping)
constexpr int64_t kLearnColsPerSplit = 256;   ///< elements a thread reduces (columns mapping)
constexpr int64_t kLearnWarpPerSplit = 4096;  ///< elements a warp reduces (per-group warps mapping)
constexpr int64_t kLearnMaxSplits = 1024;

QuantPlan::Geometry geometry_of(const QuantDesc& d) {
  QuantPlan::Geometry g;
  const int r = d.shape.rank;
  const int64_t numel = d.shape.numel();
  auto prod = [&](int lo, int hi) {
    int64_t p = 1;
    for (int i = lo; i < hi; ++i) p *= d.shape.dims[i];
    return p;
  };
  switch (d.granularity) {
    case QuantGranularity::per_tensor:
      g.inner = numel;
      break;
    case QuantGranularity::per_channel: {
      const int a = d.axis < 0 ? d.axis + r : d.axis;
      g.outer = prod(0, a), g.axis_len = d.shape.dims[a], g.inner = prod(a + 1, r);
      g.s_axis = 1;
      g.num_scales = g.axis_len;
      break;
    }
    case QuantGranularity::per_token:
      g.outer = prod(0, r - 1), g.axis_len = d.shape.dims[r - 1], g.inner = 1;
      g.group = std::max<int64_t>(g.axis_len, 1);
      g.s_outer = 1;
      g.num_scales = g.outer;
      break;
    case QuantGranularity::per_group: {
      const int a = d.axis < 0 ? d.axis + r : d.axis;
      g.outer = prod(0, a), g.axis_len = d.shape.dims[a], g.inner = prod(a + 1, r);
      g.group = d.group_size;
      g.s_axis = g.inner;
      g.s_outer = g.axis_len / g.group * g.inner;
      g.s_inner = 1;
      g.num_scales = g.outer * (g.axis_len / g.group) * g.inner;
      break;
    }
  }
  if (d.op == QuantOp::fake_quantize_learnable && d.direction == Direction::Backward) {
    int64_t per = kLearnRowsPerSplit, len = g.outer * g.inner;
    if (d.granularity == QuantGranularity::per_group) {
      // Each group's G elements lie I apart: with 32 or more groups side by side (I >= 32) a thread per
      // group reads adjacent addresses across the warp; otherwise a warp reads a group's elements.
      len = g.group;
      g.columns = g.inner >= 32;
      g.warps = !g.columns;
      per = g.columns ? kLearnColsPerSplit : kLearnWarpPerSplit;
    } else {
      const int64_t channels = d.granularity == QuantGranularity::per_tensor ? 1 : g.axis_len;
      g.columns = channels >= 32 && g.inner < 32;
      if (g.columns) per = kLearnColsPerSplit;
    }
    g.splits = std::clamp<int64_t>((len + per - 1) / per, 1, kLearnMaxSplits);
  }
  return g;
}

size_t round256(size_t b) { return (b + 255) / 256 * 256; }

/// The (scale, zero point) pairs the learnable backward sums into: 1, one per channel, one per group.
int64_t learn_channels(const QuantDesc& d, const QuantPlan::Geometry& g) {
  switch (d.granularity) {
    case QuantGranularity::per_tensor:
      return 1;
    case QuantGranularity::per_group:
      return g.num_scales;
    default:
      return g.axis_len;
  }
}
}  // namespace

Result<QuantPlan> QuantPlan::select(const Target& target, const QuantDesc& desc, const PlanPreference& pref) {
  if (static_cast<size_t>(desc.op) >= std::size(kOps))
    return invalid("quant: op id " + str(static_cast<int>(desc.op)) + " is out of range");
  if (info(desc.op).engine == QuantEngine::linear)
    return invalid(std::string(info(desc.op).name) + ": served by " + linear_plan_of(desc.op) + ", not QuantPlan");
  BARACUDA_TRY(check_dtypes(desc));
  BARACUDA_TRY(check_desc(desc));
  const std::string label = op_label(desc);
  auto impl = detail::first_accepting<QuantImpl>(label, kQuantImpls, target, desc, pref);
  if (!impl) return impl.error();

  QuantPlan p;
  p.desc_ = desc;
  p.allow_vectorized_ = pref.vectorized != Tristate::Forbid;
  p.geo_ = geometry_of(desc);
  const bool bw = desc.direction == Direction::Backward;
  const auto engine = info(desc.op).engine;

  // Workspace: amax partials (one float per CTA of the elementwise or amax kernel), or the
  // learnable backward's (dscale, dzero_point) partials per (channel, split).
  if ((desc.op == QuantOp::quantize && !bw && desc.record_amax) ||
      (engine == QuantEngine::dynamic && !bw && desc.granularity == QuantGranularity::per_tensor))
    p.workspace_bytes_ = round256(sizeof(float) * static_cast<size_t>(detail::kQuantMaxGrid));
  if (desc.op == QuantOp::fake_quantize_learnable && bw)
    p.workspace_bytes_ =
        round256(sizeof(float) * 2 * static_cast<size_t>(learn_channels(desc, p.geo_) * p.geo_.splits));

  KernelSku& s = p.sku_;
  s.category = "quant";
  s.op = label;
  const bool q_in = desc.op == QuantOp::dequantize && !bw;
  const bool q_out = (desc.op == QuantOp::quantize || engine == QuantEngine::dynamic) && !bw;
  s.dtypes = q_in ? dname(desc.q_dtype) + "->" + dname(desc.dtype)
                  : dname(desc.dtype) + "->" + (q_out ? dname(desc.q_dtype) : dname(desc.dtype));
  if (bw && (desc.op == QuantOp::quantize || desc.op == QuantOp::dequantize ||
             desc.op == QuantOp::dynamic_quantize))  // the q dtype sets the STE bounds
    s.dtypes = dname(desc.dtype) + "," + dname(desc.q_dtype) + "->" + dname(desc.dtype);
  s.arch = target.sm >= 90 ? "sm_90a" : "sm_80";
  s.backend = Backend::Native;
  std::string gran = to_string(desc.granularity);
  if (desc.granularity == QuantGranularity::per_channel || desc.granularity == QuantGranularity::per_group)
    gran += "(axis=" + str(desc.axis < 0 ? desc.axis + desc.shape.rank : desc.axis) +
            (desc.granularity == QuantGranularity::per_group ? ", group=" + str(desc.group_size) : "") + ")";
  if (engine == QuantEngine::dynamic)
    gran = std::string("dynamic-") + gran + (desc.delayed ? "(delayed, history=" + str(desc.history_len) + ")" : "");
  s.layout = gran + (p.allow_vectorized_ ? "" : " (vectorization forbidden)");
  s.epilogue = desc.zero_point_kind == QuantZeroPoint::none      ? "symmetric"
               : desc.zero_point_kind == QuantZeroPoint::float32 ? "float zero point"
                                                                 : "int32 zero point";
  PrecisionGuarantee& g = s.precision;
  g.deterministic = true;
  g.bit_stable = true;
  g.accumulator = DType::f32;
  g.math = desc.dtype == DType::f64 ? DType::f64 : DType::f32;
  const bool fp8 = is_fp8(desc.q_dtype);
  switch (desc.op) {
    case QuantOp::quantize:
      g.math = DType::f32;
      g.note =
          bw ? (fp8 ? "STE: dy * 1[|x / scale| <= fp8 max]" : "STE: dy * 1[q_min <= rint(x / scale) + zp <= q_max]")
             : (fp8 ? "fp8_rn(clamp(float(x) / scale, -max, max)), saturating"
                    : "torch quantize: clamp(rint(double(float(x)) / scale) + zp) (float fast path away from ties)");
      break;
    case QuantOp::dequantize:
      g.note = bw ? "dq = dy * scale" : (fp8 ? "float(q) * scale" : "(float(q) - zp) * double(scale), rounded to f32");
      break;
    case QuantOp::fake_quantize:
    case QuantOp::fake_quantize_learnable:
      g.note = desc.granularity == QuantGranularity::per_tensor
                   ? "torch fake_quantize_per_tensor_affine: rint(x * inv_scale) + zp, float math"
                   : (desc.zero_point_kind == QuantZeroPoint::float32
                          ? "torch fake_quantize_per_channel_affine, float zp: llrint(fma(x, inv_scale, zp))"
                          : "torch fake_quantize_per_channel_affine, int zp: int64(rint(x * inv_scale)) + zp");
      if (bw) g.note = "STE: dy * mask";
      if (bw && desc.op == QuantOp::fake_quantize_learnable)
        g.note = "LSQ gradients, f32; dscale/dzero_point: fixed partition (" + str(p.geo_.splits) +
                 " splits) + fixed-order sum";
      break;
    case QuantOp::dynamic_quantize:
      g.math = DType::f32;
      if (bw)
        g.note = fp8 ? "STE: dy * 1[|x / scale| <= fp8 max]" : "STE: dy * 1[q_min <= rint(x / scale) + zp <= q_max]";
      else if (desc.zero_point_kind != QuantZeroPoint::none)
        g.note = "torch.ao choose_qparams_per_token_asymmetric on [" + str(desc.q_min) + ", " + str(desc.q_max) +
                 "] in the input's precision + quantize_per_token's codes (double near ties)";
      else
        g.note = "scale = amax / " +
                 (fp8 ? std::string(desc.q_dtype == DType::f8e4m3 ? "448" : "57344") : str(desc.q_max)) +
                 " (1 when amax is 0 or not finite)" + (desc.delayed ? ", from the amax history (max)" : "");
      break;
    case QuantOp::quantized_linear:
    case QuantOp::w4a16_linear:
      break;
  }
  return p;
}

// ---- argument checks -------------------------------------------------------------------------------
namespace {
using detail::given;

struct Operand {
  const char* role;
  const void* data;
  DType dtype;
  const Layout* layout;
  bool output;
  bool fp;  ///< floating side (x-shaped, any strides)
};

/// Roles of one call: what it reads and writes (see the table in quant.hpp).
struct Roles {
  bool x = false, q = false, dy = false, scale = false, zero_point = false;
  bool out_q = false, out_fp = false, mask = false, scale_out = false, zero_point_out = false, amax_out = false;
  bool history = false;
  bool dscale = false;
};

Roles roles_of(const QuantDesc& d) {
  Roles r;
  const bool bw = d.direction == Direction::Backward;
  const bool device_scale = d.granularity != QuantGranularity::per_tensor || d.scale_on_device;
  const bool zp = d.zero_point_kind != QuantZeroPoint::none;
  switch (d.op) {
    case QuantOp::quantize:
      r.x = true;
      r.dy = bw;
      (bw ? r.out_fp : r.out_q) = true;
      r.amax_out = !bw && d.record_amax;
      break;
    case QuantOp::dequantize:
      r.q = !bw;
      r.dy = bw;
      r.out_fp = true;
      break;
    case QuantOp::fake_quantize:
    case QuantOp::fake_quantize_learnable:
      r.x = true;
      r.dy = bw;
      r.out_fp = true;
      r.mask = !bw;
      r.dscale = bw && d.op == QuantOp::fake_quantize_learnable;
      break;
    case QuantOp::dynamic_quantize:
      r.x = true;
      if (bw) {  // quantize's STE with the forward's scale and zero point
        r.dy = r.out_fp = r.scale = true;
        r.zero_point = zp;
        return r;
      }
      r.out_q = true;
      r.scale_out = true;
      r.zero_point_out = zp;
      r.amax_out = d.granularity == QuantGranularity::per_tensor;
      r.history = d.delayed;
      return r;
    case QuantOp::quantized_linear:
    case QuantOp::w4a16_linear:
      return r;
  }
  r.scale = device_scale;
  r.zero_point = device_scale && zp && !(d.op == QuantOp::dequantize && bw);
  return r;
}
}  // namespace

Result<void> QuantPlan::can_implement(const QuantArgs& a) const {
  const std::string label = op_label(desc_);
  const Roles r = roles_of(desc_);
  const int64_t numel = desc_.shape.numel();
  auto must_not = [&](bool present, const char* role) -> Result<void> {
    if (present) return invalid(label + ": " + role + " given but this op/direction/descriptor does not use it");
    return {};
  };
  BARACUDA_TRY(must_not(given(a.x) && !r.x, "x"));
  BARACUDA_TRY(must_not(given(a.q) && !r.q, "q"));
  BARACUDA_TRY(must_not(given(a.dy) && !r.dy, "dy"));
  BARACUDA_TRY(must_not(given(a.scale) && !r.scale, "scale (a host per-tensor scale lives in the descriptor)"));
  BARACUDA_TRY(must_not(given(a.zero_point) && !r.zero_point, "zero_point"));
  BARACUDA_TRY(must_not(given(a.mask) && !r.mask, "mask"));
  BARACUDA_TRY(must_not(given(a.scale_out) && !r.scale_out, "scale_out"));
  BARACUDA_TRY(must_not(given(a.zero_point_out) && !r.zero_point_out, "zero_point_out"));
  BARACUDA_TRY(must_not(given(a.amax_out) && !r.amax_out, "amax_out"));
  BARACUDA_TRY(must_not(given(a.amax_history) && !r.history, "amax_history"));
  BARACUDA_TRY(must_not(given(a.dscale) && !r.dscale, "dscale"));
  BARACUDA_TRY(must_not(given(a.dzero_point) && !r.dscale, "dzero_point"));

  enum class Kind { Fp, Q, Scale, Zp, Vec };
  struct Want {
    Operand op;
    DType dtype;
    Kind kind;
    bool required;
    int64_t count;  ///< Scale/Zp/Vec: element count
  };
  std::vector<Want> want;
  auto ref = [&](const char* role, const TensorRef& t, DType dt, Kind k, bool req, int64_t count = 0) {
    want.push_back({{role, t.data, t.dtype, &t.layout, false, k == Kind::Fp}, dt, k, req, count});
  };
  auto mut = [&](const char* role, const TensorMut& t, DType dt, Kind k, bool req, int64_t count = 0) {
    want.push_back({{role, t.data, t.dtype, &t.layout, true, k == Kind::Fp}, dt, k, req, count});
  };
  const DType zdt = desc_.zero_point_kind == QuantZeroPoint::float32 ? DType::f32 : DType::s32;
  const int64_t ns = geo_.num_scales;
  if (r.dy) ref("dy", a.dy, desc_.dtype, Kind::Fp, true);
  if (r.x) ref("x", a.x, desc_.dtype, Kind::Fp, true);
  if (r.q) ref("q", a.q, desc_.q_dtype, Kind::Q, true);
  if (r.scale) ref("scale", a.scale, DType::f32, Kind::Scale, true, ns);
  if (r.zero_point) ref("zero_point", a.zero_point, zdt, Kind::Zp, true, ns);
  if (r.out_q) mut("out", a.out, desc_.q_dtype, Kind::Q, true);
  if (r.out_fp) mut("out", a.out, desc_.dtype, Kind::Fp, true);
  if (r.mask) mut("mask", a.mask, DType::b8, Kind::Fp, false);
  if (r.scale_out)
    mut("scale_out", a.scale_out, DType::f32, Kind::Vec, true,
        desc_.granularity == QuantGranularity::per_tensor ? 1 : geo_.num_scales);
  if (r.zero_point_out) mut("zero_point_out", a.zero_point_out, DType::s32, Kind::Vec, true, geo_.num_scales);
  if (r.amax_out) mut("amax_out", a.amax_out, DType::f32, Kind::Vec, desc_.op == QuantOp::quantize, 1);
  if (r.history) mut("amax_history", a.amax_history, DType::f32, Kind::Vec, true, desc_.history_len);
  if (r.dscale) {
    mut("dscale", a.dscale, DType::f32, Kind::Vec, false, ns);
    mut("dzero_point", a.dzero_point, DType::f32, Kind::Vec, false, ns);
  }

  const Shape qshape = q_shape_of(desc_);
  std::vector<detail::Operand> ops;  // the tensors given, for the memory checks
  for (size_t k = 0; k < want.size(); ++k) {
    const Want& w = want[k];
    const Operand& o = w.op;
    const bool present = o.data != nullptr || o.layout->rank != 0;
    if (!present) {
      const bool needed = w.required && (w.kind == Kind::Scale || w.kind == Kind::Zp || w.kind == Kind::Vec
                                             ? w.count > 0 && (numel > 0 || w.kind == Kind::Vec)
                                             : numel > 0);
      if (needed) return invalid(label + ": " + o.role + " is required but was not given");
      continue;
    }
    if (o.dtype != w.dtype)
      return invalid(label + ": " + o.role + " dtype expected " + dname(w.dtype) + ", got " + dname(o.dtype));
    const Layout& l = *o.layout;
    switch (w.kind) {
      case Kind::Fp:
        if (!(Shape::of(l) == desc_.shape))
          return invalid(label + ": " + o.role + " shape expected " + desc_.shape.str() + ", got " + l.shape_str());
        break;
      case Kind::Q:
        if (!(Shape::of(l) == qshape))
          return invalid(label + ": " + o.role + " shape expected " + qshape.str() +
                         (is_packed(desc_.q_dtype) ? " (the last dim halved: two int4 a byte)" : "") + ", got " +
                         l.shape_str());
        if (l.numel() > 0 && !l.is_contiguous())
          return invalid(label + ": " + o.role + " (the quantized tensor) expected dense row-major, got strides " +
                         l.stride_str() + " for shape " + l.shape_str());
        break;
      case Kind::Scale:
      case Kind::Zp:
      case Kind::Vec:
        if (l.numel() != w.count)
          return invalid(label + ": " + o.role + " expected " + str(w.count) + " elements" +
                         (w.kind == Kind::Vec ? "" : std::string(" (one per ") + gran_word(desc_.granularity) + ")") +
                         ", got " + str(l.numel()) + " (shape " + l.shape_str() + ")");
        if (l.numel() > 0 && !l.is_contiguous())
          return invalid(label + ": " + o.role + " expected a contiguous tensor, got strides " + l.stride_str() +
                         " for shape " + l.shape_str());
        break;
    }
    // Only an affine op's floating-point output may be exactly its floating-point input (in place:
    // each element is read before the same thread writes it); the LSQ backward sums over x.
    ops.push_back({o.role, o.data, o.dtype, o.layout, o.output,
                   o.fp && info(desc_.op).engine == QuantEngine::affine &&
                       !(desc_.op == QuantOp::fake_quantize_learnable && desc_.direction == Direction::Backward)});
  }
  BARACUDA_TRY(detail::check_operands(label, ops));
  // dynamic per-token / per-group reads x as [rows, D]: the leading dims must merge into one row stride.
  if (rows_step(desc_) && numel > 0) {
    const Layout& l = a.x.layout;
    int64_t expect = -1;
    for (int d = l.rank - 2; d >= 0; --d) {
      if (l.shape[d] == 1) continue;
      if (expect >= 0 && l.stride[d] != expect)
        return unsupported(label + ": x strides " + l.stride_str() + " do not merge the leading dims of " +
                           l.shape_str() + " into one row stride (pass a contiguous tensor)");
      expect = l.stride[d] * l.shape[d];
    }
  }
  return {};
}

// ---- launch -------------------------------------------------------------------------------------------
namespace {
struct LaunchRow {
  DType dtype;
  detail::QuantLaunchFn fn;
};
constexpr LaunchRow kLaunchers[] = {
    {DType::f32, &detail::quant_launch<DType::f32>},
    {DType::f16, &detail::quant_launch<DType::f16>},
    {DType::bf16, &detail::quant_launch<DType::bf16>},
    {DType::f64, &detail::quant_launch<DType::f64>},
};

bool aligned(const void* p, size_t n) { return reinterpret_cast<uintptr_t>(p) % n == 0; }

/// The floating-point operands of a call in slot order (null where unused).
void fp_slots(const QuantDesc& d, const QuantArgs& a, const void* (&ptr)[detail::kQuantSlots],
              const Layout* (&lay)[detail::kQuantSlots]) {
  for (int s = 0; s < detail::kQuantSlots; ++s) ptr[s] = nullptr, lay[s] = nullptr;
  auto put = [&](int s, const void* p, const Layout& l) {
    if (!p) return;
    ptr[s] = p;
    lay[s] = &l;
  };
  if (d.direction == Direction::Backward) {
    put(detail::kQIn0, a.dy.data, a.dy.layout);
    put(detail::kQIn1, a.x.data, a.x.layout);
  } else if (d.op != QuantOp::dequantize) {
    put(detail::kQIn0, a.x.data, a.x.layout);
  }
  const bool out_fp = d.direction == Direction::Backward || d.op == QuantOp::dequantize ||
                      d.op == QuantOp::fake_quantize || d.op == QuantOp::fake_quantize_learnable;
  if (out_fp) put(detail::kQOut, a.out.data, a.out.layout);
  if (d.direction == Direction::Forward) put(detail::kQMask, a.mask.data, a.mask.layout);
}

/// Fills the floating-point operands of `p`: pointers, coalesced dims (logical row-major order;
/// a dim merges into the previous one when every operand allows it) and whether the 16-byte path
/// applies (every operand dense in logical order and 16-byte aligned, the quantized side aligned
/// to a unit's bytes).
void fill_operands(const QuantDesc& d, const QuantArgs& a, bool allow_vec, detail::QuantLaunch* p) {
  const void* ptr[detail::kQuantSlots];
  const Layout* lay[detail::kQuantSlots];
  fp_slots(d, a, ptr, lay);
  p->ndim = 0;
  for (int i = 0; i < d.shape.rank; ++i) {
    const int64_t sz = d.shape.dims[i];
    if (sz == 1) continue;
    if (p->ndim > 0) {
      bool merge = true;
      for (int s = 0; s < detail::kQuantSlots; ++s)
        if (lay[s] && p->stride[s][p->ndim - 1] != lay[s]->stride[i] * sz) merge = false;
      if (merge) {
        p->size[p->ndim - 1] *= sz;
        for (int s = 0; s < detail::kQuantSlots; ++s)
          if (lay[s]) p->stride[s][p->ndim - 1] = lay[s]->stride[i];
        continue;
      }
    }
    p->size[p->ndim] = sz;
    for (int s = 0; s < detail::kQuantSlots; ++s) p->stride[s][p->ndim] = lay[s] ? lay[s]->stride[i] : 0;
    ++p->ndim;
  }
  for (int i = 0; i < p->ndim; ++i) p->div_size[i] = detail::make_divisor(static_cast<uint64_t>(p->size[i]));
  for (int s = 0; s < detail::kQuantSlots; ++s) p->fp[s] = ptr[s];
  const int es = size_in_bytes(d.dtype);
  const int unit = 16 / es;
  const int qbytes = is_packed(d.q_dtype) ? unit / 2 : unit;
  bool vec = allow_vec;
  for (int s = 0; s < detail::kQuantSlots; ++s) {
    if (!lay[s]) continue;
    if (!lay[s]->is_contiguous()) vec = false;
    if (!aligned(ptr[s], s == detail::kQMask ? static_cast<size_t>(unit) : 16)) vec = false;
  }
  for (const void* q : {p->q_in, static_cast<const void*>(p->q_out)})
    if (q && !aligned(q, static_cast<size_t>(qbytes))) vec = false;
  p->vec = vec;
}

/// How the elementwise kernel finds scales (quant_launch.hpp): one for the tensor, or -- on the
/// 16-byte path, when the scale index changes only every `run` elements with run a multiple of the
/// unit -- one per unit from e0 / run (per-channel: runs of `inner` cycling over the axis;
/// per-token: runs of a row; per-group along the last dim: runs of the group). Other layouts (a
/// channel axis last, groups along an outer dim) find each element's scale from its position.
void set_scale_runs(const QuantDesc& d, const QuantPlan::Geometry& g, int es, detail::QuantLaunch* p) {
  p->scale_const = d.granularity == QuantGranularity::per_tensor;
  int64_t run = 0;
  p->run_mod = false;
  switch (d.granularity) {
    case QuantGranularity::per_tensor:
      break;
    case QuantGranularity::per_channel:
      run = g.inner;
      p->run_mod = true;
      break;
    case QuantGranularity::per_token:
      run = g.axis_len;
      break;
    case QuantGranularity::per_group:
      run = g.inner == 1 ? g.group : 0;
      break;
  }
  const int64_t unit = 16 / es;
  p->unit_uniform = p->vec && (p->scale_const || (run > 0 && run % unit == 0));
  p->div_run = detail::make_divisor(static_cast<uint64_t>(run > 0 ? run : 1));
}

/// CTAs for numel elements: 16-byte units (2 elements on the strided path), kQuantBlock threads of
/// `per_thread` units each a step.
int64_t elem_grid(int64_t numel, bool vec, int es, int per_thread = 1) {
  const int64_t unit = vec ? 16 / es : 2;
  const int64_t units = (numel + unit - 1) / unit;
  const int64_t step = int64_t{detail::kQuantBlock} * per_thread;
  return std::clamp<int64_t>((units + step - 1) / step, 1, detail::kQuantMaxGrid);
}
/// The elementwise kernel's grid: its 16-byte variant takes kQuantUnroll units a thread a step.
/// The variants that take 2 x kQuantUnroll (detail::quant_elem_unroll) get the same grid: below
/// the kQuantMaxGrid cap (16.8M 16-bit elements) up to half of their CTAs find no unit and exit at
/// the loop's first test (a grid-stride loop: any grid gives the same result). Above the cap a grid
/// sized from quant_elem_unroll (one step a CTA) measured slower: H200, [16384, 4096] bf16 fp8
/// per-tensor 66.5 us with these 4096 CTAs, 70.7 us with 8192 (h200-experiments-2026-11-28j.md).
int64_t elementwise_grid(int64_t numel, bool vec, int es) {
  return elem_grid(numel, vec, es, vec ? detail::kQuantUnroll : 1);
}

/// dynamic per-token launch shape: a function of (dtype, row length) only. Rows of up to
/// kQuantBigVectors vectors take a group of up to that many threads holding one vector each of
/// kQuantSmallRows rows at once (rows_small_kernel, the CTA kQuantRowsBlock threads); longer rows a
/// power-of-two group of up to 512 threads holding kQuantBigVectors vectors each (4 threads per
/// 128-element bf16 group, a CTA of 128 per 4096-element 16-bit row; the row stays in registers up
/// to 512 x that), beyond that the row streams twice. A group's scale (and the shuffles that reduce
/// it) costs every thread of the group the same, so fewer threads with more vectors each spend it
/// on more elements: per-group int8 with G = 128 as 16 threads of one vector was issue-bound at 72%
/// of copy bandwidth (H100).
///
/// wide (symmetric per-token with 16-byte vectors): kQuantWideVectors a thread where the row then
/// fits kQuantWideMaxTpr threads' registers (see kQuantWideVectors).
void rows_config(int64_t n, int w, bool wide, detail::QuantLaunch* p) {
  auto pow2_at_least = [](int64_t v) {
    int t = 1;
    while (t < v && t < detail::kQuantMaxTpr) t <<= 1;
    return t;
  };
  if (n <= int64_t{detail::kQuantBigVectors} * w) {
    p->items = w;
    p->tpr = pow2_at_least((n + w - 1) / w);
  } else if (wide && n > int64_t{detail::kQuantWideVectors} * w &&
             n <= int64_t{detail::kQuantWideMaxTpr} * detail::kQuantWideVectors * w) {
    p->items = w * detail::kQuantWideVectors;
    p->tpr = pow2_at_least((n + p->items - 1) / p->items);
  } else {
    p->items = w * detail::kQuantBigVectors;
    p->tpr = pow2_at_least((n + p->items - 1) / p->items);
  }
  p->cached = n <= static_cast<int64_t>(p->tpr) * p->items;
  // A group wider than a warp is the whole CTA (group_nanmax).
  p->block = p->tpr > 32 ? p->tpr : detail::kQuantRowsBlock;
}

/// The rows kernel's view of x: `rows` rows of n elements (per-token: the rows of the last dim;
/// per-group: group_rows = D / G groups of each), the token stride and the column stride.
struct RowsGeom {
  int64_t rows = 0, n = 0, group_rows = 1, row_stride = 0, col_stride = 1;
};
RowsGeom rows_geom(const QuantDesc& d, const Layout& x) {
  RowsGeom g;
  const int r = d.shape.rank;
  g.n = d.shape.dims[r - 1];
  if (d.granularity == QuantGranularity::per_group) {
    g.group_rows = g.n / d.group_size;
    g.n = d.group_size;
  }
  g.rows = g.group_rows;
  for (int i = 0; i < r - 1; ++i) g.rows *= d.shape.dims[i];
  g.col_stride = x.stride[r - 1];
  for (int i = r - 2; i >= 0; --i)  // the leading dims merge (can_implement): the innermost one's stride
    if (x.shape[i] != 1) {
      g.row_stride = x.stride[i];
      break;
    }
  return g;
}

/// 16-byte vectors: unit column stride, rows (groups) of whole vectors, 16-byte aligned x rows and
/// q aligned to a vector's codes.
bool rows_vec(const QuantDesc& d, const QuantArgs& a, const RowsGeom& g, bool allow) {
  const int w = 16 / size_in_bytes(d.dtype);
  const size_t qbytes = static_cast<size_t>(is_packed(d.q_dtype) ? w / 2 : w);
  return allow && (g.col_stride == 1 || (g.n <= 1 && g.group_rows == 1)) && g.n % w == 0 && g.row_stride % w == 0 &&
         aligned(a.x.data, 16) && aligned(a.out.data, qbytes);
}

/// Elements a vector of the rows kernel holds: 16 bytes, or on the strided path one element (two
/// for packed int4: a thread writes whole bytes).
int rows_width(const QuantDesc& d, bool vec) {
  return vec ? 16 / size_in_bytes(d.dtype) : is_packed(d.q_dtype) ? 2 : 1;
}
bool rows_wide(const QuantDesc& d, bool vec) {  // see kQuantWideVectors (measured: bf16 -> int8)
  return vec && d.granularity == QuantGranularity::per_token && d.zero_point_kind == QuantZeroPoint::none &&
         d.q_dtype == DType::s8 && size_in_bytes(d.dtype) == 2;
}
}  // namespace

std::string QuantPlan::layout_for(const QuantArgs& a) const {
  const int64_t numel = desc_.shape.numel();
  if (rows_step(desc_)) {
    if (numel == 0) return "empty";
    const RowsGeom g = rows_geom(desc_, a.x.layout);
    detail::QuantLaunch p;
    const bool vec = rows_vec(desc_, a, g, allow_vectorized_);
    rows_config(g.n, rows_width(desc_, vec), rows_wide(desc_, vec), &p);
    return std::string("rows-") + (p.cached ? "registers" : "streaming") + "-" + (vec ? "vec16" : "scalar") +
           "(tpr=" + str(p.tpr) + ")";
  }
  if (numel == 0) return "empty";
  if (desc_.op == QuantOp::fake_quantize_learnable && desc_.direction == Direction::Backward) {
    const char* mapping = geo_.columns ? "columns" : (geo_.warps ? "warps" : "rows");
    return std::string("learnable-") + mapping + "(splits=" + str(geo_.splits) + ")";
  }
  detail::QuantLaunch p;
  p.q_in = desc_.op == QuantOp::dequantize && desc_.direction == Direction::Forward ? a.q.data : nullptr;
  p.q_out =
      (desc_.op == QuantOp::quantize || desc_.op == QuantOp::dynamic_quantize) && desc_.direction == Direction::Forward
          ? a.out.data
          : nullptr;
  fill_operands(desc_, a, allow_vectorized_, &p);
  set_scale_runs(desc_, geo_, size_in_bytes(desc_.dtype), &p);
  std::string s =
      p.vec ? (p.unit_uniform ? "elementwise-vec16-unitscale" : "elementwise-vec16") : "elementwise-strided";
  if (desc_.op == QuantOp::dynamic_quantize && desc_.direction == Direction::Forward)
    s = (desc_.delayed ? "delayed+" : "tensor-amax+") + s;
  return s;
}

Result<void> QuantPlan::run(cudaStream_t stream, Workspace ws, const QuantArgs& a) const {
  BARACUDA_TRY(can_implement(a));
  const std::string label = op_label(desc_);
  const bool bw = desc_.direction == Direction::Backward;
  const int64_t numel = desc_.shape.numel();
  const auto engine = info(desc_.op).engine;
  detail::QuantLaunchFn launch = nullptr;
  for (const auto& r : kLaunchers)
    if (r.dtype == desc_.dtype) launch = r.fn;
  if (!launch) return unsupported(label + ": no kernel for dtype " + dname(desc_.dtype));
  auto go = [&](const detail::QuantLaunch& p) -> Result<void> {
    const cudaError_t e = launch(p, stream);
    if (e != cudaSuccess)
      return make_error(Status::CudaError, label + ": kernel launch failed: " + cudaGetErrorString(e));
    return {};
  };
  if (workspace_bytes_ > 0 && (ws.bytes < workspace_bytes_ || !ws.ptr))
    return make_error(Status::WorkspaceTooSmall,
                      label + ": workspace expected >= " + str(static_cast<int64_t>(workspace_bytes_)) +
                          " bytes, got " + str(static_cast<int64_t>(ws.bytes)));

  detail::QuantLaunch p;
  p.q_dtype = desc_.q_dtype;
  p.numel = numel;
  p.outer = geo_.outer, p.axis_len = geo_.axis_len, p.inner = geo_.inner, p.group = geo_.group;
  p.s_outer = geo_.s_outer, p.s_axis = geo_.s_axis, p.s_inner = geo_.s_inner;
  p.wide = numel > int64_t{0xffffffff};
  p.div_inner = detail::make_divisor(static_cast<uint64_t>(geo_.inner));
  p.div_axis = detail::make_divisor(static_cast<uint64_t>(geo_.axis_len));
  p.div_group = detail::make_divisor(static_cast<uint64_t>(geo_.group));
  p.q_min = desc_.q_min;
  p.q_max = desc_.q_max;
  p.fp8_max = static_cast<float>(quant_max_of(desc_.q_dtype));
  p.q_scale_max = is_fp8(desc_.q_dtype) ? p.fp8_max : static_cast<float>(desc_.q_max);
  p.host_scale = desc_.scale;
  p.host_zero_point = desc_.zero_point_kind == QuantZeroPoint::none ? 0 : desc_.zero_point;
  p.scale = static_cast<const float*>(a.scale.data);
  p.zero_point = a.zero_point.data;
  p.channel_rule = desc_.granularity != QuantGranularity::per_tensor;
  switch (desc_.zero_point_kind) {
    case QuantZeroPoint::none:
      p.zp_mode = detail::QuantZpMode::none;
      break;
    case QuantZeroPoint::int32:
      p.zp_mode = detail::QuantZpMode::int32;
      break;
    case QuantZeroPoint::float32:
      p.zp_mode = detail::QuantZpMode::float32;
      break;
  }
  const int es = size_in_bytes(desc_.dtype);
  float* partials = static_cast<float*>(ws.ptr);

  // ---- dynamic forward -------------------------------------------------------------------------------
  if (engine == QuantEngine::dynamic && !bw) {
    if (rows_step(desc_)) {
      const RowsGeom g = rows_geom(desc_, a.x.layout);
      if (g.rows == 0) return {};
      p.step = detail::QuantStep::rows;
      p.rows = g.rows, p.n = g.n, p.x_row_stride = g.row_stride, p.x_col_stride = g.col_stride;
      p.group_rows = g.group_rows;
      p.div_group_rows = detail::make_divisor(static_cast<uint64_t>(g.group_rows));
      p.fp[detail::kQIn0] = a.x.data;
      p.q_out = a.out.data;
      p.scale_out = static_cast<float*>(a.scale_out.data);
      p.zero_point_out = static_cast<int32_t*>(a.zero_point_out.data);  // asymmetric: zp_mode int32
      p.vec = rows_vec(desc_, a, g, allow_vectorized_);
      rows_config(g.n, rows_width(desc_, p.vec), rows_wide(desc_, p.vec), &p);
      return go(p);
    }
    p.zp_mode = detail::QuantZpMode::none;
    p.scale_out = static_cast<float*>(a.scale_out.data);
    p.amax_out = static_cast<float*>(a.amax_out.data);
    p.q_out = a.out.data;
    fill_operands(desc_, a, allow_vectorized_, &p);
    set_scale_runs(desc_, geo_, es, &p);
    detail::QuantLaunch fin = p;
    fin.step = detail::QuantStep::finalize;
    fin.partial_in = partials;
    if (!desc_.delayed) {
      // amax partials -> (amax, scale) -> quantize with the device scale.
      detail::QuantLaunch am = p;
      am.step = detail::QuantStep::amax;
      am.amax_partial = partials;
      am.grid = std::min<int64_t>(elem_grid(numel, p.vec, es), detail::kQuantAmaxGrid);
      if (numel > 0) BARACUDA_TRY(go(am));
      fin.num_partials = numel > 0 ? am.grid : 0;
      fin.finalize = detail::kFinAmaxOut | detail::kFinScaleCurrent;
      BARACUDA_TRY(go(fin));
      if (numel == 0) return {};
      p.step = detail::QuantStep::elementwise;
      p.elem = detail::QuantElemOp::quant_fw;
      p.scale = p.scale_out;
      p.grid = elementwise_grid(numel, p.vec, es);
      return go(p);
    }
    // Delayed: scale from the history -> quantize (+ amax partials) -> amax, history shift.
    p.history = static_cast<float*>(a.amax_history.data);
    p.history_len = desc_.history_len;
    fin.history = p.history;
    fin.history_len = p.history_len;
    fin.num_partials = 0;
    fin.finalize = detail::kFinScaleHistory;
    BARACUDA_TRY(go(fin));
    p.grid = elementwise_grid(numel, p.vec, es);
    if (numel > 0) {
      p.step = detail::QuantStep::elementwise;
      p.elem = detail::QuantElemOp::quant_fw;
      p.scale = p.scale_out;
      p.amax_partial = partials;
      BARACUDA_TRY(go(p));
    }
    fin.num_partials = numel > 0 ? p.grid : 0;
    fin.finalize = detail::kFinAmaxOut | detail::kFinShiftHistory;
    return go(fin);
  }

  // ---- learnable backward ---------------------------------------------------------------------------
  if (desc_.op == QuantOp::fake_quantize_learnable && bw) {
    const bool per_channel = desc_.granularity != QuantGranularity::per_tensor;  // per-group: the same rules
    p.axis_len = per_channel ? geo_.axis_len : 1;
    p.outer = per_channel ? geo_.outer : 1;
    p.inner = per_channel ? geo_.inner : numel;
    p.per_channel = per_channel;
    p.per_group = desc_.granularity == QuantGranularity::per_group;
    p.channels = learn_channels(desc_, geo_);
    p.zp_mode = per_channel ? detail::QuantZpMode::round_clamp : detail::QuantZpMode::half_up_clamp;
    p.grad_factor = static_cast<float>(desc_.grad_factor);
    p.columns = geo_.columns;
    p.warps = geo_.warps;
    p.splits = geo_.splits;
    p.partial = partials;
    p.dscale = static_cast<float*>(a.dscale.data);
    p.dzero_point = static_cast<float*>(a.dzero_point.data);
    fill_operands(desc_, a, true, &p);
    // The learnable kernel reads element by element: "vec" here means every operand is dense.
    bool dense = true;
    for (const Layout* l : {&a.dy.layout, &a.x.layout, &a.out.layout})
      if (!l->is_contiguous()) dense = false;
    p.vec = dense;
    if (numel > 0) {
      p.step = detail::QuantStep::learnable_bw;
      BARACUDA_TRY(go(p));
      p.step = detail::QuantStep::learnable_sum;
      return go(p);
    }
    // Sums over no elements: zeros.
    for (const TensorMut* t : {&a.dscale, &a.dzero_point}) {
      if (!t->data || t->numel() == 0) continue;
      const cudaError_t e = cudaMemsetAsync(t->data, 0, static_cast<size_t>(t->numel()) * sizeof(float), stream);
      if (e != cudaSuccess)
        return make_error(Status::CudaError, label + ": zeroing a gradient failed: " + cudaGetErrorString(e));
    }
    return {};
  }

  // ---- elementwise ---------------------------------------------------------------------------------
  if (desc_.op == QuantOp::fake_quantize_learnable) p.zp_mode = detail::QuantZpMode::round_clamp;
  p.step = detail::QuantStep::elementwise;
  switch (desc_.op) {
    case QuantOp::quantize:
      p.elem = bw ? detail::QuantElemOp::quant_bw : detail::QuantElemOp::quant_fw;
      break;
    case QuantOp::dequantize:
      p.elem = bw ? detail::QuantElemOp::dequant_bw : detail::QuantElemOp::dequant_fw;
      break;
    case QuantOp::dynamic_quantize:  // the backward (the forward returned above): quantize's STE
      p.elem = detail::QuantElemOp::quant_bw;
      break;
    default:
      p.elem = bw ? detail::QuantElemOp::fake_bw : detail::QuantElemOp::fake_fw;
      break;
  }
  if (p.elem == detail::QuantElemOp::dequant_fw) p.q_in = a.q.data;
  if (p.elem == detail::QuantElemOp::quant_fw) p.q_out = a.out.data;
  fill_operands(desc_, a, allow_vectorized_, &p);
  set_scale_runs(desc_, geo_, es, &p);
  p.grid = elementwise_grid(numel, p.vec, es);
  const bool amax = p.elem == detail::QuantElemOp::quant_fw && desc_.record_amax;
  if (amax) p.amax_partial = partials;
  if (numel > 0) BARACUDA_TRY(go(p));
  if (amax) {
    detail::QuantLaunch fin = p;
    fin.step = detail::QuantStep::finalize;
    fin.partial_in = partials;
    fin.num_partials = numel > 0 ? p.grid : 0;
    fin.finalize = detail::kFinAmaxOut;
    fin.amax_out = static_cast<float*>(a.amax_out.data);
    return go(fin);
  }
  return {};
}

// ---- convenience ---------------------------------------------------------------------------------
namespace {
std::string desc_key(const QuantDesc& d) {
  std::string k;
  auto put = [&](const auto& v) { k.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  put(d.op), put(d.direction), put(d.dtype), put(d.q_dtype), put(d.shape.rank);
  k.append(reinterpret_cast<const char*>(d.shape.dims.data()),
           sizeof(int64_t) * static_cast<size_t>(std::clamp(d.shape.rank, 0, kMaxRank)));
  put(d.granularity), put(d.axis), put(d.group_size), put(d.zero_point_kind), put(d.q_min), put(d.q_max);
  put(d.scale_on_device), put(d.scale), put(d.zero_point), put(d.record_amax), put(d.delayed), put(d.history_len);
  put(d.grad_factor);
  return k;
}
Result<const QuantPlan*> cached(const QuantDesc& desc, const PlanPreference& pref) {
  if (desc.shape.rank < 0 || desc.shape.rank > kMaxRank)
    return invalid(op_label(desc) + ": input rank expected 0..8, got " + str(desc.shape.rank));
  return detail::cached_plan<QuantPlan>(desc_key(desc), pref,
                                        [&](const Target& t) { return QuantPlan::select(t, desc, pref); });
}
}  // namespace

Result<void> quant(cudaStream_t stream, const QuantDesc& desc, const QuantArgs& args, Workspace ws,
                   const PlanPreference& pref) {
  auto plan = cached(desc, pref);
  if (!plan) return plan.error();
  return (*plan)->run(stream, ws, args);
}

Result<size_t> quant_workspace_size(const QuantDesc& desc, const PlanPreference& pref) {
  auto plan = cached(desc, pref);
  if (!plan) return plan.error();
  return (*plan)->workspace_size();
}

}  // namespace baracuda
