// Channel-normalization kernels (batch/instance/group norm, local_response_norm) for one
// (dtype, direction); see channel_kernel.cuh.
#include "ops/norm/channel_kernel.cuh"

BARACUDA_CHANNEL_NORM_INSTANTIATE(f32, Backward)
