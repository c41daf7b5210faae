// oneDNN-style ordered implementation lists: select() asks each implementation in preference
// order; the first that accepts wins, and when none does the error lists every refusal.
#pragma once
#include <span>
#include <string>
#include <string_view>

#include "baracuda/core/status.hpp"

namespace baracuda::detail {

template <class Impl, class... Args>
Result<const Impl*> first_accepting(std::string_view op, std::span<const Impl> impls, const Args&... args) {
  if (impls.size() == 1) {  // one candidate: its own refusal is the clearest message
    auto r = impls[0].accepts(args...);
    if (!r) return r.error();
    return &impls[0];
  }
  std::string why;
  for (const Impl& impl : impls) {
    auto r = impl.accepts(args...);
    if (r) return &impl;
    why += "\n  - " + std::string(impl.name) + ": " + r.message();
  }
  return make_error(Status::Unsupported, std::string(op) + ": no implementation accepts this problem:" + why);
}

}  // namespace baracuda::detail
