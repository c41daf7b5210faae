// LossPlan: the table, descriptor validation, launch shape, argument checks and the launch
// sequence of the loss family (kernels: class_kernel.cuh, pointwise_kernel.cuh, loss_sum.cuh).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "baracuda/ops/elementwise.hpp"  // broadcast_shapes
#include "baracuda/ops/loss.hpp"
#include "core/impl_list.hpp"
#include "core/operands.hpp"
#include "core/plan_common.hpp"
#include "core/row_dims.hpp"
#include "ops/elementwise/ew_registry.hpp"  // ew_sum_to_shape: gradients of broadcast inputs
#include "ops/loss/linear_ce.hpp"
#include "ops/loss/loss_launch.hpp"

namespace baracuda {

// ---- the table -------------------------------------------------------------------------------------
namespace {
const LossOpInfo kOps[] = {
#define BARACUDA_LOSS(name, kind, fw, bw, inputs, grads, params, tol) \
  {LossOp::name, #name, LossKind::kind, DTypeSet(fw), DTypeSet(bw), inputs, grads, params, tol},
#include "baracuda/ops/loss_ops.def"
#undef BARACUDA_LOSS
};

using detail::dtype_list;
using detail::invalid;
using detail::unsupported;

std::string dname(DType t) { return std::string(name(t)); }

/// Item k of a comma-separated column ("" past the end).
std::string item(const char* list, int k) {
  std::string_view s(list);
  for (int i = 0; !s.empty(); ++i) {
    const size_t c = s.find(',');
    const std::string_view it = s.substr(0, c);
    if (i == k) return std::string(it);
    if (c == std::string_view::npos) break;
    s.remove_prefix(c + 1);
  }
  return {};
}
int count(const char* list) {
  if (*list == '\0') return 0;
  return 1 + static_cast<int>(std::count(list, list + std::strlen(list), ','));
}
std::string strip_optional(std::string s) {
  if (!s.empty() && s.back() == '?') s.pop_back();
  return s;
}

std::string op_label(const LossDesc& d) {
  return std::string(info(d.op).name) + (d.direction == Direction::Backward ? "_backward" : "");
}
bool is_index_dtype(DType t) { return t == DType::s32 || t == DType::s64; }

/// Ops whose target keeps its own dtype (class indices, or cross_entropy's probabilities); the
/// other ops' targets have the input's dtype.
bool has_index_target(LossOp op) {
  return info(op).kind == LossKind::classes || op == LossOp::linear_cross_entropy || op == LossOp::multi_margin_loss ||
         op == LossOp::multilabel_margin_loss;
}
}  // namespace

std::span<const LossOpInfo> loss_ops() { return kOps; }
const LossOpInfo& info(LossOp op) { return kOps[static_cast<int>(op)]; }
std::optional<LossOp> loss_op_from_name(std::string_view n) {
  for (const auto& r : kOps)
    if (n == r.name) return r.op;
  return std::nullopt;
}
DType loss_stats_dtype(DType dtype) { return dtype == DType::f64 ? DType::f64 : DType::f32; }

int LossOpInfo::num_inputs() const { return count(inputs); }
std::string LossOpInfo::input_name(int k) const { return strip_optional(item(inputs, k)); }
bool LossOpInfo::input_optional(int k) const {
  const std::string s = item(inputs, k);
  return !s.empty() && s.back() == '?';
}
int LossOpInfo::input_index(std::string_view n) const {
  for (int k = 0; k < num_inputs(); ++k)
    if (input_name(k) == n) return k;
  return -1;
}
int LossOpInfo::num_grads() const { return count(grads); }
std::string LossOpInfo::grad_name(int g) const { return item(grads, g); }
int LossOpInfo::grad_input(int g) const { return input_index(grad_name(g)); }
int LossOpInfo::num_params() const { return count(params); }
std::string LossOpInfo::param_name(int k) const {
  const std::string s = item(params, k);
  return s.substr(0, s.find('='));
}
double LossOpInfo::param_default(int k) const {
  const std::string s = item(params, k);
  const size_t eq = s.find('=');
  return eq == std::string::npos ? 0.0 : std::strtod(s.c_str() + eq + 1, nullptr);
}
int LossOpInfo::param_index(std::string_view n) const {
  for (int k = 0; k < num_params(); ++k)
    if (param_name(k) == n) return k;
  return -1;
}

const char* to_string(Reduction r) {
  switch (r) {
    case Reduction::none:
      return "none";
    case Reduction::mean:
      return "mean";
    case Reduction::sum:
      return "sum";
    case Reduction::batchmean:
      return "batchmean";
  }
  return "?";
}
std::optional<Reduction> reduction_from_name(std::string_view n) {
  for (Reduction r : {Reduction::none, Reduction::mean, Reduction::sum, Reduction::batchmean})
    if (n == to_string(r)) return r;
  return std::nullopt;
}

// ---- descriptor ----------------------------------------------------------------------------------------
namespace {
void fill_defaults(LossDesc& d) {
  const auto& in = info(d.op);
  d.params = {};
  for (int k = 0; k < in.num_params() && k < kLossMaxParams; ++k) d.params[k] = in.param_default(k);
}
/// The input's shape without the class axis (axis 1, or 0 for an unbatched [C] input).
Shape row_shape(const Shape& input) {
  Shape s;
  if (input.rank < 1) return s;
  const int cdim = input.rank >= 2 ? 1 : 0;
  for (int i = 0; i < input.rank; ++i)
    if (i != cdim) s.dims[s.rank++] = input.dims[i];
  return s;
}
int class_dim(const Shape& input) { return input.rank >= 2 ? 1 : 0; }
}  // namespace

LossDesc LossDesc::make(LossOp op, DType dt, std::initializer_list<Shape> shapes, Reduction r, Direction dir) {
  LossDesc d;
  d.op = op;
  d.direction = dir;
  d.dtype = dt;
  d.reduction = r;
  d.present = 0;
  int k = 0;
  for (const Shape& s : shapes) {
    if (k >= kLossMaxInputs) break;
    d.shapes[k] = s;
    d.present |= uint8_t(1u << k);
    ++k;
  }
  fill_defaults(d);
  return d;
}

LossDesc LossDesc::cross_entropy(DType dt, const Shape& input, DType target_dtype, bool weight, Reduction r,
                                 int64_t ignore_index, double label_smoothing, Direction dir) {
  LossDesc d;
  d.op = LossOp::cross_entropy;
  d.direction = dir;
  d.dtype = dt;
  d.reduction = r;
  d.target_dtype = target_dtype;
  d.shapes[0] = input;
  d.shapes[1] = is_index_dtype(target_dtype) ? row_shape(input) : input;
  d.present = 0b011;
  if (weight) {
    d.shapes[2] = Shape::of({input.rank >= 1 ? input.dims[class_dim(input)] : 0});
    d.present |= 0b100;
  }
  fill_defaults(d);
  d.params[0] = static_cast<double>(ignore_index);
  d.params[1] = label_smoothing;
  return d;
}

LossDesc LossDesc::nll_loss(DType dt, const Shape& input, DType target_dtype, bool weight, Reduction r,
                            int64_t ignore_index, Direction dir) {
  LossDesc d = cross_entropy(dt, input, target_dtype, weight, r, ignore_index, 0.0, dir);
  d.op = LossOp::nll_loss;
  fill_defaults(d);
  d.params[0] = static_cast<double>(ignore_index);
  return d;
}

LossDesc LossDesc::linear_cross_entropy(DType dt, int64_t tokens, int64_t hidden, int64_t vocab, DType target_dtype,
                                        Reduction r, int64_t ignore_index, double label_smoothing, int64_t chunk_tokens,
                                        Direction dir, bool class_weight) {
  LossDesc d = make(LossOp::linear_cross_entropy, dt,
                    {Shape::of({tokens, hidden}), Shape::of({vocab, hidden}), Shape::of({tokens})}, r, dir);
  if (class_weight) {
    d.shapes[3] = Shape::of({vocab});
    d.present |= 0b1000;
  }
  d.target_dtype = target_dtype;
  d.params[0] = static_cast<double>(ignore_index);
  d.params[1] = label_smoothing;
  d.params[2] = static_cast<double>(chunk_tokens);
  return d;
}

Result<void> LossDesc::set_param(std::string_view pname, double value) {
  const auto& in = info(op);
  const int k = in.param_index(pname);
  if (k < 0 || k >= kLossMaxParams)
    return invalid(std::string(in.name) + ": unknown parameter '" + std::string(pname) +
                   "' (expected one of: " + (*in.params ? std::string(in.params) : std::string("none")) + ")");
  params[k] = value;
  return {};
}

double LossDesc::param(std::string_view pname) const {
  const int k = info(op).param_index(pname);
  return k < 0 || k >= kLossMaxParams ? std::nan("") : params[k];
}

// ---- select ------------------------------------------------------------------------------------------
namespace {
using detail::check_shape;

Result<void> check_flag(const std::string& label, const LossDesc& d, const char* pname) {
  const double v = d.param(pname);
  if (v != 0.0 && v != 1.0) return invalid(label + ": " + pname + " expected 0 or 1, got " + std::to_string(v));
  return {};
}

Result<void> check_classes(const LossDesc& d) {
  const std::string label = op_label(d);
  const bool ce = d.op == LossOp::cross_entropy;
  const Shape& x = d.shapes[0];
  BARACUDA_TRY(check_shape(label, "input", x));
  if (x.rank < 1)
    return invalid(label + ": input rank expected >= 1 ([C], [N, C] or [N, C, d1, ...]), got a 0-dim input");
  if ((d.present & 0b011) != 0b011) return invalid(label + ": input and target are required");
  const int cdim = class_dim(x);
  const int64_t C = x.dims[cdim];
  const bool probs = !is_index_dtype(d.target_dtype);
  if (probs && !ce)
    return invalid(label + ": target dtype expected int32 or int64 (class indices), got " + dname(d.target_dtype));
  if (probs && d.target_dtype != d.dtype)
    return invalid(label + ": target dtype expected int32/int64 (class indices) or " + dname(d.dtype) +
                   " (class probabilities), got " + dname(d.target_dtype));
  const Shape want_t = probs ? x : row_shape(x);
  if (!(d.shapes[1] == want_t))
    return invalid(label + ": target shape expected " + want_t.str() +
                   (probs ? " (probabilities: the input's shape)" : " (the input's shape without the class dim)") +
                   ", got " + d.shapes[1].str());
  if (d.has(2) && !(d.shapes[2] == Shape::of({C})))
    return invalid(label + ": weight shape expected [" + std::to_string(C) + "] (one per class), got " +
                   d.shapes[2].str());
  if (d.has(3)) return invalid(label + ": takes 3 inputs (input, target, weight), got a 4th");
  const int64_t rows = row_shape(x).numel();
  if (C == 0 && rows > 0)
    return invalid(label + ": input.shape[" + std::to_string(cdim) + "] (classes) expected >= 1, got 0 with " +
                   std::to_string(rows) + " rows");
  const double ii = d.params[0];
  if (!std::isfinite(ii) || ii != std::floor(ii) || std::fabs(ii) > 9.0e15)
    return invalid(label + ": ignore_index expected an integer, got " + std::to_string(ii));
  if (ce) {
    const double ls = d.params[1];
    if (!(ls >= 0.0 && ls <= 1.0))
      return invalid(label + ": label_smoothing expected in [0, 1], got " + std::to_string(ls));
  }
  if (d.reduction == Reduction::batchmean)
    return invalid(label + ": reduction expected none, mean or sum, got batchmean (kl_div only)");
  if (d.fused_grad && !ce)
    return invalid(label + ": fused_grad expected only for cross_entropy and linear_cross_entropy");
  if (d.fused_grad && d.direction == Direction::Backward && d.reduction == Reduction::none)
    return invalid(label +
                   ": fused_grad's backward rescales the forward's gradient by one dy: reduction expected mean or "
                   "sum, got none");
  return {};
}

Result<void> check_pointwise(const LossDesc& d, Shape* bcast) {
  const auto& in = info(d.op);
  const std::string label = op_label(d);
  std::vector<Shape> present;
  for (int k = 0; k < kLossMaxInputs; ++k) {
    if (!d.has(k)) continue;
    if (k >= in.num_inputs())
      return invalid(label + ": takes " + std::to_string(in.num_inputs()) + " inputs (" + in.inputs + "), got input " +
                     std::to_string(k));
    BARACUDA_TRY(check_shape(label, in.input_name(k).c_str(), d.shapes[k]));
    present.push_back(d.shapes[k]);
  }
  for (int k = 0; k < in.num_inputs(); ++k)
    if (!d.has(k) && !in.input_optional(k)) return invalid(label + ": " + in.input_name(k) + " is required");
  auto b = broadcast_shapes(label, present);
  if (!b) return b.error();
  *bcast = *b;
  if (d.reduction == Reduction::batchmean && d.op != LossOp::kl_div)
    return invalid(label + ": reduction expected none, mean or sum, got batchmean (kl_div only)");
  if (d.fused_grad) return invalid(label + ": fused_grad expected only for cross_entropy and linear_cross_entropy");
  for (int k = 0; k < in.num_params(); ++k)
    if (std::isnan(d.params[k])) return invalid(label + ": " + in.param_name(k) + " expected a number, got NaN");
  switch (d.op) {
    case LossOp::smooth_l1_loss:
      if (!(d.params[0] >= 0))
        return invalid(label + ": beta expected >= 0 (smooth_l1_loss does not support negative values), got " +
                       std::to_string(d.params[0]));
      break;
    case LossOp::huber_loss:
      if (!(d.params[0] > 0))
        return invalid(label + ": delta expected > 0 (huber_loss does not support non-positive values), got " +
                       std::to_string(d.params[0]));
      break;
    case LossOp::kl_div:
      BARACUDA_TRY(check_flag(label, d, "log_target"));
      break;
    case LossOp::poisson_nll_loss:
      BARACUDA_TRY(check_flag(label, d, "log_input"));
      BARACUDA_TRY(check_flag(label, d, "full"));
      break;
    case LossOp::gaussian_nll_loss:
      BARACUDA_TRY(check_flag(label, d, "full"));
      if (!(d.params[1] >= 0)) return invalid(label + ": eps expected >= 0, got " + std::to_string(d.params[1]));
      break;
    default:
      break;
  }
  return {};
}

/// How a rows op's inputs are shaped (loss_ops.def order).
struct RowsInputs {
  unsigned elem = 0;      ///< bit k: input k is floating and broadcasts to [..., D]
  int row_target = -1;    ///< a per-row target (the broadcast shape without D)
  int labels = -1;        ///< multilabel_margin's class indices (the broadcast shape)
  int class_weight = -1;  ///< multi_margin's [D] weight (indexed by the target)
};
RowsInputs rows_inputs(LossOp op) {
  switch (op) {
    case LossOp::cosine_embedding_loss:
      return {0b011, 2, -1, -1};
    case LossOp::triplet_margin_loss:
      return {0b111, -1, -1, -1};
    case LossOp::multi_margin_loss:
      return {0b001, 1, -1, 2};
    case LossOp::multilabel_margin_loss:
      return {0b001, -1, 1, -1};
    default:  // multilabel_soft_margin_loss: input, target and weight all broadcast
      return {0b111, -1, -1, -1};
  }
}
/// The broadcast shape without its last dim (the rows), and its element count.
Shape without_last(const Shape& s) {
  Shape r;
  for (int i = 0; i + 1 < s.rank; ++i) r.dims[r.rank++] = s.dims[i];
  return r;
}

Result<void> check_rows(const LossDesc& d, Shape* bcast) {
  const auto& in = info(d.op);
  const std::string label = op_label(d);
  const RowsInputs ri = rows_inputs(d.op);
  std::vector<Shape> elem;
  for (int k = 0; k < kLossMaxInputs; ++k) {
    if (!d.has(k)) continue;
    if (k >= in.num_inputs())
      return invalid(label + ": takes " + std::to_string(in.num_inputs()) + " inputs (" + in.inputs + "), got input " +
                     std::to_string(k));
    BARACUDA_TRY(check_shape(label, in.input_name(k).c_str(), d.shapes[k]));
    if ((ri.elem >> k) & 1) elem.push_back(d.shapes[k]);
  }
  for (int k = 0; k < in.num_inputs(); ++k)
    if (!d.has(k) && !in.input_optional(k)) return invalid(label + ": " + in.input_name(k) + " is required");
  auto b = broadcast_shapes(label, elem);
  if (!b) return b.error();
  *bcast = *b;
  if (b->rank < 1)
    return invalid(label + ": inputs expected rank >= 1 (the loss reduces the last dim), got 0-dim inputs");
  const int64_t D = b->dims[b->rank - 1];
  const Shape rows = without_last(*b);
  // cosine_embedding: each input's squared norm is over its own last dim (torch), so a last dim of 1
  // broadcast to D is not the same loss (the row would count its one element D times).
  if (d.op == LossOp::cosine_embedding_loss)
    for (int k = 0; k < 2; ++k) {
      const Shape& s = d.shapes[k];
      const int64_t last = s.rank > 0 ? s.dims[s.rank - 1] : 1;  // a 0-dim input: one element
      if (last != D)
        return invalid(label + ": " + in.input_name(k) + ".shape[-1] expected " + std::to_string(D) +
                       " (both inputs' embedding size; the norms do not broadcast), got shape " + s.str());
    }
  if (ri.row_target >= 0 && !(d.shapes[ri.row_target] == rows))
    return invalid(label + ": target shape expected " + rows.str() +
                   " (one per row: the inputs' broadcast shape without the last dim), got " +
                   d.shapes[ri.row_target].str());
  if (ri.labels >= 0 && !(d.shapes[ri.labels] == *b))
    return invalid(label + ": target shape expected " + b->str() +
                   " (the input's: class indices, each row's list ended by a negative one), got " +
                   d.shapes[ri.labels].str());
  if (ri.class_weight >= 0 && d.has(ri.class_weight) && !(d.shapes[ri.class_weight] == Shape::of({D})))
    return invalid(label + ": weight shape expected [" + std::to_string(D) + "] (one per class), got " +
                   d.shapes[ri.class_weight].str());
  const bool index_target = ri.row_target >= 0 ? d.op == LossOp::multi_margin_loss : ri.labels >= 0;
  if (index_target && !is_index_dtype(d.target_dtype))
    return invalid(label + ": target dtype expected int32 or int64 (class indices), got " + dname(d.target_dtype));
  if (index_target && D == 0 && rows.numel() > 0)
    return invalid(label + ": input.shape[-1] (classes) expected >= 1, got 0 with " + std::to_string(rows.numel()) +
                   " rows");
  for (int k = 0; k < in.num_params(); ++k)
    if (std::isnan(d.params[k])) return invalid(label + ": " + in.param_name(k) + " expected a number, got NaN");
  if (d.op == LossOp::triplet_margin_loss) {
    const double pn = d.param("p");
    if (!(pn > 0.0 && std::isfinite(pn)))
      return invalid(label + ": p expected a finite norm degree > 0, got " + std::to_string(pn));
    BARACUDA_TRY(check_flag(label, d, "swap"));
  }
  if (d.op == LossOp::multi_margin_loss) {
    const double pn = d.param("p");
    if (pn != 1.0 && pn != 2.0)
      return invalid(label + ": p expected 1 or 2 (torch supports only these), got " + std::to_string(pn));
  }
  if (d.reduction == Reduction::batchmean)
    return invalid(label + ": reduction expected none, mean or sum, got batchmean (kl_div only)");
  if (d.fused_grad) return invalid(label + ": fused_grad expected only for cross_entropy and linear_cross_entropy");
  return {};
}

Result<void> check_linear(const LossDesc& d) {
  const std::string label = op_label(d);
  if ((d.present & 0b111) != 0b111) return invalid(label + ": input, weight and target are required");
  if (d.present >> 4) return invalid(label + ": takes at most 4 inputs (input, weight, target, class_weight)");
  const Shape &x = d.shapes[0], &w = d.shapes[1], &t = d.shapes[2];
  BARACUDA_TRY(check_shape(label, "input", x));
  BARACUDA_TRY(check_shape(label, "weight", w));
  BARACUDA_TRY(check_shape(label, "target", t));
  if (x.rank != 2) return invalid(label + ": input expected rank 2 ([N, H] hidden states), got shape " + x.str());
  if (w.rank != 2)
    return invalid(label + ": weight expected rank 2 ([V, H], nn.Linear's layout), got shape " + w.str());
  if (w.dims[1] != x.dims[1])
    return invalid(label + ": weight.shape[1] expected " + std::to_string(x.dims[1]) + " (input.shape[1], the hidden " +
                   "size), got " + std::to_string(w.dims[1]));
  if (!(t == Shape::of({x.dims[0]})))
    return invalid(label + ": target shape expected [" + std::to_string(x.dims[0]) +
                   "] (one class index per row), got " + t.str());
  if (!is_index_dtype(d.target_dtype))
    return invalid(label + ": target dtype expected int32 or int64 (class indices), got " + dname(d.target_dtype));
  if (d.has(3) && !(d.shapes[3] == Shape::of({w.dims[0]})))
    return invalid(label + ": class_weight shape expected [" + std::to_string(w.dims[0]) +
                   "] (one weight per class, weight.shape[0]), got " + d.shapes[3].str());
  if (w.dims[0] == 0 && x.dims[0] > 0)
    return invalid(label + ": weight.shape[0] (classes) expected >= 1, got 0 with " + std::to_string(x.dims[0]) +
                   " rows");
  for (int64_t v : {x.dims[0], x.dims[1], w.dims[0]})
    if (v > INT32_MAX)
      return invalid(label + ": N, H and V expected <= 2^31-1 (GEMM sizes), got input " + x.str() + ", weight " +
                     w.str());
  const double ii = d.params[0];
  if (!std::isfinite(ii) || ii != std::floor(ii) || std::fabs(ii) > 9.0e15)
    return invalid(label + ": ignore_index expected an integer, got " + std::to_string(ii));
  const double ls = d.params[1];
  if (!(ls >= 0.0 && ls <= 1.0))
    return invalid(label + ": label_smoothing expected in [0, 1], got " + std::to_string(ls));
  const double ct = d.params[2];
  if (!(ct >= 0.0 && ct == std::floor(ct) && ct <= double(INT32_MAX)))
    return invalid(label + ": chunk_tokens expected an integer >= 0 (0: the plan's choice), got " + std::to_string(ct));
  if (d.reduction == Reduction::batchmean)
    return invalid(label + ": reduction expected none, mean or sum, got batchmean (kl_div only)");
  if (d.fused_grad && d.direction == Direction::Backward)
    return invalid(label + ": fused_grad expected only with the forward (the backward always writes gradients)");
  return {};
}

Result<void> native_accepts(const Target& target, const LossDesc& d, const PlanPreference& pref) {
  const auto& in = info(d.op);
  const std::string label = op_label(d);
  if (pref.backend != Backend::Any && pref.backend != Backend::Native)
    return unsupported(label + ": preference backend=" + to_string(pref.backend) +
                       " cannot be honoured (losses have only the native backend)");
  if (pref.tf32 == Tristate::Require)
    return unsupported(label + ": preference tf32=Require cannot be honoured (no TF32 mode in losses)");
  if (pref.reduced_precision_reduction == Tristate::Require)
    return unsupported(label +
                       ": preference reduced_precision_reduction=Require cannot be honoured (sums accumulate in "
                       "f32, f64 for f64)");
  if (target.sm < 80)
    return unsupported(label + ": target sm_" + std::to_string(target.sm) + " is below the minimum sm_80");
  const DTypeSet allowed = d.direction == Direction::Backward ? in.bw_dtypes : in.fw_dtypes;
  if (!contains(allowed, d.dtype))
    return unsupported(label + ": dtype expected one of {" + dtype_list(allowed) + "}, got " + dname(d.dtype));
  return {};
}

/// linear_cross_entropy: the GEMMs honour backend and tf32 themselves (their refusals are
/// forwarded by LinearCe::select); the cross-entropy kernels and sums are native, f32 (f64).
Result<void> chunked_gemm_accepts(const Target& target, const LossDesc& d, const PlanPreference& pref) {
  const auto& in = info(d.op);
  const std::string label = op_label(d);
  if (pref.reduced_precision_reduction == Tristate::Require)
    return unsupported(label +
                       ": preference reduced_precision_reduction=Require cannot be honoured (the cross-entropy "
                       "sums accumulate in f32, f64 for f64)");
  if (target.sm < 80)
    return unsupported(label + ": target sm_" + std::to_string(target.sm) + " is below the minimum sm_80");
  const DTypeSet allowed = d.direction == Direction::Backward ? in.bw_dtypes : in.fw_dtypes;
  if (!contains(allowed, d.dtype))
    return unsupported(label + ": dtype expected one of {" + dtype_list(allowed) + "}, got " + dname(d.dtype));
  return {};
}

struct LossImpl {
  const char* name;
  Result<void> (*accepts)(const Target&, const LossDesc&, const PlanPreference&);
};
constexpr LossImpl kLossImpls[] = {{"native", native_accepts}};
constexpr LossImpl kLinearImpls[] = {{"chunked-gemm", chunked_gemm_accepts}};

constexpr size_t align256(size_t b) { return (b + 255) / 256 * 256; }

/// Elements a thread of a rows op visits (its group: up to 512 threads).
constexpr int64_t kRowsItems = 4;

/// A rows op's workspace: [row losses][partial sums] (reduced forward), the dense broadcast-shaped
/// gradients of broadcast inputs (backward, summed back afterwards), multilabel_margin's
/// "is a target" bytes.
struct RowsWorkspace {
  size_t rows = 0, partial = 0, flags = 0, total = 0;
  std::array<size_t, kLossMaxGrads> staged{};  ///< offset + 1 of gradient g's dense buffer (0: none)
};
RowsWorkspace rows_workspace(const LossDesc& d, const Shape& bcast, int64_t rows, int64_t cols) {
  const auto& in = info(d.op);
  const bool bw = d.direction == Direction::Backward;
  const size_t acc = static_cast<size_t>(size_in_bytes(loss_stats_dtype(d.dtype)));
  RowsWorkspace w;
  size_t off = 0;
  if (!bw && d.reduction != Reduction::none) {
    w.rows = off;
    off += align256(static_cast<size_t>(rows) * acc);
    w.partial = off;
    off += align256(size_t(detail::kSumMaxParts) * 2 * acc);
  }
  if (bw)
    for (int g = 0; g < in.num_grads() && g < kLossMaxGrads; ++g) {
      const int k = in.grad_input(g);
      if (k < 0 || !d.has(k) || d.shapes[k] == bcast) continue;
      w.staged[g] = off + 1;
      off += align256(static_cast<size_t>(bcast.numel()) * static_cast<size_t>(size_in_bytes(d.dtype)));
    }
  if (d.op == LossOp::multilabel_margin_loss) {
    w.flags = off;
    off += align256(static_cast<size_t>(rows) * static_cast<size_t>(cols));
  }
  w.total = off;
  return w;
}

/// Elements a class-row thread holds per chunk on the 16-byte path (class_kernel.cuh: kClassUnroll
/// vectors of 16 / sizeof(T)).
constexpr int kClassUnroll = 4;
constexpr int kClassMaxTpr = 512;
/// The loss alone over class indices (no gradient): the row streams through once, so more rows a
/// CTA in flight beat wider groups a row. H200, bf16, threads a row 512 / 256 / 128 / 64:
/// [4096, 32000] 115.6 / 84.8 / 77.9 / 75.0 us, [8192, 128256] 564.8 / 512.5 / 495.5 / 494.3 us
/// (the driver of bench/results/h200-experiments-2026-11-28j.md).
constexpr int kClassLossOnlyMaxTpr = 64;
/// Rows at least this many take the column mapping when the class axis is strided (one thread a
/// row; below it too few threads would run). A fixed number: the launch shape never depends on
/// the device.
constexpr int64_t kColumnMinRows = 4096;

int pow2_at_least(int64_t v, int cap) {
  int p = 1;
  while (p < v && p < cap) p <<= 1;
  return p;
}
}  // namespace

detail::ClassShape detail::class_launch_shape(DType dtype, int64_t classes, bool fused_index_grad,
                                              bool index_loss_only, int sm, bool allow_vectorized) {
  ClassShape s;
  // A group holds kClassUnroll 16-byte vectors a thread per chunk; rows up to a chunk of 512
  // threads (64 for the loss alone) are read in one chunk.
  const int vec = 16 / size_in_bytes(dtype);
  const int64_t items = int64_t(kClassUnroll) * vec;
  s.tpr = pow2_at_least((classes + items - 1) / items, index_loss_only ? kClassLossOnlyMaxTpr : kClassMaxTpr);
  s.block = s.tpr > 32 ? s.tpr : 128;
  // The fused forward over class indices of a row longer than one CTA holds: a thread-block
  // cluster a row keeps it on chip (cluster_kernel.cuh), so it is read once; sm_90+ only. Rows
  // past 16 CTAs take the streaming kernel (tpr = 512 above) and read the row twice.
  const int64_t cta_classes = int64_t{kLossClusterThreads} * kLossClusterVecs * vec;
  if (fused_index_grad && sm >= 90 && allow_vectorized && classes > cta_classes &&
      classes <= cta_classes * kLossClusterMaxCtas)
    s.cluster = static_cast<int>((classes + cta_classes - 1) / cta_classes);
  return s;
}

Result<LossPlan> LossPlan::select(const Target& target, const LossDesc& desc, const PlanPreference& pref) {
  if (static_cast<size_t>(desc.op) >= std::size(kOps))
    return invalid("loss: op id " + std::to_string(static_cast<int>(desc.op)) + " is out of range");
  const auto& in = info(desc.op);
  const std::string label = op_label(desc);
  if (static_cast<int>(desc.reduction) > static_cast<int>(Reduction::batchmean))
    return invalid(label + ": reduction id " + std::to_string(static_cast<int>(desc.reduction)) + " is out of range");
  LossPlan p;
  p.desc_ = desc;
  switch (in.kind) {
    case LossKind::classes:
      BARACUDA_TRY(check_classes(desc));
      break;
    case LossKind::pointwise:
      BARACUDA_TRY(check_pointwise(desc, &p.bcast_));
      break;
    case LossKind::linear:
      BARACUDA_TRY(check_linear(desc));
      break;
    case LossKind::rows:
      BARACUDA_TRY(check_rows(desc, &p.bcast_));
      break;
    case LossKind::ctc:
      return unsupported(label + ": served by CtcLossPlan (baracuda/ops/ctc_loss.hpp), not LossPlan");
  }
  const std::span<const LossImpl> impls =
      in.kind == LossKind::linear ? std::span<const LossImpl>(kLinearImpls) : std::span<const LossImpl>(kLossImpls);
  auto impl = detail::first_accepting<LossImpl>(label, impls, target, desc, pref);
  if (!impl) return impl.error();
  p.allow_vectorized_ = pref.vectorized != Tristate::Forbid;
  // Keep descriptors comparable: absent inputs have no shape, unused fields their defaults.
  for (int k = 0; k < kLossMaxInputs; ++k)
    if (!desc.has(k)) p.desc_.shapes[k] = Shape{};
  if (!has_index_target(desc.op)) p.desc_.target_dtype = desc.dtype;

  if (in.kind == LossKind::linear) {
    auto lin = detail::LinearCe::select(target, p.desc_, pref);
    if (!lin) return lin.error();
    p.linear_ = std::move(lin.value());
    p.sku_ = p.linear_->sku();
    p.cfg_ = p.linear_->config();
    p.workspace_bytes_ = p.linear_->workspace_size();
    p.rows_ = desc.shapes[0].dims[0];
    p.classes_ = desc.shapes[1].dims[0];
    p.loss_shape_ = desc.reduction == Reduction::none ? Shape::of({p.rows_}) : Shape{};
    return p;
  }

  const bool bw = desc.direction == Direction::Backward;
  const bool reduced = desc.reduction != Reduction::none;
  const DType stats = loss_stats_dtype(desc.dtype);
  const size_t acc = static_cast<size_t>(size_in_bytes(stats));
  const int es = size_in_bytes(desc.dtype);
  Config& c = p.cfg_;
  p.sku_.category = "loss";
  p.sku_.op = label;
  p.sku_.arch = target.sm >= 90 ? "sm_90a" : "sm_80";
  p.sku_.backend = Backend::Native;
  p.sku_.precision.math = stats;
  p.sku_.precision.accumulator = stats;
  p.sku_.precision.deterministic = true;
  p.sku_.precision.bit_stable = true;
  p.sku_.epilogue = std::string("reduction=") + to_string(desc.reduction);

  if (in.kind == LossKind::classes) {
    const Shape& x = desc.shapes[0];
    const bool probs = !is_index_dtype(desc.target_dtype);
    const bool ce = desc.op == LossOp::cross_entropy;
    p.classes_ = x.dims[class_dim(x)];
    p.rows_ = row_shape(x).numel();
    p.loss_shape_ = reduced ? Shape{} : row_shape(x);
    const detail::ClassShape shape = detail::class_launch_shape(
        desc.dtype, p.classes_, ce && !bw && desc.fused_grad && !probs, ce && !bw && !desc.fused_grad && !probs,
        target.sm, p.allow_vectorized_);
    c.tpr = shape.tpr;
    c.block = shape.block;
    c.cluster = shape.cluster;
    if (desc.op == LossOp::nll_loss && !bw) {  // a gather per row: no class pass
      c.tpr = 1;
      c.block = 128;
    }
    detail::loss_sum_partition(p.rows_, &c.parts, &c.chunk);
    p.sku_.dtypes = dname(desc.dtype) + "," + dname(desc.target_dtype) + "->" + dname(desc.dtype);
    p.sku_.layout = c.cluster > 0 ? "cluster-rows(ctas=" + std::to_string(c.cluster) + ")"
                                  : std::string(c.tpr > 32 ? "cta" : (c.tpr == 32 ? "warp" : "subwarp")) +
                                        "-rows(tpr=" + std::to_string(c.tpr) + ")" +
                                        (p.allow_vectorized_ ? "" : " (vectorization forbidden)");
    if (ce)
      p.sku_.precision.note = std::string("online (max, sum exp) per row, exp via ") +
                              (es == 2 ? "ex2.approx.ftz (16-bit storage)" : (es == 8 ? "exp" : "expf")) +
                              (bw && !desc.fused_grad ? "; gradient from the saved log-sum-exp" : "") +
                              (desc.fused_grad ? (bw ? "; rescales the fused forward's gradient by dy (none if 1)"
                                                     : (c.cluster > 0 ? "; gradient fused in the forward, the row held "
                                                                        "on chip by a thread-block cluster (one read); "
                                                                        "persistent clusters, the next row's copies in "
                                                                        "flight while a row is reduced and written"
                                                                      : "; gradient fused in the forward"))
                                               : "");
    if (reduced)
      p.sku_.precision.note += std::string(p.sku_.precision.note.empty() ? "" : "; ") +
                               "per-row losses, fixed-order two-stage sum (" + std::to_string(c.parts) + " parts)";
    // Workspace: per-row losses and target weights, partial sums, two scalars.
    const bool smooth_w = desc.has(2) && ce && desc.params[1] != 0.0 && !probs;
    const bool need_rows = !bw && reduced;
    const bool need_partial = need_rows || (!bw && desc.fused_grad && desc.reduction == Reduction::mean && !probs) ||
                              (bw && smooth_w && !desc.fused_grad);
    size_t ws = 0;
    if (need_rows) ws += align256(static_cast<size_t>(p.rows_) * acc) * (probs ? 1 : 2);
    if (need_partial) ws += align256(size_t(detail::kSumMaxParts) * 2 * acc) + align256(2 * acc);
    p.workspace_bytes_ = ws;
  } else if (in.kind == LossKind::rows) {
    const Shape& b = p.bcast_;
    p.classes_ = b.dims[b.rank - 1];
    p.rows_ = without_last(b).numel();
    p.loss_shape_ = reduced ? Shape{} : without_last(b);
    // A group of threads a row, kRowsItems elements a thread (up to 512 threads); a function of D.
    c.tpr = pow2_at_least((p.classes_ + kRowsItems - 1) / kRowsItems, kClassMaxTpr);
    c.block = c.tpr > 32 ? c.tpr : 128;
    detail::loss_sum_partition(p.rows_, &c.parts, &c.chunk);
    const bool idx = has_index_target(desc.op);
    p.sku_.dtypes =
        dname(desc.dtype) + (idx ? "," + dname(desc.target_dtype) : std::string()) + "->" + dname(desc.dtype);
    p.sku_.layout = "last-dim-rows(tpr=" + std::to_string(c.tpr) + ")";
    p.sku_.precision.note =
        std::string("row sums in ") + dname(stats) + (bw ? " recomputed by the backward" : "") +
        (reduced && !bw ? "; per-row losses, fixed-order two-stage sum (" + std::to_string(c.parts) + " parts)" : "");
    p.workspace_bytes_ = rows_workspace(desc, b, p.rows_, p.classes_).total;
  } else {  // pointwise
    p.rows_ = p.bcast_.numel();
    p.classes_ = 1;
    p.loss_shape_ = reduced ? Shape{} : p.bcast_;
    detail::loss_sum_partition(p.rows_, &c.parts, &c.chunk);
    c.tpr = 1;
    c.block = detail::kSumThreads;
    if (!(reduced && !bw)) {  // one tile a CTA
      c.chunk = detail::kSumMinChunk;
      c.parts = static_cast<int>(std::max<int64_t>(1, (p.rows_ + c.chunk - 1) / c.chunk));
    }
    p.sku_.dtypes = dname(desc.dtype) + "->" + dname(desc.dtype);
    p.sku_.layout = std::string("pointwise") + (p.allow_vectorized_ ? "" : " (vectorization forbidden)");
    p.sku_.precision.note = std::string(reduced && !bw ? "loss summed in the kernel, fixed-order two-stage sum (" +
                                                             std::to_string(c.parts) + " parts)"
                                                       : "elementwise");
    size_t ws = 0;
    if (!bw && reduced) ws += align256(size_t(detail::kSumMaxParts) * 2 * acc);
    if (bw) {
      for (int g = 0; g < in.num_grads(); ++g) {
        const int k = in.grad_input(g);
        if (k >= 0 && desc.has(k) && !(desc.shapes[k] == p.bcast_))
          ws += align256(static_cast<size_t>(p.rows_) * static_cast<size_t>(es));
      }
    }
    p.workspace_bytes_ = ws;
  }
  return p;
}

// ---- argument checks -------------------------------------------------------------------------------
namespace {
using detail::given;
using detail::Operand;

/// How a tensor's shape is checked.
enum class Want { Exact, OneElement, Rows, Dense1 };

}  // namespace

Result<void> LossPlan::can_implement(const LossArgs& a) const {
  if (linear_) return linear_->can_implement(desc_, a);
  const auto& in = info(desc_.op);
  const std::string label = op_label(desc_);
  const bool bw = desc_.direction == Direction::Backward;
  const bool reduced = desc_.reduction != Reduction::none;
  const bool classes = in.kind == LossKind::classes;
  const bool pointwise = in.kind == LossKind::pointwise;  // exact in place is allowed (elementwise)
  const bool probs = classes && !is_index_dtype(desc_.target_dtype);
  const bool ce = desc_.op == LossOp::cross_entropy;
  const bool mean_idx = classes && !probs && desc_.reduction == Reduction::mean;
  const DType stats = loss_stats_dtype(desc_.dtype);
  // The input holding class indices (classes: also probabilities), whose dtype is target_dtype.
  const int target_k = has_index_target(desc_.op) ? in.input_index("target") : -1;
  const bool checked_targets = (classes && !probs) || (target_k >= 0 && !classes);

  auto must_not = [&](bool present, const char* role, const std::string& why) -> Result<void> {
    if (present) return invalid(label + ": " + role + " given but " + why);
    return {};
  };
  if (bw && desc_.fused_grad) {  // the rescale of a fused forward's gradient: dy and grad[0] only
    const std::string why = "the fused gradient's backward reads dy and grad[0] only";
    for (int k = 0; k < kLossMaxInputs; ++k) BARACUDA_TRY(must_not(given(a.in[k]), "an input", why));
    BARACUDA_TRY(must_not(given(a.lse) || given(a.total_weight), "lse/total_weight", why));
    BARACUDA_TRY(must_not(given(a.out) || given(a.save_lse) || given(a.save_total_weight) || given(a.error),
                          "a forward output", why));
    BARACUDA_TRY(must_not(given(a.grad[1]) || given(a.grad[2]), "grad[1]/grad[2]", why));
    if (!given(a.dy)) return invalid(label + ": dy is required but was not given");
    if (a.dy.dtype != desc_.dtype)
      return invalid(label + ": dy dtype expected " + dname(desc_.dtype) + ", got " + dname(a.dy.dtype));
    if (a.dy.numel() != 1)
      return invalid(label + ": dy expected one element (a reduced loss), got shape " + a.dy.layout.shape_str());
    if (a.dy.data == nullptr) return invalid(label + ": dy is null");
    const TensorMut& g = a.grad[0];
    if (!given(g)) return invalid(label + ": grad[0] (input) is required but was not given");
    if (g.dtype != desc_.dtype)
      return invalid(label + ": grad[0] (input) dtype expected " + dname(desc_.dtype) + ", got " + dname(g.dtype));
    if (!(Shape::of(g.layout) == desc_.shapes[0]))
      return invalid(label + ": grad[0] (input) shape expected " + desc_.shapes[0].str() + ", got " +
                     g.layout.shape_str());
    if (!g.layout.is_contiguous())
      return invalid(label +
                     ": grad[0] (input) expected a contiguous tensor (the fused forward's gradient), got strides " +
                     g.layout.stride_str());
    if (g.numel() > 0 && g.data == nullptr) return invalid(label + ": grad[0] (input) is null");
    const auto glo = reinterpret_cast<uintptr_t>(g.data), dlo = reinterpret_cast<uintptr_t>(a.dy.data);
    const auto ghi = glo + static_cast<uintptr_t>(g.numel()) * static_cast<uintptr_t>(size_in_bytes(g.dtype));
    if (g.numel() > 0 && dlo + static_cast<uintptr_t>(size_in_bytes(a.dy.dtype)) > glo && dlo < ghi)
      return invalid(label + ": grad[0] (input) overlaps dy");
    return {};
  }
  for (int k = 0; k < kLossMaxInputs; ++k)
    if (given(a.in[k]) && !desc_.has(k))
      return invalid(label + ": in[" + std::to_string(k) + "] given but " +
                     (k < in.num_inputs()
                          ? "desc.present does not list " + in.input_name(k)
                          : std::string("the op takes ") + std::to_string(in.num_inputs()) + " inputs"));
  const bool grads_here = bw || desc_.fused_grad;
  for (int g = 0; g < kLossMaxGrads; ++g) {
    if (!given(a.grad[g])) continue;
    if (!grads_here)
      return invalid(label + ": grad[" + std::to_string(g) +
                     "] given but the forward writes no gradient (fused_grad "
                     "is false)");
    if (g >= in.num_grads())
      return invalid(label + ": grad[" + std::to_string(g) + "] given but the op has " +
                     std::to_string(in.num_grads()) + " gradients (" + in.grads + ")");
    const int k = in.grad_input(g);
    if (k < 0 || !desc_.has(k))
      return invalid(label + ": grad[" + std::to_string(g) + "] (" + in.grad_name(g) +
                     ") given but that input is "
                     "absent");
    if (classes && g == 1 && !probs)
      return invalid(label + ": grad[1] (target) given but class-index targets have no gradient");
  }
  BARACUDA_TRY(must_not(given(a.lse) && !(bw && ce), "lse", "only cross_entropy's backward reads it"));
  BARACUDA_TRY(must_not(given(a.total_weight) && !(bw && mean_idx), "total_weight",
                        "only a class backward with mean over class indices reads it"));
  BARACUDA_TRY(must_not(given(a.save_lse) && !(!bw && ce), "save_lse", "only cross_entropy's forward writes it"));
  BARACUDA_TRY(must_not(given(a.save_total_weight) && !(!bw && classes && !probs && reduced), "save_total_weight",
                        "only a reduced class forward over class indices writes it"));
  BARACUDA_TRY(must_not(given(a.error) && !checked_targets, "error", "only class-index targets are checked"));
  BARACUDA_TRY(must_not(given(a.dy) && !(bw || desc_.fused_grad), "dy",
                        "the forward reads no dy (fused_grad is "
                        "false)"));
  BARACUDA_TRY(must_not(given(a.out) && bw, "out", "the backward writes grad[...]"));

  struct Item {
    Operand op;
    DType dtype;
    Want want;
    Shape shape;  ///< Exact
    bool required;
    bool main;  ///< may be an exact in-place partner (same shape as the iteration)
  };
  std::vector<Item> items;
  auto ref = [&](const std::string& role, const TensorRef& t, DType dt, Want w, const Shape& s, bool req, bool main) {
    items.push_back({{role, t.data, t.dtype, &t.layout, false, main}, dt, w, s, req, main});
  };
  auto mut = [&](const std::string& role, const TensorMut& t, DType dt, Want w, const Shape& s, bool req, bool main) {
    items.push_back({{role, t.data, t.dtype, &t.layout, true, main}, dt, w, s, req, main});
  };
  const Shape none_shape{};
  const Want loss_want = reduced ? Want::OneElement : Want::Exact;
  // In-place partners: class ops' gradients may replace the logits, pointwise outputs any input of
  // the iteration's shape; rows ops have none (a row's elements are gathered after others are written).
  auto partner = [&](const Shape& s) { return classes ? s == desc_.shapes[0] : (pointwise && s == bcast_); };
  for (int k = 0; k < in.num_inputs() && k < kLossMaxInputs; ++k) {
    if (!desc_.has(k)) continue;
    const DType dt = k == target_k ? desc_.target_dtype : desc_.dtype;
    // Class weights are indexed densely.
    const bool dense = (classes || desc_.op == LossOp::multi_margin_loss) && in.input_name(k) == "weight";
    ref(in.input_name(k), a.in[k], dt, dense ? Want::Dense1 : Want::Exact, desc_.shapes[k], true,
        partner(desc_.shapes[k]));
  }
  // Class ops' per-row tensors are no in-place partners: a row's loss is written before its dy is read.
  if (bw || desc_.fused_grad) ref("dy", a.dy, desc_.dtype, loss_want, loss_shape_, bw, !reduced && pointwise);
  if (!bw) mut("out", a.out, desc_.dtype, loss_want, loss_shape_, true, !reduced && pointwise);
  for (int g = 0; g < in.num_grads() && g < kLossMaxGrads; ++g) {
    const int k = in.grad_input(g);
    if (k >= 0 && desc_.has(k) && grads_here && !(classes && g == 1 && !probs))
      mut("grad[" + std::to_string(g) + "] (" + in.grad_name(g) + ")", a.grad[g], desc_.dtype, Want::Exact,
          desc_.shapes[k], false, partner(desc_.shapes[k]));
  }
  if (checked_targets && !classes) mut("error", a.error, DType::s32, Want::OneElement, Shape{}, false, false);
  if (classes) {
    if (bw && ce) ref("lse", a.lse, stats, Want::Rows, none_shape, true, false);
    if (bw && mean_idx) ref("total_weight", a.total_weight, stats, Want::OneElement, none_shape, true, false);
    if (!bw && ce) mut("save_lse", a.save_lse, stats, Want::Rows, none_shape, false, false);
    if (!bw && !probs && reduced)
      mut("save_total_weight", a.save_total_weight, stats, Want::OneElement, none_shape, false, false);
    if (!probs) mut("error", a.error, DType::s32, Want::OneElement, none_shape, false, false);
  }

  std::vector<Operand> used;  // the tensors given, for the memory checks
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& w = items[i];
    const Operand& o = w.op;
    const Layout& l = *o.layout;
    const bool present = o.data != nullptr || l.rank != 0;
    if (!present) {
      const bool empty = w.want == Want::Exact ? w.shape.numel() == 0 : (w.want == Want::Rows && rows_ == 0);
      if (w.required && !empty) return invalid(label + ": " + o.role + " is required but was not given");
      continue;
    }
    used.push_back(o);
    if (o.dtype != w.dtype)
      return invalid(label + ": " + o.role + " dtype expected " + dname(w.dtype) + ", got " + dname(o.dtype));
    switch (w.want) {
      case Want::Exact:
        if (!(Shape::of(l) == w.shape))
          return invalid(label + ": " + o.role + " shape expected " + w.shape.str() + ", got " + l.shape_str());
        break;
      case Want::Dense1:
        if (!(Shape::of(l) == w.shape))
          return invalid(label + ": " + o.role + " shape expected " + w.shape.str() + ", got " + l.shape_str());
        if (!l.is_contiguous())
          return invalid(label + ": " + o.role + " expected a contiguous tensor, got strides " + l.stride_str());
        break;
      case Want::OneElement:
        if (l.numel() != 1)
          return invalid(label + ": " + o.role + " expected one element (a reduced loss), got shape " + l.shape_str());
        break;
      case Want::Rows:
        if (l.numel() != rows_)
          return invalid(label + ": " + o.role + " expected " + std::to_string(rows_) +
                         " elements (one per row), got " + std::to_string(l.numel()) + " (shape " + l.shape_str() +
                         ")");
        if (!l.is_contiguous())
          return invalid(label + ": " + o.role + " expected a contiguous tensor, got strides " + l.stride_str());
        break;
    }
  }
  // Footprints, null data, self-overlapping outputs; an output may only be exactly an input of the
  // iteration's shape (every element is read before it is written, by the thread that writes it;
  // the gradient of the logits may replace them).
  BARACUDA_TRY(detail::check_operands(label, used));
  return {};
}

// ---- launch geometry ---------------------------------------------------------------------------------
namespace {
/// The class launch's tensor geometry: row dims coalesced across every slot, class strides, and
/// the variant (16-byte vectors, column mapping).
struct ClassGeometry {
  detail::ClassLaunch p;
  bool vec_ok = false;
  bool columns = false;
};

ClassGeometry class_geometry(const LossDesc& d, const LossArgs& a, int64_t rows, int64_t C) {
  using namespace detail;
  ClassGeometry g;
  const bool probs = !is_index_dtype(d.target_dtype);
  const bool bw = d.direction == Direction::Backward;
  const Shape& x = d.shapes[0];
  const int cdim = class_dim(x);
  std::array<const Layout*, kCsNumSlots> lay{};
  std::array<const void*, kCsNumSlots> ptr{};
  auto put = [&](int k, const void* p, const Layout& l) {
    if (p == nullptr && l.rank == 0) return;
    lay[k] = &l;
    ptr[k] = p;
  };
  put(kCsInput, a.in[0].data, a.in[0].layout);
  if (probs)
    put(kCsProbs, a.in[1].data, a.in[1].layout);
  else
    put(kCsTarget, a.in[1].data, a.in[1].layout);
  put(kCsDinput, a.grad[0].data, a.grad[0].layout);
  if (probs) put(kCsDprobs, a.grad[1].data, a.grad[1].layout);
  if (d.reduction == Reduction::none) {
    if (!bw) put(kCsLoss, a.out.data, a.out.layout);
    put(kCsDy, a.dy.data, a.dy.layout);
  }
  // Row dims, outer to inner, without size-1 dims.
  detail::RowDims<kCsNumSlots> rd;
  std::array<bool, kCsNumSlots> used{};
  for (int k = 0; k < kCsNumSlots; ++k) used[k] = lay[k] != nullptr;
  for (int i = 0; i < x.rank; ++i) {
    if (i == cdim || x.dims[i] == 1) continue;
    const int ri = i < cdim ? i : i - 1;  // the dim in row-shaped slots
    std::array<int64_t, kCsNumSlots> stride{};
    for (int k = 0; k < kCsNumSlots; ++k) stride[k] = lay[k] ? lay[k]->stride[k < kCsClassSlots ? i : ri] : 0;
    rd.add(x.dims[i], stride, used);
  }
  rd.write(g.p);
  const int vec = 16 / size_in_bytes(d.dtype);
  g.vec_ok = C % vec == 0 && C > 0;
  for (int k = 0; k < kCsClassSlots; ++k) {
    if (!lay[k]) continue;
    g.p.cstride[k] = lay[k]->stride[cdim];
    if (g.p.cstride[k] != 1 && C > 1) g.vec_ok = false;
    if (reinterpret_cast<uintptr_t>(ptr[k]) % 16 != 0) g.vec_ok = false;
    for (const auto& dm : rd.dims)
      if (dm.stride[k] % vec != 0) g.vec_ok = false;
  }
  // Column mapping: a strided class axis over many rows whose innermost row dim is unit-stride
  // in every class-shaped slot (torch's [N, C, H, W] layout).
  if (!g.vec_ok && C > 1 && !rd.dims.empty() && rows >= kColumnMinRows) {
    g.columns = true;
    for (int k = 0; k < kCsClassSlots; ++k)
      if (lay[k] && (g.p.cstride[k] == 1 || rd.dims.back().stride[k] != 1)) g.columns = false;
  }
  return g;
}

/// Whether run() takes the cluster kernel: the plan chose it (sm_90+, a fused forward over class
/// indices, a row of 2..16 CTAs) and the tensors allow it: 16-byte vectors along a unit-stride
/// class axis, one row dim after coalescing (the kernel's row offsets are one multiplication).
bool takes_cluster(const LossPlan::Config& c, bool allow_vectorized, const ClassGeometry& g) {
  return c.cluster > 0 && allow_vectorized && g.vec_ok && g.p.row_ndim <= 1;
}

/// Classes a CTA of the cluster kernel owns: C over the cluster, rounded up to 16-byte vectors.
int64_t cluster_segment(int64_t classes, int ctas, int vec) {
  const int64_t per = (classes + ctas - 1) / ctas;
  return (per + vec - 1) / vec * vec;
}

/// A rows launch's tensor geometry: per slot, the strides of the broadcast shape [..., D] (stride 0
/// where a tensor broadcasts), the row dims coalesced across every slot, the stride along D. The
/// gradients of broadcast inputs go to dense buffers of the workspace (`staged`).
struct RowsGeometry {
  detail::RowsLaunch p;
  std::array<void*, kLossMaxGrads> staged{};
};

RowsGeometry rows_geometry(const LossDesc& d, const Shape& bcast, const LossArgs& a, Workspace ws, int64_t rows) {
  using namespace detail;
  const auto& in = info(d.op);
  const RowsInputs ri = rows_inputs(d.op);
  const bool bw = d.direction == Direction::Backward;
  const bool none = d.reduction == Reduction::none;
  const int R = bcast.rank;
  RowsGeometry g;
  RowsLaunch& p = g.p;
  // Per slot: pointer and the stride of each broadcast dim (element slots) or row dim (row slots).
  std::array<const void*, kRsNumSlots> ptr{};
  std::array<std::array<int64_t, kMaxRank>, kRsNumSlots> st{};
  auto elem = [&](int k, const void* data, const Layout& l) {
    if (data == nullptr && l.rank == 0) return;
    ptr[k] = data;
    for (int i = 0; i < R; ++i) {
      const int li = i - (R - l.rank);
      st[k][i] = li < 0 || l.shape[li] == 1 ? 0 : l.stride[li];
    }
  };
  auto row = [&](int k, const void* data, const Layout& l) {
    if (data == nullptr && l.rank == 0) return;
    ptr[k] = data;
    for (int i = 0; i + 1 < R && i < l.rank; ++i) st[k][i] = l.shape[i] == 1 ? 0 : l.stride[i];
  };
  for (int k = 0; k < 3; ++k)
    if ((ri.elem >> k) & 1 && d.has(k)) elem(kRsIn0 + k, a.in[k].data, a.in[k].layout);
  if (ri.labels >= 0) elem(kRsLabels, a.in[ri.labels].data, a.in[ri.labels].layout);
  if (ri.row_target >= 0) row(kRsTarget, a.in[ri.row_target].data, a.in[ri.row_target].layout);
  if (!bw && none) row(kRsLoss, a.out.data, a.out.layout);
  if (bw && none) row(kRsDy, a.dy.data, a.dy.layout);
  const RowsWorkspace w = rows_workspace(d, bcast, rows, R > 0 ? bcast.dims[R - 1] : 0);
  if (bw) {
    const Layout dense = Layout::contiguous(R, bcast.dims.data());
    for (int gi = 0; gi < in.num_grads() && gi < 3; ++gi) {
      const int k = in.grad_input(gi);
      if (k < 0 || !d.has(k) || a.grad[gi].data == nullptr) continue;
      if (w.staged[gi]) {
        g.staged[gi] = static_cast<char*>(ws.ptr) + (w.staged[gi] - 1);
        elem(kRsG0 + gi, g.staged[gi], dense);
      } else {
        elem(kRsG0 + gi, a.grad[gi].data, a.grad[gi].layout);
      }
    }
  }
  // Row dims, outer to inner, without size-1 dims.
  detail::RowDims<kRsNumSlots> dims;
  std::array<bool, kRsNumSlots> used{};
  for (int k = 0; k < kRsNumSlots; ++k) used[k] = ptr[k] != nullptr;
  for (int i = 0; i + 1 < R; ++i) {
    if (bcast.dims[i] == 1) continue;
    std::array<int64_t, kRsNumSlots> stride{};
    for (int k = 0; k < kRsNumSlots; ++k) stride[k] = ptr[k] ? st[k][i] : 0;
    dims.add(bcast.dims[i], stride, used);
  }
  dims.write(p);
  for (int k = 0; k < kRsElemSlots; ++k) p.estride[k] = ptr[k] && R > 0 ? st[k][R - 1] : 0;
  for (int k = 0; k < 3; ++k) {
    p.in[k] = ptr[kRsIn0 + k];
    p.grad[k] = const_cast<void*>(ptr[kRsG0 + k]);
  }
  p.labels = ptr[kRsLabels];
  p.target = ptr[kRsTarget];
  p.loss = const_cast<void*>(ptr[kRsLoss]);
  if (ri.class_weight >= 0 && d.has(ri.class_weight)) p.weight = a.in[ri.class_weight].data;
  if (d.op == LossOp::multilabel_margin_loss) p.flags = static_cast<uint8_t*>(ws.ptr) + w.flags;
  if (!bw && !none) {
    p.loss_rows = static_cast<char*>(ws.ptr) + w.rows;
    p.partial = static_cast<char*>(ws.ptr) + w.partial;
  }
  return g;
}

/// Whether the pointwise iteration can take 16-byte vectors of `vec` elements: every present
/// operand's innermost stride is 1 (16-byte aligned pointer, outer strides multiples of `vec`)
/// or 0 (one value replicated; inputs only), and the innermost size is a multiple of `vec`
/// unless the iteration is one-dimensional (the last, partial tile goes element by element).
bool pointwise_vec_ok(const detail::EwIter& it, int nout, int vec) {
  if (it.numel == 0) return false;
  if (it.rank == 0) return true;
  if (it.rank > 1 && it.shape[0] % vec != 0) return false;
  for (int k = 0; k < it.nops; ++k) {
    if (it.ptr[k] == nullptr) continue;
    const int64_t inner = it.stride[k][0];
    if (inner == 0) {
      if (k < nout) return false;
      continue;
    }
    if (inner != 1) return false;
    if (reinterpret_cast<uintptr_t>(it.ptr[k]) % 16 != 0) return false;
    for (int d = 1; d < it.rank; ++d)
      if (it.stride[k][d] % vec != 0) return false;
  }
  return true;
}

/// A layout of `s` expanded (stride 0 where it broadcasts) is what make_ew_iter does; absent
/// operands are rank-0 layouts with a null pointer (all strides 0).
struct PointwiseIteration {
  detail::EwIter it;
  int nout = 0;
  /// Backward: gradients of broadcast inputs go to dense buffers of the broadcast shape first.
  std::array<void*, kLossMaxGrads> staged{};
};

PointwiseIteration pointwise_iteration(const LossDesc& d, const Shape& bcast, const LossArgs& a, Workspace ws,
                                       bool reduce, bool staging) {
  const auto& in = info(d.op);
  const bool bw = d.direction == Direction::Backward;
  PointwiseIteration r;
  std::vector<TensorMut> outs;
  std::vector<TensorRef> ins;
  if (bw) {
    char* next = static_cast<char*>(ws.ptr);
    const size_t bytes = static_cast<size_t>(bcast.numel()) * static_cast<size_t>(size_in_bytes(d.dtype));
    for (int g = 0; g < kLossMaxGrads; ++g) {
      TensorMut t{};
      const int k = g < in.num_grads() ? in.grad_input(g) : -1;
      const bool wanted = k >= 0 && d.has(k) && a.grad[g].data != nullptr;
      if (wanted && !(d.shapes[k] == bcast)) {
        if (staging) {
          t.data = next;
          r.staged[g] = next;
        }
        t.dtype = d.dtype;
        t.layout = Layout::contiguous(bcast.rank, bcast.dims.data());
      } else if (wanted) {
        t = a.grad[g];
      }
      if (k >= 0 && d.has(k) && !(d.shapes[k] == bcast)) next += align256(bytes);
      outs.push_back(t);
    }
    // A reduced loss's dy is one element whatever its shape: a 0-dim operand broadcast everywhere.
    TensorRef dy = a.dy;
    if (d.reduction != Reduction::none) dy.layout = Layout{};
    ins.push_back(dy);
  } else if (!reduce) {
    outs.push_back(a.out);
  }
  for (int k = 0; k < in.num_inputs(); ++k) ins.push_back(d.has(k) ? a.in[k] : TensorRef{});
  r.nout = static_cast<int>(outs.size());
  r.it = detail::make_ew_iter(outs, ins, bcast.rank, bcast.dims.data(), /*keep_order=*/reduce);
  return r;
}
}  // namespace

std::string LossPlan::layout_for(const LossArgs& a) const {
  if (linear_) return linear_->layout_for(desc_, a);
  const auto& in = info(desc_.op);
  if (in.kind == LossKind::rows) return rows_ == 0 ? "empty" : "last-dim-rows(tpr=" + std::to_string(cfg_.tpr) + ")";
  if (in.kind == LossKind::classes) {
    if (rows_ == 0 || classes_ == 0) return "empty";
    if (desc_.direction == Direction::Backward && desc_.fused_grad)
      return std::string("rescale-") +
             (allow_vectorized_ && reinterpret_cast<uintptr_t>(a.grad[0].data) % 16 == 0 ? "vec16" : "scalar");
    const ClassGeometry g = class_geometry(desc_, a, rows_, classes_);
    if (desc_.op == LossOp::nll_loss && desc_.direction == Direction::Forward) return "row-gather";
    if (g.columns) return "column-rows-scalar";
    if (takes_cluster(cfg_, allow_vectorized_, g))
      return "cluster-rows(ctas=" + std::to_string(cfg_.cluster) + ")-vec16";
    return std::string(cfg_.tpr > 32 ? "cta" : (cfg_.tpr == 32 ? "warp" : "subwarp")) +
           "-rows(tpr=" + std::to_string(cfg_.tpr) + ")-" + (allow_vectorized_ && g.vec_ok ? "vec16" : "scalar");
  }
  if (rows_ == 0) return "empty";
  const bool reduce = desc_.direction == Direction::Forward && desc_.reduction != Reduction::none;
  const PointwiseIteration pi =
      pointwise_iteration(desc_, bcast_, a, Workspace{reinterpret_cast<void*>(256), 0}, reduce, /*staging=*/true);
  const bool vec = allow_vectorized_ && pointwise_vec_ok(pi.it, pi.nout, 16 / size_in_bytes(desc_.dtype));
  return std::string("pointwise-") + (pi.it.rank <= 1 ? "contiguous" : "strided") + (vec ? "-vec16" : "-scalar");
}

// ---- run ---------------------------------------------------------------------------------------------
namespace {
struct Launchers {
  DType dtype;
  cudaError_t (*cls)(const detail::ClassLaunch&, cudaStream_t);
  cudaError_t (*pw)(const detail::PointwiseLaunch&, cudaStream_t);
  cudaError_t (*rows)(const detail::RowsLaunch&, cudaStream_t);
};
#define BARACUDA_LOSS_LAUNCHERS(D)                                                      \
  {                                                                                     \
    DType::D, &detail::loss_class_run<DType::D>, &detail::loss_pointwise_run<DType::D>, \
        &detail::loss_rows_run<DType::D>                                                \
  }
constexpr Launchers kLaunchers[] = {BARACUDA_LOSS_LAUNCHERS(f32), BARACUDA_LOSS_LAUNCHERS(f16),
                                    BARACUDA_LOSS_LAUNCHERS(bf16), BARACUDA_LOSS_LAUNCHERS(f64)};
#undef BARACUDA_LOSS_LAUNCHERS
const Launchers* launchers_for(DType t) {
  for (const auto& l : kLaunchers)
    if (l.dtype == t) return &l;
  return nullptr;
}
}  // namespace

cudaError_t detail::loss_class_launch(DType dtype, const ClassLaunch& p, cudaStream_t stream) {
  const Launchers* L = launchers_for(dtype);
  return L ? L->cls(p, stream) : cudaErrorInvalidValue;
}

Result<void> LossPlan::run(cudaStream_t stream, Workspace ws, const LossArgs& a) const {
  BARACUDA_TRY(can_implement(a));
  const auto& in = info(desc_.op);
  const std::string label = op_label(desc_);
  if (workspace_bytes_ > 0 && (ws.bytes < workspace_bytes_ || !ws.ptr))
    return make_error(Status::WorkspaceTooSmall, label + ": workspace expected >= " + std::to_string(workspace_bytes_) +
                                                     " bytes, got " + std::to_string(ws.bytes));
  if (linear_) return linear_->run(desc_, stream, ws, a);
  const Launchers* L = launchers_for(desc_.dtype);
  if (!L) return unsupported(label + ": no kernel for dtype " + dname(desc_.dtype));
  const bool bw = desc_.direction == Direction::Backward;
  const bool reduced = desc_.reduction != Reduction::none;
  const DType stats = loss_stats_dtype(desc_.dtype);
  const size_t acc = static_cast<size_t>(size_in_bytes(stats));
  auto fail = [&](cudaError_t e) -> Result<void> {
    if (e != cudaSuccess)
      return make_error(Status::CudaError, label + ": kernel launch failed: " + cudaGetErrorString(e));
    return {};
  };

  if (in.kind == LossKind::classes) {
    const bool probs = !is_index_dtype(desc_.target_dtype);
    ClassGeometry g = class_geometry(desc_, a, rows_, classes_);
    detail::ClassLaunch& p = g.p;
    p.op = desc_.op;
    p.probs = probs;
    p.fw = !bw;
    p.grad = bw || desc_.fused_grad;
    p.reduction = desc_.reduction;
    p.rows = rows_;
    p.classes = classes_;
    p.input = a.in[0].data;
    p.probs_target = probs ? a.in[1].data : nullptr;
    p.target = probs ? nullptr : a.in[1].data;
    p.target64 = desc_.target_dtype == DType::s64;
    p.weight = desc_.has(2) ? a.in[2].data : nullptr;
    p.dinput = a.grad[0].data;
    p.dprobs = probs ? a.grad[1].data : nullptr;
    p.loss = !bw && !reduced ? a.out.data : nullptr;
    p.lse_out = bw ? nullptr : a.save_lse.data;
    p.lse_in = a.lse.data;
    p.dy = a.dy.data;
    p.dy_rows = !reduced && a.dy.data != nullptr;
    p.total_weight_in = a.total_weight.data;
    p.out = !bw && reduced ? a.out.data : nullptr;
    p.total_weight_out = a.save_total_weight.data;
    p.error = static_cast<int*>(a.error.data);
    p.ignore_index = static_cast<int64_t>(desc_.params[0]);
    p.smoothing = desc_.op == LossOp::cross_entropy ? desc_.params[1] : 0.0;
    p.parts = cfg_.parts;
    p.chunk = cfg_.chunk;
    // Workspace: [loss_rows][weight_rows][partial][scratch], as sized in select().
    char* w = static_cast<char*>(ws.ptr);
    if (!bw && reduced) {
      p.loss_rows = w;
      w += align256(static_cast<size_t>(rows_) * acc);
      if (!probs) {
        p.weight_rows = w;
        w += align256(static_cast<size_t>(rows_) * acc);
      }
    }
    if (workspace_bytes_ > 0) {
      p.partial = w;
      w += align256(size_t(detail::kSumMaxParts) * 2 * acc);
      p.scratch = w;
    }
    // The grad pass needs something to write; a backward with no gradient wanted does nothing.
    if (bw && !p.dinput && !p.dprobs) return {};
    if (bw && desc_.fused_grad) {  // dinput *= dy[0] in place (contiguous), nothing when dy is 1
      p.rescale = true;
      p.vec = allow_vectorized_ && reinterpret_cast<uintptr_t>(p.dinput) % 16 == 0;
      return fail(L->cls(p, stream));
    }
    p.tpr = cfg_.tpr;
    p.block = cfg_.block;
    p.vec = allow_vectorized_ && g.vec_ok;
    if (g.columns && !(desc_.op == LossOp::nll_loss && !bw)) {
      p.tpr = 1;
      p.block = 128;
    }
    if (desc_.op == LossOp::nll_loss && !bw) p.vec = false;  // per-row gathers only
    if (takes_cluster(cfg_, allow_vectorized_, g)) {
      p.cluster = cfg_.cluster;
      p.cluster_seg = cluster_segment(classes_, cfg_.cluster, 16 / size_in_bytes(desc_.dtype));
    }
    return fail(L->cls(p, stream));
  }

  if (in.kind == LossKind::rows) {
    RowsGeometry g = rows_geometry(desc_, bcast_, a, ws, rows_);
    detail::RowsLaunch& p = g.p;
    p.op = desc_.op;
    p.fw = !bw;
    p.reduction = desc_.reduction;
    p.rows = rows_;
    p.cols = classes_;
    p.target64 = desc_.target_dtype == DType::s64;
    p.error = static_cast<int*>(a.error.data);
    for (int k = 0; k < kLossMaxParams; ++k) p.params[k] = desc_.params[k];
    p.tpr = cfg_.tpr;
    p.block = cfg_.block;
    p.parts = cfg_.parts;
    p.chunk = cfg_.chunk;
    const double scale = desc_.reduction == Reduction::mean ? 1.0 / static_cast<double>(rows_) : 1.0;
    if (bw) {
      bool any = false;
      for (int k = 0; k < 3; ++k) any = any || p.grad[k] != nullptr;
      if (!any) return {};
      p.dy = a.dy.data;
      p.dy_rows = !reduced;
      p.scale = reduced ? scale : 1.0;
    } else if (reduced) {
      p.finish.out = a.out.data;
      p.finish.scale = scale;
    }
    BARACUDA_TRY(fail(L->rows(p, stream)));
    for (int gi = 0; gi < kLossMaxGrads; ++gi) {  // gradients of broadcast inputs: summed back (fixed order)
      if (!g.staged[gi]) continue;
      BARACUDA_TRY(fail(detail::ew_sum_to_shape(desc_.dtype, g.staged[gi], bcast_, a.grad[gi], stream)));
    }
    return {};
  }

  // Pointwise.
  const bool reduce = !bw && reduced;
  PointwiseIteration pi = pointwise_iteration(desc_, bcast_, a, ws, reduce, /*staging=*/true);
  detail::PointwiseLaunch p;
  p.op = desc_.op;
  p.dir = desc_.direction;
  p.reduce = reduce;
  p.it = pi.it;
  p.nin = in.num_inputs();
  p.ngrad = in.num_grads();
  p.vec = allow_vectorized_ && pointwise_vec_ok(pi.it, pi.nout, 16 / size_in_bytes(desc_.dtype));
  for (int k = 0; k < kLossMaxParams; ++k) p.params[k] = desc_.params[k];
  const double n = static_cast<double>(rows_);
  switch (desc_.reduction) {
    case Reduction::none:
    case Reduction::sum:
      p.scale = 1.0;
      break;
    case Reduction::mean:
      p.scale = 1.0 / n;
      break;
    case Reduction::batchmean:  // torch: sum / input.size(0), the sum itself for a 0-dim input
      p.scale = desc_.shapes[0].rank > 0 ? 1.0 / static_cast<double>(desc_.shapes[0].dims[0]) : 1.0;
      break;
  }
  p.dy_scalar = bw && reduced;
  p.parts = cfg_.parts;
  p.chunk = cfg_.chunk;
  if (reduce) {
    p.partial = ws.ptr;
    p.finish.out = a.out.data;
    p.finish.scale = p.scale;
  }
  if (bw) {
    bool any = false;
    for (int g = 0; g < kLossMaxGrads; ++g) any = any || a.grad[g].data != nullptr;
    if (!any) return {};
  }
  BARACUDA_TRY(fail(L->pw(p, stream)));
  // Gradients of broadcast inputs: sum the dense broadcast-shaped gradient back (fixed order).
  for (int g = 0; g < kLossMaxGrads; ++g) {
    if (!pi.staged[g]) continue;
    BARACUDA_TRY(fail(detail::ew_sum_to_shape(desc_.dtype, pi.staged[g], bcast_, a.grad[g], stream)));
  }
  return {};
}

// ---- convenience ---------------------------------------------------------------------------------
namespace {
std::string desc_key(const LossDesc& d) {
  std::string k;
  auto put = [&](const auto& v) { k.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  put(d.op);
  put(d.direction);
  put(d.dtype);
  put(d.reduction);
  put(d.present);
  put(d.target_dtype);
  put(d.fused_grad);
  for (const Shape& s : d.shapes) {
    put(s.rank);
    k.append(reinterpret_cast<const char*>(s.dims.data()),
             sizeof(int64_t) * static_cast<size_t>(std::clamp(s.rank, 0, kMaxRank)));
  }
  for (double v : d.params) put(v);
  return k;
}
}  // namespace

Result<void> loss(cudaStream_t stream, const LossDesc& desc, const LossArgs& args, Workspace ws,
                  const PlanPreference& pref) {
  auto plan = detail::cached_plan<LossPlan>(desc_key(desc), pref,
                                            [&](const Target& t) { return LossPlan::select(t, desc, pref); });
  if (!plan) return plan.error();
  return (*plan)->run(stream, ws, args);
}

Result<size_t> loss_workspace_size(const LossDesc& desc, const PlanPreference& pref) {
  auto plan = detail::cached_plan<LossPlan>(desc_key(desc), pref,
                                            [&](const Target& t) { return LossPlan::select(t, desc, pref); });
  if (!plan) return plan.error();
  return (*plan)->workspace_size();
}

}  // namespace baracuda
