#include "core/ew_iter.hpp"

#include <algorithm>
#include <numeric>

namespace baracuda::detail {

EwIter make_ew_iter(std::span<const TensorMut> outs, std::span<const TensorRef> ins, int out_rank,
                    const int64_t* out_shape, bool keep_order) {
  EwIter it;
  it.nout = static_cast<int>(outs.size());
  it.nops = it.nout + static_cast<int>(ins.size());
  it.numel = 1;
  for (int d = 0; d < out_rank; ++d) it.numel *= out_shape[d];

  // Full-rank strides per operand, logical order (dim 0 outermost), broadcast dims -> 0.
  int64_t full[kEwMaxOps][kMaxRank] = {};
  auto expand = [&](int k, const Layout& l, void* p, int bytes) {
    it.ptr[k] = p;
    it.elem_bytes[k] = bytes;
    const int off = out_rank - l.rank;
    for (int d = 0; d < l.rank; ++d) full[k][off + d] = (l.shape[d] == 1) ? 0 : l.stride[d];
  };
  for (int k = 0; k < it.nout; ++k) expand(k, outs[k].layout, outs[k].data, size_in_bytes(outs[k].dtype));
  for (size_t k = 0; k < ins.size(); ++k)
    expand(it.nout + int(k), ins[k].layout, const_cast<void*>(ins[k].data), size_in_bytes(ins[k].dtype));

  // Keep non-trivial dims, innermost first.
  int dims[kMaxRank];
  int n = 0;
  for (int d = out_rank - 1; d >= 0; --d)
    if (out_shape[d] != 1) dims[n++] = d;
  if (!keep_order && it.nout > 0) {
    // Order by the first output's strides (ascending), ties by the inputs': a transposed output
    // is then written in its own memory order.
    std::stable_sort(dims, dims + n, [&](int a, int b) {
      for (int k = 0; k < it.nops; ++k) {
        if (full[k][a] == 0 || full[k][b] == 0) continue;
        if (full[k][a] != full[k][b]) return full[k][a] < full[k][b];
      }
      return false;
    });
  }
  // Coalesce adjacent dims (inner i, outer j) when stride_j == stride_i * size_i for all ops.
  it.rank = 0;
  for (int i = 0; i < n; ++i) {
    const int d = dims[i];
    if (it.rank > 0) {
      const int r = it.rank - 1;
      bool merge = true;
      for (int k = 0; k < it.nops && merge; ++k) merge = full[k][d] == it.stride[k][r] * it.shape[r];
      if (merge) {
        it.shape[r] *= out_shape[d];
        continue;
      }
    }
    it.shape[it.rank] = out_shape[d];
    for (int k = 0; k < it.nops; ++k) it.stride[k][it.rank] = full[k][d];
    ++it.rank;
  }

  it.contiguous = it.rank <= 1;
  it.aligned16 = true;
  it.scalar_mask = 0;
  for (int k = 0; k < it.nops; ++k) {
    bool scalar = true;
    for (int r = 0; r < it.rank; ++r) scalar = scalar && it.stride[k][r] == 0;
    if (scalar) {
      it.scalar_mask |= 1u << k;
      continue;
    }
    if (it.rank == 1 && it.stride[k][0] != 1) it.contiguous = false;
    if (reinterpret_cast<uintptr_t>(it.ptr[k]) % 16 != 0) it.aligned16 = false;
  }
  constexpr int64_t kI32 = int64_t{1} << 31;
  it.fits_i32 = it.numel < kI32;
  for (int k = 0; k < it.nops && it.fits_i32; ++k) {
    int64_t hi = 0;
    for (int r = 0; r < it.rank; ++r) hi += (it.shape[r] - 1) * it.stride[k][r];
    it.fits_i32 = hi < kI32;
  }
  return it;
}

bool ew_can_vectorize(const EwIter& it, int vec) {
  if (it.numel == 0) return false;
  if (it.rank == 0) return true;
  if (it.rank > 1 && it.shape[0] % vec != 0) return false;
  // The rank-general vectorized kernel computes coordinates in 32 bits (its registers decide its
  // occupancy); larger strided/broadcast views take the 64-bit offset calculator.
  if (it.rank > 1 && it.numel >= (int64_t{1} << 31)) return false;
  // The contiguous kernel of a one-input op reads its input densely (elementwise.cuh,
  // ew_contig_bcast): a 1-d input of stride 0 (an expanded 0-d tensor) takes the offset calculator.
  if (it.rank == 1 && it.nops - it.nout == 1 && it.stride[it.nout][0] == 0) return false;
  for (int k = 0; k < it.nops; ++k) {
    const int64_t inner = it.stride[k][0];
    if (inner == 0) {
      if (k < it.nout) return false;  // an output is never broadcast
      continue;
    }
    if (inner != 1) return false;
    if (reinterpret_cast<uintptr_t>(it.ptr[k]) % 16 != 0) return false;
    for (int d = 1; d < it.rank; ++d)
      if (it.stride[k][d] % vec != 0) return false;
  }
  return true;
}

uint32_t ew_row_periodic_mask(const EwIter& it) {
  if (it.rank != 2 || it.numel >= (int64_t{1} << 31)) return 0;
  uint32_t mask = 0;
  for (int k = 0; k < it.nops; ++k) {
    const int64_t s0 = it.stride[k][0], s1 = it.stride[k][1];
    if (k >= it.nout && s0 == 1 && s1 == 0)
      mask |= 1u << k;
    else if (s0 != 1 || s1 != it.shape[0])
      return 0;  // neither dense nor a repeated row
  }
  return mask;
}

}  // namespace baracuda::detail
