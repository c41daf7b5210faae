// The elementwise kernel registry: one entry per (op, direction, input dtype, output dtype),
// generated from elementwise_ops.def by the group translation units (ew_<group>_<dir>.cu).
#pragma once
#include <cuda_runtime_api.h>

#include <span>
#include <vector>

#include "baracuda/ops/elementwise.hpp"
#include "core/ew_iter.hpp"

namespace baracuda::detail {

using EwLaunchFn = cudaError_t (*)(const EwIter& it, const EwParams& p, bool allow_vec, cudaStream_t stream);

struct EwEntry {
  ElementwiseOp op;
  Direction dir;
  DType in;   // dtype of the (non-bool) inputs
  DType out;  // dtype of the outputs
  EwLaunchFn launch;
  int vec;       // elements per 16-byte access of the vectorized variant
  bool short16;  // 16-bit storage on a short form (functors.cuh SHORT16): the SKU's precision note says so
  bool indexed;  // the kernel reads the element's logical index (generators, INDEXED ops): keep_order
  bool row_bcast;  // has the row-broadcast contiguous kernel (functors.cuh ROW_BCAST)
};

/// All entries, sorted for lookup.
std::span<const EwEntry> ew_registry();
const EwEntry* ew_find(ElementwiseOp op, Direction dir, DType in, DType out);

/// Sums a dense row-major buffer of `full` shape into `grad` (whose shape broadcasts to
/// `full`), accumulating in f32 (f64 for f64). Deterministic: fixed summation order.
cudaError_t ew_sum_to_shape(DType dt, const void* full_buf, const Shape& full, const TensorMut& grad,
                            cudaStream_t stream);

/// Entries registered by the generated kernel translation units at library load (a
/// function-local static, so registration order across TUs does not matter).
std::vector<EwEntry>& ew_pending();

}  // namespace baracuda::detail
