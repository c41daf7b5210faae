// Cheaper forms of the special functions whose libdevice/Cephes evaluation made their elementwise
// rows issue-bound on H100 (bench/results/elementwise-h100.md, issue 2). Two kinds:
//
//   * *_pos / *_f32: full f32 accuracy (within a few f32 ulp of torch's result), used for f32 and
//     16-bit storage alike where the old code was slow for reasons other than precision
//     (digamma's variable-length recurrence with one IEEE division per step, trigamma's six
//     divisions, fmod in div(floor));
//   * *_short: for 16-bit storage only (bf16/f16 keep 8/11 bits): relative error ~1e-7..1e-6,
//     built on the MUFU approximations (ex2/lg2/rcp, one instruction each). Their bf16 results
//     round to the same bf16 as torch's except at rare near-ties (numbers next to each function,
//     measured on the host over all 65536 bf16 inputs against the correctly rounded value; torch's
//     own f32 result misses that rounding about as often).
//
// Everything is __host__ __device__ so the host can verify it: off the device the MUFU wrappers
// evaluate in double and round (the device's are within 2 ulp of that; the host check also runs
// with those errors injected, see the numbers).
#pragma once

#if defined(__CUDACC__)
#define BARACUDA_HD __host__ __device__
#define BARACUDA_HD_COLD __host__ __device__ __noinline__  // rare paths: out of the hot loop's code
#else
#define BARACUDA_HD
#define BARACUDA_HD_COLD __attribute__((noinline))
#endif

#ifndef __CUDA_ARCH__
#include <cmath>
#include <cstring>
// Host model of the MUFU errors: identity by default; the accuracy check injects the documented
// worst cases (relative for ex2/rcp, absolute for lg2).
#ifndef BARACUDA_HOST_MUFU_REL
#define BARACUDA_HOST_MUFU_REL(v) (v)
#endif
#ifndef BARACUDA_HOST_MUFU_ABS
#define BARACUDA_HOST_MUFU_ABS(v) (v)
#endif
#endif

