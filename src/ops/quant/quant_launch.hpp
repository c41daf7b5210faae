// What QuantPlan::run hands to the kernels: plain structs shared by the host plan (.cpp) and the
// per-input-dtype kernel translation units (quant_<dtype>.cu). No CUDA device types, so the plan
// compiles with a plain C++ compiler.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "baracuda/ops/quant.hpp"

namespace baracuda::detail {

/// Which kernel of the family one launch runs.
enum class QuantStep : uint8_t {
  elementwise,   ///< quantize / dequantize / fake_quantize, forward or backward (QuantElemOp)
  rows,          ///< dynamic per-token / per-group: amax (or min / max), qparams and codes in one pass
  amax,          ///< per-tensor amax partials (one per CTA) of x
  finalize,      ///< one CTA: reduce amax partials; write amax / scale; delayed: shift the history
  learnable_bw,  ///< fake_quantize_learnable backward: dx + per-split scale/zero-point partials
  learnable_sum  ///< per channel: sum the splits in fixed order
};

enum class QuantElemOp : uint8_t { quant_fw, quant_bw, dequant_fw, dequant_bw, fake_fw, fake_bw };

/// How the kernel turns the stored zero point into the one it uses.
enum class QuantZpMode : uint8_t {
  none,           ///< 0
  int32,          ///< int32 as given (host value or device tensor)
  float32,        ///< float32 as given (fake_quantize per-channel float zero points)
  round_clamp,    ///< float32 -> clamp(rint(zp), q_min, q_max) (learnable forward / per-channel backward)
  half_up_clamp,  ///< float32 -> int64(clamp(zp + 0.5, q_min, q_max)) (learnable per-tensor backward)
};

/// Floating-point operand slots: in0 = x (forward) or dy (backward), in1 = x (backward),
/// out = y / dx / dq, mask = fake_quantize's optional bool mask.
enum QuantSlot : int { kQIn0 = 0, kQIn1 = 1, kQOut = 2, kQMask = 3, kQuantSlots = 4 };

/// finalize's jobs (bit flags).
enum QuantFinalize : uint32_t {
  kFinAmaxOut = 1,       ///< write the reduced amax to amax_out
  kFinScaleCurrent = 2,  ///< scale_out = scale_of(amax) (fallback 1)
  kFinScaleHistory = 4,  ///< scale_out = scale_of(max(history)) (fallback: scale_out's value)
  kFinShiftHistory = 8,  ///< history[i] <- history[i-1], history[0] = amax
};

/// Division by a launch constant without a divide instruction (Granlund & Montgomery's round-up
/// multiplier): for n < 2^32, n / d = (umulhi32(n, m32) + n) >> s (the sum taken in 64 bits); for
/// any 64-bit n, t = umulhi64(n, m64) and n / d = (t + ((n - t) >> s1)) >> s2. The elementwise
/// kernels split element indices into (outer, axis, inner) and per-dim coordinates with these: a
/// 64-bit `/` or `%` by a runtime value is a ~70-instruction subroutine, and it ran per element.
struct QuantDivisor {
  uint64_t d = 1;
  uint64_t m64 = 1;
  uint32_t m32 = 1;
  uint32_t s = 0, s1 = 0, s2 = 0;
};

/// The multipliers of d (d >= 1; 0 is taken as 1). s = ceil(log2 d); m32 = floor(2^32 (2^s - d) / d) + 1
/// (< 2^32 for d < 2^32), m64 = floor(2^64 (2^s - d) / d) + 1.
inline QuantDivisor make_divisor(uint64_t d) {
  QuantDivisor r;
  r.d = d == 0 ? 1 : d;
  uint32_t s = 0;
  while (s < 64 && (uint64_t{1} << s) < r.d) ++s;
  r.s = s;
  r.s1 = s < 1 ? s : 1;
  r.s2 = s > 1 ? s - 1 : 0;
  using u128 = unsigned __int128;
  const u128 pow_s = u128{1} << s;
  r.m64 = static_cast<uint64_t>(((u128{1} << 64) * (pow_s - r.d)) / r.d + 1);
  if (s <= 32) r.m32 = static_cast<uint32_t>(((u128{1} << 32) * (pow_s - r.d)) / r.d + 1);
  return r;
}

/// Elementwise grid: units of 16 bytes of the floating side (2 elements on the strided path), 256
/// threads, at most kQuantMaxGrid CTAs with a grid-stride loop (a function of the problem only).
inline constexpr int kQuantBlock = 256;
/// CTAs of the elementwise kernel an SM must hold (64 registers a thread): 32 warps, 32 KiB of
/// 16-byte loads in flight per SM with two units a thread.
inline constexpr int kQuantMinBlocks = 4;
inline constexpr int64_t kQuantMaxGrid = 4096;
/// Units a thread of the elementwise kernel's 16-byte variants takes a step (two 16-byte loads per
/// input in flight); a CTA's step is that many x kQuantBlock consecutive units. The base count;
/// quant_elem_unroll doubles it where measured faster.
inline constexpr int kQuantUnroll = 2;
/// Units a thread of the 16-byte variants takes a step, for fp_bytes-byte inputs: 16-bit dequantize
/// forward and 16-bit fp8 quantize forward with one scale a unit take 2 x kQuantUnroll (64 bytes of
/// input in flight a thread, no spills at 64 registers; fp8 quantize with per-element scales spills
/// 36 bytes at 4): H200, [16384, 4096] bf16, fp8 per-tensor quantize 68.1 -> 64.2 us, int8
/// per-channel dequantize 61.6 -> 57.9 us. Integer quantize keeps kQuantUnroll: its exact rounding
/// (quant_magic, the tie check) needs ~80 registers, and 4 units spill 208 bytes under the 4-CTA
/// bound (per-channel int8 76.8 -> 100.0 us; 4 units at 2 CTAs an SM 92.8 us).
constexpr int quant_elem_unroll(int fp_bytes, QuantElemOp op, bool fp8_codes, bool unit_scale) {
  return fp_bytes == 2 && (op == QuantElemOp::dequant_fw || (op == QuantElemOp::quant_fw && fp8_codes && unit_scale))
             ? 2 * kQuantUnroll
             : kQuantUnroll;
}
/// Amax partials when the amax kernel reduces x on its own.
inline constexpr int64_t kQuantAmaxGrid = 1024;
/// dynamic per-token: most threads per row (one CTA), and the 16-byte vectors a thread holds when
/// a row is longer than a warp's single vectors: 4 (64 bytes), so a 4096-element 16-bit row is a
/// CTA of 128 threads. With 16 (a warp a row) the symmetric int8 kernel took 128 registers, 25%
/// occupancy, and its load / reduce / exact-tie-rule phases barely overlapped (H100, [16384, 4096]
/// bf16: 115 us, 58% of copy bandwidth); at 4 it takes 64 registers, 50% occupancy: 98 us (68%),
/// the asymmetric uint8 81 us (82%). Rows longer than 512 x 4 vectors (16384 16-bit) stream twice.
inline constexpr int kQuantMaxTpr = 512;
inline constexpr int kQuantBigVectors = 4;
/// Symmetric per-token int8 rows of 16-bit inputs held in registers by at most kQuantWideMaxTpr threads take
/// kQuantWideVectors vectors a thread (128 bytes; a 4096-element 16-bit row is 64 threads) under
/// __launch_bounds__(kQuantWideMaxTpr, 6) (80 registers): H200, [16384, 4096] bf16 -> int8,
/// 75.1 -> 68.4 us (76% -> 84% of a copy of the same bytes), bit-identical (the row's max |x| does
/// not depend on how it is split). Not per-group (8 vectors a thread: 72.6 -> 93.2 us, the scale
/// per 2-thread group dominates) nor asymmetric (77.3 -> 83.5).
inline constexpr int kQuantWideVectors = 8;
inline constexpr int kQuantWideMaxTpr = 128;
/// The rows kernels' CTA when a row's group is at most a warp (tpr <= 32): several rows a CTA.
inline constexpr int kQuantRowsBlock = 128;
/// Rows of at most kQuantBigVectors vectors (per-group G of 8..32 bf16 elements, very short per-token
/// rows): rows a group of threads takes at once (rows_small_kernel), so that a thread has that many
/// independent 16-byte loads and reduction chains in flight instead of one.
inline constexpr int kQuantSmallRows = 4;

struct QuantLaunch {
  QuantStep step = QuantStep::elementwise;
  QuantElemOp elem = QuantElemOp::quant_fw;
  DType q_dtype = DType::s8;
  int64_t numel = 0;
  // [O, A, I] view around the axis, group size, scale strides (QuantPlan::Geometry).
  int64_t outer = 1, axis_len = 1, inner = 1, group = 1;
  int64_t s_outer = 0, s_axis = 0, s_inner = 0;
  // Floating-point operands, logical row-major order, coalesced dims (strides in elements).
  const void* fp[kQuantSlots] = {nullptr, nullptr, nullptr, nullptr};
  int ndim = 0;
  int64_t size[kMaxRank] = {};
  int64_t stride[kQuantSlots][kMaxRank] = {};
  bool vec = false;                             ///< 16-byte path: every operand dense in logical order and aligned
  bool wide = false;                            ///< an element index can reach 2^32: the 64-bit form of the divisions
  QuantDivisor div_inner, div_axis, div_group;  ///< of inner, axis_len, group (element -> (o, a, i))
  QuantDivisor div_size[kMaxRank];              ///< of size[d] (strided offsets)
  /// Vectorized path, scale index of a whole 16-byte unit: every unit's elements share one scale
  /// (the scale changes every `run` elements and run is a multiple of the unit), found once per
  /// unit as e0 / run, then % axis_len when run_mod (per-channel: runs of `inner` cycle over the
  /// axis). scale_const: a single scale (per-tensor).
  bool unit_uniform = false, run_mod = false, scale_const = false;
  QuantDivisor div_run;
  // Quantized side (dense; packed int4: byte e/2, nibble e%2).
  const void* q_in = nullptr;
  void* q_out = nullptr;
  // Scales and zero points: device tensors, or (scale == nullptr) the host per-tensor values.
  const float* scale = nullptr;
  const void* zero_point = nullptr;
  QuantZpMode zp_mode = QuantZpMode::none;
  double host_scale = 1.0;
  int64_t host_zero_point = 0;
  int64_t q_min = -128, q_max = 127;
  float fp8_max = 448.f;          ///< saturation bound of the fp8 target
  bool channel_rule = false;      ///< fake_quantize: zero point added before rounding (per-channel)
  float* amax_partial = nullptr;  ///< elementwise quantize / amax step: one float per CTA
  int64_t grid = 1;               ///< CTAs of the elementwise / amax step (partials count)
  // dynamic rows (step rows): `rows` rows of n elements, one (scale, zero point) each. Per-token: the
  // rows of x [tokens, D] (n = D); per-group: each token's D / n groups (group_rows = D / n), row r
  // being group r % group_rows of token r / group_rows. x has a token and a column stride; q is dense.
  int64_t rows = 0, n = 0;
  int64_t group_rows = 1;
  QuantDivisor div_group_rows;
  int64_t x_row_stride = 0, x_col_stride = 1;
  float* scale_out = nullptr;
  int32_t* zero_point_out = nullptr;  ///< asymmetric (zp_mode int32): one per row
  float q_scale_max = 127.f;          ///< dynamic symmetric: scale = amax / q_scale_max
  int tpr = 32, block = 128, items = 8;
  bool cached = true;
  // finalize.
  uint32_t finalize = 0;
  const float* partial_in = nullptr;
  int64_t num_partials = 0;
  float* amax_out = nullptr;
  float* history = nullptr;
  int64_t history_len = 0;
  // learnable backward: `channels` (scale, zero point) pairs, each summed over its elements (per
  // channel: O x I of them; per group: the G of one (o, axis group, i)).
  bool per_channel = false;
  bool per_group = false;
  bool columns = false;  ///< one thread per channel (channels innermost) instead of a CTA per (split, channel)
  bool warps = false;    ///< per-group: a warp per (split, group)
  int64_t channels = 1;
  int64_t splits = 1;
  float grad_factor = 1.f;
  float* partial = nullptr;  ///< [channels][splits][2] (dscale, dzero_point)
  float* dscale = nullptr;
  float* dzero_point = nullptr;
};

using QuantLaunchFn = cudaError_t (*)(const QuantLaunch& p, cudaStream_t stream);

/// What W4A16LinearPlan's decode path (m <= 16) hands to its kernel (w4a16_decode.cu).
struct W4A16Launch {
  DType dtype = DType::bf16;            ///< x, y, bias: bf16 or f16
  const void* x = nullptr;              ///< [m, k], rows 16-byte aligned
  int64_t x_row = 0;                    ///< elements between rows of x
  const uint8_t* w = nullptr;           ///< [n, k / 2], two codes a byte, the even k low
  const float* scale = nullptr;         ///< [n, k / group]
  const int32_t* zero_point = nullptr;  ///< [n, k / group], or null (zero point 0)
  const void* bias = nullptr;           ///< [n], or null
  void* y = nullptr;                    ///< [m, n] dense
  int64_t m = 0, n = 0, k = 0, group = 128;
  bool signed_w = false;  ///< s4 codes (two's complement nibbles)
};

/// Launches the decode kernel on `stream` (a CTA per 16 columns; m > 8 takes the rows-8..15 variant).
cudaError_t w4a16_decode_launch(const W4A16Launch& p, cudaStream_t stream);

/// The launcher of one floating-point dtype; explicitly instantiated in quant_<dtype>.cu (the dynamic
/// rows kernels in quant_rows_<dtype>.cu).
template <DType D>
cudaError_t quant_launch(const QuantLaunch& p, cudaStream_t stream);

}  // namespace baracuda::detail
