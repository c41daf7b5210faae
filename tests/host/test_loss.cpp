// The loss family without a GPU: the table, dtype coverage (declared == accepted), descriptor and
// argument refusals with their messages, preferences, the launch shape and reduction partition (a
// function of the problem only), workspace sizing and the variant run() would take.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "baracuda/core/coverage.hpp"
#include "baracuda/ops/loss.hpp"
#include "ops/loss/loss_launch.hpp"
#include "test_util.hpp"

namespace baracuda {
namespace {

using test::fake_ptr;
using test::mut_of;
using test::ref_of;
using test::strided;

const Target kTarget = Target::offline(90);

LossDesc ce(DType dt = DType::f32, Shape x = Shape::of({8, 1000}), Reduction r = Reduction::mean,
            Direction dir = Direction::Forward, bool weight = false) {
  return LossDesc::cross_entropy(dt, x, DType::s64, weight, r, -100, 0.0, dir);
}

/// Forward cross_entropy args matching ce(): input [8, 1000], target [8], out [], lse [8], tw [].
LossArgs ce_args(DType dt = DType::f32) {
  LossArgs a;
  a.in[0] = ref_of(0, dt, Layout::contiguous({8, 1000}));
  a.in[1] = ref_of(1, DType::s64, Layout::contiguous({8}));
  a.out = mut_of(2, dt, Layout::contiguous({}));
  a.save_lse = mut_of(3, DType::f32, Layout::contiguous({8}));
  a.save_total_weight = mut_of(4, DType::f32, Layout::contiguous({}));
  a.error = mut_of(5, DType::s32, Layout::contiguous({1}));
  return a;
}

/// Backward cross_entropy args (mean over indices): dy [], input, target, lse, total_weight -> grad.
LossArgs ce_bw_args(DType dt = DType::f32) {
  LossArgs a;
  a.dy = ref_of(6, dt, Layout::contiguous({}));
  a.in[0] = ref_of(0, dt, Layout::contiguous({8, 1000}));
  a.in[1] = ref_of(1, DType::s64, Layout::contiguous({8}));
  a.lse = ref_of(3, DType::f32, Layout::contiguous({8}));
  a.total_weight = ref_of(4, DType::f32, Layout::contiguous({}));
  a.grad[0] = mut_of(7, dt, Layout::contiguous({8, 1000}));
  return a;
}

LossDesc mse(DType dt = DType::f32, Reduction r = Reduction::mean, Direction dir = Direction::Forward) {
  return LossDesc::make(LossOp::mse_loss, dt, {Shape::of({16, 4096}), Shape::of({16, 4096})}, r, dir);
}

/// linear_cross_entropy over hidden [n, h], weight [v, h], int64 targets.
LossDesc lce(DType dt, int64_t n, int64_t h, int64_t v, Reduction r = Reduction::mean,
             Direction dir = Direction::Forward, bool grads = false, int64_t chunk_tokens = 0) {
  LossDesc d = LossDesc::linear_cross_entropy(dt, n, h, v, DType::s64, r, -100, 0.0, chunk_tokens, dir);
  d.fused_grad = grads;
  return d;
}

/// Forward linear_cross_entropy args matching lce(dt, n, h, v) (reduced: out []).
LossArgs lce_args(DType dt, int64_t n, int64_t h, int64_t v, bool reduced = true) {
  LossArgs a;
  a.in[0] = ref_of(0, dt, Layout::contiguous({n, h}));
  a.in[1] = ref_of(1, dt, Layout::contiguous({v, h}));
  a.in[2] = ref_of(2, DType::s64, Layout::contiguous({n}));
  a.out = reduced ? mut_of(3, dt, Layout::contiguous({})) : mut_of(3, dt, Layout::contiguous({n}));
  return a;
}

// ---- table and coverage ------------------------------------------------------------------------------
TEST(LossTable, RowsAndColumns) {
  ASSERT_EQ(loss_ops().size(), 21u);
  for (const char* n : {"cross_entropy",
                        "nll_loss",
                        "linear_cross_entropy",
                        "mse_loss",
                        "l1_loss",
                        "smooth_l1_loss",
                        "huber_loss",
                        "binary_cross_entropy",
                        "binary_cross_entropy_with_logits",
                        "kl_div",
                        "poisson_nll_loss",
                        "gaussian_nll_loss",
                        "soft_margin_loss",
                        "hinge_embedding_loss",
                        "margin_ranking_loss",
                        "cosine_embedding_loss",
                        "triplet_margin_loss",
                        "multi_margin_loss",
                        "multilabel_margin_loss",
                        "multilabel_soft_margin_loss",
                        "ctc_loss"}) {
    auto op = loss_op_from_name(n);
    ASSERT_TRUE(op.has_value()) << n;
    EXPECT_STREQ(info(*op).name, n);
  }
  EXPECT_EQ(info(*loss_op_from_name("ctc_loss")).kind, LossKind::ctc);
  const auto& bce = info(LossOp::binary_cross_entropy_with_logits);
  EXPECT_EQ(bce.num_inputs(), 4);
  EXPECT_EQ(bce.input_name(3), "pos_weight");
  EXPECT_TRUE(bce.input_optional(2));
  EXPECT_FALSE(bce.input_optional(1));
  EXPECT_EQ(bce.input_index("pos_weight"), 3);
  EXPECT_EQ(bce.input_index("var"), -1);
  EXPECT_EQ(bce.num_grads(), 2);
  const auto& g = info(LossOp::gaussian_nll_loss);
  EXPECT_EQ(g.grad_input(2), 2);
  EXPECT_EQ(g.num_params(), 2);
  EXPECT_EQ(g.param_name(1), "eps");
  EXPECT_DOUBLE_EQ(g.param_default(1), 1e-6);
  const auto& c = info(LossOp::cross_entropy);
  EXPECT_EQ(c.kind, LossKind::classes);
  EXPECT_DOUBLE_EQ(c.param_default(c.param_index("ignore_index")), -100.0);
  EXPECT_EQ(info(LossOp::margin_ranking_loss).input_name(0), "input1");
  EXPECT_EQ(info(LossOp::soft_margin_loss).num_grads(), 1);
  const auto& t = info(LossOp::triplet_margin_loss);
  EXPECT_EQ(t.kind, LossKind::rows);
  EXPECT_EQ(t.num_params(), 4);
  EXPECT_EQ(t.param_name(3), "swap");
  EXPECT_DOUBLE_EQ(t.param_default(2), 1e-6);
  EXPECT_EQ(info(LossOp::multi_margin_loss).num_grads(), 1);
  EXPECT_TRUE(info(LossOp::multi_margin_loss).input_optional(2));
  EXPECT_EQ(info(LossOp::multilabel_soft_margin_loss).grad_name(1), "target");
  const auto& l = info(LossOp::linear_cross_entropy);
  EXPECT_EQ(l.kind, LossKind::linear);
  EXPECT_EQ(l.input_index("target"), 2);
  EXPECT_TRUE(l.input_optional(3)) << "class_weight";
  EXPECT_EQ(l.param_name(2), "chunk_tokens");
  EXPECT_EQ(loss_stats_dtype(DType::bf16), DType::f32);
  EXPECT_EQ(loss_stats_dtype(DType::f64), DType::f64);
  EXPECT_EQ(reduction_from_name("batchmean"), Reduction::batchmean);
  EXPECT_FALSE(reduction_from_name("avg").has_value());
  EXPECT_STREQ(to_string(Reduction::sum), "sum");
}

TEST(LossCoverage, AcceptsExactlyDeclaredDtypes) {
  for (const auto& in : loss_ops()) {
    for (Direction dir : {Direction::Forward, Direction::Backward}) {
      for (int i = 0; i < kNumDTypes; ++i) {
        const DType t = static_cast<DType>(i);
        SCOPED_TRACE(std::string(in.name) + " " + to_string(dir) + " " + std::string(name(t)));
        auto plan = LossPlan::select(kTarget, test::loss_probe(in, t, dir));
        if (in.kind == LossKind::ctc) {  // served by CtcLossPlan (test_ctc.cpp)
          EXPECT_FAILS_WITH(plan, Status::Unsupported, "CtcLossPlan");
          continue;
        }
        const DTypeSet declared = dir == Direction::Forward ? in.fw_dtypes : in.bw_dtypes;
        if (contains(declared, t)) {
          ASSERT_TRUE(plan.ok()) << plan.message();
          EXPECT_EQ(plan->sku().category, "loss");
        } else {
          EXPECT_FAILS_WITH(plan, Status::Unsupported, in.name, "dtype", "got " + std::string(name(t)));
        }
      }
    }
  }
}

TEST(LossCoverage, ListedRows) {
  const auto rows = coverage(kTarget);
  auto has = [&](const char* op, Direction dir, const std::string& dt) {
    return baracuda::test::has_coverage_row(rows, "loss", op, dir, dt);
  };
  for (const auto& in : loss_ops())
    for (Direction dir : {Direction::Forward, Direction::Backward})
      for (const char* dt : {"float32", "float16", "bfloat16", "float64"})
        EXPECT_TRUE(has(in.name, dir, dt)) << in.name << " " << dt;
  EXPECT_TRUE(has("cross_entropy", Direction::Backward, "bfloat16,bfloat16->bfloat16"));  // probabilities
  EXPECT_FALSE(has("nll_loss", Direction::Forward, "bfloat16,bfloat16->bfloat16"));
  EXPECT_FALSE(has("mse_loss", Direction::Forward, "int32"));
}

// ---- class descriptors -------------------------------------------------------------------------------
TEST(LossSelect, ClassShapes) {
  auto p = LossPlan::select(kTarget, ce(DType::bf16, Shape::of({4, 10, 3, 5})));
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(p->rows(), 60);
  EXPECT_EQ(p->classes(), 10);
  EXPECT_EQ(p->loss_shape(), Shape{});
  auto none = LossPlan::select(kTarget, ce(DType::bf16, Shape::of({4, 10, 3, 5}), Reduction::none));
  EXPECT_EQ(none->loss_shape(), Shape::of({4, 3, 5}));
  auto unbatched = LossPlan::select(kTarget, ce(DType::f32, Shape::of({7}), Reduction::none));
  ASSERT_TRUE(unbatched.ok()) << unbatched.message();
  EXPECT_EQ(unbatched->rows(), 1);
  EXPECT_EQ(unbatched->classes(), 7);
  EXPECT_EQ(unbatched->loss_shape(), Shape{});
  EXPECT_FAILS_WITH(LossPlan::select(kTarget, ce(DType::f32, Shape{})), Status::InvalidProblem, "cross_entropy", "rank",
                    "0-dim");
  auto d = ce();
  d.shapes[1] = Shape::of({9});
  EXPECT_FAILS_WITH(LossPlan::select(kTarget, d), Status::InvalidProblem, "target shape", "[8]", "got [9]");
  d = ce();
  d.target_dtype = DType::f16;
  EXPECT_FAILS_WITH(LossPlan::select(kTarget, d), Status::InvalidProblem, "target dtype", "float32", "got float16");
  auto n = LossDesc::nll_loss(DType::f32, Shape::of({8, 10}), DType::f32, false);
  EXPECT_FAILS_WITH(LossPlan::select(kTarget, n), Status::InvalidProblem, "nll_loss", "int32 or int64", "got float32");
  auto probs = LossDesc::cross_entropy(DType::f32, Shape::of({8, 10}), DType::f32, true);
  ASSERT_TRUE(LossPlan::select(kTarget, probs).ok());
  EXPECT_EQ(probs.shapes[1], Shape::of({8, 10}));
  EXPECT_EQ(probs.shapes[2], Shape::of({10}));
  probs.shapes[2] = Shape::of({11});
  EXPECT_FAILS_WITH(LossPlan::select(kTarget, probs), Status::InvalidProblem, "weight shape", "[10]", "got [11]");
  auto zero = ce(DType::f32, Shape::of({3, 0}));
  EXPECT_FAILS_WITH(LossPlan::select(kTarget, zero), Status::InvalidProblem, "classes", ">= 1", "3 rows");
  EXPECT_TRUE(LossPlan::select(kTarget, ce(DType::f32, Shape::of({0, 0}))).ok()) << "an empty batch of no classes";
  EXPECT_TRUE(LossPlan::select(kTarget, ce(DType::f32, Shape::of({0, 10}))).ok());
}

TEST(LossSelect, ClassParameters) {
  auto d = ce();
  d.params[0] = 1.5;
  EXPECT_FAILS_WITH(LossPlan::select(kTarget, d), Status::InvalidProblem, "ignore_index", "integer");
  d = ce();
  ASSERT_TRUE(d.set_param("label_smoothing", 1.5).ok());
  EXPECT_FAILS_WITH(LossPlan::select(kTarget, d), Status::InvalidProblem, "label_smoothing", "[0, 1]");
  d.params[1] = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FAILS_WITH(LossPlan::select(kTarget, d), Status::InvalidProblem, "label_smoothing");
  EXPECT_FAILS_WITH(d.set_param("beta", 1.0), Status::InvalidProblem, "cross_entropy", "unknown parameter", "beta");
  EXPECT_DOUBLE_EQ(ce().param("ignore_index"), -100.0);
  EXPECT_TRUE(std::isnan(ce().param("margin")));
  d = ce();
  d.reduction = Reduction::batchmean;
  EXPECT_FAILS_WITH(LossPlan::select(kTarget, d), Status::InvalidProblem, "batchmean", "kl_div only");
  auto n = LossDesc::nll_loss(DType::f32, Shape::of({8, 10}), DType::s64, false);
  n.fused_grad = true;
  EXPECT_FAILS_WITH(LossPlan::select(kTarget, n), Status::InvalidProblem, "nll_loss", "fused_grad");
  d = ce(DType::f32, Shape::of({8, 10}), Reduction::mean, Direction::Backward);
  d.fused_grad = true;  // the rescale of a fused forward's gradient
  EXPECT_TRUE(LossPlan::select(kTarget, d).ok());
  d.reduction = Reduction::none;
  EXPECT_FAILS_WITH(LossPlan::select(kTarget, d), Status::InvalidProblem, "cross_entropy_backward", "fused_grad",
                    "mean or sum", "got none");
  auto m = mse();
  m.fused_grad = true;
  EXPECT_FAILS_WITH(LossPlan::select(kTarget, m), Status::InvalidProblem, "mse_loss", "fused_grad");
}

// ---- linear_cross_entropy -------------------------------------------------------------------------------
TEST(LossLinear, ChunksAndWorkspace) {
  // LLM head: [2048, 128256] bf16 logits (501 MiB) a chunk, four chunks; the cluster kernel when fused.
  auto p = LossPlan::select(kTarget, lce(DType::bf16, 8192, 4096, 128256, Reduction::mean, Direction::Forward, true));
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(p->config().chunk_tokens, 2048);
  EXPECT_EQ(p->config().chunks, 4);
  EXPECT_EQ(p->config().cluster, 8);
  EXPECT_EQ(p->rows(), 8192);
  EXPECT_EQ(p->classes(), 128256);
  EXPECT_EQ(p->loss_shape(), Shape{});
  const size_t logits = size_t{2048} * 128256 * 2;
  EXPECT_GE(p->workspace_size(), logits + 2 * 8192 * 4);
  EXPECT_LE(p->workspace_size(), logits + (size_t{64} << 20)) << "logits chunk + rows + GEMM workspace";
  EXPECT_EQ(p->sku().category, "loss");
  EXPECT_NE(p->sku().layout.find("chunks(4x2048)"), std::string::npos) << p->sku().layout;
  EXPECT_NE(p->sku().layout.find("cluster-rows(ctas=8)"), std::string::npos) << p->sku().layout;
  EXPECT_TRUE(p->precision().deterministic);
  EXPECT_NE(p->precision().note.find("logits rounded to bfloat16"), std::string::npos) << p->precision().note;
  EXPECT_NE(p->precision().note.find("grad_weight accumulated over 4 chunks"), std::string::npos);
  // Forward only: no cluster (no fused gradient), the streaming row kernel.
  auto f = LossPlan::select(kTarget, lce(DType::bf16, 8192, 4096, 128256));
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_EQ(f->config().cluster, 0);
  EXPECT_EQ(f->config().tpr, 64) << "the loss alone: 64 threads a row (kClassLossOnlyMaxTpr)";
  // A caller's chunk: 2049 tokens in chunks of 512 (four full, one of 1 token).
  auto c = LossPlan::select(kTarget, lce(DType::f32, 2049, 64, 129, Reduction::sum, Direction::Forward, true, 512));
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->config().chunk_tokens, 512);
  EXPECT_EQ(c->config().chunks, 5);
  // Few tokens: one chunk of all of them; an empty batch has no chunk.
  auto s = LossPlan::select(kTarget, lce(DType::f16, 7, 64, 32000));
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(s->config().chunk_tokens, 7);
  EXPECT_EQ(s->config().chunks, 1);
  auto e = LossPlan::select(kTarget, lce(DType::f32, 0, 64, 10, Reduction::mean, Direction::Forward, true));
  ASSERT_TRUE(e.ok()) << e.message();
  EXPECT_EQ(e->config().chunks, 0);
  // reduction none: the loss has one value per token.
  auto n = LossPlan::select(kTarget, lce(DType::f32, 7, 64, 10, Reduction::none));
  EXPECT_EQ(n->loss_shape(), Shape::of({7}));
  // The backward recomputes: a plan of its own.
  auto b = LossPlan::select(kTarget, lce(DType::bf16, 300, 64, 129, Reduction::none, Direction::Backward));
  ASSERT_TRUE(b.ok()) << b.message();
  EXPECT_EQ(b->sku().op, "linear_cross_entropy_backward");
}

TEST(LossLinear, Refusals) {
  auto d = lce(DType::f32, 7, 64, 10);
  d.shapes[0] = Shape::of({7 * 64});
  EXPECT_FAILS_WITH(LossPlan::select(kTarget, d), Status::InvalidProblem, "linear_cross_entropy", "input", "rank 2");
  d = lce(DType::f32, 7, 64, 10);
  d.shapes[1] = Shape::of({10, 65});
  EXPECT_FAILS_WITH(LossPlan::select(kTarget, d), Status::InvalidProblem, "weight.shape[1]", "64", "got 65");
  d = lce(DType::f32, 7, 64, 10);
  d.shapes[2] = Shape::of({8});
  EXPECT_FAILS_WITH(LossPlan::select(kTarget, d), Status::InvalidProblem, "target shape", "[7]", "got [8]");
  d = lce(DType::f32, 7, 64, 10);
  d.target_dtype = DType::f32;
  EXPECT_FAILS_WITH(LossPlan::select(kTarget, d), Status::InvalidProblem, "target dtype", "int32 or int64",
                    "got float32");
  EXPECT_FAILS_WITH(LossPlan::select(kTarget, lce(DType::f32, 7, 64, 0)), Status::InvalidProblem, "classes", ">= 1");
  d = lce(DType::f32, 7, 64, 10);
  ASSERT_TRUE(d.set_param("chunk_tokens", 1.5).ok());
  EXPECT_FAILS_WITH(LossPlan::select(kTarget, d), Status::InvalidProblem, "chunk_tokens", "integer >= 0");
  d = lce(DType::f32, 7, 64, 10);
  ASSERT_TRUE(d.set_param("label_smoothing", 2.0).ok());
  EXPECT_FAILS_WITH(LossPlan::select(kTarget, d), Status::InvalidProblem, "label_smoothing", "[0, 1]");
  d = lce(DType::f32, 7, 64, 10, Reduction::none, Direction::Backward, true);
  EXPECT_FAILS_WITH(LossPlan::select(kTarget, d), Status::InvalidProblem, "linear_cross_entropy_backward",
                    "fused_grad");
  d = lce(DType::f32, 7, 64, 10, Reduction::batchmean);
  EXPECT_FAILS_WITH(LossPlan::select(kTarget, d), Status::InvalidProblem, "batchmean");
  EXPECT_FAILS_WITH(LossPlan::select(kTarget, lce(DType::s32, 7, 64, 10)), Status::Unsupported, "linear_cross_entropy",
                    "dtype", "got int32");
  EXPECT_FAILS_WITH(LossPlan::select(Target::offline(75), lce(DType::f32, 7, 64, 10)), Status::Unsupported, "sm_75");
  PlanPreference p;
  p.reduced_precision_reduction = Tristate::Require;
  EXPECT_FAILS_WITH(LossPlan::select(kTarget, lce(DType::f16, 7, 64, 10), p), Status::Unsupported,
                    "reduced_precision_reduction");
  p = {};
  p.tf32 = Tristate::Require;  // the GEMMs honour it for float32 and refuse it otherwise
  EXPECT_TRUE(LossPlan::select(kTarget, lce(DType::f32, 7, 64, 10), p).ok());
  EXPECT_FAILS_WITH(LossPlan::select(kTarget, lce(DType::bf16, 7, 64, 10), p), Status::Unsupported,
                    "linear_cross_entropy", "logits", "GEMM", "tf32");
}

TEST(LossLinear, ClassWeight) {
  const DType dt = DType::bf16;
  auto d = LossDesc::linear_cross_entropy(dt, 7, 64, 10, DType::s64, Reduction::mean, -100, 0.1, 0,
                                          Direction::Forward, true);
  auto p = LossPlan::select(kTarget, d);
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_NE(p->precision().note.find("class weights"), std::string::npos) << p->precision().note;
  auto a = lce_args(dt, 7, 64, 10);
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "class_weight", "required");
  a.in[3] = ref_of(4, dt, Layout::contiguous({10}));
  EXPECT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
  a.in[3] = ref_of(4, DType::f32, Layout::contiguous({10}));
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "class_weight dtype", "bfloat16", "got float32");
  a.in[3] = ref_of(4, dt, strided({10}, {2}));
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "class_weight", "dense vector");
  a.in[3] = ref_of(4, dt, Layout::contiguous({11}));
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "class_weight shape", "[10]", "got [11]");
  // The descriptor: one weight per class; a weight given to a plan selected without one is refused.
  d.shapes[3] = Shape::of({9});
  EXPECT_FAILS_WITH(LossPlan::select(kTarget, d), Status::InvalidProblem, "class_weight shape", "[10]", "got [9]");
  auto u = LossPlan::select(kTarget, lce(dt, 7, 64, 10));
  ASSERT_TRUE(u.ok()) << u.message();
  a.in[3] = ref_of(4, dt, Layout::contiguous({10}));
  EXPECT_FALSE(u->can_implement(a).ok()) << "class_weight given to a plan without one";
}

