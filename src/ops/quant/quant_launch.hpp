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
  rows,          ///< dynamic per-token: amax, scale and quantized row in one pass
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

/// Elementwise grid: units of 16 bytes of the floating side (2 elements on the strided path), 256
/// threads, at most kQuantMaxGrid CTAs with a grid-stride loop (a function of the problem only).
inline constexpr int kQuantBlock = 256;
inline constexpr int64_t kQuantMaxGrid = 4096;
/// Amax partials when the amax kernel reduces x on its own.
inline constexpr int64_t kQuantAmaxGrid = 1024;
/// dynamic per-token: most threads per row (one CTA), elements a thread holds (16-bit: 4 vectors).
inline constexpr int kQuantMaxTpr = 512;
inline constexpr int kQuantBigVectors = 4;

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
  bool vec = false;  ///< 16-byte path: every operand dense in logical order and aligned
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
  // dynamic per-token rows (step rows): x [rows, n] with row and column strides.
  int64_t rows = 0, n = 0;
  int64_t x_row_stride = 0, x_col_stride = 1;
  float* scale_out = nullptr;
  float q_scale_max = 127.f;  ///< dynamic: scale = amax / q_scale_max
  int tpr = 32, block = 128, items = 8;
  bool cached = true;
  // finalize.
  uint32_t finalize = 0;
  const float* partial_in = nullptr;
  int64_t num_partials = 0;
  float* amax_out = nullptr;
  float* history = nullptr;
  int64_t history_len = 0;
  // learnable backward.
  bool per_channel = false;
  bool columns = false;  ///< one thread per channel (channels innermost) instead of a CTA per (split, channel)
  int64_t splits = 1;
  float grad_factor = 1.f;
  float* partial = nullptr;  ///< [axis_len][splits][2] (dscale, dzero_point)
  float* dscale = nullptr;
  float* dzero_point = nullptr;
};

using QuantLaunchFn = cudaError_t (*)(const QuantLaunch& p, cudaStream_t stream);

/// The launcher of one floating-point dtype; explicitly instantiated in quant_<dtype>.cu.
template <DType D>
cudaError_t quant_launch(const QuantLaunch& p, cudaStream_t stream);

}  // namespace baracuda::detail
