// The softmax/normalization family without a GPU: the table, dtype coverage (declared ==
// accepted), descriptor and argument refusals with their messages, preferences, the launch
// shape (a function of the problem only), workspace sizing and the variant run() would take.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "baracuda/core/coverage.hpp"
#include "baracuda/ops/norm.hpp"
#include "test_util.hpp"

namespace baracuda {
namespace {

using test::fake_ptr;
using test::mut_of;
using test::ref_of;
using test::strided;

const Target kTarget = Target::offline(90);


NormDesc ln(DType dt = DType::f32, Direction dir = Direction::Forward, bool w = true, bool b = true) {
  return NormDesc::layer_norm(dt, Shape::of({8, 64}), 1, w, b, 1e-5, dir);
}

/// Forward layer_norm args matching ln(): x [8, 64], weight/bias [64], stats [8].
NormArgs ln_args(DType dt = DType::f32) {
  NormArgs a;
  a.x = ref_of(0, dt, Layout::contiguous({8, 64}));
  a.weight = ref_of(1, dt, Layout::contiguous({64}));
  a.bias = ref_of(2, dt, Layout::contiguous({64}));
  a.out = mut_of(3, dt, Layout::contiguous({8, 64}));
  a.save_mean = mut_of(4, DType::f32, Layout::contiguous({8, 1}));
  a.save_rstd = mut_of(5, DType::f32, Layout::contiguous({8, 1}));
  return a;
}

// ---- table and coverage ------------------------------------------------------------------------
TEST(NormTable, RowsAndNames) {
  ASSERT_EQ(norm_ops().size(), 5u);
  for (const char* n : {"softmax", "log_softmax", "layer_norm", "rms_norm", "normalize"}) {
    auto op = norm_op_from_name(n);
    ASSERT_TRUE(op.has_value()) << n;
    EXPECT_STREQ(info(*op).name, n);
  }
  EXPECT_FALSE(norm_op_from_name("batch_norm").has_value());
  EXPECT_TRUE(info(NormOp::layer_norm).takes_bias());
  EXPECT_TRUE(info(NormOp::layer_norm).saves_mean());
  EXPECT_FALSE(info(NormOp::rms_norm).takes_bias());
  EXPECT_TRUE(info(NormOp::rms_norm).takes_weight());
  EXPECT_FALSE(info(NormOp::rms_norm).saves_mean());
  EXPECT_FALSE(info(NormOp::softmax).takes_weight());
  EXPECT_TRUE(info(NormOp::softmax).bw_reads_output());
  EXPECT_FALSE(info(NormOp::normalize).bw_reads_output());
  EXPECT_EQ(info(NormOp::normalize).kind, NormKind::axis);
  EXPECT_EQ(norm_stats_dtype(DType::bf16), DType::f32);
  EXPECT_EQ(norm_stats_dtype(DType::f64), DType::f64);
}

TEST(NormCoverage, AcceptsExactlyDeclaredDtypes) {
  for (const auto& in : norm_ops()) {
    for (Direction dir : {Direction::Forward, Direction::Backward}) {
      for (int i = 0; i < kNumDTypes; ++i) {
        const DType t = static_cast<DType>(i);
        SCOPED_TRACE(std::string(in.name) + " " + to_string(dir) + " " + std::string(name(t)));
        NormDesc d = in.kind == NormKind::axis
                         ? NormDesc::softmax(t, Shape::of({4, 8}), -1, false, dir)
                         : NormDesc::layer_norm(t, Shape::of({4, 8}), 1, true, in.takes_bias(), 1e-5, dir);
        d.op = in.op;
        auto plan = NormPlan::select(kTarget, d);
        const DTypeSet declared = dir == Direction::Forward ? in.fw_dtypes : in.bw_dtypes;
        if (contains(declared, t)) {
          ASSERT_TRUE(plan.ok()) << plan.message();
          EXPECT_EQ(plan->sku().category, "norm");
          EXPECT_EQ(plan->sku().dtypes, std::string(name(t)) + "->" + std::string(name(t)));
        } else {
          EXPECT_FAILS_WITH(plan, Status::Unsupported, in.name, "dtype", "got " + std::string(name(t)));
        }
      }
    }
  }
}

TEST(NormCoverage, ListedRows) {
  const auto rows = coverage(kTarget);
  auto has = [&](const char* op, Direction dir, const std::string& dt) {
    return std::any_of(rows.begin(), rows.end(), [&](const CoverageRow& r) {
      return r.family == "norm" && r.op == op && r.direction == dir && r.dtype == dt;
    });
  };
  for (const char* op : {"softmax", "log_softmax", "layer_norm", "rms_norm", "normalize"})
    for (Direction dir : {Direction::Forward, Direction::Backward})
      for (const char* dt : {"float32", "float16", "bfloat16", "float64"})
        EXPECT_TRUE(has(op, dir, dt)) << op << " " << dt;
  EXPECT_TRUE(has("layer_norm", Direction::Forward, "bfloat16,float32->bfloat16"));
  EXPECT_TRUE(has("rms_norm", Direction::Backward, "float16,float32->float16"));
  EXPECT_FALSE(has("softmax", Direction::Forward, "bfloat16,float32->bfloat16"));
  EXPECT_FALSE(has("softmax", Direction::Forward, "int32"));
}

// ---- descriptor refusals ---------------------------------------------------------------------------
TEST(NormSelect, SoftmaxAxisRange) {
  EXPECT_TRUE(NormPlan::select(kTarget, NormDesc::softmax(DType::f32, Shape::of({3, 4}), -2)).ok());
  EXPECT_TRUE(NormPlan::select(kTarget, NormDesc::softmax(DType::f32, Shape::of({3, 4}), 1)).ok());
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, NormDesc::softmax(DType::f32, Shape::of({3, 4}), 2)),
                    Status::InvalidProblem, "softmax", "axis", "[-2, 2)", "got 2");
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, NormDesc::softmax(DType::f32, Shape::of({3, 4}), -3, true)),
                    Status::InvalidProblem, "log_softmax", "axis", "got -3");
  // A 0-dim input takes axis 0 or -1 (torch): one row of one element.
  auto p = NormPlan::select(kTarget, NormDesc::softmax(DType::f32, Shape::of({}), 0));
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(p->rows(), 1);
  EXPECT_EQ(p->row_length(), 1);
}

