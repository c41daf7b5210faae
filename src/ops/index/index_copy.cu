// The copy engine of the indexing family: the mapped strided copy (one kernel per element size,
// plain or mapped, 32/64-bit index arithmetic), its row variants (pad's forward: warp tasks of
// rows for short rows, 16-byte output chunks along the innermost dim for long ones) and the
// shared-memory tiled transpose.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>

#include "ops/index/index_kernels.cuh"

namespace baracuda::detail::idx {
namespace {

/// Output coordinate -> input coordinate of one dim (MapMode); the caller bounds-checks.
template <class I>
__device__ __forceinline__ I map_coord(int mode, I o, I n, I a) {
  switch (mode) {
    case kFlip:
      return n - 1 - o;
    case kRoll: {
      I i = o - a;
      return i < 0 ? i + n : i;
    }
    case kReflect: {
      I i = o - a;
      if (i < 0) i = -i;
      if (i >= n) i = 2 * (n - 1) - i;
      return i;
    }
    case kReplicate: {
      I i = o - a;
      return i < 0 ? I(0) : (i >= n ? n - 1 : i);
    }
    case kCircular: {
      I i = (o - a) % n;
      return i < 0 ? i + n : i;
    }
    case kTile:
      return o % n;
    case kRepeat:
      return o / a;
    default:
      return o - a;
  }
}

/// Offsets of output element t: returns whether it reads the input (false: the fill value).
/// Plain: every dim is the identity with a = 0 and equal sizes (permute/contiguous/expand/slice
/// write), so there is no map, no fill and no triangle: only the two offsets.
template <class I, bool Plain>
__device__ __forceinline__ bool locate(const CopyParams& p, I t, I* out_off, I* in_off) {
  I rem = t, oo = 0, io = 0, row = 0, col = 0;
  bool inside = p.in != nullptr;
#pragma unroll
  for (int d = kRank - 1; d >= 0; --d) {
    if (d >= p.rank) continue;
    const I n_out = static_cast<I>(p.d[d].out_size);
    const I o = rem % n_out;
    rem /= n_out;
    oo += o * static_cast<I>(p.d[d].out_stride);
    if constexpr (Plain) {
      io += o * static_cast<I>(p.d[d].in_stride);
    } else {
      const I n = static_cast<I>(p.d[d].in_size);
      const I i = map_coord<I>(p.d[d].mode, o, n, static_cast<I>(p.d[d].a));
      if (i < 0 || i >= n) inside = false;
      io += i * static_cast<I>(p.d[d].in_stride);
      if (d == p.tri_row) row = o;
      if (d == p.tri_col) col = o;
    }
  }
  if constexpr (!Plain) {
    if (p.tri_row >= 0) {
      const int64_t diff = static_cast<int64_t>(col) - static_cast<int64_t>(row);
      if (p.tri_upper ? diff < p.tri_k : diff > p.tri_k) inside = false;
    }
  }
  *out_off = oo;
  *in_off = io;
  return inside;
}

/// Two elements a thread per iteration, both loads issued before the stores, so each thread
/// keeps two words in flight (one left loads stall on latency; the elementwise engine measured
/// two vectors a thread as the best for bandwidth-bound copies).
template <int EB, class I, bool Plain>
__global__ void __launch_bounds__(256) mapped_copy_kernel(const CopyParams p) {
  using W = typename Word<EB>::type;
  W fill;
  memcpy(&fill, p.fill, EB);
  const W* in = reinterpret_cast<const W*>(p.in);
  W* out = reinterpret_cast<W*>(p.out);
  const I total = static_cast<I>(p.total);
  const I step = static_cast<I>(gridDim.x) * blockDim.x;
  for (I t = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += 2 * step) {
    const I t2 = t + step;
    const bool has2 = t2 < total;
    I o1, i1, o2 = 0, i2 = 0;
    const bool r1 = locate<I, Plain>(p, t, &o1, &i1);
    const bool r2 = has2 && locate<I, Plain>(p, t2, &o2, &i2);
    W v1 = fill, v2 = fill;
    if (r1) v1 = in[i1];
    if (r2) v2 = in[i2];
    out[o1] = v1;
    if (has2) out[o2] = v2;
  }
}

/// Plain copies whose innermost dim is unit-stride on both sides (cat, stack, contiguous() of a
/// row slice, flat copies): the outer coordinates are decomposed once per row (blockIdx.y), not
/// per element, and a row's words move two a thread, both loads before the stores. The per-word
/// division of mapped_copy_kernel held cat of two [8192, 4096] bf16 tensors at 84% of the H200
/// copy figure (0.92-0.94x torch's batched cat kernel).
/// One launch covers up to kCopyBatch copies (cat / stack inputs: blockIdx.z picks the job), so
/// the inputs share one grid and one tail instead of a launch each.
constexpr int kPlainRowThreads = 256;
static_assert(sizeof(CopyBatch) <= 4096, "CopyBatch travels as a kernel parameter: 4 KB of parameter space");
template <int EB, class I>
__global__ void __launch_bounds__(kPlainRowThreads) plain_rows_kernel(const CopyBatch b) {
  const CopyParams& p = b.job[blockIdx.z];
  using W = typename Word<EB>::type;
  const W* in = reinterpret_cast<const W*>(p.in);
  W* out = reinterpret_cast<W*>(p.out);
  const int inner = p.rank - 1;
  const I n = static_cast<I>(p.d[inner].out_size);
  I rows = 1;
  for (int d = 0; d < inner; ++d) rows *= static_cast<I>(p.d[d].out_size);
  constexpr I kSpan = 2 * kPlainRowThreads;
  for (I row = blockIdx.y; row < rows; row += gridDim.y) {
    I rem = row, oo = 0, io = 0;
#pragma unroll
    for (int d = kRank - 1; d >= 0; --d) {
      if (d >= inner) continue;
      const I size = static_cast<I>(p.d[d].out_size);
      const I c = rem % size;
      rem /= size;
      oo += c * static_cast<I>(p.d[d].out_stride);
      io += c * static_cast<I>(p.d[d].in_stride);
    }
    for (I c = static_cast<I>(blockIdx.x) * kSpan + threadIdx.x; c < n; c += static_cast<I>(gridDim.x) * kSpan) {
      const I c2 = c + kPlainRowThreads;
      const bool has2 = c2 < n;
      const W v1 = in[io + c];
      W v2{};
      if (has2) v2 = in[io + c2];
      out[oo + c] = v1;
      if (has2) out[oo + c2] = v2;
    }
  }
}

// ---- the row variant (pad's forward) ------------------------------------------------------------
/// Output and input offsets of the linear index r over the dims [d0, d1) (the last fastest), and
/// whether every mapped coordinate lands inside the input.
template <class I>
struct RowAt {
  I out, in;
  bool ok;
};
template <class I>
__device__ __forceinline__ RowAt<I> locate_dims(const CopyParams& p, int d0, int d1, I r) {
  RowAt<I> x{0, 0, true};
#pragma unroll
  for (int d = kRank - 1; d >= 0; --d) {
    if (d < d0 || d >= d1) continue;
    const I n_out = static_cast<I>(p.d[d].out_size);
    const I o = r % n_out;
    r /= n_out;
    x.out += o * static_cast<I>(p.d[d].out_stride);
    const I n = static_cast<I>(p.d[d].in_size);
    const I i = map_coord<I>(p.d[d].mode, o, n, static_cast<I>(p.d[d].a));
    if (i < 0 || i >= n) x.ok = false;
    x.in += i * static_cast<I>(p.d[d].in_stride);
  }
  return x;
}

/// Derived by launch_row_copy. The output dims [gdim, rank) are dense (a *segment*: rows of
/// the innermost dim back to back), so a chunk may cross a row end; dims [0, gdim) index the
/// segments. Chunks are aligned in memory: chunk j of a segment starts `head` elements before
/// its 16-byte boundary.
struct RowGeom {
  int gdim = 0;
  int out_mis = 0;  ///< (out address / element bytes) mod elements-per-chunk
  int in_mis = 0;   ///< the same for the input
  int fast_in = 0;  ///< the input's innermost stride is 1: interior chunks load 16-byte words
  int64_t seg_len = 0, chunks_per_seg = 0, chunks = 0;
  int64_t win_lo = 0, win_hi = 0;  ///< inner output coords reading input coord o - a (contiguous)
  int64_t in_reach = 0;            ///< [in, in + in_reach) elements: the input's footprint
};

/// 16 bytes starting `shift` bytes (0 <= shift < 16) into the 32 bytes lo:hi (little endian):
/// two select stages pick the 5 source words (shift / 4), 4 funnel shifts the bytes (shift % 4).
__device__ __forceinline__ uint4 funnel16(const uint4 lo, const uint4 hi, const int shift) {
  const uint32_t x[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
  const bool two = shift & 8, one = shift & 4;
  uint32_t z[6], y[5];
#pragma unroll
  for (int i = 0; i < 6; ++i) z[i] = two ? x[i + 2] : x[i];
#pragma unroll
  for (int i = 0; i < 5; ++i) y[i] = one ? z[i + 1] : z[i];
  const int bits = (shift & 3) * 8;
  uint4 r;
  r.x = __funnelshift_r(y[0], y[1], bits);
  r.y = __funnelshift_r(y[1], y[2], bits);
  r.z = __funnelshift_r(y[2], y[3], bits);
  r.w = __funnelshift_r(y[3], y[4], bits);
  return r;
}

/// 16 bytes starting `shift` bytes (0 < shift < 16) into the aligned 32 bytes at p: two aligned
/// loads and a funnel shift, no dynamic register indexing (the word shift is selected).
__device__ __forceinline__ uint4 load_shifted(const uint4* p, int shift) {
  return funnel16(__ldg(p), __ldg(p + 1), shift);
}

/// One thread per aligned chunk of V = 16 / EB output elements (see RowGeom). Three cases: a
/// chunk of one row whose row maps outside the input (constant pad's border rows) stores the
/// fill; one inside the inner dim's shift window reads its V sources as one (or two shifted)
/// 16-byte words; any other chunk (pad edges, row ends, strided inputs) maps element by element
/// over at most two rows (the inner dim has at least V elements). Full chunks store one 16-byte
/// word; the partial ones at a segment's ends store elements.
/// The fill value as one element and as a 16-byte word of 16 / EB of them.
template <int EB>
__device__ __forceinline__ typename Word<EB>::type fill_of(const CopyParams& p) {
  typename Word<EB>::type fill;
  memcpy(&fill, p.fill, EB);
  return fill;
}
template <int EB>
__device__ __forceinline__ uint4 fill_word(const typename Word<EB>::type fill) {
  typename Word<EB>::type fills[16 / EB];
#pragma unroll
  for (int k = 0; k < 16 / EB; ++k) fills[k] = fill;
  uint4 word;
  memcpy(&word, fills, 16);
  return word;
}

template <int EB, class I>
__global__ void __launch_bounds__(256) row_copy_kernel(const CopyParams p, const RowGeom r) {
  using W = typename Word<EB>::type;
  constexpr int V = 16 / EB;
  const W fill = fill_of<EB>(p);
  const uint4 fill16 = fill_word<EB>(fill);
  const W* in = reinterpret_cast<const W*>(p.in);
  W* out = reinterpret_cast<W*>(p.out);
  const int inner = p.rank - 1;
  const I w_out = static_cast<I>(p.d[inner].out_size), n_in = static_cast<I>(p.d[inner].in_size);
  const I a_in = static_cast<I>(p.d[inner].a), s_in = static_cast<I>(p.d[inner].in_stride);
  const int mode = p.d[inner].mode;
  const I per_seg = static_cast<I>(r.chunks_per_seg), seg_len = static_cast<I>(r.seg_len);
  const I chunks = static_cast<I>(r.chunks);
  const I step = static_cast<I>(gridDim.x) * blockDim.x;
  for (I t = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; t < chunks; t += step) {
    const I s = t / per_seg, j = t - s * per_seg;
    const RowAt<I> seg = locate_dims<I>(p, 0, r.gdim, s);
    const I e0 = j * V - ((static_cast<I>(r.out_mis) + seg.out) & (V - 1));  // first element (may be < 0)
    const I eb = e0 < 0 ? I(0) : e0;
    const I ee = e0 + V < seg_len ? e0 + V : seg_len;
    if (eb >= ee) continue;  // the spare chunk of an aligned segment
    const I rl = eb / w_out;
    const I c = eb - rl * w_out;  // column of the first live element
    RowAt<I> ra = locate_dims<I>(p, r.gdim, inner, rl);
    ra.in += seg.in;
    ra.ok = ra.ok && seg.ok;
    const bool full = ee - eb == V;
    if (full && c + V <= w_out) {
      uint4* dst = reinterpret_cast<uint4*>(out + (seg.out + e0));
      if (!ra.ok) {
        *dst = fill16;
        continue;
      }
      if (r.fast_in && c >= r.win_lo && c + V <= r.win_hi) {
        const I src = ra.in + (c - a_in);
        const int mis = static_cast<int>((static_cast<I>(r.in_mis) + src) & (V - 1));
        if (mis == 0) {
          *dst = __ldg(reinterpret_cast<const uint4*>(in + src));
          continue;
        }
        const I lo = src - mis;  // both aligned blocks inside the input's footprint
        if (lo >= 0 && lo + 2 * V <= static_cast<I>(r.in_reach)) {
          *dst = load_shifted(reinterpret_cast<const uint4*>(in + lo), mis * EB);
          continue;
        }
      }
    }
    RowAt<I> rb = ra;  // the next row, when the chunk crosses the row end
    if (c + (ee - eb) > w_out) {
      rb = locate_dims<I>(p, r.gdim, inner, rl + 1);
      rb.in += seg.in;
      rb.ok = rb.ok && seg.ok;
    }
    W v[V];
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const I e = e0 + k;
      I col = c + (e - eb);
      const bool second = col >= w_out;
      if (second) col -= w_out;
      const bool ok = second ? rb.ok : ra.ok;
      const I base = second ? rb.in : ra.in;
      const I i = map_coord<I>(mode, col, n_in, a_in);
      v[k] = fill;
      if (e >= eb && e < ee && ok && i >= 0 && i < n_in) v[k] = in[base + i * s_in];
    }
    if (full) {
      uint4 w;
      memcpy(&w, v, 16);
      *reinterpret_cast<uint4*>(out + (seg.out + e0)) = w;
    } else {
#pragma unroll
      for (int k = 0; k < V; ++k)
        if (e0 + k >= eb && e0 + k < ee) out[seg.out + e0 + k] = v[k];
    }
  }
}

/// Pad's forward for short rows (at most kWarpRowMax bytes an output row). A warp takes a *task*
/// of `task_rows` consecutive output rows (a multiple of K = kRowBatch, at most 32) and moves it K
/// rows at a time: for each 32-column strip of those K rows, each lane issues its K loads (one
/// column, K rows) before the K stores. Costs taken out of the element loop:
///  - the outer dims: lane k decomposes row k of the task once (locate_dims, divisions) and the
///    warp reads the K rows' offsets of a batch with shuffles;
///  - the inner dim's map: it is the same for every row, so the block tabulates the source offset
///    of each output column once in shared memory (kNoSource: the fill) and a strip reads one
///    entry per lane, whatever the mode (no switch, no divergence at the pad edges);
///  - the column: lane + 32 * strip, no division.
/// An element then costs about 9 instructions (sm_90a SASS: add, wide multiply-add and predicated
/// load; add, wide multiply-add and store; the fill move), against ~30 when a lane walks a flat
/// stream of rows.
/// Bytes in flight: HBM3 at ~3 TB/s of copy bandwidth reads ~1.5 TB/s; at ~1 us of loaded latency
/// that is ~1.5 MB of reads in flight, ~11 KB per SM of the 132. A warp per row with one element
/// a lane, its store waiting on its load (the previous kernel), kept 64 B per warp, 4 KB per SM at
/// 64 warps: 35% of the bandwidth measured. A batch keeps 32 * K * EB bytes per warp: 512 B for
/// bf16, 1 KB for 4- and 8-byte elements (K = 4 for the latter), 256 B for 1-byte ones, and with
/// 32-bit offsets a step takes U = 3 strips of it (3 x that in flight; 64 registers, 4 blocks, 32
/// warps an SM: ~48 KB per SM for bf16). Measured on H100 for the bench's 130-element bf16 rows:
/// one strip a step at 5 blocks 43% of copy bandwidth (ncu: L1TEX scoreboard stalls 61%, i.e.
/// latency), two 53%, three 56-58% (40 us, torch 67 / 100 us). Accesses stay EB bytes wide but
/// contiguous across the warp (64 B per bf16 request): wider words would need funnel shifts where
/// the output and input rows are misaligned (pad's interior is shifted by the pad before).
/// 130-element rows take 5 strips, 130 of 160 lanes busy.
constexpr int kWarpRowMax = 2048;
template <int EB>
inline constexpr int kRowBatch = EB == 8 ? 4 : 8;  ///< rows a batch: loads a lane issues before storing

// The bound caps both index widths at 64 registers (4 blocks an SM): U = 3 strips of 32-bit
// offsets and one strip of 64-bit ones fit without spills (sm_90a, -Xptxas -v).
template <int EB, class I>
__global__ void __launch_bounds__(256, 4) warp_row_copy_kernel(const CopyParams p, const int task_rows) {
  using W = typename Word<EB>::type;
  constexpr int K = kRowBatch<EB>;
  constexpr int U = sizeof(I) == 4 ? 3 : 1;  // strips a step
  constexpr I kNoSource = std::numeric_limits<I>::min();
  constexpr unsigned kAll = 0xffffffffu;
  extern __shared__ __align__(16) unsigned char row_smem[];
  I* src_of = reinterpret_cast<I*>(row_smem);  // [32 * strips]: input offset of a column in its row
  W fill;
  memcpy(&fill, p.fill, EB);
  const W* in = reinterpret_cast<const W*>(p.in);
  W* out = reinterpret_cast<W*>(p.out);
  const int inner = p.rank - 1;
  const int w_out = static_cast<int>(p.d[inner].out_size);
  const int cols = (w_out + 31) & ~31;  // whole strips; the padding columns read nothing
  {
    const I n_in = static_cast<I>(p.d[inner].in_size), a_in = static_cast<I>(p.d[inner].a);
    const I s_in = static_cast<I>(p.d[inner].in_stride);
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
      const I i = j < w_out && n_in > 0 ? map_coord<I>(p.d[inner].mode, static_cast<I>(j), n_in, a_in) : I(-1);
      src_of[j] = i >= 0 && i < n_in ? i * s_in : kNoSource;
    }
  }
  __syncthreads();
  const int lane = threadIdx.x & 31;
  const I rows = static_cast<I>(p.total / p.d[inner].out_size);
  const I tasks = (rows + task_rows - 1) / task_rows;
  const I warps = static_cast<I>(gridDim.x) * (blockDim.x / 32);
  for (I t = static_cast<I>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; t < tasks; t += warps) {
    const I r0 = t * task_rows;
    const int n = static_cast<int>(rows - r0 < task_rows ? rows - r0 : I(task_rows));
    // Lanes past the task's last row repeat that row: a partial batch rewrites it with the same
    // bytes instead of testing every slot.
    const RowAt<I> mine = locate_dims<I>(p, 0, inner, r0 + (lane < n ? lane : n - 1));
    const unsigned ok_rows = __ballot_sync(kAll, mine.ok);  // rows that read the input
    for (int b = 0; b < n; b += K) {
      I at_in[K], at_out[K];
#pragma unroll
      for (int k = 0; k < K; ++k) {  // b + k < task_rows <= 32
        at_in[k] = __shfl_sync(kAll, mine.in, b + k);
        at_out[k] = __shfl_sync(kAll, mine.out, b + k);
      }
      // The strips of the batch; every_row: all K rows read the input (all but constant pad's
      // border rows), so the loads test only the column.
      // U strips a step (past the table's whole strips a strip reads nothing): U * K loads a
      // lane in flight before the stores. U = 3 with 32-bit offsets (4 spilled); 64-bit ones
      // spill at 2.
      auto strips = [&](auto every_row) {
        const unsigned ok = ok_rows >> b;
        for (int j0 = lane; j0 < cols; j0 += 32 * U) {
          W v[U][K];
#pragma unroll
          for (int h = 0; h < U; ++h) {
            const int j = j0 + 32 * h;
            const I s = j < cols ? src_of[j] : kNoSource;
            const bool reads = s != kNoSource;
#pragma unroll
            for (int k = 0; k < K; ++k) {
              v[h][k] = fill;
              if (reads && (every_row || ((ok >> k) & 1u))) v[h][k] = __ldg(in + (at_in[k] + s));
            }
          }
#pragma unroll
          for (int h = 0; h < U; ++h) {
            const int j = j0 + 32 * h;
            if (j < w_out) {
#pragma unroll
              for (int k = 0; k < K; ++k) out[at_out[k] + j] = v[h][k];
            }
          }
        }
      };
      constexpr unsigned kRows = (1u << K) - 1;
      if (((ok_rows >> b) & kRows) == kRows)
        strips(std::true_type{});
      else
        strips(std::false_type{});
    }
  }
}

/// Rows per warp task of warp_row_copy_kernel: one batch (K rows) while that leaves at least 64K
/// tasks, so tasks stay short and the block scheduler balances the SMs; more (up to 32, whole
/// batches) for very large pads, where a task's row decomposition (a division per outer dim, about
/// a third of the issue of a batch of 130-element rows) is shared by more rows.
int warp_row_task_rows(int64_t rows, int batch_rows) {
  const int64_t per_task = rows / (int64_t{65536} * batch_rows);
  return batch_rows * static_cast<int>(std::clamp<int64_t>(per_task, 1, 32 / batch_rows));
}

constexpr int kTileDim = 32;
constexpr int kTileRows = 8;

/// One CTA moves 32 x 32 tiles: it reads rows contiguous in the input's unit-stride dim and
/// writes rows contiguous in the output's, so both sides are coalesced.
template <int EB>
__global__ void __launch_bounds__(kTileDim* kTileRows) transpose_kernel(const TransposeParams p) {
  using W = typename Word<EB>::type;
  __shared__ W tile[kTileDim][kTileDim + 1];  // +1: column reads hit distinct banks
  const int64_t na = p.size[p.in_inner], nb = p.size[p.out_inner];
  const int64_t ta = (na + kTileDim - 1) / kTileDim;
  const int64_t sb_in = p.in_stride[p.out_inner], sa_out = p.out_stride[p.in_inner];
  const W* in = reinterpret_cast<const W*>(p.in);
  W* out = reinterpret_cast<W*>(p.out);
  for (int64_t blk = blockIdx.x; blk < p.tiles * p.batch; blk += gridDim.x) {
    const int64_t b = blk / p.tiles, t = blk % p.tiles;
    const int64_t a0 = (t % ta) * kTileDim, b0 = (t / ta) * kTileDim;
    int64_t rem = b, in_base = 0, out_base = 0;
#pragma unroll
    for (int d = kRank - 1; d >= 0; --d) {
      if (d >= p.rank || d == p.in_inner || d == p.out_inner) continue;
      const int64_t c = rem % p.size[d];
      rem /= p.size[d];
      in_base += c * p.in_stride[d];
      out_base += c * p.out_stride[d];
    }
    for (int j = threadIdx.y; j < kTileDim; j += kTileRows) {
      const int64_t ia = a0 + threadIdx.x, ib = b0 + j;
      if (ia < na && ib < nb) tile[j][threadIdx.x] = in[in_base + ia + ib * sb_in];
    }
    __syncthreads();
    for (int j = threadIdx.y; j < kTileDim; j += kTileRows) {
      const int64_t ib = b0 + threadIdx.x, ia = a0 + j;
      if (ia < na && ib < nb) out[out_base + ib + ia * sa_out] = tile[threadIdx.x][j];
    }
    __syncthreads();
  }
}

/// V x V elements of EB bytes held in registers as V vectors of VB = V * EB bytes (row i = the
/// vector read from input row i), transposed in place so that vector j becomes output row j.
/// 2-byte elements: one byte_perm per output word; 1-byte ones: three; 4-byte and wider ones
/// only rename registers.
template <int EB, int VB>
struct RegisterBlock {
  static constexpr int V = VB / EB;
  static constexpr int kWords = VB / 4;
  uint32_t w[V][kWords];

