// W4A16 decode kernel (W4A16LinearPlan, m <= 16): y[m, n] = sum_k x[m, k] (q[n, k] - zp[n, g]) s[n, g]
// (+ bias[n]), g = k / G, streaming the packed int4 weight once.
//
// Tensor cores on exact integers, with the roles swapped (y^T = W x^T): mma.m16n8k16 (f32
// accumulate) takes 16 weight columns as its 16-row A operand and up to 8 rows of x as its 8-column
// B operand (rows past m are zeros that cost no memory traffic; m > 8 takes a second B tile, kHi).
// The weight values are the codes (q - zp), small integers that bf16 / f16 hold exactly: the products
// are exact and sum in float32 over a group; the group's float32 scale then multiplies that sum
// (acc += s * sum), so no dequantized weight is ever rounded to 16 bits. Swapping puts a whole word
// of codes into one lane's A registers and makes each lane own the two output columns whose scales
// and zero points it applies.
//
// Codes to A fragments without conversions: a 32-bit word holds 8 codes c0..c7 (nibble i = k_i).
// ((w >> 4i) & 0x000F000F) | M puts codes i and i + 4 under the 16-bit pattern M of 2^7 (bf16) or
// 2^10 (f16), whose last mantissa bit is worth 1: the halves are exactly M + c; one paired
// subtraction of M + zp leaves c - zp. (s4: the masked nibbles are also xored with 8, turning
// two's-complement codes into c + 8, and zp grows by 8; the same LOP3 does it.) One word = 4
// registers = half the A fragments of two MMAs, with the k order of the pairs (k0, k4), (k1, k5),
// (k2, k6), (k3, k7); the B fragments take x in that same order (4 byte permutes of a 16-byte load;
// the sum over k does not care about the order as long as A and B agree, and the order depends on
// the lane's k slot only).
//
// Layout of the work: a lane (g, q) = (lane / 4, lane % 4) of a warp reads, per step, kW words of
// each of its columns n0 + g and n0 + g + 8 at k = kStep s + 8 kW q: the quad's words cover kStep
// consecutive k, so a step lies within one group. kWide (G a multiple of 128, the common GPTQ/AWQ
// choice): kW = 4, a 16-byte load, 128-k steps; else kW = 1 (a 4-byte word, 32-k steps, any G that
// is a multiple of 32; half a sector a load, the other half hits L1 on the next step). Measured on
// H100 (m = 1, K = N = 4096): 16-byte loads took the kernel from 12.6 to ~9.8 us. A CTA owns 16
// columns; its 8 warps split K into contiguous step ranges and their partial sums are added in a
// fixed order through shared memory: deterministic, bit-stable.
// Latency: each warp keeps kDepth steps of weight words in flight (a register ring refilled as a
// step is consumed). The whole kernel is only a few DRAM latencies long (K = 4096 is 4 wide steps
// a warp), so a load issued inside a step (x, or a group's scale: an L2 round trip each, serialised
// with the step's MMAs) used to dominate: when they fit (kStaged: x's rows, padded by 64 bytes so
// the quads of two rows sit on different banks, and the CTA's columns' group scales and zero
// points, <= kStageBytes) they are copied into shared memory with cp.async first, all in flight at
// once beside the weight ring's first loads. Two MMA accumulator chains a tile (kWide) halve the
// dependent-MMA latency a group. For scale: a kernel that only streams the 8 MiB packed weight of
// K = N = 4096 (16-byte loads, nothing else) takes 5.5 us back to back on H100; this one ~8.7 us.
#include <cuda_runtime.h>

#include <cuda/std/type_traits>

#include "kernels/common/dtype_traits.cuh"
#include "kernels/common/smem_optin.cuh"
#include "ops/quant/quant_launch.hpp"