TEST(NormSelect, SoftmaxTakesNoParameters) {
  auto d = NormDesc::softmax(DType::f32, Shape::of({3, 4}), -1);
  d.weight = true;
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, d), Status::InvalidProblem, "softmax", "no weight", "weight");
  d.weight = false;
  d.residual = true;
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, d), Status::InvalidProblem, "softmax", "residual");
}

TEST(NormSelect, NormalizedDims) {
  auto d = NormDesc::layer_norm(DType::f32, Shape::of({2, 3, 4}), 0, false, false, 1e-5);
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, d), Status::InvalidProblem, "layer_norm", "norm_ndim", "[1, 3]", "got 0");
  d.norm_ndim = 4;
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, d), Status::InvalidProblem, "layer_norm", "got 4");
  d.norm_ndim = 2;
  auto p = NormPlan::select(kTarget, d);
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(p->rows(), 2);
  EXPECT_EQ(p->row_length(), 12);
}

TEST(NormSelect, Eps) {
  for (double eps : {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(), -1e-5}) {
    auto d = NormDesc::rms_norm(DType::bf16, Shape::of({2, 8}), 1, true, eps);
    EXPECT_FAILS_WITH(NormPlan::select(kTarget, d), Status::InvalidProblem, "rms_norm", "eps", "finite");
  }
  EXPECT_TRUE(NormPlan::select(kTarget, NormDesc::rms_norm(DType::bf16, Shape::of({2, 8}), 1, true, 0.0)).ok());
}

TEST(NormSelect, BiasResidualAndShapes) {
  auto d = NormDesc::rms_norm(DType::f32, Shape::of({2, 8}), 1, true, 1e-6);
  d.bias = true;
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, d), Status::InvalidProblem, "rms_norm", "takes no bias");
  auto b = NormDesc::layer_norm(DType::f32, Shape::of({2, 8}), 1, true, true, 1e-5, Direction::Backward);
  b.residual = true;
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, b), Status::InvalidProblem, "layer_norm_backward", "residual");
  auto n = NormDesc::softmax(DType::f32, Shape::of({2, -8}), -1);
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, n), Status::InvalidProblem, "softmax", "negative");
  n.shape.rank = 9;
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, n), Status::InvalidProblem, "softmax", "rank");
}

