// The fused cross_entropy forward + gradient (class-index targets) for rows longer than one CTA
// holds, on Hopper thread-block clusters: ONE read of the logits and one write of the gradient.
// The streaming fused kernel (class_kernel.cuh) reads every row twice and relies on L2 keeping it
// in between; with one 512-thread CTA an SM that re-read did not pay off (H100, [8192, 128256]
// bf16: 3.1 ms against 2.3 ms for forward + recomputing backward).
//
// A row of C classes is split over a cluster of S CTAs (2..16; more than 8 is a non-portable
// cluster size, allowed through cudaFuncAttributeNonPortableClusterSizeAllowed), one row a
// cluster: CTA r owns the contiguous segment [r * seg, min(C, (r + 1) * seg)), seg = ceil(C / S)
// rounded up to a 16-byte vector. Each of the kClusterThreads threads copies kClusterVecs 16-byte
// vectors of the segment to shared memory with cp.async (vector u of thread t at (t + u *
// kClusterThreads) * kV: every instruction of a warp moves 512 contiguous bytes), 32 KB a CTA
// whatever the dtype (16384 bf16: S = 8 covers 131072 classes, S = 16 covers 262144). The
// segment stays there, not in registers: ptxas keeps 32 widened floats live across the exchange
// instead of 16 packed words (~90 registers, spills under two CTAs an SM), while shared memory
// costs no register and is re-read at 128 bytes a cycle. Then:
//
//   1. each thread reduces its vectors to (max, sum exp(x - max)) and, for label smoothing, the
//      sums of w_c x_c and w_c; a shuffle butterfly per warp and one over the 16 warp partials
//      (fixed trees) give the CTA's partial, stored in shared memory;
//   2. cluster barrier (arrive.release + wait.acquire): every partial is visible cluster-wide;
//   3. every warp reads the S partials through distributed shared memory (map_shared_rank; lane l
//      reads rank l mod 16) and merges them with a fixed butterfly: every CTA computes the row's
//      log-sum-exp from the same partials in the same order, so the result depends on (C, S)
//      only, never on scheduling;
//   4. a relaxed arrive on the cluster barrier (this CTA has consumed the others' partials), the
//      gradient of the segment (the thread holding the target's logit also writes the row's loss),
//      and the barrier's wait last: no CTA exits while another may still read its partial, and the
//      wait costs nothing by then because every CTA arrived before its own stores.
//
// Rows whose target is ignore_index (gradient 0) or out of range (NaN) read nothing and skip the
// exchange; the condition is the same in every CTA of the cluster (all read the same target), so
// the barriers stay uniform. Launch bounds (512, 2): two CTAs an SM, so one CTA's exchange and
// stores overlap the other's loads. The mean's divisor comes from target_weight_kernel before the
// launch (device memory, no host round trip) and per-row losses go to the fixed-order two-stage
// sum, as in the streaming kernel. Hopper only: the body exists in the sm_90+ compilations; the
// sm_80 pass compiles a trap, and the host launches the kernel only where its function attributes
// report sm_90+ code (cluster_kernel_ready), else the streaming fused kernel runs.
#pragma once
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <atomic>

#include "ops/loss/class_common.cuh"

namespace baracuda::kern::loss {

inline constexpr int kClusterThreads = detail::kLossClusterThreads;
inline constexpr int kClusterVecs = detail::kLossClusterVecs;
inline constexpr int kClusterMaxCtas = detail::kLossClusterMaxCtas;

/// Merge of `v` over `width` lanes (a power of two) by an xor butterfly: merge() is commutative
/// bit for bit (max, and sums of two products), so every lane of a group ends with the same bits.
template <bool kFast, class M>
__device__ __forceinline__ RowAcc<M> butterfly(RowAcc<M> v, int width) {
  for (int o = width / 2; o > 0; o >>= 1) {
    const RowAcc<M> u{__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o),
                      __shfl_xor_sync(0xffffffffu, v.a, o), __shfl_xor_sync(0xffffffffu, v.b, o)};
    v = merge<kFast>(v, u);
  }
  return v;
}

