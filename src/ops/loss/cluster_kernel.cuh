// The fused cross_entropy forward + gradient (class-index targets) for rows longer than one CTA
// holds, on Hopper thread-block clusters: ONE read of the logits and one write of the gradient.
// The streaming fused kernel (class_kernel.cuh) reads every row twice and relies on L2 keeping it
// in between; with one 512-thread CTA an SM that re-read did not pay off (H100, [8192, 128256]
// bf16: 3.1 ms against 2.3 ms for forward + recomputing backward).
//
// A row of C classes is split over a cluster of S CTAs (2..16; more than 8 is a non-portable
// cluster size, allowed through cudaFuncAttributeNonPortableClusterSizeAllowed): CTA r owns the
// contiguous segment [r * seg, min(C, (r + 1) * seg)), seg = ceil(C / S) rounded up to a 16-byte
// vector. Each of the kClusterThreads threads copies kClusterVecs 16-byte vectors of the segment
// to shared memory with cp.async (vector u of thread t at (t + u * kClusterThreads) * kV: every
// instruction of a warp moves 512 contiguous bytes), 32 KB a CTA whatever the dtype (16384 bf16:
// S = 8 covers 131072 classes, S = 16 covers 262144). The segment stays there, not in registers:
// ptxas keeps 32 widened floats live across the exchange instead of 16 packed words (~90
// registers, spills under two CTAs an SM), while shared memory costs no register and is re-read
// at 128 bytes a cycle.
//
// Persistent and software-pipelined. A launch of one cluster a row (8192 clusters for 8192 rows)
// left DRAM 41% busy: each CTA loaded 32 KB, waited, reduced, synchronized and stored, so the
// loads of an SM's two CTAs overlapped their exchanges and stores only by chance, and every
// cluster launch cost scheduling time. Now the grid holds as many clusters as the device
// co-schedules (cudaOccupancyMaxActiveClusters, once per device and cluster size) and cluster k
// walks rows k, k + K, k + 2K, ... (K clusters; every CTA of a cluster walks the same rows, so the
// cluster barriers stay uniform). The round that only double-buffered the copies (2203 us on H100
// for [8192, 128256] bf16) left the warps stalled half the time at the per-row cluster barrier,
// where the slowest of 8 CTAs on 8 SMs gates all: so the barrier is split into its arrive and its
// wait, and a CTA does the work that needs no exchange in between. Each CTA has three 32 KB
// segment buffers (dynamic shared memory, 96 KB; a shared-memory carve-out that fits two CTAs an
// SM): iteration i (row i of the cluster's walk; buffer i mod 3) issues the cp.async of row i + 1
// into buffer i + 1 (one commit group a row, empty when nothing is copied; cp.async.wait_group 1
// then waits for row i's group only), merges row i - 1's exchange (warp 0) while the other warps
// reduce row i, publishes row i's partial and arrives, then writes row i - 1's gradient from
// buffer i - 1: the exchange of one row is in flight during the gradient of the previous row and
// the reduction of the next, and the next row's loads during all of it. A thread copies and reads
// only its own vectors, so a buffer needs no CTA barrier before it is refilled: the thread's last
// reads of buffer i + 1 (row i - 2's gradient, in the previous iteration) were consumed by its own
// earlier stores. The vectors past the segment's end hold -inf in every buffer from the start (no
// term in the max or the sum; the copies never touch them). Targets are read one row ahead of the
// copies (row i + 2's target in iteration i), so deciding whether to copy row i + 1 waits on no
// load. Per row:
//
//   1. warp 0 waits for the previous row's cluster barrier (wait.acquire), reads the S partials
//      through distributed shared memory (map_shared_rank; lane l reads rank l mod W, W the power
//      of two >= S), merges them with a fixed butterfly over W lanes (the lanes past S hold the
//      identity) and leaves the row's coefficients (log-sum-exp, gradient factors) in shared memory (row_tot[e % 2]): every CTA computes the
//      row's log-sum-exp from the same partials in the same order, so the result depends on (C, S)
//      only, never on scheduling, on the pipelining or on which cluster took the row;
//   2. meanwhile the other warps wait for this row's copies; each thread loads its vectors once
//      (one pass over shared memory, the max and the exponentials from the same registers) and
//      reduces them to (max, sum exp(x - max)) and, for label smoothing, the sums of w_c x_c and
//      w_c; a shuffle butterfly per warp (maxima first, then the rescaled sums) leaves the warp
//      partials in warp_part[e % 2];
//   3. a CTA barrier (the warp partials and the previous row's total); the last warp merges the
//      warp partials (the same butterfly over the 16 lanes) into cta_part[e % 2] and arrives with
//      release, warp 0 arrives with release (its DSMEM reads are done), the other warps wait for
//      the previous barrier and arrive relaxed: the cluster barrier of this row, waited for in
//      the next iteration;
//   4. the previous row's gradient of the segment (the thread holding the target's logit rewrites
//      that element with the target's term and writes the row's loss); the loop exists with and
//      without per-class weights in the smoothing term, so the common case issues ~4.5
//      instructions an element (widen, FFMA, ex2, FFMA, half a paired F2FP conversion) and no
//      predicated-off weight loads.
//
// H200, [8192, 128256] bf16, this order, butterfly and per-CTA row coefficients: 1248 us, against
// 1449 us for an exchange after the reduction with a second CTA barrier, pairwise-merging
// butterflies and the coefficients in every thread; a copy of the same bytes takes 990 us. (Partials exchanged through global memory instead of DSMEM, which lets
// all 264 CTA slots run instead of the 240 that clusters of 8 co-schedule: 1356 us for S = 8,
// 832 us instead of 896 for S = 10; not taken.)
//
// One barrier a row suffices because the partials alternate between two slots: a CTA writes
// cta_part[e % 2] for exchange e after its wait at barrier e - 1, which completes only when every
// CTA has arrived there, and every CTA arrives at barrier e - 1 (release) after its reads of
// exchange e - 2's partials, the previous contents of that slot. warp_part[e % 2] is rewritten
// after the CTA barrier of exchange e - 1, which the last warp reaches after its reads of
// exchange e - 2's warp partials (one slot would race: the last warp reads exchange e - 1's after
// that barrier, and nothing holds the other warps back before they write exchange e's). After the last
// row a final cluster barrier keeps every CTA alive until the others have read its partial.
//
// Rows whose target is ignore_index (gradient 0) or out of range (NaN) read nothing, copy nothing
// and skip the exchange (a pending row's wait and gradient still run in that iteration, so a
// pending row is always the previous one); the condition is the same in every CTA of the cluster
// (all read the same target), so the barriers and the partial slots stay uniform. Launch bounds
// (512, 2): two CTAs an SM (64 registers for 16-bit and f32 storage; f64 takes one CTA an SM). The mean's divisor
// comes from target_weight_kernel before the launch (device memory, no host round trip) and
// per-row losses go to the fixed-order two-stage sum, as in the streaming kernel. Hopper only: the
// body exists in the sm_90+ compilations; the sm_80 pass compiles a trap, and the host launches the
// kernel only where its function attributes report sm_90+ code (cluster_kernel_ready), else the
// streaming fused kernel runs.
#pragma once
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstring>

