// The GGUF block readers (one functor a format) and the two consumers of what they read (the
// dequantizer's and the matvec's sinks); gguf_kernel.cuh holds the kernels around them. Device code
// with no kernel, no launch and no CUDA built-in variable, so a host harness can include it with a few
// intrinsic stand-ins to check the readers against a reference bit for bit.
//
// A format's `visit(block, region, sink)` reads one region of a block (the whole block for the
// 32-element formats, a quarter of a 256-element k-quant block) from shared memory and hands the
// sink, sub-block by sub-block, `group(scale, min, g)` (g: the sub-block's index within the region),
// words of four codes `word(slot, codes)` (the unsigned bit fields of the elements at region slots
// slot .. slot + 3, one a byte; k_of() maps a slot to the element's k) and `end()`. Slots and g are
// compile-time constants after unrolling, so a sink's addressing folds into constant offsets. The
// value of code c is scale * (c - F::kOffset) + min (min only where the format has one).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cuda/std/type_traits>

#include "ops/quant/gguf_launch.hpp"

namespace baracuda::kern::gguf {

using detail::GgufShape;

// ---- shared-memory reads ------------------------------------------------------------------------------------
/// N little-endian words from `p` (a shared-memory address aligned to kAlign = 2, 4, 8 or 16 bytes).
/// 2-byte aligned data takes N aligned words (N + 1 when it starts mid-word) and a funnel shift by 0
/// or 16 bits (no branch).
template <int N, int kAlign>
__device__ __forceinline__ void load_words(const uint8_t* p, uint32_t (&w)[N]) {
  if constexpr (kAlign % 16 == 0 && N % 4 == 0) {
#pragma unroll
    for (int i = 0; i < N / 4; ++i) {
      const uint4 v = reinterpret_cast<const uint4*>(p)[i];
      w[4 * i] = v.x, w[4 * i + 1] = v.y, w[4 * i + 2] = v.z, w[4 * i + 3] = v.w;
    }
  } else if constexpr (kAlign % 8 == 0 && N % 2 == 0) {
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
      const uint2 v = reinterpret_cast<const uint2*>(p)[i];
      w[2 * i] = v.x, w[2 * i + 1] = v.y;
    }
  } else if constexpr (kAlign % 4 == 0) {
#pragma unroll
    for (int i = 0; i < N; ++i) w[i] = reinterpret_cast<const uint32_t*>(p)[i];
  } else {
    static_assert(kAlign % 2 == 0, "GGUF fields are at least 2-byte aligned");
    const uint32_t mis = static_cast<uint32_t>(__cvta_generic_to_shared(p)) & 3u;  // 0 or 2
    const uint32_t* q = reinterpret_cast<const uint32_t*>(p - mis);
    uint32_t v[N + 1];
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] = q[i];
    // Word N holds the last 2 bytes only when the data starts 2 bytes into a word; otherwise it lies
    // past the field (past the staged bytes, even past the allocation, for a step's last block).
    v[N] = mis ? q[N] : 0u;
#pragma unroll
    for (int i = 0; i < N; ++i) w[i] = __funnelshift_r(v[i], v[i + 1], mis * 8);
  }
}

/// The IEEE half at `p` (2-byte aligned) as float (exact).
__device__ __forceinline__ float half_at(const uint8_t* p) {
  return __half2float(__ushort_as_half(*reinterpret_cast<const unsigned short*>(p)));
}

__device__ __forceinline__ uint32_t lo4(uint32_t w) { return w & 0x0F0F0F0Fu; }
__device__ __forceinline__ uint32_t hi4(uint32_t w) { return (w >> 4) & 0x0F0F0F0Fu; }
/// Bits 0..3 of `x` (x < 16) to bit 4 of bytes 0..3: x * (2^4 + 2^11 + 2^18 + 2^25) puts bit i at
/// 8i + 4; the other partial products land on distinct positions that are never 8j + 4 (no carries).
__device__ __forceinline__ uint32_t bit4_of_bytes(uint32_t x) { return (x * 0x02040810u) & 0x10101010u; }
/// Byte i of w.
__device__ __forceinline__ uint32_t byte_of(uint32_t w, uint32_t i) { return (w >> (8 * i)) & 0xFFu; }