/// Element e (a constant after unrolling) of a 16-byte vector of T held as raw words, widened.
template <class T>
__device__ __forceinline__ opmath_t<T> raw_elem(const uint4& r, int e) {
  const uint32_t wd[4] = {r.x, r.y, r.z, r.w};
  if constexpr (sizeof(T) == 2) {
    const uint16_t bits = static_cast<uint16_t>(e & 1 ? wd[e / 2] >> 16 : wd[e / 2] & 0xffffu);
    T h;
    memcpy(&h, &bits, sizeof(h));
    return load_as_opmath(h);
  } else if constexpr (sizeof(T) == 4) {
    return __uint_as_float(wd[e]);
  } else {
    return __hiloint2double(static_cast<int>(wd[2 * e + 1]), static_cast<int>(wd[2 * e]));
  }
}

/// A 16-byte vector of T whose every element is -inf (the lanes past a segment's end: no term in
/// the max or the sum, so the reduction loops need no predicate).
template <class T>
__device__ __forceinline__ uint4 neg_inf_raw() {
  if constexpr (sizeof(T) == 2) {
    constexpr uint32_t h = cuda::std::is_same_v<T, __half> ? 0xfc00u : 0xff80u;
    return make_uint4(h | h << 16, h | h << 16, h | h << 16, h | h << 16);
  } else if constexpr (sizeof(T) == 4) {
    return make_uint4(0xff800000u, 0xff800000u, 0xff800000u, 0xff800000u);
  } else {
    return make_uint4(0u, 0xfff00000u, 0u, 0xfff00000u);
  }
}

/// 16 bytes from global to shared memory without a register round trip (cp.async.cg: L2 only;
/// the executing thread's own later reads see it after cp_async_wait_all).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned sa = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(sa), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

/// exp(x - c) for the segment's elements. 16-bit storage: one FFMA (x log2e - c log2e) and
/// ex2.approx.ftz (2 ulp; a term below 2^-126 of the row's scale flushes to 0, far below what a
/// 16-bit gradient or the sum resolves), against __expf's scaling of subnormal results (six
/// instructions an element: the kernel issues two exponentials an element and must stay under
/// the memory time). NaN and inf follow exp(x - c): -inf - -inf and inf - inf give NaN.
/// f32 / f64: expf / exp of the difference, as the streaming kernel.
template <bool kFast, class M>
struct ExpFrom {
  M c, c_log2e;
  __device__ __forceinline__ explicit ExpFrom(M c_) : c(c_), c_log2e(c_ * M(1.4426950408889634)) {}
  __device__ __forceinline__ M operator()(M x) const {
    if constexpr (kFast) {
      float r;
      asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(fmaf(x, 1.4426950408889634f, -c_log2e)));
      return r;
    } else {
      return lexp<false>(x - c);
    }
  }
};

/// Stores kV values converted to T as one 16-byte vector at p.
template <class T, int kV>
__device__ __forceinline__ void store_converted(T* p, const opmath_t<T> (&o)[kV]) {
  VecOf<T, kV> v;
#pragma unroll
  for (int e = 0; e < kV; ++e) v.v[e] = convert<T>(o[e]);
  store_vec<T, kV>(p, v);
}

