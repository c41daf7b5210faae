// The one elementwise kernel (ATen's Loops.cuh idea) for N inputs / M outputs over the
// iteration built by core/ew_iter. A functor F describes the operand types and the math:
//
//   using ins = cuda::std::tuple<storage types of the inputs...>;
//   using out_t = storage type of every output;  static constexpr int nout;
//   __device__ void operator()(int64_t linear_index, const ins& in, out_t (&out)[nout]) const;
//
// Four variants, chosen per call on the host (detail::ew_can_vectorize): contiguous (rank <= 1
// after coalescing: 16-byte loads/stores, no offset arithmetic); vectorized, when every operand's
// innermost dim is contiguous or broadcast (bias rows, column broadcasts, narrowed halves of a
// row) with one 32-bit coordinate computation per 16-byte vector, below 2^31 elements; strided
// with 32-bit offsets and fast division; strided with 64-bit offsets past 2^31 elements.
#pragma once
#include <cuda_runtime.h>

#include <cuda/std/tuple>
#include <cuda/std/utility>

#include "core/ew_iter.hpp"
#include "kernels/common/dtype_traits.cuh"
#include "kernels/common/words.cuh"

namespace baracuda::kern {

using detail::EwIter;
using detail::kEwMaxOps;

#ifndef BARACUDA_EW_THREADS
#define BARACUDA_EW_THREADS 128
#endif
inline constexpr int kEwThreads = BARACUDA_EW_THREADS;

template <class T, int N>
struct alignas(sizeof(T) * N) VecOf {
  T v[N];
};

/// Vectors move as RawOf<bytes> (kernels/common/words.cuh).
template <class T, int N>
__device__ __forceinline__ VecOf<T, N> load_vec(const T* p) {
  using Raw = typename RawOf<int(sizeof(T)) * N>::type;
  const Raw r = *reinterpret_cast<const Raw*>(p);
  VecOf<T, N> v;
  memcpy(&v, &r, sizeof(v));
  return v;
}
template <class T, int N>
__device__ __forceinline__ void store_vec(T* p, const VecOf<T, N>& v) {
  using Raw = typename RawOf<int(sizeof(T)) * N>::type;
  Raw r;
  memcpy(&r, &v, sizeof(v));
  *reinterpret_cast<Raw*>(p) = r;
}

template <class Tuple>
struct MaxSize;
template <class... Ts>
struct MaxSize<cuda::std::tuple<Ts...>> {
  static constexpr int value = [] {
    int m = 1;
    ((m = static_cast<int>(sizeof(Ts)) > m ? static_cast<int>(sizeof(Ts)) : m), ...);
    return m;
  }();
};

/// Elements per 16-byte access for the widest operand of F.
template <class F>
constexpr int vec_width() {
  constexpr int in_w = MaxSize<typename F::ins>::value;
  constexpr int out_w = static_cast<int>(sizeof(typename F::out_t));
  constexpr int widest = in_w > out_w ? in_w : out_w;
  return widest >= 16 ? 1 : 16 / widest;
}

// ---- strided ------------------------------------------------------------------------------
/// Division by a run-time constant via multiply-high (Granlund–Montgomery), 32-bit.
struct FastDiv {
  uint32_t d, m, s;
  __host__ static FastDiv make(uint32_t div) {
    FastDiv f{div, 0, 0};
    uint32_t s = 0;
    while ((uint64_t{1} << s) < div) ++s;
    f.s = s;
    f.m = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << s) - div)) / div + 1);
    return f;
  }
  __device__ __forceinline__ uint32_t div(uint32_t n) const {
    const uint32_t t = __umulhi(n, m);
    return (t + n) >> s;
  }
};