  __device__ __forceinline__ void transpose() {
    uint32_t o[V][kWords];
#pragma unroll
    for (int j = 0; j < V; ++j)
#pragma unroll
      for (int k = 0; k < kWords; ++k) {
        if constexpr (EB >= 4) {
          // Word k of output row j: word k % (EB / 4) of element j of input row k / (EB / 4).
          constexpr int kWe = EB / 4;
          o[j][k] = w[k / kWe][j * kWe + k % kWe];
        } else if constexpr (EB == 2) {
          // Elements 2k and 2k + 1 of output row j: element j of input rows 2k and 2k + 1.
          o[j][k] = __byte_perm(w[2 * k][j / 2], w[2 * k + 1][j / 2], (j & 1) ? 0x7632 : 0x5410);
        } else {
          // Byte m of word k of output row j: byte j of input row 4k + m.
          const uint32_t sel = (j & 3) | (((j & 3) + 4) << 4);
          const uint32_t lo = __byte_perm(w[4 * k][j / 4], w[4 * k + 1][j / 4], sel);
          const uint32_t hi = __byte_perm(w[4 * k + 2][j / 4], w[4 * k + 3][j / 4], sel);
          o[j][k] = __byte_perm(lo, hi, 0x5410);
        }
      }
#pragma unroll
    for (int j = 0; j < V; ++j)
#pragma unroll
      for (int k = 0; k < kWords; ++k) w[j][k] = o[j][k];
  }
};

/// One VB-byte vector (RawOf<VB>: uint4 / uint2 / uint32_t) to and from VB / 4 32-bit words.
template <int VB>
__device__ __forceinline__ void load_vector(uint32_t* w, const char* src) {
  const auto v = __ldg(reinterpret_cast<const typename ::baracuda::kern::RawOf<VB>::type*>(src));
  memcpy(w, &v, VB);
}

template <int VB>
__device__ __forceinline__ void store_vector(char* dst, const uint32_t* w) {
  typename ::baracuda::kern::RawOf<VB>::type v;
  memcpy(&v, w, VB);
  *reinterpret_cast<typename ::baracuda::kern::RawOf<VB>::type*>(dst) = v;
}

/// The register variant (no shared memory): each lane reads V input rows of one VB-byte vector,
/// transposes the V x V block in registers and writes V output rows of one vector. A warp's lanes
/// form 8 groups of kLaneGroup: a group shares its a-block and takes adjacent b-blocks, so every
/// store instruction writes 4 x VB contiguous bytes of 8 output rows, and every load reads 8 x VB
/// contiguous bytes of 4 input rows; each lane holds kBlocksPerLane blocks (stacked along b), and
/// a CTA is 2 x 2 warps. CTA tiles go b-fastest, so the CTAs in flight write long runs of each
/// output row. H200, [16384, 4096] (devx driver; bench/results/index-transpose-variants.md):
/// bf16 73.7 us against 80.1 for the shared-memory word tiles and 68.8 for a memcpy of the bytes;
/// f32 140.3 (153.7), u8 42.0 (61.8), f64 267.6 (285.2).
constexpr int kLaneGroup = 4;
constexpr int kBlocksPerLane = 2;
constexpr int kWarpsA = 2, kWarpsB = 2;
constexpr int kRegisterThreads = 32 * kWarpsA * kWarpsB;

template <int EB, int VB>
constexpr int64_t register_tile_a() {
  return int64_t{32 / kLaneGroup} * (VB / EB) * kWarpsA;
}
template <int EB, int VB>
constexpr int64_t register_tile_b() {
  return int64_t{kLaneGroup} * (VB / EB) * kBlocksPerLane * kWarpsB;
}

template <int EB, int VB>
__global__ void __launch_bounds__(kRegisterThreads) transpose_registers_kernel(const TransposeParams p) {
  constexpr int V = VB / EB;
  constexpr int64_t CA = register_tile_a<EB, VB>(), CB = register_tile_b<EB, VB>();
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  const int64_t na = p.size[p.in_inner], nb = p.size[p.out_inner];
  const int64_t tb = (nb + CB - 1) / CB;
  const int64_t sb_in = p.in_stride[p.out_inner] * EB, sa_out = p.out_stride[p.in_inner] * EB;  // bytes
  for (int64_t blk = blockIdx.x; blk < p.tiles * p.batch; blk += gridDim.x) {
    const int64_t b = blk / p.tiles, t = blk % p.tiles;
    int64_t rem = b, in_base = 0, out_base = 0;
#pragma unroll
    for (int d = kRank - 1; d >= 0; --d) {
      if (d >= p.rank || d == p.in_inner || d == p.out_inner) continue;
      const int64_t c = rem % p.size[d];
      rem /= p.size[d];
      in_base += c * p.in_stride[d];
      out_base += c * p.out_stride[d];
    }
    // Sizes are whole vectors (the host checks), so a block is either wholly inside or outside.
    const int64_t a = (t / tb) * CA + (warp % kWarpsA) * (CA / kWarpsA) + (lane / kLaneGroup) * V;
    const int64_t b0 = (t % tb) * CB + (warp / kWarpsA) * (CB / kWarpsB) + (lane % kLaneGroup) * V;
    if (a >= na) continue;
    RegisterBlock<EB, VB> r[kBlocksPerLane];
#pragma unroll
    for (int u = 0; u < kBlocksPerLane; ++u) {
      const int64_t bb = b0 + u * kLaneGroup * V;
      if (bb >= nb) continue;
      const char* src = p.in + (in_base + a + bb * p.in_stride[p.out_inner]) * EB;
#pragma unroll
      for (int i = 0; i < V; ++i) load_vector<VB>(r[u].w[i], src + i * sb_in);
    }
#pragma unroll
    for (int u = 0; u < kBlocksPerLane; ++u) {
      const int64_t bb = b0 + u * kLaneGroup * V;
      if (bb >= nb) continue;
      r[u].transpose();
      char* dst = p.out + (out_base + bb + a * p.out_stride[p.in_inner]) * EB;
#pragma unroll
      for (int j = 0; j < V; ++j) store_vector<VB>(dst + j * sa_out, r[u].w[j]);
    }
  }
}

template <int EB, class I>
cudaError_t plain_rows_with(const CopyBatch& b, cudaStream_t stream) {
  constexpr int64_t kSpan = 2 * kPlainRowThreads;
  int64_t gx = 1, gy = 1;
  for (int j = 0; j < b.count; ++j) {
    const int64_t n = b.job[j].d[b.job[j].rank - 1].out_size;
    gx = std::max(gx, (n + kSpan - 1) / kSpan);
    gy = std::max(gy, b.job[j].total / n);
  }
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(gx, int64_t{1} << 20)),
                  static_cast<unsigned>(std::min<int64_t>(gy, 65535)), static_cast<unsigned>(b.count));
  plain_rows_kernel<EB, I><<<grid, kPlainRowThreads, 0, stream>>>(b);
  return cudaGetLastError();
}

