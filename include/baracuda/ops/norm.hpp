// The softmax and normalization family (OPS.md G-H): softmax and log_softmax over any axis,
// F.normalize (any p >= 0, inf), sparsemax and gumbel_softmax over any axis, layer_norm and
// rms_norm over the trailing dims (affine or not, optional fused residual add), forward and
// backward, rows of any length; and the channel normalizations of [N, C, *spatial] inputs
// (batch_norm, instance_norm, group_norm, local_response_norm) in any layout.
//
//   auto desc = NormDesc::layer_norm(DType::bf16, Shape::of({16384, 4096}), 1, true, true, 1e-5);
//   auto plan = NormPlan::select(Target::current().value(), desc);
//   NormArgs a; a.x = x; a.weight = w; a.bias = b; a.out = y; a.save_mean = m; a.save_rstd = r;
//   plan->run(stream, {}, a);
//
// Forward and backward are two directions of one plan, as in the elementwise family. The
// backward of softmax/log_softmax reads grad_output and the forward output; the backward of
// layer_norm/rms_norm reads grad_output, the forward input (x + residual when the residual add
// was fused) and the f32 statistics the forward saved (f64 for f64 inputs). It writes dx and,
// when asked, dweight/dbias through a deterministic two-stage reduction in the workspace.
//
//   auto bn = NormDesc::batch_norm(DType::bf16, Shape::of({32, 256, 56, 56}), true, true,
//                                  /*training=*/true, /*running_stats=*/true, 0.1, 1e-5);
//   NormArgs b; b.x = x; b.weight = w; b.bias = bb; b.running_mean = rm; b.running_var = rv;
//   b.out = y; b.save_mean = m; b.save_rstd = invstd;     // the workspace holds partial sums
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "baracuda/core/preference.hpp"
#include "baracuda/core/sku.hpp"
#include "baracuda/core/status.hpp"
#include "baracuda/core/tensor.hpp"
#include "baracuda/core/workspace.hpp"

