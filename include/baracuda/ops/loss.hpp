// The loss family (OPS.md R): cross_entropy (class indices or probabilities, weights,
// ignore_index, label smoothing) and nll_loss over a class axis, the fused linear + cross-entropy
// (linear_cross_entropy: the [N, V] logits never materialised), the pointwise losses (mse, l1,
// smooth_l1, huber, binary_cross_entropy[_with_logits], kl_div, poisson_nll, gaussian_nll,
// soft_margin, hinge_embedding, margin_ranking) and the losses over the last dim
// (cosine_embedding, triplet_margin, multi_margin, multilabel_margin, multilabel_soft_margin),
// forward and backward, reductions none / mean / sum (and kl_div's batchmean).
//
//   auto desc = LossDesc::cross_entropy(DType::bf16, Shape::of({8192, 128256}), DType::s64, false, Reduction::mean);
//   auto plan = LossPlan::select(Target::current().value(), desc);
//   LossArgs a; a.in[0] = logits; a.in[1] = target; a.out = loss; a.save_lse = lse; a.save_total_weight = tw;
//   plan->run(stream, Workspace{ws, plan->workspace_size()}, a);
//
// Forward and backward are two directions of one plan (as in the other families). The backward
// of cross_entropy recomputes the softmax from the logits and the log-sum-exp its forward saved
// (one read of the logits, one write of the gradient); with `fused_grad` the forward writes the
// gradient too, in the same kernel: on sm_90 a row longer than one CTA holds is spread over a
// thread-block cluster that keeps it on chip (one read of the logits, one write of the gradient),
// shorter rows are read a second time while in L2. Reductions are
// deterministic and bit-stable: per-row (or per-element) losses summed in a fixed order in two
// stages whose partition depends on the problem only; no atomics anywhere.
//
// Class targets outside [0, C) that are not ignore_index are never dereferenced: the row's loss
// and gradient are NaN and, when LossArgs::error is given (a device int32 scalar the caller
// zeroes), the kernel stores 1 there. run() never reads it back. The same holds for
// linear_cross_entropy, multi_margin_loss and multilabel_margin_loss.
//
// linear_cross_entropy (hidden [N, H], weight [V, H], target [N]) walks the tokens in chunks of
// T rows (T chosen by select() so the [T, V] logits fit a 512 MiB slice of the workspace, or the
// chunk_tokens parameter): per chunk, GemmPlan writes logits = hidden_c * weight^T (input dtype,
// f32 accumulation) into the workspace, the fused cross_entropy kernel writes the chunk's row
// losses and, with gradients, dlogits in place; then grad_input_c = dlogits * weight and
// grad_weight (+)= dlogits^T * hidden_c (two more GEMMs; beta = 0 on the first chunk, 1 after).
// The mean's divisor is computed on the device before the first chunk, the loss is summed after
// the last one: no host synchronization, graph-capturable.
#pragma once
#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "baracuda/core/preference.hpp"
#include "baracuda/core/sku.hpp"
#include "baracuda/core/status.hpp"
#include "baracuda/core/tensor.hpp"
#include "baracuda/core/workspace.hpp"

namespace baracuda {

enum class LossOp : uint8_t {
#define BARACUDA_LOSS(name, ...) name,
#include "baracuda/ops/loss_ops.def"
#undef BARACUDA_LOSS
};

/// classes: a row over a class axis; pointwise: a functor over broadcast inputs; linear: hidden x
/// weight^T fused with cross_entropy, chunked over tokens; rows: a functor over rows of the last
/// dim (broadcast inputs). See loss_ops.def.
enum class LossKind : uint8_t { classes, pointwise, linear, rows, ctc };  // ctc: its own plan, CtcLossPlan

/// torch's reduction argument; batchmean (kl_div only) is the sum divided by input.shape[0].
enum class Reduction : uint8_t { none, mean, sum, batchmean };
const char* to_string(Reduction r);
std::optional<Reduction> reduction_from_name(std::string_view name);

namespace detail {
class LinearCe;  // src/ops/loss/linear_ce.hpp
}

inline constexpr int kLossMaxInputs = 4;
inline constexpr int kLossMaxGrads = 3;
inline constexpr int kLossMaxParams = 4;

/// One row of loss_ops.def, with its comma-separated columns parsed.
struct LossOpInfo {
  LossOp op;
  const char* name;
  LossKind kind;
  DTypeSet fw_dtypes;
  DTypeSet bw_dtypes;
  const char* inputs;  ///< "input,target,weight?"
  const char* grads;   ///< "input,target"
  const char* params;  ///< "beta=1"
  double tol;

