// Kernels of the quantization family for f16 inputs (every quantized dtype, every step); see
// quant_kernel.cuh. One translation unit per floating-point dtype so they compile in parallel.
#include "ops/quant/quant_kernel.cuh"

BARACUDA_QUANT_INSTANTIATE(f16)
