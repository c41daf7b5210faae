// Row kernels of the softmax/normalization family for one (dtype, direction); see norm_kernel.cuh.
#include "ops/norm/norm_kernel.cuh"

BARACUDA_NORM_INSTANTIATE(bf16, Forward)
