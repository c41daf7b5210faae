// Host <-> kernel interface of the indexing family: plain parameter structs (no CUDA types
// beyond cuda_runtime_api.h) filled by plan.cpp and launched by the .cu files of src/ops/index.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "baracuda/core/dtype.hpp"

namespace baracuda {
struct IndexDesc;
}

namespace baracuda::detail::idx {

inline constexpr int kRank = 8;

// ---- mapped copy ---------------------------------------------------------------------------------
/// How an output coordinate o of one dim becomes an input coordinate i (then i * in_stride).
/// Coordinates that land outside [0, in_size) take the fill value.
enum MapMode : int32_t {
  kIdentity = 0,  ///< i = o - a (a = pad before; slices and constant pads)
  kFlip,          ///< i = in_size - 1 - o
  kRoll,          ///< i = (o - a) mod in_size, a in [0, in_size)
  kReflect,       ///< i = |o - a| mirrored at both ends without repeating the edge
  kReplicate,     ///< i = clamp(o - a, 0, in_size - 1)
  kCircular,      ///< i = (o - a) mod in_size
  kTile,          ///< i = o mod in_size
  kRepeat,        ///< i = o / a (repeat_interleave, a >= 1)
};

struct MapDim {
  int64_t out_size = 1;
  int64_t out_stride = 0;
  int64_t in_size = 1;
  int64_t in_stride = 0;
  int64_t a = 0;
  int32_t mode = kIdentity;
};

struct CopyParams {
  int rank = 0;
  MapDim d[kRank];
  char* out = nullptr;
  const char* in = nullptr;  ///< null: every element takes the fill value
  int64_t total = 0;         ///< output elements
  int tri_row = -1;          ///< triu/tril: the row and column dims (after reordering), or -1
  int tri_col = -1;
  int64_t tri_k = 0;
  int tri_upper = 0;  ///< 1: keep col - row >= k (triu); 0: keep col - row <= k (tril)
  alignas(16) unsigned char fill[16] = {};
};

/// Every dim the identity map (no pad, flip, roll, repeat, fill or triangle): a strided copy.
bool plain_copy(const CopyParams& p);
/// launch_copy's row kernel for plain copies whose innermost dim is unit-stride on both sides and
/// at least 512 elements long (or the only dim): the outer coordinates decomposed once a row.
/// Host-only (shapes and strides).
bool plain_rows_ok(const CopyParams& p);
/// Up to kCopyBatch plain row copies of one element size and index width in one launch (cat /
/// stack: the inputs share a grid and its tail). Each job must pass plain_rows_ok.
inline constexpr int kCopyBatch = 4;
struct CopyBatch {
  CopyParams job[kCopyBatch];
  int count = 0;
};
cudaError_t launch_plain_rows(const CopyBatch& b, int elem_bytes, bool i64, cudaStream_t stream);
/// Element sizes 1, 2, 4, 8, 16 bytes; i64 selects 64-bit index arithmetic.
cudaError_t launch_copy(const CopyParams& p, int elem_bytes, bool i64, cudaStream_t stream);

/// The row variant of the mapped copy (pad's forward): one thread per 16-byte-aligned chunk of
/// 16 / elem_bytes output elements along the unit-stride innermost output dim. The outer dims are
/// decomposed once per chunk (not per element); a chunk inside one row whose source is a shifted
/// contiguous run (the interior of a pad) is read with 16-byte loads (two, funnel-shifted, when
/// the source is not aligned) and written with one 16-byte store; chunks at the pad edges map
/// element by element. Applies when the innermost output dim has stride 1 and at least
/// 16 / elem_bytes elements, elem_bytes < 16, the pointers are element-aligned and there is no
/// triangle (row_copy_ok).
bool row_copy_ok(const CopyParams& p, int elem_bytes);
/// Whether launch_row_copy takes the word variant (pad_words_kernel: aligned 16-byte output words,
/// funnel-shifted from aligned input words; pad modes along a unit-stride last dim with output
/// rows of at least 512 bytes). Host-only: it only reads shapes, strides and modes.
bool row_copy_words(const CopyParams& p, int elem_bytes);
/// Whether launch_row_copy takes the long-row variant (pad_long_rows_kernel: warp tasks inside one
/// output row of at least 4 KB; checked before the word variant). Host-only.
bool row_copy_long_rows(const CopyParams& p, int elem_bytes);
/// i64: 64-bit index arithmetic (the launcher also switches to it when the chunk count needs it).
cudaError_t launch_row_copy(const CopyParams& p, int elem_bytes, bool i64, cudaStream_t stream);

/// A pure permutation copy whose innermost output dim is not the input's unit-stride dim, over
/// dims (in_inner, out_inner), the rest as batch: blocks of V x V elements transposed in registers
/// when whole vectors fit (see `words`), 32 x 32 element tiles through shared memory otherwise.
struct TransposeParams {
  int rank = 0;
  int64_t size[kRank] = {};
  int64_t in_stride[kRank] = {};
  int64_t out_stride[kRank] = {};
  int in_inner = 0;   ///< dim with in_stride 1
  int out_inner = 0;  ///< dim with out_stride 1
  char* out = nullptr;
  const char* in = nullptr;
  int64_t tiles = 0;  ///< tiles per batch entry (set by launch_transpose)
  int64_t batch = 1;
  /// Vector bytes VB of the register variant (0: element tiles): 16, or 8 / 4 where the sizes
  /// allow no wider, with V = VB / elem_bytes >= 2 elements. Set by the host when both inner sizes
  /// are multiples of V, every other dim's strides too, and both pointers are VB-aligned.
  int words = 0;
};
/// The vector bytes of the register variant for these tensors, or 0 when it does not apply
/// (see TransposeParams::words).
int transpose_words_bytes(const TransposeParams& p, int elem_bytes);
cudaError_t launch_transpose(const TransposeParams& p, int elem_bytes, cudaStream_t stream);

/// The fill bytes of `value` converted to `dt` with torch's rules (host side).
void fill_bits(DType dt, double value, unsigned char out[16]);

// ---- pad backward -------------------------------------------------------------------------------
struct PadBwParams {
  int rank = 0;
  int64_t in_size[kRank] = {};  ///< grad_input (= forward input) shape
  int64_t gin_stride[kRank] = {};
  int64_t out_size[kRank] = {};  ///< grad_output (= padded) shape
  int64_t dy_stride[kRank] = {};
  int64_t before[kRank] = {};
  int mode = 0;  ///< PadMode
  void* gin = nullptr;
  const void* dy = nullptr;
  int64_t total = 0;
};
cudaError_t launch_pad_backward(const PadBwParams& p, DType dt, cudaStream_t stream);

// ---- gather / scatter geometry --------------------------------------------------------------------
/// Slice l (l < L, decomposed over the index dims) and element p of a slice (p < P, decomposed
/// over the slice dims). Side A is addressed by position (gather's output, scatter's source),
/// side B by the index (gather's source, scatter's output):
///   idx   = index[sum c_i * index_stride_i]
///   A off = sum c_i * a_istride_i + sum s_j * a_sstride_j
///   B off = idx * kstride + sum c_i * b_istride_i + sum s_j * b_sstride_j
struct Geom {
  int ri = 0;
  int64_t isize[kRank] = {};
  int64_t index_stride[kRank] = {};
  int64_t a_istride[kRank] = {};
  int64_t b_istride[kRank] = {};
  int rs = 0;
  int64_t ssize[kRank] = {};
  int64_t a_sstride[kRank] = {};
  int64_t b_sstride[kRank] = {};
  int64_t kstride = 0;
  int64_t ksize = 0;  ///< valid index values: [0, ksize)
  int64_t L = 0, P = 1;
  int64_t skip = -1;  ///< an index value whose slice is skipped (embedding padding_idx)
  int report = 1;     ///< 1: out-of-range indices set *error; 0: silently dropped (segment ops)
  const void* index = nullptr;
  int* error = nullptr;  ///< may be null
};

/// out (A) <- src (B); out-of-range slices are written with zero bytes.
cudaError_t launch_gather(const Geom& g, char* out, const char* src, int elem_bytes, DType index_dtype, bool i64,
                          cudaStream_t stream);

/// Row gather (embedding, index_select of rows): one slice dim of at least 32 words. A warp
/// per (slice, 32 x 4 words): the index is read once per warp (one broadcast load), each lane
/// keeps 4 words in flight; 64-bit offsets (computed once per row, not per word).
bool gather_rows_ok(const Geom& g);
cudaError_t launch_gather_rows(const Geom& g, char* out, const char* src, int elem_bytes, DType index_dtype,
                               cudaStream_t stream);

/// Staged gather (torch.gather along `dim` where the source's dim is unit-stride): a CTA copies
/// one source line (the src_len elements along dim) into shared memory with 16-byte loads, then
/// each thread reads 16 / elem_bytes consecutive indices with wide loads, gathers from shared
/// memory and writes one 16-byte word. Pays when the line is short enough for shared memory and
/// the index reads a large part of it (a random 2-byte gather from global memory costs a 32-byte
/// sector). [src, src_end) bounds the source's footprint: aligned 16-byte blocks outside it are
/// read element by element.
bool gather_staged_ok(const Geom& g, int dim, int elem_bytes);
cudaError_t launch_gather_staged(const Geom& g, int dim, char* out, const char* src, const char* src_end,
                                 int elem_bytes, DType index_dtype, cudaStream_t stream);

/// The scatter engine's reductions.
///  - sum, prod: atomicAdd / a compare-and-swap multiply (or the sorted path);
///  - max, min: on plain storage (the output starts from reduce_identity_bits or a copy of
///    self): a thread first reads the destination and stops when it already wins (or is NaN,
///    which always wins), else f32 / f64 issue int atomicMax for a non-negative value and
///    unsigned atomicMin for a negative one (min: mirrored), which order float bit patterns
///    like numbers (NaN canonical and winning, +0 above -0); f16 / bf16 compare-and-swap;
///    integers their own atomic;
///  - mean: the sorted path only (the run length is the count).
enum class Reduce : int { sum, max, min, prod, mean };
/// The bits `out` starts from before launch_scatter_atomic reduces into it: the identity (0, 1,
/// -inf / +inf, the integer extremes).
void reduce_identity_bits(DType dt, Reduce r, unsigned char out[16]);
/// out (B) op= src (A) with atomics. Row mode with one slice dim of at least 8 elements (segment
/// ops, index_add) takes the row kernel: groups of 8 / 16 / 32 lanes walk a block of consecutive
/// slices, read each index once, combine runs of equal indices in registers (sorted segment ids
/// cost one atomic per run) and issue coalesced atomics; otherwise one thread per element.
cudaError_t launch_scatter_atomic(const Geom& g, void* out, const void* src, DType dt, DType index_dtype, Reduce r,
                                  cudaStream_t stream);
/// Whether rows at `base` (row stride `row_stride`, column stride `col_stride`, in elements) are
/// dense runs of whole 16-byte vectors of `v` elements: unit column stride, row starts a multiple
/// of v apart, 16-byte aligned base. The vector kernels' test (the row length's own multiple of v
/// is checked by the caller).
inline bool vec_rows_ok(const void* base, int64_t row_stride, int64_t col_stride, int64_t v) {
  return col_stride == 1 && row_stride % v == 0 && reinterpret_cast<uintptr_t>(base) % 16 == 0;
}

/// Whether launch_scatter_atomic takes the row kernel for this geometry.
bool scatter_rows_ok(const Geom& g);
/// Whether it takes the vector row kernel: sum / max / min over dense rows of whole, 16-byte
/// aligned vectors (unit column strides, row strides and bases multiples of 16 bytes).
bool scatter_vec_rows_ok(const Geom& g, const void* out, const void* src, int elem_bytes, Reduce r);

/// out (B) <- src (A), unordered among duplicates (scatter, index_copy).
cudaError_t launch_scatter_copy(const Geom& g, char* out, const char* src, int elem_bytes, DType index_dtype,
                                cudaStream_t stream);

/// Sorted path: keys[l] = B offset of slice l's base (or `sentinel` when skipped/out of range),
/// vals[l] = l.
cudaError_t launch_scatter_keys(const Geom& g, DType index_dtype, int64_t sentinel, int64_t* keys, int64_t* vals,
                                cudaStream_t stream);
/// Scratch bytes of the stable radix sort of n (key, value) int64 pairs over key bits
/// [0, end_bit). Needs a device (CUB asks for the PTX version); fails without one.
cudaError_t sort_temp_bytes(int64_t n, int end_bit, size_t* bytes);
/// Sorts (keys, vals) with double buffers (k0/k1, v0/v1); *which = the buffer index (0 or 1)
/// holding the result.
cudaError_t sort_pairs(void* temp, size_t temp_bytes, int64_t* k0, int64_t* k1, int64_t* v0, int64_t* v1, int64_t n,
                       int end_bit, int* which, cudaStream_t stream);
/// One thread per (sorted slot s, slice element p) whose slot starts a run of equal keys:
/// reduces the run's source elements in slot order (stable sort: index order) in f32 (f64 for
/// f64, int64 for integers) and writes the result to B once: combined with B's value when
/// include_self (sum: B + run, as the atomics; prod: B * run; mean: (B + run) / (n + 1)), in
/// place of it otherwise (mean: run / n). Integer means round toward -inf (torch). max / min are
/// instantiated for the integers without atomics (s8, u8, s16) only.
cudaError_t launch_scatter_sorted(const Geom& g, const int64_t* keys, const int64_t* vals, int64_t sentinel, void* out,
                                  const void* src, DType dt, Reduce r, bool include_self, cudaStream_t stream);
/// Whether launch_scatter_sorted has a kernel for (dt, r).
bool sorted_reduce_ok(DType dt, Reduce r);
/// Whether launch_scatter_atomic has a kernel for (dt, r).
bool atomic_reduce_ok(DType dt, Reduce r);

/// B element (key(l), p) <- `fill` for every slice whose index is in range: the destinations a
/// scatter_reduce with include_self=false restarts from the identity (before the atomic pass).
cudaError_t launch_scatter_fill(const Geom& g, char* out, const unsigned char fill[16], int elem_bytes,
                                DType index_dtype, cudaStream_t stream);
/// A element (l, p) <- `fill` for every slice whose (int64) index is negative: lax.gather's
/// FILL_OR_DROP windows, after the gather wrote them as zeros.
cudaError_t launch_fill_slices(const Geom& g, char* out, const unsigned char fill[16], int elem_bytes,
                               cudaStream_t stream);
/// one_hot: A element (l, c) <- `one` when index(l) == c, zero bytes otherwise (slice dim: the
/// classes, ksize of them; an out-of-range class reports and leaves its row zero).
cudaError_t launch_one_hot(const Geom& g, char* out, const unsigned char one[16], int elem_bytes, DType index_dtype,
                           cudaStream_t stream);

// ---- index linearization ------------------------------------------------------------------------
/// Several index components -> one int64 element offset per slice (index, index_put, lax ops).
/// Slice l (decomposed over the batch dims) reads component j at comp[j] + sum c_i *
/// cstride[j][i]; that value v_j starts a window of window[j] elements along an operand dim of
/// size[j] elements and stride stride[j]: out[l] = sum_j v_j * stride[j] + sum_i c_i * bout[i],
/// after the mode (see IndexMode): clip clamps v_j to [0, size - window]; fill, and check (after
/// adding size to a negative v_j), make the slice's offset -1 when some v_j falls outside
/// [0, size - window], and check then also stores 1 in *error. bout is 0 except where a batch
/// dim walks a window (the per-element form of lax.scatter's sorted path: windows along indexed
/// dims may overlap, so its keys are elements, not windows).
struct LinParams {
  int k = 0;
  const void* comp[kRank] = {};
  int64_t cstride[kRank][kRank] = {};
  int rb = 0;
  int64_t bsize[kRank] = {};
  int64_t bout[kRank] = {};
  int64_t size[kRank] = {};
  int64_t stride[kRank] = {};
  int64_t window[kRank] = {};
  int mode = 0;  ///< IndexMode
  int64_t L = 0;
  int64_t* out = nullptr;
  int* error = nullptr;
};
cudaError_t launch_linearize(const LinParams& p, DType index_dtype, cudaStream_t stream);
/// Slices (offsets) an op with linearized indices has (plan.cpp): index / index_put: the
/// index shape's elements; lax ops: the indices' elements but the index vector dim;
/// per_element (lax_scatter's sorted path): the updates' elements.
int64_t linearized_slices(const IndexDesc& d, bool per_element = false);

// ---- select engine (nonzero, masked_select, masked_scatter) --------------------------------------
/// Elements in row-major order of `size`; tile t covers elements [t * kSelectTile, (t + 1) *
/// kSelectTile), one CTA of kSelectThreads in both passes. A thread owns kSelectItems chunks of
/// kSelectChunk consecutive elements (chunk k * kSelectThreads + thread of the tile) and ranks
/// each as one 16-bit mask. An element is selected when its bytes in `sel` (sel_bytes wide) AND
/// nz_mask are not all zero (floats: every bit but the sign, so -0 is zero and NaN is not).
inline constexpr int kSelectThreads = 256;
inline constexpr int kSelectChunk = 16;
inline constexpr int kSelectItems = 4;
inline constexpr int64_t kSelectTile = int64_t{kSelectThreads} * kSelectChunk * kSelectItems;
enum class SelectOp : int { nonzero, masked_select, masked_scatter };
struct SelectParams {
  int rank = 0;
  int64_t size[kRank] = {};
  int64_t sel_stride[kRank] = {};  ///< the tested tensor: nonzero's x, the masked ops' mask
  int64_t a_stride[kRank] = {};    ///< masked_select: x (read); masked_scatter: out (written)
  const char* sel = nullptr;
  int sel_bytes = 1;
  unsigned long long nz_mask[2] = {};  ///< low / high 8 bytes (16-byte elements)
  int64_t n = 0;
  int64_t tiles = 0;
  int64_t* tile_counts = nullptr;   ///< workspace: selected elements per tile
  int64_t* tile_offsets = nullptr;  ///< workspace: their exclusive scan
  int64_t* count = nullptr;         ///< optional: the total
  // writes
  const char* a = nullptr;  ///< masked_select: x
  char* out = nullptr;      ///< nonzero: int64 [bound, rank]; masked_select: [bound]; masked_scatter: out
  int64_t out_stride[2] = {};
  int64_t bound = 0;    ///< rows of out (nonzero, masked_select)
  long long fill = -1;  ///< nonzero: rows past the count
  /// nonzero: the input's own dims (the offsets above use merged ones), decomposed for the
  /// coordinates of the selected elements only
  int coord_rank = 0;
  int64_t coord_size[kRank] = {};
  // masked_scatter's source, read at its row-major position k (size-1 dims dropped, contiguous
  // neighbours merged)
  const char* src = nullptr;
  int src_rank = 0;
  int64_t src_size[kRank] = {};
  int64_t src_stride[kRank] = {};
  int64_t src_numel = 0;
  int* error = nullptr;
};
/// Tiles of the select engine over the op's input (plan.cpp).
int64_t select_tiles(const IndexDesc& d);
/// Pass 1: tile_counts (one CTA per tile).
cudaError_t launch_select_count(const SelectParams& p, cudaStream_t stream);
/// After the scan: writes *count from the last tile (the count-only phase).
cudaError_t launch_select_total(const SelectParams& p, cudaStream_t stream);
/// Pass 2: each CTA rescans its tile and writes its selected elements at tile_offsets[t] + rank
/// (warp-cooperative: coalesced outputs); nonzero also fills the rows in [count, bound) and block
/// 0 writes *count. data_bytes: element size of x / out / source (masked ops). Both passes read
/// a contiguous 1-byte selector (any alignment) 16 bytes a lane; others an element a lane.
cudaError_t launch_select_write(const SelectParams& p, SelectOp op, int data_bytes, cudaStream_t stream);
/// CUB's exclusive sum of n int64 (index_sort.cu): scratch bytes (needs a device) and the scan.
cudaError_t scan_temp_bytes(int64_t n, size_t* bytes);
cudaError_t exclusive_scan(void* temp, size_t temp_bytes, const int64_t* in, int64_t* out, int64_t n,
                           cudaStream_t stream);
/// The assigning variant: each run's last source (in index order) is copied, byte for byte.
cudaError_t launch_scatter_sorted_copy(const Geom& g, const int64_t* keys, const int64_t* vals, int64_t sentinel,
                                       char* out, const char* src, int elem_bytes, cudaStream_t stream);

// ---- rows engine: embedding_bag ----------------------------------------------------------------
/// The bags over the ids. Bag b's ids sit at ids[b * id_bstride + e * id_stride] for e in
/// [begin_b, end_b): with `offsets` (1-d ids, id_bstride 0) begin_0 = 0, begin_b = offsets[b],
/// end_b = offsets[b + 1] and the last bag ends at `len` (torch's CUDA semantics), each clamped
/// to [0, len] (an offset outside it, or a bag ending before it begins, sets *error; such a bag
/// is empty); without offsets (2-d ids) every bag is [0, len). Flat position l (the sorted
/// backward's keys, the per-sample weights' gradient): e for 1-d ids, b * len + e for 2-d.
/// Per-sample weights (and their gradient) are addressed like the ids.
struct BagParams {
  int64_t bags = 0;
  int64_t len = 0;  ///< 1-d ids: their count L; 2-d: ids per bag
  const void* ids = nullptr;
  int64_t id_stride = 0, id_bstride = 0;
  const void* offsets = nullptr;  ///< null: 2-d ids
  int64_t off_stride = 0;
  const void* psw = nullptr;  ///< per-sample weights (null: none)
  int64_t psw_stride = 0, psw_bstride = 0;
  int64_t num_weights = 0;  ///< N: ids outside [0, N) set *error and are skipped
  int64_t dim = 0;          ///< D
  int64_t padding_idx = -1;
  int mode = 0;  ///< kBagSum, kBagMean, kBagMax
  /// Elements a lane moves as one 16-byte vector (16 / element bytes; bag_vec), or 1: scalar
  /// accesses with any row strides.
  int vec = 1;
  const void* weight = nullptr;  ///< forward: the table; backward: read for the per-sample weights' gradient
  int64_t w_stride0 = 0, w_stride1 = 0;
  void* out = nullptr;  ///< forward: [bags, D]
  int64_t out_stride0 = 0, out_stride1 = 0;
  void* max_indices = nullptr;  ///< max: [bags, D] of the index dtype (forward writes, backward reads)
  int64_t mi_stride0 = 0, mi_stride1 = 0;
  const void* dy = nullptr;  ///< backward: [bags, D]
  int64_t dy_stride0 = 0, dy_stride1 = 0;
  void* grad_weight = nullptr;  ///< backward: [N, D], zeroed first by the caller
  int64_t gw_stride0 = 0, gw_stride1 = 0;
  void* grad_psw = nullptr;  ///< backward (optional)
  int64_t gpsw_stride = 0, gpsw_bstride = 0;
  int scale_grad_by_freq = 0;  ///< sorted backward: each row's terms divided by its id's count
  int* error = nullptr;
};
inline constexpr int kBagSum = 0, kBagMean = 1, kBagMax = 2;
/// Flat positions of the ids (bags x len for 2-d ids).
inline int64_t bag_positions(const BagParams& p) { return p.offsets ? p.len : p.bags * p.len; }
/// Forward (every dtype of kFloat, s32 / s64 ids and offsets): a group of G lanes (the smallest
/// power of two covering the row's vectors, at most 32) per (bag, chunk of G vectors); the
/// group reads G ids (and weights) at a time with one load a lane and broadcasts them by
/// shuffles, keeps 4 row loads in flight a lane, accumulates in f32 (f64) in id order, and
/// writes the bag's sum / mean / max (and max_indices) once.
cudaError_t launch_bag_forward(const BagParams& p, DType dt, DType index_dtype, cudaStream_t stream);
/// Backward, atomic (sum / mean): the forward's groups read dy[bag] once and add dy * scale
/// (per-sample weight, or 1 / the bag's count for mean) to every id's row of grad_weight
/// with atomics (order varies run to run). rows_choice sends f16 / bf16 to the sorted path
/// (atomics of their width round every add); their instantiations stay for callers of the
/// launcher that accept that.
cudaError_t launch_bag_backward_atomic(const BagParams& p, DType dt, DType index_dtype, cudaStream_t stream);
/// Backward, sorted (sum / mean; deterministic): keys[l] = the id at flat position l (the
/// sentinel N for padding_idx, an id out of range, or a position outside every bag), vals[l] =
/// l, bag_of[l] = its bag; for mean also bag_size[b] (its ids that are not padding_idx and in
/// range).
cudaError_t launch_bag_keys(const BagParams& p, DType index_dtype, int64_t* keys, int64_t* vals, int64_t* bag_of,
                            int64_t* bag_size, cudaStream_t stream);
/// After the stable radix sort of (keys, vals): a lane group per (run of equal ids, chunk of
/// the row) sums dy[bag] * scale over the run in position order (f32, f64 for f64) and writes
/// the row once (scale_grad_by_freq: each term also divided by the run's length, torch's count).
cudaError_t launch_bag_backward_sorted(const BagParams& p, DType dt, const int64_t* keys, const int64_t* vals,
                                       const int64_t* bag_of, const int64_t* bag_size, int64_t n, cudaStream_t stream);
/// grad_psw[l] = dy[bag(l)] . weight[id(l)] (f32 / f64; 0 for padding_idx, an id out of range or a
/// position outside every bag): a lane group per position.
cudaError_t launch_bag_psw_grad(const BagParams& p, DType dt, DType index_dtype, cudaStream_t stream);
/// The vector width (elements) the row kernels may use for these pointers and strides (every
/// row tensor unit-stride along D, row strides and pointers multiples of 16 bytes, D a multiple
/// of the vector), else 1.
int bag_vec(const BagParams& p, int elem_bytes, bool backward);

// ---- rows engine: embedding_renorm -------------------------------------------------------------
struct RenormParams {
  void* weight = nullptr;  ///< [N, D], rescaled in place
  int64_t w_stride0 = 0, w_stride1 = 0;
  int64_t num_weights = 0, dim = 0;
  const void* ids = nullptr;  ///< any shape (rank <= 8), any strides
  int rank = 0;
  int64_t size[kRank] = {};
  int64_t stride[kRank] = {};
  int64_t L = 0;
  double max_norm = 0;
  double norm_type = 2;
  /// workspace (renorm_claim_bytes), cleared by the launch: one claim bit per row, then the
  /// abort word (set by the check pass when an id is out of range)
  unsigned* claimed = nullptr;
  int* error = nullptr;
};
/// Workspace bytes: the claim bits (one per row, whole 32-bit words) and the abort word.
inline size_t renorm_claim_bytes(int64_t num_weights) {
  return (static_cast<size_t>((num_weights > 0 ? num_weights : 0) + 31) / 32 + 1) * 4;
}
/// Clears the workspace; with the error flag, a check pass over the ids (one out of range sets
/// the flag and the abort word: the table is updated in place, so a refused call changes no
/// row); then a warp per id: lane 0 claims the row with an atomicOr; the warp that claims it
/// computes the row's norm (fixed-order warp reduction) and rescales it when it exceeds
/// max_norm. Each row depends on itself only: deterministic.
cudaError_t launch_embedding_renorm(const RenormParams& p, DType dt, DType index_dtype, cudaStream_t stream);

// ---- generate engine: tril_indices / triu_indices ---------------------------------------------
/// The triangle's elements in row-major order, as three runs of rows: `pre_rows` full rows
/// (triu with offset <= 0), a trapezoid of R rows starting at row t0 whose counts are m, m + step,
/// ... (tril: step +1, columns from 0; triu: step -1, columns from row + offset), then
/// `post_rows` full rows from row post_start (tril). n = pre_rows * col + T + post_rows * col.
struct TriIndicesParams {
  int64_t n = 0;  ///< -1: the sizes overflow int64
  int64_t col = 0;
  int64_t offset = 0;
  int upper = 0;
  int64_t pre_rows = 0;
  int64_t t0 = 0, R = 0, m = 0;
  int step = 1;
  int64_t T = 0;  ///< trapezoid elements
  int64_t post_start = 0, post_rows = 0;
  void* out = nullptr;  ///< [2, n]
  int64_t stride0 = 0, stride1 = 0;
};
/// Host: the geometry of torch.tril_indices(row, col, offset) (upper: triu_indices).
TriIndicesParams tri_indices_geometry(int64_t row, int64_t col, int64_t offset, bool upper);
/// One thread per index pair; the trapezoid row from the closed-form root in double, corrected
/// in exact int64 arithmetic. dt: s32 or s64.
cudaError_t launch_tri_indices(const TriIndicesParams& p, DType dt, cudaStream_t stream);

}  // namespace baracuda::detail::idx
