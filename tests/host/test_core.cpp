// Core vocabulary: shapes and broadcasting, Layout, split_halves, dtype names, DLPack, the
// parameter-spec parser and Target.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "baracuda/core/dlpack.hpp"
#include "baracuda/ops/elementwise.hpp"
#include "test_util.hpp"

namespace baracuda {
namespace {

using test::fake_ptr;
using test::strided;

Result<Shape> bcast(std::vector<Shape> s) { return broadcast_shapes("test_op", s); }

// ---- broadcast_shapes ------------------------------------------------------------------------
TEST(Broadcast, RightAlignedWithOnes) {
  auto r = bcast({Shape::of({3, 1, 5}), Shape::of({4, 1})});
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(*r, Shape::of({3, 4, 5}));
  r = bcast({Shape::of({8, 1, 6, 1}), Shape::of({7, 1, 5})});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, Shape::of({8, 7, 6, 5}));
}

TEST(Broadcast, RankExtensionAndScalars) {
  auto r = bcast({Shape::of({}), Shape::of({2, 3})});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, Shape::of({2, 3}));
  r = bcast({Shape::of({5}), Shape::of({2, 3, 5})});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, Shape::of({2, 3, 5}));
  r = bcast({Shape::of({}), Shape::of({})});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->rank, 0);
  EXPECT_EQ(r->numel(), 1);
  r = bcast({Shape::of({4})});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, Shape::of({4}));
}

TEST(Broadcast, ZeroSizes) {
  auto r = bcast({Shape::of({0}), Shape::of({1})});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, Shape::of({0}));
  r = bcast({Shape::of({2, 0}), Shape::of({0})});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->numel(), 0);
  EXPECT_FAILS_WITH(bcast({Shape::of({0}), Shape::of({3})}), Status::InvalidProblem, "test_op", "do not broadcast");
}

TEST(Broadcast, MismatchNamesOperandAndDim) {
  EXPECT_FAILS_WITH(bcast({Shape::of({2, 3}), Shape::of({2, 4})}), Status::InvalidProblem, "test_op", "input 1",
                    "[2, 4]", "size 3", "dim 1");
  EXPECT_FAILS_WITH(bcast({Shape::of({3}), Shape::of({1}), Shape::of({4})}), Status::InvalidProblem, "input 2");
}

TEST(Broadcast, NegativeSizeRejected) {
  EXPECT_FAILS_WITH(bcast({Shape::of({2, -3}), Shape::of({3})}), Status::InvalidProblem, "test_op", "input 0",
                    "negative size -3");
}

TEST(ShapeTest, Basics) {
  EXPECT_EQ(Shape::of({2, 3, 4}).numel(), 24);
  EXPECT_EQ(Shape::of({}).numel(), 1);
  EXPECT_EQ(Shape::of({2, 3}).str(), "[2, 3]");
  EXPECT_EQ(Shape::of({}).str(), "[]");
  EXPECT_FALSE(Shape::of({2, 3}) == Shape::of({3, 2}));
  EXPECT_FALSE(Shape::of({2}) == Shape::of({2, 1}));
  EXPECT_EQ(Shape::of(Layout::contiguous({5, 6})), Shape::of({5, 6}));
}

// ---- Layout -----------------------------------------------------------------------------------
TEST(LayoutTest, NumelAndContiguous) {
  const Layout c = Layout::contiguous({2, 3, 4});
  EXPECT_EQ(c.numel(), 24);
  EXPECT_EQ(c.stride[0], 12);
  EXPECT_EQ(c.stride[1], 4);
  EXPECT_EQ(c.stride[2], 1);
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.shape_str(), "[2, 3, 4]");
  EXPECT_EQ(c.stride_str(), "(12, 4, 1)");
  EXPECT_EQ(Layout::contiguous({2, 0, 3}).numel(), 0);
  EXPECT_EQ(Layout{}.numel(), 1) << "rank 0 is a scalar";
  EXPECT_TRUE(Layout{}.is_contiguous());
  EXPECT_FALSE(strided({3, 4}, {1, 3}).is_contiguous()) << "transposed";
  EXPECT_FALSE(strided({3, 4}, {8, 1}).is_contiguous()) << "padded rows";
  EXPECT_TRUE(strided({3, 1, 4}, {4, 999, 1}).is_contiguous()) << "size-1 dims have any stride";
  EXPECT_FALSE(strided({3, 4}, {0, 1}).is_contiguous()) << "broadcast";
}