#include "kernels/common/cluster.cuh"
#include "kernels/common/cp_async.cuh"
#include "kernels/common/short_math.cuh"
#include "ops/loss/class_common.cuh"

namespace baracuda::kern::loss {

inline constexpr int kClusterThreads = detail::kLossClusterThreads;
inline constexpr int kClusterVecs = detail::kLossClusterVecs;
inline constexpr int kClusterMaxCtas = detail::kLossClusterMaxCtas;

/// Merge of `v` over `width` lanes (a power of two): an xor butterfly of the maxima, then each
/// lane scales its own sum to the group's maximum once (one exponential; none where its maximum is
/// the group's, which also covers all -inf), then xor butterflies of the plain sums. Every step is
/// commutative bit for bit, so every lane of a group ends with the same bits. A butterfly of
/// (max, sum) pairs, merged at each level with one exponential for the side with the smaller
/// maximum, issued ~4x the instructions (a compare, selects and an exponential a level; H200,
/// [8192, 128256] bf16 fused: 1449 -> 1381 us). NaN and inf follow merge(): a lane whose maximum
/// is +inf already has a NaN sum (its own exp(inf - inf)). `sums`: label smoothing's two plain
/// sums are reduced too (else they stay 0 and cost no shuffle).
template <bool kFast, class M>
__device__ __forceinline__ RowAcc<M> butterfly(RowAcc<M> v, int width, bool sums) {
  M m = v.m;
  for (int o = width / 2; o > 0; o >>= 1) m = lmax(m, __shfl_xor_sync(0xffffffffu, m, o));
  M s = v.m == m ? v.s : v.s * lexp<kFast>(v.m - m);
  for (int o = width / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  M a = v.a, b = v.b;
  if (sums)
    for (int o = width / 2; o > 0; o >>= 1) {
      a += __shfl_xor_sync(0xffffffffu, a, o);
      b += __shfl_xor_sync(0xffffffffu, b, o);
    }
  return {m, s, a, b};
}

/// Element e (a constant after unrolling) of a 16-byte vector of T held as raw words, widened.
template <class T>
__device__ __forceinline__ opmath_t<T> raw_elem(const uint4& r, int e) {
  const uint32_t wd[4] = {r.x, r.y, r.z, r.w};
  if constexpr (cuda::std::is_same_v<T, __nv_bfloat16>) {
    // bf16 is the top half of an f32: one shift or mask (the conversion's own bits, NaN included)
    // instead of extracting the half and shifting it back.
    return __uint_as_float(e & 1 ? wd[e / 2] & 0xffff0000u : wd[e / 2] << 16);
  } else if constexpr (sizeof(T) == 2) {
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
      return short_math::ex2_fast(fmaf(x, 1.4426950408889634f, -c_log2e));
    } else {
      return lexp<false>(x - c);
    }
  }
};

/// One 16-byte vector of this thread's segment, read from shared memory at each use: volatile, so
/// the compiler cannot keep the 16 words (32 widened floats) of a pass in registers for the next
/// pass, which spills at 64 registers; shared memory is re-read at 128 bytes a cycle.
__device__ __forceinline__ uint4 ld_segment(const uint4* s) {
  uint4 r;
  asm volatile("ld.volatile.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "r"(static_cast<unsigned>(__cvta_generic_to_shared(s))));
  return r;
}

/// A row's coefficients of the gradient and the loss, computed once a CTA from the merged total
/// (warp 0, lane 0, with the exchange) and read by every thread from shared memory: the log, the
/// weight and dy loads and the products were ~40 instructions in every thread and row (H200,
/// [8192, 128256] bf16: 1262 -> 1248 us, the same bits). ta, tb: label smoothing's merged sums.
template <class M>
struct RowCoef {
  M lse, A, B, Ct, wt, ta, tb, pad;
};

/// One element of the segment (the target's), read as ld_segment reads vectors.
template <class T>
__device__ __forceinline__ T ld_segment_elem(const T* s) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(s));
  T v;
  if constexpr (sizeof(T) == 2) {
    unsigned short b;
    asm volatile("ld.volatile.shared.u16 %0, [%1];" : "=h"(b) : "r"(a));
    memcpy(&v, &b, sizeof(v));
  } else if constexpr (sizeof(T) == 4) {
    unsigned b;
    asm volatile("ld.volatile.shared.u32 %0, [%1];" : "=r"(b) : "r"(a));
    memcpy(&v, &b, sizeof(v));
  } else {
    unsigned long long b;
    asm volatile("ld.volatile.shared.u64 %0, [%1];" : "=l"(b) : "r"(a));
    memcpy(&v, &b, sizeof(v));
  }
  return v;
}

