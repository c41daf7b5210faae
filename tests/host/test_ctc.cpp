// ctc_loss (CtcLossPlan) without a GPU: descriptor refusals with their messages, preferences, coverage
// rows, the state count and launch shape (a function of the problem only), workspace sizing, argument
// refusals and the variant run() would take.
#include <gtest/gtest.h>

#include <string>

#include "baracuda/core/coverage.hpp"
#include "baracuda/ops/ctc_loss.hpp"
#include "ops/loss/ctc_launch.hpp"
#include "test_util.hpp"

namespace baracuda {
namespace {

using test::fake_ptr;
using test::mut_of;
using test::ref_of;
using test::strided;

const Target kTarget = Target::offline(90);

/// log_probs [50, 4, 20], padded targets [4, 10], int64 everything.
CtcLossDesc desc(DType dt = DType::f32, Reduction r = Reduction::mean, Direction dir = Direction::Forward) {
  return CtcLossDesc::make(dt, Shape::of({50, 4, 20}), Shape::of({4, 10}), DType::s64, r, 0, false, dir);
}

/// Forward args matching desc(): every output, the saved state of [4, 50, 21].
CtcLossArgs fw_args(DType dt = DType::f32, bool reduced = true) {
  CtcLossArgs a;
  a.log_probs = ref_of(0, dt, Layout::contiguous({50, 4, 20}));
  a.targets = ref_of(1, DType::s64, Layout::contiguous({4, 10}));
  a.input_lengths = ref_of(2, DType::s64, Layout::contiguous({4}));
  a.target_lengths = ref_of(3, DType::s64, Layout::contiguous({4}));
  a.out = reduced ? mut_of(4, dt, Layout::contiguous({})) : mut_of(4, dt, Layout::contiguous({4}));
  const DType st = loss_stats_dtype(dt);
  a.save_log_alpha = mut_of(5, st, Layout::contiguous({4, 50, 21}));
  a.save_neg_log_likelihood = mut_of(6, st, Layout::contiguous({4}));
  a.error = mut_of(7, DType::s32, Layout::contiguous({1}));
  return a;
}

/// Backward args matching desc(..., Backward).
CtcLossArgs bw_args(DType dt = DType::f32, bool reduced = true) {
  CtcLossArgs a;
  a.log_probs = ref_of(0, dt, Layout::contiguous({50, 4, 20}));
  a.targets = ref_of(1, DType::s64, Layout::contiguous({4, 10}));
  a.input_lengths = ref_of(2, DType::s64, Layout::contiguous({4}));
  a.target_lengths = ref_of(3, DType::s64, Layout::contiguous({4}));
  a.dy = reduced ? ref_of(8, dt, Layout::contiguous({})) : ref_of(8, dt, Layout::contiguous({4}));
  const DType st = loss_stats_dtype(dt);
  a.log_alpha = ref_of(5, st, Layout::contiguous({4, 50, 21}));
  a.neg_log_likelihood = ref_of(6, st, Layout::contiguous({4}));
  a.grad = mut_of(9, dt, Layout::contiguous({50, 4, 20}));
  return a;
}

// ---- descriptors ----------------------------------------------------------------------------------------
TEST(CtcSelect, ShapesStatesAndLossShape) {
  auto p = CtcLossPlan::select(kTarget, desc());
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(p->time(), 50);
  EXPECT_EQ(p->batch(), 4);
  EXPECT_EQ(p->classes(), 20);
  EXPECT_EQ(p->states(), 21);  // padded S = 10
  EXPECT_EQ(p->log_alpha_shape(), Shape::of({4, 50, 21}));
  EXPECT_EQ(p->loss_shape(), Shape{});
  auto none = CtcLossPlan::select(kTarget, desc(DType::f32, Reduction::none));
  EXPECT_EQ(none->loss_shape(), Shape::of({4}));
  // Concatenated targets: the bound is their total, capped at T.
  auto cat = CtcLossPlan::select(kTarget, CtcLossDesc::make(DType::f32, Shape::of({50, 4, 20}), Shape::of({37})));
  ASSERT_TRUE(cat.ok()) << cat.message();
  EXPECT_EQ(cat->states(), 75);
  auto capped = CtcLossPlan::select(kTarget, CtcLossDesc::make(DType::f32, Shape::of({30, 4, 20}), Shape::of({400})));
  EXPECT_EQ(capped->states(), 61);
  CtcLossDesc hint = CtcLossDesc::make(DType::f32, Shape::of({50, 4, 20}), Shape::of({400}));
  hint.max_target_length = 12;
  EXPECT_EQ(CtcLossPlan::select(kTarget, hint)->states(), 25);
  // Unbatched: [T, C], targets [S] (or [1, S]); the loss of reduction none is 0-dim.
  auto ub = CtcLossPlan::select(
      kTarget, CtcLossDesc::make(DType::f64, Shape::of({9, 5}), Shape::of({3}), DType::s32, Reduction::none));
  ASSERT_TRUE(ub.ok()) << ub.message();
  EXPECT_EQ(ub->batch(), 1);
  EXPECT_EQ(ub->loss_shape(), Shape{});
  EXPECT_TRUE(CtcLossPlan::select(kTarget, CtcLossDesc::make(DType::f64, Shape::of({9, 5}), Shape::of({1, 3}))).ok());
  // Empty problems are valid: N = 0, T = 0.
  EXPECT_TRUE(
      CtcLossPlan::select(kTarget, CtcLossDesc::make(DType::f32, Shape::of({9, 0, 5}), Shape::of({0, 3}))).ok());
  auto t0 = CtcLossPlan::select(kTarget, CtcLossDesc::make(DType::f32, Shape::of({0, 2, 5}), Shape::of({2, 3})));
  ASSERT_TRUE(t0.ok()) << t0.message();
  EXPECT_EQ(t0->states(), 1);
}

TEST(CtcSelect, Refusals) {
  auto d = desc();
  d.log_probs = Shape::of({50, 20});
  d.targets = Shape::of({4, 10});
  EXPECT_FAILS_WITH(CtcLossPlan::select(kTarget, d), Status::InvalidProblem, "ctc_loss", "targets.shape[0]",
                    "expected 1", "got 4");
  d = desc();
  d.log_probs = Shape::of({50, 4, 20, 2});
  EXPECT_FAILS_WITH(CtcLossPlan::select(kTarget, d), Status::InvalidProblem, "log_probs rank", "got 4");
  d = desc();
  d.targets = Shape::of({4, 10, 2});
  EXPECT_FAILS_WITH(CtcLossPlan::select(kTarget, d), Status::InvalidProblem, "targets rank", "got 3");
  d = desc();
  d.blank = 20;
  EXPECT_FAILS_WITH(CtcLossPlan::select(kTarget, d), Status::InvalidProblem, "blank expected in [0, 20)", "got 20");
  d.blank = -1;
  EXPECT_FAILS_WITH(CtcLossPlan::select(kTarget, d), Status::InvalidProblem, "blank", "got -1");
  d = desc();
  d.log_probs = Shape::of({50, 4, 0});
  EXPECT_FAILS_WITH(CtcLossPlan::select(kTarget, d), Status::InvalidProblem, "classes", ">= 1", "got 0");
  d = desc();
  d.target_dtype = DType::f32;
  EXPECT_FAILS_WITH(CtcLossPlan::select(kTarget, d), Status::InvalidProblem, "targets dtype", "int32 or int64",
                    "got float32");
  d = desc();
  d.input_lengths_dtype = DType::s16;
  EXPECT_FAILS_WITH(CtcLossPlan::select(kTarget, d), Status::InvalidProblem, "input_lengths dtype", "got int16");
  d = desc();
  d.target_lengths_dtype = DType::u8;
  EXPECT_FAILS_WITH(CtcLossPlan::select(kTarget, d), Status::InvalidProblem, "target_lengths dtype", "got uint8");
  d = desc(DType::f32, Reduction::batchmean);
  EXPECT_FAILS_WITH(CtcLossPlan::select(kTarget, d), Status::InvalidProblem, "reduction", "got batchmean");
  d = desc();
  d.max_target_length = -2;
  EXPECT_FAILS_WITH(CtcLossPlan::select(kTarget, d), Status::InvalidProblem, "max_target_length", "got -2");
  d = desc();
  d.log_probs = Shape::of({-1, 4, 20});
  EXPECT_FAILS_WITH(CtcLossPlan::select(kTarget, d), Status::InvalidProblem, "negative size in log_probs");
  // Too many states for one CTA: 2 * 2048 + 1.
  d = CtcLossDesc::make(DType::f32, Shape::of({3000, 2, 20}), Shape::of({2, 2048}));
  EXPECT_FAILS_WITH(CtcLossPlan::select(kTarget, d), Status::Unsupported, "4097 states", "<= 4095",
                    "max_target_length");
  d.max_target_length = 2047;
  EXPECT_TRUE(CtcLossPlan::select(kTarget, d).ok());
}

TEST(CtcSelect, DtypesAndPreferences) {
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16})
    for (Direction dir : {Direction::Forward, Direction::Backward}) {
      auto p = CtcLossPlan::select(kTarget, desc(t, Reduction::mean, dir));
      ASSERT_TRUE(p.ok()) << p.message();
      EXPECT_EQ(p->sku().category, "loss");
      EXPECT_EQ(p->sku().op, dir == Direction::Forward ? "ctc_loss" : "ctc_loss_backward");
      EXPECT_EQ(p->precision().math, loss_stats_dtype(t));
      EXPECT_EQ(p->sku().dtypes, std::string(name(t)) + ",int64->" + std::string(name(t)));
    }
  for (DType t : {DType::s32, DType::f8e4m3, DType::c64})
    EXPECT_FAILS_WITH(CtcLossPlan::select(kTarget, desc(t)), Status::Unsupported, "ctc_loss", "dtype",
                      "got " + std::string(name(t)));
  auto ok = test::expect_native_preferences<CtcLossPlan>(kTarget, desc(), "ctc_loss");
  ASSERT_TRUE(ok.ok());
}

