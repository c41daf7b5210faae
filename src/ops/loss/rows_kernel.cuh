// The losses over the last dim (cosine_embedding, triplet_margin, multi_margin, multilabel_margin,
// multilabel_soft_margin): ONE kernel template, a functor per loss.
//
// A group of `tpr` threads (1..512, a power of two; the class kernel's mapping) owns a row: the D
// elements along the last dim of the broadcast inputs. Lane l visits elements l, l + tpr, ... (a
// warp's loads are contiguous when the last dim is), so a row of any length, stride or broadcast
// is one loop. The forward accumulates the functor's row sums (dot products, p-th powers, hinge
// terms), reduces them over the group (shuffles, then one shared-memory step in a fixed order: every
// thread of the group holds identical bits), and writes the row's loss to `out` (reduction none) or
// to the workspace, whose fixed-order two-stage sum (loss_sum.cuh) gives the reduced loss. The
// backward recomputes the sums (one more read; the rows are embeddings or class vectors, not worth
// a saved statistic) and writes every wanted gradient element by element.
//
// multilabel_margin needs, per element, whether it is one of the row's targets: the row's bytes of
// a workspace mask are cleared and set from the label list first (as ATen's is_target), and its
// backward adds each target's count of violating non-targets to that target's gradient in label
// order, one group reduction per label (a row's label count is made uniform over a warp with a max).
//
// Index targets outside [0, D) are never dereferenced: the row's loss and gradient are NaN and
// the optional error flag is set (an idempotent store).
#pragma once
#include <cuda_runtime.h>

#include <cuda/std/limits>

#include "kernels/common/dtype_traits.cuh"
#include "kernels/common/row_offsets.cuh"
#include "ops/loss/loss_launch.hpp"
#include "ops/loss/loss_sum.cuh"
#include "ops/loss/pointwise_kernel.cuh"  // pw_log / pw_exp / pw_abs / log_sigmoid / sigmoid

