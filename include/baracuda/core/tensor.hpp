// Non-owning tensor views: pointer, dtype, rank <= 8, int64 shape and element strides.
// Stride 0 broadcasts. Negative strides are representable but refused by every plan's
// can_implement (see docs/design.md, "validation").
#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "baracuda/core/dtype.hpp"
#include "baracuda/core/status.hpp"

namespace baracuda {

inline constexpr int kMaxRank = 8;

/// Shape plus strides (elements). Shared by TensorRef and TensorMut.
struct Layout {
  int rank = 0;
  std::array<int64_t, kMaxRank> shape{};
  std::array<int64_t, kMaxRank> stride{};

  int64_t numel() const;
  bool is_contiguous() const;  // row-major dense (size-1 dims ignored)
  /// Row-major strides for `shape`.
  static Layout contiguous(std::initializer_list<int64_t> shape);
  static Layout contiguous(int rank, const int64_t* shape);
  /// Lowest and one-past-highest element offset reached (0,0 when empty). Negative strides
  /// give a negative lower bound.
  void extent(int64_t* lo, int64_t* hi) const;
  /// Conservative self-overlap test: false guarantees distinct indices map to distinct
  /// elements. Sorts dims by stride and requires each stride to exceed the span of the smaller
  /// ones, so a stride-0 dim of size > 1 counts as overlap and a few exotic non-overlapping
  /// interleavings (e.g. [2,3] with strides (4,3)) are refused too.
  bool has_internal_overlap() const;
  bool has_zero_stride() const;
  std::string shape_str() const;   // "[2, 3]"
  std::string stride_str() const;  // "(3, 1)"
};

/// A problem shape (plans are selected for shapes; tensors come with layouts at run time).
struct Shape {
  int rank = 0;
  std::array<int64_t, kMaxRank> dims{};
  static Shape of(const Layout& l);
  static Shape of(std::initializer_list<int64_t> dims);  ///< > 8 dims gives rank -1 (refused)
  int64_t numel() const;
  bool operator==(const Shape& o) const;
  std::string str() const;
};

struct TensorRef {
  const void* data = nullptr;
  DType dtype = DType::f32;
  Layout layout;

  int rank() const { return layout.rank; }
  int64_t size(int d) const { return layout.shape[d]; }
  int64_t stride(int d) const { return layout.stride[d]; }
  int64_t numel() const { return layout.numel(); }
};

struct TensorMut {
  void* data = nullptr;
  DType dtype = DType::f32;
  Layout layout;

  int rank() const { return layout.rank; }
  int64_t size(int d) const { return layout.shape[d]; }
  int64_t stride(int d) const { return layout.stride[d]; }
  int64_t numel() const { return layout.numel(); }
  operator TensorRef() const { return TensorRef{data, dtype, layout}; }  // NOLINT
};

/// Whether two views of equal element size can touch a common byte. Exact when both have the
/// same shape and strides and neither overlaps itself (e.g. the two halves of a row, which
/// interleave in memory but never collide); conservative (address ranges) otherwise.
bool views_may_overlap(const void* a, const Layout& la, const void* b, const Layout& lb, int elem_bytes);

/// Builds a contiguous view.
TensorRef make_ref(const void* data, DType dt, std::initializer_list<int64_t> shape);
TensorMut make_mut(void* data, DType dt, std::initializer_list<int64_t> shape);

/// Typed view for C++ callers who know element type and rank at compile time. It converts to
/// the runtime views; DTypeOf<T> maps C++ types (float, __half via dtype_traits.hpp...) to DType.
template <class T>
struct DTypeOf;
template <> struct DTypeOf<double> { static constexpr DType value = DType::f64; };
template <> struct DTypeOf<float> { static constexpr DType value = DType::f32; };
template <> struct DTypeOf<int8_t> { static constexpr DType value = DType::s8; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::u8; };
template <> struct DTypeOf<int16_t> { static constexpr DType value = DType::s16; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::s32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::s64; };
template <> struct DTypeOf<uint32_t> { static constexpr DType value = DType::u32; };
template <> struct DTypeOf<bool> { static constexpr DType value = DType::b8; };

template <class T, int N>
struct TypedView {
  T* data = nullptr;
  std::array<int64_t, N> shape{};
  std::array<int64_t, N> stride{};

  operator TensorMut() const {  // NOLINT
    TensorMut t{const_cast<std::remove_const_t<T>*>(data), DTypeOf<std::remove_const_t<T>>::value, {}};
    t.layout.rank = N;
    for (int i = 0; i < N; ++i) { t.layout.shape[i] = shape[i]; t.layout.stride[i] = stride[i]; }
    return t;
  }
  operator TensorRef() const { return static_cast<TensorMut>(*this); }  // NOLINT
};

}  // namespace baracuda
