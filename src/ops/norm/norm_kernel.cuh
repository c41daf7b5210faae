// The row-reduction engine of the softmax/normalization family: ONE kernel template for
// softmax, log_softmax, layer_norm and rms_norm, forward and backward, parameterized by a small
// op struct (what a pass reduces, how partial results merge, what an element becomes).
//
// A group of `tpr` threads (1..512, a power of two) owns a row. Each thread holds `kItems`
// elements of a chunk (kItems / kVec vectors, vector c of lane l at column (l + c * tpr) * kVec,
// so a group's loads are contiguous). When the row fits in one chunk it is loaded once and
// stays in registers for every pass and the output ("registers": one read + one write of the
// tensor); longer rows are streamed chunk by chunk per pass ("streaming": softmax merges
// (max, sum) online so its statistics take one read). On sm_90 a row past one CTA may instead be
// owned by a thread-block cluster (kCluster: the group is the cluster's CTAs, merged through
// distributed shared memory, cluster_merge). Group reductions use shuffles, plus one
// shared-memory step in fixed order when a group spans several warps, so every thread of the
// group ends with the same bits and results do not depend on the SM count.
//
// Parameter gradients (dweight, dbias): the row loop is a fixed partition of the rows into
// `slots` (a function of the problem only); each slot sums its rows' contributions in a fixed
// order (registers, or read-modify-write of its own workspace row when streaming) and a second
// kernel sums the slots column by column in a fixed order: deterministic, no atomics.
//
// Optional op members (see the "op hooks" below; most ops have none): kMergeByPass (identity
// and merge take the pass: sparsemax's max then sums, gumbel_softmax's (max, sum) then argmax);
// kIterative + next_pass (a data-dependent number of passes: sparsemax's threshold iteration,
// gumbel_softmax's argmax pass only when hard); kColumns (thread_pass and out also get the
// column of each element: the argmax and the one-hot); kNoise (the load adds Gumbel noise and
// divides by tau); kOut2 (a second output, out1, from out2()).
#pragma once
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>

#include <cuda/std/limits>
#include <cuda/std/type_traits>

#include "kernels/common/cluster.cuh"
#include "kernels/common/dtype_traits.cuh"
#include "kernels/common/row_offsets.cuh"
#include "kernels/common/short_math.cuh"
#include "kernels/common/smem_optin.cuh"
#include "ops/norm/norm_launch.hpp"
#include "kernels/common/philox.hpp"

