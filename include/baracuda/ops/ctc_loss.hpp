// CTC loss (torch.nn.functional.ctc_loss), forward and backward: the `ctc_loss` row of the loss
// family (loss_ops.def, kind `ctc`), served by its own plan, CtcLossPlan, the way
// QuantizedLinearPlan serves a row of the quant table.
//
//   CtcLossDesc d = CtcLossDesc::make(DType::f32, Shape::of({T, N, C}), Shape::of({N, S}), DType::s64);
//   auto plan = CtcLossPlan::select(Target::current().value(), d);
//   CtcLossArgs a; a.log_probs = lp; a.targets = tg; a.input_lengths = il; a.target_lengths = tl; a.out = loss;
//   plan->run(stream, Workspace{ws, plan->workspace_size()}, a);
//
// ---- Semantics (ATen's LossCTC.cpp / cuda/LossCTC.cu, native path) ----------------------------------------
// log_probs [T, N, C] (or unbatched [T, C], N = 1), any strides; targets padded [N, S] (item n's labels
// are targets[n, :target_lengths[n]]) or concatenated 1-D [sum(target_lengths)] (item n starts at the
// sum of the lengths before it; unbatched: [S] holding the one target); input_lengths / target_lengths
// [N] ([] or [1] unbatched) int32/int64 DEVICE tensors: run() never reads them on the host.
// Per item (Graves et al. 2006, in log space, l' = the target with blanks around and between labels):
//   log_alpha[t, s] = lse(log_alpha[t-1, s], log_alpha[t-1, s-1], log_alpha[t-1, s-2] if l'_s != l'_{s-2})
//                     + log_probs[t, l'_s]                                        (ATen's formula and order)
//   nll = -lse(log_alpha[Tn-1, 2 Sn], log_alpha[Tn-1, 2 Sn-1]);  Tn = 0: nll = 0 if Sn = 0 else +inf
//   zero_infinity: nll = +inf -> 0.  Reductions: none ([N], unbatched []), sum, mean = the mean over the
//   batch of nll / max(target_length, 1) (torch's clamp), an empty batch's mean is NaN.
// Backward (ATen's ctc_loss_backward_gpu): log_beta mirrors log_alpha (same arithmetic on the reversed
// time and label sequences); for t < Tn and every class c,
//   grad[t, n, c] = (exp(lp) - exp(lcab_c + nll - lp)) * g_n,  lcab_c = log sum over states s with l'_s = c
//   of exp(log_alpha[t, s] + log_beta[t, s]),
// g_n = dy[n] (none), dy (sum), dy / N / max(target_length, 1) (mean); 0 for t >= Tn and, with
// zero_infinity, for items whose nll is +inf. This is torch's gradient as the CUDA kernel computes it
// (exp(lp) included: the form that assumes log_softmax inputs). An item whose nll is +inf (no
// alignment: e.g. target longer than input) without zero_infinity has NaN gradients; which classes are
// NaN follows ATen's choice of algorithm, a function of the shape only: its "small" path
// (2T + 2.4N + 0.2C <= 450, integer arithmetic as in ATen) makes every class NaN at t < Tn, its
// "large" path only the blank and the item's target classes (the others keep exp(lp) * g_n).
// Precision: f32 math for f32/f16/bf16 (f16/bf16: torch has no such kernel; the result agrees with
// torch on the inputs upcast to f32), f64 for f64. The f32 recursion runs in base 2 with
// ex2/lg2.approx (|error| ~1e-7 absolute per step, below the rounding of log_alpha itself once
// |log_alpha| > 1; saved tensors are natural logs); f64 is ATen's arithmetic exactly. Either way the
// rounding of log_alpha grows with its magnitude: gradients of long sequences in f32 carry a relative
// error of ~eps * |nll| * sqrt(T), as torch's own f32 kernel does.
// Deterministic and bit-stable: no atomics on results; the per-class sums over states run in a fixed
// order; reductions are fixed-order sums.
//
// ---- Invalid input (never read out of bounds; run() never reads anything back) ----------------------------
// The optional `error` output (int32, one element, zeroed by the caller) gets bits OR-ed in:
//   1 (kCtcErrorInvalid): a length negative, input_length > T, target_length > S (padded) or past the
//     end of the concatenated targets (or their total != targets.numel(), torch's size check), a target
//     length above desc.max_target_length when that bound is not past T, or a label outside [0, C).
//     torch raises (or reads out of bounds) there; this item's loss and gradient are NaN.
//   2 (kCtcErrorBlankTarget): a label equal to blank. torch computes with it; so does this plan.
//
// ---- What the forward saves for the backward ----------------------------------------------------------
// log_alpha (and, with fused_beta, log_beta) [N, T, states()] and neg_log_likelihood [N], in
// loss_stats_dtype() (f64 for f64, f32 otherwise), dense. states() = 2 * min(max target length, T) + 1:
// an item whose target is longer than T has no alignment (nll = +inf) and needs no state. Entries past
// an item's input length or 2 * target_length + 1 states are not written. With fused_beta the forward
// runs the beta recursion alongside the alpha one (a second CTA per item, concurrently) so the
// backward is one parallel pass; without it the backward recomputes log_beta into its workspace.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "baracuda/core/preference.hpp"
#include "baracuda/core/sku.hpp"
#include "baracuda/core/status.hpp"
#include "baracuda/core/tensor.hpp"
#include "baracuda/core/workspace.hpp"
#include "baracuda/ops/loss.hpp"  // Reduction, loss_stats_dtype

