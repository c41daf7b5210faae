// Native kernels of the GEMM family: the small-M streaming GEMM (decode), the epilogue that
// cuBLASLt cannot fuse (erf gelu, silu, relu backward, column-major bias, k = 0), the
// deterministic bias-gradient reduction, and the grouped GEMM's native kernel and preparation
// kernel (offsets -> per-group arrays for the CUTLASS grouped kernel, zeros for uncovered rows).
#include <cuda_runtime.h>

#include "kernels/common/dtype_traits.cuh"
#include "ops/gemm/gemm_internal.hpp"

namespace baracuda::detail {
namespace {
using kern::convert;
using kern::load_as_opmath;

// ---- activations (opmath) -------------------------------------------------------------------------
template <class F>
__device__ __forceinline__ F act_fw(GemmActivation a, F x) {
  switch (a) {
    case GemmActivation::Relu:
      return x > F(0) ? x : F(0);
    case GemmActivation::Gelu:
      return F(0.5) * x * (F(1) + erf(x * F(0.70710678118654752440)));
    case GemmActivation::GeluTanh: {
      const F u = F(0.79788456080286535588) * (x + F(0.044715) * x * x * x);
      return F(0.5) * x * (F(1) + tanh(u));
    }
    case GemmActivation::Silu:
      return x / (F(1) + exp(-x));
    default:
      return x;
  }
}

/// d act(x) / dx.
template <class F>
__device__ __forceinline__ F act_grad(GemmActivation a, F x) {
  switch (a) {
    case GemmActivation::Relu:
      return x > F(0) ? F(1) : F(0);
    case GemmActivation::Gelu: {
      const F cdf = F(0.5) * (F(1) + erf(x * F(0.70710678118654752440)));
      const F pdf = F(0.39894228040143267794) * exp(F(-0.5) * x * x);
      return cdf + x * pdf;
    }
    case GemmActivation::GeluTanh: {
      const F k = F(0.79788456080286535588), c = F(0.044715);
      const F t = tanh(k * (x + c * x * x * x));
      return F(0.5) * (F(1) + t) + F(0.5) * x * (F(1) - t * t) * k * (F(1) + F(3) * c * x * x);
    }
    case GemmActivation::Silu: {
      const F s = F(1) / (F(1) + exp(-x));
      return s * (F(1) + x * (F(1) - s));
    }
    default:
      return F(1);
  }
}

// ---- small-M GEMM ---------------------------------------------------------------------------------
// One tensor-core tile mma.m16n8k16 (f32 accumulate) covers all m <= 16 rows of A (rows past m
// are zeros that cost no memory traffic) against 8 weight columns; a warp holds kNT such tiles
// (8 * kNT columns), so every A fragment it loads serves kNT weight tiles. A block's 8 warps own
// the same columns and split K in 64-wide chunks (chunk c -> warp c % 8, so at any time the
// block's warps read neighbouring 128-byte lines of each weight row). Per chunk, lane (g, q) =
// (lane / 4, lane % 4) loads the 16-byte vectors q and q + 4 of each of its weight columns (one
// load instruction = 64 contiguous bytes per column, the two = the column's full 128-byte line)
// and the matching vectors of A rows g and g+8, then issues 4 MMAs per tile. The k order inside
// each 32-wide half of a chunk is permuted so that those 16-byte vectors ARE the MMA fragments
// (the sum over k does not care about the order, as long as A and B agree, and the physical k
// of a fragment depends on q only, never on g): in half s, k-step t, logical k {2q, 2q+1} maps
// to physical 32s+8q+4t+{0,1} and {2q+8, 2q+9} to 32s+8q+4t+{2,3}.
// Latency: the weight is streamed through a register ring kDepth chunks deep per warp (refilled
// as soon as a chunk is consumed, so kDepth * kNT KiB per warp stay in flight: 48 KiB per
// block, 96 KiB per SM at 2 blocks per SM), and A (L1/L2 resident) is fetched one chunk ahead.
// The weight loads skip L1 (L1::no_allocate, leaving L1 to A) and are evict-first in L2.
// Warps are reduced in a fixed order through shared memory: deterministic, independent of the
// device and of kNT (the per-column sequence of MMAs is the same for both tile counts).
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kCols = 8;    // output columns per MMA tile (the MMA's n)
constexpr int kChunkV = 8;  // 16-byte vectors per row in a 64-wide k chunk (2 per lane: q, q + 4)
constexpr int kHalfV = 4;   // offset of a lane's second vector
template <int NT>
constexpr int kDepth = NT == 1 ? 6 : 3;  // chunks in flight per warp (same register budget)

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

/// L2 policy for data read once: evict first (what ld.global.cs gives, but combinable with
/// L1::no_allocate below).
__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t pol;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(pol));
  return pol;
}