namespace baracuda::kern::norm {

using detail::kNumSlots;
using detail::NormLaunch;

template <class M>
struct Acc {
  M a, b;
};
/// Per-row values the passes produce: softmax (max, 1/sum or log(sum)); norms (mean, rstd);
/// backward (c1, c2) = the row means the gradient formula needs. q0, q1: the op's scalars
/// (NormLaunch::op_args), set before the first pass.
template <class M>
struct St {
  M mean, rstd, c1, c2;
  M q0, q1;
};

/// Where the items of a thread lie in its row: item i of the chunk at `base` is column
/// base + (lane + (i / kV) * tpr) * kV + i % kV (see the kernel's load).
struct RowCols {
  int64_t base;
  int lane, tpr;
  template <int kV>
  __device__ __forceinline__ int64_t col(int i) const {
    return base + (int64_t(lane) + int64_t(i / kV) * tpr) * kV + i % kV;
  }
};

__device__ __forceinline__ float bexp(float x) { return expf(x); }
__device__ __forceinline__ double bexp(double x) { return exp(x); }
__device__ __forceinline__ float blog(float x) { return logf(x); }
__device__ __forceinline__ double blog(double x) { return log(x); }
__device__ __forceinline__ float brsqrt(float x) { return rsqrtf(x); }
__device__ __forceinline__ double brsqrt(double x) { return rsqrt(x); }
__device__ __forceinline__ float bsqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double bsqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float bmax(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ double bmax(double a, double b) { return fmax(a, b); }
/// exp(x - m) for the softmax forward. kFast (f16/bf16 storage): ex2.approx.ftz(d * log2e)
/// (short_math::exp_fast), i.e. FMUL + MUFU.EX2 (max error 2 + 1.17|d| ulp of f32, ~1e-5 relative
/// at |d| = 100, where the result is already < 1e-43 of the row max's term), instead of expf's
/// accurate range-reduction sequence (~10 instructions). The softmax forward takes two exps an
/// element (sum and output): with expf it was bound by instruction issue, not memory (bf16
/// [16384, 4096] at 36% of copy bandwidth while normalize, same bytes, reached 89%). The error is
/// far below the half-ulp of a 16-bit output (2^-9 bf16, 2^-12 f16). Not __expf: compiled without
/// -ftz it is ex2.approx.f32, whose subnormal-result fix-up (FSETP and two predicated FMULs
/// around the MUFU) made the sequence 7 instructions for 3: H200, [16384, 4096] bf16 softmax fw
/// 94.3 -> 79.9 us, log_softmax fw 86.7 -> 76.4, bit-identical outputs (only results below
/// 2^-126 differ, flushed to 0: bf16 outputs under 1.2e-38; f16 outputs and the sums never see
/// them). The subtraction stays first (not fma(x, log2e, -max * log2e)) so a max near FLT_MAX
/// cannot overflow when pre-scaled. f32/f64 outputs keep expf/exp (f32's rtol is ~1e-6).
template <bool kFast, class M>
__device__ __forceinline__ M sm_exp(M d) {
  if constexpr (kFast && sizeof(M) == 4)
    return short_math::exp_fast(d);
  else
    return bexp(d);
}
template <class M>
__device__ __forceinline__ M neg_inf() {
  return -cuda::std::numeric_limits<M>::infinity();
}
template <class M>
__device__ __forceinline__ M pos_inf() {
  return cuda::std::numeric_limits<M>::infinity();
}
template <class M>
__device__ __forceinline__ M quiet_nan() {
  return cuda::std::numeric_limits<M>::quiet_NaN();
}
/// max that propagates NaN (torch's amax), where fmax drops it.
template <class M>
__device__ __forceinline__ M nanmax(M a, M b) {
  return (a > b || a != a) ? a : b;
}
/// torch's 1 / clamp_min(norm, eps) (F.normalize's divisor); a NaN norm stays NaN, where the
/// comparison alone would drop it.
template <class M>
__device__ __forceinline__ M inv_clamp_min(M norm, M eps) {
  return norm != norm ? norm : M(1) / (norm > eps ? norm : eps);
}
__device__ __forceinline__ float bpow(float x, float y) { return powf(x, y); }
__device__ __forceinline__ double bpow(double x, double y) { return pow(x, y); }
__device__ __forceinline__ float babs(float x) { return fabsf(x); }
__device__ __forceinline__ double babs(double x) { return fabs(x); }
/// x rounded to the storage type T and widened back (what a stored output holds).
template <class T, class M>
__device__ __forceinline__ M round_to(M x) {
  return static_cast<M>(load_as_opmath(convert<T>(x)));
}

// ---- op hooks ------------------------------------------------------------------------------------
// Optional members of an op struct, detected here so that the ops without them stay as they are.
template <class Op>
inline constexpr bool kMergesByPass = requires {
  Op::kMergeByPass;
};
template <class Op>
inline constexpr bool kIterates = requires {
  Op::kIterative;
};
template <class Op>
inline constexpr bool kNeedsColumns = requires {
  Op::kColumns;
};
template <class Op>
inline constexpr bool kAddsNoise = requires {
  Op::kNoise;
};
template <class Op>
inline constexpr bool kHasOut2 = requires {
  Op::kOut2;
};
/// kFullRowPass: a pass (numbered kPasses or above) that replaces the op's passes 0 .. kPasses when
/// every thread of a group holds a full share of the row (kItems valid items, registers, one CTA):
/// the group's merges then always join halves of equal size (group_reduce's butterflies), which
/// an equal-weight merge can use.
template <class Op>
inline constexpr bool kHasFullRowPass = requires {
  Op::kFullRowPass;
};

template <class Op, class M>
__device__ __forceinline__ Acc<M> identity_of(int pass) {
  if constexpr (kMergesByPass<Op>)
    return Op::template identity<M>(pass);
  else
    return Op::template identity<M>();
}
template <class Op, class M>
__device__ __forceinline__ Acc<M> merge_of(int pass, const Acc<M>& x, const Acc<M>& y) {
  if constexpr (kMergesByPass<Op>)
    return Op::merge(pass, x, y);
  else
    return Op::merge(x, y);
}
/// The pass after `pass` (kPasses ends the loop). Sub-warp groups share their warp's full-mask
/// shuffles (group_reduce), so a warp runs a pass while any of its groups needs it; an
/// iterative op's extra pass on a finished row changes nothing (next_pass's contract). Groups
/// of a warp or more run alike by construction: every thread of a group holds the same bits.
template <class Op, class M>
__device__ __forceinline__ int next_pass_of(int pass, const St<M>& st, int tpr) {
  if constexpr (kIterates<Op>) {
    int next = Op::next_pass(pass, st);
    if (tpr < 32) next = __reduce_min_sync(0xffffffffu, next);
    return next;
  } else {
    return pass + 1;
  }
}

// ---- the ops -------------------------------------------------------------------------------------
// Each op: kIn (tensors read per element), kPasses (group reductions before the output), flags
// for what it reads/writes, identity/merge of its accumulator, thread_pass (reduce this thread's
// valid items of a chunk), finish (turn a reduced pass into row values), out (an element),
// param_grad (its contribution to dweight/dbias). Every op inherits OpDefaults and declares only
// what differs from it.

/// What most ops are: no weight, bias, fused residual, loaded or saved statistics, parameter
/// gradients or mask, and an accumulator of two sums. The optional hooks (kMergeByPass,
/// kIterative, kColumns, kNoise, kOut2) stay out of it: their detection (the requires above)
/// would find an inherited member and take every op for one that has the hook.
struct OpDefaults {
  static constexpr bool kW = false, kB = false, kResidual = false, kLoadMean = false, kLoadRstd = false,
                        kSaveMean = false, kSaveRstd = false, kParamGrad = false, kMaskable = false;
  /// The reductions read only the first input: a streamed row's reduction passes skip loading the
  /// second (log_softmax's backward sums dy alone; y is needed only at the output).
  static constexpr bool kReduceReadsIn0 = false;
  /// Backward ops without parameter gradients whose 16-bit rows are held packed (kPacked) under a
  /// register cap of this many 512-thread CTAs an SM (norm_min_ctas); 0: f32 rows, no cap.
  static constexpr int kPackedBwMinCtas = 0;
  template <class M>
  __device__ static Acc<M> identity() {
    return {M(0), M(0)};
  }
  template <class M>
  __device__ static Acc<M> merge(const Acc<M>& x, const Acc<M>& y) {
    return {x.a + y.a, x.b + y.b};
  }
  /// No parameter gradients. A template over the input count (the op's kIn), which the base
  /// cannot name; called for every op behind a runtime check (the kernel's pgrad).
  template <class M, int kN>
  __device__ static void param_grad(const M (&)[kN], const St<M>&, M&, M&) {}
};

/// softmax / log_softmax forward: one pass of (max, sum of exp(x - max)), merged online.
/// kFast: the storage type is 16-bit, so exp takes the ex2.approx.ftz path (see sm_exp).
/// kMask: the masked instantiation (launched only when a mask is given). A separate one because a
/// maskable row is held unpacked in f32 (the additive mask is added in f32, see kPacked): the
/// unmasked 16-bit forward packs its row and runs at more CTAs an SM (H100, [16384, 4096] bf16
/// softmax: 68% of copy bandwidth when every softmax was maskable, vs 93% for log_softmax).
template <bool kLog, bool kFast = false, bool kMask = false>
struct SoftmaxFw : OpDefaults {
  static constexpr NormOp kOp = kLog ? NormOp::log_softmax : NormOp::softmax;
  static constexpr Direction kDir = Direction::Forward;
  static constexpr int kIn = 1, kPasses = 1;
  static constexpr bool kMaskable = kMask;
  template <class M>
  __device__ static Acc<M> identity() {
    return {neg_inf<M>(), M(0)};
  }
  template <class M>
  __device__ static Acc<M> merge(const Acc<M>& x, const Acc<M>& y) {
    const M m = bmax(x.a, y.a);
    if (m == neg_inf<M>()) return {m, x.b + y.b};
    return {m, x.b * sm_exp<kFast>(x.a - m) + y.b * sm_exp<kFast>(y.a - m)};
  }
  template <class M, int K, int V, class Wt>
  __device__ static Acc<M> thread_pass(int, const M (&v)[kIn][K], const bool (&ok)[K / V], const Wt&, const St<M>&) {
    M m = neg_inf<M>();
#pragma unroll
    for (int i = 0; i < K; ++i)
      if (ok[i / V]) m = bmax(m, v[0][i]);
    M s = 0;
    if (m != neg_inf<M>()) {  // else every valid item is -inf (or there are none): no mass here
#pragma unroll
      for (int i = 0; i < K; ++i)
        if (ok[i / V]) s += sm_exp<kFast>(v[0][i] - m);
    }
    return {m, s};
  }
  template <class M>
  __device__ static void finish(int, const Acc<M>& acc, St<M>& st, M, M) {
    st.mean = acc.a;                              // row max
    st.rstd = kLog ? blog(acc.b) : M(1) / acc.b;  // log(sum) or 1/sum
  }
  template <class M>
  __device__ static M out(const M (&x)[kIn], M, M, const St<M>& st) {
    if constexpr (kLog) {
      // A boolean mask that excluded the whole row: log of masked softmax's zeros.
      if (kMask && st.c1 != M(0) && st.mean == neg_inf<M>()) return neg_inf<M>();
      return (x[0] - st.mean) - st.rstd;
    } else {
      if (st.c1 != M(0) && st.mean == neg_inf<M>()) return M(0);  // a boolean mask excluded the whole row
      return sm_exp<kFast>(x[0] - st.mean) * st.rstd;
    }
  }
};

/// layer_norm forward, exact centred variance either way (no Welford division an element):
///  - rows where every thread holds a full share (kFullRowPass): pass 2 alone. A thread takes the
///    mean and the centred variance of each block of 8 of its items (two sweeps of 8 registers),
///    then the blocks and the group's threads merge pairwise, always two halves of equal size: mean
///    (ma + mb) / 2, variance (va + vb) / 2 + ((ma - mb) / 2)^2 (Chan et al.'s merge at equal
///    counts; bitwise commutative, so every thread of a butterfly gets the same bits). One group
///    reduction instead of two: [16384, 4096] bf16 bench 101.0 -> 97.7 us on H100, 91.8 -> 84.3
///    on H200;
///  - other rows (ragged shares, streamed or cluster rows): pass 0 the mean, pass 1 the variance
///    around it.
struct LayerNormFw : OpDefaults {
  static constexpr NormOp kOp = NormOp::layer_norm;
  static constexpr Direction kDir = Direction::Forward;
  static constexpr int kIn = 1, kPasses = 2, kFullRowPass = 2;  // the full-row pass is outside 0 .. kPasses
  static constexpr bool kMergeByPass = true;
  static constexpr bool kW = true, kB = true, kResidual = true, kSaveMean = true, kSaveRstd = true;
  template <class M>
  __device__ static Acc<M> identity(int) {  // pass 2 never merges a streamed chunk (no identity needed)
    return {M(0), M(0)};
  }
  template <class M>
  __device__ static Acc<M> merge(int pass, const Acc<M>& x, const Acc<M>& y) {
    if (pass != kFullRowPass) return {x.a + y.a, M(0)};
    const M d = (x.a - y.a) * M(0.5);
    return {(x.a + y.a) * M(0.5), (x.b + y.b) * M(0.5) + d * d};
  }
  template <class M, int K, int V, class Wt>
  __device__ static Acc<M> thread_pass(int pass, const M (&v)[kIn][K], const bool (&ok)[K / V], const Wt&,
                                       const St<M>& st) {
    if (pass == kFullRowPass) {
      // Blocks of B items, each centred on its own mean (two sweeps of B values, so only B widened
      // values are live: two sweeps of all K spilled at 64 registers), merged pairwise like the group.
      constexpr int B = K < 8 ? K : 8, NB = K / B;
      static_assert((NB & (NB - 1)) == 0, "a power-of-two block count");
      Acc<M> blk[NB];
#pragma unroll
      for (int j = 0; j < NB; ++j) {
        M s = 0;
#pragma unroll
        for (int i = j * B; i < j * B + B; ++i) s += v[0][i];
        const M m = s * (M(1) / M(B));
        M q = 0;
#pragma unroll
        for (int i = j * B; i < j * B + B; ++i) {
          const M d = v[0][i] - m;
          q += d * d;
        }
        blk[j] = {m, q * (M(1) / M(B))};
      }
#pragma unroll
      for (int w = NB / 2; w > 0; w /= 2)
#pragma unroll
        for (int j = 0; j < w; ++j) blk[j] = merge(pass, blk[j], blk[j + w]);
      return blk[0];
    }
    M s = 0;
#pragma unroll
    for (int i = 0; i < K; ++i)
      if (ok[i / V]) {
        const M d = pass == 0 ? v[0][i] : v[0][i] - st.mean;
        s += pass == 0 ? d : d * d;
      }
    return {s, M(0)};
  }
  template <class M>
  __device__ static void finish(int pass, const Acc<M>& acc, St<M>& st, M n, M eps) {
    if (pass == 0) {
      st.mean = acc.a / n;
    } else if (pass == 1) {
      st.rstd = brsqrt(acc.a / n + eps);
    } else {
      st.mean = acc.a;
      st.rstd = brsqrt(acc.b + eps);
    }
  }
  template <class M>
  __device__ static M out(const M (&x)[kIn], M w, M b, const St<M>& st) {
    return (x[0] - st.mean) * st.rstd * w + b;
  }
};

/// rms_norm forward: one pass of the sum of squares.
struct RmsNormFw : OpDefaults {
  static constexpr NormOp kOp = NormOp::rms_norm;
  static constexpr Direction kDir = Direction::Forward;
  static constexpr int kIn = 1, kPasses = 1;
  static constexpr bool kW = true, kResidual = true, kSaveRstd = true;
  template <class M, int K, int V, class Wt>
  __device__ static Acc<M> thread_pass(int, const M (&v)[kIn][K], const bool (&ok)[K / V], const Wt&, const St<M>&) {
    M s = 0;
#pragma unroll
    for (int i = 0; i < K; ++i)
      if (ok[i / V]) s += v[0][i] * v[0][i];
    return {s, M(0)};
  }
  template <class M>
  __device__ static void finish(int, const Acc<M>& acc, St<M>& st, M n, M eps) {
    st.rstd = brsqrt(acc.a / n + eps);
  }
  template <class M>
  __device__ static M out(const M (&x)[kIn], M w, M, const St<M>& st) {
    return x[0] * st.rstd * w;
  }
};

/// softmax backward: dx = y * (dy - sum(dy * y)); log_softmax: dx = dy - exp(y) * sum(dy).
/// Inputs: dy, y. kFast (16-bit storage): log_softmax's exp(y) as sm_exp's ex2.approx.ftz (y <= 0, so
/// exp(y) <= 1 and its few-ulp f32 error is far below the output's rounding), instead of expf's
/// range reduction: it held the bf16 [16384, 4096] backward at 90% of copy bandwidth.
template <bool kLog, bool kFast = false>
struct SoftmaxBw : OpDefaults {
  static constexpr NormOp kOp = kLog ? NormOp::log_softmax : NormOp::softmax;
  static constexpr Direction kDir = Direction::Backward;
  static constexpr int kIn = 2, kPasses = 1;
  static constexpr bool kReduceReadsIn0 = kLog;
  static constexpr int kPackedBwMinCtas = 2;  // 64 registers (norm_min_ctas)
  template <class M, int K, int V, class Wt>
  __device__ static Acc<M> thread_pass(int, const M (&v)[kIn][K], const bool (&ok)[K / V], const Wt&, const St<M>&) {
    M s = 0;
#pragma unroll
    for (int i = 0; i < K; ++i)
      if (ok[i / V]) s += kLog ? v[0][i] : v[0][i] * v[1][i];
    return {s, M(0)};
  }
  template <class M>
  __device__ static void finish(int, const Acc<M>& acc, St<M>& st, M, M) {
    st.c1 = acc.a;
  }
  template <class M>
  __device__ static M out(const M (&x)[kIn], M, M, const St<M>& st) {
    if constexpr (kLog)
      return x[0] - sm_exp<kFast>(x[1]) * st.c1;
    else
      return x[1] * (x[0] - st.c1);
  }
};

/// layer_norm backward (inputs dy, x; saved mean, rstd): with g = dy * w and
/// xhat = (x - mean) * rstd, dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),
/// dweight = sum over rows of dy * xhat, dbias = sum of dy.
/// Evaluated with the row's rstd taken out of the sums: b = sum(g * (x - mean)), c1 = mean(g),
/// c2 = rstd^3 * b / n, and dx = (g - c1) * rstd - (x - mean) * c2 (four FP instructions an
/// element in the output, four in the reduction; the kernel is bound by instruction latency at
/// its occupancy, not by DRAM).
struct LayerNormBw : OpDefaults {
  static constexpr NormOp kOp = NormOp::layer_norm;
  static constexpr Direction kDir = Direction::Backward;
  static constexpr int kIn = 2, kPasses = 1;
  static constexpr bool kW = true, kLoadMean = true, kLoadRstd = true, kParamGrad = true;
  template <class M, int K, int V, class Wt>
  __device__ static Acc<M> thread_pass(int, const M (&v)[kIn][K], const bool (&ok)[K / V], const Wt& w,
                                       const St<M>& st) {
    M a = 0, b = 0;
#pragma unroll
    for (int i = 0; i < K; ++i)
      if (ok[i / V]) {
        const M g = v[0][i] * w[i];
        a += g;
        b += g * (v[1][i] - st.mean);
      }
    return {a, b};
  }
  template <class M>
  __device__ static void finish(int, const Acc<M>& acc, St<M>& st, M n, M) {
    const M inv_n = M(1) / n;  // loop-invariant: hoisted out of the row loop (a division is ~10 instructions)
    st.c1 = acc.a * inv_n;
    st.c2 = st.rstd * st.rstd * st.rstd * (acc.b * inv_n);
  }
  template <class M>
  __device__ static M out(const M (&x)[kIn], M w, M, const St<M>& st) {
    return (x[0] * w - st.c1) * st.rstd - (x[1] - st.mean) * st.c2;
  }
  template <class M>
  __device__ static void param_grad(const M (&x)[kIn], const St<M>& st, M& gw, M& gb) {
    gw += x[0] * ((x[1] - st.mean) * st.rstd);
    gb += x[0];
  }
};

/// rms_norm backward (inputs dy, x; saved rstd): with g = dy * w and xhat = x * rstd,
/// dx = rstd * (g - xhat * mean(g * xhat)), dweight = sum of dy * xhat.
/// Evaluated with rstd taken out of the row sum: S = sum(g * x), c2 = rstd^3 * S / n and
/// dx = g * rstd - x * c2 (two FP instructions an element in the reduction, three in the output,
/// instead of three and four: the kernel is bound by instruction issue, not by DRAM).
struct RmsNormBw : OpDefaults {
  static constexpr NormOp kOp = NormOp::rms_norm;
  static constexpr Direction kDir = Direction::Backward;
  static constexpr int kIn = 2, kPasses = 1;
  static constexpr bool kW = true, kLoadRstd = true, kParamGrad = true;
  template <class M, int K, int V, class Wt>
  __device__ static Acc<M> thread_pass(int, const M (&v)[kIn][K], const bool (&ok)[K / V], const Wt& w,
                                       const St<M>&) {
    M b = 0;
#pragma unroll
    for (int i = 0; i < K; ++i)
      if (ok[i / V]) b += v[0][i] * w[i] * v[1][i];
    return {M(0), b};
  }
  template <class M>
  __device__ static void finish(int, const Acc<M>& acc, St<M>& st, M n, M) {
    st.c2 = st.rstd * st.rstd * st.rstd * (acc.b * (M(1) / n));  // 1 / n: hoisted (see LayerNormBw)
  }
  template <class M>
  __device__ static M out(const M (&x)[kIn], M w, M, const St<M>& st) {
    return x[0] * w * st.rstd - x[1] * st.c2;
  }
  template <class M>
  __device__ static void param_grad(const M (&x)[kIn], const St<M>& st, M& gw, M&) {
    gw += x[0] * (x[1] * st.rstd);
  }
};

/// F.normalize with p = 2 (forward): y = x / max(||x||, eps), as x * (1 / max(...)).
struct NormalizeFw : OpDefaults {
  static constexpr NormOp kOp = NormOp::normalize;
  static constexpr Direction kDir = Direction::Forward;
  static constexpr int kIn = 1, kPasses = 1;
  template <class M, int K, int V, class Wt>
  __device__ static Acc<M> thread_pass(int pass, const M (&v)[kIn][K], const bool (&ok)[K / V], const Wt& w,
                                       const St<M>& st) {
    return RmsNormFw::thread_pass<M, K, V>(pass, v, ok, w, st);  // the sum of squares
  }
  template <class M>
  __device__ static void finish(int, const Acc<M>& acc, St<M>& st, M, M eps) {
    st.rstd = inv_clamp_min(bsqrt(acc.a), eps);
  }
  template <class M>
  __device__ static M out(const M (&x)[kIn], M, M, const St<M>& st) {
    return x[0] * st.rstd;
  }
};

/// F.normalize backward (inputs dy, x): with d = max(||x||, eps),
/// dx = dy / d - x * sum(dy * x) / d^3 while ||x|| > eps, else dy / eps (clamp_min's gradient).
struct NormalizeBw : OpDefaults {
  static constexpr NormOp kOp = NormOp::normalize;
  static constexpr Direction kDir = Direction::Backward;
  static constexpr int kIn = 2, kPasses = 1;
  static constexpr int kPackedBwMinCtas = 2;  // 64 registers (norm_min_ctas)
  template <class M, int K, int V, class Wt>
  __device__ static Acc<M> thread_pass(int, const M (&v)[kIn][K], const bool (&ok)[K / V], const Wt&, const St<M>&) {
    M a = 0, b = 0;
#pragma unroll
    for (int i = 0; i < K; ++i)
      if (ok[i / V]) {
        a += v[1][i] * v[1][i];
        b += v[0][i] * v[1][i];
      }
    return {a, b};
  }
  template <class M>
  __device__ static void finish(int, const Acc<M>& acc, St<M>& st, M, M eps) {
    const M norm = bsqrt(acc.a);
    if (norm > eps) {
      st.rstd = M(1) / norm;
      st.c2 = acc.b * st.rstd * st.rstd * st.rstd;
    } else {
      st.rstd = M(1) / eps;
      st.c2 = M(0);
    }
  }
  template <class M>
  __device__ static M out(const M (&x)[kIn], M, M, const St<M>& st) {
    return x[0] * st.rstd - x[1] * st.c2;
  }
};

/// F.normalize for p != 2, what both directions share: the p-norm ||x||_p with p = st.q0: p = inf
/// the NaN-propagating max of |x| (torch's amax), p = 1 the sum of |x|, p = 0 the count of
/// non-zeros (torch's vector_norm), else (sum |x|^p)^(1/p), unscaled like torch's (so it
/// overflows where torch's does). Acc: a sums, b the max (p = inf), so one merge serves every p.
struct NormalizePBase : OpDefaults {
  static constexpr NormOp kOp = NormOp::normalize;
  template <class M>
  __device__ static Acc<M> merge(const Acc<M>& x, const Acc<M>& y) {
    return {x.a + y.a, nanmax(x.b, y.b)};
  }
  /// sum over the valid items of |x|^p (p = 1, 0 without pow) and their max |x| (p = inf).
  template <class M, int K, int V>
  __device__ static Acc<M> norm_terms(const M (&x)[K], const bool (&ok)[K / V], M p) {
    M s = 0, m = 0;
    if (p == pos_inf<M>()) {
#pragma unroll
      for (int i = 0; i < K; ++i)
        if (ok[i / V]) m = nanmax(m, babs(x[i]));
    } else if (p == M(1)) {
#pragma unroll
      for (int i = 0; i < K; ++i)
        if (ok[i / V]) s += babs(x[i]);
    } else if (p == M(0)) {
#pragma unroll
      for (int i = 0; i < K; ++i)
        if (ok[i / V]) s += x[i] != M(0) ? M(1) : M(0);  // NaN counts (NaN != 0), as in torch
    } else {
#pragma unroll
      for (int i = 0; i < K; ++i)
        if (ok[i / V]) s += bpow(babs(x[i]), p);
    }
    return {s, m};
  }
  template <class M>
  __device__ static M norm_of(const Acc<M>& acc, M p) {
    if (p == pos_inf<M>()) return acc.b;
    if (p == M(1) || p == M(0)) return acc.a;
    return bpow(acc.a, M(1) / p);
  }
};

/// F.normalize for p != 2 (forward): y = x / max(||x||_p, eps).
struct NormalizePFw : NormalizePBase {
  static constexpr Direction kDir = Direction::Forward;
  static constexpr int kIn = 1, kPasses = 1;
  template <class M, int K, int V, class Wt>
  __device__ static Acc<M> thread_pass(int, const M (&v)[kIn][K], const bool (&ok)[K / V], const Wt&, const St<M>& st) {
    return norm_terms<M, K, V>(v[0], ok, st.q0);
  }
  template <class M>
  __device__ static void finish(int, const Acc<M>& acc, St<M>& st, M, M eps) {
    st.rstd = inv_clamp_min(norm_of(acc, st.q0), eps);
  }
  template <class M>
  __device__ static M out(const M (&x)[kIn], M, M, const St<M>& st) {
    return x[0] * st.rstd;
  }
};

/// F.normalize backward for p != 2 (inputs dy, x), torch's graph: y = x / d, d = clamp_min(N, eps),
/// N = ||x||_p. dx = dy / d - [N >= eps] * S / d^2 * dN/dx with S = sum(dy * x) and (torch's
/// norm_backward) dN/dx_i = sgn(x_i) (|x_i| / N)^(p-1) (0 where x_i = 0 or N = 0); p = 1:
/// sgn(x_i); p = 0: 0; p = inf: sgn(x_i) / T on the T entries where |x_i| = N (or x_i is NaN),
/// the gradient split evenly over ties as torch's amax backward does. The ratio form keeps
/// large p from overflowing |x|^(p-1) where torch's x |x|^(p-2) / N^(p-1) would not.
/// Two passes, Acc = (sums, max): p != inf: (sum |x|^p, -) then (S, -); p = inf: (S, max |x|)
/// then (T, -).
struct NormalizePBw : NormalizePBase {
  static constexpr Direction kDir = Direction::Backward;
  static constexpr int kIn = 2, kPasses = 2;
  template <class M, int K, int V, class Wt>
  __device__ static Acc<M> thread_pass(int pass, const M (&v)[kIn][K], const bool (&ok)[K / V], const Wt&,
                                       const St<M>& st) {
    const M p = st.q0;
    const bool inf = p == pos_inf<M>();
    if (pass == 0 && !inf) return norm_terms<M, K, V>(v[1], ok, p);
    M s = 0, m = 0;
    if (pass == 0) {  // p = inf: S and the max |x|
#pragma unroll
      for (int i = 0; i < K; ++i)
        if (ok[i / V]) {
          s += v[0][i] * v[1][i];
          m = nanmax(m, babs(v[1][i]));
        }
    } else if (inf) {  // the ties of the max (NaN entries count, as in torch's mask)
#pragma unroll
      for (int i = 0; i < K; ++i)
        if (ok[i / V]) s += (babs(v[1][i]) == st.mean || v[1][i] != v[1][i]) ? M(1) : M(0);
    } else {
#pragma unroll
      for (int i = 0; i < K; ++i)
        if (ok[i / V]) s += v[0][i] * v[1][i];
    }
    return {s, m};
  }
  /// mean = N, rstd = 1 / d, c1 = [N >= eps] S / d^2 (0 when N = 0), c2 = 1 / N (p != inf) or
  /// 1 / T (p = inf).
  template <class M>
  __device__ static void finish(int pass, const Acc<M>& acc, St<M>& st, M, M eps) {
    const M p = st.q0;
    const bool inf = p == pos_inf<M>();
    if (pass == 0) {
      const M norm = norm_of(acc, p);
      st.mean = norm;
      st.rstd = inv_clamp_min(norm, eps);
      st.c2 = norm > M(0) ? M(1) / norm : M(0);
      if (inf) st.c1 = acc.a;  // S, until the ties are counted
      return;
    }
    const M S = inf ? st.c1 : acc.a;
    if (inf) st.c2 = M(1) / acc.a;
    // clamp_min's gradient reaches the norm where norm >= eps (torch's where(self >= min)).
    st.c1 = (st.mean >= eps && st.mean > M(0) && p != M(0)) ? S * st.rstd * st.rstd : M(0);
  }
  template <class M>
  __device__ static M out(const M (&x)[kIn], M, M, const St<M>& st) {
    const M p = st.q0, xi = x[1];
    const M g = x[0] * st.rstd;
    if (st.c1 == M(0) || xi == M(0)) return g;
    const M sgn = xi > M(0) ? M(1) : (xi < M(0) ? M(-1) : xi);  // NaN stays NaN
    M dn;
    if (p == pos_inf<M>())
      dn = (babs(xi) == st.mean || xi != xi) ? sgn * st.c2 : M(0);
    else if (p == M(1))
      dn = sgn;
    else
      dn = sgn * bpow(babs(xi) * st.c2, p - M(1));
    return g - st.c1 * dn;
  }
};

/// sparsemax forward: y = max(x - tau, 0), sum(y) = 1. tau by Michelot's algorithm, which is
/// Newton's method on the convex, piecewise-linear f(t) = sum max(x - t, 0) - 1 from below:
/// t <- (sum_{x > t} x - 1) / |{x > t}|. It starts at t = max - 1 (f >= 0 there, and the
/// support {x > max - 1} is small: 1-5 iterations on Gaussian rows of 7..2^20 elements against
/// 4-19 from the whole row) and stops when the support stops changing; then
/// tau = (sum_S x - 1) / |S| exactly (no sort, no bisection tolerance). The iterates only grow
/// (rounding is clamped by the max with the previous one), so the support only shrinks and the
/// loop ends after at most |{x > max - 1}| + 1 passes; adversarial rows get near that bound.
/// Passes: 0 the max (NaN-propagating), then one per iteration (sum and count of x > t).
/// St: mean = t (tau at the end), c1 = the previous support size, c2 = 1 once converged.
/// A row with NaN or +inf gives NaN; a row of -inf gives NaN (as softmax's); rows whose max - 1
/// rounds to the max (|x| >= 2^24 in f32) keep tau = max (zeros).
struct SparsemaxFw : OpDefaults {
  static constexpr NormOp kOp = NormOp::sparsemax;
  static constexpr Direction kDir = Direction::Forward;
  static constexpr int kIn = 1, kPasses = 2;
  static constexpr bool kMergeByPass = true, kIterative = true;
  template <class M>
  __device__ static Acc<M> identity(int pass) {
    return {pass == 0 ? neg_inf<M>() : M(0), M(0)};
  }
  template <class M>
  __device__ static Acc<M> merge(int pass, const Acc<M>& x, const Acc<M>& y) {
    if (pass == 0) return {nanmax(x.a, y.a), M(0)};
    return {x.a + y.a, x.b + y.b};
  }
  template <class M, int K, int V, class Wt>
  __device__ static Acc<M> thread_pass(int pass, const M (&v)[kIn][K], const bool (&ok)[K / V], const Wt&,
                                       const St<M>& st) {
    if (pass == 0) {
      M m = neg_inf<M>();
#pragma unroll
      for (int i = 0; i < K; ++i)
        if (ok[i / V]) m = nanmax(m, v[0][i]);
      return {m, M(0)};
    }
    M s = 0, c = 0;
#pragma unroll
    for (int i = 0; i < K; ++i)
      if (ok[i / V] && v[0][i] > st.mean) {
        s += v[0][i];
        c += M(1);
      }
    return {s, c};
  }
  template <class M>
  __device__ static void finish(int pass, const Acc<M>& acc, St<M>& st, M, M) {
    if (pass == 0) {
      if (!(acc.a < pos_inf<M>()) && acc.a != neg_inf<M>()) {  // NaN or +inf in the row
        st.mean = quiet_nan<M>();
        st.c2 = M(1);
        return;
      }
      st.mean = acc.a - M(1);
      st.c1 = M(-1);
      st.c2 = M(0);
      return;
    }
    if (st.c2 != M(0)) return;  // converged: another group of the warp still iterates
    const M s = acc.a, c = acc.b;
    const M t = (s - M(1)) / c;
    if (c == st.c1) {  // the support did not change: tau = (sum_S x - 1) / |S|
      if (c > M(0)) st.mean = t;
      st.c2 = M(1);
      return;
    }
    st.c1 = c;
    st.mean = c > M(0) ? bmax(st.mean, t) : st.mean;
  }
  template <class M>
  __device__ static int next_pass(int pass, const St<M>& st) {
    return st.c2 != M(0) ? kPasses : 1;
  }
  template <class M>
  __device__ static M out(const M (&x)[kIn], M, M, const St<M>& st) {
    const M d = x[0] - st.mean;
    return d > M(0) ? d : (d != d ? d : M(0));  // NaN (a NaN row, or -inf - -inf) stays
  }
};

/// sparsemax backward (inputs dy, y): on the support S = {y > 0}, dx = dy - mean_S(dy); 0 off it.
struct SparsemaxBw : OpDefaults {
  static constexpr NormOp kOp = NormOp::sparsemax;
  static constexpr Direction kDir = Direction::Backward;
  static constexpr int kIn = 2, kPasses = 1;
  template <class M, int K, int V, class Wt>
  __device__ static Acc<M> thread_pass(int, const M (&v)[kIn][K], const bool (&ok)[K / V], const Wt&, const St<M>&) {
    M s = 0, c = 0;
#pragma unroll
    for (int i = 0; i < K; ++i)
      if (ok[i / V] && v[1][i] > M(0)) {
        s += v[0][i];
        c += M(1);
      }
    return {s, c};
  }
  template <class M>
  __device__ static void finish(int, const Acc<M>& acc, St<M>& st, M, M) {
    st.c1 = acc.a / acc.b;
  }
  template <class M>
  __device__ static M out(const M (&x)[kIn], M, M, const St<M>& st) {
    const M y = x[1];
    return y > M(0) ? x[0] - st.c1 : (y != y ? y : M(0));
  }
};

/// gumbel_softmax forward (torch's F.gumbel_softmax): the load turns x into z = (x + g) / tau
/// (kNoise: g from the noise tensor, or -log(-log(u)) with u from Philox), pass 0 is softmax's
/// online (max, sum exp), and a hard forward takes pass 1: the first column whose output,
/// rounded to T, equals the row's largest (round(1 / sum)): torch's y_soft.max(dim) on the
/// stored y_soft, first occurrence. Column j is held as (j / 2^24, j % 2^24), exact in f32.
/// out: the soft sample, or the one-hot (hard; 1 exactly, where torch's y_hard - y_soft +
/// y_soft rounds to within an ulp of 1; NaN rows stay NaN); out2: the soft sample (y_soft).
/// St: mean = max z, rstd = 1 / sum, (c1, c2) = the argmax, q0 = tau, q1 = hard.
template <class T>
struct GumbelFw : OpDefaults {
  static constexpr bool kFast = sizeof(T) == 2;  // ex2.approx.ftz for 16-bit outputs (see sm_exp)
  static constexpr NormOp kOp = NormOp::gumbel_softmax;
  static constexpr Direction kDir = Direction::Forward;
  static constexpr int kIn = 1, kPasses = 2;
  static constexpr bool kMergeByPass = true, kIterative = true, kColumns = true, kNoise = true, kOut2 = true;
  template <class M>
  __device__ static Acc<M> identity(int pass) {
    return pass == 0 ? Acc<M>{neg_inf<M>(), M(0)} : Acc<M>{pos_inf<M>(), pos_inf<M>()};
  }
  template <class M>
  __device__ static Acc<M> merge(int pass, const Acc<M>& x, const Acc<M>& y) {
    if (pass == 0) return SoftmaxFw<false, kFast>::merge(x, y);
    return (x.a < y.a || (x.a == y.a && x.b <= y.b)) ? x : y;  // the smaller column
  }
  template <class M, int K, int V, class Wt>
  __device__ static Acc<M> thread_pass(int pass, const M (&v)[kIn][K], const bool (&ok)[K / V], const Wt& w,
                                       const St<M>& st, const RowCols& cols) {
    if (pass == 0) return SoftmaxFw<false, kFast>::template thread_pass<M, K, V>(0, v, ok, w, st);
    // The row max's output, by the same expression as every element's (z - max = 0 exactly).
    const M top = round_to<T>(soft(st.mean, st));
    Acc<M> best = identity<M>(1);
#pragma unroll
    for (int i = K - 1; i >= 0; --i)  // items ascend in column: the last hit is the first column
      if (ok[i / V] && round_to<T>(soft(v[0][i], st)) == top) {
        const int64_t j = cols.col<V>(i);
        best = {M(j >> 24), M(j & 0xffffff)};
      }
    return best;
  }
  template <class M>
  __device__ static void finish(int pass, const Acc<M>& acc, St<M>& st, M n, M eps) {
    if (pass == 0) {
      SoftmaxFw<false, kFast>::finish(0, acc, st, n, eps);
      return;
    }
    st.c1 = acc.a;
    st.c2 = acc.b;
  }
  template <class M>
  __device__ static int next_pass(int pass, const St<M>& st) {
    return pass == 0 && st.q1 != M(0) ? 1 : kPasses;
  }
  template <class M>
  __device__ static M soft(M z, const St<M>& st) {
    return sm_exp<kFast>(z - st.mean) * st.rstd;
  }
  template <class M>
  __device__ static M out(const M (&x)[kIn], M, M, const St<M>& st, int64_t j) {
    if (st.q1 == M(0)) return soft(x[0], st);
    if (st.c1 == pos_inf<M>()) return quiet_nan<M>();  // no column matched: NaN in the row
    return (M(j >> 24) == st.c1 && M(j & 0xffffff) == st.c2) ? M(1) : M(0);
  }
  template <class M>
  __device__ static M out2(const M (&x)[kIn], const St<M>& st) {
    return soft(x[0], st);
  }
};

/// gumbel_softmax backward (inputs dy, y = the soft sample): softmax's backward over tau,
/// dx = y * (dy - sum(dy * y)) / tau (q0 = tau, c2 = 1 / tau); hard's straight-through gradient
/// is the same.
struct GumbelBw : SoftmaxBw<false> {
  static constexpr NormOp kOp = NormOp::gumbel_softmax;
  template <class M>
  __device__ static void finish(int pass, const Acc<M>& acc, St<M>& st, M n, M eps) {
    SoftmaxBw<false>::finish(pass, acc, st, n, eps);
    st.c2 = M(1) / st.q0;
  }
  template <class M>
  __device__ static M out(const M (&x)[kIn], M w, M b, const St<M>& st) {
    return SoftmaxBw<false>::out(x, w, b, st) * st.c2;
  }
};

// ---- memory helpers --------------------------------------------------------------------------------
/// Packed rows: two 16-bit elements a 32-bit word, element 2k in the low half (the order of a
/// vector load). Widening is exact and cheap: bf16 is the high half of an f32 (one shift or
/// mask), f16 one conversion of the selected half. Held as 32-bit words so that two elements
/// share a register whatever ptxas does with 16-bit variables.
template <class T>
__device__ __forceinline__ float widen_half(uint32_t w, int hi) {
  if constexpr (cuda::std::is_same_v<T, __nv_bfloat16>) {
    return __uint_as_float(hi ? (w & 0xffff0000u) : (w << 16));
  } else {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(hi ? (w >> 16) : (w & 0xffffu))));
  }
}
/// (lo, hi) rounded to T (round to nearest even, as convert<T>) and packed.
template <class T>
__device__ __forceinline__ uint32_t pack_pair(float lo, float hi) {
  uint32_t w;
  if constexpr (cuda::std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    memcpy(&w, &h, 4);
  } else {
    const __half2 h = __floats2half2_rn(lo, hi);
    memcpy(&w, &h, 4);
  }
  return w;
}
/// kV consecutive elements (one 16-byte vector when kV > 1: the plan checked alignment and unit
/// stride), or one element at a strided offset.
template <int kV, class T, class M>
__device__ __forceinline__ void load_elems(const T* p, int64_t off, M* dst) {
  if constexpr (kV == 1) {
    dst[0] = static_cast<M>(load_as_opmath(p[off]));
  } else {
    struct alignas(16) Vec {
      T v[kV];
    };
    const Vec x = *reinterpret_cast<const Vec*>(p + off);
#pragma unroll
    for (int e = 0; e < kV; ++e) dst[e] = static_cast<M>(load_as_opmath(x.v[e]));
  }
}
template <int kV, class T, class M>
__device__ __forceinline__ void store_elems(T* p, int64_t off, const M* src) {
  if constexpr (kV == 1) {
    p[off] = convert<T>(src[0]);
  } else {
    struct alignas(16) Vec {
      T v[kV];
    };
    if constexpr (sizeof(T) == 2 && sizeof(M) == 4 && kV == 8) {
      // Packed a pair at a time into 32-bit words: the compiler splits some 16-byte stores (the
      // third and fourth vector of a 32-item thread), and split element-wise conversions became
      // 16-bit stores (bf16 rms_norm forward, [16384, 4096] on H200: 70 -> 120 us once the
      // output code was duplicated for kAllParams); words split into 32-bit stores, which still
      // fill whole sectors across a warp (what the unchanged log_softmax forward gets: 71 us).
      // An explicit vector store (st.global.v4) kept every word live to the end: the bf16
      // log_softmax forward took 64 registers instead of 56 and 75.5 us.
      uint32_t wd[4];
#pragma unroll
      for (int e = 0; e < kV; e += 2) wd[e / 2] = pack_pair<T>(src[e], src[e + 1]);
      *reinterpret_cast<uint4*>(p + off) = make_uint4(wd[0], wd[1], wd[2], wd[3]);
    } else {
      Vec x;
#pragma unroll
      for (int e = 0; e < kV; ++e) x.v[e] = convert<T>(src[e]);
      *reinterpret_cast<Vec*>(p + off) = x;
    }
  }
}
/// One 16-byte vector of T as kW = 4 words (aligned: the vectorized variant only).
template <int kW, class T>
__device__ __forceinline__ void load_words(const T* p, int64_t off, uint32_t* dst) {
  static_assert(kW == 4, "one 16-byte vector");
  const uint4 x = *reinterpret_cast<const uint4*>(p + off);
  dst[0] = x.x, dst[1] = x.y, dst[2] = x.z, dst[3] = x.w;
}
template <int kW, class T>
__device__ __forceinline__ void store_words(T* p, int64_t off, const uint32_t* src) {
  static_assert(kW == 4, "one 16-byte vector");
  *reinterpret_cast<uint4*>(p + off) = make_uint4(src[0], src[1], src[2], src[3]);
}
/// kV parameters of storage type W at column j (dense; 16-byte aligned base when kV > 1).
template <int kV, class W, class M>
__device__ __forceinline__ void load_params_as(const void* base, int64_t j, M* dst) {
  constexpr int kPer = (kV * int(sizeof(W)) > 16) ? 16 / int(sizeof(W)) : kV;
  struct alignas(kPer * sizeof(W)) Chunk {
    W v[kPer];
  };
  const Chunk* q = reinterpret_cast<const Chunk*>(static_cast<const W*>(base) + j);
#pragma unroll
  for (int k = 0; k < kV / kPer; ++k) {
    const Chunk c = q[k];
    if constexpr (sizeof(W) == 2 && kPer % 2 == 0 && sizeof(M) == 4) {
      // As 32-bit words, each half widened by widen_half (one instruction a bf16 element; the
      // element-wise conversion of a high half was two, PRMT + shift).
      uint32_t wd[kPer / 2];
      memcpy(wd, c.v, sizeof(wd));
#pragma unroll
      for (int e = 0; e < kPer; ++e) dst[k * kPer + e] = widen_half<W>(wd[e / 2], e & 1);
    } else {
#pragma unroll
      for (int e = 0; e < kPer; ++e) dst[k * kPer + e] = static_cast<M>(load_as_opmath(c.v[e]));
    }
  }
}
template <int kV, class T, class M>
__device__ __forceinline__ void load_params(const void* base, bool f32, int64_t j, M* dst) {
  if (f32)
    load_params_as<kV, float>(base, j, dst);
  else
    load_params_as<kV, T>(base, j, dst);
}