namespace baracuda {

/// Bits of CtcLossArgs::error.
inline constexpr int32_t kCtcErrorInvalid = 1;
inline constexpr int32_t kCtcErrorBlankTarget = 2;
/// The most states (2 * max target length + 1, after capping the length at T) a plan takes: one CTA
/// holds an item's states, up to 4 per thread.
inline constexpr int64_t kCtcMaxStates = 4095;

struct CtcLossDesc {
  Direction direction = Direction::Forward;
  DType dtype = DType::f32;                 ///< log_probs, the loss, dy, the gradient: f32, f64, f16, bf16
  DType target_dtype = DType::s64;          ///< int32 / int64
  DType input_lengths_dtype = DType::s64;   ///< int32 / int64
  DType target_lengths_dtype = DType::s64;  ///< int32 / int64
  Shape log_probs{};                        ///< [T, N, C] or unbatched [T, C]
  Shape targets{};                          ///< [N, S] padded, or 1-D concatenated ([S] unbatched)
  /// An upper bound of every target length; -1: from the shapes (padded: S; concatenated: the total).
  /// Only sizes the saved state tensors: a tight bound (the Python layer passes the exact maximum when
  /// the lengths are on the host) saves memory and threads.
  int64_t max_target_length = -1;
  int64_t blank = 0;
  Reduction reduction = Reduction::mean;  ///< none, mean, sum
  bool zero_infinity = false;
  /// Forward: also compute log_beta (written to save_log_beta). Backward: log_beta is given (the
  /// forward's save_log_beta) instead of recomputed in the workspace.
  bool fused_beta = false;

