// The integer word that moves N bytes in one access (16: one 128-bit access), shared by the byte
// movers of every family (index copies / gathers, quant's code stores).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace baracuda::kern {

template <int N>
struct Word;
template <>
struct Word<1> {
  using type = uint8_t;
};
template <>
struct Word<2> {
  using type = uint16_t;
};
template <>
struct Word<4> {
  using type = uint32_t;
};
template <>
struct Word<8> {
  using type = unsigned long long;  // an integer: index words are read as one
};
template <>
struct Word<16> {
  using type = uint4;
};

/// 16/8/4/2/1-byte vectors move as one integer of that width: a plain struct copy of
/// VecOf<__nv_bfloat16, 8> goes member by member (the type has user-defined copies) and nvcc
/// then sometimes leaves eight 2-byte accesses (measured on H100: bf16 add/mul at 58% of
/// bandwidth, div at 100%, depending on what the optimiser merged).
/// Not Word above: its 8-byte word is one 64-bit integer (index words are read as one),
/// and with it nvcc packs the 8 bool bytes of a comparison's output vector in 80-100 more SASS
/// instructions a kernel (sm_90a, ew_cmp_Forward_0: 18 of 176 kernels grow 1-25%, same memory
/// instructions) than with uint2 here.
template <int Bytes>
struct RawOf;
template <>
struct RawOf<16> {
  using type = uint4;
};
template <>
struct RawOf<8> {
  using type = uint2;
};
template <>
struct RawOf<4> {
  using type = uint32_t;
};
template <>
struct RawOf<2> {
  using type = uint16_t;
};
template <>
struct RawOf<1> {
  using type = uint8_t;
};

}  // namespace baracuda::kern