TEST(NormSelect, ParamDtype) {
  auto d = NormDesc::layer_norm(DType::bf16, Shape::of({2, 8}), 1, true, true, 1e-5);
  d.param_dtype = DType::f32;  // torch's mixed bf16 input / f32 weight
  auto p = NormPlan::select(kTarget, d);
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(p->sku().dtypes, "bfloat16,float32->bfloat16");
  d.param_dtype = DType::f16;
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, d), Status::Unsupported, "layer_norm", "param_dtype",
                    "bfloat16 or float32", "got float16");
  auto f = NormDesc::rms_norm(DType::f64, Shape::of({2, 8}), 1, true, 1e-5);
  f.param_dtype = DType::f32;
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, f), Status::Unsupported, "rms_norm", "param_dtype", "got float32");
  // Without parameters the field is irrelevant and normalized to the input dtype.
  auto s = NormDesc::layer_norm(DType::f16, Shape::of({2, 8}), 1, false, false, 1e-5);
  s.param_dtype = DType::s8;
  auto q = NormPlan::select(kTarget, s);
  ASSERT_TRUE(q.ok()) << q.message();
  EXPECT_EQ(q->desc().param_dtype, DType::f16);
}

TEST(NormSelect, Preferences) {
  const auto d = ln();
  PlanPreference p;
  p.backend = Backend::CuDnn;
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, d, p), Status::Unsupported, "layer_norm", "backend=");
  p = {};
  p.tf32 = Tristate::Require;
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, d, p), Status::Unsupported, "tf32=Require");
  p = {};
  p.reduced_precision_reduction = Tristate::Require;
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, d, p), Status::Unsupported, "reduced_precision_reduction");
  p = {};
  p.require_deterministic = p.require_bit_stable = true;
  p.backend = Backend::Native;
  auto ok = NormPlan::select(kTarget, d, p);
  ASSERT_TRUE(ok.ok()) << ok.message();
  EXPECT_TRUE(ok->precision().deterministic);
  EXPECT_TRUE(ok->precision().bit_stable);
  EXPECT_EQ(ok->precision().accumulator, DType::f32);
  p = {};
  p.vectorized = Tristate::Forbid;
  auto nv = NormPlan::select(kTarget, d, p);
  ASSERT_TRUE(nv.ok());
  EXPECT_EQ(nv->layout_for(ln_args()), "subwarp-registers-scalar");
  EXPECT_EQ(NormPlan::select(kTarget, d)->layout_for(ln_args()), "subwarp-registers-vec16");
  EXPECT_FAILS_WITH(NormPlan::select(Target::offline(75), d), Status::Unsupported, "sm_75");
  EXPECT_EQ(NormPlan::select(kTarget, ln(DType::f64))->precision().accumulator, DType::f64);
}

// ---- launch shape -----------------------------------------------------------------------------------
TEST(NormConfig, ShapeFollowsRowLength) {
  auto cfg = [](NormDesc d) { return NormPlan::select(kTarget, d)->config(); };
  auto sm = [](int64_t n, DType dt = DType::bf16) { return NormDesc::softmax(dt, Shape::of({16, n}), -1); };
  EXPECT_EQ(cfg(sm(1)).tpr, 1);
  EXPECT_EQ(cfg(sm(7)).tpr, 1);
  EXPECT_EQ(cfg(sm(129)).tpr, 32);  // 17 vectors of 8 -> a warp
  EXPECT_FALSE(cfg(sm(129)).big);
  EXPECT_EQ(cfg(sm(4096)).tpr, 128);  // 32 bf16 a thread, registers
  EXPECT_TRUE(cfg(sm(4096)).cached);
  EXPECT_EQ(cfg(sm(4096)).block, 128);
  EXPECT_EQ(cfg(sm(4097)).tpr, 256);
  EXPECT_EQ(cfg(sm(16384)).tpr, 512);
  EXPECT_TRUE(cfg(sm(16384)).cached);
  EXPECT_FALSE(cfg(sm(16385)).cached);  // streams, one pass for (max, sum)
  EXPECT_EQ(cfg(sm(1 << 20)).tpr, 512);
  EXPECT_EQ(cfg(ln(DType::bf16)).tpr, 8);  // 64 elements = 8 vectors
  auto big = NormDesc::layer_norm(DType::bf16, Shape::of({16384, 4096}), 1, true, true, 1e-5);
  EXPECT_EQ(cfg(big).tpr, 128);  // 32 a thread (parameters are read at the output)
  EXPECT_TRUE(cfg(big).cached);
  big.direction = Direction::Backward;
  EXPECT_EQ(cfg(big).tpr, 256);  // 16 a thread: dy, x and the weight are cached
  auto f64 = NormDesc::rms_norm(DType::f64, Shape::of({4, 4096}), 1, true, 1e-5);
  EXPECT_EQ(cfg(f64).tpr, 512);
  EXPECT_EQ(cfg(f64).items, 8);
  EXPECT_EQ(NormPlan::select(kTarget, sm(4096))->sku().layout, "cta-rows(tpr=128)-registers");
}

