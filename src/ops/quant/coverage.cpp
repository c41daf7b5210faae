// The quantization family's coverage rows: every (op, direction, floating dtype, quantized dtype)
// whose plan select() accepts for the target, probed with a small descriptor of the first
// granularity the op takes; dtype strings are the SKU's ("bfloat16->int8", "int8->bfloat16",
// "bfloat16,int8->bfloat16" for backward passes whose bounds depend on the quantized dtype).
// quantized_linear lists the activation dtypes QuantizedLinearPlan accepts (none until GemmPlan
// serves int8 x int8 -> bf16/f16/f32 with per-row/per-column scales); w4a16_linear the (activation,
// weight) pairs of W4A16LinearPlan's decode kernel ("bfloat16,uint4->bfloat16").
#include "baracuda/core/coverage.hpp"
#include "baracuda/ops/quant.hpp"

namespace baracuda {
namespace {

QuantDesc probe(const QuantOpInfo& in, DType dt, DType q, Direction dir) {
  const Shape s = Shape::of({4, 8});
  if (in.engine == QuantEngine::dynamic)  // unsigned codes are asymmetric only
    return QuantDesc::dynamic_per_token(dt, q, s, q == DType::u8 || q == DType::u4, dir);
  QuantDesc d = QuantDesc::per_tensor(in.op, dt, q, s, 0.5, 0, dir);
  if (in.op == QuantOp::fake_quantize || in.op == QuantOp::fake_quantize_learnable) {
    d.q_min = 0;
    d.q_max = 255;
  }
  return d;
}

void quant_coverage(const Target& target, std::vector<CoverageRow>& rows) {
  for (const auto& in : quant_ops()) {
    if (in.op == QuantOp::w4a16_linear) {
      for (int i = 0; i < kNumDTypes; ++i)
        for (DType w : {DType::s4, DType::u4}) {
          W4A16LinearDesc d;
          d.dtype = static_cast<DType>(i);
          d.weight_dtype = w;
          d.m = 1, d.n = d.k = 128;
          if (auto p = W4A16LinearPlan::select(target, d))
            rows.push_back({"quant", in.name, Direction::Forward, p->sku().dtypes, p->sku().backend});
        }
      continue;
    }
    if (in.engine == QuantEngine::linear) {
      for (int i = 0; i < kNumDTypes; ++i) {
        QuantizedLinearDesc d;
        d.dtype = static_cast<DType>(i);
        d.m = d.n = d.k = 64;
        if (auto p = QuantizedLinearPlan::select(target, d))
          rows.push_back({"quant", in.name, Direction::Forward, p->sku().dtypes, p->sku().backend});
      }
      continue;
    }
    for (Direction dir : {Direction::Forward, Direction::Backward}) {
      for (int i = 0; i < kNumDTypes; ++i) {
        for (int j = 0; j < kNumDTypes; ++j) {
          const DType t = static_cast<DType>(i), q = static_cast<DType>(j);
          if (auto p = QuantPlan::select(target, probe(in, t, q, dir)))
            rows.push_back({"quant", in.name, dir, p->sku().dtypes, p->sku().backend});
        }
      }
    }
  }
}

[[maybe_unused]] const bool registered = detail::register_coverage("quant", &quant_coverage);

}  // namespace
}  // namespace baracuda
