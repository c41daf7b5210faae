// The quantization family without a GPU: the table, dtype coverage (declared == accepted), every
// descriptor refusal with its message, the scale geometry of each granularity, argument checks,
// workspace sizing, the variant run() would take, and QuantizedLinearPlan's composition rules.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "baracuda/core/coverage.hpp"
#include "baracuda/ops/quant.hpp"
#include "test_util.hpp"

namespace baracuda {
namespace {

using test::fake_ptr;
using test::mut_of;
using test::ref_of;
using test::strided;

const Target kTarget = Target::offline(90);

QuantDesc probe(const QuantOpInfo& in, DType dt, DType q, Direction dir) {
  if (in.engine == QuantEngine::dynamic)  // unsigned codes are asymmetric only
    return QuantDesc::dynamic_per_token(dt, q, Shape::of({4, 8}), q == DType::u8 || q == DType::u4, dir);
  QuantDesc d = QuantDesc::per_tensor(in.op, dt, q, Shape::of({4, 8}), 0.5, 0, dir);
  return d;
}

/// per-channel int8 quantize of x [8, 64] along axis 0 (scales [8]).
QuantDesc qchan(DType dt = DType::f32, DType q = DType::s8) {
  return QuantDesc::per_channel(QuantOp::quantize, dt, q, Shape::of({8, 64}), 0);
}
QuantArgs qchan_args(DType dt = DType::f32, DType q = DType::s8) {
  QuantArgs a;
  a.x = ref_of(0, dt, Layout::contiguous({8, 64}));
  a.scale = ref_of(1, DType::f32, Layout::contiguous({8}));
  a.zero_point = ref_of(2, DType::s32, Layout::contiguous({8}));
  a.out = mut_of(3, q, Layout::contiguous({8, is_packed(q) ? 32 : 64}));
  return a;
}

// ---- table and coverage ------------------------------------------------------------------------------
TEST(QuantTable, RowsAndNames) {
  for (const char* n :
       {"quantize", "dequantize", "fake_quantize", "fake_quantize_learnable", "dynamic_quantize", "quantized_linear"}) {
    auto op = quant_op_from_name(n);
    ASSERT_TRUE(op.has_value()) << n;
    EXPECT_STREQ(info(*op).name, n);
  }
  EXPECT_FALSE(quant_op_from_name("quantize_nf4").has_value());
  EXPECT_TRUE(info(QuantOp::quantize).takes(QuantGranularity::per_group));
  EXPECT_FALSE(info(QuantOp::fake_quantize).takes(QuantGranularity::per_token));
  EXPECT_FALSE(info(QuantOp::dynamic_quantize).takes(QuantGranularity::per_channel));
  EXPECT_TRUE(info(QuantOp::dynamic_quantize).takes(QuantGranularity::per_group));
  EXPECT_TRUE(info(QuantOp::fake_quantize_learnable).takes(QuantGranularity::per_group));
  EXPECT_EQ(info(QuantOp::dynamic_quantize).bw_dtypes, dtypes::kFloat);
  EXPECT_EQ(info(QuantOp::quantized_linear).engine, QuantEngine::linear);
  EXPECT_EQ(quant_min_of(DType::s4), -8);
  EXPECT_EQ(quant_max_of(DType::u4), 15);
  EXPECT_EQ(quant_max_of(DType::f8e4m3), 448);
  EXPECT_EQ(quant_max_of(DType::f8e5m2), 57344);
  EXPECT_STREQ(to_string(QuantGranularity::per_group), "per_group");
  for (const auto& r : quant_ops()) {
    EXPECT_EQ(r.bw_dtypes & ~r.fw_dtypes, 0u) << r.name << ": backward dtypes must be a subset of the forward ones";
    EXPECT_EQ(r.fw_dtypes & ~dtypes::kFloat, 0u) << r.name << ": the floating side is FP";
  }
}

TEST(QuantCoverage, AcceptsExactlyDeclaredDtypes) {
  for (const auto& in : quant_ops()) {
    if (in.engine == QuantEngine::linear) continue;
    for (Direction dir : {Direction::Forward, Direction::Backward}) {
      const DTypeSet fp = dir == Direction::Forward ? in.fw_dtypes : in.bw_dtypes;
      for (int i = 0; i < kNumDTypes; ++i) {
        for (int j = 0; j < kNumDTypes; ++j) {
          const DType t = static_cast<DType>(i), q = static_cast<DType>(j);
          SCOPED_TRACE(std::string(in.name) + " " + to_string(dir) + " " + std::string(name(t)) +
                       " q=" + std::string(name(q)));
          auto plan = QuantPlan::select(kTarget, probe(in, t, q, dir));
          if (contains(fp, t) && contains(in.q_dtypes, q)) {
            ASSERT_TRUE(plan.ok()) << plan.message();
            EXPECT_EQ(plan->sku().category, "quant");
            EXPECT_TRUE(plan->precision().deterministic);
            EXPECT_TRUE(plan->precision().bit_stable);
          } else if (dir == Direction::Backward && in.bw_dtypes == 0) {
            EXPECT_FAILS_WITH(plan, Status::Unsupported, in.name, "no backward");
          } else if (!contains(fp, t)) {
            EXPECT_FAILS_WITH(plan, Status::Unsupported, in.name, "dtype expected", "got " + std::string(name(t)));
          } else {
            EXPECT_FALSE(plan.ok());
          }
        }
      }
    }
  }
}

TEST(QuantCoverage, ListedRows) {
  const auto rows = coverage(kTarget);
  auto has = [&](const char* op, Direction dir, const std::string& dt) {
    return baracuda::test::has_coverage_row(rows, "quant", op, dir, dt);
  };
  EXPECT_TRUE(has("quantize", Direction::Forward, "bfloat16->int8"));
  EXPECT_TRUE(has("quantize", Direction::Forward, "float64->int4"));
  EXPECT_TRUE(has("quantize", Direction::Forward, "float16->float8_e4m3fn"));
  EXPECT_TRUE(has("quantize", Direction::Backward, "float32,uint8->float32"));
  EXPECT_TRUE(has("dequantize", Direction::Forward, "uint4->bfloat16"));
  EXPECT_TRUE(has("dequantize", Direction::Backward, "bfloat16,int8->bfloat16"));
  EXPECT_TRUE(has("fake_quantize", Direction::Backward, "float64->float64"));
  EXPECT_TRUE(has("fake_quantize_learnable", Direction::Backward, "bfloat16->bfloat16"));
  EXPECT_FALSE(has("fake_quantize_learnable", Direction::Backward, "float64->float64"));
  EXPECT_TRUE(has("dynamic_quantize", Direction::Forward, "bfloat16->int8"));
  EXPECT_TRUE(has("dynamic_quantize", Direction::Forward, "float32->float8_e5m2"));
  EXPECT_TRUE(has("dynamic_quantize", Direction::Forward, "float32->uint8"));  // asymmetric
  EXPECT_TRUE(has("dynamic_quantize", Direction::Forward, "bfloat16->int4"));
  EXPECT_TRUE(has("dynamic_quantize", Direction::Backward, "float32,int8->float32"));
  EXPECT_FALSE(has("dynamic_quantize", Direction::Backward, "float32->int8"));
}

// ---- descriptor refusals --------------------------------------------------------------------------------
TEST(QuantSelect, GroupSizeMustDivideTheAxis) {
  auto d = QuantDesc::per_group(QuantOp::quantize, DType::bf16, DType::s4, Shape::of({4, 10}), 1, 4);
  EXPECT_FAILS_WITH(QuantPlan::select(kTarget, d), Status::InvalidProblem, "quantize", "shape[axis]=10",
                    "group_size=4");
  d.group_size = 0;
  EXPECT_FAILS_WITH(QuantPlan::select(kTarget, d), Status::InvalidProblem, "group_size expected >= 1", "got 0");
  d.group_size = 5;
  EXPECT_TRUE(QuantPlan::select(kTarget, d).ok());
  d.axis = 2;
  EXPECT_FAILS_WITH(QuantPlan::select(kTarget, d), Status::InvalidProblem, "axis expected in [-2, 2)", "got 2");
}

TEST(QuantSelect, PackedInt4NeedsAnEvenLastDim) {
  auto d = QuantDesc::per_tensor(QuantOp::quantize, DType::f32, DType::u4, Shape::of({4, 7}), 0.1, 3);
  EXPECT_FAILS_WITH(QuantPlan::select(kTarget, d), Status::InvalidProblem, "uint4", "shape[-1] expected even", "got 7");
  d.shape = Shape::of({});
  EXPECT_FAILS_WITH(QuantPlan::select(kTarget, d), Status::InvalidProblem, "rank-0");
  d.shape = Shape::of({4, 8});
  EXPECT_TRUE(QuantPlan::select(kTarget, d).ok());
}

TEST(QuantSelect, IntegerRange) {
  auto d = QuantDesc::per_tensor(QuantOp::quantize, DType::f32, DType::s4, Shape::of({4, 8}), 0.1, 0);
  d.q_max = 8;
  EXPECT_FAILS_WITH(QuantPlan::select(kTarget, d), Status::InvalidProblem, "within int4's range [-8, 7]",
                    "got [-8, 8]");
  d.q_min = 3, d.q_max = 2, d.zero_point = 2;
  EXPECT_FAILS_WITH(QuantPlan::select(kTarget, d), Status::InvalidProblem, "q_max expected >= q_min", "q_min=3",
                    "q_max=2");
  d.q_min = -7, d.q_max = 7, d.zero_point = 0;  // symmetric int4
  EXPECT_TRUE(QuantPlan::select(kTarget, d).ok());
  // fake_quantize takes any int32 grid.
  auto f = QuantDesc::per_tensor(QuantOp::fake_quantize, DType::f32, DType::s32, Shape::of({4, 8}), 0.1, 1000);
  f.q_min = -100000, f.q_max = 100000;
  EXPECT_TRUE(QuantPlan::select(kTarget, f).ok());
}

TEST(QuantSelect, ZeroPointRange) {
  auto d = QuantDesc::per_tensor(QuantOp::quantize, DType::f32, DType::u8, Shape::of({4, 8}), 0.1, 256);
  EXPECT_FAILS_WITH(QuantPlan::select(kTarget, d), Status::InvalidProblem, "zero_point expected in [q_min, q_max]",
                    "[0, 255]", "got 256");
  d.zero_point = -1;
  EXPECT_FAILS_WITH(QuantPlan::select(kTarget, d), Status::InvalidProblem, "zero_point", "got -1");
  d.zero_point = 255;
  EXPECT_TRUE(QuantPlan::select(kTarget, d).ok());
  d.zero_point_kind = QuantZeroPoint::none;
  EXPECT_FAILS_WITH(QuantPlan::select(kTarget, d), Status::InvalidProblem, "zero_point expected 0", "got 255");
}

TEST(QuantSelect, HostScaleMustBeAPositiveNormalFloat) {
  for (double s : {0.0, -1.0, std::nan(""), std::numeric_limits<double>::infinity(), 1e-300, 1e300}) {
    auto d = QuantDesc::per_tensor(QuantOp::fake_quantize, DType::f32, DType::s32, Shape::of({4}), s, 0);
    EXPECT_FAILS_WITH(QuantPlan::select(kTarget, d), Status::InvalidProblem, "fake_quantize", "scale expected finite");
  }
  // A device scale is the caller's data: not checked (the kernel computes torch's result).
  auto d = QuantDesc::per_tensor(QuantOp::quantize, DType::f32, DType::s8, Shape::of({4}), 0.0, 0);
  d.scale_on_device = true;
  EXPECT_TRUE(QuantPlan::select(kTarget, d).ok());
}

TEST(QuantSelect, ZeroPointKinds) {
  auto d = QuantDesc::per_tensor(QuantOp::quantize, DType::f32, DType::f8e4m3, Shape::of({4}), 0.5, 0);
  EXPECT_EQ(d.zero_point_kind, QuantZeroPoint::none);
  d.zero_point_kind = QuantZeroPoint::int32;
  EXPECT_FAILS_WITH(QuantPlan::select(kTarget, d), Status::InvalidProblem, "float8_e4m3fn takes no zero point");
  auto c = QuantDesc::per_channel(QuantOp::quantize, DType::f32, DType::s8, Shape::of({4, 4}), 0);
  c.zero_point_kind = QuantZeroPoint::float32;
  EXPECT_FAILS_WITH(QuantPlan::select(kTarget, c), Status::InvalidProblem, "float32 zero points");
  c.op = QuantOp::fake_quantize;
  c.q_dtype = DType::s32;
  EXPECT_TRUE(QuantPlan::select(kTarget, c).ok());
  auto l = QuantDesc::per_channel(QuantOp::fake_quantize_learnable, DType::f32, DType::s32, Shape::of({4, 4}), 0);
  EXPECT_EQ(l.zero_point_kind, QuantZeroPoint::float32);
  l.zero_point_kind = QuantZeroPoint::int32;
  EXPECT_FAILS_WITH(QuantPlan::select(kTarget, l), Status::InvalidProblem, "learnable zero point is a float32");
  auto y = QuantDesc::dynamic_per_token(DType::bf16, DType::s8, Shape::of({4, 4}));
  y.zero_point_kind = QuantZeroPoint::int32;  // asymmetric
  EXPECT_TRUE(QuantPlan::select(kTarget, y).ok());
  y.zero_point_kind = QuantZeroPoint::float32;
  EXPECT_FAILS_WITH(QuantPlan::select(kTarget, y), Status::InvalidProblem, "float32 zero points");
}

TEST(QuantSelect, GranularityAndDirection) {
  auto f = QuantDesc::per_token(QuantOp::fake_quantize, DType::f32, DType::s32, Shape::of({4, 4}), false);
  EXPECT_FAILS_WITH(QuantPlan::select(kTarget, f), Status::Unsupported, "fake_quantize", "granularity",
                    "got per_token");
  auto y = QuantDesc::dynamic_per_token(DType::bf16, DType::s8, Shape::of({4, 4}));
  y.direction = Direction::Backward;  // quantize's STE with the forward's scales
  EXPECT_TRUE(QuantPlan::select(kTarget, y).ok());
  auto yd = QuantDesc::dynamic_per_tensor(DType::bf16, DType::f8e4m3, Shape::of({4, 4}), 4);
  yd.direction = Direction::Backward;
  EXPECT_FAILS_WITH(QuantPlan::select(kTarget, yd), Status::InvalidProblem, "dynamic_quantize_backward",
                    "delayed scaling applies to the forward only");
  auto t = QuantDesc::per_token(QuantOp::quantize, DType::f32, DType::s8, Shape::of({}));
  EXPECT_FAILS_WITH(QuantPlan::select(kTarget, t), Status::InvalidProblem, "per_token", "rank 0");
  auto lin = QuantDesc::per_tensor(QuantOp::quantized_linear, DType::bf16, DType::s8, Shape::of({4, 4}), 1.0);
  EXPECT_FAILS_WITH(QuantPlan::select(kTarget, lin), Status::InvalidProblem, "QuantizedLinearPlan");
}

TEST(QuantSelect, LearnableAndDelayedRules) {
  auto l = QuantDesc::per_tensor(QuantOp::fake_quantize_learnable, DType::f32, DType::s32, Shape::of({4}), 1.0, 0,
                                 Direction::Backward);
  l.q_min = 1, l.q_max = 10;
  EXPECT_FAILS_WITH(QuantPlan::select(kTarget, l), Status::InvalidProblem, "q_min <= 0 <= q_max");
  l.q_min = 0;
  l.grad_factor = std::nan("");
  EXPECT_FAILS_WITH(QuantPlan::select(kTarget, l), Status::InvalidProblem, "grad_factor");
  l.grad_factor = 0.5;
  EXPECT_TRUE(QuantPlan::select(kTarget, l).ok());
  l.dtype = DType::f64;
  EXPECT_FAILS_WITH(QuantPlan::select(kTarget, l), Status::Unsupported, "dtype expected", "got float64");

  auto d = QuantDesc::dynamic_per_tensor(DType::bf16, DType::f8e4m3, Shape::of({4, 4}), 16);
  EXPECT_TRUE(d.delayed);
  EXPECT_TRUE(QuantPlan::select(kTarget, d).ok());
  d.history_len = 0;
  EXPECT_FAILS_WITH(QuantPlan::select(kTarget, d), Status::InvalidProblem, "history_len >= 1");
  auto q = QuantDesc::per_tensor(QuantOp::quantize, DType::f32, DType::s8, Shape::of({4}), 1.0);
  q.history_len = 3;
  EXPECT_FAILS_WITH(QuantPlan::select(kTarget, q), Status::InvalidProblem, "history_len expected 0");
  q.history_len = 0;
  q.direction = Direction::Backward;
  q.record_amax = true;
  EXPECT_FAILS_WITH(QuantPlan::select(kTarget, q), Status::InvalidProblem, "record_amax");
}

TEST(QuantSelect, DynamicPerGroupAndAsymmetricRules) {
  auto g = QuantDesc::dynamic_per_group(DType::bf16, DType::s8, Shape::of({4, 10}), 4);
  EXPECT_FAILS_WITH(QuantPlan::select(kTarget, g), Status::InvalidProblem, "dynamic_quantize", "shape[axis]=10",
                    "group_size=4");
  g.shape = Shape::of({4, 12});
  EXPECT_TRUE(QuantPlan::select(kTarget, g).ok());
  g.axis = 0;  // 4 divides shape[0], but dynamic groups run along the last dim
  EXPECT_FAILS_WITH(QuantPlan::select(kTarget, g), Status::InvalidProblem, "groups along the last dim",
                    "axis expected -1", "got 0");
  auto p4 = QuantDesc::dynamic_per_group(DType::bf16, DType::s4, Shape::of({4, 12}), 3);
  EXPECT_FAILS_WITH(QuantPlan::select(kTarget, p4), Status::InvalidProblem, "int4", "group_size expected even",
                    "got 3");
  p4.group_size = 6;
  EXPECT_TRUE(QuantPlan::select(kTarget, p4).ok());
  // Unsigned codes: asymmetric only.
  auto u = QuantDesc::dynamic_per_token(DType::f32, DType::u8, Shape::of({4, 8}));
  EXPECT_FAILS_WITH(QuantPlan::select(kTarget, u), Status::InvalidProblem, "symmetric dynamic quantization to uint8",
                    "negative", "zero_point_kind=int32");
  EXPECT_TRUE(
      QuantPlan::select(kTarget, QuantDesc::dynamic_per_token(DType::f32, DType::u8, Shape::of({4, 8}), true)).ok());
  EXPECT_TRUE(
      QuantPlan::select(kTarget, QuantDesc::dynamic_per_group(DType::f16, DType::u4, Shape::of({4, 8}), 4, true)).ok());
  auto a = QuantDesc::dynamic_per_token(DType::f32, DType::s8, Shape::of({4, 8}), true);
  EXPECT_EQ(a.zero_point_kind, QuantZeroPoint::int32);
  a.q_min = a.q_max = 3;
  EXPECT_FAILS_WITH(QuantPlan::select(kTarget, a), Status::InvalidProblem, "expected q_max > q_min", "got [3, 3]");
  auto t = QuantDesc::dynamic_per_tensor(DType::bf16, DType::s8, Shape::of({4, 8}));
  t.zero_point_kind = QuantZeroPoint::int32;
  EXPECT_FAILS_WITH(QuantPlan::select(kTarget, t), Status::InvalidProblem, "per_token or per_group");
  auto f = QuantDesc::dynamic_per_token(DType::bf16, DType::f8e4m3, Shape::of({4, 8}), true);
  EXPECT_EQ(f.zero_point_kind, QuantZeroPoint::none);  // fp8 has no zero point: the factory stays symmetric
  f.zero_point_kind = QuantZeroPoint::int32;
  EXPECT_FAILS_WITH(QuantPlan::select(kTarget, f), Status::InvalidProblem, "takes no zero point");
}

TEST(QuantSelect, Preferences) {
  baracuda::test::expect_native_preferences<QuantPlan>(kTarget, qchan(), "quantize");
  PlanPreference p;
  p.backend = Backend::CuBlasLt;
  EXPECT_FAILS_WITH(QuantPlan::select(kTarget, qchan(), p), Status::Unsupported, "backend", "only the native");
}

// ---- geometry -------------------------------------------------------------------------------------------
TEST(QuantGeometry, EveryGranularity) {
  const Shape s = Shape::of({3, 4, 6});
  auto t = QuantPlan::select(kTarget, QuantDesc::per_tensor(QuantOp::quantize, DType::f32, DType::s8, s, 1.0));
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->geometry().num_scales, 1);
  EXPECT_EQ(t->geometry().inner, 72);
  auto c = QuantPlan::select(kTarget, QuantDesc::per_channel(QuantOp::quantize, DType::f32, DType::s8, s, -2));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->geometry().outer, 3);
  EXPECT_EQ(c->geometry().axis_len, 4);
  EXPECT_EQ(c->geometry().inner, 6);
  EXPECT_EQ(c->geometry().s_axis, 1);
  EXPECT_EQ(c->geometry().num_scales, 4);
  auto k = QuantPlan::select(kTarget, QuantDesc::per_token(QuantOp::quantize, DType::f32, DType::s8, s));
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(k->geometry().outer, 12);
  EXPECT_EQ(k->geometry().group, 6);
  EXPECT_EQ(k->geometry().s_outer, 1);
  EXPECT_EQ(k->geometry().num_scales, 12);
  // Groups of 2 along axis 1: scales [3, 2, 6], element (o, a, i) -> (o * 2 + a / 2) * 6 + i.
  auto g = QuantPlan::select(kTarget, QuantDesc::per_group(QuantOp::quantize, DType::f32, DType::s8, s, 1, 2));
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->geometry().group, 2);
  EXPECT_EQ(g->geometry().s_outer, 12);
  EXPECT_EQ(g->geometry().s_axis, 6);
  EXPECT_EQ(g->geometry().s_inner, 1);
  EXPECT_EQ(g->geometry().num_scales, 36);
}

