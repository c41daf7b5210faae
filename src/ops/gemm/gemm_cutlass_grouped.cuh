// The CUTLASS grouped GEMM of the mixture-of-experts layer, templated on the dtype;
// gemm_cutlass_grouped_<dtype>.cu instantiate it once each (BARACUDA_CUTLASS_GROUPED_INSTANTIATE), so
// f16 and bf16 compile in parallel. See CutlassGroupedParams in gemm_internal.hpp.
//
// Kernel: CUTLASS 3.x GemmUniversal for sm_90a with a GroupProblemShape whose per-group shapes live
// only on the device (host_problem_shapes = nullptr): A [m_g, k] K-major x W[g] [n, k] K-major ->
// D [m_g, n] row-major, f16/bf16 in, f32 accumulation, D = convert(1 * acc) (no C). The persistent
// group tile scheduler walks the groups' tiles from the device shapes (a group of 0 rows has no
// tile); the producer warp rewrites its CTA's TMA descriptors (in the workspace, one set per SM)
// whenever the group changes, so every group's row count bounds its loads and stores exactly.
// grouped.cpp fills the arrays (shapes, pointers, strides) with a small kernel first.
//
// Built without CUTLASS (BARACUDA_HAVE_CUTLASS undefined) every instantiation is a stub whose
// `built` flag is false, and GroupedGemmPlan falls back to the native kernel.
#pragma once
#include <cuda_runtime_api.h>

#include "ops/gemm/gemm_internal.hpp"

#if defined(BARACUDA_HAVE_CUTLASS) && BARACUDA_HAVE_CUTLASS

#include <cstdint>
#include <type_traits>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/gemm.h"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/numeric_types.h"
#include "ops/gemm/gemm_cutlass_launch.cuh"

namespace baracuda::detail::cutlass_grouped {

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

using namespace cute;

/// The GemmUniversal kernel type of one (element, tile configuration).
template <class Element, int Config>
struct KernelOf {
  static constexpr CutlassGroupedTile kTile = kCutlassGroupedTiles[Config];
  using TileShape = cute::Shape<Int<kTile.m>, Int<kTile.n>, Int<kTile.k>>;
  using ClusterShape = cute::Shape<Int<kTile.cluster_m>, Int<kTile.cluster_n>, _1>;
  using ProblemShape = cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>;  // (m_g, n, k) per group
  using MainloopSchedule =
      cute::conditional_t<kTile.cooperative, cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative,
                          cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong>;
  using EpilogueSchedule =
      cute::conditional_t<kTile.cooperative, cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative,
                          cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong>;
  static constexpr int kAlign = 16 / static_cast<int>(sizeof(Element));  // TMA: 16-byte rows
  static constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;

  // No C (void): beta must stay 0, the epilogue never loads a source. alpha = 1 multiplies exactly,
  // so D = round_to_nearest(acc), the same rounding as the native kernel's convert.
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, cutlass::layout::RowMajor*, kAlign, Element,
      cutlass::layout::RowMajor*, kAlign, EpilogueSchedule,
      cutlass::epilogue::fusion::LinearCombination<Element, float, void, float, kRound>>::CollectiveOp;

  // The pointer layouts (RowMajor*, ColumnMajor*) select the grouped variant: one stride per group.
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, cutlass::layout::RowMajor*, kAlign, Element,
      cutlass::layout::ColumnMajor*, kAlign, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      MainloopSchedule>::CollectiveOp;

  using Gemm = cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>;

  // The preparation kernel (gemm_kernels.cu) writes these arrays as plain int32 triples and int64
  // row strides: hold CUTLASS's types to exactly those layouts.
  using UnderlyingShape = typename ProblemShape::UnderlyingProblemShape;
  static_assert(std::is_same_v<UnderlyingShape, cute::Shape<int, int, int>> && sizeof(UnderlyingShape) == 3 * sizeof(int32_t),
                "problem shapes: three int32 (m, n, k) per group");
  static_assert(std::is_same_v<typename Gemm::InternalStrideA, Stride<int64_t, _1, _0>> &&
                    std::is_same_v<typename Gemm::InternalStrideB, Stride<int64_t, _1, _0>> &&
                    std::is_same_v<typename Gemm::InternalStrideD, Stride<int64_t, _1, _0>>,
                "A, W and D strides: one int64 row stride per group (unit column stride, no batch)");
  static_assert(sizeof(typename Gemm::InternalStrideA) == sizeof(int64_t), "stride arrays of int64");
};

/// The kernel entry. Its body exists only in the sm_90a compilation: the sm_80 and compute_90
/// (PTX) passes of the same TU compile a trap (GroupedGemmPlan never launches it there: it refuses
/// targets other than sm_90, and cmake/cutlass.cmake builds stubs unless 90a is a target): those
/// passes stay cheap, and a stray launch there fails loudly instead of leaving D unwritten.
template <class Gemm>
__global__ void __launch_bounds__(Gemm::MaxThreadsPerBlock, Gemm::MinBlocksPerMultiprocessor)
    grouped_gemm_kernel(CUTLASS_GRID_CONSTANT typename Gemm::Params const params) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ char smem[];
  Gemm op;
  op(params, smem);
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}