/// Code i (byte i of `codes`) minus kOffset, as float, exactly: the byte under the exponent of 2^23.
template <int kOffset>
__device__ __forceinline__ float code_value(uint32_t codes, int i) {
  return __uint_as_float(__byte_perm(codes, 0x4B000000u, 0x7440u + i)) - (8388608.f + kOffset);
}

// ---- the formats ----------------------------------------------------------------------------------------------
/// Alignment (bytes) of every block in shared memory: blocks are staged at their global address
/// modulo 16, the weight is 16-byte aligned and rows are whole blocks.
template <GgufFormat kF>
inline constexpr int kBlockAlign = (detail::gguf_shape(kF).block_bytes & 15) == 0  ? 16
                                   : (detail::gguf_shape(kF).block_bytes & 7) == 0 ? 8
                                   : (detail::gguf_shape(kF).block_bytes & 3) == 0 ? 4
                                                                                   : 2;

template <GgufFormat kF, int kOff>
struct FormatBase {
  static constexpr GgufFormat kFormat = kF;
  static constexpr GgufShape kShape = detail::gguf_shape(kF);
  static constexpr int kOffset = kOff;
  static constexpr int kAlign = kBlockAlign<kF>;
};

/// Elements a region, and where element k of a block sits: contiguous regions (k = r len + slot), or,
/// interleaved (q2_K, q3_K, q6_K), k = 128n + 32j + 16h + l (l < 16) in region r = 2n + h at slot 16j + l.
template <class F>
inline constexpr int kRegionLen = F::kShape.block_size / F::kShape.regions;
template <class F>
__host__ __device__ __forceinline__ constexpr int k_of(int r, int slot) {
  if constexpr (F::kShape.interleaved)
    return 128 * (r >> 1) + 16 * (r & 1) + 32 * (slot >> 4) + (slot & 15);
  else
    return r * kRegionLen<F> + slot;
}
template <class F>
__host__ __device__ __forceinline__ constexpr int region_of(int k) {
  if constexpr (F::kShape.interleaved)
    return 2 * (k >> 7) + ((k >> 4) & 1);
  else
    return k / kRegionLen<F>;
}
template <class F>
__host__ __device__ __forceinline__ constexpr int slot_of(int k) {
  if constexpr (F::kShape.interleaved)
    return 16 * ((k >> 5) & 3) + (k & 15);
  else
    return k % kRegionLen<F>;
}

// block_q4_0 {half d; uint8 qs[16]}: element j = low nibble of qs[j], j + 16 = high nibble; (c - 8) d.
struct Q4_0 : FormatBase<GgufFormat::q4_0, 8> {
  template <class V>
  __device__ __forceinline__ static void visit(const uint8_t* b, int, V& v) {
    uint32_t q[4];
    load_words<4, kAlign>(b + 2, q);
    v.group(half_at(b), 0.f, 0);
#pragma unroll
    for (int t = 0; t < 4; ++t) v.word(4 * t, lo4(q[t]));
#pragma unroll
    for (int t = 0; t < 4; ++t) v.word(16 + 4 * t, hi4(q[t]));
    v.end();
  }
};

// block_q4_1 {half d; half m; uint8 qs[16]}: c d + m.
struct Q4_1 : FormatBase<GgufFormat::q4_1, 0> {
  template <class V>
  __device__ __forceinline__ static void visit(const uint8_t* b, int, V& v) {
    uint32_t q[4];
    load_words<4, kAlign>(b + 4, q);
    v.group(half_at(b), half_at(b + 2), 0);
#pragma unroll
    for (int t = 0; t < 4; ++t) v.word(4 * t, lo4(q[t]));
#pragma unroll
    for (int t = 0; t < 4; ++t) v.word(16 + 4 * t, hi4(q[t]));
    v.end();
  }
};

