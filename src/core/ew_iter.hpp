// The elementwise engine's host half (ATen's TensorIterator idea): expands every operand to
// the output shape (stride 0 = broadcast), drops size-1 dims, orders dims by the output's
// strides, merges dims that are contiguous for every operand, and decides which kernel variant
// can run (vectorized contiguous, strided 32-bit, strided 64-bit). Plain C++, shared by the
// plan (.cpp) and the kernels (.cu).
#pragma once
#include <cstdint>
#include <span>

#include "baracuda/core/status.hpp"
#include "baracuda/core/tensor.hpp"

namespace baracuda::detail {

inline constexpr int kEwMaxOps = 8;  // outputs first, then inputs

struct EwParams {
  double d[4];
  float f[4];
};

struct EwIter {
  int nops = 0;
  int nout = 0;
  int rank = 0;  // after coalescing; dim 0 is the innermost
  int64_t numel = 0;
  int64_t shape[kMaxRank] = {};
  int64_t stride[kEwMaxOps][kMaxRank] = {};  // elements
  void* ptr[kEwMaxOps] = {};
  int elem_bytes[kEwMaxOps] = {};
  bool contiguous = false;  // rank <= 1 and every operand has stride 1 or 0 (scalar)
  uint32_t scalar_mask = 0; // bit k: operand k is one element broadcast everywhere
  bool aligned16 = false;   // every non-scalar pointer is 16-byte aligned
  bool fits_i32 = false;    // numel and every operand's offsets < 2^31
};

/// Builds the iteration. `keep_order` preserves the logical row-major order (generators need
/// the logical linear index). Operand layouts must already be validated (shapes broadcastable
/// to `out_shape`, non-negative strides).
EwIter make_ew_iter(std::span<const TensorMut> outs, std::span<const TensorRef> ins, int out_rank,
                    const int64_t* out_shape, bool keep_order);

/// True when the vectorized kernel can run with `vec` elements per access: every operand's
/// innermost stride is 1 (then its pointer is 16-byte aligned and its outer strides are
/// multiples of `vec`) or 0 (one value replicated), and the innermost size is a multiple of
/// `vec` unless the iteration is one-dimensional (which may end mid-vector). A one-input
/// iteration whose 1-d input has stride 0 is refused: the contiguous kernel of such an op reads its
/// input densely.
bool ew_can_vectorize(const EwIter& it, int vec);

/// For a rank-2 iteration below 2^31 elements whose outputs are dense and whose inputs are dense
/// or one row repeated over the rows (strides (1, 0): a weight [C] against [N, C]), at least one
/// of them repeated: bit k set for each repeated-row operand k. 0 otherwise (scalars included).
/// The row-broadcast kernel (elementwise.cuh, ROWS) then reads those operands at e mod C.
uint32_t ew_row_periodic_mask(const EwIter& it);

}  // namespace baracuda::detail
