// Descriptor-level helpers shared by plan.cpp (select) and run.cpp (the lowering): which ops
// assign, which reduction a reducing scatter applies.
#pragma once
#include <cuda_runtime_api.h>

#include <string>

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

// ---- the rows and generate engines (rows.cpp) ------------------------------------------------
/// embedding_bag, embedding_renorm, tril/triu_indices: plan.cpp and run.cpp hand them to the
/// functions below.
bool is_rows_op(IndexOp op);
/// select()'s checks of their descriptors (after the op id is known to be valid).
Result<void> check_rows_desc(const IndexDesc& d, const std::string& label);
/// What select() records for them.
struct RowsChoice {
  bool sorted = false;  ///< embedding_bag backward: the sorted (deterministic) path
  std::string layout;   ///< the SKU's layout
  std::string note;     ///< the precision note
  std::string epilogue;
  DType math = DType::f32, accumulator = DType::f32;
  bool deterministic = true, bit_stable = true;
  size_t workspace = 0;
};
RowsChoice rows_choice(const Target& target, const IndexDesc& d, const PlanPreference& pref);
/// can_implement for them (every role, including the ones they never read).
Result<void> check_rows_args(const IndexDesc& d, const IndexArgs& a, const std::string& label);
/// layout_for and run for them (after can_implement).
std::string rows_layout(const IndexDesc& d, bool sorted, bool allow_vec, const IndexArgs& a);
Result<void> run_rows(const IndexDesc& d, bool sorted, bool allow_vec, size_t plan_workspace, cudaStream_t stream,
                      Workspace ws, const IndexArgs& a, const std::string& label);
/// The radix sort's scratch for n keys of end_bit bits: exact when `target` is the current
/// device, else a bound (run() asks for the exact need and refuses a smaller workspace).
size_t sort_scratch_bytes(const Target& target, int64_t n, int end_bit = 64);
/// out := 0 through the copy engine's fill path (run.cpp).
cudaError_t fill_zeros(const TensorMut& out, DType dt, bool allow_vec, cudaStream_t stream);

}  // namespace baracuda::detail::idx
