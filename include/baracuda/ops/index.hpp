// The indexing, shape, embedding and segment family (OPS.md L, M, N, S; issue 6): strided copy
// (contiguous / permute / transpose / expand / slice write), cat, stack, pad (four modes, with
// backward), flip, roll, tile, repeat_interleave, triu/tril; gather, index_select, embedding (with
// backward), advanced indexing (index, index_put), one_hot, lax.gather; scatter (assign),
// scatter_add, scatter_reduce (sum, prod, mean, amax, amin; include_self), index_copy, index_add,
// lax.scatter, segment_sum/max/min/prod/mean with s32 or s64 indices; nonzero, masked_select,
// masked_scatter; embedding_bag (fused, with backward), embedding_renorm (max_norm),
// tril_indices / triu_indices.
//
//   auto desc = IndexDesc::index_select(DType::bf16, DType::s64, Shape::of({50000, 4096}), 16384, 0);
//   auto plan = IndexPlan::select(Target::current().value(), desc);
//   IndexArgs a; a.x = weight; a.index = ids; a.out = rows; a.error = flag;   // flag: int32 [1]
//   plan->run(stream, Workspace{ws, plan->workspace_size()}, a);
//
// Six engines, one per sub-family (index_ops.def names each op's engine):
//  - copy: every output element reads at most one input element through a per-dim coordinate
//    map (identity with offset, flip, roll, reflect, replicate, circular, tile; out-of-range
//    coordinates take a fill value; triu/tril zero a triangle). Kernels move bytes (one per
//    element size 1/2/4/8/16, not per dtype); contiguous inner runs are widened to 16-byte
//    elements, pad's forward writes 16-byte chunks along the padded rows, and a copy whose
//    innermost axis changes goes through a shared-memory tiled transpose.
//  - gather: output slice l reads the input slice the index names (gather, index_select,
//    embedding, index, lax_gather, one_hot): byte movers too; rows of >= 32 words move a warp per
//    row, and torch.gather along a unit-stride source dim stages each source line in shared memory.
//  - scatter: output slice key(l) accumulates input slice l (sum, prod, mean, max, min) or takes
//    it (assign, byte movers). Sums, products and assignments have two implementations: atomics
//    (default; rows of >= 8 elements by lane groups that combine runs of equal indices before
//    their atomics), or, when PlanPreference::require_deterministic or require_bit_stable is set,
//    a stable radix sort of the destinations followed by one thread per (destination, element)
//    reducing its sources in index order (bit-identical run to run). Means and the 8/16-bit
//    integer reductions always take the sorted path (the run length is the mean's count; there
//    are no atomics of those widths); max / min are always atomic (order-independent).
//  - select: nonzero / masked_select / masked_scatter in two passes over the mask (per-tile
//    counts, an exclusive scan of them, then each tile rescanned and written at its offset). The
//    number of selected elements goes to IndexArgs::count (a device int64): run() never reads it.
//  - rows: whole embedding rows per lane group. embedding_bag's forward reads each bag's rows
//    (16-byte vectors, f32 / f64 accumulation in index order) and writes the bag's sum, mean or
//    max (with the argmax ids) once: no [L, D] intermediate. Its backward scatters the upstream
//    gradient to the rows (f32 / f64 atomics, or for f16 / bf16, require_deterministic or
//    scale_grad_by_freq a stable radix sort of the ids and one ordered f32 / f64 sum per
//    referenced row) and writes the gradient of the per-sample weights. embedding_renorm
//    rescales, in place, every row the ids reference whose p-norm exceeds max_norm (each row
//    once: a per-row claim bit in the workspace; with the error flag, an id out of range leaves
//    every row as it was).
//  - generate: outputs computed from the sizes alone (tril_indices / triu_indices: one thread
//    per index pair, the row from a closed form in double corrected in exact integers).
//
// Several index tensors (index / index_put: one per leading dim; lax ops: the components of the
// start vectors) are first linearized, by one small kernel, into one int64 element offset per
// slice (workspace); the gather and scatter engines then read those offsets.
//
// Out-of-range indices (and negative ones, except where torch wraps them: index, index_put; and
// JAX-style segment ops, which drop them as JAX does) are never dereferenced: the element is
// skipped (gather writes zero) and, when IndexArgs::error is given (a device int32 scalar the
// caller zeroes), the kernel stores 1 there. The plan never reads the flag back: checking it is
// the caller's choice (torch's asynchronous device-side assert semantics; the Python layer checks
// it after the call by default).
#pragma once
#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "baracuda/core/preference.hpp"
#include "baracuda/core/sku.hpp"
#include "baracuda/core/status.hpp"
#include "baracuda/core/tensor.hpp"
#include "baracuda/core/workspace.hpp"

