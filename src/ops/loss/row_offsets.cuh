// Row -> element offsets over the loss kernels' coalesced row dims (class and rows kinds).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/loss/loss_launch.hpp"

namespace baracuda::kern::loss {

/// Element offsets of row `row` in each of kSlots operand slots (row dims innermost first). L is a
/// launch struct with row_ndim, row_size[d] and row_stride[slot][d]. Unrolled with constant
/// indices so the parameter arrays stay in the constant bank instead of a local copy.
template <int kSlots, class L>
__device__ __forceinline__ void row_offsets(const L& p, int64_t row, int64_t (&off)[kSlots]) {
#pragma unroll
  for (int k = 0; k < kSlots; ++k) off[k] = 0;
  int64_t rem = row;
#pragma unroll
  for (int d = 0; d < detail::kLossRowDims; ++d) {
    if (d >= p.row_ndim) break;
    const int64_t q = rem / p.row_size[d];
    const int64_t r = rem - q * p.row_size[d];
    rem = q;
#pragma unroll
    for (int k = 0; k < kSlots; ++k) off[k] += r * p.row_stride[k][d];
  }
}

}  // namespace baracuda::kern::loss
