// The kernels of the quantization family, templated on the floating-point storage type T and the
// quantized storage Q (int8_t, uint8_t, PackedS4, PackedU4, __nv_fp8_e4m3, __nv_fp8_e5m2), and
// explicitly instantiated per T in quant_<dtype>.cu:
//
//  - elem_kernel<T, Q, op, mode>: quantize / dequantize / fake_quantize, forward and backward, in
//    three variants (ElemMode): 16-byte units whose elements share one scale (quantize and
//    dequantize forward: the scale index once per unit from e0 / run, then the whole unit at once),
//    16-byte units with each element's scale from its position (o, a, i) around the axis, and a
//    strided variant for any floating-point strides. Index arithmetic divides by launch constants
//    with multiply-high (QuantDivisor): a 64-bit `/` is a ~70-instruction subroutine.
//  - rows_kernel (quant_rows.cuh, its own translation units): dynamic per-token and per-group
//    quantization, symmetric or asymmetric, one read of x.
//  - amax_kernel / finalize_kernel: per-tensor amax in two stages (partials per CTA, one CTA
//    reduces them), the scale from it (current scaling) or from the amax history (delayed), and
//    the history shift.
//  - learn_bw_kernel / learn_sum_kernel: the LSQ backward with a fixed partition of each
//    channel's (or group's) elements into splits (partial sums in the workspace), then a
//    fixed-order sum.
//
// Bit-exactness notes (see quant.hpp for the formulas): the fast paths compute torch's results
// exactly, not approximately: integer quantize rounds x * (1 / s) with a magic-number FMA and checks
// its distance to a tie (quant_magic; the 16-byte units: two FMAs with reciprocals bracketing 1 / s,
// QParams::inv_lo), falling back to the double division; fp8 quantize gets the correctly rounded
// quotient from the reciprocal (fp8_quot), or where that cannot change the code, the code of
// bracketing products (quant_unit); integer dequantize multiplies in
// float where the double product would round to the same float (dq_f32). The other arithmetic
// mirrors ATen's kernels operation by operation, including where nvcc contracts a multiply-add into
// an FMA (fake_quantize per-channel's `x * inv_scale + zero_point`), and uses the same float ->
// int64 conversion (cvt.rzi: NaN -> 0, saturating) that torch's kernels compile to.
#pragma once
#include <cuda_runtime.h>

#include <cuda/std/limits>
#include <cuda/std/type_traits>

#include "kernels/common/dtype_traits.cuh"
#include "kernels/common/words.cuh"
#include "ops/quant/quant_launch.hpp"