  int num_inputs() const;
  std::string input_name(int k) const;
  bool input_optional(int k) const;
  int input_index(std::string_view name) const;  ///< -1 when the op has no such input
  int num_grads() const;
  std::string grad_name(int g) const;
  int grad_input(int g) const;  ///< the input position gradient g belongs to
  int num_params() const;
  std::string param_name(int k) const;
  double param_default(int k) const;
  int param_index(std::string_view name) const;  ///< -1 when the op has no such parameter
};

std::span<const LossOpInfo> loss_ops();
const LossOpInfo& info(LossOp op);
std::optional<LossOp> loss_op_from_name(std::string_view name);

/// dtype of the saved statistics (log-sum-exp, total weight) and of every accumulator: f64 for
/// f64 inputs, f32 otherwise.
DType loss_stats_dtype(DType dtype);

struct LossDesc {
  LossOp op = LossOp::mse_loss;
  Direction direction = Direction::Forward;
  DType dtype = DType::f32;  ///< every floating tensor input, the loss, the gradients
  Reduction reduction = Reduction::mean;
  /// Shape of each table input (loss_ops.def `inputs` order). Class ops: input [N, C, d1, ...],
  /// [N, C] or [C]; target the input's shape without the class axis (indices) or the input's
  /// shape (probabilities); weight [C]. linear_cross_entropy: input [N, H], weight [V, H],
  /// target [N]. Rows ops: the floating inputs broadcast (torch rules) to [..., D] (D: the last
  /// dim, reduced per row); a row-shaped target (cosine_embedding, multi_margin) has that shape
  /// without D, multilabel_margin's the full shape; multi_margin's weight is [C] (C = D).
  /// cosine_embedding's two inputs broadcast along the row dims only (each has D last: torch takes
  /// each input's norm over its own last dim).
  std::array<Shape, kLossMaxInputs> shapes{};
  uint8_t present = 0;  ///< bit k: input k is given (required inputs must be)
  /// Class ops: int32/int64 (indices) or `dtype` (probabilities); linear_cross_entropy,
  /// multi_margin_loss, multilabel_margin_loss: int32/int64; ignored by the other ops (their
  /// targets have `dtype`).
  DType target_dtype = DType::s64;
  /// Scalar parameters in the table's order, table defaults unless set (set_param). Flags are
  /// 0/1; cross_entropy: ignore_index (an integer), label_smoothing in [0, 1].
  std::array<double, kLossMaxParams> params{};
  /// cross_entropy: Forward: also write the gradient of `out` w.r.t. the input (grad[0], and
  /// grad[1] w.r.t. probability targets) times LossArgs::dy (1 when dy is not given), from the
  /// same kernel. Backward (mean/sum): the backward of such a forward run with dy = 1: scales
  /// grad[0] (that gradient, contiguous) in place by dy, and writes nothing when dy is 1 (decided
  /// on the device: no host synchronization, graph-capturable).
  /// linear_cross_entropy (Forward only): the run also writes grad[0] (d input) and grad[1]
  /// (d weight), each optional, times dy (1 when not given), from the same chunks.
  bool fused_grad = false;