// block_q5_0 {half d; uint8 qh[4]; uint8 qs[16]}: bit k of qh (little-endian uint32) is bit 4 of
// element k's code; (c - 16) d.
struct Q5_0 : FormatBase<GgufFormat::q5_0, 16> {
  template <class V>
  __device__ __forceinline__ static void visit(const uint8_t* b, int, V& v) {
    uint32_t qh[1], q[4];
    load_words<1, kAlign>(b + 2, qh);
    load_words<4, kAlign>(b + 6, q);
    v.group(half_at(b), 0.f, 0);
#pragma unroll
    for (int t = 0; t < 4; ++t) v.word(4 * t, lo4(q[t]) | bit4_of_bytes((qh[0] >> (4 * t)) & 15u));
#pragma unroll
    for (int t = 0; t < 4; ++t) v.word(16 + 4 * t, hi4(q[t]) | bit4_of_bytes((qh[0] >> (16 + 4 * t)) & 15u));
    v.end();
  }
};

// block_q5_1 {half d; half m; uint8 qh[4]; uint8 qs[16]}: c d + m.
struct Q5_1 : FormatBase<GgufFormat::q5_1, 0> {
  template <class V>
  __device__ __forceinline__ static void visit(const uint8_t* b, int, V& v) {
    uint32_t qh[1], q[4];
    load_words<1, 4>(b + 4, qh);  // the block is 8-byte aligned, qh only 4
    load_words<4, kAlign>(b + 8, q);
    v.group(half_at(b), half_at(b + 2), 0);
#pragma unroll
    for (int t = 0; t < 4; ++t) v.word(4 * t, lo4(q[t]) | bit4_of_bytes((qh[0] >> (4 * t)) & 15u));
#pragma unroll
    for (int t = 0; t < 4; ++t) v.word(16 + 4 * t, hi4(q[t]) | bit4_of_bytes((qh[0] >> (16 + 4 * t)) & 15u));
    v.end();
  }
};

// block_q8_0 {half d; int8 qs[32]}: the sign bits flipped make c = q + 128; (c - 128) d.
struct Q8_0 : FormatBase<GgufFormat::q8_0, 128> {
  template <class V>
  __device__ __forceinline__ static void visit(const uint8_t* b, int, V& v) {
    uint32_t q[8];
    load_words<8, kAlign>(b + 2, q);
    v.group(half_at(b), 0.f, 0);
#pragma unroll
    for (int t = 0; t < 8; ++t) v.word(4 * t, q[t] ^ 0x80808080u);
    v.end();
  }
};

// block_q2_K {uint8 scales[16]; uint8 qs[64]; half d; half dmin}. Region r = (n, h) = (r / 2, r % 2):
// elements k = 128n + 32j + 16h + l (j = 0..3, l < 16), code (qs[32n + 16h + l] >> 2j) & 3,
// sub-block g = k / 16 = 8n + 2j + h: (d (sc & 15)) c - dmin (sc >> 4), sc = scales[g].
struct Q2_K : FormatBase<GgufFormat::q2_k, 0> {
  template <class V>
  __device__ __forceinline__ static void visit(const uint8_t* b, int r, V& v) {
    const int n = r >> 1, h = r & 1;
    const float d = half_at(b + 80), dmin = half_at(b + 82);
    uint32_t q[4];
    load_words<4, kAlign>(b + 16 + 32 * n + 16 * h, q);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int g = 8 * n + 2 * j + h;
      const uint32_t sc = b[g];
      v.group(d * static_cast<float>(sc & 15u), -(dmin * static_cast<float>(sc >> 4)), j);
#pragma unroll
      for (int t = 0; t < 4; ++t) v.word(16 * j + 4 * t, (q[t] >> (2 * j)) & 0x03030303u);  // k = 128n + 32j + 16h + 4t
      v.end();
    }
  }
};

