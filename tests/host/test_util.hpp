// Helpers shared by the host tests: probe descriptors that pass every check except the one a
// test is about, fake device pointers (can_implement never dereferences them) and matchers.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "baracuda/core/coverage.hpp"
#include "baracuda/ops/elementwise.hpp"
#include "baracuda/ops/loss.hpp"

namespace baracuda::test {

/// A descriptor for `op` that select() accepts whenever `dt` is declared: every input [4, 5],
/// generators a [1, 1] output (linspace steps=1, eye cols=1 match it).
inline ElementwiseDesc probe_desc(ElementwiseOp op, DType dt, Direction dir = Direction::Forward) {
  const auto& in = info(op);
  if (in.nin == 0) return ElementwiseDesc::make(op, dt, {Shape::of({1, 1})}, dir);
  switch (in.nin) {
    case 1:
      return ElementwiseDesc::make(op, dt, {Shape::of({4, 5})}, dir);
    case 2:
      return ElementwiseDesc::make(op, dt, {Shape::of({4, 5}), Shape::of({4, 5})}, dir);
    default:
      return ElementwiseDesc::make(op, dt, {Shape::of({4, 5}), Shape::of({4, 5}), Shape::of({4, 5})}, dir);
  }
}

/// A loss descriptor select() accepts whenever `dt` is declared: [4, 8] inputs (class rows for
/// the class-index losses, one target per row where the op takes one), linear + CE as
/// x [4, 8], weight [16, 8], target [4].
inline LossDesc loss_probe(const LossOpInfo& in, DType dt, Direction dir) {
  if (in.kind == LossKind::classes) {
    LossDesc d = LossDesc::cross_entropy(dt, Shape::of({4, 8}), DType::s64, false, Reduction::mean, -100, 0.0, dir);
    d.op = in.op;
    return d;
  }
  if (in.kind == LossKind::linear)
    return LossDesc::make(in.op, dt, {Shape::of({4, 8}), Shape::of({16, 8}), Shape::of({4})}, Reduction::mean, dir);
  LossDesc d = LossDesc::make(in.op, dt, {}, Reduction::mean, dir);
  for (int k = 0; k < in.num_inputs(); ++k)
    if (!in.input_optional(k)) {
      d.shapes[k] = Shape::of({4, 8});
      d.present |= uint8_t(1u << k);
    }
  if (in.op == LossOp::cosine_embedding_loss || in.op == LossOp::multi_margin_loss)
    d.shapes[in.input_index("target")] = Shape::of({4});  // one per row
  return d;
}

/// A distinct, 256-byte aligned fake device address per slot; never dereferenced.
inline void* fake_ptr(int slot, int64_t byte_offset = 0) {
  return reinterpret_cast<void*>(uintptr_t{0x7f0000000000} + uintptr_t(slot) * (uintptr_t{1} << 32) +
                                 static_cast<uintptr_t>(byte_offset));
}

inline TensorRef ref(int slot, DType dt, std::initializer_list<int64_t> shape) {
  return make_ref(fake_ptr(slot), dt, shape);
}
inline TensorMut mut(int slot, DType dt, std::initializer_list<int64_t> shape) {
  return make_mut(fake_ptr(slot), dt, shape);
}

/// Fake tensors with an explicit layout (and byte offset into the slot).
inline TensorRef ref_of(int slot, DType dt, const Layout& l, int64_t byte_offset = 0) {
  return TensorRef{fake_ptr(slot, byte_offset), dt, l};
}
inline TensorMut mut_of(int slot, DType dt, const Layout& l, int64_t byte_offset = 0) {
  return TensorMut{fake_ptr(slot, byte_offset), dt, l};
}

/// Layout with explicit strides.
inline Layout strided(std::initializer_list<int64_t> shape, std::initializer_list<int64_t> stride) {
  Layout l;
  l.rank = static_cast<int>(shape.size());
  int d = 0;
  for (auto s : shape) l.shape[d++] = s;
  d = 0;
  for (auto s : stride) l.stride[d++] = s;
  return l;
}

}  // namespace baracuda::test

/// EXPECT that a Result failed with `code` and a message containing every one of the needles.
#define EXPECT_FAILS_WITH(result, code, ...)                                           \
  do {                                                                                 \
    const auto& r_ = (result);                                                         \
    EXPECT_FALSE(r_.ok()) << "expected failure";                                       \
    EXPECT_EQ(r_.status(), (code)) << to_string(r_.status()) << ": " << r_.message();  \
    for (const std::string& needle_ : std::initializer_list<std::string>{__VA_ARGS__}) \
      EXPECT_NE(r_.message().find(needle_), std::string::npos)                         \
          << "message '" << r_.message() << "' does not mention '" << needle_ << "'";  \
  } while (0)

namespace baracuda::test {
/// The preferences every native, deterministic family plan treats alike: a vendor backend,
/// tf32=Require and reduced_precision_reduction=Require are refused (messages naming them and
/// `op`), determinism and bit-stability are granted, and an sm_75 target is refused. Returns
/// the plan selected with determinism required, for family-specific checks.
template <class Plan, class Desc>
auto expect_native_preferences(const Target& target, const Desc& d, const char* op) {
  PlanPreference p;
  p.backend = Backend::CuDnn;
  EXPECT_FAILS_WITH(Plan::select(target, d, p), Status::Unsupported, op, "backend");
  p = {};
  p.tf32 = Tristate::Require;
  EXPECT_FAILS_WITH(Plan::select(target, d, p), Status::Unsupported, "tf32=Require");
  p = {};
  p.reduced_precision_reduction = Tristate::Require;
  EXPECT_FAILS_WITH(Plan::select(target, d, p), Status::Unsupported, "reduced_precision_reduction");
  EXPECT_FAILS_WITH(Plan::select(Target::offline(75), d), Status::Unsupported, "sm_75");
  p = {};
  p.require_deterministic = p.require_bit_stable = true;
  p.backend = Backend::Native;
  auto ok = Plan::select(target, d, p);
  EXPECT_TRUE(ok.ok()) << ok.message();
  if (ok.ok()) {
    EXPECT_TRUE(ok->precision().deterministic);
    EXPECT_TRUE(ok->precision().bit_stable);
  }
  return ok;
}
}  // namespace baracuda::test

namespace baracuda::test {
/// Whether the coverage list has the row (family, op, direction, dtype).
inline bool has_coverage_row(const std::vector<CoverageRow>& rows, const char* family, const char* op, Direction dir,
                             const std::string& dtype) {
  for (const CoverageRow& r : rows)
    if (r.family == family && r.op == op && r.direction == dir && r.dtype == dtype) return true;
  return false;
}
}  // namespace baracuda::test
