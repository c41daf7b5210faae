// The pointwise losses: one functor per loss (forward value, gradients) over ONE kernel template
// that walks the inputs' broadcast iteration (core/ew_iter: coalesced dims, stride 0 =
// broadcast) and either writes the loss per element (reduction none), sums it (mean / sum /
// batchmean: the first stage of a fixed-order two-stage sum, fused so the loss is never
// written), or writes the gradients (backward).
//
// Kernel shape: CTAs of kSumThreads threads; CTA b owns part b of a fixed partition of the
// elements (loss_sum_partition, a multiple of the 4096-element tile), walking it tile by tile;
// a thread holds 16 elements of a tile (16-byte vectors: kV = 16 / sizeof(T), 16 / kV of them in
// flight, or 16 scalars of a strided iteration). The partition and the order within a part
// depend on the problem only: sums are deterministic and bit-stable. f16/bf16 compute in f32, f64
// in f64.
#pragma once
#include <cuda_runtime.h>

#include <cuda/std/limits>

#include "kernels/common/dtype_traits.cuh"
#include "kernels/common/elementwise.cuh"  // VecOf, load_vec, store_vec
#include "kernels/common/row_offsets.cuh"
#include "ops/loss/loss_launch.hpp"
#include "ops/loss/loss_sum.cuh"

