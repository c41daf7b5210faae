// The kernels of the quantization family, templated on the floating-point storage type T and the
// quantized storage Q (int8_t, uint8_t, PackedS4, PackedU4, __nv_fp8_e4m3, __nv_fp8_e5m2), and
// explicitly instantiated per T in quant_<dtype>.cu:
//
//  - elem_kernel<T, Q, op, vec>: quantize / dequantize / fake_quantize, forward and backward. Every
//    element finds its scale from its position (o, a, i) around the axis (per-tensor, per-channel,
//    per-token and per-group are one formula with different scale strides, see quant.hpp); the
//    scale and zero point are reloaded only when the index changes. The vectorized variant moves
//    16 bytes of the floating side per thread and step; the strided one takes 2 elements (one
//    packed int4 byte) with per-operand offsets from the coalesced dims.
//  - rows_kernel<T, Q, W, items, cached>: dynamic per-token quantization. A group of tpr threads
//    owns a row, reads it once into registers (or streams it twice when longer than tpr x items),
//    reduces max |x| (shuffles, then one shared-memory step), writes the row's scale and the
//    quantized row.
//  - amax_kernel / finalize_kernel: per-tensor amax in two stages (partials per CTA, one CTA
//    reduces them), the scale from it (current scaling) or from the amax history (delayed), and
//    the history shift.
//  - learn_bw_kernel / learn_sum_kernel: the LSQ backward with a fixed partition of each
//    channel's elements into splits (partial sums in the workspace), then a fixed-order sum.
//
// Bit-exactness notes (see quant.hpp for the formulas): the arithmetic mirrors ATen's kernels
// operation by operation, including where nvcc contracts a multiply-add into an FMA
// (fake_quantize per-channel's `x * inv_scale + zero_point`), and uses the same float -> int64
// conversion (cvt.rzi: NaN -> 0, saturating) that torch's kernels compile to.
#pragma once
#include <cuda_runtime.h>

#include <cuda/std/limits>
#include <cuda/std/type_traits>

#include "kernels/common/dtype_traits.cuh"
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

// ---- memory words ----------------------------------------------------------------------------------
template <int N>
struct Word;
template <>
struct Word<1> {
  using type = uint8_t;
};
template <>
struct Word<2> {
  using type = uint16_t;
};
template <>
struct Word<4> {
  using type = uint32_t;
};
template <>
struct Word<8> {
  using type = uint2;
};
template <>
struct Word<16> {
  using type = uint4;
};