// ---- arguments --------------------------------------------------------------------------------------------
TEST(QuantArgs, PerChannelQuantize) {
  auto p = QuantPlan::select(kTarget, qchan());
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_TRUE(p->can_implement(qchan_args()).ok()) << p->can_implement(qchan_args()).message();
  auto a = qchan_args();
  a.out.layout = strided({8, 64}, {128, 1});
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "out", "dense row-major");
  a = qchan_args();
  a.scale.layout = Layout::contiguous({64});
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "scale expected 8 elements (one per channel)",
                    "got 64");
  a = qchan_args();
  a.zero_point.dtype = DType::s64;
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "zero_point dtype expected int32", "got int64");
  a = qchan_args();
  a.zero_point = {};
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "zero_point is required");
  a = qchan_args();
  a.q = a.x;
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "q given");
  a = qchan_args();
  a.x.layout = strided({8, 64}, {1, -8});
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "x stride[1] expected >= 0");
  a = qchan_args();
  a.out.data = fake_ptr(0);  // overlaps x
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "out overlaps x");
  a = qchan_args();
  a.x.layout = strided({8, 64}, {1, 8});  // a transposed view: the strided kernel takes it
  EXPECT_TRUE(p->can_implement(a).ok());
}

TEST(QuantArgs, HostScaleTakesNoScaleTensor) {
  auto p = QuantPlan::select(
      kTarget, QuantDesc::per_tensor(QuantOp::quantize, DType::f32, DType::s8, Shape::of({8, 64}), 0.1, 3));
  ASSERT_TRUE(p.ok());
  QuantArgs a;
  a.x = ref_of(0, DType::f32, Layout::contiguous({8, 64}));
  a.out = mut_of(1, DType::s8, Layout::contiguous({8, 64}));
  EXPECT_TRUE(p->can_implement(a).ok());
  a.scale = ref_of(2, DType::f32, Layout::contiguous({1}));
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "scale", "host per-tensor scale");
  a.scale = {};
  a.amax_out = mut_of(3, DType::f32, Layout::contiguous({1}));
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "amax_out given");
}