TEST(LossLinear, Arguments) {
  const DType dt = DType::bf16;
  auto p = LossPlan::select(kTarget, lce(dt, 7, 64, 10));
  ASSERT_TRUE(p.ok()) << p.message();
  auto a = lce_args(dt, 7, 64, 10);
  EXPECT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
  EXPECT_EQ(p->layout_for(a), "chunks(1x7)+subwarp-rows(tpr=1)-scalar") << "10 classes: not a multiple of 8";
  a.error = mut_of(5, DType::s32, Layout::contiguous({1}));
  EXPECT_TRUE(p->can_implement(a).ok()) << "the error flag is optional";
  a = lce_args(dt, 7, 64, 10);
  a.in[0].layout = strided({7, 64}, {1, 7});
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "input", "dense row-major", "(1, 7)");
  a = lce_args(dt, 7, 64, 10);
  a.in[1] = ref_of(1, dt, Layout::contiguous({10, 64}), 2);
  EXPECT_FAILS_WITH(p->can_implement(a), Status::MisalignedOperand, "weight", "16-byte aligned");
  a = lce_args(dt, 7, 64, 10);
  a.in[2].dtype = DType::s32;
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "target dtype", "int64", "got int32");
  a = lce_args(dt, 7, 64, 10);
  a.in[2].layout = strided({7}, {3});
  EXPECT_TRUE(p->can_implement(a).ok()) << "a strided target";
  a = lce_args(dt, 7, 64, 10);
  a.grad[0] = mut_of(6, dt, Layout::contiguous({7, 64}));
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "grad[0]/grad[1] given", "fused_grad is false");
  a = lce_args(dt, 7, 64, 10);
  a.save_lse = mut_of(6, DType::f32, Layout::contiguous({7}));
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "save_lse", "no statistics");
  a = lce_args(dt, 7, 64, 10);
  a.out.layout = Layout::contiguous({7});
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "out", "one element");
  // The fused forward: gradients optional, dy optional, no aliasing of inputs.
  auto fp = LossPlan::select(kTarget, lce(dt, 7, 64, 128, Reduction::sum, Direction::Forward, true));
  ASSERT_TRUE(fp.ok()) << fp.message();
  auto f = lce_args(dt, 7, 64, 128);
  f.grad[1] = mut_of(7, dt, Layout::contiguous({128, 64}));
  EXPECT_TRUE(fp->can_implement(f).ok()) << fp->can_implement(f).message();
  EXPECT_EQ(fp->layout_for(f), "chunks(1x7)+subwarp-rows(tpr=4)-vec16+grad-gemms");
  f.grad[0] = mut_of(0, dt, Layout::contiguous({7, 64}));
  EXPECT_FAILS_WITH(fp->can_implement(f), Status::InvalidProblem, "overlaps");
  f.grad[0] = mut_of(6, dt, Layout::contiguous({7, 65}));
  EXPECT_FAILS_WITH(fp->can_implement(f), Status::InvalidProblem, "grad[0] (input) shape", "[7, 64]");
  f.grad[0] = {};
  f.dy = ref_of(8, dt, Layout::contiguous({2}));
  EXPECT_FAILS_WITH(fp->can_implement(f), Status::InvalidProblem, "dy", "one element");
  // The backward: dy required, no out.
  auto bp = LossPlan::select(kTarget, lce(dt, 7, 64, 128, Reduction::none, Direction::Backward));
  LossArgs b = lce_args(dt, 7, 64, 128, false);
  b.out = {};
  b.grad[0] = mut_of(6, dt, Layout::contiguous({7, 64}));
  EXPECT_FAILS_WITH(bp->can_implement(b), Status::InvalidProblem, "dy", "required");
  b.dy = ref_of(8, dt, strided({7}, {0}));  // an expanded upstream gradient
  EXPECT_TRUE(bp->can_implement(b).ok()) << bp->can_implement(b).message();
  b.out = mut_of(3, dt, Layout::contiguous({7}));
  EXPECT_FAILS_WITH(bp->can_implement(b), Status::InvalidProblem, "out given", "backward");
  // run() checks the workspace first.
  f.dy = {};
  EXPECT_FAILS_WITH(fp->run(nullptr, Workspace{fake_ptr(9), 16}, f), Status::WorkspaceTooSmall, "workspace");
  EXPECT_FAILS_WITH(fp->run(nullptr, Workspace{fake_ptr(9, 8), fp->workspace_size()}, f), Status::MisalignedOperand,
                    "workspace pointer", "16-byte aligned");
}

