// The quantization family (OPS.md P; issue 5 items 1, 2, 3, 4, 8): quantize / dequantize
// (per-tensor, per-channel, per-token, per-group; symmetric or with zero points; int8, uint8,
// packed int4 / uint4, fp8 e4m3 / e5m2), fake_quantize (torch's, bit for bit, and the learnable
// LSQ variant per tensor, channel or group), dynamic-range quantization (per-token and per-group,
// symmetric or asymmetric, with the scales and zero points computed in the same kernel as the
// codes; per-tensor fp8 with current or delayed scaling), forward and backward, the W8A8
// QuantizedLinearPlan and the W4A16 (int4 weight-only) W4A16LinearPlan.
//
//   auto d = QuantDesc::per_channel(QuantOp::quantize, DType::bf16, DType::s8, Shape::of({4096, 4096}), 0);
//   auto plan = QuantPlan::select(Target::current().value(), d);
//   QuantArgs a; a.x = w; a.scale = scales; a.zero_point = zps; a.out = w_int8;
//   plan->run(stream, {}, a);
//
// ---- Granularity: which scale an element uses ---------------------------------------------------------
// The input x has the logical shape `shape`; around `axis` it is viewed as [O, A, I] (O = product of
// the dims before the axis, A = shape[axis], I = product of the dims after it). Element (o, a, i):
//   per_tensor   scale[0]                      (host scalar in the descriptor, or a [1] device tensor)
//   per_channel  scale[a]                      (scales [A]; torch.quantize_per_channel's axis)
//   per_token    scale[r], r = the row index   (axis = the last dim; scales [rows], rows = numel / D)
//   per_group    scale[(o * A/G + a/G) * I + i] (scales = x's shape with shape[axis] -> A/G; G =
//                                               group_size must divide A)
// Scales are float32, zero points int32 (float32 where the op says so), dense, with exactly that
// many elements (any shape). Symmetric (zero_point = none) means zero point 0.
//
// ---- Formulas (bit for bit against torch's CUDA kernels; x_f = float(x): torch's quantizers take
// float32, so f16/bf16 widen exactly and f64 rounds to f32 first) ------------------------------------
// quantize, integer q:  q = clamp(int64(rint(double(x_f) / double(s)) + zp), q_min, q_max)
//     (ATen quantize_tensor_per_{tensor,channel}_affine_cuda: `nearbyint(raw_val / scale) + zero_point`
//     in double; rint = round half to even; NaN -> 0 and +-inf -> the saturated int64, then clamped,
//     as the CUDA float->int conversion does). The kernel rounds the exact product x_f * (1/s) to an
//     integer with one FMA against 1.5 * 2^23 + zp and falls back to the double division only when
//     that product is within 2^-21 (relative) of a rounding tie, so the result is the double
//     formula's exactly.
// quantize, fp8 q:      q = fp8_rn(clamp(x_f / float(s), -M, M)), M = 448 (e4m3) / 57344 (e5m2), NaN
//     stays NaN; no zero point. Equal to torch's (x.float() / s).clamp(-M, M).to(float8) with s a
//     float32 tensor (true division; the kernel gets the correctly rounded quotient from the
//     reciprocal and two FMA corrections, Markstein's theorem, for 2^-60 <= |s| <= 2^60).
// dequantize, integer:  y = float(double(float(q) - zp) * double(s)) cast to the output dtype
//     (torch.dequantize's float32 result, then .to(dtype)); float64 outputs keep the double product.
// dequantize, fp8:      y = float(q) * float(s) (f64: double(q) * double(s)), cast to the output dtype.
// fake_quantize per_tensor (torch.fake_quantize_per_tensor_affine, cachemask kernel; s = float(scale),
//     inv = 1.0f / s, m = x in float (double for f64 inputs)):
//     qv = int64(rint(m * inv) + zp);  y = (fminf(q_max, fmaxf(q_min, qv)) - zp) * s  in float
//     mask = q_min <= qv <= q_max. (zp is added after rounding.)
// fake_quantize per_channel / per_group (torch.fake_quantize_per_channel_affine's CUDA kernel; s and inv
//     per channel or group, as above):
//     int32 zp:   qv = int64(rint(m * inv)) + zp (int64);  y = float(clamp(qv, q_min, q_max) - zp) * s
//     float zp:   qv = llrint(fma(m, inv, zp)) (nvcc contracts torch's x * inv + zp);
//                 y = (fminf(q_max, fmaxf(q_min, qv)) - zp) * s in float
//     mask = q_min <= qv <= q_max. (The output arithmetic is float even for f64 inputs, as in torch.)
// Backward (straight-through estimator; dy * mask computed as torch's dY * mask, so dy = inf
// with mask 0 gives NaN as torch does):
//   quantize:       dx = dy * 1[q_min <= rint(x/s) + zp <= q_max] (fp8: 1[|x_f / s| <= M])
//   dequantize:     dq = dy * s (the FP gradient of q taken as real; the integer input gets none)
//   fake_quantize:  dx = dy * mask (the mask recomputed from x, identical to the forward's)
//   fake_quantize_learnable (LSQ, torch's _fake_quantize_learnable_*_backward, float32 math):
//     per element xq = int64(rint(x * inv)) + zp; in range: dx = dy, dscale = dy * (xfq - x) * inv *
//     grad_factor, dzp = 0; below / above: dx = 0, dscale = dy * (q_min|q_max - zp) * grad_factor,
//     dzp = -dy * s * grad_factor. dscale / dzero_point are summed per channel (or over the tensor)
//     by a two-stage reduction with a fixed partition: deterministic, bit-stable, f32 accumulation.
//     Zero points arrive as float32: the forward uses clamp(rint(zp)), the per-tensor backward
//     int64(clamp(zp + 0.5)), the per-channel backward clamp(rint(zp)) (torch's three rules).
//     Per-group is the per-channel op with each group a channel (torch's per-channel op on x viewed
//     as [..., A/G, G, ...] with the groups' (scale, zero point) as channels): the same element
//     formulas, dscale / dzero_point summed over each group's G elements (a warp per group, or a
//     thread per group when groups are adjacent in memory), the same fixed two-stage partition.
// dynamic_quantize, symmetric (zero_point_kind none; signed or fp8 q; qmax = q_max, 448 or 57344):
//   scale = amax * (1 / qmax) in float32 (torch's `amax / qmax`: ATen divides by a scalar as a product
//   with its reciprocal) (amax = max |x| of the row, group or tensor, NaN propagates), or 1 when
//   amax is 0 or not finite; then the quantize formula above with that scale (zp = 0). Per-token
//   and per-group (groups of G along the last dim, scales [..., D/G]): one kernel reads each row or
//   group once (held in registers up to 65536 16-bit elements; a CTA of 128 per 4096-element row, a
//   G/32-thread sub-warp per bf16 group of 64 <= G <= 256: shuffles only), writes its scale ([rows] or
//   [..., D/G] float32) and its quantized values.
// dynamic_quantize, asymmetric (zero_point_kind int32; integer q; per-token or per-group): the
//   scale and zero point of torch.ao's choose_qparams_per_token_asymmetric
//   (torch/ao/quantization/fx/_decomposed.py, _choose_qparams_per_token_asymmetric_impl), with
//   its int8 range [-128, 127] generalised to [q_min, q_max], op by op in the input's precision
//   (rt = round to x's dtype for float16 / bfloat16, torch's ops on those tensors; float32 math for
//   float32 and, on x.float(), float64):
//     lo = min(min(x), 0), hi = max(max(x), 0) (NaN propagates)
//     scale = max(rt(rt(hi - lo) * (1 / float(q_max - q_min))), 2^-23)   (clamp(min=float32 eps))
//     dmin = rt(lo / scale), dmax = rt(hi / scale)
//     zp = rt(rt(q_min + dmin) + rt(q_max + dmax)) > 0 ? rt(q_min - dmin) : rt(q_max - dmax)
//     zp = rint(clamp(zp, q_min, q_max))
//   (rows / groups holding inf or NaN follow the same float formulas; a NaN zero point is written
//   as 0 and a NaN code as 0, where torch's result depends on its NaN -> integer conversion)
//   and the codes of torch.ops.quantized_decomposed.quantize_per_token:
//     q = clamp(rint(double(x_f) * (1.0 / double(scale)) + zp), q_min, q_max) in double (each op
//     rounded; NaN -> 0); the kernel rounds in float with quant_magic's tie margin and redoes a
//     16-byte unit in double when an element is within it (bf16 exact ties: ~0.06% of elements).
//   Outputs: scale_out float32 (the exact value torch's float64 scale holds), zero_point_out int32.
// dynamic_quantize backward (any granularity): quantize's straight-through estimator with the
//   forward's scale (and zero point) given as `scale` / `zero_point`:
//     dx = dy * 1[q_min <= rint(x / s) + zp <= q_max] (fp8: 1[|x / s| <= M]).
// dynamic_quantize per-tensor (symmetric): current scaling: three launches (amax partials per CTA;
//   one CTA reduces them and writes amax and scale; the cast reads that scale), x read twice.
//   Delayed scaling (Transformer Engine's amax history, algorithm "max"): amax_history [H] float32,
//   index 0 = the most recent step. scale = max(history) / qmax, or the value in scale_out on entry
//   when that max is 0 or not finite; x is quantized with it; then the history shifts by one
//   (history[i] <- history[i-1], the oldest drops) and history[0] = amax(x); scale_out = the scale used.
//
// ---- Packed int4 ---------------------------------------------------------------------------------------
// s4 / u4 tensors hold two elements per byte along the last dim, element 2j in the low nibble and
// 2j + 1 in the high nibble (torch.quint4x2's order, and the usual GPTQ/AWQ byte order). The
// TensorRef/TensorMut of a packed tensor has dtype s4/u4, the logical shape with the last dim
// halved, and byte strides (dense). The last dim must be even.
//
// The quantized side (q of quantize/dequantize/dynamic_quantize) is dense row-major; the
// floating-point tensors (x, y, dy, dx) may have any non-negative strides (a strided kernel
// serves what the 16-byte vectorized one cannot).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "baracuda/core/preference.hpp"
#include "baracuda/core/sku.hpp"
#include "baracuda/core/status.hpp"
#include "baracuda/core/tensor.hpp"
#include "baracuda/core/workspace.hpp"
#include "baracuda/ops/gemm.hpp"