TEST(NormConfig, IndependentOfTheDevice) {
  auto d = NormDesc::layer_norm(DType::bf16, Shape::of({16384, 4096}), 1, true, true, 1e-5, Direction::Backward);
  const Target small{0, 90, 8}, large{0, 90, 132};
  auto a = NormPlan::select(small, d), b = NormPlan::select(large, d);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->config().tpr, b->config().tpr);
  EXPECT_EQ(a->config().slots, b->config().slots);
  EXPECT_EQ(a->workspace_size(), b->workspace_size());
}

TEST(NormConfig, Workspace) {
  auto lnb = NormDesc::layer_norm(DType::bf16, Shape::of({16384, 4096}), 1, true, true, 1e-5, Direction::Backward);
  auto p = NormPlan::select(kTarget, lnb);
  EXPECT_EQ(p->config().tpr, 256);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->config().slots, 512);
  EXPECT_EQ(p->workspace_size(), size_t{2} * 512 * 4096 * 4);
  auto rms = NormDesc::rms_norm(DType::bf16, Shape::of({16384, 4096}), 1, true, 1e-5, Direction::Backward);
  EXPECT_EQ(NormPlan::select(kTarget, rms)->workspace_size(), size_t{512} * 4096 * 4);
  auto few = NormDesc::rms_norm(DType::f32, Shape::of({3, 64}), 1, true, 1e-5, Direction::Backward);
  auto pf = NormPlan::select(kTarget, few);
  ASSERT_TRUE(pf.ok());
  EXPECT_EQ(pf->config().slots % (pf->config().block / pf->config().tpr), 0);
  EXPECT_GE(pf->config().slots, 3);
  EXPECT_EQ(NormPlan::select(kTarget, ln(DType::f32, Direction::Backward, false, false))->workspace_size(), 0u);
  EXPECT_EQ(NormPlan::select(kTarget, ln())->workspace_size(), 0u);
  // Very long rows: fewer slots keep the partial sums bounded.
  auto lng = NormDesc::rms_norm(DType::f32, Shape::of({64, 1 << 22}), 1, true, 1e-5, Direction::Backward);
  auto pl = NormPlan::select(kTarget, lng);
  ASSERT_TRUE(pl.ok());
  EXPECT_LE(static_cast<int64_t>(pl->config().slots) * (1 << 22), (int64_t{1} << 26) + (1 << 22));
}

// ---- arguments ------------------------------------------------------------------------------------
TEST(NormArgsCheck, Valid) {
  auto p = NormPlan::select(kTarget, ln());
  ASSERT_TRUE(p.ok());
  auto a = ln_args();
  EXPECT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
  a.save_mean = {};
  a.save_rstd = {};
  EXPECT_TRUE(p->can_implement(a).ok()) << "saved statistics are optional";
}