TEST(LayoutTest, Extent) {
  int64_t lo = -1, hi = -1;
  Layout::contiguous({2, 3}).extent(&lo, &hi);
  EXPECT_EQ(lo, 0);
  EXPECT_EQ(hi, 6);
  strided({3, 4}, {8, 1}).extent(&lo, &hi);
  EXPECT_EQ(lo, 0);
  EXPECT_EQ(hi, 2 * 8 + 3 + 1);
  strided({3}, {-2}).extent(&lo, &hi);
  EXPECT_EQ(lo, -4);
  EXPECT_EQ(hi, 1);
  strided({4, 5}, {0, 1}).extent(&lo, &hi);
  EXPECT_EQ(lo, 0);
  EXPECT_EQ(hi, 5);
  Layout::contiguous({0, 5}).extent(&lo, &hi);
  EXPECT_EQ(lo, 0);
  EXPECT_EQ(hi, 0);
}

TEST(LayoutTest, InternalOverlap) {
  EXPECT_FALSE(Layout::contiguous({3, 4}).has_internal_overlap());
  EXPECT_FALSE(strided({3, 4}, {1, 3}).has_internal_overlap()) << "transpose";
  EXPECT_FALSE(strided({2, 3, 4}, {1, 8, 2}).has_internal_overlap()) << "permutation";
  EXPECT_FALSE(strided({3, 4}, {10, 2}).has_internal_overlap()) << "gaps";
  EXPECT_FALSE(strided({3, 1, 4}, {4, 0, 1}).has_internal_overlap()) << "size-1 dim with stride 0";
  EXPECT_TRUE(strided({3, 4}, {0, 1}).has_internal_overlap()) << "broadcast maps rows to the same elements";
  EXPECT_TRUE(strided({3, 4}, {0, 1}).has_zero_stride());
  EXPECT_FALSE(strided({1, 4}, {0, 1}).has_zero_stride());
  EXPECT_TRUE(strided({3, 3}, {2, 1}).has_internal_overlap()) << "(0,2) and (1,0) collide";
  EXPECT_TRUE(strided({2, 2}, {1, 1}).has_internal_overlap());
  EXPECT_FALSE(strided({2, 3}, {1, 2}).has_internal_overlap()) << "offsets i + 2j are distinct";
}

// ---- split_halves ---------------------------------------------------------------------------------
TEST(SplitHalves, ViewsOfEachHalf) {
  const TensorRef t = make_ref(fake_ptr(0), DType::bf16, {4, 6});
  auto h = split_halves(t, 1);
  ASSERT_TRUE(h.ok()) << h.message();
  EXPECT_EQ((*h)[0].data, t.data);
  EXPECT_EQ((*h)[1].data, static_cast<const char*>(t.data) + 3 * 2);
  for (const auto& v : *h) {
    EXPECT_EQ(Shape::of(v.layout), Shape::of({4, 3}));
    EXPECT_EQ(v.stride(0), 6);
    EXPECT_EQ(v.stride(1), 1);
    EXPECT_EQ(v.dtype, DType::bf16);
  }
  auto n = split_halves(t, -2);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(Shape::of((*n)[1].layout), Shape::of({2, 6}));
  EXPECT_EQ((*n)[1].data, static_cast<const char*>(t.data) + 2 * 6 * 2);
}

TEST(SplitHalves, Errors) {
  const TensorRef t = make_ref(fake_ptr(0), DType::f32, {4, 5});
  EXPECT_FAILS_WITH(split_halves(t, 1), Status::InvalidProblem, "split_halves", "expected even", "got 5");
  EXPECT_FAILS_WITH(split_halves(t, 2), Status::InvalidProblem, "split_halves", "dim", "got 2");
  EXPECT_FAILS_WITH(split_halves(t, -3), Status::InvalidProblem, "split_halves", "dim");
}

