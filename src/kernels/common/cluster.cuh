// Thread-block cluster pieces shared by the kernels that spread one row over a cluster (the fused
// cross-entropy kernel, the norm family's cluster rows): the split cluster barrier and a
// launcher with the cluster dimension that falls back when the device or the loaded code cannot
// run clusters. Device parts compile for sm_90+ only; callers guard them with __CUDA_ARCH__.
#pragma once
#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>

namespace baracuda::kern {

/// barrier.cluster split in its two halves: arrive (release: this thread's earlier writes, the
/// CTA's partial among them, become visible to the cluster's acquiring waiters; its earlier reads
/// of other CTAs' shared memory are done) and wait (acquire: returns once every non-exited thread
/// of the cluster arrived). .aligned: the whole warp executes each, converged (callers __syncwarp
/// after divergent code).
__device__ __forceinline__ void cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}
/// The arrival of a thread that published nothing and read no other CTA's shared memory since its
/// last wait: no release, so no memory barrier waiting for its outstanding global stores.
__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }

/// The cluster geometry along x from the special registers (a launch without clusters is one of
/// (1, 1, 1) clusters, so these read rank 0 of 1, cluster = blockIdx.x, clusters = gridDim.x).
/// Plain (non-volatile) reads: the compiler may re-read them rather than hold them in registers.
/// Before sm_90 there are no clusters: the same values from blockIdx/gridDim.
enum class ClusterReg { rank, ctas, index_x, count_x };
template <ClusterReg R>
__device__ __forceinline__ unsigned cluster_reg() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  unsigned r;
  if constexpr (R == ClusterReg::rank)
    asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  else if constexpr (R == ClusterReg::ctas)
    asm("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
  else if constexpr (R == ClusterReg::index_x)
    asm("mov.u32 %0, %%clusterid.x;" : "=r"(r));
  else
    asm("mov.u32 %0, %%nclusterid.x;" : "=r"(r));
  return r;
#else
  if constexpr (R == ClusterReg::rank) return 0;
  if constexpr (R == ClusterReg::ctas) return 1;
  if constexpr (R == ClusterReg::index_x) return blockIdx.x;
  return gridDim.x;
#endif
}

/// The pair (a, b) of M (float or double) at `local` in this CTA's shared memory, read from the
/// same offset in the shared memory of cluster CTA `rank` (mapa + ld.shared::cluster: 32-bit
/// shared-window addresses, not the 64-bit generic ones map_shared_rank hands out, which held
/// more registers in the norm kernel's merge).
template <class M>
__device__ __forceinline__ void dsmem_load_pair(const M* local, unsigned rank, M& a, M& b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const unsigned sa = static_cast<unsigned>(__cvta_generic_to_shared(local));
  unsigned ra;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(sa), "r"(rank));
  if constexpr (sizeof(M) == 4)
    asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];" : "=f"(a), "=f"(b) : "r"(ra) : "memory");
  else
    asm volatile("ld.shared::cluster.v2.f64 {%0, %1}, [%2];" : "=d"(a), "=d"(b) : "r"(ra) : "memory");
#else
  a = local[0];
  b = local[1];
#endif
}

/// Whether kKernel can run as clusters on the current device: its loaded code is sm_90+ and the
/// non-portable cluster sizes (up to 16) are allowed; with `smem_bytes` > 0 also its dynamic
/// shared-memory opt-in to that size and the largest shared-memory carve-out (for a kernel whose
/// dynamic shared memory is a constant). Once per device (devices past 63 ask every time); any
/// failed call means no (the error is cleared).
template <auto kKernel>
bool cluster_ready(int smem_bytes = 0) {
  static std::atomic<int> state[64];  // 0 unknown, 1 ready, 2 not
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0) {
    (void)cudaGetLastError();
    return false;
  }
  if (dev < 64) {
    const int s = state[dev].load(std::memory_order_acquire);
    if (s != 0) return s == 1;
  }
  cudaFuncAttributes fa{};
  const bool ready =
      cudaFuncGetAttributes(&fa, kKernel) == cudaSuccess && fa.binaryVersion >= 90 &&
      (fa.ptxVersion >= 90 || fa.ptxVersion == 0) &&
      cudaFuncSetAttribute(kKernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess &&
      (smem_bytes == 0 ||
       (cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes) == cudaSuccess &&
        cudaFuncSetAttribute(kKernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared) ==
            cudaSuccess));
  if (!ready) (void)cudaGetLastError();
  if (dev < 64) state[dev].store(ready ? 1 : 2, std::memory_order_release);
  return ready;
}

/// cudaLaunchKernelEx's configuration for (ctas, 1, 1) clusters on `grid` (attr: its storage).
inline cudaLaunchConfig_t cluster_config(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, int ctas,
                                         cudaLaunchAttribute (&attr)[1]) {
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(ctas);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cfg;
}

/// Launches kKernel(args...) as (ctas, 1, 1) clusters (grid.x a multiple of ctas). Returns false,
/// the error cleared, where the kernel has no cluster-capable code or the device refuses the
/// configuration (too large a cluster for its GPCs, a MIG slice): the caller then launches its
/// cluster-free variant.
template <auto kKernel, class... A>
bool launch_cluster(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, int ctas, A... args) {
  if (!cluster_ready<kKernel>()) return false;
  cudaLaunchAttribute attr[1];
  const cudaLaunchConfig_t cfg = cluster_config(grid, block, smem, stream, ctas, attr);
  if (cudaLaunchKernelEx(&cfg, kKernel, args...) != cudaSuccess) {
    (void)cudaGetLastError();  // a refused configuration is not sticky
    return false;
  }
  return true;
}

}  // namespace baracuda::kern