TEST(NormArgsCheck, ShapesAndDtypes) {
  auto p = NormPlan::select(kTarget, ln());
  auto a = ln_args();
  a.out.layout = Layout::contiguous({8, 63});
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "layer_norm", "out", "[8, 64]", "got [8, 63]");
  a = ln_args();
  a.x.dtype = DType::f16;
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "x dtype", "float32", "got float16");
  a = ln_args();
  a.weight.layout = Layout::contiguous({63});
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "weight shape", "[64]", "got [63]");
  a = ln_args();
  a.bias.layout = strided({64}, {2});
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "bias", "contiguous");
  a = ln_args();
  a.save_rstd.layout = Layout::contiguous({7});
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "save_rstd", "8 elements", "got 7");
  a = ln_args();
  a.save_mean.dtype = DType::bf16;
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "save_mean dtype", "float32", "got bfloat16");
  a = ln_args();
  a.weight = {};
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "weight", "required");
  a = ln_args();
  a.x.layout = strided({8, 64}, {64, -1});
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "x", "negative");
  a = ln_args();
  a.x.data = nullptr;
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "x", "null");
}

TEST(NormArgsCheck, UnexpectedTensorsRefused) {
  auto p = NormPlan::select(kTarget, ln(DType::f32, Direction::Forward, false, false));
  auto a = ln_args();
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "weight given", "desc.weight is false");
  auto r = NormPlan::select(kTarget, NormDesc::rms_norm(DType::f32, Shape::of({8, 64}), 1, false, 1e-5));
  a = ln_args();
  a.weight = {};
  a.bias = {};
  EXPECT_FAILS_WITH(r->can_implement(a), Status::InvalidProblem, "save_mean", "only layer_norm");
  a.save_mean = {};
  EXPECT_TRUE(r->can_implement(a).ok()) << r->can_implement(a).message();
}

TEST(NormArgsCheck, OverlapAndInPlace) {
  auto p = NormPlan::select(kTarget, NormDesc::softmax(DType::f32, Shape::of({8, 64}), -1));
  NormArgs a;
  a.x = ref_of(0, DType::f32, Layout::contiguous({8, 64}));
  a.out = mut_of(0, DType::f32, Layout::contiguous({8, 64}));
  EXPECT_TRUE(p->can_implement(a).ok()) << "exact in-place: " << p->can_implement(a).message();
  a.out = mut_of(0, DType::f32, Layout::contiguous({8, 64}), 4);
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "out overlaps x");
  a.out = TensorMut{fake_ptr(1), DType::f32, strided({8, 64}, {0, 1})};
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "out overlaps itself");
}

TEST(NormArgsCheck, StridedLayouts) {
  // Softmax over a non-innermost axis and over a transposed tensor: the strided path.
  auto p = NormPlan::select(kTarget, NormDesc::softmax(DType::f32, Shape::of({8, 64}), 0));
  NormArgs a;
  a.x = ref_of(0, DType::f32, Layout::contiguous({8, 64}));
  a.out = mut_of(1, DType::f32, Layout::contiguous({8, 64}));
  ASSERT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
  EXPECT_EQ(p->layout_for(a), "subwarp-registers-scalar");
  auto q = NormPlan::select(kTarget, NormDesc::softmax(DType::f32, Shape::of({8, 64}), 1));
  a.x = ref_of(0, DType::f32, Layout::contiguous({8, 64}), 4);  // misaligned by one element
  EXPECT_EQ(q->layout_for(a), "subwarp-registers-scalar");
  a.x = ref_of(0, DType::f32, Layout::contiguous({8, 64}));
  EXPECT_EQ(q->layout_for(a), "subwarp-registers-vec16");
  // Many rows over a non-innermost axis: one thread a row, coalesced across rows.
  auto c = NormPlan::select(kTarget, NormDesc::softmax(DType::bf16, Shape::of({64, 8192}), 0));
  NormArgs ca;
  ca.x = ref_of(0, DType::bf16, Layout::contiguous({64, 8192}));
  ca.out = mut_of(1, DType::bf16, Layout::contiguous({64, 8192}));
  EXPECT_EQ(c->layout_for(ca), "column-streaming-scalar");
  auto c3 = NormPlan::select(kTarget, NormDesc::softmax(DType::f32, Shape::of({4, 9, 4096}), 1));
  NormArgs c3a;
  c3a.x = ref_of(0, DType::f32, Layout::contiguous({4, 9, 4096}));
  c3a.out = mut_of(1, DType::f32, Layout::contiguous({4, 9, 4096}));
  EXPECT_EQ(c3->layout_for(c3a), "column-registers-scalar");
  // Normalized dims that do not merge into one strided dim are refused with a way out.
  auto r = NormPlan::select(kTarget, NormDesc::layer_norm(DType::f32, Shape::of({2, 3, 4}), 2, false, false, 1e-5));
  NormArgs b;
  b.x = TensorRef{fake_ptr(0), DType::f32, strided({2, 3, 4}, {12, 1, 3})};
  b.out = mut_of(1, DType::f32, Layout::contiguous({2, 3, 4}));
  EXPECT_FAILS_WITH(r->can_implement(b), Status::Unsupported, "layer_norm", "x", "contiguous");
  b.x = TensorRef{fake_ptr(0), DType::f32, strided({2, 3, 4}, {1, 8, 2})};  // batch innermost: fine
  EXPECT_TRUE(r->can_implement(b).ok()) << r->can_implement(b).message();
}