namespace baracuda {

enum class IndexOp : uint8_t {
#define BARACUDA_INDEX(name, ...) name,
#include "baracuda/ops/index_ops.def"
#undef BARACUDA_INDEX
};

enum class IndexEngine : uint8_t { copy, gather, scatter, select, rows, generate };

/// One row of index_ops.def.
struct IndexOpInfo {
  IndexOp op;
  const char* name;
  IndexEngine engine;
  DTypeSet fw_dtypes;
  DTypeSet bw_dtypes;  ///< 0: no backward plan (composed from forward ops in Python)
  bool takes_index;
  bool reports_errors;  ///< may set IndexArgs::error (see the table's `flag` column)
};

std::span<const IndexOpInfo> index_ops();
const IndexOpInfo& info(IndexOp op);
std::optional<IndexOp> index_op_from_name(std::string_view name);

/// torch.nn.functional.pad's modes.
enum class PadMode : uint8_t { constant, reflect, replicate, circular };
const char* to_string(PadMode m);
std::optional<PadMode> pad_mode_from_name(std::string_view name);

/// torch.scatter_reduce's reductions, which lax.scatter shares (sum = scatter_add, prod =
/// scatter_mul, amax / amin = scatter_max / scatter_min); `none` is lax.scatter's replacement.
/// amax / amin: NaN wins (torch and XLA propagate it).
enum class ScatterReduce : uint8_t { sum, prod, mean, amax, amin, none };
const char* to_string(ScatterReduce r);
std::optional<ScatterReduce> scatter_reduce_from_name(std::string_view name);

/// How index tensors outside the indexed operand are treated (index, index_put, lax_gather,
/// lax_scatter). `clip` and `fill` are JAX's GatherScatterMode; `check` is torch's advanced
/// indexing.
enum class IndexMode : uint8_t {
  clip,   ///< JAX CLIP: each start is clamped to [0, size - window]
  fill,   ///< JAX FILL_OR_DROP: a window not wholly inside: gather writes `value`, scatter drops it
  check,  ///< torch: negative indices count from the end; still out of range: the error flag is
          ///< set and the slice skipped (gather writes zeros)
};
const char* to_string(IndexMode m);
std::optional<IndexMode> index_mode_from_name(std::string_view name);

/// nonzero / masked_select: which passes run() makes. `all` counts, scans and writes in one call
/// (when the caller bounds the output: torch.nonzero_static, or masked_scatter); `count` stops
/// after the scan (writes IndexArgs::count; no output), so the caller can size the output;
/// `write` reuses the tile counts and offsets a `count` run of the same plan left in the same
/// workspace over the same input (the two-call protocol behind torch.nonzero's exact-size result).
enum class SelectPhase : uint8_t { all, count, write };

/// jax.lax.GatherDimensionNumbers (and XLA's index_vector_dim; JAX always uses the last dim).
/// operand_batching_dims are not supported.
struct GatherDims {
  std::span<const int> offset_dims;           ///< output dims holding the slice (sorted)
  std::span<const int> collapsed_slice_dims;  ///< operand dims of slice size 1 dropped from the output (sorted)
  std::span<const int> start_index_map;       ///< operand dim of each start component
  int index_vector_dim = -1;                  ///< dim of the indices holding the start vectors (-1: the last)
};

/// jax.lax.ScatterDimensionNumbers (and XLA's index_vector_dim).
struct ScatterDims {
  std::span<const int> update_window_dims;            ///< updates dims of the window (sorted)
  std::span<const int> inserted_window_dims;          ///< operand dims the window omits (size 1; sorted)
  std::span<const int> scatter_dims_to_operand_dims;  ///< operand dim of each start component
  int index_vector_dim = -1;
};

/// embedding_bag's options besides the mode (torch.nn.functional.embedding_bag's arguments;
/// max_norm is embedding_renorm, a separate plan, as in torch).
struct EmbeddingBagOptions {
  bool include_last_offset = false;  ///< offsets has bags + 1 entries (1-d ids)
  bool per_sample_weights = false;   ///< sum only: id i's row is scaled by per_sample_weights[i]
  int64_t padding_idx = -1;          ///< ids equal to it are left out of their bag (and of mean's count)
  bool scale_grad_by_freq = false;   ///< backward, sum / mean: row r's gradient divided by r's count in the ids
};

struct IndexDesc {
  IndexOp op = IndexOp::copy;
  Direction direction = Direction::Forward;
  DType dtype = DType::f32;        ///< every data tensor (x, src, inputs, out; nonzero's out is int64)
  DType index_dtype = DType::s64;  ///< s32 or s64 (ops that read an index)
  Shape in_shape{};     ///< x: copy input, gather source, scatter self / data, embedding(_bag) weight (fw) or dy
                        ///< (bw), index / lax_gather operand, nonzero / masked input (one_hot: none, rank 0);
                        ///< embedding_renorm: the weight (out, in place); tril/triu_indices: [row, col]
  Shape out_shape{};    ///< derived by the factories below
  Shape index_shape{};  ///< ops with an index (index / index_put: every index tensor's shape)
  Shape src_shape{};    ///< scatter sources: scatter_add / index_add / scatter_reduce src, index_put values,
                        ///< lax_scatter updates, masked_scatter source
  int dim = 0;          ///< cat/stack/gather/index_select/scatter_add/index_add: the axis (>= 0)
  int num_inputs = 0;   ///< cat/stack
  PadMode pad_mode = PadMode::constant;
  std::array<int64_t, 2 * kMaxRank> pad{};    ///< (before, after) per dim of in_shape, in dim order
  double value = 0;                           ///< constant pad's fill; lax_gather fill mode's fill_value
  int64_t fill_index = -1;                    ///< nonzero: the value of the rows past the count
  std::array<int64_t, kMaxRank> shifts{};     ///< roll: shift per dim (any sign)
  std::array<int64_t, kMaxRank> repeats{};    ///< tile: repetitions per dim; repeat_interleave: repeats[dim]
  uint32_t flip_dims = 0;                     ///< flip: bit d set = dim d reversed
  int64_t diagonal = 0;                       ///< triu/tril (the last two dims); tril/triu_indices' offset
  int64_t padding_idx = -1;                   ///< embedding: row whose gradient stays zero (-1: none)
  int64_t num_segments = 0;                   ///< segment ops; one_hot: num_classes; embedding_bag: bags
  ScatterReduce reduce = ScatterReduce::sum;  ///< scatter_reduce, lax_scatter; embedding_bag's mode (sum, mean, amax)
  bool include_self = true;                   ///< scatter_reduce: self takes part in the reduction
  bool accumulate = false;                    ///< index_put
  IndexMode mode = IndexMode::check;          ///< index, index_put (check only), lax_gather, lax_scatter
  SelectPhase phase = SelectPhase::all;       ///< nonzero, masked_select
  int num_indices = 0;  ///< index / index_put: index tensors (one per leading dim of x); lax ops: start components
  std::array<int8_t, kMaxRank>
      start_index_map{};    ///< lax_gather start_index_map / lax_scatter scatter_dims_to_operand_dims
  int num_offset_dims = 0;  ///< lax ops: entries of offset_dims
  std::array<int8_t, kMaxRank> offset_dims{};  ///< lax_gather offset_dims / lax_scatter update_window_dims
  int num_collapsed_dims = 0;                  ///< lax ops: entries of collapsed_dims
  std::array<int8_t, kMaxRank>
      collapsed_dims{};                         ///< lax_gather collapsed_slice_dims / lax_scatter inserted_window_dims
  int index_vector_dim = 0;                     ///< lax ops (normalized: >= 0)
  std::array<int64_t, kMaxRank> slice_sizes{};  ///< lax_gather
  bool include_last_offset = false;             ///< embedding_bag (see EmbeddingBagOptions)
  bool per_sample_weights = false;              ///< embedding_bag
  bool scale_grad_by_freq = false;              ///< embedding / embedding_bag backward
  double max_norm = 0;                          ///< embedding_renorm
  double norm_type = 2;                         ///< embedding_renorm: p (inf: the largest |x|)