/// Merges `v` over aligned groups of `width` lanes (a power of two, <= 32) by xor shuffles: a
/// balanced tree of fixed shape whose merges are bitwise commutative, so every lane of a group
/// ends with the same bits. A whole warp (every row of 32+ threads) takes an unrolled copy: no
/// loop counter or branch a step, and fewer registers (the compiler schedules the five steps
/// together). H200, [16384, 4096] bf16, same bits: softmax fw 72.7 -> 70.2 us, log_softmax fw
/// 70.1 -> 67.6, layer_norm bw 136.9 -> 134.1, rms_norm bw 109.7 -> 108.7. f64 keeps the loop:
/// unrolled, several f64 kernels spilled (up to 192 bytes a thread).
/// One step of it: v merged with lane (lane xor o)'s v.
template <class Op, class M>
__device__ __forceinline__ Acc<M> xor_merge(int pass, const Acc<M>& v, int o) {
  const Acc<M> u{__shfl_xor_sync(0xffffffffu, v.a, o), __shfl_xor_sync(0xffffffffu, v.b, o)};
  return merge_of<Op>(pass, v, u);
}
template <class Op, class M>
__device__ __forceinline__ Acc<M> butterfly(int pass, Acc<M> v, int width) {
  if (sizeof(M) == 4 && width == 32) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = xor_merge<Op>(pass, v, o);
    return v;
  }
  for (int o = width / 2; o > 0; o >>= 1) v = xor_merge<Op>(pass, v, o);
  return v;
}

