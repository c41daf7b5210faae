// The CUTLASS int8 GEMM with a per-row x per-column scale (+ bias) epilogue, templated on D's
// dtype; gemm_cutlass_int8_<dtype>.cu instantiate it once each (BARACUDA_CUTLASS_INT8_INSTANTIATE),
// so the three output dtypes compile in parallel. See CutlassInt8Params in gemm_internal.hpp.
//
// Kernel: CUTLASS 3.x GemmUniversal for sm_90a, int8 A [m, k] K-major x int8 B [n, k] K-major
// (TMA loads into a multistage shared-memory pipeline, WGMMA with an int32 accumulator, a
// producer warp group and warp-specialized consumers, persistent tile scheduler), and an epilogue
// visitor tree: D = convert(((float(acc) * a_scale[i]) * b_scale[j]) + bias[j]) stored by TMA.
// a_scale is a column broadcast (one value per row of D), b_scale and bias row broadcasts; the
// scales' broadcast strides are runtime values, so per-tensor ([1]) and per-row/column scales
// share one kernel.
//
// Built without CUTLASS (BARACUDA_HAVE_CUTLASS undefined) every instantiation is a stub whose
// `built` flag is false, and GemmPlan refuses the variant.
#pragma once
#include <cuda_runtime_api.h>

#include "ops/gemm/gemm_internal.hpp"

#if defined(BARACUDA_HAVE_CUTLASS) && BARACUDA_HAVE_CUTLASS

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/gemm.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/numeric_types.h"
#include "ops/gemm/gemm_cutlass_launch.cuh"

namespace baracuda::detail::cutlass_int8 {

/// The epilogue's arithmetic on a fragment of f32 values (Sm90Compute converts the int32
/// accumulator and the broadcast inputs to f32 first). The _rn intrinsics keep nvcc from
/// contracting the multiply and the add into an FMA, so every operation rounds exactly as the
/// reference `acc.float() * a_scale * b_scale + bias` does in separate steps.
template <class T>
struct ScaleRowColBias {};  // ComputeFn<float>: Sm90Compute only looks for an Arguments member in it
template <int N>
struct ScaleRowColBias<cutlass::Array<float, N>> {
  CUTLASS_DEVICE cutlass::Array<float, N> operator()(cutlass::Array<float, N> const& acc,
                                                     cutlass::Array<float, N> const& a_scale,
                                                     cutlass::Array<float, N> const& b_scale,
                                                     cutlass::Array<float, N> const& bias) const {
    cutlass::Array<float, N> r;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) r[i] = __fadd_rn(__fmul_rn(__fmul_rn(acc[i], a_scale[i]), b_scale[i]), bias[i]);
    return r;
  }
};

template <DType D>
struct ElementOf;
template <>
struct ElementOf<DType::bf16> {
  using type = cutlass::bfloat16_t;
};
template <>
struct ElementOf<DType::f16> {
  using type = cutlass::half_t;
};
template <>
struct ElementOf<DType::f32> {
  using type = float;
};

using namespace cute;

/// The GemmUniversal kernel type of one (output element, tile configuration).
template <class ElementD, int Config>
struct KernelOf {
  static constexpr CutlassInt8Tile kTile = kCutlassInt8Tiles[Config];
  using TileShape = cute::Shape<Int<kTile.m>, Int<kTile.n>, Int<kTile.k>>;
  using ClusterShape = cute::Shape<Int<kTile.cluster_m>, Int<kTile.cluster_n>, _1>;
  using MainloopSchedule = cute::conditional_t<kTile.cooperative, cutlass::gemm::KernelTmaWarpSpecializedCooperative,
                                               cutlass::gemm::KernelTmaWarpSpecializedPingpong>;
  using EpilogueSchedule = cute::conditional_t<kTile.cooperative, cutlass::epilogue::TmaWarpSpecializedCooperative,
                                               cutlass::epilogue::TmaWarpSpecialized>;
  static constexpr int kAlignD = 16 / static_cast<int>(sizeof(ElementD));  // TMA: 16-byte rows
  static constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;

  // Children in argument order: acc, a_scale (per row of D, or one value), b_scale (per column, or
  // one value), bias (per column; null = 0).
  using Evt = cutlass::epilogue::fusion::Sm90EVT<
      cutlass::epilogue::fusion::Sm90Compute<ScaleRowColBias, ElementD, float, kRound>,
      cutlass::epilogue::fusion::Sm90AccFetch,
      cutlass::epilogue::fusion::Sm90ColBroadcast<0, TileShape, float, float, Stride<bool, _0, int64_t>>,
      cutlass::epilogue::fusion::Sm90RowBroadcast<0, TileShape, float, float, Stride<_0, bool, int64_t>>,
      cutlass::epilogue::fusion::Sm90RowBroadcast<0, TileShape, ElementD, float, Stride<_0, _1, int64_t>>>;

  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, int32_t, float, void, cutlass::layout::RowMajor, kAlignD,
      ElementD, cutlass::layout::RowMajor, kAlignD, EpilogueSchedule, Evt>::CollectiveOp;

  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, int8_t, cutlass::layout::RowMajor, 16, int8_t,
      cutlass::layout::ColumnMajor, 16, int32_t, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      MainloopSchedule>::CollectiveOp;

  using Gemm = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Mainloop, Epilogue,
                                                    cutlass::gemm::PersistentScheduler>;
};

