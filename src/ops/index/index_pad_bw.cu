// pad's backward: each input-gradient element sums, in a fixed order, the output-gradient
// elements its forward copy went to (per dim at most three positions for reflect and circular,
// a range for replicate at the edges, one for constant). No atomics: deterministic.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/common/dtype_traits.cuh"
#include "ops/index/index_kernels.cuh"

namespace baracuda::detail::idx {
namespace {

/// The padded-output coordinates that read input coordinate i of one dim: `count` of them,
/// the k-th given by `at(k)`. pad modes as PadMode: 0 constant, 1 reflect, 2 replicate, 3 circular.
struct Sources {
  int64_t first = 0, count = 0;  ///< a range [first, first + count) (constant, replicate)
  int64_t extra[2] = {0, 0};     ///< reflect: up to two mirrored positions
  int n_extra = 0;
  int64_t step = 1;  ///< circular: positions first + k * step

  __device__ int64_t total() const { return count + n_extra; }
  __device__ int64_t at(int64_t k) const { return k < count ? first + k * step : extra[k - count]; }
};

__device__ Sources sources(int mode, int64_t i, int64_t n, int64_t before, int64_t out_n) {
  Sources s;
  const int64_t home = i + before;
  switch (mode) {
    case 1: {  // reflect: home, and the mirrors before - i (i >= 1) and before + 2(n-1) - i (i <= n-2)
      s.first = home;
      s.count = (home >= 0 && home < out_n) ? 1 : 0;
      const int64_t l = before - i, r = before + 2 * (n - 1) - i;
      if (i >= 1 && l >= 0 && l < out_n) s.extra[s.n_extra++] = l;
      if (i <= n - 2 && r >= 0 && r < out_n && r != home) s.extra[s.n_extra++] = r;
      break;
    }
    case 2: {  // replicate: the edges also receive every padded position on their side
      int64_t lo = home, hi = home + 1;
      if (i == 0) lo = 0;
      if (i == n - 1) hi = out_n;
      lo = lo < 0 ? 0 : lo;
      hi = hi > out_n ? out_n : hi;
      s.first = lo;
      s.count = hi > lo ? hi - lo : 0;
      break;
    }
    case 3: {  // circular: home + k*n for every k landing inside the output
      int64_t f = home % n;
      if (f < 0) f += n;
      s.first = f;
      s.step = n;
      s.count = f < out_n ? (out_n - 1 - f) / n + 1 : 0;
      break;
    }
    default:  // constant: one position, none when cropped away
      s.first = home;
      s.count = (home >= 0 && home < out_n) ? 1 : 0;
  }
  return s;
}

template <class T>
__global__ void __launch_bounds__(256) pad_backward_kernel(const PadBwParams p) {
  using A = kern::opmath_t<T>;
  const T* dy = static_cast<const T*>(p.dy);
  T* gin = static_cast<T*>(p.gin);
  for (int64_t t = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; t < p.total; t += int64_t{gridDim.x} * blockDim.x) {
    Sources src[kRank];
    int64_t rem = t, gin_off = 0, combos = 1;
#pragma unroll
    for (int d = kRank - 1; d >= 0; --d) {
      if (d >= p.rank) continue;
      const int64_t i = rem % p.in_size[d];
      rem /= p.in_size[d];
      gin_off += i * p.gin_stride[d];
      src[d] = sources(p.mode, i, p.in_size[d], p.before[d], p.out_size[d]);
      combos *= src[d].total();
    }
    A acc = A(0);
    for (int64_t c = 0; c < combos; ++c) {  // fixed order: innermost dim fastest
      int64_t r = c, off = 0;
#pragma unroll
      for (int d = kRank - 1; d >= 0; --d) {
        if (d >= p.rank) continue;
        const int64_t m = src[d].total();
        off += src[d].at(r % m) * p.dy_stride[d];
        r /= m;
      }
      acc += kern::load_as_opmath(dy[off]);
    }
    gin[gin_off] = kern::convert<T>(acc);
  }
}

}  // namespace

cudaError_t launch_pad_backward(const PadBwParams& p, DType dt, cudaStream_t stream) {
  if (p.total == 0) return cudaSuccess;
  const unsigned blocks = grid_for(p.total, 2, 256);
  switch (dt) {
    case DType::f32:
      pad_backward_kernel<float><<<blocks, 256, 0, stream>>>(p);
      break;
    case DType::f64:
      pad_backward_kernel<double><<<blocks, 256, 0, stream>>>(p);
      break;
    case DType::f16:
      pad_backward_kernel<__half><<<blocks, 256, 0, stream>>>(p);
      break;
    case DType::bf16:
      pad_backward_kernel<__nv_bfloat16><<<blocks, 256, 0, stream>>>(p);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace baracuda::detail::idx