// ---- vectorized (contiguous, or strided with a contiguous/broadcast innermost dim) ------------
/// Each thread moves UNROLL vectors of VEC elements per operand: 16-byte loads/stores for
/// operands whose innermost stride is 1, one load replicated for operands broadcast along the
/// innermost dim (bias rows, [N,1] columns, scalars). Offsets are computed once per vector.
struct EwVec {
  int rank;
  int64_t n;
  int64_t shape[kMaxRank];
  FastDiv fdiv[kMaxRank];
  int64_t stride[kEwMaxOps][kMaxRank];
  void* ptr[kEwMaxOps];
  uint32_t inner_bcast;   // bit k: operand k has innermost stride 0
  uint32_t row_periodic;  // ROWS launches: bit k, operand k is one row (strides 1, 0) repeated
};

/// Whether operand k (of nops; outputs first) of a CONTIG (rank <= 1) launch is a broadcast
/// scalar. Outputs never are, and a one-input op whose 1-d input is a scalar takes the offset
/// calculator (both refused by ew_can_vectorize), so the CONTIG kernel of a unary op tests nothing (rank 0: one element, offset e = 0 either way). The test and the
/// scalar-load path it guards were 22 of the 416 sm_90a instructions of a thread of f32 erfc's
/// kernel (issue-bound: 0.96x torch, whose kernel has neither).
template <int NOPS, int NOUT>
__device__ __forceinline__ bool ew_contig_bcast(const EwVec& a, int k) {
  return k >= NOUT && NOPS - NOUT > 1 && ((a.inner_bcast >> k) & 1);
}

/// Whether F has the row-broadcast kernel (functors.cuh ROW_BCAST).
template <class F>
consteval bool ew_row_bcast() {
  if constexpr (requires { F::row_bcast; }) return F::row_bcast;
  else return false;
}

/// Offsets of element e for every operand. CONTIG (rank <= 1): e itself, 0 for a broadcast
/// operand, no arithmetic at all (its own kernel instantiation, so it keeps few registers).
/// ROWS (a dense rank-2 iteration below 2^31 elements, ew_row_periodic_mask): e, or its column
/// e mod shape[0] for a repeated-row operand, in 32 bits.
template <bool CONTIG, int NOPS, int NOUT, bool ROWS = false>
__device__ __forceinline__ void ew_vec_offsets(const EwVec& a, int64_t e, int64_t (&off)[NOPS]) {
  if constexpr (ROWS) {
    const uint32_t e32 = static_cast<uint32_t>(e);
    const uint32_t col = e32 - a.fdiv[0].div(e32) * a.fdiv[0].d;
#pragma unroll
    for (int k = 0; k < NOPS; ++k) off[k] = (a.row_periodic >> k) & 1 ? col : e32;
  } else if constexpr (CONTIG) {
#pragma unroll
    for (int k = 0; k < NOPS; ++k) off[k] = ew_contig_bcast<NOPS, NOUT>(a, k) ? 0 : e;
  } else {
    // Rank >= 2 runs only below 2^31 elements (ew_can_vectorize sends larger views to the offset
    // calculator), so coordinates are 32-bit with the fast division; offsets stay 64-bit (strides
    // of a view may reach past 2^31). Measured: the 64-bit division kept in this path for huge
    // views held bf16 prelu's kernel at 50 registers (62% occupancy, 78% of the H200 copy figure).
#pragma unroll
    for (int k = 0; k < NOPS; ++k) off[k] = 0;
    uint32_t rem = static_cast<uint32_t>(e);
    // Fully unrolled with constant indices: a loop bounded by a.rank indexes the parameter arrays
    // dynamically, which makes nvcc copy them to local memory (a stack frame in every thread).
#pragma unroll
    for (int d = 0; d < kMaxRank; ++d) {
      if (d == a.rank) break;
      uint32_t r = rem;
      if (d + 1 < a.rank) {
        const uint32_t q = a.fdiv[d].div(rem);
        r = rem - q * static_cast<uint32_t>(a.shape[d]);
        rem = q;
      }
#pragma unroll
      for (int k = 0; k < NOPS; ++k) off[k] += int64_t(r) * a.stride[k][d];
    }
  }
}

