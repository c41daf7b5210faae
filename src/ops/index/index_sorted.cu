// The scatter engine's deterministic path: keys (destinations) for the stable radix sort
// (index_sort.cu), then one thread per (run of equal destinations, slice element) sums the run's sources in
// index order and adds the sum once. No atomics: bit-identical run to run and across GPUs.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/common/dtype_traits.cuh"
#include "ops/index/index_kernels.cuh"

namespace baracuda::detail::idx {
namespace {

template <class IT>
__global__ void __launch_bounds__(256) keys_kernel(const Geom g, int64_t sentinel, int64_t* keys, int64_t* vals) {
  for (int64_t l = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; l < g.L; l += int64_t{gridDim.x} * blockDim.x) {
    int64_t xi, xa, xb;
    slice_offsets<int64_t>(g, l, &xi, &xa, &xb);
    const int64_t v = read_index<IT>(g.index, xi);
    keys[l] = index_ok(g, v) ? v * g.kstride + xb : sentinel;
    vals[l] = l;
  }
}

/// Accumulator: f32 for 16-bit floats and f32, f64 for f64, int64 for integers (wraps like
/// the integer type itself once truncated).
template <class T>
struct Acc {
  using type = kern::opmath_t<T>;
};
template <>
struct Acc<int32_t> {
  using type = int64_t;
};

template <class T>
__global__ void __launch_bounds__(256)
    sorted_kernel(const Geom g, const int64_t* keys, const int64_t* vals, int64_t sentinel, T* out, const T* src) {
  using A = typename Acc<T>::type;
  const int64_t P = g.P, total = g.L * g.P;
  for (int64_t t = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; t < total; t += int64_t{gridDim.x} * blockDim.x) {
    const int64_t s = t / P, p = t - s * P;
    const int64_t key = keys[s];
    if (key == sentinel || (s > 0 && keys[s - 1] == key)) continue;  // not the start of a run
    int64_t ea, eb;
    element_offsets<int64_t>(g, p, &ea, &eb);
    A acc = A(0);
    for (int64_t r = s; r < g.L && keys[r] == key; ++r) {
      int64_t xi, xa, xb;
      slice_offsets<int64_t>(g, vals[r], &xi, &xa, &xb);
      acc += static_cast<A>(kern::load_as_opmath(src[xa + ea]));
    }
    T* dst = out + key + eb;
    *dst = kern::convert<T>(static_cast<A>(kern::load_as_opmath(*dst)) + acc);
  }
}

/// Assignment: the run's last slot (the last duplicate in index order, the sort being stable)
/// is copied; deterministic where the unordered scatter is not.
template <int EB>
__global__ void __launch_bounds__(256) sorted_copy_kernel(const Geom g, const int64_t* keys, const int64_t* vals,
                                                          int64_t sentinel, char* out, const char* src) {
  using W = typename Word<EB>::type;
  const int64_t P = g.P, total = g.L * g.P;
  for (int64_t t = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; t < total; t += int64_t{gridDim.x} * blockDim.x) {
    const int64_t s = t / P, p = t - s * P;
    const int64_t key = keys[s];
    if (key == sentinel || (s + 1 < g.L && keys[s + 1] == key)) continue;  // not the end of a run
    int64_t ea, eb, xi, xa, xb;
    element_offsets<int64_t>(g, p, &ea, &eb);
    slice_offsets<int64_t>(g, vals[s], &xi, &xa, &xb);
    reinterpret_cast<W*>(out)[key + eb] = reinterpret_cast<const W*>(src)[xa + ea];
  }
}

template <class T>
cudaError_t sorted_with(const Geom& g, const int64_t* keys, const int64_t* vals, int64_t sentinel, void* out,
                        const void* src, cudaStream_t stream) {
  sorted_kernel<T><<<grid_for(g.L * g.P, 4, 256), 256, 0, stream>>>(g, keys, vals, sentinel, static_cast<T*>(out),
                                                                    static_cast<const T*>(src));
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_scatter_keys(const Geom& g, DType index_dtype, int64_t sentinel, int64_t* keys, int64_t* vals,
                                cudaStream_t stream) {
  if (g.L == 0) return cudaSuccess;
  const unsigned blocks = grid_for(g.L, 1, 256);
  if (index_dtype == DType::s32)
    keys_kernel<int32_t><<<blocks, 256, 0, stream>>>(g, sentinel, keys, vals);
  else
    keys_kernel<int64_t><<<blocks, 256, 0, stream>>>(g, sentinel, keys, vals);
  return cudaGetLastError();
}

cudaError_t launch_scatter_sorted(const Geom& g, const int64_t* keys, const int64_t* vals, int64_t sentinel, void* out,
                                  const void* src, DType dt, cudaStream_t stream) {
  if (g.L * g.P == 0) return cudaSuccess;
  switch (dt) {
    case DType::f32:
      return sorted_with<float>(g, keys, vals, sentinel, out, src, stream);
    case DType::f64:
      return sorted_with<double>(g, keys, vals, sentinel, out, src, stream);
    case DType::f16:
      return sorted_with<__half>(g, keys, vals, sentinel, out, src, stream);
    case DType::bf16:
      return sorted_with<__nv_bfloat16>(g, keys, vals, sentinel, out, src, stream);
    case DType::s32:
      return sorted_with<int32_t>(g, keys, vals, sentinel, out, src, stream);
    case DType::s64:
      return sorted_with<int64_t>(g, keys, vals, sentinel, out, src, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t launch_scatter_sorted_copy(const Geom& g, const int64_t* keys, const int64_t* vals, int64_t sentinel,
                                       char* out, const char* src, int elem_bytes, cudaStream_t stream) {
  if (g.L * g.P == 0) return cudaSuccess;
  const unsigned blocks = grid_for(g.L * g.P, 4, 256);
  switch (elem_bytes) {
    case 1:
      sorted_copy_kernel<1><<<blocks, 256, 0, stream>>>(g, keys, vals, sentinel, out, src);
      break;
    case 2:
      sorted_copy_kernel<2><<<blocks, 256, 0, stream>>>(g, keys, vals, sentinel, out, src);
      break;
    case 4:
      sorted_copy_kernel<4><<<blocks, 256, 0, stream>>>(g, keys, vals, sentinel, out, src);
      break;
    case 8:
      sorted_copy_kernel<8><<<blocks, 256, 0, stream>>>(g, keys, vals, sentinel, out, src);
      break;
    case 16:
      sorted_copy_kernel<16><<<blocks, 256, 0, stream>>>(g, keys, vals, sentinel, out, src);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace baracuda::detail::idx
