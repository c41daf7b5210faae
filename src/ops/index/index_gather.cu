// The gather engine: output slice l <- source slice index[l] (gather, index_select, embedding
// forward). Byte movers: one kernel per element size x index dtype (x index arithmetic width for
// the per-element kernel): per element, by rows (a warp per row: embedding, index_select of
// rows) and staged (torch.gather through a shared-memory copy of the source line).
#include <algorithm>

#include "kernels/common/cp_async.cuh"
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

// ---- row gather ------------------------------------------------------------------------------------
constexpr int kRowWords = 4;  ///< words a lane keeps in flight

/// A warp per (slice l, run of 32 x kRowWords words of its row): one index load for the warp
/// (every lane reads the same address: one broadcast transaction), the row's offsets computed
/// once, then kRowWords loads issued before the stores.
template <int EB, class IT>
__global__ void __launch_bounds__(256) gather_rows_kernel(const Geom g, char* out, const char* src, int64_t runs) {
  using W = typename Word<EB>::type;
  const W* s = reinterpret_cast<const W*>(src);
  W* o = reinterpret_cast<W*>(out);
  const int lane = threadIdx.x & 31;
  const int64_t P = g.ssize[0], as = g.a_sstride[0], bs = g.b_sstride[0];
  const int64_t units = g.L * runs;
  const int64_t nwarps = (int64_t{gridDim.x} * blockDim.x) >> 5;
  for (int64_t u = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) >> 5; u < units; u += nwarps) {
    const int64_t l = u / runs;
    const int64_t p0 = (u - l * runs) * (32 * kRowWords) + lane;
    int64_t xi, xa, xb;
    slice_offsets<int64_t>(g, l, &xi, &xa, &xb);
    const int64_t v = read_index<IT>(g.index, xi);
    const bool ok = index_ok(g, v);  // uniform across the warp
    const int64_t base = ok ? v * g.kstride + xb : 0;
    W w[kRowWords];
#pragma unroll
    for (int k = 0; k < kRowWords; ++k) {
      const int64_t p = p0 + 32 * k;
      w[k] = W{};  // out-of-range slices are zero (never read out of bounds)
      if (ok && p < P) w[k] = s[base + p * bs];
    }
#pragma unroll
    for (int k = 0; k < kRowWords; ++k) {
      const int64_t p = p0 + 32 * k;
      if (p < P) o[xa + p * as] = w[k];
    }
  }
}

// ---- staged gather ---------------------------------------------------------------------------------
constexpr int kStageThreads = 128;
constexpr int kStageBytes = 48 * 1024;  ///< shared memory without the opt-in attribute

/// A CTA per (line, run of V x kStageThreads positions along dim): it first loads its threads'
/// indices (V consecutive ones each, with 16-byte loads when unit-stride and aligned), then
/// copies the source line (src_len elements, unit stride) into shared memory with 16-byte cp.async,
/// then each thread gathers its V elements from shared memory and writes them as one aligned
/// 16-byte word (runs start `head` positions early so every full group is aligned in `out`).
template <int EB, class IT>
__global__ void __launch_bounds__(kStageThreads) gather_staged_kernel(const Geom g, int dim, int64_t runs, int out_mis,
                                                                      char* out, const char* src, const char* src_end) {
  using W = typename Word<EB>::type;
  constexpr int V = 16 / EB;
  constexpr int IB = sizeof(IT);
  constexpr int IW = V * IB < 16 ? V * IB : 16;  // bytes per index load
  using IWord = typename Word<IW>::type;
  extern __shared__ uint4 stage[];
  const int64_t K = g.ksize, m = g.isize[dim];
  const int64_t istep = g.index_stride[dim], ostep = g.a_istride[dim];
  int64_t lines = 1;
  for (int d = 0; d < g.ri; ++d)
    if (d != dim) lines *= g.isize[d];
  for (int64_t u = blockIdx.x; u < lines * runs; u += gridDim.x) {
    const int64_t line = u / runs, run = u - line * runs;
    int64_t rem = line, xi = 0, xa = 0, xb = 0;
#pragma unroll
    for (int d = kRank - 1; d >= 0; --d) {
      if (d >= g.ri || d == dim) continue;
      const int64_t c = rem % g.isize[d];
      rem /= g.isize[d];
      xi += c * g.index_stride[d];
      xa += c * g.a_istride[d];
      xb += c * g.b_istride[d];
    }
    const int64_t head = ostep == 1 ? (out_mis + xa) & (V - 1) : 0;
    const int64_t first_pos = run * (int64_t{V} * kStageThreads) - head;
    if (first_pos >= m) continue;  // the spare run of an aligned line (uniform across the CTA)
    const int64_t p0 = first_pos + int64_t{threadIdx.x} * V;
    const bool whole = p0 >= 0 && p0 + V <= m;
    // Indices first: independent of the staged line, so their loads overlap its copy.
    IT id[V];
    const char* ip = static_cast<const char*>(g.index) + (xi + p0 * istep) * IB;
    if (whole && istep == 1 && reinterpret_cast<uintptr_t>(ip) % IW == 0) {
#pragma unroll
      for (int n = 0; n < V * IB / IW; ++n) {
        const IWord w = __ldg(reinterpret_cast<const IWord*>(ip) + n);
        memcpy(&id[n * (IW / IB)], &w, IW);
      }
    } else {
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const int64_t p = p0 + k;
        id[k] = p >= 0 && p < m ? read_index<IT>(g.index, xi + p * istep) : IT(0);
      }
    }
    // The line, aligned blocks of 16 bytes placed at the same offset mod 16 in shared memory.
    const char* row = src + xb * EB;
    const int mis = static_cast<int>(reinterpret_cast<uintptr_t>(row) & 15);
    const char* first = row - mis;
    const int64_t blocks = (mis + K * EB + 15) >> 4;
    // cp.async: every block of the line in flight at once (a plain load-then-store loop waited
    // one memory trip per iteration, ~4 trips a CTA for an 8 KB line).
    for (int64_t q = threadIdx.x; q < blocks; q += kStageThreads) {
      const char* b = first + 16 * q;
      if (b >= src && b + 16 <= src_end) {
        kern::cp_async16(&stage[q], b);
      } else {  // a block past the source's footprint: only the line's own elements
        for (int k = 0; k < V; ++k) {
          const char* e = b + k * EB;
          if (e >= row && e < row + K * EB) reinterpret_cast<W*>(stage)[q * V + k] = *reinterpret_cast<const W*>(e);
        }
      }
    }
    kern::cp_async_wait_all();
    __syncthreads();
    const W* line_w = reinterpret_cast<const W*>(reinterpret_cast<const char*>(stage) + mis);
    W w[V];
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const int64_t p = p0 + k;
      w[k] = W{};
      if (p >= 0 && p < m) {
        const int64_t v = static_cast<int64_t>(id[k]);
        if (index_ok(g, v)) w[k] = line_w[v];
      }
    }
    W* o = reinterpret_cast<W*>(out);
    if (whole && ostep == 1) {
      uint4 word;
      memcpy(&word, w, 16);
      *reinterpret_cast<uint4*>(o + xa + p0) = word;
    } else {
#pragma unroll
      for (int k = 0; k < V; ++k)
        if (p0 + k >= 0 && p0 + k < m) o[xa + (p0 + k) * ostep] = w[k];
    }
    __syncthreads();  // the next unit overwrites the stage
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

