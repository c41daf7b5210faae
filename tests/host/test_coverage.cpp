// Dtype coverage: for every row of elementwise_ops.def, select() accepts exactly the declared
// dtypes, forward and backward, and refuses every other one with Status::Unsupported and a
// message naming the op and the dtype. Cast accepts every (src, dst) pair of unpacked dtypes.
#include <gtest/gtest.h>

#include <ostream>
#include <set>
#include <string>

#include "baracuda/core/coverage.hpp"
#include "baracuda/ops/elementwise.hpp"
#include "ops/elementwise/lut16.hpp"
#include "test_util.hpp"

namespace baracuda {
// gtest prints parameters with this (ctest names read "GetParam() = gelu", not raw bytes).
void PrintTo(ElementwiseOp op, std::ostream* os) { *os << info(op).name; }

namespace {

using test::probe_desc;

class Coverage : public ::testing::TestWithParam<ElementwiseOp> {};

std::string op_param_name(const ::testing::TestParamInfo<ElementwiseOp>& p) { return info(p.param).name; }

std::vector<ElementwiseOp> all_ops() {
  std::vector<ElementwiseOp> v;
  for (const auto& r : elementwise_ops()) v.push_back(r.op);
  return v;
}

TEST_P(Coverage, ForwardAcceptsExactlyDeclaredDtypes) {
  const auto& in = info(GetParam());
  const Target target = Target::offline();
  int accepted = 0;
  for (int i = 0; i < kNumDTypes; ++i) {
    const DType t = static_cast<DType>(i);
    SCOPED_TRACE(std::string(in.name) + " forward " + std::string(name(t)));
    if (in.out == OutRule::Cast) {
      for (int j = 0; j < kNumDTypes; ++j) {
        const DType dst = static_cast<DType>(j);
        SCOPED_TRACE("-> " + std::string(name(dst)));
        auto desc = probe_desc(in.op, t);
        desc.out_dtype = dst;
        auto plan = ElementwisePlan::select(target, desc);
        const bool declared = contains(in.fw_dtypes, t) && contains(dtypes::kAll, dst);
        if (declared) {
          ASSERT_TRUE(plan.ok()) << plan.message();
          EXPECT_EQ(plan->sku().dtypes, std::string(name(t)) + "->" + std::string(name(dst)));
          ++accepted;
        } else {
          // The message names whichever side is not declared.
          EXPECT_FAILS_WITH(plan, Status::Unsupported, in.name,
                            "got " + std::string(name(contains(in.fw_dtypes, t) ? dst : t)));
        }
      }
      continue;
    }
    auto plan = ElementwisePlan::select(target, probe_desc(in.op, t));
    if (contains(in.fw_dtypes, t)) {
      ASSERT_TRUE(plan.ok()) << plan.message();
      const DType out = in.out == OutRule::Bool ? DType::b8 : t;
      EXPECT_EQ(plan->sku().dtypes, std::string(name(t)) + "->" + std::string(name(out)));
      EXPECT_EQ(plan->sku().op, in.name);
      EXPECT_EQ(plan->sku().category, "elementwise");
      EXPECT_EQ(plan->sku().backend, Backend::Native);
      EXPECT_EQ(plan->workspace_size(), 0u);
      ++accepted;
    } else {
      EXPECT_FAILS_WITH(plan, Status::Unsupported, in.name, "got " + std::string(name(t)), "expected one of");
    }
  }
  EXPECT_GT(accepted, 0) << in.name << " accepts no dtype at all";
}

TEST_P(Coverage, BackwardAcceptsExactlyDeclaredDtypes) {
  const auto& in = info(GetParam());
  const Target target = Target::offline();
  const std::string label = std::string(in.name) + "_backward";
  for (int i = 0; i < kNumDTypes; ++i) {
    const DType t = static_cast<DType>(i);
    SCOPED_TRACE(label + " " + std::string(name(t)));
    auto plan = ElementwisePlan::select(target, probe_desc(in.op, t, Direction::Backward));
    if (in.bw == BackwardNeeds::None) {
      EXPECT_FAILS_WITH(plan, Status::Unsupported, label, "not differentiable");
    } else if (contains(in.bw_dtypes, t)) {
      ASSERT_TRUE(plan.ok()) << plan.message();
      EXPECT_EQ(plan->sku().op, label);
      EXPECT_EQ(plan->sku().dtypes, std::string(name(t)) + "->" + std::string(name(t)));
      EXPECT_EQ(plan->workspace_size(), 0u) << "no input is broadcast, nothing to reduce";
    } else {
      EXPECT_FAILS_WITH(plan, Status::Unsupported, label, "got " + std::string(name(t)), "expected one of");
    }
  }
}

/// Builds the tensors the table row says the plan takes (fake pointers, contiguous [4, 5]).
ElementwiseArgs args_from_table(const ElementwiseOpInfo& in, Direction dir, DType t) {
  ElementwiseArgs a;
  const Layout layout = in.nin == 0 ? Layout::contiguous({1, 1}) : Layout::contiguous({4, 5});
  int slot = 0;
  auto add_in = [&](DType dt) { a.in[a.nin++] = TensorRef{test::fake_ptr(slot++), dt, layout}; };
  auto add_out = [&](DType dt) { a.out[a.nout++] = TensorMut{test::fake_ptr(slot++), dt, layout}; };
  auto input_dtype = [&](int i) { return ((in.bool_inputs >> i) & 1) ? DType::b8 : t; };
  if (dir == Direction::Forward) {
    for (int i = 0; i < in.nin; ++i) add_in(input_dtype(i));
    add_out(in.out == OutRule::Bool ? DType::b8 : t);
    return a;
  }
  add_in(t);  // grad_output
  const bool needs_in = in.bw == BackwardNeeds::Inputs || in.bw == BackwardNeeds::InputsAndOutput;
  const bool needs_out = in.bw == BackwardNeeds::Output || in.bw == BackwardNeeds::InputsAndOutput;
  if (needs_in)
    for (int i = 0; i < in.nin; ++i) add_in(input_dtype(i));
  if (needs_out) add_in(t);
  for (int g = 0; g < in.num_grads(); ++g) add_out(t);
  return a;
}

TEST_P(Coverage, ArgsBuiltFromTheTableAreAccepted) {
  const auto& in = info(GetParam());
  for (Direction dir : {Direction::Forward, Direction::Backward}) {
    const DTypeSet set = dir == Direction::Forward ? in.fw_dtypes : in.bw_dtypes;
    for (int i = 0; i < kNumDTypes; ++i) {
      const DType t = static_cast<DType>(i);
      if (!contains(set, t)) continue;
      SCOPED_TRACE(std::string(in.name) + " " + to_string(dir) + " " + std::string(name(t)));
      auto plan = ElementwisePlan::select(Target::offline(), probe_desc(in.op, t, dir));
      ASSERT_TRUE(plan.ok()) << plan.message();
      const auto args = args_from_table(in, dir, t);
      auto r = plan->can_implement(args);
      EXPECT_TRUE(r.ok()) << r.message();
      if (in.nin > 0) EXPECT_EQ(std::string(plan->layout_for(args)), "contiguous-vec16");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllOps, Coverage, ::testing::ValuesIn(all_ops()), op_param_name);

// ---- the table itself ------------------------------------------------------------------------
TEST(OpTable, RowsAreConsistent) {
  const auto ops = elementwise_ops();
  ASSERT_GT(ops.size(), 100u);
  for (size_t i = 0; i < ops.size(); ++i) {
    const auto& r = ops[i];
    SCOPED_TRACE(r.name);
    EXPECT_EQ(static_cast<size_t>(r.op), i) << "rows are in enum order";
    EXPECT_EQ(&info(r.op), &r);
    ASSERT_TRUE(elementwise_op_from_name(r.name).has_value());
    EXPECT_EQ(*elementwise_op_from_name(r.name), r.op);
    EXPECT_GE(r.nin, 0);
    EXPECT_LE(r.nin, 3);
    EXPECT_LE(r.num_params(), 4);
    EXPECT_EQ(r.fw_dtypes & ~dtypes::kAll, 0u) << "packed dtypes are storage only";
    EXPECT_EQ(r.bool_inputs >> r.nin, 0u) << "bool_inputs names inputs that do not exist";
    EXPECT_EQ(r.grad_mask >> r.nin, 0u) << "grad_mask names inputs that do not exist";
    EXPECT_EQ(r.grad_mask & r.bool_inputs, 0u) << "a bool input cannot receive a gradient";
    if (r.bw == BackwardNeeds::None) {
      EXPECT_EQ(r.bw_dtypes, 0u);
      EXPECT_EQ(r.grad_mask, 0u);
    } else {
      EXPECT_NE(r.bw_dtypes, 0u);
      EXPECT_GT(r.num_grads(), 0);
      EXPECT_EQ(r.bw_dtypes & ~r.fw_dtypes, 0u) << "backward dtypes must be a subset of the forward ones";
    }
    EXPECT_GE(r.tol, 1.0);
    for (int p = 0; p < r.num_params(); ++p) EXPECT_FALSE(r.param_name(p).empty());
  }
  EXPECT_FALSE(elementwise_op_from_name("no_such_op").has_value());
}

TEST(OpTable, Directions) {
  EXPECT_STREQ(to_string(Direction::Forward), "forward");
  EXPECT_STREQ(to_string(Direction::Backward), "backward");
}

// ---- precision notes of the 16-bit short forms (functors.cuh SHORT16 / SHORT16_BW) ---------------
// The SKU says "short form" exactly where the kernel takes one: 16-bit storage of a marked op, in
// the marked direction; never f32, never an exact form (fmod), never an op on libdevice (sin).
TEST(ShortFormNote, FollowsTheFunctorsMarks) {
  struct Case {
    ElementwiseOp op;
    DType t;
    Direction dir;
    bool short_form;
  };
  using E = ElementwiseOp;
  const Direction F = Direction::Forward, B = Direction::Backward;
  for (const Case& c : {Case{E::log, DType::bf16, F, true}, Case{E::log, DType::f16, F, true},
                        Case{E::log, DType::f32, F, false}, Case{E::log, DType::bf16, B, false},
                        Case{E::logit, DType::bf16, B, true}, Case{E::atan2, DType::f16, B, true},
                        Case{E::sinh, DType::bf16, B, false}, Case{E::swiglu, DType::bf16, F, true},
                        Case{E::sin, DType::bf16, F, false}, Case{E::tan, DType::f16, F, false},
                        Case{E::fmod, DType::bf16, F, false}, Case{E::remainder, DType::bf16, F, false}}) {
    SCOPED_TRACE(std::string(info(c.op).name) + " " + std::string(name(c.t)) + " " + to_string(c.dir));
    auto plan = ElementwisePlan::select(Target::offline(), probe_desc(c.op, c.t, c.dir));
    ASSERT_TRUE(plan.ok()) << plan.message();
    EXPECT_EQ(plan->sku().precision.note.find("short form") != std::string::npos, c.short_form)
        << plan->sku().precision.note;
  }
}

}  // namespace
}  // namespace baracuda

// The library-wide list (baracuda-info and Python read it): the elementwise family contributes one
// row per declared (op, direction, dtype), cast one per (src, dst) pair.
namespace baracuda {
namespace {
TEST(CoverageRegistry, ElementwiseRowsMatchTheTable) {
  const auto rows = coverage(Target::offline());
  size_t expected = 0;
  for (const auto& r : elementwise_ops()) {
    const int fw = __builtin_popcount(r.fw_dtypes & ~(bit(DType::s4) | bit(DType::u4)));
    expected += r.out == OutRule::Cast ? static_cast<size_t>(fw) * static_cast<size_t>(fw) : static_cast<size_t>(fw);
    if (r.bw != BackwardNeeds::None) expected += static_cast<size_t>(__builtin_popcount(r.bw_dtypes));
  }
  size_t got = 0;
  for (const auto& row : rows) {
    if (row.family != "elementwise") continue;
    ++got;
    EXPECT_FALSE(row.op.empty());
    EXPECT_FALSE(row.dtype.empty());
  }
  EXPECT_EQ(got, expected);
}

TEST(CoverageRegistry, EveryFamilyRegistersRows) {
  std::set<std::string> families;
  for (const auto& row : coverage(Target::offline())) families.insert(row.family);
  EXPECT_TRUE(families.count("elementwise"));
}
// ---- lut16 (src/ops/elementwise/lut16.hpp) ---------------------------------------------------------
// The table variant is built on a device in select(); an offline target (no GPU: coverage, CI) must
// never take it, whatever the size, and the plan's layout stays the direct kernel's.
TEST(Lut16, OfflineSelectKeepsTheDirectKernel) {
  for (DType t : {DType::bf16, DType::f16}) {
    for (ElementwiseOp op : {ElementwiseOp::lgamma, ElementwiseOp::digamma, ElementwiseOp::polygamma}) {
      SCOPED_TRACE(std::string(info(op).name) + " " + std::string(name(t)));
      const Shape big = Shape::of({int64_t{1} << 23});
      auto plan = ElementwisePlan::select(Target::offline(), ElementwiseDesc::make(op, t, {big}));
      ASSERT_TRUE(plan.ok()) << plan.message();
      EXPECT_EQ(plan->sku().layout.find("lut16"), std::string::npos) << plan->sku().layout;
      ElementwiseArgs a;
      const Layout l = Layout::contiguous({int64_t{1} << 23});
      a.in[a.nin++] = TensorRef{test::fake_ptr(0), t, l};
      a.out[a.nout++] = TensorMut{test::fake_ptr(1), t, l};
      EXPECT_EQ(std::string(plan->layout_for(a)), "contiguous-vec16");
    }
  }
}

// Which 16-bit forwards read the table depends on the device (ew_lut16_cost against
// ew_issue_budget): from the published attributes of an H100 SXM (132 SMs, 1980 MHz, HBM3 at
// 2619 MHz on 5120 bits: 3.35 TB/s) and an H200 (132 SMs, 1980 MHz, HBM3e at 3125 MHz on 6144
// bits: 4.8 TB/s), the trig / erf / log group keeps the direct kernel on the first and reads the
// table on the second; lgamma / digamma / polygamma read it on both, the cheap ops on neither.
TEST(Lut16, IssueBudgetSplitsTheDevices) {
  const int h100 = detail::ew_issue_budget_of(132, 1980000, 2619000, 5120);
  const int h200 = detail::ew_issue_budget_of(132, 1980000, 3125000, 6144);
  EXPECT_EQ(h100, 39);  // 128 x 132 x 1.98e9 / (3.352e12 / 4) = 39.9
  EXPECT_EQ(h200, 27);  // ... / (4.8e12 / 4) = 27.9
  EXPECT_EQ(detail::ew_issue_budget_of(0, 1980000, 2619000, 5120), 0);
  for (ElementwiseOp op : {ElementwiseOp::sin, ElementwiseOp::erfc, ElementwiseOp::log2, ElementwiseOp::softplus}) {
    SCOPED_TRACE(info(op).name);
    EXPECT_LE(detail::ew_lut16_cost(op), h100);
    EXPECT_GT(detail::ew_lut16_cost(op), h200);
  }
  for (ElementwiseOp op : {ElementwiseOp::lgamma, ElementwiseOp::digamma, ElementwiseOp::polygamma})
    EXPECT_GT(detail::ew_lut16_cost(op), 10 * h100) << info(op).name;
  for (ElementwiseOp op : {ElementwiseOp::neg, ElementwiseOp::exp, ElementwiseOp::add, ElementwiseOp::gelu})
    EXPECT_EQ(detail::ew_lut16_cost(op), 0) << info(op).name;
}

}  // namespace
}  // namespace baracuda
