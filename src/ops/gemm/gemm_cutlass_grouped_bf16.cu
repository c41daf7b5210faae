// CUTLASS grouped GEMM (mixture of experts), bfloat16 (both tile configurations); see
// gemm_cutlass_grouped.cuh. One TU per dtype so that they compile in parallel.
#include "ops/gemm/gemm_cutlass_grouped.cuh"

BARACUDA_CUTLASS_GROUPED_INSTANTIATE(bf16)