namespace baracuda::kern::quant {

using detail::QuantElemOp;
using detail::QuantLaunch;
using detail::QuantZpMode;

// ---- the quantized side ----------------------------------------------------------------------------
struct PackedS4 {};
struct PackedU4 {};

template <class Q>
inline constexpr bool kPacked = cuda::std::is_same_v<Q, PackedS4> || cuda::std::is_same_v<Q, PackedU4>;
template <class Q>
inline constexpr bool kFp8 = cuda::std::is_same_v<Q, __nv_fp8_e4m3> || cuda::std::is_same_v<Q, __nv_fp8_e5m2>;

// ---- memory words ----------------------------------------------------------------------------------
/// Loads / stores N bytes as one access (the address is N-aligned).
template <int N>
__device__ __forceinline__ void load_bytes(const void* src, void* dst) {
  using W = typename Word<N>::type;
  const W w = *reinterpret_cast<const W*>(src);
  memcpy(dst, &w, N);
}
template <int N>
__device__ __forceinline__ void store_bytes(void* dst, const void* src) {
  // 8 bytes as two 32-bit registers: through a 64-bit integer, nvcc rebuilt the codes of a unit
  // byte by byte (12 shifts and permutes a unit).
  using W = cuda::std::conditional_t<N == 8, uint2, typename Word<N>::type>;
  W w;
  memcpy(&w, src, N);
  *reinterpret_cast<W*>(dst) = w;
}

// ---- index arithmetic -----------------------------------------------------------------------------
/// n / d for a launch-constant divisor (QuantDivisor): a multiply-high and shifts. !wide: n < 2^32.
__device__ __forceinline__ uint64_t div_of(uint64_t n, const detail::QuantDivisor& d, bool wide) {
  if (!wide) {
    const uint32_t n32 = static_cast<uint32_t>(n);
    return (static_cast<uint64_t>(__umulhi(n32, d.m32)) + n32) >> d.s;
  }
  const uint64_t t = __umul64hi(n, d.m64);
  return (t + ((n - t) >> d.s1)) >> d.s2;
}

/// Position of element e around the axis, with the group split of the axis coordinate: found
/// with three multiply-high divisions, then stepped element by element without any.
struct Pos {
  int64_t o, a, i, ag, ar;  ///< outer, axis, inner, axis / group, axis % group
  __device__ __forceinline__ void init(int64_t e, const QuantLaunch& p) {
    const int64_t f = static_cast<int64_t>(div_of(e, p.div_inner, p.wide));
    i = e - f * p.inner;
    o = static_cast<int64_t>(div_of(f, p.div_axis, p.wide));
    a = f - o * p.axis_len;
    ag = static_cast<int64_t>(div_of(a, p.div_group, p.wide));
    ar = a - ag * p.group;
  }
  __device__ __forceinline__ void step(const QuantLaunch& p) {
    if (++i < p.inner) return;
    i = 0;
    ++a;
    if (++ar == p.group) {
      ar = 0;
      ++ag;
    }
    if (a < p.axis_len) return;
    a = ag = ar = 0;
    ++o;
  }
  __device__ __forceinline__ int64_t scale_index(const QuantLaunch& p) const {
    return o * p.s_outer + ag * p.s_axis + i * p.s_inner;
  }
};

/// The scale index shared by a unit starting at e0 (p.unit_uniform): e0 / run, cycled over the
/// axis for per-channel.
__device__ __forceinline__ int64_t unit_scale_index(const QuantLaunch& p, int64_t e0) {
  uint64_t r = div_of(e0, p.div_run, p.wide);
  if (p.run_mod) r -= div_of(r, p.div_axis, p.wide) * static_cast<uint64_t>(p.axis_len);
  return static_cast<int64_t>(r);
}

/// Element offsets of every floating-point slot for logical index e (strided variant).
__device__ __forceinline__ void fp_offsets(const QuantLaunch& p, int64_t e, int64_t (&off)[detail::kQuantSlots]) {
#pragma unroll
  for (int s = 0; s < detail::kQuantSlots; ++s) off[s] = 0;
  for (int d = p.ndim - 1; d >= 0; --d) {
    const int64_t q = static_cast<int64_t>(div_of(e, p.div_size[d], p.wide));
    const int64_t c = e - q * p.size[d];
    e = q;
#pragma unroll
    for (int s = 0; s < detail::kQuantSlots; ++s) off[s] += c * p.stride[s][d];
  }
}

// ---- numerics --------------------------------------------------------------------------------------
/// max that propagates NaN (torch.amax), for |x| >= 0.
__device__ __forceinline__ float nanmax(float a, float b) { return (a != a || a > b) ? a : b; }

/// The dynamic scale rule: amax * (1 / qmax), or `fallback` when amax is 0, NaN or infinite. A
/// product with the float reciprocal, not a division: that is what torch's `amax / 127` computes
/// (ATen divides a tensor by a CPU scalar as a * (1 / b) in opmath), and the H100 tests found the
/// true quotient 1 ulp off it in a few rows.
__device__ __forceinline__ float scale_of(float amax, float qmax, float fallback) {
  const float inv = 1.0f / qmax;
  return (amax > 0.f && amax <= cuda::std::numeric_limits<float>::max()) ? amax * inv : fallback;
}

/// max |x| over a thread's elements, on the bit patterns: with the sign cleared, IEEE magnitudes
/// order like unsigned integers and every NaN sits above infinity, so an unsigned max is a
/// NaN-propagating max of |x| (which NaN comes out does not matter: torch only says NaN). 16-bit
/// types take two lanes a word (one __vmaxu2 per two elements).
template <class T>
struct AbsMax {
  static constexpr bool kHalfWords = sizeof(T) == 2;
  using U = cuda::std::conditional_t<sizeof(T) == 8, unsigned long long, uint32_t>;
  U acc = 0;
  /// Whole 32-bit words of storage (two 16-bit elements, one f32, half an f64) holding only
  /// elements to count (or zeros).
  template <int W>
  __device__ __forceinline__ void add_words(const uint32_t (&w)[W]) {
    if constexpr (sizeof(T) == 8) {
#pragma unroll
      for (int j = 0; j + 1 < W; j += 2)
        acc = max(acc, ((static_cast<U>(w[j + 1]) << 32) | w[j]) & 0x7fffffffffffffffull);
    } else {
#pragma unroll
      for (int j = 0; j < W; ++j) {
        if constexpr (kHalfWords)
          acc = __vmaxu2(acc, w[j] & 0x7fff7fffu);
        else
          acc = max(acc, w[j] & 0x7fffffffu);
      }
    }
  }
  __device__ __forceinline__ void add_one(T v) {
    if constexpr (sizeof(T) == 8) {
      acc = max(acc, static_cast<U>(__double_as_longlong(v)) & 0x7fffffffffffffffull);
    } else if constexpr (kHalfWords) {
      uint16_t h;
      memcpy(&h, &v, 2);
      acc = __vmaxu2(acc, static_cast<uint32_t>(h & 0x7fffu));
    } else {
      acc = max(acc, static_cast<uint32_t>(__float_as_uint(v)) & 0x7fffffffu);
    }
  }
  /// As float32 (f64: the double maximum rounded, as rounding each element first would give).
  __device__ __forceinline__ float value() const {
    if constexpr (sizeof(T) == 8) {
      return static_cast<float>(__longlong_as_double(static_cast<long long>(acc)));
    } else if constexpr (kHalfWords) {
      const uint16_t m = static_cast<uint16_t>(max(acc & 0xffffu, acc >> 16));
      T v;
      memcpy(&v, &m, 2);
      return static_cast<float>(load_as_opmath(v));
    } else {
      return __uint_as_float(acc);
    }
  }
};

/// The scale and zero point in the forms the formulas use.
struct QParams {
  float s = 1.f;          ///< float(scale)
  bool host = false;      ///< the descriptor's double scale (sd_of), not s
  float inv = 1.f;        ///< 1.0f / s (torch's inv_scale; the fast quotients' reciprocal)
  int64_t zi = 0;         ///< integer zero point
  float zf = 0.f;         ///< float zero point (float32 mode; otherwise float(zi))
  float invm = 0.f;       ///< |inv| * 2^-21, the fast integer quantizer's tie margin (+inf: never fast)
  float cz = 0.f;         ///< 1.5 * 2^23 + zp (quant_magic)
  bool dq_f32 = false;    ///< integer dequantize may multiply in float (float scale, small zero point)
  bool div_fast = false;  ///< fp8_quot's corrected reciprocal is exact for this scale
  /// inv two ulps below and above (in magnitude): x * inv_lo and x * inv_hi bracket x / s strictly
  /// for every x != 0 (also for a host double scale: float(s) and RN(1 / float(s)) are within 1.5
  /// ulps of 1 / s together). inv_exact: s is a power of two, so x * inv is x / s exactly.
  float inv_lo = 1.f, inv_hi = 1.f;
  bool inv_exact = false;
  /// fp8: inv is not within 4 ulps of a number of 12 significant bits. Scales such as 0.01 or 1/3
  /// put bf16 quotients within 2^-22 of an fp8 rounding boundary in ~1% of the elements (most
  /// warps then need the corrected quotient anyway); these take it directly.
  bool bracket = false;
  /// Dynamic symmetric rows: s = amax / q_scale_max > 0 from a finite amax, so every element has
  /// |x * inv| <= q_scale_max (1 + 2^-21), and [q_min, q_max] holds [-q_scale_max, q_scale_max]:
  /// rint_code_bounded (no range check, no scale sign, no clamp).
  bool bounded = false;
};

/// The scale in double, as torch's quantizer divides by it: the descriptor's double for a host
/// scale, the float widened otherwise.
__device__ __forceinline__ double sd_of(const QuantLaunch& p, const QParams& q) {
  return q.host ? p.host_scale : static_cast<double>(q.s);
}

/// The derived fields of q from s, host and zi. Computed per scale change (the vectorized
/// kernels change scale every unit for per-channel and per-group), so kept short: the double
/// scale is not kept (sd_of), and what an op does not use is dead code.
__device__ __forceinline__ void finish_qparams(const QuantLaunch& p, QParams& q) {
  q.inv = 1.0f / q.s;
  const bool zp_small = q.zi > -(int64_t{1} << 20) && q.zi < (int64_t{1} << 20);
  const float ai = fabsf(q.inv);
  q.invm =
      (zp_small && ai >= 0x1p-100f && ai <= 0x1p100f) ? ai * 0x1p-21f : cuda::std::numeric_limits<float>::infinity();
  q.cz = 0x1.8p23f + static_cast<float>(zp_small ? q.zi : 0);
  // (q - zp) * s: |q - zp| < 2^21 and a float scale make the double product exact, so rounding
  // it to float equals the float product's single rounding.
  q.dq_f32 = zp_small && (!q.host || static_cast<double>(q.s) == p.host_scale);
  // fp8_quot: residuals stay normal and the quotient finite for every fp8-relevant x (see there).
  const float as = fabsf(q.s);
  q.div_fast = as >= 0x1p-60f && as <= 0x1p60f;
  const uint32_t ib = __float_as_uint(q.inv);
  q.inv_lo = __uint_as_float(ib - 2u);
  q.inv_hi = __uint_as_float(ib + 2u);
  q.inv_exact = (__float_as_uint(q.s) & 0x7fffffu) == 0u;  // with div_fast: a normal power of two
  const uint32_t m = ib & 0x7ffu;  // the 11 mantissa bits below a 12-bit significand
  q.bracket = m > 4u && m < 0x7fcu;
}

/// A unit's scale and zero point as stored (loaded with the unit's inputs, turned into QParams
/// only when the scale index changes).
struct RawQ {
  float s = 1.f;
  uint32_t z = 0;  ///< int32 or float32 bits, per zp_mode
};

__device__ __forceinline__ RawQ load_raw(const QuantLaunch& p, int64_t sidx) {
  RawQ r;
  if (p.scale) r.s = __ldg(p.scale + sidx);
  if (p.zero_point && p.zp_mode != QuantZpMode::none) r.z = __ldg(static_cast<const uint32_t*>(p.zero_point) + sidx);
  return r;
}

/// kFloatZp: the op may have float32 zero points (fake_quantize, learnable); quantize and
/// dequantize only have none or int32, and skip the other cases. kDevice: the scale is a device
/// tensor's (the per-unit reloads: a host scale is per-tensor, set once).
template <bool kFloatZp = true, bool kDevice = false>
__device__ __forceinline__ QParams make_qparams(const QuantLaunch& p, const RawQ& r) {
  QParams q;
  q.host = !kDevice && p.scale == nullptr;
  q.s = q.host ? static_cast<float>(p.host_scale) : r.s;
  if (!kFloatZp) {
    if (p.zp_mode == QuantZpMode::int32) {
      q.zi = kDevice || p.zero_point ? static_cast<int64_t>(static_cast<int32_t>(r.z)) : p.host_zero_point;
      q.zf = static_cast<float>(q.zi);
    }
    finish_qparams(p, q);
    return q;
  }
  switch (p.zp_mode) {
    case QuantZpMode::none:
      break;
    case QuantZpMode::int32:
      q.zi = p.zero_point ? static_cast<int64_t>(static_cast<int32_t>(r.z)) : p.host_zero_point;
      q.zf = static_cast<float>(q.zi);
      break;
    case QuantZpMode::float32:
      q.zf = __uint_as_float(r.z);
      q.zi = static_cast<int64_t>(q.zf);
      break;
    case QuantZpMode::round_clamp: {  // torch: zero_point.round().clamp_(q_min, q_max)
      float z = rintf(__uint_as_float(r.z));
      const float lo = static_cast<float>(p.q_min), hi = static_cast<float>(p.q_max);
      z = z < lo ? lo : z;
      z = hi < z ? hi : z;
      q.zf = z;
      q.zi = static_cast<int64_t>(z);
      break;
    }
    case QuantZpMode::half_up_clamp: {  // torch: int64(min(max(zp + 0.5f, q_min), q_max))
      float z = __uint_as_float(r.z) + 0.5f;
      const float lo = static_cast<float>(p.q_min), hi = static_cast<float>(p.q_max);
      z = (z < lo) ? lo : z;
      z = (hi < z) ? hi : z;
      q.zi = static_cast<int64_t>(z);
      q.zf = static_cast<float>(q.zi);
      break;
    }
  }
  finish_qparams(p, q);
  return q;
}

template <bool kFloatZp = true>
__device__ __forceinline__ QParams load_qparams(const QuantLaunch& p, int64_t sidx) {
  return make_qparams<kFloatZp>(p, load_raw(p, sidx));
}

/// The double division, out of line: it runs near ties only, and inlined into every element of a
/// register-resident row it costs the fast path registers. (static: one copy per translation unit.)
static __device__ __noinline__ int64_t quant_int_slow(float xf, double s, int64_t zp) {
  return static_cast<int64_t>(rint(static_cast<double>(xf) / s) + static_cast<double>(zp));
}

/// torch's integer quantizer rint(double(x) / s) + zp (ATen quantize_tensor_per_*_affine_cuda),
/// fast: y = fma(x, inv, 1.5 * 2^23 + zp) rounds the exact product x * inv to an integer k and
/// holds 1.5 * 2^23 + zp + k, i.e. its bits are 0x4B400000 + k + zp (the code sits in the low
/// mantissa bits: no float -> int conversion). k is rint(x / s) whenever
/// |x * inv - k| + 2^-21 |x * inv| < 0.5, which one more FMA checks: x * inv is within
/// (2^-23 + 2^-47) |x * inv| of x / s (inv = RN(1 / float(s)); float(s) within 2^-24 of a double
/// host scale) and the computed distance within 2^-26 of the exact one, so x / s is then strictly
/// nearer k than any other integer (for |x * inv| < 0.04, k = 0 and |x / s| < 0.5 anyway).
///
/// Otherwise x / s is near the half-integer h = k +- 0.5 and, for a float scale (not a host
/// double) and |k| < 2^20, the side of h it lies on is decided exactly in float: h * s = p + e
/// exactly (p = RN(h s), e = fma(h, s, -p): h has <= 22 bits), x - p is exact (Sterbenz: x is
/// within a few ulps of p), so (x - p) - e has the sign of x - h s (zero only at a true tie,
/// which rounds half to even as rint does). That is torch's double division too: for float x and
/// s, x / s is never within a double's rounding of a tie without being one. Dynamic per-token
/// bf16 rows hit this case often (x and amax have 8-bit mantissas, so x * 127 / amax lands on or
/// near half-integers in ~0.4% of elements, 0.2% exact ties): see quant_unit's kTieRule.
/// Left for the caller's double division (`bad`): NaN, inf, |x * inv| >= 2^20, a host double
/// scale near a tie, or a scale / zero point outside the fast range (invm = inf).
/// quant_magic's near-tie case (see there). Only the out-of-line slow paths use it: inlined at
/// every element of a register-resident row (a branch per element) it made the common case slower.
__device__ __forceinline__ float quant_tie(float xf, float s, float cz, float k, float d) {
  const float h = k + copysignf(0.5f, d);
  const float pr = h * s;
  const float e = fmaf(h, s, -pr);
  const float r = (xf - pr) - e;  // the sign of x - h s
  float kk;
  if (r == 0.f) {
    const float lo = h - 0.5f;  // a true tie: the even neighbour
    kk = (static_cast<int>(lo) & 1) == 0 ? lo : h + 0.5f;
  } else {
    kk = (r > 0.f) == (s > 0.f) ? h + 0.5f : h - 0.5f;
  }
  return cz + kk;
}

/// rint(x / s) exactly (torch's rint(double(x) / s) for a float s), branch-free, for kTieRule:
/// q = x * inv is within 2^-22 relative of x / s, so for |q| < 2^20 (else `bad`) the rounded
/// quotient is floor(q) or floor(q) + 1, split by the half-integer h = floor(q) + 0.5. One FMA
/// decides the side exactly: h s - x is computed exactly and rounded once (h has <= 21 bits, s 24),
/// so its sign is that of the exact difference and it is zero only at a true tie (no underflow to
/// zero: |s| >= 2^-100 (invm finite) keeps every nonzero difference above 2^-149), where rintf(h)
/// rounds half to even as rint does. About 10 instructions an element against quant_tie's ~20 and
/// its float -> int conversion. Checked on the host against the double division over every bf16 x
/// for ~8000 scales (amax / 127, / 7, / 255 of random bf16 amax, random scales 2^-100..2^100,
/// negative scales) and f32 x within 3 ulps of ties: 0 mismatches in 3.9e8.
/// The bounded rows (QParams::bounded) take rint_code_bounded instead.
__device__ __forceinline__ float rint_quot(float xf, const QParams& q, bool& bad) {
  const float qf = xf * q.inv;
  bad |= !(fabsf(qf) < 0x1p20f);  // NaN, inf, huge quotients: the double division
  const float h = floorf(qf) + 0.5f;
  const float t = fmaf(h, q.s, -xf);  // sign of h s - x, exact
  const bool up = q.s > 0.f ? t < 0.f : t > 0.f;
  return rintf(h + (t == 0.f ? 0.f : (up ? 0.5f : -0.5f)));
}

/// kTieRule's bounded rows (QParams::bounded: s = amax / q_max > 0 from a finite amax, zero point 0,
/// |x * inv| <= q_max (1 + 2^-21), and [q_min, q_max] holds every code, so no clamp): the code as the
/// float 1.5 * 2^23 + rint(x / s) with FMA-pipe arithmetic only (rint_quot's two FRND run on the
/// quarter-rate conversion pipe). h = rint(x * inv - 1/2) + 1/2 (the magic number) is a half-integer
/// within 1 of x / s, so rint(x / s) is h - 1/2 or h + 1/2, on the side of h where x / s lies: the
/// sign of t = h s - x, exact as in rint_quot; at t == 0 (a true tie) adding 1.5 * 2^23 (even) rounds
/// h half to even, as rint does.
__device__ __forceinline__ float rint_code_bounded(float xf, const QParams& q) {
  constexpr float kM = 0x1.8p23f;
  const float h = ((fmaf(xf, q.inv, -0.5f) + kM) - kM) + 0.5f;
  const float t = fmaf(h, q.s, -xf);
  const float a = t != 0.f ? copysignf(0.5f, t) : 0.f;
  return (h - a) + kM;
}

__device__ __forceinline__ float quant_magic(float xf, const QParams& q, bool& bad) {
  const float y = fmaf(xf, q.inv, q.cz);
  const float k = y - q.cz;
  const float d = fmaf(xf, q.inv, -k);
  bad |= !(fmaf(fabsf(xf), q.invm, fabsf(d)) < 0.5f);
  return y;
}

/// quant_magic that also settles the near-tie case in float (quant_tie); `bad` is left only for
/// the double division. For the slow paths (a whole unit redone when one of its elements was
/// flagged, and the scalar paths).
__device__ __forceinline__ float quant_magic_exact(float xf, const QParams& q, bool& bad) {
  bool flagged = false;
  const float y = quant_magic(xf, q, flagged);
  if (!flagged) return y;
  const float k = y - q.cz;
  if (!q.host && fabsf(k) < 0x1p20f && q.invm <= cuda::std::numeric_limits<float>::max())
    return quant_tie(xf, q.s, q.cz, k, fmaf(xf, q.inv, -k));
  bad = true;
  return y;
}

/// The clamped code of quant_magic's y as an int (its bits minus those of 1.5 * 2^23).
__device__ __forceinline__ int magic_code(float y, float ylo, float yhi) {
  return __float_as_int(fminf(fmaxf(y, ylo), yhi)) - 0x4B400000;
}
/// clamp(rint(x / s) + zp, lo, hi), exactly torch's, for one element.
__device__ __forceinline__ int quant_int_one(float xf, const QParams& q, const QuantLaunch& p, float ylo, float yhi) {
  bool bad = false;
  const float y = quant_magic_exact(xf, q, bad);
  if (!bad) return magic_code(y, ylo, yhi);
  const int64_t v = quant_int_slow(xf, sd_of(p, q), q.zi);
  return static_cast<int>(v < p.q_min ? p.q_min : (v > p.q_max ? p.q_max : v));
}

/// x / s rounded to float, as the fp8 quantizer needs it (torch: (x.float() / s)), without a
/// division: t = x * inv, then two corrections t' = t + (x - t s) inv. The first makes t faithful
/// (within an ulp of x / s); from a faithful quotient and inv = RN(1 / s), the second gives the
/// correctly rounded x / s (Markstein's theorem; the residuals are exact FMAs). That needs normal
/// residuals: with 2^-60 <= |s| <= 2^60 (div_fast) every x whose quotient can reach an fp8 value
/// (|x / s| > 2^-17) has |x| > 2^-77, and smaller quotients only need their sign (copied from t:
/// the corrections of a signed zero may drop it). |t| >= 2^100 (inf, or saturating anyway) and NaN
/// keep t. Otherwise the division.
__device__ __forceinline__ float fp8_quot_fast(float xf, const QParams& q) {
  const float t = xf * q.inv;
  const float t1 = fmaf(fmaf(-t, q.s, xf), q.inv, t);
  const float t2 = fmaf(fmaf(-t1, q.s, xf), q.inv, t1);
  return fabsf(t) < 0x1p100f ? copysignf(t2, t) : t;
}
__device__ __forceinline__ float fp8_quot(float xf, const QParams& q) {
  return q.div_fast ? fp8_quot_fast(xf, q) : xf / q.s;
}

template <class Q>
inline constexpr __nv_fp8_interpretation_t kFp8Kind = cuda::std::is_same_v<Q, __nv_fp8_e5m2> ? __NV_E5M2 : __NV_E4M3;

// ---- packing codes ---------------------------------------------------------------------------------
/// Bytes a unit of N elements stores as Q, and the 32-bit words holding them.
template <class Q, int N>
inline constexpr int kCodeBytes = kPacked<Q> ? N / 2 : N;
template <class Q, int N>
inline constexpr int kCodeWords = (kCodeBytes<Q, N> + 3) / 4;

/// The low bytes of words c[0..B) into bytes 0..B of w (byte permutes, no shifts or masks).
template <int B>
__device__ __forceinline__ void pack_low_bytes(const uint32_t (&c)[B], uint32_t (&w)[(B + 3) / 4]) {
#pragma unroll
  for (int i = 0; i < (B + 3) / 4; ++i) {
    const uint32_t b0 = c[4 * i];
    const uint32_t b1 = 4 * i + 1 < B ? c[4 * i + 1] : 0u;
    const uint32_t lo = __byte_perm(b0, b1, 0x0040);
    if (4 * i + 2 < B) {
      const uint32_t b3 = 4 * i + 3 < B ? c[4 * i + 3] : 0u;
      w[i] = __byte_perm(lo, __byte_perm(c[4 * i + 2], b3, 0x0040), 0x5410);
    } else {
      w[i] = lo & 0xffffu;
    }
  }
}

/// Codes (the low bits of c[k], element k) into Q's storage: a byte each, or two nibbles a byte
/// with the even element low.
template <class Q, int N>
__device__ __forceinline__ void pack_codes(const uint32_t (&c)[N], uint32_t (&w)[kCodeWords<Q, N>]) {
  if constexpr (kPacked<Q>) {
    uint32_t b[N / 2];
#pragma unroll
    for (int j = 0; j < N / 2; ++j) b[j] = (c[2 * j] & 0xfu) | ((c[2 * j + 1] & 0xfu) << 4);
    pack_low_bytes<N / 2>(b, w);
  } else {
    pack_low_bytes<N>(c, w);
  }
}

/// Element k of a unit's quantized bytes, as a float (integers exactly).
template <class Q>
__device__ __forceinline__ float q_decode(const uint8_t* qb, int k) {
  if constexpr (kPacked<Q>) {
    const int b = qb[k >> 1];
    const int nib = (k & 1) ? (b >> 4) : (b & 15);
    if constexpr (cuda::std::is_same_v<Q, PackedS4>)
      return static_cast<float>((nib ^ 8) - 8);
    else
      return static_cast<float>(nib);
  } else if constexpr (kFp8<Q>) {
    Q v;
    v.__x = qb[k];
    return static_cast<float>(v);
  } else if constexpr (cuda::std::is_same_v<Q, int8_t>) {
    return static_cast<float>(static_cast<int8_t>(qb[k]));
  } else {
    return static_cast<float>(qb[k]);
  }
}

/// Stores integer v (already clamped to the dtype's range) as element k of a unit's bytes. Packed:
/// even k writes the low nibble (and clears the high one), odd k the high nibble.
template <class Q>
__device__ __forceinline__ void q_encode(uint8_t* qb, int k, int64_t v) {
  if constexpr (kPacked<Q>) {
    const uint8_t nib = static_cast<uint8_t>(v & 15);
    if (k & 1)
      qb[k >> 1] = static_cast<uint8_t>(qb[k >> 1] | (nib << 4));
    else
      qb[k >> 1] = nib;
  } else {
    qb[k] = static_cast<uint8_t>(v);
  }
}

template <class T>
using math_t = cuda::std::conditional_t<cuda::std::is_same_v<T, double>, double, float>;

/// Storage -> float32 (f64 rounds: torch's quantizers take float32), or -> the op's math type.
template <class T>
__device__ __forceinline__ float to_f32(T v) {
  return static_cast<float>(load_as_opmath(v));
}
template <class T>
__device__ __forceinline__ math_t<T> to_m(T v) {
  return static_cast<math_t<T>>(load_as_opmath(v));
}

// ---- raw storage words -----------------------------------------------------------------------------
/// The 32-bit words holding N elements of T. Units and rows keep their inputs as these words and
/// decode an element where it is used: an array of 16-bit T would be unpacked into a register per
/// element at the load (twice the registers).
template <class T, int N>
inline constexpr int kRawWords = static_cast<int>((N * sizeof(T) + 3) / 4);

template <class T, int W>
__device__ __forceinline__ T raw_get(const uint32_t (&r)[W], int k) {
  T v;
  memcpy(&v, reinterpret_cast<const char*>(r) + k * sizeof(T), sizeof(T));
  return v;
}
template <class T, int W>
__device__ __forceinline__ void raw_set(uint32_t (&r)[W], int k, T v) {
  memcpy(reinterpret_cast<char*>(r) + k * sizeof(T), &v, sizeof(T));
}
/// Element k as float32 (f64 rounds, as to_f32): bf16 is one shift or mask, f16 one conversion.
template <class T, int W>
__device__ __forceinline__ float raw_f32(const uint32_t (&r)[W], int k) {
  if constexpr (cuda::std::is_same_v<T, __nv_bfloat16>) {
    const uint32_t w = r[k / 2];
    return __uint_as_float((k & 1) ? (w & 0xffff0000u) : (w << 16));
  } else if constexpr (cuda::std::is_same_v<T, __half>) {
    __half2 h;
    memcpy(&h, &r[k / 2], 4);
    return (k & 1) ? __high2float(h) : __low2float(h);
  } else if constexpr (cuda::std::is_same_v<T, float>) {
    return __uint_as_float(r[k]);
  } else {
    return to_f32(raw_get<T>(r, k));
  }
}

// ---- one unit with one scale (the vectorized kernels' fast paths) ----------------------------------
/// Quantizes N elements sharing q into Q's storage words. Integer codes come from quant_magic and
/// a byte permute (about 10 instructions an element); if any element needs the exact division,
/// the unit is redone element by element. fp8: fp8_quot and the hardware's paired saturating
/// conversion (cvt.rn.satfinite.e4m3x2 / e5m2x2: clamp to +-max and RN, NaN kept, as
/// (x / s).clamp(-M, M).to(fp8) does).
/// The units' slow paths, out of line (they run near ties, for NaN / inf / huge quotients and for
/// extreme scales; inlined, they cost every kernel registers). Arguments by value: a noinline
/// function must not take the kernel's parameter block by reference (that would copy it to local
/// memory).
template <class T, class Q, int N>
static __device__ __noinline__ uint2 quant_unit_slow(uint4 raw, float s, float inv, float invm, float cz, double sd,
                                                     int zi, int lo, int hi) {
  uint32_t a[kRawWords<T, N>];
  memcpy(a, &raw, sizeof(a));
  uint8_t b[kCodeBytes<Q, N>];
  if constexpr (kFp8<Q>) {
#pragma unroll
    for (int k = 0; k < N; ++k) b[k] = convert<Q>(raw_f32<T>(a, k) / s, true).__x;
  } else {
    QParams q;
    q.inv = inv, q.invm = invm, q.cz = cz, q.s = s;
    q.host = static_cast<double>(s) != sd;  // the float tie rule needs the scale the division uses
    const float ylo = 0x1.8p23f + static_cast<float>(lo), yhi = 0x1.8p23f + static_cast<float>(hi);
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const float xf = raw_f32<T>(a, k);
      bool bad = false;
      const float y = quant_magic_exact(xf, q, bad);
      int v;
      if (!bad) {
        v = magic_code(y, ylo, yhi);
      } else {
        const int64_t w = quant_int_slow(xf, sd, zi);
        v = static_cast<int>(w < lo ? lo : (w > hi ? hi : w));
      }
      q_encode<Q>(b, k, v);
    }
  }
  uint2 r = make_uint2(0, 0);
  memcpy(&r, b, sizeof(b));
  return r;
}