/// 16-byte read-only load of data read once: skips L1 (left to A), evict-first in L2; zeros
/// when !pred.
__device__ __forceinline__ uint4 ld_stream(const uint4* ptr, bool pred, uint64_t pol) {
  uint4 r;
  asm volatile(
      "{\n"
      "  .reg .pred p;\n"
      "  setp.ne.b32 p, %5, 0;\n"
      "  mov.b32 %0, 0;\n"
      "  mov.b32 %1, 0;\n"
      "  mov.b32 %2, 0;\n"
      "  mov.b32 %3, 0;\n"
      "  @p ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %6;\n"
      "}\n"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(ptr), "r"(static_cast<int>(pred)), "l"(pol));
  return r;
}

template <class T, int NT>
__global__ void __launch_bounds__(kThreads, 2) small_m_kernel(SmallMParams p) {
  constexpr int D = kDepth<NT>;
  constexpr int kBlockCols = kCols * NT;
  constexpr int kStepV = kWarps * kChunkV;  // vectors between a warp's chunks
  __shared__ float part[kWarps][NT][32][4];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, q = lane & 3;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kBlockCols;
  // Vector (16-byte) indices along K fit in int: the plan caps k at 2^31 - 1 elements.
  const int kv = static_cast<int>(p.k / 8);                                   // 16-byte vectors per row
  const int chunks = (kv + kChunkV - 1) / kChunkV;                            // 64-wide k chunks
  const int cnt = chunks > warp ? (chunks - warp + kWarps - 1) / kWarps : 0;  // this warp's
  // The warp visits its chunks warp + 8 j in the rotated order j = (i + rot) % cnt, rot taken
  // from the 16-column group (the same for kNT = 1 and 2): blocks running side by side then read
  // different k ranges (spreading the weight stream over DRAM channels and the A reads over L2
  // slices) instead of all starting at k = 0. A fixed function of the column: still deterministic.
  const int rot = cnt > 0 ? static_cast<int>((n0 / 16) % cnt) : 0;
  const bool row_lo = g < p.m, row_hi = g + 8 < p.m;
  const int v_base = warp * kChunkV + q;  // this lane's first vector
  const uint64_t pol = evict_first_policy();
  // Vector offset (from v_base) of the warp's i-th visited chunk, and whether its slot s is in K.
  auto chunk_off = [&](int i) -> int {
    int j = i + rot;
    if (j >= cnt) j -= cnt;
    return j * kStepV;
  };
  auto in_k = [&](int i, int off, int s) { return i < cnt && v_base + off + s * kHalfV < kv; };
  for (int64_t bt = blockIdx.y; bt < p.batch; bt += gridDim.y) {
    const T* Wb = static_cast<const T*>(p.b) + bt * p.b_batch;
    const uint4* W[NT];
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const int64_t n = n0 + j * kCols + g;
      // Columns past n are clamped: read, never written.
      W[j] = reinterpret_cast<const uint4*>(Wb + (n < p.n ? n : p.n - 1) * p.b_col) + v_base;
    }
    const T* A = static_cast<const T*>(p.a) + bt * p.a_batch;
    const uint4* A_lo = reinterpret_cast<const uint4*>(A + (row_lo ? g : 0) * p.a_row) + v_base;
    const uint4* A_hi = reinterpret_cast<const uint4*>(A + (row_hi ? g + 8 : 0) * p.a_row) + v_base;
    const uint4 zero = make_uint4(0, 0, 0, 0);

    uint4 wb[D][NT][2];  // weight ring: the i-th visited chunk lives in slot i % D
    uint4 a_cur[2][2];   // [lo/hi][s] of the chunk being multiplied
#pragma unroll
    for (int u = 0; u < D; ++u) {
      const int off = chunk_off(u);
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        const bool ok = in_k(u, off, s);
#pragma unroll
        for (int j = 0; j < NT; ++j) wb[u][j][s] = ld_stream(W[j] + off + s * kHalfV, ok, pol);
      }
    }
    {
      const int off = chunk_off(0);
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        const bool ok = in_k(0, off, s);
        a_cur[0][s] = ok && row_lo ? __ldg(A_lo + off + s * kHalfV) : zero;
        a_cur[1][s] = ok && row_hi ? __ldg(A_hi + off + s * kHalfV) : zero;
      }
    }

    float c[NT][4] = {};
    for (int i0 = 0; i0 < cnt; i0 += D) {
#pragma unroll
      for (int u = 0; u < D; ++u) {
        const int i = i0 + u;
        if (i < cnt) {  // warp-uniform (mma.sync needs the whole warp)
          // A one chunk ahead (L1/L2 hits: their latency hides behind the weight ring).
          uint4 a_nxt[2][2];
          const int offa = chunk_off(i + 1);
#pragma unroll
          for (int s = 0; s < 2; ++s) {
            const bool ok = in_k(i + 1, offa, s);
            a_nxt[0][s] = ok && row_lo ? __ldg(A_lo + offa + s * kHalfV) : zero;
            a_nxt[1][s] = ok && row_hi ? __ldg(A_hi + offa + s * kHalfV) : zero;
          }
#pragma unroll
          for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int s = 0; s < 2; ++s) {
              const uint4 &lo = a_cur[0][s], &hi = a_cur[1][s], &w = wb[u][j][s];
              mma16816<T>(c[j], lo.x, hi.x, lo.y, hi.y, w.x, w.y);  // half s, k-step 0
              mma16816<T>(c[j], lo.z, hi.z, lo.w, hi.w, w.z, w.w);  // half s, k-step 1
            }
          // Refill the slot just consumed with the chunk D visits ahead.
          const int offw = chunk_off(i + D);
#pragma unroll
          for (int s = 0; s < 2; ++s) {
            const bool ok = in_k(i + D, offw, s);
#pragma unroll
            for (int j = 0; j < NT; ++j) wb[u][j][s] = ld_stream(W[j] + offw + s * kHalfV, ok, pol);
          }
#pragma unroll
          for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int s = 0; s < 2; ++s) a_cur[h][s] = a_nxt[h][s];
        }
      }
    }
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) part[warp][j][lane][e] = c[j][e];
    __syncthreads();
    for (int t = tid; t < 16 * kBlockCols; t += kThreads) {
      // Output (row r, column jc of tile j) sits in lane (r % 8) * 4 + jc / 2, slot (r / 8) * 2 + jc % 2.
      const int r = t / kBlockCols, col = t % kBlockCols, j = col / kCols, jc = col % kCols;
      const int src = (r % 8) * 4 + jc / 2, slot = (r / 8) * 2 + jc % 2;
      const int64_t n = n0 + col;
      if (r < p.m && n < p.n) {
        float s = 0.f;
#pragma unroll
        for (int w8 = 0; w8 < kWarps; ++w8) s += part[w8][j][src][slot];  // fixed order
        float z = p.alpha * s;
        if (p.c)
          z += p.beta * load_as_opmath(static_cast<const T*>(p.c)[bt * p.cs.batch + r * p.cs.row + n * p.cs.col]);
        if (p.bias) z += load_as_opmath(static_cast<const T*>(p.bias)[n]);
        z = act_fw<float>(p.act, z);
        static_cast<T*>(p.d)[bt * p.ds.batch + r * p.ds.row + n * p.ds.col] = convert<T>(z);
      }
    }
    __syncthreads();  // `part` is reused by the next batch
  }
}

