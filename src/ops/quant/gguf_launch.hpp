// What the GGUF plans (gguf_plan.cpp) hand to their kernels (gguf_dequant.cu, gguf_matvec_<dtype>.cu):
// plain structs, and the per-format shape constants both sides derive the launch geometry from. No
// CUDA device types, so the plan compiles with a plain C++ compiler.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "baracuda/ops/gguf.hpp"

namespace baracuda::detail {

/// How the kernels cut a block. A block is read as `regions` equal parts of block_size / regions
/// elements, one a lane (32 codes a lane for the 32-element formats, 64 for the k-quants), so a warp
/// step covers 32 / regions whole blocks. Regions are contiguous runs of k, except where
/// `interleaved` (q2_K, q3_K, q6_K, whose bytes serve k = 128n + 32j + 16h + l): region 2n + h holds
/// the 4 x 16 elements of (n, h), in j order. Sub-blocks (one scale, and one minimum where the format
/// has them) have `group` elements and lie inside one region. The dequantizer's output tile, indexed
/// by k, puts 16 bytes of padding after every `pad_period` elements and `block_extra` more 16-byte
/// units after each block, so that the lanes of one 16-byte access hit distinct banks.
struct GgufShape {
  int block_size;
  int block_bytes;
  int regions;
  int group;
  bool has_min;
  int pad_period;
  int block_extra;
  bool interleaved;
};

inline constexpr GgufShape gguf_shape(GgufFormat f) {
  switch (f) {
    case GgufFormat::q4_0:
      return {32, 18, 1, 32, false, 32, 0, false};
    case GgufFormat::q4_1:
      return {32, 20, 1, 32, true, 32, 0, false};
    case GgufFormat::q5_0:
      return {32, 22, 1, 32, false, 32, 0, false};
    case GgufFormat::q5_1:
      return {32, 24, 1, 32, true, 32, 0, false};
    case GgufFormat::q8_0:
      return {32, 34, 1, 32, false, 32, 0, false};
    case GgufFormat::q2_k:
      return {256, 84, 4, 16, true, 64, 1, true};
    case GgufFormat::q3_k:
      return {256, 110, 4, 16, false, 64, 1, true};
    case GgufFormat::q4_k:
      return {256, 144, 4, 32, true, 64, 0, false};
    case GgufFormat::q5_k:
      return {256, 176, 4, 32, true, 64, 0, false};
    case GgufFormat::q6_k:
      return {256, 210, 4, 16, false, 64, 1, true};
  }
  return {32, 18, 1, 32, false, 32, 0, false};
}

/// The matvec's x tile of one block: region-major, each region's floats followed by 4 floats (16
/// bytes) of padding, so that a word's x address is the region's base plus a constant and the lanes
/// of a 16-byte read hit distinct banks.
inline constexpr int gguf_x_region_floats(const GgufShape& s) { return s.block_size / s.regions + 4; }
inline constexpr int gguf_x_block_floats(const GgufShape& s) { return s.regions * gguf_x_region_floats(s); }

/// Bytes of the dequantizer's padded output tile row of one block whose elements take `elem` bytes.
inline constexpr int gguf_tile_block_bytes(const GgufShape& s, int elem) {
  return s.block_size * elem + 16 * (s.block_size / s.pad_period + s.block_extra);
}

/// Warps a CTA of either kernel; weight stages in flight per warp (matvec).
inline constexpr int kGgufWarps = 8;
inline constexpr int kGgufThreads = 32 * kGgufWarps;
inline constexpr int kGgufStages = 4;
/// Blocks a warp step covers, and the bytes of its staging buffer: the step's bytes start anywhere
/// in a 16-byte unit, so the whole units covering them take ceil16(15 + bytes). The dequantizer
/// reads one region a lane per step; the matvec reads 64 codes a lane per step (two 32-element blocks,
/// or one k-quant region), so the per-step costs (cp.async issue, waits, bookkeeping) are spread over
/// as many codes for every format.
inline constexpr int gguf_step_blocks(const GgufShape& s) { return 32 / s.regions; }
inline constexpr int gguf_stage_bytes(const GgufShape& s) {
  return (gguf_step_blocks(s) * s.block_bytes + 30) / 16 * 16;
}
inline constexpr int gguf_matvec_lane_blocks(const GgufShape& s) { return s.regions == 1 ? 2 : 1; }
inline constexpr int gguf_matvec_step_blocks(const GgufShape& s) {
  return gguf_step_blocks(s) * gguf_matvec_lane_blocks(s);
}
inline constexpr int gguf_matvec_stage_bytes(const GgufShape& s) {
  return (gguf_matvec_step_blocks(s) * s.block_bytes + 30) / 16 * 16;
}
/// Shared memory the matvec may give its x chunk (float32, padded) and the x sums of its sub-blocks.
inline constexpr size_t kGgufXBudget = 64 * 1024;

struct GgufDequantLaunch {
  GgufFormat format = GgufFormat::q4_0;
  DType out_dtype = DType::f32;
  const uint8_t* packed = nullptr;  ///< 16-byte aligned
  void* out = nullptr;              ///< dense, blocks * block_size elements
  int64_t blocks = 0;               ///< rows * cols / block_size
  int64_t grid = 0;                 ///< CTAs (grid-stride over warp tiles)
};

struct GgufMatvecLaunch {
  GgufFormat format = GgufFormat::q4_0;
  DType dtype = DType::bf16;
  const void* x = nullptr;     ///< [m, k], unit column stride
  int64_t x_row = 0;           ///< elements between rows of x
  const uint8_t* w = nullptr;  ///< n rows of nb blocks, 16-byte aligned
  int64_t m = 0, n = 0, k = 0;
  int64_t nb = 0;            ///< blocks a weight row
  int m_tier = 1;            ///< rows of x the kernel holds (1, 2, 4, 8; rows past m are zeros)
  int64_t chunk_blocks = 0;  ///< blocks of K a CTA holds (the last chunk may be shorter)
  int splits = 1;            ///< chunks of K (grid.y)
  int rows_per_warp = 1;
  int64_t grid_x = 0;     ///< CTAs along n: ceil(n / (kGgufWarps * rows_per_warp))
  size_t smem_bytes = 0;  ///< dynamic shared memory of a CTA
  size_t xs_bytes = 0;    ///< x chunk (float32, region-major padded tile), then the sub-block sums
  size_t xg_bytes = 0;
  /// splits == 1: y [m, n] (+ bias) written directly; else float32 partials [splits, m, n] in
  /// `partial`, summed (in chunk order) with the bias by a second kernel.
  const void* bias = nullptr;
  void* y = nullptr;
  float* partial = nullptr;
};

/// The matvec's launch shape for a problem (the plan stores it; the host tests check it).
GgufMatvecLaunch gguf_matvec_shape(GgufFormat f, DType dt, int64_t m, int64_t n, int64_t k, int num_sms);

/// Launches the dequantizer (one TU, every format and output dtype).
cudaError_t gguf_dequant_launch(const GgufDequantLaunch& p, cudaStream_t stream);
/// The matvec of one activation dtype (explicitly instantiated in gguf_matvec_<dtype>.cu), then, when
/// K is split, the reduction of the partials (gguf_dequant.cu holds it for every dtype).
template <DType D>
cudaError_t gguf_matvec_launch(const GgufMatvecLaunch& p, cudaStream_t stream);
cudaError_t gguf_matvec_reduce_launch(const GgufMatvecLaunch& p, cudaStream_t stream);

}  // namespace baracuda::detail
