// The row dims of a row-wise launch (the loss and norm families): a tensor's non-reduced dims,
// coalesced where every operand's strides allow, written innermost first into a launch struct's
// row_ndim, row_size[d] and row_stride[slot][d]. The device side is kernels/common/row_offsets.cuh.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

namespace baracuda::detail {

/// Dims are added outer to inner: a dim merges into the previous (outer) one where every slot in
/// use has strides that line up (outer stride == inner stride x inner size).
template <int N>
struct RowDims {
  struct Dim {
    int64_t size;
    std::array<int64_t, N> stride;
  };
  std::vector<Dim> dims;
  void add(int64_t size, const std::array<int64_t, N>& stride, const std::array<bool, N>& used) {
    if (!dims.empty()) {
      Dim& prev = dims.back();
      bool merge = true;
      for (int k = 0; k < N; ++k)
        if (used[k] && prev.stride[k] != stride[k] * size) merge = false;
      if (merge) {
        prev.size *= size;
        prev.stride = stride;
        return;
      }
    }
    dims.push_back({size, stride});
  }
  template <class L>
  void write(L& p) const {
    p.row_ndim = static_cast<int>(dims.size());
    for (size_t k = 0; k < dims.size(); ++k) {
      const Dim& dm = dims[dims.size() - 1 - k];
      p.row_size[k] = dm.size;
      for (int s = 0; s < N; ++s) p.row_stride[s][k] = dm.stride[s];
    }
  }
};

}  // namespace baracuda::detail