/// Reduces `v` over a group of `tpr` threads; every thread of the group gets the same bits.
/// Groups wider than a warp are a whole CTA (the plan launches one group per CTA then).
template <class Op, class M>
__device__ __forceinline__ Acc<M> group_reduce(int pass, Acc<M> v, int tpr, Acc<M>* smem) {
  v = butterfly<Op>(pass, v, tpr < 32 ? tpr : 32);
  if (tpr <= 32) return v;
  const int warp = threadIdx.x / 32;
  __syncthreads();  // the previous reduction's readers are done with smem
  if ((threadIdx.x & 31) == 0) smem[warp] = v;
  __syncthreads();
  // The warps' results: a second butterfly over lanes (lane k holds warp k % nw's), so the merges
  // form a balanced tree of fixed shape (what an equal-weight merge needs, kFullRowPass) in
  // log2(nw) steps instead of a chain of nw - 1. tpr is a power of two (the plan's pow2_at_least).
  const int nw = tpr / 32;
  return butterfly<Op>(pass, smem[threadIdx.x & (nw - 1)], nw);
}

/// Cluster rows (NormLaunch::cluster > 1): merges the CTA results `v` of the row's `ctas` CTAs in
/// rank order, so every CTA ends with the same bits. Each CTA publishes v in xc[parity] and reads
/// all of them through distributed shared memory after one cluster barrier (ctas <= 32). Two buffers: the
/// buffer of exchange e is written again at e + 2, after every CTA arrived at exchange e + 1's
/// barrier, which it does only after its reads of exchange e (arrive has release semantics).
template <class Op, class M>
__device__ __forceinline__ Acc<M> cluster_merge(int pass, Acc<M> v, int ctas, Acc<M> (&xc)[2], int& parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  static_assert(sizeof(Acc<M>) == 2 * sizeof(M), "Acc is the pair (a, b)");
  Acc<M>* buf = &xc[parity];
  parity ^= 1;
  if (threadIdx.x == 0) *buf = v;
  cluster_arrive();
  cluster_wait();
  // Lane k of every warp reads CTA k's result (one remote round trip, all in parallel), then the
  // warp merges them in rank order through shuffles: the same bits in every thread. (Reading them
  // one after another cost a remote-load latency per CTA at each of a row's reductions.)
  const int k = int(threadIdx.x & 31);
  Acc<M> u{M(0), M(0)};
  if (k < ctas) dsmem_load_pair(&buf->a, unsigned(k), u.a, u.b);
  Acc<M> r{__shfl_sync(0xffffffffu, u.a, 0), __shfl_sync(0xffffffffu, u.b, 0)};
#pragma unroll 1
  for (int q = 1; q < ctas; ++q)
    r = merge_of<Op>(pass, r, Acc<M>{__shfl_sync(0xffffffffu, u.a, q), __shfl_sync(0xffffffffu, u.b, q)});
  return r;
#else
  return v;  // the host launches clusters only for sm_90+ code (cluster_ready)
#endif
}

// ---- the kernel ------------------------------------------------------------------------------------
/// The layer/rms_norm backward (the ops with parameter gradients) keeps per-thread arrays in
/// dynamic shared memory instead of registers (SmemCol, one column a thread: no synchronization):
/// the weight of the loaded chunk, then the parameter-gradient sums of register-resident rows
/// (weight, and bias for layer_norm). As registers (3 x kItems) they held the backward at 2 CTAs
/// an SM (128 registers).
template <class Op>
inline constexpr bool kSmemRows = Op::kParamGrad;

/// One pass of Op over this thread's loaded values. Packed rows widen to M here, at the use (one
/// shift / conversion an element), so no f32 copy of the row is live as a whole; the weight
/// (SmemCol or RegRow) is read a whole word at a time into the array the op indexes. Ops with
/// the weight in shared memory (kSmemRows) reduce one vector at a time, so that only one
/// vector's weight is live in registers (the whole chunk's spilled at the 64-register cap).
template <class Op, class M, int kItems, int kV, bool kPacked, class T, class R, int kSt, class Wt>
__device__ __forceinline__ Acc<M> reduce_loaded(int pass, const R (&v)[Op::kIn][kSt], const bool (&ok)[kItems / kV],
                                                const Wt& w, const St<M>& st, const RowCols& cols) {
  if constexpr (kSmemRows<Op>) {
    static_assert(!kNeedsColumns<Op>, "the parameter-gradient ops are column-agnostic");
    Acc<M> acc;
#pragma unroll
    for (int c = 0; c < kItems / kV; ++c) {
      M wc[kV], u[Op::kIn][kV];
      w.template load<kV>(c * kV, wc);
#pragma unroll
      for (int t = 0; t < Op::kIn; ++t)
#pragma unroll
        for (int e = 0; e < kV; ++e) {
          const int i = c * kV + e;
          if constexpr (kPacked)
            u[t][e] = widen_half<T>(v[t][i / 2], i & 1);
          else
            u[t][e] = v[t][i];
        }
      const bool okc[1] = {ok[c]};
      const Acc<M> r = Op::template thread_pass<M, kV, kV>(pass, u, okc, wc, st);
      acc = c == 0 ? r : merge_of<Op>(pass, acc, r);
    }
    return acc;
  } else if constexpr (kPacked) {
    static_assert(!kNeedsColumns<Op>, "column-aware ops hold unpacked rows");
    M u[Op::kIn][kItems];
#pragma unroll
    for (int t = 0; t < Op::kIn; ++t)
#pragma unroll
      for (int i = 0; i < kItems; ++i) u[t][i] = widen_half<T>(v[t][i / 2], i & 1);
    return Op::template thread_pass<M, kItems, kV>(pass, u, ok, w, st);
  } else if constexpr (kNeedsColumns<Op>) {
    return Op::template thread_pass<M, kItems, kV>(pass, v, ok, w, st, cols);
  } else {
    return Op::template thread_pass<M, kItems, kV>(pass, v, ok, w, st);
  }
}

