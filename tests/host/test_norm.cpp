// The softmax/normalization family without a GPU: the table, dtype coverage (declared ==
// accepted), descriptor and argument refusals with their messages, preferences, the launch
// shape (a function of the problem only), workspace sizing and the variant run() would take;
// the same for the channel ops (batch/instance/group norm, local_response_norm).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "baracuda/core/coverage.hpp"
#include "baracuda/ops/norm.hpp"
#include "kernels/common/philox.hpp"
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

/// A descriptor of `in`'s kind that select() accepts whenever `dt` is declared (channel ops:
/// [2, 4, 3] with weight and bias, group_norm in 2 groups, lrn size 3).
NormDesc probe_of(const NormOpInfo& in, DType dt, Direction dir) {
  NormDesc d;
  if (in.kind == NormKind::axis) {
    d = NormDesc::softmax(dt, Shape::of({4, 8}), -1, false, dir);
  } else if (in.kind == NormKind::norm) {
    d = NormDesc::layer_norm(dt, Shape::of({4, 8}), 1, true, in.takes_bias(), 1e-5, dir);
  } else if (in.op == NormOp::local_response_norm) {
    d = NormDesc::local_response_norm(dt, Shape::of({2, 4, 3}), 3, 1e-4, 0.75, 1.0, dir);
  } else {
    d = NormDesc::batch_norm(dt, Shape::of({2, 4, 3}), true, true, true, false, 0.1, 1e-5, dir);
    d.num_groups = in.op == NormOp::group_norm ? 2 : 1;
  }
  d.op = in.op;
  return d;
}

// ---- table and coverage ------------------------------------------------------------------------
TEST(NormTable, RowsAndNames) {
  ASSERT_EQ(norm_ops().size(), 11u);
  for (const char* n : {"softmax", "log_softmax", "layer_norm", "rms_norm", "normalize", "sparsemax", "gumbel_softmax",
                        "batch_norm", "instance_norm", "group_norm", "local_response_norm"}) {
    auto op = norm_op_from_name(n);
    ASSERT_TRUE(op.has_value()) << n;
    EXPECT_STREQ(info(*op).name, n);
  }
  EXPECT_FALSE(norm_op_from_name("entmax15").has_value());
  for (NormOp op : {NormOp::sparsemax, NormOp::gumbel_softmax}) {
    EXPECT_EQ(info(op).kind, NormKind::axis);
    EXPECT_TRUE(info(op).bw_reads_output()) << "sparsemax reads y; gumbel_softmax the soft sample";
    EXPECT_FALSE(info(op).takes_weight());
  }
  for (NormOp op : {NormOp::batch_norm, NormOp::instance_norm, NormOp::group_norm}) {
    EXPECT_EQ(info(op).kind, NormKind::channel);
    EXPECT_TRUE(info(op).takes_weight() && info(op).takes_bias());
    EXPECT_TRUE(info(op).saves_mean());
  }
  EXPECT_EQ(info(NormOp::local_response_norm).kind, NormKind::channel);
  EXPECT_FALSE(info(NormOp::local_response_norm).takes_weight());
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
        auto plan = NormPlan::select(kTarget, probe_of(in, t, dir));
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
    return baracuda::test::has_coverage_row(rows, "norm", op, dir, dt);
  };
  for (const char* op : {"softmax", "log_softmax", "layer_norm", "rms_norm", "normalize", "sparsemax", "gumbel_softmax",
                         "batch_norm", "instance_norm", "group_norm", "local_response_norm"})
    for (Direction dir : {Direction::Forward, Direction::Backward})
      for (const char* dt : {"float32", "float16", "bfloat16", "float64"})
        EXPECT_TRUE(has(op, dir, dt)) << op << " " << dt;
  EXPECT_TRUE(has("layer_norm", Direction::Forward, "bfloat16,float32->bfloat16"));
  EXPECT_TRUE(has("rms_norm", Direction::Backward, "float16,float32->float16"));
  EXPECT_FALSE(has("softmax", Direction::Forward, "bfloat16,float32->bfloat16"));
  EXPECT_TRUE(has("batch_norm", Direction::Backward, "bfloat16,float32->bfloat16"));
  EXPECT_TRUE(has("group_norm", Direction::Forward, "float16,float32->float16"));
  EXPECT_FALSE(has("local_response_norm", Direction::Forward, "bfloat16,float32->bfloat16"));
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
  auto ok = baracuda::test::expect_native_preferences<NormPlan>(kTarget, d, "layer_norm");
  ASSERT_TRUE(ok.ok()) << ok.message();
  EXPECT_EQ(ok->precision().accumulator, DType::f32);
  PlanPreference p;
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
  // Past one CTA on sm_90: a few rows (16 here) take a cluster holding the row.
  EXPECT_EQ(cfg(sm(16385)).cluster, 2);
  EXPECT_TRUE(cfg(sm(16385)).cached);
  EXPECT_EQ(NormPlan::select(kTarget, sm(16385))->sku().layout, "cluster-rows(ctas=2,tpr=512)-registers");
  EXPECT_EQ(cfg(sm(1 << 20)).tpr, 512);
  EXPECT_EQ(cfg(sm(1 << 20)).cluster, 16);  // 16 CTAs of 16384: streams through the cluster
  EXPECT_FALSE(cfg(sm(1 << 20)).cached);
  // Many rows of softmax stream through one CTA each (measured faster there); no clusters before sm_90.
  auto many = NormDesc::softmax(DType::bf16, Shape::of({300, 20000}), -1);
  EXPECT_EQ(cfg(many).cluster, 1);
  EXPECT_FALSE(cfg(many).cached);  // streams, one pass for (max, sum)
  EXPECT_EQ(NormPlan::select(Target::offline(80), sm(16385))->config().cluster, 1);
  EXPECT_FALSE(NormPlan::select(Target::offline(80), sm(16385))->config().cached);
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
  auto v = NormDesc::layer_norm(DType::bf16, Shape::of({1024, 128256}), 1, true, true, 1e-5, Direction::Backward);
  auto c = NormPlan::select(small, v), e = NormPlan::select(large, v);
  ASSERT_TRUE(c.ok() && e.ok());
  EXPECT_EQ(c->config().cluster, e->config().cluster);
  EXPECT_EQ(c->config().slots, e->config().slots);
}