// ---- dtypes ---------------------------------------------------------------------------------------
TEST(DTypeTest, NamesRoundTrip) {
  for (int i = 0; i < kNumDTypes; ++i) {
    const DType t = static_cast<DType>(i);
    SCOPED_TRACE(std::string(name(t)));
    auto back = dtype_from_name(name(t));
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(*back, t);
    EXPECT_GT(size_in_bits(t), 0);
  }
  EXPECT_EQ(dtype_from_name("bf16"), DType::bf16);
  EXPECT_EQ(dtype_from_name("f32"), DType::f32);
  EXPECT_EQ(dtype_from_name("half"), DType::f16);
  EXPECT_EQ(dtype_from_name("bool"), DType::b8);
  EXPECT_FALSE(dtype_from_name("float128").has_value());
  EXPECT_FALSE(dtype_from_name("").has_value());
}

TEST(DTypeTest, Classification) {
  EXPECT_EQ(name(DType::bf16), "bfloat16");
  EXPECT_EQ(size_in_bytes(DType::c128), 16);
  EXPECT_EQ(size_in_bits(DType::s4), 4);
  EXPECT_EQ(size_in_bytes(DType::s4), 1);
  EXPECT_TRUE(is_floating(DType::f8e4m3));
  EXPECT_FALSE(is_floating(DType::c64));
  EXPECT_TRUE(is_complex(DType::c64));
  EXPECT_TRUE(is_integral(DType::u32));
  EXPECT_FALSE(is_integral(DType::b8));
  EXPECT_FALSE(is_integral(DType::s4));
  EXPECT_TRUE(is_packed(DType::u4));
  for (int i = 0; i < kNumDTypes; ++i) {
    const DType t = static_cast<DType>(i);
    EXPECT_EQ(contains(dtypes::kAll, t), !is_packed(t)) << name(t);
  }
}

// ---- DLPack ---------------------------------------------------------------------------------------
TEST(DLPack, DtypesRoundTrip) {
  for (int i = 0; i < kNumDTypes; ++i) {
    const DType t = static_cast<DType>(i);
    auto back = dlpack::to_dtype(dlpack::from_dtype(t));
    ASSERT_TRUE(back.ok()) << name(t) << ": " << back.message();
    EXPECT_EQ(*back, t);
  }
}

TEST(DLPack, TensorRoundTrip) {
  TensorRef t{fake_ptr(3), DType::f16, strided({2, 3, 4}, {1, 8, 2})};
  int64_t shape[kMaxRank], strides[kMaxRank];
  const dlpack::Tensor dl = dlpack::from_tensor(t, {dlpack::kDLCUDA, 0}, shape, strides);
  EXPECT_EQ(dl.ndim, 3);
  EXPECT_EQ(dl.dtype.code, dlpack::kDLFloat);
  EXPECT_EQ(dl.dtype.bits, 16);
  EXPECT_EQ(dl.dtype.lanes, 1);
  EXPECT_EQ(dl.device.device_type, dlpack::kDLCUDA);
  auto back = dlpack::to_tensor(dl);
  ASSERT_TRUE(back.ok()) << back.message();
  EXPECT_EQ(back->data, t.data);
  EXPECT_EQ(back->dtype, t.dtype);
  EXPECT_EQ(back->layout.shape_str(), t.layout.shape_str());
  EXPECT_EQ(back->layout.stride_str(), t.layout.stride_str());
}

TEST(DLPack, NullStridesMeanContiguousAndOffsetApplied) {
  int64_t shape[] = {3, 5};
  dlpack::Tensor dl{fake_ptr(1), {dlpack::kDLCUDA, 0}, 2, {dlpack::kDLFloat, 32, 1}, shape, nullptr, 8};
  auto t = dlpack::to_tensor(dl);
  ASSERT_TRUE(t.ok()) << t.message();
  EXPECT_TRUE(t->layout.is_contiguous());
  EXPECT_EQ(t->layout.stride_str(), "(5, 1)");
  EXPECT_EQ(t->data, fake_ptr(1, 8));
  EXPECT_EQ(t->dtype, DType::f32);
  dl.ndim = 0;  // a scalar
  auto s = dlpack::to_tensor(dl);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->numel(), 1);
}

