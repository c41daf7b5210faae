// Static side of DType: storage type, compute ("opmath") type, conversions, and the one
// dispatch template that turns a runtime DType into a static type. No other switch on dtype.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cuda/std/complex>
#include <cuda/std/cstdint>
#include <cuda/std/type_traits>

#include "baracuda/core/dtype.hpp"

namespace baracuda::kern {

using c64_t = cuda::std::complex<float>;
using c128_t = cuda::std::complex<double>;

template <DType D> struct StorageOf;
template <> struct StorageOf<DType::f64> { using type = double; };
template <> struct StorageOf<DType::f32> { using type = float; };
template <> struct StorageOf<DType::f16> { using type = __half; };
template <> struct StorageOf<DType::bf16> { using type = __nv_bfloat16; };
template <> struct StorageOf<DType::f8e4m3> { using type = __nv_fp8_e4m3; };
template <> struct StorageOf<DType::f8e5m2> { using type = __nv_fp8_e5m2; };
template <> struct StorageOf<DType::s8> { using type = int8_t; };
template <> struct StorageOf<DType::u8> { using type = uint8_t; };
template <> struct StorageOf<DType::s16> { using type = int16_t; };
template <> struct StorageOf<DType::s32> { using type = int32_t; };
template <> struct StorageOf<DType::s64> { using type = int64_t; };
template <> struct StorageOf<DType::u32> { using type = uint32_t; };
template <> struct StorageOf<DType::b8> { using type = bool; };
template <> struct StorageOf<DType::c64> { using type = c64_t; };
template <> struct StorageOf<DType::c128> { using type = c128_t; };
template <DType D> using storage_t = typename StorageOf<D>::type;

/// Arithmetic type for a storage type: reduced floats compute in f32 (ATen's opmath).
template <class T> struct OpMath { using type = T; };
template <> struct OpMath<__half> { using type = float; };
template <> struct OpMath<__nv_bfloat16> { using type = float; };
template <> struct OpMath<__nv_fp8_e4m3> { using type = float; };
template <> struct OpMath<__nv_fp8_e5m2> { using type = float; };
template <class T> using opmath_t = typename OpMath<T>::type;

template <class T> struct IsComplex : cuda::std::false_type {};
template <class T> struct IsComplex<cuda::std::complex<T>> : cuda::std::true_type {};
template <class T> inline constexpr bool is_complex_v = IsComplex<T>::value;
template <class T> inline constexpr bool is_float_v = cuda::std::is_floating_point_v<T>;
template <class T> inline constexpr bool is_int_v = cuda::std::is_integral_v<T> && !cuda::std::is_same_v<T, bool>;

/// Storage -> opmath.
template <class T>
__device__ __forceinline__ opmath_t<T> load_as_opmath(T v) {
  if constexpr (cuda::std::is_same_v<T, __half>) return __half2float(v);
  else if constexpr (cuda::std::is_same_v<T, __nv_bfloat16>) return __bfloat162float(v);
  else if constexpr (cuda::std::is_same_v<T, __nv_fp8_e4m3> || cuda::std::is_same_v<T, __nv_fp8_e5m2>)
    return static_cast<float>(v);
  else return v;
}

/// Any compute value -> storage type To, with torch's cast rules: complex -> real keeps the real
/// part, anything -> bool is "!= 0", fp8 overflows to NaN (e4m3fn) / Inf (e5m2) unless
/// `saturate`, which clamps to the largest finite value.
template <class To, class From>
__device__ __forceinline__ To convert(From x, bool saturate = false) {
  if constexpr (cuda::std::is_same_v<To, From>) {
    return x;
  } else if constexpr (cuda::std::is_same_v<To, bool>) {
    if constexpr (is_complex_v<From>) return x.real() != 0 || x.imag() != 0;
    else return x != From(0);
  } else if constexpr (is_complex_v<From> && !is_complex_v<To>) {
    return convert<To>(x.real(), saturate);
  } else if constexpr (is_complex_v<To>) {
    using V = typename To::value_type;
    if constexpr (is_complex_v<From>) return To(V(x.real()), V(x.imag()));
    else return To(convert<V>(x), V(0));
  } else if constexpr (cuda::std::is_same_v<To, __half>) {
    // Through f32 even from f64, as torch does (c10::Half(float)): same double rounding.
    return __float2half_rn(static_cast<float>(x));
  } else if constexpr (cuda::std::is_same_v<To, __nv_bfloat16>) {
    return __float2bfloat16_rn(static_cast<float>(x));
  } else if constexpr (cuda::std::is_same_v<To, __nv_fp8_e4m3> || cuda::std::is_same_v<To, __nv_fp8_e5m2>) {
    constexpr __nv_fp8_interpretation_t kind =
        cuda::std::is_same_v<To, __nv_fp8_e4m3> ? __NV_E4M3 : __NV_E5M2;
    To r;
    r.__x = __nv_cvt_float_to_fp8(static_cast<float>(x), saturate ? __NV_SATFINITE : __NV_NOSAT, kind);
    return r;
  } else if constexpr (is_int_v<To> && is_float_v<From>) {
    // torch (CUDA) converts through static_cast; unsigned targets go through int64 so that
    // negative values wrap like torch instead of saturating at 0.
    if constexpr (cuda::std::is_unsigned_v<To>) return static_cast<To>(static_cast<int64_t>(x));
    else return static_cast<To>(x);
  } else {
    return static_cast<To>(x);
  }
}

/// Calls f(Tag<storage type>{}) for a runtime dtype in the compile-time set `Allowed`
/// (only those are instantiated); returns false if `d` is not in it (the caller reports the
/// error with the op's name).
template <class T> struct Tag { using type = T; };
template <DType D, DTypeSet Allowed, class F>
bool dispatch_case(F&& f) {
  if constexpr (!contains(Allowed, D) || D == DType::s4 || D == DType::u4) {
    return false;  // packed storage: no per-element static type
  } else {
    f(Tag<storage_t<D>>{});
    return true;
  }
}
template <DTypeSet Allowed, class F>
bool dispatch(DType d, F&& f) {
  switch (d) {
#define BARACUDA_X(e, n, b, k) \
  case DType::e:               \
    return dispatch_case<DType::e, Allowed>(f);
    BARACUDA_DTYPES(BARACUDA_X)
#undef BARACUDA_X
  }
  return false;
}

}  // namespace baracuda::kern