template <class F, int VEC, int UNROLL, bool CONTIG, bool ROWS, size_t... I>
__device__ __forceinline__ void ew_vec_body(const F& f, const EwVec& a, cuda::std::index_sequence<I...>) {
  using ins = typename F::ins;
  using out_t = typename F::out_t;
  constexpr int NOUT = F::nout;
  constexpr int NOPS = NOUT + sizeof...(I);
  constexpr int BLOCK = kEwThreads * VEC * UNROLL;
  static_assert((VEC & (VEC - 1)) == 0, "e | j below is e + j only for a power-of-two VEC");
  const int64_t block_start = int64_t(blockIdx.x) * BLOCK;
  if (block_start + BLOCK <= a.n) {
    // Issue every load of every unrolled vector before computing (memory-level parallelism).
    // Offsets are recomputed for the stores rather than kept: fewer live registers.
    cuda::std::tuple<VecOf<cuda::std::tuple_element_t<I, ins>, VEC>...> v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int64_t e = block_start + (int64_t(u) * kEwThreads + threadIdx.x) * VEC;
      int64_t off[NOPS];
      ew_vec_offsets<CONTIG, NOPS, NOUT, ROWS>(a, e, off);
      (
          [&] {
            using T = cuda::std::tuple_element_t<I, ins>;
            auto& dst = cuda::std::get<I>(v[u]);
            const T* p = static_cast<const T*>(a.ptr[NOUT + I]) + off[NOUT + I];
            if (!ROWS && (CONTIG ? ew_contig_bcast<NOPS, NOUT>(a, NOUT + I) : (a.inner_bcast >> (NOUT + I)) & 1)) {
              const T s = *p;
#pragma unroll
              for (int j = 0; j < VEC; ++j) dst.v[j] = s;
            } else {
              dst = load_vec<T, VEC>(p);
            }
          }(),
          ...);
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int64_t e = block_start + (int64_t(u) * kEwThreads + threadIdx.x) * VEC;
      VecOf<out_t, VEC> o[NOUT];
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        ins x{cuda::std::get<I>(v[u]).v[j]...};
        out_t r[NOUT];
        // e is a multiple of VEC, so e | j is e + j. Written as an or, the index's low bits are
        // visibly j: an op that derives one value for several neighbours from idx / k (rrelu's
        // Philox block of four words, i / 4) then computes it once a vector instead of once an
        // element (the compiler folds (e | j) >> 2 to e >> 2 and merges the identical blocks).
        f(e | j, x, r);
#pragma unroll
        for (int k = 0; k < NOUT; ++k) o[k].v[j] = r[k];
      }
      int64_t off[NOPS];
      ew_vec_offsets<CONTIG, NOPS, NOUT, ROWS>(a, e, off);
#pragma unroll
      for (int k = 0; k < NOUT; ++k) store_vec<out_t, VEC>(static_cast<out_t*>(a.ptr[k]) + off[k], o[k]);
    }
  } else {
    // Last block: element by element.
    const int64_t end = block_start + BLOCK < a.n ? block_start + BLOCK : a.n;
    for (int64_t e = block_start + threadIdx.x; e < end; e += kEwThreads) {
      int64_t off[NOPS];
      ew_vec_offsets<CONTIG, NOPS, NOUT, ROWS>(a, e, off);
      ins x{static_cast<const cuda::std::tuple_element_t<I, ins>*>(a.ptr[NOUT + I])[off[NOUT + I]]...};
      out_t r[NOUT];
      f(e, x, r);
#pragma unroll
      for (int k = 0; k < NOUT; ++k) static_cast<out_t*>(a.ptr[k])[off[k]] = r[k];
    }
  }
}