TEST(CtcCoverage, ListedRows) {
  const auto rows = coverage(kTarget);
  for (Direction dir : {Direction::Forward, Direction::Backward}) {
    for (const char* dt : {"float32", "float64", "float16", "bfloat16"})
      EXPECT_TRUE(test::has_coverage_row(rows, "loss", "ctc_loss", dir, dt)) << dt;
    EXPECT_FALSE(test::has_coverage_row(rows, "loss", "ctc_loss", dir, "int32"));
  }
}

// ---- launch shape and workspace ---------------------------------------------------------------------------
TEST(CtcSelect, LaunchShapeIsAFunctionOfTheProblem) {
  auto shape = [](int64_t S) {
    auto p = CtcLossPlan::select(kTarget, CtcLossDesc::make(DType::f32, Shape::of({4000, 2, 20}), Shape::of({2, S})));
    EXPECT_TRUE(p.ok()) << p.message();
    return p->config();
  };
  EXPECT_EQ(shape(0).threads, 32);  // one state
  EXPECT_EQ(shape(0).k, 1);
  EXPECT_EQ(shape(100).threads, 224);   // 201 states
  EXPECT_EQ(shape(511).threads, 1024);  // 1023 states
  EXPECT_EQ(shape(511).k, 1);
  EXPECT_EQ(shape(600).k, 2);  // 1201 states
  EXPECT_EQ(shape(600).threads, 608);
  EXPECT_EQ(shape(2047).k, 4);  // 4095 states
  EXPECT_EQ(shape(2047).threads, 1024);
  // f32: 2 rows of states + the labels; f64 rows are twice as wide.
  EXPECT_EQ(shape(100).smem_bytes, 2 * 201 * 4 + 400u);
  auto f64 = CtcLossPlan::select(kTarget, CtcLossDesc::make(DType::f64, Shape::of({400, 2, 20}), Shape::of({2, 100})));
  EXPECT_EQ(f64->config().smem_bytes, 2 * 201 * 8 + 400u);
  // ATen's large-problem switch: 2T + 2.4N + 0.2C > 450.
  auto large = [](int64_t T, int64_t N, int64_t C) {
    return CtcLossPlan::select(kTarget, CtcLossDesc::make(DType::f32, Shape::of({T, N, C}), Shape::of({N, 3})))
        ->config()
        .torch_large;
  };
  EXPECT_FALSE(large(200, 2, 5));    // 400 + 4 + 1
  EXPECT_TRUE(large(230, 2, 5));     // 460 + 4 + 1
  EXPECT_TRUE(large(10, 2, 5000));   // 20 + 4 + 1000
  EXPECT_FALSE(large(10, 100, 40));  // 20 + 240 + 8
}

