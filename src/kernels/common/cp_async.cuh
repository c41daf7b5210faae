// cp.async (sm_80+): 16 bytes from global to shared memory without a register round trip, so a
// CTA staging a row or a line keeps all of it in flight at once instead of one load a thread per
// trip. One definition for every family that stages through shared memory (norm's channel rows,
// the loss cluster kernel, the staged gather).
#pragma once
#include <cuda_runtime.h>

namespace baracuda::kern {

/// cp.async.cg: cached in L2 only. The executing thread's own later reads see the bytes once its
/// commit group is complete (or after cp_async_wait_all); other threads after a barrier too.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned sa = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(sa), "l"(gmem) : "memory");
}
/// Closes the thread's current group of cp.async copies (an empty group is legal and completes at once).
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
/// Waits until at most kPending of the thread's newest commit groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}
/// Waits for every cp.async the thread issued.
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

}  // namespace baracuda::kern
