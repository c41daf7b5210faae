// What every family's plan.cpp shares: the error constructors, dtype lists for messages, and the
// per-thread plan cache behind each family's one-line convenience function (`elementwise()`,
// `norm()`, `gemm()`, ...).
#pragma once
#include <cuda_runtime_api.h>

#include <map>
#include <unordered_map>
#include <optional>
#include <string>
#include <utility>

#include "baracuda/core/dtype.hpp"
#include "baracuda/core/preference.hpp"
#include "baracuda/core/status.hpp"

namespace baracuda::detail {

inline Error invalid(std::string msg) { return make_error(Status::InvalidProblem, std::move(msg)); }
inline Error unsupported(std::string msg) { return make_error(Status::Unsupported, std::move(msg)); }

/// "float32, bfloat16" (or "none"), for "expected one of {...}" messages.
std::string dtype_list(DTypeSet set);

/// The bytes of every PlanPreference field (part of a plan-cache key).
std::string preference_key(const PlanPreference& p);

/// Selects (once per thread, current device, descriptor key and preference) and returns the
/// cached plan. `select(target)` returns Result<Plan>. Bounded: cleared past 4096 entries.
template <class Plan, class SelectFn>
Result<const Plan*> cached_plan(const std::string& desc_key, const PlanPreference& pref, SelectFn&& select) {
  thread_local std::unordered_map<std::string, Plan> cache;  // hashed: this lookup is on every call's path
  thread_local std::map<int, Target> targets;  // the caller may switch devices between calls
  int dev = -1;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    dev = -1;
  }
  auto tgt = targets.find(dev);
  if (tgt == targets.end()) {
    auto t = Target::current();
    if (!t) return t.error();
    tgt = targets.emplace(dev, *t).first;
  }
  const Target* target = &tgt->second;
  std::string key;
  const std::string pk = preference_key(pref);
  key.reserve(desc_key.size() + pk.size() + sizeof(dev));
  key.append(desc_key).append(pk).append(reinterpret_cast<const char*>(&dev), sizeof(dev));
  auto found = cache.find(key);
  if (found == cache.end()) {
    Result<Plan> plan = select(*target);
    if (!plan) return plan.error();
    if (cache.size() > 4096) cache.clear();
    found = cache.emplace(std::move(key), std::move(plan.value())).first;
  }
  return &found->second;
}

}  // namespace baracuda::detail
