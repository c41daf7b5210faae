// IndexPlan: descriptor validation, argument checks and the lowering of every op of the
// indexing family onto its engine (index_launch.hpp): the mapped copy, the gather, the scatter.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "baracuda/ops/index.hpp"
#include "core/impl_list.hpp"
#include "core/operands.hpp"
#include "core/plan_common.hpp"
#include "ops/index/index_launch.hpp"
#include "ops/index/index_plan.hpp"

namespace baracuda {

// ---- the table -------------------------------------------------------------------------------
namespace {
const IndexOpInfo kOps[] = {
#define BARACUDA_INDEX(name, engine, fw, bw, index, flag) \
  {IndexOp::name, #name, IndexEngine::engine, DTypeSet(fw), DTypeSet(bw), (index) != 0, (flag) != 0},
#include "baracuda/ops/index_ops.def"
#undef BARACUDA_INDEX
};

using detail::dtype_list;
using detail::invalid;
using detail::unsupported;
using detail::idx::is_assign;
using detail::idx::linearized_slices;
using detail::idx::reduction_of;
using detail::idx::select_tiles;
std::string dname(DType t) { return std::string(name(t)); }
std::string str(int64_t v) { return std::to_string(v); }

std::string op_label(const IndexDesc& d) {
  return std::string(info(d.op).name) + (d.direction == Direction::Backward ? "_backward" : "");
}
bool is_segment(IndexOp op) {
  return op == IndexOp::segment_sum || op == IndexOp::segment_max || op == IndexOp::segment_min ||
         op == IndexOp::segment_prod || op == IndexOp::segment_mean;
}
bool is_lax(IndexOp op) { return op == IndexOp::lax_gather || op == IndexOp::lax_scatter; }
/// Dtypes with atomics of their width: the others reduce on the sorted path only.
constexpr DTypeSet kAtomicDTypes = dtypes::kFloat | bit(DType::s32) | bit(DType::s64);
/// Dtypes of the reductions (sum, prod, mean, amax, amin) of every reducing scatter.
constexpr DTypeSet kReduceDTypes = kAtomicDTypes | bit(DType::s8) | bit(DType::u8) | bit(DType::s16);
}  // namespace

std::span<const IndexOpInfo> index_ops() { return kOps; }
const IndexOpInfo& info(IndexOp op) { return kOps[static_cast<int>(op)]; }
std::optional<IndexOp> index_op_from_name(std::string_view n) {
  for (const auto& r : kOps)
    if (n == r.name) return r.op;
  return std::nullopt;
}

const char* to_string(PadMode m) {
  switch (m) {
    case PadMode::constant:
      return "constant";
    case PadMode::reflect:
      return "reflect";
    case PadMode::replicate:
      return "replicate";
    case PadMode::circular:
      return "circular";
  }
  return "?";
}
std::optional<PadMode> pad_mode_from_name(std::string_view n) {
  for (PadMode m : {PadMode::constant, PadMode::reflect, PadMode::replicate, PadMode::circular})
    if (n == to_string(m)) return m;
  return std::nullopt;
}

const char* to_string(ScatterReduce r) {
  switch (r) {
    case ScatterReduce::sum:
      return "sum";
    case ScatterReduce::prod:
      return "prod";
    case ScatterReduce::mean:
      return "mean";
    case ScatterReduce::amax:
      return "amax";
    case ScatterReduce::amin:
      return "amin";
    case ScatterReduce::none:
      return "none";
  }
  return "?";
}
std::optional<ScatterReduce> scatter_reduce_from_name(std::string_view n) {
  for (ScatterReduce r : {ScatterReduce::sum, ScatterReduce::prod, ScatterReduce::mean, ScatterReduce::amax,
                          ScatterReduce::amin, ScatterReduce::none})
    if (n == to_string(r)) return r;
  return std::nullopt;
}

const char* to_string(IndexMode m) {
  switch (m) {
    case IndexMode::clip:
      return "clip";
    case IndexMode::fill:
      return "fill";
    case IndexMode::check:
      return "check";
  }
  return "?";
}
std::optional<IndexMode> index_mode_from_name(std::string_view n) {
  for (IndexMode m : {IndexMode::clip, IndexMode::fill, IndexMode::check})
    if (n == to_string(m)) return m;
  return std::nullopt;
}

// ---- descriptor factories ------------------------------------------------------------------------
namespace {
IndexDesc base(IndexOp op, DType dt, const Shape& in) {
  IndexDesc d;
  d.op = op;
  d.dtype = dt;
  d.in_shape = in;
  d.out_shape = in;
  return d;
}
}  // namespace

IndexDesc IndexDesc::copy(DType dt, const Shape& shape) { return base(IndexOp::copy, dt, shape); }

IndexDesc IndexDesc::cat(DType dt, const Shape& out_shape, int dim, int num_inputs) {
  IndexDesc d = base(IndexOp::cat, dt, out_shape);
  d.dim = dim;
  d.num_inputs = num_inputs;
  return d;
}

IndexDesc IndexDesc::stack(DType dt, const Shape& in_shape, int dim, int num_inputs) {
  IndexDesc d = base(IndexOp::stack, dt, in_shape);
  d.dim = dim;
  d.num_inputs = num_inputs;
  if (in_shape.rank >= 0 && in_shape.rank < kMaxRank && dim >= 0 && dim <= in_shape.rank) {
    d.out_shape.rank = in_shape.rank + 1;
    for (int i = 0, j = 0; i < d.out_shape.rank; ++i) d.out_shape.dims[i] = i == dim ? num_inputs : in_shape.dims[j++];
  }
  return d;
}

IndexDesc IndexDesc::pad_nd(DType dt, const Shape& in_shape, std::span<const int64_t> pads, PadMode mode, double value,
                            Direction dir) {
  IndexDesc d = base(IndexOp::pad, dt, in_shape);
  d.direction = dir;
  d.pad_mode = mode;
  d.value = value;
  for (size_t i = 0; i < pads.size() && i < d.pad.size(); ++i) d.pad[i] = pads[i];
  d.num_inputs = static_cast<int>(pads.size());  // checked by select: 2 * rank
  for (int i = 0; i < in_shape.rank && i < kMaxRank; ++i) d.out_shape.dims[i] += d.pad[2 * i] + d.pad[2 * i + 1];
  if (dir == Direction::Backward) std::swap(d.in_shape, d.out_shape);  // x = padded grad, out = input grad
  return d;
}

IndexDesc IndexDesc::flip(DType dt, const Shape& shape, uint32_t dims) {
  IndexDesc d = base(IndexOp::flip, dt, shape);
  d.flip_dims = dims;
  return d;
}

IndexDesc IndexDesc::roll(DType dt, const Shape& shape, std::span<const int64_t> shifts) {
  IndexDesc d = base(IndexOp::roll, dt, shape);
  for (size_t i = 0; i < shifts.size() && i < d.shifts.size(); ++i) d.shifts[i] = shifts[i];
  d.num_inputs = static_cast<int>(shifts.size());
  return d;
}

IndexDesc IndexDesc::tile(DType dt, const Shape& in_shape, std::span<const int64_t> repeats) {
  IndexDesc d = base(IndexOp::tile, dt, in_shape);
  for (size_t i = 0; i < repeats.size() && i < d.repeats.size(); ++i) d.repeats[i] = repeats[i];
  d.num_inputs = static_cast<int>(repeats.size());
  for (int i = 0; i < in_shape.rank && i < kMaxRank; ++i) {
    int64_t v = 0;
    if (!__builtin_mul_overflow(in_shape.dims[i], d.repeats[i], &v))
      d.out_shape.dims[i] = v;
    else
      d.out_shape.dims[i] = -1;  // refused by select
  }
  return d;
}

IndexDesc IndexDesc::triu(DType dt, const Shape& shape, int64_t diagonal) {
  IndexDesc d = base(IndexOp::triu, dt, shape);
  d.diagonal = diagonal;
  return d;
}

IndexDesc IndexDesc::tril(DType dt, const Shape& shape, int64_t diagonal) {
  IndexDesc d = base(IndexOp::tril, dt, shape);
  d.diagonal = diagonal;
  return d;
}

IndexDesc IndexDesc::gather(DType dt, DType it, const Shape& in_shape, const Shape& index_shape, int dim) {
  IndexDesc d = base(IndexOp::gather, dt, in_shape);
  d.index_dtype = it;
  d.index_shape = index_shape;
  d.out_shape = index_shape;
  d.dim = dim;
  return d;
}

IndexDesc IndexDesc::index_select(DType dt, DType it, const Shape& in_shape, int64_t count, int dim) {
  IndexDesc d = base(IndexOp::index_select, dt, in_shape);
  d.index_dtype = it;
  d.index_shape = Shape::of({count});
  d.dim = dim;
  if (dim >= 0 && dim < in_shape.rank) d.out_shape.dims[dim] = count;
  return d;
}

IndexDesc IndexDesc::embedding(DType dt, DType it, int64_t num_weights, int64_t embedding_dim, const Shape& index_shape,
                               int64_t padding_idx, Direction dir, bool scale_grad_by_freq) {
  IndexDesc d;
  d.op = IndexOp::embedding;
  d.direction = dir;
  d.scale_grad_by_freq = scale_grad_by_freq;
  d.dtype = dt;
  d.index_dtype = it;
  d.index_shape = index_shape;
  d.padding_idx = padding_idx;
  Shape rows = index_shape;
  if (rows.rank >= 0 && rows.rank < kMaxRank)
    rows.dims[rows.rank++] = embedding_dim;
  else
    rows.rank = -1;  // refused by select
  const Shape table = Shape::of({num_weights, embedding_dim});
  d.in_shape = dir == Direction::Forward ? table : rows;
  d.out_shape = dir == Direction::Forward ? rows : table;
  return d;
}

IndexDesc IndexDesc::scatter_add(DType dt, DType it, const Shape& self_shape, const Shape& index_shape,
                                 const Shape& src_shape, int dim) {
  IndexDesc d = base(IndexOp::scatter_add, dt, self_shape);
  d.index_dtype = it;
  d.index_shape = index_shape;
  d.src_shape = src_shape;
  d.dim = dim;
  return d;
}

IndexDesc IndexDesc::index_add(DType dt, DType it, const Shape& self_shape, const Shape& src_shape, int dim) {
  IndexDesc d = base(IndexOp::index_add, dt, self_shape);
  d.index_dtype = it;
  d.src_shape = src_shape;
  d.dim = dim;
  d.index_shape = Shape::of({dim >= 0 && dim < src_shape.rank ? src_shape.dims[dim] : 0});
  return d;
}

IndexDesc IndexDesc::scatter(DType dt, DType it, const Shape& self_shape, const Shape& index_shape,
                             const Shape& src_shape, int dim) {
  IndexDesc d = scatter_add(dt, it, self_shape, index_shape, src_shape, dim);
  d.op = IndexOp::scatter;
  return d;
}

IndexDesc IndexDesc::index_copy(DType dt, DType it, const Shape& self_shape, const Shape& src_shape, int dim) {
  IndexDesc d = index_add(dt, it, self_shape, src_shape, dim);
  d.op = IndexOp::index_copy;
  return d;
}

IndexDesc IndexDesc::repeat_interleave(DType dt, const Shape& in_shape, int64_t repeats, int dim) {
  IndexDesc d = base(IndexOp::repeat_interleave, dt, in_shape);
  d.dim = dim;
  for (int i = 0; i < kMaxRank; ++i) d.repeats[i] = 1;
  if (dim >= 0 && dim < in_shape.rank && dim < kMaxRank) {
    d.repeats[dim] = repeats;
    int64_t v = 0;
    d.out_shape.dims[dim] = __builtin_mul_overflow(in_shape.dims[dim], repeats, &v) ? -1 : v;  // -1: refused
  }
  return d;
}

IndexDesc IndexDesc::segment(DType dt, DType it, const Shape& data_shape, int64_t num_segments, IndexOp op) {
  IndexDesc d = base(op, dt, data_shape);
  d.index_dtype = it;
  d.num_segments = num_segments;
  d.index_shape = Shape::of({data_shape.rank >= 1 ? data_shape.dims[0] : 0});
  if (data_shape.rank >= 1) d.out_shape.dims[0] = num_segments;
  return d;
}

IndexDesc IndexDesc::scatter_reduce(DType dt, DType it, const Shape& self_shape, const Shape& index_shape,
                                    const Shape& src_shape, int dim, ScatterReduce reduce, bool include_self) {
  IndexDesc d = scatter_add(dt, it, self_shape, index_shape, src_shape, dim);
  d.op = IndexOp::scatter_reduce;
  d.reduce = reduce;
  d.include_self = include_self;
  return d;
}

namespace {
/// out = [*index_shape, *x.shape[k:]] (rank -1 when that passes 8 dims: refused by select).
Shape indexed_shape(const Shape& x, const Shape& index_shape, int k) {
  Shape o = index_shape;
  if (k < 0 || k > x.rank || index_shape.rank < 0) return o;
  if (index_shape.rank + x.rank - k > kMaxRank) {
    o.rank = -1;
    return o;
  }
  for (int i = k; i < x.rank; ++i) o.dims[o.rank++] = x.dims[i];
  return o;
}

/// A list of at most kMaxRank small ints into a descriptor array; the count keeps the list's
/// length (select refuses more than kMaxRank).
template <class T>
int store_list(std::span<const int> from, std::array<T, kMaxRank>& to) {
  for (size_t i = 0; i < from.size() && i < to.size(); ++i) to[i] = static_cast<T>(from[i]);
  return static_cast<int>(from.size());
}

bool has(std::span<const int8_t> list, int v) {
  for (int8_t x : list)
    if (x == v) return true;
  return false;
}
}  // namespace

IndexDesc IndexDesc::index(DType dt, DType it, const Shape& x_shape, const Shape& index_shape, int num_indices) {
  IndexDesc d = base(IndexOp::index, dt, x_shape);
  d.index_dtype = it;
  d.index_shape = index_shape;
  d.num_indices = num_indices;
  d.mode = IndexMode::check;
  d.out_shape = indexed_shape(x_shape, index_shape, num_indices);
  return d;
}

IndexDesc IndexDesc::index_put(DType dt, DType it, const Shape& self_shape, const Shape& index_shape, int num_indices,
                               bool accumulate) {
  IndexDesc d = base(IndexOp::index_put, dt, self_shape);
  d.index_dtype = it;
  d.index_shape = index_shape;
  d.num_indices = num_indices;
  d.accumulate = accumulate;
  d.mode = IndexMode::check;
  d.src_shape = indexed_shape(self_shape, index_shape, num_indices);
  return d;
}

IndexDesc IndexDesc::one_hot(DType dt, DType it, const Shape& index_shape, int64_t num_classes) {
  IndexDesc d = base(IndexOp::one_hot, dt, Shape{});
  d.index_dtype = it;
  d.index_shape = index_shape;
  d.num_segments = num_classes;
  d.out_shape = index_shape;
  if (index_shape.rank >= 0 && index_shape.rank < kMaxRank)
    d.out_shape.dims[d.out_shape.rank++] = num_classes;
  else
    d.out_shape.rank = -1;  // refused by select
  return d;
}

IndexDesc IndexDesc::nonzero(DType dt, const Shape& shape, int64_t max_count, int64_t fill, SelectPhase phase) {
  IndexDesc d = base(IndexOp::nonzero, dt, shape);
  d.out_shape = Shape::of({max_count, shape.rank});
  d.fill_index = fill;
  d.phase = phase;
  return d;
}

IndexDesc IndexDesc::masked_select(DType dt, const Shape& shape, int64_t max_count, SelectPhase phase) {
  IndexDesc d = base(IndexOp::masked_select, dt, shape);
  d.out_shape = Shape::of({max_count});
  d.phase = phase;
  return d;
}

IndexDesc IndexDesc::masked_scatter(DType dt, const Shape& shape, const Shape& source_shape) {
  IndexDesc d = base(IndexOp::masked_scatter, dt, shape);
  d.src_shape = source_shape;
  return d;
}

IndexDesc IndexDesc::lax_gather(DType dt, DType it, const Shape& operand_shape, const Shape& indices_shape,
                                const GatherDims& dims, std::span<const int64_t> slice_sizes, IndexMode mode,
                                double fill_value) {
  IndexDesc d = base(IndexOp::lax_gather, dt, operand_shape);
  d.index_dtype = it;
  d.index_shape = indices_shape;
  d.mode = mode;
  d.value = fill_value;
  d.num_offset_dims = store_list(dims.offset_dims, d.offset_dims);
  d.num_collapsed_dims = store_list(dims.collapsed_slice_dims, d.collapsed_dims);
  d.num_indices = store_list(dims.start_index_map, d.start_index_map);
  d.index_vector_dim = dims.index_vector_dim < 0 ? std::max(indices_shape.rank - 1, 0) : dims.index_vector_dim;
  for (size_t i = 0; i < slice_sizes.size() && i < d.slice_sizes.size(); ++i) d.slice_sizes[i] = slice_sizes[i];
  d.num_inputs = static_cast<int>(slice_sizes.size());  // checked by select: one per operand dim
  // Output: the batch dims (the indices' dims but index_vector_dim) where offset_dims leaves
  // room, the uncollapsed slice sizes at offset_dims. Inconsistent numbers leave rank -1, and
  // select names what is wrong.
  d.out_shape.rank = -1;
  const int ib = indices_shape.rank - (d.index_vector_dim < indices_shape.rank ? 1 : 0);
  const int rank = ib + d.num_offset_dims;
  if (ib < 0 || rank > kMaxRank || d.num_offset_dims > kMaxRank || d.num_collapsed_dims > kMaxRank ||
      operand_shape.rank < 0 || operand_shape.rank > kMaxRank)
    return d;
  const std::span<const int8_t> offs(d.offset_dims.data(), d.num_offset_dims);
  const std::span<const int8_t> coll(d.collapsed_dims.data(), d.num_collapsed_dims);
  Shape o;
  o.rank = rank;
  int b = 0, s = 0;
  for (int i = 0; i < rank; ++i) {
    if (has(offs, i)) {
      while (s < operand_shape.rank && has(coll, s)) ++s;
      if (s >= operand_shape.rank) return d;
      o.dims[i] = d.slice_sizes[s++];
    } else {
      if (b == d.index_vector_dim) ++b;
      if (b >= indices_shape.rank) return d;
      o.dims[i] = indices_shape.dims[b++];
    }
  }
  d.out_shape = o;
  return d;
}

IndexDesc IndexDesc::lax_scatter(DType dt, DType it, const Shape& operand_shape, const Shape& indices_shape,
                                 const Shape& updates_shape, const ScatterDims& dims, ScatterReduce reduce,
                                 IndexMode mode) {
  IndexDesc d = base(IndexOp::lax_scatter, dt, operand_shape);
  d.index_dtype = it;
  d.index_shape = indices_shape;
  d.src_shape = updates_shape;
  d.reduce = reduce;
  d.mode = mode;
  d.num_offset_dims = store_list(dims.update_window_dims, d.offset_dims);
  d.num_collapsed_dims = store_list(dims.inserted_window_dims, d.collapsed_dims);
  d.num_indices = store_list(dims.scatter_dims_to_operand_dims, d.start_index_map);
  d.index_vector_dim = dims.index_vector_dim < 0 ? std::max(indices_shape.rank - 1, 0) : dims.index_vector_dim;
  return d;
}

// ---- select ----------------------------------------------------------------------------------
namespace {
using detail::check_shape;

Result<void> check_dim(const std::string& label, int dim, int rank) {
  if (dim < 0 || dim >= rank)
    return invalid(label + ": dim expected in [0, " + str(rank) + ") (normalize negative dims first), got " + str(dim));
  return {};
}

/// "[1, 0, 3]" of the first n entries.
template <class T>
std::string list_str(const std::array<T, kMaxRank>& a, int n) {
  std::string s = "[";
  for (int i = 0; i < n && i < kMaxRank; ++i) s += (i ? ", " : "") + str(a[i]);
  return s + "]";
}

/// A list of dims: at most 8, each in [0, bound), strictly increasing when `sorted` (JAX's
/// offset_dims, collapsed_slice_dims, update_window_dims, inserted_window_dims), distinct.
Result<void> check_dim_list(const std::string& label, const char* what, const std::array<int8_t, kMaxRank>& a, int n,
                            int bound, bool sorted) {
  if (n > kMaxRank) return invalid(label + ": " + what + " expected at most 8 entries, got " + str(n));
  for (int i = 0; i < n; ++i) {
    if (a[i] < 0 || a[i] >= bound)
      return invalid(label + ": " + what + " " + list_str(a, n) + " expected entries in [0, " + str(bound) + ")");
    for (int j = 0; j < i; ++j)
      if (sorted ? a[j] >= a[i] : a[j] == a[i])
        return invalid(label + ": " + what + " " + list_str(a, n) + " expected " +
                       (sorted ? "strictly increasing" : "distinct") + " entries");
  }
  return {};
}

/// The dimension numbers of lax_gather / lax_scatter (XLA's rules), before any shape check: a
/// bad list leaves the derived output shape undefined.
Result<void> check_lax(const IndexDesc& d, const std::string& label) {
  const int R = d.in_shape.rank, ir = d.index_shape.rank;
  if (R < 0 || R > kMaxRank) return invalid(label + ": operand rank expected 0..8, got " + str(R));
  if (ir < 0 || ir > kMaxRank) return invalid(label + ": indices rank expected 0..8, got " + str(ir));
  if (d.index_vector_dim < 0 || d.index_vector_dim > ir)
    return invalid(label + ": index_vector_dim expected in [0, " + str(ir) + "], got " + str(d.index_vector_dim));
  const int64_t nc = d.index_vector_dim < ir ? d.index_shape.dims[d.index_vector_dim] : 1;
  const int ib = ir - (d.index_vector_dim < ir ? 1 : 0);
  const bool gather = d.op == IndexOp::lax_gather;
  const char* map_name = gather ? "start_index_map" : "scatter_dims_to_operand_dims";
  if (d.num_indices != nc)
    return invalid(label + ": " + map_name + " expected indices.shape[" + str(d.index_vector_dim) + "]=" + str(nc) +
                   " entries, got " + str(d.num_indices));
  BARACUDA_TRY(check_dim_list(label, map_name, d.start_index_map, d.num_indices, R, false));
  const char* coll_name = gather ? "collapsed_slice_dims" : "inserted_window_dims";
  BARACUDA_TRY(check_dim_list(label, coll_name, d.collapsed_dims, d.num_collapsed_dims, R, true));
  if (gather) {
    if (d.num_inputs != R)
      return invalid(label + ": slice_sizes expected " + str(R) + " values (one per operand dim), got " +
                     str(d.num_inputs));
    for (int i = 0; i < R; ++i)
      if (d.slice_sizes[i] < 0 || d.slice_sizes[i] > d.in_shape.dims[i])
        return invalid(label + ": slice_sizes[" + str(i) + "]=" + str(d.slice_sizes[i]) + " expected in [0, " +
                       str(d.in_shape.dims[i]) + "] (operand shape " + d.in_shape.str() + ")");
    for (int i = 0; i < d.num_collapsed_dims; ++i)
      if (d.slice_sizes[d.collapsed_dims[i]] > 1)
        return invalid(label + ": collapsed dim " + str(d.collapsed_dims[i]) + " expected slice size <= 1, got " +
                       str(d.slice_sizes[d.collapsed_dims[i]]));
    if (d.num_offset_dims != R - d.num_collapsed_dims)
      return invalid(label + ": offset_dims expected " + str(R - d.num_collapsed_dims) +
                     " entries (operand rank - collapsed_slice_dims), got " + str(d.num_offset_dims));
    if (ib + d.num_offset_dims > kMaxRank)
      return invalid(label + ": output rank expected <= 8, got " + str(ib + d.num_offset_dims));
    BARACUDA_TRY(check_dim_list(label, "offset_dims", d.offset_dims, d.num_offset_dims, ib + d.num_offset_dims, true));
    return {};
  }
  const int ur = d.src_shape.rank;
  if (d.num_offset_dims + d.num_collapsed_dims != R)
    return invalid(label + ": update_window_dims (" + str(d.num_offset_dims) + ") and inserted_window_dims (" +
                   str(d.num_collapsed_dims) + ") expected to add up to the operand rank " + str(R));
  if (ur != ib + d.num_offset_dims)
    return invalid(label + ": updates rank expected " + str(ib + d.num_offset_dims) +
                   " (indices batch dims + update_window_dims), got " + str(ur));
  BARACUDA_TRY(check_dim_list(label, "update_window_dims", d.offset_dims, d.num_offset_dims, ur, true));
  const std::span<const int8_t> win(d.offset_dims.data(), d.num_offset_dims);
  const std::span<const int8_t> ins(d.collapsed_dims.data(), d.num_collapsed_dims);
  for (int o = 0, w = 0; o < R; ++o) {  // window sizes fit the operand
    if (has(ins, o)) continue;
    const int64_t ws = d.src_shape.dims[d.offset_dims[w++]];
    if (ws > d.in_shape.dims[o])
      return invalid(label + ": updates window along operand dim " + str(o) + " is " + str(ws) +
                     ", expected <= " + str(d.in_shape.dims[o]));
  }
  for (int u = 0, b = 0; u < ur; ++u) {  // update scatter dims == indices batch dims
    if (has(win, u)) continue;
    if (b == d.index_vector_dim) ++b;
    if (d.src_shape.dims[u] != d.index_shape.dims[b])
      return invalid(label + ": updates.shape[" + str(u) + "]=" + str(d.src_shape.dims[u]) +
                     " expected indices.shape[" + str(b) + "]=" + str(d.index_shape.dims[b]) + " (a scatter dim)");
    ++b;
  }
  return {};
}

Result<void> check_desc(const IndexDesc& d) {
  const auto& in = info(d.op);
  const std::string label = op_label(d);
  if (detail::idx::is_rows_op(d.op)) return detail::idx::check_rows_desc(d, label);  // rows.cpp
  // Counts that would surface later as a negative output size: named first.
  if (is_segment(d.op) && d.num_segments < 0)
    return invalid(label + ": num_segments expected >= 0, got " + str(d.num_segments));
  if (d.op == IndexOp::one_hot && d.num_segments < 0)
    return invalid(label + ": num_classes expected >= 0 (the caller resolves -1 to max + 1), got " +
                   str(d.num_segments));
  if ((d.op == IndexOp::nonzero || d.op == IndexOp::masked_select) && d.out_shape.rank >= 1 && d.out_shape.dims[0] < 0)
    return invalid(label + ": max_count expected >= 0, got " + str(d.out_shape.dims[0]));
  if (d.op == IndexOp::index || d.op == IndexOp::index_put) {
    if (d.in_shape.rank < 1 || d.in_shape.rank > kMaxRank)
      return invalid(label + ": " + (d.op == IndexOp::index ? "x" : "self") + " rank expected 1..8, got " +
                     str(d.in_shape.rank));
    if (d.num_indices < 1 || d.num_indices > d.in_shape.rank)
      return invalid(label + ": index tensors expected 1.." + str(d.in_shape.rank) + " (one per leading dim), got " +
                     str(d.num_indices));
    if (d.index_shape.rank < 0 || d.index_shape.rank > kMaxRank)
      return invalid(label + ": index rank expected 0..8, got " + str(d.index_shape.rank));
    if (d.index_shape.rank + d.in_shape.rank - d.num_indices > kMaxRank)
      return invalid(label + ": indexed rank (index rank " + str(d.index_shape.rank) + " + " +
                     str(d.in_shape.rank - d.num_indices) + " trailing dims) expected <= 8");
    if (d.mode != IndexMode::check)
      return invalid(label + ": mode expected check (torch's advanced indexing), got " + to_string(d.mode));
  }
  if (d.op == IndexOp::one_hot && (d.index_shape.rank < 0 || d.index_shape.rank >= kMaxRank))
    return invalid(label + ": index rank expected 0..7 (the output appends the class dim), got " +
                   str(d.index_shape.rank));
  if (is_lax(d.op)) BARACUDA_TRY(check_lax(d, label));
  if ((d.op == IndexOp::scatter_reduce && d.reduce == ScatterReduce::none) ||
      (d.op == IndexOp::lax_scatter && d.reduce == ScatterReduce::mean))
    return invalid(
        label + ": reduce expected " +
        (d.op == IndexOp::scatter_reduce ? "sum, prod, mean, amax or amin" : "none, sum, prod, amax or amin") +
        ", got " + to_string(d.reduce));
  if (d.op == IndexOp::repeat_interleave && d.dim >= 0 && d.dim < kMaxRank && d.repeats[d.dim] < 0)
    return invalid(label + ": repeats expected >= 0, got " + str(d.repeats[d.dim]));
  if (d.op == IndexOp::tile)
    for (int i = 0; i < kMaxRank; ++i)
      if (d.repeats[i] < 0) return invalid(label + ": repeats[" + str(i) + "] expected >= 0, got " + str(d.repeats[i]));
  BARACUDA_TRY(check_shape(label, "input", d.in_shape));
  BARACUDA_TRY(check_shape(label, "output", d.out_shape));
  if (in.takes_index) {
    BARACUDA_TRY(check_shape(label, "index", d.index_shape));
    if (d.index_dtype != DType::s32 && d.index_dtype != DType::s64)
      return invalid(label + ": index dtype expected int32 or int64, got " + dname(d.index_dtype));
  }
  const int r = d.in_shape.rank;
  switch (d.op) {
    case IndexOp::copy:
      break;
    case IndexOp::cat:
      BARACUDA_TRY(check_dim(label, d.dim, r));
      if (d.num_inputs < 1) return invalid(label + ": num_inputs expected >= 1, got " + str(d.num_inputs));
      break;
    case IndexOp::stack:
      if (d.dim < 0 || d.dim > r) return invalid(label + ": dim expected in [0, " + str(r) + "], got " + str(d.dim));
      if (r >= kMaxRank) return invalid(label + ": input rank expected <= 7 (the output gains a dim), got " + str(r));
      if (d.num_inputs < 1) return invalid(label + ": num_inputs expected >= 1, got " + str(d.num_inputs));
      break;
    case IndexOp::pad: {
      // The forward's input and padded output (swapped in the descriptor for the backward).
      const bool bw = d.direction == Direction::Backward;
      const Shape& fin = bw ? d.out_shape : d.in_shape;
      const Shape& fout = bw ? d.in_shape : d.out_shape;
      if (d.num_inputs != 2 * r)
        return invalid(label + ": pads expected 2 per dim (" + str(2 * r) + " values for input shape " + fin.str() +
                       "), got " + str(d.num_inputs));
      for (int i = 0; i < r; ++i) {
        const int64_t b = d.pad[2 * i], a = d.pad[2 * i + 1], n = fin.dims[i];
        if (fout.dims[i] < 0)
          return invalid(label + ": padded size of dim " + str(i) + " expected >= 0, got " + str(fout.dims[i]));
        if (d.pad_mode != PadMode::constant && (b < 0 || a < 0))
          return invalid(label + ": negative padding (cropping) is supported by constant mode only, got " + str(b) +
                         ", " + str(a) + " on dim " + str(i) + " in " + to_string(d.pad_mode) + " mode");
        if (d.pad_mode == PadMode::reflect && (b >= n || a >= n) && (a | b) != 0)
          return invalid(label + ": reflect padding of dim " + str(i) + " expected < the input size " + str(n) +
                         ", got " + str(b) + ", " + str(a));
        if (d.pad_mode == PadMode::circular && (b > n || a > n))
          return invalid(label + ": circular padding of dim " + str(i) + " expected <= the input size " + str(n) +
                         ", got " + str(b) + ", " + str(a));
        if (d.pad_mode != PadMode::constant && n == 0 && (a | b) != 0)
          return invalid(label + ": " + to_string(d.pad_mode) + " padding of the empty dim " + str(i) +
                         " (input shape " + fin.str() + ")");
      }
      break;
    }
    case IndexOp::flip:
      if (r < 32 && (d.flip_dims >> r) != 0) return invalid(label + ": flip_dims names a dim >= the rank " + str(r));
      break;
    case IndexOp::roll:
      if (d.num_inputs != r)
        return invalid(label + ": shifts expected one per dim (" + str(r) + "), got " + str(d.num_inputs));
      break;
    case IndexOp::tile:
      if (d.num_inputs != r)
        return invalid(label + ": repeats expected one per dim (" + str(r) + "), got " + str(d.num_inputs));
      for (int i = 0; i < r; ++i)
        if (d.repeats[i] < 0 || d.out_shape.dims[i] < 0)
          return invalid(label + ": repeats[" + str(i) + "] expected >= 0 (and a size that fits int64), got " +
                         str(d.repeats[i]));
      break;
    case IndexOp::repeat_interleave:
      BARACUDA_TRY(check_dim(label, d.dim, r));
      if (d.repeats[d.dim] < 0 || d.out_shape.dims[d.dim] < 0)
        return invalid(label + ": repeats expected >= 0 (and a size that fits int64), got " + str(d.repeats[d.dim]));
      break;
    case IndexOp::triu:
    case IndexOp::tril:
      if (r < 2) return invalid(label + ": input rank expected >= 2, got " + str(r));
      break;
    case IndexOp::gather:
      BARACUDA_TRY(check_dim(label, d.dim, std::max(r, 1)));
      if (d.index_shape.rank != r)
        return invalid(label + ": index rank expected " + str(r) + " (the input's), got " + str(d.index_shape.rank));
      for (int i = 0; i < r; ++i)
        if (i != d.dim && d.index_shape.dims[i] > d.in_shape.dims[i])
          return invalid(label + ": index.shape[" + str(i) + "]=" + str(d.index_shape.dims[i]) +
                         " expected <= input.shape[" + str(i) + "]=" + str(d.in_shape.dims[i]));
      if (r == 0) return invalid(label + ": input rank expected >= 1 (view a scalar as [1])");
      break;
    case IndexOp::index_select:
      if (r == 0) return invalid(label + ": input rank expected >= 1 (view a scalar as [1])");
      BARACUDA_TRY(check_dim(label, d.dim, r));
      if (d.index_shape.rank != 1) return invalid(label + ": index rank expected 1, got " + str(d.index_shape.rank));
      break;
    case IndexOp::embedding: {
      const Shape& table = d.direction == Direction::Forward ? d.in_shape : d.out_shape;
      if (table.rank != 2) return invalid(label + ": weight rank expected 2");
      if (d.index_shape.rank > kMaxRank - 1)
        return invalid(label + ": index rank expected <= 7 (the output appends the embedding dim), got " +
                       str(d.index_shape.rank));
      if (d.padding_idx < -1 || d.padding_idx >= table.dims[0])
        return invalid(label + ": padding_idx expected -1 (none) or in [0, " + str(table.dims[0]) +
                       ") (normalize negative values first), got " + str(d.padding_idx));
      break;
    }
    case IndexOp::scatter:
    case IndexOp::scatter_add:
    case IndexOp::scatter_reduce:
      if (r == 0) return invalid(label + ": self rank expected >= 1 (view a scalar as [1])");
      BARACUDA_TRY(check_dim(label, d.dim, r));
      BARACUDA_TRY(check_shape(label, "src", d.src_shape));
      if (d.index_shape.rank != r || d.src_shape.rank != r)
        return invalid(label + ": index and src ranks expected " + str(r) + " (self's), got " +
                       str(d.index_shape.rank) + " and " + str(d.src_shape.rank));
      for (int i = 0; i < r; ++i) {
        if (d.index_shape.dims[i] > d.src_shape.dims[i])
          return invalid(label + ": index.shape[" + str(i) + "]=" + str(d.index_shape.dims[i]) +
                         " expected <= src.shape[" + str(i) + "]=" + str(d.src_shape.dims[i]));
        if (i != d.dim && d.index_shape.dims[i] > d.in_shape.dims[i])
          return invalid(label + ": index.shape[" + str(i) + "]=" + str(d.index_shape.dims[i]) +
                         " expected <= self.shape[" + str(i) + "]=" + str(d.in_shape.dims[i]));
      }
      break;
    case IndexOp::index_copy:
    case IndexOp::index_add:
      if (r == 0) return invalid(label + ": self rank expected >= 1 (view a scalar as [1])");
      BARACUDA_TRY(check_dim(label, d.dim, r));
      BARACUDA_TRY(check_shape(label, "src", d.src_shape));
      if (d.src_shape.rank != r)
        return invalid(label + ": src rank expected " + str(r) + ", got " + str(d.src_shape.rank));
      for (int i = 0; i < r; ++i)
        if (i != d.dim && d.src_shape.dims[i] != d.in_shape.dims[i])
          return invalid(label + ": src.shape[" + str(i) + "]=" + str(d.src_shape.dims[i]) + " expected " +
                         str(d.in_shape.dims[i]) + " (self's)");
      if (d.index_shape.rank != 1 || d.index_shape.dims[0] != d.src_shape.dims[d.dim])
        return invalid(label + ": index expected 1-d with src.shape[dim]=" + str(d.src_shape.dims[d.dim]) +
                       " entries, got shape " + d.index_shape.str());
      break;
    case IndexOp::segment_sum:
    case IndexOp::segment_max:
    case IndexOp::segment_min:
    case IndexOp::segment_prod:
    case IndexOp::segment_mean:
      if (r == 0) return invalid(label + ": data rank expected >= 1, got 0");
      if (d.num_segments < 0) return invalid(label + ": num_segments expected >= 0, got " + str(d.num_segments));
      if (d.index_shape.rank != 1 || d.index_shape.dims[0] != d.in_shape.dims[0])
        return invalid(label + ": segment_ids expected 1-d with data.shape[0]=" + str(d.in_shape.dims[0]) +
                       " entries, got shape " + d.index_shape.str());
      break;
    case IndexOp::index_put:
      BARACUDA_TRY(check_shape(label, "values", d.src_shape));
      break;
    case IndexOp::index:
    case IndexOp::masked_scatter:
      BARACUDA_TRY(check_shape(label, "source", d.src_shape));
      break;
    case IndexOp::lax_scatter:
      BARACUDA_TRY(check_shape(label, "updates", d.src_shape));
      break;
    case IndexOp::one_hot:
    case IndexOp::nonzero:
    case IndexOp::masked_select:
    case IndexOp::lax_gather:
      break;
    case IndexOp::embedding_bag:  // checked by check_rows_desc
    case IndexOp::embedding_renorm:
    case IndexOp::tril_indices:
    case IndexOp::triu_indices:
      break;
  }
  return {};
}

Result<void> native_accepts(const Target& target, const IndexDesc& d, const PlanPreference& pref) {
  const auto& in = info(d.op);
  const std::string label = op_label(d);
  if (pref.backend != Backend::Any && pref.backend != Backend::Native)
    return unsupported(label + ": preference backend=" + to_string(pref.backend) +
                       " cannot be honoured (the indexing family has only the native backend)");
  if (pref.tf32 == Tristate::Require)
    return unsupported(label + ": preference tf32=Require cannot be honoured (no TF32 mode in indexing ops)");
  if (pref.reduced_precision_reduction == Tristate::Require)
    return unsupported(label +
                       ": preference reduced_precision_reduction=Require cannot be honoured (sums accumulate in "
                       "f32, f64 for f64, or atomically in the storage dtype)");
  if (target.sm < 80) return unsupported(label + ": target sm_" + str(target.sm) + " is below the minimum sm_80");
  const bool bw = d.direction == Direction::Backward;
  const DTypeSet allowed = bw ? in.bw_dtypes : in.fw_dtypes;
  if (allowed == 0)
    return unsupported(label + ": " + in.name +
                       " has no backward plan (its gradient is composed from forward ops: see docs/design.md)");
  if (!contains(allowed, d.dtype))
    return unsupported(label + ": dtype expected one of {" + dtype_list(allowed) + "}, got " + dname(d.dtype));
  // Rows that also assign (every dtype) reduce only in the reduction dtypes.
  const ScatterReduce red = reduction_of(d);
  if ((d.op == IndexOp::index_put || d.op == IndexOp::lax_scatter) && red != ScatterReduce::none &&
      !contains(kReduceDTypes, d.dtype))
    return unsupported(
        label + ": " +
        (d.op == IndexOp::index_put ? std::string("accumulate=true") : std::string("reduce=") + to_string(red)) +
        " expects dtype one of {" + dtype_list(kReduceDTypes) + "}, got " + dname(d.dtype));
  return {};
}

struct IndexImpl {
  const char* name;
  Result<void> (*accepts)(const Target&, const IndexDesc&, const PlanPreference&);
};
constexpr IndexImpl kIndexImpls[] = {{"native", native_accepts}};

size_t round256(size_t v) { return (v + 255) / 256 * 256; }
}  // namespace

namespace detail::idx {
int64_t linearized_slices(const IndexDesc& d, bool per_element) {
  if (d.op == IndexOp::index || d.op == IndexOp::index_put) return d.index_shape.numel();
  if (per_element) return d.src_shape.numel();
  // lax ops: the indices' elements but the index vector dim
  int64_t n = 1;
  for (int i = 0; i < d.index_shape.rank && i < kMaxRank; ++i)
    if (i != d.index_vector_dim) n *= d.index_shape.dims[i];
  return n;
}
/// Assignments (bytes move): scatter, index_copy, index_put without accumulate, lax.scatter
/// replacing.
bool is_assign(const IndexDesc& d) {
  return d.op == IndexOp::scatter || d.op == IndexOp::index_copy || (d.op == IndexOp::index_put && !d.accumulate) ||
         (d.op == IndexOp::lax_scatter && d.reduce == ScatterReduce::none);
}
/// The reduction of a reducing scatter (sum for the sums, index_put's accumulate and the
/// reduce field of scatter_reduce / lax_scatter); `none` for assignments and the rest.
ScatterReduce reduction_of(const IndexDesc& d) {
  switch (d.op) {
    case IndexOp::scatter_add:
    case IndexOp::index_add:
    case IndexOp::segment_sum:
      return ScatterReduce::sum;
    case IndexOp::segment_max:
      return ScatterReduce::amax;
    case IndexOp::segment_min:
      return ScatterReduce::amin;
    case IndexOp::segment_prod:
      return ScatterReduce::prod;
    case IndexOp::segment_mean:
      return ScatterReduce::mean;
    case IndexOp::scatter_reduce:
    case IndexOp::lax_scatter:
      return d.reduce;
    case IndexOp::index_put:
      return d.accumulate ? ScatterReduce::sum : ScatterReduce::none;
    default:
      return ScatterReduce::none;
  }
}
bool is_linearized(IndexOp op) {
  return op == IndexOp::index || op == IndexOp::index_put || op == IndexOp::lax_gather || op == IndexOp::lax_scatter;
}
int64_t select_tiles(const IndexDesc& d) {
  const int64_t n = std::max<int64_t>(d.in_shape.numel(), 0);
  return (n + kSelectTile - 1) / kSelectTile;
}
}  // namespace detail::idx

Result<IndexPlan> IndexPlan::select(const Target& target, const IndexDesc& desc, const PlanPreference& pref) {
  if (static_cast<size_t>(desc.op) >= std::size(kOps))
    return invalid("index: op id " + str(static_cast<int>(desc.op)) + " is out of range");
  BARACUDA_TRY(check_desc(desc));
  const std::string label = op_label(desc);
  auto impl = detail::first_accepting<IndexImpl>(label, kIndexImpls, target, desc, pref);
  if (!impl) return impl.error();

  IndexPlan p;
  p.desc_ = desc;
  p.allow_vectorized_ = pref.vectorized != Tristate::Forbid;
  const auto& in = info(desc.op);
  const ScatterReduce red = reduction_of(desc);
  const bool det = pref.require_deterministic || pref.require_bit_stable;
  const bool emb_bw = desc.op == IndexOp::embedding && desc.direction == Direction::Backward;
  const bool scatter = in.engine == IndexEngine::scatter;
  const bool assign = is_assign(desc);
  // The sorted path: asked for determinism (sums, products, assignments: max / min are
  // order-independent, so their atomics already are deterministic); always for means (the run
  // length is the count), for the integers without atomics, and for embedding's backward
  // (torch's is deterministic too, and a sorted run beats bf16 atomics on repeated ids).
  const bool extremum = red == ScatterReduce::amax || red == ScatterReduce::amin;
  p.sorted_ = emb_bw || (scatter && ((det && !extremum) || red == ScatterReduce::mean ||
                                     (!assign && !contains(kAtomicDTypes, desc.dtype))));
  p.linearized_ = detail::idx::is_linearized(desc.op);

  p.sku_.category = "index";
  p.sku_.op = label;
  const std::string dt = dname(desc.dtype), it = dname(desc.index_dtype);
  switch (desc.op) {
    case IndexOp::nonzero:
      p.sku_.dtypes = dt + "->int64";
      break;
    case IndexOp::one_hot:
      p.sku_.dtypes = it + "->" + dt;
      break;
    case IndexOp::masked_select:
    case IndexOp::masked_scatter:
      p.sku_.dtypes = dt + ",bool->" + dt;
      break;
    case IndexOp::tril_indices:
    case IndexOp::triu_indices:
      p.sku_.dtypes = "sizes->" + dt;
      break;
    default:
      p.sku_.dtypes = dt + (in.takes_index ? "," + it : "") + "->" + dt;
  }
  p.sku_.arch = target.sm >= 90 ? "sm_90a" : "sm_80";
  p.sku_.backend = Backend::Native;
  if (detail::idx::is_rows_op(desc.op)) {  // embedding_bag, embedding_renorm, tril/triu_indices
    const detail::idx::RowsChoice c = detail::idx::rows_choice(target, desc, pref);
    p.sorted_ = c.sorted;
    p.sku_.layout = c.layout + (p.allow_vectorized_ ? "" : " (vectorization forbidden)");
    p.sku_.epilogue = c.epilogue;
    auto& pr = p.sku_.precision;
    pr.math = c.math;
    pr.accumulator = c.accumulator;
    pr.deterministic = c.deterministic;
    pr.bit_stable = c.bit_stable;
    pr.note = c.note;
    p.workspace_bytes_ = c.workspace;
    return p;
  }
  p.sku_.layout = std::string(in.engine == IndexEngine::copy     ? "mapped-copy"
                              : in.engine == IndexEngine::gather ? "gather"
                              : in.engine == IndexEngine::select ? "select-tiles"
                              : p.sorted_                        ? "scatter-sorted"
                                                                 : "scatter-atomic") +
                  (p.allow_vectorized_ ? "" : " (vectorization forbidden)");
  if (desc.op == IndexOp::scatter_reduce || desc.op == IndexOp::lax_scatter)
    p.sku_.epilogue = std::string("reduce=") + to_string(desc.reduce) +
                      (desc.op == IndexOp::scatter_reduce && !desc.include_self ? ", include_self=false" : "");
  if (is_lax(desc.op))
    p.sku_.epilogue += std::string(p.sku_.epilogue.empty() ? "" : ", ") + "mode=" + to_string(desc.mode);
  auto& pr = p.sku_.precision;
  pr.math = desc.dtype;
  pr.accumulator = desc.dtype;
  pr.deterministic = true;
  pr.bit_stable = true;
  if (in.engine == IndexEngine::copy) {
    pr.note = desc.op == IndexOp::pad && desc.direction == Direction::Backward
                  ? "each input gradient sums its padded positions in fixed order"
                  : "exact copy (bytes moved, no arithmetic)";
    if (desc.op == IndexOp::pad && desc.direction == Direction::Backward)
      pr.math = pr.accumulator = desc.dtype == DType::f64 ? DType::f64 : DType::f32;
  } else if (in.engine == IndexEngine::gather) {
    pr.note = desc.direction == Direction::Backward ? "" : "exact copy (bytes moved, no arithmetic)";
  } else if (in.engine == IndexEngine::select) {
    pr.note = "exact copy; outputs in row-major order of the selected elements";
  }
  if (scatter || emb_bw) {
    const bool fp = is_floating(desc.dtype);
    const DType acc = fp ? (desc.dtype == DType::f64 ? DType::f64 : DType::f32) : DType::s64;
    if (extremum) {
      pr.note = std::string(p.sorted_ ? "sorted max/min in index order" : "atomic max/min") +
                " (order-independent; NaN wins, as torch's amax/amin)";
    } else if (assign) {
      pr.note = p.sorted_ ? "deterministic: the last duplicate index (in index order) wins"
                          : "duplicate indices: an unspecified one lands (torch: undefined)";
      pr.deterministic = pr.bit_stable = p.sorted_;
    } else if (p.sorted_) {
      pr.math = pr.accumulator = acc;
      pr.note =
          std::string("deterministic: stable radix sort of destinations, ") +
          (red == ScatterReduce::prod   ? "products"
           : red == ScatterReduce::mean ? "sums (the run length is the count)"
                                        : "sums") +
          " in index order" + (det || red == ScatterReduce::mean || emb_bw ? "" : " (no atomics of this width)") +
          (emb_bw && desc.scale_grad_by_freq ? ", each row's sum divided by its id's count (scale_grad_by_freq)" : "");
    } else {
      pr.deterministic = false;
      pr.bit_stable = false;
      pr.note = red == ScatterReduce::prod
                    ? "atomic compare-and-swap products in the storage dtype (order varies run to run)"
                    : "atomic adds in the storage dtype (summation order varies run to run)";
    }
  }
  // Workspace: [linearized offsets][sorted: keys, keys, positions, positions, sort scratch] or
  // [select: tile counts, tile offsets, scan scratch]; every part 256-byte aligned.
  // lax.scatter's sorted path keys elements (its windows may overlap along indexed dims).
  const bool per_element = desc.op == IndexOp::lax_scatter && p.sorted_;
  size_t bytes = 0;
  if (p.linearized_)
    bytes += round256(static_cast<size_t>(std::max<int64_t>(linearized_slices(desc, per_element), 0)) * 8);
  if (p.sorted_) {
    const int64_t n =
        std::max<int64_t>(p.linearized_ ? linearized_slices(desc, per_element) : desc.index_shape.numel(), 0);
    const size_t temp = detail::idx::sort_scratch_bytes(target, n);  // exact on this device, else a bound
    bytes += 4 * round256(static_cast<size_t>(n) * 8) + round256(temp);
    p.sku_.epilogue += std::string(p.sku_.epilogue.empty() ? "" : ", ") + "sorted scatter: " + str(n) + " keys";
  }
  if (in.engine == IndexEngine::select) {
    const int64_t tiles = select_tiles(desc);
    size_t temp = 0;
    bool exact = false;
    if (target.device >= 0) {
      int cur = -1;
      if (cudaGetDevice(&cur) == cudaSuccess && cur == target.device &&
          detail::idx::scan_temp_bytes(std::max<int64_t>(tiles, 1), &temp) == cudaSuccess)
        exact = true;
      else
        (void)cudaGetLastError();
    }
    // Offline: a bound above CUB's decoupled look-back scan state (a few words per 128-item
    // tile and a small fixed part); run() checks the exact need.
    if (!exact) temp = static_cast<size_t>(tiles) * 8 + (size_t{1} << 16);
    bytes += 2 * round256(static_cast<size_t>(tiles) * 8) + round256(temp);
  }
  p.workspace_bytes_ = bytes;
  return p;
}

// ---- argument checks -----------------------------------------------------------------------------
namespace {
bool given(const TensorRef& t) { return t.data != nullptr || t.layout.rank != 0; }
bool given(const TensorMut& t) { return t.data != nullptr || t.layout.rank != 0; }

/// Largest element offset + 1 (0 when empty); fails on negative strides or overflow.
Result<int64_t> footprint(const std::string& label, const char* role, const Layout& l) {
  int64_t span = 0;
  for (int d = 0; d < l.rank; ++d) {
    if (l.stride[d] < 0)
      return invalid(label + ": " + role + " stride[" + str(d) + "] expected >= 0, got " + str(l.stride[d]) +
                     " (negative strides are not supported)");
    if (l.shape[d] == 0) return int64_t{0};
  }
  for (int d = 0; d < l.rank; ++d) {
    int64_t t;
    if (__builtin_mul_overflow(l.shape[d] - 1, l.stride[d], &t) || __builtin_add_overflow(span, t, &span))
      return invalid(label + ": " + role + " footprint overflows 64 bits (shape " + l.shape_str() + ", strides " +
                     l.stride_str() + ")");
  }
  if (span >= (int64_t{1} << 62) / 16) return invalid(label + ": " + role + " footprint overflows 64-bit byte offsets");
  return span + 1;
}

Result<void> check_tensor(const std::string& label, const char* role, const void* data, DType dt, const Layout& l,
                          DType want_dt, const Shape& want) {
  if (dt != want_dt) return invalid(label + ": " + role + " dtype expected " + dname(want_dt) + ", got " + dname(dt));
  if (!(Shape::of(l) == want))
    return invalid(label + ": " + role + " shape expected " + want.str() + ", got " + l.shape_str());
  auto fp = footprint(label, role, l);
  if (!fp) return fp.error();
  if (*fp > 0 && data == nullptr) return invalid(label + ": " + role + " is null but has elements");
  return {};
}

bool same_view(const void* a, const Layout& la, const void* b, const Layout& lb) {
  if (a != b || la.rank != lb.rank) return false;
  for (int d = 0; d < la.rank; ++d) {
    if (la.shape[d] != lb.shape[d]) return false;
    if (la.shape[d] != 1 && la.stride[d] != lb.stride[d]) return false;
  }
  return true;
}

struct Operand {
  const char* role;
  const void* data;
  const Layout* layout;
  int elem_bytes;
};
}  // namespace

Result<void> IndexPlan::can_implement(const IndexArgs& a) const {
  const IndexDesc& d = desc_;
  const std::string label = op_label(d);
  const auto& in = info(d.op);
  if (detail::idx::is_rows_op(d.op)) return detail::idx::check_rows_args(d, a, label);  // rows.cpp
  for (const auto& [t, role] : {std::pair<bool, const char*>{given(a.offsets), "offsets"},
                                {given(a.per_sample_weights), "per_sample_weights"},
                                {given(a.weight), "weight"},
                                {given(a.max_indices), "max_indices"},
                                {given(a.grad_per_sample_weights), "grad_per_sample_weights"}})
    if (t) return invalid(label + ": " + role + " given but only embedding_bag takes it");
  const bool multi = d.op == IndexOp::cat || d.op == IndexOp::stack;
  const bool takes_src = d.op == IndexOp::scatter_add || d.op == IndexOp::index_add || d.op == IndexOp::scatter ||
                         d.op == IndexOp::index_copy || d.op == IndexOp::scatter_reduce || d.op == IndexOp::index_put ||
                         d.op == IndexOp::lax_scatter || d.op == IndexOp::masked_scatter;
  const bool takes_indices = d.op == IndexOp::index || d.op == IndexOp::index_put;
  const bool takes_x = !multi && d.op != IndexOp::one_hot;
  const bool takes_mask = d.op == IndexOp::masked_select || d.op == IndexOp::masked_scatter;
  const bool takes_count = d.op == IndexOp::nonzero || d.op == IndexOp::masked_select;
  const bool takes_out = !(takes_count && d.phase == SelectPhase::count);
  if (given(a.index) && !(in.takes_index && !takes_indices))
    return invalid(label + ": index given but " + in.name +
                   (takes_indices ? " reads `indices` (one tensor per leading dim)" : " takes none"));
  if (!a.indices.empty() && !takes_indices)
    return invalid(label + ": indices given but only index/index_put take a list of index tensors");
  if (given(a.src) && !takes_src) return invalid(label + ": src given but " + in.name + " takes none");
  if (!a.inputs.empty() && !multi) return invalid(label + ": inputs given but only cat/stack take a list");
  if (given(a.x) && multi) return invalid(label + ": x given but cat/stack read `inputs`");
  if (given(a.x) && !takes_x) return invalid(label + ": x given but " + in.name + " reads `index` only");
  if (given(a.mask) && !takes_mask) return invalid(label + ": mask given but " + in.name + " takes none");
  if (given(a.count) && !takes_count) return invalid(label + ": count given but " + in.name + " writes none");
  if (given(a.out) && !takes_out)
    return invalid(label + ": out given to the count phase (it writes only `count`; pass out to the write phase)");
  if (given(a.error) && !in.takes_index && !in.reports_errors)
    return invalid(label + ": error flag given but " + in.name + " reads no index");

  std::vector<Operand> inputs;
  const int eb = size_in_bytes(d.dtype);
  const DType out_dt = d.op == IndexOp::nonzero ? DType::s64 : d.dtype;
  const int out_eb = size_in_bytes(out_dt);
  if (multi) {
    if (static_cast<int>(a.inputs.size()) != d.num_inputs)
      return invalid(label + ": inputs expected " + str(d.num_inputs) + " tensors, got " + str(a.inputs.size()));
    int64_t total = 0;
    for (size_t k = 0; k < a.inputs.size(); ++k) {
      const TensorRef& t = a.inputs[k];
      const std::string role = "inputs[" + str(static_cast<int64_t>(k)) + "]";
      Shape want = d.in_shape;
      if (d.op == IndexOp::cat) {
        if (t.layout.rank != d.out_shape.rank)
          return invalid(label + ": " + role + " rank expected " + str(d.out_shape.rank) + ", got " +
                         str(t.layout.rank));
        want.dims[d.dim] = t.layout.shape[d.dim];
        total += t.layout.shape[d.dim];
      }
      BARACUDA_TRY(check_tensor(label, role.c_str(), t.data, t.dtype, t.layout, d.dtype, want));
      inputs.push_back({"inputs", t.data, &t.layout, eb});
    }
    if (d.op == IndexOp::cat && total != d.out_shape.dims[d.dim])
      return invalid(label + ": inputs' sizes along dim " + str(d.dim) + " sum to " + str(total) + ", expected " +
                     str(d.out_shape.dims[d.dim]) + " (output shape " + d.out_shape.str() + ")");
  } else if (takes_x) {
    BARACUDA_TRY(check_tensor(label, "x", a.x.data, a.x.dtype, a.x.layout, d.dtype, d.in_shape));
    inputs.push_back({"x", a.x.data, &a.x.layout, eb});
  }
  if (takes_src) {
    BARACUDA_TRY(check_tensor(label, "src", a.src.data, a.src.dtype, a.src.layout, d.dtype, d.src_shape));
    inputs.push_back({"src", a.src.data, &a.src.layout, eb});
  }
  if (takes_mask) {
    BARACUDA_TRY(check_tensor(label, "mask", a.mask.data, a.mask.dtype, a.mask.layout, DType::b8, d.in_shape));
    inputs.push_back({"mask", a.mask.data, &a.mask.layout, 1});
  }
  if (takes_indices) {
    if (static_cast<int>(a.indices.size()) != d.num_indices)
      return invalid(label + ": indices expected " + str(d.num_indices) + " tensors, got " + str(a.indices.size()));
    for (size_t k = 0; k < a.indices.size(); ++k) {
      const TensorRef& t = a.indices[k];
      const std::string role = "indices[" + str(static_cast<int64_t>(k)) + "]";
      BARACUDA_TRY(check_tensor(label, role.c_str(), t.data, t.dtype, t.layout, d.index_dtype, d.index_shape));
      inputs.push_back({"indices", t.data, &t.layout, size_in_bytes(d.index_dtype)});
    }
  } else if (in.takes_index) {
    BARACUDA_TRY(
        check_tensor(label, "index", a.index.data, a.index.dtype, a.index.layout, d.index_dtype, d.index_shape));
    inputs.push_back({"index", a.index.data, &a.index.layout, size_in_bytes(d.index_dtype)});
  }
  const Layout& ol = a.out.layout;
  if (takes_out) {
    BARACUDA_TRY(check_tensor(label, "out", a.out.data, a.out.dtype, ol, out_dt, d.out_shape));
    if (ol.numel() > 1 && (ol.has_zero_stride() || ol.has_internal_overlap()))
      return invalid(label + ": out overlaps itself (shape " + ol.shape_str() + ", strides " + ol.stride_str() +
                     "); give a dense or non-overlapping view");
  }
  if (given(a.error)) {
    if (a.error.dtype != DType::s32 || a.error.numel() != 1 || a.error.data == nullptr)
      return invalid(label + ": error flag expected a non-null int32 tensor of one element, got " +
                     dname(a.error.dtype) + " " + a.error.layout.shape_str());
  }
  if (given(a.count)) {
    if (a.count.dtype != DType::s64 || a.count.numel() != 1 || a.count.data == nullptr)
      return invalid(label + ": count expected a non-null int64 tensor of one element, got " + dname(a.count.dtype) +
                     " " + a.count.layout.shape_str());
  }
  // Outputs never overlap inputs, except exact in-place where every element is read before
  // it is written by the same thread (triu/tril, copy) or accumulated into (scatter self).
  const bool inplace_ok = d.op == IndexOp::copy || d.op == IndexOp::triu || d.op == IndexOp::tril || takes_src;
  if (takes_out)
    for (const Operand& o : inputs) {
      if (o.layout->numel() == 0 || ol.numel() == 0) continue;
      const bool exact = std::string_view(o.role) == "x" && same_view(o.data, *o.layout, a.out.data, ol);
      if (exact && inplace_ok && o.elem_bytes == out_eb) continue;
      bool clash;
      if (o.elem_bytes == out_eb) {
        clash = views_may_overlap(o.data, *o.layout, a.out.data, ol, out_eb);
      } else {  // an index of another width: conservative byte ranges
        auto fo = footprint(label, o.role, *o.layout);
        auto fu = footprint(label, "out", ol);
        const auto lo1 = reinterpret_cast<uintptr_t>(o.data), hi1 = lo1 + static_cast<uintptr_t>(*fo) * o.elem_bytes;
        const auto lo2 = reinterpret_cast<uintptr_t>(a.out.data), hi2 = lo2 + static_cast<uintptr_t>(*fu) * out_eb;
        clash = lo1 < hi2 && lo2 < hi1;
      }
      if (clash)
        return invalid(label + ": out overlaps " + o.role + (exact ? " (in-place is not supported by this op)" : "") +
                       "; give a separate output");
    }
  // The flag and the count are written too: they must not land in an input, out or each other.
  const auto hits = [&](uintptr_t p, uintptr_t bytes, const void* data, const Layout& l, int elem) {
    auto f = footprint(label, "tensor", l);
    const auto lo = reinterpret_cast<uintptr_t>(data);
    return *f > 0 && p + bytes > lo && p < lo + static_cast<uintptr_t>(*f) * elem;
  };
  for (const auto& [t, name, bytes] : {std::tuple<const TensorMut*, const char*, uintptr_t>{&a.error, "error flag", 4},
                                       std::tuple<const TensorMut*, const char*, uintptr_t>{&a.count, "count", 8}}) {
    if (!given(*t)) continue;
    const auto e = reinterpret_cast<uintptr_t>(t->data);
    for (const Operand& o : inputs)
      if (hits(e, bytes, o.data, *o.layout, o.elem_bytes)) return invalid(label + ": " + name + " overlaps " + o.role);
    if (takes_out && hits(e, bytes, a.out.data, ol, out_eb)) return invalid(label + ": " + name + " overlaps out");
  }
  if (given(a.error) && given(a.count) &&
      hits(reinterpret_cast<uintptr_t>(a.error.data), 4, a.count.data, a.count.layout, 8))
    return invalid(label + ": error flag overlaps count");
  return {};
}
}  // namespace baracuda