TEST(NormConfig, ClusterRowsParameterGradients) {
  // layer_norm backward over a vocabulary row: 16 CTAs of 512 x 16 hold it; one slot a
  // co-resident cluster (14 on an H100), so the workspace is 14 rows of partials per gradient.
  auto v = NormDesc::layer_norm(DType::bf16, Shape::of({1024, 128256}), 1, true, true, 1e-5, Direction::Backward);
  auto p = NormPlan::select(kTarget, v);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->config().cluster, 16);
  EXPECT_TRUE(p->config().cached);
  EXPECT_EQ(p->config().slots, 14);
  EXPECT_EQ(p->workspace_size(), size_t{2} * 14 * 128256 * 4);
  auto r = NormDesc::rms_norm(DType::bf16, Shape::of({1024, 40000}), 1, true, 1e-5, Direction::Backward);
  auto q = NormPlan::select(kTarget, r);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->config().cluster, 8);
  EXPECT_EQ(q->config().slots, 30);
  // Fewer rows than slots: a slot a row.
  r.shape = Shape::of({5, 40000});
  EXPECT_EQ(NormPlan::select(kTarget, r)->config().slots, 5);
}

TEST(NormConfig, Workspace) {
  auto lnb = NormDesc::layer_norm(DType::bf16, Shape::of({16384, 4096}), 1, true, true, 1e-5, Direction::Backward);
  auto p = NormPlan::select(kTarget, lnb);
  EXPECT_EQ(p->config().tpr, 256);
  ASSERT_TRUE(p.ok());
  // layer_norm's dense-rows kernel with the next row ahead runs 2 CTAs an SM: one wave of 132 SMs is
  // 264 CTAs, whatever the device (kNormAheadSlots).
  EXPECT_EQ(p->config().slots, 264);
  EXPECT_EQ(p->workspace_size(), size_t{2} * 264 * 4096 * 4);
  // Everything else: one wave of 132 SMs x 4 CTAs (kNormMaxSlots).
  auto lnf = NormDesc::layer_norm(DType::f32, Shape::of({16384, 4096}), 1, true, true, 1e-5, Direction::Backward);
  EXPECT_EQ(NormPlan::select(kTarget, lnf)->config().slots, 528);
  auto rms = NormDesc::rms_norm(DType::bf16, Shape::of({16384, 4096}), 1, true, 1e-5, Direction::Backward);
  EXPECT_EQ(NormPlan::select(kTarget, rms)->workspace_size(), size_t{528} * 4096 * 4);
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

// The dense-rows backward (norm_dense_bw): named by layout_for from the launcher's own test.
TEST(NormConfig, DenseRowsBackwardLayout) {
  auto args = [](DType dt, int64_t rows, int64_t n, int64_t row_stride, bool ln, bool pgrad) {
    NormArgs a;
    a.dy = TensorRef{fake_ptr(0), dt, strided({rows, n}, {row_stride, 1})};
    a.x = TensorRef{fake_ptr(1), dt, strided({rows, n}, {row_stride, 1})};
    a.out = mut_of(2, dt, Layout::contiguous({rows, n}));
    if (ln) a.mean = ref_of(3, DType::f32, Layout::contiguous({rows}));
    a.rstd = ref_of(4, DType::f32, Layout::contiguous({rows}));
    a.weight = ref_of(5, dt, Layout::contiguous({n}));
    if (pgrad) a.dweight = mut_of(6, dt, Layout::contiguous({n}));
    if (pgrad && ln) a.dbias = mut_of(7, dt, Layout::contiguous({n}));
    return a;
  };
  auto layout = [&](bool ln, DType dt, int64_t n, int64_t row_stride, bool pgrad) {
    const auto d = ln ? NormDesc::layer_norm(dt, Shape::of({64, n}), 1, true, true, 1e-5, Direction::Backward)
                      : NormDesc::rms_norm(dt, Shape::of({64, n}), 1, true, 1e-5, Direction::Backward);
    auto p = NormPlan::select(kTarget, d);
    EXPECT_TRUE(p.ok()) << p.message();
    const NormArgs a = args(dt, 64, n, row_stride, ln, pgrad);
    EXPECT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
    return p->layout_for(a);
  };
  EXPECT_EQ(layout(true, DType::bf16, 4096, 4096, true), "cta-dense-rows-ahead-vec16");  // 256 threads a row
  EXPECT_EQ(layout(true, DType::f16, 2048, 2048, true), "cta-dense-rows-ahead-vec16");   // 128
  EXPECT_EQ(layout(true, DType::bf16, 8192, 8192, true), "cta-dense-rows-vec16");        // 512: no room ahead
  EXPECT_EQ(layout(false, DType::bf16, 4096, 4096, true), "cta-dense-rows-vec16");       // rms_norm: never ahead
  EXPECT_EQ(layout(true, DType::bf16, 4096, 4160, true), "cta-dense-rows-ahead-vec16");  // strided rows, aligned
  EXPECT_EQ(layout(true, DType::bf16, 4096, 4097, true), "cta-registers-scalar");        // unaligned rows
  EXPECT_EQ(layout(true, DType::bf16, 4096, 4096, false), "cta-registers-vec16");        // no parameter gradients
  EXPECT_EQ(layout(true, DType::f32, 4096, 4096, true), "cta-registers-vec16");          // 16-bit rows only
  EXPECT_EQ(layout(true, DType::bf16, 3072, 3072, true), "cta-registers-vec16");         // 3072 / 16 is not a power of two
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
  d.op = NormOp::log_softmax;  // masked log_softmax: the log of masked softmax
  EXPECT_TRUE(NormPlan::select(kTarget, d).ok()) << NormPlan::select(kTarget, d).message();
  d.op = NormOp::sparsemax;
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, d), Status::Unsupported, "softmax and log_softmax only", "sparsemax");
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

