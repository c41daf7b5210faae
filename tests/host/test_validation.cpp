// Descriptor validation (select) and argument validation (can_implement, run): every refusal
// names the op, the argument, what was expected and what was given. No GPU: pointers are fake
// (can_implement never dereferences them) and run() fails before any launch.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "baracuda/ops/elementwise.hpp"
#include "test_util.hpp"

namespace baracuda {
namespace {

using test::fake_ptr;
using test::mut;
using test::ref;
using test::strided;

const Target kTarget = Target::offline();

// ---- descriptors ---------------------------------------------------------------------------------
TEST(SelectValidation, BroadcastMismatchNamesOpInputAndSizes) {
  auto d = ElementwiseDesc::make(ElementwiseOp::add, DType::f32, {Shape::of({3, 4}), Shape::of({5})});
  auto plan = ElementwisePlan::select(kTarget, d);
  EXPECT_FAILS_WITH(plan, Status::InvalidProblem, "add", "do not broadcast", "input 1", "[5]", "size 4");
}

TEST(SelectValidation, OutShapeMustBeTheBroadcast) {
  auto d = ElementwiseDesc::make(ElementwiseOp::add, DType::f32, {Shape::of({3, 4}), Shape::of({4})});
  EXPECT_EQ(d.out_shape, Shape::of({3, 4}));
  d.out_shape = Shape::of({3, 5});
  EXPECT_FAILS_WITH(ElementwisePlan::select(kTarget, d), Status::InvalidProblem, "add", "out_shape", "[3, 4]",
                    "[3, 5]");
}

TEST(SelectValidation, WrongOutDtype) {
  auto d = ElementwiseDesc::make(ElementwiseOp::add, DType::f32, {Shape::of({8}), Shape::of({8})});
  d.out_dtype = DType::f16;
  EXPECT_FAILS_WITH(ElementwisePlan::select(kTarget, d), Status::InvalidProblem, "add", "out_dtype", "expected float32",
                    "got float16");
  auto c = ElementwiseDesc::make(ElementwiseOp::eq, DType::s32, {Shape::of({8}), Shape::of({8})});
  EXPECT_EQ(c.out_dtype, DType::b8) << "make() fills the BOOL rule";
  c.out_dtype = DType::s32;
  EXPECT_FAILS_WITH(ElementwisePlan::select(kTarget, c), Status::InvalidProblem, "eq", "out_dtype", "expected bool",
                    "got int32");
}

TEST(SelectValidation, UnknownParamName) {
  auto d = ElementwiseDesc::make(ElementwiseOp::gelu, DType::f32, {Shape::of({8})});
  EXPECT_FAILS_WITH(d.set_param("beta", 1.0), Status::InvalidProblem, "gelu", "unknown parameter", "'beta'",
                    "approximate");
  EXPECT_FAILS_WITH(d.set_param("beta", "tanh"), Status::InvalidProblem, "gelu", "unknown parameter", "'beta'");
  auto r = ElementwiseDesc::make(ElementwiseOp::relu, DType::f32, {Shape::of({8})});
  EXPECT_FAILS_WITH(r.set_param("alpha", 1.0), Status::InvalidProblem, "relu", "'alpha'");
}

TEST(SelectValidation, EnumeratedChoice) {
  auto d = ElementwiseDesc::make(ElementwiseOp::gelu, DType::bf16, {Shape::of({8})});
  EXPECT_FAILS_WITH(d.set_param("approximate", "fast"), Status::InvalidProblem, "gelu", "'approximate'", "none|tanh",
                    "got 'fast'");
  EXPECT_EQ(d.params[0], 0.0) << "a refused choice leaves the parameter alone";
  ASSERT_TRUE(d.set_param("approximate", "tanh").ok());
  EXPECT_EQ(d.params[0], 1.0);
  auto plan = ElementwisePlan::select(kTarget, d);
  ASSERT_TRUE(plan.ok()) << plan.message();
  EXPECT_NE(plan->sku().precision.note.find("tanh"), std::string::npos) << plan->sku().to_string();
  ASSERT_TRUE(d.set_param("approximate", "none").ok());
  EXPECT_EQ(d.params[0], 0.0);
}

TEST(SelectValidation, SetParamByName) {
  auto d = ElementwiseDesc::make(ElementwiseOp::softplus, DType::f32, {Shape::of({8})});
  EXPECT_EQ(d.params[0], 1.0);
  EXPECT_EQ(d.params[1], 20.0);
  ASSERT_TRUE(d.set_param("threshold", 5.0).ok());
  EXPECT_EQ(d.params[1], 5.0);
  d.params[0] = 0;
  EXPECT_FAILS_WITH(ElementwisePlan::select(kTarget, d), Status::InvalidProblem, "softplus", "'beta'");
}

TEST(SelectValidation, PolygammaOrder) {
  auto d = ElementwiseDesc::make(ElementwiseOp::polygamma, DType::f32, {Shape::of({8})});
  ASSERT_TRUE(ElementwisePlan::select(kTarget, d).ok());
  ASSERT_TRUE(d.set_param("n", -1.0).ok());
  EXPECT_FAILS_WITH(ElementwisePlan::select(kTarget, d), Status::InvalidProblem, "polygamma", "'n'", "integer >= 0",
                    "got -1");
  ASSERT_TRUE(d.set_param("n", 1.5).ok());
  EXPECT_FAILS_WITH(ElementwisePlan::select(kTarget, d), Status::InvalidProblem, "polygamma", "'n'", "integer >= 0",
                    "got 1.5");
  ASSERT_TRUE(d.set_param("n", 3.0).ok());
  EXPECT_TRUE(ElementwisePlan::select(kTarget, d).ok());
}

TEST(SelectValidation, NanParameterRefused) {
  auto d = ElementwiseDesc::make(ElementwiseOp::leaky_relu, DType::f32, {Shape::of({8})});
  ASSERT_TRUE(d.set_param("negative_slope", std::numeric_limits<double>::quiet_NaN()).ok());
  EXPECT_FAILS_WITH(ElementwisePlan::select(kTarget, d), Status::InvalidProblem, "leaky_relu", "'negative_slope'",
                    "NaN");
  auto n = ElementwiseDesc::make(ElementwiseOp::nan_to_num, DType::f32, {Shape::of({8})});
  ASSERT_TRUE(n.set_param("nan", std::numeric_limits<double>::quiet_NaN()).ok());
  EXPECT_TRUE(ElementwisePlan::select(kTarget, n).ok()) << "nan_to_num may replace NaN by NaN";
}

TEST(SelectValidation, LinspaceStepsMustMatchOutput) {
  auto d = ElementwiseDesc::make(ElementwiseOp::linspace, DType::f32, {Shape::of({4})});
  ASSERT_TRUE(d.set_param("steps", 5.0).ok());
  EXPECT_FAILS_WITH(ElementwisePlan::select(kTarget, d), Status::InvalidProblem, "linspace", "steps=5", "4 elements");
  ASSERT_TRUE(d.set_param("steps", 4.0).ok());
  EXPECT_TRUE(ElementwisePlan::select(kTarget, d).ok());
  ASSERT_TRUE(d.set_param("steps", 2.5).ok());
  EXPECT_FAILS_WITH(ElementwisePlan::select(kTarget, d), Status::InvalidProblem, "linspace", "'steps'");
}

TEST(SelectValidation, EyeShape) {
  auto d = ElementwiseDesc::make(ElementwiseOp::eye, DType::f32, {Shape::of({3})});
  ASSERT_TRUE(d.set_param("cols", 3.0).ok());
  EXPECT_FAILS_WITH(ElementwisePlan::select(kTarget, d), Status::InvalidProblem, "eye", "2-D", "cols=3", "got [3]");
  d.out_shape = Shape::of({3, 4});
  EXPECT_FAILS_WITH(ElementwisePlan::select(kTarget, d), Status::InvalidProblem, "eye", "cols=3", "got [3, 4]");
  d.out_shape = Shape::of({5, 3});
  EXPECT_TRUE(ElementwisePlan::select(kTarget, d).ok());
  ASSERT_TRUE(d.set_param("cols", 0.0).ok());
  d.out_shape = Shape::of({5, 0});
  EXPECT_FAILS_WITH(ElementwisePlan::select(kTarget, d), Status::InvalidProblem, "eye", "'cols'");
}

// rrelu in training: finite lower <= upper; the Philox key and counter are integers that a double
// holds exactly (at most 2^53).
TEST(SelectValidation, RreluTrainParams) {
  auto d = ElementwiseDesc::make(ElementwiseOp::rrelu_train, DType::bf16, {Shape::of({8})});
  auto ok = ElementwisePlan::select(kTarget, d);
  ASSERT_TRUE(ok.ok()) << ok.message();
  EXPECT_NE(ok->sku().precision.note.find("Philox4x32-10"), std::string::npos) << ok->sku().to_string();
  ASSERT_TRUE(d.set_param("lower", 0.5).ok());
  ASSERT_TRUE(d.set_param("upper", 0.25).ok());
  EXPECT_FAILS_WITH(ElementwisePlan::select(kTarget, d), Status::InvalidProblem, "rrelu_train", "lower <= upper",
                    "lower=0.5");
  ASSERT_TRUE(d.set_param("upper", std::numeric_limits<double>::infinity()).ok());
  EXPECT_FAILS_WITH(ElementwisePlan::select(kTarget, d), Status::InvalidProblem, "rrelu_train", "finite");
  ASSERT_TRUE(d.set_param("upper", 0.5).ok());
  EXPECT_TRUE(ElementwisePlan::select(kTarget, d).ok()) << "lower == upper: a fixed slope";
  ASSERT_TRUE(d.set_param("seed", 9007199254740992.0).ok());  // 2^53
  EXPECT_TRUE(ElementwisePlan::select(kTarget, d).ok());
  ASSERT_TRUE(d.set_param("seed", 18014398509481984.0).ok());  // 2^54
  EXPECT_FAILS_WITH(ElementwisePlan::select(kTarget, d), Status::InvalidProblem, "rrelu_train", "'seed'", "2^53");
  ASSERT_TRUE(d.set_param("seed", 1.5).ok());
  EXPECT_FAILS_WITH(ElementwisePlan::select(kTarget, d), Status::InvalidProblem, "rrelu_train", "'seed'",
                    "integer >= 0");
  ASSERT_TRUE(d.set_param("seed", 3.0).ok());
  ASSERT_TRUE(d.set_param("offset", -1.0).ok());
  EXPECT_FAILS_WITH(ElementwisePlan::select(kTarget, d), Status::InvalidProblem, "rrelu_train", "'offset'",
                    "got -1");
}

TEST(SelectValidation, CeluAlphaZero) {
  auto d = ElementwiseDesc::make(ElementwiseOp::celu, DType::f32, {Shape::of({8})});
  ASSERT_TRUE(d.set_param("alpha", 0.0).ok());
  EXPECT_FAILS_WITH(ElementwisePlan::select(kTarget, d), Status::InvalidProblem, "celu", "'alpha'", "0");
}

TEST(SelectValidation, GeneratorNegativeSize) {
  auto d = ElementwiseDesc::make(ElementwiseOp::fill, DType::f32, {Shape::of({2, -1})});
  EXPECT_FAILS_WITH(ElementwisePlan::select(kTarget, d), Status::InvalidProblem, "fill", "negative");
}

TEST(SelectValidation, OldArchRefused) {
  auto d = ElementwiseDesc::make(ElementwiseOp::relu, DType::f32, {Shape::of({8})});
  EXPECT_FAILS_WITH(ElementwisePlan::select(Target::offline(75), d), Status::Unsupported, "relu", "sm_75", "sm_80");
  auto p80 = ElementwisePlan::select(Target::offline(80), d);
  ASSERT_TRUE(p80.ok()) << p80.message();
  EXPECT_EQ(p80->sku().arch, "sm_80");
  auto p90 = ElementwisePlan::select(Target::offline(90), d);
  ASSERT_TRUE(p90.ok());
  EXPECT_EQ(p90->sku().arch, "sm_90a");
}

TEST(SelectValidation, OutOfRangeOp) {
  auto d = ElementwiseDesc::make(ElementwiseOp::relu, DType::f32, {Shape::of({8})});
  d.op = static_cast<ElementwiseOp>(60000);
  EXPECT_FAILS_WITH(ElementwisePlan::select(kTarget, d), Status::InvalidProblem, "out of range");
}

// ---- can_implement ---------------------------------------------------------------------------------
/// add(f32[3,4], f32[3,4]) with disjoint fake buffers.
struct AddFixture : ::testing::Test {
  ElementwisePlan plan = ElementwisePlan::select(kTarget, ElementwiseDesc::make(ElementwiseOp::add, DType::f32,
                                                                                {Shape::of({3, 4}), Shape::of({3, 4})}))
                             .value();
  ElementwiseArgs args() const {
    ElementwiseArgs a;
    a.in[0] = ref(0, DType::f32, {3, 4});
    a.in[1] = ref(1, DType::f32, {3, 4});
    a.out[0] = mut(2, DType::f32, {3, 4});
    a.nin = 2;
    a.nout = 1;
    return a;
  }
};

TEST_F(AddFixture, ValidArgsAccepted) {
  auto r = plan.can_implement(args());
  EXPECT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(std::string(plan.layout_for(args())), "contiguous-vec16");
}

// A one-input op on an expanded 0-d input: the contiguous kernel of a unary op reads its input
// densely, so the SKU names the offset calculator that runs it (a two-input op keeps the vector
// kernel, which loads a scalar operand once).
TEST(ElementwiseLayout, UnaryOfAStrideZeroInputTakesTheOffsetCalculator) {
  auto plan = ElementwisePlan::select(kTarget, ElementwiseDesc::make(ElementwiseOp::exp, DType::f32, {Shape::of({64})}));
  ASSERT_TRUE(plan.ok()) << plan.message();
  ElementwiseArgs a;
  a.in[0] = TensorRef{fake_ptr(0), DType::f32, strided({64}, {0})};
  a.out[0] = mut(1, DType::f32, {64});
  a.nin = 1;
  a.nout = 1;
  EXPECT_EQ(std::string(plan->layout_for(a)), "strided-i32");
  a.in[0] = ref(0, DType::f32, {64});
  EXPECT_EQ(std::string(plan->layout_for(a)), "contiguous-vec16");
}

TEST_F(AddFixture, WrongTensorCount) {
  auto a = args();
  a.nin = 1;
  EXPECT_FAILS_WITH(plan.can_implement(a), Status::InvalidProblem, "add", "expected 2 input tensor(s)", "got 1");
  a = args();
  a.nout = 2;
  EXPECT_FAILS_WITH(plan.can_implement(a), Status::InvalidProblem, "add", "1 output tensor(s)", "and 2");
}

TEST_F(AddFixture, WrongDtype) {
  auto a = args();
  a.in[1].dtype = DType::f16;
  EXPECT_FAILS_WITH(plan.can_implement(a), Status::InvalidProblem, "add", "input[1]", "expected float32",
                    "got float16");
  a = args();
  a.out[0].dtype = DType::f64;
  EXPECT_FAILS_WITH(plan.can_implement(a), Status::InvalidProblem, "add", "output", "expected float32", "got float64");
}

TEST_F(AddFixture, WrongShape) {
  auto a = args();
  a.in[0] = ref(0, DType::f32, {4, 3});
  EXPECT_FAILS_WITH(plan.can_implement(a), Status::InvalidProblem, "add", "input[0]", "shape", "expected [3, 4]",
                    "got [4, 3]");
  a = args();
  a.out[0] = mut(2, DType::f32, {12});
  EXPECT_FAILS_WITH(plan.can_implement(a), Status::InvalidProblem, "add", "output", "expected [3, 4]", "got [12]");
}

TEST_F(AddFixture, NegativeStride) {
  auto a = args();
  a.in[0].layout = strided({3, 4}, {4, -1});
  EXPECT_FAILS_WITH(plan.can_implement(a), Status::InvalidProblem, "add", "input[0]", "stride[1]", "expected >= 0",
                    "got -1");
}

TEST_F(AddFixture, SelfOverlappingOutput) {
  auto a = args();
  a.out[0].layout = strided({3, 4}, {0, 1});  // rows written three times
  EXPECT_FAILS_WITH(plan.can_implement(a), Status::InvalidProblem, "add", "output", "overlaps itself", "(0, 1)");

  auto plan22 = ElementwisePlan::select(
      kTarget, ElementwiseDesc::make(ElementwiseOp::add, DType::f32, {Shape::of({2, 2}), Shape::of({2, 2})}));
  ASSERT_TRUE(plan22.ok());
  ElementwiseArgs b;
  b.in[0] = ref(0, DType::f32, {2, 2});
  b.in[1] = ref(1, DType::f32, {2, 2});
  b.out[0] = TensorMut{fake_ptr(2), DType::f32, strided({2, 2}, {1, 1})};  // (0,1) and (1,0) collide
  b.nin = 2;
  b.nout = 1;
  EXPECT_FAILS_WITH(plan22->can_implement(b), Status::InvalidProblem, "add", "output", "overlaps itself", "(1, 1)");
}

// prelu (ROW_BCAST) reads a weight row repeated over dense rows with the row-broadcast kernel; a
// column, a scalar or a strided operand keeps the rank-general or strided kernels.
TEST(ElementwiseLayout, PreluWeightRowTakesTheRowBroadcastKernel) {
  auto plan = ElementwisePlan::select(
      kTarget, ElementwiseDesc::make(ElementwiseOp::prelu, DType::bf16, {Shape::of({6, 16}), Shape::of({6, 16})}));
  ASSERT_TRUE(plan.ok()) << plan.message();
  ElementwiseArgs a;
  a.in[0] = ref(0, DType::bf16, {6, 16});
  a.in[1] = TensorRef{fake_ptr(1), DType::bf16, strided({6, 16}, {0, 1})};  // an expanded [16] row
  a.out[0] = mut(2, DType::bf16, {6, 16});
  a.nin = 2;
  a.nout = 1;
  EXPECT_EQ(std::string(plan->layout_for(a)), "row-broadcast-vec16");
  a.in[1].layout = strided({6, 16}, {1, 0});  // an expanded [6, 1] column
  EXPECT_EQ(std::string(plan->layout_for(a)), "inner-contiguous-vec16");
  a.in[1].layout = strided({6, 16}, {0, 0});  // a scalar
  EXPECT_EQ(std::string(plan->layout_for(a)), "contiguous-vec16");
  a.in[1].layout = strided({6, 16}, {0, 1});
  a.in[0].layout = strided({6, 16}, {32, 1});  // rows 32 apart: not dense
  EXPECT_EQ(std::string(plan->layout_for(a)), "inner-contiguous-vec16");
}

TEST_F(AddFixture, BroadcastInputsMayOverlapThemselves) {
  auto a = args();
  a.in[1].layout = strided({3, 4}, {0, 1});  // an expanded [4] row: fine for an input
  auto r = plan.can_implement(a);
  EXPECT_TRUE(r.ok()) << r.message();
  // A broadcast row keeps a contiguous innermost dim: the vectorized kernel takes it.
  EXPECT_EQ(std::string(plan.layout_for(a)), "inner-contiguous-vec16");
  a.in[1].layout = strided({3, 4}, {1, 0});  // an expanded [3, 1] column: broadcast along the inner dim
  EXPECT_EQ(std::string(plan.layout_for(a)), "inner-contiguous-vec16");
  a.in[1].layout = strided({3, 4}, {0, 2});  // inner stride 2: no vector loads
  EXPECT_EQ(std::string(plan.layout_for(a)), "strided-i32");
}

// Past 2^31 elements a broadcast view leaves the vectorized kernel, whose rank >= 2 coordinates
// are 32-bit (elementwise.cuh), for the 64-bit offset calculator; contiguous stays vectorized.
TEST(ElementwiseLayout, BroadcastViewsPast2To31TakeTheI64Path) {
  const int64_t rows = int64_t{1} << 16, cols = (int64_t{1} << 15) + 8;  // 2^31 + 2^19 elements
  auto plan = ElementwisePlan::select(kTarget, ElementwiseDesc::make(ElementwiseOp::add, DType::bf16,
                                                                     {Shape::of({rows, cols}), Shape::of({cols})}));
  ASSERT_TRUE(plan.ok()) << plan.message();
  ElementwiseArgs a;
  a.in[0] = ref(0, DType::bf16, {rows, cols});
  a.in[1] = ref(1, DType::bf16, {cols});  // a row broadcast over the rows
  a.out[0] = mut(2, DType::bf16, {rows, cols});
  a.nin = 2;
  a.nout = 1;
  EXPECT_EQ(std::string(plan->layout_for(a)), "strided-i64");
  a.in[1] = ref(1, DType::bf16, {rows, cols});
  auto same = ElementwisePlan::select(kTarget, ElementwiseDesc::make(ElementwiseOp::add, DType::bf16,
                                                                     {Shape::of({rows, cols}), Shape::of({rows, cols})}));
  ASSERT_TRUE(same.ok()) << same.message();
  EXPECT_EQ(std::string(same->layout_for(a)), "contiguous-vec16");
}

TEST_F(AddFixture, PartialOverlapOfOutputAndInput) {
  auto a = args();
  a.out[0].data = fake_ptr(0, 4);  // one element past input[0]: overlaps 11 of its 12
  EXPECT_FAILS_WITH(plan.can_implement(a), Status::InvalidProblem, "add", "output overlaps input[0]", "partial overlap");
  a = args();
  a.out[0].data = fake_ptr(1);  // same pointer as input[1], but transposed strides
  a.out[0].layout = strided({3, 4}, {1, 3});
  EXPECT_FAILS_WITH(plan.can_implement(a), Status::InvalidProblem, "add", "overlaps input[1]", "partial overlap");
}

TEST_F(AddFixture, ExactInPlaceAllowed) {
  auto a = args();
  a.out[0].data = const_cast<void*>(a.in[0].data);
  auto r = plan.can_implement(a);
  EXPECT_TRUE(r.ok()) << r.message();
  a.out[0].data = const_cast<void*>(a.in[1].data);
  r = plan.can_implement(a);
  EXPECT_TRUE(r.ok()) << r.message();
}

TEST_F(AddFixture, NullPointerWithElements) {
  auto a = args();
  a.in[1].data = nullptr;
  EXPECT_FAILS_WITH(plan.can_implement(a), Status::InvalidProblem, "add", "input[1]", "null", "12 elements");
  a = args();
  a.out[0].data = nullptr;
  EXPECT_FAILS_WITH(plan.can_implement(a), Status::InvalidProblem, "add", "output", "null");
}

TEST_F(AddFixture, FootprintOverflow) {
  auto a = args();
  a.in[0].layout = strided({3, 4}, {int64_t{1} << 62, 1});
  EXPECT_FAILS_WITH(plan.can_implement(a), Status::InvalidProblem, "add", "input[0]", "footprint overflows");
  a = args();
  a.in[0].layout = strided({3, 4}, {int64_t{1} << 61, 1});  // fits in elements, not in bytes
  EXPECT_FAILS_WITH(plan.can_implement(a), Status::InvalidProblem, "add", "input[0]", "footprint overflows");
}

TEST(CanImplement, EmptyTensorsNeedNoPointer) {
  auto plan =
      ElementwisePlan::select(kTarget, ElementwiseDesc::make(ElementwiseOp::relu, DType::f32, {Shape::of({0, 7})}));
  ASSERT_TRUE(plan.ok());
  ElementwiseArgs a;
  a.in[0] = make_ref(nullptr, DType::f32, {0, 7});
  a.out[0] = make_mut(nullptr, DType::f32, {0, 7});
  a.nin = a.nout = 1;
  auto r = plan->can_implement(a);
  EXPECT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(std::string(plan->layout_for(a)), "empty");
  auto run = plan->run(nullptr, {}, a);  // returns before any launch
  EXPECT_TRUE(run.ok()) << run.message();
}

TEST(CanImplement, BoolConditionOfWhere) {
  auto plan = ElementwisePlan::select(
      kTarget,
      ElementwiseDesc::make(ElementwiseOp::where, DType::bf16, {Shape::of({4, 1}), Shape::of({4, 8}), Shape::of({8})}));
  ASSERT_TRUE(plan.ok()) << plan.message();
  ElementwiseArgs a;
  a.in[0] = ref(0, DType::b8, {4, 1});
  a.in[1] = ref(1, DType::bf16, {4, 8});
  a.in[2] = ref(2, DType::bf16, {8});
  a.out[0] = mut(3, DType::bf16, {4, 8});
  a.nin = 3;
  a.nout = 1;
  auto r = plan->can_implement(a);
  EXPECT_TRUE(r.ok()) << r.message();
  a.in[0].dtype = DType::bf16;
  EXPECT_FAILS_WITH(plan->can_implement(a), Status::InvalidProblem, "where", "input[0]", "expected bool");
}

// ---- backward, workspace ------------------------------------------------------------------------
ElementwiseDesc add_bw(Shape a, Shape b) {
  return ElementwiseDesc::make(ElementwiseOp::add, DType::f32, {a, b}, Direction::Backward);
}

TEST(Workspace, NonZeroOnlyForBackwardWithBroadcastInput) {
  auto fw = ElementwisePlan::select(
      kTarget, ElementwiseDesc::make(ElementwiseOp::add, DType::f32, {Shape::of({3, 4}), Shape::of({4})}));
  ASSERT_TRUE(fw.ok());
  EXPECT_EQ(fw->workspace_size(), 0u);
  auto same = ElementwisePlan::select(kTarget, add_bw(Shape::of({3, 4}), Shape::of({3, 4})));
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->workspace_size(), 0u);
  EXPECT_TRUE(same->sku().epilogue.empty());
  auto bc = ElementwisePlan::select(kTarget, add_bw(Shape::of({3, 4}), Shape::of({4})));
  ASSERT_TRUE(bc.ok()) << bc.message();
  EXPECT_GE(bc->workspace_size(), 3u * 4u * sizeof(float));
  EXPECT_FALSE(bc->sku().epilogue.empty());
  auto both = ElementwisePlan::select(kTarget, add_bw(Shape::of({3, 1}), Shape::of({4})));
  ASSERT_TRUE(both.ok()) << both.message();
  EXPECT_GE(both->workspace_size(), 2 * bc->workspace_size()) << "one slice per reduced gradient";
  // where: the condition gets no gradient, so a broadcast condition needs no workspace.
  auto w = ElementwisePlan::select(
      kTarget, ElementwiseDesc::make(ElementwiseOp::where, DType::f32,
                                     {Shape::of({3, 1}), Shape::of({3, 4}), Shape::of({3, 4})}, Direction::Backward));
  ASSERT_TRUE(w.ok()) << w.message();
  EXPECT_EQ(w->workspace_size(), 0u);
}

/// add's backward needs only grad_output (its row says DY); it writes both gradients.
ElementwiseArgs add_bw_args() {
  ElementwiseArgs a;
  a.in[0] = ref(0, DType::f32, {3, 4});   // grad_output
  a.out[0] = mut(3, DType::f32, {3, 4});  // grad of self
  a.out[1] = mut(4, DType::f32, {4});     // grad of other (broadcast: summed over dim 0)
  a.nin = 1;
  a.nout = 2;
  return a;
}

TEST(Workspace, BackwardArgsChecked) {
  auto plan = ElementwisePlan::select(kTarget, add_bw(Shape::of({3, 4}), Shape::of({4})));
  ASSERT_TRUE(plan.ok());
  auto r = plan->can_implement(add_bw_args());
  EXPECT_TRUE(r.ok()) << r.message();
  auto a = add_bw_args();
  a.out[1] = mut(4, DType::f32, {3, 4});
  EXPECT_FAILS_WITH(plan->can_implement(a), Status::InvalidProblem, "add_backward", "grad_input[1]", "expected [4]",
                    "got [3, 4]");
  a = add_bw_args();
  a.in[0] = ref(0, DType::f32, {4});
  EXPECT_FAILS_WITH(plan->can_implement(a), Status::InvalidProblem, "add_backward", "grad_output", "expected [3, 4]");
  a = add_bw_args();
  a.nin = 3;
  EXPECT_FAILS_WITH(plan->can_implement(a), Status::InvalidProblem, "add_backward", "expected 1 input tensor(s)",
                    "got 3");
}

TEST(Workspace, BackwardInputsFollowTheTable) {
  // mul (IN): grad_output, self, other.  sigmoid (OUT): grad_output, output.  pow (INOUT): all.
  auto mul = ElementwisePlan::select(
      kTarget,
      ElementwiseDesc::make(ElementwiseOp::mul, DType::f32, {Shape::of({8}), Shape::of({8})}, Direction::Backward));
  ASSERT_TRUE(mul.ok()) << mul.message();
  ElementwiseArgs a;
  a.in[0] = ref(0, DType::f32, {8});
  a.in[1] = ref(1, DType::f32, {8});
  a.in[2] = ref(2, DType::f32, {8});
  a.out[0] = mut(3, DType::f32, {8});
  a.out[1] = mut(4, DType::f32, {8});
  a.nin = 3;
  a.nout = 2;
  auto r = mul->can_implement(a);
  EXPECT_TRUE(r.ok()) << r.message();
  a.nin = 1;
  EXPECT_FAILS_WITH(mul->can_implement(a), Status::InvalidProblem, "mul_backward", "expected 3 input tensor(s)");

  auto sig = ElementwisePlan::select(
      kTarget, ElementwiseDesc::make(ElementwiseOp::sigmoid, DType::f32, {Shape::of({8})}, Direction::Backward));
  ASSERT_TRUE(sig.ok());
  a.nin = 2;
  a.nout = 1;
  r = sig->can_implement(a);
  EXPECT_TRUE(r.ok()) << r.message();

  auto pw = ElementwisePlan::select(
      kTarget,
      ElementwiseDesc::make(ElementwiseOp::pow, DType::f32, {Shape::of({8}), Shape::of({8})}, Direction::Backward));
  ASSERT_TRUE(pw.ok());
  EXPECT_FAILS_WITH(pw->can_implement(a), Status::InvalidProblem, "pow_backward", "expected 4 input tensor(s)",
                    "2 output tensor(s)");
}

TEST(Workspace, LayoutForMatchesWhatRunLaunches) {
  // run() writes the gradient of a broadcast input to a dense workspace slice of the output
  // shape and reduces it afterwards, so with contiguous tensors its launch is the vectorized
  // contiguous variant; layout_for() promises to name the variant run() takes.
  auto plan = ElementwisePlan::select(kTarget, add_bw(Shape::of({3, 4}), Shape::of({4})));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(std::string(plan->layout_for(add_bw_args())), "contiguous-vec16");
}

TEST(Workspace, RunRefusesTooSmallWorkspaceBeforeLaunching) {
  // run() = can_implement, empty check, workspace check, then the launch: the refusal needs no GPU.
  auto plan = ElementwisePlan::select(kTarget, add_bw(Shape::of({3, 4}), Shape::of({4})));
  ASSERT_TRUE(plan.ok());
  const size_t need = plan->workspace_size();
  ASSERT_GT(need, 0u);
  EXPECT_FAILS_WITH(plan->run(nullptr, Workspace{}, add_bw_args()), Status::WorkspaceTooSmall, "add_backward",
                    std::to_string(need), "got 0");
  EXPECT_FAILS_WITH(plan->run(nullptr, Workspace{fake_ptr(7), need - 1}, add_bw_args()), Status::WorkspaceTooSmall,
                    "add_backward", "got " + std::to_string(need - 1));
  EXPECT_FAILS_WITH(plan->run(nullptr, Workspace{nullptr, need}, add_bw_args()), Status::WorkspaceTooSmall,
                    "add_backward");
  // Argument errors come first.
  auto a = add_bw_args();
  a.nout = 1;
  EXPECT_FAILS_WITH(plan->run(nullptr, Workspace{}, a), Status::InvalidProblem, "add_backward");
}

// ---- preferences ------------------------------------------------------------------------------
ElementwiseDesc relu_desc() { return ElementwiseDesc::make(ElementwiseOp::relu, DType::bf16, {Shape::of({64})}); }

TEST(Preference, BackendOtherThanNativeRefused) {
  PlanPreference p;
  p.backend = Backend::CuDnn;
  EXPECT_FAILS_WITH(ElementwisePlan::select(kTarget, relu_desc(), p), Status::Unsupported, "relu", "backend=cudnn");
  p.backend = Backend::CuBlasLt;
  EXPECT_FAILS_WITH(ElementwisePlan::select(kTarget, relu_desc(), p), Status::Unsupported, "backend=cublaslt");
  p.backend = Backend::Native;
  EXPECT_TRUE(ElementwisePlan::select(kTarget, relu_desc(), p).ok());
}

TEST(Preference, Tf32RequireRefused) {
  PlanPreference p;
  p.tf32 = Tristate::Require;
  EXPECT_FAILS_WITH(ElementwisePlan::select(kTarget, relu_desc(), p), Status::Unsupported, "relu", "tf32");
  p.tf32 = Tristate::Forbid;
  EXPECT_TRUE(ElementwisePlan::select(kTarget, relu_desc(), p).ok());
}

TEST(Preference, ReducedPrecisionReductionRequireRefused) {
  PlanPreference p;
  p.reduced_precision_reduction = Tristate::Require;
  EXPECT_FAILS_WITH(ElementwisePlan::select(kTarget, relu_desc(), p), Status::Unsupported, "relu",
                    "reduced_precision_reduction");
  p.reduced_precision_reduction = Tristate::Forbid;
  EXPECT_TRUE(ElementwisePlan::select(kTarget, relu_desc(), p).ok());
}

TEST(Preference, DeterminismAndBitStabilityHonoured) {
  PlanPreference p;
  p.require_deterministic = true;
  p.require_bit_stable = true;
  auto plan = ElementwisePlan::select(kTarget, add_bw(Shape::of({3, 4}), Shape::of({4})), p);
  ASSERT_TRUE(plan.ok()) << plan.message();
  EXPECT_TRUE(plan->sku().precision.deterministic);
  EXPECT_TRUE(plan->precision().bit_stable);
  EXPECT_NE(plan->sku().to_string().find("deterministic"), std::string::npos);
  EXPECT_EQ(plan->precision().accumulator, DType::f32);
}

TEST(Preference, VectorizedForbidReflectedInSku) {
  PlanPreference p;
  p.vectorized = Tristate::Forbid;
  auto plan = ElementwisePlan::select(kTarget, relu_desc(), p);
  ASSERT_TRUE(plan.ok());
  EXPECT_NE(plan->sku().layout.find("forbid"), std::string::npos) << plan->sku().layout;
  auto dflt = ElementwisePlan::select(kTarget, relu_desc());
  ASSERT_TRUE(dflt.ok());
  EXPECT_EQ(dflt->sku().layout.find("forbid"), std::string::npos) << dflt->sku().layout;
  ElementwiseArgs a;
  a.in[0] = ref(0, DType::bf16, {64});
  a.out[0] = mut(1, DType::bf16, {64});
  a.nin = a.nout = 1;
  // Without the 16-byte path a contiguous problem runs through the strided kernel.
  EXPECT_EQ(std::string(plan->layout_for(a)), "strided-i32");
  EXPECT_EQ(std::string(dflt->layout_for(a)), "contiguous-vec16");
  a.in[0].data = fake_ptr(0, 2);  // 2-byte aligned only: no vector loads either
  EXPECT_NE(std::string(dflt->layout_for(a)), "contiguous-vec16");
}

TEST(LayoutFor, SixtyFourBitIndexing) {
  auto plan = ElementwisePlan::select(
      kTarget, ElementwiseDesc::make(ElementwiseOp::relu, DType::u8, {Shape::of({65536, 65536})}));
  ASSERT_TRUE(plan.ok()) << plan.message();
  ElementwiseArgs a;
  a.in[0] = TensorRef{fake_ptr(0), DType::u8, strided({65536, 65536}, {1, 65536})};  // transposed
  a.out[0] = mut(1, DType::u8, {65536, 65536});
  a.nin = a.nout = 1;
  auto r = plan->can_implement(a);
  EXPECT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(std::string(plan->layout_for(a)), "strided-i64");
  a.in[0] = ref(0, DType::u8, {65536, 65536});
  EXPECT_EQ(std::string(plan->layout_for(a)), "contiguous-vec16") << "the contiguous path indexes in 64 bits";
}

TEST(Sku, PrintsEverything) {
  auto plan =
      ElementwisePlan::select(kTarget, ElementwiseDesc::make(ElementwiseOp::gelu, DType::bf16, {Shape::of({8})}));
  ASSERT_TRUE(plan.ok());
  const std::string s = plan->sku().to_string();
  for (const char* needle : {"elementwise/gelu", "bfloat16->bfloat16", "native", "sm_90a", "math=float32", "erf"})
    EXPECT_NE(s.find(needle), std::string::npos) << s << " lacks " << needle;
  EXPECT_EQ(plan->precision().math, DType::f32) << "bf16 computes in f32 (opmath)";
  auto f64 = ElementwisePlan::select(kTarget, ElementwiseDesc::make(ElementwiseOp::gelu, DType::f64, {Shape::of({8})}));
  ASSERT_TRUE(f64.ok());
  EXPECT_EQ(f64->precision().math, DType::f64);
  EXPECT_EQ(f64->precision().accumulator, DType::f64);
}

TEST(GatedBackward, GradientsIntoTheTwoHalvesOfOneTensor) {
  // glu backward on x [4, 8] split on the last dim: grad_a and grad_b are the two interleaved
  // halves of one [4, 8] gradient. Their address ranges overlap but no element is shared.
  auto desc = ElementwiseDesc::make(ElementwiseOp::glu, DType::f32, {Shape::of({4, 4}), Shape::of({4, 4})},
                                    Direction::Backward);
  auto plan = ElementwisePlan::select(Target::offline(), desc);
  ASSERT_TRUE(plan.ok()) << plan.message();
  ElementwiseArgs a;
  a.in[0] = test::ref(0, DType::f32, {4, 4});  // grad_output
  a.in[1] = TensorRef{fake_ptr(1), DType::f32, strided({4, 4}, {8, 1})};
  a.in[2] = TensorRef{fake_ptr(1, 16), DType::f32, strided({4, 4}, {8, 1})};
  a.out[0] = TensorMut{fake_ptr(2), DType::f32, strided({4, 4}, {8, 1})};
  a.out[1] = TensorMut{fake_ptr(2, 16), DType::f32, strided({4, 4}, {8, 1})};
  a.nin = 3;
  a.nout = 2;
  auto r = plan->can_implement(a);
  EXPECT_TRUE(r.ok()) << r.message();
  a.out[1].data = fake_ptr(2, 4);  // one element apart: the halves now share elements
  EXPECT_FAILS_WITH(plan->can_implement(a), Status::InvalidProblem, "glu_backward", "partial overlap");
}

TEST(SelectRefusals, RoundDecimalsMustBeAnInteger) {
  auto d = ElementwiseDesc::make(ElementwiseOp::round, DType::f32, {Shape::of({8})});
  ASSERT_TRUE(d.set_param("decimals", 0.5).ok());
  EXPECT_FAILS_WITH(ElementwisePlan::select(Target::offline(), d), Status::InvalidProblem, "round", "'decimals'",
                    "integer", "0.5");
}

TEST(SelectRefusals, GeneratorOutputShape) {
  auto d = ElementwiseDesc::make(ElementwiseOp::fill, DType::f32, {Shape::of({2, -1})});
  EXPECT_FAILS_WITH(ElementwisePlan::select(Target::offline(), d), Status::InvalidProblem, "fill",
                    "negative size in out_shape", "[2, -1]");
  d.out_shape = Shape::of({2, 3});
  d.out_shape.rank = 9;
  EXPECT_FAILS_WITH(ElementwisePlan::select(Target::offline(), d), Status::InvalidProblem, "fill",
                    "out_shape rank expected 0..8", "got 9");
  // detail::check_shape: an element count past 2^59 (here one that wraps int64) is refused.
  d.out_shape = Shape::of({int64_t{1} << 40, int64_t{1} << 40});
  EXPECT_FAILS_WITH(ElementwisePlan::select(Target::offline(), d), Status::InvalidProblem, "fill", "out_shape shape",
                    "expected fewer than 2^59 elements");
}

TEST(SelectRefusals, InputRankAboveEight) {
  Shape big = Shape::of({2, 3});
  big.rank = 9;
  const Shape shapes[] = {Shape::of({3}), big};
  auto r = broadcast_shapes("add", shapes);
  EXPECT_FAILS_WITH(r, Status::InvalidProblem, "add", "input 1", "rank > 8");
}

TEST(SelectRefusals, MoreThanEightDimsNeverWritePastTheArrays) {
  const Shape s = Shape::of({1, 2, 3, 4, 5, 6, 7, 8, 9});
  EXPECT_EQ(s.rank, -1);
  auto d = ElementwiseDesc::make(ElementwiseOp::neg, DType::f32, {s});
  EXPECT_FAILS_WITH(ElementwisePlan::select(Target::offline(), d), Status::InvalidProblem, "neg", "rank -1");
  const Layout l = Layout::contiguous({1, 2, 3, 4, 5, 6, 7, 8, 9});
  EXPECT_EQ(l.rank, -1);
}

}  // namespace
}  // namespace baracuda