/// (max, sum exp(x - max)) of the thread's kU segment vectors in buffer `sg`, in ONE pass over
/// shared memory: the kU vectors (16 words; ptxas keeps them without spilling because nothing else
/// is live during the reduction, unlike across the exchange) are loaded once and both loops run on
/// the registers. Bit-identical to a max pass and an exp pass that each re-read the buffer (the
/// same operations in the same order), without the second pass's loads and their latency. An
/// online rescale per vector (sum *= exp(old_max - new_max) when a vector raises the max) was not
/// taken: with kU = 4 vectors a thread a vector raises the max with probability 1/(u + 1) (no
/// "rare after the first vectors"), and each vector's scalar max costs ~6 instructions against the
/// packed pass's 4 HMNMX2 for 8 elements; it would also change the sum's rounding. 16-bit storage:
/// packed max on pairs (HMNMX2: exact, a NaN dropped as fmaxf drops it), then the two halves
/// widened: half the instructions of widening every element first.
template <class T, int kU, bool kFast>
__device__ __forceinline__ void segment_max_sum(const uint4* sg, int tid, opmath_t<T>& m_out, opmath_t<T>& s_out) {
  using M = opmath_t<T>;
  constexpr int kV = int(16 / sizeof(T));
  uint4 r[kU];
#pragma unroll
  for (int u = 0; u < kU; ++u) r[u] = ld_segment(&sg[u * kClusterThreads + tid]);
  M m;
  if constexpr (sizeof(T) == 2) {
    using P = cuda::std::conditional_t<cuda::std::is_same_v<T, __half>, __half2, __nv_bfloat162>;
    const auto pair = [](uint32_t bits) {
      P v;
      memcpy(&v, &bits, sizeof(v));
      return v;
    };
    P pm = pair(neg_inf_raw<T>().x);
#pragma unroll
    for (int u = 0; u < kU; ++u)
      pm = __hmax2(__hmax2(pm, pair(r[u].x)), __hmax2(pair(r[u].y), __hmax2(pair(r[u].z), pair(r[u].w))));
    m = lmax(load_as_opmath(pm.x), load_as_opmath(pm.y));
  } else {
    m = neg_inf<M>();
#pragma unroll
    for (int u = 0; u < kU; ++u)
#pragma unroll
      for (int e = 0; e < kV; ++e) m = lmax(m, raw_elem<T>(r[u], e));
  }
  const ExpFrom<kFast, M> ex(m == neg_inf<M>() ? M(0) : m);  // exp(-inf - 0) = 0, exp(NaN - 0) = NaN
  M s = M(0);
#pragma unroll
  for (int u = 0; u < kU; ++u)
#pragma unroll
    for (int e = 0; e < kV; ++e) s += ex(raw_elem<T>(r[u], e));
  m_out = m;
  s_out = s;
}