/// CTAs an SM the rank-general (CONTIG false) or contiguous vectorized kernel of F is compiled
/// for; 0 (the default) leaves it to the compiler. A functor whose math keeps many values live sets
/// `min_ctas` / `min_ctas_contig`.
template <class F, bool CONTIG>
consteval int ew_min_ctas() {
  if constexpr (CONTIG && requires { F::min_ctas_contig; }) return F::min_ctas_contig;
  else if constexpr (!CONTIG && requires { F::min_ctas; }) return F::min_ctas;
  else return 0;
}

template <class F, int VEC, int UNROLL, bool CONTIG, bool ROWS = false>
__global__ void __launch_bounds__(kEwThreads, ew_min_ctas<F, CONTIG>()) ew_vec_kernel(F f, EwVec a) {
  ew_vec_body<F, VEC, UNROLL, CONTIG, ROWS>(f, a, cuda::std::make_index_sequence<cuda::std::tuple_size_v<typename F::ins>>{});
}

template <class Index>
struct EwStrided {
  int rank;
  Index n;
  Index shape[kMaxRank];
  FastDiv fdiv[kMaxRank];
  Index stride[kEwMaxOps][kMaxRank];
  void* ptr[kEwMaxOps];
};

template <class F, class Index, size_t... I>
__device__ __forceinline__ void ew_strided_one(const F& f, const EwStrided<Index>& a, Index linear,
                                               cuda::std::index_sequence<I...>) {
  using ins = typename F::ins;
  using out_t = typename F::out_t;
  constexpr int NOUT = F::nout;
  constexpr int NOPS = NOUT + sizeof...(I);
  Index off[NOPS] = {};
  Index rem = linear;
#pragma unroll
  for (int d = 0; d < kMaxRank; ++d) {
    if (d == a.rank) break;
    Index q;
    if constexpr (sizeof(Index) == 4)
      q = a.fdiv[d].div(rem);
    else
      q = rem / a.shape[d];
    const Index r = rem - q * a.shape[d];
    rem = q;
#pragma unroll
    for (int k = 0; k < NOPS; ++k) off[k] += r * a.stride[k][d];
  }
  ins x{static_cast<const cuda::std::tuple_element_t<I, ins>*>(a.ptr[NOUT + I])[off[NOUT + I]]...};
  out_t r[NOUT];
  f(static_cast<int64_t>(linear), x, r);
#pragma unroll
  for (int k = 0; k < NOUT; ++k) static_cast<out_t*>(a.ptr[k])[off[k]] = r[k];
}

inline constexpr int kEwStridedUnroll = 4;

template <class F, class Index>
__global__ void __launch_bounds__(kEwThreads) ew_strided_kernel(F f, EwStrided<Index> a) {
  const Index base = Index(blockIdx.x) * (kEwThreads * kEwStridedUnroll) + threadIdx.x;
  using Ins = cuda::std::make_index_sequence<cuda::std::tuple_size_v<typename F::ins>>;
  if constexpr (sizeof(Index) == 4) {
#pragma unroll
    for (int u = 0; u < kEwStridedUnroll; ++u) {
      const Index i = base + Index(u) * kEwThreads;
      if (i < a.n) ew_strided_one<F, Index>(f, a, i, Ins{});
    }
  } else {
    // The 64-bit variant (strided tensors past 2^31 elements, rare) is not unrolled: unrolled, its
    // offset computation (a 64-bit division per dim) was ~30% of the elementwise code and compile
    // time; H200, rank 2-3 f32/bf16/f64: 2% faster to 8% slower than unrolled. Same elements per
    // thread either way.
#pragma unroll 1
    for (int u = 0; u < kEwStridedUnroll; ++u) {
      const Index i = base + Index(u) * kEwThreads;
      if (i < a.n) ew_strided_one<F, Index>(f, a, i, Ins{});
    }
  }
}

