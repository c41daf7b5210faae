// Fixed-order two-stage sums of the loss family (loss_launch.hpp: loss_sum_partition). Stage 1:
// part b of a fixed partition is summed by one CTA of kSumThreads (each thread strides the part in
// order, then a shuffle tree and one shared-memory step in warp order); stage 2: one CTA sums the
// parts the same way. Sums carry two channels (loss, weight) so a weighted mean takes one pass.
// No atomics: bit-identical run to run and across GPUs (the partition depends on the item count
// only).
#pragma once
#include <cuda_runtime.h>

#include "kernels/common/dtype_traits.cuh"
#include "ops/loss/loss_launch.hpp"

namespace baracuda::kern::loss {

using detail::kSumThreads;

template <class A>
struct Pair {
  A a, b;
};

/// The CTA's sum of `v`, valid in thread 0. Fixed order: a shuffle-down tree per warp, then the
/// warps' sums in warp order. blockDim.x must be a multiple of 32 (<= 1024).
template <class A>
__device__ __forceinline__ Pair<A> block_sum(Pair<A> v) {
  __shared__ Pair<A> warp_sums[32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    v.a += __shfl_down_sync(0xffffffffu, v.a, o);
    v.b += __shfl_down_sync(0xffffffffu, v.b, o);
  }
  const int warp = threadIdx.x / 32;
  if ((threadIdx.x & 31) == 0) warp_sums[warp] = v;
  __syncthreads();
  Pair<A> r{A(0), A(0)};
  if (threadIdx.x == 0) {
    for (int k = 0; k < int(blockDim.x / 32); ++k) {
      r.a += warp_sums[k].a;
      r.b += warp_sums[k].b;
    }
  }
  return r;
}

/// Stage 1 over dense per-row values (loss, and the row's target weight when `b` is given).
template <class A>
__global__ void __launch_bounds__(kSumThreads)
    sum_rows_kernel(const A* a, const A* b, int64_t n, int64_t chunk, Pair<A>* partial) {
  const int64_t lo = int64_t(blockIdx.x) * chunk;
  const int64_t hi = lo + chunk < n ? lo + chunk : n;
  Pair<A> v{A(0), A(0)};
  for (int64_t i = lo + threadIdx.x; i < hi; i += kSumThreads) {
    v.a += a[i];
    if (b) v.b += b[i];
  }
  v = block_sum(v);
  if (threadIdx.x == 0) partial[blockIdx.x] = v;
}

/// Stage 1 over a dense vector of storage type T (the class weights: their total for label
/// smoothing's gradient).
template <class T, class A>
__global__ void __launch_bounds__(kSumThreads)
    sum_vector_kernel(const T* x, int64_t n, int64_t chunk, Pair<A>* partial) {
  const int64_t lo = int64_t(blockIdx.x) * chunk;
  const int64_t hi = lo + chunk < n ? lo + chunk : n;
  Pair<A> v{A(0), A(0)};
  for (int64_t i = lo + threadIdx.x; i < hi; i += kSumThreads) v.a += A(load_as_opmath(x[i]));
  v = block_sum(v);
  if (threadIdx.x == 0) partial[blockIdx.x] = v;
}

/// Stage 2: one CTA of kSumThreads sums the parts in order and writes what `f` asks for.
template <class T, class A>
__global__ void __launch_bounds__(kSumThreads)
    sum_finish_kernel(const Pair<A>* partial, int parts, const detail::SumFinish f) {
  Pair<A> v{A(0), A(0)};
  for (int i = threadIdx.x; i < parts; i += kSumThreads) {
    v.a += partial[i].a;
    v.b += partial[i].b;
  }
  v = block_sum(v);
  if (threadIdx.x != 0) return;
  // torch's mean: sum * (1 / n) (ATen's MeanOps factor), a weighted mean: sum / total weight; an
  // empty mean is 0 * inf or 0 / 0, NaN as in torch.
  A r = v.a * A(f.scale);
  if (f.divide_by_b) r = r / v.b;
  if (f.out) *static_cast<T*>(f.out) = convert<T>(r);
  if (f.sum_a_out) *static_cast<A*>(f.sum_a_out) = v.a;
  if (f.sum_b_out) *static_cast<A*>(f.sum_b_out) = v.b;
}

template <class T, class A>
cudaError_t launch_finish(const Pair<A>* partial, int parts, const detail::SumFinish& f, cudaStream_t stream) {
  sum_finish_kernel<T, A><<<1, kSumThreads, 0, stream>>>(partial, parts, f);
  return cudaGetLastError();
}

}  // namespace baracuda::kern::loss