/// Gumbel noise for kV consecutive columns j0.. of row `row` (philox.hpp's stream layout):
/// g = -log(E), E = -log(u) ~ Exponential(1). E takes the accurate log (u near 1 gives E near
/// 0, where an absolute error would be a large relative one); 16-bit outputs take __logf for
/// the second log (its ~1e-6 absolute error is far below their rounding).
template <int kV, bool kFast, class M>
__device__ __forceinline__ void gumbel_noise(uint64_t seed, uint64_t offset, int64_t row, int64_t j0, int64_t n,
                                             M (&g)[kV]) {
  constexpr int kPer = sizeof(M) == 8 ? 2 : 4;  // elements a Philox call
  const int64_t calls = (n + kPer - 1) / kPer;
  if constexpr (kV > 1) {
    static_assert(kV % kPer == 0, "vectors start on a call boundary (j0 is a multiple of kV)");
#pragma unroll
    for (int c = 0; c < kV / kPer; ++c) {
      const detail::Philox4 r =
          detail::philox_block(seed, offset, uint64_t(row) * uint64_t(calls) + uint64_t(j0 / kPer + c));
#pragma unroll
      for (int e = 0; e < kPer; ++e) {
        M u;
        if constexpr (sizeof(M) == 8)
          u = detail::philox_uniform_f64(r.v[2 * e], r.v[2 * e + 1]);
        else
          u = detail::philox_uniform_f32(r.v[e]);
        const M ex = -blog(u);
        if constexpr (kFast && sizeof(M) == 4)
          g[c * kPer + e] = -__logf(ex);
        else
          g[c * kPer + e] = -blog(ex);
      }
    }
  } else {
    const detail::Philox4 r = detail::philox_block(seed, offset, uint64_t(row) * uint64_t(calls) + uint64_t(j0 / kPer));
    const int e = static_cast<int>(j0 % kPer);
    // Selects, not r.v[e]: a dynamic index would put the four words in local memory.
    M u;
    if constexpr (sizeof(M) == 8)
      u = e == 0 ? detail::philox_uniform_f64(r.v[0], r.v[1]) : detail::philox_uniform_f64(r.v[2], r.v[3]);
    else
      u = detail::philox_uniform_f32(e < 2 ? (e == 0 ? r.v[0] : r.v[1]) : (e == 2 ? r.v[2] : r.v[3]));
    const M ex = -blog(u);
    if constexpr (kFast && sizeof(M) == 4)
      g[0] = -__logf(ex);
    else
      g[0] = -blog(ex);
  }
}

/// Register cap: __launch_bounds__' minimum CTAs of 512 threads an SM (2 -> 64 registers a
/// thread; 0 = no minimum, i.e. the 128 that 512 threads allow; note 1 is not the same as 0: it
/// emits .minnctapersm and ptxas then allocates differently, +20 registers on some backward
/// kernels). The row lives in registers and a CTA issues all its loads before its first
/// reduction, so the bytes in flight per SM are (resident threads x items x element size), and
/// registers decide the resident threads. A 16-bit row of 4096 is only 8 KB: at its 128-thread
/// CTAs, 102-107 registers left 4 CTAs (16 warps, 32 KB) an SM and softmax / layer_norm forward
/// at 36-50% of copy bandwidth, while normalize at 63 registers had 8 CTAs (64 KB) and reached
/// 89%. So the big vectorized 16-bit forward is held to 64 registers (8 CTAs of 128; 2 of 512
/// for long rows, where it was 1): with packed rows (kPacked) it fits without spills except
/// bf16 layer_norm (16 bytes) and f16 log_softmax (4 bytes). f16 layer_norm is left uncapped:
/// at 64 it spills ~250 bytes a thread (bf16 only 16; the cause was not pinned down).
/// f32/f64 rows are 2-4x the bytes, so 4 CTAs already keep >= 64 KB in flight: no cap (a cap
/// spilled there). The layer/rms_norm backward keeps its f32 parameter-gradient sums in shared
/// memory (param_sums) and its 16-bit rows packed, so it too fits 64 registers (4 CTAs of 256
/// for a 4096 row instead of 2 at 128 registers, when the sums were registers: 51-59% of copy
/// bandwidth on H100). Checked with -Xptxas -v for every instantiation.
template <class T, class Op, int kItems, int kV, bool kCluster = false>
constexpr int norm_min_ctas() {
  if (sizeof(T) != 2 || kV == 1 || kItems <= kV) return 0;
  // Cluster rows are 512-thread CTAs: two an SM (64 registers) keep a second row's loads in
  // flight while one CTA waits at its cluster barrier.
  if (kCluster && !kAddsNoise<Op>) return 2;
  // softmax / log_softmax / normalize (p = 2) backward: packed rows (kPacked), 32 items at 64
  // registers (8 CTAs of 128 for a 4096 row; norm_big_items). History, H200, [16384, 4096] bf16:
  // softmax bw 118.3 us with f32 rows of 16 at 62-64 registers (4 CTAs of 256), 104.7 packed
  // alone, 101.6 packed at 42 registers (6 CTAs), 100.0 with 32 items at 64 (normalize bw 124.8,
  // 105.3, 99.6). 32 items at 42 registers spilled (220 us); a copy of the same traffic: 98-103.
  if (Op::kPackedBwMinCtas > 0) return Op::kPackedBwMinCtas;
  if (Op::kDir != Direction::Forward) return Op::kParamGrad ? 2 : 0;  // see kPacked / param_sums
  if ((Op::kOp == NormOp::layer_norm || Op::kOp == NormOp::sparsemax) && cuda::std::is_same_v<T, __half>)
    return 0;  // f16 sparsemax at 64: ~190 bytes of spills (bf16: none)
  // gumbel_softmax holds an f32 row plus the Philox rounds of its noise: 124 registers at 16
  // items without spills; capped at 64 it spilled ~100 bytes a thread (its big item count is
  // 16, norm_big_items, for the same reason).
  if (kAddsNoise<Op>) return 0;
  return 2;
}
template <class M, class Op, int kItems>
size_t smem_rows_bytes(const NormLaunch& p) {
  if constexpr (!kSmemRows<Op>) {
    return 0;
  } else {
    const bool sums = p.slots > 0 && p.n <= int64_t(p.cluster) * p.tpr * kItems;
    const int arrays = 1 + (sums ? (Op::kOp == NormOp::layer_norm ? 2 : 1) : 0);
    return size_t(arrays) * kItems * p.block * sizeof(M);
  }
}
/// One thread's column of a shared-memory array (see smem_rows_bytes). Stored in 16-byte words,
/// word q of every thread adjacent ([kItems / P][blockDim][P]), so a thread moves P = 16 /
/// sizeof(M) of its elements with one conflict-free access; the kernel reads and writes whole
/// words (load, store). Element-wise 32-bit accesses of this layout, 16 bytes apart across a
/// warp, are 4-way bank conflicts: reading the weight that way was 42% of the layer_norm
/// backward's shared-load wavefronts on H100 (ncu), and a word read one element at a time is
/// narrowed back to 32-bit loads by the compiler.
template <class M>
struct SmemCol {
  static constexpr int P = 16 / int(sizeof(M));
  struct alignas(16) Word {
    M v[P];
  };
  M* base;
  __device__ Word* word(int q) const { return reinterpret_cast<Word*>(base) + q * int(blockDim.x) + int(threadIdx.x); }
  /// d[e] = this[i0 + e] for e < K (i0 a multiple of K).
  template <int K>
  __device__ void load(int i0, M (&d)[K]) const {
    if constexpr (K % P == 0) {
#pragma unroll
      for (int q = 0; q < K / P; ++q) {
        const Word wd = *word(i0 / P + q);
#pragma unroll
        for (int e = 0; e < P; ++e) d[q * P + e] = wd.v[e];
      }
    } else {
#pragma unroll
      for (int e = 0; e < K; ++e) d[e] = word((i0 + e) / P)->v[(i0 + e) % P];
    }
  }
  /// this[i0 + e] = d[e] for e < K (i0 a multiple of K).
  template <int K>
  __device__ void store(int i0, const M (&d)[K]) const {
    if constexpr (K % P == 0) {
#pragma unroll
      for (int q = 0; q < K / P; ++q) {
        Word wd;
#pragma unroll
        for (int e = 0; e < P; ++e) wd.v[e] = d[q * P + e];
        *word(i0 / P + q) = wd;
      }
    } else {
#pragma unroll
      for (int e = 0; e < K; ++e) word((i0 + e) / P)->v[(i0 + e) % P] = d[e];
    }
  }
  /// this[i0 + e] = x for e < K.
  template <int K>
  __device__ void fill(int i0, M x) const {
    M d[K];
#pragma unroll
    for (int e = 0; e < K; ++e) d[e] = x;
    store<K>(i0, d);
  }
};
/// The register array it replaces (same construction and interface, so the kernel picks either
/// by type).
template <class M, int K>
struct RegRow {
  M v[K];
  __device__ explicit RegRow(M*) {}
  __device__ const M& operator[](int i) const { return v[i]; }
  template <int L>
  __device__ void load(int i0, M (&d)[L]) const {
#pragma unroll
    for (int e = 0; e < L; ++e) d[e] = v[i0 + e];
  }
  template <int L>
  __device__ void store(int i0, const M (&d)[L]) {
#pragma unroll
    for (int e = 0; e < L; ++e) v[i0 + e] = d[e];
  }
  // Element by element, not through store(): passing a local array of ones cost the 16-bit
  // softmax forward 7 registers (55 -> 62: 9 -> 8 CTAs an SM).
  template <int L>
  __device__ void fill(int i0, M x) {
#pragma unroll
    for (int e = 0; e < L; ++e) v[i0 + e] = x;
  }
};
extern __shared__ __align__(16) unsigned char norm_dyn_smem[];

/// Whether row_kernel's kParamF32 decides the parameter dtype (the 16-bit forward's vectorized
/// kernels of the ops with a weight or bias); every other kernel reads NormLaunch::param_f32 at run
/// time, and the launcher instantiates only kParamF32 = false for it. Folding the flag into the
/// scalar (strided) kernels gave the f16/bf16 layer_norm forward 64 registers and 64-200 bytes of
/// spills instead of 98-128 registers; into the backward (which reads the weight once a CTA,
/// w_kept) 2-3% slower runs (H200, [16384, 4096]); into f32 rms_norm 97 registers instead of 94
/// (a CTA an SM fewer). f32 parameters exist only for 16-bit rows (plan.cpp: mixed_ok).
template <class T, class Op, int kV>
inline constexpr bool kParamDtypeTemplated =
    kV > 1 && sizeof(T) == 2 && Op::kDir == Direction::Forward && (Op::kW || Op::kB);

