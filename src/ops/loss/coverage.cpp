// The loss family's coverage rows: every (op, direction, dtype) whose plan select() accepts for
// the target, probed with a small descriptor (class ops: int64 class indices; cross_entropy also
// lists probability targets as "<dtype>,<dtype>-><dtype>").
#include "baracuda/core/coverage.hpp"
#include "baracuda/ops/loss.hpp"

namespace baracuda {
namespace {

/// A descriptor select() accepts whenever the dtypes are declared: class ops over [4, 8] logits,
/// linear_cross_entropy over [4, 8] hidden states and a [16, 8] weight, pointwise and rows ops over
/// [4, 8] inputs (every required input, no optional one; a per-row target [4]).
LossDesc probe(const LossOpInfo& in, DType dt, Direction dir, DType target_dt) {
  const Shape s = Shape::of({4, 8});
  switch (in.kind) {
    case LossKind::classes: {
      LossDesc d = LossDesc::cross_entropy(dt, s, target_dt, false, Reduction::mean, -100, 0.0, dir);
      d.op = in.op;
      return d;
    }
    case LossKind::linear:
      return LossDesc::make(in.op, dt, {Shape::of({4, 8}), Shape::of({16, 8}), Shape::of({4})}, Reduction::mean, dir);
    case LossKind::pointwise:
    case LossKind::rows:
    case LossKind::ctc:  // LossPlan refuses it; ctc.cpp lists CtcLossPlan's rows
      break;
  }
  LossDesc d = LossDesc::make(in.op, dt, {}, Reduction::mean, dir);
  for (int k = 0; k < in.num_inputs(); ++k)
    if (!in.input_optional(k)) {
      d.shapes[k] = s;
      d.present |= uint8_t(1u << k);
    }
  // Rows ops with one target per row (the inputs' shape without the last dim).
  if (in.op == LossOp::cosine_embedding_loss || in.op == LossOp::multi_margin_loss)
    d.shapes[in.input_index("target")] = Shape::of({4});
  return d;
}

void loss_coverage(const Target& target, std::vector<CoverageRow>& rows) {
  for (const auto& in : loss_ops()) {
    for (Direction dir : {Direction::Forward, Direction::Backward}) {
      for (int i = 0; i < kNumDTypes; ++i) {
        const DType t = static_cast<DType>(i);
        if (auto plan = LossPlan::select(target, probe(in, t, dir, DType::s64)))
          rows.push_back({"loss", in.name, dir, std::string(name(t)), plan->sku().backend});
        if (in.op == LossOp::cross_entropy)
          if (auto plan = LossPlan::select(target, probe(in, t, dir, t)))
            rows.push_back({"loss", in.name, dir,
                            std::string(name(t)) + "," + std::string(name(t)) + "->" + std::string(name(t)),
                            plan->sku().backend});
      }
    }
  }
}

[[maybe_unused]] const bool registered = detail::register_coverage("loss", &loss_coverage);

}  // namespace
}  // namespace baracuda
