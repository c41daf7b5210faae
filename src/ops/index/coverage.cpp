// The indexing family's coverage rows: every (op, direction, dtype[, index dtype]) whose plan
// select() accepts for the target, probed with a small descriptor. Indexed ops list one row per
// index dtype as "bfloat16,int64->bfloat16".
#include "baracuda/core/coverage.hpp"
#include "baracuda/ops/index.hpp"

namespace baracuda {

namespace {
IndexDesc probe_of(IndexOp op, DType dt, DType it, Direction dir) {
  const Shape s = Shape::of({4, 8});
  const int64_t pads[] = {1, 1, 2, 2};
  const int64_t two[] = {1, 2};
  switch (op) {
    case IndexOp::copy:
      return IndexDesc::copy(dt, s);
    case IndexOp::cat:
      return IndexDesc::cat(dt, s, 1, 2);
    case IndexOp::stack:
      return IndexDesc::stack(dt, s, 0, 2);
    case IndexOp::pad:
      return IndexDesc::pad_nd(dt, s, pads, PadMode::reflect, 0, dir);
    case IndexOp::flip:
      return IndexDesc::flip(dt, s, 1u);
    case IndexOp::roll:
      return IndexDesc::roll(dt, s, two);
    case IndexOp::tile:
      return IndexDesc::tile(dt, s, two);
    case IndexOp::triu:
      return IndexDesc::triu(dt, s, 0);
    case IndexOp::tril:
      return IndexDesc::tril(dt, s, 0);
    case IndexOp::gather:
      return IndexDesc::gather(dt, it, s, Shape::of({4, 3}), 1);
    case IndexOp::index_select:
      return IndexDesc::index_select(dt, it, s, 3, 0);
    case IndexOp::embedding:
      return IndexDesc::embedding(dt, it, 10, 8, Shape::of({2, 3}), -1, dir);
    case IndexOp::scatter:
      return IndexDesc::scatter(dt, it, s, Shape::of({4, 3}), s, 1);
    case IndexOp::index_copy:
      return IndexDesc::index_copy(dt, it, s, Shape::of({3, 8}), 0);
    case IndexOp::scatter_add:
      return IndexDesc::scatter_add(dt, it, s, Shape::of({4, 3}), s, 1);
    case IndexOp::index_add:
      return IndexDesc::index_add(dt, it, s, Shape::of({3, 8}), 0);
    case IndexOp::segment_sum:
      return IndexDesc::segment(dt, it, s, 3, IndexOp::segment_sum);
    case IndexOp::segment_max:
      return IndexDesc::segment(dt, it, s, 3, IndexOp::segment_max);
    case IndexOp::segment_min:
      return IndexDesc::segment(dt, it, s, 3, IndexOp::segment_min);
    case IndexOp::repeat_interleave:
      return IndexDesc::repeat_interleave(dt, s, 3, 1);
    case IndexOp::scatter_reduce:
      return IndexDesc::scatter_reduce(dt, it, s, Shape::of({4, 3}), s, 1, ScatterReduce::amax);
    case IndexOp::segment_prod:
      return IndexDesc::segment(dt, it, s, 3, IndexOp::segment_prod);
    case IndexOp::segment_mean:
      return IndexDesc::segment(dt, it, s, 3, IndexOp::segment_mean);
    case IndexOp::index:
      return IndexDesc::index(dt, it, s, Shape::of({5}), 1);
    case IndexOp::index_put:
      return IndexDesc::index_put(dt, it, s, Shape::of({5}), 2, false);
    case IndexOp::one_hot:
      return IndexDesc::one_hot(dt, it, Shape::of({4}), 8);
    case IndexOp::nonzero:
      return IndexDesc::nonzero(dt, s, 32);
    case IndexOp::masked_select:
      return IndexDesc::masked_select(dt, s, 32);
    case IndexOp::masked_scatter:
      return IndexDesc::masked_scatter(dt, s, Shape::of({40}));
    case IndexOp::lax_gather: {
      // x[ids[:, 0]] of rows: operand [4, 8], indices [5, 1] -> [5, 8]
      static constexpr int offset[] = {1}, collapsed[] = {0}, map[] = {0};
      static constexpr int64_t sizes[] = {1, 8};
      return IndexDesc::lax_gather(dt, it, s, Shape::of({5, 1}), GatherDims{offset, collapsed, map, -1}, sizes);
    }
    case IndexOp::lax_scatter: {
      static constexpr int window[] = {1}, inserted[] = {0}, map[] = {0};
      return IndexDesc::lax_scatter(dt, it, s, Shape::of({5, 1}), Shape::of({5, 8}),
                                    ScatterDims{window, inserted, map, -1}, ScatterReduce::none);
    }
    case IndexOp::embedding_bag:  // 6 ids in 3 bags of a [10, 8] table
      return IndexDesc::embedding_bag(dt, it, 10, 8, Shape::of({6}), 3, ScatterReduce::sum, {}, dir);
    case IndexOp::embedding_renorm:
      return IndexDesc::embedding_renorm(dt, it, 10, 8, Shape::of({2, 3}), 1.0);
    case IndexOp::tril_indices:
      return IndexDesc::tril_indices(dt, 4, 8);
    case IndexOp::triu_indices:
      return IndexDesc::triu_indices(dt, 4, 8);
  }
  return IndexDesc::copy(dt, s);
}
}  // namespace

IndexDesc index_probe(IndexOp op, DType dt, DType it, Direction dir) {
  IndexDesc d = probe_of(op, dt, it, dir);
  d.direction = dir;  // ops without a backward plan are probed (and refused) in that direction too
  return d;
}

namespace {
void index_coverage(const Target& target, std::vector<CoverageRow>& rows) {
  for (const auto& in : index_ops()) {
    for (Direction dir : {Direction::Forward, Direction::Backward}) {
      for (int i = 0; i < kNumDTypes; ++i) {
        const DType t = static_cast<DType>(i);
        if (!in.takes_index) {
          if (auto plan = IndexPlan::select(target, index_probe(in.op, t, DType::s64, dir)))
            rows.push_back({"index", in.name, dir, std::string(name(t)), plan->sku().backend});
          continue;
        }
        for (DType it : {DType::s32, DType::s64})
          if (auto plan = IndexPlan::select(target, index_probe(in.op, t, it, dir)))
            rows.push_back({"index", in.name, dir,
                            std::string(name(t)) + "," + std::string(name(it)) + "->" + std::string(name(t)),
                            plan->sku().backend});
      }
    }
  }
}

[[maybe_unused]] const bool registered = detail::register_coverage("index", &index_coverage);

}  // namespace
}  // namespace baracuda