// ---- rows ops (losses over the last dim) ------------------------------------------------------------------
LossDesc rows_desc(LossOp op, DType dt, std::initializer_list<Shape> shapes, Reduction r = Reduction::mean,
                   Direction dir = Direction::Forward) {
  return LossDesc::make(op, dt, shapes, r, dir);
}

TEST(LossRows, Select) {
  const Shape x = Shape::of({8, 64}), rows = Shape::of({8});
  auto c = LossPlan::select(kTarget, rows_desc(LossOp::cosine_embedding_loss, DType::f32, {x, x, rows}));
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->rows(), 8);
  EXPECT_EQ(c->classes(), 64);
  EXPECT_EQ(c->config().tpr, 16);
  EXPECT_EQ(c->sku().layout, "last-dim-rows(tpr=16)");
  auto none =
      LossPlan::select(kTarget, rows_desc(LossOp::cosine_embedding_loss, DType::f32, {x, x, rows}, Reduction::none));
  EXPECT_EQ(none->loss_shape(), rows);
  // Broadcasting: the input2 of one row serves every row.
  EXPECT_TRUE(
      LossPlan::select(kTarget, rows_desc(LossOp::cosine_embedding_loss, DType::f32, {x, Shape::of({64}), rows})).ok());
  // ... but not along the last dim: each input's norm is over its own embedding (torch).
  EXPECT_FAILS_WITH(
      LossPlan::select(kTarget, rows_desc(LossOp::cosine_embedding_loss, DType::f32, {x, Shape::of({8, 1}), rows})),
      Status::InvalidProblem, "cosine_embedding_loss", "input2.shape[-1] expected 64", "got shape [8, 1]");
  EXPECT_FAILS_WITH(
      LossPlan::select(kTarget, rows_desc(LossOp::cosine_embedding_loss, DType::f32, {x, x, Shape::of({9})})),
      Status::InvalidProblem, "cosine_embedding_loss", "target shape", "[8]", "got [9]");
  EXPECT_FAILS_WITH(
      LossPlan::select(kTarget, rows_desc(LossOp::triplet_margin_loss, DType::f32, {Shape{}, Shape{}, Shape{}})),
      Status::InvalidProblem, "triplet_margin_loss", "rank >= 1");
  auto t = rows_desc(LossOp::triplet_margin_loss, DType::bf16, {x, x, x});
  EXPECT_DOUBLE_EQ(t.param("p"), 2.0);
  ASSERT_TRUE(t.set_param("p", 0.0).ok());
  EXPECT_FAILS_WITH(LossPlan::select(kTarget, t), Status::InvalidProblem, "p expected", "> 0", "got 0");
  ASSERT_TRUE(t.set_param("p", 3.0).ok());
  ASSERT_TRUE(t.set_param("swap", 2.0).ok());
  EXPECT_FAILS_WITH(LossPlan::select(kTarget, t), Status::InvalidProblem, "swap", "0 or 1");
  ASSERT_TRUE(t.set_param("swap", 1.0).ok());
  EXPECT_TRUE(LossPlan::select(kTarget, t).ok()) << "any p > 0 with swap";
  auto m = rows_desc(LossOp::multi_margin_loss, DType::f32, {x, rows, Shape::of({64})});
  ASSERT_TRUE(LossPlan::select(kTarget, m).ok());
  EXPECT_EQ(LossPlan::select(kTarget, m)->sku().dtypes, "float32,int64->float32");
  ASSERT_TRUE(m.set_param("p", 3.0).ok());
  EXPECT_FAILS_WITH(LossPlan::select(kTarget, m), Status::InvalidProblem, "multi_margin_loss", "p expected 1 or 2");
  m = rows_desc(LossOp::multi_margin_loss, DType::f32, {x, rows, Shape::of({65})});
  EXPECT_FAILS_WITH(LossPlan::select(kTarget, m), Status::InvalidProblem, "weight shape", "[64]", "got [65]");
  m = rows_desc(LossOp::multi_margin_loss, DType::f32, {x, rows});
  m.target_dtype = DType::f32;
  EXPECT_FAILS_WITH(LossPlan::select(kTarget, m), Status::InvalidProblem, "target dtype", "int32 or int64");
  m = rows_desc(LossOp::multi_margin_loss, DType::f32, {Shape::of({8, 0}), rows});
  EXPECT_FAILS_WITH(LossPlan::select(kTarget, m), Status::InvalidProblem, "classes", ">= 1", "8 rows");
  EXPECT_TRUE(
      LossPlan::select(kTarget, rows_desc(LossOp::multi_margin_loss, DType::f32, {Shape::of({0, 5}), Shape::of({0})}))
          .ok())
      << "an empty batch";
  EXPECT_FAILS_WITH(
      LossPlan::select(kTarget, rows_desc(LossOp::multilabel_margin_loss, DType::f32, {x, Shape::of({8, 63})})),
      Status::InvalidProblem, "multilabel_margin_loss", "target shape", "[8, 64]");
  auto s = rows_desc(LossOp::multilabel_soft_margin_loss, DType::f16, {x, Shape::of({64})});
  s.shapes[2] = Shape::of({1, 64});
  s.present |= 0b100;
  auto sp = LossPlan::select(kTarget, s);
  ASSERT_TRUE(sp.ok()) << sp.message();
  EXPECT_EQ(sp->rows(), 8);
  EXPECT_FAILS_WITH(LossPlan::select(kTarget, rows_desc(LossOp::multilabel_soft_margin_loss, DType::f32, {x, x},
                                                        Reduction::batchmean)),
                    Status::InvalidProblem, "batchmean");
  auto fg = rows_desc(LossOp::triplet_margin_loss, DType::f32, {x, x, x});
  fg.fused_grad = true;
  EXPECT_FAILS_WITH(LossPlan::select(kTarget, fg), Status::InvalidProblem, "fused_grad");
}

