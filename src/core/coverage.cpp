#include "baracuda/core/coverage.hpp"

#include <utility>

namespace baracuda {
namespace detail {
namespace {
// A function-local static: registrars in other translation units may run before this file's
// globals are constructed.
std::vector<std::pair<const char*, CoverageFn>>& families() {
  static std::vector<std::pair<const char*, CoverageFn>> f;
  return f;
}
}  // namespace

bool register_coverage(const char* family, CoverageFn fn) {
  families().emplace_back(family, fn);
  return true;
}
}  // namespace detail

std::vector<CoverageRow> coverage(const Target& target) {
  std::vector<CoverageRow> rows;
  for (const auto& [family, fn] : detail::families()) fn(target, rows);
  return rows;
}

}  // namespace baracuda
