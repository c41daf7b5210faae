// The copy engine of the indexing family: the mapped strided copy (one kernel per element size,
// plain or mapped, 32/64-bit index arithmetic) and the shared-memory tiled transpose.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstring>

#include "ops/index/index_kernels.cuh"

namespace baracuda::detail::idx {
namespace {

/// Output coordinate -> input coordinate of one dim (MapMode); the caller bounds-checks.
template <class I>
__device__ __forceinline__ I map_coord(int mode, I o, I n, I a) {
  switch (mode) {
    case kFlip:
      return n - 1 - o;
    case kRoll: {
      I i = o - a;
      return i < 0 ? i + n : i;
    }
    case kReflect: {
      I i = o - a;
      if (i < 0) i = -i;
      if (i >= n) i = 2 * (n - 1) - i;
      return i;
    }
    case kReplicate: {
      I i = o - a;
      return i < 0 ? I(0) : (i >= n ? n - 1 : i);
    }
    case kCircular: {
      I i = (o - a) % n;
      return i < 0 ? i + n : i;
    }
    case kTile:
      return o % n;
    case kRepeat:
      return o / a;
    default:
      return o - a;
  }
}

/// Offsets of output element t: returns whether it reads the input (false: the fill value).
/// Plain: every dim is the identity with a = 0 and equal sizes (permute/contiguous/expand/slice
/// write), so there is no map, no fill and no triangle: only the two offsets.
template <class I, bool Plain>
__device__ __forceinline__ bool locate(const CopyParams& p, I t, I* out_off, I* in_off) {
  I rem = t, oo = 0, io = 0, row = 0, col = 0;
  bool inside = p.in != nullptr;
#pragma unroll
  for (int d = kRank - 1; d >= 0; --d) {
    if (d >= p.rank) continue;
    const I n_out = static_cast<I>(p.d[d].out_size);
    const I o = rem % n_out;
    rem /= n_out;
    oo += o * static_cast<I>(p.d[d].out_stride);
    if constexpr (Plain) {
      io += o * static_cast<I>(p.d[d].in_stride);
    } else {
      const I n = static_cast<I>(p.d[d].in_size);
      const I i = map_coord<I>(p.d[d].mode, o, n, static_cast<I>(p.d[d].a));
      if (i < 0 || i >= n) inside = false;
      io += i * static_cast<I>(p.d[d].in_stride);
      if (d == p.tri_row) row = o;
      if (d == p.tri_col) col = o;
    }
  }
  if constexpr (!Plain) {
    if (p.tri_row >= 0) {
      const int64_t diff = static_cast<int64_t>(col) - static_cast<int64_t>(row);
      if (p.tri_upper ? diff < p.tri_k : diff > p.tri_k) inside = false;
    }
  }
  *out_off = oo;
  *in_off = io;
  return inside;
}

/// Two elements a thread per iteration, both loads issued before the stores, so each thread
/// keeps two words in flight (one left loads stall on latency; the elementwise engine measured
/// two vectors a thread as the best for bandwidth-bound copies).
template <int EB, class I, bool Plain>
__global__ void __launch_bounds__(256) mapped_copy_kernel(const CopyParams p) {
  using W = typename Word<EB>::type;
  W fill;
  memcpy(&fill, p.fill, EB);
  const W* in = reinterpret_cast<const W*>(p.in);
  W* out = reinterpret_cast<W*>(p.out);
  const I total = static_cast<I>(p.total);
  const I step = static_cast<I>(gridDim.x) * blockDim.x;
  for (I t = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += 2 * step) {
    const I t2 = t + step;
    const bool has2 = t2 < total;
    I o1, i1, o2 = 0, i2 = 0;
    const bool r1 = locate<I, Plain>(p, t, &o1, &i1);
    const bool r2 = has2 && locate<I, Plain>(p, t2, &o2, &i2);
    W v1 = fill, v2 = fill;
    if (r1) v1 = in[i1];
    if (r2) v2 = in[i2];
    out[o1] = v1;
    if (has2) out[o2] = v2;
  }
}

constexpr int kTileDim = 32;
constexpr int kTileRows = 8;

/// One CTA moves 32 x 32 tiles: it reads rows contiguous in the input's unit-stride dim and
/// writes rows contiguous in the output's, so both sides are coalesced.
template <int EB>
__global__ void __launch_bounds__(kTileDim* kTileRows) transpose_kernel(const TransposeParams p) {
  using W = typename Word<EB>::type;
  __shared__ W tile[kTileDim][kTileDim + 1];  // +1: column reads hit distinct banks
  const int64_t na = p.size[p.in_inner], nb = p.size[p.out_inner];
  const int64_t ta = (na + kTileDim - 1) / kTileDim;
  const int64_t sb_in = p.in_stride[p.out_inner], sa_out = p.out_stride[p.in_inner];
  const W* in = reinterpret_cast<const W*>(p.in);
  W* out = reinterpret_cast<W*>(p.out);
  for (int64_t blk = blockIdx.x; blk < p.tiles * p.batch; blk += gridDim.x) {
    const int64_t b = blk / p.tiles, t = blk % p.tiles;
    const int64_t a0 = (t % ta) * kTileDim, b0 = (t / ta) * kTileDim;
    int64_t rem = b, in_base = 0, out_base = 0;
#pragma unroll
    for (int d = kRank - 1; d >= 0; --d) {
      if (d >= p.rank || d == p.in_inner || d == p.out_inner) continue;
      const int64_t c = rem % p.size[d];
      rem /= p.size[d];
      in_base += c * p.in_stride[d];
      out_base += c * p.out_stride[d];
    }
    for (int j = threadIdx.y; j < kTileDim; j += kTileRows) {
      const int64_t ia = a0 + threadIdx.x, ib = b0 + j;
      if (ia < na && ib < nb) tile[j][threadIdx.x] = in[in_base + ia + ib * sb_in];
    }
    __syncthreads();
    for (int j = threadIdx.y; j < kTileDim; j += kTileRows) {
      const int64_t ib = b0 + threadIdx.x, ia = a0 + j;
      if (ia < na && ib < nb) out[out_base + ib + ia * sa_out] = tile[threadIdx.x][j];
    }
    __syncthreads();
  }
}

/// The word variant for EB < 4: V = 4 / EB elements a word, tiles of 32V x 32V elements. A warp
/// reads 32 words (128 bytes) of an input row, and writes 32 words of an output row assembled
/// from V tile rows.
template <int EB>
__global__ void __launch_bounds__(kTileDim* kTileRows) transpose_words_kernel(const TransposeParams p) {
  using W = typename Word<EB>::type;
  constexpr int V = 4 / EB;
  constexpr int T = kTileDim * V;
  __shared__ W tile[T][T + V];  // rows of 33 words: the column reads below hit at most 2 (bf16) / 4 (u8) per bank
  const int64_t na = p.size[p.in_inner], nb = p.size[p.out_inner];
  const int64_t ta = (na + T - 1) / T;
  const int64_t sb_in = p.in_stride[p.out_inner], sa_out = p.out_stride[p.in_inner];
  for (int64_t blk = blockIdx.x; blk < p.tiles * p.batch; blk += gridDim.x) {
    const int64_t b = blk / p.tiles, t = blk % p.tiles;
    const int64_t a0 = (t % ta) * T, b0 = (t / ta) * T;
    int64_t rem = b, in_base = 0, out_base = 0;
#pragma unroll
    for (int d = kRank - 1; d >= 0; --d) {
      if (d >= p.rank || d == p.in_inner || d == p.out_inner) continue;
      const int64_t c = rem % p.size[d];
      rem /= p.size[d];
      in_base += c * p.in_stride[d];
      out_base += c * p.out_stride[d];
    }
    const int64_t ia = a0 + V * threadIdx.x;  // words are whole: na and nb are multiples of V
    for (int j = threadIdx.y; j < T; j += kTileRows) {
      const int64_t ib = b0 + j;
      if (ia < na && ib < nb) {
        const uint32_t w = *reinterpret_cast<const uint32_t*>(p.in + (in_base + ia + ib * sb_in) * EB);
        W e[V];
        memcpy(e, &w, 4);
#pragma unroll
        for (int k = 0; k < V; ++k) tile[j][V * threadIdx.x + k] = e[k];
      }
    }
    __syncthreads();
    const int64_t ob = b0 + V * threadIdx.x;
    for (int j = threadIdx.y; j < T; j += kTileRows) {
      const int64_t oa = a0 + j;
      if (oa < na && ob < nb) {
        W e[V];
#pragma unroll
        for (int k = 0; k < V; ++k) e[k] = tile[V * threadIdx.x + k][j];
        uint32_t w;
        memcpy(&w, e, 4);
        *reinterpret_cast<uint32_t*>(p.out + (out_base + ob + oa * sa_out) * EB) = w;
      }
    }
    __syncthreads();
  }
}

template <int EB, class I>
cudaError_t copy_with(const CopyParams& p, cudaStream_t stream) {
  bool plain = p.in != nullptr && p.tri_row < 0;
  for (int d = 0; d < p.rank && plain; ++d)
    plain = p.d[d].mode == kIdentity && p.d[d].a == 0 && p.d[d].in_size == p.d[d].out_size;
  const int64_t blocks = std::min<int64_t>((p.total + 1023) / 1024, int64_t{1} << 20);
  if (plain)
    mapped_copy_kernel<EB, I, true><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(p);
  else
    mapped_copy_kernel<EB, I, false><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_copy(const CopyParams& p, int elem_bytes, bool i64, cudaStream_t stream) {
  if (p.total == 0) return cudaSuccess;
  switch (elem_bytes) {
    case 1:
      return i64 ? copy_with<1, int64_t>(p, stream) : copy_with<1, int32_t>(p, stream);
    case 2:
      return i64 ? copy_with<2, int64_t>(p, stream) : copy_with<2, int32_t>(p, stream);
    case 4:
      return i64 ? copy_with<4, int64_t>(p, stream) : copy_with<4, int32_t>(p, stream);
    case 8:
      return i64 ? copy_with<8, int64_t>(p, stream) : copy_with<8, int32_t>(p, stream);
    case 16:
      return i64 ? copy_with<16, int64_t>(p, stream) : copy_with<16, int32_t>(p, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

bool transpose_words_ok(const TransposeParams& p, int elem_bytes) {
  if (elem_bytes >= 4) return false;
  const int v = 4 / elem_bytes;
  if (p.size[p.in_inner] % v || p.size[p.out_inner] % v) return false;
  if (reinterpret_cast<uintptr_t>(p.in) % 4 || reinterpret_cast<uintptr_t>(p.out) % 4) return false;
  for (int d = 0; d < p.rank; ++d) {
    if (d != p.in_inner && p.in_stride[d] % v) return false;
    if (d != p.out_inner && p.out_stride[d] % v) return false;
  }
  return true;
}

cudaError_t launch_transpose(const TransposeParams& params, int elem_bytes, cudaStream_t stream) {
  TransposeParams p = params;
  const int tile = p.words ? kTileDim * 4 / elem_bytes : kTileDim;
  const int64_t na = p.size[p.in_inner], nb = p.size[p.out_inner];
  p.tiles = ((na + tile - 1) / tile) * ((nb + tile - 1) / tile);
  const int64_t n = p.tiles * p.batch;
  if (n == 0) return cudaSuccess;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(n, int64_t{1} << 20));
  const dim3 block(kTileDim, kTileRows);
  if (p.words) {
    if (elem_bytes == 1)
      transpose_words_kernel<1><<<blocks, block, 0, stream>>>(p);
    else if (elem_bytes == 2)
      transpose_words_kernel<2><<<blocks, block, 0, stream>>>(p);
    else
      return cudaErrorInvalidValue;
    return cudaGetLastError();
  }
  switch (elem_bytes) {
    case 1:
      transpose_kernel<1><<<blocks, block, 0, stream>>>(p);
      break;
    case 2:
      transpose_kernel<2><<<blocks, block, 0, stream>>>(p);
      break;
    case 4:
      transpose_kernel<4><<<blocks, block, 0, stream>>>(p);
      break;
    case 8:
      transpose_kernel<8><<<blocks, block, 0, stream>>>(p);
      break;
    case 16:
      transpose_kernel<16><<<blocks, block, 0, stream>>>(p);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

void fill_bits(DType dt, double v, unsigned char out[16]) {
  std::memset(out, 0, 16);
  auto put = [&](auto x) { std::memcpy(out, &x, sizeof(x)); };
  switch (dt) {
    case DType::f64:
      put(v);
      break;
    case DType::f32:
      put(static_cast<float>(v));
      break;
    case DType::f16:
      put(__float2half_rn(static_cast<float>(v)));
      break;  // through f32, as torch
    case DType::bf16:
      put(__float2bfloat16_rn(static_cast<float>(v)));
      break;
    case DType::f8e4m3:
      put(__nv_cvt_float_to_fp8(static_cast<float>(v), __NV_NOSAT, __NV_E4M3));
      break;
    case DType::f8e5m2:
      put(__nv_cvt_float_to_fp8(static_cast<float>(v), __NV_NOSAT, __NV_E5M2));
      break;
    case DType::s8:
      put(static_cast<int8_t>(static_cast<int64_t>(v)));
      break;
    case DType::u8:
      put(static_cast<uint8_t>(static_cast<int64_t>(v)));
      break;
    case DType::s16:
      put(static_cast<int16_t>(static_cast<int64_t>(v)));
      break;
    case DType::s32:
      put(static_cast<int32_t>(static_cast<int64_t>(v)));
      break;
    case DType::s64:
      put(static_cast<int64_t>(v));
      break;
    case DType::u32:
      put(static_cast<uint32_t>(static_cast<int64_t>(v)));
      break;
    case DType::b8:
      put(static_cast<uint8_t>(v != 0));
      break;
    case DType::c64:
      put(static_cast<float>(v));
      break;  // real part; imaginary stays 0
    case DType::c128:
      put(v);
      break;
    default:
      break;
  }
}

}  // namespace baracuda::detail::idx
