// CTC loss kernels (include/baracuda/ops/ctc_loss.hpp states the formulas; ATen's cuda/LossCTC.cu is
// the reference for every one of them).
//
// ctc_item_kernel: one CTA per batch item (and, for the forward with fused_beta, a second CTA per item
// for log_beta, running concurrently). The CTA first checks the item (lengths, the concatenated
// offset as a block sum of the lengths before it, every label) and stages its labels in shared memory;
// then it runs the recursion over time with the state row double-buffered in shared memory: thread i
// owns states i, i + threads, ... (k of them), so a step is one __syncthreads, three shared loads and a
// three-term log-sum-exp per state. log_beta is the same recursion on the reversed time and label
// sequences (state s' = 2 S - s at step t' = Tn - 1 - t reads exactly ATen's beta operands in ATen's
// order), so one code path serves both. The log_probs a state needs (a gather: the blank's or its
// label's column) do not depend on the recursion: each thread keeps kCtcPrefetch / k of them in flight
// in registers, loaded that many steps ahead, so the sequential part waits on shared memory only.
// The backward's item CTA writes the item's record and the tables the gradient kernel needs: the first
// target position of each class ([N, C], -1 for none) and, per position, the next one with the same
// label (a fixed order for the per-class sums over states; O(S^2) compares once per item).
//
// ctc_grad_kernel: one warp per (t, n) row of the gradient, in memory order: the blank's log-sum over
// its states (a warp reduction with a fixed lane partition), then each class's value from log_probs,
// the tables and log_alpha + log_beta, written once: no atomics, fixed order.
//
// ctc_sum_kernel: the reduced forward's fixed-order sum of the per-item losses (one CTA).
#pragma once
#include <cuda_runtime.h>

#include <cuda/std/limits>

#include "kernels/common/dtype_traits.cuh"
#include "kernels/common/short_math.cuh"
#include "kernels/common/smem_optin.cuh"
#include "ops/loss/ctc_launch.hpp"

