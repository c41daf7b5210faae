// The generate engine: outputs computed from the sizes alone. tril_indices / triu_indices write
// the [2, n] coordinates of a triangle, one thread per pair: the geometry (full rows, then a
// trapezoid whose row lengths grow or shrink by one, then full rows) comes from the host
// (tri_indices_geometry), so n is known without a synchronization and a thread only inverts the
// trapezoid's prefix sum for its row.
#include <cstdint>

#include "ops/index/index_kernels.cuh"

namespace baracuda::detail::idx {
namespace {

/// Elements in the first t rows of the trapezoid (row lengths m, m + step, ...).
__device__ __forceinline__ int64_t trapezoid_prefix(int64_t t, int64_t m, int step) {
  return t * m + step * (t * (t - 1) / 2);
}

/// The trapezoid row holding element k (0 <= k < T): the root of t^2 step / 2 + (m - step / 2) t
/// = k in double (as ATen's resolve_root_int), then corrected in exact integers, so a rounded
/// square root never misplaces an element (the correction takes a step or two at most for any
/// triangle that fits in memory).
__device__ __forceinline__ int64_t trapezoid_row(int64_t k, int64_t m, int step, int64_t rows) {
  const double b = 2.0 * static_cast<double>(m) - step;  // tril: 2m - 1; triu: 2m + 1
  const double kd = static_cast<double>(k);
  const double t = step > 0 ? 0.5 * (-b + sqrt(b * b + 8.0 * kd)) : 0.5 * (b - sqrt(fmax(b * b - 8.0 * kd, 0.0)));
  int64_t r = static_cast<int64_t>(floor(t));
  r = r < 0 ? 0 : (r >= rows ? rows - 1 : r);
  while (r > 0 && trapezoid_prefix(r, m, step) > k) --r;
  while (r + 1 < rows && trapezoid_prefix(r + 1, m, step) <= k) ++r;
  return r;
}

template <class OT>
__global__ void __launch_bounds__(256) tri_indices_kernel(const TriIndicesParams p) {
  OT* out = static_cast<OT*>(p.out);
  const int64_t pre = p.pre_rows * p.col;
  for (int64_t k = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; k < p.n; k += int64_t{gridDim.x} * blockDim.x) {
    int64_t r, c;
    if (k < pre) {  // full rows before the trapezoid (triu)
      r = k / p.col;
      c = k - r * p.col;
    } else if (k - pre < p.T) {
      const int64_t kk = k - pre;
      const int64_t t = trapezoid_row(kk, p.m, p.step, p.R);
      r = p.t0 + t;
      c = (p.upper ? r + p.offset : 0) + (kk - trapezoid_prefix(t, p.m, p.step));
    } else {  // full rows after the trapezoid (tril)
      const int64_t kk = k - pre - p.T;
      const int64_t q = kk / p.col;
      r = p.post_start + q;
      c = kk - q * p.col;
    }
    out[k * p.stride1] = static_cast<OT>(r);
    out[p.stride0 + k * p.stride1] = static_cast<OT>(c);
  }
}

}  // namespace

cudaError_t launch_tri_indices(const TriIndicesParams& p, DType dt, cudaStream_t stream) {
  if (p.n <= 0) return cudaSuccess;
  const unsigned blocks = grid_for(p.n, 4, 256);
  if (dt == DType::s32)
    tri_indices_kernel<int32_t><<<blocks, 256, 0, stream>>>(p);
  else if (dt == DType::s64)
    tri_indices_kernel<int64_t><<<blocks, 256, 0, stream>>>(p);
  else
    return cudaErrorInvalidValue;
  return cudaGetLastError();
}

}  // namespace baracuda::detail::idx