namespace baracuda {

enum class NormOp : uint8_t {
#define BARACUDA_NORM(name, ...) name,
#include "baracuda/ops/norm_ops.def"
#undef BARACUDA_NORM
};

/// axis: reduces one axis of any stride, no parameters (softmax, log_softmax, normalize,
/// sparsemax, gumbel_softmax); norm:
/// reduces the trailing dims (layer_norm, rms_norm); channel: [N, C, *spatial] inputs with
/// per-channel parameters (batch_norm, instance_norm, group_norm, local_response_norm). See
/// norm_ops.def.
enum class NormKind : uint8_t { axis, norm, channel };

/// softmax forward's optional mask, broadcast to the input (torch rules): `boolean` excludes the
/// elements where the mask is true (torch._masked_softmax; a row with every element excluded
/// gives zeros), `additive` computes softmax(x + mask) in f32 (a mask of the input's dtype;
/// -inf excludes; a row with every element -inf gives NaN, as torch's softmax does).
enum class NormMask : uint8_t { none, boolean, additive };

/// One row of norm_ops.def.
struct NormOpInfo {
  NormOp op;
  const char* name;
  NormKind kind;
  DTypeSet fw_dtypes;
  DTypeSet bw_dtypes;
  const char* params;    ///< "", "weight" or "weight,bias"
  const char* bw_reads;  ///< "output" or "input,mean,rstd" ...
  double tol;
  bool bw_reads_output() const;  ///< softmax/log_softmax: the backward reads y, not x
  bool takes_bias() const;
  bool takes_weight() const;
  bool saves_mean() const;  ///< layer_norm: mean and rstd; rms_norm: rstd only
};

std::span<const NormOpInfo> norm_ops();
const NormOpInfo& info(NormOp op);
std::optional<NormOp> norm_op_from_name(std::string_view name);

/// dtype of the saved statistics (mean, rstd) and of the parameter-gradient partial sums:
/// f64 for f64 inputs, f32 otherwise.
DType norm_stats_dtype(DType dtype);

struct NormDesc {
  NormOp op = NormOp::softmax;
  Direction direction = Direction::Forward;
  DType dtype = DType::f32;        ///< x, y, residual, grad_output, grad_input
  DType param_dtype = DType::f32;  ///< weight, bias and their gradients: dtype, or f32 for f16/bf16 inputs
  Shape shape{};                   ///< x's shape
  int axis = -1;                   ///< axis ops: the reduced dim (negative counts from the end)
  int norm_ndim = 1;               ///< layer/rms norm: number of trailing dims normalized
  bool weight = false;             ///< norms: multiply by weight (normalized shape)
  bool bias = false;               ///< layer_norm: add bias (normalized shape)
  bool residual = false;           ///< forward norms: normalize x + residual and write that sum
  double eps = 1e-5;               ///< norms: added to the variance / mean square; normalize: the
                                   ///< norm's floor (torch's 1e-12); finite, >= 0
  double p = 2.0;                  ///< normalize: the norm's order, finite >= 0 or +inf (0 counts
                                   ///< the non-zeros, as torch's vector_norm); 2 for every other op
  double tau = 1.0;                ///< gumbel_softmax: the temperature, finite > 0; 1 otherwise
  bool hard = false;               ///< gumbel_softmax forward: one-hot of the argmax (the backward
                                   ///< is the soft sample's either way: straight-through)
  NormMask mask = NormMask::none;  ///< softmax forward only (its backward is softmax's, on y)
  Shape mask_shape{};              ///< broadcasts to `shape`
  // Channel ops: x is [N, C, *spatial] (rank >= 2, channels at dim 1), in any layout.
  int num_groups = 1;          ///< group_norm: groups of C / num_groups consecutive channels
  bool training = true;        ///< batch/instance norm: batch statistics (true) or running ones (false)
  bool running_stats = false;  ///< batch/instance norm: running_mean/running_var given (training:
                               ///< updated in place; evaluation: read, and required)
  double momentum = 0.1;       ///< running = (1 - momentum) * running + momentum * batch statistic
                               ///< (the variance unbiased, as torch); finite
  int lrn_size = 5;            ///< local_response_norm: channels in the window (>= 1)
  double lrn_alpha = 1e-4;     ///< y = x / (k + alpha / size * sum over the window of x^2)^beta
  double lrn_beta = 0.75;
  double lrn_k = 1.0;

