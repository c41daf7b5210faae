// The shared memory checks of can_implement (src/core/operands.hpp), on fake pointers.
#include <gtest/gtest.h>

#include <vector>

#include "core/operands.hpp"
#include "test_util.hpp"

namespace baracuda {
namespace {

using detail::check_operands;
using detail::Operand;
using test::fake_ptr;
using test::strided;

const Layout kDense = Layout::contiguous({4, 8});

Operand in(const char* role, const void* p, const Layout& l, bool aligned = true) {
  return {role, p, DType::f32, &l, false, aligned};
}
Operand out(const char* role, const void* p, const Layout& l, bool aligned = true) {
  return {role, p, DType::f32, &l, true, aligned};
}

TEST(Operands, DistinctTensorsPass) {
  const std::vector<Operand> ops{in("x", fake_ptr(0), kDense), out("y", fake_ptr(1), kDense)};
  EXPECT_TRUE(check_operands("op", ops).ok());
}

TEST(Operands, FootprintRefusals) {
  const Layout neg = strided({4, 8}, {8, -1});
  EXPECT_FAILS_WITH(check_operands("op", std::vector<Operand>{in("x", fake_ptr(0), neg)}), Status::InvalidProblem,
                    "op: x stride[1] expected >= 0, got -1");
  const Layout huge = strided({int64_t{1} << 40, int64_t{1} << 40}, {int64_t{1} << 40, 1});
  EXPECT_FAILS_WITH(check_operands("op", std::vector<Operand>{in("x", fake_ptr(0), huge)}), Status::InvalidProblem,
                    "x footprint overflows 64 bits");
  EXPECT_FAILS_WITH(check_operands("op", std::vector<Operand>{in("x", nullptr, kDense)}), Status::InvalidProblem,
                    "x is null but has 32 elements");
  const Layout empty = Layout::contiguous({0, 8});
  EXPECT_TRUE(check_operands("op", std::vector<Operand>{in("x", nullptr, empty), out("y", nullptr, empty)}).ok())
      << "empty tensors may be null";
}

TEST(Operands, SelfOverlappingOutputs) {
  const Layout bcast = strided({4, 8}, {0, 1});
  EXPECT_FAILS_WITH(check_operands("op", std::vector<Operand>{out("y", fake_ptr(1), bcast)}), Status::InvalidProblem,
                    "y overlaps itself");
  const Layout one = strided({1, 1}, {0, 0});  // one element: a zero stride is harmless
  EXPECT_TRUE(check_operands("op", std::vector<Operand>{out("y", fake_ptr(1), one)}).ok());
}

TEST(Operands, InPlaceOnlyExactAndAligned) {
  // Exact in place on an aligned input: allowed.
  EXPECT_TRUE(
      check_operands("op", std::vector<Operand>{in("x", fake_ptr(0), kDense), out("y", fake_ptr(0), kDense)}).ok());
  // One element off: a partial overlap.
  EXPECT_FAILS_WITH(
      check_operands("op", std::vector<Operand>{in("x", fake_ptr(0), kDense), out("y", fake_ptr(0, 4), kDense)}),
      Status::InvalidProblem, "op: y overlaps x", "partial overlap");
  // Same memory, transposed view: not elementwise-safe.
  const Layout t = strided({4, 8}, {1, 4});
  EXPECT_FAILS_WITH(check_operands("op", std::vector<Operand>{in("x", fake_ptr(0), kDense), out("y", fake_ptr(0), t)}),
                    Status::InvalidProblem, "y overlaps x");
  // Exact in place, but one side is not aligned (a statistic, a parameter): refused.
  EXPECT_FAILS_WITH(
      check_operands("op", std::vector<Operand>{in("w", fake_ptr(0), kDense, false), out("y", fake_ptr(0), kDense)}),
      Status::InvalidProblem, "y overlaps w", "own memory");
  // Two outputs never share memory.
  EXPECT_FAILS_WITH(
      check_operands("op", std::vector<Operand>{out("a", fake_ptr(1), kDense), out("b", fake_ptr(1), kDense)}),
      Status::InvalidProblem, "a overlaps b");
}

TEST(Operands, InterleavedHalvesShareNoElement) {
  // The two halves of each row of a [4, 16] buffer: address ranges interleave, elements do not.
  const Layout half = strided({4, 8}, {16, 1});
  EXPECT_TRUE(
      check_operands("op", std::vector<Operand>{out("lo", fake_ptr(1), half), out("hi", fake_ptr(1, 8 * 4), half)})
          .ok());
}

}  // namespace
}  // namespace baracuda