/// kCluster: the cluster-rows variant (launched as clusters; a separate instantiation because the
/// exchange's code raised the registers of the plain kernel by up to 17, costing occupancy).
/// kParamF32: the weight / bias are f32 (NormLaunch::param_f32, 16-bit rows only), a template
/// argument of the forward's vectorized kernels rather than the launch flag: as a flag both loads
/// and both widenings were issued, predicated, for every vector of every row. H200, [16384, 4096],
/// same output bits: layer_norm fw bf16 83.6 -> 77.9 us, f16 95.2 -> 81.8 (f32 parameters 95.1 ->
/// 90.7); rms_norm fw bf16 71.8 -> 69.5.
template <class T, class Op, int kItems, int kV, bool kCluster = false, bool kParamF32 = false>
__global__ void __launch_bounds__(512, norm_min_ctas<T, Op, kItems, kV, kCluster>()) row_kernel(const NormLaunch p) {
  using M = opmath_t<T>;
  constexpr int kC = kItems / kV;
  constexpr int kIn = Op::kIn;
  __shared__ Acc<M> red[detail::kNormMaxTpr / 32];
  __shared__ Acc<M> xc[2];  // cluster rows: this CTA's published row result (cluster_merge)

  // Cluster rows: the `ctas` CTAs of a cluster (consecutive along x) share each row as one group
  // of ctas x tpr threads; lane and rtpr below are that group's (CTA rank r's threads are lanes
  // r * tpr ...). Otherwise ctas = 1 and a group is tpr threads of one CTA.
  // The geometry comes from the cluster special registers (cheap to re-read, so not held in
  // registers across the row loop; NormLaunch::cluster only tells the launcher).
  const int ctas = kCluster ? int(cluster_reg<ClusterReg::ctas>()) : 1;
  const int tpr = p.tpr;
  const int rtpr = tpr * ctas;  // threads a row
  const int lane = (kCluster ? int(cluster_reg<ClusterReg::rank>()) * tpr : 0) + int(threadIdx.x & (tpr - 1));
  const int64_t cid = kCluster ? int64_t(cluster_reg<ClusterReg::index_x>()) : int64_t(blockIdx.x);
  const int64_t nclusters = kCluster ? int64_t(cluster_reg<ClusterReg::count_x>()) : int64_t(gridDim.x);
  int parity = 0;
  // tpr is a power of two (the plan's pow2_at_least): shifts, not a 32-bit division each.
  const int tpr_log2 = __ffs(tpr) - 1;
  const int groups = int(blockDim.x >> tpr_log2);
  const int g = int(threadIdx.x >> tpr_log2);
  const int64_t n = p.n;
  const int64_t chunk = int64_t(rtpr) * kItems;
  const bool cached = n <= chunk;
  const bool full_rows = n == chunk && ctas == 1;  // every thread of every group holds kItems valid items
  const M eps = static_cast<M>(p.eps);
  const T* in0 = static_cast<const T*>(p.in[0]);
  const T* in1 = static_cast<const T*>(p.in[1]);
  T* out0 = static_cast<T*>(p.out[0]);
  T* out1 = static_cast<T*>(p.out[1]);
  const bool residual = Op::kResidual && in1 != nullptr;
  const bool has_w = Op::kW && p.weight != nullptr;
  const bool has_b = Op::kB && p.bias != nullptr;
  const bool param_f32 = kParamDtypeTemplated<T, Op, kV> ? kParamF32 : p.param_f32;
  const bool pgrad = Op::kParamGrad && p.slots > 0 && cached;   // streamed rows: param_cols_kernel
  constexpr bool kWInReduce = Op::kDir == Direction::Backward;  // g = dy * w feeds the row sums
  const bool masked = Op::kMaskable && p.mask != nullptr;
  const int64_t slot = cid * groups + g;
  M* part_w = static_cast<M*>(p.partial);
  // layer_norm reserves a second workspace half for dbias; rms_norm has none.
  M* part_b = (Op::kOp == NormOp::layer_norm && part_w) ? part_w + int64_t(p.slots) * n : nullptr;

  // Column offset in tensor slot t. The vectorized variant is only planned for unit reduced
  // stride (plan.cpp: geometry), so it uses j directly: no 64-bit multiply per vector and no
  // column strides held in registers (they count against the register cap, norm_min_ctas).
  auto cs = [&](int t, int64_t j) -> int64_t {
    if constexpr (kV > 1)
      return j;
    else
      return j * p.col_stride[t];
  };

  // Packed rows: f16/bf16 rows stay in registers as loaded (two elements a register) and widen
  // to f32 at each use, halving the registers the row takes (32 items: 16 instead of 32). Those
  // registers bound the rows resident per SM and so the bytes in flight (norm_min_ctas). Lossless:
  // every held value is a T (loaded, or x + residual already rounded to T); only the masked
  // softmax / log_softmax forward, whose additive mask is added in f32, and gumbel_softmax's,
  // whose noise is, keep f32 rows. Backward: the layer/rms_norm one needs it to fit 64 registers,
  // softmax / log_softmax's and normalize's (p = 2) to hold 32 items at 64 (Op::kPackedBwMinCtas,
  // norm_min_ctas, norm_big_items).
  constexpr bool kPacked = sizeof(T) == 2 && sizeof(M) == 4 && kV == 8 && !Op::kMaskable && !kAddsNoise<Op> &&
                           (Op::kDir == Direction::Forward || Op::kParamGrad || Op::kPackedBwMinCtas > 0);
  constexpr int kSt = kPacked ? kItems / 2 : kItems;  // storage slots a thread and input
  using R = cuda::std::conditional_t<kPacked, uint32_t, M>;

  // This thread's weight and parameter-gradient sums (smem_rows_bytes).
  M* const smem_rows = reinterpret_cast<M*>(norm_dyn_smem);
  const SmemCol<M> w_smem{smem_rows};
  const SmemCol<M> sums_w{smem_rows + kItems * blockDim.x};
  const SmemCol<M> sums_b{smem_rows + 2 * kItems * blockDim.x};
  const bool pb_sums = Op::kOp == NormOp::layer_norm;
  if (pgrad && cached) {
    const M zeros[kItems] = {};
    sums_w.template store<kItems>(0, zeros);
    if (pb_sums) sums_b.template store<kItems>(0, zeros);
  }
  bool w_kept = false;  // register-resident rows: the weight in shared memory is this thread's already

  for (int64_t r0 = cid * groups; r0 < p.rows; r0 += nclusters * groups) {
    const int64_t row = r0 + g;
    const bool active = row < p.rows;
    int64_t base[kNumSlots];
    row_offsets(p, active ? row : 0, base);
    St<M> st{M(0), M(0), M(0), M(0), static_cast<M>(p.op_args[0]), static_cast<M>(p.op_args[1])};
    if (active) {
      if (Op::kLoadMean) st.mean = static_cast<const M*>(p.mean_in)[row];
      if (Op::kLoadRstd) st.rstd = static_cast<const M*>(p.rstd_in)[row];
    }
    if (masked && p.mask_kind == NormMask::boolean) st.c1 = M(1);  // fully excluded rows give zeros
    R v[kIn][kSt];  // the row (or chunk); two elements a word where kPacked
    // Weight of the loaded chunk where the reduction needs it (backward), else 1.
    cuda::std::conditional_t<kSmemRows<Op>, SmemCol<M>, RegRow<M, kItems>> w{w_smem.base};
    bool ok[kC];

    // Loads chunk `cb`. With a fused residual the first load of a chunk reads x and residual and
    // writes their sum (rounded to T, as torch's x + residual is); later passes of a streamed row
    // read that sum back, so in-place residual updates stay correct. `reduce_only`: a streamed
    // reduction pass (Op::kReduceReadsIn0 skips the second input there).
    // `whole` (a compile-time bool): an active full row, so every vector is inside it and the
    // loads go without per-vector tests.
    auto load = [&](int64_t cb, bool first_load, bool reduce_only, auto whole) {
      const bool skip_in1 = Op::kReduceReadsIn0 && reduce_only;
#pragma unroll
      for (int c = 0; c < kC; ++c) {
        const int64_t j0 = cb + (int64_t(lane) + int64_t(c) * rtpr) * kV;
        ok[c] = decltype(whole)::value || (active && j0 < n);
        if (decltype(whole)::value || ok[c]) {
          if constexpr (kPacked) {  // raw vectors; masks never apply (kPacked excludes them)
            constexpr int kW = kV / 2;
            uint32_t* dst0 = &v[0][c * kW];
            if (residual && !first_load) {
              load_words<kW>(out1, base[detail::kOut1] + cs(detail::kOut1, j0), dst0);
            } else {
              load_words<kW>(in0, base[detail::kIn0] + cs(detail::kIn0, j0), dst0);
              if (kIn == 2 && !skip_in1) {
                load_words<kW>(in1, base[detail::kIn1] + cs(detail::kIn1, j0), &v[kIn - 1][c * kW]);
              } else if (kIn == 1 && residual) {  // the same f32 add and rounding to T as the unpacked path
                uint32_t r[kW];
                load_words<kW>(in1, base[detail::kIn1] + cs(detail::kIn1, j0), r);
#pragma unroll
                for (int q = 0; q < kW; ++q)
                  dst0[q] = pack_pair<T>(widen_half<T>(dst0[q], 0) + widen_half<T>(r[q], 0),
                                         widen_half<T>(dst0[q], 1) + widen_half<T>(r[q], 1));
                if (out1) store_words<kW>(out1, base[detail::kOut1] + cs(detail::kOut1, j0), dst0);
              }
            }
          } else {
            M* dst0 = &v[0][c * kV];
            if (residual && !first_load) {
              load_elems<kV>(out1, base[detail::kOut1] + cs(detail::kOut1, j0), dst0);
            } else {
              load_elems<kV>(in0, base[detail::kIn0] + cs(detail::kIn0, j0), dst0);
              if ((kIn == 2 && !skip_in1) || residual) {
                M r[kV];
                load_elems<kV>(in1, base[detail::kIn1] + cs(detail::kIn1, j0), kIn == 2 ? &v[kIn - 1][c * kV] : r);
                if (residual) {
#pragma unroll
                  for (int e = 0; e < kV; ++e) dst0[e] = static_cast<M>(load_as_opmath(convert<T>(dst0[e] + r[e])));
                  if (out1) store_elems<kV>(out1, base[detail::kOut1] + cs(detail::kOut1, j0), dst0);
                }
              }
            }
            if (masked) {  // scalar loads: masks are mostly broadcast (L1-resident) and one byte wide
#pragma unroll
              for (int e = 0; e < kV; ++e) {
                const int64_t mo = base[detail::kMask] + (j0 + e) * p.col_stride[detail::kMask];
                if (p.mask_kind == NormMask::boolean) {
                  if (static_cast<const uint8_t*>(p.mask)[mo] != 0) dst0[e] = neg_inf<M>();
                } else {
                  dst0[e] += static_cast<M>(load_as_opmath(static_cast<const T*>(p.mask)[mo]));
                }
              }
            }
            if constexpr (kAddsNoise<Op>) {  // gumbel_softmax: z = (x + g) / tau, in f32 (f64)
              M gn[kV];
              if (in1)
                load_elems<kV>(in1, base[detail::kIn1] + cs(detail::kIn1, j0), gn);
              else
                gumbel_noise<kV, Op::kFast>(p.seed, p.offset, row, j0, n, gn);
              // 16-bit outputs multiply by 1 / tau (its rounding is far below theirs); f32/f64
              // divide as torch does (fl(1 / tau) alone would scale every z - max by up to an ulp),
              // by one fma correction of the product: the division's slow path is a call, which
              // spilled f64 rows.
              const M inv_tau = M(1) / st.q0;
#pragma unroll
              for (int e = 0; e < kV; ++e) {
                const M a = dst0[e] + gn[e], q = a * inv_tau;
                dst0[e] = Op::kFast ? q : fma(fma(-q, st.q0, a), inv_tau, q);
              }
            }
          }
          if (has_w && kWInReduce && !w_kept) {
            M wl[kV];
            load_params<kV, T>(p.weight, param_f32, j0, wl);
            w.template store<kV>(c * kV, wl);
          }
        }
        if (!ok[c] || !has_w || !kWInReduce) {
          w.template fill<kV>(c * kV, M(1));
        }
      }
    };

    // Writes the output of the loaded chunk `cb`; accumulates parameter gradients. kAllParams
    // (an integral_constant): the forward's weight and bias (those the op has) are all given, so
    // they are loaded unconditionally, with no defaults of 1 / 0 set first and no predicated loads.
    auto emit = [&](int64_t cb, auto all_params) {
      constexpr bool kAllParams = decltype(all_params)::value;
      const bool load_w = kAllParams ? Op::kW : has_w, load_b = kAllParams ? Op::kB : has_b;
#pragma unroll
      for (int c = 0; c < kC; ++c) {
        if (!ok[c]) continue;
        const int64_t j0 = cb + (int64_t(lane) + int64_t(c) * rtpr) * kV;
        M o[kV];
        [[maybe_unused]] M o2[kHasOut2<Op> ? kV : 1];  // the second output (kOut2)
        // Forward: the parameters are read here, not held through the reduction passes, which
        // keeps registers (and so occupancy) for the row itself; they are L1/L2-resident.
        M wv[kV], bv[kV];
        if (!kWInReduce && load_w)
          load_params<kV, T>(p.weight, param_f32, j0, wv);
        else
          for (int e = 0; e < kV; ++e) wv[e] = M(1);
        if (load_b)
          load_params<kV, T>(p.bias, param_f32, j0, bv);
        else
          for (int e = 0; e < kV; ++e) bv[e] = M(0);
        // Parameter-gradient sums go to shared memory a 16-byte word (G elements) at a time.
        constexpr int G = SmemCol<M>::P < kV ? SmemCol<M>::P : kV;
#pragma unroll
        for (int e0 = 0; e0 < kV; e0 += G) {
          if constexpr (kWInReduce) {  // the backward's weight (or ones), one word at a time
            M wq[G];
            w.template load<G>(c * kV + e0, wq);
#pragma unroll
            for (int q = 0; q < G; ++q) wv[e0 + q] = wq[q];
          }
          M x[G][kIn];
#pragma unroll
          for (int q = 0; q < G; ++q) {
            const int e = e0 + q, i = c * kV + e;
#pragma unroll
            for (int t = 0; t < kIn; ++t) {
              if constexpr (kPacked)
                x[q][t] = widen_half<T>(v[t][i / 2], i & 1);
              else
                x[q][t] = v[t][i];
            }
            if constexpr (kNeedsColumns<Op>)
              o[e] = Op::out(x[q], wv[e], bv[e], st, j0 + e);
            else
              o[e] = Op::out(x[q], wv[e], bv[e], st);
            if constexpr (kHasOut2<Op>) o2[e] = Op::out2(x[q], st);
          }
          // Register-resident rows only: launch_rows hands streamed rows' parameter gradients
          // to param_cols_kernel (pgrad is false for them). param_grad adds into the loaded word
          // itself (one FFMA / FADD an element): a separate contribution added afterwards was a
          // multiply, a select (for the runtime pgrad) and an add an element.
          if (pgrad) {
            M sw[G], sb[G];
            sums_w.template load<G>(c * kV + e0, sw);
            if (pb_sums) sums_b.template load<G>(c * kV + e0, sb);
#pragma unroll
            for (int q = 0; q < G; ++q) Op::param_grad(x[q], st, sw[q], sb[q]);
            sums_w.template store<G>(c * kV + e0, sw);
            if (pb_sums) sums_b.template store<G>(c * kV + e0, sb);
          }
        }
        store_elems<kV>(out0, base[detail::kOut0] + cs(detail::kOut0, j0), o);
        if constexpr (kHasOut2<Op>)
          if (out1) store_elems<kV>(out1, base[detail::kOut1] + cs(detail::kOut1, j0), o2);
      }
    };

    if (cached) {
      // The forward of an active full row without a residual loads it without tests (H200,
      // [16384, 4096] bf16, bench_norm: layer_norm fw 73.5 -> 72.2 us, softmax fw 72.1 -> 70.7,
      // rms_norm / log_softmax within 0.3 us; the backward was 1.5% slower with it in the
      // standalone driver, so it keeps the tests).
      constexpr bool kWholeOk = !kCluster && !Op::kMaskable && !kParamF32 && Op::kDir == Direction::Forward &&
                                kV * sizeof(T) == 16;
      if (kWholeOk && full_rows && active && !residual)
        load(0, true, false, cuda::std::bool_constant<kWholeOk>{});
      else
        load(0, true, false, cuda::std::false_type{});
      w_kept = kSmemRows<Op>;
    }
    // One reduction pass of the row: the group's merged result turned into row statistics.
    auto reduce_pass = [&](int pass) {
      Acc<M> acc = identity_of<Op, M>(pass);
      if (cached) {
        acc = reduce_loaded<Op, M, kItems, kV, kPacked, T>(pass, v, ok, w, st, RowCols{0, lane, rtpr});
      } else {
        for (int64_t cb = 0; cb < n; cb += chunk) {
          load(cb, pass == 0, true, cuda::std::false_type{});
          acc = merge_of<Op>(pass, acc,
                             reduce_loaded<Op, M, kItems, kV, kPacked, T>(pass, v, ok, w, st, RowCols{cb, lane, rtpr}));
        }
      }
      acc = group_reduce<Op>(pass, acc, tpr, red);
      if constexpr (kCluster) acc = cluster_merge<Op>(pass, acc, ctas, xc, parity);
      Op::finish(pass, acc, st, static_cast<M>(n), eps);
    };
    // The full-row pass is a call of its own with a constant pass, not a turn of the loop: in the
    // loop's body its code raised the register need of the whole loop (bf16 layer_norm at 64
    // registers: 140 bytes of spills; as a call of its own, with 8-item blocks, none).
    bool reduced = false;
    if constexpr (kHasFullRowPass<Op>)
      if (full_rows) {
        reduce_pass(Op::kFullRowPass);
        reduced = true;
      }
    if (!reduced) {
#pragma unroll 1
      for (int pass = 0; pass < Op::kPasses; pass = next_pass_of<Op>(pass, st, tpr)) reduce_pass(pass);
    }
    if (active && lane == 0) {
      if (Op::kSaveMean && p.mean_out) static_cast<M*>(p.mean_out)[row] = st.mean;
      if (Op::kSaveRstd && p.rstd_out) static_cast<M*>(p.rstd_out)[row] = st.rstd;
    }
    // The forward of an op with parameters, all given (the common affine case), takes its own
    // copy of the output code. With load_params_as's word widening, H200, [16384, 4096]:
    // layer_norm fw bf16 79.2 -> 75.9 us, f16 83.3 -> 81.9; rms_norm fw 70.7 -> 71.5, f16 70.4 ->
    // 71.3 (62 registers instead of 56: 8 CTAs of 128 an SM instead of 9).
    auto emit_chunk = [&](int64_t cb) {
      if constexpr (!kWInReduce && (Op::kW || Op::kB)) {
        if (has_w == Op::kW && has_b == Op::kB) {
          emit(cb, cuda::std::true_type{});
          return;
        }
      }
      emit(cb, cuda::std::false_type{});
    };
    if (cached) {
      emit_chunk(0);
    } else {
      for (int64_t cb = 0; cb < n; cb += chunk) {
        load(cb, false, false, cuda::std::false_type{});  // a fused residual sum is read back from residual_out
        emit_chunk(cb);
      }
    }
  }

  if (pgrad) {  // this slot's partial sums (zeros for a slot without rows)
    // 16-byte stores where the vectorized variant allows (n % kV == 0, so every row of the
    // partials starts 16-byte aligned if the workspace does): 4-byte stores 32 bytes apart
    // across a warp were 21% of the layer_norm backward's L2 sectors (ncu, excess sectors).
    const bool vec_out = kV > 1 && reinterpret_cast<uintptr_t>(part_w) % 16 == 0;
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      const int64_t j0 = (int64_t(lane) + int64_t(c) * rtpr) * kV;
      if (j0 >= n) continue;
      M sw[kV], sb[kV];
      sums_w.template load<kV>(c * kV, sw);
      if (part_b) sums_b.template load<kV>(c * kV, sb);
      if (vec_out) {
        store_elems<kV>(part_w, slot * n + j0, sw);
        if (part_b) store_elems<kV>(part_b, slot * n + j0, sb);
      } else {
#pragma unroll
        for (int e = 0; e < kV; ++e) {
          part_w[slot * n + j0 + e] = sw[e];
          if (part_b) part_b[slot * n + j0 + e] = sb[e];
        }
      }
    }
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (kCluster) {  // no CTA exits (freeing its shared memory) while another may read its xc
    cluster_arrive();
    cluster_wait();
  }
#endif
}