namespace baracuda::kern::ctc {

using detail::CtcItem;
using detail::CtcLaunch;

template <class A>
__device__ __forceinline__ A ninf() {
  return -cuda::std::numeric_limits<A>::infinity();
}
template <class A>
__device__ __forceinline__ A pinf() {
  return cuda::std::numeric_limits<A>::infinity();
}
template <class A>
__device__ __forceinline__ A qnan() {
  return cuda::std::numeric_limits<A>::quiet_NaN();
}

// The gradient's exp / log: correctly rounded to ~1 ulp (the gradient pass is memory-bound).
__device__ __forceinline__ float gexp(float x) { return expf(x); }
__device__ __forceinline__ double gexp(double x) { return exp(x); }
__device__ __forceinline__ float glog(float x) { return logf(x); }
__device__ __forceinline__ double glog(double x) { return log(x); }

/// ex2 / lg2 without the denormal fix-ups of exp2f / __expf (short_math's MUFU wrappers): a
/// flushed term is below 2^-126 of the largest one, and the log's argument is 0 or in [1, 3].
using short_math::ex2_fast;
using short_math::lg2_fast;

/// The recursion's arithmetic. It is latency-bound (one step per __syncthreads), so:
///  - f32 (f32, f16, bf16 inputs) runs in base 2: log_probs are scaled by log2(e) when loaded (off the
///    critical path), a step is lg2(ex2(a1 - m) + ex2(a2 - m) + ex2(a3 - m)) + (m + lp) with
///    m = max(a1, a2, a3, -FLT_MAX) (the -FLT_MAX keeps an all -inf step at -inf without ATen's
///    "max = 0" select), and saved values are scaled back by ln(2). ex2/lg2.approx err by ~1e-7
///    absolute a step, below the rounding of log_alpha itself once |log_alpha| > 1. A NaN operand
///    propagates through its ex2 term, as through ATen's exp.
///  - f64 is ATen's step exactly: the max by comparisons in ATen's order, 0 in place of a -inf max,
///    natural exp / log.
template <class A>
struct Recursion;
template <>
struct Recursion<float> {
  static constexpr float kIn = 1.4426950408889634f;   // natural log -> log2
  static constexpr float kOut = 0.6931471805599453f;  // log2 -> natural log
  static __device__ __forceinline__ float step(float a1, float a2, float a3, float lp) {
    const float m = fmaxf(fmaxf(a1, a2), fmaxf(a3, -3.402823466e38f));
    return lg2_fast(ex2_fast(a1 - m) + ex2_fast(a2 - m) + ex2_fast(a3 - m)) + (m + lp);
  }
  /// log p(target) (natural log) from the two final states (base 2); ATen's final lse.
  static __device__ __forceinline__ float finish(float l1, float l2) {
    float m = l1 > l2 ? l1 : l2;
    if (m == ninf<float>()) m = 0.0f;
    return (log2f(exp2f(l1 - m) + exp2f(l2 - m)) + m) * kOut;
  }
};
template <>
struct Recursion<double> {
  static constexpr double kIn = 1.0;
  static constexpr double kOut = 1.0;
  static __device__ __forceinline__ double step(double a1, double a2, double a3, double lp) {
    double m = a1;
    if (a2 > m) m = a2;
    if (a3 > m) m = a3;
    if (m == ninf<double>()) m = 0.0;
    return log(exp(a1 - m) + exp(a2 - m) + exp(a3 - m)) + m + lp;
  }
  static __device__ __forceinline__ double finish(double l1, double l2) {
    double m = l1 > l2 ? l1 : l2;
    if (m == ninf<double>()) m = 0.0;
    return log(exp(l1 - m) + exp(l2 - m)) + m;
  }
};

/// ATen's pairwise "log+=" of the gradient's per-class collection (ctc_loss_backward_collect).
template <class A>
__device__ __forceinline__ A log_add(A acc, A x) {
  if (acc == ninf<A>()) return x;
  const A m = acc > x ? acc : x;
  return glog(gexp(acc - m) + gexp(x - m)) + m;
}

__device__ __forceinline__ int64_t load_index(const void* p, bool is64, int64_t i) {
  return is64 ? static_cast<const int64_t*>(p)[i] : int64_t(static_cast<const int32_t*>(p)[i]);
}

/// Block-wide sum of integers (exact: any order gives the same value); every thread gets it.
/// blockDim.x is a multiple of 32.
__device__ __forceinline__ int64_t block_sum(int64_t v, int64_t* red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  int64_t s = 0;
  for (int w = 0; w < int(blockDim.x >> 5); ++w) s += red[w];
  return s;
}

/// What an item CTA knows about its item after the checks (identical in every thread).
struct ItemInfo {
  int64_t tn = 0, sn = 0;      ///< input / target length, as given
  int64_t base = 0, step = 0;  ///< element offset of label 0 in targets, and between labels
  bool invalid = false;        ///< kCtcErrorInvalid (NaN loss and gradient)
  bool mismatch = false;       ///< concatenated: total length != targets.numel() (torch raises; flag only)
  bool blank_label = false;    ///< kCtcErrorBlankTarget
};

/// The checks of ctc_loss.hpp ("Invalid input"), without an out-of-bounds read: lengths first, then
/// the target slice's bounds, then every label of the slice. Labels of the first s_cap positions go to
/// `labels` (shared memory). Block-wide: every thread calls it.
__device__ ItemInfo analyse_item(const CtcLaunch& p, int64_t n, int32_t* labels, int64_t* red) {
  ItemInfo it;
  it.tn = load_index(p.input_lengths, p.il64, n * p.il_stride);
  it.sn = load_index(p.target_lengths, p.tl64, n * p.tl_stride);
  bool bad = it.tn < 0 || it.tn > p.T || it.sn < 0;
  it.step = p.tg_s1;
  if (p.padded) {
    it.base = n * p.tg_s0;
    bad = bad || it.sn > p.tg_len;
  } else {  // the offset is the sum of the lengths before this item
    int64_t part = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) part += load_index(p.target_lengths, p.tl64, i * p.tl_stride);
    const int64_t pos = block_sum(part, red);
    bad = bad || pos < 0 || pos > p.tg_len || it.sn > p.tg_len - pos;
    it.base = pos * p.tg_s1;
    it.mismatch = !bad && n == p.N - 1 && pos + it.sn != p.tg_len;
  }
  // A length the states were not sized for (a max_target_length below the real one, not past T).
  bad = bad || (it.sn > p.s_cap && it.sn <= p.T);
  bool label_bad = false, label_blank = false;
  if (!bad) {
    for (int64_t j = threadIdx.x; j < it.sn; j += blockDim.x) {
      const int64_t c = load_index(p.targets, p.target64, it.base + j * it.step);
      if (c < 0 || c >= p.C)
        label_bad = true;
      else if (c == p.blank)
        label_blank = true;
      if (j < p.s_cap) labels[j] = static_cast<int32_t>(c);
    }
  }
  it.invalid = __syncthreads_or(bad || label_bad) != 0;
  it.blank_label = __syncthreads_or(label_blank) != 0;
  return it;
}

