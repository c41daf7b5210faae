// What select() accepts, listed without a GPU: one row per family x op x direction x dtype.
// Each family contributes its rows through detail::register_coverage (a static registrar in the
// family's plan source), so `baracuda-info coverage`, the Python `coverage()` and the host tests
// all read one list.
#pragma once
#include <string>
#include <vector>

#include "baracuda/core/preference.hpp"
#include "baracuda/core/sku.hpp"

namespace baracuda {

struct CoverageRow {
  std::string family;  ///< "elementwise", "gemm", "norm", ...
  std::string op;      ///< the op's table name
  Direction direction = Direction::Forward;
  std::string dtype;   ///< "bf16", or "a->b" / "a,b->c" where input and output dtypes differ
  Backend backend = Backend::Native;
};

/// Every row whose plan select(target, ...) accepts, families in registration order.
std::vector<CoverageRow> coverage(const Target& target);

namespace detail {
using CoverageFn = void (*)(const Target&, std::vector<CoverageRow>&);
/// Called once per family at library load (static initializer); returns true.
bool register_coverage(const char* family, CoverageFn fn);
}  // namespace detail

}  // namespace baracuda