TEST(NormNormalize, AnyP) {
  const double inf = std::numeric_limits<double>::infinity();
  for (double p : {0.0, 0.5, 1.0, 1.5, 3.0, inf}) {
    SCOPED_TRACE(p);
    for (Direction dir : {Direction::Forward, Direction::Backward}) {
      auto pl = NormPlan::select(kTarget, NormDesc::normalize(DType::bf16, Shape::of({8, 64}), 1, 1e-12, dir, p));
      ASSERT_TRUE(pl.ok()) << pl.message();
      EXPECT_EQ(pl->desc().p, p);
    }
  }
  auto note = [&](double p, Direction dir = Direction::Forward) {
    return NormPlan::select(kTarget, NormDesc::normalize(DType::f32, Shape::of({8, 64}), 1, 1e-12, dir, p))
        ->precision()
        .note;
  };
  EXPECT_NE(note(1).find("p=1: x / max(sum |x|"), std::string::npos) << note(1);
  EXPECT_NE(note(inf).find("p=inf: x / max(max |x|"), std::string::npos) << note(inf);
  EXPECT_NE(note(inf, Direction::Backward).find("tied maxima"), std::string::npos);
  EXPECT_NE(note(0).find("count(x != 0)"), std::string::npos);
  EXPECT_NE(note(3).find("p=3: x / max((sum |x|^p)^(1/p)"), std::string::npos) << note(3);
  EXPECT_NE(note(2).find("p=2"), std::string::npos);
}

TEST(NormNormalize, PRefusals) {
  for (double p : {-1.0, -std::numeric_limits<double>::infinity()}) {
    auto d = NormDesc::normalize(DType::f32, Shape::of({8, 64}), 1, 1e-12, Direction::Forward, p);
    EXPECT_FAILS_WITH(NormPlan::select(kTarget, d), Status::InvalidProblem, "normalize", "p expected >= 0", "got -");
  }
  auto n = NormDesc::normalize(DType::f32, Shape::of({8, 64}), 1, 1e-12, Direction::Backward,
                               std::numeric_limits<double>::quiet_NaN());
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, n), Status::InvalidProblem, "normalize_backward", "p", "got nan");
  // p belongs to normalize: any other op refuses a p other than 2.
  auto s = NormDesc::softmax(DType::f32, Shape::of({8, 64}), -1);
  s.p = 1;
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, s), Status::InvalidProblem, "softmax", "p is normalize's", "got 1");
  auto l = NormDesc::layer_norm(DType::f32, Shape::of({8, 64}), 1, true, true, 1e-5);
  l.p = 3;
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, l), Status::InvalidProblem, "layer_norm", "p is normalize's");
}

