// The scatter engine's atomic path: output slice index[l] op= source slice l (scatter_add,
// index_add, segment_sum with atomicAdd; segment_max/min with atomic max/min, whose result does
// not depend on the order). One kernel per dtype x index dtype x reduction, per element or by
// rows (row mode: lane groups walk consecutive slices and combine runs of equal indices).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstring>
#include <limits>
#include <type_traits>

#include "kernels/common/dtype_traits.cuh"
#include "ops/index/index_kernels.cuh"

namespace baracuda::detail::idx {
namespace {

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
template <Reduce R>
__device__ __forceinline__ bool wins16(float x, float c) {
  return (R == Reduce::max ? x > c : x < c) || (isnan(x) && !isnan(c));
}
/// 16-bit floats have no max / min atomic: compare-and-swap on the halfword while v wins.
template <class T, Reduce R>
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
    if (!wins16<R>(x, static_cast<float>(cur))) break;
    old = atomicCAS(p, assumed, bits);
  } while (assumed != old);
}

template <class T>
inline constexpr bool kHalf16 = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

/// One reduction as the atomic kernels use it: `Acc` is what a thread accumulates (opmath for
/// sums; the ordered encoding for f32 / f64 max / min; the value itself otherwise), load()
/// turns a source element into it, combine() merges two (runs of equal indices, in registers)
/// and flush() applies it to the output with one atomic. combine and flush order values the
/// same way, so a run combined in registers gives the bits per-element atomics would.
template <class T, Reduce R>
struct RedOp {
  static constexpr bool kOrdered = std::is_floating_point_v<T> && R != Reduce::sum;  // f32, f64
  static constexpr bool k16 = kHalf16<T> && R != Reduce::sum;
  using Acc =
      std::conditional_t<R == Reduce::sum, kern::opmath_t<T>,
                         std::conditional_t<std::is_same_v<T, float>, uint32_t,
                                            std::conditional_t<std::is_same_v<T, double>, unsigned long long, T>>>;

