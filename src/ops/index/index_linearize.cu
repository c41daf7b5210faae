// Small kernels around the gather and scatter engines: the linearization of several index
// components into one element offset per slice (index, index_put, lax.gather, lax.scatter), the
// identity pre-fill of scatter_reduce's include_self=false destinations, the fill of lax.gather's
// dropped windows, and one_hot. Byte movers (per element size) where they move data.
#include "ops/index/index_kernels.cuh"

namespace baracuda::detail::idx {
namespace {

template <class IT>
__global__ void __launch_bounds__(256) linearize_kernel(const LinParams p) {
  for (int64_t l = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; l < p.L; l += int64_t{gridDim.x} * blockDim.x) {
    // Batch coordinates (fully unrolled: the array stays in registers).
    int64_t c[kRank];
    int64_t rem = l;
#pragma unroll
    for (int d = kRank - 1; d >= 0; --d) {
      c[d] = 0;
      if (d < p.rb) {
        c[d] = rem % p.bsize[d];
        rem /= p.bsize[d];
      }
    }
    int64_t off = 0;
#pragma unroll
    for (int d = 0; d < kRank; ++d) off += c[d] * p.bout[d];  // window walks (zero otherwise)
    bool ok = true;
#pragma unroll
    for (int j = 0; j < kRank; ++j) {
      if (j >= p.k) break;
      int64_t io = 0;
#pragma unroll
      for (int d = 0; d < kRank; ++d) io += c[d] * p.cstride[j][d];  // zero past rb
      int64_t v = read_index<IT>(p.comp[j], io);
      const int64_t hi = p.size[j] - p.window[j];  // the last start whose window fits (>= 0: select)
      if (p.mode == 0) {                           // clip
        v = v < 0 ? 0 : (v > hi ? hi : v);
      } else {
        if (p.mode == 2 && v < 0) v += p.size[j];  // check: torch wraps negative indices once
        if (v < 0 || v > hi) ok = false;
      }
      off += v * p.stride[j];
    }
    if (!ok && p.mode == 2 && p.error) *p.error = 1;  // idempotent store: no atomic needed
    p.out[l] = ok ? off : -1;
  }
}

/// Destinations (key(l), p) of in-range slices <- fill.
template <int EB, class IT>
__global__ void __launch_bounds__(256) scatter_fill_kernel(const Geom g, char* out, const Word16 fill) {
  using W = typename Word<EB>::type;
  W f;
  memcpy(&f, fill.b, EB);
  const int64_t P = g.P, total = g.L * g.P;
  for (int64_t t = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; t < total; t += int64_t{gridDim.x} * blockDim.x) {
    const int64_t l = t / P, p = t - l * P;
    int64_t xi, xa, xb, ea, eb;
    slice_offsets<int64_t>(g, l, &xi, &xa, &xb);
    element_offsets<int64_t>(g, p, &ea, &eb);
    const int64_t v = read_index<IT>(g.index, xi);
    if (!index_ok(g, v)) continue;
    reinterpret_cast<W*>(out)[v * g.kstride + xb + eb] = f;
  }
}

/// Side A elements (l, p) of slices whose int64 offset is negative <- fill.
template <int EB>
__global__ void __launch_bounds__(256) fill_slices_kernel(const Geom g, char* out, const Word16 fill) {
  using W = typename Word<EB>::type;
  W f;
  memcpy(&f, fill.b, EB);
  const int64_t P = g.P, total = g.L * g.P;
  for (int64_t t = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; t < total; t += int64_t{gridDim.x} * blockDim.x) {
    const int64_t l = t / P, p = t - l * P;
    int64_t xi, xa, xb, ea, eb;
    slice_offsets<int64_t>(g, l, &xi, &xa, &xb);
    if (read_index<int64_t>(g.index, xi) >= 0) continue;
    element_offsets<int64_t>(g, p, &ea, &eb);
    reinterpret_cast<W*>(out)[xa + ea] = f;
  }
}

/// One thread per output element (l, c), c fastest: consecutive threads write consecutive
/// classes of a row (coalesced), and the row's index is one cached load for all of them.
template <int EB, class IT>
__global__ void __launch_bounds__(256) one_hot_kernel(const Geom g, char* out, const Word16 one) {
  using W = typename Word<EB>::type;
  W w1;
  memcpy(&w1, one.b, EB);
  const int64_t P = g.P, total = g.L * g.P;
  for (int64_t t = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; t < total; t += int64_t{gridDim.x} * blockDim.x) {
    const int64_t l = t / P, p = t - l * P;
    int64_t xi, xa, xb, ea, eb;
    slice_offsets<int64_t>(g, l, &xi, &xa, &xb);
    element_offsets<int64_t>(g, p, &ea, &eb);
    const int64_t v = read_index<IT>(g.index, xi);
    const bool ok = index_ok(g, v);  // a bad class reports and leaves its row zero
    reinterpret_cast<W*>(out)[xa + ea] = ok && v == p ? w1 : W{};
  }
}

Word16 word16(const unsigned char b[16]) {
  Word16 w;
  memcpy(w.b, b, 16);
  return w;
}

}  // namespace

cudaError_t launch_linearize(const LinParams& p, DType index_dtype, cudaStream_t stream) {
  if (p.L == 0) return cudaSuccess;
  const unsigned blocks = grid_for(p.L, 1, 256);
  if (index_dtype == DType::s32)
    linearize_kernel<int32_t><<<blocks, 256, 0, stream>>>(p);
  else
    linearize_kernel<int64_t><<<blocks, 256, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_scatter_fill(const Geom& g, char* out, const unsigned char fill[16], int elem_bytes,
                                DType index_dtype, cudaStream_t stream) {
  if (g.L * g.P == 0) return cudaSuccess;
  const Word16 f = word16(fill);
  return by_width(elem_bytes, index_dtype, [&]<int EB, class IT>() {
    scatter_fill_kernel<EB, IT><<<grid_for(g.L * g.P, 4, 256), 256, 0, stream>>>(g, out, f);
    return cudaGetLastError();
  });
}

cudaError_t launch_fill_slices(const Geom& g, char* out, const unsigned char fill[16], int elem_bytes,
                               cudaStream_t stream) {
  if (g.L * g.P == 0) return cudaSuccess;
  const Word16 f = word16(fill);
  return by_width(elem_bytes, DType::s64, [&]<int EB, class IT>() {
    fill_slices_kernel<EB><<<grid_for(g.L * g.P, 4, 256), 256, 0, stream>>>(g, out, f);
    return cudaGetLastError();
  });
}

cudaError_t launch_one_hot(const Geom& g, char* out, const unsigned char one[16], int elem_bytes, DType index_dtype,
                           cudaStream_t stream) {
  if (g.L * g.P == 0) return cudaSuccess;
  const Word16 w = word16(one);
  return by_width(elem_bytes, index_dtype, [&]<int EB, class IT>() {
    one_hot_kernel<EB, IT><<<grid_for(g.L * g.P, 4, 256), 256, 0, stream>>>(g, out, w);
    return cudaGetLastError();
  });
}

}  // namespace baracuda::detail::idx