TEST(DLPack, Refusals) {
  int64_t shape[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  dlpack::Tensor dl{fake_ptr(1), {dlpack::kDLCUDA, 0}, 2, {dlpack::kDLFloat, 32, 1}, shape, nullptr, 2};
  EXPECT_FAILS_WITH(dlpack::to_tensor(dl), Status::MisalignedOperand, "dlpack", "byte_offset 2", "4");
  dl.byte_offset = 0;
  dl.dtype = {dlpack::kDLOpaqueHandle, 64, 1};
  EXPECT_FAILS_WITH(dlpack::to_tensor(dl), Status::Unsupported, "dlpack", "code=3");
  dl.dtype = {dlpack::kDLFloat, 8, 1};
  EXPECT_FAILS_WITH(dlpack::to_tensor(dl), Status::Unsupported, "dlpack", "bits=8");
  dl.dtype = {dlpack::kDLFloat, 32, 4};
  EXPECT_FAILS_WITH(dlpack::to_tensor(dl), Status::Unsupported, "dlpack", "lanes=4");
  dl.dtype = {dlpack::kDLFloat, 32, 1};
  dl.ndim = 9;
  EXPECT_FAILS_WITH(dlpack::to_tensor(dl), Status::Unsupported, "dlpack", "ndim", "got 9");
  dl.ndim = -1;
  EXPECT_FAILS_WITH(dlpack::to_tensor(dl), Status::Unsupported, "dlpack", "ndim");
  dl.ndim = 8;
  EXPECT_TRUE(dlpack::to_tensor(dl).ok());
}

// ---- the parameter spec parser ------------------------------------------------------------------
TEST(ParamSpec, Gelu) {
  const auto& g = info(ElementwiseOp::gelu);
  ASSERT_EQ(g.num_params(), 1);
  EXPECT_EQ(g.param_name(0), "approximate");
  EXPECT_EQ(g.param_default(0), 0.0);
  EXPECT_EQ(g.param_choice(0, "none"), 0);
  EXPECT_EQ(g.param_choice(0, "tanh"), 1);
  EXPECT_EQ(g.param_choice(0, "fast"), -1);
  EXPECT_EQ(g.param_choice(0, "tan"), -1);
}

TEST(ParamSpec, Softplus) {
  const auto& s = info(ElementwiseOp::softplus);
  ASSERT_EQ(s.num_params(), 2);
  EXPECT_EQ(s.param_name(0), "beta");
  EXPECT_EQ(s.param_name(1), "threshold");
  EXPECT_EQ(s.param_default(0), 1.0);
  EXPECT_EQ(s.param_default(1), 20.0);
}

TEST(ParamSpec, NanToNumInfinities) {
  const auto& n = info(ElementwiseOp::nan_to_num);
  ASSERT_EQ(n.num_params(), 3);
  EXPECT_EQ(n.param_name(0), "nan");
  EXPECT_EQ(n.param_name(1), "posinf");
  EXPECT_EQ(n.param_name(2), "neginf");
  EXPECT_EQ(n.param_default(0), 0.0);
  EXPECT_TRUE(std::isinf(n.param_default(1)) && n.param_default(1) > 0);
  EXPECT_TRUE(std::isinf(n.param_default(2)) && n.param_default(2) < 0);
  const auto d = ElementwiseDesc::make(ElementwiseOp::nan_to_num, DType::f32, {Shape::of({4})});
  EXPECT_EQ(d.params[1], n.param_default(1)) << "make() fills table defaults";
  EXPECT_EQ(d.params[2], n.param_default(2));
}

TEST(ParamSpec, OthersRows) {
  EXPECT_EQ(info(ElementwiseOp::relu).num_params(), 0);
  const auto& r = info(ElementwiseOp::rrelu_eval);
  ASSERT_EQ(r.num_params(), 2);
  EXPECT_NEAR(r.param_default(1), 1.0 / 3.0, 1e-15);
  const auto& ic = info(ElementwiseOp::isclose);
  ASSERT_EQ(ic.num_params(), 3);
  EXPECT_EQ(ic.param_name(2), "equal_nan");
  EXPECT_EQ(ic.param_default(0), 1e-5);
  EXPECT_EQ(info(ElementwiseOp::logit).param_default(0), -1.0);
  const auto& ls = info(ElementwiseOp::logspace);
  ASSERT_EQ(ls.num_params(), 4);
  EXPECT_EQ(ls.param_name(3), "base");
  EXPECT_EQ(ls.param_default(3), 10.0);
  EXPECT_EQ(info(ElementwiseOp::where).bool_inputs, 1u);
  EXPECT_EQ(info(ElementwiseOp::where).num_grads(), 2);
  EXPECT_EQ(info(ElementwiseOp::lerp).num_grads(), 3);
}

// ---- Target ----------------------------------------------------------------------------------------
TEST(TargetTest, OfflineIsHopper) {
  const Target t = Target::offline();
  EXPECT_EQ(t.device, -1);
  EXPECT_EQ(t.sm, 90);
  EXPECT_EQ(Target::offline(80).sm, 80);
}

TEST(TargetTest, CurrentWithoutGpuIsNoDevice) {
  auto t = Target::current();
  if (t.ok()) GTEST_SKIP() << "a CUDA device is present (sm_" << t->sm << "); nothing to check";
  EXPECT_FAILS_WITH(t, Status::NoDevice, "no CUDA device");
  // The convenience call reports the same instead of crashing.
  auto d = ElementwiseDesc::make(ElementwiseOp::relu, DType::f32, {Shape::of({4})});
  ElementwiseArgs a;
  a.in[0] = test::ref(0, DType::f32, {4});
  a.out[0] = test::mut(1, DType::f32, {4});
  a.nin = a.nout = 1;
  EXPECT_EQ(elementwise(nullptr, d, a).status(), Status::NoDevice);
}

TEST(StatusTest, Strings) {
  EXPECT_STREQ(to_string(Status::Ok), "Ok");
  EXPECT_STREQ(to_string(Status::WorkspaceTooSmall), "WorkspaceTooSmall");
  EXPECT_STREQ(to_string(Status::NoDevice), "NoDevice");
  EXPECT_STREQ(to_string(Backend::Native), "native");
  Result<int> ok = 3;
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.status(), Status::Ok);
  EXPECT_TRUE(ok.message().empty());
  Result<int> bad = make_error(Status::BufferTooSmall, "x");
  EXPECT_FALSE(bad);
  EXPECT_EQ(bad.message(), "x");
}


