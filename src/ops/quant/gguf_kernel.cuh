// GGUF kernels: the dequantizer and the decode matvec around the per-format block readers of
// gguf_formats.cuh (include/baracuda/ops/gguf.hpp states the formats and the numerics).
//
// ---- One reader per format, two consumers ---------------------------------------------------------------
// Both kernels are one template over the format functor; the sink decides what a code becomes:
//   DequantSink  value = scale * (c - off) (or fma(scale, c, min)), rounded to the output dtype, into
//                a shared-memory tile that the warp then writes out with 16-byte stores;
//   DotSink      per sub-block sum(c x) in float32, then acc += scale * sum (+ min * sum(x)).
// Codes become floats without a conversion instruction: a byte permute puts code c under the
// exponent of 2^23 (the float 2^23 + c), and one subtraction of 2^23 + kOffset leaves c - kOffset
// exactly. Signed codes (q8_0's int8, q6_K's code - 32, q3_K's missing high bit = -4) are unsigned
// codes with an offset, so no code needs sign handling.
//
// ---- Streaming (matvec) ----------------------------------------------------------------------------------
// A CTA of 8 warps owns a chunk of K (its x rows in shared memory as float32, padded so the lanes
// of a 16-byte read hit distinct banks, plus the sums of x over each sub-block for formats with a
// minimum) and 8 x rows_per_warp weight rows; each warp streams its rows' bytes for that chunk
// through a 4-stage cp.async ring (16-byte copies of the 16-byte units covering a step's blocks,
// bytes past the weight's end never read), a step being 64 codes a lane: one k-quant region, or two
// 32-element blocks (32 blocks apart, so each pass keeps the lanes on distinct banks). At the end
// of a row the warp's lanes are summed by a butterfly in a fixed order. The launch shape depends on
// the problem only, and nothing is atomic: deterministic and bit-stable.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cuda/std/type_traits>

#include "kernels/common/dtype_traits.cuh"
#include "kernels/common/smem_optin.cuh"
#include "ops/quant/gguf_formats.cuh"
#include "ops/quant/gguf_launch.hpp"