/// kTieRule (dynamic per-token rows): every element takes rint_quot's exact float rule,
/// branch-free (quant_tie's before it, ~twice the instructions); only non-finite or huge elements (|x / s| >= 2^20)
/// branch to the double division. Why: the scale amax / q_max puts bf16 / f16 elements near half-integers in ~0.4% of
/// elements, so some lane of a warp needs the slow path in about half of the units. Measured on H100
/// ([16384, 4096] bf16 -> int8, random normal rows): the per-unit slow path ran at 52% of copy
/// bandwidth (72% -> 92% for data without near-ties), the float rule taken only in the slow path
/// at 56%, branch-free at 62% whatever the data (more instructions, no divergence). The bounded
/// rows (every symmetric dynamic row with a finite nonzero amax) take rint_code_bounded instead,
/// without FRND or a clamp: H200, [16384, 4096] bf16 -> int8, per-group G = 128 73.5 -> 65.0-66.5 us,
/// per-token 69.6 -> 61.4-62.1 us, identical codes and scales (h200-experiments-2026-11-28j.md).
template <class T, class Q, int N, bool kTieRule = false>
__device__ __forceinline__ void quant_unit(const uint32_t (&a)[kRawWords<T, N>], const QParams& q, float ylo, float yhi,
                                           const QuantLaunch& p, uint32_t (&w)[kCodeWords<Q, N>]) {
  static_assert(kRawWords<T, N> <= 4 && kCodeWords<Q, N> <= 2, "a unit is 16 bytes");
  bool bad = false;
  if constexpr (kFp8<Q>) {
    static_assert(N % 2 == 0, "fp8 units convert pairs");
    bad = !q.div_fast;
    if (!bad) {
      uint32_t h[N / 2];
      // Three ways to torch's code of RN(x / s), cheapest first. A power-of-two scale: x * inv is
      // x / s exactly. Otherwise the codes of x * inv_lo and x * inv_hi, which bracket x / s: RN
      // to float and the saturating fp8 rounding are monotonic, so where the two codes agree they
      // are the code of RN(x / s). They differ only where an fp8 rounding boundary lies within
      // ~2^-22 of x / s: ~1e-6 of bf16 elements for a scale such as amax / 448, but ~1% for a
      // "round" one (0.01, 1/3: QParams::bracket is false), which takes the corrected quotient
      // directly. H200, [16384, 4096] bf16 per-tensor: 1 or 2^-4 54 us, 0.011928 55 us, 0.01 59 us
      // (the corrected quotient everywhere: 59 / 58 us).
      bool done = false;
      if (q.inv_exact) {
#pragma unroll
        for (int j = 0; j < N / 2; ++j)
          h[j] = __nv_cvt_float2_to_fp8x2(make_float2(raw_f32<T>(a, 2 * j) * q.inv, raw_f32<T>(a, 2 * j + 1) * q.inv),
                                          __NV_SATFINITE, kFp8Kind<Q>);
        done = true;
      } else if (q.bracket) {
        uint32_t differ = 0;
#pragma unroll
        for (int j = 0; j < N / 2; ++j) {
          const float x0 = raw_f32<T>(a, 2 * j), x1 = raw_f32<T>(a, 2 * j + 1);
          h[j] = __nv_cvt_float2_to_fp8x2(make_float2(x0 * q.inv_lo, x1 * q.inv_lo), __NV_SATFINITE, kFp8Kind<Q>);
          differ |= h[j] ^ __nv_cvt_float2_to_fp8x2(make_float2(x0 * q.inv_hi, x1 * q.inv_hi), __NV_SATFINITE, kFp8Kind<Q>);
        }
        done = differ == 0;
      }
      if (!done) {
#pragma unroll
        for (int j = 0; j < N / 2; ++j)
          h[j] = __nv_cvt_float2_to_fp8x2(
              make_float2(fp8_quot_fast(raw_f32<T>(a, 2 * j), q), fp8_quot_fast(raw_f32<T>(a, 2 * j + 1), q)),
              __NV_SATFINITE, kFp8Kind<Q>);
      }
#pragma unroll
      for (int i = 0; i < kCodeWords<Q, N>; ++i)
        w[i] = 2 * i + 1 < N / 2 ? __byte_perm(h[2 * i], h[2 * i + 1], 0x5410) : (h[2 * i] & 0xffffu);
      return;
    }
  } else if (kTieRule && !q.host && q.invm <= cuda::std::numeric_limits<float>::max()) {
    uint32_t c[N];
    if (q.bounded) {  // bad stays false: no slow path to keep live
#pragma unroll
      for (int k = 0; k < N; ++k) c[k] = __float_as_uint(rint_code_bounded(raw_f32<T>(a, k), q));
      pack_codes<Q, N>(c, w);
      return;
    }
#pragma unroll
    for (int k = 0; k < N; ++k)
      c[k] = __float_as_uint(fminf(fmaxf(q.cz + rint_quot(raw_f32<T>(a, k), q, bad), ylo), yhi));
    if (!bad) {
      pack_codes<Q, N>(c, w);
      return;
    }
  } else {
    // fma(x, inv_lo, cz) and fma(x, inv_hi, cz) bracket x / s + cz (QParams::inv_lo; the product is exact
    // inside the FMA): where both round to the same float Y, x / s is strictly inside (k - 1/2,
    // k + 1/2) for k = Y - cz, so Y holds rint(x / s) + zp (an exact tie, or a double quotient
    // rounded onto one, makes them differ). Outside 1.5 * 2^23 +- 2^22 the grid is coarser, but
    // there the code saturates at q_min / q_max anyway; NaN compares unequal. Flagged units (and
    // zero points or scales outside the fast range: invm = inf) take the exact slow path.
    bad = !(q.invm <= cuda::std::numeric_limits<float>::max());
    uint32_t c[N];
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const float xf = raw_f32<T>(a, k);
      const float y = fmaf(xf, q.inv_lo, q.cz);
      bad |= y != fmaf(xf, q.inv_hi, q.cz);
      c[k] = __float_as_uint(fminf(fmaxf(y, ylo), yhi));
    }
    if (!bad) {
      pack_codes<Q, N>(c, w);
      return;
    }
  }
  uint4 raw = make_uint4(0, 0, 0, 0);
  memcpy(&raw, a, sizeof(a));
  const uint2 r = quant_unit_slow<T, Q, N>(raw, q.s, q.inv, q.invm, q.cz, sd_of(p, q), static_cast<int>(q.zi),
                                           static_cast<int>(p.q_min), static_cast<int>(p.q_max));
  w[0] = r.x;
  if constexpr (kCodeWords < Q, N >> 1) w[1] = r.y;
}