/// Label of target position j (validated): shared memory for the first s_cap positions.
__device__ __forceinline__ int32_t label_at(const CtcLaunch& p, const ItemInfo& it, const int32_t* labels, int64_t j) {
  return j < p.s_cap ? labels[j] : static_cast<int32_t>(load_index(p.targets, p.target64, it.base + j * it.step));
}

/// The backward's tables for item n (see ctc_launch.hpp). Block-wide.
__device__ void build_tables(const CtcLaunch& p, int64_t n, const ItemInfo& it, const int32_t* labels, bool states,
                             bool want_first) {
  int32_t* first = p.first + n * p.C;
  for (int64_t c = threadIdx.x; c < p.C; c += blockDim.x) first[c] = -1;
  __syncthreads();  // the -1s land before the positions below overwrite some of them
  if (!want_first) return;
  for (int64_t j = threadIdx.x; j < it.sn; j += blockDim.x) {
    const int32_t c = label_at(p, it, labels, j);
    bool is_first = true;
    for (int64_t i = 0; i < j && is_first; ++i) is_first = label_at(p, it, labels, i) != c;
    if (is_first) first[c] = static_cast<int32_t>(j);
    if (states) {  // sn <= s_cap: every label is in shared memory
      int32_t nx = -1;
      for (int64_t i = j + 1; i < it.sn; ++i)
        if (labels[i] == c) {
          nx = static_cast<int32_t>(i);
          break;
        }
      p.next[n * p.s_cap + j] = nx;
    }
  }
}

/// The forward's per-item outputs (one thread).
template <class T, class A>
__device__ __forceinline__ void write_item_loss(const CtcLaunch& p, int64_t n, A nll, int64_t sn) {
  if (p.nll) static_cast<A*>(p.nll)[n] = nll;
  const A v = p.zero_infinity && nll == pinf<A>() ? A(0) : nll;
  if (p.reduction == Reduction::none)
    static_cast<T*>(p.out)[n * p.out_stride] = convert<T>(v);
  else  // mean: torch's res / target_lengths.clamp_min(1) before the batch mean
    static_cast<A*>(p.item_loss)[n] = p.reduction == Reduction::mean ? v / A(sn > 1 ? sn : 1) : v;
}

