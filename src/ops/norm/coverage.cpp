// The softmax/normalization family's coverage rows: every (op, direction, dtype) whose plan
// select() accepts for the target, probed with a small descriptor; the norms also list the
// mixed-precision rows (f16/bf16 inputs with f32 weight and bias) as "bfloat16,float32->bfloat16".
#include "baracuda/core/coverage.hpp"
#include "baracuda/ops/norm.hpp"

namespace baracuda {
namespace {

/// A descriptor select() accepts whenever the dtypes are declared: input [4, 8] (channel ops
/// [2, 4, 3], group_norm in 2 groups), the last dim reduced, every parameter the op takes.
NormDesc probe(const NormOpInfo& in, DType dt, DType param_dt, Direction dir) {
  const Shape s = Shape::of({4, 8});
  NormDesc d;
  switch (in.kind) {
    case NormKind::axis:
      d = NormDesc::softmax(dt, s, -1, in.op == NormOp::log_softmax, dir);
      break;
    case NormKind::norm:
      d = NormDesc::layer_norm(dt, s, 1, in.takes_weight(), in.takes_bias(), 1e-5, dir);
      break;
    case NormKind::channel:
      d = in.op == NormOp::local_response_norm
              ? NormDesc::local_response_norm(dt, Shape::of({2, 4, 3}), 3, 1e-4, 0.75, 1.0, dir)
              : NormDesc::batch_norm(dt, Shape::of({2, 4, 3}), true, true, true, false, 0.1, 1e-5, dir);
      d.num_groups = in.op == NormOp::group_norm ? 2 : 1;
      break;
  }
  d.op = in.op;
  d.param_dtype = param_dt;
  return d;
}

void norm_coverage(const Target& target, std::vector<CoverageRow>& rows) {
  for (const auto& in : norm_ops()) {
    for (Direction dir : {Direction::Forward, Direction::Backward}) {
      for (int i = 0; i < kNumDTypes; ++i) {
        const DType t = static_cast<DType>(i);
        if (auto plan = NormPlan::select(target, probe(in, t, t, dir)))
          rows.push_back({"norm", in.name, dir, std::string(name(t)), plan->sku().backend});
        if (in.kind != NormKind::axis && in.takes_weight() && t != DType::f32)
          if (auto plan = NormPlan::select(target, probe(in, t, DType::f32, dir)))
            rows.push_back({"norm", in.name, dir, std::string(name(t)) + ",float32->" + std::string(name(t)),
                            plan->sku().backend});
      }
    }
  }
}

[[maybe_unused]] const bool registered = detail::register_coverage("norm", &norm_coverage);

}  // namespace
}  // namespace baracuda