TEST(QuantArgs, PackedInt4Shapes) {
  auto p = QuantPlan::select(kTarget, qchan(DType::bf16, DType::s4));
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->can_implement(qchan_args(DType::bf16, DType::s4)).ok());
  auto a = qchan_args(DType::bf16, DType::s4);
  a.out.layout = Layout::contiguous({8, 64});
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "out shape expected [8, 32]", "last dim halved",
                    "got [8, 64]");
  a = qchan_args(DType::bf16, DType::s4);
  a.out.dtype = DType::u8;
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "out dtype expected int4", "got uint8");
}

TEST(QuantArgs, FakeQuantizeInPlaceAndMask) {
  auto d = QuantDesc::per_channel(QuantOp::fake_quantize, DType::bf16, DType::s32, Shape::of({8, 64}), 1);
  d.q_min = 0, d.q_max = 255;
  auto p = QuantPlan::select(kTarget, d);
  ASSERT_TRUE(p.ok()) << p.message();
  QuantArgs a;
  a.x = ref_of(0, DType::bf16, Layout::contiguous({8, 64}));
  a.scale = ref_of(1, DType::f32, Layout::contiguous({64}));
  a.zero_point = ref_of(2, DType::s32, Layout::contiguous({64}));
  a.out = mut_of(0, DType::bf16, Layout::contiguous({8, 64}));  // exactly in place
  EXPECT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
  a.mask = mut_of(3, DType::b8, Layout::contiguous({8, 64}));
  EXPECT_TRUE(p->can_implement(a).ok());
  a.mask = mut_of(0, DType::b8, Layout::contiguous({8, 64}));
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "overlaps", "mask");
  a.mask = {};
  a.out = mut_of(0, DType::bf16, Layout::contiguous({8, 64}), 2);  // shifted by one element
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "out overlaps x");
}

