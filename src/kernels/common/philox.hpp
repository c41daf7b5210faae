// The counter-based generator behind the library's in-kernel noise (gumbel_softmax, rrelu in
// training): Philox4x32-10 (Salmon et al., SC'11, the Random123 constants; the generator of
// torch's and cuRAND's CUDA sampling). Plain C++ that nvcc also compiles for the device, so the
// host tests check it against Random123's known-answer vectors without a GPU.
//
// Elementwise stream layout (rrelu_train, functors.cuh): element i of the output's logical
// (row-major) order takes word i % 4 of call i / 4 of (seed, offset) for 32/64-bit storage, and
// half-word i % 2 (low half first) of word (i / 2) % 4 of call i / 8 for 16-bit storage.
//
// Norm stream layout (NormRng in norm.hpp): element (row, j) of a row of n elements draws the 32-bit
// words of Philox4x32-10(key = seed, counter = (q, offset)) with q = row * ceil(n / per) + j / per,
// per = 4 elements a call for f32/f16/bf16 (word j % 4) and 2 for f64 (words 2 (j % 2) and
// 2 (j % 2) + 1, one 64-bit draw). `row` is the row's index in the logical (row-major) order of
// the non-reduced dims and j the column along the reduced axis, so the noise of an element
// depends on (seed, offset, its logical position, n) only: not on strides, the kernel variant or
// the launch shape. A different offset selects a disjoint counter range (the high 64 bits).
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define BARACUDA_PHILOX_HD __host__ __device__ __forceinline__
#else
#define BARACUDA_PHILOX_HD inline
#endif

namespace baracuda::detail {

struct Philox4 {
  uint32_t v[4];
};

BARACUDA_PHILOX_HD uint32_t philox_mulhi(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __umulhi(a, b);
#else
  return static_cast<uint32_t>((uint64_t{a} * b) >> 32);
#endif
}

/// Philox4x32 with 10 rounds: counter (c0..c3), key (k0, k1).
BARACUDA_PHILOX_HD Philox4 philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // round multipliers
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // key schedule (golden ratio, sqrt(3) - 1)
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int r = 0; r < 10; ++r) {
    const uint32_t hi0 = philox_mulhi(kM0, c0), lo0 = kM0 * c0;
    const uint32_t hi1 = philox_mulhi(kM1, c2), lo1 = kM1 * c2;
    const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += kW0;
    k1 += kW1;
  }
  return {{c0, c1, c2, c3}};
}

/// The four words of call q of stream (seed, offset): counter (q, offset), key seed.
BARACUDA_PHILOX_HD Philox4 philox_block(uint64_t seed, uint64_t offset, uint64_t q) {
  return philox4x32_10(static_cast<uint32_t>(q), static_cast<uint32_t>(q >> 32), static_cast<uint32_t>(offset),
                       static_cast<uint32_t>(offset >> 32), static_cast<uint32_t>(seed),
                       static_cast<uint32_t>(seed >> 32));
}

/// A uniform in the open interval (0, 1): the midpoints of 2^23 equal bins (f32; 23 bits, so
/// k + 0.5 keeps every value exact: the smallest 2^-24, the largest 1 - 2^-24, and
/// -log(-log(u)) is finite) or of 2^52 bins (f64).
BARACUDA_PHILOX_HD float philox_uniform_f32(uint32_t w) { return (static_cast<float>(w >> 9) + 0.5f) * 0x1p-23f; }
/// The same on 2^16 bins from a 16-bit half-word h (16-bit storage: k + 0.5 over 2^16 is exact).
BARACUDA_PHILOX_HD float philox_uniform_u16(uint32_t h) { return (static_cast<float>(h) + 0.5f) * 0x1p-16f; }
BARACUDA_PHILOX_HD double philox_uniform_f64(uint32_t lo, uint32_t hi) {
  const uint64_t bits = ((uint64_t{hi} << 32) | lo) >> 12;
  return (static_cast<double>(bits) + 0.5) * 0x1p-52;
}

}  // namespace baracuda::detail
