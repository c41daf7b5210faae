// The large dynamic shared-memory opt-in of a kernel, once per kernel and device: a kernel whose
// static + dynamic shared memory passes 48 KiB must raise its limit with cudaFuncSetAttribute
// before the launch. Host code only (the kernels' launchers), legal during stream capture.
#pragma once
#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace baracuda::kern {

/// Makes `dynamic_bytes` of dynamic shared memory launchable for kKernel on the current device:
/// the first launch with any dynamic shared memory on a device raises kKernel's limit to the
/// device's opt-in maximum minus its static shared memory (one attribute query and one set);
/// later ones only compare with that limit. cudaErrorInvalidValue when the request exceeds it.
/// Devices past 63 redo the calls every time.
template <auto kKernel>
cudaError_t allow_smem(size_t dynamic_bytes) {
  if (dynamic_bytes == 0) return cudaSuccess;
  static std::atomic<uint64_t> done{0};
  static std::atomic<size_t> limit[64];
  int dev = 0;
  if (const cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) return e;
  const uint64_t bit = dev >= 0 && dev < 64 ? uint64_t{1} << dev : 0;
  if (bit && (done.load(std::memory_order_acquire) & bit))
    return dynamic_bytes <= limit[dev].load(std::memory_order_relaxed) ? cudaSuccess : cudaErrorInvalidValue;
  int optin = 0;
  if (const cudaError_t e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
      e != cudaSuccess)
    return e;
  cudaFuncAttributes attr{};
  if (const cudaError_t e = cudaFuncGetAttributes(&attr, kKernel); e != cudaSuccess) return e;
  const size_t max_dynamic = static_cast<size_t>(optin) > attr.sharedSizeBytes ? optin - attr.sharedSizeBytes : 0;
  if (const cudaError_t e =
          cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(max_dynamic));
      e != cudaSuccess)
    return e;
  if (bit) {
    limit[dev].store(max_dynamic, std::memory_order_relaxed);
    done.fetch_or(bit, std::memory_order_release);
  }
  return dynamic_bytes <= max_dynamic ? cudaSuccess : cudaErrorInvalidValue;
}

}  // namespace baracuda::kern