/// Row `row0 + blockIdx.x / S` of a launch of one cluster a row.
template <class T>
__global__ void __launch_bounds__(kClusterThreads, sizeof(T) == 8 ? 1 : 2)
    class_cluster_kernel(const ClassLaunch p, int64_t row0) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  using M = opmath_t<T>;
  constexpr bool kFast = sizeof(T) == 2;
  constexpr int kV = int(16 / sizeof(T));
  constexpr int kU = kClusterVecs;
  constexpr int kWarps = kClusterThreads / 32;
  constexpr int kStride = kClusterThreads * kV;  // between a thread's vectors, in elements
  static_assert(kWarps <= 32 && kClusterMaxCtas <= 32, "one warp merges the warp and CTA partials");
  __shared__ RowAcc<M> warp_part[kWarps];
  __shared__ RowAcc<M> cta_part;                   // read by the other CTAs of the cluster
  __shared__ uint4 segment[kU * kClusterThreads];  // the CTA's part of the row, 32 KB

  const cg::cluster_group cluster = cg::this_cluster();
  const int ctas = static_cast<int>(cluster.num_blocks());
  const int rank = static_cast<int>(cluster.block_rank());
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  // Positions within a row fit 32 bits: C <= kClusterMaxCtas x a CTA's classes (select()).
  const int C = static_cast<int>(p.classes);
  const int seg = static_cast<int>(p.cluster_seg);
  const int lo = rank * seg;
  const int hi = lo + seg < C ? lo + seg : C;
  const int first = lo + tid * kV;  // this thread's vector u starts at first + u * kStride
  const T* x = static_cast<const T*>(p.input);
  const T* w = static_cast<const T*>(p.weight);
  T* dx = static_cast<T*>(p.dinput);
  const M eps = static_cast<M>(p.smoothing);
  const M eps_c = eps / static_cast<M>(C);
  const bool smooth = eps != M(0);
  const bool wsmooth = w && smooth;  // per-class weights enter the sums and the gradient
  const RowAcc<M> none{neg_inf<M>(), M(0), M(0), M(0)};

  // Launch-wide factor of the gradient: dy (one element) and the mean's divisor.
  M gscale = M(1);
  if (p.reduction == Reduction::mean)
    gscale =
        M(1) / (p.total_weight_in ? static_cast<const M*>(p.total_weight_in)[0] : static_cast<const M*>(p.scratch)[0]);
  if (p.dy && !p.dy_rows) gscale *= load_as_opmath(static_cast<const T*>(p.dy)[0]);

  const int64_t row = row0 + blockIdx.x / ctas;
  // One row dim (run() takes this kernel only then): offsets without a 64-bit division.
  int64_t off[kCsNumSlots];
#pragma unroll
  for (int k = 0; k < kCsNumSlots; ++k) off[k] = row * p.row_stride[k][0];
  const RowTarget tg = read_target(p, off[detail::kCsTarget]);
  const bool live = !tg.ignored && !tg.bad;  // the same in every CTA of the cluster
  const T* xr = x + off[detail::kCsInput];
  T* dr = dx + off[detail::kCsDinput];

  if (!live) {  // zeros (ignored) or NaN (out of range) over the segment; the loss from rank 0
    const M c = tg.bad ? quiet_nan<M>() : M(0);
    M o[kV];
#pragma unroll
    for (int e = 0; e < kV; ++e) o[e] = c;
#pragma unroll
    for (int u = 0; u < kU; ++u)
      if (first + u * kStride < hi) store_converted<T, kV>(dr + first + u * kStride, o);
    if (rank == 0 && tid == 0) {
      if (tg.bad && p.error) *p.error = 1;  // idempotent store, no atomic
      const M l = tg.bad ? quiet_nan<M>() : M(0);
      if (p.loss) static_cast<T*>(p.loss)[off[detail::kCsLoss]] = convert<T>(l);
      if (p.loss_rows) static_cast<M*>(p.loss_rows)[row] = l;
      if (p.weight_rows) static_cast<M*>(p.weight_rows)[row] = M(0);
      if (p.lse_out) static_cast<M*>(p.lse_out)[row] = M(0);
    }
    return;
  }

  // 1. Copy the segment to shared memory (where it stays until the gradient is written) and
  // reduce it. Each thread copies and later reads its own vectors only: no CTA barrier needed.