template <int EB, class IT>
cudaError_t rows_with(const Geom& g, char* out, const char* src, cudaStream_t stream) {
  const int64_t runs = (g.ssize[0] + 32 * kRowWords - 1) / (32 * kRowWords);
  gather_rows_kernel<EB, IT><<<grid_for(g.L * runs * 32, 1, 256), 256, 0, stream>>>(g, out, src, runs);
  return cudaGetLastError();
}

template <int EB, class IT>
cudaError_t staged_with(const Geom& g, int dim, char* out, const char* src, const char* src_end, cudaStream_t stream) {
  constexpr int V = 16 / EB;
  const int64_t m = g.isize[dim];
  int64_t lines = 1;
  for (int d = 0; d < g.ri; ++d)
    if (d != dim) lines *= g.isize[d];
  const int64_t runs = (m + V - 1 + int64_t{V} * kStageThreads - 1) / (int64_t{V} * kStageThreads);
  const int out_mis = static_cast<int>((reinterpret_cast<uintptr_t>(out) / EB) % V);
  const size_t smem = static_cast<size_t>((g.ksize * EB + 31) / 16 * 16);
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(lines * runs, int64_t{1} << 20));
  gather_staged_kernel<EB, IT><<<blocks, kStageThreads, smem, stream>>>(g, dim, runs, out_mis, out, src, src_end);
  return cudaGetLastError();
}

}  // namespace

bool gather_rows_ok(const Geom& g) { return g.rs == 1 && g.ssize[0] >= 32; }

cudaError_t launch_gather_rows(const Geom& g, char* out, const char* src, int elem_bytes, DType index_dtype,
                               cudaStream_t stream) {
  if (g.L * g.P == 0) return cudaSuccess;
  if (!gather_rows_ok(g)) return cudaErrorInvalidValue;
  return by_width(elem_bytes, index_dtype, [&]<int EB, class IT>() { return rows_with<EB, IT>(g, out, src, stream); });
}

bool gather_staged_ok(const Geom& g, int dim, int elem_bytes) {
  // torch.gather's geometry (element mode: no slice dims), a unit-stride source line that fits
  // the stage, and enough positions per line that staging the whole line reads fewer bytes than
  // the 32-byte sectors a direct gather would touch.
  if (g.rs != 0 || dim < 0 || dim >= g.ri || g.kstride != 1 || g.skip >= 0) return false;
  const int64_t line_bytes = g.ksize * elem_bytes;
  if (line_bytes + 32 > kStageBytes || elem_bytes > 16) return false;
  const int64_t per_run = std::min<int64_t>(g.isize[dim], int64_t{16 / elem_bytes} * kStageThreads);
  return line_bytes <= 32 * per_run;
}

cudaError_t launch_gather_staged(const Geom& g, int dim, char* out, const char* src, const char* src_end,
                                 int elem_bytes, DType index_dtype, cudaStream_t stream) {
  if (g.L * g.P == 0) return cudaSuccess;
  if (!gather_staged_ok(g, dim, elem_bytes)) return cudaErrorInvalidValue;
  return by_width(elem_bytes, index_dtype,
                  [&]<int EB, class IT>() { return staged_with<EB, IT>(g, dim, out, src, src_end, stream); });
}

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
