// The select engine (nonzero, masked_select, masked_scatter): stream compaction in two passes
// with no host synchronization. Pass 1: one CTA per tile of kSelectTile elements counts its
// selected elements; CUB's exclusive scan of the tile counts (index_sort.cu) gives each tile its
// first output position. Pass 2: each CTA walks its tile again, kSelectThreads consecutive
// elements per step, and ranks the selected ones with a warp ballot plus a prefix over the
// CTA's warps, so outputs land in row-major order and consecutive threads touch consecutive
// elements (coalesced reads, and coalesced writes where the selection is dense).
#include "ops/index/index_kernels.cuh"

namespace baracuda::detail::idx {
namespace {

constexpr int kWarps = kSelectThreads / 32;

/// Whether the SB-byte element at `off` of the tested tensor is selected.
template <int SB>
__device__ __forceinline__ bool selected(const SelectParams& p, int64_t off) {
  if constexpr (SB == 16) {
    const uint4 w = reinterpret_cast<const uint4*>(p.sel)[off];
    const unsigned long long lo = (static_cast<unsigned long long>(w.y) << 32) | w.x;
    const unsigned long long hi = (static_cast<unsigned long long>(w.w) << 32) | w.z;
    return ((lo & p.nz_mask[0]) | (hi & p.nz_mask[1])) != 0;
  } else {
    using W = typename Word<SB>::type;
    const W w = reinterpret_cast<const W*>(p.sel)[off];
    return (static_cast<unsigned long long>(w) & p.nz_mask[0]) != 0;
  }
}

/// Offsets of element e in the tested tensor and in side A. One merged dim (contiguous or
/// uniformly strided operands, the common case) needs no division.
__device__ __forceinline__ void locate(const SelectParams& p, int64_t e, int64_t* sel_off, int64_t* a_off) {
  if (p.rank == 1) {
    *sel_off = e * p.sel_stride[0];
    *a_off = e * p.a_stride[0];
    return;
  }
  int64_t so = 0, ao = 0;
#pragma unroll
  for (int d = kRank - 1; d >= 0; --d) {
    if (d >= p.rank) continue;
    const int64_t c = e % p.size[d];
    e /= p.size[d];
    so += c * p.sel_stride[d];
    ao += c * p.a_stride[d];
  }
  *sel_off = so;
  *a_off = ao;
}

/// Sum over the CTA of one value per thread (every thread gets it).
__device__ __forceinline__ int64_t block_sum(int64_t v, int64_t* smem) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) smem[threadIdx.x >> 5] = v;
  __syncthreads();
  int64_t t = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) t += smem[w];
  return t;
}

template <int SB>
__global__ void __launch_bounds__(kSelectThreads) count_kernel(const SelectParams p) {
  __shared__ int64_t smem[kWarps];
  const int64_t tile = blockIdx.x;
  int64_t n = 0;
#pragma unroll 4
  for (int k = 0; k < kSelectItems; ++k) {
    const int64_t e = tile * kSelectTile + int64_t{k} * kSelectThreads + threadIdx.x;
    if (e >= p.n) break;
    int64_t so, ao;
    locate(p, e, &so, &ao);
    n += selected<SB>(p, so) ? 1 : 0;
  }
  const int64_t total = block_sum(n, smem);
  if (threadIdx.x == 0) p.tile_counts[tile] = total;
}

__device__ __forceinline__ int64_t selected_total(const SelectParams& p) {
  return p.tiles > 0 ? p.tile_offsets[p.tiles - 1] + p.tile_counts[p.tiles - 1] : 0;
}

__global__ void total_kernel(const SelectParams p) {
  if (threadIdx.x == 0 && blockIdx.x == 0 && p.count) *p.count = selected_total(p);
}