#pragma unroll
  for (int u = 0; u < kU; ++u) {
    const int j0 = first + u * kStride;
    if (j0 < hi)
      cp_async16(&segment[u * kClusterThreads + tid], xr + j0);
    else
      segment[u * kClusterThreads + tid] = neg_inf_raw<T>();
  }
  cp_async_wait_all();
  RowAcc<M> acc = none;
#pragma unroll
  for (int u = 0; u < kU; ++u) {
    const uint4 r = segment[u * kClusterThreads + tid];
#pragma unroll
    for (int e = 0; e < kV; ++e) acc.m = lmax(acc.m, raw_elem<T>(r, e));
  }
  {
    const ExpFrom<kFast, M> ex(acc.m == neg_inf<M>() ? M(0) : acc.m);  // exp(-inf - 0) = 0, exp(NaN - 0) = NaN
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const uint4 r = segment[u * kClusterThreads + tid];
#pragma unroll
      for (int e = 0; e < kV; ++e) acc.s += ex(raw_elem<T>(r, e));
    }
  }
  if (smooth) {
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int j0 = first + u * kStride;
      if (j0 >= hi) continue;
      const uint4 r = segment[u * kClusterThreads + tid];
#pragma unroll
      for (int e = 0; e < kV; ++e) {
        const M wc = w ? load_as_opmath(w[j0 + e]) : M(1);
        acc.a += wc * raw_elem<T>(r, e);
        acc.b += wc;
      }
    }
  }
  acc = butterfly<kFast>(acc, 32);
  if (lane == 0) warp_part[warp] = acc;
  __syncthreads();
  if (warp == 0) {
    RowAcc<M> c = lane < kWarps ? warp_part[lane] : none;
    c = butterfly<kFast>(c, 32);
    if (lane == 0) cta_part = c;
  }

  // 2.-3. Exchange: every warp merges the S partials of the cluster in the same fixed tree.
  cluster.sync();
  RowAcc<M> tot = none;
  const int r = lane & (kClusterMaxCtas - 1);
  if (r < ctas) tot = *cluster.map_shared_rank(&cta_part, r);
  tot = butterfly<kFast>(tot, kClusterMaxCtas);
  // Done reading the other CTAs' shared memory: the values are in registers (consumed by the
  // butterfly above), so a relaxed arrive suffices (no fence before the gradient's stores). The
  // cluster barrier's instructions are .aligned: the warp reconverges first.
  __syncwarp();
  __cluster_barrier_arrive_relaxed();

  // 4. The gradient of the segment: dx_c = A exp(x_c - lse) - B w_c - [c == t] Ct (B: label
  // smoothing), and the row's loss from the thread that holds x_t.
  const M wt = w ? load_as_opmath(w[tg.t]) : M(1);
  M gr = gscale;
  if (p.dy_rows) gr *= load_as_opmath(static_cast<const T*>(p.dy)[off[detail::kCsDy]]);
  const M lse = tot.m + llog(tot.s);  // all -inf: -inf (loss NaN, as torch)
  const M A = gr * ((M(1) - eps) * wt + eps_c * (wsmooth ? tot.b : static_cast<M>(C)));
  const M B = gr * eps_c;
  const M Ct = gr * (M(1) - eps) * wt;
  const int t = static_cast<int>(tg.t);  // live: 0 <= t < C
  const ExpFrom<kFast, M> ex(lse);