TEST(QuantArgs, DequantizeBackwardReadsNoZeroPoint) {
  auto d = QuantDesc::per_group(QuantOp::dequantize, DType::f32, DType::u4, Shape::of({4, 64}), 1, 32, false,
                                Direction::Backward);
  auto p = QuantPlan::select(kTarget, d);
  ASSERT_TRUE(p.ok()) << p.message();
  QuantArgs a;
  a.dy = ref_of(0, DType::f32, Layout::contiguous({4, 64}));
  a.scale = ref_of(1, DType::f32, Layout::contiguous({4, 2}));
  a.out = mut_of(2, DType::f32, Layout::contiguous({4, 64}));
  EXPECT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
  a.zero_point = ref_of(3, DType::s32, Layout::contiguous({4, 2}));
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "zero_point given");
}

TEST(QuantArgs, DynamicPerToken) {
  auto p = QuantPlan::select(kTarget, QuantDesc::dynamic_per_token(DType::bf16, DType::s8, Shape::of({2, 8, 64})));
  ASSERT_TRUE(p.ok());
  QuantArgs a;
  a.x = ref_of(0, DType::bf16, Layout::contiguous({2, 8, 64}));
  a.out = mut_of(1, DType::s8, Layout::contiguous({2, 8, 64}));
  a.scale_out = mut_of(2, DType::f32, Layout::contiguous({2, 8, 1}));
  EXPECT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
  a.scale_out.layout = Layout::contiguous({8});
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "scale_out expected 16 elements", "got 8");
  a.scale_out = {};
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "scale_out is required");
  a.scale_out = mut_of(2, DType::f32, Layout::contiguous({16}));
  a.x.layout = strided({2, 8, 64}, {64, 256, 1});  // leading dims swapped: no single row stride
  EXPECT_FAILS_WITH(p->can_implement(a), Status::Unsupported, "do not merge the leading dims");
  a.x.layout = strided({2, 8, 64}, {8 * 128, 128, 1});  // padded rows: fine
  EXPECT_TRUE(p->can_implement(a).ok());
}

TEST(QuantArgs, DelayedScalingRoles) {
  auto p = QuantPlan::select(kTarget, QuantDesc::dynamic_per_tensor(DType::bf16, DType::f8e4m3, Shape::of({8, 8}), 4));
  ASSERT_TRUE(p.ok());
  QuantArgs a;
  a.x = ref_of(0, DType::bf16, Layout::contiguous({8, 8}));
  a.out = mut_of(1, DType::f8e4m3, Layout::contiguous({8, 8}));
  a.scale_out = mut_of(2, DType::f32, Layout::contiguous({1}));
  a.amax_history = mut_of(3, DType::f32, Layout::contiguous({4}));
  EXPECT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
  a.amax_history.layout = Layout::contiguous({5});
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "amax_history expected 4 elements");
  a.amax_history = {};
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "amax_history is required");
}

TEST(QuantArgs, LearnableBackwardGradients) {
  auto d = QuantDesc::per_channel(QuantOp::fake_quantize_learnable, DType::f32, DType::s32, Shape::of({16, 32}), 0,
                                  false, Direction::Backward);
  d.q_min = -128, d.q_max = 127;
  auto p = QuantPlan::select(kTarget, d);
  ASSERT_TRUE(p.ok()) << p.message();
  QuantArgs a;
  a.dy = ref_of(0, DType::f32, Layout::contiguous({16, 32}));
  a.x = ref_of(1, DType::f32, Layout::contiguous({16, 32}));
  a.scale = ref_of(2, DType::f32, Layout::contiguous({16}));
  a.zero_point = ref_of(3, DType::f32, Layout::contiguous({16}));
  a.out = mut_of(4, DType::f32, Layout::contiguous({16, 32}));
  a.dscale = mut_of(5, DType::f32, Layout::contiguous({16}));
  a.dzero_point = mut_of(6, DType::f32, Layout::contiguous({16}));
  EXPECT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
  a.dscale.layout = Layout::contiguous({32});
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "dscale expected 16 elements");
  a.dscale.layout = Layout::contiguous({16});
  a.out = mut_of(0, DType::f32, Layout::contiguous({16, 32}));  // in place on dy: refused (partials read it)
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "out overlaps dy");
}