/// Stores kV values converted to T as one 16-byte vector at p.
template <class T, int kV>
__device__ __forceinline__ void store_converted(T* p, const opmath_t<T> (&o)[kV]) {
  VecOf<T, kV> v;
#pragma unroll
  for (int e = 0; e < kV; ++e) v.v[e] = convert<T>(o[e]);
  store_vec<T, kV>(p, v);
}

/// Segment buffers a CTA cycles through: the previous row (its gradient, written while this row's
/// exchange is in flight), the row being reduced, and the next row's copies.
inline constexpr int kClusterStages = 3;
/// Dynamic shared memory of a CTA: kClusterStages segments of kClusterVecs x kClusterThreads
/// 16-byte vectors, 96 KB (above the default 48 KB limit: cluster_kernel_ready opts in).
inline constexpr int kClusterSmemBytes = kClusterStages * kClusterVecs * kClusterThreads * 16;

/// Rows c, c + K, c + 2K, ... of a persistent launch of K = gridDim.x / S clusters of S CTAs
/// (c = blockIdx.x / S: the CTAs of a cluster are consecutive along x).
template <class T>
__global__ void __launch_bounds__(kClusterThreads, sizeof(T) == 8 ? 1 : 2) class_cluster_kernel(const ClassLaunch p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  using M = opmath_t<T>;
  constexpr bool kFast = sizeof(T) == 2;
  constexpr int kV = int(16 / sizeof(T));
  constexpr int kU = kClusterVecs;
  constexpr int kWarps = kClusterThreads / 32;
  constexpr int kStride = kClusterThreads * kV;  // between a thread's vectors, in elements
  constexpr int kBuf = kU * kClusterThreads;     // 16-byte vectors a segment buffer
  static_assert(kWarps <= 32 && (kWarps & (kWarps - 1)) == 0 && kClusterMaxCtas <= 32,
                "one warp merges the warp and CTA partials in a butterfly");
  static_assert(kClusterStages == 3, "previous row's gradient, this row's reduction, next row's copies");
  __shared__ RowAcc<M> warp_part[2][kWarps];  // [e % 2] for the cluster's e-th exchange
  __shared__ RowAcc<M> cta_part[2];           // read by the other CTAs of the cluster: slot e % 2 for exchange e
  __shared__ RowCoef<M> row_tot[2];         // exchange e's coefficients from warp 0 to the CTA: slot e % 2
  extern __shared__ uint4 segments[];         // kClusterStages buffers of kBuf vectors: the CTA's part of a row each

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

  const int64_t rows = p.rows;
  // One row dim (run() takes this kernel only then): a slot's row offset is one multiplication.
  const auto off = [&p](int slot, int64_t row) { return row * p.row_stride[slot][0]; };
  // The pending row's coefficients from its merged total, once a CTA (warp 0, lane 0).
  const auto row_coef = [&](const RowAcc<M>& t, int64_t r, int tt) {
    RowCoef<M> c;
    c.wt = w ? load_as_opmath(w[tt]) : M(1);
    M gr = gscale;
    if (p.dy_rows) gr *= load_as_opmath(static_cast<const T*>(p.dy)[off(detail::kCsDy, r)]);
    c.lse = t.m + llog(t.s);  // all -inf: -inf (loss NaN, as torch)
    c.A = gr * ((M(1) - eps) * c.wt + eps_c * (wsmooth ? t.b : static_cast<M>(C)));
    c.B = gr * eps_c;
    c.Ct = gr * (M(1) - eps) * c.wt;
    c.ta = t.a;
    c.tb = t.b;
    return c;
  };
  // Issues the copies of row r's segment into buffer b (no wait: the row's commit group tracks them).
  const auto copy_row = [&](int b, int64_t r) {
    const T* xr = x + off(detail::kCsInput, r);
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int j0 = first + u * kStride;
      if (j0 < hi) cp_async16(&segments[b * kBuf + u * kClusterThreads + tid], xr + j0);
    }
  };

  // The vectors past the segment's end hold -inf in every buffer, written once: the copies never
  // touch them, and the reduction loops need no predicate. Each thread reads only its own vectors.