namespace baracuda::kern::w4a16 {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kCols = 16;  // weight columns a CTA owns: the MMA's 16 rows
/// Words (8 codes each) a lane loads per column and step: 1 (a 32-k step: any group size that is a
/// multiple of 32) or, kWide, 4 (a 16-byte load, a 128-k step: groups that are multiples of 128).
template <bool kWide>
inline constexpr int kWords = kWide ? 4 : 1;
template <bool kWide>
inline constexpr int kStepK = 32 * kWords<kWide>;  // k per step: 4 lanes a quad
/// Steps in flight per lane (kWide: 2 steps = 8 words a column; deeper rings and more chains were
/// measured no faster on H100: the kernel is a few DRAM latencies long either way).
template <bool kWide>
inline constexpr int kDepth = kWide ? 2 : 8;
constexpr int kPadX = 32;  // elements of padding after each staged row of x (64 bytes: the next bank half)
/// Shared memory for staged x: 3 CTAs an SM (m <= 8), each with 8 KB of partial sums, fit 228 KB.
constexpr int64_t kStageBytes = 64 * 1024;

/// The 16-bit pattern whose value is 2^7 (bf16) / 2^10 (f16): its last mantissa bit is worth 1.
template <class T>
inline constexpr uint32_t kMagic = cuda::std::is_same_v<T, __nv_bfloat16> ? 0x4300u : 0x6400u;
template <class T>
inline constexpr float kMagicValue = cuda::std::is_same_v<T, __nv_bfloat16> ? 128.f : 1024.f;

template <class T>
__device__ __forceinline__ void mma16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
  if constexpr (cuda::std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}

/// a - b on two 16-bit floats a register (exact here: small integers).
template <class T>
__device__ __forceinline__ uint32_t sub2(uint32_t a, uint32_t b) {
  using T2 = cuda::std::conditional_t<cuda::std::is_same_v<T, __nv_bfloat16>, __nv_bfloat162, __half2>;
  T2 x, y;
  memcpy(&x, &a, 4);
  memcpy(&y, &b, 4);
  const T2 r = __hsub2(x, y);
  uint32_t u;
  memcpy(&u, &r, 4);
  return u;
}

/// M + zp in both halves of a register (exact for the zero points of a 4-bit range).
template <class T>
__device__ __forceinline__ uint32_t bias_pair(int zp) {
  const T v = convert<T>(kMagicValue<T> + static_cast<float>(zp));
  uint16_t h;
  memcpy(&h, &v, 2);
  return static_cast<uint32_t>(h) * 0x10001u;
}

/// One word of 8 codes -> half the A fragments of two MMAs: a[0], a[1] = (k0, k4), (k1, k5) for the
/// first, a[2], a[3] = (k2, k6), (k3, k7) for the second, each code as c - zp. `magic2` is M in both
/// halves, with bit 3 of each half set for s4 (xoring the masked nibble with 8 turns a
/// two's-complement code c into c + 8, and the bias holds M + zp + 8): one LOP3
/// ((w >> 4i) & 0x000F000F) ^ magic2 per pair (the masked bits and M's bits are disjoint, so ^ is |
/// there).
template <class T>
__device__ __forceinline__ void codes_to_pairs(uint32_t w, uint32_t magic2, uint32_t bias2, uint32_t (&a)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    uint32_t t;
    asm("lop3.b32 %0, %1, %2, %3, 0x6a;" : "=r"(t) : "r"(w >> (4 * i)), "n"(0x000F000F), "r"(magic2));
    a[i] = sub2<T>(t, bias2);
  }
}

/// x[k .. k + 8) of one row (a 16-byte load) -> the B registers of the two MMAs in codes_to_pairs'
/// k order: (x0, x4), (x1, x5), (x2, x6), (x3, x7).
__device__ __forceinline__ void x_to_b(const uint4& v, uint32_t (&a)[4]) {
  a[0] = __byte_perm(v.x, v.z, 0x5410);
  a[1] = __byte_perm(v.x, v.z, 0x7632);
  a[2] = __byte_perm(v.y, v.w, 0x5410);
  a[3] = __byte_perm(v.y, v.w, 0x7632);
}

