// The elementwise engine's host half (src/core/ew_iter): coalescing, dim ordering, broadcast
// scalars, alignment and the 32-bit index decision. Pure host code on fake pointers.
#include <gtest/gtest.h>

#include <array>
#include <vector>

#include "core/ew_iter.hpp"
#include "test_util.hpp"

namespace baracuda {
namespace {

using detail::EwIter;
using detail::make_ew_iter;
using test::fake_ptr;
using test::strided;

EwIter iter(std::vector<TensorMut> outs, std::vector<TensorRef> ins, std::initializer_list<int64_t> out_shape,
            bool keep_order = false) {
  std::vector<int64_t> s(out_shape);
  return make_ew_iter(outs, ins, static_cast<int>(s.size()), s.data(), keep_order);
}

TEST(EwIter, ContiguousCoalescesToRankOne) {
  auto it =
      iter({make_mut(fake_ptr(0), DType::f32, {4, 5, 6})}, {make_ref(fake_ptr(1), DType::f32, {4, 5, 6})}, {4, 5, 6});
  EXPECT_EQ(it.nout, 1);
  EXPECT_EQ(it.nops, 2);
  EXPECT_EQ(it.rank, 1);
  EXPECT_EQ(it.shape[0], 120);
  EXPECT_EQ(it.numel, 120);
  EXPECT_EQ(it.stride[0][0], 1);
  EXPECT_EQ(it.stride[1][0], 1);
  EXPECT_TRUE(it.contiguous);
  EXPECT_TRUE(it.aligned16);
  EXPECT_TRUE(it.fits_i32);
  EXPECT_EQ(it.scalar_mask, 0u);
  EXPECT_EQ(it.elem_bytes[0], 4);
}

TEST(EwIter, SizeOneDimsDropped) {
  auto it =
      iter({make_mut(fake_ptr(0), DType::f16, {1, 7, 1})}, {make_ref(fake_ptr(1), DType::f16, {1, 7, 1})}, {1, 7, 1});
  EXPECT_EQ(it.rank, 1);
  EXPECT_EQ(it.shape[0], 7);
  EXPECT_TRUE(it.contiguous);
}

TEST(EwIter, TransposedOutputReordersDims) {
  // Output [4, 5] column-major (strides (1, 4)); input row-major. Dims follow the output's
  // memory order: innermost = logical dim 0.
  TensorMut out{fake_ptr(0), DType::f32, strided({4, 5}, {1, 4})};
  auto it = iter({out}, {make_ref(fake_ptr(1), DType::f32, {4, 5})}, {4, 5});
  ASSERT_EQ(it.rank, 2);
  EXPECT_EQ(it.shape[0], 4);
  EXPECT_EQ(it.shape[1], 5);
  EXPECT_EQ(it.stride[0][0], 1);  // output
  EXPECT_EQ(it.stride[0][1], 4);
  EXPECT_EQ(it.stride[1][0], 5);  // input
  EXPECT_EQ(it.stride[1][1], 1);
  EXPECT_FALSE(it.contiguous);
}

TEST(EwIter, TransposedEverythingCoalesces) {
  TensorMut out{fake_ptr(0), DType::f32, strided({4, 5}, {1, 4})};
  TensorRef in{fake_ptr(1), DType::f32, strided({4, 5}, {1, 4})};
  auto it = iter({out}, {in}, {4, 5});
  EXPECT_EQ(it.rank, 1);
  EXPECT_EQ(it.shape[0], 20);
  EXPECT_TRUE(it.contiguous);
}

TEST(EwIter, KeepOrderPreservesLogicalOrder) {
  TensorMut out{fake_ptr(0), DType::f32, strided({4, 5}, {1, 4})};
  auto it = iter({out}, {}, {4, 5}, /*keep_order=*/true);
  ASSERT_EQ(it.rank, 2);
  EXPECT_EQ(it.shape[0], 5) << "dim 0 of the iteration is the logical innermost dim";
  EXPECT_EQ(it.stride[0][0], 4);
}

TEST(EwIter, BroadcastScalarGetsScalarMask) {
  auto it = iter({make_mut(fake_ptr(0), DType::f32, {4, 5})},
                 {make_ref(fake_ptr(1), DType::f32, {4, 5}), make_ref(fake_ptr(2), DType::f32, {})}, {4, 5});
  EXPECT_EQ(it.rank, 1);
  EXPECT_EQ(it.scalar_mask, 1u << 2) << "operand 2 = the second input (outputs come first)";
  EXPECT_TRUE(it.contiguous) << "a broadcast scalar keeps the contiguous path";
  EXPECT_EQ(it.stride[2][0], 0);
  auto one = iter({make_mut(fake_ptr(0), DType::f32, {4, 5})}, {make_ref(fake_ptr(1), DType::f32, {1, 1})}, {4, 5});
  EXPECT_EQ(one.scalar_mask, 1u << 1);
}

TEST(EwIter, BroadcastRowIsStrided) {
  auto it = iter({make_mut(fake_ptr(0), DType::f32, {4, 5})},
                 {make_ref(fake_ptr(1), DType::f32, {4, 5}), make_ref(fake_ptr(2), DType::f32, {5})}, {4, 5});
  ASSERT_EQ(it.rank, 2);
  EXPECT_EQ(it.stride[2][0], 1);
  EXPECT_EQ(it.stride[2][1], 0);
  EXPECT_EQ(it.scalar_mask, 0u);
  EXPECT_FALSE(it.contiguous);
}

TEST(EwIter, Alignment) {
  auto it = iter({make_mut(fake_ptr(0), DType::f32, {64})}, {make_ref(fake_ptr(1, 4), DType::f32, {64})}, {64});
  EXPECT_TRUE(it.contiguous);
  EXPECT_FALSE(it.aligned16);
  // A misaligned scalar does not matter: it is loaded once, not vectorized.
  auto s = iter({make_mut(fake_ptr(0), DType::f32, {64})}, {make_ref(fake_ptr(1, 4), DType::f32, {1})}, {64});
  EXPECT_TRUE(s.aligned16);
}

TEST(EwIter, Fits32BitIndexing) {
  auto big = iter({make_mut(fake_ptr(0), DType::u8, {65536, 65536})},
                  {make_ref(fake_ptr(1), DType::u8, {65536, 65536})}, {65536, 65536});
  EXPECT_EQ(big.numel, int64_t{1} << 32);
  EXPECT_FALSE(big.fits_i32);
  auto edge = iter({make_mut(fake_ptr(0), DType::u8, {(int64_t{1} << 31) + 1})},
                   {make_ref(fake_ptr(1), DType::u8, {(int64_t{1} << 31) + 1})}, {(int64_t{1} << 31) + 1});
  EXPECT_FALSE(edge.fits_i32);
  auto small =
      iter({make_mut(fake_ptr(0), DType::u8, {1 << 20})}, {make_ref(fake_ptr(1), DType::u8, {1 << 20})}, {1 << 20});
  EXPECT_TRUE(small.fits_i32);
  // Few elements but a huge stride: offsets past 2^31 need 64-bit indexing too.
  TensorRef far{fake_ptr(1), DType::u8, strided({2, 4}, {int64_t{1} << 32, 1})};
  auto wide = iter({make_mut(fake_ptr(0), DType::u8, {2, 4})}, {far}, {2, 4});
  EXPECT_FALSE(wide.fits_i32);
}

TEST(EwIter, EmptyAndScalarOutputs) {
  auto e = iter({make_mut(fake_ptr(0), DType::f32, {0, 3})}, {make_ref(fake_ptr(1), DType::f32, {0, 3})}, {0, 3});
  EXPECT_EQ(e.numel, 0);
  auto s = iter({make_mut(fake_ptr(0), DType::f32, {})}, {make_ref(fake_ptr(1), DType::f32, {})}, {});
  EXPECT_EQ(s.numel, 1);
  EXPECT_EQ(s.rank, 0);
  EXPECT_TRUE(s.contiguous);
}

}  // namespace
}  // namespace baracuda
