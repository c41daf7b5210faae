// What CtcLossPlan::run hands to the CTC kernels (ctc_kernel.cuh): a plain struct shared by the host
// plan (ctc.cpp) and the kernel translation unit (ctc_kernel.cu). No CUDA device types, so the plan
// compiles with a plain C++ compiler.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "baracuda/ops/ctc_loss.hpp"

namespace baracuda::detail {

/// Recursion CTA: at most this many threads, each holding up to kCtcMaxK states.
inline constexpr int kCtcMaxThreads = 1024;
inline constexpr int kCtcMaxK = 4;
/// log_probs values a thread keeps in flight ahead of the recursion (registers: kCtcPrefetch / k per
/// state), so the global loads of step t + kCtcPrefetch / k overlap the arithmetic of step t.
inline constexpr int kCtcPrefetch = 8;
/// Gradient kernel: one warp a (t, n) row, this many warps a CTA.
inline constexpr int kCtcGradWarps = 8;
/// Reduced forward: one CTA sums the per-item losses in a fixed order.
inline constexpr int kCtcSumThreads = 256;

/// What the recursion kernel found out about an item, for the gradient kernel (backward workspace).
enum CtcItemStatus : int32_t {
  kCtcItemOk = 0,          ///< states computed (or none needed: input_length 0)
  kCtcItemInfeasible = 1,  ///< target longer than T: nll = +inf, no state stored
  kCtcItemInvalid = 2,     ///< bad lengths / labels: NaN loss and gradient
};
struct CtcItem {
  int64_t input_length;
  int64_t target_length;
  int32_t status;
  int32_t reserved;
};

struct CtcLaunch {
  bool backward = false;
  /// Forward: a second CTA per item runs the beta recursion (fused_beta). Backward: the item CTA
  /// recomputes log_beta into the workspace (not fused_beta); otherwise it builds the tables only.
  bool beta = false;
  Reduction reduction = Reduction::mean;
  bool zero_infinity = false;
  bool torch_large = false;
  int64_t T = 0, N = 0, C = 0, blank = 0;
  int64_t s_cap = 0;   ///< most target positions with states: min(max_target_length, T)
  int64_t states = 1;  ///< 2 * s_cap + 1: the state stride of the saved tensors
  // log_probs [T, N, C] (unbatched: stride_n 0)
  const void* log_probs = nullptr;
  int64_t lp_st = 0, lp_sn = 0, lp_sc = 0;
  // targets: padded [N, S]: element (n, j) at n * tg_s0 + j * tg_s1; concatenated: (pos + j) * tg_s1
  const void* targets = nullptr;
  bool target64 = true;
  bool padded = true;
  int64_t tg_s0 = 0, tg_s1 = 0;
  int64_t tg_len = 0;  ///< padded: S; concatenated: targets.numel()
  const void* input_lengths = nullptr;
  bool il64 = true;
  int64_t il_stride = 0;
  const void* target_lengths = nullptr;
  bool tl64 = true;
  int64_t tl_stride = 0;
  // Saved / recomputed state (loss_stats_dtype), dense [N, T, states] and [N].
  void* log_alpha = nullptr;
  void* log_beta = nullptr;
  void* nll = nullptr;
  // Forward outputs.
  void* out = nullptr;
  int64_t out_stride = 0;
  void* item_loss = nullptr;  ///< reduced: workspace [N] (stats dtype), nll (zero_infinity applied) / clamp(tl)
  // Backward.
  const void* dy = nullptr;
  int64_t dy_stride = 0;
  bool dy_scalar = false;  ///< reduced loss: dy is one element
  void* grad = nullptr;
  int64_t g_st = 0, g_sn = 0, g_sc = 0;
  CtcItem* items = nullptr;  ///< workspace [N]
  int32_t* first = nullptr;  ///< workspace [N, C]: first target position with label c, -1 if none
  int32_t* next = nullptr;   ///< workspace [N, s_cap]: next position with the same label, -1 if none
  int32_t* error = nullptr;
  // Launch shape.
  int threads = 32;
  int k = 1;
  size_t smem_bytes = 0;
};

/// The launch sequence of one dtype (ctc_kernel.cu).
template <DType D>
cudaError_t ctc_run(const CtcLaunch& p, cudaStream_t stream);

}  // namespace baracuda::detail