template <int EB, class I>
cudaError_t copy_with(const CopyParams& p, cudaStream_t stream) {
  if (plain_rows_ok(p)) {
    CopyBatch b;
    b.job[0] = p;
    b.count = 1;
    return plain_rows_with<EB, I>(b, stream);
  }
  const bool plain = plain_copy(p);
  const int64_t blocks = std::min<int64_t>((p.total + 1023) / 1024, int64_t{1} << 20);
  if (plain)
    mapped_copy_kernel<EB, I, true><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(p);
  else
    mapped_copy_kernel<EB, I, false><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(p);
  return cudaGetLastError();
}

/// The input's footprint in elements ([in, in + reach) holds every element it may read; 0 for
/// an empty input): the bound the row kernels' aligned word loads stay inside.
int64_t input_reach(const CopyParams& p) {
  int64_t reach = 1;
  for (int d = 0; d < p.rank; ++d) {
    if (p.d[d].in_size == 0) return 0;
    reach += (p.d[d].in_size - 1) * p.d[d].in_stride;
  }
  return reach;
}

void shift_window(const MapDim& m, int64_t* lo, int64_t* hi);

/// The fields every row-copy geometry (RowGeom, WordGeom, LongRowGeom) derives alike: the
/// pointers' element offsets past a 16-byte boundary, the inner dim's shift window and the
/// input's footprint.
template <int EB, class G>
void set_row_window(const CopyParams& p, G* r) {
  r->out_mis = static_cast<int>((reinterpret_cast<uintptr_t>(p.out) / EB) % (16 / EB));
  r->in_mis = static_cast<int>((reinterpret_cast<uintptr_t>(p.in) / EB) % (16 / EB));
  shift_window(p.d[p.rank - 1], &r->win_lo, &r->win_hi);
  r->in_reach = input_reach(p);
}

