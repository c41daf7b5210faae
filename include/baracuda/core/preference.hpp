// What the caller asks of a plan. Every field is either honoured or makes select() fail with a
// message saying which field could not be honoured — never silently ignored.
#pragma once
#include "baracuda/core/sku.hpp"
#include "baracuda/core/status.hpp"

namespace baracuda {

enum class Tristate { Default, Require, Forbid };

struct PlanPreference {
  Backend backend = Backend::Any;          ///< force a backend; select fails if it cannot serve
  bool require_deterministic = false;      ///< refuse implementations that use atomics etc.
  bool require_bit_stable = false;         ///< refuse results that depend on launch config
  Tristate tf32 = Tristate::Default;       ///< f32 GEMM/conv: Require = use TF32, Forbid/Default = IEEE
  Tristate reduced_precision_reduction = Tristate::Default;  ///< f16/bf16 accumulate
  Tristate vectorized = Tristate::Default; ///< Forbid: never take the 16-byte path (testing)
};

/// Where a plan will run. select() needs only the architecture, so coverage listings can be
/// computed on a machine with no GPU (Target::offline).
struct Target {
  int device = -1;  ///< CUDA ordinal, -1 for none
  int sm = 90;      ///< compute capability * 10 (90 = Hopper)
  int num_sms = 132;
  /// The current CUDA device; fails with Status::NoDevice when there is none.
  static Result<Target> current();
  static Target offline(int sm = 90) { return Target{-1, sm, 132}; }
};

}  // namespace baracuda