/// kSpg: steps a group (G / 32) when it divides the ring (G = 32 .. 256): the warps' step ranges
/// then start at group boundaries and each flush (acc += scale * group sum) sits at a fixed place
/// of the unrolled ring, with no branch per step; 0: any G (per-channel, or G not dividing 256), a
/// counter decides per step.
template <class T, bool kHi, bool kWide, int kSpg, bool kStaged>
__global__ void __launch_bounds__(kThreads, kHi || kWide ? 2 : 3) w4a16_decode_kernel(const detail::W4A16Launch p) {
  extern __shared__ __align__(16) unsigned char x_stage[];  // kStaged: [m][k + kPadX] of T
  constexpr int kW = kWords<kWide>, kStep = kStepK<kWide>, kD = kDepth<kWide>;
  static_assert(kSpg == 0 || kD % (kSpg > 0 ? kSpg : 1) == 0, "a static group divides the ring");
  constexpr int kTiles = kHi ? 2 : 1;  // B tiles: rows 0..7 of x, and 8..15
  __shared__ float part[kWarps][32][4 * kTiles];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, q = lane & 3;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kCols;
  const int spg = kSpg > 0 ? kSpg : static_cast<int>(p.group / kStep);  // steps a group
  const int64_t groups = p.k / p.group;
  // Steps along K (the plan caps k so that they fit an int), split over the warps in contiguous
  // ranges (of whole groups when kSpg > 0).
  int s0, s1;
  if constexpr (kSpg > 0) {
    s0 = static_cast<int>(warp * groups / kWarps) * kSpg;
    s1 = static_cast<int>((warp + 1) * groups / kWarps) * kSpg;
  } else {
    const int steps = static_cast<int>(p.k / kStep);
    s0 = static_cast<int>(static_cast<int64_t>(warp) * steps / kWarps);
    s1 = static_cast<int>(static_cast<int64_t>(warp + 1) * steps / kWarps);
  }
  const int cnt = s1 - s0;
  const uint32_t magic2 = kMagic<T> * 0x10001u ^ (p.signed_w ? 0x00080008u : 0u);
  const int zflip = p.signed_w ? 8 : 0;

  // The lane's columns n0 + g + 8h (h = 0, 1; columns past n are clamped: read, never written): word
  // q of each step, and the column's scales and zero points.
  const uint32_t* W[2];
  const float* S[2];
  const int32_t* Z[2];
  const T* x = static_cast<const T*>(p.x);
  // Staged: [m][k + kPadX] of x, then [kCols][groups] scales, then [kCols][groups] zero points.
  const int64_t xs_row = p.k + kPadX;
  float* ss = reinterpret_cast<float*>(x_stage + p.m * xs_row * static_cast<int64_t>(sizeof(T)));
  int32_t* zs = reinterpret_cast<int32_t*>(ss + kCols * groups);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t c = n0 + g + 8 * h < p.n ? n0 + g + 8 * h : p.n - 1;
    W[h] = reinterpret_cast<const uint32_t*>(p.w) + c * (p.k / 8) + q * kW;
    S[h] = kStaged ? ss + (g + 8 * h) * groups : p.scale + c * groups;
    Z[h] = p.zero_point ? (kStaged ? zs + (g + 8 * h) * groups : p.zero_point + c * groups) : nullptr;
  }
  const bool row_lo = g < p.m, row_hi = kHi && g + 8 < p.m;
  const uint4 zero4 = make_uint4(0, 0, 0, 0);
  if constexpr (kStaged) {
    // All loads in flight at once, beside the weight ring's first ones below: the warp's k range
    // [32 s0, 32 s1) of every row of x (16 bytes a lane), and the CTA's columns' group scales and
    // zero points (4 bytes a thread, all threads; columns past n clamped like W).
    auto cp_async = [](void* dst, const void* src, auto bytes) {
      const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
      if constexpr (decltype(bytes)::value == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src));
      else
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(d), "l"(src));
    };
    T* xs = reinterpret_cast<T*>(x_stage);
    const int chunks = (s1 - s0) * (kStep / 8);  // 16-byte chunks a row
    for (int64_t r = 0; r < p.m; ++r)
      for (int c = lane; c < chunks; c += 32) {
        const int64_t k = static_cast<int64_t>(s0) * kStep + 8 * c;
        cp_async(xs + r * xs_row + k, x + r * p.x_row + k, cuda::std::integral_constant<int, 16>{});
      }
    for (int64_t i = tid; i < kCols * groups; i += kThreads) {
      const int64_t c = n0 + i / groups < p.n ? n0 + i / groups : p.n - 1, gi = i % groups;
      cp_async(ss + i, p.scale + c * groups + gi, cuda::std::integral_constant<int, 4>{});
      if (p.zero_point) cp_async(zs + i, p.zero_point + c * groups + gi, cuda::std::integral_constant<int, 4>{});
    }
    asm volatile("cp.async.commit_group;\n" ::);
  }
  const int64_t x_row = kStaged ? xs_row : p.x_row;
  const T* x_base = kStaged ? reinterpret_cast<const T*>(x_stage) : x;
  const uint4* X_lo = reinterpret_cast<const uint4*>(x_base + (row_lo ? g : 0) * x_row) + q * kW;
  const uint4* X_hi = reinterpret_cast<const uint4*>(x_base + (row_hi ? g + 8 : 0) * x_row) + q * kW;
  // Staged operands live in shared memory (a plain load); otherwise the read-only path.
  auto load = [&](const auto* ptr) {
    if constexpr (kStaged)
      return *ptr;
    else
      return __ldg(ptr);
  };

  // The weight ring: step s0 + i lives in slot i % kD; a lane's kW words of each column a step.
  uint32_t wb[kD][2][kW];
  auto load_w = [&](int u, int s, bool valid) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t* src = W[h] + static_cast<int64_t>(s) * 4 * kW;
      if constexpr (kWide) {
        const uint4 v = valid ? __ldg(reinterpret_cast<const uint4*>(src)) : make_uint4(0, 0, 0, 0);
        wb[u][h][0] = v.x, wb[u][h][1] = v.y, wb[u][h][2] = v.z, wb[u][h][3] = v.w;
      } else {
        wb[u][h][0] = valid ? __ldg(src) : 0u;
      }
    }
  };