/// The layer/rms_norm backward of dense 16-bit rows: one CTA a row (tpr = blockDim.x), every
/// thread a full share (n == tpr x kItems), one row dim, unit column stride, 16-byte vectors
/// (detail::norm_dense_bw). The same arithmetic in the same order as row_kernel's cached
/// path (thread_pass per vector merged in chunk order, the warp butterfly, the warps' butterfly
/// tree, Op::finish / out / param_grad, partial sums per slot in row order), so the same bits;
/// what it drops is row_kernel's generality, which cost this case ~19 of its ~37 SASS
/// instructions an element (row_offsets and 64-bit column indices each row, per-vector tests,
/// rebuilt shared-memory addresses, the weight-load branch, a runtime pgrad, a looped cross-warp
/// butterfly and two barriers a row):
/// - row pointers advance by a constant stride; chunk c is the pointer plus c x tpr x kV;
/// - a thread's shared words (weight, then the dweight / dbias sums, f32) lie together at an odd
///   stride of 16-byte words, so each is [base + immediate] and a quarter-warp's 16-byte accesses
///   hit 8 distinct bank groups;
/// - the weight (or ones) is read once before the row loop;
/// - the warps' partial results take two buffers by row parity: one barrier a row.
/// kAhead (layer_norm, tpr <= 256: detail::norm_dense_bw_ahead): the next row's dy, x, mean and
/// rstd are loaded into registers once this row's sums have read its own, so the loads fly during
/// this row's reduction and output. That takes ~127 registers: CTAs of at most 256 threads, 2 an SM
/// (16 warps instead of 32), and still faster. H200, [16384, 4096] bf16, the row and reduce
/// kernels in a driver, same output bits as row_kernel: layer_norm bw 134.3 -> 125.9 us without
/// kAhead (64 registers, 4 CTAs an SM), 116.4 with it; rms_norm bw 108.6 -> 107.6-109.0 without,
/// 109.3-109.5 with (so rms_norm keeps 4 CTAs). Staging the next row in shared memory with cp.async
/// instead (3 CTAs an SM for the space) took 148 us, and kAhead capped at 3 CTAs (80 registers,
/// 52 bytes of spills) 166 us. Without kAhead the kernel sits at the 64-register cap with one
/// 4-byte local slot (ptxas keeps Op::finish's hoisted 1 / n there: one L1 load a row).
template <class T, class Op, int kItems, bool kAhead>
__global__ void __launch_bounds__(kAhead ? 256 : 512, 2) dense_bw_kernel(const NormLaunch p) {
  using M = float;
  constexpr int kV = 8, kC = kItems / kV, kW = kV / 2;
  constexpr int kQ = kItems / 4;  // 16-byte words of one f32 array of a thread
  constexpr bool kBias = Op::kOp == NormOp::layer_norm;
  constexpr int kStride = ((kBias ? 3 : 2) * kQ) | 1;
  static_assert(sizeof(T) == 2 && kItems % kV == 0, "16-bit rows of whole vectors");
  __shared__ Acc<M> red[2][detail::kNormMaxTpr / 32];
  const int tid = int(threadIdx.x), tpr = int(blockDim.x), nw = tpr >> 5;
  float4* const mine = reinterpret_cast<float4*>(norm_dyn_smem) + tid * kStride;
  const int64_t n = p.n;
  const int cstep = tpr * kV;  // columns between a thread's chunks
#pragma unroll
  for (int c = 0; c < kC; ++c) {
    M wl[kV];
    if (p.weight != nullptr)
      load_params<kV, T>(p.weight, p.param_f32, (tid + int64_t(c) * tpr) * kV, wl);
    else
#pragma unroll
      for (int e = 0; e < kV; ++e) wl[e] = M(1);
    mine[2 * c] = make_float4(wl[0], wl[1], wl[2], wl[3]);
    mine[2 * c + 1] = make_float4(wl[4], wl[5], wl[6], wl[7]);
  }
#pragma unroll
  for (int q = kQ; q < (kBias ? 3 : 2) * kQ; ++q) mine[q] = make_float4(0.f, 0.f, 0.f, 0.f);

  const int64_t s_dy = p.row_stride[detail::kIn0][0], s_x = p.row_stride[detail::kIn1][0],
                s_dx = p.row_stride[detail::kOut0][0];
  const int64_t row0 = blockIdx.x, rstep = gridDim.x;
  auto fetch = [&](int64_t r, uint32_t (&d)[2][kItems / 2], M& mean, M& rstd) {
    const T* dy = static_cast<const T*>(p.in[0]) + r * s_dy + tid * kV;
    const T* x = static_cast<const T*>(p.in[1]) + r * s_x + tid * kV;
    if (Op::kLoadMean) mean = static_cast<const M*>(p.mean_in)[r];
    rstd = static_cast<const M*>(p.rstd_in)[r];
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      load_words<kW>(dy, c * cstep, &d[0][c * kW]);
      load_words<kW>(x, c * cstep, &d[1][c * kW]);
    }
  };
  uint32_t nx[2][kItems / 2];
  M next_mean = M(0), next_rstd = M(0);
  if (kAhead && row0 < p.rows) fetch(row0, nx, next_mean, next_rstd);
  int parity = 0;
  for (int64_t row = row0; row < p.rows; row += rstep) {
    T* dx = static_cast<T*>(p.out[0]) + row * s_dx + tid * kV;
    St<M> st{M(0), M(0), M(0), M(0), M(0), M(0)};
    uint32_t v[2][kItems / 2];
    if constexpr (kAhead) {
#pragma unroll
      for (int t = 0; t < 2; ++t)
#pragma unroll
        for (int i = 0; i < kItems / 2; ++i) v[t][i] = nx[t][i];
      st.mean = next_mean;
      st.rstd = next_rstd;
    } else {
      fetch(row, v, st.mean, st.rstd);
    }
    auto widen = [&](int t, int i) { return widen_half<T>(v[t][i / 2], i & 1); };
    Acc<M> acc;
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      const float4 w0 = mine[2 * c], w1 = mine[2 * c + 1];
      const M wc[kV] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
      M u[2][kV];
#pragma unroll
      for (int e = 0; e < kV; ++e) u[0][e] = widen(0, c * kV + e), u[1][e] = widen(1, c * kV + e);
      const bool ok[1] = {true};
      const Acc<M> r = Op::template thread_pass<M, kV, kV>(0, u, ok, wc, st);
      acc = c == 0 ? r : merge_of<Op>(0, acc, r);
    }
    if (kAhead && row + rstep < p.rows) fetch(row + rstep, nx, next_mean, next_rstd);
    // group_reduce's tree: the warp butterfly, then the same butterfly over the warps' results
    // (lane k reads warp k mod nw), unrolled over the widths a CTA can have.
    acc = butterfly<Op>(0, acc, 32);
    if ((tid & 31) == 0) red[parity][tid >> 5] = acc;
    __syncthreads();  // the other buffer's readers (the previous row) are done: they passed it
    acc = red[parity][tid & (nw - 1)];
    parity ^= 1;
#pragma unroll
    for (int o = detail::kNormMaxTpr / 64; o > 0; o >>= 1)
      if (o < nw) acc = xor_merge<Op>(0, acc, o);
    Op::finish(0, acc, st, static_cast<M>(n), M(0));
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      uint32_t o[kW];  // the outputs, packed as they come (two registers fewer live than 8 floats)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int q = 2 * c + h;
        const float4 w4 = mine[q], sw4 = mine[kQ + q], sb4 = kBias ? mine[2 * kQ + q] : sw4;
        const M wq[4] = {w4.x, w4.y, w4.z, w4.w};
        M sw[4] = {sw4.x, sw4.y, sw4.z, sw4.w}, sb[4] = {sb4.x, sb4.y, sb4.z, sb4.w};
#pragma unroll
        for (int e = 0; e < 4; e += 2) {
          M oe[2];
#pragma unroll
          for (int k = 0; k < 2; ++k) {
            const int i = c * kV + h * 4 + e + k;
            const M xe[2] = {widen(0, i), widen(1, i)};
            oe[k] = Op::out(xe, wq[e + k], M(0), st);
            Op::param_grad(xe, st, sw[e + k], sb[e + k]);
          }
          o[h * 2 + e / 2] = pack_pair<T>(oe[0], oe[1]);
        }
        mine[kQ + q] = make_float4(sw[0], sw[1], sw[2], sw[3]);
        if (kBias) mine[2 * kQ + q] = make_float4(sb[0], sb[1], sb[2], sb[3]);
      }
      store_words<kW>(dx, c * cstep, o);
    }
  }
  // This slot's partial sums (zeros for a slot without rows): 16-byte stores where the workspace
  // allows (rows of the partials are n x 4 bytes, a multiple of 32).
  M* const part_w = static_cast<M*>(p.partial) + int64_t(blockIdx.x) * n + tid * kV;
  const bool vec_out = reinterpret_cast<uintptr_t>(p.partial) % 16 == 0;
#pragma unroll
  for (int q = 0; q < (kBias ? 2 : 1) * kQ; ++q) {
    // word q: array q / kQ (dweight, dbias), its chunk (q mod kQ) / 2, half (q mod 2)
    const int c = (q % kQ) / 2;
    M* const dst = part_w + (q >= kQ ? int64_t(p.slots) * n : 0) + c * cstep + (q % 2) * 4;
    const float4 s = mine[kQ + q];
    if (vec_out) {
      *reinterpret_cast<float4*>(dst) = s;
    } else {
      dst[0] = s.x, dst[1] = s.y, dst[2] = s.z, dst[3] = s.w;
    }
  }
}
template <class Op, int kItems>
constexpr size_t dense_bw_smem(int tpr) {
  constexpr int kQ = kItems / 4;
  return size_t(((Op::kOp == NormOp::layer_norm ? 3 : 2) * kQ) | 1) * 16 * size_t(tpr);
}

