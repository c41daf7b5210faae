// See lut16.hpp.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <numeric>
#include <tuple>
#include <vector>

#include "kernels/common/smem_optin.cuh"
#include "ops/elementwise/lut16.hpp"

namespace baracuda::detail {
namespace {

constexpr int kLutThreads = 1024;     // one CTA an SM (the table takes 128 KiB of shared memory)
constexpr int kLutTaskVecs = 4;       // 16-byte vectors a thread a task: 64 KiB a task, all loads then all stores
constexpr int kLutWords = 65536 / 8;  // the table as uint4
constexpr size_t kLutSmemBytes = 65536 * sizeof(uint16_t);
constexpr int kMaxTablesPerEntry = 16;  // parameter sets a (device, op, dtype) keeps tables for

__device__ __forceinline__ uint32_t lut_pair(const uint16_t* t, uint32_t w) {
  return static_cast<uint32_t>(t[w & 0xffffu]) | (static_cast<uint32_t>(t[w >> 16]) << 16);
}
__device__ __forceinline__ uint4 lut_word(const uint16_t* t, const uint4 v) {
  return make_uint4(lut_pair(t, v.x), lut_pair(t, v.y), lut_pair(t, v.z), lut_pair(t, v.w));
}

/// One CTA an SM takes 64 KiB tasks until none are left: its first is blockIdx.x, the others come
/// from a counter (zeroed before the launch) as gridDim.x + the count. The CTAs so work through
/// the tensor in the order the hardware would dispatch small CTAs, and the addresses in flight
/// across the GPU stay within a narrow window. A static split does not keep that: H200, 2^27 bf16
/// (devx driver, same process): static grid-stride tasks 142-151 us (the previous kernel, a
/// register double buffer of two loads, 148-150; a bulk-copy ring with 64-96 KiB in flight 148),
/// counter-claimed tasks 136.4 (copy-only 134.8-136.5; many 128-thread CTAs copying 131.6-133).
/// Two-vector tasks claimed the same way ran 146.6. The first task's loads are issued before the
/// table is staged; thread 0 claims the next task while the CTA works on the current one (s_task
/// double buffer; the barrier closing a task orders the slot's reuse).
__global__ void __launch_bounds__(kLutThreads, 1)
    lut16_kernel(const uint4* __restrict__ table, const uint4* __restrict__ in, uint4* __restrict__ out, int64_t nvec,
                 const uint16_t* __restrict__ in_tail, uint16_t* __restrict__ out_tail, int tail,
                 unsigned* __restrict__ next_task) {
  extern __shared__ uint4 smem[];
  __shared__ unsigned s_task[2];
  constexpr int64_t kTask = int64_t(kLutThreads) * kLutTaskVecs;
  const int64_t ntask = (nvec + kTask - 1) / kTask;
  auto load = [&](int64_t task, uint4 (&v)[kLutTaskVecs]) {
    const int64_t base = task * kTask + threadIdx.x;
#pragma unroll
    for (int u = 0; u < kLutTaskVecs; ++u)
      v[u] = base + u * kLutThreads < nvec ? __ldcs(in + base + u * kLutThreads) : uint4{};
  };
  uint4 v[kLutTaskVecs];
  int64_t task = blockIdx.x;  // < ntask: the grid is at most ntask CTAs
  load(task, v);
  if (threadIdx.x == 0) s_task[1] = gridDim.x + atomicAdd(next_task, 1u);
  for (int k = threadIdx.x; k < kLutWords; k += kLutThreads) smem[k] = __ldg(table + k);
  __syncthreads();
  const uint16_t* t = reinterpret_cast<const uint16_t*>(smem);
  for (int it = 1;; it ^= 1) {
    const int64_t base = task * kTask + threadIdx.x;
#pragma unroll
    for (int u = 0; u < kLutTaskVecs; ++u)
      if (base + u * kLutThreads < nvec) __stcs(out + base + u * kLutThreads, lut_word(t, v[u]));
    task = s_task[it];
    if (task >= ntask) break;
    if (threadIdx.x == 0) s_task[it ^ 1] = gridDim.x + atomicAdd(next_task, 1u);
    load(task, v);
    __syncthreads();
  }
  if (blockIdx.x == 0 && threadIdx.x < tail) out_tail[threadIdx.x] = t[in_tail[threadIdx.x]];
}

struct TableKey {
  int device;
  const EwEntry* entry;
  std::array<double, 4> params;
  bool operator<(const TableKey& o) const {
    return std::tie(device, entry, params) < std::tie(o.device, o.entry, o.params);
  }
};

/// Builds the table on a private stream. Relaxed capture mode for the duration: a graph capture
/// under way in another thread must neither refuse these calls nor be invalidated by them. Only
/// calls that cannot touch a captured stream: an allocation, a non-blocking stream of our own, its
/// copy, launch and synchronize. The allocation is kept whole ([iota | table], 256 KiB): freeing
/// the iota half would need cudaFree, which may synchronize the device.
uint16_t* build_table(const EwEntry* e, const EwParams& p) {
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  if (cudaThreadExchangeStreamCaptureMode(&mode) != cudaSuccess) return nullptr;
  uint16_t* buf = nullptr;
  cudaStream_t s = nullptr;
  bool ok = cudaMalloc(&buf, 2 * 65536 * sizeof(uint16_t)) == cudaSuccess &&
            cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess;
  if (ok) {
    std::vector<uint16_t> iota(65536);
    std::iota(iota.begin(), iota.end(), uint16_t{0});
    const int64_t n = 65536;
    TensorMut out{buf + 65536, e->out, Layout::contiguous(1, &n)};
    TensorRef in{buf, e->in, Layout::contiguous(1, &n)};
    const EwIter it =
        make_ew_iter(std::span<const TensorMut>(&out, 1), std::span<const TensorRef>(&in, 1), 1, &n, false);
    ok = cudaMemcpyAsync(buf, iota.data(), 65536 * sizeof(uint16_t), cudaMemcpyHostToDevice, s) == cudaSuccess &&
         e->launch(it, p, true, s) == cudaSuccess && cudaStreamSynchronize(s) == cudaSuccess;
  }
  if (s) cudaStreamDestroy(s);
  if (!ok) {
    (void)cudaGetLastError();  // the direct kernel runs instead; leave no sticky error
    buf = nullptr;             // (a failed build keeps its allocation, if any: at most once per key)
  }
  cudaThreadExchangeStreamCaptureMode(&mode);
  return ok ? buf + 65536 : nullptr;
}

}  // namespace

const uint16_t* ew_lut16_table(const EwEntry* e, const EwParams& p) {
  if (!e) return nullptr;
  int dev = -1;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  // The gather kernel keeps the table in shared memory: devices whose opt-in limit is below
  // 128 KiB (sm_86 / sm_89: 99 KiB) run the direct kernel. The kernel's own opt-in answers that
  // (and makes the launch's later call a cached comparison).
  if (kern::allow_smem<lut16_kernel>(kLutSmemBytes) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  static std::mutex m;
  static std::map<TableKey, uint16_t*> tables;  // process lifetime, like the vendor handle caches
  TableKey key{dev, e, {p.d[0], p.d[1], p.d[2], p.d[3]}};
  const std::lock_guard<std::mutex> lock(m);
  auto it = tables.find(key);
  if (it == tables.end()) {
    // A sweep over a float parameter (a softplus beta schedule) would otherwise add a table and a
    // synchronizing build per value: past kMaxTablesPerEntry parameter sets of one (device, op,
    // dtype) the plan keeps the direct kernel.
    int same = 0;
    for (const auto& kv : tables) same += kv.first.device == dev && kv.first.entry == e;
    if (same >= kMaxTablesPerEntry) return nullptr;
    it = tables.emplace(key, build_table(e, p)).first;  // a failure is remembered too
  }
  return it->second;
}

/// Thread instructions an element of the 16-bit forward unary ops whose direct kernel can be
/// issue-bound (sm_90a, their short forms); 0 for the others. lgamma / digamma / polygamma are
/// compute-bound on any device (H100, 2^27 bf16: 61%, 83%, 54% of copy bandwidth). The trig /
/// erf / log / softplus group costs ~32-38, estimated from the H200's fraction of copy bandwidth
/// (73-88% against its budget of ~28); on an H100 (budget ~40) it is memory-bound
/// (95-98%) and keeps the direct kernel.
int ew_lut16_cost(ElementwiseOp op) {
  using E = ElementwiseOp;
  switch (op) {
    case E::lgamma:
    case E::digamma:
    case E::polygamma:
      return 1000;
    case E::sin:
    case E::cos:
    case E::tan:
    case E::asin:
    case E::acos:
    case E::erf:
    case E::erfc:
    case E::sinc:
    case E::log2:
    case E::log10:
    case E::softplus:
      return 32;
    default:
      return 0;
  }
}
int ew_issue_budget_of(int sms, int sm_khz, int mem_khz, int bus_bits) {
  if (sms <= 0 || sm_khz <= 0 || mem_khz <= 0 || bus_bits <= 0) return 0;
  // Peak DRAM bytes a second (double data rate) over the 4 bytes a 16-bit unary element moves;
  // an SM issues 4 warp instructions (128 thread instructions) a clock.
  const double elems_per_s = 2.0 * mem_khz * 1e3 * (bus_bits / 8.0) / 4.0;
  return std::max(1, static_cast<int>(128.0 * sms * sm_khz * 1e3 / elems_per_s));
}

int ew_issue_budget(int device) {
  static std::atomic<int> cache[64];  // 0: not asked yet
  if (device < 0) return 0;
  if (device < 64)
    if (const int b = cache[device].load(std::memory_order_relaxed)) return b;
  int sms = 0, sm_khz = 0, mem_khz = 0, bus_bits = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sm_khz, cudaDevAttrClockRate, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  const int b = ew_issue_budget_of(sms, sm_khz, mem_khz, bus_bits);
  if (device < 64 && b > 0) cache[device].store(b, std::memory_order_relaxed);
  return b;
}

cudaError_t ew_lut16_launch(const uint16_t* table, const void* in, void* out, int64_t n, int num_sms,
                            void* task_counter, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (const cudaError_t e = kern::allow_smem<lut16_kernel>(kLutSmemBytes); e != cudaSuccess) return e;
  const int64_t nvec = n / 8;
  const int tail = static_cast<int>(n - nvec * 8);
  const int64_t ntask = (nvec + int64_t(kLutThreads) * kLutTaskVecs - 1) / (int64_t(kLutThreads) * kLutTaskVecs);
  const unsigned grid = static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(ntask, num_sms)));
  if (const cudaError_t e = cudaMemsetAsync(task_counter, 0, sizeof(unsigned), stream); e != cudaSuccess) return e;
  lut16_kernel<<<grid, kLutThreads, kLutSmemBytes, stream>>>(
      reinterpret_cast<const uint4*>(table), static_cast<const uint4*>(in), static_cast<uint4*>(out), nvec,
      static_cast<const uint16_t*>(in) + nvec * 8, static_cast<uint16_t*>(out) + nvec * 8, tail,
      static_cast<unsigned*>(task_counter));
  return cudaGetLastError();
}

}  // namespace baracuda::detail