#pragma unroll
  for (int u = 0; u < kU; ++u) {
    const int j0 = first + u * kStride;
    if (j0 >= hi) continue;
    const uint4 r = segment[u * kClusterThreads + tid];
    M o[kV];
#pragma unroll
    for (int e = 0; e < kV; ++e) {
      o[e] = A * ex(raw_elem<T>(r, e));
      o[e] -= wsmooth ? B * load_as_opmath(w[j0 + e]) : B;
    }
    if (static_cast<unsigned>(t - j0) < static_cast<unsigned>(kV)) {  // the target's vector: one thread a row
      M xt = M(0);
#pragma unroll
      for (int e = 0; e < kV; ++e)
        if (j0 + e == t) {
          o[e] -= Ct;
          xt = raw_elem<T>(r, e);
        }
      M l = (M(1) - eps) * wt * (lse - xt);
      if (smooth) l += eps_c * ((w ? tot.b : static_cast<M>(C)) * lse - tot.a);
      if (p.loss) static_cast<T*>(p.loss)[off[detail::kCsLoss]] = convert<T>(l);
      if (p.loss_rows) static_cast<M*>(p.loss_rows)[row] = l;
      if (p.weight_rows) static_cast<M*>(p.weight_rows)[row] = wt;
      if (p.lse_out) static_cast<M*>(p.lse_out)[row] = lse;
    }
    store_converted<T, kV>(dr + j0, o);
  }
  __syncwarp();            // after the target's vector (one divergent thread)
  cluster.barrier_wait();  // every CTA has read cta_part: this CTA may exit
#elif defined(__CUDA_ARCH__)
  __trap();  // never launched: the host checks the loaded code's architecture first
#endif
}

/// Whether the loaded class_cluster_kernel<T> on the current device is sm_90+ code: a build
/// without an sm_90 target runs the kernel JIT-compiled from compute_80 PTX (binary 90, PTX 80:
/// the trap). Once per device (host-side queries, legal during stream capture); also opts in to
/// cluster sizes beyond the portable 8 and to a shared-memory carve-out for two CTAs an SM.
template <class T>
bool cluster_kernel_ready() {
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
  // Two 33 KB CTAs an SM need a shared-memory carve-out of at least 66 KB: ask for half of the
  // maximum (114 KB on H100); the rest stays L1 (the kernel's loads bypass it).
  cudaFuncAttributes fa{};
  bool ready =
      cudaFuncGetAttributes(&fa, class_cluster_kernel<T>) == cudaSuccess && fa.binaryVersion >= 90 &&
      (fa.ptxVersion >= 90 || fa.ptxVersion == 0) &&
      cudaFuncSetAttribute(class_cluster_kernel<T>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess &&
      cudaFuncSetAttribute(class_cluster_kernel<T>, cudaFuncAttributePreferredSharedMemoryCarveout, 50) == cudaSuccess;
  if (!ready) (void)cudaGetLastError();
  if (dev < 64) state[dev].store(ready ? 1 : 2, std::memory_order_release);
  return ready;
}

/// Launches the cluster kernel: (S, 1, 1) clusters, one a row, up to 2^24 rows a launch (grid.x
/// stays below 2^31). Sets *launched = false, the error cleared, when the first launch is refused,
/// so the caller runs the streaming kernel: code without sm_90, or a device (MIG slice,
/// partitioned context) that cannot co-schedule S CTAs.
template <class T>
cudaError_t launch_class_cluster(const ClassLaunch& p, cudaStream_t stream, bool* launched) {
  *launched = false;
  if (p.cluster < 2 || p.cluster > kClusterMaxCtas || !cluster_kernel_ready<T>()) return cudaSuccess;
  constexpr int64_t kMaxRows = int64_t{1} << 24;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(p.cluster);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  for (int64_t row0 = 0; row0 < p.rows; row0 += kMaxRows) {
    const int64_t rows = p.rows - row0 < kMaxRows ? p.rows - row0 : kMaxRows;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(static_cast<unsigned>(rows * p.cluster));
    cfg.blockDim = dim3(kClusterThreads);
    cfg.dynamicSmemBytes = 0;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    const cudaError_t e = cudaLaunchKernelEx(&cfg, class_cluster_kernel<T>, p, row0);
    if (e != cudaSuccess) {
      if (row0 > 0) return e;
      (void)cudaGetLastError();  // a refused configuration is not sticky
      return cudaSuccess;
    }
    *launched = true;
  }
  return cudaSuccess;
}

}  // namespace baracuda::kern::loss