template <class T, class A, int K>
__global__ void __launch_bounds__(detail::kCtcMaxThreads) ctc_item_kernel(const CtcLaunch p) {
  // f64 keeps half as many loads in flight: its exp / log chain is long enough to cover the rest, and
  // 1024 threads leave 64 registers a thread.
  constexpr int D = (sizeof(A) == 8 ? detail::kCtcPrefetch / 2 : detail::kCtcPrefetch) / K > 0
                        ? (sizeof(A) == 8 ? detail::kCtcPrefetch / 2 : detail::kCtcPrefetch) / K
                        : 1;
  extern __shared__ __align__(16) unsigned char ctc_smem[];
  __shared__ int64_t red[32];
  A* buf = reinterpret_cast<A*>(ctc_smem);                           // [2][states]
  int32_t* labels = reinterpret_cast<int32_t*>(buf + 2 * p.states);  // [s_cap]
  const int64_t n = blockIdx.x;
  const bool beta = p.backward || blockIdx.y == 1;
  const bool owner = blockIdx.y == 0;  // the CTA that reports this item (flags, loss, record)
  using R = Recursion<A>;
  const ItemInfo it = analyse_item(p, n, labels, red);
  const int64_t tn = it.tn, sn = it.sn;
  const bool infeasible = !it.invalid && sn > p.s_cap;  // sn > T: no alignment, no state stored
  if (owner && threadIdx.x == 0 && p.error) {
    const int32_t bits =
        (it.invalid || it.mismatch ? kCtcErrorInvalid : 0) | (it.blank_label ? kCtcErrorBlankTarget : 0);
    // Items report different bits: an OR (the flag's final value does not depend on the order).
    if (bits) atomicOr(p.error, bits);
  }
  if (p.backward) {
    if (owner && threadIdx.x == 0)
      p.items[n] = CtcItem{
          tn, sn, it.invalid ? detail::kCtcItemInvalid : (infeasible ? detail::kCtcItemInfeasible : detail::kCtcItemOk),
          0};
    // Infeasible items need their classes only for ATen's large-path NaN pattern.
    build_tables(p, n, it, labels, !it.invalid && !infeasible, !it.invalid && (!infeasible || p.torch_large));
  }
  const bool recurse = (!p.backward || p.beta) && !it.invalid && !infeasible && tn > 0;
  A nll = A(0);
  if (it.invalid)
    nll = qnan<A>();
  else if (tn == 0)
    nll = sn == 0 ? A(0) : pinf<A>();
  else if (infeasible)
    nll = pinf<A>();
  if (recurse) {
    const int64_t L = 2 * sn + 1;
    const T* lp_n = static_cast<const T*>(p.log_probs) + n * p.lp_sn;
    A* save = static_cast<A*>(beta ? p.log_beta : p.log_alpha);
    // Per state: s' (the recursion's index), s (ATen's), its log_probs column at the recursion's step 0
    // (time tn - 1 for beta) and the step between recursion steps, the three-term case.
    const int64_t lp_step = beta ? -p.lp_st : p.lp_st;
    const int64_t save_step = beta ? -p.states : p.states;
    int64_t sp[K], st[K];
    const T* col[K];
    A* out_k[K];  // &save[n, time of step 0, s]
    bool act[K], three[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      sp[k] = threadIdx.x + int64_t(k) * blockDim.x;
      act[k] = sp[k] < L;
      st[k] = beta ? 2 * sn - sp[k] : sp[k];
      int32_t lab = static_cast<int32_t>(p.blank);
      three[k] = false;
      if (act[k] && (st[k] & 1)) {
        lab = labels[(st[k] - 1) / 2];
        // l'_{s -+ 2} != l'_s (alpha: s - 2, beta: s + 2; both odd, so both target labels)
        if (sp[k] >= 3) three[k] = labels[(beta ? st[k] + 1 : st[k] - 3) / 2] != lab;
      }
      col[k] = lp_n + int64_t(lab) * p.lp_sc + (beta ? tn - 1 : 0) * p.lp_st;
      out_k[k] = save ? save + n * p.T * p.states + (beta ? tn - 1 : 0) * p.states + st[k] : nullptr;
    }
    // Step 0: the blank (s' = 0) and the first label (s' = 1) start a path.
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if (!act[k]) continue;
      const A v = sp[k] <= 1 ? A(load_as_opmath(col[k][0])) * R::kIn : ninf<A>();
      buf[sp[k]] = v;
      if (save) *out_k[k] = v * R::kOut;
    }
    A ring[K][D];
#pragma unroll
    for (int k = 0; k < K; ++k)
#pragma unroll
      for (int d = 0; d < D; ++d)
        ring[k][d] = act[k] && 1 + d < tn ? A(load_as_opmath(col[k][(1 + d) * lp_step])) * R::kIn : A(0);
    for (int64_t t0 = 1; t0 < tn; t0 += D) {
#pragma unroll
      for (int d = 0; d < D; ++d) {
        const int64_t tp = t0 + d;
        if (tp >= tn) break;
        __syncthreads();  // step tp - 1 is complete (and step tp - 2's row, overwritten now, was read)
        const A* prev = buf + ((tp - 1) & 1) * p.states;
        A* cur = buf + (tp & 1) * p.states;
#pragma unroll
        for (int k = 0; k < K; ++k) {
          if (!act[k]) continue;
          const A lpv = ring[k][d];
          if (tp + D < tn) ring[k][d] = A(load_as_opmath(col[k][(tp + D) * lp_step])) * R::kIn;
          const int64_t s = sp[k];
          const A a1 = prev[s];
          const A a2 = s > 0 ? prev[s - 1] : ninf<A>();
          const A a3 = three[k] ? prev[s - 2] : ninf<A>();
          const A v = R::step(a1, a2, a3, lpv);
          cur[s] = v;
          if (save) out_k[k][tp * save_step] = v * R::kOut;
        }
      }
    }
    __syncthreads();
    if (!beta) {  // eq. (8): the path ends in the last blank or the last label
      const A* last = buf + ((tn - 1) & 1) * p.states;
      nll = -R::finish(last[2 * sn], sn > 0 ? last[2 * sn - 1] : ninf<A>());
    }
  }
  if (!p.backward && owner && threadIdx.x == 0) write_item_loss<T, A>(p, n, nll, sn);
}