namespace baracuda::kern::loss {

using detail::kRsNumSlots;
using detail::RowsLaunch;

inline constexpr int kRowsMaxSums = 3;
inline constexpr int kRowsMaxThreads = 512;

__device__ __forceinline__ float rl_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double rl_sqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float rl_pow(float x, float y) { return powf(x, y); }
__device__ __forceinline__ double rl_pow(double x, double y) { return pow(x, y); }

/// Per-row values a functor's setup reads once (every lane of the group reads the same addresses).
template <class T>
struct RowCtx {
  using M = opmath_t<T>;
  M a = M(0), b = M(0);          ///< cosine_embedding: the target; multi_margin: x[t], weight[t]
  int64_t t = 0;                 ///< multi_margin: the class; multilabel_margin: the label count
  M d = M(0);                    ///< D, the row's length
  bool bad = false;              ///< an index target out of range: the row's loss and gradient are NaN
  const T* x = nullptr;          ///< in0's row (gathers at class positions)
  int64_t xs = 0;                ///< its stride along D
  const void* labels = nullptr;  ///< multilabel_margin's label row
  int64_t ls = 0;
  const uint8_t* flags = nullptr;  ///< multilabel_margin: the row's "is a target" bytes
};

template <class M>
struct RowParams {
  M p[kLossMaxParams];
};

__device__ __forceinline__ int64_t load_index(const void* base, int64_t off, bool is64) {
  return is64 ? static_cast<const int64_t*>(base)[off] : int64_t(static_cast<const int32_t*>(base)[off]);
}

// ---- the losses --------------------------------------------------------------------------------------
// Each: kIn (element-shaped floating inputs read), kSums (row sums), kBwSums (the backward needs
// them), kLabels (multilabel_margin's mask and label loop); setup(p, off, c) per row, sum(...) per
// element, loss(...) per row, grad(...) per element -> d[k] = d loss / d in[k] times g (the
// upstream gradient with the reduction's factor). Formulas follow ATen (named per loss).

/// cos = x1.x2 / sqrt((|x1|^2 + 1e-12)(|x2|^2 + 1e-12)); y == 1: 1 - cos; y == -1: max(0, cos -
/// margin); else 0 (ATen cosine_embedding_loss; the clamp passes the gradient where cos - margin
/// >= 0, clamp_min's rule).
struct CosineEmbeddingRows {
  static constexpr int kIn = 2, kSums = 3;
  static constexpr bool kBwSums = true, kLabels = false;
  template <class T>
  __device__ static void setup(const RowsLaunch& p, const int64_t (&off)[kRsNumSlots], RowCtx<T>& c) {
    c.a = load_as_opmath(static_cast<const T*>(p.target)[off[detail::kRsTarget]]);
  }
  template <class T, class M>
  __device__ static void sum(const RowCtx<T>&, const RowParams<M>&, int64_t, const M (&v)[kIn], M (&s)[kSums]) {
    s[0] += v[0] * v[1];
    s[1] += v[0] * v[0];
    s[2] += v[1] * v[1];
  }
  template <class M>
  __device__ static M cosine(const M (&s)[kSums], M* m1, M* m2, M* den) {
    *m1 = s[1] + M(1e-12);
    *m2 = s[2] + M(1e-12);
    *den = rl_sqrt(*m1 * *m2);
    return s[0] / *den;
  }
  template <class T, class M>
  __device__ static M loss(const RowCtx<T>& c, const RowParams<M>& q, const M (&s)[kSums]) {
    M m1, m2, den;
    const M cs = cosine(s, &m1, &m2, &den);
    if (c.a == M(1)) return M(1) - cs;
    if (c.a == M(-1)) {
      const M z = cs - q.p[0];
      return z > M(0) ? z : (z == z ? M(0) : z);  // clamp_min keeps a NaN
    }
    return M(0);
  }
  template <class T, class M>
  __device__ static void grad(const RowCtx<T>& c, const RowParams<M>& q, int64_t, const M (&v)[kIn],
                              const M (&s)[kSums], M g, M (&d)[3]) {
    M m1, m2, den;
    const M cs = cosine(s, &m1, &m2, &den);
    M dc = M(0);  // d loss / d cos
    if (c.a == M(1)) dc = -g;
    if (c.a == M(-1) && cs - q.p[0] >= M(0)) dc = g;
    d[0] = dc * (v[1] / den - cs * v[0] / m1);
    d[1] = dc * (v[0] / den - cs * v[1] / m2);
  }
};

/// d(u, w) = ||u - w + eps||_p over the row; max(0, margin + d(a, p) - d_neg), d_neg = d(a, n) or,
/// with swap, min(d(a, n), d(p, n)) (ATen triplet_margin_loss / pairwise_distance). Gradients
/// through norm's backward (0 where a norm is 0), minimum's (a tie splits it) and clamp_min's
/// (passes where the argument is >= 0).
struct TripletMarginRows {
  static constexpr int kIn = 3, kSums = 3;
  static constexpr bool kBwSums = true, kLabels = false;
  template <class T>
  __device__ static void setup(const RowsLaunch&, const int64_t (&)[kRsNumSlots], RowCtx<T>&) {}
  /// |v|^p (p = 1, 2 without pow).
  template <class M>
  __device__ static M powp(M v, M p) {
    const M a = pw_abs(v);
    return p == M(2) ? a * a : (p == M(1) ? a : rl_pow(a, p));
  }
  template <class M>
  __device__ static M root(M s, M p) {
    return p == M(2) ? rl_sqrt(s) : (p == M(1) ? s : rl_pow(s, M(1) / p));
  }
  /// d ||v||_p / d v_j at element v_j of a row whose norm is `n`.
  template <class M>
  __device__ static M dnorm(M v, M n, M p) {
    if (p == M(1)) return pw_sign(v);
    if (n == M(0)) return M(0);
    if (p == M(2)) return v / n;
    if (v == M(0)) return M(0);
    return pw_sign(v) * rl_pow(pw_abs(v), p - M(1)) / rl_pow(n, p - M(1));
  }
  template <class T, class M>
  __device__ static void sum(const RowCtx<T>&, const RowParams<M>& q, int64_t, const M (&v)[kIn], M (&s)[kSums]) {
    const M p = q.p[1], eps = q.p[2];
    s[0] += powp(v[0] - v[1] + eps, p);
    s[1] += powp(v[0] - v[2] + eps, p);
    if (q.p[3] != M(0)) s[2] += powp(v[1] - v[2] + eps, p);
  }
  /// Distances and the weights of d(a, n) and d(p, n) in d_neg.
  template <class M>
  __device__ static M distances(const RowParams<M>& q, const M (&s)[kSums], M* dap, M* dan, M* dpn, M* wan, M* wpn) {
    const M p = q.p[1];
    *dap = root(s[0], p);
    *dan = root(s[1], p);
    *dpn = q.p[3] != M(0) ? root(s[2], p) : M(0);
    *wan = M(1);
    *wpn = M(0);
    M dneg = *dan;
    if (q.p[3] != M(0)) {
      if (*dpn < *dan) {
        dneg = *dpn, *wan = M(0), *wpn = M(1);
      } else if (*dpn == *dan) {
        *wan = *wpn = M(0.5);
      } else if (!(*dpn > *dan)) {  // a NaN: torch.minimum propagates it
        dneg = *dpn + *dan;
      }
    }
    return q.p[0] + *dap - dneg;
  }
  template <class T, class M>
  __device__ static M loss(const RowCtx<T>&, const RowParams<M>& q, const M (&s)[kSums]) {
    M dap, dan, dpn, wan, wpn;
    const M z = distances(q, s, &dap, &dan, &dpn, &wan, &wpn);
    return z > M(0) ? z : (z == z ? M(0) : z);
  }
  template <class T, class M>
  __device__ static void grad(const RowCtx<T>&, const RowParams<M>& q, int64_t, const M (&v)[kIn], const M (&s)[kSums],
                              M g, M (&d)[3]) {
    M dap, dan, dpn, wan, wpn;
    const M z = distances(q, s, &dap, &dan, &dpn, &wan, &wpn);
    const M G = z >= M(0) ? g : M(0);
    const M p = q.p[1], eps = q.p[2];
    const M gap = G * dnorm(v[0] - v[1] + eps, dap, p);
    const M gan = wan != M(0) ? G * wan * dnorm(v[0] - v[2] + eps, dan, p) : M(0);
    const M gpn = wpn != M(0) ? G * wpn * dnorm(v[1] - v[2] + eps, dpn, p) : M(0);
    d[0] = gap - gan;
    d[1] = -gap - gpn;
    d[2] = gan + gpn;
  }
};

/// sum over i != y of max(0, margin - x[y] + x[i])^p (p = 1 or 2) times weight[y], over D (ATen
/// multi_margin_loss: strict z > 0 for the loss and the gradient).
struct MultiMarginRows {
  static constexpr int kIn = 1, kSums = 2;
  static constexpr bool kBwSums = true, kLabels = false;
  template <class T>
  __device__ static void setup(const RowsLaunch& p, const int64_t (&off)[kRsNumSlots], RowCtx<T>& c) {
    c.t = load_index(p.target, off[detail::kRsTarget], p.target64);
    c.bad = c.t < 0 || c.t >= p.cols;
    if (c.bad) {
      if (p.error) *p.error = 1;  // idempotent store, no atomic
      return;
    }
    c.a = load_as_opmath(c.x[c.t * c.xs]);
    c.b = p.weight ? load_as_opmath(static_cast<const T*>(p.weight)[c.t]) : opmath_t<T>(1);
  }
  template <class T, class M>
  __device__ static void sum(const RowCtx<T>& c, const RowParams<M>& q, int64_t j, const M (&v)[kIn], M (&s)[kSums]) {
    if (j == c.t) return;
    const M z = q.p[1] - c.a + v[0];
    if (z > M(0)) {
      s[0] += q.p[0] == M(1) ? z : z * z;
      s[1] += q.p[0] == M(1) ? M(1) : M(2) * z;
    }
  }
  template <class T, class M>
  __device__ static M loss(const RowCtx<T>& c, const RowParams<M>&, const M (&s)[kSums]) {
    return s[0] * c.b / c.d;
  }
  template <class T, class M>
  __device__ static void grad(const RowCtx<T>& c, const RowParams<M>& q, int64_t j, const M (&v)[kIn],
                              const M (&s)[kSums], M g, M (&d)[3]) {
    const M G = g * c.b / c.d;
    if (j == c.t) {
      d[0] = -G * s[1];
      return;
    }
    const M z = q.p[1] - c.a + v[0];
    d[0] = z > M(0) ? G * (q.p[0] == M(1) ? M(1) : M(2) * z) : M(0);
  }
};

/// sum over the row's targets y_k (the labels before the first negative one; repeats count again)
/// and its non-target classes i of max(0, 1 - x[y_k] + x[i]), over D (ATen multilabel_margin_loss).
/// A non-target's gradient counts its violations; a target's (the label loop in the kernel) minus
/// the violations of every non-target against it.
struct MultilabelMarginRows {
  static constexpr int kIn = 1, kSums = 1;
  static constexpr bool kBwSums = false, kLabels = true;
  template <class T>
  __device__ static void setup(const RowsLaunch& p, const int64_t (&off)[kRsNumSlots], RowCtx<T>& c) {
    c.labels = static_cast<const char*>(p.labels) + off[detail::kRsLabels] * (p.target64 ? 8 : 4);
    c.ls = p.estride[detail::kRsLabels];
    int64_t n = 0;
    for (; n < p.cols; ++n) {
      const int64_t y = load_index(c.labels, n * c.ls, p.target64);
      if (y < 0) break;
      if (y >= p.cols) c.bad = true;
    }
    c.t = n;
    if (c.bad && p.error) *p.error = 1;  // idempotent store, no atomic
  }
  template <class T>
  __device__ static int64_t label(const RowsLaunch& p, const RowCtx<T>& c, int64_t k) {
    return load_index(c.labels, k * c.ls, p.target64);
  }
  /// Violations of non-target x_j against every label: (sum of the hinge terms, their count).
  template <class T, class M>
  __device__ static void against_labels(const RowsLaunch& p, const RowCtx<T>& c, M xj, M* sum, M* count) {
    for (int64_t k = 0; k < c.t; ++k) {
      const M z = M(1) - load_as_opmath(c.x[label(p, c, k) * c.xs]) + xj;
      if (z > M(0)) {
        *sum += z;
        *count += M(1);
      }
    }
  }
  template <class T, class M>
  __device__ static M loss(const RowCtx<T>& c, const RowParams<M>&, const M (&s)[kSums]) {
    return s[0] / c.d;
  }
};

/// -(1/D) sum_c w_c (y_c log sigmoid(x_c) + (1 - y_c) log sigmoid(-x_c)) (torch's composite);
/// gradients w (sigmoid(x) - y) / D for the input, -w x / D for the target.
struct MultilabelSoftMarginRows {
  static constexpr int kIn = 3, kSums = 1;
  static constexpr bool kBwSums = false, kLabels = false;
  template <class T>
  __device__ static void setup(const RowsLaunch&, const int64_t (&)[kRsNumSlots], RowCtx<T>&) {}
  template <class T, class M>
  __device__ static void sum(const RowCtx<T>&, const RowParams<M>&, int64_t, const M (&v)[kIn], M (&s)[kSums]) {
    s[0] -= v[2] * (v[1] * log_sigmoid(v[0]) + (M(1) - v[1]) * log_sigmoid(-v[0]));
  }
  template <class T, class M>
  __device__ static M loss(const RowCtx<T>& c, const RowParams<M>&, const M (&s)[kSums]) {
    return s[0] / c.d;
  }
  template <class T, class M>
  __device__ static void grad(const RowCtx<T>& c, const RowParams<M>&, int64_t, const M (&v)[kIn], const M (&)[kSums],
                              M g, M (&d)[3]) {
    const M G = g * v[2] / c.d;
    d[0] = G * (sigmoid(v[0]) - v[1]);
    d[1] = -G * v[0];
  }
};

// ---- the kernel --------------------------------------------------------------------------------------
/// The group's sums of s[0..kS) (tpr threads); every thread of the group gets the same bits: an
/// xor butterfly (each lane adds the same pairs, + commutes bit for bit), then one shared-memory
/// step read by every thread in warp order.
template <int kS, class M>
__device__ __forceinline__ void group_sums(M (&s)[kS], int tpr, M* smem) {
  const int width = tpr < 32 ? tpr : 32;
  for (int o = width / 2; o > 0; o >>= 1)
#pragma unroll
    for (int k = 0; k < kS; ++k) s[k] += __shfl_xor_sync(0xffffffffu, s[k], o);
  if (tpr <= 32) return;
  const int warp = threadIdx.x / 32;
  __syncthreads();  // the previous readers are done with smem
  if ((threadIdx.x & 31) == 0)
#pragma unroll
    for (int k = 0; k < kS; ++k) smem[warp * kS + k] = s[k];
  __syncthreads();
#pragma unroll
  for (int k = 0; k < kS; ++k) {
    M r = smem[k];
    for (int w = 1; w < tpr / 32; ++w) r += smem[w * kS + k];
    s[k] = r;
  }
}

/// Orders the group's global-memory writes before its later reads (the group is a CTA when
/// tpr > 32, else lanes of one warp that all run this uniformly).
__device__ __forceinline__ void group_barrier(int tpr) {
  if (tpr > 32)
    __syncthreads();
  else
    __syncwarp();
}

template <class T, class Op, bool kBw>
__global__ void __launch_bounds__(kRowsMaxThreads) rows_kernel(const RowsLaunch p) {
  using M = opmath_t<T>;
  constexpr int kS = Op::kSums;
  __shared__ M red[kRowsMaxThreads / 32 * kRowsMaxSums];
  RowParams<M> q;
#pragma unroll
  for (int k = 0; k < kLossMaxParams; ++k) q.p[k] = static_cast<M>(p.params[k]);
  const int tpr = p.tpr;
  const int lane = threadIdx.x & (tpr - 1);
  const int groups = blockDim.x / tpr;
  const int g = threadIdx.x / tpr;
  const int64_t D = p.cols;
  const T* in[3] = {static_cast<const T*>(p.in[0]), static_cast<const T*>(p.in[1]), static_cast<const T*>(p.in[2])};

  for (int64_t r0 = int64_t(blockIdx.x) * groups; r0 < p.rows; r0 += int64_t(gridDim.x) * groups) {
    const int64_t row = r0 + g;
    const bool active = row < p.rows;
    int64_t off[kRsNumSlots];
    row_offsets(p, active ? row : 0, off);
    RowCtx<T> c;
    c.d = static_cast<M>(D);
    c.x = in[0] + off[detail::kRsIn0];
    c.xs = p.estride[detail::kRsIn0];
    if (active) Op::setup(p, off, c);
    const bool live = active && !c.bad;
    // The inputs of element j (absent ones read as 1: a missing weight).
    auto load = [&](int64_t j, M(&v)[Op::kIn]) {
#pragma unroll
      for (int k = 0; k < Op::kIn; ++k)
        v[k] = in[k] ? load_as_opmath(in[k][off[detail::kRsIn0 + k] + j * p.estride[detail::kRsIn0 + k]]) : M(1);
    };

    if constexpr (Op::kLabels) {  // the row's "is a target" mask: cleared, then set from the labels
      uint8_t* flags = p.flags + (active ? row : 0) * D;
      if (active)
        for (int64_t j = lane; j < D; j += tpr) flags[j] = 0;
      group_barrier(tpr);
      if (live)
        for (int64_t k = lane; k < c.t; k += tpr) flags[Op::label(p, c, k)] = 1;  // repeats store the same byte
      group_barrier(tpr);
      c.flags = flags;
    }

    M s[kS];
#pragma unroll
    for (int k = 0; k < kS; ++k) s[k] = M(0);
    if (!kBw || Op::kBwSums) {
      if (live) {
        for (int64_t j = lane; j < D; j += tpr) {
          M v[Op::kIn];
          load(j, v);
          if constexpr (Op::kLabels) {
            M cnt = M(0);
            if (!c.flags[j]) Op::against_labels(p, c, v[0], &s[0], &cnt);
          } else {
            Op::sum(c, q, j, v, s);
          }
        }
      }
      group_sums<kS>(s, tpr, red);
    }

    if constexpr (!kBw) {
      if (active && lane == 0) {
        const M l = c.bad ? cuda::std::numeric_limits<M>::quiet_NaN() : Op::loss(c, q, s);
        if (p.loss) static_cast<T*>(p.loss)[off[detail::kRsLoss]] = convert<T>(l);
        if (p.loss_rows) static_cast<M*>(p.loss_rows)[row] = l;
      }
    } else {
      M gr = static_cast<M>(p.scale);
      if (active && p.dy) gr *= load_as_opmath(static_cast<const T*>(p.dy)[p.dy_rows ? off[detail::kRsDy] : 0]);
      if (active) {
        for (int64_t j = lane; j < D; j += tpr) {
          M d[3] = {M(0), M(0), M(0)};
          if (c.bad) {
            d[0] = d[1] = d[2] = cuda::std::numeric_limits<M>::quiet_NaN();
          } else {
            M v[Op::kIn];
            load(j, v);
            if constexpr (Op::kLabels) {
              M sum = M(0), cnt = M(0);
              if (!c.flags[j]) Op::against_labels(p, c, v[0], &sum, &cnt);
              d[0] = gr / c.d * cnt;  // targets: 0 here, the label loop below subtracts
            } else {
              Op::grad(c, q, j, v, s, gr, d);
            }
          }
#pragma unroll
          for (int k = 0; k < 3; ++k)
            if (p.grad[k])
              static_cast<T*>(p.grad[k])[off[detail::kRsG0 + k] + j * p.estride[detail::kRsG0 + k]] = convert<T>(d[k]);
        }
      }
      if constexpr (Op::kLabels) {
        // Each label's target gets minus the count of non-targets violating against it, in label
        // order (lane 0 of the group, after the element stores above are visible).
        group_barrier(tpr);
        unsigned bound = live ? static_cast<unsigned>(c.t) : 0u;
        if (tpr <= 32) bound = __reduce_max_sync(0xffffffffu, bound);  // uniform over the warp
        T* dx = static_cast<T*>(p.grad[0]);
        for (unsigned k = 0; k < bound; ++k) {
          const bool valid = live && dx && int64_t(k) < c.t;
          M cnt[1] = {M(0)};
          int64_t y = 0;
          if (valid) {
            y = Op::label(p, c, k);
            const M xy = load_as_opmath(c.x[y * c.xs]);
            for (int64_t j = lane; j < D; j += tpr) {
              const M xj = load_as_opmath(c.x[j * c.xs]);
              if (!c.flags[j] && M(1) - xy + xj > M(0)) cnt[0] += M(1);
            }
          }
          group_sums<1>(cnt, tpr, red);
          if (valid && lane == 0) {
            T* at = dx + off[detail::kRsG0] + y * p.estride[detail::kRsG0];
            *at = convert<T>(load_as_opmath(*at) - gr / c.d * cnt[0]);
          }
        }
      }
    }
  }
}

// ---- launch ------------------------------------------------------------------------------------------
template <class T, class Op>
cudaError_t launch_rows(const RowsLaunch& p, cudaStream_t stream) {
  const int groups = p.block / p.tpr;
  int64_t ctas = (p.rows + groups - 1) / groups;
  if (ctas > (int64_t{1} << 30)) ctas = int64_t{1} << 30;  // the row loop covers the rest
  const dim3 grid(static_cast<unsigned>(ctas));
  if (p.fw)
    rows_kernel<T, Op, false><<<grid, p.block, 0, stream>>>(p);
  else
    rows_kernel<T, Op, true><<<grid, p.block, 0, stream>>>(p);
  return cudaGetLastError();
}

template <class T>
cudaError_t rows_run(const RowsLaunch& p, cudaStream_t stream) {
  using M = opmath_t<T>;
  cudaError_t e = cudaSuccess;
  if (p.rows > 0) {
    switch (p.op) {
      case LossOp::cosine_embedding_loss:
        e = launch_rows<T, CosineEmbeddingRows>(p, stream);
        break;
      case LossOp::triplet_margin_loss:
        e = launch_rows<T, TripletMarginRows>(p, stream);
        break;
      case LossOp::multi_margin_loss:
        e = launch_rows<T, MultiMarginRows>(p, stream);
        break;
      case LossOp::multilabel_margin_loss:
        e = launch_rows<T, MultilabelMarginRows>(p, stream);
        break;
      case LossOp::multilabel_soft_margin_loss:
        e = launch_rows<T, MultilabelSoftMarginRows>(p, stream);
        break;
      default:
        return cudaErrorInvalidValue;
    }
    if (e != cudaSuccess) return e;
  }
  // The reduction (an empty batch sums nothing: mean gives NaN, sum 0).
  if (p.fw && p.reduction != Reduction::none) {
    sum_rows_kernel<M><<<p.parts, kSumThreads, 0, stream>>>(static_cast<const M*>(p.loss_rows), nullptr, p.rows,
                                                            p.chunk, static_cast<Pair<M>*>(p.partial));
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
    return launch_finish<T, M>(static_cast<const Pair<M>*>(p.partial), p.parts, p.finish, stream);
  }
  return cudaSuccess;
}

}  // namespace baracuda::kern::loss

namespace baracuda::detail {
template <DType D>
cudaError_t loss_rows_run(const RowsLaunch& p, cudaStream_t stream) {
  return kern::loss::rows_run<kern::storage_t<D>>(p, stream);
}
}  // namespace baracuda::detail

/// One translation unit per dtype (loss_rows_<dtype>.cu).
#define BARACUDA_LOSS_ROWS_INSTANTIATE(D)                                                                       \
  template cudaError_t baracuda::detail::loss_rows_run<baracuda::DType::D>(const baracuda::detail::RowsLaunch&, \
                                                                           cudaStream_t);