#pragma unroll
  for (int u = 0; u < kU; ++u)
    if (first + u * kStride >= hi)
#pragma unroll
      for (int b = 0; b < kClusterStages; ++b) segments[b * kBuf + u * kClusterThreads + tid] = neg_inf_raw<T>();

  // A row's target in one register: the class (live, 0 <= t < C), kIgnored or kBad; the same in
  // every CTA of the cluster.
  constexpr int kIgnored = -1, kBad = -2;
  const auto target_of = [&](int64_t r) {
    const RowTarget tg = read_target(p, off(detail::kCsTarget, r));
    return tg.ignored ? kIgnored : (tg.bad ? kBad : static_cast<int>(tg.t));
  };

  // Prologue: the first row's copies (group 0) and the second row's target.
  const int clusters = static_cast<int>(gridDim.x) / ctas;  // K, the row step
  // Lanes the exchange's butterfly spans: the power of two >= S, a function of S only (the
  // lanes past S hold none, which merges as the identity).
  int width = 2;
  while (width < ctas) width <<= 1;
  int64_t row = blockIdx.x / ctas;
  int cur = kIgnored, nxt = kIgnored;  // the targets of rows `row` and `row + K`
  if (row < rows) cur = target_of(row);
  if (row < rows && cur >= 0) copy_row(0, row);
  cp_async_commit();
  if (row + clusters < rows) nxt = target_of(row + clusters);

  int buf = 0;   // the buffer of `row`; the next row's is buf + 1, the pending row's buf + 2 (mod 3)
  int slot = 0;  // cta_part slot of the cluster's next exchange (live rows only: uniform in the cluster)
  // The pending row: live, its partial published and arrived at, its exchange not yet waited for
  // (its gradient is written in the next iteration, after that row's reduction).
  bool pending = false;
  int64_t prow = 0;
  int pt = 0;
  // One iteration past the last row drains the pending row: the gradient's code exists once.
  for (;; row += clusters) {
    // Opaque to the compiler: otherwise loop strength reduction turns every address derived from
    // the row (4 copies, 4 gradient stores, the targets, the losses) into its own 64-bit induction
    // variable, which spills at 64 registers; a multiplication a slot and row costs nothing here.
    asm("" : "+l"(row));
    const bool have = row < rows;
    const int t = have ? cur : kIgnored;
    const bool live = have && t >= 0;
    const int nbuf = buf == kClusterStages - 1 ? 0 : buf + 1;
    const int pbuf = nbuf == kClusterStages - 1 ? 0 : nbuf + 1;
    if (have) {
      // Row + K's copies go to the next buffer before this row is touched, one commit group a row
      // (empty when that row is past the end, ignored or out of range). That buffer's last reads
      // were this thread's own, for row - 2K's gradient (the previous iteration), whose stores
      // consumed them.
      const int64_t row1 = row + clusters;
      if (row1 < rows && nxt >= 0) copy_row(nbuf, row1);
      cp_async_commit();
      cur = nxt;
      // Row + 2K's target now: its load completes during this row, before the next prefetch needs it.
      if (row1 + clusters < rows) nxt = target_of(row1 + clusters);
    }

    if (have && t < 0) {  // zeros (ignored) or NaN (out of range) over the segment; the loss from rank 0
      T* dr = dx + off(detail::kCsDinput, row);
      const bool bad = t == kBad;
      const M c = bad ? quiet_nan<M>() : M(0);
      M o[kV];
#pragma unroll
      for (int e = 0; e < kV; ++e) o[e] = c;
#pragma unroll
      for (int u = 0; u < kU; ++u)
        if (first + u * kStride < hi) store_converted<T, kV>(dr + first + u * kStride, o);
      if (rank == 0 && tid == 0) {
        if (bad && p.error) *p.error = 1;  // idempotent store, no atomic
        const M l = bad ? quiet_nan<M>() : M(0);
        if (p.loss) static_cast<T*>(p.loss)[off(detail::kCsLoss, row)] = convert<T>(l);
        if (p.loss_rows) static_cast<M*>(p.loss_rows)[row] = l;
        if (p.weight_rows) static_cast<M*>(p.weight_rows)[row] = M(0);
        if (p.lse_out) static_cast<M*>(p.lse_out)[row] = M(0);
      }
      __syncwarp();  // the barriers below are .aligned
    }

    // 2.-3. The pending row's exchange first, in warp 0 alone: it waits for the barrier, reads the
    // S partials through distributed shared memory, merges them in the fixed tree and leaves the
    // row's coefficients in row_tot for the CTA, while the other warps reduce this row (step 1
    // below) and meet it at the CTA barrier. (When every warp did its own reads and merge, the exchange cost 16x
    // the DSMEM loads and shuffles a row; when warp 0 did it after the reduction, the whole CTA
    // waited for its latency at a second barrier: H200, [8192, 128256] bf16 fused, 1381 -> 1260 us.)
    if (pending && warp == 0) {
      cluster_wait();
      RowAcc<M> t = none;
      const int r = lane & (width - 1);
      if (r < ctas) t = *cluster.map_shared_rank(&cta_part[slot ^ 1], r);
      t = butterfly<kFast>(t, width, smooth);
      if (lane == 0) row_tot[slot ^ 1] = row_coef(t, prow, pt);
      __syncwarp();
    }

    // 1. Reduce this row's segment once its copies landed (wait_group 1: all groups but the
    // newest, row + K's, are complete).
    if (live) {
      cp_async_wait_group<1>();
      const uint4* sg = segments + buf * kBuf;
      RowAcc<M> acc = none;
      segment_max_sum<T, kU, kFast>(sg, tid, acc.m, acc.s);
      if (smooth) {
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          const int j0 = first + u * kStride;
          if (j0 >= hi) continue;
          const uint4 r = ld_segment(&sg[u * kClusterThreads + tid]);
#pragma unroll
          for (int e = 0; e < kV; ++e) {
            const M wc = w ? load_as_opmath(w[j0 + e]) : M(1);
            acc.a += wc * raw_elem<T>(r, e);
            acc.b += wc;
          }
        }
      }
      acc = butterfly<kFast>(acc, 32, smooth);
      // warp_part[slot]'s previous reader (the last warp, two exchanges ago) read it before the CTA
      // barrier of the previous exchange, which every thread of this CTA has passed.
      if (lane == 0) warp_part[slot][warp] = acc;
    }
    // The warp partials and the pending row's total to the CTA (live and pending are the same in
    // every thread: the barrier is uniform). row_tot alternates between two slots like cta_part:
    // slot e % 2 is rewritten for exchange e + 2, at the top of an iteration after the CTA barrier
    // of exchange e + 1, which every warp passes after reading exchange e's total below.
    if (live || pending) __syncthreads();

    // This row's partial, merged and published by the last warp after its wait for the previous
    // exchange (whose completion means every CTA read the exchange before it, this slot's previous
    // contents), then every thread's arrival; nobody waits for it until the next iteration. The
    // publishing warp arrives with release (its store of the partial) and so does warp 0 (after
    // its DSMEM reads of the previous exchange: a CTA overwrites that slot only after this barrier
    // completes); the other warps neither publish nor read remote memory and arrive relaxed (the
    // release's memory barrier waits for the warp's outstanding gradient stores). A different
    // warp than warp 0 merges, so warp 0, which did the exchange, starts its gradient sooner.
    if (pending && warp != 0) cluster_wait();
    if (live) {
      if (warp == kWarps - 1) {
        RowAcc<M> part = lane < kWarps ? warp_part[slot][lane] : none;
        part = butterfly<kFast>(part, kWarps, smooth);  // lane 0 merges lanes [0, kWarps)
        if (lane == 0) cta_part[slot] = part;
        __syncwarp();
        cluster_arrive();
      } else if (warp == 0) {
        cluster_arrive();
      } else {
        cluster_arrive_relaxed();
      }
    }
    RowCoef<M> tot;
    if (pending) tot = row_tot[slot ^ 1];

    // 4. The pending row's gradient, while this row's exchange is in flight: dx_c = A exp(x_c -
    // lse) - B w_c - [c == t] Ct (B: label smoothing), and the row's loss from the thread that
    // holds x_t.
    if (pending) {
      T* dr = dx + off(detail::kCsDinput, prow);
      const uint4* sg = segments + pbuf * kBuf;
      const M wt = tot.wt, lse = tot.lse, A = tot.A, B = tot.B, Ct = tot.Ct;
      const ExpFrom<kFast, M> ex(lse);
      bool holds_t = false;  // this thread holds x_t: one thread a row
      M xt = M(0);
      // The loop exists twice, with and without per-class weights in the smoothing term: a
      // per-element `wsmooth ? B * w_c : B` kept a predicated weight load, its widening, a move
      // and a multiplication in every element's issue slots (predicated-off instructions still
      // issue), ~4 of ~9 instructions an element. Same arithmetic in both: fma(A, e, -(B w_c)).
      const auto gradient = [&](auto weighted) {
        constexpr bool kWeighted = decltype(weighted)::value;
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          const int j0 = first + u * kStride;
          if (j0 >= hi) continue;
          const uint4 r = ld_segment(&sg[u * kClusterThreads + tid]);
          M o[kV];
#pragma unroll
          for (int e = 0; e < kV; ++e) {
            o[e] = A * ex(raw_elem<T>(r, e));
            if constexpr (kWeighted)
              o[e] -= B * load_as_opmath(w[j0 + e]);
            else
              o[e] -= B;
          }
          store_converted<T, kV>(dr + j0, o);
        }
        // The target's element once more, after this thread's vector store of it (program order):
        // the same operations, then - Ct. A test of every vector for the target cost a compare, a
        // branch and a convergence barrier a vector in every thread for one thread's element.
        if (pt >= lo && pt < hi && ((pt - lo) / kV) % kClusterThreads == tid) {
          holds_t = true;
          xt = load_as_opmath(ld_segment_elem<T>(reinterpret_cast<const T*>(sg) + (pt - lo)));
          M o = A * ex(xt);
          if constexpr (kWeighted)
            o -= B * load_as_opmath(w[pt]);
          else
            o -= B;
          o -= Ct;
          dr[pt] = convert<T>(o);
        }
      };
      if (wsmooth)
        gradient(cuda::std::true_type{});
      else
        gradient(cuda::std::false_type{});
      // The row's outputs after the loop, not in each unrolled vector: one copy of the code and of
      // the output pointers it keeps in registers.
      if (holds_t) {
        M l = (M(1) - eps) * wt * (lse - xt);
        if (smooth) l += eps_c * ((w ? tot.tb : static_cast<M>(C)) * lse - tot.ta);
        if (p.loss) static_cast<T*>(p.loss)[off(detail::kCsLoss, prow)] = convert<T>(l);
        if (p.loss_rows) static_cast<M*>(p.loss_rows)[prow] = l;
        if (p.weight_rows) static_cast<M*>(p.weight_rows)[prow] = wt;
        if (p.lse_out) static_cast<M*>(p.lse_out)[prow] = lse;
      }
      __syncwarp();  // after the target's vector (one divergent thread): the barriers are .aligned
    }

    pending = live;
    if (live) {
      prow = row;
      pt = t;
      slot ^= 1;
    }
    if (!have) break;
    buf = nbuf;
  }
  // No CTA exits while another may still read its partial (the last exchange's reads).
  __syncwarp();
  cluster.sync();