TEST(NormSparsemax, SelectAndArgs) {
  auto d = NormDesc::sparsemax(DType::bf16, Shape::of({16, 4096}), -1);
  auto p = NormPlan::select(kTarget, d);
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(p->config().tpr, 128);  // 32 bf16 a thread: the row stays in registers for every iteration
  EXPECT_TRUE(p->config().cached);
  EXPECT_NE(p->precision().note.find("Michelot"), std::string::npos) << p->precision().note;
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, NormDesc::sparsemax(DType::f32, Shape::of({3, 4}), 2)),
                    Status::InvalidProblem, "sparsemax", "axis", "[-2, 2)", "got 2");
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, NormDesc::sparsemax(DType::f32, Shape::of({3, 4}), -3)),
                    Status::InvalidProblem, "sparsemax", "axis", "got -3");
  auto m = NormDesc::sparsemax(DType::f32, Shape::of({3, 4}), -1);
  m.mask = NormMask::boolean;
  m.mask_shape = Shape::of({4});
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, m), Status::Unsupported, "sparsemax", "softmax only");
  NormArgs a;
  a.x = ref_of(0, DType::bf16, Layout::contiguous({16, 4096}));
  a.out = mut_of(1, DType::bf16, Layout::contiguous({16, 4096}));
  ASSERT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
  EXPECT_EQ(p->layout_for(a), "cta-registers-vec16");
  a.noise = ref_of(2, DType::bf16, Layout::contiguous({16, 4096}));
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "sparsemax", "noise given",
                    "only gumbel_softmax's forward");
  // The backward reads y (the support), not x.
  auto b = NormPlan::select(kTarget, NormDesc::sparsemax(DType::bf16, Shape::of({16, 4096}), -1, Direction::Backward));
  ASSERT_TRUE(b.ok()) << b.message();
  NormArgs g;
  g.dy = ref_of(0, DType::bf16, Layout::contiguous({16, 4096}));
  g.out = mut_of(2, DType::bf16, Layout::contiguous({16, 4096}));
  EXPECT_FAILS_WITH(b->can_implement(g), Status::InvalidProblem, "sparsemax_backward", "y", "required");
  g.y = ref_of(1, DType::bf16, Layout::contiguous({16, 4096}));
  EXPECT_TRUE(b->can_implement(g).ok()) << b->can_implement(g).message();
  g.x = ref_of(3, DType::bf16, Layout::contiguous({16, 4096}));
  EXPECT_FAILS_WITH(b->can_implement(g), Status::InvalidProblem, "x given");
}

TEST(NormGumbel, Refusals) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (double tau : {0.0, -1.0, inf, nan}) {
    SCOPED_TRACE(tau);
    for (Direction dir : {Direction::Forward, Direction::Backward})
      EXPECT_FAILS_WITH(
          NormPlan::select(kTarget, NormDesc::gumbel_softmax(DType::f32, Shape::of({4, 8}), -1, tau, false, dir)),
          Status::InvalidProblem, "gumbel_softmax", "tau expected finite and > 0");
  }
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, NormDesc::gumbel_softmax(DType::f32, Shape::of({4, 8}), 2, 1.0, true)),
                    Status::InvalidProblem, "gumbel_softmax", "axis", "got 2");
  // tau and hard belong to gumbel_softmax.
  auto s = NormDesc::softmax(DType::f32, Shape::of({4, 8}), -1);
  s.hard = true;
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, s), Status::InvalidProblem, "softmax", "gumbel_softmax's", "true");
  auto sp = NormDesc::sparsemax(DType::f32, Shape::of({4, 8}), -1);
  sp.tau = 2;
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, sp), Status::InvalidProblem, "sparsemax", "tau and hard", "got 2");
  auto g = NormDesc::gumbel_softmax(DType::f32, Shape::of({4, 8}), -1);
  g.p = 1;
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, g), Status::InvalidProblem, "gumbel_softmax", "p is normalize's");
  auto b = NormPlan::select(kTarget, NormDesc::gumbel_softmax(DType::s32, Shape::of({4, 8}), -1));
  EXPECT_FAILS_WITH(b, Status::Unsupported, "gumbel_softmax", "dtype", "got int32");
}

