// The stable radix sort of the sorted scatter (CUB), alone in its translation unit: CUB's
// templates are the slowest part of the family to compile and need no other kernel here.
#include <cub/device/device_radix_sort.cuh>

#include "ops/index/index_launch.hpp"

namespace baracuda::detail::idx {

cudaError_t sort_temp_bytes(int64_t n, int end_bit, size_t* bytes) {
  cub::DoubleBuffer<int64_t> k(nullptr, nullptr), v(nullptr, nullptr);
  *bytes = 0;
  return cub::DeviceRadixSort::SortPairs(nullptr, *bytes, k, v, n, 0, end_bit);
}

cudaError_t sort_pairs(void* temp, size_t temp_bytes, int64_t* k0, int64_t* k1, int64_t* v0, int64_t* v1, int64_t n,
                       int end_bit, int* which, cudaStream_t stream) {
  cub::DoubleBuffer<int64_t> k(k0, k1), v(v0, v1);
  const cudaError_t e = cub::DeviceRadixSort::SortPairs(temp, temp_bytes, k, v, n, 0, end_bit, stream);
  *which = k.selector;  // decided on the host from the number of passes: no synchronization
  return e;
}

}  // namespace baracuda::detail::idx