#pragma unroll
  for (int u = 0; u < kD; ++u) load_w(u, s0 + u, u < cnt);
  if constexpr (kStaged) {
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    __syncthreads();  // the group parameters were staged by the whole CTA
  }
  // Group parameters, one group ahead: zero points (the A bias) and scales of both columns.
  int64_t grp = cnt > 0 ? s0 / spg : 0;
  int left = cnt > 0 ? spg - (s0 - static_cast<int>(grp) * spg) : 0;  // kSpg == 0: steps left in the group
  int z_next[2] = {0, 0};
  float s_next[2] = {0.f, 0.f}, s_cur[2] = {0.f, 0.f};
  uint32_t bias2[2] = {0u, 0u};
  auto load_group = [&](int64_t gi) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      z_next[h] = Z[h] ? load(Z[h] + gi) : 0;
      s_next[h] = load(S[h] + gi);
    }
  };
  auto start_group = [&]() {  // take the prefetched group, prefetch the next one in this warp's range
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      bias2[h] = bias_pair<T>(z_next[h] + zflip);
      s_cur[h] = s_next[h];
    }
    if ((grp + 1) * spg < s1) load_group(grp + 1);
  };
  if (cnt > 0) {
    load_group(grp);
    start_group();
  }

  // kChains independent MMA accumulators a tile (word j feeds chain j % kChains): a single chain
  // serialises every MMA of a group on the previous one's latency.
  constexpr int kChains = kWide ? 2 : 1;
  float acc[kTiles][4] = {}, part_g[kChains][kTiles][4] = {};
  // Step s0 + i from ring slot u: per word 2 MMAs a B tile (word j of lane q holds k = kStep s +
  // 8 (kW q + j) + 0..7, and so does the x it meets), then the slot's refill.
  auto step = [&](int u, int i) {
    const int s = s0 + i;
#pragma unroll
    for (int j = 0; j < kW; ++j) {
      uint32_t a0[4], a1[4], b[kTiles][4];
      const int64_t xo = static_cast<int64_t>(s) * 4 * kW + j;
      x_to_b(row_lo ? load(X_lo + xo) : zero4, b[0]);
      if constexpr (kHi) x_to_b(row_hi ? load(X_hi + xo) : zero4, b[kTiles - 1]);
      codes_to_pairs<T>(wb[u][0][j], magic2, bias2[0], a0);  // column n0 + g: A rows 0..7
      codes_to_pairs<T>(wb[u][1][j], magic2, bias2[1], a1);  // column n0 + g + 8: A rows 8..15
#pragma unroll
      for (int t = 0; t < kTiles; ++t) {
        mma16816<T>(part_g[j % kChains][t], a0[0], a1[0], a0[1], a1[1], b[t][0], b[t][1]);
        mma16816<T>(part_g[j % kChains][t], a0[2], a1[2], a0[3], a1[3], b[t][2], b[t][3]);
      }
    }
    load_w(u, s + kD, i + kD < cnt);
  };
  auto flush = [&]() {  // the group (or this warp's part of it) ends: scale its sum and add
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
#pragma unroll
      for (int c = 1; c < kChains; ++c)
#pragma unroll
        for (int e = 0; e < 4; ++e) part_g[0][t][e] += part_g[c][t][e];  // fixed order
      acc[t][0] = fmaf(s_cur[0], part_g[0][t][0], acc[t][0]);            // column n0 + g
      acc[t][1] = fmaf(s_cur[0], part_g[0][t][1], acc[t][1]);
      acc[t][2] = fmaf(s_cur[1], part_g[0][t][2], acc[t][2]);  // column n0 + g + 8
      acc[t][3] = fmaf(s_cur[1], part_g[0][t][3], acc[t][3]);
#pragma unroll
      for (int c = 0; c < kChains; ++c)
#pragma unroll
        for (int e = 0; e < 4; ++e) part_g[c][t][e] = 0.f;
    }
  };
  for (int i0 = 0; i0 < cnt; i0 += kD) {
#pragma unroll
    for (int u = 0; u < kD; ++u) {
      const int i = i0 + u;
      if (i < cnt) {  // warp-uniform (mma.sync needs the whole warp)
        step(u, i);
        if constexpr (kSpg > 0) {
          if ((u + 1) % kSpg == 0) {  // cnt and i0 are multiples of kSpg: a group ends here
            flush();
            ++grp;
            start_group();
          }
        } else if (--left == 0 || i + 1 == cnt) {
          flush();
          if (i + 1 < cnt) {
            ++grp;
            left = spg;
            start_group();
          }
        }
      }
    }
  }