TEST(NormGumbel, SelectAndArgs) {
  auto d = NormDesc::gumbel_softmax(DType::bf16, Shape::of({16, 4096}), -1, 0.5, true);
  auto p = NormPlan::select(kTarget, d);
  ASSERT_TRUE(p.ok()) << p.message();
  // 16 items a thread (an f32 row plus the Philox rounds; norm_big_items): 256 threads a row.
  EXPECT_EQ(p->config().tpr, 256);
  EXPECT_EQ(p->config().items, 16);
  EXPECT_NE(p->precision().note.find("Philox4x32-10"), std::string::npos) << p->precision().note;
  EXPECT_NE(p->precision().note.find("one-hot"), std::string::npos) << p->precision().note;
  NormArgs a;
  a.x = ref_of(0, DType::bf16, Layout::contiguous({16, 4096}));
  a.out = mut_of(1, DType::bf16, Layout::contiguous({16, 4096}));
  a.rng = NormRng{42, 7};
  EXPECT_TRUE(p->can_implement(a).ok()) << "noise and y_soft are optional: " << p->can_implement(a).message();
  EXPECT_EQ(p->layout_for(a), "cta-registers-vec16");
  a.y_soft = mut_of(2, DType::bf16, Layout::contiguous({16, 4096}));
  a.noise = ref_of(3, DType::bf16, Layout::contiguous({16, 4096}));
  EXPECT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
  a.noise = TensorRef{fake_ptr(3), DType::bf16, strided({16, 4096}, {0, 1})};  // broadcast over rows
  EXPECT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
  EXPECT_EQ(p->layout_for(a), "cta-registers-vec16");
  a.noise = ref_of(3, DType::f32, Layout::contiguous({16, 4096}));
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "noise dtype", "bfloat16", "got float32");
  a.noise = ref_of(3, DType::bf16, Layout::contiguous({16, 4095}));
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "noise shape", "[16, 4096]", "got [16, 4095]");
  a.noise = {};
  a.y_soft = mut_of(1, DType::bf16, Layout::contiguous({16, 4096}));
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "overlaps");
  // A soft forward's output is the soft sample: y_soft is refused.
  auto soft = NormPlan::select(kTarget, NormDesc::gumbel_softmax(DType::bf16, Shape::of({16, 4096}), -1));
  a.y_soft = mut_of(2, DType::bf16, Layout::contiguous({16, 4096}));
  EXPECT_FAILS_WITH(soft->can_implement(a), Status::InvalidProblem, "y_soft given", "hard");
  // The backward reads the soft sample (y) and is the same for hard: the flag is dropped.
  auto bw = NormPlan::select(
      kTarget, NormDesc::gumbel_softmax(DType::bf16, Shape::of({16, 4096}), -1, 0.5, true, Direction::Backward));
  ASSERT_TRUE(bw.ok()) << bw.message();
  EXPECT_FALSE(bw->desc().hard);
  NormArgs g;
  g.dy = ref_of(0, DType::bf16, Layout::contiguous({16, 4096}));
  g.y = ref_of(1, DType::bf16, Layout::contiguous({16, 4096}));
  g.out = mut_of(2, DType::bf16, Layout::contiguous({16, 4096}));
  EXPECT_TRUE(bw->can_implement(g).ok()) << bw->can_implement(g).message();
  g.noise = ref_of(3, DType::bf16, Layout::contiguous({16, 4096}));
  EXPECT_FAILS_WITH(bw->can_implement(g), Status::InvalidProblem, "noise given");
  g.noise = {};
  g.y_soft = mut_of(3, DType::bf16, Layout::contiguous({16, 4096}));
  EXPECT_FAILS_WITH(bw->can_implement(g), Status::InvalidProblem, "y_soft given");
}

// Philox4x32-10 against Random123's known-answer vectors (kat_vectors: philox4x32 10), and the
// uniforms' open interval.
TEST(NormGumbel, PhiloxKnownAnswers) {
  using detail::philox4x32_10;
  struct Kat {
    uint32_t in[6], out[4];
  };
  const Kat kats[] = {
      {{0, 0, 0, 0, 0, 0}, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
      {{~0u, ~0u, ~0u, ~0u, ~0u, ~0u}, {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
      {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u},
       {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
  };
  for (const Kat& k : kats) {
    const auto r = philox4x32_10(k.in[0], k.in[1], k.in[2], k.in[3], k.in[4], k.in[5]);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(r.v[i], k.out[i]) << "word " << i;
  }
  // (seed, offset, q) map to key = seed, counter = (q, offset).
  const auto b = detail::philox_block(0x299f31d0a4093822ull, 0x0370734413198a2eull, 0x85a308d3243f6a88ull);
  EXPECT_EQ(b.v[0], 0xd16cfe09u);
  EXPECT_EQ(b.v[3], 0x24126ea1u);
  EXPECT_GT(detail::philox_uniform_f32(0), 0.0f);
  EXPECT_LT(detail::philox_uniform_f32(~0u), 1.0f);
  EXPECT_GT(detail::philox_uniform_f64(0, 0), 0.0);
  EXPECT_LT(detail::philox_uniform_f64(~0u, ~0u), 1.0);
  EXPECT_TRUE(std::isfinite(-std::log(-std::log(detail::philox_uniform_f32(~0u)))));
  EXPECT_TRUE(std::isfinite(-std::log(-std::log(detail::philox_uniform_f32(0)))));
}

// ---- channel ops -----------------------------------------------------------------------------------
NormDesc bn(DType dt = DType::bf16, Direction dir = Direction::Forward, bool training = true, bool running = true) {
  return NormDesc::batch_norm(dt, Shape::of({2, 16, 8, 8}), true, true, training, running, 0.1, 1e-5, dir);
}
/// Forward batch_norm args matching bn(): x [2, 16, 8, 8] (in `l`), params, running stats, saved stats.
NormArgs bn_args(DType dt = DType::bf16, const Layout& l = Layout::contiguous({2, 16, 8, 8})) {
  NormArgs a;
  a.x = ref_of(0, dt, l);
  a.weight = ref_of(1, dt, Layout::contiguous({16}));
  a.bias = ref_of(2, dt, Layout::contiguous({16}));
  a.running_mean = mut_of(3, dt, Layout::contiguous({16}));
  a.running_var = mut_of(4, dt, Layout::contiguous({16}));
  a.out = mut_of(5, dt, l);
  a.save_mean = mut_of(6, DType::f32, Layout::contiguous({16}));
  a.save_rstd = mut_of(7, DType::f32, Layout::contiguous({16}));
  return a;
}
const Layout kChannelsLast = strided({2, 16, 8, 8}, {1024, 1, 128, 16});

TEST(NormChannel, DescriptorRefusals) {
  EXPECT_TRUE(NormPlan::select(kTarget, bn()).ok());
  auto d = bn();
  d.shape = Shape::of({16});
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, d), Status::InvalidProblem, "batch_norm", "rank >= 2", "got shape [16]");
  d = bn();
  d.training = false;
  d.running_stats = false;
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, d), Status::InvalidProblem, "batch_norm", "running_stats=true");
  d = bn();
  d.num_groups = 2;
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, d), Status::InvalidProblem, "num_groups is group_norm's", "got 2");
  d = bn();
  d.momentum = std::numeric_limits<double>::infinity();
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, d), Status::InvalidProblem, "momentum", "finite");
  d = bn();
  d.eps = -1;
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, d), Status::InvalidProblem, "eps");
  d = bn();
  d.residual = true;
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, d), Status::InvalidProblem, "batch_norm takes no residual");
  auto g = NormDesc::group_norm(DType::f32, Shape::of({2, 6, 4}), 4, true, true, 1e-5);
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, g), Status::InvalidProblem, "group_norm", "num_groups",
                    "divide the 6 channels", "got 4");
  g.num_groups = 0;
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, g), Status::InvalidProblem, "num_groups expected >= 1");
  g.num_groups = 3;
  EXPECT_TRUE(NormPlan::select(kTarget, g).ok());
  g.running_stats = true;
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, g), Status::InvalidProblem, "no running statistics");
  auto l = NormDesc::local_response_norm(DType::f32, Shape::of({2, 6, 4}), 0, 1e-4, 0.75, 1.0);
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, l), Status::InvalidProblem, "local_response_norm", "size", "got 0");
  l.lrn_size = 3;
  l.lrn_beta = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, l), Status::InvalidProblem, "beta expected finite");
  l.lrn_beta = 0.75;
  l.weight = true;
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, l), Status::InvalidProblem, "takes no weight");
  // The channel fields belong to the channel ops.
  auto s = NormDesc::softmax(DType::f32, Shape::of({4, 8}), -1);
  s.num_groups = 2;
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, s), Status::InvalidProblem, "softmax", "channel ops");
  auto ln_eval = ln();
  ln_eval.training = false;
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, ln_eval), Status::InvalidProblem, "layer_norm", "channel ops");
}

