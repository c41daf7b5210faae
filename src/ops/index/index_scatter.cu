// The scatter engine's atomic path: output slice index[l] op= source slice l (scatter_add,
// index_add, segment_sum with atomicAdd; segment_max/min with atomic max/min, whose result does
// not depend on the order). One kernel per dtype x index dtype x reduction.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "ops/index/index_kernels.cuh"

namespace baracuda::detail::idx {
namespace {

template <class T>
__device__ __forceinline__ void atomic_add(T* a, T v) {
  if constexpr (std::is_same_v<T, int64_t>)
    atomicAdd(reinterpret_cast<unsigned long long*>(a), static_cast<unsigned long long>(v));  // two's complement
  else
    atomicAdd(a, v);
}

/// max with torch's NaN propagation (a NaN wins over any number).
template <class T>
__device__ __forceinline__ void atomic_max(T* a, T v) {
  if constexpr (std::is_same_v<T, int32_t>) {
    atomicMax(a, v);
  } else if constexpr (std::is_same_v<T, int64_t>) {
    atomicMax(reinterpret_cast<long long*>(a), static_cast<long long>(v));
  } else if constexpr (std::is_same_v<T, float>) {
    // Non-negative floats order like their int bits, negative ones reversed like their
    // unsigned bits: one atomic instead of a CAS loop. NaN is made positive so it wins.
    if (isnan(v)) v = __int_as_float(0x7fc00000);
    if (!signbit(v))
      atomicMax(reinterpret_cast<int*>(a), __float_as_int(v));
    else
      atomicMin(reinterpret_cast<unsigned int*>(a), __float_as_uint(v));
  } else if constexpr (std::is_same_v<T, double>) {
    if (isnan(v)) v = __longlong_as_double(0x7ff8000000000000LL);
    if (!signbit(v))
      atomicMax(reinterpret_cast<long long*>(a), __double_as_longlong(v));
    else
      atomicMin(reinterpret_cast<unsigned long long*>(a), static_cast<unsigned long long>(__double_as_longlong(v)));
  } else {  // __half / __nv_bfloat16: 16-bit compare-and-swap
    unsigned short* p = reinterpret_cast<unsigned short*>(a);
    const float x = static_cast<float>(v);
    const unsigned short bits = *reinterpret_cast<const unsigned short*>(&v);
    unsigned short old = *p, assumed;
    do {
      assumed = old;
      T cur;
      *reinterpret_cast<unsigned short*>(&cur) = assumed;
      const float c = static_cast<float>(cur);
      if (!(x > c || (isnan(x) && !isnan(c)))) break;
      old = atomicCAS(p, assumed, bits);
    } while (assumed != old);
  }
}

/// min with torch's NaN propagation: the mirror of atomic_max (NaN made negative so it wins).
template <class T>
__device__ __forceinline__ void atomic_min(T* a, T v) {
  if constexpr (std::is_same_v<T, int32_t>) {
    atomicMin(a, v);
  } else if constexpr (std::is_same_v<T, int64_t>) {
    atomicMin(reinterpret_cast<long long*>(a), static_cast<long long>(v));
  } else if constexpr (std::is_same_v<T, float>) {
    if (isnan(v)) v = __int_as_float(static_cast<int>(0xffc00000u));
    if (!signbit(v))
      atomicMin(reinterpret_cast<int*>(a), __float_as_int(v));
    else
      atomicMax(reinterpret_cast<unsigned int*>(a), __float_as_uint(v));
  } else if constexpr (std::is_same_v<T, double>) {
    if (isnan(v)) v = __longlong_as_double(static_cast<long long>(0xfff8000000000000ull));
    if (!signbit(v))
      atomicMin(reinterpret_cast<long long*>(a), __double_as_longlong(v));
    else
      atomicMax(reinterpret_cast<unsigned long long*>(a), static_cast<unsigned long long>(__double_as_longlong(v)));
  } else {
    unsigned short* p = reinterpret_cast<unsigned short*>(a);
    const float x = static_cast<float>(v);
    const unsigned short bits = *reinterpret_cast<const unsigned short*>(&v);
    unsigned short old = *p, assumed;
    do {
      assumed = old;
      T cur;
      *reinterpret_cast<unsigned short*>(&cur) = assumed;
      const float c = static_cast<float>(cur);
      if (!(x < c || (isnan(x) && !isnan(c)))) break;
      old = atomicCAS(p, assumed, bits);
    } while (assumed != old);
  }
}

template <class T, class IT, Reduce R>
__global__ void __launch_bounds__(256) scatter_atomic_kernel(const Geom g, T* out, const T* src) {
  const int64_t P = g.P, total = g.L * g.P;
  for (int64_t t = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; t < total; t += int64_t{gridDim.x} * blockDim.x) {
    const int64_t l = t / P, p = t - l * P;
    int64_t xi, xa, xb, ea, eb;
    slice_offsets<int64_t>(g, l, &xi, &xa, &xb);
    element_offsets<int64_t>(g, p, &ea, &eb);
    const int64_t v = read_index<IT>(g.index, xi);
    if (!index_ok(g, v)) continue;
    const T x = src[xa + ea];
    T* dst = out + v * g.kstride + xb + eb;
    if constexpr (R == Reduce::sum)
      atomic_add(dst, x);
    else if constexpr (R == Reduce::max)
      atomic_max(dst, x);
    else
      atomic_min(dst, x);
  }
}

template <class T, class IT>
cudaError_t scatter_with(const Geom& g, void* out, const void* src, Reduce r, cudaStream_t stream) {
  const unsigned blocks = grid_for(g.L * g.P, 4, 256);
  if (r == Reduce::sum)
    scatter_atomic_kernel<T, IT, Reduce::sum>
        <<<blocks, 256, 0, stream>>>(g, static_cast<T*>(out), static_cast<const T*>(src));
  else if (r == Reduce::max)
    scatter_atomic_kernel<T, IT, Reduce::max>
        <<<blocks, 256, 0, stream>>>(g, static_cast<T*>(out), static_cast<const T*>(src));
  else
    scatter_atomic_kernel<T, IT, Reduce::min>
        <<<blocks, 256, 0, stream>>>(g, static_cast<T*>(out), static_cast<const T*>(src));
  return cudaGetLastError();
}

template <class IT>
cudaError_t scatter_dt(const Geom& g, void* out, const void* src, DType dt, Reduce r, cudaStream_t stream) {
  switch (dt) {
    case DType::f32:
      return scatter_with<float, IT>(g, out, src, r, stream);
    case DType::f64:
      return scatter_with<double, IT>(g, out, src, r, stream);
    case DType::f16:
      return scatter_with<__half, IT>(g, out, src, r, stream);
    case DType::bf16:
      return scatter_with<__nv_bfloat16, IT>(g, out, src, r, stream);
    case DType::s32:
      return scatter_with<int32_t, IT>(g, out, src, r, stream);
    case DType::s64:
      return scatter_with<int64_t, IT>(g, out, src, r, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t launch_scatter_atomic(const Geom& g, void* out, const void* src, DType dt, DType index_dtype, Reduce r,
                                  cudaStream_t stream) {
  if (g.L * g.P == 0) return cudaSuccess;
  return index_dtype == DType::s32 ? scatter_dt<int32_t>(g, out, src, dt, r, stream)
                                   : scatter_dt<int64_t>(g, out, src, dt, r, stream);
}

}  // namespace baracuda::detail::idx