  static NormDesc softmax(DType dt, const Shape& shape, int axis, bool log = false, Direction dir = Direction::Forward);
  static NormDesc layer_norm(DType dt, const Shape& shape, int norm_ndim, bool weight, bool bias, double eps,
                             Direction dir = Direction::Forward);
  static NormDesc rms_norm(DType dt, const Shape& shape, int norm_ndim, bool weight, double eps,
                           Direction dir = Direction::Forward);
  /// F.normalize: x / max(||x||_p, eps) along `axis`; p = 2 by default (its own kernel), any
  /// finite p >= 0 or +inf otherwise (one kernel; p = 1 and inf without pow).
  static NormDesc normalize(DType dt, const Shape& shape, int axis, double eps = 1e-12,
                            Direction dir = Direction::Forward, double p = 2.0);
  /// Sparsemax (Martins & Astudillo 2016) along `axis`: y = max(x - tau, 0) with the threshold
  /// tau that makes the row sum to 1. The backward reads the output: its support is {y > 0} of y
  /// as stored (an element whose x - tau rounds to 0 in the dtype, below 2^-25 in f16, is outside).
  static NormDesc sparsemax(DType dt, const Shape& shape, int axis, Direction dir = Direction::Forward);
  /// torch's F.gumbel_softmax along `axis`: softmax((x + g) / tau) with Gumbel noise g (from
  /// NormArgs::noise, or generated in the kernel from NormArgs::rng); hard: the one-hot of its
  /// argmax. The backward reads the soft sample: dx = softmax_backward(dy, y_soft) / tau.
  static NormDesc gumbel_softmax(DType dt, const Shape& shape, int axis, double tau = 1.0, bool hard = false,
                                 Direction dir = Direction::Forward);
  /// Statistics per channel over (N, *spatial). Training: batch statistics (saved as mean and
  /// 1/sqrt(var + eps)), running stats updated when given; evaluation: the running stats.
  static NormDesc batch_norm(DType dt, const Shape& shape, bool weight, bool bias, bool training, bool running_stats,
                             double momentum, double eps, Direction dir = Direction::Forward);
  /// Statistics per (sample, channel) over *spatial (torch's use_input_stats = training); the
  /// running stats are updated with the mean over the batch of the per-sample statistics.
  static NormDesc instance_norm(DType dt, const Shape& shape, bool weight, bool bias, bool training, bool running_stats,
                                double momentum, double eps, Direction dir = Direction::Forward);
  /// Statistics per (sample, group of C / num_groups channels); parameters per channel.
  static NormDesc group_norm(DType dt, const Shape& shape, int num_groups, bool weight, bool bias, double eps,
                             Direction dir = Direction::Forward);
  /// torch's F.local_response_norm: the window is channels [c - size/2, c + (size-1)/2],
  /// zero-padded, divided by `size` (avg_pool with count_include_pad).
  static NormDesc local_response_norm(DType dt, const Shape& shape, int size, double alpha, double beta, double k,
                                      Direction dir = Direction::Forward);
};

/// Per-call tensors. Which ones a call uses depends on op and direction (unused ones stay
/// default-constructed; an optional output with a null pointer is not written):
///
/// | op / direction   | inputs                                   | outputs                                  |
/// | softmax fw       | x, [mask]                                | out (= y)                                |
/// | softmax bw       | dy, y                                    | out (= dx)                               |
/// | normalize fw/bw  | x / dy, x                                | out (= y / dx)                           |
/// | sparsemax fw/bw  | x / dy, y                                | out (= y / dx)                           |
/// | gumbel_softmax fw| x, [noise], rng                          | out (= y; hard: one-hot), [y_soft] (hard)|
/// | gumbel_softmax bw| dy, y (the soft sample)                  | out (= dx)                               |
/// | norm fw          | x, [residual], [weight], [bias]          | out (= y), [residual_out], [save_mean], [save_rstd]
/// | | norm bw          | dy, x, mean (layer_norm), rstd, [weight] | out (= dx), [dweight], [dbias]           |
/// | channel fw train | x, [weight], [bias], [running_mean, running_var (updated)] | out, [save_mean], [save_rstd] |
/// | channel fw eval  | x, running_mean, running_var, [weight], [bias]             | out                         |
/// | channel bw train | dy, x, mean, rstd, [weight]                                | [out (= dx)], [dweight], [dbias] |
/// | channel bw eval  | dy, x, running_mean, running_var, [weight]                 | [out (= dx)], [dweight], [dbias] |
/// | local_response_norm fw / bw | x / dy, x                                       | out                         |
///
/// Statistics are dense tensors of norm_stats_dtype() with one element per row (any shape of
/// that many elements, e.g. torch's [*batch, 1]). Parameters and their gradients are dense with
/// the normalized shape. Channel ops: one statistic per channel (batch_norm), per (sample,
/// channel) (instance_norm) or per (sample, group) (group_norm), rstd = 1 / sqrt(var + eps)
/// (torch's save_invstd); weight, bias, running stats and their gradients are dense [C] of
/// param_dtype; x, out and dy are [N, C, *spatial] with any strides (planar NCHW and
/// channels-last take vectorized kernels).
///
/// gumbel_softmax: `noise` (optional, x's shape and dtype) is the Gumbel noise g itself, as in
/// torch's formula; without it the kernel draws g = -log(-log(u)) from Philox4x32-10 keyed by
/// `rng` (src/kernels/common/philox.hpp: the same (seed, offset) gives the same noise whatever
/// the strides or the GPU). `y_soft` (hard only, optional) receives the soft sample the backward
/// reads.
struct NormRng {
  uint64_t seed = 0;    ///< Philox key
  uint64_t offset = 0;  ///< selects a disjoint range of counters (the high 64 bits)
};

struct NormArgs {
  TensorRef x;
  TensorRef mask;
  TensorRef residual;
  TensorRef weight;
  TensorRef bias;
  TensorRef dy;
  TensorRef y;
  TensorRef mean;
  TensorRef rstd;
  TensorMut out;
  TensorMut residual_out;
  TensorMut save_mean;
  TensorMut save_rstd;
  TensorMut dweight;
  TensorMut dbias;
  TensorMut running_mean;  ///< batch/instance norm: [C] of param_dtype (read in evaluation)
  TensorMut running_var;
  TensorRef noise;   ///< gumbel_softmax forward: the Gumbel noise (optional)
  TensorMut y_soft;  ///< gumbel_softmax hard forward: the soft sample (optional)
  NormRng rng;       ///< gumbel_softmax forward without `noise`
};

class NormPlan {
 public:
  /// Validates the descriptor and chooses the row mapping (threads per row, register-resident
  /// or streaming). Honours `pref`: backend other than Any/Native, tf32=Require and
  /// reduced_precision_reduction=Require are refused; the kernels are deterministic and
  /// bit-stable (the launch shape depends on the problem only, never on the SM count);
  /// vectorized=Forbid disables the 16-byte path.
  static Result<NormPlan> select(const Target& target, const NormDesc& desc, const PlanPreference& pref = {});
  /// Backward with dweight/dbias: the per-slot partial sums; channel ops: partial sums and
  /// per-channel coefficients (sized for every layout); 0 otherwise.
  size_t workspace_size() const { return workspace_bytes_; }
  Result<void> can_implement(const NormArgs& args) const;
  /// Enqueues on `stream`; never allocates or synchronizes.
  Result<void> run(cudaStream_t stream, Workspace ws, const NormArgs& args) const;
  const KernelSku& sku() const { return sku_; }
  const PrecisionGuarantee& precision() const { return sku_.precision; }
  const NormDesc& desc() const { return desc_; }
  int64_t rows() const { return rows_; }
  int64_t row_length() const { return n_; }
  /// The variant run() takes for these tensors: "<rows>-<registers|streaming>-<vec16|scalar>",
  /// e.g. "warp-registers-vec16", "cta-streaming-scalar", or "empty". Channel ops:
  /// "<smem-rows|planes|pixels|strided>-<vec16|scalar>" (the mapping of [N, C, S], see
  /// channel_launch.hpp), "window-<...>" for local_response_norm.
  std::string layout_for(const NormArgs& args) const;