  /// A pointwise (or any) op with `shapes` for its first inputs, table defaults for params.
  static LossDesc make(LossOp op, DType dt, std::initializer_list<Shape> shapes, Reduction r = Reduction::mean,
                       Direction dir = Direction::Forward);
  /// cross_entropy over `input` ([N, C, ...], [N, C] or [C]); target_dtype int32/int64 for class
  /// indices, `dt` for class probabilities.
  static LossDesc cross_entropy(DType dt, const Shape& input, DType target_dtype, bool weight,
                                Reduction r = Reduction::mean, int64_t ignore_index = -100,
                                double label_smoothing = 0.0, Direction dir = Direction::Forward);
  static LossDesc nll_loss(DType dt, const Shape& input, DType target_dtype, bool weight, Reduction r = Reduction::mean,
                           int64_t ignore_index = -100, Direction dir = Direction::Forward);
  /// linear_cross_entropy over hidden [tokens, hidden] and weight [vocab, hidden]; target [tokens]
  /// of target_dtype (int32/int64). chunk_tokens: tokens a chunk, 0 for the plan's choice.
  /// class_weight: a per-class weight [vocab] is given (in[3], cross_entropy's `weight`).
  static LossDesc linear_cross_entropy(DType dt, int64_t tokens, int64_t hidden, int64_t vocab,
                                       DType target_dtype = DType::s64, Reduction r = Reduction::mean,
                                       int64_t ignore_index = -100, double label_smoothing = 0.0,
                                       int64_t chunk_tokens = 0, Direction dir = Direction::Forward,
                                       bool class_weight = false);
  /// Sets a parameter by its table name; fails naming the op and the unknown name.
  Result<void> set_param(std::string_view name, double value);
  double param(std::string_view name) const;  ///< NaN when the op has no such parameter
  bool has(int k) const { return (present >> k) & 1; }
};

/// Per-call tensors. Which ones a call uses:
///
/// | op / direction     | inputs                                     | outputs                                 |
/// | class fw           | in[0..2] (input, target, [weight]), [dy]   | out, [save_lse], [save_total_weight],   |
/// |                    |                                            | [error], [grad[0..1]] (fused_grad)      |
/// | class bw           | dy, in[0..2], lse (cross_entropy),         | grad[0] (= d input),                    |
/// |                    | total_weight (mean over class indices)     | [grad[1]] (= d target, probabilities)   |
/// | class bw fused     | dy                                         | grad[0] (in place: the fused gradient)  |
/// | pointwise fw       | in[...]                                    | out                                     |
/// | pointwise bw       | dy, in[...]                                | grad[g] per table gradient (null: none) |
/// | linear fw          | in[0..2] (input, weight, target)           | out, [error]                            |
/// | linear fw fused    | in[0..2], [dy]                             | out, [error], [grad[0]], [grad[1]]      |
/// | linear bw          | dy, in[0..2]                               | [grad[0]], [grad[1]], [error]           |
/// | rows fw            | in[...]                                    | out, [error] (index targets)            |
/// | rows bw            | dy, in[...]                                | grad[g] per table gradient (null: none) |
///
/// linear_cross_entropy: input, weight and the gradients dense and 16-byte aligned (the GEMMs were
/// chosen for it); target and a per-row out / dy any strides. Its backward recomputes the logits
/// chunk by chunk (the path for reduction none, whose dy is known only then); the forward with
/// fused_grad is the training path for mean/sum (grad_output = 1, rescaled afterwards).
///
/// `out` is a tensor of one element ([] in torch) for mean/sum/batchmean; for none it has the
/// loss shape (LossPlan::loss_shape(): the broadcast shape for pointwise losses, the input's shape
/// without the class axis for class ops, [N] for linear_cross_entropy, the broadcast shape without
/// the last dim for rows ops), any strides. `dy` has `out`'s shape (any strides: an
/// expanded ones-tensor is fine). Statistics (lse: one per row, total_weight: one element) are
/// dense tensors of loss_stats_dtype(). Pointwise (and rows) gradients have their input's shape; an input
/// that broadcast receives the sum over its broadcast dims (fixed order, through the workspace).
struct LossArgs {
  std::array<TensorRef, kLossMaxInputs> in{};
  TensorRef dy;
  TensorRef lse;           ///< cross_entropy backward: the forward's save_lse
  TensorRef total_weight;  ///< class backward with mean over indices: the forward's save_total_weight
  TensorMut out;
  TensorMut save_lse;           ///< cross_entropy forward (optional): log-sum-exp per row
  TensorMut save_total_weight;  ///< class forward, reduced (optional): sum of the non-ignored targets' weights
  std::array<TensorMut, kLossMaxGrads> grad{};
  TensorMut error;  ///< class ops (optional): int32 scalar set to 1 on a target outside [0, C)
};

class LossPlan {
 public:
  /// Validates the descriptor and chooses the launch shape (a function of the problem only).
  /// Honours `pref`: backend other than Any/Native, tf32=Require and
  /// reduced_precision_reduction=Require are refused; every plan is deterministic and
  /// bit-stable; vectorized=Forbid disables the 16-byte path. linear_cross_entropy hands backend,
  /// tf32 and require_bit_stable to its GEMMs (cuBLASLt: deterministic, not bit-stable across
  /// devices), which refuse what they cannot honour.
  static Result<LossPlan> select(const Target& target, const LossDesc& desc, const PlanPreference& pref = {});
  /// linear_cross_entropy: the [T, V] logits chunk, per-row values, partial sums and the largest
  /// GEMM workspace. Reduced losses: per-row values and partial sums; broadcast pointwise gradients: a dense
  /// gradient of the broadcast shape before its sum; 0 otherwise.
  size_t workspace_size() const { return workspace_bytes_; }
  Result<void> can_implement(const LossArgs& args) const;
  /// Enqueues on `stream`; never allocates, synchronizes or reads the error flag.
  Result<void> run(cudaStream_t stream, Workspace ws, const LossArgs& args) const;
  const KernelSku& sku() const { return sku_; }
  const PrecisionGuarantee& precision() const { return sku_.precision; }
  const LossDesc& desc() const { return desc_; }
  /// `out`'s shape for reduction none ([] otherwise is what `out` holds).
  const Shape& loss_shape() const { return loss_shape_; }
  /// Class ops: rows (positions other than the class axis) and classes; pointwise: elements, 1;
  /// linear: tokens and vocabulary; rows ops: rows and the last dim.
  int64_t rows() const { return rows_; }
  int64_t classes() const { return classes_; }
  /// The variant run() takes for these tensors, e.g. "cta-rows(tpr=512)-vec16",
  /// "cluster-rows(ctas=8)-vec16", "column-rows-scalar", "pointwise-contiguous-vec16",
  /// "pointwise-strided", "chunks(4x2048)+cluster-rows(ctas=8)-vec16", "last-dim-rows(tpr=32)",
  /// "empty".
  std::string layout_for(const LossArgs& args) const;

