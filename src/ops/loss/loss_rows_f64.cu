// Rows-loss kernels (losses over the last dim) for one dtype; see rows_kernel.cuh.
#include "ops/loss/rows_kernel.cuh"

BARACUDA_LOSS_ROWS_INSTANTIATE(f64)