TEST(LossRows, Workspace) {
  const Shape x = Shape::of({8, 64}), rows = Shape::of({8});
  const size_t partial = 1024 * 2 * 4;
  EXPECT_EQ(
      LossPlan::select(kTarget, rows_desc(LossOp::cosine_embedding_loss, DType::f32, {x, x, rows}))->workspace_size(),
      256 + partial);
  EXPECT_EQ(
      LossPlan::select(kTarget, rows_desc(LossOp::cosine_embedding_loss, DType::f32, {x, x, rows}, Reduction::none))
          ->workspace_size(),
      0u);
  // Backward: the broadcast input2's gradient goes through a dense [8, 64] buffer.
  EXPECT_EQ(LossPlan::select(kTarget, rows_desc(LossOp::cosine_embedding_loss, DType::bf16, {x, Shape::of({64}), rows},
                                                Reduction::sum, Direction::Backward))
                ->workspace_size(),
            size_t{8} * 64 * 2);
  // multilabel_margin: its "is a target" mask, one byte an element.
  EXPECT_EQ(LossPlan::select(kTarget, rows_desc(LossOp::multilabel_margin_loss, DType::f32, {x, x}, Reduction::none,
                                                Direction::Backward))
                ->workspace_size(),
            512u);
}

TEST(LossRows, Arguments) {
  const Shape x = Shape::of({8, 64}), rows = Shape::of({8});
  auto p = LossPlan::select(kTarget, rows_desc(LossOp::multi_margin_loss, DType::f32, {x, rows}));
  ASSERT_TRUE(p.ok()) << p.message();
  LossArgs a;
  a.in[0] = ref_of(0, DType::f32, Layout::contiguous({8, 64}));
  a.in[1] = ref_of(1, DType::s64, Layout::contiguous({8}));
  a.out = mut_of(2, DType::f32, Layout::contiguous({}));
  a.error = mut_of(3, DType::s32, Layout::contiguous({1}));
  EXPECT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
  EXPECT_EQ(p->layout_for(a), "last-dim-rows(tpr=16)");
  a.in[1].dtype = DType::s32;
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "target dtype", "int64", "got int32");
  auto c = LossPlan::select(kTarget, rows_desc(LossOp::cosine_embedding_loss, DType::f32, {x, x, rows}));
  LossArgs b;
  b.in[0] = ref_of(0, DType::f32, strided({8, 64}, {1, 8}));  // any strides
  b.in[1] = ref_of(1, DType::f32, Layout::contiguous({8, 64}));
  b.in[2] = ref_of(2, DType::f32, strided({8}, {0}));  // an expanded target
  b.out = mut_of(3, DType::f32, Layout::contiguous({}));
  EXPECT_TRUE(c->can_implement(b).ok()) << c->can_implement(b).message();
  b.error = mut_of(4, DType::s32, Layout::contiguous({1}));
  EXPECT_FAILS_WITH(c->can_implement(b), Status::InvalidProblem, "error", "class-index targets");
  auto cb = LossPlan::select(kTarget, rows_desc(LossOp::cosine_embedding_loss, DType::f32, {x, x, rows},
                                                Reduction::mean, Direction::Backward));
  LossArgs g;
  g.dy = ref_of(6, DType::f32, Layout::contiguous({}));
  g.in[0] = ref_of(0, DType::f32, Layout::contiguous({8, 64}));
  g.in[1] = ref_of(1, DType::f32, Layout::contiguous({8, 64}));
  g.in[2] = ref_of(2, DType::f32, Layout::contiguous({8}));
  g.grad[1] = mut_of(7, DType::f32, Layout::contiguous({8, 64}));
  EXPECT_TRUE(cb->can_implement(g).ok()) << cb->can_implement(g).message();
  g.grad[0] = mut_of(0, DType::f32, Layout::contiguous({8, 64}));
  EXPECT_FAILS_WITH(cb->can_implement(g), Status::InvalidProblem, "overlaps");  // no in-place gradient
  g.grad[0] = {};
  g.grad[2] = mut_of(8, DType::f32, Layout::contiguous({8}));
  EXPECT_FAILS_WITH(cb->can_implement(g), Status::InvalidProblem, "grad[2]", "2 gradients");
}

