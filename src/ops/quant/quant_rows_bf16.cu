// Dynamic per-token / per-group quantization kernels for bfloat16 inputs (every quantized dtype,
// symmetric and asymmetric); see quant_rows.cuh. Apart from quant_bf16.cu so the two compile in parallel.
#include "ops/quant/quant_rows.cuh"

BARACUDA_QUANT_ROWS_INSTANTIATE(bf16)
