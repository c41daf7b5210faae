// The family's CUB calls, alone in their translation unit: the stable radix sort of the sorted
// scatter and the exclusive scan of the select engine's tile counts. CUB's templates are the
// slowest part of the family to compile and need no other kernel here.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

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

cudaError_t scan_temp_bytes(int64_t n, size_t* bytes) {
  *bytes = 0;
  return cub::DeviceScan::ExclusiveSum(nullptr, *bytes, static_cast<const int64_t*>(nullptr),
                                       static_cast<int64_t*>(nullptr), n);
}

cudaError_t exclusive_scan(void* temp, size_t temp_bytes, const int64_t* in, int64_t* out, int64_t n,
                           cudaStream_t stream) {
  return cub::DeviceScan::ExclusiveSum(temp, temp_bytes, in, out, n, stream);
}

}  // namespace baracuda::detail::idx
