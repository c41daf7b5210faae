// Pointwise loss kernels for one dtype; see pointwise_kernel.cuh.
#include "ops/loss/pointwise_kernel.cuh"

BARACUDA_LOSS_POINTWISE_INSTANTIATE(f64)