namespace baracuda::kern::short_math {

// ---- MUFU wrappers ------------------------------------------------------------------------------
/// The one place the project issues the approximate MUFU instructions by hand (ex2/lg2/rcp/sqrt .ftz:
/// without exp2f / __expf's denormal fix-ups). The short forms below, the CTC recursions and the
/// cluster cross-entropy kernel call these.
enum class Mufu { ex2, lg2, rcp, sqrt };
#ifdef __CUDA_ARCH__
template <Mufu K>
__device__ __forceinline__ float mufu(float x) {
  float r;
  if constexpr (K == Mufu::ex2)
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  else if constexpr (K == Mufu::lg2)
    asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  else if constexpr (K == Mufu::rcp)
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  else
    asm("sqrt.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}
#endif

/// 2^x, ex2.approx.ftz: <= 2 ulp; results below 2^-126 flush to 0.
BARACUDA_HD inline float ex2_fast(float x) {
#ifdef __CUDA_ARCH__
  return mufu<Mufu::ex2>(x);
#else
  const float r = static_cast<float>(std::exp2(static_cast<double>(x)));
  return BARACUDA_HOST_MUFU_REL(r < 1.17549435e-38f ? 0.0f : r);
#endif
}
/// log2(x), lg2.approx.ftz: absolute error <= 2^-22.6 (so NOT relatively accurate near x = 1).
BARACUDA_HD inline float lg2_fast(float x) {
#ifdef __CUDA_ARCH__
  return mufu<Mufu::lg2>(x);
#else
  // .ftz: a subnormal input is 0 (log2 -> -inf), as on the device.
  const float r = static_cast<float>(std::log2(x > 0.0f && x < 1.17549435e-38f ? 0.0 : static_cast<double>(x)));
  return std::isfinite(r) ? BARACUDA_HOST_MUFU_ABS(r) : r;
#endif
}
/// 1/x, rcp.approx.ftz: <= 1 ulp.
BARACUDA_HD inline float rcp_fast(float x) {
#ifdef __CUDA_ARCH__
  return mufu<Mufu::rcp>(x);
#else
  // .ftz: subnormal inputs read as 0 (-> inf) and results below 2^-126 flush to 0, as on the device.
  const float r =
      static_cast<float>(1.0 / (std::fabs(x) < 1.17549435e-38f ? std::copysign(0.0, x) : static_cast<double>(x)));
  return BARACUDA_HOST_MUFU_REL(std::fabs(r) < 1.17549435e-38f ? std::copysign(0.0f, r) : r);
#endif
}
/// sqrt(x), sqrt.approx.ftz (one MUFU): relative error <= 2^-23 (the host check injects 2 ulp);
/// sqrt(-x) = NaN, sqrt(+-0) = +-0, sqrt(inf) = inf.
BARACUDA_HD inline float sqrt_fast(float x) {
#ifdef __CUDA_ARCH__
  return mufu<Mufu::sqrt>(x);
#else
  const float r = static_cast<float>(std::sqrt(std::fabs(x) < 1.17549435e-38f ? 0.0 : static_cast<double>(x)));
  return std::isfinite(r) ? BARACUDA_HOST_MUFU_REL(r) : r;
#endif
}
BARACUDA_HD inline float ln_fast(float x) { return lg2_fast(x) * 0.693147180559945309f; }
/// n / d for normal d: the MUFU reciprocal and one Newton step on the quotient (within ~1 ulp;
/// the IEEE division's range checks and slow-path branch cost ~6 more instructions).
BARACUDA_HD inline float div_nr(float n, float d) {
  const float r = rcp_fast(d);
  const float q = n * r;
  return fmaf(fmaf(-d, q, n), r, q);
}
/// log2(x) that keeps subnormal x: lg2.approx.ftz reads them as 0 (-> -inf), so they are scaled
/// by 2^24 first (exact) and 24 taken off. Negatives stay negative (NaN), 0 -> -inf.
BARACUDA_HD inline float lg2_subnormal_safe(float x) {
  const bool sub = x < 0x1p-126f;
  return lg2_fast(sub ? x * 0x1p24f : x) - (sub ? 24.0f : 0.0f);
}

/// c[0] t^(N-1) + c[1] t^(N-2) + ... + c[N-1] by Horner's rule, one FMA a coefficient (highest
/// degree first): the evaluation order every polynomial below uses.
template <int N>
BARACUDA_HD inline float horner(float t, const float (&c)[N]) {
  float p = c[0];
#pragma unroll
  for (int i = 1; i < N; ++i) p = fmaf(p, t, c[i]);
  return p;
}

// Compiler builtins (GCC, Clang, NVCC alike), so the host tests need no CUDA headers for this file.
inline constexpr float kInf = __builtin_huge_valf();
inline constexpr float kNaN = __builtin_nanf("");

// ---- digamma -----------------------------------------------------------------------------------
/// psi(x) for x > 0 (or +inf, NaN; f32: x >= 2^-126). The recurrence psi(x) = psi(x + 6) -
/// sum_{k<6} 1/(x+k) runs as one fraction N/D (two FMAs a step, one division at the end) instead
/// of torch's up-to-ten divisions, and only for x < 6, where the asymptotic series (4 terms:
/// truncation < 2e-10) then holds. Both forms take the MUFU log and reciprocal there (x >= 6: the
/// log's 2^-22.6 absolute error is < 1 ulp of log x >= 1.79, the reciprocal's ulp is scaled by
/// 1/2); f32 divides N/D with a Newton step (div_nr), 16-bit by the bare reciprocal. The IEEE
/// division and logf cost the f32 row ~30 instructions an element (65% of the H200 copy figure).
/// Host check (tests/host/test_short_math.cpp, f32 against long double with the MUFU errors
/// injected): see the test for the bounds; around the root at 1.4616 the error is absolute, as
/// torch's own recurrence's.
template <bool kShort>
BARACUDA_HD inline float digamma_pos(float x) {
  float s = 0.0f;
  if (x < 6.0f) {
    float n = 1.0f, d = x;
#pragma unroll
    for (int k = 1; k < 6; ++k) {
      const float a = x + float(k);
      n = fmaf(n, a, d);
      d *= a;
    }
    s = kShort ? n * rcp_fast(d) : div_nr(n, d);
    x += 6.0f;
  }
  const float r = rcp_fast(x);
  const float r2 = r * r;
  const float y = r2 * fmaf(r2, fmaf(r2, fmaf(r2, 1.0f / 240.0f, -1.0f / 252.0f), 1.0f / 120.0f), -1.0f / 12.0f);
  return fmaf(-0.5f, r, ln_fast(x)) + y - s;
}

/// torch's digamma for x <= 0, -inf: +-0 -> -+inf, negative integers -> NaN, else the reflection
/// with the fractional part taken in double (torch's jiterator code does the same). f32 also
/// brings its subnormal x here (-1/x - gamma: the MUFU reciprocal would flush D).
template <bool kShort>
BARACUDA_HD_COLD float digamma_nonpos(float x) {
  if (x > 0.0f) return -1.0f / x - 0.577215664901532861f;
  if (x == 0.0f) return copysignf(kInf, -x);
  if (x == truncf(x)) return kNaN;  // negative integers and -inf
  constexpr double kPi = 3.14159265358979323846;
  const double r = static_cast<double>(x) - trunc(static_cast<double>(x));
  const float refl = static_cast<float>(-kPi / tan(kPi * r));
  return refl + digamma_pos<kShort>(1.0f - x);
}

template <bool kShort>
BARACUDA_HD inline float digamma_f32(float x) {
  if ((kShort ? x > 0.0f : x >= 0x1p-126f) || x != x) return digamma_pos<kShort>(x);
  return digamma_nonpos<kShort>(x);
}

// ---- trigamma ----------------------------------------------------------------------------------
/// psi_1(x) for x > 0 (or +inf, NaN): sum_{k<6} 1/(x+k)^2 as one fraction for x < 6, then the
/// asymptotic series (truncation < 1e-9 relative at x = 6). torch's calc_trigamma does six
/// divisions plus one for every input.
template <bool kShort>
BARACUDA_HD inline float trigamma_pos(float x) {
  float s = 0.0f;
  if (x < 6.0f) {
    float n = 1.0f, d = x * x;
#pragma unroll
    for (int k = 1; k < 6; ++k) {
      const float a = x + float(k);
      const float a2 = a * a;
      n = fmaf(n, a2, d);
      d *= a2;
    }
    s = kShort ? n * rcp_fast(d) : div_nr(n, d);
    x += 6.0f;
  }
  // The MUFU reciprocal flushes results below 2^-126 (x > 2^126) to 0, where psi_1(x) ~ 1/x is a
  // subnormal torch returns: scale by 2^-64 around it (exact except the last rounding). Its 1 ulp
  // moves f32 results by ~1 ulp for large x; the worst case (7.5 ulp) is the fraction's, below 6.
  const float r = rcp_fast(x * 0x1p-64f) * 0x1p-64f;
  const float r2 = r * r;
  // 1/x + 1/(2x^2) + 1/(6x^3) - 1/(30x^5) + 1/(42x^7) - 1/(30x^9)
  const float tail = fmaf(r2, fmaf(r2, fmaf(r2, -1.0f / 30.0f, 1.0f / 42.0f), -1.0f / 30.0f), 1.0f / 6.0f);
  return s + fmaf(r2, fmaf(r, tail, 0.5f), r);
}

/// torch's calc_trigamma reflection for x <= 0 and -inf (sin of the f32 product pi*x, as torch:
/// negative integers give huge finite values, not inf; 0 gives +inf).
template <bool kShort>
BARACUDA_HD_COLD float trigamma_nonpos(float x) {
  if (x > 0.0f) return 1.0f / (x * x) + 1.64493406684822644f;  // f32 x < 2^-60: D would underflow
  constexpr float kPi = 3.14159265358979323846f;
  const float sp = sinf(kPi * x);
  return (kPi * kPi) / (sp * sp) - trigamma_pos<kShort>(1.0f - x);
}

template <bool kShort>
BARACUDA_HD inline float trigamma_f32(float x) {
  if ((kShort ? x > 0.0f : x >= 0x1p-60f) || x != x) return trigamma_pos<kShort>(x);
  return trigamma_nonpos<kShort>(x);
}

BARACUDA_HD_COLD inline float lgamma_cold(float x) { return lgammaf(x); }

// ---- lgamma -------------------------------------------------------------------------------------
/// lgamma(x) = (x-1)(x-2) P(x - 1.75) on [0.75, 2.75) (P: degree 12, relative error 5.2e-8; the
/// factors keep the roots at 1 and 2 exact), lgamma(x+1) - log(x) below 0.75 (|log x| >= 0.29,
/// so the MUFU log's absolute error stays relative), Stirling with 5 correction terms from 2.75.
/// x <= 0, inf, NaN: libdevice lgammaf (torch's function). One form for f32 and 16-bit storage,
/// with the MUFU log and reciprocal: logf cost the f32 row ~25 instructions an element (74% of the H200 copy figure).
/// Host check (f32 against long double, the MUFU errors injected): within 13 ulp where
/// |lgamma| >= 0.5 (logf: 7.4), 5e-7 absolute nearer the roots at 1 and 2.
BARACUDA_HD inline float lgamma_f32(float x) {
  if (!(x > 0.0f) || x == kInf) return lgamma_cold(x);
  // log x, taken once: both the x < 0.75 and the Stirling branch need it, and a warp over mixed
  // inputs runs every branch (f32 uniform (0.1, 10): 78% of the H100 copy figure with two logs).
  // For x >= 2.75 the subnormal-safe lg2 is the plain one.
  const float lx = lg2_subnormal_safe(x) * 0.693147180559945309f;
  if (x < 2.75f) {
    const bool small = x < 0.75f;
    const float u = small ? x + 1.0f : x;
    const float a = small ? x : x - 1.0f;         // u - 1, exact
    const float b = small ? x - 1.0f : x - 2.0f;  // u - 2, exact near u = 2
    const float t = u - 1.75f;
    const float p =
        horner(t, {1.2189362210731424e-04f, -2.2550171169293621e-04f, 2.562451919007679e-05f, -6.043089331425152e-05f,
                   6.269711348696285e-04f, -1.207072805826338e-03f, 2.069707018459476e-03f, -4.181210323968896e-03f,
                   8.779857873640474e-03f, -1.905974872250777e-02f, 4.4520302724812395e-02f, -1.1948137674817173e-01f,
                   4.501393125507464e-01f});
    const float r = a * b * p + 0.0f;  // +0, not -0, at x = 1 (torch)
    return small ? r - lx : r;
  }
  // The MUFU reciprocal in f32 too: corr <= 1/33 against a result >= 0.449 here, so its ~1 ulp
  // moves the result by < 0.07 ulp, and the IEEE division cost ~6 instructions an element on a
  // compute-bound row (f32 at 71% of copy bandwidth); it flushes x > 2^126 to 0, where corr < 2^-129.
  const float ir = rcp_fast(x);
  const float ir2 = ir * ir;
  // 1/(12x) - 1/(360x^3) + 1/(1260x^5) - 1/(1680x^7) + 1/(1188x^9)
  const float corr =
      ir * fmaf(ir2, fmaf(ir2, fmaf(ir2, fmaf(ir2, 1.0f / 1188.0f, -1.0f / 1680.0f), 1.0f / 1260.0f), -1.0f / 360.0f),
                1.0f / 12.0f);
  return fmaf(x - 0.5f, lx, (0.918938533204672742f - x) + corr);
}

// ---- erfc (16-bit storage) ------------------------------------------------------------------------
/// erfc(a), a = |x| <= 10.5: (1 + 2a) e^{a^2} erfc(a) = 1 + p(q), q = (a-2)/(a+2) (Shepherd and
/// Laframboise's form, which CUDA's erfcf also uses; here p has degree 9, error 2.4e-8, and the
/// divisions are MUFU reciprocals). a^2 is exact for 16-bit inputs (<= 22 significant bits), and
/// its product with log2(e) keeps its rounding error as a correction term (else 6e-6 relative at
/// a = 10). e^{-a^2} is taken as a square so results below 2^-126 come out subnormal, as torch's.
BARACUDA_HD inline float erfc_short(float x) {
  float a = fabsf(x);
  a = a > 10.5f ? 10.5f : a;  // NaN passes through
  const float q = (a - 2.0f) * rcp_fast(a + 2.0f);
  const float p =
      horner(q, {-4.0361957209473863e-04f, -1.230690220347373e-03f, 1.320619599949645e-03f, 8.634470821149523e-03f,
                 -8.063906555689579e-03f, -5.4205733718770334e-02f, 1.6405613130443217e-01f, -1.660312352354335e-01f,
                 -9.276402215557912e-02f, 2.76978390048864e-01f});
  const float g = (p + 1.0f) * rcp_fast(fmaf(2.0f, a, 1.0f));
  constexpr float kL2eHi = -1.44269502162933349609375f;  // -log2(e) rounded to f32
  constexpr float kL2eLo = -1.925963033500011079e-08f;   // -log2(e) - kL2eHi
  const float s = a * a;
  const float h = s * kL2eHi;
  const float lo = fmaf(s, kL2eHi, -h) + s * kL2eLo;  // h + lo = -a^2 log2(e) to ~2^-40
  const float e = ex2_fast(0.5f * h);                 // >= 2^-80: normal
  float t = g * e;
  t = fmaf(t, lo * 0.693147180559945309f, t);
  const float r = t * e;  // may be subnormal (no flush outside ex2)
  return x < 0.0f ? 2.0f - r : r;
}

// ---- activations (16-bit storage) ---------------------------------------------------------------
inline constexpr float kLog2e = 1.44269504088896340736f;

/// e^x as ex2_fast(x * log2 e): FMUL + MUFU.EX2 (~2 ulp + 1.2|x| ulp of f32; results below 2^-126
/// flush to 0). __expf is the same without -ftz plus a subnormal fix-up (FSETP and two predicated
/// FMULs around the MUFU), 7 instructions instead of 3.
BARACUDA_HD inline float exp_fast(float x) { return ex2_fast(x * kLog2e); }
/// e^x for the far negative tails (x < -80) where the result may be subnormal, which ex2.approx.ftz
/// would flush: 2^(x log2 e + 64) 2^-64 (the last product, not .ftz, rounds into the subnormals as
/// expf does). ~2 ulp + |x| 2^-24 relative; -inf -> 0. No call (expf out of line cost the 16-bit
/// softplus and logaddexp kernels registers around the call).
BARACUDA_HD inline float exp_tiny(float x) { return ex2_fast(fmaf(x, kLog2e, 64.0f)) * 0x1p-64f; }

// The bits of an f32 and back (__builtin_bit_cast: g++ and both nvcc passes).
BARACUDA_HD inline unsigned float_bits(float x) { return __builtin_bit_cast(unsigned, x); }
BARACUDA_HD inline float bits_float(unsigned u) { return __builtin_bit_cast(float, u); }

/// sigmoid(x) = 1 / (1 + e^-x) on the MUFU ex2 and reciprocal (~3 ulp), for the gated 16-bit rows
/// (glu, swiglu: a * sigmoid(gate), whose IEEE division and expf kept them at 73-75% of the H200
/// copy figure). Below x = -80 it is e^x (the 1 + e^x denominator is 1 in f32), taken as
/// 2^(x log2 e + 64) 2^-64 so results below 2^-126 come out subnormal as torch's, where the .ftz
/// reciprocal of a huge 1 + e^-x would flush them; below -88.72, where torch's expf(-x) overflows
/// and 1 / (1 + inf) is 0, it is 0 as torch's. +inf -> 1, -inf -> 0, NaN -> NaN.
BARACUDA_HD inline float sigmoid_short(float x) {
  const float main = rcp_fast(1.0f + ex2_fast(x * -kLog2e));
  const float tail = x < -88.72f ? 0.0f : exp_tiny(x);
  return x < -80.0f ? tail : main;
}

/// e^z - 1 (elu, selu, celu): z (1 + z/2 + ... + z^5/720) for |z| < 0.25 (truncation < 5e-8
/// relative; written as z * (...) so expm1(-0) = -0), else 2^(z log2 e) - 1 with the MUFU ex2:
/// |e^z - 1| >= 0.22 there, so its 2-ulp error stays relative; rounding z log2 e adds |z| 2^-24
/// relative for z > 0 (celu with alpha < 0 only). -inf -> -1, +inf -> +inf, NaN -> NaN. libdevice's
/// expm1f spends ~30 instructions on its own reduction (bf16 elu was issue-bound, 89% of copy BW).
BARACUDA_HD inline float expm1_short(float z) {
  if (fabsf(z) < 0.25f) {
    const float p = horner(z, {1.0f / 720.0f, 1.0f / 120.0f, 1.0f / 24.0f, 1.0f / 6.0f, 0.5f, 1.0f});
    return z * p;
  }
  return ex2_fast(z * kLog2e) - 1.0f;
}

/// log(1 + e^z) = max(z, 0) + log1p(t), t = e^-|z| in (0, 1], as 2 atanh(s), s = t / (2 + t) <= 1/3
/// (odd series through s^13: truncation < 2e-8 relative): one ex2, one reciprocal, seven FMAs
/// instead of expf and log1pf. The rounding of |z| log2 e costs up to |z| 2^-24 relative, < 3e-6
/// before the tail (z < -80, where log1p(e^z) = e^z, taken by exp_tiny: it nears the subnormals
/// the MUFU ex2 flushes).
BARACUDA_HD inline float softplus_short(float z) {
  if (z < -80.0f) return exp_tiny(z);
  const float t = ex2_fast(fabsf(z) * -kLog2e);  // NaN passes through
  const float s = t * rcp_fast(2.0f + t);
  const float s2 = s * s;
  const float p = horner(s2, {1.0f / 13.0f, 1.0f / 11.0f, 1.0f / 9.0f, 1.0f / 7.0f, 1.0f / 5.0f, 1.0f / 3.0f});
  const float ss = s + s;
  return fmaxf(z, 0.0f) + fmaf(ss * s2, p, ss);
}

/// torch's formulas where e^x is (nearly) subnormal: x tanh(log1p(e^x)) = x e^x in f32, and the
/// gradient t + x s (1 - t^2) with t = e^x, s = 1 / (1 + e^-x).
BARACUDA_HD_COLD inline float mish_tail(float x) { return x * expf(x); }
BARACUDA_HD_COLD inline float mish_grad_tail(float x) {
  const float t = expf(x);
  const float s = 1.0f / (1.0f + expf(-x));
  return t + x * s * (1.0f - t * t);
}

/// x tanh(log(1 + e^x)) = x n / (n + 2), n = e^x (e^x + 2) (tanh(log u) = (u^2 - 1) / (u^2 + 1)):
/// one ex2 and one reciprocal instead of expf, log1pf and tanhf. x is clamped at 20 for n, where
/// the ratio is 1 in f32 (from x = 9.1 on) and n stays finite. x < -80: mish_tail.
BARACUDA_HD inline float mish_short(float x) {
  if (x < -80.0f) return mish_tail(x);
  const float e = ex2_fast(fminf(x, 20.0f) * kLog2e);  // fminf(NaN, 20) = 20, x carries the NaN
  const float n = fmaf(e, e, e + e);
  return x * (n * rcp_fast(n + 2.0f));
}

/// mish'(x) = t + x s (1 - t^2), t = n / (n + 2), s = e / (1 + e), and 1 - t^2 = 4 (n + 1) / (n + 2)^2
/// (no cancellation as t -> 1). Same clamp and tail as mish_short; from x = 20 on 1 - t^2 is 0, as
/// torch's f32 tanh gives from 9.1 on (the clamped n would leave x 4/n, not 0), so +inf gives
/// torch's inf * 0 = NaN.
BARACUDA_HD inline float mish_grad_short(float x) {
  if (x < -80.0f) return mish_grad_tail(x);
  const float e = ex2_fast(fminf(x, 20.0f) * kLog2e);
  const float n = fmaf(e, e, e + e);
  const float q = rcp_fast(n + 2.0f);
  const float s = e * rcp_fast(1.0f + e);
  const float one_minus_t2 = x < 20.0f ? 4.0f * ((n + 1.0f) * q) * q : 0.0f;
  return fmaf(x * s, one_minus_t2, n * q);
}

/// |pi x| >= 105615 (|x| >= 33618), inf, NaN: sinf (its Payne-Hanek reduction) out of the hot loop.
BARACUDA_HD_COLD inline float sinc_tail(float px) { return sinf(px) / px; }

/// sinf's fast path written out, for |x| < 105615 (larger, inf, NaN: the caller's tail, sinf's
/// Payne-Hanek reduction out of the hot loop): a 3-part Cody-Waite reduction by pi/2 (exact in that
/// range) to x = j pi/2 + r, |r| <= pi/4, with j taken by a round-to-integer addition instead of F2I,
/// and sinf's polynomials for sin(r)/r and cos(r). (sin, cos and tan themselves stay on libdevice:
/// on the H200 this form left bf16 sin/cos at the same 80-82% of the copy figure and made tan
/// slower, 86% -> 79%; the polynomials, not the slow-path call, are what those rows issue.)
struct QuarterTurns {
  float r, sin_r_over_r, cos_r, j;
  unsigned quadrant;  // low bits of j
};
BARACUDA_HD inline QuarterTurns quarter_turns(float x) {
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: the sum's ulp is 1, so it is round(x 2/pi)
  const float jr = fmaf(x, 0.636619772367581343f, kRound);
  QuarterTurns t;
  t.quadrant = float_bits(jr);  // low bits: those of round(x 2/pi) (2^22 + j)
  t.j = jr - kRound;
  float r = fmaf(t.j, -1.57079625129699707031f, x);
  r = fmaf(t.j, -7.54978941586159635335e-08f, r);
  t.r = fmaf(t.j, -5.39030295347423839270e-15f, r);
  const float u = t.r * t.r;
  t.sin_r_over_r =
      fmaf(u, fmaf(u, fmaf(u, -1.95746586541645228863e-04f, 8.33270326256752014160e-03f), -1.66666626930236816406e-01f),
           1.0f);
  t.cos_r = fmaf(
      u,
      fmaf(u, fmaf(u, fmaf(u, 2.42795795202255249023e-05f, -1.38878601137548685074e-03f), 4.16667275130748748779e-02f),
           -4.99999970197677612305e-01f),
      1.0f);
  return t;
}
inline constexpr float kQuarterTurnsMax = 105615.0f;

/// sin(px) / px with px = fl(pi x), torch's f32 product, on quarter_turns with a MUFU reciprocal
/// instead of the IEEE division. In the first quadrant (|px| < pi/4, including 0 and subnormals)
/// sin(r)/r is the result directly, with no reciprocal of a small px.
BARACUDA_HD inline float sinc_short(float x) {
  const float px = 3.14159265358979323846f * x;
  if (!(fabsf(px) < kQuarterTurnsMax)) return sinc_tail(px);
  const QuarterTurns t = quarter_turns(px);
  float v = (t.quadrant & 1u) ? t.cos_r : t.sin_r_over_r * t.r;
  v = (t.quadrant & 2u) ? -v : v;
  return t.j == 0.0f ? t.sin_r_over_r : v * rcp_fast(px);
}

// ---- fmod (16-bit storage) ------------------------------------------------------------------------
/// |fmod(a, b)| = |a - trunc(a/b) b|, exact, for 16-bit operands (<= 11 significant bits): n =
/// trunc(a * rcp(b)) is the true truncated quotient or one off (|a/b| < 2^20 and the MUFU
/// reciprocal's 1 ulp: the product is within 2 ulp of a/b, < 0.5 absolute; the host check with 2
/// ulp injected into the reciprocal found two-off quotients from 2^21.8 on), the residual a - n b is
/// one exact FMA (its exact value has at most 13 significant bits), and one step of |b| fixes the
/// off-by-one. The residual is measured along a's sign (t = sign(a) r, in (-|b|, 2|b|) before the
/// step), so the step is two selects, not a branch per sign. false (the caller takes fmodf): b
/// zero, subnormal or past 2^126, a or b non-finite, |a/b| >= 2^20 (libdevice's fmodf loops over
/// the exponent difference; with its IEEE division it kept bf16 fmod at 0.87x torch on the H200).
BARACUDA_HD_COLD inline float fmod_tail(float a, float b) { return fmodf(a, b); }
BARACUDA_HD inline bool fmod_abs_short(float a, float b, float* t) {
  const float ab = fabsf(b);
  const float q = a * rcp_fast(b);
  if (!(ab >= 0x1p-126f && ab < 0x1p126f && fabsf(q) < 0x1p20f)) return false;
  float r = copysignf(1.0f, a) * fmaf(-truncf(q), b, a);
  r = r < 0.0f ? r + ab : r;
  *t = r >= ab ? r - ab : r;  // may be -0: callers take the sign from a or b
  return true;
}
/// fmod(a, b), bit for bit IEEE's: a zero result takes a's sign.
BARACUDA_HD inline float fmod_short(float a, float b) {
  float t;
  return fmod_abs_short(a, b, &t) ? copysignf(t, a) : fmod_tail(a, b);
}
/// torch's remainder, fl(fmod(a, b) + b) when fmod is nonzero and its sign differs from b's: that
/// sum is |b| - |fmod| with b's sign (the same f32 subtraction, so the same rounding). Not a floor
/// form a - floor(a/b) b: when fmod is tiny beside b the sum rounds, and a one-FMA floor residual
/// cannot tell that rounding from an off-by-one quotient. The fmod / floor H200 rows: bf16
/// remainder with fmod_short and a branch on the sign ran at 0.93x torch (92% of copy bandwidth).
BARACUDA_HD inline float remainder_short(float a, float b) {
  float t;
  if (!fmod_abs_short(a, b, &t)) {
    const float m = fmod_tail(a, b);
    return m != 0.0f && ((b < 0.0f) != (m < 0.0f)) ? m + b : m;
  }
  const bool flip = t != 0.0f && ((a < 0.0f) != (b < 0.0f));
  return copysignf(flip ? fabsf(b) - t : t, flip ? b : a);
}

// ---- pow (16-bit storage) -------------------------------------------------------------------------
/// a^b as 2^(b log2 a) with MUFU lg2/ex2 where that is accurate to ~1e-6 relative: a > 0 finite,
/// |b| <= 16 (the lg2 absolute error 2^-22.6 is scaled by |b|), a result in the normal range
/// (ex2.approx flushes subnormals). Everything else (signs, zeros, infinities, NaN, big |b|):
/// powf, torch's function. Returns false in *r when the caller must use powf.
BARACUDA_HD inline bool pow_short(float a, float b, float* r) {
  if (!(a > 0.0f && a < kInf && fabsf(b) <= 16.0f)) return false;
  const float y = b * lg2_fast(a);
  if (y < -125.0f) return false;
  *r = ex2_fast(y);
  return true;
}

// ---- pow (f32) -------------------------------------------------------------------------------------
/// x * y rounded on its own: nvcc fuses a product into a following addition (FFMA), which would
/// break the error-free steps in pow_f32 that subtract the rounded product.
BARACUDA_HD inline float mul_rn(float x, float y) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(x, y);
#else
  return x * y;
#endif
}
/// powf (torch's function) out of the hot loop's code: pow_f32's fallback.
BARACUDA_HD_COLD inline float pow_tail(float a, float b) { return powf(a, b); }

/// a^b for f32 storage where a is normal (2^-126 <= a < inf), b finite and |rint(b log2 a)| <= 125
/// (results in [2^-125.5, 2^125.5]): returns true with *r within 2 ulp of the correctly rounded
/// value. Everything else returns false for the caller's powf (pow_tail): a <= 0, subnormal, inf or
/// NaN; b inf or NaN; results past 2^+-125.5 (overflow, underflow, subnormal, and the 2.5 binades
/// before them, which one compare on |n| cannot keep). *r is written either way (garbage when
/// false), so the fast path has no branch and the caller's one branch skips only the call.
/// a = 1 or b = 0 give exactly 1; a = 2^k gives 2^(k b) exactly when k b is an integer; b = 1 gave
/// a back for every a checked; b = 2 is 1 ulp off fl(a a) for 6% of a in [0.1, 10).
///
/// libdevice's powf issues ~85-93 SASS instructions an element (the same float-float log, plus
/// FRND/F2I, a two-factor scaling and its special cases inline): issue-bound, the slowest f32 row
/// (0.93x torch, 88% of the H200 copy figure). This is 41 arithmetic instructions on sm_90a (plus
/// two constant moves and the branch), one MUFU reciprocal, no IEEE division, no table:
///   * a = 2^e m, m in [sqrt(1/2), sqrt(2)) by integer ops; log2 m = K atanh(q), K = 2/ln 2,
///     q = f/(2+f), f = m - 1 (exact), |q| <= 0.1716. q = f rcp(2+f), and its error
///     ql = (f - q(2+f)) rcp(2+f) from the exact residual (f - 2q exact by Sterbenz, then one FMA);
///   * K q as kKh q rounded plus its FMA error; the rest, K(q^3/3 + ...) = q w, w a degree-4
///     polynomial in v = q^2 (minimax, 2^-36 relative) whose leading term is added last (one
///     rounding); ql enters to first order, K (1 + v) ql;
///   * hi = e + (kKh q + q w) rounded and lo the rest (hi - e is exact): log2 a to 2^-34.4
///     relative for |q| < 0.04, 2^-30.3 at worst (|q| > 0.08: the f32 rounding of q w, up to 1% of
///     log2 m near a = 2^+-1/2). An error dy in y = b log2 a costs dy ln 2 of the result and |y|
///     reaches 125: hence the float-float, and the error growing with |b| q^3;
///   * n = rint(b hi) by adding 1.5 2^23, t = (b hi - n) + b lo (two FMAs, |t| <= 0.5), 2^t by a
///     degree-6 minimax (2^-28.3 with its f32 coefficients), 2^n added to the exponent bits.
/// Host check (tests/host/test_short_math.cpp, against powl): max 1.60 ulp over 1.6e8 pairs aimed
/// at the worst case (a near 2^+-1/2 and 2^(k +- 1/2), |b log2 a| near 125), 1.0 ulp on the bench
/// domain (a in [0.1, 10), b ~ N(0, 1)); 1.73 ulp with the reciprocal's documented 1 ulp injected
/// (1.82 with 2 ulp: ql grows, and K (1 + v) leaves out its K v^2 ql).
BARACUDA_HD inline bool pow_f32(float a, float b, float* r) {
  const unsigned ia = float_bits(a);
  const bool a_ok = ia - 0x00800000u < 0x7f000000u;  // 2^-126 <= a < inf, not NaN, not negative
  const unsigned t = ia - 0x3f3504f3u;               // 0x3f3504f3: sqrt(1/2)
  const unsigned eb = t & 0xff800000u;               // e << 23
  const float m = bits_float(ia - eb);
  const float e23 = static_cast<float>(static_cast<int>(eb));  // e 2^23, exact (I2FP)
  const float f = m - 1.0f;
  const float rc = rcp_fast(f + 2.0f);
  const float q = f * rc;
  const float ql = fmaf(-q, f, fmaf(q, -2.0f, f)) * rc;
  const float v = q * q;
  constexpr float kKh = 2.885390043258667f, kKl = 3.851926067000022e-08f;  // K = kKh + kKl
  const float sk = horner(v, {0.3364895284175873f, 0.4119272828102112f, 0.5770788192749023f});
  const float w = fmaf(v, 0.9617967009544373f, fmaf(v, v * sk, kKl));  // kKl q rides along in q w
  const float p = mul_rn(kKh, q);
  const float s1 = fmaf(q, w, p);
  const float hi = fmaf(e23, 0x1p-23f, s1);
  const float z = fmaf(e23, -0x1p-23f, hi);  // hi - e
  const float lo = fmaf(q, w, p - z) + fmaf(fmaf(ql, v, ql), kKh, fmaf(kKh, q, -p));
  const float s = fmaf(b, hi, 12582912.0f);  // 1.5 2^23 + rint(b hi): n in the low bits
  const float nf = s - 12582912.0f;
  const float tt = fmaf(b, lo, fmaf(b, hi, -nf));
  const float pp = fmaf(horner(tt, {0.00015326471475418657f, 0.0013390806270763278f, 0.009618505835533142f,
                                    0.05550359934568405f, 0.24022647738456726f, 0.6931471824645996f}),
                        tt, 1.0f);
  *r = bits_float(float_bits(pp) + (float_bits(s) << 23));
  return a_ok & (fabsf(nf) < 125.5f);
}

// ---- erfc (f32) ------------------------------------------------------------------------------------
/// erfc(x) for f32 storage, every x, no fallback and no branch: NaN -> NaN, +inf -> +0, -inf -> 2,
/// +-0 -> 1 exactly, results below 2^-126 (x in [9.19, 10.05]) subnormal as libdevice's erfcf
/// (torch's function) returns them, +0 past 10.0541945; x < 0 gives 2 - erfc(-x).
///
/// libdevice's erfcf issues 45.75 SASS instructions an element on sm_90a (a float4 kernel: two MUFU
/// reciprocals, an expf with FRND and a two-factor scale, a Newton division, the range selects): the
/// f32 row was issue-bound at 0.97x torch on the H200. This is 33.75 (22 FFMA, 4 FADD, 3 FMUL, 2 MUFU,
/// FMNMX, FSETP and 3 constant moves shared by the 4 lanes), one MUFU reciprocal and one ex2:
///   * a = min(|x|, 10.1) (FMNMX.NAN: NaN passes), erfc(a) = 2^(-c a^2) F(a) with c = log2(e)
///     rounded to f32 (F is erfcx up to a factor 2^(-1.9e-8 a^2), fitted with it);
///   * F(a) = Q(t), t = 1/(1 + 0.53 a) in [0.157, 1] from the MUFU reciprocal, Q of degree 10
///     (relative error 2^-28.3 with its f32 coefficients). One t form over [0, 10.1]; libdevice
///     divides by 1 + 2a besides (a second reciprocal and a Newton step).
///   * t's relative error is amplified by kappa = t Q'(t)/Q(t) = d ln F / d ln t (1.18 .. 2.13), and
///     so is the rounding of d = 1 + 0.53 a. So no Newton step (which leaves t's own rounding: 4.1
///     ulp at worst): the exact residual e1 = 1 - (1 + 0.53 a) t (two FMAs, with d's error dl from a
///     third; without it 4.6 ulp) gives the true t(1 + e1), and Q(t(1 + e1)) = Q(t)(1 + kappa e1),
///     kappa ~ 1.0190 + 1.1706 t (within 0.061). The reciprocal's own error thus hardly shows: its
///     documented error injected alone (relative 2^-22) moves the maximum by 0.3 ulp;
///   * c a^2 = a w + a wl, w = c a rounded and wl its FMA error; u = a w + 2048 rounds a w to a
///     multiple sh of 2^-12, so 2112 - u = 64 - sh is exact and rho = (a w - sh) + a wl (one FMA
///     each, |rho| <= 2^-12.9) is the rest: 2^(-c a^2) = 2^(64 - sh) 2^-64 (1 - rho ln 2) to 2^-27.9.
///     The MUFU ex2 of 64 - sh >= -83.2 stays normal; the 2^-64 rides in Q's coefficients, so the
///     last product rounds into the subnormals unflushed (no select, unlike exp_tiny's callers);
///   * R = Q (1 + kappa e1 - rho ln 2) with the correction folded into Q's last Horner step (one
///     rounding, not two: 3.7 ulp with two), times the ex2.
/// Host check (tests/host/test_short_math.cpp, against erfcl in f32 ulps of the reference, every f32
/// pattern of [2^-30, 10.1] and its negation): max 3.10 ulp where the result is normal (2.81 on the
/// bench's standard normal x), 1.28 2^-149 for subnormal results, 2.00 for x < 0; libdevice's erfcf
/// algorithm (transcribed from its SASS) gives 3.93 and 1.93 on the same host model of the MUFU
/// instructions. With their errors injected, relative 2^-23 / 2^-22: 5.71 / 7.49 (libdevice's
/// algorithm: 6.3 / 8.01). Why not <= 2: the ex2's rounding alone can cost 1 ulp of the result (its
/// documented 2 ulp: up to 4), R's another, the product 0.5; even R computed exactly and rounded
/// once gives 2.0. Less needs R and the product in float-float (estimated 5 more instructions).
BARACUDA_HD inline float erfc_f32(float x) {
  const float ax = fabsf(x);
  const float a = ax > 10.1f ? 10.1f : ax;  // NaN stays NaN (FMNMX.NAN)
  constexpr float kP = 0.53f;
  const float d = fmaf(a, kP, 1.0f);
  const float dl = fmaf(a, kP, 1.0f - d);  // (1 + kP a) - d (1 - d is exact)
  const float t = rcp_fast(d);
  const float e1 = fmaf(-dl, t, fmaf(-d, t, 1.0f));  // 1 - (1 + kP a) t
  constexpr float S = 0x1p-64f;  // ex2 of 64 - sh below: Q carries the 2^-64
  const float p = horner(t, {5.152641237e-02f * S, -3.215297759e-01f * S, 8.182893395e-01f * S, -1.025102854e+00f * S,
                             5.845822692e-01f * S, -1.986922622e-01f * S, 2.487078160e-01f * S, 2.425300330e-01f * S,
                             3.007880151e-01f * S, 2.988974154e-01f * S});
  constexpr float kQ0 = 3.593201654e-06f * S;
  const float q = fmaf(p, t, kQ0);
  const float kappa = fmaf(1.170570283f, t, 1.018977014f);
  constexpr float kC = 1.44269502162933349609375f;  // log2(e) rounded to f32
  const float w = mul_rn(a, kC);
  const float wl = fmaf(a, kC, -w);
  const float u = fmaf(a, w, 2048.0f);
  const float rho = fmaf(a, wl, fmaf(a, w, 2048.0f - u));
  const float corr = fmaf(kappa, e1, rho * -0.693147180559945309f);
  const float r = fmaf(p, t, fmaf(q, corr, kQ0)) * ex2_fast(2112.0f - u);
  return x < 0.0f ? 2.0f - r : r;
}

// ---- floor division (16-bit storage) -----------------------------------------------------------------
/// floor(a / b) of the exact quotient without fmod (ATen's div_floor_floating, whose fmodf is a
/// loop over the exponent difference). Round-to-nearest cannot cross an integer n with |n| < 2^24
/// (n is representable), so floor(fl(a/b)) is wrong only when the quotient lies just below n and
/// rounds up onto it; the sign of the exact residual a - n b (one FMA) detects that. Returns false
/// for b = 0, non-finite operands or |a/b| >= `limit`, which keep ATen's formula. 16-bit operands
/// may use limit 2^24: ATen's (a - fmod) / b is then exact (a product of <= 11- and 24-bit
/// significands). f32 operands use 2^21: there a - fmod and the division each round (relative
/// 2^-24), so ATen's quotient is the integer within |q| 2^-23 < 0.25, which its rounding step
/// (floor, +1 above .5) returns exactly: both give the exact floor. Past that ATen's own rounding
/// can differ from the exact floor, so its formula stays.
BARACUDA_HD inline bool div_floor_fast(float a, float b, float* r, float limit = 16777216.0f) {
  const float q = a / b;
  if (!(fabsf(q) < limit && fabsf(b) < kInf)) return false;
  float fl = floorf(q);
  const float res = fmaf(-fl, b, a);
  if (fl == q && res != 0.0f && ((res < 0.0f) != (b < 0.0f))) fl -= 1.0f;
  *r = fl;
  return true;
}

// ---- inverse hyperbolics, logit, atan2 (16-bit storage) -----------------------------------------
// libdevice's asinhf/acoshf/atan2f and torch's log(x / (1 - x)) spend an IEEE division or a full
// log1pf on every element (bf16 rows at 87-89% of copy BW, issue 2). Each form below evaluates a
// short polynomial where the log form would lose relative accuracy (the MUFU lg2 error is absolute,
// 2^-22.6: fine against a result >= ln 2 / 2, not near a root), the MUFU log elsewhere, and keeps
// torch's classes (NaN, +-inf, +-0, subnormals) exact.
inline constexpr float kLn2 = 0.693147180559945309f;

/// asinh(x): |x| < 0.5: x (1 + x^2 q(x^2)), q degree 4 (relative error 6e-9 in f32); else
/// sign(x) ln(|x| + sqrt(x^2 + 1)) (the result is >= 0.48 there), with ln(2|x|) = log2|x| + 1 from
/// |x| > 2^32, where 1/(4x^2) is below f32 resolution and x^2 would overflow. Subnormal x: x.
BARACUDA_HD inline float asinh_short(float x) {
  const float t = fabsf(x);
  const float s = x * x;
  const float q =
      horner(s, {-1.343285695e-02f, 2.828426253e-02f, -4.440808203e-02f, 7.498845121e-02f, -1.666664867e-01f});
  const float near0 = x * fmaf(s, q, 1.0f);  // -0 -> -0 (fmaf(x s, q, x) would give +0)
  const bool huge = t > 0x1p32f;             // inf too; NaN takes the log path and stays NaN
  const float u = huge ? t : t + sqrt_fast(fmaf(t, t, 1.0f));
  const float far = copysignf((lg2_fast(u) + (huge ? 1.0f : 0.0f)) * kLn2, x);
  return t < 0.5f ? near0 : far;
}

/// acosh(x): x - 1 = d < 0.25: sqrt(2d) (1 + d q(d)), q degree 3 (relative error 3e-9; d is exact
/// and acosh ~ sqrt(2d) has no relative accuracy in the log form there); else
/// ln(x + sqrt(x^2 - 1)) (>= ln 2; x^2 - 1 is one exact FMA for 16-bit x), log2 x + 1 from x > 2^32.
/// x < 1 (and -inf): sqrt of a negative, NaN as torch; x = 1: +0.
BARACUDA_HD inline float acosh_short(float x) {
  const float d = x - 1.0f;
  const float q = horner(d, {1.543518181e-03f, -5.512473131e-03f, 1.874483665e-02f, -8.333321398e-02f});
  const float near1 = sqrt_fast(d + d) * fmaf(d, q, 1.0f);
  const bool huge = x > 0x1p32f;
  const float u = huge ? x : x + sqrt_fast(fmaf(x, x, -1.0f));
  const float far = (lg2_fast(u) + (huge ? 1.0f : 0.0f)) * kLn2;
  return d < 0.25f ? near1 : far;
}

/// 2 atanh(y) = ln((1 + y) / (1 - y)) for |y| < 1/3: 2y (1 + y^2 q(y^2)), q degree 3 (relative
/// error 9e-9); -0 -> -0. The near-1 branch of the logarithms below and logit's near-1/2 branch.
BARACUDA_HD inline float two_atanh(float y) {
  const float s = y * y;
  const float q = horner(s, {1.391534255e-01f, 1.401915010e-01f, 2.000963738e-01f, 3.333322876e-01f});
  const float y2 = y + y;
  return fmaf(y2 * s, q, y2);
}
/// log2(x) * k for 16-bit storage (k = ln 2: log, 1: log2, log10(2): log10): 2 atanh((x-1)/(x+1))
/// for x in (1/2, 2) (x - 1 and x + 1 exact, the MUFU reciprocal 1 ulp: the root at 1 keeps its
/// relative accuracy), else the MUFU log2 (|log2 x| >= 1 there, so its absolute error 2^-22.6 is
/// relative); subnormal x scaled by 2^24 first (lg2.approx.ftz reads them as 0). 0 -> -inf,
/// x < 0 and NaN -> NaN, inf -> inf. libdevice's logf/log2f/log10f cost ~15 instructions each
/// (bf16 rows at 80-83% of the H200 copy figure, issue-bound).
BARACUDA_HD inline float log2k_short(float x, float k) {
  const float near = two_atanh((x - 1.0f) * rcp_fast(x + 1.0f)) * (k * kLog2e);
  const float far = lg2_subnormal_safe(x) * k;
  return x > 0.5f && x < 2.0f ? near : far;
}
/// log1p(x) for 16-bit storage: 2 atanh(x / (2 + x)) for |x| < 1/2, else ln(1 + x) (1 + x exact
/// for 16-bit x below 2^13; |ln(1 + x)| >= 0.4 there). -1 -> -inf, x < -1 -> NaN, -0 -> -0.
BARACUDA_HD inline float log1p_short(float x) {
  const float near = two_atanh(x * rcp_fast(2.0f + x));
  const float far = lg2_fast(1.0f + x) * kLn2;
  return fabsf(x) < 0.5f ? near : far;
}
/// atanh(x) for 16-bit storage: two_atanh(x) / 2 for |x| < 1/3, else (ln(1 + x) - ln(1 - x)) / 2
/// (1 +- x exact; |atanh| >= 0.34 there). +-1 -> +-inf, |x| > 1 and NaN -> NaN.
BARACUDA_HD inline float atanh_short(float x) {
  const float far = (lg2_fast(1.0f + x) - lg2_fast(1.0f - x)) * (0.5f * kLn2);
  return fabsf(x) < 0.333333343f ? 0.5f * two_atanh(x) : far;
}
/// sinh(x) for 16-bit storage: x (1 + x^2/6 + x^4/120 + x^6/5040) for |x| < 1/2 (truncation 1.1e-8
/// relative), else sign(x) (h - 1/(4h)) with h = e^|x| / 2 = 2^(|x| log2 e - 1) (no cancellation:
/// h - 1/(4h) >= 0.52; halving inside the exponent keeps sinh finite up to 89.4, where e^|x| alone
/// overflows from 88.7). libdevice's sinhf: expf plus an IEEE division.
BARACUDA_HD inline float sinh_short(float x) {
  const float a = fabsf(x);
  const float x2 = x * x;
  const float near = fmaf(x * x2, horner(x2, {1.0f / 5040.0f, 1.0f / 120.0f, 1.0f / 6.0f}), x);
  const float h = ex2_fast(fmaf(a, kLog2e, -1.0f));
  const float far = copysignf(fmaf(-0.25f, rcp_fast(h), h), x);
  return a < 0.5f ? near : far;
}

/// log(z / (1 - z)) (logit after torch's optional clamp): y = 2z - 1 (exact for z in [1/4, 1]);
/// |y| < 1/3: 2 atanh(y) = 2y (1 + y^2 q(y^2)), q degree 3 (relative error 9e-9), since the root at
/// z = 1/2 needs relative accuracy; else ln z - ln(1 - z) with two MUFU logs (|logit| >= ln 2), no
/// division. The MUFU lg2 reads subnormal z as 0, so bf16 subnormals are scaled by 2^24 first.
/// z = 0 -> -inf, z = 1 -> inf, z outside [0, 1] or NaN -> NaN (log of a negative), as torch.
BARACUDA_HD inline float logit_short(float z) {
  const float y = fmaf(2.0f, z, -1.0f);
  const float near_half = two_atanh(y);
  const float far = (lg2_subnormal_safe(z) - lg2_fast(1.0f - z)) * kLn2;
  return fabsf(y) < 0.333333343f ? near_half : far;
}

/// Operands the MUFU reciprocal cannot take (a larger magnitude that is 0, subnormal, above 2^126,
/// inf or NaN): atan2f, torch's function.
BARACUDA_HD_COLD inline float atan2_tail(float a, float b) { return atan2f(a, b); }

/// atan2(a, b): r = min(|a|,|b|) / max(|a|,|b|) in [0, 1] with the MUFU reciprocal, atan(r) =
/// r (1 + r^2 q(r^2)), q degree 7 (relative error 5e-8), then the octant: pi/2 - t if |a| > |b|,
/// pi - t if b < 0, the sign of a (so atan2(+-0, b) = +-0 or +-pi as torch). atan2f's IEEE division
/// and its special-case tests are the cost this removes. A NaN a leaves r NaN; a NaN b fails the
/// range test (comparisons with NaN are false, so NaN never ends up in mn with a finite mx).
BARACUDA_HD inline float atan2_short(float a, float b) {
  const float aa = fabsf(a), ab = fabsf(b);
  const bool steep = aa > ab;
  const float mx = steep ? aa : ab;
  const float mn = steep ? ab : aa;
  if (!(mx >= 0x1p-126f && mx <= 0x1p126f)) return atan2_tail(a, b);
  const float r = mn * rcp_fast(mx);
  const float s = r * r;
  const float q = horner(s, {3.140547517e-03f, -1.722846697e-02f, 4.457788061e-02f, -7.664819779e-02f, 1.071718051e-01f,
                             -1.422356187e-01f, 1.999523695e-01f, -3.333321207e-01f});
  float t = fmaf(r * s, q, r);
  t = steep ? 1.57079632679489661923f - t : t;
  t = b < 0.0f ? 3.14159265358979323846f - t : t;
  return copysignf(t, a);
}

/// 1/x for backward formulas: the MUFU reciprocal (1 ulp) over the whole range, with |x| scaled by
/// 2^-+64 where the .ftz input or result would flush (|x| < 2^-126: 1/x can still be finite;
/// |x| > 2^126: 1/x is subnormal). The scaling is exact; 0, inf and NaN pass as 1/x. No call, no
/// division (a noinline IEEE tail made the vectorised backward kernels spill around the call).
BARACUDA_HD inline float rcp_short(float x) {
  const float ax = fabsf(x);
  const float sc = ax > 0x1p126f ? 0x1p-64f : (ax < 0x1p-126f ? 0x1p64f : 1.0f);
  return rcp_fast(x * sc) * sc;
}

}  // namespace baracuda::kern::short_math