/// The inner dim's shift window: output coordinates o whose input coordinate is o - a (a
/// contiguous run of the input). Empty for the maps that are not a shift there.
void shift_window(const MapDim& m, int64_t* lo, int64_t* hi) {
  *lo = *hi = 0;
  switch (m.mode) {
    case kIdentity:
    case kRoll:
    case kReflect:
    case kReplicate:
    case kCircular:
      *lo = std::max<int64_t>(m.a, 0);
      *hi = std::max(*lo, std::min(m.a + m.in_size, m.out_size));
      break;
    default:
      break;
  }
}

// ---- pad's forward in aligned 16-byte words (the word variant) ----------------------------------
/// Why: the element kernels above move EB bytes an access (64 B a warp request for bf16): on long
/// rows they reached 24-53% of a 16-byte copy's speed on the same bytes (H200); a copy needs
/// 16-byte accesses. Pad's interior is shifted by the pad before, so an output word's sources straddle
/// two aligned input words whose offset within them varies row by row; here a thread stores one
/// ALIGNED 16-byte output word and reads the two aligned input words covering its interior
/// sources, then funnel-shifts them into place (no shared memory: the staged variant paid more
/// issue for its per-element scatter into shared memory than it saved).
///
/// Work: the output dims [gdim, rank) are dense (a segment, as RowGeom) and are cut into aligned
/// words, word j of a segment starting `m` elements before the segment's first element when the
/// segment is not 16-byte aligned. A warp takes a *task* of 32 * U consecutive words of one
/// segment (lane + 32 h: every store instruction of the warp writes 512 contiguous bytes) and:
///  1. decomposes the task's rows once (at most 32 of them: the host checks), lane k row r0 + k,
///     so a word finds its row's input offset by a shuffle and its column by a multiply-high
///     (no division and no outer-dim walk per word);
///  2. issues the loads of all U words before any store (2U 16-byte loads a lane in flight):
///     an interior word (one row, inside the shift window) reads the aligned input word(s) that
///     cover its sources; a word of a border row that maps outside the input (constant pad) or
///     wholly in a constant pad column stores the fill;
///  3. stores them, then moves the *edge* words (pad columns of reflect/replicate/circular,
///     words across a row end, a segment's partial end words, loads outside the input's
///     footprint) element by element, the lanes sharing the elements of the warp's edge words
///     (a 128-byte list a warp in shared memory).
///     Their sources lie next to the interior words' just loaded, so they mostly hit L1: the
///     edge pass costs issue, not a second DRAM latency.
/// Loads never leave the input's footprint [in, in + in_reach): an aligned pair reaching
/// outside it goes through the edge pass, which reads only mapped elements. Results are the
/// element kernels' bit for bit (pure byte moves; the same map, see WordGeom's lo/hi pieces).
struct WordGeom {
  int gdim = 0;
  int out_mis = 0, in_mis = 0;  ///< (address / element bytes) mod elements a word
  int fill_outside = 0;         ///< constant pad: columns outside the window take the fill
  uint32_t w_magic = 0;         ///< floor(2^32 / inner output size): columns by multiply-high
  int64_t seg_len = 0, rows_per_seg = 0, tasks_per_seg = 0, tasks = 0;
  int64_t win_lo = 0, win_hi = 0;  ///< the inner dim's shift window (output columns)
  int64_t in_reach = 0;            ///< the input's footprint in elements
  /// The inner dim's map as two linear pieces applied in turn (i = o - a; i < 0: i = lo_mul * i
  /// + lo_add; then i >= n: i = hi_mul * i + hi_add; then 0 <= i < n reads, else the fill): the
  /// pad modes without a division or a switch per element. Identical to map_coord for
  /// constant, reflect and replicate; circular when -n <= o - a < 2n (the host checks).
  int64_t lo_mul = 1, lo_add = 0, hi_mul = 1, hi_add = 0;
};
inline constexpr int kWordTask = 4;  ///< words a lane (U): 8 x 16 B loads in flight a lane