TEST(QuantArgs, DynamicPerGroupAsymmetric) {
  auto p =
      QuantPlan::select(kTarget, QuantDesc::dynamic_per_group(DType::bf16, DType::u4, Shape::of({2, 8, 64}), 32, true));
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(p->geometry().num_scales, 32);
  QuantArgs a;
  a.x = ref_of(0, DType::bf16, Layout::contiguous({2, 8, 64}));
  a.out = mut_of(1, DType::u4, Layout::contiguous({2, 8, 32}));
  a.scale_out = mut_of(2, DType::f32, Layout::contiguous({2, 8, 2}));
  a.zero_point_out = mut_of(3, DType::s32, Layout::contiguous({2, 8, 2}));
  EXPECT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
  EXPECT_EQ(p->layout_for(a), "rows-registers-vec16(tpr=4)");  // 32 bf16 = 4 vectors: a 4-thread sub-warp
  auto b = a;
  b.zero_point_out = {};
  EXPECT_FAILS_WITH(p->can_implement(b), Status::InvalidProblem, "zero_point_out is required");
  b = a;
  b.zero_point_out.dtype = DType::s64;
  EXPECT_FAILS_WITH(p->can_implement(b), Status::InvalidProblem, "zero_point_out dtype expected int32", "got int64");
  b = a;
  b.scale_out.layout = Layout::contiguous({16});
  EXPECT_FAILS_WITH(p->can_implement(b), Status::InvalidProblem, "scale_out expected 32 elements", "got 16");
  b = a;
  b.zero_point_out = mut_of(2, DType::s32, Layout::contiguous({2, 8, 2}));  // on top of the scales
  EXPECT_FAILS_WITH(p->can_implement(b), Status::InvalidProblem, "overlaps");
  b = a;
  b.x.layout = strided({2, 8, 64}, {1024, 128, 2});             // column stride 2: scalar pairs (whole int4 bytes)
  EXPECT_EQ(p->layout_for(b), "rows-registers-scalar(tpr=4)");  // 32 elements: 4 threads of 4 pairs
  EXPECT_TRUE(p->can_implement(b).ok());
  // Symmetric descriptors take no zero point output.
  auto s = QuantPlan::select(kTarget, QuantDesc::dynamic_per_group(DType::bf16, DType::s8, Shape::of({2, 8, 64}), 32));
  ASSERT_TRUE(s.ok());
  b = a;
  b.out.dtype = DType::s8;
  b.out.layout = Layout::contiguous({2, 8, 64});
  EXPECT_FAILS_WITH(s->can_implement(b), Status::InvalidProblem, "zero_point_out given");
  b.zero_point_out = {};
  EXPECT_TRUE(s->can_implement(b).ok()) << s->can_implement(b).message();
  // The headline shapes: a 4-thread sub-warp per bf16 group of 128 (4 vectors a thread); a CTA of
  // 128 per 4096-element row.
  auto layout = [&](const QuantDesc& d, int64_t rows, int64_t n, int64_t scales) {
    auto r = QuantPlan::select(kTarget, d);
    EXPECT_TRUE(r.ok()) << r.message();
    QuantArgs c;
    c.x = ref_of(0, DType::bf16, Layout::contiguous({rows, n}));
    c.out = mut_of(1, d.q_dtype, Layout::contiguous({rows, is_packed(d.q_dtype) ? n / 2 : n}));
    c.scale_out = mut_of(2, DType::f32, Layout::contiguous({scales}));
    if (d.zero_point_kind != QuantZeroPoint::none)
      c.zero_point_out = mut_of(3, DType::s32, Layout::contiguous({scales}));
    EXPECT_TRUE(r->can_implement(c).ok()) << r->can_implement(c).message();
    return r->layout_for(c);
  };
  const Shape big = Shape::of({16384, 4096});
  EXPECT_EQ(layout(QuantDesc::dynamic_per_group(DType::bf16, DType::s8, big, 128), 16384, 4096, 16384 * 32),
            "rows-registers-vec16(tpr=4)");
  EXPECT_EQ(layout(QuantDesc::dynamic_per_group(DType::bf16, DType::s4, big, 64), 16384, 4096, 16384 * 64),
            "rows-registers-vec16(tpr=2)");
  EXPECT_EQ(layout(QuantDesc::dynamic_per_token(DType::bf16, DType::u8, big, true), 16384, 4096, 16384),
            "rows-registers-vec16(tpr=128)");
}

TEST(QuantArgs, DynamicBackwardIsQuantizeSte) {
  auto d = QuantDesc::dynamic_per_group(DType::bf16, DType::u8, Shape::of({4, 64}), 32, true, Direction::Backward);
  auto p = QuantPlan::select(kTarget, d);
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(p->sku().dtypes, "bfloat16,uint8->bfloat16");
  EXPECT_NE(p->precision().note.find("STE"), std::string::npos) << p->precision().note;
  EXPECT_EQ(p->workspace_size(), 0u);
  QuantArgs a;
  a.dy = ref_of(0, DType::bf16, Layout::contiguous({4, 64}));
  a.x = ref_of(1, DType::bf16, Layout::contiguous({4, 64}));
  a.scale = ref_of(2, DType::f32, Layout::contiguous({4, 2}));
  a.zero_point = ref_of(3, DType::s32, Layout::contiguous({4, 2}));
  a.out = mut_of(4, DType::bf16, Layout::contiguous({4, 64}));
  EXPECT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
  EXPECT_EQ(p->layout_for(a), "elementwise-vec16-unitscale");
  auto b = a;
  b.zero_point = {};
  EXPECT_FAILS_WITH(p->can_implement(b), Status::InvalidProblem, "zero_point is required");
  b = a;
  b.scale_out = mut_of(5, DType::f32, Layout::contiguous({8}));
  EXPECT_FAILS_WITH(p->can_implement(b), Status::InvalidProblem, "scale_out given");
  b = a;
  b.x.layout = strided({4, 64}, {1, 4});  // any strides: the elementwise kernel
  EXPECT_EQ(p->layout_for(b), "elementwise-strided");
}