TEST(NormChannel, ParamDtype) {
  auto d = bn();
  d.param_dtype = DType::f32;  // torch's mixed batch norm: bf16 input, f32 weight/bias/running stats
  auto p = NormPlan::select(kTarget, d);
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(p->sku().dtypes, "bfloat16,float32->bfloat16");
  // Running stats alone carry the parameter dtype.
  auto r = NormDesc::batch_norm(DType::f16, Shape::of({2, 4}), false, false, false, true, 0.1, 1e-5);
  r.param_dtype = DType::f32;
  auto q = NormPlan::select(kTarget, r);
  ASSERT_TRUE(q.ok()) << q.message();
  EXPECT_EQ(q->desc().param_dtype, DType::f32);
  r.dtype = DType::f32;
  r.param_dtype = DType::bf16;
  EXPECT_FAILS_WITH(NormPlan::select(kTarget, r), Status::Unsupported, "batch_norm", "param_dtype", "got bfloat16");
}

TEST(NormChannel, RowsWorkspaceAndRowsOnChip) {
  auto bnp = NormPlan::select(kTarget, bn());
  ASSERT_TRUE(bnp.ok());
  EXPECT_EQ(bnp->rows(), 16);  // one statistic a channel
  EXPECT_EQ(bnp->row_length(), 2 * 64);
  EXPECT_GT(bnp->workspace_size(), 0u);
  EXPECT_EQ(bnp->config().smem_rows_bytes, 0);
  EXPECT_EQ(NormPlan::select(kTarget, bn(DType::bf16, Direction::Forward, false))->workspace_size(), 0u)
      << "evaluation needs no workspace";
  EXPECT_GT(NormPlan::select(kTarget, bn(DType::bf16, Direction::Backward, false))->workspace_size(), 0u)
      << "evaluation backward: partial sums for dweight/dbias";
  auto in = NormDesc::instance_norm(DType::f32, Shape::of({3, 5, 7}), false, false, true, false, 0.1, 1e-5);
  auto inp = NormPlan::select(kTarget, in);
  EXPECT_EQ(inp->rows(), 15);
  EXPECT_EQ(inp->row_length(), 7);
  in.training = false;
  in.running_stats = true;
  EXPECT_EQ(NormPlan::select(kTarget, in)->rows(), 5) << "evaluation: the running stats, one a channel";
  // [32, 256, 56, 56] bf16 with 32 groups: a row is 8 x 3136 x 2 bytes (49 KB; 98 KB backward).
  auto gn = NormDesc::group_norm(DType::bf16, Shape::of({32, 256, 56, 56}), 32, true, true, 1e-5);
  auto gnp = NormPlan::select(kTarget, gn);
  ASSERT_TRUE(gnp.ok());
  EXPECT_EQ(gnp->rows(), 32 * 32);
  EXPECT_EQ(gnp->row_length(), 8 * 3136);
  EXPECT_GT(gnp->config().smem_rows_bytes, 8 * 3136 * 2);
  EXPECT_NE(gnp->sku().layout.find("smem-rows"), std::string::npos) << gnp->sku().layout;
  gn.direction = Direction::Backward;
  EXPECT_GT(NormPlan::select(kTarget, gn)->config().smem_rows_bytes, 2 * 8 * 3136 * 2);
  EXPECT_EQ(NormPlan::select(Target::offline(86), gn)->config().smem_rows_bytes, 0) << "99 KB a CTA on sm_86";
  gn.dtype = gn.param_dtype = DType::f32;
  EXPECT_EQ(NormPlan::select(kTarget, gn)->config().smem_rows_bytes, 0) << "196 KB: the three-kernel path";
  // The launch shape depends on the architecture only, never on the SM count.
  const Target small{0, 90, 8}, large{0, 90, 132};
  EXPECT_EQ(NormPlan::select(small, gn)->config().smem_rows_bytes,
            NormPlan::select(large, gn)->config().smem_rows_bytes);
  EXPECT_EQ(NormPlan::select(small, gn)->workspace_size(), NormPlan::select(large, gn)->workspace_size());
  auto l = NormPlan::select(kTarget, NormDesc::local_response_norm(DType::f32, Shape::of({2, 6, 4}), 3, 1e-4, 0.75, 1));
  EXPECT_EQ(l->workspace_size(), 0u);
  EXPECT_EQ(l->rows(), 8);
  EXPECT_EQ(l->row_length(), 6);
  EXPECT_TRUE(l->precision().deterministic && l->precision().bit_stable);
}