/// x / w for 0 <= x < 2^32 with magic = floor(2^32 / w), 2 <= w < 2^31: the multiply-high is low
/// by at most one (x * (2^32 / w - magic) < 2^32), one compare fixes it.
__device__ __forceinline__ uint32_t div_magic(uint32_t x, uint32_t w, uint32_t magic) {
  uint32_t q = __umulhi(x, magic);
  if (x - q * w >= w) ++q;
  return q;
}

/// What both pad row kernels (pad_words_kernel, pad_long_rows_kernel) read first: the fill as an
/// element and as a 16-byte word, the typed pointers, and the inner dim's output size, input
/// size and pad before.
template <int EB, class I>
struct PadInner {
  using W = typename Word<EB>::type;
  W fill;
  uint4 fill16;
  const W* in;
  W* out;
  I w, n, a;
};
template <int EB, class I>
__device__ __forceinline__ PadInner<EB, I> pad_inner(const CopyParams& p) {
  using W = typename Word<EB>::type;
  const W fill = fill_of<EB>(p);
  const MapDim& m = p.d[p.rank - 1];
  return {fill,
          fill_word<EB>(fill),
          reinterpret_cast<const W*>(p.in),
          reinterpret_cast<W*>(p.out),
          static_cast<I>(m.out_size),
          static_cast<I>(m.in_size),
          static_cast<I>(m.a)};
}

/// MinB: blocks an SM the registers must allow (4: 64 registers, 32 warps; a few bytes spill at
/// U = 4, in the per-task code).
template <int EB, class I, int U, int MinB = 4>
__global__ void __launch_bounds__(256, MinB) pad_words_kernel(const CopyParams p, const WordGeom g) {
  using W = typename Word<EB>::type;
  constexpr int V = 16 / EB;
  constexpr unsigned kAll = 0xffffffffu;
  const auto [fill, fill16, in, out, w_out, n_in, a_in] = pad_inner<EB, I>(p);
  const int inner = p.rank - 1;
  const I seg_len = static_cast<I>(g.seg_len), tps = static_cast<I>(g.tasks_per_seg);
  const I last_row = static_cast<I>(g.rows_per_seg) - 1;
  const I win_lo = static_cast<I>(g.win_lo), win_hi = static_cast<I>(g.win_hi);
  const I reach = static_cast<I>(g.in_reach);
  const int lane = threadIdx.x & 31;
  __shared__ unsigned char edge_lists[8][32 * U];  // 256 threads: 8 warps (see step 3)
  unsigned char* const edge_list = edge_lists[threadIdx.x / 32];
  const I warps = static_cast<I>(gridDim.x) * (blockDim.x / 32);
  for (I t = static_cast<I>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; t < static_cast<I>(g.tasks);
       t += warps) {
    // Per task (warp-uniform): the segment, the task's first row, lane k's row r0 + k.
    const I s = t / tps, tj = t - s * tps;
    const RowAt<I> seg = locate_dims<I>(p, 0, g.gdim, s);
    const I e_task = tj * (32 * U * V) - ((static_cast<I>(g.out_mis) + seg.out) & (V - 1));
    const I first = e_task < 0 ? I(0) : e_task;
    if (first >= seg_len) continue;  // the spare words past an aligned segment's end
    const I r0 = sizeof(I) == 4
                     ? static_cast<I>(div_magic(static_cast<uint32_t>(first), static_cast<uint32_t>(w_out), g.w_magic))
                     : first / w_out;
    const RowAt<I> mine = locate_dims<I>(p, g.gdim, inner, r0 + lane <= last_row ? r0 + lane : last_row);
    const I my_in = mine.in + seg.in;
    const unsigned ok_rows = __ballot_sync(kAll, mine.ok && seg.ok);
    const I row0 = r0 * w_out;  // the task's first row starts here (segment elements)
    W* const seg_out = out + seg.out;

    // Word h of this lane: elements [e0, e0 + V) of the segment, live [eb, ee); column c of eb in
    // task row rr (its column may pass the row end: the word then ends in row rr + 1).
    struct At {
      I e0, eb, ee, c;
      int rr;
    };
    auto at = [&](int ln, int h) {
      At x;
      x.e0 = e_task + static_cast<I>(ln + 32 * h) * V;
      x.eb = x.e0 < 0 ? I(0) : x.e0;
      x.ee = x.e0 + V < seg_len ? x.e0 + V : seg_len;
      const I rel = x.eb < x.ee ? x.eb - row0 : I(0);  // < 32 U V + w_out: fits the magic
      const I q = static_cast<I>(div_magic(static_cast<uint32_t>(rel), static_cast<uint32_t>(w_out), g.w_magic));
      x.c = rel - q * w_out;
      x.rr = static_cast<int>(q) & 31;  // live words: q <= 31 (host: at most 32 rows a task)
      return x;
    };

    // 1. Classify and issue every load before any store.
    uint4 lo[U], hi[U];
    unsigned shifts = 0;  // byte shift of word h in bits [8h, 8h + 8) (one register, not U)
    unsigned vec = 0, fillw = 0, edge = 0;
#pragma unroll
    for (int h = 0; h < U; ++h) {
      const At x = at(lane, h);
      const I in_a = __shfl_sync(kAll, my_in, x.rr);
      const bool ok_a = (ok_rows >> x.rr) & 1u;
      const bool one_row = x.e0 >= 0 && x.ee - x.e0 == V && x.c + V <= w_out;  // a full word, one row
      const bool inside = x.c >= win_lo && x.c + V <= win_hi;
      const I src = in_a + (x.c - a_in);
      const int mis = static_cast<int>((static_cast<I>(g.in_mis) + src) & (V - 1));
      const I al = src - mis;  // the aligned word at or before the first source
      const bool v = one_row && ok_a && inside && al >= 0 && al + (mis ? 2 * V : V) <= reach;
      const bool f = one_row && (!ok_a || (g.fill_outside && (x.c + V <= win_lo || x.c >= win_hi)));
      lo[h] = hi[h] = make_uint4(0, 0, 0, 0);
      shifts |= static_cast<unsigned>(mis * EB) << (8 * h);
      // Plain loads, not the non-coherent __ldg: ptxas may sink .nc loads past the stores below
      // (it did, to save registers, leaving half of them behind the first store and paying the
      // DRAM latency twice); ordinary loads keep their place before the stores.
      if (v) lo[h] = *reinterpret_cast<const uint4*>(in + al);
      if (v && mis) hi[h] = *(reinterpret_cast<const uint4*>(in + al) + 1);
      vec |= unsigned(v) << h;
      fillw |= unsigned(f) << h;
      edge |= unsigned(x.eb < x.ee && !v && !f) << h;
    }
    // 2. The vector and fill words.
#pragma unroll
    for (int h = 0; h < U; ++h) {
      uint4* dst = reinterpret_cast<uint4*>(seg_out + (e_task + static_cast<I>(lane + 32 * h) * V));
      if ((vec >> h) & 1u) *dst = funnel16(lo[h], hi[h], (shifts >> (8 * h)) & 0xff);
      if ((fillw >> h) & 1u) *dst = fill16;
    }
    // 3. The edge words, element by element, the warp's lanes sharing them: the warp lists its
    //    edge words (h and owner lane, in a per-warp shared array) and deals their elements out a
    //    lane each, so a pass moves 32 elements however few lanes own one (the bench's 130-element
    //    rows: ~10 edge words a task, 3 passes). A lane walking its own words' V elements took U
    //    passes of ~270 instructions, as much as the rest of the task together. Their sources lie
    //    beside the interior words' just loaded, so the loads mostly hit L1.
    __syncwarp();  // the previous task's readers of the list are done
    int n_edge = 0;
#pragma unroll
    for (int h = 0; h < U; ++h) {
      const unsigned owners = __ballot_sync(kAll, (edge >> h) & 1u);
      if ((edge >> h) & 1u)
        edge_list[n_edge + __popc(owners & ((1u << lane) - 1))] = static_cast<unsigned char>(h << 5 | lane);
      n_edge += __popc(owners);
    }
    __syncwarp();
    const I lo_mul = static_cast<I>(g.lo_mul), lo_add = static_cast<I>(g.lo_add);
    const I hi_mul = static_cast<I>(g.hi_mul), hi_add = static_cast<I>(g.hi_add);
    for (int i0 = 0; i0 < n_edge * V; i0 += 32) {  // warp-uniform
      const int idx = i0 + lane;
      const bool act = idx < n_edge * V;
      const int word = act ? edge_list[idx / V] : lane;  // h << 5 | owner lane
      const int k = idx & (V - 1);
      const At x = at(word & 31, word >> 5);
      const I in_a = __shfl_sync(kAll, my_in, x.rr);
      const I in_b = __shfl_sync(kAll, my_in, (x.rr + 1) & 31);
      const I e = x.e0 + k;
      if (!act || e < x.eb || e >= x.ee) continue;
      I col = x.c + (e - x.eb);
      const bool second = col >= w_out;  // the next row (w_out >= V: at most one row end)
      if (second) col -= w_out;
      I i = col - a_in;
      if (i < 0) i = i * lo_mul + lo_add;
      if (i >= n_in) i = i * hi_mul + hi_add;
      W v = fill;
      if (((ok_rows >> ((x.rr + second) & 31)) & 1u) && i >= 0 && i < n_in)
        v = __ldg(in + ((second ? in_b : in_a) + i));
      seg_out[e] = v;
    }
  }
}

