// What LossPlan::run hands to the kernels: plain structs shared by the host plan (.cpp) and the
// per-dtype kernel translation units (.cu). No CUDA device types, so the plan compiles with a
// plain C++ compiler.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "baracuda/ops/loss.hpp"
#include "core/ew_iter.hpp"

namespace baracuda::detail {

// ---- fixed-order two-stage sums ------------------------------------------------------------------
/// First stage: `parts` CTAs of kSumThreads, part b sums items [b * chunk, (b + 1) * chunk) in a
/// fixed order; the second stage (one CTA) sums the parts in a fixed order. The partition is a
/// function of the item count only (loss_sum_partition), so sums are bit-identical run to run and
/// across GPUs.
inline constexpr int kSumThreads = 256;
inline constexpr int kSumMaxParts = 1024;
/// Items a part covers at least (smaller sums take fewer parts), and the granule chunks are
/// rounded to (the pointwise kernel's tile: kSumThreads threads x 16 elements).
inline constexpr int64_t kSumMinChunk = 4096;

/// parts, chunk for `n` items: chunk a multiple of kSumMinChunk, parts = ceil(n / chunk) <= kSumMaxParts.
inline void loss_sum_partition(int64_t n, int* parts, int64_t* chunk) {
  const int64_t want = (n + kSumMaxParts - 1) / kSumMaxParts;
  int64_t c = (want + kSumMinChunk - 1) / kSumMinChunk * kSumMinChunk;
  if (c < kSumMinChunk) c = kSumMinChunk;
  *chunk = c;
  const int64_t p = (n + c - 1) / c;
  *parts = static_cast<int>(p < 1 ? 1 : p);
}

/// The second stage's outputs: out (dtype, one element) = sum_a * scale, divided by sum_b when
/// `divide_by_b` (a weighted mean); sum_b is stored to `sum_b_out` (stats dtype) when given.
struct SumFinish {
  void* out = nullptr;
  void* sum_a_out = nullptr;
  void* sum_b_out = nullptr;
  double scale = 1.0;
  bool divide_by_b = false;
};

// ---- class ops (cross_entropy, nll_loss) ----------------------------------------------------------
inline constexpr int kLossRowDims = kMaxRank - 1;

/// Tensor slots of a class row. Class-shaped (the input's shape): logits (or log-probabilities),
/// probability targets, their gradients. Row-shaped (the input's shape without the class axis):
/// index targets, the unreduced loss, the unreduced upstream gradient.
enum ClassSlot : int { kCsInput, kCsProbs, kCsDinput, kCsDprobs, kCsTarget, kCsLoss, kCsDy, kCsNumSlots };
inline constexpr int kCsClassSlots = 4;  ///< slots [0, 4) have a class stride

/// The cluster kernel's shape (cluster_kernel.cuh): threads a CTA, 16-byte vectors a thread copies
/// to shared memory (one CTA holds kLossClusterThreads * kLossClusterVecs * 16 bytes = 32 KB of a
/// row), and the most CTAs a row spans (> 8 is a non-portable cluster size; H100 and H200 take 16).
inline constexpr int kLossClusterThreads = 512;
inline constexpr int kLossClusterVecs = 4;
inline constexpr int kLossClusterMaxCtas = 16;

/// The launch shape of a class row (LossPlan::Config's tpr, block, cluster): a function of the
/// problem only (dtype, classes, whether the forward fuses the gradient of class-index targets or
/// computes their loss alone, the architecture, whether 16-byte vectors are allowed). Shared by
/// cross_entropy / nll_loss and the chunks of linear_cross_entropy.
struct ClassShape {
  int tpr = 32;
  int block = 128;
  int cluster = 0;
};
ClassShape class_launch_shape(DType dtype, int64_t classes, bool fused_index_grad, bool index_loss_only, int sm,
                              bool allow_vectorized);

/// What class_run launches: the kernels before the rows (the fused gradient's mean divisor, the
/// class weights' total), the row kernel, the reduction after the rows. cross_entropy / nll_loss
/// run all three; linear_cross_entropy runs the first and the last once over every token and the
/// rows once per chunk.
inline constexpr uint8_t kClassPhasePre = 1, kClassPhaseRows = 2, kClassPhasePost = 4, kClassPhaseAll = 7;

/// What a class launch does; the kernel's mode is derived from (op, probs, fw, grad).
struct ClassLaunch {
  uint8_t phases = kClassPhaseAll;
  LossOp op = LossOp::cross_entropy;
  bool probs = false;  ///< cross_entropy with probability targets
  bool fw = true;      ///< compute the loss (per row, then the reduction)
  bool grad = false;   ///< write the input's gradient (backward, or forward with fused_grad)
  /// Backward of a fused forward: scale the forward's gradient (dinput, contiguous, computed with
  /// dy = 1) in place by dy[0]; nothing is written when dy is 1.
  bool rescale = false;
  Reduction reduction = Reduction::mean;
  int64_t rows = 0;
  int64_t classes = 0;
  /// Row index -> element offset per slot: the coalesced non-class dims, innermost first.
  int row_ndim = 0;
  int64_t row_size[kLossRowDims] = {};
  int64_t row_stride[kCsNumSlots][kLossRowDims] = {};
  int64_t cstride[kCsClassSlots] = {};  ///< class-axis stride of the class-shaped slots
  const void* input = nullptr;
  const void* probs_target = nullptr;
  const void* target = nullptr;  ///< class indices
  bool target64 = true;
  const void* weight = nullptr;  ///< [C], dense, dtype
  void* dinput = nullptr;
  void* dprobs = nullptr;
  void* loss = nullptr;          ///< reduction none: the user's out (kCsLoss strides)
  void* loss_rows = nullptr;     ///< reduced forward: workspace, one stats-dtype value per row
  void* weight_rows = nullptr;   ///< mean over indices: workspace, the row's target weight
  void* lse_out = nullptr;       ///< stats dtype, dense, one per row
  const void* lse_in = nullptr;  ///< backward
  const void* dy = nullptr;      ///< null: 1 (fused forward gradient)
  bool dy_rows = false;          ///< dy has the row shape (reduction none), else one element
  /// Mean over indices: the divisor (stats dtype): the backward's saved total weight, or (linear
  /// chunks) the one the pre-phase computed over every token.
  const void* total_weight_in = nullptr;
  void* out = nullptr;               ///< reduced forward: the loss (dtype, one element)
  void* total_weight_out = nullptr;  ///< reduced forward (optional)
  void* partial = nullptr;           ///< workspace: [parts] pairs of stats-dtype sums
  void* scratch = nullptr;           ///< workspace: [0] total weight (fused), [1] sum of weight[C]
  int parts = 1;
  int64_t chunk = 0;
  int* error = nullptr;
  int64_t ignore_index = -100;
  double smoothing = 0;
  // Launch shape (LossPlan::Config).
  int tpr = 32;
  int block = 128;
  bool vec = false;
  /// Fused forward over class indices: CTAs of the thread-block cluster a row spans (2..16, the
  /// cluster kernel), 0 for the streaming kernel; cluster_seg: classes a CTA owns (whole vectors).
  int cluster = 0;
  int64_t cluster_seg = 0;
};

// ---- pointwise ops ---------------------------------------------------------------------------------
/// Operand order of the pointwise iteration (EwIter: outputs first, then inputs): forward none
/// [out | in0..in3], forward reduced [ | in0..in3], backward [grad0..grad2 | dy, in0..in3]. Absent
/// operands (optional inputs, unwanted gradients) have a null pointer and zero strides.
struct PointwiseLaunch {
  LossOp op = LossOp::mse_loss;
  Direction dir = Direction::Forward;
  bool reduce = false;  ///< forward with mean/sum/batchmean
  EwIter it;
  int nin = 0;    ///< table inputs (absent ones included)
  int ngrad = 0;  ///< backward: table gradients (absent ones included)
  bool vec = false;
  double params[kLossMaxParams] = {};
  double scale = 1.0;      ///< reduced: 1/n (mean), 1/shape[0] (batchmean), 1 (sum); backward: the same on dy
  bool dy_scalar = false;  ///< backward of a reduced loss: dy is one element
  void* partial = nullptr;
  int parts = 1;
  int64_t chunk = 0;
  SumFinish finish;
};

// ---- rows ops (losses over the last dim) ------------------------------------------------------------
/// Tensor slots of a rows launch. Element-shaped (the broadcast shape [..., D], with a stride along
/// D): the three floating inputs, their gradients and multilabel_margin's label rows. Row-shaped
/// (the broadcast shape without D): a per-row target (multi_margin's class, cosine_embedding's
/// +-1), the unreduced loss, the unreduced upstream gradient.
enum RowsSlot : int { kRsIn0, kRsIn1, kRsIn2, kRsG0, kRsG1, kRsG2, kRsLabels, kRsTarget, kRsLoss, kRsDy, kRsNumSlots };
inline constexpr int kRsElemSlots = 7;  ///< slots [0, 7) have a stride along D

struct RowsLaunch {
  LossOp op = LossOp::cosine_embedding_loss;
  bool fw = true;  ///< forward: per-row losses (then the reduction); backward: the gradients
  Reduction reduction = Reduction::mean;
  int64_t rows = 0;
  int64_t cols = 0;  ///< D
  /// Row index -> element offset per slot: the coalesced row dims, innermost first.
  int row_ndim = 0;
  int64_t row_size[kLossRowDims] = {};
  int64_t row_stride[kRsNumSlots][kLossRowDims] = {};
  int64_t estride[kRsElemSlots] = {};  ///< stride along D (0: broadcast)
  const void* in[3] = {};              ///< floating inputs in table order; null reads as 1 (a missing weight)
  void* grad[3] = {};                  ///< null: not wanted
  const void* labels = nullptr;        ///< multilabel_margin: [..., D] class indices, a row ended by a negative one
  const void* target = nullptr;        ///< per-row target: multi_margin's class index, cosine_embedding's +-1 (dtype)
  bool target64 = true;                ///< index targets are int64 (else int32)
  const void* weight = nullptr;        ///< multi_margin: [D] dense, indexed by the target
  uint8_t* flags = nullptr;            ///< multilabel_margin: workspace, rows x D "is a target" bytes
  void* loss = nullptr;                ///< reduction none: the user's out (kRsLoss strides)
  void* loss_rows = nullptr;           ///< reduced forward: workspace, one stats-dtype value per row
  const void* dy = nullptr;            ///< backward
  bool dy_rows = false;                ///< dy has the row shape (reduction none), else one element
  double scale = 1.0;                  ///< backward: the reduction's factor on dy (mean: 1 / rows)
  void* partial = nullptr;             ///< workspace: [parts] pairs of stats-dtype sums
  int parts = 1;
  int64_t chunk = 0;
  SumFinish finish;
  int* error = nullptr;
  double params[kLossMaxParams] = {};
  int tpr = 32;
  int block = 128;
};

/// The launch sequence of one (dtype): kernels for a class op, a pointwise op.
template <DType D>
cudaError_t loss_class_run(const ClassLaunch& p, cudaStream_t stream);
template <DType D>
cudaError_t loss_pointwise_run(const PointwiseLaunch& p, cudaStream_t stream);
template <DType D>
cudaError_t loss_rows_run(const RowsLaunch& p, cudaStream_t stream);
/// loss_class_run of `dtype` (plan.cpp's table); cudaErrorInvalidValue for a dtype without kernels.
cudaError_t loss_class_launch(DType dtype, const ClassLaunch& p, cudaStream_t stream);

}  // namespace baracuda::detail