template <class T, int NT>
cudaError_t small_m_launch(const SmallMParams& p, cudaStream_t s) {
  constexpr int64_t cols = kCols * NT;
  const dim3 grid(static_cast<unsigned>((p.n + cols - 1) / cols),
                  static_cast<unsigned>(p.batch < 65535 ? p.batch : 65535));
  small_m_kernel<T, NT><<<grid, kThreads, 0, s>>>(p);
  return cudaGetLastError();
}

// Two column tiles per warp (half the A traffic per weight byte) when that still gives every SM
// a block; one otherwise (twice the blocks for narrow weights). The result is the same bits
// either way, so the device-dependent choice keeps the kernel bit-stable.
template <class T>
cudaError_t small_m_for(const SmallMParams& p, cudaStream_t s) {
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    sms = 132;
  const int64_t blocks2 = (p.n + 2 * kCols - 1) / (2 * kCols) * p.batch;
  return blocks2 >= sms ? small_m_launch<T, 2>(p, s) : small_m_launch<T, 1>(p, s);
}

// ---- grouped GEMM -------------------------------------------------------------------------------------
/// Boundary i (0 <= i <= groups) of the grouped problem, clamped to [0, rows]: the start of group 0
/// (i = 0, which is 0 when only the ends are given) or the end of group i - 1.
__device__ __forceinline__ int64_t grouped_bound(const GroupedParams& p, int64_t i) {
  if (p.ends_only && i == 0) return 0;
  const int64_t j = p.ends_only ? i - 1 : i;
  const int64_t v =
      p.offsets_i32 ? static_cast<const int32_t*>(p.offsets)[j] : static_cast<const int64_t*>(p.offsets)[j];
  return v < 0 ? 0 : (v > p.rows ? p.rows : v);
}