template <class K>
typename K::Gemm::Arguments arguments_of(const CutlassGroupedParams& p) {
  using Gemm = typename K::Gemm;
  using Element = typename Gemm::ElementA;
  typename Gemm::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
  args.problem_shape = {p.groups, reinterpret_cast<typename K::UnderlyingShape*>(p.arrays.shapes), nullptr};
  args.mainloop.ptr_A = reinterpret_cast<const Element**>(p.arrays.ptr_a);
  args.mainloop.dA = reinterpret_cast<typename Gemm::InternalStrideA*>(p.arrays.stride_a);
  args.mainloop.ptr_B = reinterpret_cast<const Element**>(p.arrays.ptr_w);
  args.mainloop.dB = reinterpret_cast<typename Gemm::InternalStrideB*>(p.arrays.stride_w);
  args.epilogue.thread.alpha = 1.0f;
  args.epilogue.thread.beta = 0.0f;
  args.epilogue.ptr_C = nullptr;
  args.epilogue.dC = nullptr;
  args.epilogue.ptr_D = reinterpret_cast<typename Gemm::ElementD**>(p.arrays.ptr_d);
  args.epilogue.dD = reinterpret_cast<typename Gemm::InternalStrideD*>(p.arrays.stride_d);
  args.hw_info.device_id = p.device;
  args.hw_info.sm_count = p.sm_count;
  return args;
}

template <class K>
bool implementable(const CutlassGroupedParams& p) {
  return K::Gemm::can_implement(arguments_of<K>(p));
}

template <class K>
size_t workspace(const CutlassGroupedParams& p) {
  return K::Gemm::get_workspace_size(arguments_of<K>(p));
}

template <class K>
cudaError_t launch(const CutlassGroupedParams& p, void* ws, cudaStream_t stream) {
  using Gemm = typename K::Gemm;
  constexpr auto kernel = &grouped_gemm_kernel<Gemm>;
  constexpr int kClusterSize = K::kTile.cluster_m * K::kTile.cluster_n;
  int clusters = 0;
  if (const cudaError_t e = cutlass_launch::prepare_once<K, kernel>(p.device, stream, true, &clusters);
      e != cudaSuccess)
    return e;
  auto args = arguments_of<K>(p);
  if (clusters > 0 && clusters * kClusterSize <= args.hw_info.sm_count) args.hw_info.max_active_clusters = clusters;
  if (Gemm::initialize_workspace(args, ws, stream) != cutlass::Status::kSuccess) return cudaErrorInvalidValue;
  // Builds placeholder TMA descriptors (cuTensorMapEncodeTiled through the runtime's driver entry
  // point) that the kernel patches per group.
  const typename Gemm::Params params = Gemm::to_underlying_arguments(args, ws);
  cudaLaunchAttribute attr[1];
  const cudaLaunchConfig_t cfg = cutlass_launch::cluster_config<K>(Gemm::get_grid_shape(params), stream, attr);
  return cudaLaunchKernelEx(&cfg, kernel, params);
}

template <DType D, int Config>
using KernelFor = KernelOf<typename ElementOf<D>::type, Config>;

template <DType D>
bool implementable_any(const CutlassGroupedParams& p) {
  return p.config == kCutlassGroupedSmall ? implementable<KernelFor<D, kCutlassGroupedSmall>>(p)
                                          : implementable<KernelFor<D, kCutlassGroupedLarge>>(p);
}
template <DType D>
size_t workspace_any(const CutlassGroupedParams& p) {
  return p.config == kCutlassGroupedSmall ? workspace<KernelFor<D, kCutlassGroupedSmall>>(p)
                                          : workspace<KernelFor<D, kCutlassGroupedLarge>>(p);
}
template <DType D>
cudaError_t launch_any(const CutlassGroupedParams& p, void* ws, cudaStream_t s) {
  return p.config == kCutlassGroupedSmall ? launch<KernelFor<D, kCutlassGroupedSmall>>(p, ws, s)
                                          : launch<KernelFor<D, kCutlassGroupedLarge>>(p, ws, s);
}

}  // namespace baracuda::detail::cutlass_grouped

namespace baracuda::detail {
template <DType D>
CutlassGroupedKernels cutlass_grouped_kernels() {
  return {true, &cutlass_grouped::implementable_any<D>, &cutlass_grouped::workspace_any<D>,
          &cutlass_grouped::launch_any<D>};
}
}  // namespace baracuda::detail

#else  // built without CUTLASS: stubs, GroupedGemmPlan takes the native kernel

namespace baracuda::detail {
template <DType D>
CutlassGroupedKernels cutlass_grouped_kernels() {
  return {};
}
}  // namespace baracuda::detail

#endif

#define BARACUDA_CUTLASS_GROUPED_INSTANTIATE(D) \
  template baracuda::detail::CutlassGroupedKernels baracuda::detail::cutlass_grouped_kernels<baracuda::DType::D>();
