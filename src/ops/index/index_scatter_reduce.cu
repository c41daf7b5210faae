// The scatter engine's atomic products and plain-storage max / min (scatter_reduce, lax.scatter,
// segment_prod): the kernels of index_scatter.cuh, instantiated apart from the sums and encoded
// extrema of index_scatter.cu so the two translation units compile in parallel.
#include "ops/index/index_scatter.cuh"

namespace baracuda::detail::idx::scat {

cudaError_t scatter_atomic_ext(const Geom& g, void* out, const void* src, DType dt, DType index_dtype, Reduce r,
                               cudaStream_t stream) {
  constexpr DTypeSet kF3264 = bit(DType::f32) | bit(DType::f64);
  auto raw = [&]<Reduce R>() {  // only f32 / f64 differ from the encoded max / min
    cudaError_t e = cudaErrorInvalidValue;
    kern::dispatch<kF3264>(dt, [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* o = static_cast<T*>(out);
      const T* s = static_cast<const T*>(src);
      e = index_dtype == DType::s32 ? scatter_reduce_with<T, int32_t, R>(g, o, s, stream)
                                    : scatter_reduce_with<T, int64_t, R>(g, o, s, stream);
    });
    return e;
  };
  switch (r) {
    case Reduce::prod:
      return scatter_dispatch<Reduce::prod>(g, out, src, dt, index_dtype, stream);
    case Reduce::max_raw:
      return raw.template operator()<Reduce::max_raw>();
    case Reduce::min_raw:
      return raw.template operator()<Reduce::min_raw>();
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace baracuda::detail::idx::scat