namespace baracuda {

enum class QuantOp : uint8_t {
#define BARACUDA_QUANT(name, ...) name,
#include "baracuda/ops/quant_ops.def"
#undef BARACUDA_QUANT
};

/// affine: scales given; dynamic: scales from amax; linear: QuantizedLinearPlan. See quant_ops.def.
enum class QuantEngine : uint8_t { affine, dynamic, linear };

enum class QuantGranularity : uint8_t { per_tensor, per_channel, per_token, per_group };
const char* to_string(QuantGranularity g);

/// Zero points: none (symmetric, zp = 0), int32 values, or float32 values (fake_quantize's float
/// zero points; fake_quantize_learnable always takes float32).
enum class QuantZeroPoint : uint8_t { none, int32, float32 };

/// One row of quant_ops.def.
struct QuantOpInfo {
  QuantOp op;
  const char* name;
  QuantEngine engine;
  DTypeSet fw_dtypes;
  DTypeSet bw_dtypes;
  DTypeSet q_dtypes;
  const char* granularities;  ///< "tensor,channel,token,group"
  const char* torch;
  bool takes(QuantGranularity g) const;
};

std::span<const QuantOpInfo> quant_ops();
const QuantOpInfo& info(QuantOp op);
std::optional<QuantOp> quant_op_from_name(std::string_view name);

/// The default integer range of a quantized dtype (int8 [-128, 127], uint8 [0, 255], int4 [-8, 7],
/// uint4 [0, 15]); fp8: [-M, M] with M its largest finite value (448, 57344); int32 (the grid of
/// fake_quantize): [INT32_MIN, INT32_MAX].
int64_t quant_min_of(DType q);
int64_t quant_max_of(DType q);

struct QuantDesc {
  QuantOp op = QuantOp::quantize;
  Direction direction = Direction::Forward;
  DType dtype = DType::f32;   ///< floating side: x, y, dy, dx
  DType q_dtype = DType::s8;  ///< quantized side (fake ops: int32 = the integer grid)
  Shape shape{};              ///< logical (unpacked) shape of x
  QuantGranularity granularity = QuantGranularity::per_tensor;
  int axis = -1;           ///< per_channel / per_group (negative counts from the end); per_token: last
  int64_t group_size = 0;  ///< per_group: divides shape[axis]
  QuantZeroPoint zero_point_kind = QuantZeroPoint::int32;
  int64_t q_min = -128, q_max = 127;  ///< integer clamp range (within q_dtype's range; fp8: ignored)
  /// per_tensor only: false = `scale` / `zero_point` below; true = from QuantArgs::scale / zero_point
  /// ([1] device tensors, torch's tensor-qparams overloads). Other granularities always read tensors.
  bool scale_on_device = false;
  double scale = 1.0;        ///< host per-tensor scale: a positive normal float32 value (>= FLT_MIN)
  int64_t zero_point = 0;    ///< host per-tensor zero point, in [q_min, q_max]
  bool record_amax = false;  ///< quantize / dynamic per-tensor: also write max|x| to amax_out
  bool delayed = false;      ///< dynamic per_tensor: scale from QuantArgs::amax_history
  int64_t history_len = 0;   ///< delayed: H >= 1
  double grad_factor = 1.0;  ///< fake_quantize_learnable backward: scales dscale / dzero_point

