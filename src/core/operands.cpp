// The shared memory checks of can_implement (operands.hpp).
#include "core/operands.hpp"

#include <vector>

#include "core/plan_common.hpp"

namespace baracuda::detail {

Result<void> check_shape(const std::string& label, std::string_view what, const Shape& s) {
  const std::string w(what);
  if (s.rank < 0 || s.rank > kMaxRank)
    return invalid(label + ": " + w + " rank expected 0..8, got " + std::to_string(s.rank));
  bool empty = false;
  for (int i = 0; i < s.rank; ++i) {
    if (s.dims[i] < 0) return invalid(label + ": negative size in " + w + " shape " + s.str());
    empty = empty || s.dims[i] == 0;
  }
  if (empty) return {};
  int64_t n = 1;
  for (int i = 0; i < s.rank; ++i)
    if (__builtin_mul_overflow(n, s.dims[i], &n) || n >= (int64_t{1} << 59))
      return invalid(label + ": " + w + " shape " + s.str() +
                     " expected fewer than 2^59 elements (byte offsets must fit in 64 bits), got more");
  return {};
}

Result<std::pair<uintptr_t, uintptr_t>> byte_range(const std::string& label, const Operand& o) {
  const Layout& l = *o.layout;
  int64_t span = 0;
  for (int d = 0; d < l.rank; ++d) {
    if (l.stride[d] < 0)
      return invalid(label + ": " + o.role + " stride[" + std::to_string(d) + "] expected >= 0, got " +
                     std::to_string(l.stride[d]) + " (negative strides are not supported)");
    if (l.shape[d] == 0) return std::pair<uintptr_t, uintptr_t>{0, 0};
    int64_t t;
    if (__builtin_mul_overflow(l.shape[d] - 1, l.stride[d], &t) || __builtin_add_overflow(span, t, &span))
      return invalid(label + ": " + o.role + " footprint overflows 64 bits (shape " + l.shape_str() + ", strides " +
                     l.stride_str() + ")");
  }
  int64_t bytes;
  if (__builtin_mul_overflow(span + 1, static_cast<int64_t>(size_in_bytes(o.dtype)), &bytes))
    return invalid(label + ": " + o.role + " footprint overflows 64 bits");
  const auto lo = reinterpret_cast<uintptr_t>(o.data);
  return std::pair<uintptr_t, uintptr_t>{lo, lo + static_cast<uintptr_t>(bytes)};
}

bool same_view(const Operand& a, const Operand& b) {
  if (a.data != b.data || a.dtype != b.dtype || a.layout->rank != b.layout->rank) return false;
  for (int d = 0; d < a.layout->rank; ++d) {
    if (a.layout->shape[d] != b.layout->shape[d]) return false;
    if (a.layout->shape[d] != 1 && a.layout->stride[d] != b.layout->stride[d]) return false;
  }
  return true;
}

Result<void> check_operands(const std::string& label, std::span<const Operand> ops) {
  std::vector<std::pair<uintptr_t, uintptr_t>> range(ops.size());
  for (size_t k = 0; k < ops.size(); ++k) {
    const Operand& o = ops[k];
    auto r = byte_range(label, o);
    if (!r) return r.error();
    range[k] = *r;
    if (o.layout->numel() > 0 && o.data == nullptr)
      return invalid(label + ": " + o.role + " is null but has " + std::to_string(o.layout->numel()) + " elements");
    if (o.is_output && (o.layout->has_zero_stride() || o.layout->has_internal_overlap()))
      return invalid(label + ": " + o.role + " overlaps itself (shape " + o.layout->shape_str() + ", strides " +
                     o.layout->stride_str() + "); outputs need distinct elements");
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    if (!ops[i].is_output || range[i].first == range[i].second) continue;
    for (size_t j = 0; j < ops.size(); ++j) {
      if (i == j || range[j].first == range[j].second) continue;
      if (!(range[i].first < range[j].second && range[j].first < range[i].second)) continue;
      // Interleaved but disjoint views (the two halves of a row) share no element.
      const int eb = size_in_bytes(ops[i].dtype);
      if (ops[i].dtype == ops[j].dtype && eb > 0 && ops[i].data != ops[j].data &&
          !views_may_overlap(ops[i].data, *ops[i].layout, ops[j].data, *ops[j].layout, eb))
        continue;
      if (!ops[j].is_output && ops[i].aligned && ops[j].aligned && same_view(ops[i], ops[j])) continue;  // in place
      return invalid(label + ": " + ops[i].role + " overlaps " + ops[j].role +
                     (ops[i].aligned && ops[j].aligned ? " (a partial overlap: only exact in-place is allowed)"
                                                       : " (outputs need their own memory)"));
    }
  }
  return {};
}

}  // namespace baracuda::detail