/// The kernel entry. Its body exists only in the sm_90a compilation: the sm_80 and compute_90
/// (PTX) passes of the same TU compile a trap (GemmPlan never launches it there: it refuses
/// targets other than sm_90, and cmake/cutlass.cmake builds stubs unless 90a is a target): those
/// passes stay cheap, and a stray launch there fails loudly instead of leaving D unwritten.
template <class Gemm>
__global__ void __launch_bounds__(Gemm::MaxThreadsPerBlock, Gemm::MinBlocksPerMultiprocessor)
    int8_scaled_gemm_kernel(CUTLASS_GRID_CONSTANT typename Gemm::Params const params) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ char smem[];
  Gemm op;
  op(params, smem);
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}

template <class K>
typename K::Gemm::Arguments arguments_of(const CutlassInt8Params& p) {
  using Gemm = typename K::Gemm;
  using ElementD = typename Gemm::ElementD;
  typename Gemm::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = {static_cast<int>(p.m), static_cast<int>(p.n), static_cast<int>(p.k), 1};
  args.mainloop.ptr_A = static_cast<const int8_t*>(p.a);
  args.mainloop.dA = make_stride(p.lda, _1{}, int64_t{0});
  args.mainloop.ptr_B = static_cast<const int8_t*>(p.b);
  args.mainloop.dB = make_stride(p.ldb, _1{}, int64_t{0});
  args.epilogue.thread = {{},                                                                                // acc
                          {p.a_scale, 1.0f, {p.a_vector, _0{}, int64_t{0}}},                                 // a_scale
                          {p.b_scale, 1.0f, {_0{}, p.b_vector, int64_t{0}}},                                 // b_scale
                          {static_cast<const ElementD*>(p.bias), ElementD(0.0f), {_0{}, _1{}, int64_t{0}}},  // bias
                          {}};                                                                               // compute
  args.epilogue.ptr_C = nullptr;
  args.epilogue.ptr_D = static_cast<ElementD*>(p.d);
  args.epilogue.dD = make_stride(p.ldd, _1{}, int64_t{0});
  args.hw_info.device_id = p.device;
  args.hw_info.sm_count = p.sm_count;
  args.scheduler.max_swizzle_size = K::kTile.max_swizzle;
  return args;
}

template <class K>
bool implementable(const CutlassInt8Params& p) {
  return K::Gemm::can_implement(arguments_of<K>(p));
}

template <class K>
size_t workspace(const CutlassInt8Params& p) {
  return K::Gemm::get_workspace_size(arguments_of<K>(p));
}

template <class K>
cudaError_t launch(const CutlassInt8Params& p, void* ws, cudaStream_t stream) {
  using Gemm = typename K::Gemm;
  constexpr auto kernel = &int8_scaled_gemm_kernel<Gemm>;
  int clusters = 0;  // not asked: the int8 kernel's grid is CUTLASS's own
  if (const cudaError_t e = cutlass_launch::prepare_once<K, kernel>(p.device, stream, false, &clusters);
      e != cudaSuccess)
    return e;
  auto args = arguments_of<K>(p);
  if (args.hw_info.sm_count <= 0) {
    const cudaError_t e = cudaDeviceGetAttribute(&args.hw_info.sm_count, cudaDevAttrMultiProcessorCount, p.device);
    if (e != cudaSuccess) return e;
  }
  if (Gemm::initialize_workspace(args, ws, stream) != cutlass::Status::kSuccess) return cudaErrorInvalidValue;
  // Builds the TMA descriptors (cuTensorMapEncodeTiled through the runtime's driver entry point).
  const typename Gemm::Params params = Gemm::to_underlying_arguments(args, ws);
  cudaLaunchAttribute attr[1];
  const cudaLaunchConfig_t cfg = cutlass_launch::cluster_config<K>(Gemm::get_grid_shape(params), stream, attr);
  return cudaLaunchKernelEx(&cfg, kernel, params);
}

template <DType D, int Config>
using KernelFor = KernelOf<typename ElementOf<D>::type, Config>;

template <DType D>
bool implementable_any(const CutlassInt8Params& p) {
  return p.config == kCutlassInt8SmallM ? implementable<KernelFor<D, kCutlassInt8SmallM>>(p)
                                        : implementable<KernelFor<D, kCutlassInt8Large>>(p);
}
template <DType D>
size_t workspace_any(const CutlassInt8Params& p) {
  return p.config == kCutlassInt8SmallM ? workspace<KernelFor<D, kCutlassInt8SmallM>>(p)
                                        : workspace<KernelFor<D, kCutlassInt8Large>>(p);
}
template <DType D>
cudaError_t launch_any(const CutlassInt8Params& p, void* ws, cudaStream_t s) {
  return p.config == kCutlassInt8SmallM ? launch<KernelFor<D, kCutlassInt8SmallM>>(p, ws, s)
                                        : launch<KernelFor<D, kCutlassInt8Large>>(p, ws, s);
}

}  // namespace baracuda::detail::cutlass_int8

namespace baracuda::detail {
template <DType D>
CutlassInt8Kernels cutlass_int8_kernels() {
  return {true, &cutlass_int8::implementable_any<D>, &cutlass_int8::workspace_any<D>, &cutlass_int8::launch_any<D>};
}
}  // namespace baracuda::detail

#else  // built without CUTLASS: stubs, refused by GemmPlan::select

namespace baracuda::detail {
template <DType D>
CutlassInt8Kernels cutlass_int8_kernels() {
  return {};
}
}  // namespace baracuda::detail

#endif

#define BARACUDA_CUTLASS_INT8_INSTANTIATE(D) \
  template baracuda::detail::CutlassInt8Kernels baracuda::detail::cutlass_int8_kernels<baracuda::DType::D>();
