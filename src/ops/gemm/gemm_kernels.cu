// Native kernels of the GEMM family: the small-M streaming GEMM (decode), the epilogue that
// cuBLASLt cannot fuse (erf gelu, silu, relu backward, column-major bias, k = 0), and the
// deterministic bias-gradient reduction.
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
// are zeros that cost no memory traffic) against 8 weight columns. A block's 8 warps own the same
// 8 columns and split K in 32-wide chunks; per chunk each lane loads ONE 16-byte vector of the
// weight (column g = lane/4, k = 8q..8q+7 with q = lane%4) and the matching 16-byte vectors of
// A rows g and g+8, then issues two MMAs. The k order inside a chunk is permuted so that those
// 16-byte vectors ARE the MMA fragments (the sum over k does not care about order, as long as A
// and B agree): logical k {2q, 2q+1} of half t maps to physical 8q+4t+{0,1}, {2q+8, 2q+9} to
// 8q+4t+{2,3}. The weight is read once with streaming loads; warps are reduced in a fixed
// order through shared memory: deterministic, and independent of the device.
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kCols = 8;    // output columns per block (the MMA's n)
constexpr int kUnroll = 4;  // chunks in flight per warp

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

template <class T>
__global__ void __launch_bounds__(kThreads) small_m_kernel(SmallMParams p) {
  __shared__ float part[kWarps][32][4];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, q = lane & 3;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kCols;
  const int64_t kv = p.k / 8;                              // 16-byte vectors per row
  const int64_t chunks = (p.k + 31) / 32;                  // 32-wide k chunks
  const int64_t n_load = n0 + g < p.n ? n0 + g : p.n - 1;  // clamped: read, never written
  const bool row_lo = g < p.m, row_hi = g + 8 < p.m;
  for (int64_t bt = blockIdx.y; bt < p.batch; bt += gridDim.y) {
    const uint4* W = reinterpret_cast<const uint4*>(static_cast<const T*>(p.b) + bt * p.b_batch + n_load * p.b_col);
    const T* A = static_cast<const T*>(p.a) + bt * p.a_batch;
    const uint4* A_lo = reinterpret_cast<const uint4*>(A + (row_lo ? g : 0) * p.a_row);
    const uint4* A_hi = reinterpret_cast<const uint4*>(A + (row_hi ? g + 8 : 0) * p.a_row);
    float c[4] = {0.f, 0.f, 0.f, 0.f};
    for (int64_t ch0 = warp; ch0 < chunks; ch0 += int64_t(kWarps) * kUnroll) {
      uint4 w[kUnroll], lo[kUnroll], hi[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {  // all loads first: kUnroll weight vectors in flight
        const int64_t v = (ch0 + int64_t(u) * kWarps) * 4 + q;
        const bool ok = v < kv;
        w[u] = ok ? __ldcs(W + v) : make_uint4(0, 0, 0, 0);
        lo[u] = ok && row_lo ? __ldg(A_lo + v) : make_uint4(0, 0, 0, 0);
        hi[u] = ok && row_hi ? __ldg(A_hi + v) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        mma16816<T>(c, lo[u].x, hi[u].x, lo[u].y, hi[u].y, w[u].x, w[u].y);  // half t = 0
        mma16816<T>(c, lo[u].z, hi[u].z, lo[u].w, hi[u].w, w[u].z, w[u].w);  // half t = 1
      }
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) part[warp][lane][i] = c[i];
    __syncthreads();
    if (tid < 16 * kCols) {
      // Output (row r, column j) sits in lane (r % 8) * 4 + j / 2, slot (r / 8) * 2 + j % 2.
      const int r = tid / kCols, j = tid % kCols;
      const int src = (r % 8) * 4 + j / 2, slot = (r / 8) * 2 + j % 2;
      const int64_t n = n0 + j;
      if (r < p.m && n < p.n) {
        float s = 0.f;
#pragma unroll
        for (int w8 = 0; w8 < kWarps; ++w8) s += part[w8][src][slot];  // fixed order
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

template <class T>
cudaError_t small_m_for(const SmallMParams& p, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>((p.n + kCols - 1) / kCols),
                  static_cast<unsigned>(p.batch < 65535 ? p.batch : 65535));
  small_m_kernel<T><<<grid, kThreads, 0, s>>>(p);
  return cudaGetLastError();
}

// ---- grouped GEMM -------------------------------------------------------------------------------------
// A block computes one 64 x 64 tile of one group with 4 warps (2 x 2), each warp 32 x 32 = 2 m16 x
// 4 n8 MMA tiles. Fragments come straight from global memory with the small-M kernel's k
// permutation (one 16-byte vector per lane per fragment row); the block's warps share their rows and
// columns through L1. The block finds its (group, row tile) by scanning the clamped offsets.
template <class T>
__global__ void __launch_bounds__(128) grouped_kernel(GroupedParams p) {
  __shared__ int64_t s_group, s_row0, s_row1;
  if (threadIdx.x == 0) {
    auto off = [&](int64_t g) -> int64_t {
      const int64_t v =
          p.offsets_i32 ? static_cast<const int32_t*>(p.offsets)[g] : static_cast<const int64_t*>(p.offsets)[g];
      return v < 0 ? 0 : (v > p.rows ? p.rows : v);
    };
    s_group = -1;
    int64_t acc = 0, lo = off(0);
    for (int64_t g = 0; g < p.groups; ++g) {
      int64_t hi = off(g + 1);
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