  /// Per-tensor with a host scale and zero point (q_min/q_max: q_dtype's range; fp8: no zero point).
  static QuantDesc per_tensor(QuantOp op, DType dt, DType q, const Shape& shape, double scale, int64_t zero_point = 0,
                              Direction dir = Direction::Forward);
  /// Per-channel along `axis`, scales [shape[axis]] (+ int32 zero points unless symmetric).
  static QuantDesc per_channel(QuantOp op, DType dt, DType q, const Shape& shape, int axis, bool symmetric = false,
                               Direction dir = Direction::Forward);
  /// One scale per row of the last dim.
  static QuantDesc per_token(QuantOp op, DType dt, DType q, const Shape& shape, bool symmetric = true,
                             Direction dir = Direction::Forward);
  /// Groups of `group_size` along `axis`.
  static QuantDesc per_group(QuantOp op, DType dt, DType q, const Shape& shape, int axis, int64_t group_size,
                             bool symmetric = true, Direction dir = Direction::Forward);
  /// dynamic_quantize: per-token (one scale per row, computed in the kernel); asymmetric: with an
  /// int32 zero point per row (integer q).
  static QuantDesc dynamic_per_token(DType dt, DType q, const Shape& shape, bool asymmetric = false,
                                     Direction dir = Direction::Forward);
  /// dynamic_quantize: per-group, groups of `group_size` along the last dim (scales [..., D/G]).
  static QuantDesc dynamic_per_group(DType dt, DType q, const Shape& shape, int64_t group_size, bool asymmetric = false,
                                     Direction dir = Direction::Forward);
  /// dynamic_quantize: per-tensor current scaling (history_len = 0) or delayed (history_len >= 1).
  static QuantDesc dynamic_per_tensor(DType dt, DType q, const Shape& shape, int64_t history_len = 0);
};

/// Per-call tensors by role; which ones a call uses depends on op and direction (unused ones stay
/// default-constructed and are refused when given):
///
/// | op / direction               | inputs                          | outputs                                   |
/// | quantize fw                  | x, [scale], [zero_point]        | out (= q), [amax_out] (record_amax)       |
/// | quantize bw                  | dy, x, [scale], [zero_point]    | out (= dx)                                |
/// | dequantize fw                | q, [scale], [zero_point]        | out (= y)                                 |
/// | dequantize bw                | dy, [scale]                     | out (= dq, the FP gradient of q)          |
/// | fake_quantize fw             | x, [scale], [zero_point]        | out (= y), [mask] (bool, x's shape)       |
/// | fake_quantize bw             | dy, x, [scale], [zero_point]    | out (= dx)                                |
/// | fake_quantize_learnable fw   | x, scale, zero_point (f32)      | out (= y), [mask]                         |
/// | fake_quantize_learnable bw   | dy, x, scale, zero_point (f32)  | out (= dx), dscale, dzero_point           |
/// | dynamic_quantize per_token / | x                               | out (= q), scale_out ([rows] or [..., D/G]|
/// |   per_group                  |                                 | f32), [zero_point_out] (int32, asymmetric)|
/// | dynamic_quantize per_tensor  | x, [amax_history] (delayed)     | out (= q), scale_out ([1] f32; delayed:   |
/// |                              |                                 | read first), [amax_out], amax_history     |
/// | dynamic_quantize bw          | dy, x, scale, [zero_point]      | out (= dx)                                |
///
/// [scale]/[zero_point]: device tensors unless per-tensor with a host scale; zero_point absent
/// when symmetric. dscale/dzero_point have the scale's shape (float32).
struct QuantArgs {
  TensorRef x;
  TensorRef q;
  TensorRef dy;
  TensorRef scale;
  TensorRef zero_point;
  TensorMut out;
  TensorMut mask;
  TensorMut scale_out;
  TensorMut zero_point_out;  ///< dynamic_quantize asymmetric: int32, one per scale
  TensorMut amax_out;
  TensorMut amax_history;
  TensorMut dscale;
  TensorMut dzero_point;
};

class QuantPlan {
 public:
  /// Validates the descriptor (shape, axis, group size dividing the axis, q range within the
  /// dtype, zero point within [q_min, q_max], host scale finite and > 0, packed int4 with an even
  /// last dim) and picks the kernel. Honours `pref`: backend other than Any/Native,
  /// tf32=Require and reduced_precision_reduction=Require are refused; every kernel is
  /// deterministic and bit-stable (no atomics; launch shapes depend on the problem only);
  /// vectorized=Forbid disables the 16-byte paths.
  static Result<QuantPlan> select(const Target& target, const QuantDesc& desc, const PlanPreference& pref = {});
  /// Learnable backward: per-split partial sums; dynamic / record_amax per-tensor: amax partials.
  size_t workspace_size() const { return workspace_bytes_; }
  Result<void> can_implement(const QuantArgs& args) const;
  /// Enqueues on `stream`; never allocates or synchronizes (capture-safe).
  Result<void> run(cudaStream_t stream, Workspace ws, const QuantArgs& args) const;
  const KernelSku& sku() const { return sku_; }
  const PrecisionGuarantee& precision() const { return sku_.precision; }
  const QuantDesc& desc() const { return desc_; }
  /// The kernel run() takes for these tensors: "elementwise-vec16-unitscale" (16-byte units that
  /// each share one scale: per-tensor, per-channel over an outer axis, per-token, per-group along
  /// the last dim), "elementwise-vec16" (each element's scale from its position),
  /// "elementwise-strided", "rows-<registers|streaming>-<vec16|scalar>(tpr=N)" (dynamic per-token /
  /// per-group: N threads a row or group), "tensor-amax+elementwise-...",
  /// "learnable-<rows|columns|warps>(splits=N)", or "empty".
  std::string layout_for(const QuantArgs& args) const;

