// The row dims of the row-wise launches (src/core/row_dims.hpp, used by the loss and norm plans):
// coalescing rules and the innermost-first layout the device's row_offsets reads.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>

#include "core/row_dims.hpp"

namespace baracuda {
namespace {

/// A launch struct with the fields RowDims::write fills (3 slots, up to 4 dims).
struct FakeLaunch {
  int row_ndim = -1;
  int64_t row_size[4] = {};
  int64_t row_stride[3][4] = {};
};

using Dims = detail::RowDims<3>;
constexpr std::array<bool, 3> kAll{true, true, true};

TEST(RowDims, ContiguousRowsMergeIntoOne) {
  // Rows of a [2, 3, 8] tensor reduced over the last dim: row dims [2, 3] with strides 24, 8.
  Dims d;
  d.add(2, {24, 24, 24}, kAll);
  d.add(3, {8, 8, 8}, kAll);
  FakeLaunch p;
  d.write(p);
  ASSERT_EQ(p.row_ndim, 1);
  EXPECT_EQ(p.row_size[0], 6);
  for (int s = 0; s < 3; ++s) EXPECT_EQ(p.row_stride[s][0], 8);
}

TEST(RowDims, UnmergeableDimsAreWrittenInnermostFirst) {
  // Slot 1 is a transposed view: its strides do not line up, so the dims stay apart.
  Dims d;
  d.add(2, {24, 8, 24}, kAll);
  d.add(3, {8, 16, 8}, kAll);
  FakeLaunch p;
  d.write(p);
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
  Dims d;
  d.add(4, {10, 10, 7}, {true, true, false});
  d.add(5, {2, 2, 3}, {true, true, false});
  FakeLaunch p;
  d.write(p);
  ASSERT_EQ(p.row_ndim, 1);
  EXPECT_EQ(p.row_size[0], 20);
  EXPECT_EQ(p.row_stride[0][0], 2);
  EXPECT_EQ(p.row_stride[1][0], 2);
}

TEST(RowDims, BroadcastDimMergesOnlyWhereStridesAgree) {
  // Slot 1 broadcast along the outer dim (stride 0) but not the inner one: no merge.
  Dims d;
  d.add(3, {4, 0, 4}, kAll);
  d.add(4, {1, 1, 1}, kAll);
  FakeLaunch p;
  d.write(p);
  ASSERT_EQ(p.row_ndim, 2);
  EXPECT_EQ(p.row_size[0], 4);
  EXPECT_EQ(p.row_size[1], 3);
  EXPECT_EQ(p.row_stride[1][1], 0);
}

TEST(RowDims, NoDimsIsRankZero) {
  Dims d;
  FakeLaunch p;
  d.write(p);
  EXPECT_EQ(p.row_ndim, 0);
}

}  // namespace
}  // namespace baracuda
