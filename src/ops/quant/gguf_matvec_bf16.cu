// The GGUF decode matvec for bf16 activations: every format x row tier (gguf_kernel.cuh).
#include "ops/quant/gguf_kernel.cuh"

namespace baracuda::detail {
template cudaError_t gguf_matvec_launch<DType::bf16>(const GgufMatvecLaunch& p, cudaStream_t stream);
}  // namespace baracuda::detail