namespace baracuda::kern::loss {

using detail::PointwiseLaunch;

// ---- math ------------------------------------------------------------------------------------------
__device__ __forceinline__ float pw_log(float x) { return logf(x); }
__device__ __forceinline__ double pw_log(double x) { return log(x); }
__device__ __forceinline__ float pw_log1p(float x) { return log1pf(x); }
__device__ __forceinline__ double pw_log1p(double x) { return log1p(x); }
__device__ __forceinline__ float pw_exp(float x) { return expf(x); }
__device__ __forceinline__ double pw_exp(double x) { return exp(x); }
__device__ __forceinline__ float pw_abs(float x) { return fabsf(x); }
__device__ __forceinline__ double pw_abs(double x) { return fabs(x); }
/// torch's sign for reals: (0 < x) - (x < 0), so 0 (and NaN) give 0.
template <class M>
__device__ __forceinline__ M pw_sign(M x) {
  return M((M(0) < x) - (x < M(0)));
}
/// log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|)) (ATen's log_sigmoid forward).
template <class M>
__device__ __forceinline__ M log_sigmoid(M x) {
  return (x < M(0) ? x : M(0)) - pw_log1p(pw_exp(-pw_abs(x)));
}
template <class M>
__device__ __forceinline__ M sigmoid(M x) {
  return M(1) / (M(1) + pw_exp(-x));
}

/// Parameters of a call in opmath: the table's scalar parameters and which optional inputs are
/// present (bit k: input k).
template <class M>
struct PwParams {
  M p[kLossMaxParams];
  unsigned has;
};

// ---- the losses ------------------------------------------------------------------------------------
// Each: kIn (tensor inputs, table order), kGrads (table gradients), fw(v, p) -> loss of one
// element, bw(v, g, p, d) -> d[k] = g * d loss / d input(grad k). Formulas follow ATen's kernels
// and composites (named per loss), so edge cases (clamps, eps, sign at 0) match torch.

/// (x - y)^2.
struct MseLoss {
  static constexpr int kIn = 2, kGrads = 2;
  template <class M>
  __device__ static M fw(const M (&v)[kIn], const PwParams<M>&) {
    const M d = v[0] - v[1];
    return d * d;
  }
  template <class M>
  __device__ static void bw(const M (&v)[kIn], M g, const PwParams<M>&, M (&d)[kLossMaxGrads]) {
    const M t = M(2) * (v[0] - v[1]) * g;
    d[0] = t;
    d[1] = -t;
  }
};

/// |x - y|; gradient sign(x - y) (0 at 0, torch's sgn).
struct L1Loss {
  static constexpr int kIn = 2, kGrads = 2;
  template <class M>
  __device__ static M fw(const M (&v)[kIn], const PwParams<M>&) {
    return pw_abs(v[0] - v[1]);
  }
  template <class M>
  __device__ static void bw(const M (&v)[kIn], M g, const PwParams<M>&, M (&d)[kLossMaxGrads]) {
    const M t = pw_sign(v[0] - v[1]) * g;
    d[0] = t;
    d[1] = -t;
  }
};

/// z = |x - y|: z < beta ? 0.5 z^2 / beta : z - 0.5 beta; beta = 0 is l1 (ATen smooth_l1_loss).
struct SmoothL1Loss {
  static constexpr int kIn = 2, kGrads = 2;
  template <class M>
  __device__ static M fw(const M (&v)[kIn], const PwParams<M>& p) {
    const M beta = p.p[0];
    const M z = pw_abs(v[0] - v[1]);
    if (beta == M(0)) return z;
    return z < beta ? M(0.5) * z * z / beta : z - M(0.5) * beta;
  }
  template <class M>
  __device__ static void bw(const M (&v)[kIn], M g, const PwParams<M>& p, M (&d)[kLossMaxGrads]) {
    const M beta = p.p[0];
    const M x = v[0] - v[1];
    M t;
    if (beta == M(0))
      t = pw_sign(x) * g;
    else
      t = x < -beta ? -g : (x > beta ? g : x * g / beta);
    d[0] = t;
    d[1] = -t;
  }
};

/// z = |x - y|: z < delta ? 0.5 z^2 : delta (z - 0.5 delta) (ATen huber_loss).
struct HuberLoss {
  static constexpr int kIn = 2, kGrads = 2;
  template <class M>
  __device__ static M fw(const M (&v)[kIn], const PwParams<M>& p) {
    const M delta = p.p[0];
    const M z = pw_abs(v[0] - v[1]);
    return z < delta ? M(0.5) * z * z : delta * (z - M(0.5) * delta);
  }
  template <class M>
  __device__ static void bw(const M (&v)[kIn], M g, const PwParams<M>& p, M (&d)[kLossMaxGrads]) {
    const M delta = p.p[0];
    const M x = v[0] - v[1];
    const M t = x < -delta ? -g * delta : (x > delta ? g * delta : x * g);
    d[0] = t;
    d[1] = -t;
  }
};

/// w ((y - 1) max(log1p(-x), -100) - y max(log x, -100)) (ATen's CUDA kernel); input gradient
/// w (x - y) / max((1 - x) x, 1e-12), target gradient -w logit(x).
struct BinaryCrossEntropy {
  static constexpr int kIn = 3, kGrads = 2;
  template <class M>
  __device__ static M fw(const M (&v)[kIn], const PwParams<M>&) {
    const M x = v[0], y = v[1];
    const M lx = pw_log(x) > M(-100) ? pw_log(x) : M(-100);
    const M l1x = pw_log1p(-x) > M(-100) ? pw_log1p(-x) : M(-100);
    return v[2] * ((y - M(1)) * l1x - y * lx);
  }
  template <class M>
  __device__ static void bw(const M (&v)[kIn], M g, const PwParams<M>&, M (&d)[kLossMaxGrads]) {
    const M x = v[0], y = v[1], gw = g * v[2];
    const M den = (M(1) - x) * x;
    d[0] = gw * (x - y) / (den > M(1e-12) ? den : M(1e-12));
    d[1] = -gw * pw_log(x / (M(1) - x));
  }
};

/// (1 - y) x - lw log_sigmoid(x), lw = (pos_weight - 1) y + 1 (or 1), times weight (ATen).
struct BinaryCrossEntropyWithLogits {
  static constexpr int kIn = 4, kGrads = 2;
  template <class M>
  __device__ static M fw(const M (&v)[kIn], const PwParams<M>& p) {
    const M x = v[0], y = v[1];
    const M ls = log_sigmoid(x);
    const M lw = (p.has >> 3) & 1 ? (v[3] - M(1)) * y + M(1) : M(1);
    return v[2] * ((M(1) - y) * x - lw * ls);
  }
  template <class M>
  __device__ static void bw(const M (&v)[kIn], M g, const PwParams<M>& p, M (&d)[kLossMaxGrads]) {
    const M x = v[0], y = v[1], gw = g * v[2];
    if ((p.has >> 3) & 1) {
      const M t = v[3] * y;
      d[0] = gw * ((t + M(1) - y) * sigmoid(x) - t);
      d[1] = gw * (log_sigmoid(-x) - log_sigmoid(x) * v[3]);
    } else {
      d[0] = gw * (sigmoid(x) - y);
      d[1] = -gw * x;
    }
  }
};

/// log_target ? exp(y) (y - x) : xlogy(y, y) - y x (ATen kl_div). Target gradient through
/// xlogy's autograd formula: xlogy(y != 0, y) + y / y - x (NaN at y = 0, as torch).
struct KlDiv {
  static constexpr int kIn = 2, kGrads = 2;
  template <class M>
  __device__ static M fw(const M (&v)[kIn], const PwParams<M>& p) {
    const M x = v[0], y = v[1];
    if (p.p[0] != M(0)) return pw_exp(y) * (y - x);
    const M xlogy = y != y ? y : (y == M(0) ? M(0) : y * pw_log(y));
    return xlogy - y * x;
  }
  template <class M>
  __device__ static void bw(const M (&v)[kIn], M g, const PwParams<M>& p, M (&d)[kLossMaxGrads]) {
    const M x = v[0], y = v[1];
    if (p.p[0] != M(0)) {
      const M ey = pw_exp(y);
      d[0] = -ey * g;
      d[1] = ey * (y - x + M(1)) * g;
    } else {
      d[0] = -y * g;
      d[1] = ((y != M(0) ? pw_log(y) : M(0)) + y / y - x) * g;
    }
  }
};

/// log_input ? exp(x) - y x : x - y log(x + eps); full adds Stirling's y log y - y + 0.5 log(2 pi y)
/// where y > 1 (ATen poisson_nll_loss).
struct PoissonNllLoss {
  static constexpr int kIn = 2, kGrads = 2;
  template <class M>
  __device__ static M fw(const M (&v)[kIn], const PwParams<M>& p) {
    const M x = v[0], y = v[1];
    M l = p.p[0] != M(0) ? pw_exp(x) - y * x : x - y * pw_log(x + p.p[2]);
    if (p.p[1] != M(0) && y > M(1)) l += y * pw_log(y) - y + M(0.5) * pw_log(M(2) * M(3.14159265358979323846) * y);
    return l;
  }
  template <class M>
  __device__ static void bw(const M (&v)[kIn], M g, const PwParams<M>& p, M (&d)[kLossMaxGrads]) {
    const M x = v[0], y = v[1];
    if (p.p[0] != M(0)) {
      d[0] = (pw_exp(x) - y) * g;
      d[1] = -x;
    } else {
      d[0] = (M(1) - y / (x + p.p[2])) * g;
      d[1] = -pw_log(x + p.p[2]);
    }
    if (p.p[1] != M(0) && y > M(1)) d[1] += pw_log(y) + M(0.5) / y;
    d[1] *= g;
  }
};

/// v = max(var, eps): 0.5 (log v + (x - y)^2 / v) (+ 0.5 log(2 pi) when full). torch clamps var
/// under no_grad, so var's gradient is taken at the clamped value and passes the clamp.
struct GaussianNllLoss {
  static constexpr int kIn = 3, kGrads = 3;
  template <class M>
  __device__ static M fw(const M (&v)[kIn], const PwParams<M>& p) {
    const M var = v[2] > p.p[1] ? v[2] : p.p[1];
    const M d = v[0] - v[1];
    M l = M(0.5) * (pw_log(var) + d * d / var);
    if (p.p[0] != M(0)) l += M(0.5) * pw_log(M(2) * M(3.14159265358979323846));
    return l;
  }
  template <class M>
  __device__ static void bw(const M (&v)[kIn], M g, const PwParams<M>& p, M (&d)[kLossMaxGrads]) {
    const M var = v[2] > p.p[1] ? v[2] : p.p[1];
    const M dd = v[0] - v[1];
    const M t = g * dd / var;
    d[0] = t;
    d[1] = -t;
    d[2] = g * M(0.5) * (M(1) / var - dd * dd / (var * var));
  }
};

/// log1p(exp(-y x)) (ATen soft_margin_loss); gradient -y z / (1 + z) with z = exp(-y x).
struct SoftMarginLoss {
  static constexpr int kIn = 2, kGrads = 1;
  template <class M>
  __device__ static M fw(const M (&v)[kIn], const PwParams<M>&) {
    return pw_log1p(pw_exp(-v[1] * v[0]));
  }
  template <class M>
  __device__ static void bw(const M (&v)[kIn], M g, const PwParams<M>&, M (&d)[kLossMaxGrads]) {
    const M z = pw_exp(-v[1] * v[0]);
    d[0] = -v[1] * z / (M(1) + z) * g;
  }
};

/// (y != 1 ? max(margin - x, 0) : 0) + (y != -1 ? x : 0) (ATen hinge_embedding_loss); the clamp
/// passes the gradient where margin - x >= 0 (clamp_min's autograd rule).
struct HingeEmbeddingLoss {
  static constexpr int kIn = 2, kGrads = 1;
  template <class M>
  __device__ static M fw(const M (&v)[kIn], const PwParams<M>& p) {
    const M x = v[0], y = v[1], mc = p.p[0] - x;
    return (y != M(1) ? (mc > M(0) ? mc : M(0)) : M(0)) + (y != M(-1) ? x : M(0));
  }
  template <class M>
  __device__ static void bw(const M (&v)[kIn], M g, const PwParams<M>& p, M (&d)[kLossMaxGrads]) {
    const M x = v[0], y = v[1];
    M t = y != M(-1) ? M(1) : M(0);
    if (y != M(1) && p.p[0] - x >= M(0)) t -= M(1);
    d[0] = t * g;
  }
};

/// max(0, -y (x1 - x2) + margin) (ATen margin_ranking_loss).
struct MarginRankingLoss {
  static constexpr int kIn = 3, kGrads = 3;
  template <class M>
  __device__ static M fw(const M (&v)[kIn], const PwParams<M>& p) {
    const M z = -v[2] * (v[0] - v[1]) + p.p[0];
    return z > M(0) ? z : M(0);
  }
  template <class M>
  __device__ static void bw(const M (&v)[kIn], M g, const PwParams<M>& p, M (&d)[kLossMaxGrads]) {
    const M diff = v[0] - v[1];
    const M z = -v[2] * diff + p.p[0];
    const M a = z >= M(0) ? g : M(0);
    d[0] = -v[2] * a;
    d[1] = v[2] * a;
    d[2] = -diff * a;
  }
};

// ---- the kernel --------------------------------------------------------------------------------------
/// kMode: forward writing the loss (none), forward summing it (reduced), backward.
enum class PwMode { FwNone, FwReduce, Bw };
inline constexpr int kPwItems = 16;  ///< elements a thread holds per tile
inline constexpr int kPwTile = kSumThreads * kPwItems;
/// Vectors (or scalars) of a tile the non-contiguous variants unroll: each carries a full
/// rank-general offset computation (64-bit divisions), so unrolling all of them (16 for the
/// scalar path) made those kernels ~90% of the loss code and 3/4 of its compile time. Measured
/// on H200 (32M elements, rank 2) against full unrolling: vectorized broadcast kernels as fast or
/// faster (f64 backward 2.3x), scalar strided ones 19% faster to 11% slower (4 was no better).
/// The contiguous variant, which has no offset arithmetic, still unrolls the whole tile.
inline constexpr int kPwStridedUnroll = 2;
static_assert(detail::kSumMinChunk % kPwTile == 0, "parts must be whole tiles");

template <PwMode kMode, class L>
struct PwOps {
  static constexpr int kOut = kMode == PwMode::Bw ? kLossMaxGrads : (kMode == PwMode::FwNone ? 1 : 0);
  static constexpr int kDy = kMode == PwMode::Bw ? 1 : 0;
  static constexpr int kFirstIn = kOut + kDy;
  static constexpr int kNops = kFirstIn + L::kIn;
};

/// Offsets of linear element e for every operand. kContig: rank <= 1 with unit or zero strides
/// (no arithmetic); otherwise the coalesced dims, innermost first (64-bit division per dim).
template <bool kContig, int kNops>
__device__ __forceinline__ void pw_offsets(const detail::EwIter& it, int64_t e, int64_t (&off)[kNops]) {
  if constexpr (kContig) {
#pragma unroll
    for (int k = 0; k < kNops; ++k) off[k] = it.rank == 0 || it.stride[k][0] == 0 ? 0 : e;
  } else {
    dim_offsets(it.rank, it.shape, it.stride, e, off);
  }
}

/// One element (or kV adjacent ones) of the inputs: absent operands read as 1 (a missing weight),
/// broadcast ones (innermost stride 0) as one value replicated.
template <class T, int kV, int kFirst, int kN, int kNops>
__device__ __forceinline__ void pw_load(const PointwiseLaunch& a, const int64_t (&off)[kNops],
                                        opmath_t<T> (&v)[kV][kN]) {
  using M = opmath_t<T>;
#pragma unroll
  for (int k = 0; k < kN; ++k) {
    const T* ptr = static_cast<const T*>(a.it.ptr[kFirst + k]);
    if (ptr == nullptr) {
#pragma unroll
      for (int e = 0; e < kV; ++e) v[e][k] = M(1);
    } else if (kV == 1 || a.it.rank == 0 || a.it.stride[kFirst + k][0] == 0) {
      const M s = load_as_opmath(ptr[off[kFirst + k]]);
#pragma unroll
      for (int e = 0; e < kV; ++e) v[e][k] = s;
    } else {
      const VecOf<T, kV> q = load_vec<T, kV>(ptr + off[kFirst + k]);
#pragma unroll
      for (int e = 0; e < kV; ++e) v[e][k] = load_as_opmath(q.v[e]);
    }
  }
}

template <class T, int kV, int kNops>
__device__ __forceinline__ void pw_store(const PointwiseLaunch& a, int k, const int64_t (&off)[kNops],
                                         const opmath_t<T> (&o)[kV]) {
  T* ptr = static_cast<T*>(a.it.ptr[k]);
  if (ptr == nullptr) return;
  if constexpr (kV == 1) {
    ptr[off[k]] = convert<T>(o[0]);
  } else {
    VecOf<T, kV> q;
#pragma unroll
    for (int e = 0; e < kV; ++e) q.v[e] = convert<T>(o[e]);
    store_vec<T, kV>(ptr + off[k], q);
  }
}

template <class T, class L, PwMode kMode, int kV, bool kContig>
__global__ void __launch_bounds__(kSumThreads) pointwise_kernel(const PointwiseLaunch a) {
  using M = opmath_t<T>;
  using Ops = PwOps<kMode, L>;
  constexpr int kNops = Ops::kNops;
  constexpr int kVecs = kPwItems / kV;  // vectors (or scalars) a thread holds per tile
  PwParams<M> prm;
#pragma unroll
  for (int k = 0; k < kLossMaxParams; ++k) prm.p[k] = static_cast<M>(a.params[k]);
  prm.has = 0;
#pragma unroll
  for (int k = 0; k < L::kIn; ++k)
    if (a.it.ptr[Ops::kFirstIn + k]) prm.has |= 1u << k;
  const M scale = static_cast<M>(a.scale);

  const int64_t n = a.it.numel;
  const int64_t lo = int64_t(blockIdx.x) * a.chunk;
  const int64_t hi = lo + a.chunk < n ? lo + a.chunk : n;
  M acc = M(0);

  // One element group: kW adjacent elements starting at e (kW = kV on whole tiles, 1 in the tail).
  auto element = [&](int64_t e, auto width) {
    constexpr int kW = decltype(width)::value;
    int64_t off[kNops];
    pw_offsets<kContig, kNops>(a.it, e, off);
    M v[kW][L::kIn];
    pw_load<T, kW, Ops::kFirstIn, L::kIn>(a, off, v);
    if constexpr (kMode == PwMode::Bw) {
      M gv[kW][1];
      pw_load<T, kW, Ops::kOut, 1>(a, off, gv);
      M d[kLossMaxGrads][kW];
#pragma unroll
      for (int j = 0; j < kW; ++j) {
        M dj[kLossMaxGrads] = {};
        L::bw(v[j], gv[j][0] * scale, prm, dj);
#pragma unroll
        for (int k = 0; k < kLossMaxGrads; ++k) d[k][j] = dj[k];
      }
#pragma unroll
      for (int k = 0; k < L::kGrads; ++k) pw_store<T, kW>(a, k, off, d[k]);
    } else {
      M o[kW];
#pragma unroll
      for (int j = 0; j < kW; ++j) o[j] = L::fw(v[j], prm);
      if constexpr (kMode == PwMode::FwNone) {
        pw_store<T, kW>(a, 0, off, o);
      } else {
#pragma unroll
        for (int j = 0; j < kW; ++j) acc += o[j];
      }
    }
  };

  for (int64_t ts = lo; ts < hi; ts += kPwTile) {
    if (ts + kPwTile <= hi) {
      // Two loops, not one with a computed unroll count: a count changes nvcc's code for the
      // contiguous kernels too (measured: some backward ones), the plain pragma keeps it as it was.
      if constexpr (kContig) {
#pragma unroll
        for (int u = 0; u < kVecs; ++u)
          element(ts + (int64_t(u) * kSumThreads + threadIdx.x) * kV, cuda::std::integral_constant<int, kV>{});
      } else {
#pragma unroll kPwStridedUnroll
        for (int u = 0; u < kVecs; ++u)
          element(ts + (int64_t(u) * kSumThreads + threadIdx.x) * kV, cuda::std::integral_constant<int, kV>{});
      }
    } else {
      for (int64_t e = ts + threadIdx.x; e < hi; e += kSumThreads) element(e, cuda::std::integral_constant<int, 1>{});
    }
  }
  if constexpr (kMode == PwMode::FwReduce) {
    Pair<M> s = block_sum(Pair<M>{acc, M(0)});
    if (threadIdx.x == 0) static_cast<Pair<M>*>(a.partial)[blockIdx.x] = s;
  }
}

template <class T, class L, PwMode kMode>
cudaError_t launch_pointwise(const PointwiseLaunch& a, cudaStream_t stream) {
  constexpr int kV = int(16 / sizeof(T));
  const dim3 grid(static_cast<unsigned>(a.parts));
  // Contiguous: rank <= 1 and every operand unit-stride or broadcast (plan.cpp decides `vec`
  // only for iterations whose innermost dim allows it).
  bool contig = a.it.rank <= 1;
  for (int k = 0; k < a.it.nops && contig; ++k)
    if (a.it.rank == 1 && a.it.stride[k][0] > 1) contig = false;
  if (a.vec) {
    if (contig)
      pointwise_kernel<T, L, kMode, kV, true><<<grid, kSumThreads, 0, stream>>>(a);
    else
      pointwise_kernel<T, L, kMode, kV, false><<<grid, kSumThreads, 0, stream>>>(a);
  } else {  // strided or unaligned: one offset computation per element (no separate contiguous variant)
    pointwise_kernel<T, L, kMode, 1, false><<<grid, kSumThreads, 0, stream>>>(a);
  }
  return cudaGetLastError();
}

template <class T, class L>
cudaError_t pointwise_run_loss(const PointwiseLaunch& a, cudaStream_t stream) {
  using M = opmath_t<T>;
  cudaError_t e;
  if (a.dir == Direction::Backward) {
    if (a.it.numel == 0) return cudaSuccess;
    return launch_pointwise<T, L, PwMode::Bw>(a, stream);
  }
  if (!a.reduce) {
    if (a.it.numel == 0) return cudaSuccess;
    return launch_pointwise<T, L, PwMode::FwNone>(a, stream);
  }
  if (a.it.numel > 0 && (e = launch_pointwise<T, L, PwMode::FwReduce>(a, stream)) != cudaSuccess) return e;
  // An empty reduction: no first stage, the second sums zero parts (mean: 0 * inf = NaN, torch's).
  return launch_finish<T, M>(static_cast<const Pair<M>*>(a.partial), a.it.numel > 0 ? a.parts : 0, a.finish, stream);
}

template <class T>
cudaError_t pointwise_run(const PointwiseLaunch& a, cudaStream_t stream) {
  switch (a.op) {
    case LossOp::mse_loss:
      return pointwise_run_loss<T, MseLoss>(a, stream);
    case LossOp::l1_loss:
      return pointwise_run_loss<T, L1Loss>(a, stream);
    case LossOp::smooth_l1_loss:
      return pointwise_run_loss<T, SmoothL1Loss>(a, stream);
    case LossOp::huber_loss:
      return pointwise_run_loss<T, HuberLoss>(a, stream);
    case LossOp::binary_cross_entropy:
      return pointwise_run_loss<T, BinaryCrossEntropy>(a, stream);
    case LossOp::binary_cross_entropy_with_logits:
      return pointwise_run_loss<T, BinaryCrossEntropyWithLogits>(a, stream);
    case LossOp::kl_div:
      return pointwise_run_loss<T, KlDiv>(a, stream);
    case LossOp::poisson_nll_loss:
      return pointwise_run_loss<T, PoissonNllLoss>(a, stream);
    case LossOp::gaussian_nll_loss:
      return pointwise_run_loss<T, GaussianNllLoss>(a, stream);
    case LossOp::soft_margin_loss:
      return pointwise_run_loss<T, SoftMarginLoss>(a, stream);
    case LossOp::hinge_embedding_loss:
      return pointwise_run_loss<T, HingeEmbeddingLoss>(a, stream);
    case LossOp::margin_ranking_loss:
      return pointwise_run_loss<T, MarginRankingLoss>(a, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace baracuda::kern::loss

namespace baracuda::detail {
template <DType D>
cudaError_t loss_pointwise_run(const PointwiseLaunch& p, cudaStream_t stream) {
  return kern::loss::pointwise_run<kern::storage_t<D>>(p, stream);
}
}  // namespace baracuda::detail

/// One translation unit per dtype (loss_pointwise_<dtype>.cu).
#define BARACUDA_LOSS_POINTWISE_INSTANTIATE(D)                                   \
  template cudaError_t baracuda::detail::loss_pointwise_run<baracuda::DType::D>( \
      const baracuda::detail::PointwiseLaunch&, cudaStream_t);
