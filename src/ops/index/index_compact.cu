// The select engine (nonzero, masked_select, masked_scatter): stream compaction in two passes
// with no host synchronization. Pass 1 (count_kernel): one CTA per tile of kSelectTile elements
// counts its selected elements; CUB's exclusive scan of the tile counts (index_sort.cu) gives
// each tile its first output position. Pass 2 (write_kernel): each CTA rescans its tile, ranks
// the selected elements and writes them in row-major order.
//
// Why it is fast:
//  - A thread tests 16 consecutive elements (a chunk) at a time and keeps the result as a 16-bit
//    mask, counted with __popc. For a contiguous 1-byte selector (bool / uint8 / int8 / fp8
//    masks after dim merging) the chunk is one 16-byte load, tested with a few integer ops per
//    4 bytes (no byte loads: the old kernel was issue-bound at 1 byte a thread a step); a
//    pointer that is not 16-byte aligned (a slice) loads the aligned words and funnel-shifts
//    each lane's mask with its neighbour's (one shuffle), so any offset takes the vector path.
//    Other selectors (strided, broadcast, 2..16-byte elements) test an element a lane a step,
//    coalesced, and gather the 16-bit chunk masks from the warp's ballots.
//  - The write pass ranks a tile with one __syncthreads: a warp scan of the chunk counts (5
//    shuffles an item) gives each lane's rank in its warp, lane 31 posts the warp's total per
//    item, and every warp scans the CTA's kSelectItems x warps = 32 totals in one pass of its
//    lanes.
//  - Outputs are written warp-cooperatively: a warp's selected elements of one item are one
//    contiguous output range, so lane j writes output j, j + 32, ... of that range; it finds
//    the lane (binary search over the lanes' ranks, 5 shuffles) and the bit (nth set bit of
//    that lane's mask) that hold it. Stores are therefore coalesced whatever the density
//    (nonzero's [n, 2] int64 rows are one 16-byte store a lane: 512 contiguous bytes a warp),
//    where a lane-per-chunk store loop would scatter 16-byte stores over up to 16 rounds.
//  - Coordinates (nonzero) and strided offsets (merged dims of more than one) come from the
//    coordinates of the warp's first element, computed once per 512 elements, advanced by the
//    element's distance with carries: no per-element division (64-bit division is a ~100
//    instruction routine); divisions that remain use 32-bit arithmetic when the values fit.
//  - All positions and offsets are int64: inputs past 2^31 elements work.
#include "ops/index/index_kernels.cuh"

