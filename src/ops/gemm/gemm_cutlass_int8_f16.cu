// CUTLASS int8 x int8 GEMM with the scale (+ bias) epilogue, f16 output (both tile configurations);
// see gemm_cutlass_int8.cuh. One TU per output dtype so that they compile in parallel.
#include "ops/gemm/gemm_cutlass_int8.cuh"

BARACUDA_CUTLASS_INT8_INSTANTIATE(f16)