// A block computes one 64 x 64 tile of one group with 4 warps (2 x 2), each warp 32 x 32 = 2 m16 x
// 4 n8 MMA tiles. Fragments come straight from global memory with the small-M kernel's k
// permutation (one 16-byte vector per lane per fragment row); the block's warps share their rows and
// columns through L1. The block finds its (group, row tile) by scanning the clamped offsets (an end
// below its start is raised to the start, as the preparation kernel does).
template <class T>
__global__ void __launch_bounds__(128) grouped_kernel(GroupedParams p) {
  __shared__ int64_t s_group, s_row0, s_row1;
  if (threadIdx.x == 0) {
    s_group = -1;
    int64_t acc = 0, lo = grouped_bound(p, 0);
    for (int64_t g = 0; g < p.groups; ++g) {
      int64_t hi = grouped_bound(p, g + 1);
      if (hi < lo) hi = lo;
      const int64_t tiles = (hi - lo + kGroupedTileM - 1) / kGroupedTileM;
      if (static_cast<int64_t>(blockIdx.x) < acc + tiles) {
        s_group = g;
        s_row0 = lo + (static_cast<int64_t>(blockIdx.x) - acc) * kGroupedTileM;
        s_row1 = hi;
        break;
      }
      acc += tiles;
      lo = hi;
    }
  }
  __syncthreads();
  if (s_group < 0) return;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, q = lane & 3;
  const int64_t row_base = s_row0 + (warp / 2) * 32, row_end = s_row1;
  const int64_t col_base = static_cast<int64_t>(blockIdx.y) * kGroupedTileN + (warp % 2) * 32;
  const T* A = static_cast<const T*>(p.a);
  const T* W = static_cast<const T*>(p.w) + s_group * p.w_group;
  const int64_t kv = p.k / 8;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  const uint4* arow[2][2];
  bool aok[2][2];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t r = row_base + i * 16 + h * 8 + g;
      aok[i][h] = r < row_end;
      arow[i][h] = reinterpret_cast<const uint4*>(A + (aok[i][h] ? r : 0) * p.lda);
    }
  const uint4* wrow[4];
  bool wok[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int64_t c = col_base + j * 8 + g;
    wok[j] = c < p.n;
    wrow[j] = reinterpret_cast<const uint4*>(W + (wok[j] ? c : 0) * p.ldw);
  }
  float acc[2][4][4] = {};
  // One 32-wide k chunk per step, lane q taking its 8; the loop is uniform across the warp (mma.sync
  // needs every lane), lanes past k load zeros.
  const int64_t chunks = (kv + 3) / 4;
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const int64_t v0 = ch * 4 + q;
    const bool kin = v0 < kv;
    uint4 av[2][2], wv[4];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) av[i][h] = kin && aok[i][h] ? __ldg(arow[i][h] + v0) : zero;