  struct Config {
    int tpr = 32;       ///< class ops: threads per row (power of two, 1..512)
    int block = 128;    ///< threads per CTA
    int parts = 1;      ///< reduced losses: first-stage partial sums (a function of the problem)
    int64_t chunk = 0;  ///< elements (rows) per first-stage part
    /// cross_entropy's fused forward over class indices on sm_90+, rows longer than one CTA holds
    /// (32 KB): CTAs of the thread-block cluster that holds a row (2..16), 0 otherwise. Taken when
    /// the row is contiguous and 16-byte aligned (layout_for); the streaming kernel otherwise.
    int cluster = 0;
    /// linear_cross_entropy: tokens a chunk (the [T, V] logits slice of the workspace) and chunks.
    int64_t chunk_tokens = 0;
    int64_t chunks = 0;
  };
  const Config& config() const { return cfg_; }

 private:
  LossDesc desc_;
  KernelSku sku_;
  Config cfg_;
  Shape loss_shape_{};
  Shape bcast_{};  ///< pointwise: the broadcast shape of the inputs
  int64_t rows_ = 0, classes_ = 1;
  size_t workspace_bytes_ = 0;
  bool allow_vectorized_ = true;
  /// linear_cross_entropy: the GEMM plans and chunk geometry (shared between plan copies).
  std::shared_ptr<const detail::LinearCe> linear_;
};

/// One-line convenience: select (cached per thread by descriptor) and run.
Result<void> loss(cudaStream_t stream, const LossDesc& desc, const LossArgs& args, Workspace ws = {},
                  const PlanPreference& pref = {});
/// The workspace the cached plan of `desc` needs (selects it when needed; linear_cross_entropy's
/// GEMM heuristics then run once, not per call).
Result<size_t> loss_workspace_size(const LossDesc& desc, const PlanPreference& pref = {});

}  // namespace baracuda
