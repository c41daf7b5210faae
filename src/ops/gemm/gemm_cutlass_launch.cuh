// What the GEMM family's CUTLASS sm90 kernels (gemm_cutlass_int8.cuh, gemm_cutlass_grouped.cuh)
// share at launch: the cluster launch configuration and the once-per-device preparation (the
// shared-memory opt-in and, for persistent grids, how many clusters fit at once). Included only
// inside their BARACUDA_HAVE_CUTLASS sections.
#pragma once
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

namespace baracuda::detail::cutlass_launch {

/// cudaLaunchKernelEx's configuration for K's kernel (K::Gemm, K::kTile.cluster_m/n) on `grid`.
template <class K>
cudaLaunchConfig_t cluster_config(dim3 grid, cudaStream_t stream, cudaLaunchAttribute (&attr)[1]) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = K::Gemm::get_block_shape();
  cfg.dynamicSmemBytes = static_cast<int>(K::Gemm::SharedStorageSize);
  cfg.stream = stream;
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = K::kTile.cluster_m;
  attr[0].val.clusterDim.y = K::kTile.cluster_n;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cfg;
}

/// Once per device for `kernel` (host-side calls, legal during stream capture, no reason to repeat
/// them): opt in to K's large shared-memory carve-out and, when `count_clusters`, ask how many
/// clusters fit at once (*clusters; 0 when the query fails or was not asked), so that a persistent
/// grid has no cluster waiting for a whole wave of others (GPCs need not hold an even number of
/// free SMs). Devices past 63 redo the calls every time.
template <class K, auto kernel>
cudaError_t prepare_once(int device, cudaStream_t stream, bool count_clusters, int* clusters) {
  static std::atomic<uint64_t> ready{0};
  static std::atomic<int> max_clusters[64];
  const uint64_t bit = device >= 0 && device < 64 ? uint64_t{1} << device : 0;
  *clusters = 0;
  if (bit && (ready.load(std::memory_order_acquire) & bit)) {
    *clusters = max_clusters[device].load(std::memory_order_relaxed);
    return cudaSuccess;
  }
  const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(K::Gemm::SharedStorageSize));
  if (e != cudaSuccess) return e;
  if (count_clusters) {
    cudaLaunchAttribute attr[1];
    const cudaLaunchConfig_t cfg = cluster_config<K>(dim3(K::kTile.cluster_m, K::kTile.cluster_n, 1), stream, attr);
    if (cudaOccupancyMaxActiveClusters(clusters, kernel, &cfg) != cudaSuccess) {
      (void)cudaGetLastError();  // not sticky; the caller falls back to CUTLASS's GPC heuristic
      *clusters = 0;
    }
  }
  if (bit) {
    max_clusters[device].store(*clusters, std::memory_order_relaxed);
    ready.fetch_or(bit, std::memory_order_release);
  }
  return cudaSuccess;
}

}  // namespace baracuda::detail::cutlass_launch
