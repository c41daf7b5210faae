// The row kernel of cross_entropy and nll_loss: ONE template for every (op, target kind,
// direction), parameterized by a mode (what the row pass reduces, what a row and an element
// become).
//
// A group of `tpr` threads (1..512, a power of two) owns a row: the C elements along the class
// axis. Lane l holds items (l + u * tpr) * kV .. + kV of each chunk of tpr * kU * kV (u < kU), so
// with kV = 16 / sizeof(T) a group's loads are contiguous 16-byte vectors. The row is streamed:
// one pass merges (max, sum of exp(x - max)) online per chunk (one exp per element plus one
// rescale per chunk), and, for label smoothing or probability targets, plain sums of w_c x_c and
// w_c p_c; the gradient pass reads the row once more and writes it. tpr = 1 with kV = 1 is the
// "column" mapping for a strided class axis ([N, C, H, W]): adjacent threads own adjacent
// positions, so every load of a warp is contiguous.
//
// Group reductions: shuffles, plus one shared-memory step in fixed order when a group spans
// several warps, so every thread of the group holds identical bits; the launch shape is a
// function of the problem only. Per-row losses go to the workspace and a fixed-order two-stage
// sum (loss_sum.cuh) reduces them: no atomics. The fused forward + gradient of rows longer than
// one CTA holds runs on thread-block clusters instead (cluster_kernel.cuh: one read of the row).
#pragma once
#include <cuda_runtime.h>

#include "kernels/common/dtype_traits.cuh"
#include "kernels/common/elementwise.cuh"  // VecOf, load_vec, store_vec
#include "ops/loss/class_common.cuh"
#include "ops/loss/cluster_kernel.cuh"
#include "ops/loss/loss_launch.hpp"
#include "ops/loss/loss_sum.cuh"

