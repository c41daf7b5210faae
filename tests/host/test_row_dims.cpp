// The row dims of the row-wise launches (src/core/row_dims.hpp, used by the loss and norm plans):
// coalescing rules and the innermost-first layout the device's row_offsets reads.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <initializer_list>
#include <utility>

#include "core/row_dims.hpp"

namespace baracuda {
namespace {

/// A launch struct with the fields RowDims::write fills (3 slots, up to 4 dims).
struct FakeLaunch {
  int row_ndim = -1;
  int64_t row_size[4] = {};
  int64_t row_stride[3][4] = {};
};

using Strides = std::array<int64_t, 3>;
constexpr std::array<bool, 3> kAll{true, true, true};

/// Adds the (size, strides) dims outer to inner and writes them out.
FakeLaunch written(std::initializer_list<std::pair<int64_t, Strides>> dims, std::array<bool, 3> used = kAll) {
  detail::RowDims<3> d;
  for (const auto& [size, stride] : dims) d.add(size, stride, used);
  FakeLaunch p;
  d.write(p);
  return p;
}

TEST(RowDims, ContiguousRowsMergeIntoOne) {
  // Rows of a [2, 3, 8] tensor reduced over the last dim: row dims [2, 3] with strides 24, 8.
  const FakeLaunch p = written({{2, {24, 24, 24}}, {3, {8, 8, 8}}});
  ASSERT_EQ(p.row_ndim, 1);
  EXPECT_EQ(p.row_size[0], 6);
  for (int s = 0; s < 3; ++s) EXPECT_EQ(p.row_stride[s][0], 8);
}

TEST(RowDims, UnmergeableDimsAreWrittenInnermostFirst) {
  // Slot 1 is a transposed view: its strides do not line up, so the dims stay apart.
  const FakeLaunch p = written({{2, {24, 8, 24}}, {3, {8, 16, 8}}});
  ASSERT_EQ(p.row_ndim, 2);
  EXPECT_EQ(p.row_size[0], 3);  // innermost
  EXPECT_EQ(p.row_size[1], 2);
  EXPECT_EQ(p.row_stride[0][0], 8);
  EXPECT_EQ(p.row_stride[1][0], 16);
  EXPECT_EQ(p.row_stride[0][1], 24);
  EXPECT_EQ(p.row_stride[1][1], 8);
}

TEST(RowDims, UnusedSlotsDoNotBlockMerging) {
  // Slot 2 is absent: its (meaningless) strides do not line up (7 != 3 x 5), the dims still merge.
  const FakeLaunch p = written({{4, {10, 10, 7}}, {5, {2, 2, 3}}}, {true, true, false});
  ASSERT_EQ(p.row_ndim, 1);
  EXPECT_EQ(p.row_size[0], 20);
  EXPECT_EQ(p.row_stride[0][0], 2);
  EXPECT_EQ(p.row_stride[1][0], 2);
}

TEST(RowDims, BroadcastDimMergesOnlyWhereStridesAgree) {
  // Slot 1 broadcast along the outer dim (stride 0) but not the inner one: no merge.
  const FakeLaunch p = written({{3, {4, 0, 4}}, {4, {1, 1, 1}}});
  ASSERT_EQ(p.row_ndim, 2);
  EXPECT_EQ(p.row_size[0], 4);
  EXPECT_EQ(p.row_size[1], 3);
  EXPECT_EQ(p.row_stride[1][1], 0);
}

TEST(RowDims, NoDimsIsRankZero) { EXPECT_EQ(written({}).row_ndim, 0); }

}  // namespace
}  // namespace baracuda
