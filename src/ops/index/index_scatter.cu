// The scatter engine's atomic path: output slice index[l] op= source slice l (scatter_add,
// index_add, segment_sum with atomicAdd; max / min with a peek and, when the destination does
// not already win, an atomic max / min, whose result does not depend on the order). One kernel
// per dtype x index dtype x reduction, per element or by rows (row mode: lane groups walk
// consecutive slices and combine runs of equal indices). The kernels live in
// index_scatter.cuh; prod and min are instantiated by index_scatter_reduce.cu.
#include <cstring>
#include <limits>

#include "ops/index/index_scatter.cuh"

namespace baracuda::detail::idx {
bool scatter_rows_ok(const Geom& g) { return g.ri == 1 && g.rs == 1 && g.ssize[0] >= 8; }

bool scatter_vec_rows_ok(const Geom& g, const void* out, const void* src, int elem_bytes, Reduce r) {
  const int64_t v = 16 / elem_bytes;
  return (r == Reduce::sum || scat::is_extremum(r)) && scatter_rows_ok(g) && g.ssize[0] % v == 0 &&
         vec_rows_ok(src, g.a_istride[0], g.a_sstride[0], v) && vec_rows_ok(out, g.kstride, g.b_sstride[0], v);
}

bool atomic_reduce_ok(DType dt, Reduce r) { return r != Reduce::mean && contains(scat::kAtomicDTypes, dt); }

cudaError_t launch_scatter_atomic(const Geom& g, void* out, const void* src, DType dt, DType index_dtype, Reduce r,
                                  cudaStream_t stream) {
  if (g.L * g.P == 0) return cudaSuccess;
  if (!atomic_reduce_ok(dt, r)) return cudaErrorInvalidValue;
  switch (r) {
    case Reduce::sum:
      return scat::scatter_dispatch<Reduce::sum>(g, out, src, dt, index_dtype, stream);
    case Reduce::max:
      return scat::scatter_dispatch<Reduce::max>(g, out, src, dt, index_dtype, stream);
    default:
      return scat::scatter_atomic_ext(g, out, src, dt, index_dtype, r, stream);
  }
}

void reduce_identity_bits(DType dt, Reduce r, unsigned char out[16]) {
  std::memset(out, 0, 16);
  auto put = [&](auto v) { std::memcpy(out, &v, sizeof(v)); };
  switch (r) {
    case Reduce::sum:
    case Reduce::mean:
      return;
    case Reduce::prod:
      fill_bits(dt, 1.0, out);
      return;
    default:
      break;
  }
  const bool mx = r == Reduce::max;
  if (is_floating(dt)) {
    fill_bits(dt, mx ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity(), out);
    return;
  }
  auto extreme = [&](auto lim) { put(mx ? decltype(lim)::min() : decltype(lim)::max()); };
  switch (dt) {
    case DType::s8:
      extreme(std::numeric_limits<int8_t>{});
      break;
    case DType::u8:
      extreme(std::numeric_limits<uint8_t>{});
      break;
    case DType::s16:
      extreme(std::numeric_limits<int16_t>{});
      break;
    case DType::s32:
      extreme(std::numeric_limits<int32_t>{});
      break;
    case DType::s64:
      extreme(std::numeric_limits<int64_t>{});
      break;
    default:
      break;
  }
}

}  // namespace baracuda::detail::idx