namespace baracuda::kern::gguf {

using detail::GgufShape;

// ---- cp.async ------------------------------------------------------------------------------------------------
/// 16 bytes to shared memory, of which the first `src_bytes` (0..16) are read and the rest zeroed.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, int src_bytes) {
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(gmem), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/// The 16-byte units covering bytes [src, src + len) of a buffer ending at `end`, copied by the lanes
/// of a warp to `dst` (unit u at dst + 16u; the first byte lands at dst + src % 16).
__device__ __forceinline__ void stage_bytes(uint8_t* dst, const uint8_t* src, int64_t len, const uint8_t* end,
                                            int lane) {
  const uintptr_t a0 = reinterpret_cast<uintptr_t>(src) & ~uintptr_t{15};
  const uintptr_t e = reinterpret_cast<uintptr_t>(src) + static_cast<uintptr_t>(len);
  const int units = static_cast<int>((e - a0 + 15) / 16);
  const uintptr_t lim = reinterpret_cast<uintptr_t>(end);
  for (int u = lane; u < units; u += 32) {
    const uintptr_t g = a0 + 16 * static_cast<uintptr_t>(u);
    const int bytes = g + 16 <= lim ? 16 : static_cast<int>(lim - g);
    cp_async16(dst + 16 * u, reinterpret_cast<const void*>(g), bytes);
  }
}

// ---- dequantize ------------------------------------------------------------------------------------------------
/// A warp takes tiles of 32 / regions whole blocks (one region a lane): stage the tile's bytes
/// (two stages, the next tile's copy in flight during this one's decode), decode into a padded
/// shared tile, then write the tile's contiguous output with 16-byte stores (element stores when
/// the output is not 16-byte aligned).
template <class F, class O>
__global__ void __launch_bounds__(detail::kGgufThreads, 2) gguf_dequant_kernel(const detail::GgufDequantLaunch p) {
  constexpr GgufShape S = F::kShape;
  constexpr int kSB = detail::gguf_step_blocks(S);
  constexpr int kStage = detail::gguf_stage_bytes(S);
  constexpr int kTile = kSB * kTileBlock<F, sizeof(O)>;
  constexpr int kVec = 16 / sizeof(O);  // elements a 16-byte store
  extern __shared__ __align__(16) uint8_t smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  uint8_t* stages = smem + warp * (2 * kStage + kTile);
  uint8_t* tile = stages + 2 * kStage;
  const int64_t tiles = (p.blocks + kSB - 1) / kSB;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * detail::kGgufWarps;
  const uint8_t* end = p.packed + p.blocks * S.block_bytes;
  auto issue = [&](int64_t t, int slot) {
    if (t < tiles) {
      const int64_t b0 = t * kSB;
      const int64_t nblk = p.blocks - b0 < kSB ? p.blocks - b0 : kSB;
      stage_bytes(stages + slot * kStage, p.packed + b0 * S.block_bytes, nblk * S.block_bytes, end, lane);
    }
    cp_async_commit();
  };
  const bool vec_out = (reinterpret_cast<uintptr_t>(p.out) & 15) == 0;
  int64_t t = static_cast<int64_t>(blockIdx.x) * detail::kGgufWarps + warp;
  int slot = 0;
  issue(t, 0);
  for (; t < tiles; t += stride, slot ^= 1) {
    issue(t + stride, slot ^ 1);
    cp_async_wait<1>();
    __syncwarp();
    const int64_t b0 = t * kSB;
    const int nblk = static_cast<int>(p.blocks - b0 < kSB ? p.blocks - b0 : kSB);
    const int jb = lane / S.regions;
    if (jb < nblk) {
      const int off = static_cast<int>(reinterpret_cast<uintptr_t>(p.packed + b0 * S.block_bytes) & 15);
      DequantSink<F, O> sink{tile + jb * kTileBlock<F, sizeof(O)>, lane % S.regions};
      F::visit(stages + slot * kStage + off + jb * S.block_bytes, lane % S.regions, sink);
    }
    __syncwarp();
    O* out = static_cast<O*>(p.out) + b0 * S.block_size;
    const int count = nblk * S.block_size;
    if (vec_out) {
      for (int e = lane * kVec; e < count; e += 32 * kVec) {
        const int blk = e / S.block_size, k = e % S.block_size;
        *reinterpret_cast<uint4*>(out + e) =
            *reinterpret_cast<const uint4*>(tile + blk * kTileBlock<F, sizeof(O)> + tile_pos<F, sizeof(O)>(k));
      }
    } else {
      for (int e = lane; e < count; e += 32) {
        const int blk = e / S.block_size, k = e % S.block_size;
        out[e] = *reinterpret_cast<const O*>(tile + blk * kTileBlock<F, sizeof(O)> + tile_pos<F, sizeof(O)>(k));
      }
    }
    __syncwarp();  // the tile and this stage are rewritten next round
  }
  cp_async_wait<0>();
}

// ---- matvec ------------------------------------------------------------------------------------------------
/// CTAs an SM should hold: the register cap that buys them (64 registers for 1 or 2 x rows; 128 for
/// 4 and 8, whose x chunk in shared memory limits the CTAs an SM holds anyway).
template <int kM>
inline constexpr int kMatvecMinBlocks = kM <= 2 ? 4 : 2;

template <class F, class T, int kM>
__global__ void __launch_bounds__(detail::kGgufThreads, kMatvecMinBlocks<kM>)
    gguf_matvec_kernel(const detail::GgufMatvecLaunch p) {
  constexpr GgufShape S = F::kShape;
  constexpr int kSB = detail::gguf_matvec_step_blocks(S);
  constexpr int kPassBlocks = detail::gguf_step_blocks(S);  // blocks the warp's lanes cover in one pass
  constexpr int kStage = detail::gguf_matvec_stage_bytes(S);
  constexpr int kStages = detail::kGgufStages;
  constexpr int kXR = detail::gguf_x_region_floats(S);  // floats of a padded x region
  constexpr int kXB = detail::gguf_x_block_floats(S);   // ... and of a block's regions
  constexpr int kGpr = kRegionLen<F> / S.group;         // sub-blocks a region
  constexpr int kGpb = S.block_size / S.group;
  extern __shared__ __align__(16) uint8_t smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  float* xs = reinterpret_cast<float*>(smem);
  float* xg = reinterpret_cast<float*>(smem + p.xs_bytes);
  uint8_t* ring = smem + p.xs_bytes + p.xg_bytes + warp * (kStages * kStage);

  const int64_t blk0 = static_cast<int64_t>(blockIdx.y) * p.chunk_blocks;
  const int nbc = static_cast<int>(p.nb - blk0 < p.chunk_blocks ? p.nb - blk0 : p.chunk_blocks);
  const int xm = static_cast<int>(p.chunk_blocks) * kXB;  // floats between x rows in the tile
  const int gm = static_cast<int>(p.chunk_blocks) * kGpb;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * detail::kGgufWarps + warp) * p.rows_per_warp;
  const int rows = static_cast<int>(p.n - row0 < p.rows_per_warp ? (p.n - row0 > 0 ? p.n - row0 : 0) : p.rows_per_warp);
  const int spr = (nbc + kSB - 1) / kSB;  // steps a row
  const int steps = rows * spr;
  const int64_t row_bytes = p.nb * S.block_bytes;
  const uint8_t* w_end = p.w + p.n * row_bytes;
  const uint8_t* first = p.w + row0 * row_bytes + blk0 * S.block_bytes;  // this warp's first byte

