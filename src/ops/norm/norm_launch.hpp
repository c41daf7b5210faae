// What NormPlan::run hands to the kernels: a plain struct shared by the host plan (.cpp) and the
// per-dtype kernel translation units (.cu). No CUDA types, so the plan compiles with a plain
// C++ compiler.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "baracuda/ops/norm.hpp"

namespace baracuda::detail {

/// Tensor slots of a row kernel. Forward: in0 = x, in1 = residual (gumbel_softmax: the noise),
/// out0 = y, out1 = x + residual (gumbel_softmax: the soft sample of a hard forward), mask =
/// softmax's mask (broadcast strides). Backward: in0 = dy, in1 = y (softmax, sparsemax,
/// gumbel_softmax) or x (norms, normalize), out0 = dx.
enum NormSlot : int { kIn0 = 0, kIn1 = 1, kOut0 = 2, kOut1 = 3, kMask = 4, kNumSlots = 5 };
inline constexpr int kNormMaxRowDims = kMaxRank - 1;

/// Elements per thread per chunk. "small" is one 16-byte vector (rows up to 32 vectors use
/// sub-warp groups); "big" is what the register budget allows at 512 threads per CTA
/// (__launch_bounds__(512) gives 128 registers a thread): 32 for the forward (the row only:
/// parameters are read at the output), 16 for the backward (two streams plus the weight and the
/// parameter-gradient sums), 8 for f64 (two registers an element); gumbel_softmax's forward 16
/// (an f32 row and the Philox rounds of its noise: see norm_min_ctas). The 16-bit backward of
/// the norm_packed_bw ops holds its two rows packed (two elements a register), so it
/// too takes 32 at 64 registers: H200, [16384, 4096] bf16, 16 items at 42 registers (6 CTAs of
/// 256) vs 32 at 64 (8 of 128): softmax bw 101.3 -> 100.0 us, normalize bw 104.3 -> 99.6 (more
/// bytes in flight an SM: 128 KB instead of 96). 32 items without the cap: 113-116 registers,
/// 152-156 us; 64 items spill.
constexpr int norm_vec(int elem_bytes) { return 16 / elem_bytes; }
constexpr int norm_small_items(int elem_bytes) { return norm_vec(elem_bytes); }
/// The backward ops whose 16-bit rows are held packed (two elements a register) under a register
/// cap: softmax, log_softmax, gumbel_softmax (softmax's backward times its scale), and normalize
/// with p = 2 (`p2`; other p keep f32 rows).
constexpr bool norm_packed_bw(NormOp op, bool p2) {
  return op == NormOp::softmax || op == NormOp::log_softmax || op == NormOp::gumbel_softmax ||
         (op == NormOp::normalize && p2);
}
constexpr int norm_big_items(NormOp op, Direction dir, int elem_bytes, bool p2 = true) {
  if (elem_bytes == 8) return 8;
  if (dir == Direction::Forward) return op != NormOp::gumbel_softmax ? 32 : 16;
  return elem_bytes == 2 && norm_packed_bw(op, p2) ? 32 : 16;
}
/// Most threads per row (one CTA per row) and most partial-sum slots for parameter gradients.
/// 528 = one wave of the H100 / H200's 132 SMs at the backward's 4 CTAs an SM (512 left 16 CTA
/// places idle: H200 [16384, 4096] bf16 layer_norm bw 150.9 -> 147.6 us, rms_norm bw 122.0 ->
/// 119.9). A constant, not the device's count, so that the gradients' bits do not depend on the GPU.
inline constexpr int kNormMaxTpr = 512;
inline constexpr int kNormMaxSlots = 528;
/// The same for layer_norm's dense-rows kernel with the next row ahead (2 CTAs an SM: one wave of
/// 132 SMs; norm_dense_bw_ahead, plan.cpp).
inline constexpr int kNormAheadSlots = 264;

struct NormLaunch {
  NormOp op = NormOp::softmax;
  int64_t rows = 0;  ///< product of the non-reduced dims
  int64_t n = 0;     ///< row length (product of the reduced dims)
  /// Row index -> element offset, per slot: the coalesced non-reduced dims (row-major).
  int row_ndim = 0;
  int64_t row_size[kNormMaxRowDims] = {};
  int64_t row_stride[kNumSlots][kNormMaxRowDims] = {};
  int64_t col_stride[kNumSlots] = {};  ///< stride of the reduced (merged) dim
  const void* in[2] = {nullptr, nullptr};
  const void* mask = nullptr;  ///< softmax forward: bool (uint8, nonzero = excluded) or additive (dtype)
  NormMask mask_kind = NormMask::none;
  void* out[2] = {nullptr, nullptr};
  const void* weight = nullptr;  ///< dense, normalized shape (norms)
  const void* bias = nullptr;
  bool param_f32 = false;         ///< weight/bias/dweight/dbias are f32 (mixed precision) instead of dtype
  const void* mean_in = nullptr;  ///< backward: saved stats (stats dtype), one per row
  const void* rstd_in = nullptr;
  void* mean_out = nullptr;  ///< forward norms: stats to save (optional)
  void* rstd_out = nullptr;
  void* dweight = nullptr;  ///< backward: parameter gradients (optional)
  void* dbias = nullptr;
  void* partial = nullptr;  ///< workspace: [2][slots][n] stats-dtype partial sums
  int slots = 0;
  double eps = 0;
  /// The op's scalars (kernels see them as St::q0, q1): normalize's p; gumbel_softmax's tau and
  /// hard (0 or 1).
  double op_args[2] = {0, 0};
  uint64_t seed = 0, offset = 0;  ///< gumbel_softmax without a noise tensor: the Philox stream
  // Launch shape (NormPlan::Config).
  int tpr = 32;
  int block = 128;
  /// CTAs a row (1: a group of tpr threads of one CTA owns a row). > 1: a thread-block cluster of
  /// that many CTAs of tpr = block threads owns each row (sm_90+; the launcher falls back to 1).
  int cluster = 1;
  bool big = false;
  bool vec = false;
};

/// Whether the layer/rms_norm backward takes its dense-rows kernel (norm_kernel.cuh:
/// dense_bw_kernel): 16-bit rows, vectorized, one CTA a row whose threads each hold a full share
/// (n == tpr x the backward's big item count), one row dim, parameter gradients asked for.
/// NormPlan::layout_for names it from the same test.
inline bool norm_dense_bw(const NormLaunch& p, int elem_bytes) {
  // Whole warps (the warp butterfly's full mask) and at most kNormMaxTpr threads (its shared
  // buffers); the plan's block == tpr already means tpr > 32.
  return (p.op == NormOp::layer_norm || p.op == NormOp::rms_norm) && elem_bytes == 2 && p.vec && p.big &&
         p.cluster == 1 && p.row_ndim == 1 && p.block == p.tpr && p.tpr >= 32 && p.tpr <= kNormMaxTpr &&
         p.slots > 0 &&
         p.n == int64_t(p.tpr) * norm_big_items(p.op, Direction::Backward, elem_bytes);
}
/// Its variant that loads the next row during this one (dense_bw_kernel's kAhead): layer_norm, in
/// CTAs of at most 256 threads (its ~127 registers a thread).
inline bool norm_dense_bw_ahead(const NormLaunch& p) { return p.op == NormOp::layer_norm && p.tpr <= 256; }
/// The launcher of one (dtype, direction); explicitly instantiated in norm_<dtype>_<dir>.cu.
template <DType D, Direction Dir>
cudaError_t norm_launch(const NormLaunch& p, cudaStream_t stream);

}  // namespace baracuda::detail