#pragma unroll
    for (int j = 0; j < 4; ++j) wv[j] = kin && wok[j] ? __ldg(wrow[j] + v0) : zero;
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        mma16816<T>(acc[i][j], av[i][0].x, av[i][1].x, av[i][0].y, av[i][1].y, wv[j].x, wv[j].y);
        mma16816<T>(acc[i][j], av[i][0].z, av[i][1].z, av[i][0].w, av[i][1].w, wv[j].z, wv[j].w);
      }
  }
  T* D = static_cast<T*>(p.d);
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t r = row_base + i * 16 + g + (e >= 2 ? 8 : 0);
        const int64_t c = col_base + j * 8 + 2 * q + (e & 1);
        if (r < row_end && c < p.n) D[r * p.ldd + c] = convert<T>(acc[i][j][e]);
      }
}

// ---- grouped GEMM preparation --------------------------------------------------------------------------
constexpr int kPrepareThreads = 256;
constexpr int kPrepareWarps = kPrepareThreads / 32;

/// Inclusive max-scan of `v` over the block (thread order); `total` receives the block's maximum.
__device__ int64_t block_inclusive_max(int64_t v, int64_t* total) {
  __shared__ int64_t s_warp[kPrepareWarps];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int64_t u = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v = v > u ? v : u;
  }
  if (lane == 31) s_warp[warp] = v;
  __syncthreads();
  int64_t before = INT64_MIN, all = INT64_MIN;
#pragma unroll
  for (int w = 0; w < kPrepareWarps; ++w) {
    const int64_t x = s_warp[w];
    if (w < warp) before = before > x ? before : x;
    all = all > x ? all : x;
  }
  __syncthreads();  // s_warp is reused by the next call
  *total = all;
  return v > before ? v : before;
}