namespace baracuda::detail::idx {
namespace {

constexpr int kWarps = kSelectThreads / 32;
constexpr unsigned kFull = 0xffffffffu;
constexpr int kGenericBatch = 8;  // loads a lane keeps in flight on the element-a-lane path
static_assert(kSelectItems * kWarps == 32, "every warp scans the CTA's (item, warp) totals with its 32 lanes");
static_assert(kSelectChunk == 16, "a chunk is one 16-byte word of a 1-byte selector: 16-bit masks");

/// v / s, and *rem = v % s (v >= 0, s >= 1): 32-bit division when both fit (64-bit division is
/// a long software routine, the 32-bit one a few instructions).
__device__ __forceinline__ int64_t divmod(int64_t v, int64_t s, int64_t* rem) {
  if (((static_cast<uint64_t>(v) | static_cast<uint64_t>(s)) >> 32) == 0) {
    const uint32_t q = static_cast<uint32_t>(v) / static_cast<uint32_t>(s);
    *rem = v - int64_t{q} * s;
    return q;
  }
  const int64_t q = v / s;
  *rem = v - q * s;
  return q;
}

/// c[d] (d < rank): the coordinates of row-major element e over `size`. The outermost takes the
/// quotient unreduced (it passes its size only for elements past the end, which are not read).
__device__ __forceinline__ void decompose(const int64_t* size, int rank, int64_t e, int64_t (&c)[kRank]) {
#pragma unroll
  for (int d = kRank - 1; d >= 0; --d) {
    c[d] = 0;
    if (d >= rank) continue;
    if (d == 0)
      c[0] = e;
    else
      e = divmod(e, size[d], &c[d]);
  }
}

/// Adds `by` (0 <= by < 2^31) to the coordinates c over `size`, carrying outwards. A carry out of
/// a dim is at most `by`, so a step past one wrap divides (32-bit when it fits) and a step of at
/// most one wrap subtracts.
__device__ __forceinline__ void advance(const int64_t* size, int rank, int64_t by, int64_t (&c)[kRank]) {
  int64_t carry = by;
#pragma unroll
  for (int d = kRank - 1; d >= 1; --d) {
    if (d >= rank) continue;
    if (carry == 0) return;
    const int64_t v = c[d] + carry, s = size[d];
    if (v < s) {
      c[d] = v;
      carry = 0;
    } else if (v - s < s) {
      c[d] = v - s;
      carry = 1;
    } else {
      carry = divmod(v, s, &c[d]);
    }
  }
  if (rank > 0) c[0] += carry;
}

__device__ __forceinline__ int64_t offset_of(const int64_t* stride, int rank, const int64_t (&c)[kRank]) {
  int64_t o = 0;
#pragma unroll
  for (int d = 0; d < kRank; ++d)
    if (d < rank) o += c[d] * stride[d];
  return o;
}

/// The selector offset of row `row` of the merged dims (all but the innermost). A rolled loop
/// (the dims index the parameter space directly): it runs once per row a lane enters.
__device__ __forceinline__ int64_t row_offset(const SelectParams& p, int64_t row) {
  int64_t o = 0;
#pragma unroll 1
  for (int d = p.rank - 2; d > 0; --d) {
    int64_t c;
    row = divmod(row, p.size[d], &c);
    o += c * p.sel_stride[d];
  }
  return o + row * p.sel_stride[0];
}

/// Whether the SB-byte element at `off` of the tested tensor is selected.
template <int SB>
__device__ __forceinline__ bool selected(const SelectParams& p, int64_t off) {
  if constexpr (SB == 16) {
    const uint4 w = __ldg(reinterpret_cast<const uint4*>(p.sel) + off);
    const unsigned long long lo = (static_cast<unsigned long long>(w.y) << 32) | w.x;
    const unsigned long long hi = (static_cast<unsigned long long>(w.w) << 32) | w.z;
    return ((lo & p.nz_mask[0]) | (hi & p.nz_mask[1])) != 0;
  } else {
    using W = typename Word<SB>::type;
    const W w = __ldg(reinterpret_cast<const W*>(p.sel) + off);
    return (static_cast<unsigned long long>(w) & p.nz_mask[0]) != 0;
  }
}

/// Bit i set when byte i of x is not zero.
__device__ __forceinline__ unsigned nonzero_bytes4(unsigned x) {
  // Each byte's top bit: set when the byte is (adding 0x7f to its low 7 bits carries into bit 7
  // unless they are zero; no byte carries into the next).
  const unsigned top = (((x & 0x7f7f7f7fu) + 0x7f7f7f7fu) | x) & 0x80808080u;
  // Gathers bits 7, 15, 23, 31 into bits 28..31: the four partial products land on distinct
  // bits, so nothing carries.
  return (top * 0x00204081u) >> 28;
}

/// Bit i set when byte i of the 16-byte word w, ANDed with `keep` (the nz_mask byte in each
/// byte), is not zero.
__device__ __forceinline__ unsigned nonzero_bytes16(uint4 w, unsigned keep) {
  return nonzero_bytes4(w.x & keep) | nonzero_bytes4(w.y & keep) << 4 | nonzero_bytes4(w.z & keep) << 8 |
         nonzero_bytes4(w.w & keep) << 12;
}

/// The masks of the thread's chunks of `tile`: bit i of m[k] is set when element tile *
/// kSelectTile + (k * kSelectThreads + threadIdx.x) * 16 + i exists and is selected. Count and
/// write pass call this same function, so their tiles agree bit for bit.
/// CONTIG: the selector is one run of bytes (SB == 1, merged rank <= 1, unit stride).
template <int SB, bool CONTIG>
__device__ __forceinline__ void chunk_masks(const SelectParams& p, int64_t tile, unsigned (&m)[kSelectItems]) {
  const int lane = threadIdx.x & 31;
  const int64_t tile0 = tile * kSelectTile;
  if constexpr (CONTIG) {
    static_assert(SB == 1, "the vector path reads 1-byte selectors");
    // Element e sits at byte o + e of the aligned words from sel - o: the chunk starting at e0
    // (a multiple of 16) is bytes o..15 of word e0 / 16 and bytes 0..o-1 of the next word. A
    // word is read only when it holds a byte of the selector, so the reads stay inside the
    // 16-byte-aligned span that holds the mask (up to 15 bytes before its first and after its last
    // byte: never another page, never another allocation, whose starts are 256-byte aligned; the
    // bytes outside the mask are masked off below).
    const unsigned o = static_cast<unsigned>(reinterpret_cast<uintptr_t>(p.sel) & 15u);
    const uint4* words = reinterpret_cast<const uint4*>(p.sel - o);
    const unsigned keep = static_cast<unsigned>(p.nz_mask[0] & 0xffu) * 0x01010101u;
    const uint4 zero = make_uint4(0, 0, 0, 0);
    uint4 w[kSelectItems], next[kSelectItems];
#pragma unroll
    for (int k = 0; k < kSelectItems; ++k) {  // every load issued before any is used
      const int64_t e0 = tile0 + int64_t{k * kSelectThreads + static_cast<int>(threadIdx.x)} * kSelectChunk;
      w[k] = e0 < p.n + o ? __ldg(words + e0 / kSelectChunk) : zero;
      // Lane 31's next word belongs to the next warp's chunk: read it here.
      next[k] = o != 0 && lane == 31 && e0 + kSelectChunk < p.n + o ? __ldg(words + e0 / kSelectChunk + 1) : zero;
    }
#pragma unroll
    for (int k = 0; k < kSelectItems; ++k) {
      const int64_t e0 = tile0 + int64_t{k * kSelectThreads + static_cast<int>(threadIdx.x)} * kSelectChunk;
      unsigned mk = nonzero_bytes16(w[k], keep);
      if (o != 0) {  // uniform
        unsigned hi = __shfl_down_sync(kFull, mk, 1);
        if (lane == 31) hi = nonzero_bytes16(next[k], keep);
        mk = ((mk | hi << 16) >> o) & 0xffffu;
      }
      const int64_t left = p.n - e0;
      if (left < kSelectChunk) mk &= left > 0 ? (1u << left) - 1u : 0u;
      m[k] = mk;
    }
  } else {
    // An element a lane a step over the warp's 512 elements (coalesced when the selector is
    // contiguous): step i's ballot holds chunks 2i and 2i + 1 of the warp. An element's offset
    // is its row's (the merged dims but the innermost, recomputed when the lane crosses into
    // another row) plus its column's; a batch's offsets are computed before its loads are
    // issued, so kGenericBatch loads a lane are in flight. Loops stay rolled where unrolling
    // would only grow the code (it must stay in the instruction cache).
    const int warp = threadIdx.x >> 5;
    const bool flat = p.rank <= 1;
    const int64_t inner = flat ? 0 : p.size[p.rank - 1];
    const int64_t inner_stride = flat ? p.sel_stride[0] : p.sel_stride[p.rank - 1];
#pragma unroll 1
    for (int k = 0; k < kSelectItems; ++k) {
      const int64_t r0 = tile0 + int64_t{k * kSelectThreads + warp * 32} * kSelectChunk;
      unsigned mine = 0;
      if (r0 < p.n) {  // uniform
        int64_t e = r0 + lane, col = e, row_off = 0;
        if (!flat) row_off = row_offset(p, divmod(e, inner, &col));
#pragma unroll 1
        for (int i0 = 0; i0 < kSelectChunk; i0 += kGenericBatch) {
          int64_t off[kGenericBatch];
          bool in[kGenericBatch];
#pragma unroll
          for (int i = 0; i < kGenericBatch; ++i) {
            in[i] = e < p.n;
            off[i] = row_off + col * inner_stride;
            e += 32;
            col += 32;
            if (!flat && col >= inner) row_off = row_offset(p, divmod(e, inner, &col));
          }
          bool f[kGenericBatch];
#pragma unroll
          for (int i = 0; i < kGenericBatch; ++i) f[i] = in[i] && selected<SB>(p, off[i]);
#pragma unroll
          for (int i = 0; i < kGenericBatch; ++i) {
            const unsigned b = __ballot_sync(kFull, f[i]);
            if (i0 + i == (lane >> 1)) mine = (b >> ((lane & 1) * 16)) & 0xffffu;
          }
        }
      }
#pragma unroll
      for (int i = 0; i < kSelectItems; ++i)
        if (i == k) m[i] = mine;
    }
  }
}

/// Inclusive prefix sum over the warp's lanes.
__device__ __forceinline__ int warp_inclusive(int v, int lane) {
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const int t = __shfl_up_sync(kFull, v, d);
    if (lane >= d) v += t;
  }
  return v;
}

/// The position of the r-th (0-based) set bit of a 16-bit mask that has more than r.
__device__ __forceinline__ int nth_set_bit16(unsigned m, int r) {
  int pos = 0;
#pragma unroll
  for (int w = 8; w > 0; w >>= 1) {
    const int c = __popc(m & ((1u << w) - 1u));
    if (r >= c) {
      r -= c;
      m >>= w;
      pos += w;
    }
  }
  return pos;
}

template <int SB, bool CONTIG>
__global__ void __launch_bounds__(kSelectThreads) count_kernel(const SelectParams p) {
  __shared__ int warp_sums[kWarps];
  unsigned m[kSelectItems];
  chunk_masks<SB, CONTIG>(p, blockIdx.x, m);
  int n = 0;
#pragma unroll
  for (int k = 0; k < kSelectItems; ++k) n += __popc(m[k]);
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) n += __shfl_xor_sync(kFull, n, d);
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = n;
  __syncthreads();
  if (threadIdx.x == 0) {
    int64_t t = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) t += warp_sums[w];
    p.tile_counts[blockIdx.x] = t;
  }
}

