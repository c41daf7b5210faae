// The scatter engine's atomic reductions, shared by the two translation units that instantiate
// them: index_scatter.cu (sum, and max / min in the order-preserving encoding of the segment
// ops) and index_scatter_reduce.cu (prod, and max / min on plain storage for scatter_reduce and
// lax.scatter). Split so the two halves compile in parallel.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "kernels/common/dtype_traits.cuh"
#include "ops/index/index_kernels.cuh"

namespace baracuda::detail::idx::scat {

template <class T>
__device__ __forceinline__ void atomic_add(T* a, T v) {
  if constexpr (std::is_same_v<T, int64_t>)
    atomicAdd(reinterpret_cast<unsigned long long*>(a), static_cast<unsigned long long>(v));  // two's complement
  else
    atomicAdd(a, v);
}

/// Order-preserving unsigned encodings of f32 / f64 for max / min atomics: non-negative values
/// get the sign bit set, negative ones are complemented, so unsigned order = float order (with
/// -0 below +0). One unsigned atomicMax / atomicMin per element whatever its sign (the direct
/// trick, int max for non-negatives and unsigned min for negatives, issues two divergent
/// atomics per warp).
__device__ __forceinline__ uint32_t ordered_bits(float v) {
  const uint32_t b = __float_as_uint(v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ unsigned long long ordered_bits(double v) {
  const auto b = static_cast<unsigned long long>(__double_as_longlong(v));
  return (b & 0x8000000000000000ull) ? ~b : (b | 0x8000000000000000ull);
}
template <class U>
__host__ __device__ __forceinline__ U unordered_bits(U e) {
  constexpr U sign = U(1) << (8 * sizeof(U) - 1);
  return (e & sign) ? (e & ~sign) : ~e;
}

/// Whether x replaces c under max / min with NaN winning (16-bit floats, compared in f32).
template <bool Max>
__device__ __forceinline__ bool wins16(float x, float c) {
  return (Max ? x > c : x < c) || (isnan(x) && !isnan(c));
}
/// 16-bit floats have no max / min atomic: compare-and-swap on the halfword while v wins.
template <class T, bool Max>
__device__ __forceinline__ void atomic_cas16(T* a, T v) {
  unsigned short* p = reinterpret_cast<unsigned short*>(a);
  const float x = static_cast<float>(v);
  unsigned short bits;
  memcpy(&bits, &v, 2);
  unsigned short old = *p, assumed;
  do {
    assumed = old;
    T cur;
    memcpy(&cur, &assumed, 2);
    if (!wins16<Max>(x, static_cast<float>(cur))) break;
    old = atomicCAS(p, assumed, bits);
  } while (assumed != old);
}

/// dst *= a by compare-and-swap on the element's own width (no multiply atomic exists). `a` is
/// opmath for floats, the wrapped 64-bit product for integers (the low bits of a product do not
/// depend on the high bits of its factors, so wrapping agrees with the storage type's).
template <class T, class A>
__device__ __forceinline__ void atomic_mul(T* dst, A a) {
  if constexpr (std::is_same_v<T, float>) {
    unsigned int* p = reinterpret_cast<unsigned int*>(dst);
    unsigned int old = *p, assumed;
    do {
      assumed = old;
      old = atomicCAS(p, assumed, __float_as_uint(__uint_as_float(assumed) * a));
    } while (assumed != old);
  } else if constexpr (std::is_same_v<T, double>) {
    unsigned long long* p = reinterpret_cast<unsigned long long*>(dst);
    unsigned long long old = *p, assumed;
    do {
      assumed = old;
      old = atomicCAS(p, assumed,
                      static_cast<unsigned long long>(
                          __double_as_longlong(__longlong_as_double(static_cast<long long>(assumed)) * a)));
    } while (assumed != old);
  } else if constexpr (kern::is_int_v<T> && sizeof(T) == 4) {
    unsigned int* p = reinterpret_cast<unsigned int*>(dst);
    unsigned int old = *p, assumed;
    do {
      assumed = old;
      old = atomicCAS(p, assumed, assumed * static_cast<unsigned int>(a));
    } while (assumed != old);
  } else if constexpr (kern::is_int_v<T> && sizeof(T) == 8) {
    unsigned long long* p = reinterpret_cast<unsigned long long*>(dst);
    unsigned long long old = *p, assumed;
    do {
      assumed = old;
      old = atomicCAS(p, assumed, assumed * static_cast<unsigned long long>(a));
    } while (assumed != old);
  } else {  // __half, __nv_bfloat16: the product rounded to the storage type, as torch's
    unsigned short* p = reinterpret_cast<unsigned short*>(dst);
    unsigned short old = *p, assumed;
    do {
      assumed = old;
      T cur;
      memcpy(&cur, &assumed, 2);
      const T next = kern::convert<T>(static_cast<float>(cur) * a);
      unsigned short bits;
      memcpy(&bits, &next, 2);
      old = atomicCAS(p, assumed, bits);
    } while (assumed != old);
  }
}

template <class T>
inline constexpr bool kHalf16 = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

constexpr bool is_max(Reduce r) { return r == Reduce::max || r == Reduce::max_raw; }
constexpr bool is_extremum(Reduce r) {
  return r == Reduce::max || r == Reduce::min || r == Reduce::max_raw || r == Reduce::min_raw;
}

/// One reduction as the atomic kernels use it: `Acc` is what a thread accumulates (opmath for
/// sums and float products; the wrapped 64-bit product for integer products; the ordered
/// encoding for f32 / f64 max / min; the value itself otherwise), load() turns a source element
/// into it, combine() merges two (runs of equal indices, in registers) and flush() applies it to
/// the output with one atomic. combine and flush order values the same way, so a run combined in
/// registers gives the bits per-element atomics would (sums and products: up to rounding order).
template <class T, Reduce R>
struct RedOp {
  static constexpr bool kOrdered = std::is_floating_point_v<T> && is_extremum(R);  // f32, f64
  static constexpr bool k16 = kHalf16<T> && is_extremum(R);
  static constexpr bool kRaw = R == Reduce::max_raw || R == Reduce::min_raw;
  static constexpr bool kMax = is_max(R);
  using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, unsigned long long>;
  using Acc = std::conditional_t<
      R == Reduce::sum, kern::opmath_t<T>,
      std::conditional_t<R == Reduce::prod,
                         std::conditional_t<kern::is_int_v<T>, unsigned long long, kern::opmath_t<T>>,
                         std::conditional_t<kOrdered, Bits, T>>>;

  __device__ __forceinline__ static Acc load(T v) {
    if constexpr (R == Reduce::sum) {
      return kern::load_as_opmath(v);
    } else if constexpr (R == Reduce::prod) {
      if constexpr (kern::is_int_v<T>)
        return static_cast<unsigned long long>(static_cast<long long>(v));
      else
        return kern::load_as_opmath(v);
    } else if constexpr (kOrdered) {
      // NaN made canonical and extreme on the winning side: positive for max, negative for min
      // (the bits torch's amax / amin give: 0x7fc00000 / 0xffc00000 and their f64 forms).
      if (isnan(v)) {
        if constexpr (sizeof(T) == 4)
          v = __uint_as_float(kMax ? 0x7fc00000u : 0xffc00000u);
        else
          v = __longlong_as_double(static_cast<long long>(kMax ? 0x7ff8000000000000ull : 0xfff8000000000000ull));
      }
      return ordered_bits(v);
    } else {
      return v;
    }
  }
  __device__ __forceinline__ static Acc combine(Acc a, Acc b) {
    if constexpr (R == Reduce::sum) {
      return a + b;
    } else if constexpr (R == Reduce::prod) {
      return a * b;
    } else if constexpr (k16) {
      return wins16<kMax>(static_cast<float>(b), static_cast<float>(a)) ? b : a;
    } else {
      return kMax ? (b > a ? b : a) : (b < a ? b : a);
    }
  }
  __device__ __forceinline__ static void flush(T* dst, Acc a) {
    if constexpr (R == Reduce::sum) {
      atomic_add(dst, kern::convert<T>(a));
    } else if constexpr (R == Reduce::prod) {
      if (a == Acc(1)) return;  // x * 1 == x bit for bit (NaN, -0 included): no atomic needed
      atomic_mul(dst, a);
    } else if constexpr (k16) {
      atomic_cas16<T, kMax>(dst, a);
    } else if constexpr (kOrdered && !kRaw) {
      if constexpr (kMax)
        atomicMax(reinterpret_cast<Bits*>(dst), a);
      else
        atomicMin(reinterpret_cast<Bits*>(dst), a);
    } else if constexpr (kOrdered) {
      flush_raw(dst, a);
    } else {
      using S = std::conditional_t<sizeof(T) == 4, int, long long>;
      if constexpr (kMax)
        atomicMax(reinterpret_cast<S*>(dst), static_cast<S>(a));
      else
        atomicMin(reinterpret_cast<S*>(dst), static_cast<S>(a));
    }
  }

  /// max_raw / min_raw of f32 / f64 on plain storage (see Reduce): skip when the destination
  /// already wins or is NaN (a NaN is never replaced, so a NaN of either sign copied from self
  /// stays), else one signed or unsigned atomic by the sign of the new value.
  __device__ __forceinline__ static void flush_raw(T* dst, Acc a) {
    using S = std::conditional_t<sizeof(T) == 4, int, long long>;
    const Bits cur_bits = *reinterpret_cast<volatile Bits*>(dst);
    T cur;
    memcpy(&cur, &cur_bits, sizeof(T));
    if (isnan(cur) || (kMax ? ordered_bits(cur) >= a : ordered_bits(cur) <= a)) return;
    const Bits raw = unordered_bits(a);
    const bool negative = (raw >> (8 * sizeof(T) - 1)) != 0;
    if constexpr (kMax) {
      if (!negative)
        atomicMax(reinterpret_cast<S*>(dst), static_cast<S>(raw));
      else
        atomicMin(reinterpret_cast<Bits*>(dst), raw);
    } else {
      if (!negative)
        atomicMin(reinterpret_cast<S*>(dst), static_cast<S>(raw));
      else
        atomicMax(reinterpret_cast<Bits*>(dst), raw);
    }
  }
};

template <class T, class IT, Reduce R>
__global__ void __launch_bounds__(256) scatter_atomic_kernel(const Geom g, T* out, const T* src) {
  using Op = RedOp<T, R>;
  const int64_t P = g.P, total = g.L * g.P;
  for (int64_t t = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; t < total; t += int64_t{gridDim.x} * blockDim.x) {
    const int64_t l = t / P, p = t - l * P;
    int64_t xi, xa, xb, ea, eb;
    slice_offsets<int64_t>(g, l, &xi, &xa, &xb);
    element_offsets<int64_t>(g, p, &ea, &eb);
    const int64_t v = read_index<IT>(g.index, xi);
    if (!index_ok(g, v)) continue;
    Op::flush(out + v * g.kstride + xb + eb, Op::load(src[xa + ea]));
  }
}

// ---- the row kernel ------------------------------------------------------------------------------
constexpr int kRowsPerBlock = 32;  ///< consecutive slices a lane group walks (runs combine within)
constexpr int kRowUnroll = 4;      ///< slices loaded ahead (indices and values in flight)
constexpr int kColsPerLane = 2;    ///< columns a lane accumulates (a unit covers S x 2 columns)

/// Row mode, one slice dim of P >= 8 elements. Groups of S lanes (S = 8, 16 or 32, the
/// smallest power of two >= min(P, 32)) take units of (kRowsPerBlock consecutive slices, S x
/// kColsPerLane columns); lane c of a group owns columns c, c + S, ..., so every load and
/// atomic of the group is one contiguous run. Indices are read once per slice by the group (one
/// broadcast address); consecutive slices with the same index combine in registers and flush
/// with one atomic per column when the index changes (sorted segment ids: one atomic per run).
template <class T, class IT, Reduce R>
__global__ void __launch_bounds__(256)
    scatter_rows_kernel(const Geom g, T* out, const T* src, int S, int64_t col_units) {
  using Op = RedOp<T, R>;
  using Acc = typename Op::Acc;
  const int64_t P = g.ssize[0];
  const int lane = static_cast<int>(threadIdx.x) & (S - 1);
  const int64_t units = (g.L + kRowsPerBlock - 1) / kRowsPerBlock * col_units;
  const int64_t groups = int64_t{gridDim.x} * blockDim.x / S;
  for (int64_t u = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / S; u < units; u += groups) {
    const int64_t rb = u / col_units;
    const int64_t c0 = (u - rb * col_units) * S * kColsPerLane + lane;
    // This lane's columns: c0 + S * c, live while < P; their source and output offsets.
    const int64_t left = c0 < P ? (P - c0 + S - 1) / S : 0;
    const int n_live = left < kColsPerLane ? static_cast<int>(left) : kColsPerLane;
    const T* sp = src + c0 * g.a_sstride[0];
    T* op = out + c0 * g.b_sstride[0];
    const int64_t r_begin = rb * kRowsPerBlock;
    const int64_t r_end = r_begin + kRowsPerBlock < g.L ? r_begin + kRowsPerBlock : g.L;
    Acc acc[kColsPerLane];
    int64_t cur = -1;  // the index being accumulated (-1: none yet)
    for (int64_t r0 = r_begin; r0 < r_end; r0 += kRowUnroll) {
      IT id[kRowUnroll];
      T x[kRowUnroll][kColsPerLane];
#pragma unroll
      for (int k = 0; k < kRowUnroll; ++k) {
        const bool row = r0 + k < r_end;
        id[k] = row ? __ldg(static_cast<const IT*>(g.index) + (r0 + k) * g.index_stride[0]) : IT(-1);
        const T* rp = sp + (r0 + k) * g.a_istride[0];
#pragma unroll
        for (int c = 0; c < kColsPerLane; ++c) x[k][c] = row && c < n_live ? rp[c * S * g.a_sstride[0]] : T{};
      }
#pragma unroll
      for (int k = 0; k < kRowUnroll; ++k) {
        if (r0 + k >= r_end || !index_ok(g, id[k])) continue;  // uniform within the group
        if (id[k] != cur) {
          if (cur >= 0) {
            T* dst = op + cur * g.kstride;
#pragma unroll
            for (int c = 0; c < kColsPerLane; ++c)
              if (c < n_live) Op::flush(dst + c * S * g.b_sstride[0], acc[c]);
          }
          cur = id[k];
#pragma unroll
          for (int c = 0; c < kColsPerLane; ++c) acc[c] = Op::load(x[k][c]);
        } else {
#pragma unroll
          for (int c = 0; c < kColsPerLane; ++c) acc[c] = Op::combine(acc[c], Op::load(x[k][c]));
        }
      }
    }
    if (cur >= 0) {
      T* dst = op + cur * g.kstride;
#pragma unroll
      for (int c = 0; c < kColsPerLane; ++c)
        if (c < n_live) Op::flush(dst + c * S * g.b_sstride[0], acc[c]);
    }
  }
}

template <class T, class IT, Reduce R>
cudaError_t scatter_reduce_with(const Geom& g, T* out, const T* src, cudaStream_t stream) {
  if (scatter_rows_ok(g)) {
    int S = 8;
    while (S < 32 && S < g.ssize[0]) S *= 2;
    const int64_t col_units = (g.ssize[0] + S * kColsPerLane - 1) / (S * kColsPerLane);
    const int64_t groups = (g.L + kRowsPerBlock - 1) / kRowsPerBlock * col_units;
    scatter_rows_kernel<T, IT, R><<<grid_for(groups * S, 1, 256), 256, 0, stream>>>(g, out, src, S, col_units);
  } else {
    scatter_atomic_kernel<T, IT, R><<<grid_for(g.L * g.P, 4, 256), 256, 0, stream>>>(g, out, src);
  }
  return cudaGetLastError();
}

/// The dtypes with atomics of their width (and their 16-bit compare-and-swap forms).
inline constexpr DTypeSet kAtomicDTypes = dtypes::kFloat | bit(DType::s32) | bit(DType::s64);

/// Runs the reduction R for a runtime dtype (kAtomicDTypes) and index dtype.
template <Reduce R>
cudaError_t scatter_dispatch(const Geom& g, void* out, const void* src, DType dt, DType index_dtype,
                             cudaStream_t stream) {
  cudaError_t e = cudaErrorInvalidValue;
  kern::dispatch<kAtomicDTypes>(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = static_cast<T*>(out);
    const T* s = static_cast<const T*>(src);
    e = index_dtype == DType::s32 ? scatter_reduce_with<T, int32_t, R>(g, o, s, stream)
                                  : scatter_reduce_with<T, int64_t, R>(g, o, s, stream);
  });
  return e;
}

/// prod, max_raw, min_raw (index_scatter_reduce.cu).
cudaError_t scatter_atomic_ext(const Geom& g, void* out, const void* src, DType dt, DType index_dtype, Reduce r,
                               cudaStream_t stream);

}  // namespace baracuda::detail::idx::scat