TEST(ViewsMayOverlap, HalvesOfARowInterleaveButNeverCollide) {
  // [4, 8] f32, split on the last dim: halves are [4, 4] with strides (8, 1), 4 elements apart.
  const Layout half = baracuda::test::strided({4, 4}, {8, 1});
  char* base = static_cast<char*>(baracuda::test::fake_ptr(0));
  EXPECT_FALSE(views_may_overlap(base, half, base + 4 * 4, half, 4));
  EXPECT_FALSE(views_may_overlap(base + 4 * 4, half, base, half, 4));
  // Shifted by one element: rows collide.
  EXPECT_TRUE(views_may_overlap(base, half, base + 1 * 4, half, 4));
  // Shifted by a whole row: the second view's first row is the first view's second row.
  EXPECT_TRUE(views_may_overlap(base, half, base + 8 * 4, half, 4));
  // Shifted past the end: disjoint ranges.
  EXPECT_FALSE(views_may_overlap(base, half, base + 32 * 4, half, 4));
  // Not a whole number of elements apart: conservative.
  EXPECT_TRUE(views_may_overlap(base, half, base + 18, half, 4));
  // Different strides: conservative (address ranges overlap).
  EXPECT_TRUE(views_may_overlap(base, half, base + 4 * 4, baracuda::test::strided({4, 4}, {1, 8}), 4));
  // Empty views touch nothing.
  EXPECT_FALSE(views_may_overlap(base, baracuda::test::strided({0, 4}, {8, 1}), base, half, 4));
}

TEST(ViewsMayOverlap, ThreeDimsAndNegativeOffsets) {
  // Even/odd channels of [2, 6, 3] (strides (18, 3, 1)) taken as [2, 3, 3] with strides (18, 6, 1).
  const Layout l = baracuda::test::strided({2, 3, 3}, {18, 6, 1});
  char* base = static_cast<char*>(baracuda::test::fake_ptr(1));
  EXPECT_FALSE(views_may_overlap(base, l, base + 3 * 2, l, 2));
  EXPECT_FALSE(views_may_overlap(base + 3 * 2, l, base, l, 2));
  EXPECT_TRUE(views_may_overlap(base, l, base + 6 * 2, l, 2));   // next even channel
  EXPECT_TRUE(views_may_overlap(base, l, base + 19 * 2, l, 2));  // next batch, element 1
}

}  // namespace
}  // namespace baracuda