/// Reduced forward: out = sum (or mean) of the per-item losses, summed in a fixed order.
template <class T, class A>
__global__ void __launch_bounds__(detail::kCtcSumThreads) ctc_sum_kernel(const CtcLaunch p) {
  __shared__ A warp_sums[detail::kCtcSumThreads / 32];
  const A* v = static_cast<const A*>(p.item_loss);
  A s = A(0);
  for (int64_t i = threadIdx.x; i < p.N; i += detail::kCtcSumThreads) s += v[i];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = s;
  __syncthreads();
  if (threadIdx.x != 0) return;
  A r = A(0);
  for (int w = 0; w < detail::kCtcSumThreads / 32; ++w) r += warp_sums[w];
  // torch's mean: sum * (1 / N) (ATen's MeanOps factor); an empty batch gives 0 * inf = NaN.
  if (p.reduction == Reduction::mean) r = r * A(1.0 / static_cast<double>(p.N));
  *static_cast<T*>(p.out) = convert<T>(r);
}

/// Sum over a warp with a fixed butterfly: every lane gets identical bits.
template <class A>
__device__ __forceinline__ A warp_sum(A v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
template <class A>
__device__ __forceinline__ A warp_max(A v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const A w = __shfl_xor_sync(0xffffffffu, v, o);
    v = w > v ? w : v;
  }
  return v;
}