TEST(CtcSelect, Workspace) {
  constexpr auto a256 = [](size_t b) { return (b + 255) / 256 * 256; };
  EXPECT_EQ(CtcLossPlan::select(kTarget, desc(DType::f32, Reduction::none))->workspace_size(), 0u);
  EXPECT_EQ(CtcLossPlan::select(kTarget, desc(DType::f32, Reduction::sum))->workspace_size(), a256(4 * 4));
  EXPECT_EQ(CtcLossPlan::select(kTarget, desc(DType::f64, Reduction::mean))->workspace_size(), a256(4 * 8));
  // Backward: items, the [N, C] first-position table, [N, S] links, log_beta unless fused_beta.
  const size_t tables = a256(4 * sizeof(detail::CtcItem)) + a256(4 * 20 * 4) + a256(4 * 10 * 4);
  auto bw = desc(DType::f32, Reduction::mean, Direction::Backward);
  EXPECT_EQ(CtcLossPlan::select(kTarget, bw)->workspace_size(), tables + a256(4 * 50 * 21 * 4));
  bw.fused_beta = true;
  EXPECT_EQ(CtcLossPlan::select(kTarget, bw)->workspace_size(), tables);
}

// ---- arguments ---------------------------------------------------------------------------------------------
TEST(CtcArgs, Accepted) {
  auto p = CtcLossPlan::select(kTarget, desc());
  ASSERT_TRUE(p->can_implement(fw_args()).ok()) << p->can_implement(fw_args()).message();
  EXPECT_EQ(p->layout_for(fw_args()), "alpha(threads=32,k=1)+sum");
  // Optional outputs may be left out (inference), lengths may be strided and int32.
  auto d = desc();
  d.input_lengths_dtype = DType::s32;
  auto p32 = CtcLossPlan::select(kTarget, d);
  CtcLossArgs a = fw_args();
  a.save_log_alpha = {};
  a.save_neg_log_likelihood = {};
  a.error = {};
  a.input_lengths = ref_of(2, DType::s32, strided({4}, {3}));
  EXPECT_TRUE(p32->can_implement(a).ok()) << p32->can_implement(a).message();
  // Strided log_probs (a batch-first tensor viewed as [T, N, C]) and targets.
  a = fw_args();
  a.log_probs = ref_of(0, DType::f32, strided({50, 4, 20}, {20, 1000, 1}));
  a.targets = ref_of(1, DType::s64, strided({4, 10}, {1, 4}));
  EXPECT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
  // fused_beta: save_log_beta required in the forward, log_beta in the backward.
  d = desc();
  d.fused_beta = true;
  auto pf = CtcLossPlan::select(kTarget, d);
  EXPECT_FAILS_WITH(pf->can_implement(fw_args()), Status::InvalidProblem, "save_log_beta is required");
  a = fw_args();
  a.save_log_beta = mut_of(10, DType::f32, Layout::contiguous({4, 50, 21}));
  EXPECT_TRUE(pf->can_implement(a).ok()) << pf->can_implement(a).message();
  EXPECT_EQ(pf->layout_for(a), "alpha+beta(threads=32,k=1)+sum");
  auto b = CtcLossPlan::select(kTarget, desc(DType::f32, Reduction::mean, Direction::Backward));
  EXPECT_TRUE(b->can_implement(bw_args()).ok()) << b->can_implement(bw_args()).message();
  EXPECT_EQ(b->layout_for(bw_args()), "tables+beta(threads=32,k=1)+grad-rows");
  auto none = CtcLossPlan::select(kTarget, desc(DType::f32, Reduction::none, Direction::Backward));
  CtcLossArgs bn = bw_args(DType::f32, false);
  bn.dy = ref_of(8, DType::f32, strided({4}, {0}));  // an expanded ones-tensor
  EXPECT_TRUE(none->can_implement(bn).ok()) << none->can_implement(bn).message();
}