TEST(NormChannel, ArgsChecks) {
  auto p = NormPlan::select(kTarget, bn());
  ASSERT_TRUE(p.ok());
  auto a = bn_args();
  EXPECT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
  a.save_mean = {};
  a.save_rstd = {};
  EXPECT_TRUE(p->can_implement(a).ok()) << "saved statistics are optional";
  a = bn_args();
  a.running_var = {};
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "batch_norm", "running_var", "required");
  a = bn_args();
  a.weight.layout = Layout::contiguous({15});
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "weight shape", "[16]", "got [15]");
  a = bn_args();
  a.save_rstd.layout = Layout::contiguous({32});
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "save_rstd", "16 elements", "one per channel",
                    "got 32");
  a = bn_args();
  a.running_mean.dtype = DType::f32;
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "running_mean dtype", "bfloat16", "got float32");
  a = bn_args();
  a.running_mean = mut_of(0, DType::bf16, Layout::contiguous({16}));  // inside x
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "running_mean overlaps x");
  a = bn_args();
  a.out = mut_of(0, DType::bf16, Layout::contiguous({2, 16, 8, 8}));
  EXPECT_TRUE(p->can_implement(a).ok()) << "exact in-place: " << p->can_implement(a).message();
  a = bn_args();
  a.mask = ref_of(8, DType::b8, Layout::contiguous({8}));
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "mask given");
  // Evaluation: running stats read, nothing saved.
  auto e = NormPlan::select(kTarget, bn(DType::bf16, Direction::Forward, false));
  a = bn_args();
  EXPECT_FAILS_WITH(e->can_implement(a), Status::InvalidProblem, "save_mean/save_rstd", "training forward");
  a.save_mean = {};
  a.save_rstd = {};
  EXPECT_TRUE(e->can_implement(a).ok()) << e->can_implement(a).message();
  // Training without running stats refuses them.
  auto t = NormPlan::select(kTarget, bn(DType::bf16, Direction::Forward, true, false));
  EXPECT_FAILS_WITH(t->can_implement(bn_args()), Status::InvalidProblem, "running_mean/running_var given");
  // group_norm statistics: one per (sample, group).
  auto g = NormPlan::select(kTarget, NormDesc::group_norm(DType::bf16, Shape::of({2, 16, 8, 8}), 4, true, true, 1e-5));
  a = bn_args();
  a.running_mean = a.running_var = {};
  EXPECT_FAILS_WITH(g->can_implement(a), Status::InvalidProblem, "save_mean", "8 elements", "(sample, group)");
  a.save_mean.layout = a.save_rstd.layout = Layout::contiguous({2, 4});
  EXPECT_TRUE(g->can_implement(a).ok()) << g->can_implement(a).message();
}