TEST(NormArgsCheck, Backward) {
  auto d = NormDesc::layer_norm(DType::bf16, Shape::of({8, 64}), 1, true, true, 1e-5, Direction::Backward);
  d.param_dtype = DType::f32;
  auto p = NormPlan::select(kTarget, d);
  ASSERT_TRUE(p.ok()) << p.message();
  NormArgs a;
  a.dy = ref_of(0, DType::bf16, Layout::contiguous({8, 64}));
  a.x = ref_of(1, DType::bf16, Layout::contiguous({8, 64}));
  a.mean = ref_of(2, DType::f32, Layout::contiguous({8}));
  a.rstd = ref_of(3, DType::f32, Layout::contiguous({8}));
  a.weight = ref_of(4, DType::f32, Layout::contiguous({64}));
  a.out = mut_of(5, DType::bf16, Layout::contiguous({8, 64}));
  a.dweight = mut_of(6, DType::f32, Layout::contiguous({64}));
  a.dbias = mut_of(7, DType::f32, Layout::contiguous({64}));
  ASSERT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
  EXPECT_GT(p->workspace_size(), 0u);
  EXPECT_FAILS_WITH(p->run(nullptr, {}, a), Status::WorkspaceTooSmall, "layer_norm_backward", "workspace");
  a.mean = {};
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "mean", "required");
  a.mean = ref_of(2, DType::f32, Layout::contiguous({8}));
  a.y = ref_of(8, DType::bf16, Layout::contiguous({8, 64}));
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "y given");

  auto s = NormPlan::select(kTarget, NormDesc::softmax(DType::f32, Shape::of({8, 64}), -1, true, Direction::Backward));
  NormArgs b;
  b.dy = ref_of(0, DType::f32, Layout::contiguous({8, 64}));
  b.y = ref_of(1, DType::f32, Layout::contiguous({8, 64}));
  b.out = mut_of(0, DType::f32, Layout::contiguous({8, 64}));  // in place on dy
  EXPECT_TRUE(s->can_implement(b).ok()) << s->can_implement(b).message();
  EXPECT_EQ(s->workspace_size(), 0u);
}

TEST(NormArgsCheck, ResidualNeedsItsOutput) {
  auto d = NormDesc::rms_norm(DType::bf16, Shape::of({8, 64}), 1, true, 1e-6);
  d.residual = true;
  auto p = NormPlan::select(kTarget, d);
  ASSERT_TRUE(p.ok());
  NormArgs a;
  a.x = ref_of(0, DType::bf16, Layout::contiguous({8, 64}));
  a.residual = ref_of(1, DType::bf16, Layout::contiguous({8, 64}));
  a.weight = ref_of(2, DType::bf16, Layout::contiguous({64}));
  a.out = mut_of(3, DType::bf16, Layout::contiguous({8, 64}));
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "residual_out", "required");
  a.residual_out = mut_of(1, DType::bf16, Layout::contiguous({8, 64}));  // in place on residual (vLLM style)
  EXPECT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
}