/// See GroupedPrepareParams. Every block finds the covered rows [lo, hi) (lo = the clamped start of
/// group 0, hi = the running maximum of all boundaries = the clamped end of the last group) and zeroes
/// its share of the rest; block 0 also writes the per-group arrays, a chunk of 256 groups at a time.
__global__ void __launch_bounds__(kPrepareThreads) grouped_prepare_kernel(GroupedPrepareParams pp) {
  const GroupedParams& p = pp.g;
  int64_t lo = 0, hi = 0;  // zero_all: nothing is covered
  if (!pp.zero_all) {
    lo = grouped_bound(p, 0);
    int64_t m = lo;
    for (int64_t i = 1 + threadIdx.x; i <= p.groups; i += kPrepareThreads) {
      const int64_t b = grouped_bound(p, i);
      m = m > b ? m : b;
    }
    block_inclusive_max(m, &hi);
  }

  if (blockIdx.x == 0 && pp.arrays.shapes && !pp.zero_all) {
    // Only f16 / bf16 reach here: 2-byte elements.
    const auto* a = static_cast<const char*>(p.a);
    const auto* w = static_cast<const char*>(p.w);
    auto* d = static_cast<char*>(p.d);
    constexpr int64_t kElem = 2;
    __shared__ int64_t s_end[kPrepareThreads];
    int64_t carry = lo;  // the running maximum of the boundaries before this chunk = start of its first group
    for (int64_t base = 0; base < p.groups; base += kPrepareThreads) {  // uniform: every thread scans
      const int64_t g = base + threadIdx.x;
      const int64_t b = g < p.groups ? grouped_bound(p, g + 1) : INT64_MIN;
      int64_t chunk_max;
      const int64_t incl = block_inclusive_max(b, &chunk_max);
      const int64_t end = incl > carry ? incl : carry;  // end(g) = max(lo, boundaries 1 .. g + 1)
      s_end[threadIdx.x] = end;
      __syncthreads();
      if (g < p.groups) {
        const int64_t start = threadIdx.x == 0 ? carry : s_end[threadIdx.x - 1];  // start(g) = end(g - 1)
        pp.arrays.shapes[3 * g + 0] = static_cast<int32_t>(end - start);
        pp.arrays.shapes[3 * g + 1] = static_cast<int32_t>(p.n);
        pp.arrays.shapes[3 * g + 2] = static_cast<int32_t>(p.k);
        pp.arrays.ptr_a[g] = a + start * p.lda * kElem;
        pp.arrays.ptr_w[g] = w + g * p.w_group * kElem;
        pp.arrays.ptr_d[g] = d + start * p.ldd * kElem;
        pp.arrays.stride_a[g] = p.lda;
        pp.arrays.stride_w[g] = p.ldw;
        pp.arrays.stride_d[g] = p.ldd;
      }
      __syncthreads();  // s_end is rewritten by the next chunk
      carry = carry > chunk_max ? carry : chunk_max;
    }
  }

  // Zeros for the uncovered rows: [0, lo) then [hi, rows), numbered 0 .. lo + rows - hi.
  const int64_t nu = lo + (p.rows - hi);
  if (nu <= 0 || p.n == 0) return;
  auto row_of = [&](int64_t r) { return r < lo ? r : hi + (r - lo); };
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kPrepareThreads;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kPrepareThreads + threadIdx.x;
  const bool vec = p.n % 8 == 0 && p.ldd % 8 == 0 && reinterpret_cast<uintptr_t>(p.d) % 16 == 0;
  if (vec) {
    const int64_t per_row = p.n / 8;
    auto* d = static_cast<uint4*>(p.d);
    for (int64_t i = t0; i < nu * per_row; i += stride)
      d[row_of(i / per_row) * (p.ldd / 8) + i % per_row] = make_uint4(0, 0, 0, 0);
  } else {
    auto* d = static_cast<uint16_t*>(p.d);
    for (int64_t i = t0; i < nu * p.n; i += stride) d[row_of(i / p.n) * p.ldd + i % p.n] = 0;
  }
}

// ---- epilogue ---------------------------------------------------------------------------------------
template <class T>
__global__ void epilogue_kernel(EpilogueParams p) {
  using F = kern::opmath_t<T>;
  constexpr bool kReal = !kern::is_complex_v<T> && !kern::is_int_v<T>;
  const int64_t total = p.batch * p.m * p.n;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = idx % p.n, t = idx / p.n, i = t % p.m, b = t / p.m;
    const int64_t od = b * p.ds.batch + i * p.ds.row + j * p.ds.col;
    T* D = static_cast<T*>(p.d);
    F z;
    if (p.from_c) {
      z = p.c ? convert<F>(p.beta) *
                    load_as_opmath(static_cast<const T*>(p.c)[b * p.cs.batch + i * p.cs.row + j * p.cs.col])
              : F(0);
    } else {
      z = load_as_opmath(D[od]);
    }
    if constexpr (kReal) {
      if (p.bias) z += load_as_opmath(static_cast<const T*>(p.bias)[j]);
      if (!p.backward) {
        if (p.aux_out) static_cast<T*>(p.aux_out)[od] = convert<T>(z);
        z = act_fw<F>(p.act, z);
      } else if (p.aux_in) {
        z = z * act_grad<F>(p.act, load_as_opmath(static_cast<const T*>(p.aux_in)[od]));
      }
    }
    D[od] = convert<T>(z);
  }
}