// block_q3_K {uint8 hmask[32]; uint8 qs[64]; uint8 scales[12]; half d}. Region (n, h) as q2_K; the
// code's bit 2 is bit (4n + j) of hmask[16h + l] (set: no -4), so c = low2 | hbit << 2 and the value
// is (d (sc6 - 32)) (c - 4), sc6 the 6-bit scale of sub-block g = 8n + 2j + h: low 4 bits from byte
// g % 8 (n = 0: low nibble, n = 1: high), high 2 bits from byte 8 + g % 4 at bit 2 (g / 4).
struct Q3_K : FormatBase<GgufFormat::q3_k, 4> {
  template <class V>
  __device__ __forceinline__ static void visit(const uint8_t* b, int r, V& v) {
    const int n = r >> 1, h = r & 1;
    const float d = half_at(b + 108);
    uint32_t s[3], q[4], hm[4];
    load_words<3, kAlign>(b + 96, s);
    load_words<4, kAlign>(b + 32 + 32 * n + 16 * h, q);
    load_words<4, kAlign>(b + 16 * h, hm);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      // sub-block g = 8n + 2j + h: low 4 bits in byte g % 8 (n = 0: low nibble), high 2 in byte 8 + g % 4
      const uint32_t low = (byte_of(j < 2 ? s[0] : s[1], (2 * j + h) & 3) >> (4 * n)) & 15u;
      const uint32_t high = (s[2] >> (8 * ((2 * j) % 4 + h) + 2 * (2 * n + j / 2))) & 3u;
      const int sc6 = static_cast<int>(low | (high << 4));
      v.group(d * static_cast<float>(sc6 - 32), 0.f, j);
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        const uint32_t code = ((q[t] >> (2 * j)) & 0x03030303u) | (((hm[t] >> (4 * n + j)) & 0x01010101u) << 2);
        v.word(16 * j + 4 * t, code);
      }
      v.end();
    }
  }
};

/// get_scale_min_k4 of ggml: the 6-bit scale and minimum of sub-block j (0..7) from the 12 bytes s[3].
__device__ __forceinline__ void scale_min_k4(const uint32_t (&s)[3], int j, uint32_t& sc, uint32_t& mn) {
  const uint32_t i = j & 3;
  const uint32_t b0 = byte_of(s[0], i), b1 = byte_of(s[1], i), b2 = byte_of(s[2], i);
  if (j < 4) {
    sc = b0 & 63u;
    mn = b1 & 63u;
  } else {
    sc = (b2 & 15u) | ((b0 >> 6) << 4);
    mn = (b2 >> 4) | ((b1 >> 6) << 4);
  }
}

// block_q4_K {half d; half dmin; uint8 scales[12]; uint8 qs[128]}. Region c: qs[32c .. 32c + 32),
// low nibbles = elements 64c + l (sub-block 2c), high nibbles = 64c + 32 + l (sub-block 2c + 1):
// (d sc) c - (dmin mn).
struct Q4_K : FormatBase<GgufFormat::q4_k, 0> {
  template <class V>
  __device__ __forceinline__ static void visit(const uint8_t* b, int c, V& v) {
    const float d = half_at(b), dmin = half_at(b + 2);
    uint32_t s[3], q[8];
    load_words<3, 4>(b + 4, s);
    load_words<8, kAlign>(b + 16 + 32 * c, q);
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      uint32_t sc, mn;
      scale_min_k4(s, 2 * c + p, sc, mn);
      v.group(d * static_cast<float>(sc), -(dmin * static_cast<float>(mn)), p);
#pragma unroll
      for (int t = 0; t < 8; ++t) v.word(32 * p + 4 * t, p == 0 ? lo4(q[t]) : hi4(q[t]));  // k = 64c + 32p + 4t
      v.end();
    }
  }
};