TEST(CtcArgs, Refusals) {
  auto p = CtcLossPlan::select(kTarget, desc());
  CtcLossArgs a = fw_args();
  a.targets = {};
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "ctc_loss", "targets is required");
  a = fw_args();
  a.log_probs = ref_of(0, DType::f64, Layout::contiguous({50, 4, 20}));
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "log_probs dtype", "expected float32", "got float64");
  a = fw_args();
  a.log_probs = ref_of(0, DType::f32, Layout::contiguous({50, 4, 21}));
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "log_probs shape", "[50, 4, 20]", "got [50, 4, 21]");
  a = fw_args();
  a.input_lengths = ref_of(2, DType::s64, Layout::contiguous({5}));
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "input_lengths", "expected 4 elements",
                    "got shape [5]");
  a = fw_args();
  a.target_lengths = ref_of(3, DType::s64, Layout::contiguous({2, 2}));
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "target_lengths", "rank <= 1");
  a = fw_args();
  a.target_lengths = ref_of(3, DType::s32, Layout::contiguous({4}));
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "target_lengths dtype", "expected int64", "got int32");
  a = fw_args();
  a.out = mut_of(4, DType::f32, Layout::contiguous({4}));
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "out", "one element", "got shape [4]");
  a = fw_args();
  a.save_log_alpha = mut_of(5, DType::f32, Layout::contiguous({4, 50, 20}));
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "save_log_alpha shape", "[4, 50, 21]");
  a = fw_args();
  a.save_log_alpha = mut_of(5, DType::f32, strided({4, 50, 21}, {1, 84, 4}));
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "save_log_alpha", "contiguous");
  a = fw_args();
  a.save_neg_log_likelihood = mut_of(6, DType::f16, Layout::contiguous({4}));
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "save_neg_log_likelihood dtype", "expected float32");
  a = fw_args();
  a.error = mut_of(7, DType::s64, Layout::contiguous({1}));
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "error dtype", "expected int32");
  a = fw_args();
  a.save_log_beta = mut_of(10, DType::f32, Layout::contiguous({4, 50, 21}));
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "save_log_beta given", "fused_beta is false");
  a = fw_args();
  a.dy = ref_of(8, DType::f32, Layout::contiguous({}));
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "dy given", "forward reads no dy");
  a = fw_args();
  a.grad = mut_of(9, DType::f32, Layout::contiguous({50, 4, 20}));
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "grad given");
  // An output over an input.
  a = fw_args();
  a.save_log_alpha = TensorMut{const_cast<void*>(a.log_probs.data), DType::f32, Layout::contiguous({4, 50, 21})};
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "ctc_loss");
  a = fw_args();
  a.log_probs = ref_of(0, DType::f32, strided({50, 4, 20}, {-80, 20, 1}));
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "log_probs stride[0]", "expected >= 0");

  auto b = CtcLossPlan::select(kTarget, desc(DType::f32, Reduction::mean, Direction::Backward));
  CtcLossArgs g = bw_args();
  g.log_alpha = {};
  EXPECT_FAILS_WITH(b->can_implement(g), Status::InvalidProblem, "ctc_loss_backward", "log_alpha is required");
  g = bw_args();
  g.neg_log_likelihood = {};
  EXPECT_FAILS_WITH(b->can_implement(g), Status::InvalidProblem, "neg_log_likelihood is required");
  g = bw_args();
  g.log_beta = ref_of(10, DType::f32, Layout::contiguous({4, 50, 21}));
  EXPECT_FAILS_WITH(b->can_implement(g), Status::InvalidProblem, "log_beta given", "fused_beta is false");
  g = bw_args();
  g.grad = mut_of(9, DType::f32, Layout::contiguous({50, 4, 19}));
  EXPECT_FAILS_WITH(b->can_implement(g), Status::InvalidProblem, "grad shape", "got [50, 4, 19]");
  g = bw_args();
  g.out = mut_of(4, DType::f32, Layout::contiguous({}));
  EXPECT_FAILS_WITH(b->can_implement(g), Status::InvalidProblem, "out given");
  g = bw_args();
  g.dy = {};
  EXPECT_FAILS_WITH(b->can_implement(g), Status::InvalidProblem, "dy is required");
  // The gradient may not alias log_probs (it is read while rows are written).
  g = bw_args();
  g.grad = TensorMut{const_cast<void*>(g.log_probs.data), DType::f32, Layout::contiguous({50, 4, 20})};
  EXPECT_FAILS_WITH(b->can_implement(g), Status::InvalidProblem, "grad");
  // run(): argument checks first, then the workspace, before any launch.
  EXPECT_FAILS_WITH(b->run(nullptr, Workspace{fake_ptr(20), 16}, bw_args()), Status::WorkspaceTooSmall,
                    "ctc_loss_backward", "workspace expected >=", "got 16");
}

