// Sum-to-shape for gradients of broadcast inputs: grad[o] = sum over the broadcast dims of
// full[o, r]. Fixed summation order (deterministic, bit-stable). A warp per output element when
// the innermost dim is reduced (contiguous reads per warp), a thread per output otherwise
// (neighbouring threads read neighbouring elements).
#include "kernels/common/dtype_traits.cuh"
#include "ops/elementwise/ew_registry.hpp"

namespace baracuda::detail {
namespace {

struct SumToShape {
  int nk, nr;                 // kept / reduced dims, innermost first
  int64_t k_shape[kMaxRank], k_full_stride[kMaxRank], k_grad_stride[kMaxRank];
  int64_t r_shape[kMaxRank], r_full_stride[kMaxRank];
  int64_t n_out, n_red;
};

__device__ __forceinline__ void kept_offsets(const SumToShape& a, int64_t o, int64_t* full, int64_t* grad) {
  *full = 0;
  *grad = 0;
  for (int d = 0; d < a.nk; ++d) {
    const int64_t q = o / a.k_shape[d];
    const int64_t r = o - q * a.k_shape[d];
    *full += r * a.k_full_stride[d];
    *grad += r * a.k_grad_stride[d];
    o = q;
  }
}
__device__ __forceinline__ int64_t reduced_offset(const SumToShape& a, int64_t i) {
  int64_t off = 0;
  for (int d = 0; d < a.nr; ++d) {
    const int64_t q = i / a.r_shape[d];
    off += (i - q * a.r_shape[d]) * a.r_full_stride[d];
    i = q;
  }
  return off;
}

template <class T>
__global__ void sum_thread_per_output(const T* full, T* grad, SumToShape a) {
  using Acc = cuda::std::conditional_t<cuda::std::is_same_v<T, double>, double, float>;
  const int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (o >= a.n_out) return;
  int64_t fo, go;
  kept_offsets(a, o, &fo, &go);
  Acc s = 0;
  for (int64_t i = 0; i < a.n_red; ++i) s += Acc(kern::load_as_opmath(full[fo + reduced_offset(a, i)]));
  grad[go] = kern::convert<T>(s);
}

template <class T>
__global__ void sum_warp_per_output(const T* full, T* grad, SumToShape a) {
  using Acc = cuda::std::conditional_t<cuda::std::is_same_v<T, double>, double, float>;
  const int64_t o = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (o >= a.n_out) return;
  int64_t fo, go;
  kept_offsets(a, o, &fo, &go);
  Acc s = 0;
  for (int64_t i = lane; i < a.n_red; i += 32) s += Acc(kern::load_as_opmath(full[fo + reduced_offset(a, i)]));
  for (int off = 16; off > 0; off /= 2) s += __shfl_down_sync(0xffffffffu, s, off);
  if (lane == 0) grad[go] = kern::convert<T>(s);
}

}  // namespace

cudaError_t ew_sum_to_shape(DType dt, const void* full_buf, const Shape& full, const TensorMut& grad,
                            cudaStream_t stream) {
  SumToShape a{};
  // Dense row-major strides of `full`, and grad's strides right-aligned (missing dims = 1).
  int64_t fstride[kMaxRank];
  int64_t st = 1;
  for (int d = full.rank - 1; d >= 0; --d) {
    fstride[d] = st;
    st *= full.dims[d];
  }
  const int off = full.rank - grad.layout.rank;
  a.n_out = 1;
  a.n_red = 1;
  for (int d = full.rank - 1; d >= 0; --d) {
    if (full.dims[d] == 1) continue;
    const int gd = d - off;
    const int64_t gsize = gd >= 0 ? grad.layout.shape[gd] : 1;
    if (gsize == 1) {
      a.r_shape[a.nr] = full.dims[d];
      a.r_full_stride[a.nr++] = fstride[d];
      a.n_red *= full.dims[d];
    } else {
      a.k_shape[a.nk] = full.dims[d];
      a.k_full_stride[a.nk] = fstride[d];
      a.k_grad_stride[a.nk++] = grad.layout.stride[gd];
      a.n_out *= full.dims[d];
    }
  }
  if (a.n_out == 0) return cudaSuccess;
  const bool inner_reduced = a.nr > 0 && (a.nk == 0 || a.r_full_stride[0] < a.k_full_stride[0]);
  bool ok = kern::dispatch<dtypes::kFloat>(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* f = static_cast<const T*>(full_buf);
    T* g = static_cast<T*>(grad.data);
    if (inner_reduced) {
      const int64_t threads = a.n_out * 32;
      sum_warp_per_output<T><<<static_cast<unsigned>((threads + 255) / 256), 256, 0, stream>>>(f, g, a);
    } else {
      sum_thread_per_output<T><<<static_cast<unsigned>((a.n_out + 255) / 256), 256, 0, stream>>>(f, g, a);
    }
  });
  if (!ok) return cudaErrorInvalidValue;
  return cudaGetLastError();
}

}  // namespace baracuda::detail