/// Loads / stores N bytes as one access (the address is N-aligned).
template <int N>
__device__ __forceinline__ void load_bytes(const void* src, void* dst) {
  using W = typename Word<N>::type;
  const W w = *reinterpret_cast<const W*>(src);
  memcpy(dst, &w, N);
}
template <int N>
__device__ __forceinline__ void store_bytes(void* dst, const void* src) {
  using W = typename Word<N>::type;
  W w;
  memcpy(&w, src, N);
  *reinterpret_cast<W*>(dst) = w;
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

/// The double division, out of line: it runs near ties only, and inlined into every element of a
/// register-resident row it costs the fast path registers. (static: one copy per translation unit.)
static __device__ __noinline__ int64_t quant_int_slow(float xf, double s, int64_t zp) {
  return static_cast<int64_t>(rint(static_cast<double>(xf) / s) + static_cast<double>(zp));
}
/// Whether t = xf * inv decides rint(xf / s) (see quant_int_raw): with float(s) a normal float
/// (host scales are checked; device scales are float32 values, exact) and inv normal, inv carries
/// at most 2^-23 relative error and the product 2^-24 more, so t is within 2^-22 |t| of xf / s.
__device__ __forceinline__ bool quant_fast_ok(float t, float inv) {
  const float at = fabsf(t);
  return at < 0x1p22f && inv >= 0x1p-126f && fabsf(t - (floorf(t) + 0.5f)) > at * 0x1p-21f;
}
/// torch's integer quantizer, unclamped: int64(rint(double(xf) / s) + zp) (ATen
/// quantize_tensor_per_*_affine_cuda). Fast path: t = xf * inv (inv = 1.0f / float(s)) is within
/// 2^-22 (relative) of xf / s; when t is farther than 2^-21 * |t| from a rounding tie (a
/// half-integer), rint(t) is the double quotient's rint, so the double division runs only near
/// ties, for huge |t| and for NaN/inf (where the cvt saturates or gives 0 as torch's does).
__device__ __forceinline__ int64_t quant_int_raw(float xf, double s, float inv, int64_t zp) {
  const float t = xf * inv;
  if (quant_fast_ok(t, inv)) return static_cast<int64_t>(__float2int_rn(t)) + zp;
  return quant_int_slow(xf, s, zp);
}
/// Clamped to [lo, hi] (a stored dtype's range, so 32 bits suffice): the common path stays in
/// 32-bit integers.
__device__ __forceinline__ int quant_int_clamped(float xf, double s, float inv, int zp, int lo, int hi) {
  const float t = xf * inv;
  if (quant_fast_ok(t, inv)) return min(max(__float2int_rn(t) + zp, lo), hi);
  const int64_t v = quant_int_slow(xf, s, zp);
  return static_cast<int>(v < lo ? lo : (v > hi ? hi : v));
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

/// The scale and zero point in the forms the formulas use.
struct QParams {
  float s = 1.f;    ///< float(scale)
  double sd = 1.0;  ///< scale in double (host: the descriptor's double; device: the float widened)
  float inv = 1.f;  ///< 1.0f / s (torch's inv_scale)
  int64_t zi = 0;   ///< integer zero point
  float zf = 0.f;   ///< float zero point (float32 mode; otherwise float(zi))
};

__device__ __forceinline__ QParams load_qparams(const QuantLaunch& p, int64_t sidx) {
  QParams q;
  if (p.scale) {
    q.s = __ldg(p.scale + sidx);
    q.sd = static_cast<double>(q.s);
  } else {
    q.sd = p.host_scale;
    q.s = static_cast<float>(p.host_scale);
  }
  q.inv = 1.0f / q.s;
  switch (p.zp_mode) {
    case QuantZpMode::none:
      break;
    case QuantZpMode::int32:
      q.zi = p.zero_point ? static_cast<int64_t>(__ldg(static_cast<const int32_t*>(p.zero_point) + sidx))
                          : p.host_zero_point;
      q.zf = static_cast<float>(q.zi);
      break;
    case QuantZpMode::float32:
      q.zf = __ldg(static_cast<const float*>(p.zero_point) + sidx);
      q.zi = static_cast<int64_t>(q.zf);
      break;
    case QuantZpMode::round_clamp: {  // torch: zero_point.round().clamp_(q_min, q_max)
      float z = rintf(__ldg(static_cast<const float*>(p.zero_point) + sidx));
      const float lo = static_cast<float>(p.q_min), hi = static_cast<float>(p.q_max);
      z = z < lo ? lo : z;
      z = hi < z ? hi : z;
      q.zf = z;
      q.zi = static_cast<int64_t>(z);
      break;
    }
    case QuantZpMode::half_up_clamp: {  // torch: int64(min(max(zp + 0.5f, q_min), q_max))
      float z = __ldg(static_cast<const float*>(p.zero_point) + sidx) + 0.5f;
      const float lo = static_cast<float>(p.q_min), hi = static_cast<float>(p.q_max);
      z = (z < lo) ? lo : z;
      z = (hi < z) ? hi : z;
      q.zi = static_cast<int64_t>(z);
      q.zf = static_cast<float>(q.zi);
      break;
    }
  }
  return q;
}

/// Position of element e around the axis, with the group split of the axis coordinate, stepped
/// element by element without divisions.
struct Pos {
  int64_t o, a, i, ag, ar;  ///< outer, axis, inner, axis / group, axis % group
  __device__ __forceinline__ void init(int64_t e, const QuantLaunch& p) {
    i = e % p.inner;
    const int64_t t = e / p.inner;
    a = t % p.axis_len;
    o = t / p.axis_len;
    ag = a / p.group;
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

/// Element offsets of every floating-point slot for logical index e (strided variant).
__device__ __forceinline__ void fp_offsets(const QuantLaunch& p, int64_t e, int64_t (&off)[detail::kQuantSlots]) {
#pragma unroll
  for (int s = 0; s < detail::kQuantSlots; ++s) off[s] = 0;
  for (int d = p.ndim - 1; d >= 0; --d) {
    const int64_t sz = p.size[d];
    const int64_t c = e % sz;
    e /= sz;
#pragma unroll
    for (int s = 0; s < detail::kQuantSlots; ++s) off[s] += c * p.stride[s][d];
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

/// One unit (kUnit consecutive elements) of the elementwise kernel: its loaded inputs, then the
/// element loop and the stores. Split so that the vectorized variant issues the loads of
/// kQuantUnroll units before it waits on any of them (bytes in flight per SM).
template <class T, class Q, QuantElemOp kOp, bool kVec>
struct ElemUnit {
  static constexpr int kUnit = kVec ? static_cast<int>(16 / sizeof(T)) : 2;
  static constexpr int kQB = kPacked<Q> ? kUnit / 2 : kUnit;  // quantized bytes of a unit
  using M = math_t<T>;
  int64_t e0 = 0;
  int n = 0;  ///< valid elements (kUnit except in the tail)
  T a[kUnit], b[kUnit];
  uint8_t qb[kQB];
  int64_t off[kVec ? 1 : kUnit][detail::kQuantSlots];

  __device__ __forceinline__ void load(const QuantLaunch& p, int64_t u) {
    const T* in0 = static_cast<const T*>(p.fp[detail::kQIn0]);
    const T* in1 = static_cast<const T*>(p.fp[detail::kQIn1]);
    e0 = u * kUnit;
    n = static_cast<int>(p.numel - e0 < kUnit ? p.numel - e0 : kUnit);
    const bool full = kVec && n == kUnit;
    if constexpr (!kVec) {
#pragma unroll
      for (int k = 0; k < kUnit; ++k)
        if (k < n) fp_offsets(p, e0 + k, off[k]);
    }
    if constexpr (kReadsIn0<kOp>) {
      if (full) {
        load_bytes<16>(in0 + e0, a);
      } else {
#pragma unroll
        for (int k = 0; k < kUnit; ++k)
          if (k < n) a[k] = in0[kVec ? e0 + k : off[kVec ? 0 : k][detail::kQIn0]];
      }
    }
    if constexpr (kReadsIn1<kOp>) {
      if (full) {
        load_bytes<16>(in1 + e0, b);
      } else {
#pragma unroll
        for (int k = 0; k < kUnit; ++k)
          if (k < n) b[k] = in1[kVec ? e0 + k : off[kVec ? 0 : k][detail::kQIn1]];
      }
    }
    if constexpr (kOp == QuantElemOp::dequant_fw) {
      const uint8_t* qsrc = static_cast<const uint8_t*>(p.q_in) + (kPacked<Q> ? e0 / 2 : e0);
      if (full) {
        load_bytes<kQB>(qsrc, qb);
      } else {
#pragma unroll
        for (int k = 0; k < kQB; ++k)
          if (k * (kPacked<Q> ? 2 : 1) < n) qb[k] = qsrc[k];
      }
    }
  }

  /// The element loop and the stores; `last`/`q` carry the scale cache across units.
  __device__ __forceinline__ void finish(const QuantLaunch& p, int64_t& last, QParams& q, float& amax) {
    T* out = static_cast<T*>(const_cast<void*>(p.fp[detail::kQOut]));
    bool* mask = static_cast<bool*>(const_cast<void*>(p.fp[detail::kQMask]));
    const bool full = kVec && n == kUnit;
    T y[kUnit];
    bool mk[kUnit];
    Pos pos;
    pos.init(e0, p);
#pragma unroll
    for (int k = 0; k < kUnit; ++k) {
      if (k < n) {
        const int64_t sidx = pos.scale_index(p);
        if (sidx != last) {
          q = load_qparams(p, sidx);
          last = sidx;
        }
        if constexpr (kOp == QuantElemOp::quant_fw) {
          const float xf = to_f32(a[k]);
          amax = nanmax(amax, fabsf(xf));
          if constexpr (kFp8<Q>) {
            qb[k] = convert<Q>(xf / q.s, true).__x;  // saturating: clamp(x / s, -M, M), NaN stays
          } else {
            q_encode<Q>(qb, k,
                        quant_int_clamped(xf, q.sd, q.inv, static_cast<int>(q.zi), static_cast<int>(p.q_min),
                                          static_cast<int>(p.q_max)));
          }
        } else if constexpr (kOp == QuantElemOp::quant_bw) {
          const float xf = to_f32(b[k]);
          bool in;
          if constexpr (kFp8<Q>) {
            in = fabsf(xf / q.s) <= p.fp8_max;
          } else {
            const int64_t v = quant_int_raw(xf, q.sd, q.inv, q.zi);
            in = p.q_min <= v && v <= p.q_max;
          }
          y[k] = convert<T>(to_m(a[k]) * static_cast<M>(in ? 1 : 0));
        } else if constexpr (kOp == QuantElemOp::dequant_fw) {
          const float v = q_decode<Q>(qb, k);
          if constexpr (kFp8<Q>) {
            if constexpr (cuda::std::is_same_v<T, double>)
              y[k] = static_cast<double>(v) * q.sd;
            else
              y[k] = convert<T>(v * q.s);
          } else {
            // torch.dequantize: (float(q) - zp) * scale with a double scale, rounded to float32.
            const double d = (static_cast<double>(v) - static_cast<double>(q.zi)) * q.sd;
            if constexpr (cuda::std::is_same_v<T, double>)
              y[k] = d;
            else
              y[k] = convert<T>(static_cast<float>(d));
          }
        } else if constexpr (kOp == QuantElemOp::dequant_bw) {
          const M s = cuda::std::is_same_v<T, double> ? static_cast<M>(q.sd) : static_cast<M>(q.s);
          y[k] = convert<T>(to_m(a[k]) * s);
        } else if constexpr (kOp == QuantElemOp::fake_fw) {
          bool in;
          y[k] = convert<T>(fake_one<T>(p, q, to_m(a[k]), &in));
          mk[k] = in;
        } else {  // fake_bw: torch's dY * mask
          bool in;
          (void)fake_one<T>(p, q, to_m(b[k]), &in);
          y[k] = convert<T>(to_m(a[k]) * static_cast<M>(in ? 1 : 0));
        }
      }
      pos.step(p);
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
    if constexpr (kWritesFp<kOp>) {
      if (full) {
        store_bytes<16>(out + e0, y);
      } else {
#pragma unroll
        for (int k = 0; k < kUnit; ++k)
          if (k < n) out[kVec ? e0 + k : off[kVec ? 0 : k][detail::kQOut]] = y[k];
      }
    }
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
};

/// Units a thread of the vectorized variant has in flight (two 16-byte loads per input).
inline constexpr int kQuantUnroll = 2;

template <class T, class Q, QuantElemOp kOp, bool kVec>
__global__ void __launch_bounds__(detail::kQuantBlock) elem_kernel(const QuantLaunch p) {
  using U = ElemUnit<T, Q, kOp, kVec>;
  constexpr int kR = kVec ? kQuantUnroll : 1;
  const int64_t units = (p.numel + U::kUnit - 1) / U::kUnit;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  float amax = 0.f;
  int64_t last = -1;
  QParams q;
  for (int64_t u0 = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; u0 < units; u0 += kR * stride) {
    U unit[kR];
#pragma unroll
    for (int r = 0; r < kR; ++r)
      if (u0 + r * stride < units) unit[r].load(p, u0 + r * stride);
#pragma unroll
    for (int r = 0; r < kR; ++r)
      if (u0 + r * stride < units) unit[r].finish(p, last, q, amax);
  }
  if constexpr (kOp == QuantElemOp::quant_fw) {
    if (p.amax_partial) {
      amax = block_nanmax(amax);
      if (threadIdx.x == 0) p.amax_partial[blockIdx.x] = amax;
    }
  }
}

// ---- per-tensor amax --------------------------------------------------------------------------------
template <class T, bool kVec>
__global__ void __launch_bounds__(detail::kQuantBlock) amax_kernel(const QuantLaunch p) {
  constexpr int kUnit = kVec ? static_cast<int>(16 / sizeof(T)) : 1;
  const T* x = static_cast<const T*>(p.fp[detail::kQIn0]);
  const int64_t units = (p.numel + kUnit - 1) / kUnit;
  float amax = 0.f;
  for (int64_t u = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; u < units;
       u += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t e0 = u * kUnit;
    if (kVec && e0 + kUnit <= p.numel) {
      T a[kUnit];
      load_bytes<16>(x + e0, a);
#pragma unroll
      for (int k = 0; k < kUnit; ++k) amax = nanmax(amax, fabsf(to_f32(a[k])));
    } else {
      for (int k = 0; k < kUnit && e0 + k < p.numel; ++k) {
        int64_t off[detail::kQuantSlots];
        int64_t o = e0 + k;
        if (!kVec) {
          fp_offsets(p, e0 + k, off);
          o = off[detail::kQIn0];
        }
        amax = nanmax(amax, fabsf(to_f32(x[o])));
      }
    }
  }
  amax = block_nanmax(amax);
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

// ---- dynamic per-token rows --------------------------------------------------------------------------
/// Max over the tpr threads of a group (tpr a power of two; > 32 means one group per CTA). Every
/// thread of the group gets the result.
__device__ __forceinline__ float group_nanmax(float v, int tpr, float* red) {
  const int width = tpr < 32 ? tpr : 32;
  for (int o = width / 2; o > 0; o >>= 1) v = nanmax(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (tpr > 32) {
    __syncthreads();  // red[] may still be read by the previous row's threads
    if ((threadIdx.x & 31) == 0) red[threadIdx.x / 32] = v;
    __syncthreads();
    v = red[0];
    for (int w = 1; w < tpr / 32; ++w) v = nanmax(v, red[w]);
  }
  return v;
}

/// One row's quantized element from float xf and the row's scale.
template <class Q>
__device__ __forceinline__ uint8_t row_quant(float xf, float scale, double sd, float inv, const QuantLaunch& p) {
  if constexpr (kFp8<Q>)
    return convert<Q>(xf / scale, true).__x;
  else
    return static_cast<uint8_t>(
        quant_int_clamped(xf, sd, inv, 0, static_cast<int>(p.q_min), static_cast<int>(p.q_max)));
}

template <class T, class Q, int kW, int kItems, bool kCached>
__global__ void __launch_bounds__(detail::kQuantMaxTpr) rows_kernel(const QuantLaunch p) {
  constexpr int kVecs = kItems / kW;
  __shared__ float red[detail::kQuantMaxTpr / 32];
  const int tpr = p.tpr;
  const int lane = threadIdx.x % tpr, g = threadIdx.x / tpr, groups = blockDim.x / tpr;
  const int64_t chunk = static_cast<int64_t>(tpr) * kItems;
  const T* xbase = static_cast<const T*>(p.fp[detail::kQIn0]);
  for (int64_t rb = blockIdx.x; rb * groups < p.rows; rb += gridDim.x) {
    const int64_t row = rb * groups + g;
    const bool valid = row < p.rows;
    const T* x = xbase + (valid ? row * p.x_row_stride : 0);
    uint8_t* q = static_cast<uint8_t*>(p.q_out) + (valid ? row * p.n : 0);
    T v[kItems];  // the row as loaded (16-bit types stay packed two per register)
    auto load_chunk = [&](int64_t base) {
#pragma unroll
      for (int c = 0; c < kVecs; ++c) {
        const int64_t col = base + (static_cast<int64_t>(lane) + static_cast<int64_t>(c) * tpr) * kW;
        if (valid && col < p.n) {
          if constexpr (kW > 1) {
            load_bytes<16>(x + col, v + c * kW);
          } else {
            v[c] = x[col * p.x_col_stride];
          }
        } else {
#pragma unroll
          for (int k = 0; k < kW; ++k) v[c * kW + k] = convert<T>(0.f);
        }
      }
    };
    auto chunk_amax = [&](float m) {
#pragma unroll
      for (int k = 0; k < kItems; ++k) m = nanmax(m, fabsf(to_f32(v[k])));
      return m;
    };
    float amax = 0.f;
    if constexpr (kCached) {
      load_chunk(0);
      amax = chunk_amax(amax);
    } else {
      for (int64_t base = 0; base < p.n; base += chunk) {
        load_chunk(base);
        amax = chunk_amax(amax);
      }
    }
    amax = group_nanmax(amax, tpr, red);
    const float scale = scale_of(amax, p.q_scale_max, 1.f);
    const float inv = 1.0f / scale;
    const double sd = static_cast<double>(scale);
    if (valid && lane == 0) p.scale_out[row] = scale;
    auto store_chunk = [&](int64_t base) {
#pragma unroll
      for (int c = 0; c < kVecs; ++c) {
        const int64_t col = base + (static_cast<int64_t>(lane) + static_cast<int64_t>(c) * tpr) * kW;
        if (valid && col < p.n) {
          uint8_t qb[kW];
#pragma unroll
          for (int k = 0; k < kW; ++k) qb[k] = row_quant<Q>(to_f32(v[c * kW + k]), scale, sd, inv, p);
          if constexpr (kW > 1)
            store_bytes<kW>(q + col, qb);
          else
            q[col] = qb[0];
        }
      }
    };
    if constexpr (kCached) {
      store_chunk(0);
    } else {
      for (int64_t base = 0; base < p.n; base += chunk) {
        load_chunk(base);
        store_chunk(base);
      }
    }
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

template <class T>
__global__ void __launch_bounds__(detail::kQuantBlock) learn_bw_kernel(const QuantLaunch p) {
  const T* dy = static_cast<const T*>(p.fp[detail::kQIn0]);
  const T* x = static_cast<const T*>(p.fp[detail::kQIn1]);
  T* dx = static_cast<T*>(const_cast<void*>(p.fp[detail::kQOut]));
  const int64_t A = p.axis_len, I = p.inner, len = p.outer * p.inner;
  const int64_t per = (len + p.splits - 1) / p.splits;
  auto element = [&](int64_t a, int64_t j, const QParams& q, float* ds, float* dz) {
    const int64_t o = j / I, i = j - (j / I) * I;
    const int64_t e = (o * A + a) * I + i;
    int64_t off[detail::kQuantSlots] = {e, e, e, e};
    if (!p.vec) fp_offsets(p, e, off);
    const float r = learn_one(p, q, to_f32(x[off[detail::kQIn1]]), to_f32(dy[off[detail::kQIn0]]), ds, dz);
    dx[off[detail::kQOut]] = convert<T>(r);
  };
  if (!p.columns) {  // a CTA per (split, channel), threads over the split's elements
    const int64_t split = blockIdx.x;
    const int64_t start = split * per, end = start + per < len ? start + per : len;
    for (int64_t a = blockIdx.y; a < A; a += gridDim.y) {
      const QParams q = load_qparams(p, p.per_channel ? a : 0);
      float ds = 0.f, dz = 0.f;
      for (int64_t j = start + threadIdx.x; j < end; j += blockDim.x) element(a, j, q, &ds, &dz);
      block_sum2(&ds, &dz);
      if (threadIdx.x == 0) {
        p.partial[(a * p.splits + split) * 2] = ds;
        p.partial[(a * p.splits + split) * 2 + 1] = dz;
      }
    }
  } else {  // a thread per channel (channels innermost: adjacent threads, adjacent addresses)
    const int64_t a = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    const int64_t split = blockIdx.y;
    if (a >= A) return;
    const int64_t start = split * per, end = start + per < len ? start + per : len;
    const QParams q = load_qparams(p, p.per_channel ? a : 0);
    float ds = 0.f, dz = 0.f;
    for (int64_t j = start; j < end; ++j) element(a, j, q, &ds, &dz);
    p.partial[(a * p.splits + split) * 2] = ds;
    p.partial[(a * p.splits + split) * 2 + 1] = dz;
  }
}

template <class T>
__global__ void __launch_bounds__(detail::kQuantBlock) learn_sum_kernel(const QuantLaunch p) {
  const int64_t a = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (a >= p.axis_len) return;
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
  if (p.vec)
    elem_kernel<T, Q, kOp, true><<<grid, block, 0, stream>>>(p);
  else
    elem_kernel<T, Q, kOp, false><<<grid, block, 0, stream>>>(p);
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

template <class T, class Q, int kW>
cudaError_t launch_rows_w(const QuantLaunch& p, cudaStream_t stream) {
  const int groups = p.block / p.tpr;
  int64_t blocks = (p.rows + groups - 1) / groups;
  if (blocks > (int64_t{1} << 20)) blocks = int64_t{1} << 20;  // rows past the grid: the loop tiles them
  const dim3 grid(static_cast<unsigned>(blocks)), block(static_cast<unsigned>(p.block));
  if (p.items == kW)
    rows_kernel<T, Q, kW, kW, true><<<grid, block, 0, stream>>>(p);
  else if (p.cached)
    rows_kernel<T, Q, kW, kW * detail::kQuantBigVectors, true><<<grid, block, 0, stream>>>(p);
  else
    rows_kernel<T, Q, kW, kW * detail::kQuantBigVectors, false><<<grid, block, 0, stream>>>(p);
  return cudaGetLastError();
}

template <class T>
cudaError_t launch_rows(const QuantLaunch& p, cudaStream_t stream) {
  constexpr int kV = static_cast<int>(16 / sizeof(T));
  auto go = [&](auto tag) {
    using Q = typename decltype(tag)::type;
    return p.vec ? launch_rows_w<T, Q, kV>(p, stream) : launch_rows_w<T, Q, 1>(p, stream);
  };
  switch (p.q_dtype) {
    case DType::s8:
      return go(Tag<int8_t>{});
    case DType::f8e4m3:
      return go(Tag<__nv_fp8_e4m3>{});
    case DType::f8e5m2:
      return go(Tag<__nv_fp8_e5m2>{});
    default:
      return cudaErrorInvalidValue;
  }
}

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
      dim3 grid;
      if (p.columns)
        grid = dim3(static_cast<unsigned>((p.axis_len + detail::kQuantBlock - 1) / detail::kQuantBlock),
                    static_cast<unsigned>(p.splits));
      else
        grid = dim3(static_cast<unsigned>(p.splits), static_cast<unsigned>(p.axis_len < 65535 ? p.axis_len : 65535));
      learn_bw_kernel<T><<<grid, block, 0, stream>>>(p);
      return cudaGetLastError();
    }
    case QuantStep::learnable_sum:
      learn_sum_kernel<T><<<dim3(static_cast<unsigned>((p.axis_len + detail::kQuantBlock - 1) / detail::kQuantBlock)),
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