  // The launch shape, fixed at select (a function of the problem only).
  struct Config {
    int tpr = 32;        ///< threads per row (power of two, 1..512)
    int block = 128;     ///< threads per CTA
    bool big = false;    ///< the large per-thread item count (see kernels)
    int items = 8;       ///< elements per thread per chunk
    bool cached = true;  ///< the row stays in registers between passes
    int slots = 0;       ///< backward parameter gradients: partial-sum rows (0 = none)
    int cluster = 1;     ///< CTAs a row: > 1 = a thread-block cluster holds (or streams) the row
    /// Channel ops (group/instance norm with batch statistics): dynamic shared memory of the
    /// kernel that stages a whole (sample, group) row on chip when its planes are unit-stride
    /// (one read of the input); 0 when the row does not fit (three-kernel path).
    int smem_rows_bytes = 0;
  };
  const Config& config() const { return cfg_; }

 private:
  void select_channel(const Target& target);  ///< select's part for the channel ops
  NormDesc desc_;
  KernelSku sku_;
  Config cfg_;
  int64_t rows_ = 0, n_ = 0;
  size_t workspace_bytes_ = 0;
  bool allow_vectorized_ = true;
};

/// One-line convenience: select (cached per thread by descriptor) and run.
Result<void> norm(cudaStream_t stream, const NormDesc& desc, const NormArgs& args, Workspace ws = {},
                  const PlanPreference& pref = {});

}  // namespace baracuda
