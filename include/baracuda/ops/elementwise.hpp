// The elementwise family (OPS.md B–D): unary math, activations, binary, comparisons, ternary,
// cast and generators, forward and backward, over broadcast and strided tensors.
//
//   auto desc = ElementwiseDesc::make(ElementwiseOp::gelu, DType::bf16, {Shape::of(x.layout)});
//   desc.set_param("approximate", 1);                         // tanh
//   auto plan = ElementwisePlan::select(Target::current().value(), desc);
//   plan->can_implement(args); plan->run(stream, {}, args);
//
// Forward and backward are two directions of one plan (oneDNN's propagation kinds). Backward
// takes grad_output first, then what the op's table row says it needs: DY = nothing more,
// IN = the forward inputs,
// OUT = the forward output only, INOUT = the inputs then the output. It writes one gradient per
// input whose grad_mask bit is set, in input order.
// A gradient whose input was broadcast is reduced back to that input's shape (sum over the
// broadcast axes, in f32/f64) using the plan's workspace.
#pragma once
#include <cuda_runtime_api.h>

#include <array>
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

namespace detail {
struct EwEntry;
}

enum class ElementwiseOp : uint16_t {
#define BARACUDA_EW(name, ...) name,
#include "baracuda/ops/elementwise_ops.def"
#undef BARACUDA_EW
};

enum class OutRule : uint8_t { Same, Bool, Cast };
enum class BackwardNeeds : uint8_t { None, GradOnly, Inputs, Output, InputsAndOutput };

/// One row of elementwise_ops.def.
struct ElementwiseOpInfo {
  ElementwiseOp op;
  const char* name;
  const char* group;
  int nin;
  uint32_t bool_inputs;
  const char* params;  ///< "alpha=1" ...
  DTypeSet fw_dtypes;
  OutRule out;
  BackwardNeeds bw;
  DTypeSet bw_dtypes;
  uint32_t grad_mask;
  double tol;
  /// Number of parameters and their names/defaults, parsed from `params`.
  int num_params() const;
  std::string_view param_name(int i) const;
  double param_default(int i) const;  ///< enumerated params default to 0 (their first choice)
  /// Index of `choice` in an enumerated param ("approximate=none|tanh"), or -1.
  int param_choice(int i, std::string_view choice) const;
  int num_grads() const;  ///< popcount(grad_mask)
};

std::span<const ElementwiseOpInfo> elementwise_ops();
const ElementwiseOpInfo& info(ElementwiseOp op);
std::optional<ElementwiseOp> elementwise_op_from_name(std::string_view name);

/// Broadcasts shapes as torch does (right-aligned; sizes equal or 1). The error names `op`
/// and the two disagreeing operands.
Result<Shape> broadcast_shapes(std::string_view op, std::span<const Shape> shapes);

struct ElementwiseDesc {
  ElementwiseOp op = ElementwiseOp::add;
  Direction direction = Direction::Forward;
  DType dtype = DType::f32;      ///< dtype of the non-bool tensor inputs (cast: source)
  DType out_dtype = DType::f32;  ///< output dtype; must agree with the op's OutRule
  std::array<double, 4> params{};
  std::array<Shape, 3> in_shapes{};  ///< forward inputs' shapes (nin of them)
  Shape out_shape{};                 ///< broadcast of in_shapes (generators: any shape)

  /// Fills out_dtype from the op's rule and params from the table defaults; for generators
  /// `shapes` holds the one output shape. Inputs beyond the shapes given are 0-dim scalars
  /// (shape []), which broadcast like torch's.
  static ElementwiseDesc make(ElementwiseOp op, DType dtype, std::initializer_list<Shape> shapes,
                              Direction dir = Direction::Forward);
  /// Sets a parameter by its table name; fails naming the op and the unknown name.
  Result<void> set_param(std::string_view name, double value);
  Result<void> set_param(std::string_view name, std::string_view choice);
};

/// Per-call tensors. Forward: in = op inputs, out[0] = result. Backward: in = {grad_output,
/// then inputs and/or output as the row's bw column says}, out = one gradient per grad_mask
/// bit, in input order.
struct ElementwiseArgs {
  std::array<TensorRef, 5> in{};
  std::array<TensorMut, 3> out{};
  int nin = 0;
  int nout = 0;
};

class ElementwisePlan {
 public:
  /// Validates the descriptor and chooses the kernel. Honours `pref`: backend other than
  /// Any/Native is refused; the elementwise kernels are deterministic and bit-stable, so those
  /// requirements are always met; Tristate::Forbid on `vectorized` disables the 16-byte path.
  static Result<ElementwisePlan> select(const Target& target, const ElementwiseDesc& desc,
                                        const PlanPreference& pref = {});
  /// Backward gradients of broadcast inputs: required. Forward plans that read a table
  /// (layout "contiguous-lut16"): 256 bytes for its kernel's task counter, optional (given less,
  /// run() takes the direct kernel).
  size_t workspace_size() const { return workspace_bytes_; }
  /// Checks tensors against the descriptor: count, dtypes, shapes, no negative strides, no
  /// self-overlapping outputs, outputs not partially aliasing inputs, footprint within 2^63.
  Result<void> can_implement(const ElementwiseArgs& args) const;
  /// Enqueues on `stream`. Calls can_implement first (cheap, host only). Never allocates or
  /// synchronizes; capture-safe.
  Result<void> run(cudaStream_t stream, Workspace ws, const ElementwiseArgs& args) const;
  const KernelSku& sku() const { return sku_; }
  const PrecisionGuarantee& precision() const { return sku_.precision; }
  const ElementwiseDesc& desc() const { return desc_; }
  /// The kernel variant run() would take for these tensors, given the plan's workspace ("contiguous-lut16",
  /// "contiguous-vec16", "inner-contiguous-vec16", "strided-i32", "strided-i64", "empty").
  std::string_view layout_for(const ElementwiseArgs& args) const;

 private:
  ElementwiseDesc desc_;
  KernelSku sku_;
  const detail::EwEntry* entry_ = nullptr;
  size_t workspace_bytes_ = 0;
  bool allow_vectorized_ = true;
  // 16-bit unary ops that are compute-bound in their direct kernel read a table of all 65536
  // results instead (src/ops/elementwise/lut16.hpp); null when not taken.
  const void* lut_ = nullptr;
  int lut_device_ = -1;
  int num_sms_ = 0;
};

/// One-line convenience: select (cached per thread by descriptor) and run. For callers who
/// do not keep plans. Given less workspace than the plan asks for, it allocates that on `stream`
/// (cudaMallocFromPoolAsync / cudaFreeAsync around the run, from a per-device pool of the
/// library's that keeps up to 1 MiB through synchronizations).
Result<void> elementwise(cudaStream_t stream, const ElementwiseDesc& desc, const ElementwiseArgs& args,
                         Workspace ws = {}, const PlanPreference& pref = {});

/// Splits `t` into two equal halves along `dim` (views; for the gated activations).
Result<std::array<TensorRef, 2>> split_halves(const TensorRef& t, int dim);

}  // namespace baracuda