// ---- pointwise descriptors ------------------------------------------------------------------------------
TEST(LossSelect, PointwiseBroadcastAndInputs) {
  auto d = LossDesc::make(LossOp::mse_loss, DType::f32, {Shape::of({4, 5}), Shape::of({5})}, Reduction::none);
  auto p = LossPlan::select(kTarget, d);
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(p->loss_shape(), Shape::of({4, 5}));
  EXPECT_EQ(p->rows(), 20);
  d.shapes[1] = Shape::of({6});
  EXPECT_FAILS_WITH(LossPlan::select(kTarget, d), Status::InvalidProblem, "mse_loss", "do not broadcast");
  auto g = LossDesc::make(LossOp::gaussian_nll_loss, DType::f32, {Shape::of({4, 5}), Shape::of({4, 5})});
  EXPECT_FAILS_WITH(LossPlan::select(kTarget, g), Status::InvalidProblem, "gaussian_nll_loss", "var", "required");
  auto b =
      LossDesc::make(LossOp::binary_cross_entropy_with_logits, DType::bf16, {Shape::of({4, 5}), Shape::of({4, 5})});
  b.shapes[3] = Shape::of({5});  // pos_weight without weight
  b.present |= 0b1000;
  EXPECT_TRUE(LossPlan::select(kTarget, b).ok());
  auto m = LossDesc::make(LossOp::mse_loss, DType::f32, {Shape::of({4}), Shape::of({4}), Shape::of({4})});
  EXPECT_FAILS_WITH(LossPlan::select(kTarget, m), Status::InvalidProblem, "mse_loss", "takes 2 inputs");
  auto neg = LossDesc::make(LossOp::l1_loss, DType::f32, {Shape::of({4, -1}), Shape::of({4, 1})});
  EXPECT_FAILS_WITH(LossPlan::select(kTarget, neg), Status::InvalidProblem, "l1_loss", "negative");
}

TEST(LossSelect, PointwiseParameters) {
  auto s = LossDesc::make(LossOp::smooth_l1_loss, DType::f32, {Shape::of({4}), Shape::of({4})});
  EXPECT_DOUBLE_EQ(s.param("beta"), 1.0);
  ASSERT_TRUE(s.set_param("beta", -0.5).ok());
  EXPECT_FAILS_WITH(LossPlan::select(kTarget, s), Status::InvalidProblem, "smooth_l1_loss", "beta", ">= 0");
  ASSERT_TRUE(s.set_param("beta", 0.0).ok());
  EXPECT_TRUE(LossPlan::select(kTarget, s).ok()) << "beta = 0 is l1_loss";
  auto h = LossDesc::make(LossOp::huber_loss, DType::f32, {Shape::of({4}), Shape::of({4})});
  ASSERT_TRUE(h.set_param("delta", 0.0).ok());
  EXPECT_FAILS_WITH(LossPlan::select(kTarget, h), Status::InvalidProblem, "huber_loss", "delta", "> 0");
  auto k = LossDesc::make(LossOp::kl_div, DType::f32, {Shape::of({4}), Shape::of({4})}, Reduction::batchmean);
  EXPECT_TRUE(LossPlan::select(kTarget, k).ok());
  ASSERT_TRUE(k.set_param("log_target", 2.0).ok());
  EXPECT_FAILS_WITH(LossPlan::select(kTarget, k), Status::InvalidProblem, "log_target", "0 or 1", "got 2");
  auto bm = LossDesc::make(LossOp::mse_loss, DType::f32, {Shape::of({4}), Shape::of({4})}, Reduction::batchmean);
  EXPECT_FAILS_WITH(LossPlan::select(kTarget, bm), Status::InvalidProblem, "mse_loss", "batchmean", "kl_div only");
  auto po = LossDesc::make(LossOp::poisson_nll_loss, DType::f32, {Shape::of({4}), Shape::of({4})});
  EXPECT_DOUBLE_EQ(po.param("log_input"), 1.0);
  EXPECT_DOUBLE_EQ(po.param("eps"), 1e-8);
  ASSERT_TRUE(po.set_param("full", std::numeric_limits<double>::quiet_NaN()).ok());
  EXPECT_FAILS_WITH(LossPlan::select(kTarget, po), Status::InvalidProblem, "poisson_nll_loss", "full");
  auto mr = LossDesc::make(LossOp::margin_ranking_loss, DType::f32, {Shape::of({4}), Shape::of({4}), Shape::of({4})});
  EXPECT_DOUBLE_EQ(mr.param("margin"), 0.0);
  EXPECT_TRUE(LossPlan::select(kTarget, mr).ok());
}

