// Dynamic per-token / per-group quantization kernels for float16 inputs (every quantized dtype,
// symmetric and asymmetric); see quant_rows.cuh. Apart from quant_f16.cu so the two compile in parallel.
#include "ops/quant/quant_rows.cuh"

BARACUDA_QUANT_ROWS_INSTANTIATE(f16)
