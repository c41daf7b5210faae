// The memory checks every family's can_implement runs on the tensors of a call: each tensor's
// real footprint (shape x strides, 64-bit, no negative strides), null data with elements,
// outputs that overlap themselves, and outputs that partially overlap another tensor. One
// implementation, so a refusal reads the same in every family ("<op>: <role> ... expected ...,
// got ...").
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "baracuda/core/status.hpp"
#include "baracuda/core/tensor.hpp"

namespace baracuda::detail {

/// One tensor of a call as the checks see it.
struct Operand {
  std::string role;  ///< its name in messages: "x", "out", "in[1]", ...
  const void* data = nullptr;
  DType dtype = DType::f32;
  const Layout* layout = nullptr;
  bool is_output = false;
  /// Elementwise-aligned with the op's main shape: an output may be exactly this tensor (same
  /// pointer, dtype, shape and strides: in place). Outputs and inputs that are not aligned (a
  /// reduced statistic, a parameter) must not share memory at all.
  bool aligned = true;
};

/// Whether an optional tensor was given (data, or a shape: an empty tensor counts as given).
inline bool given(const TensorRef& t) { return t.data != nullptr || t.layout.rank != 0; }
inline bool given(const TensorMut& t) { return t.data != nullptr || t.layout.rank != 0; }

/// [lo, hi) bytes the tensor can touch ({0, 0} when it has no elements). Refuses negative
/// strides and footprints that overflow 64 bits, naming `label` and the operand.
Result<std::pair<uintptr_t, uintptr_t>> byte_range(const std::string& label, const Operand& o);

/// The problem-shape check of every family's select(): rank 0..8, no negative size, and fewer
/// than 2^59 elements (a byte offset of any dtype then fits in 63 bits; a count past int64 would
/// wrap numel() and make a huge problem look small or empty). Names `label` and `what`
/// ("input", "targets", ...).
Result<void> check_shape(const std::string& label, std::string_view what, const Shape& s);

/// Same pointer, dtype, shape, and strides wherever the extent is > 1.
bool same_view(const Operand& a, const Operand& b);

/// Every check of the header comment over `ops`: footprints, null data with elements, outputs
/// overlapping themselves (stride 0 or internal overlap), and any output that shares memory with
/// another operand, except (a) views whose address ranges interleave without sharing an element
/// (two halves of a row) and (b) exact in place with an aligned input.
Result<void> check_operands(const std::string& label, std::span<const Operand> ops);

}  // namespace baracuda::detail