/// Integer codes -> floats: a code byte (nibble) under the bits 0x4B000000 is the float 2^23 + code,
/// so subtracting 2^23 + bias + zp (bias 128 for int8, 8 for int4 after flipping the sign bit;
/// 0 unsigned) gives q - zp exactly, with byte permutes and one FADD instead of conversions.
template <class Q>
inline constexpr uint32_t kCodeFlip = cuda::std::is_same_v<Q, int8_t>     ? 0x80808080u
                                      : cuda::std::is_same_v<Q, PackedS4> ? 0x88888888u
                                                                          : 0u;
template <class Q>
inline constexpr float kCodeBias = cuda::std::is_same_v<Q, int8_t>     ? 128.f
                                   : cuda::std::is_same_v<Q, PackedS4> ? 8.f
                                                                       : 0.f;

/// Dequantizes N elements sharing q (dq_f32, or fp8) from Q's storage words into float:
/// integers (q - zp) * s, fp8 float(q) * s, each one float rounding (what torch's float32 result
/// holds).
template <class Q, int N>
__device__ __forceinline__ void dequant_unit(const uint32_t (&w)[kCodeWords<Q, N>], const QParams& q, float (&f)[N]) {
  if constexpr (kFp8<Q>) {
#pragma unroll
    for (int j = 0; j < N / 2; ++j) {
      const uint32_t h = (w[j / 2] >> (16 * (j & 1))) & 0xffffu;
      const __half2 hv = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(h), kFp8Kind<Q>);
      const float2 v = __half22float2(hv);
      f[2 * j] = v.x * q.s;
      f[2 * j + 1] = v.y * q.s;
    }
  } else {
    const float base = 0x1p23f + kCodeBias<Q> + static_cast<float>(q.zi);
#pragma unroll
    for (int i = 0; i < kCodeWords<Q, N>; ++i) {
      const uint32_t u = w[i] ^ kCodeFlip<Q>;
      if constexpr (kPacked<Q>) {
        const uint32_t lo = u & 0x0f0f0f0fu, hi = (u >> 4) & 0x0f0f0f0fu;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int k = 8 * i + 2 * j;
          if (k < N) {
            f[k] = (__uint_as_float(__byte_perm(lo, 0x4B000000u, 0x7650u | j)) - base) * q.s;
            f[k + 1] = (__uint_as_float(__byte_perm(hi, 0x4B000000u, 0x7650u | j)) - base) * q.s;
          }
        }
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int k = 4 * i + j;
          if (k < N) f[k] = (__uint_as_float(__byte_perm(u, 0x4B000000u, 0x7650u | j)) - base) * q.s;
        }
      }
    }
  }
}

