#include <algorithm>
#include <mutex>
#include <tuple>

#include "ops/elementwise/ew_registry.hpp"

namespace baracuda::detail {

namespace {
auto key(const EwEntry& e) { return std::make_tuple(e.op, e.dir, e.in, e.out); }

const std::vector<EwEntry>& table() {
  static const std::vector<EwEntry> v = [] {
    std::vector<EwEntry> r = ew_pending();
    std::sort(r.begin(), r.end(), [](const EwEntry& a, const EwEntry& b) { return key(a) < key(b); });
    return r;
  }();
  return v;
}
}  // namespace

std::vector<EwEntry>& ew_pending() {
  static std::vector<EwEntry> v;
  return v;
}

std::span<const EwEntry> ew_registry() { return table(); }

const EwEntry* ew_find(ElementwiseOp op, Direction dir, DType in, DType out) {
  const auto& t = table();
  const EwEntry probe{op, dir, in, out, nullptr, 0};
  auto it = std::lower_bound(t.begin(), t.end(), probe, [](const EwEntry& a, const EwEntry& b) { return key(a) < key(b); });
  if (it == t.end() || key(*it) != key(probe)) return nullptr;
  return &*it;
}

}  // namespace baracuda::detail
