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

}  // namespace baracuda::kern
