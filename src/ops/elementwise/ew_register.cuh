// Turns rows of elementwise_ops.def into registry entries: for each op of one group and each
// dtype its row declares, instantiates the engine with the op's functor. Included by the small
// per-group translation units, so the build parallelises across groups.
#pragma once
#include <cuda/std/tuple>
#include <utility>
#include <vector>

#include "kernels/common/elementwise.cuh"
#include "ops/elementwise/ew_registry.hpp"
#include "ops/elementwise/functors.cuh"

namespace baracuda::detail {

using kern::convert;
using kern::load_as_opmath;
using kern::opmath_t;
using kern::storage_t;

enum class EwGroup { math, act, bin, cmp, tern, cast, gen };

template <class T, uint32_t BoolIn, int NIN>
struct InsOf {
  template <size_t... I>
  static auto make(std::index_sequence<I...>)
      -> cuda::std::tuple<std::conditional_t<((BoolIn >> I) & 1) != 0, bool, T>...>;
  using type = decltype(make(std::make_index_sequence<NIN>{}));
};

/// Forward adaptor: storage -> opmath, the op's math, opmath -> output storage.
template <class Op, class T, class OutT, uint32_t BoolIn, int NIN, OutRule OUT>
struct EwFwd {
  using M = opmath_t<T>;
  using ins = typename InsOf<T, BoolIn, NIN>::type;
  using out_t = OutT;
  static constexpr int nout = 1;
  static constexpr bool short16 = kern::ew_ops::kHasShort16<Op> && kern::ew_ops::kShortMath<M, T>;
  static constexpr bool indexed = NIN == 0 || kern::ew_ops::kIndexedOp<Op>;
  static constexpr int min_ctas = sizeof(T) == 2 ? kern::ew_ops::min_ctas_of<Op>().rank_general16 : 0;
  static constexpr int min_ctas_contig = cuda::std::is_same_v<T, float> ? kern::ew_ops::min_ctas_of<Op>().contig_f32 : 0;
  static constexpr bool row_bcast = NIN == 2 && kern::ew_ops::kRowBcastOp<Op>;
  EwParams p;
  __device__ __forceinline__ void operator()(int64_t idx, const ins& in, out_t (&out)[1]) const {
    if constexpr (NIN == 0) {
      out[0] = convert<OutT>(Op::template gen<M, T>(p, idx));
    } else if constexpr (kern::ew_ops::kIndexedOp<Op>) {
      auto r = cuda::std::apply([&](auto... x) { return Op::template fw<M, T>(p, load_as_opmath(x)..., idx); }, in);
      out[0] = convert<OutT>(r);
    } else {
      auto r = cuda::std::apply([&](auto... x) { return Op::template fw<M, T>(p, load_as_opmath(x)...); }, in);
      if constexpr (OUT == OutRule::Cast) out[0] = convert<OutT>(r, p.d[0] != 0);
      else out[0] = convert<OutT>(r);
    }
  }
};

/// Backward adaptor: inputs are (dy, [forward inputs], [forward output]); outputs the grads.
template <class Op, class T, uint32_t BoolIn, int NIN, BackwardNeeds NEEDS, uint32_t GradMask>
struct EwBwd {
  using M = opmath_t<T>;
  static constexpr bool kIn = NEEDS == BackwardNeeds::Inputs || NEEDS == BackwardNeeds::InputsAndOutput;
  static constexpr bool kOut = NEEDS == BackwardNeeds::Output || NEEDS == BackwardNeeds::InputsAndOutput;
  using ins = decltype(cuda::std::tuple_cat(
      std::declval<cuda::std::tuple<T>>(),
      std::declval<std::conditional_t<kIn, typename InsOf<T, BoolIn, NIN>::type, cuda::std::tuple<>>>(),
      std::declval<std::conditional_t<kOut, cuda::std::tuple<T>, cuda::std::tuple<>>>()));
  using out_t = T;
  static constexpr int nout = __builtin_popcount(GradMask);
  static constexpr bool short16 = kern::ew_ops::kHasShort16Bw<Op> && kern::ew_ops::kShortMath<M, T>;
  static constexpr bool indexed = kern::ew_ops::kIndexedOp<Op>;
  EwParams p;
  __device__ __forceinline__ void operator()([[maybe_unused]] int64_t idx, const ins& in, out_t (&out)[nout]) const {
    M g[3];
    if constexpr (indexed)
      cuda::std::apply([&](auto... x) { Op::template bw<M, T>(p, load_as_opmath(x)..., g, idx); }, in);
    else
      cuda::std::apply([&](auto... x) { Op::template bw<M, T>(p, load_as_opmath(x)..., g); }, in);
#pragma unroll
    for (int k = 0; k < nout; ++k) out[k] = convert<T>(g[k]);
  }
};

template <class F>
cudaError_t ew_launch_fn(const EwIter& it, const EwParams& p, bool allow_vec, cudaStream_t s) {
  return kern::ew_launch(F{p}, it, allow_vec, s);
}

template <class F>
EwEntry ew_entry(ElementwiseOp op, Direction dir, DType in, DType out) {
  return EwEntry{op, dir, in, out, &ew_launch_fn<F>, kern::vec_width<F>(), F::short16, F::indexed, kern::ew_row_bcast<F>()};
}

template <DTypeSet S, class F>
void for_each_dtype(F&& f) {
  [&]<size_t... I>(std::index_sequence<I...>) {
    (
        [&] {
          constexpr DType D = static_cast<DType>(I);
          if constexpr (contains(S, D) && D != DType::s4 && D != DType::u4)
            f(std::integral_constant<DType, D>{});
        }(),
        ...);
  }(std::make_index_sequence<kNumDTypes>{});
}

/// Registers one op's kernels for the dtypes its row declares. Only the (op, dtype) pairs whose
/// index falls in this translation unit's part are instantiated, so a big group splits into
/// several TUs that compile in parallel.
template <class Op, ElementwiseOp OP, int NIN, uint32_t BoolIn, OutRule OUT, BackwardNeeds BW, uint32_t GM,
          DTypeSet FW, DTypeSet BWS, Direction DIR, int PART, int NPARTS>
void ew_register_op(std::vector<EwEntry>& v) {
  constexpr int kOpIndex = static_cast<int>(OP);
  if constexpr (DIR == Direction::Forward) {
    for_each_dtype<FW>([&](auto din) {
      constexpr DType D = decltype(din)::value;
      using T = storage_t<D>;
      if constexpr (OUT == OutRule::Cast) {
        for_each_dtype<dtypes::kAll>([&](auto dout) {
          constexpr DType E = decltype(dout)::value;
          if constexpr ((static_cast<int>(D) * kNumDTypes + static_cast<int>(E)) % NPARTS == PART)
            v.push_back(ew_entry<EwFwd<Op, T, storage_t<E>, BoolIn, NIN, OUT>>(OP, DIR, D, E));
        });
      } else if constexpr ((kOpIndex * kNumDTypes + static_cast<int>(D)) % NPARTS == PART) {
        constexpr DType E = OUT == OutRule::Bool ? DType::b8 : D;
        v.push_back(ew_entry<EwFwd<Op, T, storage_t<E>, BoolIn, NIN, OUT>>(OP, DIR, D, E));
      }
    });
  } else if constexpr (BW != BackwardNeeds::None) {
    for_each_dtype<BWS>([&](auto din) {
      constexpr DType D = decltype(din)::value;
      if constexpr ((kOpIndex * kNumDTypes + static_cast<int>(D)) % NPARTS == PART)
        v.push_back(ew_entry<EwBwd<Op, storage_t<D>, BoolIn, NIN, BW, GM>>(OP, DIR, D, D));
    });
  }
}

template <EwGroup G, Direction DIR, int PART, int NPARTS>
void ew_register_group(std::vector<EwEntry>& v) {
#include "ops/elementwise/ew_def_begin.inc"
#define BARACUDA_EW(name, group, nin, boolin, params, fw, out, bw, bwd, gmask, tol)                     \
  if constexpr (EwGroup::group == G)                                                                    \
    ew_register_op<kern::ew_ops::op_##name, ElementwiseOp::name, nin, boolin, out, bw, gmask, DTypeSet(fw),  \
                   DTypeSet(bwd), DIR, PART, NPARTS>(v);
#include "baracuda/ops/elementwise_ops.def"
#undef BARACUDA_EW
#include "ops/elementwise/ew_def_end.inc"
}

}  // namespace baracuda::detail

/// One generated translation unit (see CMakeLists.txt, BARACUDA_EW_TUS): registers part PART
/// of NPARTS of a group's kernels into the pending list at library load.
#define BARACUDA_EW_TU(g, DIR, PART, NPARTS)                                                     \
  namespace baracuda::detail {                                                                   \
  namespace {                                                                                    \
  [[maybe_unused]] const bool ew_registered_##g##_##DIR##_##PART = [] {                          \
    ew_register_group<EwGroup::g, Direction::DIR, PART, NPARTS>(ew_pending());                   \
    return true;                                                                                 \
  }();                                                                                           \
  }                                                                                              \
  }