  // Issue step `is` (row ir, block ij of the chunk) into its ring slot; every call commits a group
  // (empty past the last step), so wait_group<kStages - 2> always means "step i has landed".
  int is = 0, ir = 0, ij = 0;
  auto issue = [&]() {
    if (is < steps) {
      const int nblk = nbc - ij < kSB ? nbc - ij : kSB;
      stage_bytes(ring + (is % kStages) * kStage, first + ir * row_bytes + ij * S.block_bytes,
                  static_cast<int64_t>(nblk) * S.block_bytes, w_end, lane);
      ij += kSB;
      if (ij >= nbc) ij = 0, ++ir;
    }
    ++is;
    cp_async_commit();
  };
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) issue();

  // x chunk -> float32 region-major tile (rows past m are zeros), then the sub-block sums of x.
  const int kc = nbc * S.block_size;
  const T* xg_src = static_cast<const T*>(p.x) + blk0 * S.block_size;
#pragma unroll
  for (int m = 0; m < kM; ++m) {
    const T* xr = xg_src + m * p.x_row;
    for (int k = tid; k < kc; k += detail::kGgufThreads) {
      const float v = m < p.m ? static_cast<float>(load_as_opmath(xr[k])) : 0.f;
      const int kk = k % S.block_size;
      xs[m * xm + (k / S.block_size) * kXB + region_of<F>(kk) * kXR + slot_of<F>(kk)] = v;
    }
  }
  if constexpr (S.has_min) {
    __syncthreads();
    const int sums = kM * nbc * kGpb;  // sub-block g of a region covers slots [g * group, (g + 1) * group)
    for (int e = tid; e < sums; e += detail::kGgufThreads) {
      const int m = e / (nbc * kGpb), rest = e - m * (nbc * kGpb);
      const int reg = rest / kGpr, sub = rest % kGpr;  // reg = block * regions + region
      const float* src = xs + m * xm + reg * kXR + sub * S.group;
      float sum = 0.f;
#pragma unroll 4
      for (int i = 0; i < S.group; ++i) sum += src[i];
      xg[m * gm + rest] = sum;
    }
  }
  __syncthreads();

  float acc[kM];