/// Floats -> N elements of T (16-bit types two at a time: one paired conversion).
template <class T, int N>
__device__ __forceinline__ void floats_to(const float (&f)[N], T (&y)[N]) {
  if constexpr (cuda::std::is_same_v<T, __nv_bfloat16> && N % 2 == 0) {
#pragma unroll
    for (int j = 0; j < N / 2; ++j) {
      const __nv_bfloat162 v = __floats2bfloat162_rn(f[2 * j], f[2 * j + 1]);
      memcpy(&y[2 * j], &v, 4);
    }
  } else if constexpr (cuda::std::is_same_v<T, __half> && N % 2 == 0) {
#pragma unroll
    for (int j = 0; j < N / 2; ++j) {
      const __half2 v = __floats2half2_rn(f[2 * j], f[2 * j + 1]);
      memcpy(&y[2 * j], &v, 4);
    }
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) y[k] = convert<T>(f[k]);
  }
}

/// NaN-propagating max over the CTA; the result is valid in thread 0.
__device__ __forceinline__ float block_nanmax(float v) {
  __shared__ float red[32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = nanmax(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int w = threadIdx.x / 32, nw = (blockDim.x + 31) / 32;
  if ((threadIdx.x & 31) == 0) red[w] = v;
  __syncthreads();
  if (threadIdx.x == 0)
    for (int k = 1; k < nw; ++k) v = nanmax(v, red[k]);
  return v;
}

// ---- elementwise ------------------------------------------------------------------------------------
template <QuantElemOp kOp>
inline constexpr bool kReadsIn1 = kOp == QuantElemOp::quant_bw || kOp == QuantElemOp::fake_bw;
template <QuantElemOp kOp>
inline constexpr bool kReadsIn0 = kOp != QuantElemOp::dequant_fw;
template <QuantElemOp kOp>
inline constexpr bool kWritesFp = kOp != QuantElemOp::quant_fw;

/// fake_quantize's quantized value and mask for one element, in torch's three forms (ATen
/// FakeQuantizeCore.cu): per-tensor, and per-channel with int or float zero points (per-group uses
/// the per-channel forms). Returns the output in the math type.
template <class T>
__device__ __forceinline__ math_t<T> fake_one(const QuantLaunch& p, const QParams& q, math_t<T> m, bool* in_range) {
  using M = math_t<T>;
  if (!p.channel_rule) {
    // fake_quantize_tensor_cachemask_kernel_cuda: qval = int64(nearbyint(x * inv) + zp) (the add in
    // float, double for f64); y = (fminf(q_max, fmaxf(q_min, qval)) - zp) * scale in float.
    const M t = m * static_cast<M>(q.inv);
    const int64_t qv = static_cast<int64_t>(rint(t) + static_cast<M>(q.zi));
    *in_range = p.q_min <= qv && qv <= p.q_max;
    const float b = fminf(static_cast<float>(p.q_max), fmaxf(static_cast<float>(p.q_min), static_cast<float>(qv)));
    return static_cast<M>((b - static_cast<float>(q.zi)) * q.s);
  }
  if (p.zp_mode != QuantZpMode::float32) {
    // _fake_quant_per_channel_cachemask_cuda_helper, int zero point: qval = int64(nearbyint(x * inv))
    // + zp in int64 (wrapping as the GPU does, without C++'s overflow UB); bounded by std::min /
    // std::max in int64; y = (bounded - zp) * scale, an int64 times a float: float math.
    const M t = m * static_cast<M>(q.inv);
    const int64_t qv =
        static_cast<int64_t>(static_cast<uint64_t>(static_cast<int64_t>(rint(t))) + static_cast<uint64_t>(q.zi));
    *in_range = p.q_min <= qv && qv <= p.q_max;
    const int64_t b = qv < p.q_min ? p.q_min : (p.q_max < qv ? p.q_max : qv);
    return static_cast<M>(static_cast<float>(b - q.zi) * q.s);
  }
  // Float zero point: qval = lrint(x * inv + zp) (an FMA, as nvcc contracts torch's expression; cvt.rni
  // to int64); y = (fminf(q_max, fmaxf(q_min, qval)) - zp) * scale in float.
  int64_t qv;
  if constexpr (cuda::std::is_same_v<M, double>)
    qv = __double2ll_rn(fma(m, static_cast<double>(q.inv), static_cast<double>(q.zf)));
  else
    qv = __float2ll_rn(fmaf(m, q.inv, q.zf));
  *in_range = p.q_min <= qv && qv <= p.q_max;
  const float b = fminf(static_cast<float>(p.q_max), fmaxf(static_cast<float>(p.q_min), static_cast<float>(qv)));
  return static_cast<M>((b - q.zf) * q.s);
}

/// Variants of the elementwise kernel (template parameter; the launcher picks one per call):
///  strided      2 elements a unit, per-operand offsets from the coalesced dims;
///  vec          16-byte units, each element's scale from its position (and, for the ops without
///               a unit path, a runtime branch to one scale a unit when unit_uniform);
///  vec_uniform  16-byte units sharing one scale each (unit_uniform), quantize / dequantize only:
///               the unit-at-a-time path, compiled without the per-element machinery so that it
///               keeps its registers (two units in flight at about 60).
enum class ElemMode : int { strided, vec, vec_uniform };

/// Ops with a unit-at-a-time path when the unit shares one scale (integer dequantize to f64 keeps
/// the double product: the element loop).
template <class T, QuantElemOp kOp>
inline constexpr bool kFastUnitOp = kOp == QuantElemOp::quant_fw ||
                                    (kOp == QuantElemOp::dequant_fw && !cuda::std::is_same_v<T, double>);

/// One unit (kUnit consecutive elements) of the elementwise kernel: its loaded inputs, then the
/// element loop and the stores. Split so that the vectorized variant issues the loads of
/// kElemUnroll units (and, when a unit's elements share one scale, that scale and zero point)
/// before it waits on any of them.
template <class T, class Q, QuantElemOp kOp, ElemMode kMode>
struct ElemUnit {
  static constexpr bool kVec = kMode != ElemMode::strided;
  static constexpr int kUnit = kVec ? static_cast<int>(16 / sizeof(T)) : 2;
  static constexpr int kQB = kCodeBytes<Q, kUnit>;  // quantized bytes of a unit
  static constexpr int kQW = kCodeWords<Q, kUnit>;
  static constexpr bool kFastUnit = kMode == ElemMode::vec_uniform && kFastUnitOp<T, kOp>;
  /// Whether this variant may find one scale per unit (vec_uniform always; vec at run time).
  static constexpr bool kUnitScales =
      kMode == ElemMode::vec_uniform || (kMode == ElemMode::vec && !kFastUnitOp<T, kOp>);
  static constexpr int kAW = kRawWords<T, kUnit>;
  using M = math_t<T>;
  int64_t e0 = 0;
  int n = 0;                ///< valid elements (kUnit except in the tail)
  uint32_t a[kAW], b[kAW];  ///< in0 / in1 as loaded (raw words; tail elements past n are zeros)
  uint32_t qw[kQW];         ///< dequantize: the unit's codes
  int64_t sidx = 0;         ///< kUnitScales: the unit's scale index
  RawQ raw;                 ///< kUnitScales with device scales: the unit's scale and zero point as stored
  int64_t off[kVec ? 1 : kUnit][detail::kQuantSlots];

  __device__ __forceinline__ void load_in(const T* in, int slot, uint32_t (&r)[kAW], bool full) {
    if (full) {
      load_bytes<16>(in + e0, r);
    } else {
#pragma unroll
      for (int j = 0; j < kAW; ++j) r[j] = 0;
#pragma unroll
      for (int k = 0; k < kUnit; ++k)
        if (k < n) raw_set<T>(r, k, in[kVec ? e0 + k : off[kVec ? 0 : k][slot]]);
    }
  }

  /// kWhole: the caller knows the unit is whole (kVec only): no tail code.
  template <bool kWhole = false, bool kConst = false>
  __device__ __forceinline__ void load(const QuantLaunch& p, int64_t u) {
    e0 = u * kUnit;
    n = kWhole ? kUnit : static_cast<int>(p.numel - e0 < kUnit ? p.numel - e0 : kUnit);
    const bool full = kVec && n == kUnit;
    if constexpr (!kVec) {
#pragma unroll
      for (int k = 0; k < kUnit; ++k)
        if (k < n) fp_offsets(p, e0 + k, off[k]);
    }
    if constexpr (kReadsIn0<kOp>) load_in(static_cast<const T*>(p.fp[detail::kQIn0]), detail::kQIn0, a, full);
    if constexpr (kReadsIn1<kOp>) load_in(static_cast<const T*>(p.fp[detail::kQIn1]), detail::kQIn1, b, full);
    if constexpr (kOp == QuantElemOp::dequant_fw) {
      const uint8_t* qsrc = static_cast<const uint8_t*>(p.q_in) + (kPacked<Q> ? e0 / 2 : e0);
      if (full) {
        load_bytes<kQB>(qsrc, qw);
      } else {
        uint8_t qb[kQW * 4] = {};
#pragma unroll
        for (int k = 0; k < kQB; ++k)
          if (k * (kPacked<Q> ? 2 : 1) < n) qb[k] = qsrc[k];
        memcpy(qw, qb, sizeof(qw));
      }
    }
    if constexpr (kUnitScales) {
      if (!kConst && p.unit_uniform && !p.scale_const) {
        sidx = unit_scale_index(p, e0);
        raw = load_raw(p, sidx);
      }
    }
  }

  /// The element loop; q_at(k) returns element k's QParams (called for k = 0, 1, ... in order).
  template <class QAt>
  __device__ __forceinline__ void elements(const QuantLaunch& p, QAt&& q_at, AbsMax<T>& am) {
    T* out = static_cast<T*>(const_cast<void*>(p.fp[detail::kQOut]));
    bool* mask = static_cast<bool*>(const_cast<void*>(p.fp[detail::kQMask]));
    const bool full = kVec && n == kUnit;
    const float ylo = 0x1.8p23f + static_cast<float>(p.q_min), yhi = 0x1.8p23f + static_cast<float>(p.q_max);
    T y[kUnit];
    bool mk[kUnit];
    uint8_t qb[kQW * 4];
    if constexpr (kOp == QuantElemOp::dequant_fw) memcpy(qb, qw, sizeof(qw));
    if constexpr (kOp == QuantElemOp::quant_fw) {
      if (p.amax_partial) am.add_words(a);  // elements past n are zeros
    }
#pragma unroll
    for (int k = 0; k < kUnit; ++k) {
      if (k < n) {
        const QParams& q = q_at(k);
        if constexpr (kOp == QuantElemOp::quant_fw) {
          const float xf = raw_f32<T>(a, k);
          if constexpr (kFp8<Q>)
            qb[k] = convert<Q>(fp8_quot(xf, q), true).__x;  // saturating: clamp(x / s, -M, M), NaN stays
          else
            q_encode<Q>(qb, k, quant_int_one(xf, q, p, ylo, yhi));
        } else if constexpr (kOp == QuantElemOp::quant_bw) {
          const float xf = raw_f32<T>(b, k);
          bool in;
          if constexpr (kFp8<Q>) {
            in = fabsf(fp8_quot(xf, q)) <= p.fp8_max;
          } else {
            bool bad = false;
            const float yv = quant_magic_exact(xf, q, bad);
            if (!bad) {
              in = ylo <= yv && yv <= yhi;
            } else {
              const int64_t v = quant_int_slow(xf, sd_of(p, q), q.zi);
              in = p.q_min <= v && v <= p.q_max;
            }
          }
          y[k] = convert<T>(to_m(raw_get<T>(a, k)) * static_cast<M>(in ? 1 : 0));
        } else if constexpr (kOp == QuantElemOp::dequant_fw) {
          const float v = q_decode<Q>(qb, k);
          if constexpr (kFp8<Q>) {
            if constexpr (cuda::std::is_same_v<T, double>)
              y[k] = static_cast<double>(v) * sd_of(p, q);
            else
              y[k] = convert<T>(v * q.s);
          } else {
            // torch.dequantize: (float(q) - zp) * scale with a double scale, rounded to float32.
            const double d = (static_cast<double>(v) - static_cast<double>(q.zi)) * sd_of(p, q);
            if constexpr (cuda::std::is_same_v<T, double>)
              y[k] = d;
            else
              y[k] = convert<T>(static_cast<float>(d));
          }
        } else if constexpr (kOp == QuantElemOp::dequant_bw) {
          const M s = cuda::std::is_same_v<T, double> ? static_cast<M>(sd_of(p, q)) : static_cast<M>(q.s);
          y[k] = convert<T>(to_m(raw_get<T>(a, k)) * s);
        } else if constexpr (kOp == QuantElemOp::fake_fw) {
          bool in;
          y[k] = convert<T>(fake_one<T>(p, q, to_m(raw_get<T>(a, k)), &in));
          mk[k] = in;
        } else {  // fake_bw: torch's dY * mask
          bool in;
          (void)fake_one<T>(p, q, to_m(raw_get<T>(b, k)), &in);
          y[k] = convert<T>(to_m(raw_get<T>(a, k)) * static_cast<M>(in ? 1 : 0));
        }
      }
    }
    if constexpr (kOp == QuantElemOp::quant_fw) {
      uint8_t* qdst = static_cast<uint8_t*>(p.q_out) + (kPacked<Q> ? e0 / 2 : e0);
      if (full) {
        store_bytes<kQB>(qdst, qb);
      } else {
#pragma unroll
        for (int k = 0; k < kQB; ++k)
          if (k * (kPacked<Q> ? 2 : 1) < n) qdst[k] = qb[k];
      }
    }
    if constexpr (kWritesFp<kOp>) store_fp(p, out, y, full);
    if constexpr (kOp == QuantElemOp::fake_fw) {
      if (mask) {
        if (full) {
          store_bytes<kUnit>(mask + e0, mk);
        } else {
#pragma unroll
          for (int k = 0; k < kUnit; ++k)
            if (k < n) mask[kVec ? e0 + k : off[kVec ? 0 : k][detail::kQMask]] = mk[k];
        }
      }
    }
  }

  __device__ __forceinline__ void store_fp(const QuantLaunch& p, T* out, const T (&y)[kUnit], bool full) const {
    if (full) {
      store_bytes<16>(out + e0, y);
    } else {
#pragma unroll
      for (int k = 0; k < kUnit; ++k)
        if (k < n) out[kVec ? e0 + k : off[kVec ? 0 : k][detail::kQOut]] = y[k];
    }
  }

  /// The unit at a time, one scale (kFastUnit ops): returns false when the element loop must run
  /// instead (an integer dequantize whose product needs double).
  __device__ __forceinline__ bool fast(const QuantLaunch& p, const QParams& q, AbsMax<T>& am) {
    const bool full = n == kUnit;
    if constexpr (kOp == QuantElemOp::quant_fw) {
      if (p.amax_partial) am.add_words(a);  // elements past n are zeros
      const float ylo = 0x1.8p23f + static_cast<float>(p.q_min), yhi = 0x1.8p23f + static_cast<float>(p.q_max);
      uint32_t w[kQW];
      quant_unit<T, Q, kUnit>(a, q, ylo, yhi, p, w);
      uint8_t* qdst = static_cast<uint8_t*>(p.q_out) + (kPacked<Q> ? e0 / 2 : e0);
      if (full) {
        store_bytes<kQB>(qdst, w);
      } else {
        uint8_t qb[kQW * 4];
        memcpy(qb, w, sizeof(w));
#pragma unroll
        for (int k = 0; k < kQB; ++k)
          if (k * (kPacked<Q> ? 2 : 1) < n) qdst[k] = qb[k];
      }
      return true;
    } else {
      if (!kFp8<Q> && !q.dq_f32) return false;
      float f[kUnit];
      dequant_unit<Q, kUnit>(qw, q, f);
      T y[kUnit];
      floats_to<T, kUnit>(f, y);
      store_fp(p, static_cast<T*>(const_cast<void*>(p.fp[detail::kQOut])), y, full);
      return true;
    }
  }

  /// Everything after load(): the unit's scale (once per unit when they share one, else per
  /// element from its position), then fast() or the element loop. `last`/`q` carry the scale
  /// across units.
  /// kConst: the caller knows the scale is the tensor's (p.scale_const).
  template <bool kConst = false>
  __device__ __forceinline__ void finish(const QuantLaunch& p, int64_t& last, QParams& q, AbsMax<T>& am) {
    constexpr bool kFloatZp = kOp == QuantElemOp::fake_fw || kOp == QuantElemOp::fake_bw;
    if constexpr (kUnitScales) {
      if (kMode == ElemMode::vec_uniform || p.unit_uniform) {
        if (!kConst && !p.scale_const && sidx != last) {  // not per-tensor: device scales
          q = make_qparams<kFloatZp, true>(p, raw);
          last = sidx;
        }
        if constexpr (kFastUnit) {
          if (fast(p, q, am)) return;
        }
        elements(
            p, [&](int) -> const QParams& { return q; }, am);
        return;
      }
    }
    if constexpr (kMode != ElemMode::vec_uniform) {
      Pos pos;
      pos.init(e0, p);
      elements(
          p,
          [&](int k) -> const QParams& {
            if (k > 0) pos.step(p);
            const int64_t s = pos.scale_index(p);
            if (s != last) {
              q = load_qparams<kFloatZp>(p, s);
              last = s;
            }
            return q;
          },
          am);
    }
  }
};

/// Quantize / dequantize forward on the 16-byte path hold 4 CTAs an SM (see kQuantMinBlocks);
/// the other ops and the strided variant keep their registers.
template <class T, QuantElemOp kOp, ElemMode kMode>
inline constexpr int kElemMinBlocks = kMode != ElemMode::strided&& kFastUnitOp<T, kOp> ? detail::kQuantMinBlocks : 1;

/// Units a thread of the 16-byte variants takes a step (see quant_elem_unroll).
template <class T, class Q, QuantElemOp kOp, ElemMode kMode>
inline constexpr int kElemUnroll =
    detail::quant_elem_unroll(static_cast<int>(sizeof(T)), kOp, kFp8<Q>, kMode == ElemMode::vec_uniform);

template <class T, class Q, QuantElemOp kOp, ElemMode kMode>
__global__ void __launch_bounds__(detail::kQuantBlock, (kElemMinBlocks<T, kOp, kMode>))
    elem_kernel(const QuantLaunch p) {
  using U = ElemUnit<T, Q, kOp, kMode>;
  constexpr int kR = U::kVec ? kElemUnroll<T, Q, kOp, kMode> : 1;
  const int64_t units = (p.numel + U::kUnit - 1) / U::kUnit;
  AbsMax<T> am;
  int64_t last = -1;
  QParams q;
  if (p.scale_const) {  // per-tensor: one scale for every element
    q = load_qparams < kOp == QuantElemOp::fake_fw || kOp == QuantElemOp::fake_bw > (p, 0);
    last = 0;
  }
  // A CTA takes kR * blockDim consecutive units a step (its threads' r-th units one contiguous
  // span), so a thread's kR units lie blockDim apart: for per-channel scales along rows they mostly
  // share a scale (a 4096-element 16-bit row is exactly one step of 256 threads x 2 units), and the
  // scale's derived fields (finish_qparams: a reciprocal and its margins) are computed once for
  // both, where units a grid stride apart changed scale at every unit.
  const int64_t span = kR * static_cast<int64_t>(blockDim.x);
  int64_t first = blockIdx.x * span;
  if constexpr (U::kVec) {
    // The CTA steps whose units are all whole: no bounds tests, no tail code (the step after the
    // last of them, if any, takes the guarded loop below).
    // Per-tensor scales get their own copy of the loop, without the per-unit scale state.
    const int64_t whole_end = p.numel / U::kUnit / span * span;
    auto whole = [&](auto const_scale) {
      constexpr bool kConst = decltype(const_scale)::value;
      for (; first < whole_end; first += gridDim.x * span) {
        const int64_t u0 = first + threadIdx.x;
        U unit[kR];
#pragma unroll
        for (int r = 0; r < kR; ++r) unit[r].template load<true, kConst>(p, u0 + r * blockDim.x);
#pragma unroll
        for (int r = 0; r < kR; ++r) unit[r].template finish<kConst>(p, last, q, am);
      }
    };
    if (p.scale_const)
      whole(cuda::std::true_type{});
    else
      whole(cuda::std::false_type{});
  }
  for (int64_t b0 = first; b0 < units; b0 += gridDim.x * span) {
    const int64_t u0 = b0 + threadIdx.x;
    U unit[kR];
#pragma unroll
    for (int r = 0; r < kR; ++r)
      if (u0 + r * blockDim.x < units) unit[r].load(p, u0 + r * blockDim.x);
#pragma unroll
    for (int r = 0; r < kR; ++r)
      if (u0 + r * blockDim.x < units) unit[r].finish(p, last, q, am);
  }
  if constexpr (kOp == QuantElemOp::quant_fw) {
    if (p.amax_partial) {
      const float amax = block_nanmax(am.value());
      if (threadIdx.x == 0) p.amax_partial[blockIdx.x] = amax;
    }
  }
}

// ---- per-tensor amax --------------------------------------------------------------------------------
/// 16-byte units a thread of the amax kernel loads before it reduces any (bytes in flight per SM).
inline constexpr int kAmaxUnroll = 4;

template <class T, bool kVec>
__global__ void __launch_bounds__(detail::kQuantBlock) amax_kernel(const QuantLaunch p) {
  constexpr int kUnit = kVec ? static_cast<int>(16 / sizeof(T)) : 1;
  const T* x = static_cast<const T*>(p.fp[detail::kQIn0]);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  AbsMax<T> am;
  if constexpr (kVec) {
    const int64_t units = p.numel / kUnit;  // whole units; the tail element by element below
    for (int64_t u0 = tid; u0 < units; u0 += kAmaxUnroll * stride) {
      uint32_t a[kAmaxUnroll][4];
#pragma unroll
      for (int r = 0; r < kAmaxUnroll; ++r)
        if (u0 + r * stride < units) load_bytes<16>(x + (u0 + r * stride) * kUnit, a[r]);
#pragma unroll
      for (int r = 0; r < kAmaxUnroll; ++r)
        if (u0 + r * stride < units) am.add_words(a[r]);
    }
    for (int64_t e = units * kUnit + tid; e < p.numel; e += stride) am.add_one(x[e]);
  } else {
    for (int64_t e = tid; e < p.numel; e += stride) {
      int64_t off[detail::kQuantSlots];
      fp_offsets(p, e, off);
      am.add_one(x[off[detail::kQIn0]]);
    }
  }
  const float amax = block_nanmax(am.value());
  if (threadIdx.x == 0) p.amax_partial[blockIdx.x] = amax;
}

/// One CTA: reduce the amax partials, then the jobs in p.finalize, in this order: amax_out, the
/// scale (current: from this amax; history: from max(history), falling back to scale_out's value),
/// the history shift with the new amax at index 0.
template <class T>
__global__ void __launch_bounds__(detail::kQuantBlock) finalize_kernel(const QuantLaunch p) {
  float m = 0.f;
  for (int64_t j = threadIdx.x; j < p.num_partials; j += blockDim.x) m = nanmax(m, p.partial_in[j]);
  m = block_nanmax(m);
  if (threadIdx.x != 0) return;
  if ((p.finalize & detail::kFinAmaxOut) && p.amax_out) *p.amax_out = m;
  if (p.finalize & detail::kFinScaleCurrent) *p.scale_out = scale_of(m, p.q_scale_max, 1.f);
  if (p.finalize & detail::kFinScaleHistory) {
    float h = 0.f;
    for (int64_t j = 0; j < p.history_len; ++j) h = nanmax(h, p.history[j]);
    *p.scale_out = scale_of(h, p.q_scale_max, *p.scale_out);
  }
  if (p.finalize & detail::kFinShiftHistory) {
    for (int64_t j = p.history_len - 1; j > 0; --j) p.history[j] = p.history[j - 1];
    if (p.history_len > 0) p.history[0] = m;
  }
}

// ---- learnable (LSQ) backward -----------------------------------------------------------------------
/// One element of torch's _fake_quantize_grad_learnable_{tensor,channel}_kernel_cuda: returns dx
/// and adds the dscale / dzero_point contributions.
__device__ __forceinline__ float learn_one(const QuantLaunch& p, const QParams& q, float xf, float dyf, float* ds,
                                           float* dz) {
  const float s = q.s, inv = q.inv, zf = q.zf, gf = p.grad_factor;
  const int64_t xq = static_cast<int64_t>(rintf(xf * inv) + zf);
  const bool in = xq >= p.q_min && xq <= p.q_max;
  const float dx = dyf * static_cast<float>(in);
  if (!in) {
    const float lim = static_cast<float>(xq < p.q_min ? p.q_min : p.q_max) - zf;
    *dz += dyf * (-1.f) * s * gf;
    *ds += (dyf * lim) * gf;
  } else {
    const int64_t cl = xq;  // in range: max(min(xq, q_max), q_min) == xq
    const float xfq = (static_cast<float>(cl) - zf) * s;
    *ds += dyf * (xfq - xf) * inv * gf;
  }
  return dx;
}

/// Fixed-order tree sum over the CTA (result in thread 0).
__device__ __forceinline__ void block_sum2(float* a, float* b) {
  __shared__ float ra[detail::kQuantBlock], rb[detail::kQuantBlock];
  ra[threadIdx.x] = *a;
  rb[threadIdx.x] = *b;
  __syncthreads();
  for (int s = detail::kQuantBlock / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s) {
      ra[threadIdx.x] += ra[threadIdx.x + s];
      rb[threadIdx.x] += rb[threadIdx.x + s];
    }
    __syncthreads();
  }
  *a = ra[0];
  *b = rb[0];
  __syncthreads();
}

/// Where the elements of one learnable channel (one (scale, zero point) pair) lie, element j of
/// len. Per channel (per tensor: A = 1): channel a holds (o, a, i) for j = o * I + i. Per group:
/// channel c is the scale index (o, g, i) of scales [O, A/G, I] and holds (o, g * G + j, i), j < G,
/// elements I apart.
struct LearnChannel {
  int64_t base = 0;
  __device__ __forceinline__ LearnChannel(const QuantLaunch& p, int64_t c) {
    if (p.per_group) {
      const int64_t per_o = p.axis_len / p.group * p.inner;
      const int64_t o = c / per_o, r = c - o * per_o, g = r / p.inner, i = r - g * p.inner;
      base = (o * p.axis_len + g * p.group) * p.inner + i;
    } else {
      base = c * p.inner;
    }
  }
  __device__ __forceinline__ int64_t element(const QuantLaunch& p, int64_t j) const {
    if (p.per_group) return base + j * p.inner;
    const int64_t o = j / p.inner;
    return base + o * p.axis_len * p.inner + (j - o * p.inner);
  }
};

/// The partial sums of each (channel, split): a CTA per (split, channel) (threads over the split's
/// elements, a fixed tree in shared memory), a thread per channel (`columns`: channels innermost,
/// so adjacent threads read adjacent addresses), or a warp per (split, group) (`warps`: per-group
/// groups of consecutive or nearly consecutive elements, lanes over the group, a fixed shuffle
/// tree). Each is a fixed partition and a fixed order: deterministic and bit-stable.
template <class T>
__global__ void __launch_bounds__(detail::kQuantBlock) learn_bw_kernel(const QuantLaunch p) {
  const T* dy = static_cast<const T*>(p.fp[detail::kQIn0]);
  const T* x = static_cast<const T*>(p.fp[detail::kQIn1]);
  T* dx = static_cast<T*>(const_cast<void*>(p.fp[detail::kQOut]));
  const int64_t C = p.channels, len = p.per_group ? p.group : p.outer * p.inner;
  const int64_t per = (len + p.splits - 1) / p.splits;
  auto element = [&](const LearnChannel& ch, int64_t j, const QParams& q, float* ds, float* dz) {
    const int64_t e = ch.element(p, j);
    int64_t off[detail::kQuantSlots] = {e, e, e, e};
    if (!p.vec) fp_offsets(p, e, off);
    const float r = learn_one(p, q, to_f32(x[off[detail::kQIn1]]), to_f32(dy[off[detail::kQIn0]]), ds, dz);
    dx[off[detail::kQOut]] = convert<T>(r);
  };
  auto store = [&](int64_t c, int64_t split, float ds, float dz) {
    p.partial[(c * p.splits + split) * 2] = ds;
    p.partial[(c * p.splits + split) * 2 + 1] = dz;
  };
  if (p.warps) {
    const int lane = threadIdx.x & 31;
    const int64_t warps = blockDim.x / 32;
    const int64_t split = blockIdx.x;
    const int64_t start = split * per, end = start + per < len ? start + per : len;
    for (int64_t c = blockIdx.y * warps + threadIdx.x / 32; c < C; c += gridDim.y * warps) {  // warp-uniform
      const LearnChannel ch(p, c);
      const QParams q = load_qparams(p, c);
      float ds = 0.f, dz = 0.f;
      for (int64_t j = start + lane; j < end; j += 32) element(ch, j, q, &ds, &dz);
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        ds += __shfl_xor_sync(0xffffffffu, ds, o);
        dz += __shfl_xor_sync(0xffffffffu, dz, o);
      }
      if (lane == 0) store(c, split, ds, dz);
    }
  } else if (!p.columns) {
    const int64_t split = blockIdx.x;
    const int64_t start = split * per, end = start + per < len ? start + per : len;
    for (int64_t a = blockIdx.y; a < C; a += gridDim.y) {
      const LearnChannel ch(p, a);
      const QParams q = load_qparams(p, p.per_channel ? a : 0);
      float ds = 0.f, dz = 0.f;
      for (int64_t j = start + threadIdx.x; j < end; j += blockDim.x) element(ch, j, q, &ds, &dz);
      block_sum2(&ds, &dz);
      if (threadIdx.x == 0) store(a, split, ds, dz);
    }
  } else {
    const int64_t a = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    const int64_t split = blockIdx.y;
    if (a >= C) return;
    const int64_t start = split * per, end = start + per < len ? start + per : len;
    const LearnChannel ch(p, a);
    const QParams q = load_qparams(p, p.per_channel ? a : 0);
    float ds = 0.f, dz = 0.f;
    for (int64_t j = start; j < end; ++j) element(ch, j, q, &ds, &dz);
    store(a, split, ds, dz);
  }
}