/// The word variant's geometry, or false where it does not apply: the inner input dim must be
/// unit-stride (the aligned loads read a contiguous row), the inner map a pad mode (circular only
/// within one period each side), and a task of 32 * U words may touch at most 32 rows (rows of
/// at least ~32 U V / 31 elements: 34 for bf16 at U = 4); anything else keeps the kernels above.
template <int EB, int U>
bool pad_words_geom(const CopyParams& p, WordGeom* g) {
  constexpr int V = 16 / EB;
  const int inner = p.rank - 1;
  const MapDim& m = p.d[inner];
  const int64_t n = m.in_size, w = m.out_size, a = m.a;
  if (m.in_stride != 1 || m.out_stride != 1 || w < V || w >= (int64_t{1} << 30)) return false;
  // Output rows of at least 512 bytes. H200, us, element kernels -> this one (U = 4): rows of
  // 8190 B (bf16 [8192, 4095] pad (1, 2)) 74.4 -> 47.4, of 4097 B (u8) 88.1 -> 27.5, f32 129.8 ->
  // 85.9; 1004 B (u8 [4096, 1000]) 17.4 -> 9.5; 528 B (bf16 [64, 1024, 257] pad (0, 7)) 32.1 ->
  // 28.9; [16, 64, 256, 256] bf16 (516 B) 123.8 -> 104.1. Shorter rows lose: 260 B (the bench's
  // [16, 64, 128, 128] bf16) 30.5 -> 33.2, 232 B (f32 [8, 256, 56, 56]) 20.4 -> 27.0, 84-132 B
  // rows 9-15% slower: a task then spans many rows and the edge pass grows with them.
  if (w * EB < 512) return false;
  if ((32 * U * V - 1 + w - 1) / w + 1 > 32) return false;
  WordGeom r;
  switch (m.mode) {
    case kIdentity:
      r.fill_outside = 1;
      break;
    case kReflect:
      r.lo_mul = -1;
      r.hi_mul = -1;
      r.hi_add = 2 * (n - 1);
      break;
    case kReplicate:
      r.lo_mul = r.hi_mul = 0;
      r.hi_add = n - 1;
      break;
    case kCircular:
      if (n < 1 || a > n || w - a > 2 * n) return false;
      r.lo_add = n;
      r.hi_add = -n;
      break;
    default:
      return false;
  }
  int64_t seg = w;
  r.gdim = inner;
  while (r.gdim > 0 && p.d[r.gdim - 1].out_stride == seg) seg *= p.d[--r.gdim].out_size;
  int64_t n_seg = 1;
  for (int d = 0; d < r.gdim; ++d) n_seg *= p.d[d].out_size;
  r.seg_len = seg;
  r.rows_per_seg = seg / w;
  const int64_t words = (seg + 2 * V - 2) / V;  // a head of up to V - 1 elements before the first boundary
  r.tasks_per_seg = (words + 32 * U - 1) / (32 * U);
  r.tasks = n_seg * r.tasks_per_seg;
  r.w_magic = static_cast<uint32_t>((uint64_t{1} << 32) / static_cast<uint64_t>(w));
  set_row_window<EB>(p, &r);
  *g = r;
  return true;
}

template <int EB, int U, int MinB = 4>
cudaError_t pad_words_launch(const CopyParams& p, const WordGeom& g, bool i64, cudaStream_t stream) {
  // 32-bit arithmetic also needs the task counter and the segment's element offsets (up to a
  // task past its end) to stay below 2^31.
  if (g.tasks + (int64_t{1} << 28) >= (int64_t{1} << 31) || g.seg_len + 2 * 32 * U * (16 / EB) >= (int64_t{1} << 31))
    i64 = true;
  const unsigned blocks = grid_for(g.tasks, 1, 8);  // 8 warps (tasks) a block
  if (i64)
    pad_words_kernel<EB, int64_t, U, MinB><<<blocks, 256, 0, stream>>>(p, g);
  else
    pad_words_kernel<EB, int32_t, U, MinB><<<blocks, 256, 0, stream>>>(p, g);
  return cudaGetLastError();
}

