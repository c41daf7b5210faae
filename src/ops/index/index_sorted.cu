// The scatter engine's deterministic path: keys (destinations) for the stable radix sort
// (index_sort.cu), then one thread per (run of equal destinations, slice element) reduces the
// run's sources in index order (sum, prod, mean, and max / min for the integers without atomics)
// and writes the result once; the assigning scatter copies each run's last source. No atomics:
// bit-identical run to run and across GPUs.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

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
  using type = std::conditional_t<kern::is_int_v<T>, int64_t, kern::opmath_t<T>>;
};

/// Integer division rounding toward -inf (torch's integer scatter_reduce mean), d > 0.
__device__ __forceinline__ int64_t floor_div(int64_t a, int64_t d) {
  const int64_t q = a / d;
  return (a % d != 0 && a < 0) ? q - 1 : q;
}

/// a + b and a * b in the accumulator; integers wrap (two's complement) instead of overflowing.
template <class T, class A>
__device__ __forceinline__ A acc_add(A a, A b) {
  if constexpr (kern::is_int_v<T>)
    return static_cast<A>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
  else
    return a + b;
}
template <class T, class A>
__device__ __forceinline__ A acc_mul(A a, A b) {
  if constexpr (kern::is_int_v<T>)
    return static_cast<A>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
  else
    return a * b;
}

/// Whether x replaces c under max / min (integers only: see sorted_reduce_ok).
template <Reduce R, class A>
__device__ __forceinline__ bool wins(A x, A c) {
  return R == Reduce::max ? x > c : x < c;
}

/// One thread per (sorted slot, slice element) that starts a run: reduces the run in slot order.
template <class T, Reduce R>
__global__ void __launch_bounds__(256) sorted_kernel(const Geom g, const int64_t* keys, const int64_t* vals,
                                                     int64_t sentinel, T* out, const T* src, int include_self) {
  using A = typename Acc<T>::type;
  const int64_t P = g.P, total = g.L * g.P;
  for (int64_t t = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; t < total; t += int64_t{gridDim.x} * blockDim.x) {
    const int64_t s = t / P, p = t - s * P;
    const int64_t key = keys[s];
    if (key == sentinel || (s > 0 && keys[s - 1] == key)) continue;  // not the start of a run
    int64_t ea, eb;
    element_offsets<int64_t>(g, p, &ea, &eb);
    A acc = R == Reduce::prod ? A(1) : A(0);
    int64_t n = 0;
    for (int64_t r = s; r < g.L && keys[r] == key; ++r, ++n) {
      int64_t xi, xa, xb;
      slice_offsets<int64_t>(g, vals[r], &xi, &xa, &xb);
      const A v = static_cast<A>(kern::load_as_opmath(src[xa + ea]));
      if constexpr (R == Reduce::prod) {
        acc = acc_mul<T>(acc, v);
      } else if constexpr (R == Reduce::max || R == Reduce::min) {
        if (n == 0 || wins<R>(v, acc)) acc = v;
      } else {
        acc = acc_add<T>(acc, v);
      }
    }
    T* dst = out + key + eb;
    if (include_self) {
      const A self = static_cast<A>(kern::load_as_opmath(*dst));
      if constexpr (R == Reduce::prod) {
        acc = acc_mul<T>(self, acc);
      } else if constexpr (R == Reduce::max || R == Reduce::min) {
        if (!wins<R>(acc, self)) acc = self;
      } else {  // sum and mean: self first, as the atomic path adds to it
        acc = acc_add<T>(self, acc);
      }
    }
    if constexpr (R == Reduce::mean) {
      const int64_t d = n + (include_self ? 1 : 0);
      if constexpr (kern::is_int_v<T>)  // the sum wraps in the storage type first, as torch's
        acc = floor_div(static_cast<int64_t>(static_cast<T>(acc)), d);
      else
        acc = acc / static_cast<A>(d);
    }
    *dst = kern::convert<T>(acc);
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

/// Dtypes of the sorted reductions: the atomic ones and the integers without atomics.
constexpr DTypeSet kSortedDTypes =
    dtypes::kFloat | bit(DType::s8) | bit(DType::u8) | bit(DType::s16) | bit(DType::s32) | bit(DType::s64);
constexpr DTypeSet kSmallInts = bit(DType::s8) | bit(DType::u8) | bit(DType::s16);

template <Reduce R>
cudaError_t sorted_with(const Geom& g, const int64_t* keys, const int64_t* vals, int64_t sentinel, void* out,
                        const void* src, DType dt, bool include_self, cudaStream_t stream) {
  constexpr DTypeSet allowed = (R == Reduce::max || R == Reduce::min) ? kSmallInts : kSortedDTypes;
  cudaError_t e = cudaErrorInvalidValue;
  kern::dispatch<allowed>(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    sorted_kernel<T, R><<<grid_for(g.L * g.P, 4, 256), 256, 0, stream>>>(
        g, keys, vals, sentinel, static_cast<T*>(out), static_cast<const T*>(src), include_self ? 1 : 0);
    e = cudaGetLastError();
  });
  return e;
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

bool sorted_reduce_ok(DType dt, Reduce r) {
  switch (r) {
    case Reduce::sum:
    case Reduce::prod:
    case Reduce::mean:
      return contains(kSortedDTypes, dt);
    case Reduce::max:
    case Reduce::min:
      return contains(kSmallInts, dt);
    default:
      return false;
  }
}

cudaError_t launch_scatter_sorted(const Geom& g, const int64_t* keys, const int64_t* vals, int64_t sentinel, void* out,
                                  const void* src, DType dt, Reduce r, bool include_self, cudaStream_t stream) {
  if (g.L * g.P == 0) return cudaSuccess;
  switch (r) {
    case Reduce::sum:
      return sorted_with<Reduce::sum>(g, keys, vals, sentinel, out, src, dt, include_self, stream);
    case Reduce::prod:
      return sorted_with<Reduce::prod>(g, keys, vals, sentinel, out, src, dt, include_self, stream);
    case Reduce::mean:
      return sorted_with<Reduce::mean>(g, keys, vals, sentinel, out, src, dt, include_self, stream);
    case Reduce::max:
      return sorted_with<Reduce::max>(g, keys, vals, sentinel, out, src, dt, include_self, stream);
    case Reduce::min:
      return sorted_with<Reduce::min>(g, keys, vals, sentinel, out, src, dt, include_self, stream);
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