  /// [O, A, I] around the axis, group size and the scale strides (see the header comment), and
  /// the learnable backward's fixed partition: `splits` slices of each channel's elements (O x I
  /// per channel; per group: its G), reduced by a CTA each, by a thread per channel (`columns`:
  /// channels innermost) or by a warp per group (`warps`: per-group with fewer than 32 channels
  /// between a group's elements).
  struct Geometry {
    int64_t outer = 1, axis_len = 1, inner = 1, group = 1;
    int64_t s_outer = 0, s_axis = 0, s_inner = 0;
    int64_t num_scales = 1;
    int64_t splits = 1;
    bool columns = false;
    bool warps = false;
  };
  const Geometry& geometry() const { return geo_; }

 private:
  QuantDesc desc_;
  KernelSku sku_;
  Geometry geo_;
  size_t workspace_bytes_ = 0;
  bool allow_vectorized_ = true;
};

/// One-line convenience: select (cached per thread by descriptor and preference) and run.
Result<void> quant(cudaStream_t stream, const QuantDesc& desc, const QuantArgs& args, Workspace ws = {},
                   const PlanPreference& pref = {});
/// The workspace the cached plan of `desc` needs.
Result<size_t> quant_workspace_size(const QuantDesc& desc, const PlanPreference& pref = {});

// ---- W8A8 linear -------------------------------------------------------------------------------------
/// y[M, N] = (x_q[M, K] * w[N, K]^T) * x_scale[m] * w_scale[n] (+ bias[n]), where x_q / x_scale are
/// x's dynamic per-token symmetric int8 quantization (dynamic_quantize per_token, in the plan's
/// workspace) and w is torch nn.Linear's weight quantized per output channel (int8, [N, K]
/// row-major). Inference only: a Backward descriptor is refused (training uses fake_quantize
/// followed by a floating-point GEMM).
struct QuantizedLinearDesc {
  DType dtype = DType::bf16;  ///< x, y and bias: bf16, f16 or f32
  int64_t m = 0, n = 0, k = 0;
  bool bias = false;
  Direction direction = Direction::Forward;
};

/// x [M, K] (row stride >= K, unit column stride), weight [N, K] int8 dense, w_scale [N] float32,
/// bias [N] (dtype), y [M, N] dense.
struct QuantizedLinearArgs {
  TensorRef x;
  TensorRef weight;
  TensorRef w_scale;
  TensorRef bias;
  TensorMut y;
};

class QuantizedLinearPlan {
 public:
  /// Selects the per-token quantizer and GemmPlan with GemmDesc{a = b = s8, d = dtype, B stored
  /// [N, K] (trans_b), scale_mode = PerRowCol, bias}; when GemmPlan refuses, its message is
  /// forwarded. Preferences go to both plans.
  static Result<QuantizedLinearPlan> select(const Target& target, const QuantizedLinearDesc& desc,
                                            const PlanPreference& pref = {});
  /// int8 activations (M x K) + per-token scales (M float32) + the GEMM's workspace, each
  /// 256-byte aligned.
  size_t workspace_size() const { return workspace_bytes_; }
  Result<void> can_implement(const QuantizedLinearArgs& args) const;
  Result<void> run(cudaStream_t stream, Workspace ws, const QuantizedLinearArgs& args) const;
  const KernelSku& sku() const { return sku_; }
  const PrecisionGuarantee& precision() const { return sku_.precision; }
  const QuantizedLinearDesc& desc() const { return desc_; }
  const GemmPlan& gemm_plan() const { return *gemm_; }

