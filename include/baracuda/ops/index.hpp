// The indexing, shape, embedding and segment family (OPS.md L, M, N, S; issue 6): strided copy
// (contiguous / permute / transpose / expand / slice write), cat, stack, pad (four modes, with
// backward), flip, roll, tile, repeat_interleave, triu/tril; gather, index_select, embedding (with backward);
// scatter (assign), scatter_add, index_copy, index_add, segment_sum/max/min with s32 or s64 indices.
//
//   auto desc = IndexDesc::index_select(DType::bf16, DType::s64, Shape::of({50000, 4096}), 16384, 0);
//   auto plan = IndexPlan::select(Target::current().value(), desc);
//   IndexArgs a; a.x = weight; a.index = ids; a.out = rows; a.error = flag;   // flag: int32 [1]
//   plan->run(stream, Workspace{ws, plan->workspace_size()}, a);
//
// Three engines, one per sub-family (index_ops.def names each op's engine):
//  - copy: every output element reads at most one input element through a per-dim coordinate
//    map (identity with offset, flip, roll, reflect, replicate, circular, tile; out-of-range
//    coordinates take a fill value; triu/tril zero a triangle). Kernels move bytes (one per
//    element size 1/2/4/8/16, not per dtype); contiguous inner runs are widened to 16-byte
//    elements, pad's forward writes 16-byte chunks along the padded rows, and a copy whose
//    innermost axis changes goes through a shared-memory tiled transpose.
//  - gather: output slice l reads the input slice the index names (gather, index_select,
//    embedding): byte movers too; rows of >= 32 words move a warp per row, and torch.gather
//    along a unit-stride source dim stages each source line in shared memory.
//  - scatter: output slice key(l) accumulates input slice l (sum, max, min) or takes it (assign,
//    byte movers). Sums and assignments have two
//    implementations: atomics (default; rows of >= 8 elements by lane groups that combine runs
//    of equal indices before their atomics), or, when PlanPreference::require_deterministic or
//    require_bit_stable is set, a stable radix sort of the destinations followed by one thread
//    per (destination, element) summing its sources in index order (bit-identical run to run).
//
// Out-of-range indices (and negative ones, except for JAX-style segment ops which drop them as
// JAX does) are never dereferenced: the element is skipped (gather writes zero) and, when
// IndexArgs::error is given (a device int32 scalar the caller zeroes), the kernel stores 1 there.
// The plan never reads the flag back: checking it is the caller's choice (torch's asynchronous
// device-side assert semantics; the Python layer checks it after the call by default).
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
#include "baracuda/ops/elementwise.hpp"  // Shape

namespace baracuda {

enum class IndexOp : uint8_t {
#define BARACUDA_INDEX(name, ...) name,
#include "baracuda/ops/index_ops.def"
#undef BARACUDA_INDEX
};

enum class IndexEngine : uint8_t { copy, gather, scatter };

/// One row of index_ops.def.
struct IndexOpInfo {
  IndexOp op;
  const char* name;
  IndexEngine engine;
  DTypeSet fw_dtypes;
  DTypeSet bw_dtypes;  ///< 0: no backward plan (composed from forward ops in Python)
  bool takes_index;
};

std::span<const IndexOpInfo> index_ops();
const IndexOpInfo& info(IndexOp op);
std::optional<IndexOp> index_op_from_name(std::string_view name);

/// torch.nn.functional.pad's modes.
enum class PadMode : uint8_t { constant, reflect, replicate, circular };
const char* to_string(PadMode m);
std::optional<PadMode> pad_mode_from_name(std::string_view name);

struct IndexDesc {
  IndexOp op = IndexOp::copy;
  Direction direction = Direction::Forward;
  DType dtype = DType::f32;        ///< every data tensor (x, src, inputs, out)
  DType index_dtype = DType::s64;  ///< s32 or s64 (ops that read an index)
  Shape in_shape{};     ///< x: copy input, gather source, scatter self / data, embedding weight (fw) or dy (bw)
  Shape out_shape{};    ///< derived by the factories below
  Shape index_shape{};  ///< ops with an index
  Shape src_shape{};    ///< scatter_add / index_add: the source
  int dim = 0;          ///< cat/stack/gather/index_select/scatter_add/index_add: the axis (>= 0)
  int num_inputs = 0;   ///< cat/stack
  PadMode pad_mode = PadMode::constant;
  std::array<int64_t, 2 * kMaxRank> pad{};  ///< (before, after) per dim of in_shape, in dim order
  double value = 0;                         ///< constant pad's fill
  std::array<int64_t, kMaxRank> shifts{};   ///< roll: shift per dim (any sign)
  std::array<int64_t, kMaxRank> repeats{};  ///< tile: repetitions per dim; repeat_interleave: repeats[dim]
  uint32_t flip_dims = 0;                   ///< flip: bit d set = dim d reversed
  int64_t diagonal = 0;                     ///< triu/tril (the last two dims)
  int64_t padding_idx = -1;                 ///< embedding: row whose gradient stays zero (-1: none)
  int64_t num_segments = 0;                 ///< segment ops

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
  /// out = dense grad_weight [N, D] (rows == padding_idx stay zero). `num_weights` = N.
  static IndexDesc embedding(DType dt, DType it, int64_t num_weights, int64_t embedding_dim, const Shape& index_shape,
                             int64_t padding_idx = -1, Direction dir = Direction::Forward);
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
};

/// Per-call tensors (which ones an op reads: see IndexDesc's factories; unused ones stay
/// default-constructed and are refused when given).
struct IndexArgs {
  TensorRef x;                        ///< main input (see IndexDesc::in_shape)
  TensorRef src;                      ///< scatter_add / index_add source
  TensorRef index;                    ///< s32 or s64
  std::span<const TensorRef> inputs;  ///< cat / stack
  TensorMut out;
  TensorMut error;  ///< optional int32 scalar: set to 1 on an out-of-range index
};

class IndexPlan {
 public:
  /// Validates the descriptor. Preferences: backend other than Any/Native, tf32=Require and
  /// reduced_precision_reduction=Require are refused; require_deterministic /
  /// require_bit_stable select the sorted path of sum-scatters (the other ops are deterministic
  /// and bit-stable: every output element is written by one thread from one fixed set of
  /// inputs, or, for max, the result does not depend on the order); vectorized=Forbid disables
  /// the widening of contiguous runs and shows in the layout.
  static Result<IndexPlan> select(const Target& target, const IndexDesc& desc, const PlanPreference& pref = {});
  /// Sorted scatter: keys, positions and the radix sort's scratch; 0 otherwise.
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
  /// "scatter-atomic-rows", "scatter-sorted", "scatter-copy", "scatter-sorted-copy", "empty" (cat
  /// and stack join the variants of their copies with '+').
  std::string layout_for(const IndexArgs& args) const;

 private:
  IndexDesc desc_;
  KernelSku sku_;
  size_t workspace_bytes_ = 0;
  bool sorted_ = false;
  bool allow_vectorized_ = true;
};

/// A small descriptor of `op` that select() accepts whenever the dtypes are declared (input
/// [4, 8]); the coverage listing and the host tests probe with it.
IndexDesc index_probe(IndexOp op, DType dt, DType index_dtype, Direction dir = Direction::Forward);

/// One-line convenience: select (cached per thread by descriptor) and run.
Result<void> index(cudaStream_t stream, const IndexDesc& desc, const IndexArgs& args, Workspace ws = {},
                   const PlanPreference& pref = {});

}  // namespace baracuda