// block_q5_K {half d; half dmin; uint8 scales[12]; uint8 qh[32]; uint8 qs[128]}: as q4_K, with bit
// (2c + p) of qh[l] as bit 4 of the code.
struct Q5_K : FormatBase<GgufFormat::q5_k, 0> {
  template <class V>
  __device__ __forceinline__ static void visit(const uint8_t* b, int c, V& v) {
    const float d = half_at(b), dmin = half_at(b + 2);
    uint32_t s[3], qh[8], q[8];
    load_words<3, 4>(b + 4, s);
    load_words<8, kAlign>(b + 16, qh);
    load_words<8, kAlign>(b + 48 + 32 * c, q);
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      uint32_t sc, mn;
      scale_min_k4(s, 2 * c + p, sc, mn);
      v.group(d * static_cast<float>(sc), -(dmin * static_cast<float>(mn)), p);
#pragma unroll
      for (int t = 0; t < 8; ++t) {
        const uint32_t high = ((qh[t] >> (2 * c + p)) & 0x01010101u) << 4;
        v.word(32 * p + 4 * t, (p == 0 ? lo4(q[t]) : hi4(q[t])) | high);
      }
      v.end();
    }
  }
};

// block_q6_K {uint8 ql[128]; uint8 qh[64]; int8 scales[16]; half d}. Region (n, h): l = 16h .. 16h + 16,
// A = ql[64n + l], B = ql[64n + 32 + l], H = qh[32n + l]; plane p = 0..3 (elements 128n + 32p + l):
// nibble lo(A), lo(B), hi(A), hi(B) | ((H >> 2p) & 3) << 4; sub-block 8n + 2p + h;
// (d scales[g]) (c - 32).
struct Q6_K : FormatBase<GgufFormat::q6_k, 32> {
  template <class V>
  __device__ __forceinline__ static void visit(const uint8_t* b, int r, V& v) {
    const int n = r >> 1, h = r & 1;
    const float d = half_at(b + 208);
    uint32_t A[4], B[4], H[4];
    load_words<4, kAlign>(b + 64 * n + 16 * h, A);
    load_words<4, kAlign>(b + 64 * n + 32 + 16 * h, B);
    load_words<4, kAlign>(b + 128 + 32 * n + 16 * h, H);
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      const int g = 8 * n + 2 * p + h;
      v.group(d * static_cast<float>(static_cast<int8_t>(b[192 + g])), 0.f, p);
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        const uint32_t nib = p == 0 ? lo4(A[t]) : p == 1 ? lo4(B[t]) : p == 2 ? hi4(A[t]) : hi4(B[t]);
        v.word(16 * p + 4 * t, nib | (((H[t] >> (2 * p)) & 0x03030303u) << 4));  // k = 128n + 32p + 16h + 4t
      }
      v.end();
    }
  }
};

/// Calls fn(F{}) with the reader of `f`: the one switch over formats (the launchers use it).
template <class Fn>
__host__ auto with_format(GgufFormat f, Fn&& fn) {
  switch (f) {
    case GgufFormat::q4_0:
      return fn(Q4_0{});
    case GgufFormat::q4_1:
      return fn(Q4_1{});
    case GgufFormat::q5_0:
      return fn(Q5_0{});
    case GgufFormat::q5_1:
      return fn(Q5_1{});
    case GgufFormat::q8_0:
      return fn(Q8_0{});
    case GgufFormat::q2_k:
      return fn(Q2_K{});
    case GgufFormat::q3_k:
      return fn(Q3_K{});
    case GgufFormat::q4_k:
      return fn(Q4_K{});
    case GgufFormat::q5_k:
      return fn(Q5_K{});
    case GgufFormat::q6_k:
      return fn(Q6_K{});
  }
  return fn(Q4_0{});
}

/// Byte offset of element k of a block in a padded tile whose elements take kElem bytes.
template <class F, int kElem>
__device__ __forceinline__ int tile_pos(int k) {
  return k * kElem + 16 * (k / F::kShape.pad_period);
}
template <class F, int kElem>
inline constexpr int kTileBlock = detail::gguf_tile_block_bytes(F::kShape, kElem);