template <class T>
__global__ void __launch_bounds__(detail::kQuantBlock) learn_sum_kernel(const QuantLaunch p) {
  const int64_t a = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (a >= p.channels) return;
  float ds = 0.f, dz = 0.f;
  for (int64_t s = 0; s < p.splits; ++s) {
    ds += p.partial[(a * p.splits + s) * 2];
    dz += p.partial[(a * p.splits + s) * 2 + 1];
  }
  if (p.dscale) p.dscale[a] = ds;
  if (p.dzero_point) p.dzero_point[a] = dz;
}

// ---- host-side dispatch -----------------------------------------------------------------------------
template <class T, class Q, QuantElemOp kOp>
cudaError_t launch_elem(const QuantLaunch& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.grid)), block(detail::kQuantBlock);
  if (!p.vec) {
    elem_kernel<T, Q, kOp, ElemMode::strided><<<grid, block, 0, stream>>>(p);
    return cudaGetLastError();
  }
  if constexpr (kFastUnitOp<T, kOp>) {
    if (p.unit_uniform) {
      elem_kernel<T, Q, kOp, ElemMode::vec_uniform><<<grid, block, 0, stream>>>(p);
      return cudaGetLastError();
    }
  }
  elem_kernel<T, Q, kOp, ElemMode::vec><<<grid, block, 0, stream>>>(p);
  return cudaGetLastError();
}