namespace baracuda::kern::loss {

// ---- modes -----------------------------------------------------------------------------------------
/// kFw: per-row loss (and lse); kGrad: the gradient pass; kProbs: probability targets; kNll: the
/// input holds log-probabilities (no softmax).
template <bool Fw, bool Grad, bool Probs, bool Nll>
struct ClassMode {
  static constexpr bool kFw = Fw, kGrad = Grad, kProbs = Probs, kNll = Nll;
  /// A pass over the row before the outputs: cross_entropy's forward (lse and the sums), and the
  /// probability-target backward (the sum of w_c p'_c only: lse comes from the forward).
  static constexpr bool kPass = !Nll && (Fw || Probs);
  static constexpr bool kPassReadsInput = !Nll && Fw;
};

/// Vectors (or scalars) a thread holds per chunk.
inline constexpr int kClassUnroll = 4;

// L2 eviction priorities for the fused forward + gradient (sm_80+ createpolicy / cache_hint): the
// reduction pass reads a row with evict_last so it is still in L2 when the gradient pass reads it
// again (evict_first: its last use) a few microseconds later, and the gradient is stored
// evict_first, so the streaming writes do not push the rows out. With one 512-thread CTA a row in
// flight per SM, the rows in flight (132 x 256 KB for a bf16 128256-vocabulary) fit H100's 50 MB
// L2, and the pair of passes costs about one DRAM read. Other modes take the default policy.
enum class L2Hint { normal, keep, last_use };

__device__ __forceinline__ uint64_t l2_policy(L2Hint h) {
  uint64_t pol = 0;
#if defined(__CUDA_ARCH__)
  if (h == L2Hint::keep)
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
  else
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
#endif
  return pol;
}

/// 16 bytes with an L2 cache policy (a plain load where there is none, e.g. host emulation).
__device__ __forceinline__ uint4 ld16_hint(const void* p, uint64_t pol) {
  uint4 r;
#if defined(__CUDA_ARCH__)
  asm volatile("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p), "l"(pol));
#else
  (void)pol;
  memcpy(&r, p, sizeof(r));
#endif
  return r;
}
__device__ __forceinline__ void st16_hint(void* p, uint4 v, uint64_t pol) {
#if defined(__CUDA_ARCH__)
  asm volatile("st.global.L2::cache_hint.v4.u32 [%0], {%1, %2, %3, %4}, %5;" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z),
               "r"(v.w), "l"(pol)
               : "memory");
#else
  (void)pol;
  memcpy(p, &v, sizeof(v));
#endif
}

/// Loads kV adjacent classes starting at class j0 (a 16-byte vector when kV > 1, unit class
/// stride) or one class of stride cs, kept in the storage type: widened at each use, so a 16-bit
/// chunk takes half the registers (the kernel's occupancy is bound by them). kHint: the L2
/// policy `pol` applies (16-byte path only).
template <class T, int kV, bool kHint = false>
__device__ __forceinline__ VecOf<T, kV> load_raw(const T* base, int64_t j0, int64_t cs, uint64_t pol = 0) {
  if constexpr (kV > 1) {
    if constexpr (kHint) {
      const uint4 r = ld16_hint(base + j0, pol);
      VecOf<T, kV> v;
      memcpy(&v, &r, sizeof(v));
      return v;
    } else {
      return load_vec<T, kV>(base + j0);
    }
  } else {
    VecOf<T, 1> r;
    r.v[0] = base[j0 * cs];
    return r;
  }
}
template <class T, int kV, bool kHint = false>
__device__ __forceinline__ void store_items(T* base, int64_t j0, int64_t cs, const opmath_t<T> (&src)[kV],
                                            uint64_t pol = 0) {
  if constexpr (kV > 1) {
    VecOf<T, kV> v;
#pragma unroll
    for (int e = 0; e < kV; ++e) v.v[e] = convert<T>(src[e]);
    if constexpr (kHint) {
      uint4 r;
      memcpy(&r, &v, sizeof(r));
      st16_hint(base + j0, r, pol);
    } else {
      store_vec<T, kV>(base + j0, v);
    }
  } else {
    base[j0 * cs] = convert<T>(src[0]);
  }
}

template <class T, class Mode, int kV>
__global__ void __launch_bounds__(512) class_rows_kernel(const ClassLaunch p) {
  using M = opmath_t<T>;
  constexpr bool kFast = sizeof(T) == 2;
  // The fused forward + gradient reads each row twice: L2 policies keep it between the passes.
  constexpr bool kFused = Mode::kFw && Mode::kGrad && kV > 1;
  uint64_t pol_keep = 0, pol_drop = 0;
  if constexpr (kFused) {
    pol_keep = l2_policy(L2Hint::keep);
    pol_drop = l2_policy(L2Hint::last_use);
  }
  constexpr int kU = kClassUnroll;       // the reduction pass: vectors a thread loads per chunk
  constexpr int kU2 = kClassUnroll / 2;  // the gradient pass (more live values an element)
  __shared__ RowAcc<M> red[512 / 32];

  const int tpr = p.tpr;
  const int lane = threadIdx.x & (tpr - 1);
  const int groups = blockDim.x / tpr;
  const int g = threadIdx.x / tpr;
  const int64_t C = p.classes;
  const int64_t chunk = int64_t(tpr) * kU * kV;
  const int64_t chunk2 = int64_t(tpr) * kU2 * kV;
  const T* x = static_cast<const T*>(p.input);
  const T* prob = static_cast<const T*>(p.probs_target);
  const T* w = static_cast<const T*>(p.weight);
  T* dx = static_cast<T*>(p.dinput);
  T* dp = static_cast<T*>(p.dprobs);
  const int64_t cs_x = p.cstride[detail::kCsInput], cs_p = p.cstride[detail::kCsProbs];
  const int64_t cs_dx = p.cstride[detail::kCsDinput], cs_dp = p.cstride[detail::kCsDprobs];
  const M eps = static_cast<M>(p.smoothing);
  const M eps_c = eps / static_cast<M>(C);  // label smoothing's uniform share
  // Probability targets are smoothed as p' = (1 - eps) p + eps / C (torch).
  auto smooth = [&](M q) { return (M(1) - eps) * q + eps_c; };
  const bool sums = Mode::kProbs || eps != M(0);  // the pass also sums w x and w (uniform)

  // Launch-wide factors of the gradient: dy (when one element), the mean's divisor (total weight
  // of the non-ignored targets, or the row count for probabilities), the total class weight
  // (label smoothing with weights, backward: computed by a first tiny kernel).
  M gscale = M(1);
  M wsum_all = static_cast<M>(C);
  if constexpr (Mode::kGrad) {
    if (p.reduction == Reduction::mean) {
      if (Mode::kProbs)
        gscale = M(1) / static_cast<M>(p.rows);
      else if (!Mode::kFw || p.total_weight_in)
        gscale = M(1) / static_cast<const M*>(p.total_weight_in)[0];
      else
        gscale = M(1) / static_cast<const M*>(p.scratch)[0];
    }
    if (p.dy && !p.dy_rows) gscale *= load_as_opmath(static_cast<const T*>(p.dy)[0]);
    if (!Mode::kFw && w && eps != M(0)) wsum_all = static_cast<const M*>(p.scratch)[1];
  }

  for (int64_t r0 = int64_t(blockIdx.x) * groups; r0 < p.rows; r0 += int64_t(gridDim.x) * groups) {
    const int64_t row = r0 + g;
    const bool active = row < p.rows;
    int64_t off[kCsNumSlots];
    row_offsets(p, active ? row : 0, off);
    RowTarget tg;
    M wt = M(1);
    if (!Mode::kProbs && active) {
      tg = read_target(p, off[detail::kCsTarget]);
      if (!tg.ignored && !tg.bad && w) wt = load_as_opmath(w[tg.t]);
      if (tg.bad && p.error && lane == 0) *p.error = 1;  // idempotent store, no atomic
    }
    // Rows whose elements are not read: ignored targets (their loss and gradient are 0) and
    // out-of-range ones (NaN). The loop and the group reduction still run (they are uniform).
    const bool live = active && !tg.ignored && !tg.bad;
    M xt = M(0);  // the target's logit (log-probability for nll_loss), read once per row
    if (Mode::kFw && !Mode::kProbs && live && lane == 0) xt = load_as_opmath(x[off[detail::kCsInput] + tg.t * cs_x]);

    RowAcc<M> acc{neg_inf<M>(), M(0), M(0), M(0)};
    if constexpr (Mode::kPass) {
      for (int64_t cb = 0; cb < C; cb += chunk) {
        VecOf<T, kV> v[kU], q[kU];
        bool ok[kU];
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          const int64_t j0 = cb + (int64_t(lane) + int64_t(u) * tpr) * kV;
          ok[u] = (live || (Mode::kProbs && active)) && j0 < C;
          if (ok[u]) {
            if (Mode::kPassReadsInput) v[u] = load_raw<T, kV, kFused>(x + off[detail::kCsInput], j0, cs_x, pol_keep);
            if (Mode::kProbs) q[u] = load_raw<T, kV, kFused>(prob + off[detail::kCsProbs], j0, cs_p, pol_keep);
          }
        }
        if constexpr (Mode::kPassReadsInput) {
          M cm = neg_inf<M>();
#pragma unroll
          for (int u = 0; u < kU; ++u)
#pragma unroll
            for (int e = 0; e < kV; ++e)
              if (ok[u]) cm = lmax(cm, load_as_opmath(v[u].v[e]));
          const M mn = lmax(acc.m, cm);
          const M base = mn == neg_inf<M>() ? M(0) : mn;  // exp(-inf - 0) = 0, exp(NaN - 0) = NaN
          M s = acc.s * lexp<kFast>(acc.m - base);
#pragma unroll
          for (int u = 0; u < kU; ++u)
#pragma unroll
            for (int e = 0; e < kV; ++e)
              if (ok[u]) s += lexp<kFast>(load_as_opmath(v[u].v[e]) - base);
          acc.s = s;
          acc.m = mn;
        }
        if (sums) {
#pragma unroll
          for (int u = 0; u < kU; ++u) {
            if (!ok[u]) continue;
            const int64_t j0 = cb + (int64_t(lane) + int64_t(u) * tpr) * kV;
#pragma unroll
            for (int e = 0; e < kV; ++e) {
              const M wc = w ? load_as_opmath(w[j0 + e]) : M(1);
              const M cw = Mode::kProbs ? wc * smooth(load_as_opmath(q[u].v[e])) : wc;
              if (Mode::kPassReadsInput) acc.a += cw * load_as_opmath(v[u].v[e]);
              acc.b += cw;
            }
          }
        }
      }
      acc = group_reduce<kFast>(acc, tpr, red);
    }

    M lse = M(0);
    if constexpr (Mode::kPassReadsInput) lse = acc.m + llog(acc.s);  // all -inf: -inf (loss NaN, as torch)
    if (Mode::kFw && active && lane == 0) {
      M l;
      if (Mode::kProbs) {
        l = lse * acc.b - acc.a;  // -sum_c w_c p'_c (x_c - lse)
      } else if (tg.ignored) {
        l = M(0);
      } else if (tg.bad) {
        l = quiet_nan<M>();
      } else if (Mode::kNll) {
        l = -wt * xt;
      } else {
        l = (M(1) - eps) * wt * (lse - xt);
        if (eps != M(0)) l += eps_c * ((w ? acc.b : static_cast<M>(C)) * lse - acc.a);
      }
      if (p.loss) static_cast<T*>(p.loss)[off[detail::kCsLoss]] = convert<T>(l);
      if (p.loss_rows) static_cast<M*>(p.loss_rows)[row] = l;
      if (p.weight_rows) static_cast<M*>(p.weight_rows)[row] = live ? wt : M(0);
      if (!Mode::kNll && p.lse_out) static_cast<M*>(p.lse_out)[row] = live || Mode::kProbs ? lse : M(0);
    }

    if constexpr (Mode::kGrad) {
      M gr = gscale;
      if (p.dy_rows && active) gr *= load_as_opmath(static_cast<const T*>(p.dy)[off[detail::kCsDy]]);
      if (!Mode::kFw && !Mode::kNll && active) lse = static_cast<const M*>(p.lse_in)[row];
      // dx_c = A exp(x_c - lse) - B w_c - [c == t] Ct (indices, smoothing eps; B = 0 without it);
      // probabilities: dx_c = g (S exp(x_c - lse) - w_c p'_c), S = sum_k w_k p'_k; nll_loss:
      // dx_c = [c == t] (-g w_t).
      const M wall = Mode::kFw ? (w && eps != M(0) ? acc.b : static_cast<M>(C)) : wsum_all;
      const M A = Mode::kProbs ? gr * acc.b : gr * ((M(1) - eps) * wt + eps_c * wall);
      const M B = gr * eps_c;
      const M Ct = Mode::kNll ? -gr * wt : gr * (M(1) - eps) * wt;
      // Ignored rows (zeros) and out-of-range ones (NaN) write a constant, read nothing.
      const bool constant = !Mode::kProbs && (tg.ignored || tg.bad);
      const M cval = tg.bad ? quiet_nan<M>() : M(0);
      const bool wneed = w && (Mode::kProbs || eps != M(0));
      for (int64_t cb = 0; cb < C; cb += chunk2) {
        VecOf<T, kV> v[kU2], q[kU2];
        bool ok[kU2];
#pragma unroll
        for (int u = 0; u < kU2; ++u) {
          const int64_t j0 = cb + (int64_t(lane) + int64_t(u) * tpr) * kV;
          ok[u] = active && j0 < C;
          if (ok[u] && !constant) {
            if (!Mode::kNll) v[u] = load_raw<T, kV, kFused>(x + off[detail::kCsInput], j0, cs_x, pol_drop);
            if (Mode::kProbs) q[u] = load_raw<T, kV, kFused>(prob + off[detail::kCsProbs], j0, cs_p, pol_drop);
          }
        }
#pragma unroll
        for (int u = 0; u < kU2; ++u) {
          if (!ok[u]) continue;
          const int64_t j0 = cb + (int64_t(lane) + int64_t(u) * tpr) * kV;
          const int64_t tj = tg.t - j0;  // the target's position in this vector, if any
          M o[kV], od[kV];
#pragma unroll
          for (int e = 0; e < kV; ++e) {
            if (constant) {
              o[e] = cval;
            } else if (Mode::kNll) {
              o[e] = e == tj ? Ct : M(0);
            } else {
              const M xv = load_as_opmath(v[u].v[e]);
              const M sm = lexp<kFast>(xv - lse);
              const M wc = wneed ? load_as_opmath(w[j0 + e]) : M(1);
              if (Mode::kProbs) {
                o[e] = A * sm - gr * wc * smooth(load_as_opmath(q[u].v[e]));
                od[e] = -gr * (M(1) - eps) * wc * (xv - lse);
              } else {
                o[e] = A * sm - B * wc - (e == tj ? Ct : M(0));
              }
            }
          }
          store_items<T, kV, kFused>(dx + off[detail::kCsDinput], j0, cs_dx, o, pol_drop);
          if (Mode::kProbs && dp) store_items<T, kV, kFused>(dp + off[detail::kCsDprobs], j0, cs_dp, od, pol_drop);
        }
      }
    }
  }
}