TEST(LossSelect, Preferences) {
  const auto d = ce(DType::bf16);
  auto ok = baracuda::test::expect_native_preferences<LossPlan>(kTarget, d, "cross_entropy");
  ASSERT_TRUE(ok.ok()) << ok.message();
  EXPECT_EQ(ok->precision().accumulator, DType::f32);
  EXPECT_EQ(LossPlan::select(kTarget, ce(DType::f64))->precision().accumulator, DType::f64);
  PlanPreference p;
  p.vectorized = Tristate::Forbid;
  auto nv = LossPlan::select(kTarget, ce(), p);
  ASSERT_TRUE(nv.ok());
  EXPECT_EQ(nv->layout_for(ce_args()), "cta-rows(tpr=64)-scalar");
  EXPECT_EQ(LossPlan::select(kTarget, ce())->layout_for(ce_args()), "cta-rows(tpr=64)-vec16");
}

// ---- launch shape, partition, workspace --------------------------------------------------------------
TEST(LossConfig, ShapeFollowsClasses) {
  auto cfg = [](LossDesc d) { return LossPlan::select(kTarget, d)->config(); };
  // The loss alone: at most 64 threads a row; the backward (and the fused gradient past a cluster)
  // up to 512.
  EXPECT_EQ(cfg(ce(DType::bf16, Shape::of({8192, 128256}))).tpr, 64);
  EXPECT_EQ(cfg(ce(DType::bf16, Shape::of({8192, 128256}))).block, 64);
  const auto ce_bw = ce(DType::bf16, Shape::of({8192, 128256}), Reduction::mean, Direction::Backward);
  EXPECT_EQ(cfg(ce_bw).tpr, 512);
  EXPECT_EQ(cfg(ce_bw).block, 512);
  EXPECT_EQ(cfg(ce(DType::bf16, Shape::of({64, 1000}))).tpr, 32);  // 32 bf16 a thread
  EXPECT_EQ(cfg(ce(DType::bf16, Shape::of({64, 1000}))).block, 128);
  EXPECT_EQ(cfg(ce(DType::f32, Shape::of({64, 1000}))).tpr, 64);  // 16 f32 a thread
  EXPECT_EQ(cfg(ce(DType::bf16, Shape::of({64, 129}))).tpr, 8);
  EXPECT_EQ(cfg(ce(DType::f32, Shape::of({64, 7}))).tpr, 1);
  EXPECT_EQ(cfg(ce(DType::f64, Shape::of({64, 9}))).tpr, 2);
  EXPECT_EQ(cfg(LossDesc::nll_loss(DType::bf16, Shape::of({64, 128256}), DType::s64, false)).tpr, 1);
  auto nb = LossDesc::nll_loss(DType::bf16, Shape::of({64, 128256}), DType::s64, false, Reduction::mean, -100,
                               Direction::Backward);
  EXPECT_EQ(cfg(nb).tpr, 512);
  EXPECT_EQ(LossPlan::select(kTarget, ce(DType::bf16, Shape::of({8192, 128256})))->sku().layout, "cta-rows(tpr=64)");
}

/// The fused forward over class indices: a thread-block cluster a row where one CTA (512 threads x
/// 4 16-byte vectors: 16384 16-bit classes) is too short and 16 suffice, on sm_90+.
TEST(LossConfig, ClusterFollowsClasses) {
  auto fused = [](DType dt, int64_t classes, Target t = kTarget) {
    auto d = ce(dt, Shape::of({64, classes}));
    d.fused_grad = true;
    return LossPlan::select(t, d)->config().cluster;
  };
  EXPECT_EQ(fused(DType::bf16, 128256), 8);
  EXPECT_EQ(fused(DType::bf16, 16384), 0);  // one CTA: the streaming kernel
  EXPECT_EQ(fused(DType::bf16, 16392), 2);
  EXPECT_EQ(fused(DType::bf16, 32000), 2);
  EXPECT_EQ(fused(DType::f16, 50304), 4);
  EXPECT_EQ(fused(DType::bf16, 151936), 10);  // a non-portable cluster size
  EXPECT_EQ(fused(DType::bf16, 262144), 16);
  EXPECT_EQ(fused(DType::bf16, 262152), 0);  // past 16 CTAs
  EXPECT_EQ(fused(DType::f32, 100000), 13);
  EXPECT_EQ(fused(DType::f64, 4098), 2);
  EXPECT_EQ(fused(DType::bf16, 128256, Target::offline(80)), 0);  // clusters are sm_90+
  auto plain = ce(DType::bf16, Shape::of({64, 128256}));
  EXPECT_EQ(LossPlan::select(kTarget, plain)->config().cluster, 0);  // no gradient: one pass anyway
  auto probs = LossDesc::cross_entropy(DType::bf16, Shape::of({64, 128256}), DType::bf16, false);
  probs.fused_grad = true;
  EXPECT_EQ(LossPlan::select(kTarget, probs)->config().cluster, 0);
  auto bw = ce(DType::bf16, Shape::of({64, 128256}), Reduction::mean, Direction::Backward);
  EXPECT_EQ(LossPlan::select(kTarget, bw)->config().cluster, 0);
  auto d = ce(DType::bf16, Shape::of({64, 128256}));
  d.fused_grad = true;
  PlanPreference scalar;
  scalar.vectorized = Tristate::Forbid;
  EXPECT_EQ(LossPlan::select(kTarget, d, scalar)->config().cluster, 0);
  auto p = LossPlan::select(kTarget, d);
  EXPECT_EQ(p->sku().layout, "cluster-rows(ctas=8)");
  EXPECT_EQ(p->config().tpr, 512);  // the streaming fallback's shape (no sm_90 code in the build)
  EXPECT_NE(p->sku().precision.note.find("thread-block cluster"), std::string::npos) << p->sku().precision.note;
}

TEST(LossConfig, Partition) {
  int parts = 0;
  int64_t chunk = 0;
  detail::loss_sum_partition(0, &parts, &chunk);
  EXPECT_EQ(parts, 1);
  EXPECT_EQ(chunk, detail::kSumMinChunk);
  detail::loss_sum_partition(8192, &parts, &chunk);
  EXPECT_EQ(parts, 2);
  EXPECT_EQ(chunk, 4096);
  detail::loss_sum_partition(int64_t{16384} * 4096, &parts, &chunk);
  EXPECT_EQ(parts, 1024);
  EXPECT_EQ(chunk, 65536);
  detail::loss_sum_partition(int64_t{1} << 40, &parts, &chunk);
  EXPECT_LE(parts, detail::kSumMaxParts);
  EXPECT_GE(int64_t(parts) * chunk, int64_t{1} << 40);
  EXPECT_EQ(chunk % detail::kSumMinChunk, 0);
  // The partition depends on the problem only, never on the device.
  const Target small{0, 90, 8}, large{0, 90, 132};
  auto a = LossPlan::select(small, mse()), b = LossPlan::select(large, mse());
  EXPECT_EQ(a->config().parts, b->config().parts);
  EXPECT_EQ(a->config().chunk, b->config().chunk);
  EXPECT_EQ(a->workspace_size(), b->workspace_size());
}

TEST(LossConfig, Workspace) {
  auto big = ce(DType::bf16, Shape::of({8192, 128256}));
  const size_t rows = 8192 * 4, partial = 1024 * 2 * 4, scalars = 256;
  EXPECT_EQ(LossPlan::select(kTarget, big)->workspace_size(), 2 * rows + partial + scalars);
  big.fused_grad = true;
  EXPECT_EQ(LossPlan::select(kTarget, big)->workspace_size(), 2 * rows + partial + scalars);
  big.reduction = Reduction::none;
  EXPECT_EQ(LossPlan::select(kTarget, big)->workspace_size(), 0u);
  big.fused_grad = false;
  EXPECT_EQ(LossPlan::select(kTarget, big)->workspace_size(), 0u);
  auto bw = ce(DType::bf16, Shape::of({8192, 128256}), Reduction::mean, Direction::Backward);
  EXPECT_EQ(LossPlan::select(kTarget, bw)->workspace_size(), 0u);
  auto smooth_w = LossDesc::cross_entropy(DType::bf16, Shape::of({8, 100}), DType::s64, true, Reduction::mean, -100,
                                          0.1, Direction::Backward);
  EXPECT_EQ(LossPlan::select(kTarget, smooth_w)->workspace_size(), partial + scalars);
  auto probs = LossDesc::cross_entropy(DType::f64, Shape::of({8, 100}), DType::f64, false, Reduction::sum);
  EXPECT_EQ(LossPlan::select(kTarget, probs)->workspace_size(), 256 + 1024 * 2 * 8 + 256u);
  EXPECT_EQ(LossPlan::select(kTarget, mse())->workspace_size(), size_t{partial});
  EXPECT_EQ(LossPlan::select(kTarget, mse(DType::f32, Reduction::none))->workspace_size(), 0u);
  EXPECT_EQ(LossPlan::select(kTarget, mse(DType::f32, Reduction::mean, Direction::Backward))->workspace_size(), 0u);
  auto bc = LossDesc::make(LossOp::mse_loss, DType::bf16, {Shape::of({16, 4096}), Shape::of({1, 4096})},
                           Reduction::mean, Direction::Backward);
  EXPECT_EQ(LossPlan::select(kTarget, bc)->workspace_size(), size_t{16} * 4096 * 2) << "the target's dense gradient";
}