  __device__ __forceinline__ static Acc load(T v) {
    if constexpr (R == Reduce::sum) {
      return kern::load_as_opmath(v);
    } else if constexpr (kOrdered) {
      // NaN made canonical and extreme on the winning side: positive for max, negative for min
      // (the bits torch's amax / amin give: 0x7fc00000 / 0xffc00000 and their f64 forms).
      if (isnan(v)) {
        if constexpr (sizeof(T) == 4)
          v = __uint_as_float(R == Reduce::max ? 0x7fc00000u : 0xffc00000u);
        else
          v = __longlong_as_double(
              static_cast<long long>(R == Reduce::max ? 0x7ff8000000000000ull : 0xfff8000000000000ull));
      }
      return ordered_bits(v);
    } else {
      return v;
    }
  }
  __device__ __forceinline__ static Acc combine(Acc a, Acc b) {
    if constexpr (R == Reduce::sum) {
      return a + b;
    } else if constexpr (k16) {
      return wins16<R>(static_cast<float>(b), static_cast<float>(a)) ? b : a;
    } else {
      return R == Reduce::max ? (b > a ? b : a) : (b < a ? b : a);
    }
  }
  __device__ __forceinline__ static void flush(T* dst, Acc a) {
    if constexpr (R == Reduce::sum) {
      atomic_add(dst, kern::convert<T>(a));
    } else if constexpr (k16) {
      atomic_cas16<T, R>(dst, a);
    } else if constexpr (kOrdered) {
      using U = std::conditional_t<sizeof(T) == 4, unsigned int, unsigned long long>;
      if constexpr (R == Reduce::max)
        atomicMax(reinterpret_cast<U*>(dst), a);
      else
        atomicMin(reinterpret_cast<U*>(dst), a);
    } else {
      using S = std::conditional_t<sizeof(T) == 4, int, long long>;
      if constexpr (R == Reduce::max)
        atomicMax(reinterpret_cast<S*>(dst), static_cast<S>(a));
      else
        atomicMin(reinterpret_cast<S*>(dst), static_cast<S>(a));
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

/// Decodes the ordered encoding of f32 / f64 max / min (every element of B: ksize x P).
template <class U>
__global__ void __launch_bounds__(256) unorder_kernel(const Geom g, U* out) {
  const int64_t P = g.P, total = g.ksize * g.P;
  for (int64_t t = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; t < total; t += int64_t{gridDim.x} * blockDim.x) {
    const int64_t k = t / P, p = t - k * P;
    int64_t ea, eb;
    element_offsets<int64_t>(g, p, &ea, &eb);
    U* e = out + k * g.kstride + eb;
    *e = unordered_bits(*e);
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

template <class T, class IT>
cudaError_t scatter_with(const Geom& g, void* out, const void* src, Reduce r, cudaStream_t stream) {
  T* o = static_cast<T*>(out);
  const T* s = static_cast<const T*>(src);
  if (r == Reduce::sum) return scatter_reduce_with<T, IT, Reduce::sum>(g, o, s, stream);
  if (r == Reduce::max) return scatter_reduce_with<T, IT, Reduce::max>(g, o, s, stream);
  return scatter_reduce_with<T, IT, Reduce::min>(g, o, s, stream);
}

template <class IT>
cudaError_t scatter_dt(const Geom& g, void* out, const void* src, DType dt, Reduce r, cudaStream_t stream) {
  switch (dt) {
    case DType::f32:
      return scatter_with<float, IT>(g, out, src, r, stream);
    case DType::f64:
      return scatter_with<double, IT>(g, out, src, r, stream);
    case DType::f16:
      return scatter_with<__half, IT>(g, out, src, r, stream);
    case DType::bf16:
      return scatter_with<__nv_bfloat16, IT>(g, out, src, r, stream);
    case DType::s32:
      return scatter_with<int32_t, IT>(g, out, src, r, stream);
    case DType::s64:
      return scatter_with<int64_t, IT>(g, out, src, r, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace

bool scatter_rows_ok(const Geom& g) { return g.ri == 1 && g.rs == 1 && g.ssize[0] >= 8; }

cudaError_t launch_scatter_atomic(const Geom& g, void* out, const void* src, DType dt, DType index_dtype, Reduce r,
                                  cudaStream_t stream) {
  if (g.L * g.P == 0) return cudaSuccess;
  return index_dtype == DType::s32 ? scatter_dt<int32_t>(g, out, src, dt, r, stream)
                                   : scatter_dt<int64_t>(g, out, src, dt, r, stream);
}

void reduce_identity_bits(DType dt, Reduce r, unsigned char out[16]) {
  std::memset(out, 0, 16);
  if (r == Reduce::sum) return;
  const bool mx = r == Reduce::max;
  auto put = [&](auto v) { std::memcpy(out, &v, sizeof(v)); };
  switch (dt) {
    case DType::f32:  // the encodings of -inf / +inf (see ordered_bits)
      put(mx ? ~uint32_t{0xff800000u} : (uint32_t{0x7f800000u} | 0x80000000u));
      break;
    case DType::f64:
      put(mx ? ~uint64_t{0xfff0000000000000ull} : (uint64_t{0x7ff0000000000000ull} | 0x8000000000000000ull));
      break;
    case DType::f16:
      put(static_cast<uint16_t>(mx ? 0xfc00u : 0x7c00u));
      break;
    case DType::bf16:
      put(static_cast<uint16_t>(mx ? 0xff80u : 0x7f80u));
      break;
    case DType::s32:
      put(mx ? std::numeric_limits<int32_t>::min() : std::numeric_limits<int32_t>::max());
      break;
    case DType::s64:
      put(mx ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int64_t>::max());
      break;
    default:
      break;
  }
}

cudaError_t scatter_finish(const Geom& g, void* out, DType dt, Reduce r, cudaStream_t stream) {
  if (r == Reduce::sum || g.ksize * g.P == 0) return cudaSuccess;
  const unsigned blocks = grid_for(g.ksize * g.P, 4, 256);
  if (dt == DType::f32)
    unorder_kernel<uint32_t><<<blocks, 256, 0, stream>>>(g, static_cast<uint32_t*>(out));
  else if (dt == DType::f64)
    unorder_kernel<unsigned long long><<<blocks, 256, 0, stream>>>(g, static_cast<unsigned long long*>(out));
  else
    return cudaSuccess;
  return cudaGetLastError();
}

}  // namespace baracuda::detail::idx
