// The scatter engine's atomic products and minima: the kernels of index_scatter.cuh, instantiated
// apart from the sums and maxima of index_scatter.cu so the two translation units compile in
// parallel.
#include "ops/index/index_scatter.cuh"

namespace baracuda::detail::idx::scat {

cudaError_t scatter_atomic_ext(const Geom& g, void* out, const void* src, DType dt, DType index_dtype, Reduce r,
                               cudaStream_t stream) {
  switch (r) {
    case Reduce::prod:
      return scatter_dispatch<Reduce::prod>(g, out, src, dt, index_dtype, stream);
    case Reduce::min:
      return scatter_dispatch<Reduce::min>(g, out, src, dt, index_dtype, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace baracuda::detail::idx::scat