TEST(QuantPlanShape, LearnablePerGroup) {
  auto mk = [](const Shape& s, int axis, int64_t g) {
    auto d = QuantDesc::per_group(QuantOp::fake_quantize_learnable, DType::f32, DType::s32, s, axis, g, false,
                                  Direction::Backward);
    d.q_min = -8, d.q_max = 7;
    return d;
  };
  // Groups along the last dim: a warp per group (consecutive elements).
  auto w = QuantPlan::select(kTarget, mk(Shape::of({256, 4096}), 1, 128));
  ASSERT_TRUE(w.ok()) << w.message();
  EXPECT_TRUE(w->geometry().warps);
  EXPECT_FALSE(w->geometry().columns);
  EXPECT_EQ(w->geometry().splits, 1);
  EXPECT_EQ(w->geometry().num_scales, 256 * 32);
  EXPECT_EQ(w->workspace_size(), 256u * 32 * 2 * 4);
  // Groups along axis 0 of [4096, 256]: 256 groups side by side, a thread each.
  auto c = QuantPlan::select(kTarget, mk(Shape::of({4096, 256}), 0, 128));
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_TRUE(c->geometry().columns);
  EXPECT_EQ(c->geometry().num_scales, 32 * 256);
  // One long group: split in 4 slices of 4096.
  auto l = QuantPlan::select(kTarget, mk(Shape::of({4, 16384}), -1, 16384));
  ASSERT_TRUE(l.ok()) << l.message();
  EXPECT_EQ(l->geometry().splits, 4);
  EXPECT_EQ(l->workspace_size(), 256u);  // 4 groups x 4 splits x 2 floats, rounded to 256 bytes
  QuantArgs a;
  a.dy = ref_of(0, DType::f32, Layout::contiguous({256, 4096}));
  a.x = ref_of(1, DType::f32, Layout::contiguous({256, 4096}));
  a.scale = ref_of(2, DType::f32, Layout::contiguous({256, 32}));
  a.zero_point = ref_of(3, DType::f32, Layout::contiguous({256, 32}));
  a.out = mut_of(4, DType::f32, Layout::contiguous({256, 4096}));
  a.dscale = mut_of(5, DType::f32, Layout::contiguous({256, 32}));
  a.dzero_point = mut_of(6, DType::f32, Layout::contiguous({256, 32}));
  EXPECT_TRUE(w->can_implement(a).ok()) << w->can_implement(a).message();
  EXPECT_EQ(w->layout_for(a), "learnable-warps(splits=1)");
  a.dscale.layout = Layout::contiguous({256});
  EXPECT_FAILS_WITH(w->can_implement(a), Status::InvalidProblem, "dscale expected 8192 elements", "got 256");
  // The forward: the per-channel formulas with a scale per group.
  auto f = mk(Shape::of({256, 4096}), 1, 128);
  f.direction = Direction::Forward;
  auto fp = QuantPlan::select(kTarget, f);
  ASSERT_TRUE(fp.ok()) << fp.message();
  EXPECT_EQ(fp->sku().layout, "per_group(axis=1, group=128)");
  QuantArgs b;
  b.x = a.x;
  b.scale = a.scale;
  b.zero_point = a.zero_point;
  b.out = a.out;
  EXPECT_TRUE(fp->can_implement(b).ok()) << fp->can_implement(b).message();
  EXPECT_EQ(fp->layout_for(b), "elementwise-vec16-unitscale");
}

// ---- workspace, variants, run refusals ---------------------------------------------------------------------
TEST(QuantPlanShape, WorkspaceSizes) {
  EXPECT_EQ(QuantPlan::select(kTarget, qchan())->workspace_size(), 0u);
  auto q = QuantDesc::per_tensor(QuantOp::quantize, DType::bf16, DType::f8e4m3, Shape::of({8, 64}), 0.5);
  q.record_amax = true;
  EXPECT_EQ(QuantPlan::select(kTarget, q)->workspace_size(), 4u * 4096);
  EXPECT_EQ(QuantPlan::select(kTarget, QuantDesc::dynamic_per_tensor(DType::bf16, DType::f8e4m3, Shape::of({8, 8})))
                ->workspace_size(),
            4u * 4096);
  EXPECT_EQ(QuantPlan::select(kTarget, QuantDesc::dynamic_per_token(DType::bf16, DType::s8, Shape::of({8, 8})))
                ->workspace_size(),
            0u);
  // Learnable per-channel over the last axis of [256, 4096]: columns (a thread per channel),
  // 256 x 1 elements / 256 per split = 1 split; per-tensor [1<<20]: 128 splits of 8192.
  auto l = QuantDesc::per_channel(QuantOp::fake_quantize_learnable, DType::f32, DType::s32, Shape::of({256, 4096}), 1,
                                  false, Direction::Backward);
  l.q_min = 0, l.q_max = 255;
  auto lp = QuantPlan::select(kTarget, l);
  ASSERT_TRUE(lp.ok()) << lp.message();
  EXPECT_TRUE(lp->geometry().columns);
  EXPECT_EQ(lp->geometry().splits, 1);
  EXPECT_EQ(lp->workspace_size(), 4096u * 2 * 4);
  auto t = QuantDesc::per_tensor(QuantOp::fake_quantize_learnable, DType::f32, DType::s32, Shape::of({1 << 20}), 1.0, 0,
                                 Direction::Backward);
  t.q_min = 0, t.q_max = 255;
  auto tp = QuantPlan::select(kTarget, t);
  ASSERT_TRUE(tp.ok()) << tp.message();
  EXPECT_FALSE(tp->geometry().columns);
  EXPECT_EQ(tp->geometry().splits, 128);
  EXPECT_EQ(tp->workspace_size(), 1024u + 0u);  // 128 x 2 floats, rounded to 256 bytes
}

TEST(QuantPlanShape, LayoutFor) {
  auto p = QuantPlan::select(kTarget, qchan(DType::bf16));
  ASSERT_TRUE(p.ok());
  // [8, 64] along axis 0: runs of 64 elements share a scale, a multiple of the 8-element unit.
  EXPECT_EQ(p->layout_for(qchan_args(DType::bf16)), "elementwise-vec16-unitscale");
  auto scale_layout = [&](const QuantDesc& d, int64_t scales) {
    auto r = QuantPlan::select(kTarget, d);
    EXPECT_TRUE(r.ok()) << r.message();
    QuantArgs b;
    b.x = ref_of(0, DType::bf16, Layout::contiguous({8, 64}));
    b.scale = ref_of(1, DType::f32, Layout::contiguous({scales}));
    b.out = mut_of(2, DType::s8, Layout::contiguous({8, 64}));
    return r->layout_for(b);
  };
  using QD = QuantDesc;
  const Shape s864 = Shape::of({8, 64});
  // A channel axis last changes scale every element; groups of 4 split the 8-element unit.
  EXPECT_EQ(scale_layout(QD::per_channel(QuantOp::quantize, DType::bf16, DType::s8, s864, 1, true), 64),
            "elementwise-vec16");
  EXPECT_EQ(scale_layout(QD::per_group(QuantOp::quantize, DType::bf16, DType::s8, s864, 1, 32), 16),
            "elementwise-vec16-unitscale");
  EXPECT_EQ(scale_layout(QD::per_group(QuantOp::quantize, DType::bf16, DType::s8, s864, 1, 4), 128),
            "elementwise-vec16");
  EXPECT_EQ(scale_layout(QD::per_group(QuantOp::quantize, DType::bf16, DType::s8, s864, 0, 4), 128),
            "elementwise-vec16");
  EXPECT_EQ(scale_layout(QD::per_token(QuantOp::quantize, DType::bf16, DType::s8, s864), 8),
            "elementwise-vec16-unitscale");
  auto a = qchan_args(DType::bf16);
  a.x = ref_of(0, DType::bf16, Layout::contiguous({8, 64}), 2);  // 2-byte offset: no 16-byte loads
  EXPECT_EQ(p->layout_for(a), "elementwise-strided");
  a = qchan_args(DType::bf16);
  a.x.layout = strided({8, 64}, {1, 8});
  EXPECT_EQ(p->layout_for(a), "elementwise-strided");
  PlanPreference nov;
  nov.vectorized = Tristate::Forbid;
  auto pn = QuantPlan::select(kTarget, qchan(DType::bf16), nov);
  ASSERT_TRUE(pn.ok());
  EXPECT_EQ(pn->layout_for(qchan_args(DType::bf16)), "elementwise-strided");
  EXPECT_NE(pn->sku().layout.find("vectorization forbidden"), std::string::npos);

  auto row = [&](int64_t rows, int64_t n) {
    auto r = QuantPlan::select(kTarget, QuantDesc::dynamic_per_token(DType::bf16, DType::s8, Shape::of({rows, n})));
    QuantArgs b;
    b.x = ref_of(0, DType::bf16, Layout::contiguous({rows, n}));
    b.out = mut_of(1, DType::s8, Layout::contiguous({rows, n}));
    b.scale_out = mut_of(2, DType::f32, Layout::contiguous({rows}));
    return r->layout_for(b);
  };
  EXPECT_EQ(row(16384, 4096), "rows-registers-vec16(tpr=64)");  // a CTA of 64 per row, 8 vectors a lane (wide)
  EXPECT_EQ(row(16, 8192), "rows-registers-vec16(tpr=128)");    // the longest wide row
  EXPECT_EQ(row(16, 8200), "rows-registers-vec16(tpr=512)");    // past it: 4 vectors a lane
  EXPECT_EQ(row(16, 64), "rows-registers-vec16(tpr=2)");        // 8 vectors: 2 threads of 4
  EXPECT_EQ(row(16, 16384), "rows-registers-vec16(tpr=512)");   // the longest register-resident row
  EXPECT_EQ(row(4, 100000), "rows-streaming-vec16(tpr=512)");
  EXPECT_EQ(row(4, 7), "rows-registers-scalar(tpr=2)");
  EXPECT_EQ(row(0, 7), "empty");
}