TEST(NormChannel, BackwardArgs) {
  auto d = bn(DType::bf16, Direction::Backward, true, false);
  d.param_dtype = DType::f32;
  auto p = NormPlan::select(kTarget, d);
  ASSERT_TRUE(p.ok()) << p.message();
  NormArgs a;
  a.dy = ref_of(0, DType::bf16, kChannelsLast);
  a.x = ref_of(1, DType::bf16, kChannelsLast);
  a.mean = ref_of(2, DType::f32, Layout::contiguous({16}));
  a.rstd = ref_of(3, DType::f32, Layout::contiguous({16}));
  a.weight = ref_of(4, DType::f32, Layout::contiguous({16}));
  a.out = mut_of(5, DType::bf16, kChannelsLast);
  a.dweight = mut_of(6, DType::f32, Layout::contiguous({16}));
  a.dbias = mut_of(7, DType::f32, Layout::contiguous({16}));
  ASSERT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
  EXPECT_EQ(p->layout_for(a), "pixels-vec16");
  EXPECT_FAILS_WITH(p->run(nullptr, {}, a), Status::WorkspaceTooSmall, "batch_norm_backward", "workspace");
  a.out = {};
  EXPECT_TRUE(p->can_implement(a).ok()) << "dx is optional (parameter gradients only)";
  a.rstd = {};
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "rstd", "required");
  a.rstd = ref_of(3, DType::f32, Layout::contiguous({16}));
  a.bias = ref_of(8, DType::f32, Layout::contiguous({16}));
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "bias given", "does not read it");
  a.bias = {};
  a.running_mean = mut_of(9, DType::f32, Layout::contiguous({16}));
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "running_mean/running_var given");
  // Evaluation backward reads the running stats, not the saved ones.
  auto e = NormPlan::select(kTarget, [] {
    auto d = bn(DType::bf16, Direction::Backward, false, true);
    d.param_dtype = DType::f32;
    return d;
  }());
  ASSERT_TRUE(e.ok()) << e.message();
  a.running_var = mut_of(10, DType::f32, Layout::contiguous({16}));
  EXPECT_FAILS_WITH(e->can_implement(a), Status::InvalidProblem, "mean/rstd given");
  a.mean = a.rstd = {};
  EXPECT_TRUE(e->can_implement(a).ok()) << e->can_implement(a).message();
}

TEST(NormChannel, LayoutsTaken) {
  auto p = NormPlan::select(kTarget, bn());
  EXPECT_EQ(p->layout_for(bn_args()), "planes-vec16");
  EXPECT_EQ(p->layout_for(bn_args(DType::bf16, kChannelsLast)), "pixels-vec16");
  auto a = bn_args(DType::bf16, strided({2, 16, 8, 8}, {2048, 128, 16, 2}));  // every other column
  EXPECT_EQ(p->layout_for(a), "strided-scalar");
  a = bn_args();
  a.x = ref_of(0, DType::bf16, Layout::contiguous({2, 16, 8, 8}), 2);  // misaligned
  EXPECT_EQ(p->layout_for(a), "planes-scalar");
  a = bn_args();
  a.out.layout = kChannelsLast;  // mixed layouts: the strided fallback
  EXPECT_EQ(p->layout_for(a), "strided-scalar");
  PlanPreference nv;
  nv.vectorized = Tristate::Forbid;
  EXPECT_EQ(NormPlan::select(kTarget, bn(), nv)->layout_for(bn_args()), "planes-scalar");
  // [N, C]: one pixel a sample.
  auto b2 = NormPlan::select(
      kTarget, NormDesc::batch_norm(DType::f32, Shape::of({64, 32}), false, false, true, false, 0.1, 1e-5));
  NormArgs c;
  c.x = ref_of(0, DType::f32, Layout::contiguous({64, 32}));
  c.out = mut_of(1, DType::f32, Layout::contiguous({64, 32}));
  EXPECT_EQ(b2->layout_for(c), "pixels-vec16");
  auto g = NormPlan::select(kTarget, NormDesc::group_norm(DType::bf16, Shape::of({2, 16, 8, 8}), 4, true, true, 1e-5));
  a = bn_args();
  a.running_mean = a.running_var = {};
  a.save_mean = a.save_rstd = {};
  EXPECT_EQ(g->layout_for(a), "smem-rows-vec16");
  a = bn_args(DType::bf16, kChannelsLast);
  a.running_mean = a.running_var = {};
  a.save_mean = a.save_rstd = {};
  EXPECT_EQ(g->layout_for(a), "pixels-vec16");
  auto l = NormPlan::select(kTarget,
                            NormDesc::local_response_norm(DType::bf16, Shape::of({2, 16, 8, 8}), 5, 1e-4, 0.75, 1.0));
  NormArgs la;
  la.x = ref_of(0, DType::bf16, kChannelsLast);
  la.out = mut_of(1, DType::bf16, kChannelsLast);
  ASSERT_TRUE(l->can_implement(la).ok()) << l->can_implement(la).message();
  EXPECT_EQ(l->layout_for(la), "window-pixels");
  la.out = mut_of(0, DType::bf16, kChannelsLast);
  EXPECT_FAILS_WITH(l->can_implement(la), Status::InvalidProblem, "out overlaps x", "no in-place");
}

TEST(NormChannel, EmptyBatchLaunchesNothing) {
  auto p = NormPlan::select(kTarget,
                            NormDesc::batch_norm(DType::f32, Shape::of({0, 4, 3}), true, true, true, true, 0.1, 1e-5));
  ASSERT_TRUE(p.ok());
  NormArgs a;
  a.x = ref_of(0, DType::f32, Layout::contiguous({0, 4, 3}));
  a.out = mut_of(1, DType::f32, Layout::contiguous({0, 4, 3}));
  a.weight = ref_of(2, DType::f32, Layout::contiguous({4}));
  a.bias = ref_of(3, DType::f32, Layout::contiguous({4}));
  a.running_mean = mut_of(4, DType::f32, Layout::contiguous({4}));
  a.running_var = mut_of(5, DType::f32, Layout::contiguous({4}));
  EXPECT_EQ(p->layout_for(a), "empty");
  EXPECT_TRUE(p->run(nullptr, {}, a).ok()) << "no workspace needed, nothing launched";
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