// ---- bias-gradient reduction ---------------------------------------------------------------------------
constexpr int64_t kRowsPerChunk = 512;
constexpr int64_t kMaxChunks = 128;
int64_t num_chunks(const ReduceParams& p) {
  const int64_t rows = p.batch * p.rows;
  const int64_t c = (rows + kRowsPerChunk - 1) / kRowsPerChunk;
  return c < kMaxChunks ? c : kMaxChunks;
}
template <class T>
using acc_t = cuda::std::conditional_t<cuda::std::is_same_v<T, double>, double, float>;

template <class T>
__global__ void reduce_partial_kernel(ReduceParams p, int64_t chunk_rows, acc_t<T>* part) {
  const int64_t col = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (col >= p.cols) return;
  const int64_t total = p.batch * p.rows;
  const int64_t r0 = blockIdx.y * chunk_rows;
  const int64_t r1 = r0 + chunk_rows < total ? r0 + chunk_rows : total;
  const T* X = static_cast<const T*>(p.x);
  acc_t<T> s = 0;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t b = r / p.rows, i = r % p.rows;
    s += static_cast<acc_t<T>>(load_as_opmath(X[b * p.xs.batch + i * p.xs.row + col * p.xs.col]));
  }
  part[blockIdx.y * p.cols + col] = s;
}

template <class T>
__global__ void reduce_final_kernel(ReduceParams p, int64_t chunks, const acc_t<T>* part) {
  const int64_t col = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (col >= p.cols) return;
  acc_t<T> s = 0;
  for (int64_t c = 0; c < chunks; ++c) s += part[c * p.cols + col];  // fixed order
  static_cast<T*>(p.out)[col] = convert<T>(s);
}

int grid_1d(int64_t n, int threads) {
  const int64_t b = (n + threads - 1) / threads;
  return static_cast<int>(b < (1 << 20) ? (b > 0 ? b : 1) : (1 << 20));
}
}  // namespace

cudaError_t launch_small_m(const SmallMParams& p, cudaStream_t s) {
  if (p.m == 0 || p.n == 0 || p.batch == 0) return cudaSuccess;
  cudaError_t err = cudaErrorInvalidValue;
  kern::dispatch<bit(DType::f16) | bit(DType::bf16)>(
      p.dt, [&](auto tag) { err = small_m_for<typename decltype(tag)::type>(p, s); });
  return err;
}

cudaError_t launch_grouped(const GroupedParams& p, cudaStream_t s) {
  if (p.groups == 0 || p.rows == 0 || p.n == 0) return cudaSuccess;
  // Upper bound of the (group, row tile) pairs: every group adds at most one partial tile.
  const int64_t tiles = (p.rows + kGroupedTileM - 1) / kGroupedTileM + p.groups;
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>((p.n + kGroupedTileN - 1) / kGroupedTileN));
  cudaError_t err = cudaErrorInvalidValue;
  kern::dispatch<bit(DType::f16) | bit(DType::bf16)>(p.dt, [&](auto tag) {
    grouped_kernel<typename decltype(tag)::type><<<grid, 128, 0, s>>>(p);
    err = cudaGetLastError();
  });
  return err;
}