TEST(QuantPlanShape, RunRefusesASmallWorkspaceBeforeLaunching) {
  auto d = QuantDesc::per_channel(QuantOp::fake_quantize_learnable, DType::f32, DType::s32, Shape::of({16, 32}), 0,
                                  false, Direction::Backward);
  d.q_min = 0, d.q_max = 255;
  auto p = QuantPlan::select(kTarget, d);
  ASSERT_TRUE(p.ok());
  QuantArgs a;
  a.dy = ref_of(0, DType::f32, Layout::contiguous({16, 32}));
  a.x = ref_of(1, DType::f32, Layout::contiguous({16, 32}));
  a.scale = ref_of(2, DType::f32, Layout::contiguous({16}));
  a.zero_point = ref_of(3, DType::f32, Layout::contiguous({16}));
  a.out = mut_of(4, DType::f32, Layout::contiguous({16, 32}));
  EXPECT_FAILS_WITH(p->run(nullptr, Workspace{fake_ptr(7), 8}, a), Status::WorkspaceTooSmall,
                    "workspace expected >=", "got 8");
}

TEST(QuantPlanShape, SkuStrings) {
  auto p = QuantPlan::select(kTarget, qchan(DType::bf16, DType::s4));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->sku().dtypes, "bfloat16->int4");
  EXPECT_EQ(p->sku().layout, "per_channel(axis=0)");
  auto dq = QuantPlan::select(kTarget,
                              QuantDesc::per_token(QuantOp::dequantize, DType::f16, DType::f8e5m2, Shape::of({4, 4})));
  ASSERT_TRUE(dq.ok()) << dq.message();
  EXPECT_EQ(dq->sku().dtypes, "float8_e5m2->float16");
  auto y = QuantPlan::select(kTarget, QuantDesc::dynamic_per_tensor(DType::bf16, DType::f8e4m3, Shape::of({4, 4}), 8));
  ASSERT_TRUE(y.ok());
  EXPECT_NE(y->sku().layout.find("delayed, history=8"), std::string::npos);
  EXPECT_NE(y->precision().note.find("448"), std::string::npos);
  auto as = QuantPlan::select(kTarget, QuantDesc::dynamic_per_token(DType::bf16, DType::u8, Shape::of({4, 4}), true));
  ASSERT_TRUE(as.ok()) << as.message();
  EXPECT_EQ(as->sku().dtypes, "bfloat16->uint8");
  EXPECT_EQ(as->sku().layout, "dynamic-per_token");
  EXPECT_EQ(as->sku().epilogue, "int32 zero point");
  EXPECT_NE(as->precision().note.find("choose_qparams_per_token_asymmetric on [0, 255]"), std::string::npos)
      << as->precision().note;
  auto gs = QuantPlan::select(kTarget, QuantDesc::dynamic_per_group(DType::bf16, DType::s4, Shape::of({4, 64}), 32));
  ASSERT_TRUE(gs.ok()) << gs.message();
  EXPECT_EQ(gs->sku().layout, "dynamic-per_group(axis=1, group=32)");
  EXPECT_NE(gs->precision().note.find("amax / 7"), std::string::npos) << gs->precision().note;
}

// ---- W8A8 linear ------------------------------------------------------------------------------------------
TEST(QuantizedLinear, InferenceOnlyAndDtypes) {
  QuantizedLinearDesc d;
  d.dtype = DType::bf16;
  d.m = 64, d.n = 128, d.k = 256;
  d.direction = Direction::Backward;
  EXPECT_FAILS_WITH(QuantizedLinearPlan::select(kTarget, d), Status::Unsupported, "quantized_linear_backward",
                    "inference-only", "fake_quantize");
  d.direction = Direction::Forward;
  d.dtype = DType::f64;
  EXPECT_FAILS_WITH(QuantizedLinearPlan::select(kTarget, d), Status::Unsupported, "quantized_linear", "dtype expected",
                    "got float64");
  d.dtype = DType::bf16;
  d.k = -1;
  EXPECT_FAILS_WITH(QuantizedLinearPlan::select(kTarget, d), Status::InvalidProblem, "k expected >= 0");
}

TEST(QuantizedLinear, ComposesTheInt8Gemm) {
  QuantizedLinearDesc d;
  d.dtype = DType::bf16;
  d.m = 64, d.n = 128, d.k = 256;
  d.bias = true;
  auto p = QuantizedLinearPlan::select(kTarget, d);
  if (!p.ok()) {  // GemmPlan does not serve int8 -> bf16 with per-row/col scales yet: its reason is forwarded
    EXPECT_NE(p.message().find("quantized_linear: the int8 x int8 GEMM"), std::string::npos) << p.message();
    return;
  }
  EXPECT_GE(p->workspace_size(), 64u * 256 + 64 * 4);
  EXPECT_EQ(p->sku().dtypes, "bfloat16,int8->bfloat16");
  QuantizedLinearArgs a;
  a.x = ref_of(0, DType::bf16, Layout::contiguous({64, 256}));
  a.weight = ref_of(1, DType::s8, Layout::contiguous({128, 256}));
  a.w_scale = ref_of(2, DType::f32, Layout::contiguous({128}));
  a.bias = ref_of(3, DType::bf16, Layout::contiguous({128}));
  a.y = mut_of(4, DType::bf16, Layout::contiguous({64, 128}));
  EXPECT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
  a.weight.layout = strided({128, 256}, {1, 128});
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "weight expected dense");
  a.weight.layout = Layout::contiguous({128, 256});
  a.w_scale.layout = Layout::contiguous({64});
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "w_scale shape expected [128]");
  a.w_scale.layout = Layout::contiguous({128});
  a.bias = {};
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "bias is required");
}