  static CtcLossDesc make(DType dt, const Shape& log_probs, const Shape& targets, DType target_dtype = DType::s64,
                          Reduction r = Reduction::mean, int64_t blank = 0, bool zero_infinity = false,
                          Direction dir = Direction::Forward);
  bool batched() const { return log_probs.rank == 3; }
  /// targets is [N, S] (as opposed to concatenated).
  bool padded() const { return targets.rank == 2; }
};

/// Per-call tensors:
///
/// | direction | inputs                                                        | outputs                           |
/// | forward   | log_probs, targets, input_lengths, target_lengths             | out, [save_log_alpha],            |
/// |           |                                                               | [save_log_beta] (fused_beta),     |
/// |           |                                                               | [save_neg_log_likelihood], [error]|
/// | backward  | dy, log_probs, targets, input_lengths, target_lengths,        | grad (d log_probs), [error]       |
/// |           | log_alpha, neg_log_likelihood, [log_beta] (fused_beta)        |                                   |
///
/// `out` / `dy`: loss_shape() for none, one element otherwise, any strides. grad: log_probs' shape, any
/// strides. Saved tensors: dense, loss_stats_dtype(dtype), log_alpha_shape() and [N].
struct CtcLossArgs {
  TensorRef log_probs;
  TensorRef targets;
  TensorRef input_lengths;
  TensorRef target_lengths;
  TensorRef dy;
  TensorRef log_alpha;
  TensorRef log_beta;
  TensorRef neg_log_likelihood;
  TensorMut out;
  TensorMut save_log_alpha;
  TensorMut save_log_beta;
  TensorMut save_neg_log_likelihood;
  TensorMut grad;
  TensorMut error;  ///< optional int32 scalar; kCtcError* bits are OR-ed in
};

class CtcLossPlan {
 public:
  /// Validates the descriptor (ranks, targets layout, blank in [0, C), index dtypes, reduction, states
  /// within kCtcMaxStates) and picks the launch shape (a function of the problem only). Dtypes come
  /// from loss_ops.def's ctc_loss row. Honours `pref` as the loss family: backend other than
  /// Any/Native, tf32=Require and reduced_precision_reduction=Require are refused; deterministic and
  /// bit-stable always.
  static Result<CtcLossPlan> select(const Target& target, const CtcLossDesc& desc, const PlanPreference& pref = {});
  /// Forward, reduced: per-item losses. Backward: per-item records, a [N, C] first-position table of
  /// the target labels, [N, S] links between equal labels, and log_beta unless fused_beta.
  size_t workspace_size() const { return workspace_bytes_; }
  Result<void> can_implement(const CtcLossArgs& args) const;
  /// Enqueues on `stream`; never allocates, synchronizes or reads the lengths or the error flag.
  Result<void> run(cudaStream_t stream, Workspace ws, const CtcLossArgs& args) const;
  const KernelSku& sku() const { return sku_; }
  const PrecisionGuarantee& precision() const { return sku_.precision; }
  const CtcLossDesc& desc() const { return desc_; }
  /// `out`'s shape for reduction none: [N] ([] unbatched); reduced losses are one element.
  const Shape& loss_shape() const { return loss_shape_; }
  /// [N, T, states()]: save_log_alpha / save_log_beta / log_alpha / log_beta.
  Shape log_alpha_shape() const { return Shape::of({batch_, time_, states_}); }
  int64_t time() const { return time_; }
  int64_t batch() const { return batch_; }
  int64_t classes() const { return classes_; }
  /// 2 * min(max target length, T) + 1.
  int64_t states() const { return states_; }
  /// What run() launches for these tensors: "alpha(threads=224,k=1)", "alpha+beta(...)" (+ "+sum"
  /// for a reduced loss); backward "tables+beta(...)+grad-rows" or "tables+grad-rows"; "empty".
  std::string layout_for(const CtcLossArgs& args) const;

  struct Config {
    int threads = 32;          ///< recursion CTA: one state per thread (k of them when states > 1024)
    int k = 1;                 ///< states a thread holds: 1, 2 or 4
    size_t smem_bytes = 0;     ///< recursion CTA's dynamic shared memory
    bool torch_large = false;  ///< ATen's large-problem path (the NaN pattern of infeasible items)
  };
  const Config& config() const { return cfg_; }

 private:
  CtcLossDesc desc_;
  KernelSku sku_;
  Config cfg_;
  Shape loss_shape_{};
  int64_t time_ = 0, batch_ = 0, classes_ = 0, states_ = 1, s_cap_ = 0;
  size_t workspace_bytes_ = 0;
};

/// One-line convenience: select (cached per thread by descriptor and preference) and run.
Result<void> ctc_loss(cudaStream_t stream, const CtcLossDesc& desc, const CtcLossArgs& args, Workspace ws = {},
                      const PlanPreference& pref = {});
/// The workspace the cached plan of `desc` needs.
Result<size_t> ctc_loss_workspace_size(const CtcLossDesc& desc, const PlanPreference& pref = {});

}  // namespace baracuda
