// Dynamic quantization by rows: per-token (a row of the last dim) and per-group (G consecutive
// elements of it), symmetric (scale = amax / q_max) or asymmetric (torch.ao's
// choose_qparams_per_token_asymmetric and quantize_per_token), the scale and zero point computed in
// the same kernel as the codes: one read of x. Explicitly instantiated per floating-point dtype in
// quant_rows_<dtype>.cu, apart from the elementwise kernels of quant_<dtype>.cu, so that the two
// compile in parallel (8 quantized-side variants x 6 launch shapes per dtype).
//
// A group of tpr threads (a power of two) owns a row: a CTA of 128 per 4096-element 16-bit row
// (rows_kernel, kQuantBigVectors 16-byte vectors a thread), a sub-warp per per-group group (bf16
// G = 64 / 128 / 256: 2 / 4 / 8 threads of rows_kernel; G <= 32: one vector a thread of
// rows_small_kernel, kQuantSmallRows rows at once), so the reductions are shuffles; only rows
// wider than a warp's registers take a shared-memory step (group_nanmax). Rows
// are held as raw 16-byte words (16-bit types two a register) and decoded at use; rows longer than
// 512 x kQuantBigVectors vectors stream twice.
#pragma once
#include "ops/quant/quant_kernel.cuh"