/// One CTA per tile (at least one CTA, for the fills of an empty input).
template <int SB, int DB, SelectOp OP>
__global__ void __launch_bounds__(kSelectThreads) write_kernel(const SelectParams p) {
  using W = typename Word<DB>::type;
  __shared__ int64_t warp_counts[2][kWarps];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t tile = blockIdx.x;
  if (tile < p.tiles) {
    int64_t pos = p.tile_offsets[tile];  // the next output position of this CTA (uniform)
    for (int k = 0; k < kSelectItems; ++k) {
      const int64_t e = tile * kSelectTile + int64_t{k} * kSelectThreads + threadIdx.x;
      int64_t so = 0, ao = 0;
      bool f = false;
      if (e < p.n) {
        locate(p, e, &so, &ao);
        f = selected<SB>(p, so);
      }
      const unsigned ballot = __ballot_sync(0xffffffffu, f);
      if (lane == 0) warp_counts[k & 1][warp] = __popc(ballot);
      __syncthreads();  // one barrier a step: the next step writes the other buffer
      int64_t before = 0, step_total = 0;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const int64_t c = warp_counts[k & 1][w];
        before += w < warp ? c : 0;
        step_total += c;
      }
      if (f) {
        const int64_t r = pos + before + __popc(ballot & ((1u << lane) - 1u));
        if constexpr (OP == SelectOp::nonzero) {
          if (r < p.bound) {  // the coordinates of e over the input's own dims, last first
            long long* o = reinterpret_cast<long long*>(p.out) + r * p.out_stride[0];
            int64_t q = e;
#pragma unroll
            for (int d = kRank - 1; d >= 0; --d) {
              if (d >= p.coord_rank) continue;
              o[d * p.out_stride[1]] = q % p.coord_size[d];
              q /= p.coord_size[d];
            }
          }
        } else if constexpr (OP == SelectOp::masked_select) {
          if (r < p.bound) reinterpret_cast<W*>(p.out)[r * p.out_stride[0]] = reinterpret_cast<const W*>(p.a)[ao];
        } else {  // masked_scatter: the r-th selected element takes source element r
          if (r < p.src_numel) {
            int64_t q = r, s = 0;
#pragma unroll
            for (int d = kRank - 1; d >= 0; --d) {
              if (d >= p.src_rank) continue;
              s += (q % p.src_size[d]) * p.src_stride[d];
              q /= p.src_size[d];
            }
            reinterpret_cast<W*>(p.out)[ao] = reinterpret_cast<const W*>(p.src)[s];
          } else if (p.error) {
            *p.error = 1;  // source too short: this element keeps self
          }
        }
      }
      pos += step_total;
      if (tile * kSelectTile + int64_t{k + 1} * kSelectThreads >= p.n) break;  // uniform
    }
  }
  if constexpr (OP == SelectOp::nonzero) {
    const int64_t total = selected_total(p);
    if (blockIdx.x == 0 && threadIdx.x == 0 && p.count) *p.count = total;
    // Rows past the count take the fill value (torch.nonzero_static).
    const int64_t first = total < p.bound ? total : p.bound;
    const int64_t cells = (p.bound - first) * p.coord_rank;
    long long* o = reinterpret_cast<long long*>(p.out);
    for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < cells; i += int64_t{gridDim.x} * blockDim.x) {
      const int64_t row = first + i / p.coord_rank, col = i % p.coord_rank;
      o[row * p.out_stride[0] + col * p.out_stride[1]] = p.fill;
    }
  } else {
    if (blockIdx.x == 0 && threadIdx.x == 0 && p.count) *p.count = selected_total(p);
  }
}

template <class Fn>
cudaError_t by_sel_bytes(int sb, Fn&& fn) {
  switch (sb) {
    case 1:
      return fn.template operator()<1>();
    case 2:
      return fn.template operator()<2>();
    case 4:
      return fn.template operator()<4>();
    case 8:
      return fn.template operator()<8>();
    case 16:
      return fn.template operator()<16>();
    default:
      return cudaErrorInvalidValue;
  }
}

template <int SB, int DB, SelectOp OP>
cudaError_t write_with(const SelectParams& p, cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>(p.tiles > 0 ? p.tiles : 1);
  write_kernel<SB, DB, OP><<<blocks, kSelectThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

/// The masked ops: a bool selector, data of 1..16 bytes.
template <SelectOp OP>
cudaError_t masked_with(const SelectParams& p, int data_bytes, cudaStream_t stream) {
  switch (data_bytes) {
    case 1:
      return write_with<1, 1, OP>(p, stream);
    case 2:
      return write_with<1, 2, OP>(p, stream);
    case 4:
      return write_with<1, 4, OP>(p, stream);
    case 8:
      return write_with<1, 8, OP>(p, stream);
    case 16:
      return write_with<1, 16, OP>(p, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t launch_select_count(const SelectParams& p, cudaStream_t stream) {
  if (p.tiles == 0) return cudaSuccess;
  return by_sel_bytes(p.sel_bytes, [&]<int SB>() {
    count_kernel<SB><<<static_cast<unsigned>(p.tiles), kSelectThreads, 0, stream>>>(p);
    return cudaGetLastError();
  });
}

cudaError_t launch_select_total(const SelectParams& p, cudaStream_t stream) {
  if (!p.count) return cudaSuccess;
  total_kernel<<<1, 32, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_select_write(const SelectParams& p, SelectOp op, int data_bytes, cudaStream_t stream) {
  switch (op) {
    case SelectOp::nonzero:  // the output is int64 whatever x is: only the selector's width varies
      return by_sel_bytes(p.sel_bytes, [&]<int SB>() { return write_with<SB, 8, SelectOp::nonzero>(p, stream); });
    case SelectOp::masked_select:
      return masked_with<SelectOp::masked_select>(p, data_bytes, stream);
    case SelectOp::masked_scatter:
      return masked_with<SelectOp::masked_scatter>(p, data_bytes, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace baracuda::detail::idx