// ---- arguments ------------------------------------------------------------------------------------------
TEST(LossArgsCheck, ClassForward) {
  auto p = LossPlan::select(kTarget, ce());
  ASSERT_TRUE(p.ok());
  auto a = ce_args();
  EXPECT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
  a.save_lse = {};
  a.save_total_weight = {};
  a.error = {};
  EXPECT_TRUE(p->can_implement(a).ok()) << "statistics and the error flag are optional";
  a = ce_args();
  a.out.layout = Layout::contiguous({1, 1});
  EXPECT_TRUE(p->can_implement(a).ok()) << "a reduced loss is any one-element tensor";
  a.out.layout = Layout::contiguous({8});
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "out", "one element", "[8]");
  a = ce_args();
  a.in[1].dtype = DType::s32;
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "target dtype", "int64", "got int32");
  a = ce_args();
  a.in[0].layout = Layout::contiguous({8, 999});
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "input shape", "[8, 1000]", "got [8, 999]");
  a = ce_args();
  a.save_lse.layout = Layout::contiguous({7});
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "save_lse", "8 elements", "got 7");
  a = ce_args();
  a.save_lse.dtype = DType::bf16;
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "save_lse dtype", "float32", "got bfloat16");
  a = ce_args();
  a.error.dtype = DType::s64;
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "error dtype", "int32");
  a = ce_args();
  a.in[1] = {};
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "target", "required");
  a = ce_args();
  a.in[2] = ref_of(8, DType::f32, Layout::contiguous({1000}));
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "in[2]", "weight");
  a = ce_args();
  a.grad[0] = mut_of(7, DType::f32, Layout::contiguous({8, 1000}));
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "grad[0]", "fused_grad");
  a = ce_args();
  a.dy = ref_of(6, DType::f32, Layout::contiguous({}));
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "dy given");
  a = ce_args();
  a.in[0].data = nullptr;
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "input", "null");
  auto n = LossPlan::select(kTarget, LossDesc::nll_loss(DType::f32, Shape::of({8, 1000}), DType::s64, false));
  a = ce_args();
  EXPECT_FAILS_WITH(n->can_implement(a), Status::InvalidProblem, "save_lse", "only cross_entropy");
  a.save_lse = {};
  EXPECT_TRUE(n->can_implement(a).ok()) << n->can_implement(a).message();
  auto none = LossPlan::select(kTarget, ce(DType::f32, Shape::of({8, 1000}), Reduction::none));
  a = ce_args();
  a.out.layout = Layout::contiguous({8});
  EXPECT_FAILS_WITH(none->can_implement(a), Status::InvalidProblem, "save_total_weight", "reduced");
  a.save_total_weight = {};
  EXPECT_TRUE(none->can_implement(a).ok()) << none->can_implement(a).message();
  a.out.layout = strided({8}, {3});
  EXPECT_TRUE(none->can_implement(a).ok()) << "a strided per-row loss";
  a.out.layout = Layout::contiguous({});
  EXPECT_FAILS_WITH(none->can_implement(a), Status::InvalidProblem, "out shape", "[8]", "got []");
}

TEST(LossArgsCheck, ClassBackward) {
  auto p = LossPlan::select(kTarget, ce(DType::f32, Shape::of({8, 1000}), Reduction::mean, Direction::Backward));
  ASSERT_TRUE(p.ok());
  auto a = ce_bw_args();
  EXPECT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
  a.total_weight = {};
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "total_weight", "required");
  a = ce_bw_args();
  a.lse = {};
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "lse", "required");
  a = ce_bw_args();
  a.out = mut_of(2, DType::f32, Layout::contiguous({}));
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "out given");
  a = ce_bw_args();
  a.grad[1] = mut_of(9, DType::f32, Layout::contiguous({8, 1000}));
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "grad[1]", "class-index targets");
  a = ce_bw_args();
  a.grad[0] = mut_of(0, DType::f32, Layout::contiguous({8, 1000}));
  EXPECT_TRUE(p->can_implement(a).ok()) << "the gradient may replace the logits: " << p->can_implement(a).message();
  a.grad[0] = mut_of(0, DType::f32, Layout::contiguous({8, 1000}), 4);
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "overlaps input");
  auto sum = LossPlan::select(kTarget, ce(DType::f32, Shape::of({8, 1000}), Reduction::sum, Direction::Backward));
  a = ce_bw_args();
  EXPECT_FAILS_WITH(sum->can_implement(a), Status::InvalidProblem, "total_weight given", "mean");
  a.total_weight = {};
  EXPECT_TRUE(sum->can_implement(a).ok()) << sum->can_implement(a).message();
  auto none = LossPlan::select(kTarget, ce(DType::f32, Shape::of({8, 1000}), Reduction::none, Direction::Backward));
  a.dy = ref_of(6, DType::f32, strided({8}, {0}));  // an expanded ones-tensor
  EXPECT_TRUE(none->can_implement(a).ok()) << none->can_implement(a).message();
}

TEST(LossArgsCheck, FusedGradient) {
  auto d = ce();
  d.fused_grad = true;
  auto p = LossPlan::select(kTarget, d);
  ASSERT_TRUE(p.ok());
  auto a = ce_args();
  a.grad[0] = mut_of(0, DType::f32, Layout::contiguous({8, 1000}));  // in place over the logits
  EXPECT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
  a.dy = ref_of(6, DType::f32, Layout::contiguous({}));
  EXPECT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
  a.dy.layout = Layout::contiguous({2});
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "dy", "one element");
}

TEST(LossArgsCheck, FusedBackwardRescale) {
  auto d = ce(DType::bf16, Shape::of({8, 1000}), Reduction::mean, Direction::Backward);
  d.fused_grad = true;
  auto p = LossPlan::select(kTarget, d);
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(p->workspace_size(), 0u);
  LossArgs a;
  a.dy = ref_of(6, DType::bf16, Layout::contiguous({}));
  a.grad[0] = mut_of(7, DType::bf16, Layout::contiguous({8, 1000}));
  EXPECT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
  EXPECT_EQ(p->layout_for(a), "rescale-vec16");
  a.grad[0] = mut_of(7, DType::bf16, Layout::contiguous({8, 1000}), 2);
  EXPECT_EQ(p->layout_for(a), "rescale-scalar");
  a.grad[0].layout = strided({8, 1000}, {1, 8});
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "grad[0]", "contiguous");
  a.grad[0] = mut_of(7, DType::bf16, Layout::contiguous({8, 1000}));
  a.in[0] = ref_of(0, DType::bf16, Layout::contiguous({8, 1000}));
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "input given", "dy and grad[0] only");
  a.in[0] = {};
  a.dy = {};
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "dy", "required");
  a.dy = ref_of(6, DType::bf16, Layout::contiguous({2}));
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "dy", "one element");
}