// ---- the sinks ---------------------------------------------------------------------------------------------
template <class O>
__device__ __forceinline__ void store4(uint8_t* p, float v0, float v1, float v2, float v3) {
  if constexpr (cuda::std::is_same_v<O, float>) {
    *reinterpret_cast<float4*>(p) = make_float4(v0, v1, v2, v3);
  } else {
    uint2 u;
    if constexpr (cuda::std::is_same_v<O, __half>) {
      const __half2 a = __floats2half2_rn(v0, v1), b = __floats2half2_rn(v2, v3);
      u.x = *reinterpret_cast<const uint32_t*>(&a);
      u.y = *reinterpret_cast<const uint32_t*>(&b);
    } else {
      const __nv_bfloat162 a = __floats2bfloat162_rn(v0, v1), b = __floats2bfloat162_rn(v2, v3);
      u.x = *reinterpret_cast<const uint32_t*>(&a);
      u.y = *reinterpret_cast<const uint32_t*>(&b);
    }
    *reinterpret_cast<uint2*>(p) = u;
  }
}

/// Writes each value, ggml's formula in float32 (exact products; one rounding where a minimum is
/// subtracted), into the block's padded tile row at its element k.
template <class F, class O>
struct DequantSink {
  uint8_t* tile;  ///< the block's tile row
  int r;          ///< the region being read
  float a = 0.f, b = 0.f;
  __device__ __forceinline__ void group(float scale, float mn, int) { a = scale, b = mn; }
  __device__ __forceinline__ void word(int slot, uint32_t c) {
    float v[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float q = code_value<F::kOffset>(c, i);
      v[i] = F::kShape.has_min ? fmaf(a, q, b) : a * q;
    }
    store4<O>(tile + tile_pos<F, sizeof(O)>(k_of<F>(r, slot)), v[0], v[1], v[2], v[3]);
  }
  __device__ __forceinline__ void end() {}
};

/// Sums of one lane: per sub-block s = sum(c x) over two interleaved float32 chains (shorter
/// dependence), then acc += scale * s (+ min * sum(x) of the sub-block, precomputed per CTA). x is
/// the region's float32 run (region-major tile: slot = offset), xg its sub-block sums.
template <class F, int kM>
struct DotSink {
  const float* x;  ///< this region's x (row 0; row m at + m * xm)
  int xm;
  const float* xg;  ///< this region's sub-block sums (row 0; row m at + m * gm)
  int gm;
  float acc[kM];
  float s0[kM], s1[kM];
  float a = 0.f, b = 0.f;
  int g = 0;
  __device__ __forceinline__ void group(float scale, float mn, int sub) {
    a = scale, b = mn, g = sub;
#pragma unroll
    for (int m = 0; m < kM; ++m) s0[m] = s1[m] = 0.f;
  }
  __device__ __forceinline__ void word(int slot, uint32_t c) {
    const float q0 = code_value<F::kOffset>(c, 0), q1 = code_value<F::kOffset>(c, 1);
    const float q2 = code_value<F::kOffset>(c, 2), q3 = code_value<F::kOffset>(c, 3);
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      const float4 xv = *reinterpret_cast<const float4*>(x + m * xm + slot);
      s0[m] = fmaf(q0, xv.x, s0[m]);
      s1[m] = fmaf(q1, xv.y, s1[m]);
      s0[m] = fmaf(q2, xv.z, s0[m]);
      s1[m] = fmaf(q3, xv.w, s1[m]);
    }
  }
  __device__ __forceinline__ void end() {
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      acc[m] = fmaf(a, s0[m] + s1[m], acc[m]);
      if constexpr (F::kShape.has_min) acc[m] = fmaf(b, xg[m * gm + g], acc[m]);
    }
  }
};

}  // namespace baracuda::kern::gguf