 private:
  QuantizedLinearDesc desc_;
  KernelSku sku_;
  std::shared_ptr<QuantPlan> quant_;
  std::shared_ptr<GemmPlan> gemm_;
  size_t xq_offset_ = 0, scale_offset_ = 0, gemm_offset_ = 0;
  size_t workspace_bytes_ = 0;
};

/// One-line convenience for the W8A8 linear (plan cached per thread by descriptor).
Result<void> quantized_linear(cudaStream_t stream, const QuantizedLinearDesc& desc, const QuantizedLinearArgs& args,
                              Workspace ws = {}, const PlanPreference& pref = {});
Result<size_t> quantized_linear_workspace_size(const QuantizedLinearDesc& desc, const PlanPreference& pref = {});

// ---- W4A16 linear (weight-only int4) -------------------------------------------------------------
/// y[M, N] = x[M, K] * W^T (+ bias[n]) with W[n, k] = (q[n, k] - zp[n, g]) * scale[n, g], g = k / G:
/// the weight is nn.Linear's [N, K] quantized per group of G along K and stored packed (s4 / u4, two
/// a byte along K, the even k in the low nibble: dequantize's per_group layout, axis -1), x and y
/// 16-bit floats. Inference only.
///   m <= 16 (decode): one kernel streams the packed weight once: the codes become exact 16-bit
///     integers (q - zp) in registers (byte-wise magic-number conversion), tensor-core MMAs sum
///     x * (q - zp) over each group in float32, and the group's float32 scale multiplies that sum
///     (no rounding of dequantized weights); K is split over the 8 warps of a CTA with a fixed-order
///     sum (deterministic, bit-stable).
///   m > 16: dequantize's kernel writes W in x's dtype into the workspace ((q - zp) * scale rounded
///     to bf16/f16), then GemmPlan (trans_b, bias).
struct W4A16LinearDesc {
  DType dtype = DType::bf16;       ///< x, y and bias: bf16 or f16
  DType weight_dtype = DType::u4;  ///< packed s4 or u4
  int64_t m = 0, n = 0, k = 0;
  int64_t group_size = 128;  ///< G: a multiple of 32 dividing k (k itself: per output channel)
  bool zero_point = false;   ///< int32 zero points [n, k / G] (false: symmetric, zp = 0)
  bool bias = false;
  Direction direction = Direction::Forward;
};

/// x [m, k] (row stride >= k, unit column stride, 16-byte aligned rows), weight [n, k / 2] (dtype
/// s4/u4, dense), scale [n, k / G] float32 dense, zero_point [n, k / G] int32 dense (values within
/// the weight dtype's range), bias [n] (dtype), y [m, n] dense.
struct W4A16LinearArgs {
  TensorRef x;
  TensorRef weight;
  TensorRef scale;
  TensorRef zero_point;
  TensorRef bias;
  TensorMut y;
};

class W4A16LinearPlan {
 public:
  /// Validates the descriptor (dtypes, sizes, group size) and picks the decode kernel (m <= 16)
  /// or dequantize + GemmPlan (its refusal is forwarded). Preferences: backend Any/Native for the
  /// decode kernel (the GEMM path passes them to GemmPlan); tf32 / reduced-precision Require are
  /// refused.
  static Result<W4A16LinearPlan> select(const Target& target, const W4A16LinearDesc& desc,
                                        const PlanPreference& pref = {});
  /// 0 for the decode kernel; the dequantized weight (n * k in x's dtype) + the GEMM's workspace,
  /// 256-byte aligned, otherwise.
  size_t workspace_size() const { return workspace_bytes_; }
  Result<void> can_implement(const W4A16LinearArgs& args) const;
  Result<void> run(cudaStream_t stream, Workspace ws, const W4A16LinearArgs& args) const;
  const KernelSku& sku() const { return sku_; }
  const PrecisionGuarantee& precision() const { return sku_.precision; }
  const W4A16LinearDesc& desc() const { return desc_; }
  /// "decode" (m <= 16) or "dequantize+gemm".
  const char* path() const { return gemm_ ? "dequantize+gemm" : "decode"; }

 private:
  W4A16LinearDesc desc_;
  KernelSku sku_;
  std::shared_ptr<QuantPlan> dequant_;
  std::shared_ptr<GemmPlan> gemm_;
  size_t w_offset_ = 0, gemm_offset_ = 0;
  size_t workspace_bytes_ = 0;
};

/// One-line convenience for the W4A16 linear (plan cached per thread by descriptor).
Result<void> w4a16_linear(cudaStream_t stream, const W4A16LinearDesc& desc, const W4A16LinearArgs& args,
                          Workspace ws = {}, const PlanPreference& pref = {});
Result<size_t> w4a16_linear_workspace_size(const W4A16LinearDesc& desc, const PlanPreference& pref = {});

}  // namespace baracuda