// ---- W4A16 linear ------------------------------------------------------------------------------------------
W4A16LinearDesc w4(int64_t m, int64_t n = 256, int64_t k = 512) {
  W4A16LinearDesc d;
  d.dtype = DType::bf16;
  d.weight_dtype = DType::u4;
  d.m = m, d.n = n, d.k = k;
  d.group_size = 128;
  return d;
}
W4A16LinearArgs w4_args(const W4A16LinearDesc& d) {
  W4A16LinearArgs a;
  a.x = ref_of(0, d.dtype, Layout::contiguous({d.m, d.k}));
  a.weight = ref_of(1, d.weight_dtype, Layout::contiguous({d.n, d.k / 2}));
  a.scale = ref_of(2, DType::f32, Layout::contiguous({d.n, d.k / d.group_size}));
  if (d.zero_point) a.zero_point = ref_of(3, DType::s32, Layout::contiguous({d.n, d.k / d.group_size}));
  if (d.bias) a.bias = ref_of(4, d.dtype, Layout::contiguous({d.n}));
  a.y = mut_of(5, d.dtype, Layout::contiguous({d.m, d.n}));
  return a;
}

TEST(W4A16Linear, DescriptorRules) {
  auto d = w4(1);
  d.direction = Direction::Backward;
  EXPECT_FAILS_WITH(W4A16LinearPlan::select(kTarget, d), Status::Unsupported, "w4a16_linear_backward",
                    "inference-only");
  d = w4(1);
  d.dtype = DType::f32;
  EXPECT_FAILS_WITH(W4A16LinearPlan::select(kTarget, d), Status::Unsupported, "w4a16_linear", "dtype expected",
                    "got float32");
  d = w4(1);
  d.weight_dtype = DType::s8;
  EXPECT_FAILS_WITH(W4A16LinearPlan::select(kTarget, d), Status::Unsupported, "weight_dtype expected", "got int8");
  d = w4(1);
  d.group_size = 48;
  EXPECT_FAILS_WITH(W4A16LinearPlan::select(kTarget, d), Status::InvalidProblem, "group_size expected",
                    "multiple of 32", "got 48");
  d = w4(1, 256, 320);
  EXPECT_FAILS_WITH(W4A16LinearPlan::select(kTarget, d), Status::InvalidProblem, "k=320", "group_size=128");
  d = w4(1);
  d.n = -1;
  EXPECT_FAILS_WITH(W4A16LinearPlan::select(kTarget, d), Status::InvalidProblem, "n expected >= 0", "got -1");
  PlanPreference pref;
  pref.backend = Backend::CuBlasLt;
  EXPECT_FAILS_WITH(W4A16LinearPlan::select(kTarget, w4(1), pref), Status::Unsupported, "backend", "decode");
  EXPECT_FAILS_WITH(W4A16LinearPlan::select(Target::offline(75), w4(1)), Status::Unsupported, "sm_75");
  // Every accepted (activation, weight) pair, and per-channel groups (G = k).
  for (DType t : {DType::bf16, DType::f16})
    for (DType w : {DType::s4, DType::u4}) {
      auto e = w4(16);
      e.dtype = t, e.weight_dtype = w, e.group_size = e.k;
      auto p = W4A16LinearPlan::select(kTarget, e);
      ASSERT_TRUE(p.ok()) << p.message();
      EXPECT_STREQ(p->path(), "decode");
      EXPECT_EQ(p->workspace_size(), 0u);
      EXPECT_TRUE(p->precision().deterministic);
      EXPECT_EQ(p->sku().dtypes, std::string(name(t)) + "," + std::string(name(w)) + "->" + std::string(name(t)));
    }
}

TEST(W4A16Linear, LargeMDequantizesThenGemm) {
  auto d = w4(64);
  d.bias = true;
  auto p = W4A16LinearPlan::select(kTarget, d);
  if (!p.ok()) {  // GemmPlan's refusal is forwarded
    EXPECT_NE(p.message().find("w4a16_linear: the bfloat16 GEMM"), std::string::npos) << p.message();
    return;
  }
  EXPECT_STREQ(p->path(), "dequantize+gemm");
  EXPECT_GE(p->workspace_size(), 256u * 512 * 2);  // the bf16 weight
  EXPECT_NE(p->sku().layout.find("dequantize"), std::string::npos) << p->sku().layout;
  EXPECT_TRUE(p->can_implement(w4_args(d)).ok()) << p->can_implement(w4_args(d)).message();
  EXPECT_FAILS_WITH(p->run(nullptr, Workspace{fake_ptr(9), 64}, w4_args(d)), Status::WorkspaceTooSmall,
                    "workspace expected >=", "got 64");
}

TEST(W4A16Linear, ArgumentChecks) {
  auto d = w4(4);
  d.zero_point = true;
  d.bias = true;
  auto p = W4A16LinearPlan::select(kTarget, d);
  ASSERT_TRUE(p.ok()) << p.message();
  auto a = w4_args(d);
  EXPECT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
  a.weight.layout = Layout::contiguous({256, 512});  // not halved
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "weight shape expected [256, 256]", "[256, 512]");
  a = w4_args(d);
  a.weight.dtype = DType::s4;
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "weight dtype expected uint4", "got int4");
  a = w4_args(d);
  a.scale.layout = Layout::contiguous({256, 8});
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "scale shape expected [256, 4]");
  a = w4_args(d);
  a.zero_point = {};
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "zero_point is required");
  a = w4_args(d);
  a.x.layout = strided({4, 512}, {1, 4});
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "x expected a unit column stride");
  a = w4_args(d);
  a.x = ref_of(0, DType::bf16, Layout::contiguous({4, 512}), 2);
  EXPECT_FAILS_WITH(p->can_implement(a), Status::MisalignedOperand, "x expected 16-byte aligned rows");
  a = w4_args(d);
  a.x.layout = strided({4, 512}, {516, 1});
  EXPECT_FAILS_WITH(p->can_implement(a), Status::MisalignedOperand, "x expected 16-byte aligned rows");
  a = w4_args(d);
  a.x.layout = strided({4, 512}, {520, 1});  // padded rows, still aligned
  EXPECT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
  a = w4_args(d);
  a.y = mut_of(0, DType::bf16, Layout::contiguous({4, 256}));  // on top of x
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "y overlaps x");
  a = w4_args(d);
  a.y.layout = strided({4, 256}, {512, 1});
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "y expected dense");
  auto sym = w4(4);
  auto ps = W4A16LinearPlan::select(kTarget, sym);
  ASSERT_TRUE(ps.ok());
  a = w4_args(sym);
  a.zero_point = ref_of(3, DType::s32, Layout::contiguous({256, 4}));
  EXPECT_FAILS_WITH(ps->can_implement(a), Status::InvalidProblem, "zero_point given", "symmetric");
  a = w4_args(sym);
  a.bias = ref_of(4, DType::bf16, Layout::contiguous({256}));
  EXPECT_FAILS_WITH(ps->can_implement(a), Status::InvalidProblem, "bias given");
}

TEST(W4A16Linear, CoverageRows) {
  const auto rows = coverage(kTarget);
  auto has = [&](const std::string& dt) {
    return std::any_of(rows.begin(), rows.end(),
                       [&](const CoverageRow& r) { return r.op == "w4a16_linear" && r.dtype == dt; });
  };
  EXPECT_TRUE(has("bfloat16,uint4->bfloat16"));
  EXPECT_TRUE(has("float16,int4->float16"));
  EXPECT_FALSE(has("float32,uint4->float32"));
  EXPECT_EQ(info(QuantOp::w4a16_linear).engine, QuantEngine::linear);
  EXPECT_FAILS_WITH(QuantPlan::select(kTarget, QuantDesc::per_group(QuantOp::w4a16_linear, DType::bf16, DType::u4,
                                                                    Shape::of({8, 64}), -1, 32)),
                    Status::InvalidProblem, "W4A16LinearPlan");
}

}  // namespace
}  // namespace baracuda