/// Calls f(Tag<Q>{}) for the quantized storage type of `q` among the stored dtypes.
template <class F>
cudaError_t with_q(DType q, F&& f) {
  switch (q) {
    case DType::s8:
      return f(Tag<int8_t>{});
    case DType::u8:
      return f(Tag<uint8_t>{});
    case DType::s4:
      return f(Tag<PackedS4>{});
    case DType::u4:
      return f(Tag<PackedU4>{});
    case DType::f8e4m3:
      return f(Tag<__nv_fp8_e4m3>{});
    case DType::f8e5m2:
      return f(Tag<__nv_fp8_e5m2>{});
    default:
      return cudaErrorInvalidValue;
  }
}

template <class T>
cudaError_t launch_elementwise(const QuantLaunch& p, cudaStream_t stream) {
  switch (p.elem) {
    case QuantElemOp::quant_fw:
      return with_q(p.q_dtype, [&](auto tag) {
        return launch_elem<T, typename decltype(tag)::type, QuantElemOp::quant_fw>(p, stream);
      });
    case QuantElemOp::dequant_fw:
      return with_q(p.q_dtype, [&](auto tag) {
        return launch_elem<T, typename decltype(tag)::type, QuantElemOp::dequant_fw>(p, stream);
      });
    case QuantElemOp::quant_bw:  // only the integer / fp8 distinction matters
      if (p.q_dtype == DType::f8e4m3 || p.q_dtype == DType::f8e5m2)
        return launch_elem<T, __nv_fp8_e4m3, QuantElemOp::quant_bw>(p, stream);
      return launch_elem<T, int8_t, QuantElemOp::quant_bw>(p, stream);
    case QuantElemOp::dequant_bw:
      return launch_elem<T, int8_t, QuantElemOp::dequant_bw>(p, stream);
    case QuantElemOp::fake_fw:
      return launch_elem<T, int8_t, QuantElemOp::fake_fw>(p, stream);
    case QuantElemOp::fake_bw:
      return launch_elem<T, int8_t, QuantElemOp::fake_bw>(p, stream);
  }
  return cudaErrorInvalidValue;
}