#pragma unroll
  for (int m = 0; m < kM; ++m) acc[m] = 0.f;
  int cr = 0, cj = 0;  // the consumed step's row and first block
  const int jl = lane / S.regions, region = lane % S.regions;
  for (int i = 0; i < steps; ++i) {
    cp_async_wait<kStages - 2>();
    __syncwarp();  // every lane's copies of step i are visible; step i - 1's slot is free
    issue();
    const uint8_t* src = first + cr * row_bytes + cj * S.block_bytes;
    const int off = static_cast<int>(reinterpret_cast<uintptr_t>(src) & 15);
#pragma unroll
    for (int pass = 0; pass < kSB / kPassBlocks; ++pass) {  // lane: block pass * kPassBlocks + jl of the step
      const int jp = pass * kPassBlocks + jl, jb = cj + jp;
      if (jb < nbc) {
        DotSink<F, kM> sink{xs + jb * kXB + region * kXR, xm, xg + jb * kGpb + region * kGpr, gm};
#pragma unroll
        for (int m = 0; m < kM; ++m) sink.acc[m] = acc[m];
        F::visit(ring + (i % kStages) * kStage + off + jp * S.block_bytes, region, sink);
#pragma unroll
        for (int m = 0; m < kM; ++m) acc[m] = sink.acc[m];
      }
    }
    cj += kSB;
    if (cj >= nbc) {  // the row ends: butterfly sum over the lanes (fixed order), lane m writes row m
#pragma unroll
      for (int m = 0; m < kM; ++m)
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) acc[m] += __shfl_xor_sync(0xffffffffu, acc[m], o);
      float v = acc[0];
#pragma unroll
      for (int m = 1; m < kM; ++m) v = lane == m ? acc[m] : v;
      const int64_t n = row0 + cr;
      if (lane < p.m && lane < kM) {
        if (p.splits == 1) {
          if (p.bias) v += static_cast<float>(load_as_opmath(static_cast<const T*>(p.bias)[n]));
          static_cast<T*>(p.y)[lane * p.n + n] = convert<T>(v);
        } else {
          p.partial[(static_cast<int64_t>(blockIdx.y) * p.m + lane) * p.n + n] = v;
        }
      }
#pragma unroll
      for (int m = 0; m < kM; ++m) acc[m] = 0.f;
      cj = 0;
      ++cr;
    }
  }
  cp_async_wait<0>();
}

/// y[m, n] = sum over chunks (in chunk order) of the partials + bias[n].
template <class T>
__global__ void gguf_matvec_reduce_kernel(const detail::GgufMatvecLaunch p) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= p.m * p.n) return;
  const int64_t n = e % p.n;
  float v = 0.f;
  for (int s = 0; s < p.splits; ++s) v += p.partial[s * p.m * p.n + e];
  if (p.bias) v += static_cast<float>(load_as_opmath(static_cast<const T*>(p.bias)[n]));
  static_cast<T*>(p.y)[e] = convert<T>(v);
}


}  // namespace baracuda::kern::gguf

// ---- launchers -----------------------------------------------------------------------------------------------
namespace baracuda::kern::gguf {

template <class F, class T, int kM>
cudaError_t matvec_tier(const detail::GgufMatvecLaunch& p, cudaStream_t stream) {
  constexpr auto kKernel = &gguf_matvec_kernel<F, T, kM>;
  if (cudaError_t e = allow_smem<kKernel>(p.smem_bytes); e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>(p.grid_x), static_cast<unsigned>(p.splits));
  kKernel<<<grid, detail::kGgufThreads, p.smem_bytes, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace baracuda::kern::gguf

namespace baracuda::detail {

/// The matvec of activation dtype D, every format and row tier (instantiated once per dtype TU).
template <DType D>
cudaError_t gguf_matvec_launch(const GgufMatvecLaunch& p, cudaStream_t stream) {
  using T = kern::storage_t<D>;
  if (p.m <= 0 || p.n <= 0 || p.splits <= 0) return cudaSuccess;
  return kern::gguf::with_format(p.format, [&](auto f) -> cudaError_t {
    using F = decltype(f);
    switch (p.m_tier) {
      case 1:
        return kern::gguf::matvec_tier<F, T, 1>(p, stream);
      case 2:
        return kern::gguf::matvec_tier<F, T, 2>(p, stream);
      case 4:
        return kern::gguf::matvec_tier<F, T, 4>(p, stream);
      default:
        return kern::gguf::matvec_tier<F, T, 8>(p, stream);
    }
  });
}

}  // namespace baracuda::detail
