// The gather engine: output slice l <- source slice index[l] (gather, index_select, embedding
// forward). Byte movers: one kernel per element size x index dtype x index arithmetic width.
#include "ops/index/index_kernels.cuh"

namespace baracuda::detail::idx {
namespace {

/// Source offset of output element t (l, p), or -1 for an out-of-range slice; its output offset.
template <class IT, class I>
__device__ __forceinline__ I gather_offsets(const Geom& g, I t, I P, I* out_off) {
  const I l = t / P, p = t - l * P;
  I xi, xa, xb, ea, eb;
  slice_offsets<I>(g, l, &xi, &xa, &xb);
  element_offsets<I>(g, p, &ea, &eb);
  *out_off = xa + ea;
  const int64_t v = read_index<IT>(g.index, xi);
  return index_ok(g, v) ? static_cast<I>(v) * static_cast<I>(g.kstride) + xb + eb : I(-1);
}

/// One thread per output element (l, p), p fastest, so a slice's elements are read and written
/// by consecutive threads (rows of an embedding table move as 16-byte words); two elements a
/// thread per iteration with both loads issued before the stores (two words in flight).
template <int EB, class IT, class I>
__global__ void __launch_bounds__(256) gather_kernel(const Geom g, char* out, const char* src) {
  using W = typename Word<EB>::type;
  const W* s = reinterpret_cast<const W*>(src);
  W* o = reinterpret_cast<W*>(out);
  const I P = static_cast<I>(g.P);
  const I total = static_cast<I>(g.L) * P;
  const I step = static_cast<I>(gridDim.x) * blockDim.x;
  for (I t = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += 2 * step) {
    const I t2 = t + step;
    const bool has2 = t2 < total;
    I o1, o2 = 0;
    const I s1 = gather_offsets<IT, I>(g, t, P, &o1);
    const I s2 = has2 ? gather_offsets<IT, I>(g, t2, P, &o2) : I(-1);
    W w1{}, w2{};  // out-of-range slices are zero (never read out of bounds)
    if (s1 >= 0) w1 = s[s1];
    if (s2 >= 0) w2 = s[s2];
    o[o1] = w1;
    if (has2) o[o2] = w2;
  }
}

template <int EB, class IT>
cudaError_t gather_with(const Geom& g, char* out, const char* src, bool i64, cudaStream_t stream) {
  const unsigned blocks = grid_for(g.L * g.P, 4, 256);
  if (i64)
    gather_kernel<EB, IT, int64_t><<<blocks, 256, 0, stream>>>(g, out, src);
  else
    gather_kernel<EB, IT, int32_t><<<blocks, 256, 0, stream>>>(g, out, src);
  return cudaGetLastError();
}

template <class IT>
cudaError_t gather_eb(const Geom& g, char* out, const char* src, int eb, bool i64, cudaStream_t stream) {
  switch (eb) {
    case 1:
      return gather_with<1, IT>(g, out, src, i64, stream);
    case 2:
      return gather_with<2, IT>(g, out, src, i64, stream);
    case 4:
      return gather_with<4, IT>(g, out, src, i64, stream);
    case 8:
      return gather_with<8, IT>(g, out, src, i64, stream);
    case 16:
      return gather_with<16, IT>(g, out, src, i64, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

/// The assigning scatter: out slice key(l) <- src slice l. Duplicates race (last writer wins,
/// unordered), as torch's scatter / index_copy on CUDA.
template <int EB, class IT>
__global__ void __launch_bounds__(256) scatter_copy_kernel(const Geom g, char* out, const char* src) {
  using W = typename Word<EB>::type;
  const int64_t P = g.P, total = g.L * g.P;
  for (int64_t t = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; t < total; t += int64_t{gridDim.x} * blockDim.x) {
    const int64_t l = t / P, p = t - l * P;
    int64_t xi, xa, xb, ea, eb;
    slice_offsets<int64_t>(g, l, &xi, &xa, &xb);
    element_offsets<int64_t>(g, p, &ea, &eb);
    const int64_t v = read_index<IT>(g.index, xi);
    if (!index_ok(g, v)) continue;
    reinterpret_cast<W*>(out)[v * g.kstride + xb + eb] = reinterpret_cast<const W*>(src)[xa + ea];
  }
}

template <class IT>
cudaError_t scatter_copy_eb(const Geom& g, char* out, const char* src, int eb, cudaStream_t stream) {
  const unsigned blocks = grid_for(g.L * g.P, 4, 256);
  switch (eb) {
    case 1:
      scatter_copy_kernel<1, IT><<<blocks, 256, 0, stream>>>(g, out, src);
      break;
    case 2:
      scatter_copy_kernel<2, IT><<<blocks, 256, 0, stream>>>(g, out, src);
      break;
    case 4:
      scatter_copy_kernel<4, IT><<<blocks, 256, 0, stream>>>(g, out, src);
      break;
    case 8:
      scatter_copy_kernel<8, IT><<<blocks, 256, 0, stream>>>(g, out, src);
      break;
    case 16:
      scatter_copy_kernel<16, IT><<<blocks, 256, 0, stream>>>(g, out, src);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_gather(const Geom& g, char* out, const char* src, int elem_bytes, DType index_dtype, bool i64,
                          cudaStream_t stream) {
  if (g.L * g.P == 0) return cudaSuccess;
  return index_dtype == DType::s32 ? gather_eb<int32_t>(g, out, src, elem_bytes, i64, stream)
                                   : gather_eb<int64_t>(g, out, src, elem_bytes, i64, stream);
}

cudaError_t launch_scatter_copy(const Geom& g, char* out, const char* src, int elem_bytes, DType index_dtype,
                                cudaStream_t stream) {
  if (g.L * g.P == 0) return cudaSuccess;
  return index_dtype == DType::s32 ? scatter_copy_eb<int32_t>(g, out, src, elem_bytes, stream)
                                   : scatter_copy_eb<int64_t>(g, out, src, elem_bytes, stream);
}

}  // namespace baracuda::detail::idx