__device__ __forceinline__ int64_t selected_total(const SelectParams& p) {
  return p.tiles > 0 ? p.tile_offsets[p.tiles - 1] + p.tile_counts[p.tiles - 1] : 0;
}

__global__ void total_kernel(const SelectParams p) {
  if (threadIdx.x == 0 && blockIdx.x == 0 && p.count) *p.count = selected_total(p);
}

/// Writes the `count` selected elements of one warp's item (512 elements from r0; lane L's mask
/// `mask`, its rank among the warp's selected elements `rank`) at outputs pos, pos + 1, ...
/// Lane j takes outputs j, j + 32, ...: coalesced stores (nonzero, masked_select) or loads
/// (masked_scatter's source).
template <int DB, SelectOp OP>
__device__ __forceinline__ void write_run(const SelectParams& p, unsigned mask, int rank, int count, int64_t pos,
                                          int64_t r0, int lane, bool pairs) {
  using W = typename Word<DB>::type;
  // The coordinates of r0: nonzero's over the input's own dims, the masked ops' over the
  // merged dims (only needed past one merged dim).
  int64_t base[kRank];
  if constexpr (OP == SelectOp::nonzero)
    decompose(p.coord_size, p.coord_rank, r0, base);
  else if (p.rank > 1)
    decompose(p.size, p.rank, r0, base);
  for (int j0 = 0; j0 < count; j0 += 32) {  // uniform
    const int j = j0 + lane;
    int src = 0;  // the last lane whose rank is <= j: it holds output j (its rank + count > j)
#pragma unroll
    for (int step = 16; step > 0; step >>= 1)
      if (__shfl_sync(kFull, rank, src + step) <= j) src += step;
    const unsigned src_mask = __shfl_sync(kFull, mask, src);
    const int below = j - __shfl_sync(kFull, rank, src);
    if (j >= count) continue;  // the last round's spare lanes (every lane did the shuffles)
    const int delta = src * kSelectChunk + nth_set_bit16(src_mask, below);
    const int64_t r = pos + j;
    if constexpr (OP == SelectOp::nonzero) {
      if (r >= p.bound) continue;
      int64_t c[kRank];
#pragma unroll
      for (int d = 0; d < kRank; ++d) c[d] = base[d];
      advance(p.coord_size, p.coord_rank, delta, c);
      long long* o = reinterpret_cast<long long*>(p.out) + r * p.out_stride[0];
      if (pairs) {
        *reinterpret_cast<longlong2*>(o) = make_longlong2(c[0], c[1]);
      } else {
#pragma unroll
        for (int d = 0; d < kRank; ++d)
          if (d < p.coord_rank) o[d * p.out_stride[1]] = c[d];
      }
    } else {
      int64_t ao;
      if (p.rank > 1) {
        int64_t c[kRank];
#pragma unroll
        for (int d = 0; d < kRank; ++d) c[d] = base[d];
        advance(p.size, p.rank, delta, c);
        ao = offset_of(p.a_stride, p.rank, c);
      } else {
        ao = (r0 + delta) * p.a_stride[0];
      }
      if constexpr (OP == SelectOp::masked_select) {
        if (r < p.bound) reinterpret_cast<W*>(p.out)[r * p.out_stride[0]] = reinterpret_cast<const W*>(p.a)[ao];
      } else {  // masked_scatter: the r-th selected element takes source element r
        if (r < p.src_numel) {
          int64_t s;
          if (p.src_rank <= 1) {
            s = r * p.src_stride[0];
          } else {
            int64_t c[kRank];
            decompose(p.src_size, p.src_rank, r, c);
            s = offset_of(p.src_stride, p.src_rank, c);
          }
          reinterpret_cast<W*>(p.out)[ao] = reinterpret_cast<const W*>(p.src)[s];
        } else if (p.error) {
          *p.error = 1;  // source too short: this element keeps self (idempotent store)
        }
      }
    }
  }
}

