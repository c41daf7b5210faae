// NormPlan: descriptor validation, launch shape, argument checks and the launch of the
// softmax/normalization family (kernels: norm_kernel.cuh; channel ops: channel_kernel.cuh).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "baracuda/ops/norm.hpp"
#include "core/impl_list.hpp"
#include "core/operands.hpp"
#include "core/plan_common.hpp"
#include "core/row_dims.hpp"
#include "ops/norm/channel_launch.hpp"
#include "ops/norm/norm_launch.hpp"

namespace baracuda {

// ---- the table -------------------------------------------------------------------------------
namespace {
const NormOpInfo kOps[] = {
#define BARACUDA_NORM(name, kind, fw, bw, params, reads, tol) \
  {NormOp::name, #name, NormKind::kind, DTypeSet(fw), DTypeSet(bw), params, reads, tol},
#include "baracuda/ops/norm_ops.def"
#undef BARACUDA_NORM
};

using detail::dtype_list;
using detail::invalid;
using detail::unsupported;

std::string op_label(const NormDesc& d) {
  return std::string(info(d.op).name) + (d.direction == Direction::Backward ? "_backward" : "");
}
/// One reduced axis, no tensor parameters (softmax, log_softmax, normalize, sparsemax,
/// gumbel_softmax).
bool is_softmax(NormOp op) { return info(op).kind == NormKind::axis; }
/// [N, C, *spatial] inputs with per-channel parameters (batch/instance/group norm, lrn).
bool is_channel(NormOp op) { return info(op).kind == NormKind::channel; }
std::string dname(DType t) { return std::string(name(t)); }
/// A scalar for messages and notes: "2", "0.5", "inf", "nan".
std::string num_str(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}
/// The launch shape of a plan's configuration (what run() and layout_for hand the launcher).
void set_launch_shape(detail::NormLaunch& p, const NormPlan::Config& cfg) {
  p.tpr = cfg.tpr;
  p.block = cfg.block;
  p.big = cfg.big;
  p.cluster = cfg.cluster;
}
/// Whether a vectorized backward launch of this shape with `row_ndim` row dims takes the
/// dense-rows kernel, and its variant with the next row ahead (norm_dense_bw, norm_dense_bw_ahead):
/// what select sizes the slots by and layout_for names.
struct DenseRows {
  bool dense = false, ahead = false;
};
DenseRows dense_rows(NormOp op, DType dtype, int64_t n, const NormPlan::Config& cfg, int slots, int row_ndim) {
  detail::NormLaunch q{};
  q.op = op;
  q.n = n;
  q.vec = true;
  q.row_ndim = row_ndim;
  q.slots = slots;
  set_launch_shape(q, cfg);
  const bool dense = detail::norm_dense_bw(q, static_cast<int>(size_in_bytes(dtype)));
  return {dense, dense && detail::norm_dense_bw_ahead(q)};
}
}  // namespace

std::span<const NormOpInfo> norm_ops() { return kOps; }
const NormOpInfo& info(NormOp op) { return kOps[static_cast<int>(op)]; }
std::optional<NormOp> norm_op_from_name(std::string_view n) {
  for (const auto& r : kOps)
    if (n == r.name) return r.op;
  return std::nullopt;
}
bool NormOpInfo::takes_weight() const { return std::strstr(params, "weight") != nullptr; }
bool NormOpInfo::takes_bias() const { return std::strstr(params, "bias") != nullptr; }
bool NormOpInfo::saves_mean() const { return std::strstr(bw_reads, "mean") != nullptr; }
bool NormOpInfo::bw_reads_output() const { return std::strstr(bw_reads, "output") != nullptr; }
DType norm_stats_dtype(DType dtype) { return dtype == DType::f64 ? DType::f64 : DType::f32; }

// ---- descriptor ------------------------------------------------------------------------------------
NormDesc NormDesc::softmax(DType dt, const Shape& shape, int axis, bool log, Direction dir) {
  NormDesc d;
  d.op = log ? NormOp::log_softmax : NormOp::softmax;
  d.direction = dir;
  d.dtype = d.param_dtype = dt;
  d.shape = shape;
  d.axis = axis;
  return d;
}
NormDesc NormDesc::layer_norm(DType dt, const Shape& shape, int norm_ndim, bool weight, bool bias, double eps,
                              Direction dir) {
  NormDesc d;
  d.op = NormOp::layer_norm;
  d.direction = dir;
  d.dtype = d.param_dtype = dt;
  d.shape = shape;
  d.norm_ndim = norm_ndim;
  d.weight = weight;
  d.bias = bias;
  d.eps = eps;
  return d;
}
NormDesc NormDesc::normalize(DType dt, const Shape& shape, int axis, double eps, Direction dir, double p) {
  NormDesc d = softmax(dt, shape, axis, false, dir);
  d.op = NormOp::normalize;
  d.eps = eps;
  d.p = p;
  return d;
}
NormDesc NormDesc::sparsemax(DType dt, const Shape& shape, int axis, Direction dir) {
  NormDesc d = softmax(dt, shape, axis, false, dir);
  d.op = NormOp::sparsemax;
  return d;
}
NormDesc NormDesc::gumbel_softmax(DType dt, const Shape& shape, int axis, double tau, bool hard, Direction dir) {
  NormDesc d = softmax(dt, shape, axis, false, dir);
  d.op = NormOp::gumbel_softmax;
  d.tau = tau;
  d.hard = hard;
  return d;
}
NormDesc NormDesc::rms_norm(DType dt, const Shape& shape, int norm_ndim, bool weight, double eps, Direction dir) {
  NormDesc d = layer_norm(dt, shape, norm_ndim, weight, false, eps, dir);
  d.op = NormOp::rms_norm;
  return d;
}
NormDesc NormDesc::batch_norm(DType dt, const Shape& shape, bool weight, bool bias, bool training, bool running_stats,
                              double momentum, double eps, Direction dir) {
  NormDesc d;
  d.op = NormOp::batch_norm;
  d.direction = dir;
  d.dtype = d.param_dtype = dt;
  d.shape = shape;
  d.weight = weight;
  d.bias = bias;
  d.training = training;
  d.running_stats = running_stats;
  d.momentum = momentum;
  d.eps = eps;
  return d;
}
NormDesc NormDesc::instance_norm(DType dt, const Shape& shape, bool weight, bool bias, bool training,
                                 bool running_stats, double momentum, double eps, Direction dir) {
  NormDesc d = batch_norm(dt, shape, weight, bias, training, running_stats, momentum, eps, dir);
  d.op = NormOp::instance_norm;
  return d;
}
NormDesc NormDesc::group_norm(DType dt, const Shape& shape, int num_groups, bool weight, bool bias, double eps,
                              Direction dir) {
  NormDesc d = batch_norm(dt, shape, weight, bias, true, false, 0.1, eps, dir);
  d.op = NormOp::group_norm;
  d.num_groups = num_groups;
  return d;
}
NormDesc NormDesc::local_response_norm(DType dt, const Shape& shape, int size, double alpha, double beta, double k,
                                       Direction dir) {
  NormDesc d = batch_norm(dt, shape, false, false, true, false, 0.1, 1e-5, dir);
  d.op = NormOp::local_response_norm;
  d.lrn_size = size;
  d.lrn_alpha = alpha;
  d.lrn_beta = beta;
  d.lrn_k = k;
  return d;
}

// ---- select ------------------------------------------------------------------------------------------
namespace {
/// The reduced dims [lo, hi) of the descriptor's shape (softmax: the axis; norms: the trailing
/// norm_ndim dims). A 0-dim softmax input reduces nothing: one row of one element.
void reduced_range(const NormDesc& d, int* lo, int* hi) {
  if (is_softmax(d.op)) {
    if (d.shape.rank == 0) {
      *lo = *hi = 0;
      return;
    }
    const int a = d.axis < 0 ? d.axis + d.shape.rank : d.axis;
    *lo = a;
    *hi = a + 1;
  } else {
    *lo = d.shape.rank - d.norm_ndim;
    *hi = d.shape.rank;
  }
}

/// The channel ops' descriptor rules (batch/instance/group norm, local_response_norm).
Result<void> check_channel_desc(const NormDesc& d, const std::string& label) {
  const auto& in = info(d.op);
  if (d.shape.rank < 2)
    return invalid(label + ": input expected [N, C, *spatial] (rank >= 2), got shape " + d.shape.str());
  if (d.mask != NormMask::none) return invalid(label + ": " + in.name + " takes no mask (expected mask=none)");
  if (d.residual) return invalid(label + ": " + in.name + " takes no residual (expected residual=false, got true)");
  auto finite = [&](const char* what, double v) -> Result<void> {
    if (!std::isfinite(v)) return invalid(label + ": " + what + " expected finite, got " + std::to_string(v));
    return {};
  };
  if (d.op == NormOp::local_response_norm) {
    if (d.weight || d.bias)
      return invalid(label + ": local_response_norm takes no weight or bias (expected weight=bias=false)");
    if (d.lrn_size < 1) return invalid(label + ": size expected >= 1, got " + std::to_string(d.lrn_size));
    BARACUDA_TRY(finite("alpha", d.lrn_alpha));
    BARACUDA_TRY(finite("beta", d.lrn_beta));
    BARACUDA_TRY(finite("k", d.lrn_k));
    if (!d.training || d.running_stats || d.num_groups != 1)
      return invalid(label +
                     ": local_response_norm takes no training/running_stats/num_groups (expected true/false/1)");
    return {};
  }
  if (!std::isfinite(d.eps) || d.eps < 0)
    return invalid(label + ": eps expected finite and >= 0, got " + std::to_string(d.eps));
  const int64_t C = d.shape.dims[1];
  if (d.op == NormOp::group_norm) {
    if (d.num_groups < 1) return invalid(label + ": num_groups expected >= 1, got " + std::to_string(d.num_groups));
    if (C % d.num_groups != 0)
      return invalid(label + ": num_groups expected to divide the " + std::to_string(C) + " channels of input shape " +
                     d.shape.str() + ", got " + std::to_string(d.num_groups));
    if (!d.training || d.running_stats)
      return invalid(label + ": group_norm has no running statistics (expected training=true, running_stats=false)");
    return {};
  }
  if (d.num_groups != 1)
    return invalid(label + ": num_groups is group_norm's (expected 1, got " + std::to_string(d.num_groups) + ")");
  BARACUDA_TRY(finite("momentum", d.momentum));
  if (!d.training && !d.running_stats)
    return invalid(label +
                   ": evaluation mode (training=false) normalizes with the running statistics: expected "
                   "running_stats=true, got false");
  return {};
}

/// normalize's p, gumbel_softmax's tau and hard; every other op keeps their defaults.
Result<void> check_op_scalars(const NormDesc& d, const std::string& label) {
  if (d.op == NormOp::normalize) {
    if (std::isnan(d.p) || d.p < 0) return invalid(label + ": p expected >= 0 (finite, or inf), got " + num_str(d.p));
  } else if (d.p != 2.0) {
    return invalid(label + ": p is normalize's (expected 2 for " + info(d.op).name + "), got " + num_str(d.p));
  }
  if (d.op == NormOp::gumbel_softmax) {
    if (!std::isfinite(d.tau) || d.tau <= 0)
      return invalid(label + ": tau expected finite and > 0, got " + num_str(d.tau));
  } else if (d.tau != 1.0 || d.hard) {
    return invalid(label + ": tau and hard are gumbel_softmax's (expected 1 and false for " + info(d.op).name +
                   "), got " + num_str(d.tau) + " and " + (d.hard ? "true" : "false"));
  }
  return {};
}

Result<void> check_desc(const NormDesc& d) {
  const auto& in = info(d.op);
  const std::string label = op_label(d);
  BARACUDA_TRY(detail::check_shape(label, "input", d.shape));
  BARACUDA_TRY(check_op_scalars(d, label));
  if (in.kind == NormKind::channel) return check_channel_desc(d, label);
  if (d.num_groups != 1 || !d.training || d.running_stats)
    return invalid(label + ": num_groups/training/running_stats belong to the channel ops (expected 1/true/false for " +
                   in.name + ")");
  if (in.kind == NormKind::axis) {
    const int r = std::max(d.shape.rank, 1);  // torch: a 0-dim input takes dim 0 or -1
    if (d.axis < -r || d.axis >= r)
      return invalid(label + ": axis expected in [" + std::to_string(-r) + ", " + std::to_string(r) + ") for a rank-" +
                     std::to_string(d.shape.rank) + " input, got " + std::to_string(d.axis));
    if (d.mask != NormMask::none) {
      if (d.op != NormOp::softmax && d.op != NormOp::log_softmax)
        return unsupported(label + ": a mask is supported by softmax and log_softmax only, got " + in.name);
      if (d.direction == Direction::Backward)
        return invalid(label +
                       ": mask expected none for the backward (the backward on the output is the masked "
                       "op's backward), got a mask");
      if (d.mask_shape.rank < 0 || d.mask_shape.rank > std::max(d.shape.rank, 0))
        return invalid(label + ": mask rank expected 0.." + std::to_string(d.shape.rank) + ", got " +
                       std::to_string(d.mask_shape.rank));
      for (int i = 0; i < d.mask_shape.rank; ++i) {
        const int64_t m = d.mask_shape.dims[i], x = d.shape.dims[d.shape.rank - d.mask_shape.rank + i];
        if (m != 1 && m != x)
          return invalid(label + ": mask shape " + d.mask_shape.str() + " does not broadcast to the input shape " +
                         d.shape.str());
      }
    }
    if (d.op == NormOp::normalize && (!std::isfinite(d.eps) || d.eps < 0))
      return invalid(label + ": eps expected finite and >= 0, got " + std::to_string(d.eps));
    if (d.weight || d.bias || d.residual)
      return invalid(
          label + ": " + in.name + " takes no weight, bias or residual (expected weight=bias=residual=false, got " +
          std::string(d.weight ? "weight " : "") + (d.bias ? "bias " : "") + (d.residual ? "residual" : "") + ")");
    return {};
  }
  if (d.mask != NormMask::none) return invalid(label + ": " + in.name + " takes no mask (expected mask=none)");
  if (d.norm_ndim < 1 || d.norm_ndim > d.shape.rank)
    return invalid(label + ": norm_ndim (len(normalized_shape)) expected in [1, " + std::to_string(d.shape.rank) +
                   "] for input shape " + d.shape.str() + ", got " + std::to_string(d.norm_ndim));
  if (!std::isfinite(d.eps) || d.eps < 0)
    return invalid(label + ": eps expected finite and >= 0, got " + std::to_string(d.eps));
  if (d.bias && !in.takes_bias())
    return invalid(label + ": " + in.name + " takes no bias (expected bias=false, got true)");
  if (d.residual && d.direction == Direction::Backward)
    return invalid(label + ": residual expected false for the backward (pass the summed residual as x), got true");
  return {};
}

Result<void> native_accepts(const Target& target, const NormDesc& d, const PlanPreference& pref) {
  const auto& in = info(d.op);
  const std::string label = op_label(d);
  const bool bw = d.direction == Direction::Backward;
  if (pref.backend != Backend::Any && pref.backend != Backend::Native)
    return unsupported(label + ": preference backend=" + to_string(pref.backend) +
                       " cannot be honoured (softmax/normalization has only the native backend)");
  if (pref.tf32 == Tristate::Require)
    return unsupported(label + ": preference tf32=Require cannot be honoured (no TF32 mode in row reductions)");
  if (pref.reduced_precision_reduction == Tristate::Require)
    return unsupported(label +
                       ": preference reduced_precision_reduction=Require cannot be honoured "
                       "(statistics accumulate in f32, f64 for f64)");
  if (target.sm < 80)
    return unsupported(label + ": target sm_" + std::to_string(target.sm) + " is below the minimum sm_80");
  const DTypeSet allowed = bw ? in.bw_dtypes : in.fw_dtypes;
  if (!contains(allowed, d.dtype))
    return unsupported(label + ": dtype expected one of {" + dtype_list(allowed) + "}, got " + dname(d.dtype));
  if (d.weight || d.bias || d.running_stats) {
    const bool mixed_ok = (d.dtype == DType::f16 || d.dtype == DType::bf16) && d.param_dtype == DType::f32;
    if (d.param_dtype != d.dtype && !mixed_ok)
      return unsupported(label + ": param_dtype expected " + dname(d.dtype) +
                         (d.dtype == DType::f16 || d.dtype == DType::bf16 ? " or float32" : "") + " for " +
                         dname(d.dtype) + " inputs, got " + dname(d.param_dtype));
  }
  return {};
}

struct NormImpl {
  const char* name;
  Result<void> (*accepts)(const Target&, const NormDesc&, const PlanPreference&);
};
constexpr NormImpl kNormImpls[] = {{"native-rows", native_accepts}};

int pow2_at_least(int64_t v) {
  int p = 1;
  while (p < v && p < detail::kNormMaxTpr) p <<= 1;
  return p;
}
}  // namespace

Result<NormPlan> NormPlan::select(const Target& target, const NormDesc& desc, const PlanPreference& pref) {
  if (static_cast<size_t>(desc.op) >= std::size(kOps))
    return invalid("norm: op id " + std::to_string(static_cast<int>(desc.op)) + " is out of range");
  BARACUDA_TRY(check_desc(desc));
  const std::string label = op_label(desc);
  auto impl = detail::first_accepting<NormImpl>(label, kNormImpls, target, desc, pref);
  if (!impl) return impl.error();

  NormPlan p;
  p.desc_ = desc;
  if (!(desc.weight || desc.bias || desc.running_stats))
    p.desc_.param_dtype = desc.dtype;  // unused: keep descriptors comparable
  // gumbel_softmax's backward is the soft sample's whether the forward was hard or not.
  if (desc.direction == Direction::Backward) p.desc_.hard = false;
  p.allow_vectorized_ = pref.vectorized != Tristate::Forbid;
  if (is_channel(desc.op)) {
    p.select_channel(target);
    return p;
  }
  int lo = 0, hi = 0;
  reduced_range(desc, &lo, &hi);
  p.n_ = 1;
  p.rows_ = 1;
  for (int i = 0; i < desc.shape.rank; ++i) (i >= lo && i < hi ? p.n_ : p.rows_) *= desc.shape.dims[i];

  // Launch shape: a function of (op, direction, dtype, row length) only, so results do not
  // depend on the device (bit-stable). Rows of up to 32 vectors take a sub-warp or warp group
  // holding one vector a thread; rows that fit 512 threads x the big item count stay in
  // registers with a group of up to 512 threads (one CTA); longer rows stream.
  const bool bw = desc.direction == Direction::Backward;
  const int es = size_in_bytes(desc.dtype);
  const int small = detail::norm_small_items(es);
  const int big = detail::norm_big_items(desc.op, desc.direction, es, desc.p == 2.0);
  Config& c = p.cfg_;
  const int64_t n = p.n_;
  if (n <= int64_t{32} * small) {
    c.big = false;
    c.items = small;
    c.tpr = pow2_at_least((n + small - 1) / small);
  } else {
    c.big = true;
    c.items = big;
    c.tpr = pow2_at_least((n + big - 1) / big);
  }
  c.cached = n <= int64_t{c.tpr} * c.items;
  c.block = c.tpr > 32 ? c.tpr : 128;
  // Rows past one CTA's registers (sm_90+): a thread-block cluster of 2-16 CTAs owns the row, its
  // reductions merged through distributed shared memory, so rows up to 16 CTAs' registers are read
  // once (one CTA streamed them: a re-read per pass, 24-64% of copy bandwidth at [1024, 128256]
  // bf16) and rows beyond that stream through 16 CTAs instead of one (a few long rows used a few
  // SMs: [4, 2^20] ran on 4). The cluster size is a function of the shape only.
  // Many rows (H100, [1024, 128256] bf16, cluster vs one CTA streaming): layer_norm fw 375 vs 450 us,
  // bw 800 vs 1100; rms_norm fw 280 vs 310, bw 691 vs 1022; normalize fw 254 vs 273: clusters. But
  // softmax / log_softmax fw 366 vs 276 and bw 556 vs 448, normalize bw 567 vs 449, sparsemax fw
  // 853 vs 741, gumbel_softmax fw 1604 vs 890: there one CTA a row streams faster once the rows
  // alone fill the GPU (the cluster variant's exchange latency is not hidden; its rows have only
  // one or two reads to save). A few rows (<= 256) always take clusters.
  const bool cluster_wins = p.rows_ <= 256 || desc.op == NormOp::layer_norm || desc.op == NormOp::rms_norm ||
                            (desc.op == NormOp::normalize && !bw);
  c.cluster = 1;
  if (target.sm >= 90 && c.big && !c.cached && cluster_wins) {
    const int64_t per_cta = int64_t{c.tpr} * c.items;
    while (c.cluster < 16 && int64_t{c.cluster} * per_cta < n) c.cluster *= 2;
    c.cached = n <= int64_t{c.cluster} * per_cta;
  }
  const int groups = c.block / c.tpr;

  p.sku_.category = "norm";
  p.sku_.op = label;
  const bool params = desc.weight || desc.bias;
  p.sku_.dtypes = dname(desc.dtype) +
                  (params && p.desc_.param_dtype != desc.dtype ? "," + dname(p.desc_.param_dtype) : "") + "->" +
                  dname(desc.dtype);
  p.sku_.arch = target.sm >= 90 ? "sm_90a" : "sm_80";
  p.sku_.backend = Backend::Native;
  p.sku_.layout =
      (c.cluster > 1 ? "cluster-rows(ctas=" + std::to_string(c.cluster) + ",tpr="
                     : std::string(c.tpr > 32 ? "cta" : (c.tpr == 32 ? "warp" : "subwarp")) + "-rows(tpr=") +
      std::to_string(c.tpr) + ")-" + (c.cached ? "registers" : "streaming") +
      (p.allow_vectorized_ ? "" : " (vectorization forbidden)");
  const DType stats = norm_stats_dtype(desc.dtype);
  p.sku_.precision.math = stats;
  p.sku_.precision.accumulator = stats;
  p.sku_.precision.deterministic = true;
  p.sku_.precision.bit_stable = true;
  switch (desc.op) {
    case NormOp::softmax:
    case NormOp::log_softmax:
      // The kernel's exp (norm_kernel.cuh, sm_exp): ex2.approx.ftz for 16-bit outputs, where its ~1e-6
      // relative error is far below the output's rounding; expf (exp for f64) otherwise.
      p.sku_.precision.note =
          bw ? std::string("row sum in fixed order") +
                   (desc.op == NormOp::log_softmax && es == 2 ? ", exp via ex2.approx.ftz (16-bit output)" : "")
             : std::string("online (max, sum exp) merge, exp via ") +
                   (es == 2 ? "ex2.approx.ftz (16-bit output)" : (es == 8 ? "exp" : "expf"));
      if (desc.mask == NormMask::boolean) p.sku_.precision.note += "; boolean mask (true = excluded, empty rows 0)";
      if (desc.mask == NormMask::additive) p.sku_.precision.note += "; additive mask added in f32";
      break;
    case NormOp::layer_norm:
      p.sku_.precision.note = bw ? "dweight/dbias: two-stage fixed-order reduction"
                                 : "centred variance: rows held whole with every thread's share full merge "
                                   "per-thread centred moments pairwise (equal-count Chan merge, one "
                                   "reduction); other rows two passes (mean, then the centred sum of squares)";
      break;
    case NormOp::rms_norm:
      p.sku_.precision.note = bw ? "dweight: two-stage fixed-order reduction" : "mean of squares";
      break;
    case NormOp::normalize:
      if (desc.p == 2.0) {
        p.sku_.precision.note = "p=2: x / max(sqrt(sum x^2), eps)";
      } else {
        p.sku_.precision.note = "p=" + num_str(desc.p) + ": x / max(" +
                                (std::isinf(desc.p) ? std::string("max |x|")
                                 : desc.p == 1.0    ? std::string("sum |x|")
                                 : desc.p == 0.0    ? std::string("count(x != 0)")
                                                    : "(sum |x|^p)^(1/p)") +
                                ", eps)" + (bw && std::isinf(desc.p) ? "; gradient split evenly over tied maxima" : "");
      }
      break;
    case NormOp::sparsemax:
      p.sku_.precision.note = bw ? "dy - mean over the support {y > 0}"
                                 : "threshold by Michelot's iteration from max - 1 (no sort), "
                                   "tau = (sum_S x - 1) / |S| on the final support";
      break;
    case NormOp::gumbel_softmax:
      p.sku_.precision.note =
          bw ? "softmax backward of the soft sample / tau"
             : std::string(
                   "noise -log(-log(u)), u from Philox4x32-10 (seed, offset) or the "
                   "noise tensor; softmax of (x + g) / tau, exp via ") +
                   (es == 2 ? "ex2.approx.ftz (16-bit output)" : (es == 8 ? "exp" : "expf")) +
                   (desc.hard ? "; hard: one-hot of the first argmax of the stored soft sample" : "");
      break;
    case NormOp::batch_norm:
    case NormOp::instance_norm:
    case NormOp::group_norm:
    case NormOp::local_response_norm:
      break;  // select_channel
  }

  // Backward parameter gradients: a fixed partition of the rows into slots (multiple of the
  // groups per CTA), each with a workspace row of partial sums. Fewer slots for very long rows
  // bound the workspace (at most 2^26 partial elements per gradient).
  if (bw && params) {
    // Cluster rows: one slot a cluster of one wave, each summing its rows' gradients on chip. The
    // wave is what an H100 co-schedules at two 512-thread CTAs an SM (cudaOccupancyMaxActiveClusters:
    // 14 clusters of 16 CTAs, 30 of 8; GPCs hold whole clusters): a second wave of a few clusters
    // doubled the time (layer_norm bw [1024, 128256] bf16: 16 slots 841 us, 14 slots 564 us). A
    // constant, not the device's count, so the gradients' bits do not depend on the device.
    const int64_t cluster_slots = c.cluster >= 16 ? 14 : (c.cluster == 8 ? 30 : 240 / c.cluster);
    // Rows that take layer_norm's dense-rows kernel with the next row ahead (when the call's rows
    // are dense: norm_dense_bw) run at 2 CTAs an SM, so one wave is kNormAheadSlots CTAs: with 528
    // (two waves) the partials written and re-read were twice the size. H200, [16384, 4096] bf16,
    // driver: 116.5 -> 109.7 us. A call of such a plan whose rows are not dense takes row_kernel
    // with this partition (half a wave there).
    const bool ahead = dense_rows(desc.op, desc.dtype, n, c, 1, 1).ahead;
    int64_t slots = std::min<int64_t>(
        std::max<int64_t>(p.rows_, 1),
        c.cluster > 1 ? cluster_slots : (ahead ? detail::kNormAheadSlots : detail::kNormMaxSlots));
    while (slots > groups && slots * std::max<int64_t>(n, 1) > (int64_t{1} << 26)) slots /= 2;
    slots = (slots + groups - 1) / groups * groups;
    c.slots = static_cast<int>(slots);
    const size_t per = static_cast<size_t>(slots) * static_cast<size_t>(n) * static_cast<size_t>(size_in_bytes(stats));
    const size_t halves = desc.op == NormOp::layer_norm ? 2 : 1;
    p.workspace_bytes_ = (per * halves + 255) / 256 * 256;
    p.sku_.epilogue = c.cached ? "param-grad partials (" + std::to_string(slots) + " slots)"
                               : "param-grad column pass (" +
                                     std::to_string(std::min<int64_t>(slots, (p.rows_ + 63) / 64)) + " row splits)";
  }
  return p;
}

// ---- argument checks -----------------------------------------------------------------------------
namespace {
struct Operand {
  const char* role;
  const void* data;
  DType dtype;
  const Layout* layout;
  bool is_output;
  bool main;  ///< has the input's shape (elementwise-aligned with x)
};

using detail::given;

/// The stride of the reduced dims [lo, hi) merged into one, or -1 when they do not merge.
int64_t merged_stride(const Layout& l, int lo, int hi) {
  int64_t stride = -2, expect = 0;
  for (int d = hi - 1; d >= lo; --d) {
    if (l.shape[d] == 1) continue;
    if (stride == -2) {
      stride = l.stride[d];
      expect = l.stride[d] * l.shape[d];
      continue;
    }
    if (l.stride[d] != expect) return -1;
    expect *= l.shape[d];
  }
  return stride == -2 ? 1 : stride;
}

/// The main tensors in kernel slot order (in0, in1, out0, out1); null where unused.
std::array<const Layout*, detail::kNumSlots> slot_layouts(const NormDesc& d, const NormArgs& a,
                                                          std::array<const void*, detail::kNumSlots>* ptrs) {
  std::array<const Layout*, detail::kNumSlots> s{};
  (*ptrs) = {};
  auto put = [&](int k, const void* p, const Layout& l) {
    s[k] = &l;
    (*ptrs)[k] = p;
  };
  if (d.direction == Direction::Forward) {
    put(detail::kIn0, a.x.data, a.x.layout);
    if (d.residual) {
      put(detail::kIn1, a.residual.data, a.residual.layout);
      put(detail::kOut1, a.residual_out.data, a.residual_out.layout);
    }
    if (d.op == NormOp::gumbel_softmax) {  // optional: absent ones stay null (Philox noise; no y_soft)
      if (a.noise.data) put(detail::kIn1, a.noise.data, a.noise.layout);
      if (a.y_soft.data) put(detail::kOut1, a.y_soft.data, a.y_soft.layout);
    }
  } else {
    put(detail::kIn0, a.dy.data, a.dy.layout);
    if (info(d.op).bw_reads_output())
      put(detail::kIn1, a.y.data, a.y.layout);
    else
      put(detail::kIn1, a.x.data, a.x.layout);
  }
  put(detail::kOut0, a.out.data, a.out.layout);
  return s;
}
}  // namespace

// ---- channel ops (batch/instance/group norm, local_response_norm) ---------------------------------
namespace {
struct ChannelDims {
  int64_t N = 0, C = 0, S = 1;
};
ChannelDims channel_dims(const Shape& s) {
  ChannelDims d;
  d.N = s.dims[0];
  d.C = s.dims[1];
  for (int i = 2; i < s.rank; ++i) d.S *= s.dims[i];
  return d;
}
/// Instance/group norm with batch statistics: statistics per (sample, group).
bool channel_group_mode(const NormDesc& d) {
  return d.op == NormOp::group_norm || (d.op == NormOp::instance_norm && d.training);
}
int64_t channel_groups(const NormDesc& d, int64_t C) { return d.op == NormOp::group_norm ? d.num_groups : C; }
}  // namespace

void NormPlan::select_channel(const Target& target) {
  const NormDesc& d = desc_;
  const bool bw = d.direction == Direction::Backward;
  const bool lrn = d.op == NormOp::local_response_norm;
  const bool group = !lrn && channel_group_mode(d);
  const ChannelDims cd = channel_dims(d.shape);
  const int64_t G = channel_groups(d, cd.C);
  const int64_t cpg = G > 0 ? cd.C / G : 0;
  const DType stats = norm_stats_dtype(d.dtype);
  const int es = size_in_bytes(d.dtype), ms = size_in_bytes(stats);
  // rows() / row_length(): the stat groups and their element counts (lrn: columns of C).
  if (lrn) {
    rows_ = cd.N * cd.S;
    n_ = cd.C;
  } else if (group) {
    rows_ = cd.N * G;
    n_ = cpg * cd.S;
  } else {
    rows_ = cd.C;
    n_ = cd.N * cd.S;
  }
  cfg_ = Config{};
  cfg_.tpr = cfg_.items = 0;
  cfg_.block = detail::kChannelBlock;
  if (group && cpg * cd.S > 0) {
    const size_t bytes = detail::channel_smem_rows_bytes(bw, cpg, cd.S, es, ms);
    if (bytes <= detail::channel_smem_rows_budget(target.sm)) cfg_.smem_rows_bytes = static_cast<int>(bytes);
  }
  // Workspace: partial sums and coefficients wherever statistics or parameter gradients are
  // computed (sized for every layout); evaluation mode's forward needs none.
  const bool uses_ws = !lrn && (d.training || (bw && (d.weight || d.bias)));
  workspace_bytes_ = uses_ws ? detail::channel_workspace(cd.N, cd.C, cd.S, ms).total : 0;

  sku_.category = "norm";
  sku_.op = op_label(d);
  const bool params = d.weight || d.bias || d.running_stats;
  sku_.dtypes =
      dname(d.dtype) + (params && d.param_dtype != d.dtype ? "," + dname(d.param_dtype) : "") + "->" + dname(d.dtype);
  sku_.arch = target.sm >= 90 ? "sm_90a" : "sm_80";
  sku_.backend = Backend::Native;
  sku_.precision.math = stats;
  sku_.precision.accumulator = stats;
  sku_.precision.deterministic = true;
  sku_.precision.bit_stable = true;
  const std::string vec = allow_vectorized_ ? "" : " (vectorization forbidden)";
  if (lrn) {
    sku_.layout = "channel-window(size=" + std::to_string(d.lrn_size) + ")" + vec;
    sku_.precision.note = bw ? "direct window sums, O(size^2) a gradient element" : "direct window sums";
    return;
  }
  if (!d.training) {
    sku_.layout = "running-stats-affine" + vec;
    sku_.precision.note = "running statistics";
    if (bw) sku_.precision.note += "; dweight/dbias: per-(n, c) sums, fixed-order batch sum";
    return;
  }
  if (group) {
    sku_.layout = "group-stats(G=" + std::to_string(G) + ")" +
                  (cfg_.smem_rows_bytes ? "-smem-rows(" + std::to_string(cfg_.smem_rows_bytes) + " B)" : "") + vec;
  } else {
    sku_.layout = "channel-stats" + vec;
  }
  sku_.precision.note = bw ? "per-(n, c) sums of dy and dy * (x - mean), fixed-order finish"
                           : "shifted sums of (x - x0) and (x - x0)^2, fixed-order finish" +
                                 std::string(cfg_.smem_rows_bytes ? "; rows on chip: two-pass centred variance" : "");
  if (bw && (d.weight || d.bias)) sku_.epilogue = "dweight/dbias: fixed-order batch sum";
}

namespace {
/// x's [N, C, S] mapping for these tensors (channel_launch.hpp) and the launch struct's geometry.
struct ChannelGeometry {
  detail::ChannelLaunch p;
  bool smem_rows = false;
  std::string name;
};

ChannelGeometry channel_geometry(const NormDesc& d, const NormArgs& a, bool allow_vec, int smem_rows_bytes) {
  using detail::ChannelMap;
  ChannelGeometry g;
  detail::ChannelLaunch& p = g.p;
  const bool bw = d.direction == Direction::Backward;
  const bool lrn = d.op == NormOp::local_response_norm;
  const int rank = d.shape.rank;
  const ChannelDims cd = channel_dims(d.shape);
  std::array<const Layout*, detail::kChSlots> lay{};
  lay[detail::kChX] = &a.x.layout;
  p.ptr[detail::kChX] = a.x.data;
  if (bw) {
    lay[detail::kChDy] = &a.dy.layout;
    p.ptr[detail::kChDy] = a.dy.data;
  }
  if (a.out.data) {
    lay[detail::kChOut] = &a.out.layout;
    p.ptr[detail::kChOut] = a.out.data;
  }
  bool planes = true, pixels = true;
  std::array<int64_t, detail::kChSlots> merged{};
  for (int t = 0; t < detail::kChSlots; ++t) {
    if (!lay[t]) continue;
    merged[t] = merged_stride(*lay[t], 2, rank);  // 1 when every spatial dim has size 1
    if (merged[t] != 1) planes = false;
    if (merged[t] < 0) pixels = false;
    if (cd.C > 1 && lay[t]->stride[1] != 1) pixels = false;
    p.sn[t] = lay[t]->stride[0];
    p.sc[t] = lay[t]->stride[1];
  }
  // Unit-stride planes unless they are tiny and the channels are unit-stride too.
  p.map = planes && (cd.S >= 32 || !pixels) ? ChannelMap::planes : (pixels ? ChannelMap::pixels : ChannelMap::strided);
  p.N = cd.N;
  p.C = cd.C;
  p.S = cd.S;
  if (p.map == ChannelMap::pixels) {
    for (int t = 0; t < detail::kChSlots; ++t)
      if (lay[t]) p.ss[t][0] = cd.S == 1 ? p.sn[t] : merged[t];  // S == 1: a pixel a sample
    // Per-channel statistics over dense samples: fold the batch into the pixels.
    bool fold = !lrn && !channel_group_mode(d);
    for (int t = 0; t < detail::kChSlots; ++t)
      if (lay[t] && cd.N > 1 && p.sn[t] != cd.S * p.ss[t][0]) fold = false;
    if (fold) {
      p.S = cd.N * cd.S;
      p.N = 1;
    }
  } else if (p.map == ChannelMap::strided) {
    // Spatial dims outer to inner without size-1 dims, merged where every slot allows.
    for (int i = 2; i < rank; ++i) {
      if (d.shape.dims[i] == 1) continue;
      const int k = p.sdims;
      if (k > 0) {
        bool merge = true;
        for (int t = 0; t < detail::kChSlots; ++t)
          if (lay[t] && p.ss[t][k - 1] != lay[t]->stride[i] * d.shape.dims[i]) merge = false;
        if (merge) {
          p.ssize[k - 1] *= d.shape.dims[i];
          for (int t = 0; t < detail::kChSlots; ++t)
            if (lay[t]) p.ss[t][k - 1] = lay[t]->stride[i];
          continue;
        }
      }
      p.ssize[k] = d.shape.dims[i];
      for (int t = 0; t < detail::kChSlots; ++t)
        if (lay[t]) p.ss[t][k] = lay[t]->stride[i];
      p.sdims = k + 1;
    }
  }
  const int64_t vec = detail::norm_vec(size_in_bytes(d.dtype));
  bool v = allow_vec && !lrn && p.map != ChannelMap::strided;
  for (int t = 0; t < detail::kChSlots; ++t) {
    if (!lay[t]) continue;
    if (reinterpret_cast<uintptr_t>(p.ptr[t]) % 16 != 0) v = false;
    if (p.N > 1 && p.sn[t] % vec != 0) v = false;
    if (p.map == ChannelMap::planes && cd.C > 1 && p.sc[t] % vec != 0) v = false;
    if (p.map == ChannelMap::pixels && p.S > 1 && p.ss[t][0] % vec != 0) v = false;
  }
  if (p.map == ChannelMap::planes && cd.S % vec != 0) v = false;
  if (p.map == ChannelMap::pixels && cd.C % vec != 0) v = false;
  p.vec = v;
  g.smem_rows = !lrn && channel_group_mode(d) && p.map == ChannelMap::planes && smem_rows_bytes > 0;
  const char* map_name = p.map == ChannelMap::planes ? "planes" : (p.map == ChannelMap::pixels ? "pixels" : "strided");
  g.name = lrn ? std::string("window-") + map_name
               : std::string(g.smem_rows ? "smem-rows" : map_name) + (v ? "-vec16" : "-scalar");
  return g;
}

Result<void> channel_can_implement(const NormPlan& plan, const NormArgs& a) {
  const NormDesc& d = plan.desc();
  const std::string label = op_label(d);
  const bool bw = d.direction == Direction::Backward;
  const bool lrn = d.op == NormOp::local_response_norm;
  const bool eval = !lrn && !d.training;
  const DType stats = norm_stats_dtype(d.dtype), pd = d.param_dtype;
  auto must_not = [&](bool present, const char* role, const char* why) -> Result<void> {
    if (present) return invalid(label + ": " + role + " given but " + why);
    return {};
  };
  BARACUDA_TRY(must_not(given(a.mask), "mask", "channel ops take no mask"));
  BARACUDA_TRY(must_not(given(a.residual) || given(a.residual_out), "residual", "channel ops take no residual"));
  BARACUDA_TRY(must_not(given(a.y), "y", "the backward reads x, not y"));
  BARACUDA_TRY(must_not(given(a.weight) && !d.weight, "weight", "desc.weight is false"));
  BARACUDA_TRY(must_not(given(a.bias) && !d.bias, "bias", "desc.bias is false"));
  BARACUDA_TRY(must_not(given(a.bias) && bw, "bias", "the backward does not read it (desc.bias asks for dbias)"));
  BARACUDA_TRY(must_not(given(a.dweight) && !(bw && d.weight), "dweight", "it exists only for a backward with weight"));
  BARACUDA_TRY(must_not(given(a.dbias) && !(bw && d.bias), "dbias", "it exists only for a backward with bias"));
  const bool want_running = !lrn && d.running_stats && (eval || !bw);
  BARACUDA_TRY(must_not((given(a.running_mean) || given(a.running_var)) && !want_running, "running_mean/running_var",
                        "they are read in evaluation mode and updated by a training forward with desc.running_stats"));
  const bool saves = !lrn && !bw && d.training;
  BARACUDA_TRY(must_not((given(a.save_mean) || given(a.save_rstd)) && !saves, "save_mean/save_rstd",
                        "only a training forward computes statistics"));
  const bool reads_stats = !lrn && bw && d.training;
  BARACUDA_TRY(must_not((given(a.mean) || given(a.rstd)) && !reads_stats, "mean/rstd",
                        "only a training backward reads the saved statistics (evaluation reads the running ones)"));
  if (!bw) BARACUDA_TRY(must_not(given(a.dy), "dy", "it is a backward input"));

  enum class Kind { Main, Param, Stat };
  struct Want {
    Operand op;
    DType dtype;
    Kind kind;
    bool required;
  };
  std::vector<Want> want;
  auto ref = [&](const char* role, const TensorRef& t, DType dt, Kind k, bool req) {
    want.push_back({{role, t.data, t.dtype, &t.layout, false, k == Kind::Main}, dt, k, req});
  };
  auto mut = [&](const char* role, const TensorMut& t, DType dt, Kind k, bool req) {
    want.push_back({{role, t.data, t.dtype, &t.layout, true, k == Kind::Main}, dt, k, req});
  };
  if (bw) ref("dy", a.dy, d.dtype, Kind::Main, true);
  ref("x", a.x, d.dtype, Kind::Main, true);
  if (d.weight) ref("weight", a.weight, pd, Kind::Param, true);
  if (d.bias && !bw) ref("bias", a.bias, pd, Kind::Param, true);
  if (want_running) {
    mut("running_mean", a.running_mean, pd, Kind::Param, true);
    mut("running_var", a.running_var, pd, Kind::Param, true);
  }
  if (saves) {
    mut("save_mean", a.save_mean, stats, Kind::Stat, false);
    mut("save_rstd", a.save_rstd, stats, Kind::Stat, false);
  }
  if (reads_stats) {
    ref("mean", a.mean, stats, Kind::Stat, true);
    ref("rstd", a.rstd, stats, Kind::Stat, true);
  }
  if (bw && d.weight) mut("dweight", a.dweight, pd, Kind::Param, false);
  if (bw && d.bias) mut("dbias", a.dbias, pd, Kind::Param, false);
  mut("out", a.out, d.dtype, Kind::Main, !bw || lrn);

  const Shape pshape = Shape::of({d.shape.dims[1]});
  const int64_t numel = d.shape.numel();
  std::vector<detail::Operand> ops;  // the tensors given, for the memory checks
  for (size_t k = 0; k < want.size(); ++k) {
    const Want& w = want[k];
    const Operand& o = w.op;
    if (o.data == nullptr && o.layout->rank == 0) {
      if (w.required && numel > 0)  // an empty problem launches nothing
        return invalid(label + ": " + o.role + " is required but was not given");
      continue;
    }
    if (o.dtype != w.dtype)
      return invalid(label + ": " + o.role + " dtype expected " + dname(w.dtype) + ", got " + dname(o.dtype));
    const Layout& l = *o.layout;
    if (w.kind == Kind::Main && !(Shape::of(l) == d.shape))
      return invalid(label + ": " + o.role + " shape expected " + d.shape.str() + ", got " + l.shape_str());
    if (w.kind == Kind::Param && !(Shape::of(l) == pshape))
      return invalid(label + ": " + o.role + " shape expected " + pshape.str() + " (one per channel), got " +
                     l.shape_str());
    if (w.kind == Kind::Stat && l.numel() != plan.rows())
      return invalid(label + ": " + o.role + " expected " + std::to_string(plan.rows()) + " elements (one per " +
                     (channel_group_mode(d) ? "(sample, group)" : "channel") + "), got " + std::to_string(l.numel()) +
                     " (shape " + l.shape_str() + ")");
    if (w.kind != Kind::Main && !l.is_contiguous())
      return invalid(label + ": " + o.role + " expected a contiguous tensor, got strides " + l.stride_str() +
                     " for shape " + l.shape_str());
    ops.push_back({o.role, o.data, o.dtype, o.layout, o.is_output, o.main && !lrn});
  }
  // Outputs (running stats included) may not alias anything, except an exact in-place output
  // over an input of the input's shape: each element is read before it is written by the same
  // thread (or, for rows on chip, staged first). Not local_response_norm: its window reads the
  // neighbouring channels.
  if (auto r = detail::check_operands(label, ops); !r)
    return lrn ? invalid(r.message() + "; local_response_norm reads neighbouring channels: no in-place") : r;
  return {};
}

/// Launches launch.template operator()<D>() (a cudaError_t) with the kernel dtype D of dt: the
/// family's f32, f16, bf16 and f64 instantiations, row and channel kernels alike. An error names
/// the op (label) and the dtype or the CUDA error.
template <class F>
Result<void> launch_by_dtype(DType dt, const std::string& label, F&& launch) {
  cudaError_t e = cudaSuccess;
  switch (dt) {
    case DType::f32:
      e = launch.template operator()<DType::f32>();
      break;
    case DType::f16:
      e = launch.template operator()<DType::f16>();
      break;
    case DType::bf16:
      e = launch.template operator()<DType::bf16>();
      break;
    case DType::f64:
      e = launch.template operator()<DType::f64>();
      break;
    default:
      return unsupported(label + ": no kernel for dtype " + dname(dt));
  }
  if (e != cudaSuccess)
    return make_error(Status::CudaError, label + ": kernel launch failed: " + cudaGetErrorString(e));
  return {};
}

Result<void> channel_run(const NormPlan& plan, bool allow_vec, cudaStream_t stream, Workspace ws, const NormArgs& a) {
  const NormDesc& d = plan.desc();
  const std::string label = op_label(d);
  const bool bw = d.direction == Direction::Backward;
  const bool lrn = d.op == NormOp::local_response_norm;
  const bool pgrad = bw && (a.dweight.data != nullptr || a.dbias.data != nullptr);
  const ChannelDims cd = channel_dims(d.shape);
  if (d.shape.numel() == 0) {
    // An empty batch: parameter gradients are sums over nothing, i.e. zeros (torch's result);
    // running statistics are left as they are (torch's batch_norm on an empty input).
    if (pgrad && cd.C > 0) {
      for (const TensorMut* t : {&a.dweight, &a.dbias}) {
        if (!t->data) continue;
        const cudaError_t e = cudaMemsetAsync(t->data, 0, static_cast<size_t>(cd.C) * size_in_bytes(t->dtype), stream);
        if (e != cudaSuccess)
          return make_error(Status::CudaError,
                            label + ": zeroing a parameter gradient failed: " + cudaGetErrorString(e));
      }
    }
    return {};
  }
  const bool uses_ws = !lrn && (d.training || pgrad);
  if (uses_ws && (ws.bytes < plan.workspace_size() || !ws.ptr))
    return make_error(Status::WorkspaceTooSmall,
                      label + ": workspace expected >= " + std::to_string(plan.workspace_size()) + " bytes, got " +
                          std::to_string(ws.bytes));
  ChannelGeometry g = channel_geometry(d, a, allow_vec, plan.config().smem_rows_bytes);
  detail::ChannelLaunch& p = g.p;
  const DType stats = norm_stats_dtype(d.dtype);
  p.op = d.op;
  p.training = lrn || d.training;
  p.group_mode = !lrn && channel_group_mode(d);
  p.G = p.group_mode ? channel_groups(d, cd.C) : 1;
  p.cpg = p.group_mode ? cd.C / p.G : 1;
  p.count = p.group_mode ? p.cpg * cd.S : cd.N * cd.S;
  if (g.smem_rows) {
    p.smem_rows = plan.config().smem_rows_bytes;
    p.chunks = detail::ChannelChunks{std::max<int64_t>(cd.S, 1), 1};  // one partial per (n, c)
  } else if (p.map == detail::ChannelMap::pixels) {
    p.chunks = detail::channel_pixel_chunks(p.N, p.S, p.C);
  } else {
    p.chunks = detail::channel_plane_chunks(p.N * p.C, p.S);
  }
  p.param_f32 = d.param_dtype == DType::f32 && d.dtype != DType::f32;
  p.weight = d.weight ? a.weight.data : nullptr;
  p.bias = d.bias ? a.bias.data : nullptr;
  p.running_mean = a.running_mean.data;
  p.running_var = a.running_var.data;
  p.save_mean = a.save_mean.data;
  p.save_rstd = a.save_rstd.data;
  p.mean_in = a.mean.data;
  p.rstd_in = a.rstd.data;
  p.dweight = a.dweight.data;
  p.dbias = a.dbias.data;
  p.eps = d.eps;
  p.momentum = d.momentum;
  p.lrn_size = d.lrn_size;
  p.lrn_alpha = d.lrn_alpha;
  p.lrn_beta = d.lrn_beta;
  p.lrn_k = d.lrn_k;
  if (uses_ws) {
    const detail::ChannelWorkspace w = detail::channel_workspace(cd.N, cd.C, cd.S, size_in_bytes(stats));
    char* base = static_cast<char*>(ws.ptr);
    // The on-chip backward writes per-(n, c) partials only for parameter gradients.
    if (!(g.smem_rows && bw && !pgrad)) p.partial = base + w.partial;
    if (d.training) p.coef = base + w.coef;  // evaluation: apply reads the running stats itself
    if (bw && p.group_mode && pgrad) p.rstat = base + w.rstat;
    if (!bw && d.op == NormOp::instance_norm && d.training && d.running_stats) p.gstat = base + w.gstat;
  }
  return launch_by_dtype(d.dtype, label, [&]<DType D>() {
    return bw ? detail::channel_launch<D, Direction::Backward>(p, stream)
              : detail::channel_launch<D, Direction::Forward>(p, stream);
  });
}
}  // namespace

Result<void> NormPlan::can_implement(const NormArgs& a) const {
  if (is_channel(desc_.op)) return channel_can_implement(*this, a);
  const std::string label = op_label(desc_);
  const bool bw = desc_.direction == Direction::Backward;
  const bool softmax = is_softmax(desc_.op);
  const DType stats = norm_stats_dtype(desc_.dtype);
  int lo = 0, hi = 0;
  reduced_range(desc_, &lo, &hi);

  // Tensors that must not be given for this descriptor: refused rather than ignored.
  auto must_not = [&](bool present, const char* role, const char* why) -> Result<void> {
    if (present) return invalid(label + ": " + role + " given but " + why);
    return {};
  };
  BARACUDA_TRY(must_not(given(a.mask) && desc_.mask == NormMask::none, "mask", "desc.mask is none"));
  BARACUDA_TRY(must_not(given(a.weight) && !desc_.weight, "weight", "desc.weight is false"));
  BARACUDA_TRY(must_not(given(a.bias) && !desc_.bias, "bias", "desc.bias is false"));
  BARACUDA_TRY(must_not(given(a.residual) && !desc_.residual, "residual", "desc.residual is false"));
  BARACUDA_TRY(must_not(given(a.residual_out) && !desc_.residual, "residual_out", "desc.residual is false"));
  BARACUDA_TRY(
      must_not(given(a.dweight) && !(bw && desc_.weight), "dweight", "it exists only for a backward with weight"));
  BARACUDA_TRY(must_not(given(a.dbias) && !(bw && desc_.bias), "dbias", "it exists only for a backward with bias"));
  BARACUDA_TRY(must_not(given(a.save_mean) && (bw || desc_.op != NormOp::layer_norm), "save_mean",
                        "only layer_norm's forward saves a mean"));
  BARACUDA_TRY(must_not(given(a.save_rstd) && (bw || softmax), "save_rstd", "only the norms' forward saves rstd"));
  BARACUDA_TRY(must_not(given(a.mean) && !(bw && desc_.op == NormOp::layer_norm), "mean",
                        "only layer_norm's backward reads a mean"));
  BARACUDA_TRY(must_not(given(a.rstd) && !(bw && !softmax), "rstd", "only the norms' backward read rstd"));
  const bool gumbel_fw = desc_.op == NormOp::gumbel_softmax && !bw;
  BARACUDA_TRY(must_not(given(a.noise) && !gumbel_fw, "noise", "only gumbel_softmax's forward reads noise"));
  BARACUDA_TRY(must_not(given(a.y_soft) && !(gumbel_fw && desc_.hard), "y_soft",
                        "only a hard gumbel_softmax forward writes it (the soft forward's out is the soft sample)"));

  // What this call uses, with its expected dtype and shape kind.
  enum class Kind { Main, Param, Stat, Mask };
  struct Want {
    Operand op;
    DType dtype;
    Kind kind;
    bool required;
  };
  std::vector<Want> want;
  auto ref = [&](const char* role, const TensorRef& t, DType dt, Kind k, bool req, bool main) {
    want.push_back({{role, t.data, t.dtype, &t.layout, false, main}, dt, k, req});
  };
  auto mut = [&](const char* role, const TensorMut& t, DType dt, Kind k, bool req, bool main) {
    want.push_back({{role, t.data, t.dtype, &t.layout, true, main}, dt, k, req});
  };
  const DType pd = desc_.param_dtype;
  if (!bw) {
    ref("x", a.x, desc_.dtype, Kind::Main, true, true);
    if (desc_.mask != NormMask::none)
      ref("mask", a.mask, desc_.mask == NormMask::boolean ? DType::b8 : desc_.dtype, Kind::Mask, true, false);
    if (desc_.residual) {
      ref("residual", a.residual, desc_.dtype, Kind::Main, true, true);
      mut("residual_out", a.residual_out, desc_.dtype, Kind::Main, true, true);
    }
    if (desc_.weight) ref("weight", a.weight, pd, Kind::Param, true, false);
    if (desc_.bias) ref("bias", a.bias, pd, Kind::Param, true, false);
    if (gumbel_fw) ref("noise", a.noise, desc_.dtype, Kind::Main, false, true);
    mut("out", a.out, desc_.dtype, Kind::Main, true, true);
    if (gumbel_fw && desc_.hard) mut("y_soft", a.y_soft, desc_.dtype, Kind::Main, false, true);
    if (desc_.op == NormOp::layer_norm) mut("save_mean", a.save_mean, stats, Kind::Stat, false, false);
    if (!softmax) mut("save_rstd", a.save_rstd, stats, Kind::Stat, false, false);
  } else {
    ref("dy", a.dy, desc_.dtype, Kind::Main, true, true);
    if (softmax && info(desc_.op).bw_reads_output()) {
      ref("y", a.y, desc_.dtype, Kind::Main, true, true);
      BARACUDA_TRY(must_not(given(a.x), "x", "this backward reads y, not x"));
    } else if (softmax) {  // normalize
      ref("x", a.x, desc_.dtype, Kind::Main, true, true);
    } else {
      ref("x", a.x, desc_.dtype, Kind::Main, true, true);
      if (desc_.op == NormOp::layer_norm) ref("mean", a.mean, stats, Kind::Stat, true, false);
      ref("rstd", a.rstd, stats, Kind::Stat, true, false);
      if (desc_.weight) ref("weight", a.weight, pd, Kind::Param, true, false);
      if (desc_.weight) mut("dweight", a.dweight, pd, Kind::Param, false, false);
      if (desc_.bias) mut("dbias", a.dbias, pd, Kind::Param, false, false);
    }
    mut("out", a.out, desc_.dtype, Kind::Main, true, true);
  }
  if (!bw) BARACUDA_TRY(must_not(given(a.dy) || given(a.y), "dy/y", "they are backward inputs"));
  if (bw && !info(desc_.op).bw_reads_output()) BARACUDA_TRY(must_not(given(a.y), "y", "this backward reads x, not y"));

  Shape pshape;
  pshape.rank = hi - lo;
  for (int i = lo; i < hi; ++i) pshape.dims[i - lo] = desc_.shape.dims[i];
  const int64_t numel = desc_.shape.numel();

  std::vector<detail::Operand> ops;  // the tensors given, for the memory checks
  for (size_t k = 0; k < want.size(); ++k) {
    const Want& w = want[k];
    const Operand& o = w.op;
    const bool present = o.data != nullptr || o.layout->rank != 0;
    if (!present) {
      if (w.required && numel > 0) return invalid(label + ": " + o.role + " is required but was not given");
      continue;
    }
    if (o.dtype != w.dtype)
      return invalid(label + ": " + o.role + " dtype expected " + dname(w.dtype) + ", got " + dname(o.dtype));
    const Layout& l = *o.layout;
    if (w.kind == Kind::Main && !(Shape::of(l) == desc_.shape))
      return invalid(label + ": " + o.role + " shape expected " + desc_.shape.str() + ", got " + l.shape_str());
    if (w.kind == Kind::Param && !(Shape::of(l) == pshape))
      return invalid(label + ": " + o.role + " shape expected " + pshape.str() + " (the normalized shape), got " +
                     l.shape_str());
    if (w.kind == Kind::Mask && !(Shape::of(l) == desc_.mask_shape))
      return invalid(label + ": mask shape expected " + desc_.mask_shape.str() + ", got " + l.shape_str());
    if (w.kind == Kind::Stat && l.numel() != rows_)
      return invalid(label + ": " + o.role + " expected " + std::to_string(rows_) + " elements (one per row), got " +
                     std::to_string(l.numel()) + " (shape " + l.shape_str() + ")");
    if ((w.kind == Kind::Param || w.kind == Kind::Stat) && !l.is_contiguous())
      return invalid(label + ": " + o.role + " expected a contiguous tensor, got strides " + l.stride_str() +
                     " for shape " + l.shape_str());
    ops.push_back({o.role, o.data, o.dtype, o.layout, o.is_output, o.main});
    if (auto r = detail::byte_range(label, ops.back()); !r) return r.error();  // negative strides first
    if (w.kind == Kind::Main && numel > 1 && merged_stride(l, lo, hi) < 0)
      return unsupported(label + ": " + o.role + " strides " + l.stride_str() +
                         " do not merge the normalized dims of " + l.shape_str() +
                         " into one strided dim (pass a contiguous tensor)");
  }
  // Outputs may not alias anything except exactly an input of the input's shape (in place: every
  // element is read before it is written, by the thread that writes it).
  BARACUDA_TRY(detail::check_operands(label, ops));
  return {};
}

// ---- launch --------------------------------------------------------------------------------------
namespace {
struct Geometry {
  detail::NormLaunch p;
  bool vec_ok = true;
  bool columns = false;  ///< the reduced dim is strided and the innermost row dim is unit-stride
};

/// Rows at least this many take the column mapping when it applies (one thread a row; below it
/// too few threads would run). A fixed number: the launch shape never depends on the device.
constexpr int64_t kColumnMinRows = 4096;

/// Row dims (coalesced) and the reduced-dim stride of every slot, plus whether the 16-byte
/// path applies (unit stride, vector-aligned row starts and pointers, whole vectors per row).
Geometry geometry(const NormDesc& d, const NormArgs& a, int64_t n) {
  Geometry g;
  int lo = 0, hi = 0;
  reduced_range(d, &lo, &hi);
  std::array<const void*, detail::kNumSlots> ptrs{};
  auto lay = slot_layouts(d, a, &ptrs);
  // The mask, expanded to the input's shape (stride 0 where it broadcasts).
  Layout mask_l;
  if (d.mask != NormMask::none && a.mask.data) {
    mask_l.rank = d.shape.rank;
    const int off = d.shape.rank - a.mask.layout.rank;
    for (int i = 0; i < d.shape.rank; ++i) {
      mask_l.shape[i] = d.shape.dims[i];
      const int mi = i - off;
      mask_l.stride[i] = (mi < 0 || a.mask.layout.shape[mi] == 1) ? 0 : a.mask.layout.stride[mi];
    }
    lay[detail::kMask] = &mask_l;
    ptrs[detail::kMask] = a.mask.data;
  }
  const int vec = detail::norm_vec(size_in_bytes(d.dtype));
  // Row dims, outer to inner, without size-1 dims, coalesced where every present slot allows.
  detail::RowDims<detail::kNumSlots> dims;
  std::array<bool, detail::kNumSlots> used{};
  for (int t = 0; t < detail::kNumSlots; ++t) used[t] = lay[t] != nullptr;
  for (int i = 0; i < d.shape.rank; ++i) {
    if ((i >= lo && i < hi) || d.shape.dims[i] == 1) continue;
    std::array<int64_t, detail::kNumSlots> stride{};
    for (int t = 0; t < detail::kNumSlots; ++t) stride[t] = lay[t] ? lay[t]->stride[i] : 0;
    dims.add(d.shape.dims[i], stride, used);
  }
  dims.write(g.p);
  g.vec_ok = n % vec == 0 && n > 0;
  for (int t = 0; t < detail::kNumSlots; ++t) {
    if (!lay[t]) continue;
    g.p.col_stride[t] = merged_stride(*lay[t], lo, hi);
    if (t == detail::kMask) continue;  // read by scalar loads, whatever the variant
    if (g.p.col_stride[t] != 1 && n > 1) g.vec_ok = false;
    if (reinterpret_cast<uintptr_t>(ptrs[t]) % 16 != 0) g.vec_ok = false;
    for (const auto& dm : dims.dims)
      if (dm.stride[t] % vec != 0) g.vec_ok = false;
  }
  for (const void* q : {a.weight.data, a.bias.data})
    if (q && reinterpret_cast<uintptr_t>(q) % 16 != 0) g.vec_ok = false;
  // Column mapping: softmax over a non-innermost axis (or a norm of a batch-innermost tensor).
  // One thread a row walks its elements; adjacent threads hold adjacent rows, so each load of
  // a warp is one contiguous segment, where a group per row would gather with stride.
  if (!g.vec_ok && n > 1 && !dims.dims.empty()) {
    g.columns = true;
    for (int t = 0; t < detail::kNumSlots; ++t)
      if (t != detail::kMask && lay[t] && (g.p.col_stride[t] == 1 || dims.dims.back().stride[t] != 1)) g.columns = false;
    int64_t rows = 1;
    for (const auto& dm : dims.dims) rows *= dm.size;
    if (rows < kColumnMinRows) g.columns = false;
  }
  return g;
}

}  // namespace

std::string NormPlan::layout_for(const NormArgs& a) const {
  if (rows_ * n_ == 0) return "empty";
  if (is_channel(desc_.op)) return channel_geometry(desc_, a, allow_vectorized_, cfg_.smem_rows_bytes).name;
  const Geometry g = geometry(desc_, a, n_);
  const bool vec = allow_vectorized_ && g.vec_ok;
  if (g.columns && !(desc_.direction == Direction::Backward && (a.dweight.data || a.dbias.data)))
    return std::string("column-") +
           (n_ <= std::min(detail::norm_big_items(desc_.op, desc_.direction, size_in_bytes(desc_.dtype)), 16)
                ? "registers"
                : "streaming") +
           "-scalar";
  if (desc_.direction == Direction::Backward && vec && (a.dweight.data || a.dbias.data)) {
    const DenseRows d = dense_rows(desc_.op, desc_.dtype, n_, cfg_, cfg_.slots, g.p.row_ndim);
    if (d.dense) return d.ahead ? "cta-dense-rows-ahead-vec16" : "cta-dense-rows-vec16";
  }
  return std::string(cfg_.cluster > 1 ? "cluster" : (cfg_.tpr > 32 ? "cta" : (cfg_.tpr == 32 ? "warp" : "subwarp"))) +
         "-" + (cfg_.cached ? "registers" : "streaming") + "-" + (vec ? "vec16" : "scalar");
}

Result<void> NormPlan::run(cudaStream_t stream, Workspace ws, const NormArgs& a) const {
  BARACUDA_TRY(can_implement(a));
  if (is_channel(desc_.op)) return channel_run(*this, allow_vectorized_, stream, ws, a);
  const std::string label = op_label(desc_);
  const bool bw = desc_.direction == Direction::Backward;
  const bool want_pgrad = bw && (a.dweight.data != nullptr || a.dbias.data != nullptr);
  if (rows_ * n_ == 0) {
    // An empty batch: parameter gradients are sums over no rows, i.e. zeros (torch's result).
    if (want_pgrad && n_ > 0) {
      for (const TensorMut* t : {&a.dweight, &a.dbias}) {
        if (!t->data) continue;
        const cudaError_t e = cudaMemsetAsync(t->data, 0, static_cast<size_t>(n_) * size_in_bytes(t->dtype), stream);
        if (e != cudaSuccess)
          return make_error(Status::CudaError,
                            label + ": zeroing a parameter gradient failed: " + cudaGetErrorString(e));
      }
    }
    return {};
  }
  if (want_pgrad && (ws.bytes < workspace_bytes_ || !ws.ptr))
    return make_error(Status::WorkspaceTooSmall, label + ": workspace expected >= " + std::to_string(workspace_bytes_) +
                                                     " bytes, got " + std::to_string(ws.bytes));
  Geometry g = geometry(desc_, a, n_);
  detail::NormLaunch& p = g.p;
  p.op = desc_.op;
  p.rows = rows_;
  p.n = n_;
  std::array<const void*, detail::kNumSlots> ptrs{};
  slot_layouts(desc_, a, &ptrs);
  p.mask = desc_.mask != NormMask::none ? a.mask.data : nullptr;
  p.mask_kind = desc_.mask;
  p.in[0] = ptrs[detail::kIn0];
  p.in[1] = ptrs[detail::kIn1];
  p.out[0] = const_cast<void*>(ptrs[detail::kOut0]);
  p.out[1] = const_cast<void*>(ptrs[detail::kOut1]);
  p.weight = desc_.weight ? a.weight.data : nullptr;
  p.bias = desc_.bias ? a.bias.data : nullptr;
  p.param_f32 = (desc_.weight || desc_.bias) && desc_.param_dtype == DType::f32 && desc_.dtype != DType::f32;
  p.mean_in = a.mean.data;
  p.rstd_in = a.rstd.data;
  p.mean_out = a.save_mean.data;
  p.rstd_out = a.save_rstd.data;
  p.dweight = a.dweight.data;
  p.dbias = a.dbias.data;
  p.partial = want_pgrad ? ws.ptr : nullptr;
  p.slots = want_pgrad ? cfg_.slots : 0;
  p.eps = desc_.eps;
  if (desc_.op == NormOp::normalize) p.op_args[0] = desc_.p;
  if (desc_.op == NormOp::gumbel_softmax) {
    p.op_args[0] = desc_.tau;
    p.op_args[1] = desc_.hard ? 1.0 : 0.0;
    p.seed = a.rng.seed;
    p.offset = a.rng.offset;
  }
  set_launch_shape(p, cfg_);
  p.vec = allow_vectorized_ && g.vec_ok;
  if (g.columns && !want_pgrad) {  // the parameter-gradient partition keeps the plan's shape
    p.tpr = 1;
    p.block = 128;
    p.big = true;
    p.cluster = 1;
  }
  return launch_by_dtype(desc_.dtype, label, [&]<DType D>() {
    return bw ? detail::norm_launch<D, Direction::Backward>(p, stream)
              : detail::norm_launch<D, Direction::Forward>(p, stream);
  });
}

// ---- convenience ---------------------------------------------------------------------------------
namespace {
std::string desc_key(const NormDesc& d) {
  std::string k;
  auto put = [&](const auto& v) { k.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  put(d.op);
  put(d.direction);
  put(d.dtype);
  put(d.param_dtype);
  put(d.shape.rank);
  k.append(reinterpret_cast<const char*>(d.shape.dims.data()),
           sizeof(int64_t) * static_cast<size_t>(std::max(d.shape.rank, 0)));
  put(d.axis);
  put(d.norm_ndim);
  const bool flags[] = {d.weight, d.bias, d.residual};
  put(flags);
  put(d.eps);
  put(d.p);
  put(d.tau);
  put(d.hard);
  put(d.mask);
  put(d.mask_shape.rank);
  k.append(reinterpret_cast<const char*>(d.mask_shape.dims.data()),
           sizeof(int64_t) * static_cast<size_t>(std::clamp(d.mask_shape.rank, 0, kMaxRank)));
  put(d.num_groups);
  const bool channel_flags[] = {d.training, d.running_stats};
  put(channel_flags);
  put(d.momentum);
  put(d.lrn_size);
  put(d.lrn_alpha);
  put(d.lrn_beta);
  put(d.lrn_k);
  return k;
}
}  // namespace

Result<void> norm(cudaStream_t stream, const NormDesc& desc, const NormArgs& args, Workspace ws,
                  const PlanPreference& pref) {
  if (desc.shape.rank < 0 || desc.shape.rank > kMaxRank)
    return invalid(op_label(desc) + ": input rank expected 0..8, got " + std::to_string(desc.shape.rank));
  auto plan = detail::cached_plan<NormPlan>(desc_key(desc), pref,
                                            [&](const Target& t) { return NormPlan::select(t, desc, pref); });
  if (!plan) return plan.error();
  return (*plan)->run(stream, ws, args);
}

}  // namespace baracuda
