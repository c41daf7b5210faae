// Device helpers of the rows engine (embedding_bag forward and backward, index_bag_fw.cu and
// index_bag_bw.cu): bag ranges from the offsets, the bag of a flat position, lane groups that
// share one row between them (shuffles within the group), and 16-byte row vectors.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/common/dtype_traits.cuh"
#include "ops/index/index_kernels.cuh"

namespace baracuda::detail::idx::bag {

/// Lanes a group spends on a row of `vectors` vectors: the smallest power of two covering them,
/// at most a warp (longer rows are split into chunks of 32 vectors, one group each).
inline int group_lanes(int64_t vectors) {
  int g = 1;
  while (g < 32 && g < vectors) g *= 2;
  return g;
}

/// The mask of this lane's group (G lanes, G a power of two <= 32) for the *_sync intrinsics.
__device__ __forceinline__ unsigned group_mask(int G) {
  if (G == 32) return 0xffffffffu;
  const unsigned first = (threadIdx.x & 31u) & ~static_cast<unsigned>(G - 1);
  return ((1u << G) - 1u) << first;
}

template <class IT>
__device__ __forceinline__ int64_t load_index(const void* p, int64_t off) {
  return static_cast<int64_t>(__ldg(static_cast<const IT*>(p) + off));
}

/// Bag b's positions [*begin, *end), clamped to [0, len]; an offset outside it, or a bag ending
/// before it begins, sets the error flag (the bag is then empty or cut at the edge).
template <class IT>
__device__ __forceinline__ void bag_range(const BagParams& p, int64_t b, int64_t* begin, int64_t* end) {
  if (!p.offsets) {
    *begin = 0;
    *end = p.len;
    return;
  }
  int64_t lo = b == 0 ? 0 : load_index<IT>(p.offsets, b * p.off_stride);  // torch forces the first to 0
  int64_t hi = b + 1 < p.bags ? load_index<IT>(p.offsets, (b + 1) * p.off_stride) : p.len;
  bool bad = false;
  if (lo < 0 || lo > p.len) {
    bad = true;
    lo = lo < 0 ? 0 : p.len;
  }
  if (hi < 0 || hi > p.len) {
    bad = true;
    hi = hi < 0 ? 0 : p.len;
  }
  if (hi < lo) {
    bad = true;
    hi = lo;
  }
  if (bad && p.error) *p.error = 1;  // idempotent store
  *begin = lo;
  *end = hi;
}

/// The bag holding flat position l, or -1 (then *e is undefined); *e: its position inside the
/// bag's addressing (1-d ids: l itself; 2-d: l mod len). 1-d: a binary search for the last bag
/// starting at or before l, then a check that it really covers l (decreasing offsets may leave
/// positions in no bag).
template <class IT>
__device__ __forceinline__ int64_t position_bag(const BagParams& p, int64_t l, int64_t* e) {
  if (!p.offsets) {
    const int64_t b = l / p.len;
    *e = l - b * p.len;
    return b;
  }
  *e = l;
  if (p.bags <= 0) return -1;
  int64_t lo = 0, hi = p.bags;  // invariant: begin(lo) <= l (begin(0) = 0)
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (load_index<IT>(p.offsets, mid * p.off_stride) <= l)
      lo = mid;
    else
      hi = mid;
  }
  int64_t begin, end;
  bag_range<IT>(p, lo, &begin, &end);
  return begin <= l && l < end ? lo : -1;
}

/// Whether id is a row to use: out-of-range ids set the error flag; padding_idx is left out.
__device__ __forceinline__ bool id_ok(const BagParams& p, int64_t id) {
  if (id < 0 || id >= p.num_weights) {
    if (p.error) *p.error = 1;
    return false;
  }
  return id != p.padding_idx;
}

/// V elements of a row: one 16-byte load (V * sizeof(T) == 16, unit stride) or V == 1 scalar.
template <class T, int V>
__device__ __forceinline__ void load_vec(const T* ptr, int64_t stride, kern::opmath_t<T> (&out)[V]) {
  if constexpr (V > 1) {
    static_assert(V * sizeof(T) == 16, "row vectors are 16 bytes");
    const uint4 w = __ldg(reinterpret_cast<const uint4*>(ptr));
    T v[V];
    memcpy(v, &w, 16);
#pragma unroll
    for (int j = 0; j < V; ++j) out[j] = kern::load_as_opmath(v[j]);
  } else {
    (void)stride;
    out[0] = kern::load_as_opmath(ptr[0]);
  }
}

template <class T, int V>
__device__ __forceinline__ void store_vec(T* ptr, const kern::opmath_t<T> (&in)[V]) {
  if constexpr (V > 1) {
    T v[V];
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = kern::convert<T>(in[j]);
    uint4 w;
    memcpy(&w, v, 16);
    *reinterpret_cast<uint4*>(ptr) = w;
  } else {
    ptr[0] = kern::convert<T>(in[0]);
  }
}

/// Sum of v over the G lanes of the group (butterfly: every lane gets the same bits).
template <class A>
__device__ __forceinline__ A group_sum(A v, int G, unsigned mask) {
  for (int o = G / 2; o > 0; o /= 2) v += __shfl_xor_sync(mask, v, o, G);
  return v;
}

/// Element d of a row in units of the row variant: the 16-byte vector d (V > 1, unit stride)
/// or the element d at `stride`.
template <int V>
__device__ __forceinline__ int64_t vec_offset(int64_t d, int64_t stride) {
  return V > 1 ? d * V : d * stride;
}

}  // namespace baracuda::detail::idx::bag
