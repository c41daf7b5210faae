// Descriptor-level helpers shared by plan.cpp (select) and run.cpp (the lowering): which ops
// assign, which reduction a reducing scatter applies.
#pragma once
#include "baracuda/ops/index.hpp"

namespace baracuda::detail::idx {

/// Assignments (bytes move): scatter, index_copy, index_put without accumulate, lax.scatter
/// replacing.
bool is_assign(const IndexDesc& d);
/// The reduction of a reducing scatter: sum for the sums and index_put's accumulate, amax / amin
/// for segment_max / segment_min, the reduce field of scatter_reduce / lax_scatter; `none` for
/// assignments and every other op.
ScatterReduce reduction_of(const IndexDesc& d);
/// Ops whose index tensors are first linearized into int64 offsets (index, index_put, lax ops).
bool is_linearized(IndexOp op);

}  // namespace baracuda::detail::idx
