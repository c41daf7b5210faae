// The GGUF dequantizer (every format x float32 / float16 / bfloat16 output) and the matvec's
// split-K reduction (every activation dtype); kernels in gguf_kernel.cuh.
#include "ops/quant/gguf_kernel.cuh"

namespace baracuda::kern::gguf {
namespace {

template <class F, class O>
cudaError_t dequant(const detail::GgufDequantLaunch& p, cudaStream_t stream) {
  constexpr GgufShape S = F::kShape;
  constexpr size_t kSmem = static_cast<size_t>(detail::kGgufWarps) *
                           (2 * detail::gguf_stage_bytes(S) + detail::gguf_step_blocks(S) * kTileBlock<F, sizeof(O)>);
  constexpr auto kKernel = &gguf_dequant_kernel<F, O>;
  if (cudaError_t e = allow_smem<kKernel>(kSmem); e != cudaSuccess) return e;
  kKernel<<<static_cast<unsigned>(p.grid), detail::kGgufThreads, kSmem, stream>>>(p);
  return cudaGetLastError();
}

template <class T>
cudaError_t reduce(const detail::GgufMatvecLaunch& p, cudaStream_t stream) {
  const int64_t count = p.m * p.n;
  const int threads = 256;
  gguf_matvec_reduce_kernel<T><<<static_cast<unsigned>((count + threads - 1) / threads), threads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace
}  // namespace baracuda::kern::gguf

namespace baracuda::detail {

cudaError_t gguf_dequant_launch(const GgufDequantLaunch& p, cudaStream_t stream) {
  if (p.blocks <= 0) return cudaSuccess;
  return kern::gguf::with_format(p.format, [&](auto f) -> cudaError_t {
    using F = decltype(f);
    switch (p.out_dtype) {
      case DType::f32:
        return kern::gguf::dequant<F, float>(p, stream);
      case DType::f16:
        return kern::gguf::dequant<F, __half>(p, stream);
      case DType::bf16:
        return kern::gguf::dequant<F, __nv_bfloat16>(p, stream);
      default:
        return cudaErrorInvalidValue;
    }
  });
}

cudaError_t gguf_matvec_reduce_launch(const GgufMatvecLaunch& p, cudaStream_t stream) {
  if (p.m <= 0 || p.n <= 0) return cudaSuccess;
  switch (p.dtype) {
    case DType::f32:
      return kern::gguf::reduce<float>(p, stream);
    case DType::f16:
      return kern::gguf::reduce<__half>(p, stream);
    case DType::bf16:
      return kern::gguf::reduce<__nv_bfloat16>(p, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace baracuda::detail
