// cross_entropy / nll_loss row kernels for one dtype; see class_kernel.cuh.
#include "ops/loss/class_kernel.cuh"

BARACUDA_LOSS_CLASS_INSTANTIATE(f32)
