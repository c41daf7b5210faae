// The elementwise family's coverage rows: every (op, direction, dtype) whose plan select()
// accepts for the target, probed with a small descriptor (cast: every input x output pair).
#include "baracuda/core/coverage.hpp"
#include "baracuda/ops/elementwise.hpp"

namespace baracuda {
namespace {

/// A descriptor select() accepts whenever the dtype is declared (inputs [4, 5], generators [1, 1]).
ElementwiseDesc probe(const ElementwiseOpInfo& in, DType dt, Direction dir) {
  const Shape s = in.nin == 0 ? Shape::of({1, 1}) : Shape::of({4, 5});
  if (in.nin <= 1) return ElementwiseDesc::make(in.op, dt, {s}, dir);
  if (in.nin == 2) return ElementwiseDesc::make(in.op, dt, {s, s}, dir);
  return ElementwiseDesc::make(in.op, dt, {s, s, s}, dir);
}

void elementwise_coverage(const Target& target, std::vector<CoverageRow>& rows) {
  auto add = [&](const ElementwiseOpInfo& in, Direction dir, std::string dtype, const ElementwisePlan& p) {
    rows.push_back({p.sku().category, in.name, dir, std::move(dtype), p.sku().backend});
  };
  for (const auto& in : elementwise_ops()) {
    for (Direction dir : {Direction::Forward, Direction::Backward}) {
      for (int i = 0; i < kNumDTypes; ++i) {
        const DType t = static_cast<DType>(i);
        ElementwiseDesc d = probe(in, t, dir);
        if (in.out == OutRule::Cast && dir == Direction::Forward) {
          for (int j = 0; j < kNumDTypes; ++j) {
            d.out_dtype = static_cast<DType>(j);
            if (auto plan = ElementwisePlan::select(target, d))
              add(in, dir, std::string(name(t)) + "->" + std::string(name(d.out_dtype)), *plan);
          }
          continue;
        }
        if (auto plan = ElementwisePlan::select(target, d)) add(in, dir, std::string(name(t)), *plan);
      }
    }
  }
}

[[maybe_unused]] const bool registered = detail::register_coverage("elementwise", &elementwise_coverage);

}  // namespace
}  // namespace baracuda