namespace baracuda::kern::quant {

/// NaN-propagating float32 min / max in one instruction each (sm_80+).
__device__ __forceinline__ float fmin_nan(float a, float b) {
  float r;
  asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}
__device__ __forceinline__ float fmax_nan(float a, float b) {
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

/// Max over the tpr threads of a group (tpr a power of two; > 32 means one group per CTA). Every
/// thread of the group gets the result. NaN propagates, as a NaN of unspecified payload: one
/// max.NaN a step (fmax_nan) instead of nanmax's compare, NaN test and select. Used for the
/// symmetric max |x| only, where that changes no output bit: the values are >= +0 (AbsMax clears
/// the sign), so between non-NaN values both give the same larger value, and a NaN maximum only
/// selects scale_of's fallback (and bounded = false), whatever its payload.
__device__ __forceinline__ float group_nanmax(float v, int tpr, float* red) {
  const int width = tpr < 32 ? tpr : 32;
  for (int o = width / 2; o > 0; o >>= 1) v = fmax_nan(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (tpr > 32) {
    __syncthreads();  // red[] may still be read by the previous row's threads
    if ((threadIdx.x & 31) == 0) red[threadIdx.x / 32] = v;
    __syncthreads();
    v = red[0];
    for (int w = 1; w < tpr / 32; ++w) v = fmax_nan(v, red[w]);
  }
  return v;
}

/// The asymmetric rows' group max and min at once: mx (thread maxima) and mn (thread minima) over
/// the tpr threads of a group, one max.NaN / min.NaN a step each, and for a group wider than a warp
/// both through one pair of CTA barriers instead of group_nanmax's two pairs. red holds
/// 2 x kQuantMaxTpr / 32 floats.
///
/// Why these bits equal the old reduction's (group_nanmax(mx) and group_nanmax(-mn), nanmax a
/// step): (1) between non-NaN values both give the larger / smaller, up to the sign of a zero
/// result, which asym_qparams erases (nanmax(hi, 0) / nanmin(lo, 0) give +0 for either zero).
/// (2) A NaN: MinMax's thread extremes come out of max.NaN / min.NaN, whose NaN is the canonical
/// 0x7fffffff, so the old max reduction returned that NaN, and the old reduction of -mn the
/// negated canonical NaN, which row_qparams negated back to 0x7fffffff; min.NaN / max.NaN here
/// return 0x7fffffff, and the caller passes -mn, which row_qparams negates back to 0x7fffffff. So
/// row_qparams sees the same bits, NaN or not, without relying on how float arithmetic treats NaN
/// payloads.
__device__ __forceinline__ void group_minmax(float& mx, float& mn, int tpr, float* red) {
  constexpr int kWarps = detail::kQuantMaxTpr / 32;
  const int width = tpr < 32 ? tpr : 32;
  for (int o = width / 2; o > 0; o >>= 1) {
    mx = fmax_nan(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    mn = fmin_nan(mn, __shfl_xor_sync(0xffffffffu, mn, o));
  }
  if (tpr > 32) {
    __syncthreads();  // red[] may still be read by the previous row's threads
    if ((threadIdx.x & 31) == 0) {
      red[threadIdx.x / 32] = mx;
      red[kWarps + threadIdx.x / 32] = mn;
    }
    __syncthreads();
    mx = red[0];
    mn = red[kWarps];
    for (int w = 1; w < tpr / 32; ++w) {
      mx = fmax_nan(mx, red[w]);
      mn = fmin_nan(mn, red[kWarps + w]);
    }
  }
}

/// min that propagates NaN from either side (torch.amin / torch.minimum).
__device__ __forceinline__ float nanmin(float a, float b) { return (a != a || a < b) ? a : b; }

/// Signed min and max of a thread's elements, NaN propagating (torch.amin / amax), on the raw words
/// of the row: 16-bit types two a word with min.NaN / max.NaN on the pair (one instruction per two
/// elements and bound), float32 one a word, float64 rounded to float32 first (x.float(); rounding is
/// monotonic). Starts from 0: the rows kernel's zero padding and torch's min(min, 0) / max(max, 0)
/// include 0 anyway.
template <class T>
struct MinMax {
  static constexpr bool kPairs = sizeof(T) == 2;
  using P = cuda::std::conditional_t<cuda::std::is_same_v<T, __half>, __half2, __nv_bfloat162>;
  uint32_t lo = 0, hi = 0;  ///< pairs of T (16-bit), or float32 bits
  template <int W>
  __device__ __forceinline__ void add_words(const uint32_t (&w)[W]) {
#pragma unroll
    for (int j = 0; j < W; ++j) {
      if constexpr (kPairs) {
        P a, b, v;
        memcpy(&a, &lo, 4);
        memcpy(&b, &hi, 4);
        memcpy(&v, &w[j], 4);
        a = __hmin2_nan(a, v);
        b = __hmax2_nan(b, v);
        memcpy(&lo, &a, 4);
        memcpy(&hi, &b, 4);
      } else if constexpr (sizeof(T) == 4) {
        lo = __float_as_uint(fmin_nan(__uint_as_float(lo), __uint_as_float(w[j])));
        hi = __float_as_uint(fmax_nan(__uint_as_float(hi), __uint_as_float(w[j])));
      } else if (j % 2 == 0) {  // float64: words (j, j + 1) hold one element
        const float f = static_cast<float>(__hiloint2double(static_cast<int>(w[j + 1]), static_cast<int>(w[j])));
        lo = __float_as_uint(fmin_nan(__uint_as_float(lo), f));
        hi = __float_as_uint(fmax_nan(__uint_as_float(hi), f));
      }
    }
  }
  __device__ __forceinline__ float min() const { return value(lo, true); }
  __device__ __forceinline__ float max() const { return value(hi, false); }

 private:
  __device__ __forceinline__ static float value(uint32_t v, bool is_min) {
    if constexpr (kPairs) {
      P pv;
      memcpy(&pv, &v, 4);
      const float a = static_cast<float>(pv.x), b = static_cast<float>(pv.y);
      return is_min ? fmin_nan(a, b) : fmax_nan(a, b);
    } else {
      return __uint_as_float(v);
    }
  }
};

/// v rounded to T's precision (float16 / bfloat16: each torch op on a tensor of that dtype computes
/// in float and rounds to it); float32, and float64 inputs (taken as x.float()), keep float32.
template <class T>
__device__ __forceinline__ float round_to(float v) {
  if constexpr (cuda::std::is_same_v<T, __nv_bfloat16>)
    return __bfloat162float(__float2bfloat16_rn(v));
  else if constexpr (cuda::std::is_same_v<T, __half>)
    return __half2float(__float2half_rn(v));
  else
    return v;
}

/// torch.ao's _choose_qparams_per_token_asymmetric_impl (torch/ao/quantization/fx/_decomposed.py)
/// for one row with min mn and max mx, op by op as it runs on a tensor of T (see quant.hpp), with
/// its [-128, 127] generalised to [qmin, qmax]. s: the scale (a value of T); zp: the zero point as
/// an integer (a NaN zero point -> 0).
template <class T>
__device__ __forceinline__ void asym_qparams(float mn, float mx, float qmin, float qmax, float& s, int& zp) {
  const float lo = nanmin(mn, 0.f), hi = nanmax(mx, 0.f);  // torch.min / torch.max with zeros
  // (hi - lo) / float(qmax - qmin): ATen divides by a CPU scalar as a product with its float reciprocal.
  s = round_to<T>(round_to<T>(hi - lo) * (1.0f / (qmax - qmin)));
  s = s != s ? s : fmaxf(s, 0x1p-23f);  // clamp(min=torch.finfo(torch.float32).eps); NaN stays
  const float dmin = round_to<T>(lo / s), dmax = round_to<T>(hi / s);
  const bool from_min = round_to<T>(round_to<T>(qmin + dmin) + round_to<T>(qmax + dmax)) > 0.f;
  float z = from_min ? round_to<T>(qmin - dmin) : round_to<T>(qmax - dmax);
  z = z != z ? z : rintf(fminf(fmaxf(z, qmin), qmax));  // clamp (NaN stays), then round half to even
  zp = z != z ? 0 : static_cast<int>(z);
}

/// quantize_per_token's code, exactly: clamp(round(double(x) * (1.0 / double(s)) + zp)), each double
/// op rounded (torch's mul, reciprocal, add, round, clamp; NaN -> 0).
__device__ __forceinline__ int quant_decomposed_one(float xf, double r, int zp, int lo, int hi) {
  const double v = rint(__dadd_rn(__dmul_rn(static_cast<double>(xf), r), static_cast<double>(zp)));
  if (v != v) return 0;
  return static_cast<int>(fmin(fmax(v, static_cast<double>(lo)), static_cast<double>(hi)));
}

/// The asymmetric codes of N elements sharing q (scale s, zero point zi): away from a rounding tie,
/// round(x * (1 / s) + zp) in double is rint(x / s) + zp, which quant_magic computes in float and
/// certifies with its tie margin (the double formula is within 2^-50 relative of x / s + zp). Near a
/// tie the double products decide, not round-half-even (torch's x * (1 / s) is not x / s), so the
/// elements quant_magic flags are redone in double: exact ties are the only near ties of bf16 rows
/// (~0.06% of elements with s = (max - min) / 255), ~0.5% of 8-element units, ~14% of a warp's.
///
/// Only the flagged elements are redone, inline, with the double reciprocal computed once a unit.
/// Why: the unit used to go to an out-of-line function that redid all N elements in double
/// (~240 instructions with the reciprocal, plus the call's register saves and spills) for one tie,
/// and a warp takes that branch at ~14% of its units: ~35 instructions a warp-unit on average,
/// a third of the ~95 of the fast path. Bit-identical: a flagged element takes exactly the old
/// computation; an unflagged one keeps its certified code k + zp (clamped), which the double formula
/// also gives: quant_magic's certificate puts x / s more than 2^-22 |x / s| (and 0.46 when
/// |x / s| < 0.04) from every half-integer, the double formula is within |x / s| 2^-51 + |zp| 2^-53
/// of x / s + zp (|zp| < 2^20, else every element is flagged: invm = inf), so its rint is k + zp.
template <class T, int N>
__device__ __forceinline__ void quant_unit_decomposed_fix(const uint32_t (&a)[kRawWords<T, N>], const QParams& q,
                                                          int lo, int hi, uint32_t (&c)[N]) {
  const double r = 1.0 / static_cast<double>(q.s);  // torch: scales.reciprocal() (float64 scales)
  const int zp = static_cast<int>(q.zi);
#pragma unroll
  for (int k = 0; k < N; ++k) {
    const float xf = raw_f32<T>(a, k);
    bool flagged = false;
    (void)quant_magic(xf, q, flagged);  // the fast path's test, recomputed (same operations, same flag)
    if (flagged) c[k] = static_cast<uint32_t>(quant_decomposed_one(xf, r, zp, lo, hi));  // low byte / nibble: the code
  }
}

template <class T, class Q, int N>
__device__ __forceinline__ void quant_unit_decomposed(const uint32_t (&a)[kRawWords<T, N>], const QParams& q, float ylo,
                                                      float yhi, int lo, int hi, uint32_t (&w)[kCodeWords<Q, N>]) {
  bool bad = false;
  uint32_t c[N];
#pragma unroll
  for (int k = 0; k < N; ++k) c[k] = __float_as_uint(fminf(fmaxf(quant_magic(raw_f32<T>(a, k), q, bad), ylo), yhi));
  if (bad) quant_unit_decomposed_fix<T, N>(a, q, lo, hi, c);
  pack_codes<Q, N>(c, w);
}

/// One scalar row element's symmetric code: the per-element forms of quant_unit.
template <class Q>
__device__ __forceinline__ uint32_t row_quant(float xf, const QParams& q, float ylo, float yhi, const QuantLaunch& p) {
  if constexpr (kFp8<Q>)
    return convert<Q>(fp8_quot(xf, q), true).__x;
  else
    return static_cast<uint32_t>(quant_int_one(xf, q, p, ylo, yhi)) & 0xffu;
}

/// Element offset of row `row` in x: per-token the token row; per-group group row % group_rows of
/// token row / group_rows.
__device__ __forceinline__ int64_t row_x_offset(int64_t row, const QuantLaunch& p) {
  const int64_t tok = p.group_rows > 1 ? static_cast<int64_t>(div_of(row, p.div_group_rows, p.wide)) : row;
  return tok * p.x_row_stride + (row - tok * p.group_rows) * p.n * p.x_col_stride;
}

/// The vector of row x at column col: 16 bytes (kVec16), or kW elements col_stride apart; zeros when
/// !in (+0 raises neither max |x| nor the [min, max] with 0).
template <class T, int kW, bool kVec16>
__device__ __forceinline__ void load_row_vec(const T* x, int64_t col, bool in, const QuantLaunch& p,
                                             uint32_t (&v)[kRawWords<T, kW>]) {
#pragma unroll
  for (int j = 0; j < kRawWords<T, kW>; ++j) v[j] = 0;
  if (in) {
    if constexpr (kVec16) {
      load_bytes<16>(x + col, v);
    } else {
#pragma unroll
      for (int k = 0; k < kW; ++k) raw_set<T>(v, k, x[(col + k) * p.x_col_stride]);
    }
  }
}

/// A row's scale (and zero point) from its reduced extremes: kAsym, torch.ao's from the max `hi` and
/// the negated min `neg_lo`; else amax / q_max from max |x| `hi`.
template <class T, bool kAsym>
__device__ __forceinline__ QParams row_qparams(float hi, float neg_lo, const QuantLaunch& p) {
  QParams qp;
  if constexpr (kAsym) {
    int zp;
    asym_qparams<T>(-neg_lo, hi, static_cast<float>(p.q_min), static_cast<float>(p.q_max), qp.s, zp);
    qp.zi = zp;
    qp.zf = static_cast<float>(zp);
  } else {
    qp.s = scale_of(hi, p.q_scale_max, 1.f);
    // scale_of's own scale, and codes that cannot leave [q_min, q_max] (rint_code_bounded: no clamp)
    qp.bounded = hi > 0.f && hi <= cuda::std::numeric_limits<float>::max() &&
                 static_cast<float>(p.q_min) <= -p.q_scale_max && static_cast<float>(p.q_max) >= p.q_scale_max;
  }
  finish_qparams(p, qp);
  return qp;
}

/// The codes of one vector of a row: quantize_per_token's (kAsym), or the symmetric exact tie rule.
template <class T, class Q, int kW, bool kAsym>
__device__ __forceinline__ void row_codes(const uint32_t (&v)[kRawWords<T, kW>], const QParams& qp, float ylo,
                                          float yhi, const QuantLaunch& p, uint32_t (&w)[kCodeWords<Q, kW>]) {
  if constexpr (kAsym)
    quant_unit_decomposed<T, Q, kW>(v, qp, ylo, yhi, static_cast<int>(p.q_min), static_cast<int>(p.q_max), w);
  else if constexpr (kW > 1)
    quant_unit<T, Q, kW, true>(v, qp, ylo, yhi, p, w);
  else
    w[0] = row_quant<Q>(raw_f32<T>(v, 0), qp, ylo, yhi, p);
}

/// kW elements a vector: 16 bytes (kVec, kW = 16 / sizeof(T)), or on the strided path one element
/// (two for packed int4, so that a thread writes whole bytes); kVecs vectors a thread. kVec is its
/// own parameter: f64's strided int4 pair is also 16 bytes, and must still load with the stride. kAsym: min / max,
/// torch.ao's scale and zero point, quantize_per_token's codes; else max |x| and amax / q_max.
/// kBoundThreads / kMinBlocks: the __launch_bounds__ (launch_rows_w keeps the defaults; other values,
/// which cap the registers for more co-resident CTAs, are timed by devx/quant_dyn). A launch must not
/// exceed kBoundThreads threads a CTA. kMinBlocks 0 emits no .minnctapersm, as a bound without it:
/// an explicit 1 lets ptxas take more registers (bf16 -> int8 cached: 75 instead of 64, 6 CTAs of 128
/// an SM instead of 8).
template <class T, class Q, int kW, int kVecs, bool kCached, bool kAsym, bool kVec16,
          int kBoundThreads = detail::kQuantMaxTpr, int kMinBlocks = 0>
__global__ void __launch_bounds__(kBoundThreads, kMinBlocks) rows_kernel(const QuantLaunch p) {
  static_assert(!kVec16 || kW * sizeof(T) == 16, "a vector is 16 bytes");
  constexpr int kRW = kRawWords<T, kW>;
  constexpr int kQB = kCodeBytes<Q, kW>;
  __shared__ float red[2 * detail::kQuantMaxTpr / 32];
  const int tpr = p.tpr;
  const int lane = threadIdx.x % tpr, g = threadIdx.x / tpr, groups = blockDim.x / tpr;
  const int64_t chunk = static_cast<int64_t>(tpr) * kW * kVecs;
  const int64_t q_row = kPacked<Q> ? p.n / 2 : p.n;  // code bytes of a row
  const T* xbase = static_cast<const T*>(p.fp[detail::kQIn0]);
  const float ylo = 0x1.8p23f + static_cast<float>(p.q_min), yhi = 0x1.8p23f + static_cast<float>(p.q_max);
  for (int64_t rb = blockIdx.x; rb * groups < p.rows; rb += gridDim.x) {
    const int64_t row = rb * groups + g;
    const bool valid = row < p.rows;
    const T* x = xbase + (valid ? row_x_offset(row, p) : 0);
    uint8_t* q = static_cast<uint8_t*>(p.q_out) + (valid ? row * q_row : 0);
    uint32_t v[kVecs][kRW];
    auto col_of = [&](int64_t base, int c) {
      return base + (static_cast<int64_t>(lane) + static_cast<int64_t>(c) * tpr) * kW;
    };
    auto load_chunk = [&](int64_t base) {
#pragma unroll
      for (int c = 0; c < kVecs; ++c) {
        const int64_t col = col_of(base, c);
        load_row_vec<T, kW, kVec16>(x, col, valid && col < p.n, p, v[c]);
      }
    };
    AbsMax<T> am;
    MinMax<T> mm;
    auto chunk_reduce = [&] {
#pragma unroll
      for (int c = 0; c < kVecs; ++c) {
        if constexpr (kAsym)
          mm.add_words(v[c]);
        else
          am.add_words(v[c]);
      }
    };
    if constexpr (kCached) {
      load_chunk(0);
      chunk_reduce();
    } else {
      for (int64_t base = 0; base < p.n; base += chunk) {
        load_chunk(base);
        chunk_reduce();
      }
    }
    QParams qp;
    if constexpr (kAsym) {
      float mx = mm.max(), mn = mm.min();
      group_minmax(mx, mn, tpr, red);
      qp = row_qparams<T, true>(mx, -mn, p);
    } else {
      qp = row_qparams<T, false>(group_nanmax(am.value(), tpr, red), 0.f, p);
    }
    if (valid && lane == 0) {
      p.scale_out[row] = qp.s;
      if constexpr (kAsym) p.zero_point_out[row] = static_cast<int32_t>(qp.zi);
    }
    auto store_chunk = [&](int64_t base) {
#pragma unroll
      for (int c = 0; c < kVecs; ++c) {
        const int64_t col = col_of(base, c);
        if (valid && col < p.n) {
          uint32_t w[kCodeWords<Q, kW>];
          row_codes<T, Q, kW, kAsym>(v[c], qp, ylo, yhi, p, w);
          store_bytes<kQB>(q + (kPacked<Q> ? col / 2 : col), w);
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

/// Rows of at most kQuantBigVectors single vectors (p.items == kW, tpr <= 4: small per-group groups,
/// very short per-token rows): a group of tpr threads, one vector a thread, takes kQuantSmallRows rows at once,
/// each phase over all of them before the next: R independent loads in flight, then R interleaved
/// shuffle reductions, then R scales and R code stores. Why: with one row a group each thread's work
/// was a single dependent chain (load -> shuffles -> scale -> tie-rule codes -> store) with 16 bytes
/// in flight, and the CTA ended (H100, [16384, 4096] bf16 -> int8, G = 128: 145.7 us, 46% of copy
/// bandwidth; with R = 4: 116.0 us, 58%). Row r of CTA block rb is (rb * R + r) * groups + g, so
/// each load instruction of the CTA reads `groups` consecutive rows: consecutive groups of a token
/// row are adjacent in memory, one contiguous 2 KiB span (bf16, G = 128) a step, R steps 8 KiB.
template <class T, class Q, int kW, bool kAsym, bool kVec16>
__global__ void __launch_bounds__(detail::kQuantRowsBlock) rows_small_kernel(const QuantLaunch p) {
  static_assert(!kVec16 || kW * sizeof(T) == 16, "a vector is 16 bytes");
  constexpr int R = detail::kQuantSmallRows;
  constexpr int kQB = kCodeBytes<Q, kW>;
  const int tpr = p.tpr;
  const int lane = threadIdx.x % tpr, g = threadIdx.x / tpr, groups = blockDim.x / tpr;
  const int64_t col = static_cast<int64_t>(lane) * kW;
  const bool in_row = col < p.n;
  const int64_t q_row = kPacked<Q> ? p.n / 2 : p.n;  // code bytes of a row
  const T* xbase = static_cast<const T*>(p.fp[detail::kQIn0]);
  const float ylo = 0x1.8p23f + static_cast<float>(p.q_min), yhi = 0x1.8p23f + static_cast<float>(p.q_max);
  const int64_t span = static_cast<int64_t>(groups) * R;  // rows a CTA takes a step
  for (int64_t rb = blockIdx.x; rb * span < p.rows; rb += gridDim.x) {
    uint32_t v[R][kRawWords<T, kW>];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int64_t row = (rb * R + r) * groups + g;
      const bool valid = row < p.rows;
      load_row_vec<T, kW, kVec16>(xbase + (valid ? row_x_offset(row, p) : 0), col, valid && in_row, p, v[r]);
    }
    // Per row: max |x| (or max and -min) of the thread, then over the group; rows interleaved so
    // that R shuffles are in flight at each step. Every lane takes part (rows past the end hold zeros).
    float hi[R], neg_lo[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if constexpr (kAsym) {
        MinMax<T> mm;
        mm.add_words(v[r]);
        hi[r] = mm.max();
        neg_lo[r] = -mm.min();
      } else {
        AbsMax<T> am;
        am.add_words(v[r]);
        hi[r] = am.value();
        neg_lo[r] = 0.f;
      }
    }
    for (int o = tpr / 2; o > 0; o >>= 1) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        hi[r] = nanmax(hi[r], __shfl_xor_sync(0xffffffffu, hi[r], o));
        if constexpr (kAsym) neg_lo[r] = nanmax(neg_lo[r], __shfl_xor_sync(0xffffffffu, neg_lo[r], o));
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int64_t row = (rb * R + r) * groups + g;
      if (row >= p.rows) continue;
      const QParams qp = row_qparams<T, kAsym>(hi[r], neg_lo[r], p);
      if (lane == 0) {
        p.scale_out[row] = qp.s;
        if constexpr (kAsym) p.zero_point_out[row] = static_cast<int32_t>(qp.zi);
      }
      if (in_row) {
        uint32_t w[kCodeWords<Q, kW>];
        row_codes<T, Q, kW, kAsym>(v[r], qp, ylo, yhi, p, w);
        uint8_t* q = static_cast<uint8_t*>(p.q_out) + row * q_row;
        store_bytes<kQB>(q + (kPacked<Q> ? col / 2 : col), w);
      }
    }
  }
}

template <class T, class Q, int kW, bool kAsym, bool kVec>
cudaError_t launch_rows_w(const QuantLaunch& p, cudaStream_t stream) {
  const bool small = p.items == kW;  // rows_config: tpr <= kQuantBigVectors, a CTA of kQuantRowsBlock
  const int64_t span = static_cast<int64_t>(p.block / p.tpr) * (small ? detail::kQuantSmallRows : 1);
  int64_t blocks = (p.rows + span - 1) / span;
  if (blocks > (int64_t{1} << 20)) blocks = int64_t{1} << 20;  // rows past the grid: the loop tiles them
  const dim3 grid(static_cast<unsigned>(blocks)), block(static_cast<unsigned>(p.block));
  // rows_config's wide rows (kQuantWideVectors): symmetric int8 codes of 16-bit rows only.
  constexpr bool kWideOk = !kAsym && kVec && sizeof(T) == 2 && cuda::std::is_same_v<Q, int8_t>;
  const bool wide = p.items == kW * detail::kQuantWideVectors;
  if (small) {
    rows_small_kernel<T, Q, kW, kAsym, kVec><<<grid, block, 0, stream>>>(p);
  } else if (wide) {
    if (!kWideOk || !p.cached || p.block > detail::kQuantWideMaxTpr) return cudaErrorInvalidValue;
    if constexpr (kWideOk)
      rows_kernel<T, Q, kW, detail::kQuantWideVectors, true, false, true, detail::kQuantWideMaxTpr, 6>
          <<<grid, block, 0, stream>>>(p);
  } else if (p.cached)
    rows_kernel<T, Q, kW, detail::kQuantBigVectors, true, kAsym, kVec><<<grid, block, 0, stream>>>(p);
  else
    rows_kernel<T, Q, kW, detail::kQuantBigVectors, false, kAsym, kVec><<<grid, block, 0, stream>>>(p);
  return cudaGetLastError();
}

/// The variants select() admits: symmetric for signed and fp8 codes (int8, int4, fp8), asymmetric
/// (zp_mode int32) for integer codes.
template <class T>
cudaError_t launch_rows(const QuantLaunch& p, cudaStream_t stream) {
  constexpr int kV = static_cast<int>(16 / sizeof(T));
  const bool asym = p.zp_mode == QuantZpMode::int32;
  auto go = [&](auto tag, auto asym_tag) {
    using Q = typename decltype(tag)::type;
    constexpr bool kA = decltype(asym_tag)::value;
    constexpr int kScalar = kPacked<Q> ? 2 : 1;
    return p.vec ? launch_rows_w<T, Q, kV, kA, true>(p, stream) : launch_rows_w<T, Q, kScalar, kA, false>(p, stream);
  };
  using Sym = cuda::std::false_type;
  using Asym = cuda::std::true_type;
  switch (p.q_dtype) {
    case DType::s8:
      return asym ? go(Tag<int8_t>{}, Asym{}) : go(Tag<int8_t>{}, Sym{});
    case DType::s4:
      return asym ? go(Tag<PackedS4>{}, Asym{}) : go(Tag<PackedS4>{}, Sym{});
    case DType::u8:
      return asym ? go(Tag<uint8_t>{}, Asym{}) : cudaErrorInvalidValue;
    case DType::u4:
      return asym ? go(Tag<PackedU4>{}, Asym{}) : cudaErrorInvalidValue;
    case DType::f8e4m3:
      return asym ? cudaErrorInvalidValue : go(Tag<__nv_fp8_e4m3>{}, Sym{});
    case DType::f8e5m2:
      return asym ? cudaErrorInvalidValue : go(Tag<__nv_fp8_e5m2>{}, Sym{});
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace baracuda::kern::quant

#define BARACUDA_QUANT_ROWS_INSTANTIATE(D)                                                                \
  template cudaError_t baracuda::kern::quant::launch_rows<baracuda::kern::storage_t<baracuda::DType::D>>( \
      const baracuda::detail::QuantLaunch& p, cudaStream_t stream);