TEST(CtcArgs, EmptyProblems) {
  // Backward with nothing to write returns before any launch (fake pointers are never touched).
  auto b = CtcLossPlan::select(kTarget, CtcLossDesc::make(DType::f32, Shape::of({0, 2, 5}), Shape::of({2, 3}),
                                                          DType::s64, Reduction::sum, 0, false, Direction::Backward));
  ASSERT_TRUE(b.ok()) << b.message();
  CtcLossArgs g;
  g.log_probs = ref_of(0, DType::f32, Layout::contiguous({0, 2, 5}));
  g.targets = ref_of(1, DType::s64, Layout::contiguous({2, 3}));
  g.input_lengths = ref_of(2, DType::s64, Layout::contiguous({2}));
  g.target_lengths = ref_of(3, DType::s64, Layout::contiguous({2}));
  g.dy = ref_of(8, DType::f32, Layout::contiguous({}));
  g.log_alpha = ref_of(5, DType::f32, Layout::contiguous({2, 0, 1}));
  g.neg_log_likelihood = ref_of(6, DType::f32, Layout::contiguous({2}));
  g.grad = mut_of(9, DType::f32, Layout::contiguous({0, 2, 5}));
  EXPECT_EQ(b->layout_for(g), "empty");
  EXPECT_TRUE(b->run(nullptr, Workspace{fake_ptr(20), b->workspace_size()}, g).ok());
  auto f = CtcLossPlan::select(
      kTarget, CtcLossDesc::make(DType::f32, Shape::of({4, 0, 5}), Shape::of({0, 3}), DType::s64, Reduction::none));
  CtcLossArgs a;
  a.log_probs = ref_of(0, DType::f32, Layout::contiguous({4, 0, 5}));
  a.targets = ref_of(1, DType::s64, Layout::contiguous({0, 3}));
  a.input_lengths = ref_of(2, DType::s64, Layout::contiguous({0}));
  a.target_lengths = ref_of(3, DType::s64, Layout::contiguous({0}));
  a.out = mut_of(4, DType::f32, Layout::contiguous({0}));
  EXPECT_EQ(f->layout_for(a), "empty");
  EXPECT_TRUE(f->run(nullptr, {}, a).ok());
}

}  // namespace
}  // namespace baracuda