/// One CTA per tile (at least one CTA, for the fills of an empty input).
template <int SB, bool CONTIG, int DB, SelectOp OP>
__global__ void __launch_bounds__(kSelectThreads) write_kernel(const SelectParams p) {
  __shared__ int totals[kSelectItems * kWarps];  // selected elements per (item, warp): output order
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t tile = blockIdx.x;
  if (tile < p.tiles) {
    const int64_t tile_pos = p.tile_offsets[tile];  // issued early: used after the scan
    unsigned m[kSelectItems];
    chunk_masks<SB, CONTIG>(p, tile, m);
    int rank[kSelectItems];  // the lane's first selected element's rank within its warp's item
#pragma unroll
    for (int k = 0; k < kSelectItems; ++k) {
      const int c = __popc(m[k]);
      const int inclusive = warp_inclusive(c, lane);
      rank[k] = inclusive - c;
      if (lane == 31) totals[k * kWarps + warp] = inclusive;
    }
    __syncthreads();  // the only barrier: every warp then scans the 32 totals itself
    const int t = totals[lane];
    const int t_inclusive = warp_inclusive(t, lane);
    // nonzero of a 2-d input into unit-stride, 16-byte-aligned rows: one 16-byte store a row
    const bool pairs = OP == SelectOp::nonzero && p.coord_rank == 2 && p.out_stride[1] == 1 &&
                       (p.out_stride[0] & 1) == 0 && (reinterpret_cast<uintptr_t>(p.out) & 15u) == 0;
    // Not unrolled: one copy of write_run (the kernel's bulk) keeps the code in the instruction
    // cache; the item's registers are picked with selects.
#pragma unroll 1
    for (int k = 0; k < kSelectItems; ++k) {
      const int slot = k * kWarps + warp;
      const int count = __shfl_sync(kFull, t, slot);
      if (count == 0) continue;  // uniform
      unsigned mk = m[0];
      int rk = rank[0];
#pragma unroll
      for (int i = 1; i < kSelectItems; ++i) {
        mk = k == i ? m[i] : mk;
        rk = k == i ? rank[i] : rk;
      }
      const int64_t pos = tile_pos + __shfl_sync(kFull, t_inclusive, slot) - count;
      const int64_t r0 = tile * kSelectTile + int64_t{k * kSelectThreads + warp * 32} * kSelectChunk;
      write_run<DB, OP>(p, mk, rk, count, pos, r0, lane, pairs);
    }
  }
  if constexpr (OP == SelectOp::nonzero) {
    const int64_t total = selected_total(p);
    if (blockIdx.x == 0 && threadIdx.x == 0 && p.count) *p.count = total;
    // Rows past the count take the fill value (torch.nonzero_static).
    long long* o = reinterpret_cast<long long*>(p.out);
    for (int64_t row = (total < p.bound ? total : p.bound) + int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
         row < p.bound; row += int64_t{gridDim.x} * blockDim.x)
      for (int d = 0; d < p.coord_rank; ++d) o[row * p.out_stride[0] + d * p.out_stride[1]] = p.fill;
  } else {
    if (blockIdx.x == 0 && threadIdx.x == 0 && p.count) *p.count = selected_total(p);
  }
}

