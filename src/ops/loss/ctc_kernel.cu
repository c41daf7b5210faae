// CTC loss kernels for every dtype of the ctc_loss row (f32, f64, f16, bf16): one translation unit
// (three small kernels and three recursion widths per dtype); see ctc_kernel.cuh.
#include "ops/loss/ctc_kernel.cuh"

namespace baracuda::detail {

template <DType D>
cudaError_t ctc_run(const CtcLaunch& p, cudaStream_t stream) {
  return kern::ctc::ctc_run_impl<kern::storage_t<D>>(p, stream);
}

template cudaError_t ctc_run<DType::f32>(const CtcLaunch&, cudaStream_t);
template cudaError_t ctc_run<DType::f64>(const CtcLaunch&, cudaStream_t);
template cudaError_t ctc_run<DType::f16>(const CtcLaunch&, cudaStream_t);
template cudaError_t ctc_run<DType::bf16>(const CtcLaunch&, cudaStream_t);

}  // namespace baracuda::detail