/// The fused forward gradient's mean divisor: stage 1 of the sum over rows of the target's
/// weight (0 for ignored and out-of-range targets). It depends on targets and weights only, so it
/// runs before the row kernel, which then scales the gradient without a host round trip.
template <class T>
__global__ void __launch_bounds__(kSumThreads) target_weight_kernel(const ClassLaunch p) {
  using M = opmath_t<T>;
  const int64_t lo = int64_t(blockIdx.x) * p.chunk;
  const int64_t hi = lo + p.chunk < p.rows ? lo + p.chunk : p.rows;
  const T* w = static_cast<const T*>(p.weight);
  Pair<M> v{M(0), M(0)};
  for (int64_t row = lo + threadIdx.x; row < hi; row += kSumThreads) {
    int64_t off[kCsNumSlots];
    row_offsets(p, row, off);
    const RowTarget tg = read_target(p, off[detail::kCsTarget]);
    if (!tg.ignored && !tg.bad) v.b += w ? load_as_opmath(w[tg.t]) : M(1);
  }
  v = block_sum(v);
  if (threadIdx.x == 0) static_cast<Pair<M>*>(p.partial)[blockIdx.x] = v;
}

/// The backward of a fused forward (computed with dy = 1): dx *= dy[0] in place over the contiguous
/// gradient, nothing when dy is 1 (every CTA reads dy and returns: no bytes move, no host sync).
/// Elementwise, so the grid does not change the result.
template <class T>
__global__ void __launch_bounds__(256) rescale_kernel(T* dx, int64_t n, const T* dy, bool vec) {
  using M = opmath_t<T>;
  constexpr int kV = int(16 / sizeof(T));
  const M g = load_as_opmath(dy[0]);
  if (g == M(1)) return;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  const int64_t tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t done = 0;
  if (vec) {
    const int64_t nv = n / kV;
    for (int64_t i = tid; i < nv; i += step) {
      VecOf<T, kV> v = load_vec<T, kV>(dx + i * kV);
#pragma unroll
      for (int e = 0; e < kV; ++e) v.v[e] = convert<T>(load_as_opmath(v.v[e]) * g);
      store_vec<T, kV>(dx + i * kV, v);
    }
    done = nv * kV;
  }
  for (int64_t i = done + tid; i < n; i += step) dx[i] = convert<T>(load_as_opmath(dx[i]) * g);
}