#elif defined(__CUDA_ARCH__)
  __trap();  // never launched: the host checks the loaded code's architecture first
#endif
}

/// Whether the loaded class_cluster_kernel<T> on the current device is sm_90+ code: a build
/// without an sm_90 target runs the kernel JIT-compiled from compute_80 PTX (binary 90, PTX 80:
/// the trap). Once per device (host-side queries, legal during stream capture); also opts in to
/// cluster sizes beyond the portable 8, to the 96 KB of dynamic shared memory (above the default
/// 48 KB) and to the largest shared-memory carve-out: two CTAs an SM need 2 x (96 KB + the
/// partials + the 1 KB a CTA reserves), about 195 KB of the 228 KB; the kernel's bulk loads bypass L1
/// (cp.async.cg), so the L1 that is left costs nothing.
template <class T>
bool cluster_kernel_ready() {
  return cluster_ready<class_cluster_kernel<T>>(kClusterSmemBytes);
}

/// Clusters of `ctas` CTAs the current device co-schedules for class_cluster_kernel<T>: the
/// persistent grid. Once per device and cluster size (after cluster_kernel_ready's attributes,
/// which the occupancy depends on); 0 where none fits (MIG slice, partitioned context) or the query
/// fails: the caller then runs the streaming kernel.
template <class T>
int cluster_kernel_clusters(int ctas) {
  static std::atomic<int> cache[64][kClusterMaxCtas + 1];  // 0 unknown, -1 none, else the count
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0) {
    (void)cudaGetLastError();
    return 0;
  }
  if (dev < 64) {
    const int s = cache[dev][ctas].load(std::memory_order_acquire);
    if (s != 0) return s > 0 ? s : 0;
  }
  cudaLaunchAttribute attr[1];
  const cudaLaunchConfig_t cfg =
      cluster_config(dim3(static_cast<unsigned>(ctas)), dim3(kClusterThreads), kClusterSmemBytes, nullptr, ctas, attr);
  int n = 0;
  if (cudaOccupancyMaxActiveClusters(&n, class_cluster_kernel<T>, &cfg) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;  // not cached: a failed query says nothing about the device
  }
  if (dev < 64) cache[dev][ctas].store(n > 0 ? n : -1, std::memory_order_release);
  return n > 0 ? n : 0;
}