// ---- host launcher --------------------------------------------------------------------------
// Vectors per thread. 2 measured best on H100 for contiguous tensors (128M bf16/f32: memory-
// bound ops at torch's speed, erf gelu 6% faster than 1 or 4); 4 spent registers for nothing.
#ifndef BARACUDA_EW_VEC_UNROLL
#define BARACUDA_EW_VEC_UNROLL 2
#endif
inline constexpr int kEwVecUnroll = BARACUDA_EW_VEC_UNROLL;

/// Launches F over `it`. Returns the launch error (never synchronizes).
template <class F>
cudaError_t ew_launch(const F& f, const EwIter& it, bool allow_vec, cudaStream_t stream) {
  if (it.numel == 0) return cudaSuccess;
  constexpr int VEC = vec_width<F>();
  if (allow_vec && detail::ew_can_vectorize(it, VEC)) {
    const int64_t per_block = int64_t(kEwThreads) * VEC * kEwVecUnroll;
    const dim3 grid(static_cast<unsigned>((it.numel + per_block - 1) / per_block));
    EwVec a{};
    a.rank = it.rank;
    a.n = it.numel;
    for (int d = 0; d < it.rank; ++d) {
      a.shape[d] = it.shape[d];
      a.fdiv[d] = FastDiv::make(static_cast<uint32_t>(it.shape[d]));  // < 2^31 where used (rank >= 2)
      for (int k = 0; k < it.nops; ++k) a.stride[k][d] = it.stride[k][d];
    }
    for (int k = 0; k < it.nops; ++k) {
      a.ptr[k] = it.ptr[k];
      if (it.rank == 0 || it.stride[k][0] == 0) a.inner_bcast |= 1u << k;
    }
    if constexpr (ew_row_bcast<F>()) {
      a.row_periodic = detail::ew_row_periodic_mask(it);
      if (a.row_periodic != 0) {
        ew_vec_kernel<F, VEC, kEwVecUnroll, true, true><<<grid, kEwThreads, 0, stream>>>(f, a);
        return cudaGetLastError();
      }
    }
    // Rank <= 1 gets its own instantiation: measured on H100 (128M elements), the rank-general
    // code ran bf16 neg 9% and bf16 sin 47% slower (60+ registers, less occupancy).
    if (it.rank <= 1)
      ew_vec_kernel<F, VEC, kEwVecUnroll, true><<<grid, kEwThreads, 0, stream>>>(f, a);
    else
      ew_vec_kernel<F, VEC, kEwVecUnroll, false><<<grid, kEwThreads, 0, stream>>>(f, a);
    return cudaGetLastError();
  }
  // Strided innermost dims, misaligned pointers, or vectorization refused: the offset
  // calculator path, one element per step.
  auto fill = [&](auto& a) {
    using Index = std::remove_reference_t<decltype(a.n)>;
    a.rank = it.rank;
    a.n = static_cast<Index>(it.numel);
    for (int d = 0; d < it.rank; ++d) {
      a.shape[d] = static_cast<Index>(it.shape[d]);
      a.fdiv[d] = FastDiv::make(static_cast<uint32_t>(sizeof(Index) == 4 ? it.shape[d] : 1));
      for (int k = 0; k < it.nops; ++k) a.stride[k][d] = static_cast<Index>(it.stride[k][d]);
    }
    for (int k = 0; k < it.nops; ++k) a.ptr[k] = it.ptr[k];
  };
  const int64_t per_block = int64_t(kEwThreads) * kEwStridedUnroll;
  const int64_t blocks = (it.numel + per_block - 1) / per_block;
  if (it.fits_i32) {
    EwStrided<uint32_t> a{};
    fill(a);
    ew_strided_kernel<F, uint32_t><<<dim3(static_cast<unsigned>(blocks)), kEwThreads, 0, stream>>>(f, a);
  } else {
    EwStrided<int64_t> a{};
    fill(a);
    ew_strided_kernel<F, int64_t><<<dim3(static_cast<unsigned>(blocks)), kEwThreads, 0, stream>>>(f, a);
  }
  return cudaGetLastError();
}

}  // namespace baracuda::kern