cudaError_t launch_grouped_prepare(const GroupedPrepareParams& p, cudaStream_t s) {
  if (p.g.rows == 0 || p.g.n == 0) return cudaSuccess;  // no row to zero, and no GEMM follows
  // The uncovered rows are known only on the device: size the grid for all of D (about 32K
  // elements a block), capped at two blocks an SM; blocks with nothing to zero return at once.
  const int64_t want = (p.g.rows * p.g.n + 32767) / 32768;
  const int64_t cap = 2 * static_cast<int64_t>(p.num_sms > 0 ? p.num_sms : 132);
  const unsigned blocks = static_cast<unsigned>(want < 1 ? 1 : (want > cap ? cap : want));
  grouped_prepare_kernel<<<blocks, kPrepareThreads, 0, s>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_epilogue(const EpilogueParams& p, cudaStream_t s) {
  const int64_t total = p.batch * p.m * p.n;
  if (total == 0) return cudaSuccess;
  cudaError_t err = cudaErrorInvalidValue;
  constexpr DTypeSet kTypes = dtypes::kFloat | dtypes::kComplex | bit(DType::s32);
  kern::dispatch<kTypes>(p.dt, [&](auto tag) {
    epilogue_kernel<typename decltype(tag)::type><<<grid_1d(total, 256), 256, 0, s>>>(p);
    err = cudaGetLastError();
  });
  return err;
}

template <class T>
__global__ void amax_kernel(int64_t batch, int64_t m, int64_t n, const T* d, MatrixStrides ds, float* amax) {
  const int64_t total = batch * m * n;
  float v = 0.0f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t col = i % n, row = (i / n) % m, bt = i / (n * m);
    v = fmaxf(v, fabsf(static_cast<float>(kern::load_as_opmath(d[bt * ds.batch + row * ds.row + col * ds.col]))));
  }
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  // |x| >= 0, so the float order equals the int order of the bits (NaN bits compare largest).
  if ((threadIdx.x & 31) == 0) atomicMax(reinterpret_cast<int*>(amax), __float_as_int(v));
}

cudaError_t launch_amax(DType dt, int64_t batch, int64_t m, int64_t n, const void* d, MatrixStrides ds, float* amax,
                        cudaStream_t s) {
  cudaError_t err = cudaMemsetAsync(amax, 0, sizeof(float), s);
  const int64_t total = batch * m * n;
  if (err != cudaSuccess || total == 0) return err;
  err = cudaErrorInvalidValue;
  kern::dispatch<bit(DType::f32) | bit(DType::f16) | bit(DType::bf16)>(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    amax_kernel<T><<<grid_1d(total, 256) < 1024 ? grid_1d(total, 256) : 1024, 256, 0, s>>>(
        batch, m, n, static_cast<const T*>(d), ds, amax);
    err = cudaGetLastError();
  });
  return err;
}

size_t reduce_workspace_bytes(const ReduceParams& p) {
  const size_t acc = p.dt == DType::f64 ? 8 : 4;
  return static_cast<size_t>(num_chunks(p)) * static_cast<size_t>(p.cols) * acc;
}

cudaError_t launch_reduce(const ReduceParams& p, void* ws, cudaStream_t s) {
  if (p.cols == 0) return cudaSuccess;
  const int64_t chunks = num_chunks(p);
  const int64_t total = p.batch * p.rows;
  const int64_t chunk_rows = chunks ? (total + chunks - 1) / chunks : 0;
  cudaError_t err = cudaErrorInvalidValue;
  kern::dispatch<dtypes::kFloat>(p.dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto* part = static_cast<acc_t<T>*>(ws);
    const unsigned gx = static_cast<unsigned>((p.cols + 255) / 256);
    if (chunks > 0)
      reduce_partial_kernel<T><<<dim3(gx, static_cast<unsigned>(chunks)), 256, 0, s>>>(p, chunk_rows, part);
    reduce_final_kernel<T><<<gx, 256, 0, s>>>(p, chunks, part);
    err = cudaGetLastError();
  });
  return err;
}

}  // namespace baracuda::detail
