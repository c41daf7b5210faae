// Device helpers shared by the class-row kernels of cross_entropy / nll_loss: the streaming row
// kernel (class_kernel.cuh) and the cluster kernel (cluster_kernel.cuh). A row's accumulator
// (online max / sum of exp, two plain sums) and its bit-commutative merge, the group reduction,
// row offsets and the class-index target check.
#pragma once
#include <cuda_runtime.h>

#include <cuda/std/limits>

#include "kernels/common/dtype_traits.cuh"
#include "kernels/common/elementwise.cuh"  // VecOf, load_vec, store_vec
#include "kernels/common/row_offsets.cuh"
#include "kernels/common/short_math.cuh"
#include "ops/loss/loss_launch.hpp"

namespace baracuda::kern::loss {

using detail::ClassLaunch;
using detail::kCsNumSlots;

template <class M>
__device__ __forceinline__ M neg_inf() {
  return -cuda::std::numeric_limits<M>::infinity();
}
template <class M>
__device__ __forceinline__ M quiet_nan() {
  return cuda::std::numeric_limits<M>::quiet_NaN();
}
__device__ __forceinline__ float llog(float x) { return logf(x); }
__device__ __forceinline__ double llog(double x) { return log(x); }
/// exp for the softmax terms. kFast (16-bit storage): ex2.approx.ftz of x * log2e (~2 ulp +
/// 1.2|x| ulp of f32), far below a 16-bit result's rounding; expf / exp otherwise (f32's rtol is
/// ~1e-6). Same choice and reasoning as the softmax forward (norm_kernel.cuh, sm_exp), including
/// why not __expf (its subnormal-result fix-up: 7 instructions instead of 3).
template <bool kFast, class M>
__device__ __forceinline__ M lexp(M d) {
  if constexpr (kFast && sizeof(M) == 4)
    return short_math::exp_fast(d);
  else if constexpr (sizeof(M) == 4)
    return expf(d);
  else
    return exp(d);
}
__device__ __forceinline__ float lmax(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ double lmax(double a, double b) { return fmax(a, b); }

/// A row pass's accumulator: online (max, sum of exp(x - max)) and two plain sums (label
/// smoothing: sum of w_c x_c and of w_c; probability targets: sum of w_c p'_c x_c and of w_c p'_c).
/// NaN logits: fmax drops them from the max, but their exp term makes the sum NaN, so the row's
/// log-sum-exp and loss are NaN as torch's log_softmax makes them; while the max is still -inf
/// (only -inf or NaN seen) terms are taken relative to 0 so a NaN is not skipped.
template <class M>
struct RowAcc {
  M m, s, a, b;
};

template <bool kFast, class M>
__device__ __forceinline__ RowAcc<M> merge(const RowAcc<M>& x, const RowAcc<M>& y) {
  const M m = lmax(x.m, y.m);
  // Both maxima -inf: no finite mass on either side (exp(-inf - -inf) would be NaN); a NaN sum stays.
  const M s = m == neg_inf<M>() ? x.s + y.s : x.s * lexp<kFast>(x.m - m) + y.s * lexp<kFast>(y.m - m);
  return {m, s, x.a + y.a, x.b + y.b};
}

/// The group's merge of `v` (tpr threads); every thread of the group gets the same bits.
template <bool kFast, class M>
__device__ __forceinline__ RowAcc<M> group_reduce(RowAcc<M> v, int tpr, RowAcc<M>* smem) {
  const int width = tpr < 32 ? tpr : 32;
  for (int o = width / 2; o > 0; o >>= 1) {
    const RowAcc<M> u{__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o),
                      __shfl_xor_sync(0xffffffffu, v.a, o), __shfl_xor_sync(0xffffffffu, v.b, o)};
    v = merge<kFast>(v, u);
  }
  if (tpr <= 32) return v;
  const int warp = threadIdx.x / 32;
  __syncthreads();  // the previous row's readers are done with smem
  if ((threadIdx.x & 31) == 0) smem[warp] = v;
  __syncthreads();
  RowAcc<M> r = smem[0];
  for (int k = 1; k < tpr / 32; ++k) r = merge<kFast>(r, smem[k]);  // fixed order
  return r;
}

/// A row's class-index target: its value, whether it is ignored, whether it is out of range
/// (never dereferenced; reported through the error flag).
struct RowTarget {
  int64_t t = 0;
  bool ignored = false;
  bool bad = false;
};
__device__ __forceinline__ RowTarget read_target(const ClassLaunch& p, int64_t off) {
  RowTarget r;
  r.t = p.target64 ? static_cast<const int64_t*>(p.target)[off] : int64_t(static_cast<const int32_t*>(p.target)[off]);
  r.ignored = r.t == p.ignore_index;
  r.bad = !r.ignored && (r.t < 0 || r.t >= p.classes);
  return r;
}

}  // namespace baracuda::kern::loss
