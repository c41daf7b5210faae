// Runtime element types. One enum for the whole library; the table below is the only place
// that lists them, so names, sizes and classification derive from it.
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>

namespace baracuda {

// X(enum, name, bits, kind) — kind: F float, C complex, I signed int, U unsigned int, B bool,
// P packed sub-byte integer (storage only).
#define BARACUDA_DTYPES(X)     \
  X(f64, "float64", 64, F)     \
  X(f32, "float32", 32, F)     \
  X(f16, "float16", 16, F)     \
  X(bf16, "bfloat16", 16, F)   \
  X(f8e4m3, "float8_e4m3fn", 8, F) \
  X(f8e5m2, "float8_e5m2", 8, F)   \
  X(s8, "int8", 8, I)          \
  X(u8, "uint8", 8, U)         \
  X(s16, "int16", 16, I)       \
  X(s32, "int32", 32, I)       \
  X(s64, "int64", 64, I)       \
  X(u32, "uint32", 32, U)      \
  X(b8, "bool", 8, B)          \
  X(c64, "complex64", 64, C)   \
  X(c128, "complex128", 128, C) \
  X(s4, "int4", 4, P)          \
  X(u4, "uint4", 4, P)

enum class DType : uint8_t {
#define BARACUDA_X(e, n, b, k) e,
  BARACUDA_DTYPES(BARACUDA_X)
#undef BARACUDA_X
};

inline constexpr int kNumDTypes = 0
#define BARACUDA_X(e, n, b, k) +1
    BARACUDA_DTYPES(BARACUDA_X)
#undef BARACUDA_X
    ;

/// A set of dtypes as a bitmask; op tables declare their supported dtypes with these.
using DTypeSet = uint32_t;
constexpr DTypeSet bit(DType t) { return DTypeSet{1} << static_cast<int>(t); }
constexpr bool contains(DTypeSet s, DType t) { return (s & bit(t)) != 0; }

namespace dtypes {
inline constexpr DTypeSet kFloat = bit(DType::f32) | bit(DType::f64) | bit(DType::f16) | bit(DType::bf16);
inline constexpr DTypeSet kFp8 = bit(DType::f8e4m3) | bit(DType::f8e5m2);
inline constexpr DTypeSet kComplex = bit(DType::c64) | bit(DType::c128);
inline constexpr DTypeSet kSignedInt = bit(DType::s8) | bit(DType::s16) | bit(DType::s32) | bit(DType::s64);
inline constexpr DTypeSet kInt = kSignedInt | bit(DType::u8);
inline constexpr DTypeSet kIntAll = kInt | bit(DType::u32);
inline constexpr DTypeSet kBool = bit(DType::b8);
inline constexpr DTypeSet kNumeric = kFloat | kInt;
inline constexpr DTypeSet kAll = kFloat | kFp8 | kComplex | kIntAll | kBool;  // every unpacked dtype
}  // namespace dtypes

/// The torch-style name ("float32", "bfloat16", ...).
std::string_view name(DType t);
/// Parses a name as printed by name(); also accepts short names ("f32", "bf16", "s8").
std::optional<DType> dtype_from_name(std::string_view s);
/// Storage bits of one element (4 for packed int4).
int size_in_bits(DType t);
/// Storage bytes of one element; packed types report 1 (two elements per byte).
inline int size_in_bytes(DType t) { return size_in_bits(t) >= 8 ? size_in_bits(t) / 8 : 1; }
bool is_floating(DType t);  // includes fp8
bool is_complex(DType t);
bool is_integral(DType t);  // signed/unsigned ints, excluding bool and packed
bool is_packed(DType t);

}  // namespace baracuda