// ---- pad's forward on long rows: a warp task never leaves its row ------------------------------
/// Why: on rows of 4 KB and more, pad_words_kernel's per-word work (the row and column of every
/// word by a multiply-high and a shuffle, tasks that may cross rows) made it issue-bound (H200
/// ncu, bf16 [8192, 4095] pad (1, 2): 59% of issue slots busy, 42% achieved occupancy, 2.3 TB/s).
/// Here a warp task is 32 x kLongRowTask aligned 16-byte words of ONE row (lane + 32 h, so every
/// store instruction writes 512 contiguous bytes), so the row's input and output offsets are
/// found once a task and a word's column is a multiply-add. Interior words read the aligned input
/// word(s) covering their sources and funnel-shift them (all loads issued before the first store),
/// words outside the input of a constant pad store the fill; the rest (pad columns of the other
/// modes, words at the shift window's edges) and the row's unaligned head and tail elements map
/// element by element. H200 standalone (devx driver), bf16 [8192, 4095] pad (1, 2): constant
/// 48.6 -> 41.1 us, reflect 46.9 -> 40.5 (a memcpy of the input's bytes: 37.6); it loses below
/// ~4 KB rows (2040 B: 92.4 -> 95.4; 512 B: 54.9 -> 60.6 even with tasks of 8 lanes), which keep
/// pad_words_kernel.
struct LongRowGeom {
  int64_t rows = 0, tasks_per_row = 0;
  int out_mis = 0, in_mis = 0;  ///< (address / element bytes) mod elements a word
  int fill_outside = 0;         ///< constant pad: columns outside the window take the fill
  int64_t win_lo = 0, win_hi = 0;  ///< the inner dim's shift window (output columns)
  int64_t in_reach = 0;            ///< the input's footprint in elements
};
inline constexpr int kLongRowTask = 4;           ///< words a lane
inline constexpr int64_t kLongRowBytes = 4096;  ///< output rows at least this long

template <int EB>
bool pad_long_rows_geom(const CopyParams& p, LongRowGeom* g) {
  constexpr int V = 16 / EB;
  const int inner = p.rank - 1;
  const MapDim& m = p.d[inner];
  if (m.in_stride != 1 || m.out_stride != 1 || m.out_size * EB < kLongRowBytes) return false;
  if (m.mode != kIdentity && m.mode != kReflect && m.mode != kReplicate && m.mode != kCircular) return false;
  LongRowGeom r;
  r.rows = p.total / m.out_size;
  r.tasks_per_row = (m.out_size / V + 32 * kLongRowTask - 1) / (32 * kLongRowTask);
  r.fill_outside = m.mode == kIdentity;
  set_row_window<EB>(p, &r);
  *g = r;
  return true;
}

template <int EB, class I>
__global__ void __launch_bounds__(256, 4) pad_long_rows_kernel(const CopyParams p, const LongRowGeom g) {
  using W = typename Word<EB>::type;
  constexpr int V = 16 / EB, U = kLongRowTask;
  const auto [fill, fill16, in, out, w, n, a] = pad_inner<EB, I>(p);
  const int inner = p.rank - 1;
  const int mode = p.d[inner].mode;
  const I win_lo = static_cast<I>(g.win_lo), win_hi = static_cast<I>(g.win_hi), reach = static_cast<I>(g.in_reach);
  const I tpr = static_cast<I>(g.tasks_per_row), tasks = static_cast<I>(g.rows) * tpr;
  const int lane = threadIdx.x & 31;
  const I warps = static_cast<I>(gridDim.x) * 8;
  for (I t = static_cast<I>(blockIdx.x) * 8 + threadIdx.x / 32; t < tasks; t += warps) {
    const I row = t / tpr, chunk = t - row * tpr;
    const RowAt<I> ra = locate_dims<I>(p, 0, inner, row);
    // The row's first aligned word starts `head` elements in; `body` whole words follow.
    const int head = static_cast<int>((V - ((static_cast<I>(g.out_mis) + ra.out) & (V - 1))) & (V - 1));
    const I body = (w - head) / V;
    W* const orow = out + ra.out;
    const I k0 = chunk * (32 * U) + lane;  // word k0 + 32 h of the body: columns [head + V k, + V)
    uint4 lo[U], hi[U];
    unsigned vec = 0, fillw = 0, edge = 0, shifts = 0;  // shifts: byte shift of word h in bits [8h, 8h + 8)
#pragma unroll
    for (int h = 0; h < U; ++h) {
      const I c = head + V * (k0 + 32 * h);
      const I src = ra.in + c - a;
      const int mis = static_cast<int>((static_cast<I>(g.in_mis) + src) & (V - 1));
      const I al = src - mis;  // the aligned word at or before the first source
      const bool live = k0 + 32 * h < body;
      const bool v = live && ra.ok && c >= win_lo && c + V <= win_hi && al >= 0 && al + (mis ? 2 * V : V) <= reach;
      const bool f = live && (!ra.ok || (g.fill_outside && (c + V <= win_lo || c >= win_hi)));
      lo[h] = hi[h] = make_uint4(0, 0, 0, 0);
      shifts |= static_cast<unsigned>(mis * EB) << (8 * h);
      // Plain loads (see pad_words_kernel: .nc loads may be sunk past the stores).
      if (v) lo[h] = *reinterpret_cast<const uint4*>(in + al);
      if (v && mis) hi[h] = *(reinterpret_cast<const uint4*>(in + al) + 1);
      vec |= unsigned(v) << h;
      fillw |= unsigned(f) << h;
      edge |= unsigned(live && !v && !f) << h;
    }
#pragma unroll
    for (int h = 0; h < U; ++h) {
      uint4* dst = reinterpret_cast<uint4*>(orow + head + V * (k0 + 32 * h));
      if ((vec >> h) & 1u) *dst = funnel16(lo[h], hi[h], (shifts >> (8 * h)) & 0xff);
      if ((fillw >> h) & 1u) *dst = fill16;
    }
    // Element by element: this lane's edge words, the row's head (first task) and tail (last).
    auto element = [&](I c) {
      W val = fill;
      if (ra.ok) {
        const I i = map_coord<I>(mode, c, n, a);
        if (i >= 0 && i < n) val = __ldg(in + ra.in + i);
      }
      orow[c] = val;
    };
#pragma unroll
    for (int h = 0; h < U; ++h)
      if ((edge >> h) & 1u)
        for (int e = 0; e < V; ++e) element(head + V * (k0 + 32 * h) + e);
    if (chunk == 0 && lane < head) element(lane);
    if (chunk == tpr - 1 && head + body * V + lane < w) element(head + body * V + lane);
  }
}

/// words: the word variant where it applies (pad_words_geom); false keeps the element kernels
/// (the standalone comparison driver runs both).
template <int EB>
cudaError_t row_copy_with(const CopyParams& p, bool i64, cudaStream_t stream, bool words = true) {
  constexpr int V = 16 / EB;
  if (LongRowGeom g; words && pad_long_rows_geom<EB>(p, &g)) {
    // 32-bit arithmetic also needs the task counter past one grid stride below 2^31.
    if (g.rows * g.tasks_per_row + (int64_t{1} << 28) >= (int64_t{1} << 31)) i64 = true;
    const unsigned blocks = grid_for(g.rows * g.tasks_per_row, 1, 8);  // 8 warps (tasks) a block
    if (i64)
      pad_long_rows_kernel<EB, int64_t><<<blocks, 256, 0, stream>>>(p, g);
    else
      pad_long_rows_kernel<EB, int32_t><<<blocks, 256, 0, stream>>>(p, g);
    return cudaGetLastError();
  }
  if (WordGeom g; words && pad_words_geom<EB, kWordTask>(p, &g))
    return pad_words_launch<EB, kWordTask>(p, g, i64, stream);
  RowGeom r;
  const int inner = p.rank - 1;
  int64_t seg = p.d[inner].out_size;
  r.gdim = inner;
  while (r.gdim > 0 && p.d[r.gdim - 1].out_stride == seg) seg *= p.d[--r.gdim].out_size;
  int64_t n_seg = 1;
  for (int d = 0; d < r.gdim; ++d) n_seg *= p.d[d].out_size;
  r.seg_len = seg;
  r.chunks_per_seg = (seg + 2 * V - 2) / V;  // a head of up to V - 1 elements before the first boundary
  r.chunks = n_seg * r.chunks_per_seg;
  r.fast_in = p.d[inner].in_stride == 1;
  set_row_window<EB>(p, &r);
  if (p.d[inner].out_size * EB <= kWarpRowMax) {  // short rows: a warp a task of rows
    const int64_t w_out = p.d[inner].out_size, rows = p.total / w_out;
    const int task_rows = warp_row_task_rows(rows, kRowBatch<EB>);
    const unsigned blocks = grid_for((rows + task_rows - 1) / task_rows, 1, 8);  // 8 warps (tasks) a block
    const size_t table = static_cast<size_t>((w_out + 31) & ~int64_t{31});       // src_of entries
    if (i64)
      warp_row_copy_kernel<EB, int64_t><<<blocks, 256, table * sizeof(int64_t), stream>>>(p, task_rows);
    else
      warp_row_copy_kernel<EB, int32_t><<<blocks, 256, table * sizeof(int32_t), stream>>>(p, task_rows);
    return cudaGetLastError();
  }
  // 32-bit arithmetic also needs the chunk counter to stay below 2^31 past one grid stride.
  if (r.chunks + (int64_t{1} << 28) >= (int64_t{1} << 31)) i64 = true;
  const unsigned blocks = grid_for(r.chunks, 1, 256);
  if (i64)
    row_copy_kernel<EB, int64_t><<<blocks, 256, 0, stream>>>(p, r);
  else
    row_copy_kernel<EB, int32_t><<<blocks, 256, 0, stream>>>(p, r);
  return cudaGetLastError();
}

}  // namespace

