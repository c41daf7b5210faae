// The ops of the rows and generate engines (index_ops.def): embedding_bag (fused forward,
// backward), embedding_renorm (max_norm) and tril/triu_indices. Their factories, descriptor
// checks, plan choices (sorted or atomic backward, workspace), argument checks and launches;
// plan.cpp and run.cpp hand these ops over here (index_plan.hpp).
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "baracuda/ops/index.hpp"
#include "core/operands.hpp"
#include "core/plan_common.hpp"
#include "ops/index/index_launch.hpp"
#include "ops/index/index_plan.hpp"

namespace baracuda {

// ---- factories -----------------------------------------------------------------------------------
IndexDesc IndexDesc::embedding_bag(DType dt, DType it, int64_t num_weights, int64_t embedding_dim,
                                   const Shape& index_shape, int64_t num_offsets, ScatterReduce mode,
                                   const EmbeddingBagOptions& opt, Direction dir) {
  IndexDesc d;
  d.op = IndexOp::embedding_bag;
  d.direction = dir;
  d.dtype = dt;
  d.index_dtype = it;
  d.index_shape = index_shape;
  d.reduce = mode;
  d.include_last_offset = opt.include_last_offset;
  d.per_sample_weights = opt.per_sample_weights;
  d.padding_idx = opt.padding_idx;
  d.scale_grad_by_freq = opt.scale_grad_by_freq;
  // Bags: the rows of 2-d ids, else one per offset (the last one only ends the last bag with
  // include_last_offset). A negative count is refused by select.
  d.num_segments = index_shape.rank == 2 ? index_shape.dims[0] : num_offsets - (opt.include_last_offset ? 1 : 0);
  const Shape table = Shape::of({num_weights, embedding_dim});
  const Shape bags = Shape::of({d.num_segments, embedding_dim});
  d.in_shape = dir == Direction::Forward ? table : bags;
  d.out_shape = dir == Direction::Forward ? bags : table;
  return d;
}

IndexDesc IndexDesc::embedding_renorm(DType dt, DType it, int64_t num_weights, int64_t embedding_dim,
                                      const Shape& index_shape, double max_norm, double norm_type) {
  IndexDesc d;
  d.op = IndexOp::embedding_renorm;
  d.dtype = dt;
  d.index_dtype = it;
  d.index_shape = index_shape;
  d.in_shape = d.out_shape = Shape::of({num_weights, embedding_dim});
  d.max_norm = max_norm;
  d.norm_type = norm_type;
  return d;
}

namespace {
IndexDesc tri_indices(IndexOp op, DType dt, int64_t row, int64_t col, int64_t offset) {
  IndexDesc d;
  d.op = op;
  d.dtype = dt;
  d.in_shape = Shape::of({row, col});
  d.diagonal = offset;
  const int64_t n =
      row < 0 || col < 0 ? 0 : detail::idx::tri_indices_geometry(row, col, offset, op == IndexOp::triu_indices).n;
  d.out_shape = Shape::of({2, n});  // n = -1 (overflow) is refused by select
  return d;
}
}  // namespace

IndexDesc IndexDesc::tril_indices(DType dt, int64_t row, int64_t col, int64_t offset) {
  return tri_indices(IndexOp::tril_indices, dt, row, col, offset);
}
IndexDesc IndexDesc::triu_indices(DType dt, int64_t row, int64_t col, int64_t offset) {
  return tri_indices(IndexOp::triu_indices, dt, row, col, offset);
}

namespace detail::idx {
namespace {
std::string str(int64_t v) { return std::to_string(v); }
std::string dname(DType t) { return std::string(name(t)); }
size_t align256(size_t v) { return (v + 255) / 256 * 256; }
bool is_bag(const IndexDesc& d) { return d.op == IndexOp::embedding_bag; }
bool is_tri(IndexOp op) { return op == IndexOp::tril_indices || op == IndexOp::triu_indices; }
const char* mode_name(ScatterReduce r) {
  return r == ScatterReduce::sum ? "sum" : r == ScatterReduce::mean ? "mean" : r == ScatterReduce::amax ? "max" : "?";
}

/// v clamped to [lo, hi] without overflow (offsets may be anywhere in int64).
int64_t clamp_wide(__int128 v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : static_cast<int64_t>(v); }
}  // namespace

TriIndicesParams tri_indices_geometry(int64_t row, int64_t col, int64_t offset, bool upper) {
  TriIndicesParams g;
  g.col = col;
  g.offset = offset;
  g.upper = upper ? 1 : 0;
  if (row <= 0 || col <= 0) return g;  // n = 0
  int64_t all;
  if (__builtin_mul_overflow(row, col, &all)) {
    g.n = -1;
    return g;
  }
  const __int128 k = offset;
  if (!upper) {
    // Row i holds columns [0, clamp(i + offset + 1, 0, col)): empty rows, then a trapezoid whose
    // rows grow by one from r0, then full rows from r1.
    const int64_t r0 = clamp_wide(-k, 0, row);
    const int64_t r1 = clamp_wide(static_cast<__int128>(col) - k - 1, r0, row);
    g.t0 = r0;
    g.R = r1 - r0;
    g.m = g.R > 0 ? static_cast<int64_t>(r0 + k + 1) : 1;  // in [1, col) when R > 0
    g.step = 1;
    g.T = g.R * g.m + g.R * (g.R - 1) / 2;
    g.post_start = r1;
    g.post_rows = row - r1;
  } else {
    // Row i holds columns [clamp(i + offset, 0, col), col): full rows while i + offset <= 0, then a
    // trapezoid whose rows shrink by one, then empty rows.
    const int64_t ra = clamp_wide(1 - k, 0, row);
    const int64_t rb = clamp_wide(static_cast<__int128>(col) - k, ra, row);
    g.pre_rows = ra;
    g.t0 = ra;
    g.R = rb - ra;
    g.m = g.R > 0 ? static_cast<int64_t>(col - ra - k) : 1;  // in [1, col) when R > 0
    g.step = -1;
    g.T = g.R * g.m - g.R * (g.R - 1) / 2;
  }
  g.n = g.pre_rows * col + g.T + g.post_rows * col;
  return g;
}

bool is_rows_op(IndexOp op) {
  const IndexEngine e = info(op).engine;
  return e == IndexEngine::rows || e == IndexEngine::generate;
}

// ---- descriptor checks ---------------------------------------------------------------------------
Result<void> check_rows_desc(const IndexDesc& d, const std::string& label) {
  if (is_tri(d.op)) {
    if (d.in_shape.rank != 2) return invalid(label + ": expected the sizes [row, col]");
    const int64_t row = d.in_shape.dims[0], col = d.in_shape.dims[1];
    if (row < 0) return invalid(label + ": row expected >= 0, got " + str(row));
    if (col < 0) return invalid(label + ": col expected >= 0, got " + str(col));
    // The output follows from (row, col, offset): recomputed, not trusted from the descriptor.
    const int64_t n = tri_indices_geometry(row, col, d.diagonal, d.op == IndexOp::triu_indices).n;
    if (n < 0) return invalid(label + ": row * col = " + str(row) + " * " + str(col) + " overflows int64");
    if (!(d.out_shape == Shape::of({2, n})))
      return invalid(label + ": out_shape expected [2, " + str(n) + "] (the indices of row " + str(row) + ", col " +
                     str(col) + ", offset " + str(d.diagonal) + "), got " + d.out_shape.str());
    if (d.dtype == DType::s32 && std::max(row, col) - 1 > std::numeric_limits<int32_t>::max())
      return invalid(label + ": indices up to " + str(std::max(row, col) - 1) + " expected to fit dtype int32");
    return {};
  }
  if (d.index_dtype != DType::s32 && d.index_dtype != DType::s64)
    return invalid(label + ": index dtype expected int32 or int64, got " + dname(d.index_dtype));
  const bool fw = d.direction == Direction::Forward;
  const Shape& table = fw || d.op == IndexOp::embedding_renorm ? d.in_shape : d.out_shape;
  if (table.rank != 2) return invalid(label + ": weight rank expected 2, got " + str(table.rank));
  BARACUDA_TRY(detail::check_shape(label, "weight", table));
  BARACUDA_TRY(detail::check_shape(label, "index", d.index_shape));
  if (d.op == IndexOp::embedding_renorm) {
    if (!(d.norm_type > 0)) return invalid(label + ": norm_type expected > 0, got " + std::to_string(d.norm_type));
    if (std::isnan(d.max_norm)) return invalid(label + ": max_norm expected a number, got nan");
    return {};
  }
  // embedding_bag
  if (d.index_shape.rank != 1 && d.index_shape.rank != 2)
    return invalid(label + ": input expected 1-d (with offsets) or 2-d (bags x ids), got rank " +
                   str(d.index_shape.rank));
  if (d.index_shape.rank == 2 && d.include_last_offset)
    return invalid(label +
                   ": include_last_offset expects 1-d ids with offsets, got 2-d ids (a bag a row; "
                   "torch.nn.functional.embedding_bag drops the flag for 2-d input)");
  if (d.reduce != ScatterReduce::sum && d.reduce != ScatterReduce::mean && d.reduce != ScatterReduce::amax)
    return invalid(label + ": mode expected sum, mean or max (amax), got " + to_string(d.reduce));
  if (d.num_segments < 0)
    return invalid(label + (d.include_last_offset ? ": include_last_offset expects at least 1 offset, got 0"
                                                  : ": bags expected >= 0, got " + str(d.num_segments)));
  if (d.per_sample_weights && d.reduce != ScatterReduce::sum)
    return invalid(label + ": per_sample_weights expects mode sum, got " + mode_name(d.reduce));
  if (d.scale_grad_by_freq && d.reduce == ScatterReduce::amax)
    return invalid(label + ": scale_grad_by_freq expects mode sum or mean, got max (torch ignores it there)");
  if (d.padding_idx < -1 || d.padding_idx >= table.dims[0])
    return invalid(label + ": padding_idx expected -1 (none) or in [0, " + str(table.dims[0]) +
                   ") (normalize negative values first), got " + str(d.padding_idx));
  const Shape& rows = fw ? d.out_shape : d.in_shape;
  if (rows.rank != 2 || rows.dims[0] != d.num_segments || rows.dims[1] != table.dims[1])
    return invalid(label + ": bag rows expected [" + str(d.num_segments) + ", " + str(table.dims[1]) + "], got " +
                   rows.str());
  return {};
}

// ---- plan choices -------------------------------------------------------------------------------
size_t sort_scratch_bytes(const Target& target, int64_t n, int end_bit) {
  n = std::max<int64_t>(n, 1);
  if (target.device >= 0) {
    int cur = -1;
    size_t temp = 0;
    if (cudaGetDevice(&cur) == cudaSuccess && cur == target.device && sort_temp_bytes(n, end_bit, &temp) == cudaSuccess)
      return temp;
    (void)cudaGetLastError();
  }
  // Offline (or another device current): a bound above CUB's scratch for 64-bit keys with
  // caller-provided double buffers (its histograms and look-back tiles stay well below 8 bytes
  // per item); run() checks the exact need and refuses a smaller workspace.
  return static_cast<size_t>(n) * 8 + (size_t{1} << 20);
}

namespace {
/// Sorted backward of embedding_bag: [keys x2][positions x2][bag of each position][bag sizes
/// (mean)][sort scratch] (sum / mean), or the scatter engine's [keys x2][positions x2][scratch]
/// over the bags x D elements of max_indices (max).
struct BagWs {
  int64_t n = 0;  ///< keys
  int end_bit = 1;
  size_t part = 0, bag_of = 0, sizes = 0, temp = 0;
  size_t total() const { return 4 * part + bag_of + sizes + align256(temp); }
};
BagWs bag_workspace(const IndexDesc& d, int64_t max_reach) {
  BagWs w;
  const int64_t positions = std::max<int64_t>(d.index_shape.numel(), 0);
  if (d.reduce == ScatterReduce::amax) {
    w.n = std::max<int64_t>(d.num_segments, 0) * std::max<int64_t>(d.in_shape.dims[1], 0);
    w.end_bit = std::max(1, static_cast<int>(std::bit_width(static_cast<uint64_t>(std::max<int64_t>(max_reach, 1)))));
  } else {
    w.n = positions;
    w.end_bit = std::max(1, static_cast<int>(std::bit_width(static_cast<uint64_t>(d.out_shape.dims[0]))));
    w.bag_of = align256(static_cast<size_t>(positions) * 8);
    if (d.reduce == ScatterReduce::mean)
      w.sizes = align256(static_cast<size_t>(std::max<int64_t>(d.num_segments, 0)) * 8);
  }
  w.part = align256(static_cast<size_t>(w.n) * 8);
  return w;
}
}  // namespace

RowsChoice rows_choice(const Target& target, const IndexDesc& d, const PlanPreference& pref) {
  RowsChoice c;
  const bool det = pref.require_deterministic || pref.require_bit_stable;
  const bool fp64 = d.dtype == DType::f64;
  const DType acc = fp64 ? DType::f64 : DType::f32;
  if (is_tri(d.op)) {
    c.layout = "tri-indices";
    c.note = "exact integers (closed-form row in double, corrected in int64)";
    c.math = c.accumulator = DType::s64;
    return c;
  }
  if (d.op == IndexOp::embedding_renorm) {
    c.layout = "renorm-rows";
    c.math = c.accumulator = acc;
    c.note = std::string("each referenced row once (claim bits); norm") +
             (std::isinf(d.norm_type) ? "-inf: max |x|" : "-" + std::to_string(d.norm_type)) + " in " + dname(acc) +
             ", scale max_norm / (norm + 1e-7) rounded to the dtype (torch's)";
    c.workspace = align256(renorm_claim_bytes(d.in_shape.dims[0]));
    return c;
  }
  // embedding_bag
  c.math = c.accumulator = acc;
  c.epilogue = std::string("mode=") + mode_name(d.reduce) + (d.per_sample_weights ? ", per_sample_weights" : "") +
               (d.include_last_offset ? ", include_last_offset" : "") +
               (d.padding_idx >= 0 ? ", padding_idx=" + str(d.padding_idx) : "") +
               (d.scale_grad_by_freq && d.direction == Direction::Backward ? ", scale_grad_by_freq" : "");
  if (d.direction == Direction::Forward) {
    c.layout = "bag-forward";
    c.note = d.reduce == ScatterReduce::amax ? "per feature the first largest value (torch's), its id in max_indices"
                                             : std::string("sums in id order in ") + dname(acc) + ", rounded once";
    return c;
  }
  const bool extremum = d.reduce == ScatterReduce::amax;
  // f16 / bf16 never accumulate with atomics of their own width: every add rounds to 11 / 8
  // bits, so a row hit k times carries up to k half-ulps of error (at ~15 hits a row bf16 was
  // 0.19 off, 11x relative where terms cancel). The sorted path sums in f32 and rounds once, as
  // torch's sum / mean backward does (its max backward adds in the storage dtype: we do better
  // there, since a row with large values is the max of every bag holding it).
  const bool narrow = size_in_bytes(d.dtype) < 4;
  c.sorted = det || narrow || (!extremum && d.scale_grad_by_freq);
  const std::string why = det      ? "deterministic: "
                          : narrow ? "no " + dname(d.dtype) + " atomics (they round every add); "
                                   : "";
  if (extremum) {
    c.layout = c.sorted ? "bag-max-scatter-sorted" : "bag-max-scatter-atomic";
    c.note = c.sorted ? why + "dy routed through max_indices, stable radix sort, sums in bag order in " + dname(acc)
                      : "dy routed through max_indices with atomic adds in " + dname(d.dtype) + " (order varies)";
  } else {
    c.layout = c.sorted ? "bag-backward-sorted" : "bag-backward-atomic";
    c.note = c.sorted ? why + "stable radix sort of the ids, one ordered sum per row in " + dname(acc) +
                            (d.scale_grad_by_freq ? ", each term divided by its id's count" : "")
                      : "atomic adds of dy x scale in " + dname(d.dtype) + " (summation order varies run to run)";
  }
  c.deterministic = c.bit_stable = c.sorted;
  if (c.sorted) {
    // max's keys are element offsets into grad_weight; a dense [N, D] bound is enough here (run
    // sizes the radix bits from the real strides and checks the exact need).
    const int64_t reach = d.out_shape.dims[0] * std::max<int64_t>(d.out_shape.dims[1], 1);
    const BagWs w = bag_workspace(d, reach);
    c.workspace = w.total() - align256(w.temp) + align256(sort_scratch_bytes(target, w.n));
    c.epilogue += ", sorted: " + str(w.n) + " keys";
  }
  return c;
}

// ---- argument checks -----------------------------------------------------------------------------
namespace {
Result<void> want(const std::string& label, const char* role, DType dt, const Layout& l, DType want_dt,
                  const Shape& want_shape) {
  if (dt != want_dt) return invalid(label + ": " + role + " dtype expected " + dname(want_dt) + ", got " + dname(dt));
  if (!(Shape::of(l) == want_shape))
    return invalid(label + ": " + role + " shape expected " + want_shape.str() + ", got " + l.shape_str());
  return {};
}
}  // namespace

Result<void> check_rows_args(const IndexDesc& d, const IndexArgs& a, const std::string& label) {
  const bool bag = is_bag(d);
  const bool bw = d.direction == Direction::Backward;
  const bool tri = is_tri(d.op);
  const char* name = info(d.op).name;
  // Roles these ops never read.
  if (given(a.src)) return invalid(label + ": src given but " + name + " takes none");
  if (!a.inputs.empty()) return invalid(label + ": inputs given but only cat/stack take a list");
  if (!a.indices.empty())
    return invalid(label + ": indices given but only index/index_put take a list of index tensors");
  if (given(a.mask)) return invalid(label + ": mask given but " + name + " takes none");
  if (given(a.count)) return invalid(label + ": count given but " + name + " writes none");
  if (tri && given(a.index)) return invalid(label + ": index given but " + name + " takes none");
  if (tri && given(a.error)) return invalid(label + ": error flag given but " + name + " reads no index");
  if ((tri || d.op == IndexOp::embedding_renorm) && given(a.x))
    return invalid(label + ": x given but " + name + (tri ? " reads no tensor" : " updates `out` in place"));
  if (!bag) {
    for (const auto& [t, role] : {std::pair<bool, const char*>{given(a.offsets), "offsets"},
                                  {given(a.per_sample_weights), "per_sample_weights"},
                                  {given(a.weight), "weight"},
                                  {given(a.max_indices), "max_indices"},
                                  {given(a.grad_per_sample_weights), "grad_per_sample_weights"}})
      if (t) return invalid(label + ": " + role + " given but only embedding_bag takes it");
  }

  std::vector<Operand> ops;
  const DType it = d.index_dtype;
  if (tri) {
    BARACUDA_TRY(want(label, "out", a.out.dtype, a.out.layout, d.dtype, d.out_shape));
    ops.push_back({"out", a.out.data, a.out.dtype, &a.out.layout, true, false});
    return check_operands(label, ops);
  }
  BARACUDA_TRY(want(label, "index", a.index.dtype, a.index.layout, it, d.index_shape));
  ops.push_back({"index", a.index.data, a.index.dtype, &a.index.layout, false, false});
  if (given(a.error)) {
    if (a.error.dtype != DType::s32 || a.error.numel() != 1 || a.error.data == nullptr)
      return invalid(label + ": error flag expected a non-null int32 tensor of one element, got " +
                     dname(a.error.dtype) + " " + a.error.layout.shape_str());
    ops.push_back({"error flag", a.error.data, a.error.dtype, &a.error.layout, true, false});
  }
  if (d.op == IndexOp::embedding_renorm) {
    BARACUDA_TRY(want(label, "out (the weight, updated in place)", a.out.dtype, a.out.layout, d.dtype, d.out_shape));
    ops.push_back({"out", a.out.data, a.out.dtype, &a.out.layout, true, false});
    return check_operands(label, ops);
  }
  // embedding_bag
  const bool one_d = d.index_shape.rank == 1;
  if (one_d) {
    const Shape off = Shape::of({d.num_segments + (d.include_last_offset ? 1 : 0)});
    if (!given(a.offsets)) return invalid(label + ": offsets expected for 1-d ids (shape " + off.str() + "), got none");
    BARACUDA_TRY(want(label, "offsets", a.offsets.dtype, a.offsets.layout, it, off));
    ops.push_back({"offsets", a.offsets.data, a.offsets.dtype, &a.offsets.layout, false, false});
  } else if (given(a.offsets)) {
    return invalid(label + ": offsets given but 2-d ids make one bag a row");
  }
  if (d.per_sample_weights) {
    if (!given(a.per_sample_weights))
      return invalid(label + ": per_sample_weights expected (the descriptor says so), got none");
    BARACUDA_TRY(want(label, "per_sample_weights", a.per_sample_weights.dtype, a.per_sample_weights.layout, d.dtype,
                      d.index_shape));
    ops.push_back({"per_sample_weights", a.per_sample_weights.data, a.per_sample_weights.dtype,
                   &a.per_sample_weights.layout, false, false});
  } else if (given(a.per_sample_weights)) {
    return invalid(label + ": per_sample_weights given but the descriptor has none");
  }
  const Shape rows = Shape::of({d.num_segments, bw ? d.in_shape.dims[1] : d.out_shape.dims[1]});
  if (d.reduce == ScatterReduce::amax) {
    if (!given(a.max_indices))
      return invalid(std::string(label) + ": max_indices expected for mode max (" + (bw ? "read" : "written") +
                     ": shape " + rows.str() + ", dtype " + dname(it) + "), got none");
    BARACUDA_TRY(want(label, "max_indices", a.max_indices.dtype, a.max_indices.layout, it, rows));
    ops.push_back({"max_indices", a.max_indices.data, a.max_indices.dtype, &a.max_indices.layout, !bw, false});
  } else if (given(a.max_indices)) {
    return invalid(label + ": max_indices given but mode is " + mode_name(d.reduce));
  }
  if (!bw) {
    if (given(a.weight)) return invalid(label + ": weight given to the forward (the table is x)");
    if (given(a.grad_per_sample_weights)) return invalid(label + ": grad_per_sample_weights given to the forward");
    BARACUDA_TRY(want(label, "x (weight)", a.x.dtype, a.x.layout, d.dtype, d.in_shape));
    ops.push_back({"x", a.x.data, a.x.dtype, &a.x.layout, false, false});
    BARACUDA_TRY(want(label, "out", a.out.dtype, a.out.layout, d.dtype, d.out_shape));
    ops.push_back({"out", a.out.data, a.out.dtype, &a.out.layout, true, false});
    return check_operands(label, ops);
  }
  BARACUDA_TRY(want(label, "x (dy)", a.x.dtype, a.x.layout, d.dtype, d.in_shape));
  ops.push_back({"x", a.x.data, a.x.dtype, &a.x.layout, false, false});
  if (given(a.out)) {
    BARACUDA_TRY(want(label, "out (grad_weight)", a.out.dtype, a.out.layout, d.dtype, d.out_shape));
    ops.push_back({"out", a.out.data, a.out.dtype, &a.out.layout, true, false});
  }
  if (given(a.grad_per_sample_weights)) {
    if (!d.per_sample_weights)
      return invalid(label + ": grad_per_sample_weights given but the descriptor has no per_sample_weights");
    BARACUDA_TRY(want(label, "grad_per_sample_weights", a.grad_per_sample_weights.dtype,
                      a.grad_per_sample_weights.layout, d.dtype, d.index_shape));
    ops.push_back({"grad_per_sample_weights", a.grad_per_sample_weights.data, a.grad_per_sample_weights.dtype,
                   &a.grad_per_sample_weights.layout, true, false});
    if (!given(a.weight))
      return invalid(label + ": weight expected (the table " + d.out_shape.str() +
                     ") for grad_per_sample_weights, got none");
  }
  if (given(a.weight)) {
    if (!given(a.grad_per_sample_weights))
      return invalid(label + ": weight given but only grad_per_sample_weights reads it");
    BARACUDA_TRY(want(label, "weight", a.weight.dtype, a.weight.layout, d.dtype, d.out_shape));
    ops.push_back({"weight", a.weight.data, a.weight.dtype, &a.weight.layout, false, false});
  }
  if (!given(a.out) && !given(a.grad_per_sample_weights))
    return invalid(label + ": expected out (grad_weight) or grad_per_sample_weights, got neither");
  return check_operands(label, ops);
}

// ---- launches ------------------------------------------------------------------------------------
namespace {
BagParams bag_params(const IndexDesc& d, const IndexArgs& a) {
  BagParams p;
  const bool bw = d.direction == Direction::Backward;
  const Layout& il = a.index.layout;
  p.bags = d.num_segments;
  p.ids = a.index.data;
  if (il.rank == 1) {
    p.len = il.shape[0];
    p.id_stride = il.stride[0];
    p.offsets = a.offsets.data;
    p.off_stride = a.offsets.layout.stride[0];
    if (p.offsets == nullptr) p.bags = 0;  // an empty offsets tensor: no bags (d.num_segments is 0 then)
  } else {
    p.len = il.shape[1];
    p.id_stride = il.stride[1];
    p.id_bstride = il.stride[0];
  }
  if (d.per_sample_weights) {
    const Layout& pl = a.per_sample_weights.layout;
    p.psw = a.per_sample_weights.data;
    p.psw_stride = pl.stride[pl.rank - 1];
    p.psw_bstride = pl.rank == 2 ? pl.stride[0] : 0;
  }
  const Shape& table = bw ? d.out_shape : d.in_shape;
  p.num_weights = table.dims[0];
  p.dim = table.dims[1];
  p.padding_idx = d.padding_idx;
  p.mode = d.reduce == ScatterReduce::sum ? kBagSum : d.reduce == ScatterReduce::mean ? kBagMean : kBagMax;
  p.scale_grad_by_freq = d.scale_grad_by_freq ? 1 : 0;
  p.error = static_cast<int*>(a.error.data);
  if (given(a.max_indices)) {
    p.max_indices = a.max_indices.data;
    p.mi_stride0 = a.max_indices.layout.stride[0];
    p.mi_stride1 = a.max_indices.layout.stride[1];
  }
  if (!bw) {
    p.weight = a.x.data;
    p.w_stride0 = a.x.layout.stride[0];
    p.w_stride1 = a.x.layout.stride[1];
    p.out = a.out.data;
    p.out_stride0 = a.out.layout.stride[0];
    p.out_stride1 = a.out.layout.stride[1];
    return p;
  }
  p.dy = a.x.data;
  p.dy_stride0 = a.x.layout.stride[0];
  p.dy_stride1 = a.x.layout.stride[1];
  if (given(a.out) && a.out.numel() > 0) {
    p.grad_weight = a.out.data;
    p.gw_stride0 = a.out.layout.stride[0];
    p.gw_stride1 = a.out.layout.stride[1];
  }
  if (given(a.grad_per_sample_weights)) {
    const Layout& gl = a.grad_per_sample_weights.layout;
    p.grad_psw = a.grad_per_sample_weights.data;
    p.gpsw_stride = gl.stride[gl.rank - 1];
    p.gpsw_bstride = gl.rank == 2 ? gl.stride[0] : 0;
    p.weight = a.weight.data;
    p.w_stride0 = a.weight.layout.stride[0];
    p.w_stride1 = a.weight.layout.stride[1];
  }
  return p;
}

/// max's backward as the scatter engine's element-mode scatter_add of dy into grad_weight along
/// its rows, indexed by max_indices (empty bags hold -1: dropped silently).
Geom max_geometry(const IndexDesc& d, const IndexArgs& a) {
  Geom g;
  const Layout& ml = a.max_indices.layout;
  const Layout& dl = a.x.layout;
  const Layout& ol = a.out.layout;
  g.ri = 2;
  for (int i = 0; i < 2; ++i) {
    g.isize[i] = ml.shape[i];
    g.index_stride[i] = ml.stride[i];
    g.a_istride[i] = dl.stride[i];
  }
  g.b_istride[0] = 0;
  g.b_istride[1] = ol.stride[1];
  g.kstride = ol.stride[0];
  g.ksize = ol.shape[0];
  g.L = ml.shape[0] * ml.shape[1];
  g.P = 1;
  g.skip = d.padding_idx;
  g.report = 0;
  g.index = a.max_indices.data;
  return g;
}

int64_t reach(const Layout& l) {
  int64_t r = 0;
  for (int i = 0; i < l.rank; ++i) {
    if (l.shape[i] == 0) return 0;
    r += (l.shape[i] - 1) * l.stride[i];
  }
  return r + 1;
}

Error cuda_error(const std::string& label, const char* what, cudaError_t e) {
  return make_error(Status::CudaError, label + ": " + what + " failed: " + cudaGetErrorString(e));
}

std::string vec_tag(const BagParams& p, int eb) { return std::to_string(p.vec > 1 ? 16 : eb) + "B"; }
}  // namespace

std::string rows_layout(const IndexDesc& d, bool sorted, bool allow_vec, const IndexArgs& a) {
  if (is_tri(d.op)) return d.out_shape.dims[1] == 0 ? "empty" : "tri-indices";
  if (d.op == IndexOp::embedding_renorm) return a.index.numel() == 0 || a.out.numel() == 0 ? "empty" : "renorm-rows";
  const int eb = size_in_bytes(d.dtype);
  BagParams p = bag_params(d, a);
  const bool bw = d.direction == Direction::Backward;
  p.vec = allow_vec ? bag_vec(p, eb, bw) : 1;
  if (!bw) return p.bags * p.dim == 0 ? "empty" : "bag-forward-" + vec_tag(p, eb);
  std::string s;
  if (p.grad_weight) {
    if (d.reduce == ScatterReduce::amax)
      s = sorted ? "bag-max-scatter-sorted" : "bag-max-scatter-atomic";
    else
      s = std::string(sorted ? "bag-backward-sorted-" : "bag-backward-atomic-") + vec_tag(p, eb);
  }
  if (p.grad_psw) s += (s.empty() ? "" : "+") + std::string("bag-psw-grad-") + vec_tag(p, eb);
  return s.empty() ? "empty" : s;
}

Result<void> run_rows(const IndexDesc& d, bool sorted, bool allow_vec, size_t plan_workspace, cudaStream_t stream,
                      Workspace ws, const IndexArgs& a, const std::string& label) {
  const int eb = size_in_bytes(d.dtype);
  char* w = static_cast<char*>(ws.ptr);
  auto need_ws = [&](size_t need) -> Result<void> {
    need = std::max(need, plan_workspace);
    if (need > 0 && (ws.ptr == nullptr || ws.bytes < need))
      return make_error(Status::WorkspaceTooSmall, label + ": workspace expected >= " + std::to_string(need) +
                                                       " bytes, got " + std::to_string(ws.bytes));
    return {};
  };
  if (is_tri(d.op)) {
    TriIndicesParams p =
        tri_indices_geometry(d.in_shape.dims[0], d.in_shape.dims[1], d.diagonal, d.op == IndexOp::triu_indices);
    p.out = a.out.data;
    p.stride0 = a.out.layout.stride[0];
    p.stride1 = a.out.layout.stride[1];
    if (const cudaError_t e = launch_tri_indices(p, d.dtype, stream); e != cudaSuccess)
      return cuda_error(label, "kernel launch", e);
    return {};
  }
  if (d.op == IndexOp::embedding_renorm) {
    BARACUDA_TRY(need_ws(align256(renorm_claim_bytes(d.in_shape.dims[0]))));
    RenormParams p;
    p.weight = a.out.data;
    p.w_stride0 = a.out.layout.stride[0];
    p.w_stride1 = a.out.layout.stride[1];
    p.num_weights = d.in_shape.dims[0];
    p.dim = d.in_shape.dims[1];
    p.ids = a.index.data;
    p.rank = a.index.layout.rank;
    for (int i = 0; i < p.rank; ++i) {
      p.size[i] = a.index.layout.shape[i];
      p.stride[i] = a.index.layout.stride[i];
    }
    p.L = a.index.numel();
    p.max_norm = d.max_norm;
    p.norm_type = d.norm_type;
    p.claimed = reinterpret_cast<unsigned*>(w);
    p.error = static_cast<int*>(a.error.data);
    if (const cudaError_t e = launch_embedding_renorm(p, d.dtype, d.index_dtype, stream); e != cudaSuccess)
      return cuda_error(label, "kernel launch", e);
    return {};
  }

  // embedding_bag
  BagParams p = bag_params(d, a);
  const bool bw = d.direction == Direction::Backward;
  p.vec = allow_vec ? bag_vec(p, eb, bw) : 1;
  if (!bw) {
    if (const cudaError_t e = launch_bag_forward(p, d.dtype, d.index_dtype, stream); e != cudaSuccess)
      return cuda_error(label, "kernel launch", e);
    return {};
  }
  if (p.grad_weight) {
    // Workspace first: nothing is launched when it is too small.
    BagWs bw_ws;
    if (sorted) {
      bw_ws = bag_workspace(d, reach(a.out.layout));
      if (const cudaError_t e = sort_temp_bytes(std::max<int64_t>(bw_ws.n, 1), bw_ws.end_bit, &bw_ws.temp);
          e != cudaSuccess)
        return cuda_error(label, "radix sort sizing", e);
      BARACUDA_TRY(need_ws(bw_ws.total()));
    } else {
      BARACUDA_TRY(need_ws(0));
    }
    if (const cudaError_t e = fill_zeros(a.out, d.dtype, allow_vec, stream); e != cudaSuccess)
      return cuda_error(label, "grad_weight initialisation", e);
    if (p.bags * p.dim == 0) {
      // nothing reaches grad_weight (an empty offsets tensor leaves no bags at all)
    } else if (d.reduce == ScatterReduce::amax) {
      const Geom g = max_geometry(d, a);
      if (!sorted) {
        if (const cudaError_t e =
                launch_scatter_atomic(g, a.out.data, a.x.data, d.dtype, d.index_dtype, Reduce::sum, stream);
            e != cudaSuccess)
          return cuda_error(label, "kernel launch", e);
      } else if (g.L > 0) {
        const int64_t sentinel = reach(a.out.layout);
        auto* k0 = reinterpret_cast<int64_t*>(w);
        auto* k1 = reinterpret_cast<int64_t*>(w + bw_ws.part);
        auto* v0 = reinterpret_cast<int64_t*>(w + 2 * bw_ws.part);
        auto* v1 = reinterpret_cast<int64_t*>(w + 3 * bw_ws.part);
        if (const cudaError_t e = launch_scatter_keys(g, d.index_dtype, sentinel, k0, v0, stream); e != cudaSuccess)
          return cuda_error(label, "key kernel launch", e);
        int which = 0;
        if (const cudaError_t e = sort_pairs(w + 4 * bw_ws.part, ws.bytes - 4 * bw_ws.part, k0, k1, v0, v1, g.L,
                                             bw_ws.end_bit, &which, stream);
            e != cudaSuccess)
          return cuda_error(label, "radix sort", e);
        if (const cudaError_t e = launch_scatter_sorted(g, which ? k1 : k0, which ? v1 : v0, sentinel, a.out.data,
                                                        a.x.data, d.dtype, Reduce::sum, true, stream);
            e != cudaSuccess)
          return cuda_error(label, "kernel launch", e);
      }
    } else if (!sorted) {
      if (const cudaError_t e = launch_bag_backward_atomic(p, d.dtype, d.index_dtype, stream); e != cudaSuccess)
        return cuda_error(label, "kernel launch", e);
    } else if (bw_ws.n > 0) {
      auto* k0 = reinterpret_cast<int64_t*>(w);
      auto* k1 = reinterpret_cast<int64_t*>(w + bw_ws.part);
      auto* v0 = reinterpret_cast<int64_t*>(w + 2 * bw_ws.part);
      auto* v1 = reinterpret_cast<int64_t*>(w + 3 * bw_ws.part);
      auto* bag_of = reinterpret_cast<int64_t*>(w + 4 * bw_ws.part);
      auto* sizes = bw_ws.sizes ? reinterpret_cast<int64_t*>(w + 4 * bw_ws.part + bw_ws.bag_of) : nullptr;
      char* temp = w + 4 * bw_ws.part + bw_ws.bag_of + bw_ws.sizes;
      if (const cudaError_t e = launch_bag_keys(p, d.index_dtype, k0, v0, bag_of, sizes, stream); e != cudaSuccess)
        return cuda_error(label, "key kernel launch", e);
      int which = 0;
      if (const cudaError_t e = sort_pairs(temp, ws.bytes - static_cast<size_t>(temp - w), k0, k1, v0, v1, bw_ws.n,
                                           bw_ws.end_bit, &which, stream);
          e != cudaSuccess)
        return cuda_error(label, "radix sort", e);
      if (const cudaError_t e =
              launch_bag_backward_sorted(p, d.dtype, which ? k1 : k0, which ? v1 : v0, bag_of, sizes, bw_ws.n, stream);
          e != cudaSuccess)
        return cuda_error(label, "kernel launch", e);
    }
  } else {
    BARACUDA_TRY(need_ws(0));
  }
  if (p.grad_psw)
    if (const cudaError_t e = launch_bag_psw_grad(p, d.dtype, d.index_dtype, stream); e != cudaSuccess)
      return cuda_error(label, "kernel launch", e);
  return {};
}

}  // namespace detail::idx
}  // namespace baracuda
