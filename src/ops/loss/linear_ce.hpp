// linear_cross_entropy's half of LossPlan (linear.cpp): the chunk geometry, the GEMM plans of a
// full chunk and of the last, shorter one, and the launch sequence. LossPlan keeps one behind a
// shared pointer and forwards can_implement / run / layout_for to it. Host-only C++.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "baracuda/ops/gemm.hpp"
#include "baracuda/ops/loss.hpp"

namespace baracuda::detail {

/// Bytes of workspace the [T, V] logits chunk may take when the plan chooses T (chunk_tokens = 0).
inline constexpr size_t kLinearCeLogitsBudget = size_t{512} << 20;

class LinearCe {
 public:
  /// The chunking, the cross-entropy launch shape and the GEMM plans for `d` (validated by
  /// LossPlan::select). The GEMMs are selected with `pref` (backend, tf32, bit-stability) and
  /// require_deterministic always (no atomics-based split-K): the plan is deterministic.
  static Result<std::shared_ptr<const LinearCe>> select(const Target& target, const LossDesc& d,
                                                        const PlanPreference& pref);
  Result<void> can_implement(const LossDesc& d, const LossArgs& a) const;
  /// can_implement and the workspace size are checked by LossPlan::run.
  Result<void> run(const LossDesc& d, cudaStream_t stream, Workspace ws, const LossArgs& a) const;
  std::string layout_for(const LossDesc& d, const LossArgs& a) const;
  const KernelSku& sku() const { return sku_; }
  const LossPlan::Config& config() const { return cfg_; }
  size_t workspace_size() const { return workspace_; }

 private:
  /// GEMMs of one chunk size: logits = hidden_c * weight^T, grad_input_c = dlogits * weight,
  /// grad_weight = dlogits^T * hidden_c (+ grad_weight: beta = 1 after the first chunk).
  struct ChunkGemms {
    std::optional<GemmPlan> logits, dinput, dweight_first, dweight_next;
  };
  int64_t n_ = 0, h_ = 0, v_ = 0;
  int64_t chunk_ = 0, chunks_ = 0, tail_ = 0;  ///< tokens a chunk, chunks, tokens of the last
  bool grads_ = false;                         ///< the plan writes gradients (fused forward, backward)
  bool allow_vectorized_ = true;
  ChunkGemms full_, last_;  ///< last_: the shorter final chunk (unset when T divides N)
  size_t off_rows_ = 0, off_weight_rows_ = 0, off_partial_ = 0, off_scratch_ = 0, off_gemm_ = 0;
  size_t workspace_ = 0;
  LossPlan::Config cfg_;
  KernelSku sku_;
};

}  // namespace baracuda::detail