TEST(LossArgsCheck, Pointwise) {
  auto p = LossPlan::select(kTarget, mse(DType::f32, Reduction::none));
  LossArgs a;
  a.in[0] = ref_of(0, DType::f32, Layout::contiguous({16, 4096}));
  a.in[1] = ref_of(1, DType::f32, Layout::contiguous({16, 4096}));
  a.out = mut_of(2, DType::f32, Layout::contiguous({16, 4096}));
  EXPECT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
  EXPECT_EQ(p->layout_for(a), "pointwise-contiguous-vec16");
  a.out = mut_of(0, DType::f32, Layout::contiguous({16, 4096}));
  EXPECT_TRUE(p->can_implement(a).ok()) << "exact in-place";
  a.out = mut_of(2, DType::f32, Layout::contiguous({16, 4095}));
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "mse_loss", "out shape", "[16, 4096]");
  a.out = mut_of(2, DType::f32, Layout::contiguous({16, 4096}));
  a.in[1].layout = strided({16, 4096}, {1, 16});  // transposed target
  EXPECT_TRUE(p->can_implement(a).ok());
  EXPECT_EQ(p->layout_for(a), "pointwise-strided-scalar");
  a.in[1].dtype = DType::f16;
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "target dtype", "float32", "got float16");
  auto b = LossPlan::select(kTarget, mse(DType::f32, Reduction::mean, Direction::Backward));
  LossArgs g;
  g.dy = ref_of(6, DType::f32, Layout::contiguous({}));
  g.in[0] = ref_of(0, DType::f32, Layout::contiguous({16, 4096}));
  g.in[1] = ref_of(1, DType::f32, Layout::contiguous({16, 4096}));
  g.grad[1] = mut_of(3, DType::f32, Layout::contiguous({16, 4096}));
  EXPECT_TRUE(b->can_implement(g).ok()) << "only the target's gradient: " << b->can_implement(g).message();
  g.grad[2] = mut_of(4, DType::f32, Layout::contiguous({16, 4096}));
  EXPECT_FAILS_WITH(b->can_implement(g), Status::InvalidProblem, "grad[2]", "2 gradients");
  g.grad[2] = {};
  g.dy = {};
  EXPECT_FAILS_WITH(b->can_implement(g), Status::InvalidProblem, "dy", "required");
  auto s =
      LossPlan::select(kTarget, LossDesc::make(LossOp::soft_margin_loss, DType::f32, {Shape::of({4}), Shape::of({4})},
                                               Reduction::sum, Direction::Backward));
  LossArgs t;
  t.dy = ref_of(6, DType::f32, Layout::contiguous({}));
  t.in[0] = ref_of(0, DType::f32, Layout::contiguous({4}));
  t.in[1] = ref_of(1, DType::f32, Layout::contiguous({4}));
  t.grad[1] = mut_of(3, DType::f32, Layout::contiguous({4}));
  EXPECT_FAILS_WITH(s->can_implement(t), Status::InvalidProblem, "grad[1]", "1 gradients");
}

// ---- variants ---------------------------------------------------------------------------------------------
TEST(LossLayout, Variants) {
  auto p = LossPlan::select(kTarget, ce(DType::bf16, Shape::of({8192, 128256})));
  LossArgs a;
  a.in[0] = ref_of(0, DType::bf16, Layout::contiguous({8192, 128256}));
  a.in[1] = ref_of(1, DType::s64, Layout::contiguous({8192}));
  a.out = mut_of(2, DType::bf16, Layout::contiguous({}));
  EXPECT_EQ(p->layout_for(a), "cta-rows(tpr=64)-vec16");
  a.in[0] = ref_of(0, DType::bf16, Layout::contiguous({8192, 128256}), 2);  // misaligned by one element
  EXPECT_EQ(p->layout_for(a), "cta-rows(tpr=64)-scalar");
  // [N, C, H, W]: a strided class axis over many positions takes the column mapping.
  auto img = LossPlan::select(kTarget, ce(DType::f32, Shape::of({64, 10, 8, 8})));
  a.in[0] = ref_of(0, DType::f32, Layout::contiguous({64, 10, 8, 8}));
  a.in[1] = ref_of(1, DType::s64, Layout::contiguous({64, 8, 8}));
  a.out = mut_of(2, DType::f32, Layout::contiguous({}));
  ASSERT_TRUE(img->can_implement(a).ok()) << img->can_implement(a).message();
  EXPECT_EQ(img->layout_for(a), "column-rows-scalar");
  auto few = LossPlan::select(kTarget, ce(DType::f32, Shape::of({2, 10, 8, 8})));
  a.in[0] = ref_of(0, DType::f32, Layout::contiguous({2, 10, 8, 8}));
  a.in[1] = ref_of(1, DType::s64, Layout::contiguous({2, 8, 8}));
  EXPECT_EQ(few->layout_for(a), "subwarp-rows(tpr=1)-scalar");
  auto n = LossPlan::select(kTarget, LossDesc::nll_loss(DType::f32, Shape::of({8, 1000}), DType::s64, false));
  EXPECT_EQ(n->layout_for(ce_args()), "row-gather");
  // The fused forward of an LLM vocabulary: the cluster kernel for a contiguous, aligned row with
  // one row dim after coalescing; the streaming kernel otherwise.
  auto fd = ce(DType::bf16, Shape::of({8192, 128256}));
  fd.fused_grad = true;
  auto f = LossPlan::select(kTarget, fd);
  LossArgs fa;
  fa.in[0] = ref_of(0, DType::bf16, Layout::contiguous({8192, 128256}));
  fa.in[1] = ref_of(1, DType::s64, Layout::contiguous({8192}));
  fa.out = mut_of(2, DType::bf16, Layout::contiguous({}));
  fa.grad[0] = mut_of(3, DType::bf16, Layout::contiguous({8192, 128256}));
  ASSERT_TRUE(f->can_implement(fa).ok()) << f->can_implement(fa).message();
  EXPECT_EQ(f->layout_for(fa), "cluster-rows(ctas=8)-vec16");
  fa.grad[0] = mut_of(0, DType::bf16, Layout::contiguous({8192, 128256}));  // in place over the logits
  EXPECT_EQ(f->layout_for(fa), "cluster-rows(ctas=8)-vec16");
  fa.in[0] = ref_of(0, DType::bf16, Layout::contiguous({8192, 128256}), 2);
  EXPECT_EQ(f->layout_for(fa), "cta-rows(tpr=512)-scalar");
  // [2, C, 3] with the class axis innermost, every other batch: two row dims.
  auto f3d = ce(DType::bf16, Shape::of({2, 128256, 3}));
  f3d.fused_grad = true;
  auto f3 = LossPlan::select(kTarget, f3d);
  fa.in[0] = ref_of(0, DType::bf16, strided({2, 128256, 3}, {6 * 128256, 1, 128256}));
  fa.in[1] = ref_of(1, DType::s64, Layout::contiguous({2, 3}));
  fa.grad[0] = mut_of(3, DType::bf16, strided({2, 128256, 3}, {6 * 128256, 1, 128256}));
  ASSERT_TRUE(f3->can_implement(fa).ok()) << f3->can_implement(fa).message();
  EXPECT_EQ(f3->layout_for(fa), "cta-rows(tpr=512)-vec16");
  fa.in[0].layout = strided({2, 128256, 3}, {3 * 128256, 1, 128256});  // dense: one row dim
  fa.grad[0].layout = strided({2, 128256, 3}, {3 * 128256, 1, 128256});
  EXPECT_EQ(f3->layout_for(fa), "cluster-rows(ctas=8)-vec16");
  auto e = LossPlan::select(kTarget, ce(DType::f32, Shape::of({0, 1000})));
  LossArgs z;
  z.in[0] = ref_of(0, DType::f32, Layout::contiguous({0, 1000}));
  z.in[1] = ref_of(1, DType::s64, Layout::contiguous({0}));
  z.out = mut_of(2, DType::f32, Layout::contiguous({}));
  EXPECT_TRUE(e->can_implement(z).ok()) << e->can_implement(z).message();
  EXPECT_EQ(e->layout_for(z), "empty");
}

TEST(LossRun, Refusals) {
  auto p = LossPlan::select(kTarget, ce());
  ASSERT_GT(p->workspace_size(), 0u);
  EXPECT_FAILS_WITH(p->run(nullptr, Workspace{fake_ptr(9), 16}, ce_args()), Status::WorkspaceTooSmall, "cross_entropy",
                    "workspace", std::to_string(p->workspace_size()));
  auto bad = ce_args();
  bad.in[0].layout = Layout::contiguous({8, 10});
  EXPECT_FAILS_WITH(p->run(nullptr, Workspace{fake_ptr(9), p->workspace_size()}, bad), Status::InvalidProblem,
                    "input shape");
}

}  // namespace
}  // namespace baracuda
