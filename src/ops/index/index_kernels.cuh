// Device helpers shared by the indexing family's kernels: byte-mover words and the slice
// geometry (index_launch.hpp's Geom) evaluated per thread.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/words.cuh"
#include "ops/index/index_launch.hpp"

namespace baracuda::detail::idx {

/// The integer word that moves one element of EB bytes (kernels/common/words.cuh).
using ::baracuda::kern::Word;

/// Calls fn.template operator()<EB>() for an element of 1, 2, 4, 8 or 16 bytes (the byte-mover
/// widths); any other width is cudaErrorInvalidValue.
template <class Fn>
inline cudaError_t by_bytes(int eb, Fn&& fn) {
  switch (eb) {
    case 1:
      return fn.template operator()<1>();
    case 2:
      return fn.template operator()<2>();
    case 4:
      return fn.template operator()<4>();
    case 8:
      return fn.template operator()<8>();
    case 16:
      return fn.template operator()<16>();
    default:
      return cudaErrorInvalidValue;
  }
}

/// Calls fn.template operator()<EB, IT>() for the element bytes and the index dtype.
template <class Fn>
inline cudaError_t by_width(int eb, DType index_dtype, Fn&& fn) {
  const bool s32 = index_dtype == DType::s32;
  return by_bytes(eb, [&]<int EB>() {
    return s32 ? fn.template operator()<EB, int32_t>() : fn.template operator()<EB, int64_t>();
  });
}

/// 16 bytes passed by value to a kernel (fill values, one_hot's one), read back at the width of
/// the element.
struct Word16 {
  unsigned char b[16];
};

/// Decomposes slice l over the index dims: the index, A and B offsets of its base.
template <class I>
__device__ __forceinline__ void slice_offsets(const Geom& g, I l, I* index_off, I* a_off, I* b_off) {
  I xi = 0, xa = 0, xb = 0;
#pragma unroll
  for (int d = kRank - 1; d >= 0; --d) {
    if (d >= g.ri) continue;
    const I n = static_cast<I>(g.isize[d]);
    const I c = l % n;
    l /= n;
    xi += c * static_cast<I>(g.index_stride[d]);
    xa += c * static_cast<I>(g.a_istride[d]);
    xb += c * static_cast<I>(g.b_istride[d]);
  }
  *index_off = xi;
  *a_off = xa;
  *b_off = xb;
}

/// Decomposes element p of a slice over the slice dims: its A and B offsets.
template <class I>
__device__ __forceinline__ void element_offsets(const Geom& g, I p, I* a_off, I* b_off) {
  I xa = 0, xb = 0;
#pragma unroll
  for (int d = kRank - 1; d >= 0; --d) {
    if (d >= g.rs) continue;
    const I n = static_cast<I>(g.ssize[d]);
    const I c = p % n;
    p /= n;
    xa += c * static_cast<I>(g.a_sstride[d]);
    xb += c * static_cast<I>(g.b_sstride[d]);
  }
  *a_off = xa;
  *b_off = xb;
}

/// Reads the index at `off` as int64 (s32 or s64 storage).
template <class IT>
__device__ __forceinline__ int64_t read_index(const void* index, int64_t off) {
  return static_cast<int64_t>(__ldg(reinterpret_cast<const IT*>(index) + off));
}

/// Whether slice index `v` is usable; reports an out-of-range value through g.error.
__device__ __forceinline__ bool index_ok(const Geom& g, int64_t v) {
  // 0 <= v < ksize in one compare, and a predicated store rather than a branch: the row kernels
  // test every slice, and max / min are issue-bound.
  const bool in = static_cast<uint64_t>(v) < static_cast<uint64_t>(g.ksize);
  if (!in && g.report && g.error) *g.error = 1;  // idempotent store: no atomic needed
  return in && v != g.skip;
}

inline unsigned grid_for(int64_t work, int per_thread, int block) {
  int64_t b = (work + int64_t{per_thread} * block - 1) / (int64_t{per_thread} * block);
  if (b > (int64_t{1} << 20)) b = int64_t{1} << 20;
  return static_cast<unsigned>(b < 1 ? 1 : b);
}

}  // namespace baracuda::detail::idx