#pragma unroll
  for (int t = 0; t < kTiles; ++t)
#pragma unroll
    for (int e = 0; e < 4; ++e) part[warp][lane][4 * t + e] = acc[t][e];
  __syncthreads();
  if (tid < 16 * kCols) {
    // y[r][n0 + c] is D[c][r] of tile r / 8: lane (c % 8) * 4 + (r % 8) / 2, slot (c / 8) * 2 + r % 2.
    const int r = tid / kCols, c = tid % kCols;
    const int src = (c % 8) * 4 + (r % 8) / 2, slot = 4 * (r / 8) + (c / 8) * 2 + r % 2;
    const int64_t n = n0 + c;
    if (r < p.m && n < p.n && r / 8 < kTiles) {
      float v = 0.f;
#pragma unroll
      for (int w8 = 0; w8 < kWarps; ++w8) v += part[w8][src][slot];  // fixed order
      if (p.bias) v += load_as_opmath(static_cast<const T*>(p.bias)[n]);
      static_cast<T*>(p.y)[r * p.n + n] = convert<T>(v);
    }
  }
}

template <class T, bool kHi, bool kWide, int kSpg, bool kStaged>
cudaError_t launch_kernel(const detail::W4A16Launch& p, size_t smem, cudaStream_t stream) {
  constexpr auto kernel = &w4a16_decode_kernel<T, kHi, kWide, kSpg, kStaged>;
  if (const cudaError_t e = allow_smem<kernel>(smem); e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>((p.n + kCols - 1) / kCols));
  kernel<<<grid, kThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

/// Steps a group as a template constant when it divides the ring, else 0 (a counter per step).
template <class T, bool kHi, bool kWide, bool kStaged>
cudaError_t launch_group(const detail::W4A16Launch& p, size_t smem, cudaStream_t stream) {
  constexpr int kD = kDepth<kWide>;
  switch (p.group / kStepK<kWide>) {
    case 1:
      return launch_kernel<T, kHi, kWide, 1, kStaged>(p, smem, stream);
    case 2:
      if constexpr (kD % 2 == 0) return launch_kernel<T, kHi, kWide, 2, kStaged>(p, smem, stream);
      break;
    case 4:
      if constexpr (kD % 4 == 0) return launch_kernel<T, kHi, kWide, 4, kStaged>(p, smem, stream);
      break;
    case 8:
      if constexpr (kD % 8 == 0) return launch_kernel<T, kHi, kWide, 8, kStaged>(p, smem, stream);
      break;
    default:
      break;
  }
  return launch_kernel<T, kHi, kWide, 0, kStaged>(p, smem, stream);
}

template <class T, bool kHi, bool kWide>
cudaError_t launch_staged(const detail::W4A16Launch& p, cudaStream_t stream) {
  const int64_t stage = p.m * (p.k + kPadX) * static_cast<int64_t>(sizeof(T)) +
                        kCols * (p.k / p.group) * static_cast<int64_t>(sizeof(float) + sizeof(int32_t));
  return stage <= kStageBytes ? launch_group<T, kHi, kWide, true>(p, static_cast<size_t>(stage), stream)
                              : launch_group<T, kHi, kWide, false>(p, 0, stream);
}

template <class T>
cudaError_t launch(const detail::W4A16Launch& p, cudaStream_t stream) {
  const bool wide = p.group % kStepK<true> == 0;  // then k, a multiple of the group, is too
  if (p.m > 8) return wide ? launch_staged<T, true, true>(p, stream) : launch_staged<T, true, false>(p, stream);
  return wide ? launch_staged<T, false, true>(p, stream) : launch_staged<T, false, false>(p, stream);
}

}  // namespace
}  // namespace baracuda::kern::w4a16

namespace baracuda::detail {
cudaError_t w4a16_decode_launch(const W4A16Launch& p, cudaStream_t stream) {
  if (p.m <= 0 || p.n <= 0) return cudaSuccess;
  switch (p.dtype) {
    case DType::bf16:
      return kern::w4a16::launch<__nv_bfloat16>(p, stream);
    case DType::f16:
      return kern::w4a16::launch<__half>(p, stream);
    default:
      return cudaErrorInvalidValue;
  }
}
}  // namespace baracuda::detail
