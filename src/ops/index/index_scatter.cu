// The scatter engine's atomic path: output slice index[l] op= source slice l (scatter_add,
// index_add, segment_sum with atomicAdd; segment_max/min with atomic max/min, whose result does
// not depend on the order). One kernel per dtype x index dtype x reduction, per element or by
// rows (row mode: lane groups walk consecutive slices and combine runs of equal indices). The
// kernels live in index_scatter.cuh; prod and the plain-storage max / min are instantiated by
// index_scatter_reduce.cu.
#include <cstring>
#include <limits>

#include "ops/index/index_scatter.cuh"

namespace baracuda::detail::idx {
namespace {

/// Decodes the ordered encoding of f32 / f64 max / min (every element of B: ksize x P).
template <class U>
__global__ void __launch_bounds__(256) unorder_kernel(const Geom g, U* out) {
  const int64_t P = g.P, total = g.ksize * g.P;
  for (int64_t t = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; t < total; t += int64_t{gridDim.x} * blockDim.x) {
    const int64_t k = t / P, p = t - k * P;
    int64_t ea, eb;
    element_offsets<int64_t>(g, p, &ea, &eb);
    U* e = out + k * g.kstride + eb;
    *e = scat::unordered_bits(*e);
  }
}

bool is_f32_f64(DType dt) { return dt == DType::f32 || dt == DType::f64; }

}  // namespace

bool scatter_rows_ok(const Geom& g) { return g.ri == 1 && g.rs == 1 && g.ssize[0] >= 8; }

bool atomic_reduce_ok(DType dt, Reduce r) { return r != Reduce::mean && contains(scat::kAtomicDTypes, dt); }

cudaError_t launch_scatter_atomic(const Geom& g, void* out, const void* src, DType dt, DType index_dtype, Reduce r,
                                  cudaStream_t stream) {
  if (g.L * g.P == 0) return cudaSuccess;
  if (!atomic_reduce_ok(dt, r)) return cudaErrorInvalidValue;
  // Plain-storage max / min differ from the encoded ones only for f32 / f64.
  if (r == Reduce::max_raw && !is_f32_f64(dt)) r = Reduce::max;
  if (r == Reduce::min_raw && !is_f32_f64(dt)) r = Reduce::min;
  switch (r) {
    case Reduce::sum:
      return scat::scatter_dispatch<Reduce::sum>(g, out, src, dt, index_dtype, stream);
    case Reduce::max:
      return scat::scatter_dispatch<Reduce::max>(g, out, src, dt, index_dtype, stream);
    case Reduce::min:
      return scat::scatter_dispatch<Reduce::min>(g, out, src, dt, index_dtype, stream);
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
    case Reduce::max_raw:
    case Reduce::min_raw: {
      const bool mx = r == Reduce::max_raw;
      if (is_floating(dt)) {
        fill_bits(dt, mx ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity(), out);
        return;
      }
      switch (dt) {
        case DType::s8:
          put(mx ? std::numeric_limits<int8_t>::min() : std::numeric_limits<int8_t>::max());
          break;
        case DType::u8:
          put(mx ? std::numeric_limits<uint8_t>::min() : std::numeric_limits<uint8_t>::max());
          break;
        case DType::s16:
          put(mx ? std::numeric_limits<int16_t>::min() : std::numeric_limits<int16_t>::max());
          break;
        case DType::s32:
          put(mx ? std::numeric_limits<int32_t>::min() : std::numeric_limits<int32_t>::max());
          break;
        case DType::s64:
          put(mx ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int64_t>::max());
          break;
        default:
          break;
      }
      return;
    }
    default:
      break;
  }
  const bool mx = r == Reduce::max;
  switch (dt) {
    case DType::f32:  // the encodings of -inf / +inf (see ordered_bits)
      put(mx ? ~uint32_t{0xff800000u} : (uint32_t{0x7f800000u} | 0x80000000u));
      break;
    case DType::f64:
      put(mx ? ~uint64_t{0xfff0000000000000ull} : (uint64_t{0x7ff0000000000000ull} | 0x8000000000000000ull));
      break;
    case DType::f16:
      put(static_cast<uint16_t>(mx ? 0xfc00u : 0x7c00u));
      break;
    case DType::bf16:
      put(static_cast<uint16_t>(mx ? 0xff80u : 0x7f80u));
      break;
    case DType::s32:
      put(mx ? std::numeric_limits<int32_t>::min() : std::numeric_limits<int32_t>::max());
      break;
    case DType::s64:
      put(mx ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int64_t>::max());
      break;
    default:
      break;
  }
}

cudaError_t scatter_finish(const Geom& g, void* out, DType dt, Reduce r, cudaStream_t stream) {
  if ((r != Reduce::max && r != Reduce::min) || g.ksize * g.P == 0) return cudaSuccess;
  const unsigned blocks = grid_for(g.ksize * g.P, 4, 256);
  if (dt == DType::f32)
    unorder_kernel<uint32_t><<<blocks, 256, 0, stream>>>(g, static_cast<uint32_t*>(out));
  else if (dt == DType::f64)
    unorder_kernel<unsigned long long><<<blocks, 256, 0, stream>>>(g, static_cast<unsigned long long*>(out));
  else
    return cudaSuccess;
  return cudaGetLastError();
}

}  // namespace baracuda::detail::idx
