// The one elementwise kernel (ATen's Loops.cuh idea) for N inputs / M outputs over the
// iteration built by core/ew_iter. A functor F describes the operand types and the math:
//
//   using ins = cuda::std::tuple<storage types of the inputs...>;
//   using out_t = storage type of every output;  static constexpr int nout;
//   __device__ void operator()(int64_t linear_index, const ins& in, out_t (&out)[nout]) const;
//
// Three variants, chosen per call on the host: contiguous (rank <= 1, every operand dense or a
// broadcast scalar) with 16-byte vector loads/stores when aligned; strided with 32-bit
// offsets and fast division; strided with 64-bit offsets for tensors past 2^31 elements.
#pragma once
#include <cuda_runtime.h>

#include <cuda/std/tuple>
#include <cuda/std/utility>

#include "core/ew_iter.hpp"
#include "kernels/common/dtype_traits.cuh"

namespace baracuda::kern {

using detail::EwIter;
using detail::kEwMaxOps;

inline constexpr int kEwThreads = 128;

template <class T, int N>
struct alignas(sizeof(T) * N) VecOf {
  T v[N];
};

template <class Tuple> struct MaxSize;
template <class... Ts> struct MaxSize<cuda::std::tuple<Ts...>> {
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

// ---- contiguous ---------------------------------------------------------------------------
struct EwContig {
  int64_t n;
  void* ptr[kEwMaxOps];
  uint32_t scalar_mask;
  bool vectorize;
};

template <class F, int VEC, int UNROLL, size_t... I>
__device__ __forceinline__ void ew_contig_body(const F& f, const EwContig& a, int64_t block_start,
                                               cuda::std::index_sequence<I...>) {
  using ins = typename F::ins;
  using out_t = typename F::out_t;
  constexpr int NOUT = F::nout;
  constexpr int BLOCK = kEwThreads * VEC * UNROLL;
  const bool full = a.vectorize && block_start + BLOCK <= a.n;
  if (full) {
    // Issue every load of every unrolled vector before computing (memory-level parallelism).
    cuda::std::tuple<VecOf<cuda::std::tuple_element_t<I, ins>, VEC>...> v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int64_t idx = block_start + (int64_t(u) * kEwThreads + threadIdx.x) * VEC;
      (
          [&] {
            using T = cuda::std::tuple_element_t<I, ins>;
            auto& dst = cuda::std::get<I>(v[u]);
            if (a.scalar_mask & (1u << (NOUT + I))) {
              const T s = *static_cast<const T*>(a.ptr[NOUT + I]);
#pragma unroll
              for (int e = 0; e < VEC; ++e) dst.v[e] = s;
            } else {
              dst = *reinterpret_cast<const VecOf<T, VEC>*>(static_cast<const T*>(a.ptr[NOUT + I]) + idx);
            }
          }(),
          ...);
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int64_t idx = block_start + (int64_t(u) * kEwThreads + threadIdx.x) * VEC;
      VecOf<out_t, VEC> o[NOUT];
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        ins x{cuda::std::get<I>(v[u]).v[e]...};
        out_t r[NOUT];
        f(idx + e, x, r);
#pragma unroll
        for (int k = 0; k < NOUT; ++k) o[k].v[e] = r[k];
      }
#pragma unroll
      for (int k = 0; k < NOUT; ++k) *reinterpret_cast<VecOf<out_t, VEC>*>(static_cast<out_t*>(a.ptr[k]) + idx) = o[k];
    }
  } else {
    const int64_t end = block_start + BLOCK < a.n ? block_start + BLOCK : a.n;
    for (int64_t idx = block_start + threadIdx.x; idx < end; idx += kEwThreads) {
      ins x{static_cast<const cuda::std::tuple_element_t<I, ins>*>(
          a.ptr[NOUT + I])[(a.scalar_mask & (1u << (NOUT + I))) ? 0 : idx]...};
      out_t r[NOUT];
      f(idx, x, r);
#pragma unroll
      for (int k = 0; k < NOUT; ++k) static_cast<out_t*>(a.ptr[k])[idx] = r[k];
    }
  }
}

template <class F, int VEC, int UNROLL>
__global__ void __launch_bounds__(kEwThreads) ew_contig_kernel(F f, EwContig a) {
  const int64_t block_start = int64_t(blockIdx.x) * (kEwThreads * VEC * UNROLL);
  ew_contig_body<F, VEC, UNROLL>(f, a, block_start,
                                 cuda::std::make_index_sequence<cuda::std::tuple_size_v<typename F::ins>>{});
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
    if constexpr (sizeof(Index) == 4) q = a.fdiv[d].div(rem);
    else q = rem / a.shape[d];
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
#pragma unroll
  for (int u = 0; u < kEwStridedUnroll; ++u) {
    const Index i = base + Index(u) * kEwThreads;
    if (i < a.n)
      ew_strided_one<F, Index>(f, a, i, cuda::std::make_index_sequence<cuda::std::tuple_size_v<typename F::ins>>{});
  }
}

// ---- host launcher --------------------------------------------------------------------------
inline constexpr int kEwContigUnroll = 4;

/// Launches F over `it`. Returns the launch error (never synchronizes).
template <class F>
cudaError_t ew_launch(const F& f, const EwIter& it, bool allow_vec, cudaStream_t stream) {
  if (it.numel == 0) return cudaSuccess;
  if (it.contiguous) {
    constexpr int VEC = vec_width<F>();
    EwContig a{};
    a.n = it.numel;
    for (int k = 0; k < it.nops; ++k) a.ptr[k] = it.ptr[k];
    a.scalar_mask = it.scalar_mask;
    a.vectorize = allow_vec && it.aligned16;
    // Unaligned or vectorization refused: scalar loop with VEC=1 blocks (same kernel shape).
    if (a.vectorize) {
      const int64_t per_block = int64_t(kEwThreads) * VEC * kEwContigUnroll;
      const int64_t blocks = (it.numel + per_block - 1) / per_block;
      ew_contig_kernel<F, VEC, kEwContigUnroll><<<dim3(static_cast<unsigned>(blocks)), kEwThreads, 0, stream>>>(f, a);
    } else {
      const int64_t per_block = int64_t(kEwThreads) * kEwContigUnroll;
      const int64_t blocks = (it.numel + per_block - 1) / per_block;
      ew_contig_kernel<F, 1, kEwContigUnroll><<<dim3(static_cast<unsigned>(blocks)), kEwThreads, 0, stream>>>(f, a);
    }
    return cudaGetLastError();
  }
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