// ---- launch ------------------------------------------------------------------------------------------
template <class T, class Mode>
cudaError_t launch_class_rows(const ClassLaunch& p, cudaStream_t stream) {
  constexpr int kV = int(16 / sizeof(T));
  const int groups = p.block / p.tpr;
  int64_t ctas = (p.rows + groups - 1) / groups;
  if (ctas > (int64_t{1} << 30)) ctas = int64_t{1} << 30;  // the row loop covers the rest
  const dim3 grid(static_cast<unsigned>(ctas));
  if (p.vec)
    class_rows_kernel<T, Mode, kV><<<grid, p.block, 0, stream>>>(p);
  else
    class_rows_kernel<T, Mode, 1><<<grid, p.block, 0, stream>>>(p);
  return cudaGetLastError();
}

template <class T>
cudaError_t class_run(const ClassLaunch& p, cudaStream_t stream) {
  using M = opmath_t<T>;
  if (p.rescale) {
    const int64_t n = p.rows * p.classes;
    if (n == 0) return cudaSuccess;
    int64_t blocks = (n / int64_t(16 / sizeof(T)) + 255) / 256;
    blocks = blocks < 1 ? 1 : (blocks > 4096 ? 4096 : blocks);
    rescale_kernel<T>
        <<<unsigned(blocks), 256, 0, stream>>>(static_cast<T*>(p.dinput), n, static_cast<const T*>(p.dy), p.vec);
    return cudaGetLastError();
  }
  auto* partial = static_cast<Pair<M>*>(p.partial);
  M* scratch = static_cast<M*>(p.scratch);
  cudaError_t e = cudaSuccess;
  const bool mean_idx = p.reduction == Reduction::mean && !p.probs;
  const bool pre = p.phases & detail::kClassPhasePre, rows = p.phases & detail::kClassPhaseRows;
  const bool post = p.phases & detail::kClassPhasePost;
  // Before the rows: the fused gradient's mean divisor; the class weights' total (label
  // smoothing's backward with weights).
  if (pre && p.fw && p.grad && mean_idx && p.rows > 0) {
    target_weight_kernel<T><<<p.parts, kSumThreads, 0, stream>>>(p);
    detail::SumFinish f;
    f.sum_b_out = scratch;
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
    if ((e = launch_finish<T, M>(partial, p.parts, f, stream)) != cudaSuccess) return e;
  }
  if (pre && !p.fw && p.grad && !p.probs && p.weight && p.smoothing != 0 && p.classes > 0) {
    int parts = 1;
    int64_t chunk = 0;
    detail::loss_sum_partition(p.classes, &parts, &chunk);
    sum_vector_kernel<T, M>
        <<<parts, kSumThreads, 0, stream>>>(static_cast<const T*>(p.weight), p.classes, chunk, partial);
    detail::SumFinish f;
    f.sum_a_out = scratch + 1;
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
    if ((e = launch_finish<T, M>(partial, parts, f, stream)) != cudaSuccess) return e;
  }
  if (rows && p.rows > 0) {
    const bool nll = p.op == LossOp::nll_loss;
    if (nll) {
      e = p.fw ? launch_class_rows<T, ClassMode<true, false, false, true>>(p, stream)
               : launch_class_rows<T, ClassMode<false, true, false, true>>(p, stream);
    } else if (p.probs) {
      if (p.fw)
        e = p.grad ? launch_class_rows<T, ClassMode<true, true, true, false>>(p, stream)
                   : launch_class_rows<T, ClassMode<true, false, true, false>>(p, stream);
      else
        e = launch_class_rows<T, ClassMode<false, true, true, false>>(p, stream);
    } else {
      // The fused forward of long rows: the cluster kernel (one read of the row), where the loaded
      // code is sm_90+ and the device co-schedules the cluster; the streaming kernel otherwise.
      bool done = false;
      if (p.fw && p.grad && p.cluster > 0 && (e = launch_class_cluster<T>(p, stream, &done)) != cudaSuccess) return e;
      if (done)
        e = cudaSuccess;
      else if (p.fw && p.grad)
        e = launch_class_rows<T, ClassMode<true, true, false, false>>(p, stream);
      else if (p.fw)
        e = launch_class_rows<T, ClassMode<true, false, false, false>>(p, stream);
      else
        e = launch_class_rows<T, ClassMode<false, true, false, false>>(p, stream);
    }
    if (e != cudaSuccess) return e;
  }
  // After the rows: the reduction (an empty batch sums nothing: mean gives NaN, sum 0).
  if (post && p.fw && p.reduction != Reduction::none) {
    sum_rows_kernel<M><<<p.parts, kSumThreads, 0, stream>>>(
        static_cast<const M*>(p.loss_rows), static_cast<const M*>(p.weight_rows), p.rows, p.chunk, partial);
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
    detail::SumFinish f;
    f.out = p.out;
    f.sum_b_out = p.probs ? nullptr : p.total_weight_out;
    f.divide_by_b = mean_idx;
    f.scale = p.probs && p.reduction == Reduction::mean ? 1.0 / static_cast<double>(p.rows) : 1.0;
    if ((e = launch_finish<T, M>(partial, p.parts, f, stream)) != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace baracuda::kern::loss

namespace baracuda::detail {
template <DType D>
cudaError_t loss_class_run(const ClassLaunch& p, cudaStream_t stream) {
  return kern::loss::class_run<kern::storage_t<D>>(p, stream);
}
}  // namespace baracuda::detail

/// One translation unit per dtype (loss_class_<dtype>.cu).
#define BARACUDA_LOSS_CLASS_INSTANTIATE(D)                                                                        \
  template cudaError_t baracuda::detail::loss_class_run<baracuda::DType::D>(const baracuda::detail::ClassLaunch&, \
                                                                            cudaStream_t);
