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

/// Order-preserving unsigned encodings of f32 / f64: non-negative values get the sign bit set,
/// negative ones are complemented, so unsigned order = float order (with -0 below +0). Max / min
/// compare a source with the destination's bits in this form; flush() decodes before its atomic.
__device__ __forceinline__ uint32_t ordered_bits(float v) {
  const uint32_t b = __float_as_uint(v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ unsigned long long ordered_bits(double v) {
  const auto b = static_cast<unsigned long long>(__double_as_longlong(v));
  return (b & 0x8000000000000000ull) ? ~b : (b | 0x8000000000000000ull);
}
template <class U>
__device__ __forceinline__ U unordered_bits(U e) {
  constexpr U sign = U(1) << (8 * sizeof(U) - 1);
  return (e & sign) ? (e & ~sign) : ~e;
}

/// The bits a destination holds now, read where the atomics land (L2, past L1). The max / min
/// kernels peek before their atomic and skip it when the destination already wins: a value read
/// too early is only less extreme, which costs an atomic a later read would have skipped, never
/// a wrong result. Once a destination has seen a few of its sources, most of them lose (random
/// order: the k-th beats the ones before with probability 1 / k), so the atomics, which the L2
/// serialises per line, drop to a few percent. A weak load (as XLA's scatter): a relaxed one
/// (ld.relaxed.gpu) must wait for the thread's earlier atomics to land and made the kernel 2.5x
/// slower (1M x 64 f32 rows, H200).
__device__ __forceinline__ unsigned short peek_bits(const unsigned short* p) { return __ldcg(p); }
__device__ __forceinline__ uint32_t peek_bits(const uint32_t* p) { return __ldcg(p); }
__device__ __forceinline__ unsigned long long peek_bits(const unsigned long long* p) { return __ldcg(p); }

/// Whether x replaces c under max / min with NaN winning (16-bit floats, compared in f32).
template <bool Max>
__device__ __forceinline__ bool wins16(float x, float c) {
  return (Max ? x > c : x < c) || (isnan(x) && !isnan(c));
}
/// 16-bit floats have no max / min atomic: compare-and-swap on the halfword while v wins, from
/// `old`, the bits the caller last saw there.
template <class T, bool Max>
__device__ __forceinline__ void atomic_cas16(T* a, T v, unsigned short old) {
  unsigned short* p = reinterpret_cast<unsigned short*>(a);
  const float x = static_cast<float>(v);
  unsigned short bits;
  memcpy(&bits, &v, 2);
  unsigned short assumed;
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

constexpr bool is_max(Reduce r) { return r == Reduce::max; }
constexpr bool is_extremum(Reduce r) { return r == Reduce::max || r == Reduce::min; }

/// One reduction as the atomic kernels use it: `Acc` is what a thread accumulates (opmath for
/// sums and float products; the wrapped 64-bit product for integer products; the ordered
/// encoding for f32 / f64 max / min; the value itself otherwise), load() turns a source element
/// into it and flush() applies it to the output with one atomic. combine() folds runs of equal
/// indices in registers first (sums and products: up to rounding order, the bits per-element
/// atomics would give; max / min: exactly, in the encoding). Max / min (kPeek) flush against
/// `seen`, the destination's bits from peek(), and issue no atomic when those win; the row
/// kernel flushes every source so, the vector kernel every run.
template <class T, Reduce R>
struct RedOp {
  static constexpr bool kOrdered = std::is_floating_point_v<T> && is_extremum(R);  // f32, f64
  static constexpr bool k16 = kHalf16<T> && is_extremum(R);
  static constexpr bool kPeek = is_extremum(R);
  static constexpr bool kMax = is_max(R);
  /// The storage's bits (what peek() reads).
  using Bits = std::conditional_t<sizeof(T) == 2, unsigned short,
                                  std::conditional_t<sizeof(T) == 4, uint32_t, unsigned long long>>;
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
    if constexpr (R == Reduce::sum)
      return a + b;
    else if constexpr (R == Reduce::prod)
      return a * b;
    else if constexpr (k16)
      return wins16<kMax>(static_cast<float>(b), static_cast<float>(a)) ? b : a;
    else  // the ordered encoding (f32, f64) or the integer itself
      return kMax ? (b > a ? b : a) : (b < a ? b : a);
  }
  __device__ __forceinline__ static Bits peek(const T* dst) { return peek_bits(reinterpret_cast<const Bits*>(dst)); }

  /// Whether the destination's bits `seen` already win over `a` (max / min): a NaN there is
  /// never replaced (so a NaN of either sign copied from self stays).
  __device__ __forceinline__ static bool settled(Bits seen, Acc a) {
    T cur;
    memcpy(&cur, &seen, sizeof(T));
    if constexpr (kOrdered)
      return isnan(cur) || (kMax ? ordered_bits(cur) >= a : ordered_bits(cur) <= a);
    else if constexpr (k16)
      return !wins16<kMax>(static_cast<float>(a), static_cast<float>(cur));
    else
      return kMax ? cur >= a : cur <= a;
  }

  /// Max / min: whether source value x certainly loses to the destination's bits `seen` (a NaN
  /// there, or x strictly less extreme): the cheap test that spares most slices the encoding,
  /// settled() and flush() (ties and NaN sources take the exact path).
  __device__ __forceinline__ static bool loses(T x, Bits seen) {
    T cur;
    memcpy(&cur, &seen, sizeof(T));
    if constexpr (kern::is_int_v<T>) {
      return kMax ? x <= cur : x >= cur;
    } else {
      const float xf = static_cast<float>(x), cf = static_cast<float>(cur);
      if constexpr (std::is_same_v<T, double>)
        return isnan(cur) || (kMax ? x < cur : x > cur);
      else
        return isnan(cf) || (kMax ? xf < cf : xf > cf);
    }
  }

  /// Max / min: nothing when `seen` wins; else f32 / f64 issue int atomicMax for a non-negative
  /// value and unsigned atomicMin for a negative one (min: mirrored), which order float bit
  /// patterns as the encoding does (NaN canonical and winning, +0 above -0); 16-bit floats a
  /// compare-and-swap from `seen`; integers their own atomic.
  __device__ __forceinline__ static void flush(T* dst, Acc a, Bits seen) {
    static_assert(kPeek);
    if (settled(seen, a)) return;
    if constexpr (kOrdered) {
      using S = std::conditional_t<sizeof(T) == 4, int, long long>;
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
    } else if constexpr (k16) {
      atomic_cas16<T, kMax>(dst, a, seen);
    } else {
      using S = std::conditional_t<sizeof(T) == 4, int, long long>;
      if constexpr (kMax)
        atomicMax(reinterpret_cast<S*>(dst), static_cast<S>(a));
      else
        atomicMin(reinterpret_cast<S*>(dst), static_cast<S>(a));
    }
  }
  /// Sums and products; max / min peek first.
  __device__ __forceinline__ static void flush(T* dst, Acc a) {
    if constexpr (kPeek) {
      flush(dst, a, peek(dst));
    } else if constexpr (R == Reduce::sum) {
      atomic_add(dst, kern::convert<T>(a));
    } else {
      if (a == Acc(1)) return;  // x * 1 == x bit for bit (NaN, -0 included): no atomic needed
      atomic_mul(dst, a);
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
/// Consecutive slices a lane group walks (sums and products combine runs of equal indices
/// within them) and slices loaded ahead per step (indices, values and max / min's peeks in
/// flight). Max / min take 16 and 2 (1M x 64 f32 rows, random ids, H200: 143 us against 164 at
/// 8 / 2, 146 at 32 / 2 and 150 at 16 / 4): with most atomics skipped the kernel is issue-bound,
/// so fewer registers and more groups in flight pay more than deeper unrolling.
template <Reduce R>
inline constexpr int kRowsPerUnit = is_extremum(R) ? 16 : 32;
template <Reduce R>
inline constexpr int kRowUnroll = is_extremum(R) ? 2 : 4;
constexpr int kColsPerLane = 2;  ///< columns a lane accumulates (a unit covers S x 2 columns)

/// A lane's run, combined in `acc`, into its columns dst, dst + step, ... (the first n_live).
template <class Op, class T, class Off, class Acc>
__device__ __forceinline__ void flush_run(T* dst, Off step, int n_live, const Acc (&acc)[kColsPerLane]) {
#pragma unroll
  for (int c = 0; c < kColsPerLane; ++c)
    if (c < n_live) Op::flush(dst + c * step, acc[c]);
}

/// Row mode, one slice dim of P >= 8 elements. Groups of S lanes (S = 8, 16 or 32, the
/// smallest power of two >= min(P, 32)) take units of (kRowsPerUnit consecutive slices, S x
/// kColsPerLane columns); lane c of a group owns columns c, c + S, ..., so every load and
/// atomic of the group is one contiguous run. Indices are read once per slice by the group (one
/// broadcast address); consecutive slices with the same index combine in registers and flush
/// with one atomic per column when the index changes (sorted segment ids: one atomic per run).
/// Max / min instead peek at every slice's destination together with the batch's loads (the
/// peeks' latency overlaps instead of preceding each flush) and flush each slice on its own
/// (an atomic only where the slice wins). `Off` is the offset type: int32_t when every offset
/// fits (see rows_narrow), which saves 10-20% of the executed instructions (1M x 64 f32 rows,
/// H200: max 184M -> 152M, sum 103M -> 92M; sum 160 -> 141 us), and max / min are issue-bound
/// once they skip most atomics.
template <class T, class IT, Reduce R, class Off>
__global__ void __launch_bounds__(256)
    scatter_rows_kernel(const Geom g, T* out, const T* src, int log2_s, Off col_units) {
  using Op = RedOp<T, R>;
  using Acc = typename Op::Acc;
  using Bits = typename Op::Bits;
  constexpr int kRows = kRowsPerUnit<R>;
  constexpr int kUnroll = kRowUnroll<R>;
  const int S = 1 << log2_s;
  const Off P = static_cast<Off>(g.ssize[0]), L = static_cast<Off>(g.L);
  const Off a_row = static_cast<Off>(g.a_istride[0]), i_row = static_cast<Off>(g.index_stride[0]);
  const Off key = static_cast<Off>(g.kstride);
  const Off a_col = S * static_cast<Off>(g.a_sstride[0]), b_col = S * static_cast<Off>(g.b_sstride[0]);
  const IT* index = static_cast<const IT*>(g.index);
  const int lane = static_cast<int>(threadIdx.x) & (S - 1);
  const Off units = (L + kRows - 1) / kRows * col_units;
  const Off groups = static_cast<Off>(gridDim.x) * static_cast<Off>(blockDim.x >> log2_s);
  for (Off u = (static_cast<Off>(blockIdx.x) * blockDim.x + threadIdx.x) >> log2_s; u < units; u += groups) {
    const Off rb = col_units == 1 ? u : u / col_units;
    const Off c0 = (u - rb * col_units) * S * kColsPerLane + lane;
    // This lane's columns: c0 + S * c, live while < P.
    const Off left = c0 < P ? (P - c0 + S - 1) >> log2_s : 0;
    const int n_live = left < kColsPerLane ? static_cast<int>(left) : kColsPerLane;
    const T* sp = src + c0 * static_cast<Off>(g.a_sstride[0]);
    T* op = out + c0 * static_cast<Off>(g.b_sstride[0]);
    const Off r_begin = rb * kRows;
    const Off r_end = r_begin + kRows < L ? r_begin + kRows : L;
    Acc acc[kColsPerLane];
    int64_t cur = -1;  // the index being accumulated (-1: none yet)
    for (Off r0 = r_begin; r0 < r_end; r0 += kUnroll) {
      IT id[kUnroll];
      bool ok[kUnroll];  // a slice of this unit with a usable index (uniform within the group)
      T x[kUnroll][kColsPerLane];
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        const bool row = r0 + k < r_end;
        id[k] = row ? __ldg(index + (r0 + k) * i_row) : IT(-1);
        const T* rp = sp + (r0 + k) * a_row;
#pragma unroll
        for (int c = 0; c < kColsPerLane; ++c) x[k][c] = row && c < n_live ? rp[c * a_col] : T{};
      }
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) ok[k] = r0 + k < r_end && index_ok(g, id[k]);
      if constexpr (Op::kPeek) {
        // Each slice on its own against its own peek: with most atomics skipped, combining
        // runs saves little and its bookkeeping costs more issue slots than it saves.
        Bits peeked[kUnroll][kColsPerLane];
#pragma unroll
        for (int k = 0; k < kUnroll; ++k) {
          const T* dst = op + (ok[k] ? static_cast<Off>(id[k]) * key : 0);
#pragma unroll
          for (int c = 0; c < kColsPerLane; ++c)
            peeked[k][c] = ok[k] && c < n_live ? Op::peek(dst + c * b_col) : Bits{};
        }
#pragma unroll
        for (int k = 0; k < kUnroll; ++k) {
          if (!ok[k]) continue;
          T* dst = op + static_cast<Off>(id[k]) * key;
#pragma unroll
          for (int c = 0; c < kColsPerLane; ++c)
            if (c < n_live && !Op::loses(x[k][c], peeked[k][c]))
              Op::flush(dst + c * b_col, Op::load(x[k][c]), peeked[k][c]);
        }
      } else {
#pragma unroll
        for (int k = 0; k < kUnroll; ++k) {
          if (!ok[k]) continue;
          if (id[k] != cur) {
            if (cur >= 0) flush_run<Op>(op + static_cast<Off>(cur) * key, b_col, n_live, acc);
            cur = id[k];
#pragma unroll
            for (int c = 0; c < kColsPerLane; ++c) acc[c] = Op::load(x[k][c]);
          } else {
#pragma unroll
            for (int c = 0; c < kColsPerLane; ++c) acc[c] = Op::combine(acc[c], Op::load(x[k][c]));
          }
        }
      }
    }
    if constexpr (!Op::kPeek)
      if (cur >= 0) flush_run<Op>(op + static_cast<Off>(cur) * key, b_col, n_live, acc);
  }
}

// ---- the vector row kernel (dense rows) -------------------------------------------------------
/// Sum, max and min where the slices are dense rows of whole 16-byte vectors (unit column stride
/// in source and output, 16-byte aligned rows): lane c of a group of S owns the c-th vector of
/// every row of its unit and reads it with one streaming 16-byte load a slice. Runs of equal
/// indices (sorted segment ids) combine in registers and flush once: sums as a vector atomic
/// (f32 on sm_90), max / min against one 16-byte L2 peek at the destination taken when the run
/// starts, in flight with the batch's loads, with an atomic only for the elements that win.
/// Against the row kernel's per-column loads, peeks and atomics this cuts the issued instructions
/// and L2 requests that bound these reductions (H100, 1M rows into 4096 segments, f32 max: 64
/// columns 146 -> 132 us random ids, 150 -> 116 sorted; 32 columns 132 -> 84; sum 164 -> 158
/// random, 110 -> 102 sorted). The unit shapes are the row kernel's (max / min 16 slices, 2 in
/// flight: 4 / 1 was 5% faster on random ids but 1.8x slower on sorted ones, whose concurrent
/// units then all peek and hit the same destination).
template <class T>
inline constexpr int kVecElems = 16 / static_cast<int>(sizeof(T));

/// A lane's combined run into its vector at dst: sums as one 16-byte vector atomic for f32
/// (sm_90), else element by element; max / min against `seen`, the bits peeked there (an atomic
/// only for the elements that win).
template <class Op, class T, class Acc, class Bits, int V>
__device__ __forceinline__ void flush_vec(T* dst, const Acc (&acc)[V], const Bits (&seen)[V]) {
  if constexpr (Op::kPeek) {
#pragma unroll
    for (int e = 0; e < V; ++e) Op::flush(dst + e, acc[e], seen[e]);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  } else if constexpr (std::is_same_v<T, float> && V == 4) {
    atomicAdd(reinterpret_cast<float4*>(dst), make_float4(acc[0], acc[1], acc[2], acc[3]));
#endif
  } else {
#pragma unroll
    for (int e = 0; e < V; ++e) Op::flush(dst + e, acc[e]);
  }
}

template <class T, class IT, Reduce R, class Off>
__global__ void __launch_bounds__(256)
    scatter_vec_rows_kernel(const Geom g, T* out, const T* src, int log2_s, Off col_units) {
  using Op = RedOp<T, R>;
  using Bits = typename Op::Bits;
  using Acc = typename Op::Acc;
  static_assert(Op::kPeek || R == Reduce::sum);
  constexpr int V = kVecElems<T>;
  constexpr int kRows = kRowsPerUnit<R>, kUnroll = kRowUnroll<R>;
  const Off vecs = static_cast<Off>(g.ssize[0]) / V, L = static_cast<Off>(g.L);
  const Off a_row = static_cast<Off>(g.a_istride[0]), i_row = static_cast<Off>(g.index_stride[0]);
  const Off key = static_cast<Off>(g.kstride);
  const IT* index = static_cast<const IT*>(g.index);
  const Off lane = static_cast<Off>(threadIdx.x) & ((Off{1} << log2_s) - 1);
  const Off units = (L + kRows - 1) / kRows * col_units;
  const Off groups = static_cast<Off>(gridDim.x) * static_cast<Off>(blockDim.x >> log2_s);
  for (Off u = (static_cast<Off>(blockIdx.x) * blockDim.x + threadIdx.x) >> log2_s; u < units; u += groups) {
    const Off rb = col_units == 1 ? u : u / col_units;
    const Off c = ((u - rb * col_units) << log2_s) + lane;
    if (c >= vecs) continue;
    const T* sp = src + c * V;
    T* op = out + c * V;
    const Off r_begin = rb * kRows;
    const Off r_end = r_begin + kRows < L ? r_begin + kRows : L;
    Acc acc[V];
    Bits cur_seen[V];  // max / min: the destination's bits when the run started
    int64_t cur = -1;  // the index of the run being combined (-1: none yet)
    for (Off r0 = r_begin; r0 < r_end; r0 += kUnroll) {
      IT id[kUnroll];
      bool ok[kUnroll];
      uint4 x[kUnroll], seen[kUnroll];
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        const bool row = r0 + k < r_end;
        id[k] = row ? __ldg(index + (r0 + k) * i_row) : IT(-1);
        x[k] = row ? __ldcs(reinterpret_cast<const uint4*>(sp + (r0 + k) * a_row)) : uint4{};
      }
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) ok[k] = r0 + k < r_end && index_ok(g, id[k]);
      // A slice that starts a run (its index differs from the one before) peeks at its
      // destination, in flight with the batch; a run's later slices fold into it in registers.
      bool starts[kUnroll];
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        starts[k] = ok[k] && static_cast<int64_t>(id[k]) != (k == 0 ? cur : static_cast<int64_t>(id[k - 1]));
        if constexpr (Op::kPeek)
          seen[k] = starts[k] ? __ldcg(reinterpret_cast<const uint4*>(op + static_cast<Off>(id[k]) * key)) : uint4{};
      }
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        if (!ok[k]) continue;
        T xv[V];
        memcpy(xv, &x[k], 16);
        if (starts[k]) {
          if (cur >= 0) flush_vec<Op>(op + static_cast<Off>(cur) * key, acc, cur_seen);
          cur = id[k];
          if constexpr (Op::kPeek) memcpy(cur_seen, &seen[k], 16);
#pragma unroll
          for (int e = 0; e < V; ++e) acc[e] = Op::load(xv[e]);
        } else {
#pragma unroll
          for (int e = 0; e < V; ++e) acc[e] = Op::combine(acc[e], Op::load(xv[e]));
        }
      }
    }
    if (cur >= 0) flush_vec<Op>(op + static_cast<Off>(cur) * key, acc, cur_seen);
  }
}