/// Launches the persistent cluster kernel: (S, 1, 1) clusters, as many as the device co-schedules
/// (at most one a row). Sets *launched = false, the error cleared, when the device cannot
/// co-schedule S CTAs or refuses the launch, or the loaded code has no sm_90: the caller runs the
/// streaming kernel.
template <class T>
cudaError_t launch_class_cluster(const ClassLaunch& p, cudaStream_t stream, bool* launched) {
  *launched = false;
  if (p.cluster < 2 || p.cluster > kClusterMaxCtas || p.rows <= 0 || !cluster_kernel_ready<T>()) return cudaSuccess;
  // Measured on H100 ([8192, 128256] bf16, fused): this grid 2203 us; one cluster a row (the
  // earlier launch shape, same body) 2732 us; a grid of only 16 clusters 3787 us; 16 CTAs a
  // row instead of 8, 6216 us.
  const ClassLaunch& q = p;
  const int active = cluster_kernel_clusters<T>(q.cluster);
  if (active == 0) return cudaSuccess;
  int64_t clusters = active;
  if (clusters > q.rows) clusters = q.rows;
  const int64_t max_clusters = int64_t{0x7fffffff} / q.cluster;  // grid.x < 2^31
  if (clusters > max_clusters) clusters = max_clusters;
  if (!launch_cluster<class_cluster_kernel<T>>(dim3(static_cast<unsigned>(clusters * q.cluster)), dim3(kClusterThreads),
                                               kClusterSmemBytes, stream, q.cluster, q))
    return cudaSuccess;  // refused: not sticky, the caller runs the streaming kernel
  *launched = true;
  return cudaSuccess;
}

}  // namespace baracuda::kern::loss