/// The gradient: one warp per (t, n) row, rows in [T, N] order. Every element written once.
template <class T, class A>
__global__ void __launch_bounds__(detail::kCtcGradWarps * 32) ctc_grad_kernel(const CtcLaunch p) {
  constexpr int U = 4;  // classes a lane loads before it computes: loads in flight
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * detail::kCtcGradWarps + (threadIdx.x >> 5);
  if (row >= p.T * p.N) return;
  const int64_t t = row / p.N, n = row - t * p.N;
  const CtcItem item = p.items[n];
  T* g = static_cast<T*>(p.grad) + t * p.g_st + n * p.g_sn;
  const T* lp = static_cast<const T*>(p.log_probs) + t * p.lp_st + n * p.lp_sn;
  const A nll = static_cast<const A*>(p.nll)[n];
  bool formula = false;
  A fill = A(0);
  if (item.status == detail::kCtcItemInvalid)
    fill = qnan<A>();
  else if (t >= item.input_length || (p.zero_infinity && nll == pinf<A>()))
    fill = A(0);  // padding past the input (ATen's zero_padded_gradients), zero_infinity
  else
    formula = true;
  if (!formula) {
    const T f = convert<T>(fill);
    for (int64_t c = lane; c < p.C; c += 32) g[c * p.g_sc] = f;
    return;
  }
  A gr = A(load_as_opmath(static_cast<const T*>(p.dy)[p.dy_scalar ? 0 : n * p.dy_stride]));
  if (p.reduction == Reduction::mean)  // autograd of (nll / clamp(tl, 1)).mean(): (dy / N) / clamp(tl, 1)
    gr = (gr / A(p.N)) / A(item.target_length > 1 ? item.target_length : 1);
  const bool states = item.status == detail::kCtcItemOk;
  const int64_t sn = item.target_length;
  const A* la = static_cast<const A*>(p.log_alpha) + (n * p.T + t) * p.states;
  const A* lb = static_cast<const A*>(p.log_beta) + (n * p.T + t) * p.states;
  const int32_t* first = p.first + n * p.C;
  const int32_t* next = p.next + n * p.s_cap;
  // log sum of exp(alpha + beta) over the states of one label, following the links (fixed order).
  auto collect = [&](A acc, int32_t j) {
    for (; j >= 0; j = next[j]) acc = log_add(acc, la[2 * j + 1] + lb[2 * j + 1]);
    return acc;
  };
  A blank_ab = ninf<A>();
  if (states) {
    // The blank's states s = 0, 2, ..., 2 sn: a max, then a sum of exp(x - max), lanes strided.
    A m = ninf<A>();
    for (int64_t s = 2 * lane; s <= 2 * sn; s += 64) {
      const A x = la[s] + lb[s];
      m = x > m ? x : m;
    }
    m = warp_max(m);
    const A shift = m == ninf<A>() ? A(0) : m;
    A sum = A(0);
    for (int64_t s = 2 * lane; s <= 2 * sn; s += 64) sum += gexp(la[s] + lb[s] - shift);
    sum = warp_sum(sum);
    blank_ab = glog(sum) + shift;
    blank_ab = collect(blank_ab, first[p.blank]);  // odd states whose label is the blank
  }
  for (int64_t c0 = lane; c0 < p.C; c0 += 32 * U) {
    A x[U];
    int32_t j[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t c = c0 + 32 * u;
      x[u] = A(0);
      j[u] = -1;
      if (c < p.C) {
        x[u] = A(load_as_opmath(lp[c * p.lp_sc]));
        j[u] = first[c];
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t c = c0 + 32 * u;
      if (c >= p.C) break;
      const bool is_blank = c == p.blank;
      const bool present = is_blank || j[u] >= 0;
      A ab = ninf<A>();
      if (is_blank)
        ab = blank_ab;
      else if (present && states)
        ab = collect(ninf<A>(), j[u]);
      const A e = gexp(x[u]);
      // ATen's large path writes exp(lp) * g for classes outside the target (its small path subtracts
      // exp(-inf + nll - lp): NaN where nll is +inf); see ctc_loss.hpp.
      const A r = !present && p.torch_large ? e * gr : (e - gexp(ab + nll - x[u])) * gr;
      g[c * p.g_sc] = convert<T>(r);
    }
  }
}

// ---- launch sequence ----------------------------------------------------------------------------------
template <class T, class A, int K>
cudaError_t launch_items(const CtcLaunch& p, cudaStream_t stream) {
  constexpr auto kernel = &ctc_item_kernel<T, A, K>;
  if (const cudaError_t e = allow_smem<kernel>(static_cast<size_t>(p.smem_bytes)); e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>(p.N), !p.backward && p.beta ? 2u : 1u);
  kernel<<<grid, p.threads, p.smem_bytes, stream>>>(p);
  return cudaGetLastError();
}

template <class T>
cudaError_t ctc_run_impl(const CtcLaunch& p, cudaStream_t stream) {
  using A = opmath_t<T>;
  cudaError_t e = cudaSuccess;
  if (p.N > 0) {
    switch (p.k) {
      case 1:
        e = launch_items<T, A, 1>(p, stream);
        break;
      case 2:
        e = launch_items<T, A, 2>(p, stream);
        break;
      default:
        e = launch_items<T, A, 4>(p, stream);
        break;
    }
    if (e != cudaSuccess) return e;
  }
  if (!p.backward) {
    if (p.reduction != Reduction::none) {
      ctc_sum_kernel<T, A><<<1, detail::kCtcSumThreads, 0, stream>>>(p);
      e = cudaGetLastError();
    }
    return e;
  }
  const int64_t rows = p.T * p.N;
  if (rows > 0 && p.C > 0) {
    const int64_t blocks = (rows + detail::kCtcGradWarps - 1) / detail::kCtcGradWarps;
    ctc_grad_kernel<T, A><<<static_cast<unsigned>(blocks), detail::kCtcGradWarps * 32, 0, stream>>>(p);
    e = cudaGetLastError();
  }
  return e;
}

}  // namespace baracuda::kern::ctc