bool row_copy_ok(const CopyParams& p, int elem_bytes) {
  if (elem_bytes >= 16 || p.in == nullptr || p.tri_row >= 0 || p.rank < 1) return false;
  const MapDim& m = p.d[p.rank - 1];
  if (m.out_stride != 1 || m.out_size < 16 / elem_bytes) return false;
  return reinterpret_cast<uintptr_t>(p.out) % elem_bytes == 0 && reinterpret_cast<uintptr_t>(p.in) % elem_bytes == 0;
}

namespace {
/// f(std::integral_constant<int, EB>{}) for the row kernels' element sizes (1, 2, 4, 8); `other`
/// for any other size.
template <class R, class F>
R with_row_bytes(int elem_bytes, R other, F&& f) {
  switch (elem_bytes) {
    case 1:
      return f(std::integral_constant<int, 1>{});
    case 2:
      return f(std::integral_constant<int, 2>{});
    case 4:
      return f(std::integral_constant<int, 4>{});
    case 8:
      return f(std::integral_constant<int, 8>{});
    default:
      return other;
  }
}
}  // namespace

bool row_copy_words(const CopyParams& p, int elem_bytes) {
  return with_row_bytes(elem_bytes, false, [&](auto eb) {
    WordGeom g;
    return pad_words_geom<decltype(eb)::value, kWordTask>(p, &g);
  });
}

bool row_copy_long_rows(const CopyParams& p, int elem_bytes) {
  return with_row_bytes(elem_bytes, false, [&](auto eb) {
    LongRowGeom g;
    return pad_long_rows_geom<decltype(eb)::value>(p, &g);
  });
}

cudaError_t launch_row_copy(const CopyParams& p, int elem_bytes, bool i64, cudaStream_t stream) {
  if (p.total == 0) return cudaSuccess;
  if (!row_copy_ok(p, elem_bytes)) return cudaErrorInvalidValue;
  return with_row_bytes(elem_bytes, cudaErrorInvalidValue,
                        [&](auto eb) { return row_copy_with<decltype(eb)::value>(p, i64, stream); });
}

bool plain_copy(const CopyParams& p) {
  bool plain = p.in != nullptr && p.tri_row < 0;
  for (int d = 0; d < p.rank && plain; ++d)
    plain = p.d[d].mode == kIdentity && p.d[d].a == 0 && p.d[d].in_size == p.d[d].out_size;
  return plain;
}

bool plain_rows_ok(const CopyParams& p) {
  // A whole block's span of words a row (or one flat run), so few threads idle at the row ends.
  if (!plain_copy(p) || p.rank < 1 || p.total == 0) return false;
  const MapDim& m = p.d[p.rank - 1];
  return m.out_stride == 1 && m.in_stride == 1 && (p.rank == 1 || m.out_size >= 2 * kPlainRowThreads);
}

cudaError_t launch_plain_rows(const CopyBatch& b, int elem_bytes, bool i64, cudaStream_t stream) {
  if (b.count < 1 || b.count > kCopyBatch) return cudaErrorInvalidValue;
  for (int j = 0; j < b.count; ++j)
    if (!plain_rows_ok(b.job[j])) return cudaErrorInvalidValue;
  return by_bytes(elem_bytes, [&]<int EB>() {
    return i64 ? plain_rows_with<EB, int64_t>(b, stream) : plain_rows_with<EB, int32_t>(b, stream);
  });
}

cudaError_t launch_copy(const CopyParams& p, int elem_bytes, bool i64, cudaStream_t stream) {
  if (p.total == 0) return cudaSuccess;
  return by_bytes(elem_bytes, [&]<int EB>() {
    return i64 ? copy_with<EB, int64_t>(p, stream) : copy_with<EB, int32_t>(p, stream);
  });
}

int transpose_words_bytes(const TransposeParams& p, int elem_bytes) {
  // The widest vector of at least two elements that the inner sizes, the other dims' strides and
  // both pointers allow (16 bytes for the common cases; narrower ones for sizes that are not
  // whole 16-byte vectors). 16-byte elements stay on the element tiles.
  for (int vb = 16; vb >= 4 && vb >= 2 * elem_bytes; vb /= 2) {
    const int v = vb / elem_bytes;
    bool ok = p.size[p.in_inner] % v == 0 && p.size[p.out_inner] % v == 0 &&
              reinterpret_cast<uintptr_t>(p.in) % vb == 0 && reinterpret_cast<uintptr_t>(p.out) % vb == 0;
    for (int d = 0; d < p.rank && ok; ++d)
      ok = (d == p.in_inner || p.in_stride[d] % v == 0) && (d == p.out_inner || p.out_stride[d] % v == 0);
    if (ok) return vb;
  }
  return 0;
}

namespace {
template <int EB, int VB>
cudaError_t launch_transpose_registers(TransposeParams p, cudaStream_t stream) {
  constexpr int64_t CA = register_tile_a<EB, VB>(), CB = register_tile_b<EB, VB>();
  p.tiles = ((p.size[p.in_inner] + CA - 1) / CA) * ((p.size[p.out_inner] + CB - 1) / CB);
  const int64_t n = p.tiles * p.batch;
  if (n == 0) return cudaSuccess;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(n, int64_t{1} << 20));
  transpose_registers_kernel<EB, VB><<<blocks, kRegisterThreads, 0, stream>>>(p);
  return cudaGetLastError();
}
}  // namespace

cudaError_t launch_transpose(const TransposeParams& params, int elem_bytes, cudaStream_t stream) {
  TransposeParams p = params;
  return by_bytes(elem_bytes, [&]<int EB>() -> cudaError_t {
    if constexpr (EB <= 8) {
      if (p.words == 16) return launch_transpose_registers<EB, 16>(p, stream);
      if constexpr (EB <= 4)
        if (p.words == 8) return launch_transpose_registers<EB, 8>(p, stream);
      if constexpr (EB <= 2)
        if (p.words == 4) return launch_transpose_registers<EB, 4>(p, stream);
    }
    if (p.words) return cudaErrorInvalidValue;
    const int64_t na = p.size[p.in_inner], nb = p.size[p.out_inner];
    p.tiles = ((na + kTileDim - 1) / kTileDim) * ((nb + kTileDim - 1) / kTileDim);
    const int64_t n = p.tiles * p.batch;
    if (n == 0) return cudaSuccess;
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(n, int64_t{1} << 20));
    transpose_kernel<EB><<<blocks, dim3(kTileDim, kTileRows), 0, stream>>>(p);
    return cudaGetLastError();
  });
}

void fill_bits(DType dt, double v, unsigned char out[16]) {
  std::memset(out, 0, 16);
  auto put = [&](auto x) { std::memcpy(out, &x, sizeof(x)); };
  switch (dt) {
    case DType::f64:
      put(v);
      break;
    case DType::f32:
      put(static_cast<float>(v));
      break;
    case DType::f16:
      put(__float2half_rn(static_cast<float>(v)));
      break;  // through f32, as torch
    case DType::bf16:
      put(__float2bfloat16_rn(static_cast<float>(v)));
      break;
    case DType::f8e4m3:
      put(__nv_cvt_float_to_fp8(static_cast<float>(v), __NV_NOSAT, __NV_E4M3));
      break;
    case DType::f8e5m2:
      put(__nv_cvt_float_to_fp8(static_cast<float>(v), __NV_NOSAT, __NV_E5M2));
      break;
    case DType::s8:
      put(static_cast<int8_t>(static_cast<int64_t>(v)));
      break;
    case DType::u8:
      put(static_cast<uint8_t>(static_cast<int64_t>(v)));
      break;
    case DType::s16:
      put(static_cast<int16_t>(static_cast<int64_t>(v)));
      break;
    case DType::s32:
      put(static_cast<int32_t>(static_cast<int64_t>(v)));
      break;
    case DType::s64:
      put(static_cast<int64_t>(v));
      break;
    case DType::u32:
      put(static_cast<uint32_t>(static_cast<int64_t>(v)));
      break;
    case DType::b8:
      put(static_cast<uint8_t>(v != 0));
      break;
    case DType::c64:
      put(static_cast<float>(v));
      break;  // real part; imaginary stays 0
    case DType::c128:
      put(v);
      break;
    default:
      break;
  }
}

}  // namespace baracuda::detail::idx