  /// x -> out of the same shape (contiguous, permute/transpose copies, expand, slice write: the
  /// views carry the strides).
  static IndexDesc copy(DType dt, const Shape& shape);
  /// out = torch.cat(inputs, dim); inputs' sizes along dim come with the args.
  static IndexDesc cat(DType dt, const Shape& out_shape, int dim, int num_inputs);
  /// out = torch.stack(inputs, dim); every input has `in_shape`.
  static IndexDesc stack(DType dt, const Shape& in_shape, int dim, int num_inputs);
  /// pads[2d], pads[2d+1]: before/after of dim d (negative crops, constant mode only).
  /// Backward: x = grad of the padded output, out = grad of the input (in_shape).
  static IndexDesc pad_nd(DType dt, const Shape& in_shape, std::span<const int64_t> pads, PadMode mode,
                          double value = 0, Direction dir = Direction::Forward);
  static IndexDesc flip(DType dt, const Shape& shape, uint32_t dims);
  static IndexDesc roll(DType dt, const Shape& shape, std::span<const int64_t> shifts);
  /// out[i] = x[i mod in_shape] with out_shape = in_shape * repeats (torch.Tensor.repeat with
  /// equal ranks).
  static IndexDesc tile(DType dt, const Shape& in_shape, std::span<const int64_t> repeats);
  /// torch.repeat_interleave with an integer count: out[..., o, ...] = x[..., o / repeats, ...].
  static IndexDesc repeat_interleave(DType dt, const Shape& in_shape, int64_t repeats, int dim);
  static IndexDesc triu(DType dt, const Shape& shape, int64_t diagonal);
  static IndexDesc tril(DType dt, const Shape& shape, int64_t diagonal);
  /// torch.gather: out has the index's shape.
  static IndexDesc gather(DType dt, DType it, const Shape& in_shape, const Shape& index_shape, int dim);
  /// torch.index_select with a 1-d index of `count` entries.
  static IndexDesc index_select(DType dt, DType it, const Shape& in_shape, int64_t count, int dim);
  /// Forward: weight [N, D] and ids (any shape) -> out [*ids, D]. Backward: x = dy [*ids, D] ->
  /// out = dense grad_weight [N, D] (rows == padding_idx stay zero; with scale_grad_by_freq each
  /// row's sum is divided by its id's count, torch's option). `num_weights` = N.
  static IndexDesc embedding(DType dt, DType it, int64_t num_weights, int64_t embedding_dim, const Shape& index_shape,
                             int64_t padding_idx = -1, Direction dir = Direction::Forward,
                             bool scale_grad_by_freq = false);
  /// torch.nn.functional.embedding_bag (torch._embedding_bag's kernel) over weight [N, D] and
  /// ids (`index`): 1-d [L] with `num_offsets` bag starts in `offsets` (bags = num_offsets, one
  /// fewer with include_last_offset), or 2-d [bags, n] (n ids a bag, no offsets; num_offsets is
  /// ignored). Bag b holds the ids at [begin_b, end_b): begin_0 = 0, begin_b = offsets[b],
  /// end_b = offsets[b + 1], and the last bag ends at L (torch's CUDA semantics: include_last_offset
  /// only drops the last offset, expected to be L); offsets outside [0, L] or decreasing set the
  /// error flag (clamped / empty bags). mode sum (optionally weighted by per_sample_weights), mean
  /// (over the ids that are not padding_idx; an empty bag is 0) or amax (per feature, the first
  /// largest value; an empty bag is 0 and its max_indices -1), accumulated in f32 (f64 for f64)
  /// in id order: out [bags, D]; amax also writes max_indices [bags, D] (the winning ids, index
  /// dtype). Backward: x = dy [bags, D] -> out = dense grad_weight [N, D] (optional when only
  /// grad_per_sample_weights is wanted) and, for sum with per_sample_weights, the optional
  /// grad_per_sample_weights [*ids] (dy[bag] . weight[id]; reads `weight`); amax routes dy
  /// through max_indices.
  static IndexDesc embedding_bag(DType dt, DType it, int64_t num_weights, int64_t embedding_dim,
                                 const Shape& index_shape, int64_t num_offsets, ScatterReduce mode,
                                 const EmbeddingBagOptions& opt = {}, Direction dir = Direction::Forward);
  /// torch.embedding_renorm_(weight, ids, max_norm, norm_type): every row of weight [N, D] (out,
  /// updated in place) that some id references and whose norm_type-norm exceeds max_norm is
  /// scaled by max_norm / (norm + 1e-7), once (norms in f32, f64 for f64). p = 1, 2, inf or any
  /// p > 0 (the norm of |x|: torch's CPU definition; torch's CUDA kernel drops the |.| for
  /// p != 1, 2). Out-of-range ids set the error flag; when the flag is given, such an id leaves
  /// the whole table untouched (a check pass runs first: a partial in-place update could not be
  /// undone), else they are skipped.
  static IndexDesc embedding_renorm(DType dt, DType it, int64_t num_weights, int64_t embedding_dim,
                                    const Shape& index_shape, double max_norm, double norm_type = 2);
  /// torch.tril_indices(row, col, offset) / triu_indices: out [2, n] of dtype s32 / s64 (row
  /// indices, then column indices, in row-major order of the triangle's elements); n from the
  /// sizes on the host (no synchronization).
  static IndexDesc tril_indices(DType dt, int64_t row, int64_t col, int64_t offset = 0);
  static IndexDesc triu_indices(DType dt, int64_t row, int64_t col, int64_t offset = 0);
  /// out = self.scatter_add(dim, index, src) (x = self; out may be self itself).
  static IndexDesc scatter_add(DType dt, DType it, const Shape& self_shape, const Shape& index_shape,
                               const Shape& src_shape, int dim);
  /// out = self.index_add(dim, index, src) with a 1-d index (x = self; out may be self itself).
  static IndexDesc index_add(DType dt, DType it, const Shape& self_shape, const Shape& src_shape, int dim);
  /// torch.scatter / index_copy (assignment; shapes as scatter_add / index_add). With duplicate
  /// indices the atomic path lets an unspecified duplicate land (torch: undefined); the sorted
  /// path (require_deterministic) writes the last one in index order.
  static IndexDesc scatter(DType dt, DType it, const Shape& self_shape, const Shape& index_shape,
                           const Shape& src_shape, int dim);
  static IndexDesc index_copy(DType dt, DType it, const Shape& self_shape, const Shape& src_shape, int dim);
  /// jax.ops.segment_sum / segment_max / segment_min (op = one of them): data [L, ...], ids [L]
  /// -> out [num_segments, ...]; ids outside [0, num_segments) are dropped (JAX), empty segments
  /// get the reduction's identity (0, -inf / +inf, the integer extremes).
  static IndexDesc segment(DType dt, DType it, const Shape& data_shape, int64_t num_segments, IndexOp op);
  /// torch.scatter_reduce(self, dim, index, src, reduce, include_self) (shapes as scatter_add;
  /// reduce none is refused). include_self=false: every destination an index names starts from
  /// the reduction's identity instead of self (mean: counts only the sources); the others keep
  /// self. mean of integers rounds toward -inf, as torch.
  static IndexDesc scatter_reduce(DType dt, DType it, const Shape& self_shape, const Shape& index_shape,
                                  const Shape& src_shape, int dim, ScatterReduce reduce, bool include_self = true);
  /// torch advanced indexing read, x[i_0, ..., i_{k-1}] with k = num_indices index tensors over the
  /// leading dims of x, each of `index_shape` (broadcast views): out = [*index_shape, *x.shape[k:]].
  /// Negative indices count from the end (IndexMode::check).
  static IndexDesc index(DType dt, DType it, const Shape& x_shape, const Shape& index_shape, int num_indices);
  /// torch.index_put(self, (i_0, ..., i_{k-1}), values, accumulate): src = values of shape
  /// [*index_shape, *self.shape[k:]] (broadcast views); out may be self itself. Duplicates without
  /// accumulate: as scatter (unspecified winner, or the last in index order when deterministic).
  static IndexDesc index_put(DType dt, DType it, const Shape& self_shape, const Shape& index_shape, int num_indices,
                             bool accumulate);
  /// torch.nn.functional.one_hot: out [*index_shape, num_classes] of `dt` (1 at the class, 0
  /// elsewhere; torch's is int64). Classes outside [0, num_classes) set the error flag and leave
  /// their row zero. num_classes is fixed here: the caller finds max + 1 when it wants torch's -1.
  static IndexDesc one_hot(DType dt, DType it, const Shape& index_shape, int64_t num_classes);
  /// torch.nonzero / nonzero_static: out int64 [max_count, x.rank] gets the coordinates of the
  /// first min(count, max_count) nonzero elements of x (dtype dt) in row-major order, rows past
  /// the count get `fill`; IndexArgs::count gets the count. Floats: -0 is zero, NaN is not.
  static IndexDesc nonzero(DType dt, const Shape& shape, int64_t max_count, int64_t fill = -1,
                           SelectPhase phase = SelectPhase::all);
  /// torch.masked_select with x and mask of `shape` (broadcast views): out [max_count] gets the
  /// selected elements in row-major order (rows past the count are left as they are).
  static IndexDesc masked_select(DType dt, const Shape& shape, int64_t max_count, SelectPhase phase = SelectPhase::all);
  /// torch.masked_scatter(self, mask, source): out = self with its masked elements (row-major
  /// order) replaced by source's first elements (source: any shape, read in row-major order; too
  /// few elements set the error flag and leave the rest of self). out may be self itself.
  static IndexDesc masked_scatter(DType dt, const Shape& shape, const Shape& source_shape);
  /// jax.lax.gather(operand, start_indices, dims, slice_sizes, mode, fill_value): the output
  /// shape derives from the dimension numbers (XLA's rules, checked by select()).
  static IndexDesc lax_gather(DType dt, DType it, const Shape& operand_shape, const Shape& indices_shape,
                              const GatherDims& dims, std::span<const int64_t> slice_sizes,
                              IndexMode mode = IndexMode::fill, double fill_value = 0);
  /// jax.lax.scatter / scatter_add / scatter_mul / scatter_min / scatter_max (reduce none / sum /
  /// prod / amin / amax; mean refused): out = operand with the updates applied. out may be the
  /// operand itself.
  static IndexDesc lax_scatter(DType dt, DType it, const Shape& operand_shape, const Shape& indices_shape,
                               const Shape& updates_shape, const ScatterDims& dims, ScatterReduce reduce,
                               IndexMode mode = IndexMode::fill);
};

/// Per-call tensors (which ones an op reads: see IndexDesc's factories; unused ones stay
/// default-constructed and are refused when given).
struct IndexArgs {
  TensorRef x;      ///< main input (see IndexDesc::in_shape)
  TensorRef src;    ///< scatter sources (scatter_add / index_add / scatter_reduce / index_put values / lax updates /
                    ///< masked_scatter source)
  TensorRef index;  ///< s32 or s64
  std::span<const TensorRef> inputs;   ///< cat / stack
  std::span<const TensorRef> indices;  ///< index / index_put: one index tensor per leading dim of x
  TensorRef mask;                      ///< masked_select / masked_scatter: bool, x's shape
  TensorMut out;
  TensorMut count;  ///< nonzero / masked_select: int64, one element: the number selected (optional)
  TensorMut error;  ///< optional int32 scalar: set to 1 on an out-of-range index
  // embedding_bag
  TensorRef offsets;             ///< 1-d ids: the bag starts, [bags (+1 with include_last_offset)], the ids' dtype
  TensorRef per_sample_weights;  ///< sum with per_sample_weights: [*ids] of the weight's dtype (both directions)
  TensorRef weight;              ///< backward with grad_per_sample_weights: the table [N, D]
  TensorMut max_indices;         ///< amax: [bags, D] of the ids' dtype; written by the forward, read by the backward
  TensorMut grad_per_sample_weights;  ///< backward (optional): [*ids] of the weight's dtype
};

class IndexPlan {
 public:
  /// Validates the descriptor. Preferences: backend other than Any/Native, tf32=Require and
  /// reduced_precision_reduction=Require are refused; require_deterministic /
  /// require_bit_stable select the sorted path of sum-scatters and of embedding_bag's backward
  /// (scale_grad_by_freq always takes it: the runs are the counts; the other ops are deterministic
  /// and bit-stable: every output element is written by one thread from one fixed set of
  /// inputs, or, for max, the result does not depend on the order); vectorized=Forbid disables
  /// the widening of contiguous runs and shows in the layout.
  static Result<IndexPlan> select(const Target& target, const IndexDesc& desc, const PlanPreference& pref = {});
  /// Linearized index offsets (index, index_put, lax ops), the sorted scatter's keys, positions
  /// and radix sort scratch (embedding_bag's sorted backward: also each position's bag and, for
  /// mean, the bag sizes), the select engine's tile counts, offsets and scan scratch,
  /// embedding_renorm's claim bits (one per row); 0 for the rest.
  size_t workspace_size() const { return workspace_bytes_; }
  Result<void> can_implement(const IndexArgs& args) const;
  /// Enqueues on `stream`; never allocates, synchronizes or reads the error flag.
  Result<void> run(cudaStream_t stream, Workspace ws, const IndexArgs& args) const;
  const KernelSku& sku() const { return sku_; }
  const PrecisionGuarantee& precision() const { return sku_.precision; }
  const IndexDesc& desc() const { return desc_; }
  bool sorted() const { return sorted_; }
  /// The kernel run() takes for these tensors, e.g. "strided-copy-16B-i32", "mapped-copy-4B-i64",
  /// "mapped-rows-2B-i32" (pad), "fill-16B-i32", "tiled-transpose-2B-words", "pad-backward",
  /// "gather-16B-i32", "gather-rows-16B", "gather-staged-2B", "scatter-atomic",
  /// "scatter-atomic-rows", "scatter-sorted", "scatter-copy", "scatter-sorted-copy", "one-hot",
  /// "select-tiles", "bag-forward-16B" (embedding_bag; "-4B" etc.: scalar accesses),
  /// "bag-backward-atomic-16B", "bag-backward-sorted-16B", "bag-max-scatter-atomic",
  /// "bag-max-scatter-sorted", "bag-psw-grad-16B", "renorm-rows", "tri-indices", "empty" (cat and
  /// stack, and embedding_bag's backward, join their variants with '+'; ops that linearize their
  /// indices first prefix "linearize+").
  std::string layout_for(const IndexArgs& args) const;

 private:
  IndexDesc desc_;
  KernelSku sku_;
  size_t workspace_bytes_ = 0;
  bool sorted_ = false;
  bool linearized_ = false;  ///< index tensors linearized into workspace offsets first
  bool allow_vectorized_ = true;
};

/// A small descriptor of `op` that select() accepts whenever the dtypes are declared (input
/// [4, 8]); the coverage listing and the host tests probe with it.
IndexDesc index_probe(IndexOp op, DType dt, DType index_dtype, Direction dir = Direction::Forward);

/// One-line convenience: select (cached per thread by descriptor) and run.
Result<void> index(cudaStream_t stream, const IndexDesc& desc, const IndexArgs& args, Workspace ws = {},
                   const PlanPreference& pref = {});

}  // namespace baracuda