/// Dynamic per-token / per-group rows (quant_rows.cuh), explicitly instantiated per T in
/// quant_rows_<dtype>.cu: their own translation units.
template <class T>
cudaError_t launch_rows(const QuantLaunch& p, cudaStream_t stream);

template <class T>
cudaError_t launch_all(const QuantLaunch& p, cudaStream_t stream) {
  using detail::QuantStep;
  const dim3 block(detail::kQuantBlock);
  switch (p.step) {
    case QuantStep::elementwise:
      return launch_elementwise<T>(p, stream);
    case QuantStep::rows:
      return launch_rows<T>(p, stream);
    case QuantStep::amax:
      if (p.vec)
        amax_kernel<T, true><<<dim3(static_cast<unsigned>(p.grid)), block, 0, stream>>>(p);
      else
        amax_kernel<T, false><<<dim3(static_cast<unsigned>(p.grid)), block, 0, stream>>>(p);
      return cudaGetLastError();
    case QuantStep::finalize:
      finalize_kernel<T><<<1, block, 0, stream>>>(p);
      return cudaGetLastError();
    case QuantStep::learnable_bw: {
      auto capped = [](int64_t v) { return static_cast<unsigned>(v < 65535 ? v : 65535); };  // the kernel loops
      dim3 grid;
      if (p.columns)
        grid = dim3(static_cast<unsigned>((p.channels + detail::kQuantBlock - 1) / detail::kQuantBlock),
                    static_cast<unsigned>(p.splits));
      else if (p.warps)
        grid = dim3(static_cast<unsigned>(p.splits),
                    capped((p.channels + detail::kQuantBlock / 32 - 1) / (detail::kQuantBlock / 32)));
      else
        grid = dim3(static_cast<unsigned>(p.splits), capped(p.channels));
      learn_bw_kernel<T><<<grid, block, 0, stream>>>(p);
      return cudaGetLastError();
    }
    case QuantStep::learnable_sum:
      learn_sum_kernel<T><<<dim3(static_cast<unsigned>((p.channels + detail::kQuantBlock - 1) / detail::kQuantBlock)),
                            block, 0, stream>>>(p);
      return cudaGetLastError();
  }
  return cudaErrorInvalidValue;
}

}  // namespace baracuda::kern::quant

#define BARACUDA_QUANT_INSTANTIATE(D)                                             \
  namespace baracuda::detail {                                                    \
  template <>                                                                     \
  cudaError_t quant_launch<DType::D>(const QuantLaunch& p, cudaStream_t stream) { \
    return kern::quant::launch_all<kern::storage_t<DType::D>>(p, stream);         \
  }                                                                               \
  }