TEST(NormMask, Validation) {
  auto d = NormDesc::softmax(DType::bf16, Shape::of({4, 8, 16}), -1);
  d.mask = NormMask::boolean;
  d.mask_shape = Shape::of({8, 1});
  auto p = NormPlan::select(kTarget, d);
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_NE(p->precision().note.find("boolean mask"), std::string::npos) << p->precision().note;
  NormArgs a;
  a.x = ref_of(0, DType::bf16, Layout::contiguous({4, 8, 16}));
  a.out = mut_of(1, DType::bf16, Layout::contiguous({4, 8, 16}));
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "mask", "required");
  a.mask = ref_of(2, DType::bf16, Layout::contiguous({8, 1}));
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "mask dtype", "bool", "got bfloat16");
  a.mask = ref_of(2, DType::b8, Layout::contiguous({8, 2}));
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "mask shape", "[8, 1]", "got [8, 2]");
  a.mask = ref_of(2, DType::b8, Layout::contiguous({8, 1}));
  EXPECT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
  EXPECT_EQ(p->layout_for(a), "subwarp-registers-vec16") << "the mask does not change the variant";

  d.mask_shape = Shape::of({3, 16});
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, d), Status::InvalidProblem, "mask shape [3, 16]", "broadcast");
  d.mask_shape = Shape::of({1, 1, 8, 16});
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, d), Status::InvalidProblem, "mask rank");
  d.mask_shape = Shape::of({16});
  d.op = NormOp::log_softmax;
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, d), Status::Unsupported, "log_softmax", "softmax only");
  d.op = NormOp::softmax;
  d.direction = Direction::Backward;
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, d), Status::InvalidProblem, "softmax_backward", "mask");
  auto l = NormDesc::layer_norm(DType::f32, Shape::of({4, 8}), 1, false, false, 1e-5);
  l.mask = NormMask::additive;
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, l), Status::InvalidProblem, "layer_norm", "no mask");
  // A mask given to an unmasked descriptor is refused, not ignored.
  auto u = NormPlan::select(kTarget, NormDesc::softmax(DType::bf16, Shape::of({4, 8, 16}), -1));
  EXPECT_FAILS_WITH(u->can_implement(a), Status::InvalidProblem, "mask given");
  // An output may not overlap the mask.
  a.out = mut_of(2, DType::bf16, Layout::contiguous({4, 8, 16}));
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "out overlaps mask");
}

TEST(NormNormalize, ValidationAndArgs) {
  auto d = NormDesc::normalize(DType::f32, Shape::of({8, 64}), 1);
  EXPECT_EQ(d.eps, 1e-12);
  auto p = NormPlan::select(kTarget, d);
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_NE(p->precision().note.find("p=2"), std::string::npos);
  d.eps = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, d), Status::InvalidProblem, "normalize", "eps");
  d.eps = 1e-12;
  d.axis = 2;
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, d), Status::InvalidProblem, "normalize", "axis", "got 2");
  d.axis = 0;
  d.weight = true;
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, d), Status::InvalidProblem, "normalize takes no weight");
  // The backward reads x (not y).
  auto b =
      NormPlan::select(kTarget, NormDesc::normalize(DType::f32, Shape::of({8, 64}), 1, 1e-12, Direction::Backward));
  ASSERT_TRUE(b.ok());
  NormArgs a;
  a.dy = ref_of(0, DType::f32, Layout::contiguous({8, 64}));
  a.out = mut_of(2, DType::f32, Layout::contiguous({8, 64}));
  EXPECT_FAILS_WITH(b->can_implement(a), Status::InvalidProblem, "normalize_backward", "x", "required");
  a.y = ref_of(1, DType::f32, Layout::contiguous({8, 64}));
  EXPECT_FAILS_WITH(b->can_implement(a), Status::InvalidProblem, "y given");
  a.y = {};
  a.x = ref_of(1, DType::f32, Layout::contiguous({8, 64}));
  EXPECT_TRUE(b->can_implement(a).ok()) << b->can_implement(a).message();
  EXPECT_EQ(b->layout_for(a), "subwarp-registers-vec16");
}

TEST(NormRun, EmptyProblemLaunchesNothing) {
  auto p = NormPlan::select(kTarget, NormDesc::softmax(DType::f32, Shape::of({0, 64}), -1));
  ASSERT_TRUE(p.ok());
  NormArgs a;
  a.x = ref_of(0, DType::f32, Layout::contiguous({0, 64}));
  a.out = mut_of(1, DType::f32, Layout::contiguous({0, 64}));
  EXPECT_EQ(p->layout_for(a), "empty");
  EXPECT_TRUE(p->run(nullptr, {}, a).ok());
}

}  // namespace
}  // namespace baracuda