/// The vector path applies: a 1-byte selector that is one run of bytes after dim merging.
bool contiguous_bytes(const SelectParams& p) {
  return p.sel_bytes == 1 && (p.rank == 0 || (p.rank == 1 && p.sel_stride[0] == 1));
}

/// Calls fn.template operator()<SB, CONTIG>() for the selector's width and layout.
template <class Fn>
cudaError_t by_selector(const SelectParams& p, Fn&& fn) {
  if (contiguous_bytes(p)) return fn.template operator()<1, true>();
  return by_bytes(p.sel_bytes, [&]<int SB>() { return fn.template operator()<SB, false>(); });
}

template <int SB, bool CONTIG, int DB, SelectOp OP>
cudaError_t write_with(const SelectParams& p, cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>(p.tiles > 0 ? p.tiles : 1);
  write_kernel<SB, CONTIG, DB, OP><<<blocks, kSelectThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

/// The masked ops: a bool selector (contiguous or not), data of 1..16 bytes.
template <SelectOp OP, bool CONTIG>
cudaError_t masked_with(const SelectParams& p, int data_bytes, cudaStream_t stream) {
  return by_bytes(data_bytes, [&]<int DB>() { return write_with<1, CONTIG, DB, OP>(p, stream); });
}

template <SelectOp OP>
cudaError_t masked(const SelectParams& p, int data_bytes, cudaStream_t stream) {
  if (p.sel_bytes != 1) return cudaErrorInvalidValue;
  return contiguous_bytes(p) ? masked_with<OP, true>(p, data_bytes, stream)
                             : masked_with<OP, false>(p, data_bytes, stream);
}

}  // namespace

cudaError_t launch_select_count(const SelectParams& p, cudaStream_t stream) {
  if (p.tiles == 0) return cudaSuccess;
  return by_selector(p, [&]<int SB, bool CONTIG>() {
    count_kernel<SB, CONTIG><<<static_cast<unsigned>(p.tiles), kSelectThreads, 0, stream>>>(p);
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
    case SelectOp::nonzero:  // the output is int64 whatever x is: only the selector varies
      return by_selector(
          p, [&]<int SB, bool CONTIG>() { return write_with<SB, CONTIG, 8, SelectOp::nonzero>(p, stream); });
    case SelectOp::masked_select:
      return masked<SelectOp::masked_select>(p, data_bytes, stream);
    case SelectOp::masked_scatter:
      return masked<SelectOp::masked_scatter>(p, data_bytes, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace baracuda::detail::idx