/// Whether every offset the row kernel forms fits 32 bits (with room for the unit counter):
/// the source's, the output's and the index's reach, a lane group's column step (up to 32
/// strides, formed even where the group is wider than the slice) and the slice count.
inline bool rows_narrow(const Geom& g) {
  constexpr int64_t kLimit = int64_t{1} << 30;
  const int64_t P = g.ssize[0];
  const int64_t a_reach = (g.L - 1) * g.a_istride[0] + (P - 1) * g.a_sstride[0] + 1;
  const int64_t b_reach = (g.ksize - 1) * g.kstride + (P - 1) * g.b_sstride[0] + 1;
  const int64_t i_reach = (g.L - 1) * g.index_stride[0] + 1;
  return a_reach < kLimit && b_reach < kLimit && i_reach < kLimit && g.L * P < kLimit && 32 * g.a_sstride[0] < kLimit &&
         32 * g.b_sstride[0] < kLimit;
}

template <class T, class IT, Reduce R>
cudaError_t scatter_reduce_with(const Geom& g, T* out, const T* src, cudaStream_t stream) {
  if constexpr (RedOp<T, R>::kPeek || R == Reduce::sum) {
    if (scatter_vec_rows_ok(g, out, src, sizeof(T), R)) {
      const int64_t vecs = g.ssize[0] / kVecElems<T>;
      int log2_s = 0;
      while ((int64_t{1} << log2_s) < 32 && (int64_t{1} << log2_s) < vecs) ++log2_s;
      const int64_t col_units = (vecs + (int64_t{1} << log2_s) - 1) >> log2_s;
      const int64_t groups = (g.L + kRowsPerUnit<R> - 1) / kRowsPerUnit<R> * col_units;
      const unsigned grid = grid_for(groups << log2_s, 1, 256);
      if (rows_narrow(g))
        scatter_vec_rows_kernel<T, IT, R, int32_t>
            <<<grid, 256, 0, stream>>>(g, out, src, log2_s, static_cast<int32_t>(col_units));
      else
        scatter_vec_rows_kernel<T, IT, R, int64_t><<<grid, 256, 0, stream>>>(g, out, src, log2_s, col_units);
      return cudaGetLastError();
    }
  }
  if (scatter_rows_ok(g)) {
    int log2_s = 3, S = 8;
    while (S < 32 && S < g.ssize[0]) S = 1 << ++log2_s;
    const int64_t col_units = (g.ssize[0] + S * kColsPerLane - 1) / (S * kColsPerLane);
    const int64_t groups = (g.L + kRowsPerUnit<R> - 1) / kRowsPerUnit<R> * col_units;
    const unsigned grid = grid_for(groups * S, 1, 256);
    if (rows_narrow(g))
      scatter_rows_kernel<T, IT, R, int32_t>
          <<<grid, 256, 0, stream>>>(g, out, src, log2_s, static_cast<int32_t>(col_units));
    else
      scatter_rows_kernel<T, IT, R, int64_t><<<grid, 256, 0, stream>>>(g, out, src, log2_s, col_units);
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

/// prod and min (index_scatter_reduce.cu).
cudaError_t scatter_atomic_ext(const Geom& g, void* out, const void* src, DType dt, DType index_dtype, Reduce r,
                               cudaStream_t stream);

}  // namespace baracuda::detail::idx::scat