/// Second stage of the parameter gradients: dst[j] = sum over slots of partial[slot][j], in slot
/// order split over 16 thread rows then summed in a fixed order. blockIdx.y: 0 weight, 1 bias.
template <class M, class W>
__global__ void __launch_bounds__(512)
    param_reduce_kernel(const M* partial, int slots, int used, int64_t n, W* dw, W* db) {
  __shared__ M sm[16][33];
  W* dst = blockIdx.y ? db : dw;
  if (dst == nullptr) return;                                // uniform over the block
  const M* src = partial + int64_t(blockIdx.y) * slots * n;  // the bias half starts at row `slots`
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t j = int64_t(blockIdx.x) * 32 + tx;
  M s = 0;
  if (j < n)
    for (int k = ty; k < used; k += 16) s += src[int64_t(k) * n + j];
  sm[ty][tx] = s;
  __syncthreads();
  if (ty == 0 && j < n) {
    M t = 0;
#pragma unroll
    for (int k = 0; k < 16; ++k) t += sm[k][tx];
    dst[j] = convert<W>(t);
  }
}

/// Parameter gradients of streamed (long) rows, as a column reduction over the rows after the
/// row kernel: partial[split][j] = sum over the split's rows of Op::param_grad (dy, x), with the
/// rows partitioned into `splits` contiguous ranges, each summed in row order (deterministic).
/// The row kernel's alternative for long rows, a read-modify-write of its slot's workspace row
/// per element, moved 16 extra bytes an element (layer_norm backward of [1024, 128256] bf16:
/// 3.3 ms, 0.21x torch); this re-reads dy and x once (4 bytes an element for 16-bit rows).
/// Block (32, 8): 32 adjacent columns a warp, 8 row phases merged in shared memory in order.
template <class T, class Op>
__global__ void __launch_bounds__(256) param_cols_kernel(const NormLaunch p, int splits) {
  using M = opmath_t<T>;
  __shared__ M sw[8][33], sb[8][33];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t j = int64_t(blockIdx.x) * 32 + tx;
  const int64_t per = (p.rows + splits - 1) / splits;
  const int64_t r_begin = int64_t(blockIdx.y) * per;
  const int64_t r_end = r_begin + per < p.rows ? r_begin + per : p.rows;
  const T* dy = static_cast<const T*>(p.in[0]);
  const T* xs = static_cast<const T*>(p.in[1]);
  M gw = M(0), gb = M(0);
  if (j < p.n) {
    for (int64_t r = r_begin + ty; r < r_end; r += 8) {
      int64_t base[kNumSlots];
      row_offsets(p, r, base);
      St<M> st{M(0), M(0), M(0), M(0)};
      if (Op::kLoadMean) st.mean = static_cast<const M*>(p.mean_in)[r];
      st.rstd = static_cast<const M*>(p.rstd_in)[r];
      const M x[2] = {static_cast<M>(load_as_opmath(dy[base[detail::kIn0] + j * p.col_stride[detail::kIn0]])),
                      static_cast<M>(load_as_opmath(xs[base[detail::kIn1] + j * p.col_stride[detail::kIn1]]))};
      Op::param_grad(x, st, gw, gb);
    }
  }
  sw[ty][tx] = gw;
  sb[ty][tx] = gb;
  __syncthreads();
  if (ty == 0 && j < p.n) {
    M tw = 0, tb = 0;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      tw += sw[k][tx];
      tb += sb[k][tx];
    }
    M* part_w = static_cast<M*>(p.partial);
    part_w[int64_t(blockIdx.y) * p.n + j] = tw;
    if (Op::kOp == NormOp::layer_norm) part_w[(int64_t(p.slots) + blockIdx.y) * p.n + j] = tb;
  }
}

// ---- launch ----------------------------------------------------------------------------------------
/// A kernel as a type, so a generic lambda can take it as a template argument (launch_cluster).
template <auto kKernel>
struct KernelTag {};

template <class T, class Op>
cudaError_t launch_rows(const NormLaunch& p, cudaStream_t stream) {
  using M = opmath_t<T>;
  constexpr int es = int(sizeof(T));
  constexpr int kV = detail::norm_vec(es);
  constexpr int kSmall = detail::norm_small_items(es);
  constexpr int kBig =
      detail::norm_big_items(Op::kOp, Op::kDir, es, Op::kPackedBwMinCtas > 0 || Op::kDir == Direction::Forward);
  // The plan sized tpr with the items of norm_packed_bw(op, p == 2): a packed op must be one of them.
  static_assert(Op::kPackedBwMinCtas == 0 || detail::norm_packed_bw(Op::kOp, true), "see norm_packed_bw");
  const int groups = p.block / p.tpr;
  // The scalar (strided) variant computes one 64-bit offset per element: at 32 items it spills,
  // so it holds at most 16 (rows that no longer fit stream; the kernel decides per launch);
  // gumbel_softmax's, with a Philox call and two logs an element, 8 (16 spilled ~290 bytes a
  // thread), f64 4 (8 spilled ~300: the f64 log's slow path is a call).
  constexpr int kScalarCap = kAddsNoise<Op> ? (sizeof(T) == 8 ? 4 : 8) : 16;
  constexpr int kBigScalar = kBig < kScalarCap ? kBig : kScalarCap;
  const int items = p.big ? (p.vec ? kBig : kBigScalar) : kSmall;
  NormLaunch rp = p;
  // Rows longer than the register-resident row (of one CTA, or of a cluster) take the column
  // kernel for their parameter gradients (param_cols_kernel); the row kernel then writes dx only.
  bool col_grads = false;
  // `kernel`, or `cluster_kernel` as clusters of rp.cluster CTAs (nullptr: none).
  auto go = [&]<auto kernel, auto cluster_kernel>(KernelTag<kernel>, KernelTag<cluster_kernel>, size_t smem) {
    // Dynamic shared memory above 48 KB needs each kernel's opt-in (allow_smem: once per device).
    if (const cudaError_t e = allow_smem<kernel>(smem); e != cudaSuccess) return e;
    if constexpr (cluster_kernel != nullptr)
      if (rp.cluster > 1 && allow_smem<cluster_kernel>(smem) != cudaSuccess) {
        (void)cudaGetLastError();
        rp.cluster = 1;
      }
    if constexpr (cluster_kernel == nullptr) rp.cluster = 1;
    for (;;) {
      col_grads = Op::kParamGrad && p.slots > 0 && p.n > int64_t(rp.cluster) * p.tpr * items;
      rp.slots = col_grads ? 0 : p.slots;
      int64_t ctas = (p.rows + groups - 1) / groups;
      if (Op::kParamGrad && rp.slots > 0) ctas = p.slots / groups;  // the fixed partition
      if (ctas > (int64_t{1} << 30) / rp.cluster)
        ctas = (int64_t{1} << 30) / rp.cluster;  // the row loop covers the rest
      const dim3 grid(static_cast<unsigned>(ctas * rp.cluster));
      if (rp.cluster == 1) {
        kernel<<<grid, p.block, smem, stream>>>(rp);
        return cudaSuccess;
      }
      if constexpr (cluster_kernel != nullptr)
        if (launch_cluster<cluster_kernel>(grid, dim3(p.block), smem, stream, rp.cluster, rp)) return cudaSuccess;
      rp.cluster = 1;  // no cluster-capable code or GPC room: one CTA a row, streaming
    }
  };
  // kPF: the vectorized kernels' kParamF32 (kParamDtypeTemplated; the scalar ones read the flag).
  auto launch_kernel = [&]<bool kPF>() -> cudaError_t {
    if (p.big) {
      if (p.vec)
        return go(KernelTag<row_kernel<T, Op, kBig, kV, false, kPF>>{},
                  KernelTag<row_kernel<T, Op, kBig, kV, true, kPF>>{}, smem_rows_bytes<M, Op, kBig>(p));
      return go(KernelTag<row_kernel<T, Op, kBigScalar, 1>>{}, KernelTag<row_kernel<T, Op, kBigScalar, 1, true>>{},
                smem_rows_bytes<M, Op, kBigScalar>(p));
    }
    if (p.vec)
      return go(KernelTag<row_kernel<T, Op, kSmall, kV, false, kPF>>{}, KernelTag<nullptr>{},
                smem_rows_bytes<M, Op, kSmall>(p));
    return go(KernelTag<row_kernel<T, Op, kSmall, 1>>{}, KernelTag<nullptr>{}, smem_rows_bytes<M, Op, kSmall>(p));
  };
  auto launch_any = [&]() -> cudaError_t {
    if constexpr (Op::kParamGrad && sizeof(T) == 2 && kBig % kV == 0) {
      if (detail::norm_dense_bw(p, es)) {
        const size_t smem = dense_bw_smem<Op, kBig>(p.tpr);
        auto dense = [&]<auto kernel>(KernelTag<kernel>) {
          if (const cudaError_t e = allow_smem<kernel>(smem); e != cudaSuccess) return e;
          kernel<<<dim3(static_cast<unsigned>(p.slots)), p.block, smem, stream>>>(p);
          return cudaSuccess;
        };
        if constexpr (Op::kOp == NormOp::layer_norm)
          if (detail::norm_dense_bw_ahead(p)) return dense(KernelTag<dense_bw_kernel<T, Op, kBig, true>>{});
        return dense(KernelTag<dense_bw_kernel<T, Op, kBig, false>>{});
      }
    }
    if constexpr (kParamDtypeTemplated<T, Op, kV>)
      return p.param_f32 ? launch_kernel.template operator()<true>() : launch_kernel.template operator()<false>();
    else
      return launch_kernel.template operator()<false>();
  };
  const cudaError_t err = launch_any();
  if (err != cudaSuccess) return err;
  if constexpr (Op::kParamGrad) {
    // At least 64 rows a split, so at most `slots` splits: the workspace rows are already there.
    const int used = col_grads ? static_cast<int>(std::min<int64_t>(p.slots, (p.rows + 63) / 64)) : p.slots;
    if (col_grads)
      param_cols_kernel<T, Op>
          <<<dim3(static_cast<unsigned>((p.n + 31) / 32), static_cast<unsigned>(used)), dim3(32, 8), 0, stream>>>(p,
                                                                                                                  used);
    if (p.slots > 0 && (p.dweight || p.dbias)) {
      const dim3 g2(static_cast<unsigned>((p.n + 31) / 32), 2);
      const dim3 b2(32, 16);
      const M* part = static_cast<const M*>(p.partial);
      if (p.param_f32)
        param_reduce_kernel<M, float><<<g2, b2, 0, stream>>>(part, p.slots, used, p.n, static_cast<float*>(p.dweight),
                                                             static_cast<float*>(p.dbias));
      else
        param_reduce_kernel<M, T>
            <<<g2, b2, 0, stream>>>(part, p.slots, used, p.n, static_cast<T*>(p.dweight), static_cast<T*>(p.dbias));
    }
  }
  return cudaGetLastError();
}

}  // namespace baracuda::kern::norm

namespace baracuda::detail {

template <DType D, Direction Dir>
cudaError_t norm_launch(const NormLaunch& p, cudaStream_t stream) {
  using T = kern::storage_t<D>;
  namespace k = kern::norm;
  if constexpr (Dir == Direction::Forward) {
    switch (p.op) {
      case NormOp::softmax:
        return p.mask ? k::launch_rows<T, k::SoftmaxFw<false, sizeof(T) == 2, true>>(p, stream)
                      : k::launch_rows<T, k::SoftmaxFw<false, sizeof(T) == 2>>(p, stream);
      case NormOp::log_softmax:
        return p.mask ? k::launch_rows<T, k::SoftmaxFw<true, sizeof(T) == 2, true>>(p, stream)
                      : k::launch_rows<T, k::SoftmaxFw<true, sizeof(T) == 2>>(p, stream);
      case NormOp::layer_norm:
        return k::launch_rows<T, k::LayerNormFw>(p, stream);
      case NormOp::rms_norm:
        return k::launch_rows<T, k::RmsNormFw>(p, stream);
      case NormOp::normalize:  // p = 2 keeps its own kernel; every other p shares one
        return p.op_args[0] == 2.0 ? k::launch_rows<T, k::NormalizeFw>(p, stream)
                                   : k::launch_rows<T, k::NormalizePFw>(p, stream);
      case NormOp::sparsemax:
        return k::launch_rows<T, k::SparsemaxFw>(p, stream);
      case NormOp::gumbel_softmax:
        return k::launch_rows<T, k::GumbelFw<T>>(p, stream);
      default:
        break;  // the channel ops launch through channel_launch.hpp
    }
  } else {
    switch (p.op) {
      case NormOp::softmax:
        return k::launch_rows<T, k::SoftmaxBw<false>>(p, stream);
      case NormOp::log_softmax:
        return k::launch_rows<T, k::SoftmaxBw<true, sizeof(T) == 2>>(p, stream);
      case NormOp::layer_norm:
        return k::launch_rows<T, k::LayerNormBw>(p, stream);
      case NormOp::rms_norm:
        return k::launch_rows<T, k::RmsNormBw>(p, stream);
      case NormOp::normalize:
        return p.op_args[0] == 2.0 ? k::launch_rows<T, k::NormalizeBw>(p, stream)
                                   : k::launch_rows<T, k::NormalizePBw>(p, stream);
      case NormOp::sparsemax:
        return k::launch_rows<T, k::SparsemaxBw>(p, stream);
      case NormOp::gumbel_softmax:
        return k::launch_rows<T, k::GumbelBw>(p, stream);
      default:
        break;  // the channel ops launch through channel_launch.hpp
    }
  }
  return cudaErrorInvalidValue;
}

}  // namespace baracuda::detail

/// One translation unit per (dtype, direction) so the build parallelizes.
#define BARACUDA_NORM_INSTANTIATE(D, DIR)                                                           \
  template cudaError_t baracuda::detail::norm_launch<baracuda::DType::D, baracuda::Direction::DIR>( \
      const baracuda::detail::NormLaunch&, cudaStream_t);
