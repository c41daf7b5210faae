// The math of every elementwise op, one struct per row of elementwise_ops.def. Templates over
// M (the compute type: float for f16/bf16/f32, double, the integer type itself, bool or
// complex) and T (the storage type, for ops that need its range). Semantics follow ATen's CUDA
// kernels, including NaN propagation and the backward formulas of derivatives.yaml.
//
//   fw(p, inputs...)          -> the output value (bool for comparisons)
//   bw(p, dy, inputs..., g)   for rows marked IN; bw(p, dy, y, g) for OUT; bw(p, dy, inputs..., y, g)
//                             for INOUT. Writes one gradient per grad_mask bit into g[].
//   gen(p, index)             for generators.
#pragma once
#include <cuda/std/limits>

#include "core/ew_iter.hpp"
#include "kernels/common/dtype_traits.cuh"
#include "kernels/common/philox.hpp"
#include "kernels/common/short_math.cuh"
#include "kernels/common/special_math.cuh"

namespace baracuda::kern::ew_ops {

using detail::EwParams;

/// Parameter i as compute type M (floats use the f32 copy so f32 math never touches f64).
template <class M>
__device__ __forceinline__ M prm(const EwParams& p, int i) {
  if constexpr (cuda::std::is_same_v<M, float>) return p.f[i];
  else if constexpr (cuda::std::is_same_v<M, bool>) return p.d[i] != 0;
  else return static_cast<M>(p.d[i]);
}

/// Rounds to the storage type and back: reproduces ATen's arithmetic in scalar_t.
template <class T, class M> __device__ __forceinline__ M rnd(M x) { return load_as_opmath(convert<T>(x)); }

template <class M> __device__ __forceinline__ bool isnan_(M x) {
  if constexpr (is_float_v<M>) return isnan(x); else return false;
}
template <class M> __device__ __forceinline__ M sigmoid_(M x) { return M(1) / (M(1) + exp(-x)); }
template <class M> __device__ __forceinline__ M nan_() { return cuda::std::numeric_limits<M>::quiet_NaN(); }

/// Largest finite value of the storage type, as M (nan_to_num's default posinf).
template <class T, class M> __device__ __forceinline__ M storage_max() {
  if constexpr (cuda::std::is_same_v<T, __half>) return M(65504.0f);
  else if constexpr (cuda::std::is_same_v<T, __nv_bfloat16>) return M(3.3895313892515355e38f);
  else return cuda::std::numeric_limits<T>::max();
}

/// f32 math for 16-bit storage may use the short forms of kernels/common/short_math.cuh (results
/// keep 8 or 11 bits; those functions were issue-bound on H100 in their full-precision form).
template <class M, class T>
inline constexpr bool kShortMath = cuda::std::is_same_v<M, float> && sizeof(T) == 2;
template <class M> inline constexpr bool kF32 = cuda::std::is_same_v<M, float>;
/// An op whose 16-bit forward takes a short form that changes values (not fmod's exact one) says so
/// with SHORT16, and SHORT16_BW when its backward does too: the registry records it per (op,
/// direction, dtype) entry and the SKU's precision note follows from it (plan.cpp), so the claim
/// lives next to the code that makes it.
#define SHORT16 static constexpr bool kShort16 = true;
#define SHORT16_BW static constexpr bool kShort16Bw = true;
template <class Op> inline constexpr bool kHasShort16 = requires { requires Op::kShort16; };
template <class Op> inline constexpr bool kHasShort16Bw = requires { requires Op::kShort16Bw; };
/// An op whose 16-bit forward keeps more values live than the rank-general vectorized kernel
/// (elementwise.cuh, CONTIG false) affords at full occupancy declares MIN_CTAS16(n): that kernel is
/// then compiled for n CTAs of 128 threads an SM. geglu: erf's polynomial over 2 x 8 elements took
/// 47 registers (10 CTAs); capped at 40 (12 CTAs, no spill) its bf16 [32768, 2 x 4096] forward
/// went from 216-218 to 210-211 us on the H200 (devx driver, same process).
/// MIN_CTAS_F32(n) does the same for the f32 forward's contiguous (rank <= 1) kernel. polygamma:
/// once that kernel stopped testing for a broadcast input its trigamma took 42 registers (10 CTAs;
/// H200 2^27: 282.0 -> 287.7 us, 88% of copy); capped at 39 (12 CTAs, no spill).
struct MinCtas {
  int rank_general16 = 0;  // 16-bit storage, rank-general kernel
  int contig_f32 = 0;      // f32 storage, contiguous kernel
};
#define MIN_CTAS16(n) static constexpr MinCtas kMinCtas{n, 0};
#define MIN_CTAS_F32(n) static constexpr MinCtas kMinCtas{0, n};
template <class Op> consteval MinCtas min_ctas_of() {
  if constexpr (requires { Op::kMinCtas; }) return Op::kMinCtas;
  else return {};
}
/// A two-input op that often meets one row repeated over the rows of a dense [N, C] operand (a
/// weight [C]) declares ROW_BCAST: such iterations then take a contiguous kernel of their own
/// (elementwise.cuh, ROWS) that reads that operand at e mod C, instead of the rank-general kernel's
/// per-vector coordinates of every operand. Opt-in because it is one more instantiation, and
/// because folding the test into every two-input contiguous kernel cost registers (bf16 mul 32 ->
/// 34: 16 -> 12 CTAs an SM). prelu bf16 [2^19, 256] on the H200: a standalone kernel of this design
/// 132.1-132.6 us against the rank-general kernel's 143.5-145.1 (same output bits).
#define ROW_BCAST static constexpr bool kRowBcast = true;
template <class Op> inline constexpr bool kRowBcastOp = requires { requires Op::kRowBcast; };
/// An op whose result depends on the element's position (rrelu's noise) declares INDEXED and
/// takes the element's index in the output's logical row-major order as the last argument of
/// fw and bw; its plans iterate in that order (make_ew_iter's keep_order), so the value of an
/// element does not depend on strides, the kernel variant or the launch shape.
#define INDEXED static constexpr bool kIndexed = true;
template <class Op> inline constexpr bool kIndexedOp = requires { requires Op::kIndexed; };

#define FW1 template <class M, class T> __device__ __forceinline__ static auto fw([[maybe_unused]] const EwParams& p, M x)
#define FW2 template <class M, class T> __device__ __forceinline__ static auto fw([[maybe_unused]] const EwParams& p, M a, M b)
#define FW3 template <class M, class T> __device__ __forceinline__ static auto fw([[maybe_unused]] const EwParams& p, M a, M b, M c)
#define BW1(v) template <class M, class T> __device__ __forceinline__ static void bw([[maybe_unused]] const EwParams& p, M dy, M v, M* g)
#define BW2 template <class M, class T> __device__ __forceinline__ static void bw([[maybe_unused]] const EwParams& p, M dy, M a, M b, M* g)
#define BW3 template <class M, class T> __device__ __forceinline__ static void bw([[maybe_unused]] const EwParams& p, M dy, M a, M b, M c, M* g)
#define GEN template <class M, class T> __device__ __forceinline__ static M gen([[maybe_unused]] const EwParams& p, int64_t i)
#define BW0 template <class M, class T> __device__ __forceinline__ static void bw([[maybe_unused]] const EwParams& p, M dy, M* g)
#define ZERO_BW1 BW0 { g[0] = M(0); }
#define ZERO_BW2 BW0 { g[0] = M(0); g[1] = M(0); }

// ---- unary math --------------------------------------------------------------------------
struct op_neg { FW1 { return -x; } BW0 { g[0] = -dy; } };
struct op_abs {
  FW1 {
    if constexpr (cuda::std::is_unsigned_v<M>) return x;
    else if constexpr (is_float_v<M>) return fabs(x);
    else return x < M(0) ? M(-x) : x;
  }
  BW1(x) { g[0] = x > M(0) ? dy : (x < M(0) ? -dy : M(0)); }
};
struct op_sign {
  FW1 {
    if constexpr (cuda::std::is_same_v<M, bool>) return x;
    else if constexpr (cuda::std::is_unsigned_v<M>) return M(x > M(0));
    else return M(M(x > M(0)) - M(x < M(0)));
  }
  ZERO_BW1
};
struct op_sgn { FW1 { return op_sign::fw<M, T>(p, x); } ZERO_BW1 };
struct op_reciprocal { FW1 { return M(1) / x; } BW1(y) { g[0] = -dy * y * y; } };
struct op_square { FW1 { return M(x * x); } BW1(x) { g[0] = M(2) * x * dy; } };
struct op_sqrt { FW1 { return sqrt(x); } BW1(y) { g[0] = dy / (M(2) * y); } };
struct op_rsqrt { FW1 { return rsqrt(x); } BW1(y) { g[0] = M(-0.5) * dy * y * y * y; } };
struct op_cbrt { FW1 { return cbrt(x); } BW1(y) { g[0] = dy / (M(3) * y * y); } };
struct op_exp { FW1 { return exp(x); } BW1(y) { g[0] = dy * y; } };
struct op_exp2 { FW1 { return exp2(x); } BW1(y) { g[0] = dy * y * M(0.693147180559945309417); } };
struct op_expm1 { SHORT16 FW1 { if constexpr (kShortMath<M, T>) return short_math::expm1_short(x); else return expm1(x); } BW1(y) { g[0] = dy * (y + M(1)); } };
struct op_log { SHORT16 FW1 { if constexpr (kShortMath<M, T>) return short_math::log2k_short(x, short_math::kLn2); else return log(x); } BW1(x) { g[0] = dy / x; } };
struct op_log2 { SHORT16 FW1 { if constexpr (kShortMath<M, T>) return short_math::log2k_short(x, 1.0f); else return log2(x); } BW1(x) { g[0] = dy / (x * M(0.693147180559945309417)); } };
struct op_log10 { SHORT16 FW1 { if constexpr (kShortMath<M, T>) return short_math::log2k_short(x, 0.301029995663981195f); else return log10(x); } BW1(x) { g[0] = dy / (x * M(2.30258509299404568402)); } };
struct op_log1p { SHORT16 FW1 { if constexpr (kShortMath<M, T>) return short_math::log1p_short(x); else return log1p(x); } BW1(x) { g[0] = dy / (x + M(1)); } };
struct op_sin { FW1 { return sin(x); } BW1(x) { g[0] = dy * cos(x); } };
struct op_cos { FW1 { return cos(x); } BW1(x) { g[0] = -dy * sin(x); } };
struct op_tan { FW1 { return tan(x); } BW1(y) { g[0] = dy * (M(1) + y * y); } };
struct op_asin { FW1 { return asin(x); } BW1(x) { g[0] = dy / sqrt(M(1) - x * x); } };
struct op_acos { FW1 { return acos(x); } BW1(x) { g[0] = -dy / sqrt(M(1) - x * x); } };
struct op_atan { FW1 { return atan(x); } BW1(x) { g[0] = dy / (M(1) + x * x); } };
struct op_sinh { SHORT16 FW1 { if constexpr (kShortMath<M, T>) return short_math::sinh_short(x); else return sinh(x); } BW1(x) { g[0] = dy * cosh(x); } };
struct op_cosh { FW1 { return cosh(x); } BW1(x) { g[0] = dy * sinh(x); } };
struct op_tanh {
  FW1 { return tanh(x); }
  // ATen's tanh_backward does its arithmetic in scalar_t (each step rounded for f16/bf16); near
  // |y| = 1 that rounding changes 1 - y^2 by percents, so we reproduce it (measured: bit-equal).
  BW1(y) { g[0] = dy * rnd<T>(M(1) - rnd<T>(y * y)); }
};
struct op_asinh { SHORT16 FW1 { if constexpr (kShortMath<M, T>) return short_math::asinh_short(x); else return asinh(x); } BW1(x) { g[0] = dy * rsqrt(x * x + M(1)); } };
struct op_acosh { SHORT16 FW1 { if constexpr (kShortMath<M, T>) return short_math::acosh_short(x); else return acosh(x); } BW1(x) { g[0] = dy * rsqrt(x - M(1)) * rsqrt(x + M(1)); } };
struct op_atanh { SHORT16 FW1 { if constexpr (kShortMath<M, T>) return short_math::atanh_short(x); else return atanh(x); } BW1(x) { g[0] = dy / (M(1) - x * x); } };
struct op_floor { FW1 { if constexpr (is_float_v<M>) return floor(x); else return x; } ZERO_BW1 };
struct op_ceil { FW1 { if constexpr (is_float_v<M>) return ceil(x); else return x; } ZERO_BW1 };
struct op_trunc { FW1 { if constexpr (is_float_v<M>) return trunc(x); else return x; } ZERO_BW1 };
struct op_round {
  FW1 {
    if constexpr (is_float_v<M>) {
      const int d = static_cast<int>(p.d[0]);
      if (d == 0) return nearbyint(x);
      // ATen: scale by 10^|d| in the compute type, round half to even, scale back.
      const M ten_pow = pow(M(10), M(d > 0 ? d : -d));
      return d > 0 ? nearbyint(x * ten_pow) / ten_pow : nearbyint(x / ten_pow) * ten_pow;
    } else {
      return x;
    }
  }
  ZERO_BW1
};
struct op_frac { FW1 { return x - trunc(x); } BW0 { g[0] = dy; } };
struct op_erf { FW1 { return erf(x); } BW1(x) { g[0] = dy * M(1.12837916709551257390) * exp(-x * x); } };
// f32: short_math::erfc_f32 (~34 sm_90a instructions an element against libdevice erfcf's ~46,
// which held the f32 row issue-bound at 0.96-0.97x torch on the H200; host: <= 3.1 f32 ulp, where
// libdevice's own algorithm on the same MUFU model gives 3.9).
struct op_erfc { SHORT16
  FW1 {
    if constexpr (kShortMath<M, T>) return short_math::erfc_short(x);
    else if constexpr (kF32<M>) return short_math::erfc_f32(x);
    else return erfc(x);
  } BW1(x) { g[0] = -dy * M(1.12837916709551257390) * exp(-x * x); } };
struct op_erfinv { FW1 { return erfinv(x); } BW1(y) { g[0] = dy * M(0.886226925452758013649) * exp(y * y); } };
// f32 (and 16-bit storage, computed in f32): short_math's branch-light forms; f64: Cephes.
template <class M, class T> __device__ __forceinline__ M digamma_(M x) {
  if constexpr (kF32<M>) return short_math::digamma_f32<kShortMath<M, T>>(x); else return digamma(x);
}
/// polygamma's zeta series for n >= 2 out of line in f32: inlined, it held the kernel of every n
/// at 46 registers (62% occupancy; trigamma's f32 row at 79% of the H200 copy figure).
template <class M> __device__ __noinline__ M polygamma_zeta(int n, M x) { return polygamma(n, x); }
template <class M, class T> __device__ __forceinline__ M polygamma_(int n, M x) {
  if constexpr (kF32<M>) {
    if (n == 0) return short_math::digamma_f32<kShortMath<M, T>>(x);
    if (n == 1) return short_math::trigamma_f32<kShortMath<M, T>>(x);
    return polygamma_zeta(n, x);
  }
  return polygamma(n, x);
}
struct op_lgamma { SHORT16 SHORT16_BW
  FW1 { if constexpr (kF32<M>) return short_math::lgamma_f32(x); else return lgamma(x); }
  BW1(x) { g[0] = dy * digamma_<M, T>(x); }
};
struct op_digamma { SHORT16 SHORT16_BW FW1 { return digamma_<M, T>(x); } BW1(x) { g[0] = dy * polygamma_<M, T>(1, x); } };
struct op_polygamma { SHORT16 SHORT16_BW MIN_CTAS_F32(12)
  FW1 { return polygamma_<M, T>(static_cast<int>(p.d[0]), x); }
  BW1(x) { g[0] = dy * polygamma_<M, T>(static_cast<int>(p.d[0]) + 1, x); }
};
struct op_i0 {
  FW1 {
    // torch's Cephes evaluation gives exp(inf) * c / sqrt(inf) = inf/inf = NaN at +-inf.
    if (isinf(x)) return nan_<M>();
    if constexpr (cuda::std::is_same_v<M, float>) return cyl_bessel_i0f(x); else return cyl_bessel_i0(x);
  }
  BW1(x) { if constexpr (cuda::std::is_same_v<M, float>) g[0] = dy * cyl_bessel_i1f(x); else g[0] = dy * cyl_bessel_i1(x); }
};
struct op_sinc { SHORT16
  FW1 {
    if constexpr (kShortMath<M, T>) return short_math::sinc_short(x);
    if (x == M(0)) return M(1);
    const M px = M(3.14159265358979323846) * x;
    return sin(px) / px;
  }
  BW1(x) {
    if (x == M(0)) { g[0] = M(0); return; }
    const M px = M(3.14159265358979323846) * x;
    g[0] = dy * (cos(px) - sin(px) / px) / x;
  }
};
struct op_logit { SHORT16 SHORT16_BW
  FW1 {
    const M eps = prm<M>(p, 0);
    M z = x;
    if (p.d[0] >= 0) z = z < eps ? eps : (z > M(1) - eps ? M(1) - eps : z);
    if constexpr (kShortMath<M, T>) return short_math::logit_short(z);
    else return log(z / (M(1) - z));
  }
  BW1(x) {
    const M eps = prm<M>(p, 0);
    if (p.d[0] >= 0 && (x < eps || x > M(1) - eps)) { g[0] = M(0); return; }
    // Without eps torch's gradient is NaN outside [0, 1], where logit itself is NaN.
    if (p.d[0] < 0 && (x < M(0) || x > M(1))) { g[0] = nan_<M>(); return; }
    if constexpr (kShortMath<M, T>) g[0] = dy * short_math::rcp_short(x * (M(1) - x));
    else g[0] = dy / (x * (M(1) - x));
  }
};
struct op_nan_to_num {
  FW1 {
    if (isnan(x)) return prm<M>(p, 0);
    if (isinf(x)) {
      if (x > M(0)) return isinf(p.d[1]) ? storage_max<T, M>() : prm<M>(p, 1);
      return isinf(p.d[2]) ? -storage_max<T, M>() : prm<M>(p, 2);
    }
    return x;
  }
  BW1(x) { g[0] = isfinite(x) ? dy : M(0); }
};
struct op_isnan { FW1 { return isnan_(x); } };
struct op_isinf { FW1 { if constexpr (is_float_v<M>) return bool(isinf(x)); else return false; } };
struct op_isposinf { FW1 { if constexpr (is_float_v<M>) return bool(isinf(x) && x > M(0)); else return false; } };
struct op_isneginf { FW1 { if constexpr (is_float_v<M>) return bool(isinf(x) && x < M(0)); else return false; } };
struct op_isfinite { FW1 { if constexpr (is_float_v<M>) return bool(isfinite(x)); else return true; } };
struct op_signbit {
  FW1 {
    if constexpr (is_float_v<M>) return bool(signbit(x));
    else if constexpr (cuda::std::is_unsigned_v<M>) return false;
    else return x < M(0);
  }
};
struct op_bitwise_not { FW1 { if constexpr (cuda::std::is_same_v<M, bool>) return !x; else return M(~x); } };
template <class M> __device__ __forceinline__ auto as_unsigned(M x) { return static_cast<cuda::std::make_unsigned_t<M>>(x); }
struct op_popcount {
  FW1 {
    if constexpr (sizeof(M) == 8) return M(__popcll(static_cast<unsigned long long>(x)));
    else return M(__popc(static_cast<unsigned>(as_unsigned(x))));
  }
};
struct op_clz {
  FW1 {
    if constexpr (sizeof(M) == 8) return M(__clzll(static_cast<long long>(x)));
    else return M(__clz(static_cast<int>(static_cast<unsigned>(as_unsigned(x)))) - 32 + 8 * int(sizeof(M)));
  }
};
struct op_logical_not { FW1 { return !bool(x); } };

// ---- activations -------------------------------------------------------------------------
struct op_relu { FW1 { return x <= M(0) ? M(0) : x; } BW1(y) { g[0] = y <= M(0) ? M(0) : dy; } };
struct op_hardtanh {
  // torch: clamp(x, min_val, max_val) = min(max(x, lo), hi), the bounds converted to the
  // tensor's dtype first (for uint8, min_val=-1 wraps to 255, as torch's Scalar conversion).
  FW1 {
    M lo, hi;
    if constexpr (is_int_v<M>) {
      lo = static_cast<M>(static_cast<int64_t>(p.d[0]));
      hi = static_cast<M>(static_cast<int64_t>(p.d[1]));
    } else {
      lo = prm<M>(p, 0);
      hi = prm<M>(p, 1);
    }
    const M r = x < lo ? lo : x;  // NaN stays NaN
    return r > hi ? hi : r;
  }
  BW1(x) { g[0] = (x <= prm<M>(p, 0) || x >= prm<M>(p, 1)) ? M(0) : dy; }
};
struct op_relu6 {
  FW1 { return x < M(0) ? M(0) : (x > M(6) ? M(6) : x); }
  BW1(x) { g[0] = (x <= M(0) || x >= M(6)) ? M(0) : dy; }
};
struct op_leaky_relu {
  FW1 { return x > M(0) ? x : x * prm<M>(p, 0); }
  BW1(x) { g[0] = x > M(0) ? dy : dy * prm<M>(p, 0); }
};
/// rrelu in training: x <= 0 takes the slope lower + u (upper - lower), u uniform in (0, 1); x > 0
/// passes (torch's rrelu_with_noise). u comes from Philox4x32-10 keyed by seed at counter offset
/// (philox.hpp's elementwise stream layout): f32 / f64 storage takes word i % 4 of call i / 4 on the
/// 23-bit midpoint grid; 16-bit storage takes half-word i % 2 of word (i / 2) % 4 of call i / 8 on
/// the 16-bit midpoint grid (steps of 2^-16 (upper - lower), far below a bf16 / f16 ulp of the
/// product). Half the Philox calls: bf16 rrelu was issue-bound on them (H200: 167.6 us, 75% of
/// copy, for 2^27 elements). The backward regenerates the same slope from (seed, offset, i)
/// instead of storing the noise tensor.
template <class M, class T> __device__ __forceinline__ M rrelu_slope(const EwParams& p, int64_t i) {
  constexpr bool kHalfWords = sizeof(T) == 2;
  const uint64_t q = static_cast<uint64_t>(i) >> (kHalfWords ? 3 : 2);
  const detail::Philox4 w = detail::philox_block(static_cast<uint64_t>(p.d[2]), static_cast<uint64_t>(p.d[3]), q);
  const uint32_t k = (static_cast<uint32_t>(i) >> (kHalfWords ? 1 : 0)) & 3u;
  const uint32_t word = k == 0 ? w.v[0] : k == 1 ? w.v[1] : k == 2 ? w.v[2] : w.v[3];
  M u;
  if constexpr (kHalfWords)
    u = static_cast<M>(detail::philox_uniform_u16(i & 1 ? word >> 16 : word & 0xFFFFu));
  else
    u = static_cast<M>(detail::philox_uniform_f32(word));
  return prm<M>(p, 0) + u * (prm<M>(p, 1) - prm<M>(p, 0));
}
struct op_rrelu_train {
  INDEXED
  // The slope is computed whatever the sign of x: outside a branch, the Philox blocks of the
  // neighbouring elements (same call index) are one computation the compiler merges.
  template <class M, class T> __device__ __forceinline__ static M fw(const EwParams& p, M x, int64_t i) {
    const M s = rrelu_slope<M, T>(p, i);
    return x > M(0) ? x : x * s;
  }
  template <class M, class T> __device__ __forceinline__ static void bw(const EwParams& p, M dy, M x, M* g, int64_t i) {
    const M s = rrelu_slope<M, T>(p, i);
    g[0] = x > M(0) ? dy : dy * s;
  }
};
struct op_rrelu_eval {
  FW1 { const M s = (prm<M>(p, 0) + prm<M>(p, 1)) / M(2); return x >= M(0) ? x : x * s; }
  BW1(x) { const M s = (prm<M>(p, 0) + prm<M>(p, 1)) / M(2); g[0] = x > M(0) ? dy : dy * s; }
};
// elu family: negcoef = alpha*scale, poscoef = scale, negiptcoef = input_scale (ATen).
template <class M, class T> __device__ __forceinline__ M expm1_(M x) {
  if constexpr (kShortMath<M, T>) return short_math::expm1_short(x); else return expm1(x);
}
template <class M, class T> __device__ __forceinline__ M elu_fw(M x, M alpha, M scale, M iscale) {
  return x <= M(0) ? expm1_<M, T>(x * iscale) * alpha * scale : x * scale;
}
template <class M> __device__ __forceinline__ M elu_bw(M dy, M x, M alpha, M scale, M iscale) {
  return x <= M(0) ? dy * iscale * alpha * scale * exp(x * iscale) : dy * scale;
}
struct op_elu { SHORT16
  FW1 { return elu_fw<M, T>(x, prm<M>(p, 0), prm<M>(p, 1), prm<M>(p, 2)); }
  BW1(x) { g[0] = elu_bw(dy, x, prm<M>(p, 0), prm<M>(p, 1), prm<M>(p, 2)); }
};
constexpr double kSeluAlpha = 1.6732632423543772848170429916717;
constexpr double kSeluScale = 1.0507009873554804934193349852946;
struct op_selu { SHORT16
  FW1 { return elu_fw<M, T>(x, M(kSeluAlpha), M(kSeluScale), M(1)); }
  BW1(x) { g[0] = elu_bw(dy, x, M(kSeluAlpha), M(kSeluScale), M(1)); }
};
struct op_celu { SHORT16
  FW1 { const M a = prm<M>(p, 0); return elu_fw<M, T>(x, a, M(1), M(1) / a); }
  BW1(x) { const M a = prm<M>(p, 0); g[0] = elu_bw(dy, x, a, M(1), M(1) / a); }
};
/// For 16-bit storage the result keeps 8 (bf16) or 11 (f16) bits, so gelu uses short forms that
/// are exact to ~1e-6 relative instead of erff/tanhf (which made bf16 gelu compute-bound), on the
/// MUFU ex2/rcp alone (the IEEE __frcp_rn and __expf's subnormal fix-up kept bf16 gelu at 80% of
/// the H200 copy figure):
/// Phi(x) from Abramowitz-Stegun 7.1.26 (|error| <= 1.5e-7, branch-free) and the tanh form as
/// x * sigmoid(2u), which is also exact in the far negative tail where 1 + tanh(u) cancels.
template <class M, class T>
inline constexpr bool kGeluShort = cuda::std::is_same_v<M, float> && sizeof(T) == 2;
__device__ __forceinline__ float normal_cdf_short(float x) {
  const float z = fabsf(x) * 0.70710678118654752f;
  const float t = short_math::rcp_fast(fmaf(0.3275911f, z, 1.0f));
  const float poly =
      t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
  const float half_erfc = 0.5f * poly * short_math::exp_fast(-z * z);  // NaN in, NaN out
  return x >= 0.0f ? 1.0f - half_erfc : half_erfc;
}
__device__ __forceinline__ float sigmoid_2u_short(float x) {  // sigmoid(2u), u = gelu's tanh argument
  const float u = 0.7978845608028654f * fmaf(0.044715f * x, x * x, x);
  return short_math::rcp_fast(1.0f + short_math::exp_fast(-2.0f * u));
}
template <class M, class T> __device__ __forceinline__ M gelu_fw(M x, bool tanh_approx) {
  if constexpr (kGeluShort<M, T>) {
    return x * (tanh_approx ? sigmoid_2u_short(x) : normal_cdf_short(x));
  } else {
    constexpr M kBeta = M(0.797884560802865355879892119869);  // sqrt(2/pi)
    if (tanh_approx) return M(0.5) * x * (M(1) + tanh(kBeta * (x + M(0.044715) * x * x * x)));
    return M(0.5) * x * (M(1) + erf(x * M(0.707106781186547524400844362105)));
  }
}
template <class M, class T> __device__ __forceinline__ M gelu_grad(M x, bool tanh_approx) {
  if constexpr (kGeluShort<M, T>) {
    if (tanh_approx) {  // 0.5(1+t) = s and 1-t^2 = 4s(1-s) with s = sigmoid(2u)
      const float s = sigmoid_2u_short(x);
      return s + 2.0f * x * s * (1.0f - s) * 0.7978845608028654f * fmaf(3.0f * 0.044715f, x * x, 1.0f);
    }
    return normal_cdf_short(x) + x * short_math::exp_fast(-0.5f * x * x) * 0.3989422804014327f;
  } else {
  if (tanh_approx) {
    constexpr M kBeta = M(0.797884560802865355879892119869);
    constexpr M kKappa = M(0.044715);
    const M x_sq = x * x;
    const M inner = kBeta * (x + kKappa * x_sq * x);
    const M t = tanh(inner);
    const M left = M(0.5) * x;
    const M right = M(1) + t;
    return M(0.5) * right + left * (M(1) - t * t) * kBeta * (M(1) + M(3) * kKappa * x_sq);
  }
  const M cdf = M(0.5) * (M(1) + erf(x * M(0.707106781186547524400844362105)));
  const M pdf = exp(M(-0.5) * x * x) * M(0.398942280401432677939946059934);
  return cdf + x * pdf;
  }
}
struct op_gelu {
  FW1 { return gelu_fw<M, T>(x, p.d[0] != 0); }
  BW1(x) { g[0] = dy * gelu_grad<M, T>(x, p.d[0] != 0); }
};
struct op_silu {
  FW1 { return x / (M(1) + exp(-x)); }
  BW1(x) { const M s = sigmoid_(x); g[0] = dy * s * (M(1) + x * (M(1) - s)); }
};
struct op_mish { SHORT16 SHORT16_BW
  FW1 { if constexpr (kShortMath<M, T>) return short_math::mish_short(x); else return x * tanh(log1p(exp(x))); }
  BW1(x) {
    if constexpr (kShortMath<M, T>) { g[0] = dy * short_math::mish_grad_short(x); return; }
    const M t = tanh(log1p(exp(x)));
    const M s = sigmoid_(x);
    g[0] = dy * (t + x * s * (M(1) - t * t));
  }
};
struct op_sigmoid { FW1 { return sigmoid_(x); } BW1(y) { g[0] = dy * (M(1) - y) * y; } };
struct op_hardsigmoid {
  FW1 { const M z = x + M(3); return (z < M(0) ? M(0) : (z > M(6) ? M(6) : z)) / M(6); }
  BW1(x) { g[0] = (x > M(-3) && x < M(3)) ? dy / M(6) : M(0); }
};
struct op_hardswish {
  FW1 { const M z = x + M(3); return x * (z < M(0) ? M(0) : (z > M(6) ? M(6) : z)) / M(6); }
  // torch 2.11 (measured): 0 at x = -3, dy at x = 3.
  BW1(x) { g[0] = x <= M(-3) ? M(0) : (x < M(3) ? dy * (x / M(3) + M(0.5)) : dy); }
};
struct op_hardshrink {
  FW1 { const M l = prm<M>(p, 0); return (x >= -l && x <= l) ? M(0) : x; }
  BW1(x) { const M l = prm<M>(p, 0); g[0] = (x >= -l && x <= l) ? M(0) : dy; }
};
struct op_softshrink {
  FW1 { const M l = prm<M>(p, 0); return x > l ? x - l : (x < -l ? x + l : x * M(0)); }  // x*0 keeps NaN (ATen)
  BW1(x) { const M l = prm<M>(p, 0); g[0] = (x >= -l && x <= l) ? M(0) : dy; }
};
struct op_tanhshrink { FW1 { return x - tanh(x); } BW1(x) { const M t = tanh(x); g[0] = dy * t * t; } };
struct op_softplus { SHORT16
  FW1 {
    const M b = prm<M>(p, 0);
    if (x * b > prm<M>(p, 1)) return x;
    if constexpr (kShortMath<M, T>) {  // the MUFU reciprocal, not an IEEE division: no slow-path call
      const M r = short_math::softplus_short(x * b);
      return b == M(1) ? r : r * short_math::rcp_short(b);
    }
    const M l = log1p(exp(x * b));
    return b == M(1) ? l : l / b;  // beta = 1 (the default): no IEEE division (f32 row at 0.94x torch)
  }
  BW1(x) {
    const M b = prm<M>(p, 0);
    const M z = exp(x * b);
    g[0] = x * b > prm<M>(p, 1) ? dy : dy * z / (z + M(1));
  }
};
struct op_softsign {
  FW1 { return x / (M(1) + fabs(x)); }
  BW1(x) { const M d = M(1) + fabs(x); g[0] = dy / (d * d); }
};
struct op_logsigmoid { SHORT16
  FW1 {
    if constexpr (kShortMath<M, T>) return 0.0f - short_math::softplus_short(-x);  // -softplus(-x); 0 - 0 = +0 as torch
    else return (x < M(0) ? x : M(0)) - log1p(exp(-fabs(x)));
  }
  BW1(x) {
    const bool neg = x < M(0);
    const M z = exp(-fabs(x));
    g[0] = dy * ((neg ? M(1) : M(0)) - (neg ? M(1) : M(-1)) * (z / (M(1) + z)));
  }
};
struct op_threshold {
  // ATen passes threshold and value as scalar_t: compare against the rounded threshold.
  FW1 { return x <= rnd<T>(prm<M>(p, 0)) ? rnd<T>(prm<M>(p, 1)) : x; }
  BW1(x) { g[0] = x <= rnd<T>(prm<M>(p, 0)) ? M(0) : dy; }
};
// prelu's [N, C] forward with its weight [C]: ROW_BCAST. On the rank-general kernel (39 registers,
// 12 CTAs an SM) bf16 ran at 88-90% of the H200 copy figure; MIN_CTAS16(16) there (32 registers,
// 6-8 bytes of spill) was slower, 142.2 -> 143.8 us at 2^27.
struct op_prelu { ROW_BCAST
  FW2 { return a > M(0) ? a : b * a; }
  BW2 { g[0] = a > M(0) ? dy : b * dy; g[1] = a > M(0) ? M(0) : a * dy; }
};
struct op_glu { SHORT16
  FW2 { if constexpr (kShortMath<M, T>) return a * short_math::sigmoid_short(b); else return a * sigmoid_(b); }
  BW2 { const M s = sigmoid_(b); g[0] = dy * s; g[1] = dy * a * s * (M(1) - s); }
};
struct op_reglu {
  FW2 { return (a <= M(0) ? M(0) : a) * b; }
  BW2 { g[0] = a > M(0) ? dy * b : M(0); g[1] = dy * (a <= M(0) ? M(0) : a); }
};
struct op_geglu { MIN_CTAS16(12)
  FW2 { return gelu_fw<M, T>(a, p.d[0] != 0) * b; }
  BW2 { g[0] = dy * b * gelu_grad<M, T>(a, p.d[0] != 0); g[1] = dy * gelu_fw<M, T>(a, p.d[0] != 0); }
};
struct op_swiglu { SHORT16
  FW2 {
    if constexpr (kShortMath<M, T>) return a * short_math::sigmoid_short(a) * b;
    else return a / (M(1) + exp(-a)) * b;
  }
  BW2 {
    const M s = sigmoid_(a);
    g[0] = dy * b * s * (M(1) + a * (M(1) - s));
    g[1] = dy * a * s;
  }
};

// ---- binary arithmetic -------------------------------------------------------------------
struct op_add {
  FW2 { if constexpr (cuda::std::is_same_v<M, bool>) return bool(a || b); else return M(a + prm<M>(p, 0) * b); }
  BW0 { g[0] = dy; g[1] = dy * prm<M>(p, 0); }
};
struct op_sub { FW2 { return M(a - prm<M>(p, 0) * b); } BW0 { g[0] = dy; g[1] = -dy * prm<M>(p, 0); } };
struct op_mul {
  FW2 { if constexpr (cuda::std::is_same_v<M, bool>) return bool(a && b); else return M(a * b); }
  BW2 { g[0] = dy * b; g[1] = dy * a; }
};
struct op_div { FW2 { return a / b; } BW2 { g[0] = dy / b; g[1] = -dy * a / (b * b); } };
struct op_div_trunc {
  // ATen: trunc(a / b) with the quotient in scalar_t (rounded to f16/bf16 before trunc).
  FW2 { if constexpr (is_float_v<M>) return trunc(rnd<T>(a / b)); else return b == M(0) ? M(0) : M(a / b); }
  ZERO_BW2
};
template <class M> __device__ __forceinline__ M div_floor_(M a, M b) {
  if constexpr (is_float_v<M>) {
    // ATen's div_floor_floating: exact for representable quotients, sign of zero preserved.
    if (b == M(0)) return a / b;
    const M mod = fmod(a, b);
    M div = (a - mod) / b;
    if (mod != M(0) && ((b < M(0)) != (mod < M(0)))) div -= M(1);
    M fl;
    if (div != M(0)) {
      fl = floor(div);
      if (div - fl > M(0.5)) fl += M(1);
    } else {
      fl = copysign(M(0), a / b);
    }
    return fl;
  } else {
    if (b == M(0)) return M(0);
    if constexpr (cuda::std::is_signed_v<M>) {
      const M q = a / b, r = a % b;
      return (r != M(0) && ((r < M(0)) != (b < M(0)))) ? M(q - 1) : q;
    } else {
      return M(a / b);
    }
  }
}
struct op_div_floor {
  FW2 {
    if constexpr (kShortMath<M, T>) {  // exact (host check: 1.9e8 bf16 pairs, all equal to ATen's)
      M r;
      if (short_math::div_floor_fast(a, b, &r)) return r;
    } else if constexpr (cuda::std::is_same_v<M, float>) {
      // f32: ATen's fmodf loops over the exponent difference (the f32 row ran at 71% of the H200's
      // copy figure, 0.96x torch). Quotients below 2^21: the exact floor, which is ATen's result
      // there (test_short_math checks f32 pairs against ATen's formula).
      float r;
      if (short_math::div_floor_fast(a, b, &r, 2097152.0f)) return r;
    }
    return div_floor_(a, b);
  }
  ZERO_BW2
};
struct op_fmod {
  FW2 {
    if constexpr (kShortMath<M, T>) return short_math::fmod_short(a, b);
    else if constexpr (is_float_v<M>) return fmod(a, b);
    else return b == M(0) ? M(0) : M(a % b);
  }
  BW2 { g[0] = dy; g[1] = -dy * trunc(a / b); }
};
struct op_remainder {
  FW2 {
    if constexpr (kShortMath<M, T>) {
      return short_math::remainder_short(a, b);
    } else if constexpr (is_float_v<M>) {
      M m = fmod(a, b);
      if (m != M(0) && ((b < M(0)) != (m < M(0)))) m += b;
      return m;
    } else {
      if (b == M(0)) return M(0);
      M r = a % b;
      if constexpr (cuda::std::is_signed_v<M>)
        if (r != M(0) && ((r < M(0)) != (b < M(0)))) r += b;
      return r;
    }
  }
  BW2 { g[0] = dy; g[1] = -dy * floor(a / b); }
};
template <class M> __device__ __forceinline__ M ipow(M base, M e) {
  if constexpr (cuda::std::is_signed_v<M>) {
    if (e < 0) return base == M(1) ? M(1) : (base == M(-1) ? ((e & 1) ? M(-1) : M(1)) : M(0));
  }
  M r = 1;
  while (e) {
    if (e & 1) r = M(r * base);
    e = M(e >> 1);
    base = M(base * base);
  }
  return r;
}
struct op_pow { SHORT16
  FW2 {
    if constexpr (is_int_v<M>) {
      return ipow(a, b);
    } else {
      if constexpr (kShortMath<M, T>) {
        M r;
        if (short_math::pow_short(a, b, &r)) return r;
      } else if constexpr (kF32<M>) {
        // f32: short_math's float-float pow (<= 1.6 ulp, 46 instructions against libdevice's ~86);
        // powf out of line for the rest (a <= 0, non-finite operands, results past 2^+-125.5).
        M r;
        if (short_math::pow_f32(a, b, &r)) return r;
        return short_math::pow_tail(a, b);
      }
      return pow(a, b);
    }
  }
  template <class M, class T>
  __device__ __forceinline__ static void bw(const EwParams&, M dy, M a, M b, M y, M* g) {
    g[0] = b == M(0) ? M(0) : dy * b * pow(a, b - M(1));
    g[1] = (a == M(0) && b >= M(0)) ? M(0) : dy * y * log(a);
  }
};
struct op_atan2 { SHORT16 SHORT16_BW
  FW2 { if constexpr (kShortMath<M, T>) return short_math::atan2_short(a, b); else return atan2(a, b); }
  BW2 {
    const M r = a * a + b * b;
    if constexpr (kShortMath<M, T>) { const M dr = dy * short_math::rcp_short(r); g[0] = dr * b; g[1] = -dr * a; }
    else { g[0] = dy * b / r; g[1] = -dy * a / r; }
  }
};
struct op_hypot {
  FW2 { return hypot(a, b); }
  template <class M, class T>
  __device__ __forceinline__ static void bw(const EwParams&, M dy, M a, M b, M y, M* g) { g[0] = dy * a / y; g[1] = dy * b / y; }
};
struct op_copysign {
  FW2 { return copysign(a, b); }
  BW2 { g[0] = a == M(0) ? M(0) : dy * (copysign(a, b) / a); g[1] = M(0); }
};
struct op_nextafter {
  FW2 {
    if constexpr (cuda::std::is_same_v<T, __half> || cuda::std::is_same_v<T, __nv_bfloat16>) {
      // Step in the storage format, not in f32 (torch's semantics for reduced floats).
      if (isnan(a) || isnan(b)) return nan_<M>();
      if (a == b) return b;
      const T ta = convert<T>(a);
      uint16_t bits;
      memcpy(&bits, &ta, 2);
      if (a == M(0)) bits = static_cast<uint16_t>(1u | (signbit(b) ? 0x8000u : 0u));
      else if ((a < b) == (a > M(0))) ++bits;
      else --bits;
      T r;
      memcpy(&r, &bits, 2);
      return load_as_opmath(r);
    } else {
      return nextafter(a, b);
    }
  }
};
struct op_ldexp {
  FW2 { return a * exp2(b); }
  BW2 { const M s = exp2(b); g[0] = dy * s; g[1] = dy * a * s * M(0.693147180559945309417); }
};
struct op_maximum {
  FW2 {
    if constexpr (is_float_v<M>) { if (isnan(a) || isnan(b)) return nan_<M>(); }
    return a > b ? a : b;
  }
  BW2 {
    const M h = a == b ? dy / M(2) : dy;
    g[0] = a < b ? M(0) : h;
    g[1] = a > b ? M(0) : h;
  }
};
struct op_minimum {
  FW2 {
    if constexpr (is_float_v<M>) { if (isnan(a) || isnan(b)) return nan_<M>(); }
    return a < b ? a : b;
  }
  BW2 {
    const M h = a == b ? dy / M(2) : dy;
    g[0] = a > b ? M(0) : h;
    g[1] = a < b ? M(0) : h;
  }
};
struct op_fmax {
  FW2 { if constexpr (is_float_v<M>) return fmax(a, b); else return a > b ? a : b; }
  BW2 { const bool self = a >= b || isnan(b); g[0] = self ? dy : M(0); g[1] = self ? M(0) : dy; }
};
struct op_fmin {
  FW2 { if constexpr (is_float_v<M>) return fmin(a, b); else return a < b ? a : b; }
  BW2 { const bool self = a <= b || isnan(b); g[0] = self ? dy : M(0); g[1] = self ? M(0) : dy; }
};
struct op_xlogy {
  FW2 { if (isnan(b)) return nan_<M>(); if (a == M(0)) return M(0); return a * log(b); }
  BW2 { g[0] = (a == M(0) && !isnan(b)) ? M(0) : (isnan(b) ? nan_<M>() : dy * log(b)); g[1] = dy * a / b; }
};
struct op_logaddexp { SHORT16
  FW2 {
    const M m = a > b ? a : b;
    if (isinf(m) && a == b) return a;
    if constexpr (kShortMath<M, T>) return m + short_math::softplus_short(-fabs(a - b));  // log1p(e^-|d|)
    else return m + log1p(exp(-fabs(a - b)));
  }
  BW2 { g[0] = dy / (M(1) + exp(b - a)); g[1] = dy / (M(1) + exp(a - b)); }
};
struct op_logaddexp2 { SHORT16
  FW2 {
    const M m = a > b ? a : b;
    if (isinf(m) && a == b) return a;
    if constexpr (kShortMath<M, T>)  // log2(1 + 2^-|d|) = ln(1 + e^(-|d| ln 2)) log2 e
      return m + short_math::softplus_short(-fabs(a - b) * 0.693147180559945309f) * 1.44269504088896340736f;
    else return m + log1p(exp2(-fabs(a - b))) * M(1.44269504088896340736);
  }
  BW2 { g[0] = dy / (M(1) + exp2(b - a)); g[1] = dy / (M(1) + exp2(a - b)); }
};
template <class M> __device__ __forceinline__ M lerp_(M a, M b, M w) {
  // ATen's formula: exact at both ends, monotonic.
  return fabs(w) < M(0.5) ? a + w * (b - a) : b - (b - a) * (M(1) - w);
}
struct op_lerp_scalar {
  FW2 { return lerp_(a, b, prm<M>(p, 0)); }
  BW2 { const M w = prm<M>(p, 0); g[0] = dy * (M(1) - w); g[1] = dy * w; }
};
struct op_masked_fill {
  template <class M, class T> __device__ __forceinline__ static M fw(const EwParams& p, M x, bool m) { return m ? prm<M>(p, 0) : x; }
  template <class M, class T> __device__ __forceinline__ static void bw(const EwParams&, M dy, M, bool m, M* g) { g[0] = m ? M(0) : dy; }
};

// ---- comparisons, logical, bitwise ---------------------------------------------------------
struct op_eq { FW2 { return bool(a == b); } };
struct op_ne { FW2 { return bool(a != b); } };
struct op_lt { FW2 { return bool(a < b); } };
struct op_le { FW2 { return bool(a <= b); } };
struct op_gt { FW2 { return bool(a > b); } };
struct op_ge { FW2 { return bool(a >= b); } };
struct op_isclose {
  FW2 {
    using C = cuda::std::conditional_t<is_float_v<M>, M, double>;
    const C x = C(a), y = C(b);
    bool close = x == y;
    if constexpr (is_float_v<M>) close = close || (p.d[2] != 0 && isnan(x) && isnan(y));
    const C allowed = C(p.d[1]) + fabs(C(p.d[0]) * y);
    const C actual = fabs(x - y);
    return bool(close || (isfinite(actual) && actual <= allowed));
  }
};
struct op_logical_and { FW2 { return bool(bool(a) && bool(b)); } };
struct op_logical_or { FW2 { return bool(bool(a) || bool(b)); } };
struct op_logical_xor { FW2 { return bool(bool(a) != bool(b)); } };
struct op_bitwise_and { FW2 { if constexpr (cuda::std::is_same_v<M, bool>) return bool(a && b); else return M(a & b); } };
struct op_bitwise_or { FW2 { if constexpr (cuda::std::is_same_v<M, bool>) return bool(a || b); else return M(a | b); } };
struct op_bitwise_xor { FW2 { if constexpr (cuda::std::is_same_v<M, bool>) return bool(a != b); else return M(a ^ b); } };
struct op_bitwise_left_shift {
  FW2 {
    constexpr M bits = M(sizeof(M) * 8);
    if (b < M(0) || b >= bits) return M(0);
    return M(as_unsigned(a) << b);
  }
};
struct op_bitwise_right_shift {
  FW2 {
    constexpr M bits = M(sizeof(M) * 8);
    if (b < M(0) || b >= bits) {
      if constexpr (cuda::std::is_signed_v<M>) return a < M(0) ? M(-1) : M(0);
      else return M(0);
    }
    return M(a >> b);
  }
};

// ---- ternary -------------------------------------------------------------------------------
struct op_lerp {
  FW3 { return lerp_(a, b, c); }
  BW3 { g[0] = dy * (M(1) - c); g[1] = dy * c; g[2] = dy * (b - a); }
};
struct op_clamp {
  FW3 {
    if constexpr (is_float_v<M>) { if (isnan(a) || isnan(b) || isnan(c)) return nan_<M>(); }
    const M lo = a < b ? b : a;
    return lo > c ? c : lo;
  }
  BW3 {
    g[0] = (a >= b && a <= c) ? dy : M(0);
    g[1] = a < b ? dy : M(0);
    g[2] = a > c ? dy : M(0);
  }
};
struct op_clamp_scalar {
  FW1 {
    if constexpr (is_float_v<M>) {
      if (isnan(x)) return x;
      const M lo = prm<M>(p, 0), hi = prm<M>(p, 1);
      const M l = x < lo ? lo : x;
      return l > hi ? hi : l;
    } else {
      M r = x;
      if (!isinf(p.d[0]) && double(r) < p.d[0]) r = static_cast<M>(p.d[0]);
      if (!isinf(p.d[1]) && double(r) > p.d[1]) r = static_cast<M>(p.d[1]);
      return r;
    }
  }
  BW1(x) { g[0] = (x >= prm<M>(p, 0) && x <= prm<M>(p, 1)) ? dy : M(0); }
};
struct op_addcmul {
  FW3 { return M(a + prm<M>(p, 0) * b * c); }
  BW3 { const M v = prm<M>(p, 0); g[0] = dy; g[1] = dy * v * c; g[2] = dy * v * b; }
};
struct op_addcdiv {
  FW3 { return a + prm<M>(p, 0) * b / c; }
  BW3 { const M v = prm<M>(p, 0); g[0] = dy; g[1] = dy * v / c; g[2] = -dy * v * b / (c * c); }
};
struct op_where {
  template <class M, class T> __device__ __forceinline__ static M fw(const EwParams&, bool c, M a, M b) { return c ? a : b; }
  template <class M, class T> __device__ __forceinline__ static void bw(const EwParams&, M dy, bool c, M, M, M* g) {
    g[0] = c ? dy : M(0);
    g[1] = c ? M(0) : dy;
  }
};
struct op_fma { FW3 { return fma(a, b, c); } BW3 { g[0] = dy * b; g[1] = dy * a; g[2] = dy; } };

// ---- cast and generators ---------------------------------------------------------------------
struct op_cast { FW1 { return x; } };
struct op_fill { GEN { return prm<M>(p, 0); } };
struct op_arange {
  GEN {
    // Integers in int64 (a negative step is not representable in uint8), floats in opmath.
    if constexpr (is_int_v<M>) return M(static_cast<int64_t>(p.d[0]) + i * static_cast<int64_t>(p.d[1]));
    else return M(prm<M>(p, 0) + M(i) * prm<M>(p, 1));
  }
};
template <class M, class T> __device__ __forceinline__ M linspace_(const EwParams& p, int64_t i) {
  // ATen's symmetric formula (exact endpoints), with its rounding: start, end, step, the index
  // and each product and sum are values of the storage type (c10::Half/BFloat16 operators).
  const int64_t steps = static_cast<int64_t>(p.d[2]);
  const M start = rnd<T>(prm<M>(p, 0)), end = rnd<T>(prm<M>(p, 1));
  if (steps == 1) return start;
  const M step = rnd<T>((end - start) / M(steps - 1));
  return i < steps / 2 ? rnd<T>(start + rnd<T>(step * rnd<T>(M(i))))
                       : rnd<T>(end - rnd<T>(step * rnd<T>(M(steps - i - 1))));
}
struct op_linspace { GEN { return linspace_<M, T>(p, i); } };
struct op_logspace { GEN { return pow(prm<M>(p, 3), linspace_<M, T>(p, i)); } };
struct op_eye {
  GEN {
    const int64_t cols = static_cast<int64_t>(p.d[0]);
    return (i / cols == i % cols) ? M(1) : M(0);
  }
};

#undef FW1
#undef FW2
#undef FW3
#undef BW1
#undef BW2
#undef BW3
#undef GEN
#undef BW0
#undef ZERO_BW1
#undef ZERO_BW2

}  // namespace baracuda::kern::ew_ops
