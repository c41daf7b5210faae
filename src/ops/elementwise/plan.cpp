// ElementwisePlan: descriptor validation, kernel choice, argument checks and the launch.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "baracuda/ops/elementwise.hpp"
#include "core/ew_iter.hpp"
#include "core/impl_list.hpp"
#include "core/operands.hpp"
#include "core/plan_common.hpp"
#include "ops/elementwise/ew_registry.hpp"
#include "ops/elementwise/lut16.hpp"

namespace baracuda {

// ---- the table -------------------------------------------------------------------------------
namespace {
#include "ops/elementwise/ew_def_begin.inc"
const ElementwiseOpInfo kOps[] = {
#define BARACUDA_EW(name, group, nin, boolin, params, fw, out, bw, bwd, gmask, tol) \
  {ElementwiseOp::name, #name, #group, nin, boolin, params, DTypeSet(fw), out, bw, DTypeSet(bwd), gmask, tol},
#include "baracuda/ops/elementwise_ops.def"
#undef BARACUDA_EW
};
#include "ops/elementwise/ew_def_end.inc"

/// The i-th "name=default" item of a params spec.
std::string_view param_item(const char* spec, int i) {
  std::string_view s(spec);
  for (int k = 0; k < i; ++k) {
    const auto c = s.find(',');
    if (c == std::string_view::npos) return {};
    s.remove_prefix(c + 1);
  }
  const auto c = s.find(',');
  return c == std::string_view::npos ? s : s.substr(0, c);
}


using detail::dtype_list;
using detail::invalid;
using detail::unsupported;

std::string op_label(const ElementwiseDesc& d) {
  return std::string(info(d.op).name) + (d.direction == Direction::Backward ? "_backward" : "");
}
}  // namespace

std::span<const ElementwiseOpInfo> elementwise_ops() { return kOps; }
const ElementwiseOpInfo& info(ElementwiseOp op) { return kOps[static_cast<int>(op)]; }
std::optional<ElementwiseOp> elementwise_op_from_name(std::string_view n) {
  for (const auto& r : kOps)
    if (n == r.name) return r.op;
  return std::nullopt;
}

int ElementwiseOpInfo::num_params() const {
  if (!params || !*params) return 0;
  return 1 + static_cast<int>(std::count(params, params + std::strlen(params), ','));
}
std::string_view ElementwiseOpInfo::param_name(int i) const {
  const auto item = param_item(params, i);
  return item.substr(0, item.find('='));
}
double ElementwiseOpInfo::param_default(int i) const {
  const auto item = param_item(params, i);
  const std::string v(item.substr(item.find('=') + 1));
  if (v.find('|') != std::string::npos) return 0;
  if (v == "inf") return HUGE_VAL;
  if (v == "-inf") return -HUGE_VAL;
  return std::strtod(v.c_str(), nullptr);
}
int ElementwiseOpInfo::param_choice(int i, std::string_view choice) const {
  auto v = param_item(params, i);
  v.remove_prefix(v.find('=') + 1);
  for (int k = 0;; ++k) {
    const auto bar = v.find('|');
    if (v.substr(0, bar) == choice) return k;
    if (bar == std::string_view::npos) return -1;
    v.remove_prefix(bar + 1);
  }
}
int ElementwiseOpInfo::num_grads() const { return __builtin_popcount(grad_mask); }

// ---- shapes ------------------------------------------------------------------------------------
Result<Shape> broadcast_shapes(std::string_view op, std::span<const Shape> shapes) {
  Shape out;
  for (size_t k = 0; k < shapes.size(); ++k) {  // before anything indexes dims[]
    if (shapes[k].rank > kMaxRank || shapes[k].rank < 0)
      return invalid(std::string(op) + ": input " + std::to_string(k) + " has rank " +
                     std::to_string(shapes[k].rank) + " (expected 0..8; rank > 8 is not supported)");
    out.rank = std::max(out.rank, shapes[k].rank);
  }
  for (int d = 0; d < out.rank; ++d) out.dims[d] = 1;
  for (size_t k = 0; k < shapes.size(); ++k) {
    const Shape& s = shapes[k];
    for (int i = 0; i < s.rank; ++i) {
      const int d = out.rank - s.rank + i;
      const int64_t v = s.dims[i];
      if (v < 0)
        return invalid(std::string(op) + ": input " + std::to_string(k) + " has negative size " + std::to_string(v) +
                       " in shape " + s.str());
      if (v == out.dims[d] || v == 1) continue;
      if (out.dims[d] == 1) {
        out.dims[d] = v;
        continue;
      }
      return invalid(std::string(op) + ": shapes do not broadcast: input " + std::to_string(k) + " " + s.str() +
                     " vs size " + std::to_string(out.dims[d]) + " at dim " + std::to_string(d) +
                     " of the other inputs");
    }
  }
  return out;
}

// ---- descriptor --------------------------------------------------------------------------------
ElementwiseDesc ElementwiseDesc::make(ElementwiseOp op, DType dtype, std::initializer_list<Shape> shapes,
                                      Direction dir) {
  const auto& in = info(op);
  ElementwiseDesc d;
  d.op = op;
  d.direction = dir;
  d.dtype = dtype;
  d.out_dtype = in.out == OutRule::Bool ? DType::b8 : dtype;
  for (int i = 0; i < in.num_params() && i < 4; ++i) d.params[i] = in.param_default(i);
  if (in.nin == 0) {
    if (shapes.size() > 0) d.out_shape = *shapes.begin();
  } else {
    int k = 0;
    for (const auto& s : shapes)
      if (k < 3) d.in_shapes[k++] = s;
    auto b = broadcast_shapes(in.name, std::span<const Shape>(d.in_shapes.data(), static_cast<size_t>(k)));
    if (b) d.out_shape = *b;
  }
  return d;
}

Result<void> ElementwiseDesc::set_param(std::string_view pname, double value) {
  const auto& in = info(op);
  for (int i = 0; i < in.num_params(); ++i)
    if (in.param_name(i) == pname) {
      params[i] = value;
      return {};
    }
  return invalid(std::string(in.name) + ": unknown parameter '" + std::string(pname) + "' (expected one of \"" +
                 in.params + "\")");
}

Result<void> ElementwiseDesc::set_param(std::string_view pname, std::string_view choice) {
  const auto& in = info(op);
  for (int i = 0; i < in.num_params(); ++i)
    if (in.param_name(i) == pname) {
      const int c = in.param_choice(i, choice);
      if (c < 0)
        return invalid(std::string(in.name) + ": parameter '" + std::string(pname) + "' expected one of \"" +
                       std::string(param_item(in.params, i)) + "\", got '" + std::string(choice) + "'");
      params[i] = c;
      return {};
    }
  return set_param(pname, 0.0);  // reports the unknown name
}

// ---- select --------------------------------------------------------------------------------------
namespace {
size_t align256(size_t n) { return (n + 255) / 256 * 256; }

/// Gradients that need a sum over broadcast dims get a dense out_shape slice of workspace.
bool grad_needs_reduction(const ElementwiseDesc& d, int input) {
  return d.in_shapes[input].numel() != d.out_shape.numel();
}

DType math_dtype(DType t) {
  switch (t) {
    case DType::f16: case DType::bf16: case DType::f8e4m3: case DType::f8e5m2: return DType::f32;
    default: return t;
  }
}

Result<void> check_params(const ElementwiseDesc& d) {
  const auto& in = info(d.op);
  for (int i = 0; i < in.num_params(); ++i) {
    const double v = d.params[i];
    const std::string_view pn = in.param_name(i);
    if (std::isnan(v) && pn != "nan")
      return invalid(std::string(in.name) + ": parameter '" + std::string(pn) + "' must not be NaN");
  }
  auto need_int = [&](std::string_view pn, double lo, double v) -> Result<void> {
    if (v != std::floor(v) || v < lo)
      return invalid(std::string(in.name) + ": parameter '" + std::string(pn) + "' expected an integer >= " +
                     std::to_string(static_cast<long long>(lo)) + ", got " + std::to_string(v));
    return {};
  };
  switch (d.op) {
    case ElementwiseOp::polygamma: return need_int("n", 0, d.params[0]);
    case ElementwiseOp::round: return need_int("decimals", -308, d.params[0]);
    case ElementwiseOp::linspace: case ElementwiseOp::logspace: {
      BARACUDA_TRY(need_int("steps", 0, d.params[2]));
      if (static_cast<int64_t>(d.params[2]) != d.out_shape.numel())
        return invalid(std::string(in.name) + ": steps=" + std::to_string(static_cast<long long>(d.params[2])) +
                       " but the output has " + std::to_string(d.out_shape.numel()) + " elements");
      return {};
    }
    case ElementwiseOp::eye: {
      BARACUDA_TRY(need_int("cols", 1, d.params[0]));
      if (d.out_shape.rank != 2 || d.out_shape.dims[1] != static_cast<int64_t>(d.params[0]))
        return invalid("eye: expected a 2-D output with cols=" + std::to_string(static_cast<long long>(d.params[0])) +
                       " columns, got " + d.out_shape.str());
      return {};
    }
    case ElementwiseOp::celu:
      if (d.params[0] == 0) return invalid("celu: parameter 'alpha' must not be 0 (it divides the input)");
      return {};
    case ElementwiseOp::softplus:
      if (d.params[0] == 0) return invalid("softplus: parameter 'beta' must not be 0");
      return {};
    case ElementwiseOp::rrelu_train: {
      if (!(d.params[0] <= d.params[1]) || std::isinf(d.params[0]) || std::isinf(d.params[1]))
        return invalid("rrelu_train: expected finite lower <= upper, got lower=" + std::to_string(d.params[0]) +
                       ", upper=" + std::to_string(d.params[1]));
      // The Philox key and counter travel as doubles: integers up to 2^53 are exact.
      constexpr double kMax = 9007199254740992.0;
      for (int i : {2, 3})
        if (d.params[i] > kMax)
          return invalid("rrelu_train: parameter '" + std::string(in.param_name(i)) +
                         "' expected an integer in [0, 2^53], got " + std::to_string(d.params[i]));
      BARACUDA_TRY(need_int("seed", 0, d.params[2]));
      return need_int("offset", 0, d.params[3]);
    }
    default: return {};
  }
}
}  // namespace

// ---- implementations, in preference order --------------------------------------------------------
namespace {
/// The generic engine (vectorized / strided-32 / strided-64 variants chosen per call).
Result<void> native_accepts(const Target& target, const ElementwiseDesc& desc, const PlanPreference& pref) {
  const auto& in = info(desc.op);
  const std::string label = op_label(desc);
  const bool bw = desc.direction == Direction::Backward;
  // Preferences: honoured or refused, never ignored.
  if (pref.backend != Backend::Any && pref.backend != Backend::Native)
    return unsupported(label + ": preference backend=" + to_string(pref.backend) +
                       " cannot be honoured (elementwise ops have only the native backend)");
  if (pref.tf32 == Tristate::Require)
    return unsupported(label + ": preference tf32=Require cannot be honoured (elementwise math has no TF32 mode)");
  if (pref.reduced_precision_reduction == Tristate::Require)
    return unsupported(label + ": preference reduced_precision_reduction=Require cannot be honoured "
                               "(broadcast-gradient sums accumulate in f32/f64)");
  if (target.sm < 80)
    return unsupported(label + ": target sm_" + std::to_string(target.sm) + " is below the minimum sm_80");

  // Direction and dtypes.
  if (bw && in.bw == BackwardNeeds::None)
    return unsupported(label + ": '" + in.name + "' is not differentiable (no backward)");
  const DTypeSet allowed = bw ? in.bw_dtypes : in.fw_dtypes;
  if (!contains(allowed, desc.dtype))
    return unsupported(label + ": dtype expected one of {" + dtype_list(allowed) + "}, got " +
                       std::string(name(desc.dtype)));
  DType expect_out = desc.dtype;
  if (!bw && in.out == OutRule::Bool) expect_out = DType::b8;
  if (!bw && in.out == OutRule::Cast) {
    if (!contains(dtypes::kAll, desc.out_dtype))
      return unsupported(label + ": out_dtype expected one of {" + dtype_list(dtypes::kAll) + "}, got " +
                         std::string(name(desc.out_dtype)));
    expect_out = desc.out_dtype;
  }
  if (desc.out_dtype != expect_out)
    return invalid(label + ": out_dtype expected " + std::string(name(expect_out)) + ", got " +
                   std::string(name(desc.out_dtype)));

  if (!detail::ew_find(desc.op, desc.direction, desc.dtype, bw ? desc.dtype : desc.out_dtype))
    return unsupported(label + ": no kernel registered for " + std::string(name(desc.dtype)) + " -> " +
                       std::string(name(desc.out_dtype)));
  return {};
}

struct EwImpl {
  const char* name;
  Result<void> (*accepts)(const Target&, const ElementwiseDesc&, const PlanPreference&);
};
constexpr EwImpl kEwImpls[] = {{"native-engine", native_accepts}};
}  // namespace

namespace {
detail::EwParams ew_params(const ElementwiseDesc& d) {
  detail::EwParams p{};
  for (int i = 0; i < 4; ++i) {
    p.d[i] = d.params[i];
    p.f[i] = static_cast<float>(d.params[i]);
  }
  return p;
}
/// Forward 16-bit unary ops that read a table of their results (lut16.hpp) on `device`: those
/// whose direct kernel issues more instructions an element than the device can at copy bandwidth.
bool lut16_op(const ElementwiseDesc& d, int device) {
  return d.direction == Direction::Forward && (d.dtype == DType::bf16 || d.dtype == DType::f16) &&
         d.out_dtype == d.dtype && detail::ew_lut16_cost(d.op) > detail::ew_issue_budget(device);
}
/// The table's conditions on the tensors of a call (beyond the plan's): one contiguous,
/// 16-byte-aligned run of elements for input and output, on the device the table lives on.
bool lut16_fits(const detail::EwIter& it, int lut_device) {
  if (!it.contiguous || it.scalar_mask != 0 || !it.aligned16 || it.numel > detail::kLut16MaxNumel) return false;
  int dev = -1;
  return cudaGetDevice(&dev) == cudaSuccess && dev == lut_device;
}
}  // namespace

Result<ElementwisePlan> ElementwisePlan::select(const Target& target, const ElementwiseDesc& desc,
                                                const PlanPreference& pref) {
  if (static_cast<size_t>(desc.op) >= std::size(kOps))
    return invalid("elementwise: op id " + std::to_string(static_cast<int>(desc.op)) + " is out of range");
  const auto& in = info(desc.op);
  const std::string label = op_label(desc);
  const bool bw = desc.direction == Direction::Backward;

  // Shapes. out_shape first: its messages print it, and a wrapped element count would make a huge
  // problem look small.
  BARACUDA_TRY(detail::check_shape(label, "out_shape", desc.out_shape));
  if (in.nin > 0) {
    auto b = broadcast_shapes(label, std::span<const Shape>(desc.in_shapes.data(), static_cast<size_t>(in.nin)));
    if (!b) return b.error();
    if (!(*b == desc.out_shape))
      return invalid(label + ": out_shape expected " + b->str() + " (the broadcast of the inputs), got " +
                     desc.out_shape.str());
  }
  BARACUDA_TRY(check_params(desc));

  auto impl = detail::first_accepting<EwImpl>(label, kEwImpls, target, desc, pref);
  if (!impl) return impl.error();
  const detail::EwEntry* e = detail::ew_find(desc.op, desc.direction, desc.dtype, bw ? desc.dtype : desc.out_dtype);

  ElementwisePlan p;
  p.desc_ = desc;
  p.entry_ = e;
  p.allow_vectorized_ = pref.vectorized != Tristate::Forbid;
  p.sku_.category = "elementwise";
  p.sku_.op = label;
  p.sku_.dtypes = std::string(name(desc.dtype)) + "->" + std::string(name(bw ? desc.dtype : desc.out_dtype));
  p.sku_.arch = target.sm >= 90 ? "sm_90a" : "sm_80";
  p.sku_.backend = Backend::Native;
  p.sku_.layout = p.allow_vectorized_ ? "auto (vec16|strided-i32|strided-i64)" : "strided (vectorization forbidden)";
  p.sku_.precision.math = math_dtype(desc.dtype);
  p.sku_.precision.accumulator = desc.dtype == DType::f64 ? DType::f64 : math_dtype(desc.dtype);
  p.sku_.precision.deterministic = true;
  p.sku_.precision.bit_stable = true;
  if (desc.op == ElementwiseOp::gelu || desc.op == ElementwiseOp::geglu)
  {
    const bool short_form = desc.dtype == DType::f16 || desc.dtype == DType::bf16;  // functors.cuh kGeluShort
    if (desc.params[0] != 0)
      p.sku_.precision.note = short_form ? "tanh approximation, as x*sigmoid(2u) on the MUFU ex2/rcp (~1e-6 rel. in f32)"
                                         : "tanh approximation";
    else
      p.sku_.precision.note = short_form ? "erf gelu, Phi by Abramowitz-Stegun 7.1.26 (|err| <= 1.5e-7 before rounding)"
                                         : "exact erf";
  }
  // short_math.cuh: 16-bit storage evaluates the ops marked SHORT16 in functors.cuh with MUFU-based
  // short forms (relative error ~1e-7..1e-6 in f32 before rounding to 8/11 bits); lgamma/digamma/
  // trigamma also replace libdevice / torch's recurrences in f32 (MUFU log / reciprocal: <= 18 ulp).
  if (e != nullptr && e->short16)
    p.sku_.precision.note = "short form for 16-bit storage (MUFU exp2/log2/rcp, ~1e-6 rel. in f32 before rounding)";
  else if (desc.dtype == DType::f32 &&
           (desc.op == ElementwiseOp::lgamma || desc.op == ElementwiseOp::digamma || desc.op == ElementwiseOp::polygamma))
    p.sku_.precision.note = "own f32 lgamma/digamma/trigamma series with MUFU log/reciprocal (<= 18 f32 ulp where "
                            "|result| >= 0.5, ~1e-6 absolute near the roots; polygamma n >= 2: zeta)";
  if (desc.dtype == DType::f32 && desc.op == ElementwiseOp::erfc)
    p.sku_.precision.note = "own f32 erfc (exp2(-c x^2) times a degree-10 polynomial in 1 / (1 + 0.53 |x|), one "
                            "MUFU ex2 and reciprocal: <= 3.1 ulp on the host model; subnormal results kept)";
  if (desc.dtype == DType::f32 && desc.op == ElementwiseOp::pow)
    p.sku_.precision.note = "own f32 pow (float-float log2, polynomial exp2: <= 2 ulp; libdevice powf for a <= 0, "
                            "non-finite operands and results past 2^+-125.5)";
  if (desc.op == ElementwiseOp::rrelu_train)
    p.sku_.precision.note = "slopes from Philox4x32-10 keyed by (seed, offset) at the element's logical index "
                            "(23-bit grid, 16 bits for 16-bit storage; independent of strides and launch shape; "
                            "the backward regenerates them)";
  if (desc.op == ElementwiseOp::cast)
    p.sku_.precision.note = desc.params[0] != 0 ? "saturating to the finite range" : "torch overflow rules";
  if (p.allow_vectorized_ && desc.out_shape.numel() >= detail::kLut16MinNumel && target.device >= 0 &&
      lut16_op(desc, target.device)) {
    int dev = -1;
    if (cudaGetDevice(&dev) == cudaSuccess && dev == target.device) {
      p.lut_ = detail::ew_lut16_table(e, ew_params(desc));
      p.lut_device_ = dev;
      p.num_sms_ = target.num_sms;
    } else {
      (void)cudaGetLastError();
    }
    if (p.lut_) {
      p.workspace_bytes_ = detail::kLut16WorkspaceBytes;  // optional: the table kernel's task counter
      p.sku_.layout = "auto (lut16|vec16|strided-i32|strided-i64)";
      p.sku_.precision.note += "; contiguous tensors read a table of this kernel's results for all 65536 inputs "
                               "(bit-identical)";
    }
  }
  if (bw) {
    size_t ws = 0;
    int gi = 0;
    for (int i = 0; i < in.nin; ++i) {
      if (!((in.grad_mask >> i) & 1)) continue;
      if (grad_needs_reduction(desc, i))
        ws += align256(static_cast<size_t>(desc.out_shape.numel()) * static_cast<size_t>(size_in_bytes(desc.dtype)));
      ++gi;
    }
    p.workspace_bytes_ = ws;
    if (ws) p.sku_.epilogue = "sum-to-shape (f32 accumulate, fixed order)";
  }
  return p;
}

// ---- argument checks -----------------------------------------------------------------------------
Result<void> ElementwisePlan::can_implement(const ElementwiseArgs& a) const {
  const auto& in = info(desc_.op);
  const std::string label = op_label(desc_);
  const bool bw = desc_.direction == Direction::Backward;

  // Expected operands.
  std::vector<detail::Operand> ops;  // at most 5 inputs + 3 outputs: reserved, no regrowth on every call's path
  std::vector<Shape> want;
  ops.reserve(8);
  want.reserve(8);
  int want_nin = in.nin, want_nout = 1;
  if (bw) {
    const bool needs_in = in.bw == BackwardNeeds::Inputs || in.bw == BackwardNeeds::InputsAndOutput;
    const bool needs_out = in.bw == BackwardNeeds::Output || in.bw == BackwardNeeds::InputsAndOutput;
    want_nin = 1 + (needs_in ? in.nin : 0) + (needs_out ? 1 : 0);
    want_nout = in.num_grads();
  }
  if (a.nin != want_nin || a.nout != want_nout)
    return invalid(label + ": expected " + std::to_string(want_nin) + " input tensor(s) and " +
                   std::to_string(want_nout) + " output tensor(s), got " + std::to_string(a.nin) + " and " +
                   std::to_string(a.nout));

  auto role = [](const char* r, int idx) { return std::string(r) + (idx >= 0 ? "[" + std::to_string(idx) + "]" : ""); };
  auto add_in = [&](int k, const char* r, int idx, DType dt, const Shape& s) {
    ops.push_back({role(r, idx), a.in[k].data, dt, &a.in[k].layout, false});
    want.push_back(s);
  };
  std::vector<DType> want_dt;
  want_dt.reserve(8);
  if (!bw) {
    for (int i = 0; i < in.nin; ++i) {
      const DType dt = ((in.bool_inputs >> i) & 1) ? DType::b8 : desc_.dtype;
      add_in(i, "input", i, dt, desc_.in_shapes[i]);
      want_dt.push_back(dt);
    }
    ops.push_back({"output", a.out[0].data, desc_.out_dtype, &a.out[0].layout, true});
    want.push_back(desc_.out_shape);
    want_dt.push_back(desc_.out_dtype);
  } else {
    int k = 0;
    add_in(k++, "grad_output", -1, desc_.dtype, desc_.out_shape);
    want_dt.push_back(desc_.dtype);
    const bool needs_in = in.bw == BackwardNeeds::Inputs || in.bw == BackwardNeeds::InputsAndOutput;
    const bool needs_out = in.bw == BackwardNeeds::Output || in.bw == BackwardNeeds::InputsAndOutput;
    if (needs_in)
      for (int i = 0; i < in.nin; ++i) {
        const DType dt = ((in.bool_inputs >> i) & 1) ? DType::b8 : desc_.dtype;
        add_in(k++, "input", i, dt, desc_.in_shapes[i]);
        want_dt.push_back(dt);
      }
    if (needs_out) {
      add_in(k++, "output", -1, desc_.dtype, desc_.out_shape);
      want_dt.push_back(desc_.dtype);
    }
    int g = 0;
    for (int i = 0; i < in.nin; ++i) {
      if (!((in.grad_mask >> i) & 1)) continue;
      ops.push_back({role("grad_input", i), a.out[g].data, desc_.dtype, &a.out[g].layout, true});
      want.push_back(desc_.in_shapes[i]);
      want_dt.push_back(desc_.dtype);
      ++g;
    }
  }
  // The tensors given, in the same order as `ops`.
  std::vector<DType> got_dt;
  got_dt.reserve(8);
  for (int k = 0; k < a.nin; ++k) got_dt.push_back(a.in[k].dtype);
  for (int k = 0; k < a.nout; ++k) got_dt.push_back(a.out[k].dtype);

  for (size_t k = 0; k < ops.size(); ++k) {
    const detail::Operand& o = ops[k];
    if (got_dt[k] != want_dt[k])
      return invalid(label + ": " + o.role + " dtype expected " + std::string(name(want_dt[k])) + ", got " +
                     std::string(name(got_dt[k])));
    if (!(Shape::of(*o.layout) == want[k]))
      return invalid(label + ": " + o.role + " shape expected " + want[k].str() + ", got " + o.layout->shape_str());
  }
  // Footprints, null data, self-overlapping outputs; outputs may only be exactly an input (in place).
  BARACUDA_TRY(detail::check_operands(label, ops));
  return {};
}

namespace {
/// The operands run() hands to the engine: gradients of broadcast inputs are redirected to
/// dense slices of the workspace (summed into the real gradient afterwards).
struct Launch {
  std::array<TensorMut, 3> outs{};
  std::array<int, 3> reduce_input{-1, -1, -1};
};
Launch plan_launch(const ElementwiseDesc& desc, const ElementwiseArgs& a, void* ws) {
  Launch l;
  const auto& in = info(desc.op);
  const Shape& s = desc.out_shape;
  for (int k = 0; k < a.nout; ++k) l.outs[k] = a.out[k];
  if (desc.direction != Direction::Backward) return l;
  char* wsp = static_cast<char*>(ws);
  int g = 0;
  for (int i = 0; i < in.nin; ++i) {
    if (!((in.grad_mask >> i) & 1)) continue;
    if (grad_needs_reduction(desc, i)) {
      l.outs[g] = TensorMut{wsp, desc.dtype, Layout::contiguous(s.rank, s.dims.data())};
      if (wsp) wsp += align256(static_cast<size_t>(s.numel()) * static_cast<size_t>(size_in_bytes(desc.dtype)));
      l.reduce_input[g] = i;
    }
    ++g;
  }
  return l;
}
/// keep_order: the kernel reads each element's logical index (generators, INDEXED ops), so the
/// iteration keeps the output's logical dim order instead of its memory order.
detail::EwIter plan_iter(const ElementwiseDesc& desc, const ElementwiseArgs& a, const Launch& l, bool keep_order) {
  const Shape& s = desc.out_shape;
  return detail::make_ew_iter(std::span<const TensorMut>(l.outs.data(), static_cast<size_t>(a.nout)),
                              std::span<const TensorRef>(a.in.data(), static_cast<size_t>(a.nin)), s.rank,
                              s.dims.data(), keep_order);
}
}  // namespace

std::string_view ElementwisePlan::layout_for(const ElementwiseArgs& a) const {
  if (desc_.out_shape.numel() == 0) return "empty";
  // Workspace slices are 256-byte aligned: a fake aligned base gives the same decision.
  const Launch l = plan_launch(desc_, a, reinterpret_cast<void*>(uintptr_t{256}));
  const auto it = plan_iter(desc_, a, l, entry_->indexed);
  if (lut_ && lut16_fits(it, lut_device_)) return "contiguous-lut16";
  if (allow_vectorized_ && detail::ew_can_vectorize(it, entry_->vec))
    return it.rank <= 1                                                ? "contiguous-vec16"
           : entry_->row_bcast && detail::ew_row_periodic_mask(it) != 0 ? "row-broadcast-vec16"
                                                                         : "inner-contiguous-vec16";
  return it.fits_i32 ? "strided-i32" : "strided-i64";
}

Result<void> ElementwisePlan::run(cudaStream_t stream, Workspace ws, const ElementwiseArgs& a) const {
  BARACUDA_TRY(can_implement(a));
  auto label = [&] { return op_label(desc_); };  // built only for a message: run is on every call's path
  const Shape& s = desc_.out_shape;
  if (s.numel() == 0) return {};
  // A table plan's workspace (its kernel's task counter) is optional: without it the direct
  // kernel runs. Every other plan's workspace is required.
  const bool have_ws = ws.bytes >= workspace_bytes_ && (workspace_bytes_ == 0 || ws.ptr);
  const size_t required = lut_ ? 0 : workspace_bytes_;
  if (ws.bytes < required || (required && !ws.ptr))
    return make_error(Status::WorkspaceTooSmall, label() + ": workspace expected >= " + std::to_string(workspace_bytes_) +
                                                     " bytes, got " + std::to_string(ws.bytes));
  const detail::EwParams p = ew_params(desc_);
  // Gradients of broadcast inputs go to dense workspace slices first.
  const Launch l = plan_launch(desc_, a, ws.ptr);
  const auto it = plan_iter(desc_, a, l, entry_->indexed);
  // The counter is a 4-byte atomic: a misaligned caller buffer takes the direct kernel too.
  const bool lut_ws = have_ws && ws.ptr && reinterpret_cast<uintptr_t>(ws.ptr) % sizeof(unsigned) == 0;
  cudaError_t e = lut_ && lut_ws && lut16_fits(it, lut_device_)
                      ? detail::ew_lut16_launch(static_cast<const uint16_t*>(lut_), it.ptr[1], it.ptr[0], it.numel,
                                                num_sms_, ws.ptr, stream)
                      : entry_->launch(it, p, allow_vectorized_, stream);
  if (e != cudaSuccess) return make_error(Status::CudaError, label() + ": kernel launch failed: " + cudaGetErrorString(e));
  for (int g = 0; g < a.nout; ++g) {
    if (l.reduce_input[g] < 0) continue;
    e = detail::ew_sum_to_shape(desc_.dtype, l.outs[g].data, s, a.out[g], stream);
    if (e != cudaSuccess)
      return make_error(Status::CudaError, label() + ": gradient reduction failed: " + cudaGetErrorString(e));
  }
  return {};
}

// ---- convenience ---------------------------------------------------------------------------------
namespace {
std::string desc_key(const ElementwiseDesc& d) {
  std::string k(reinterpret_cast<const char*>(&d.op), sizeof(d.op));
  k.append(reinterpret_cast<const char*>(&d.direction), sizeof(d.direction));
  k.append(reinterpret_cast<const char*>(&d.dtype), sizeof(d.dtype));
  k.append(reinterpret_cast<const char*>(&d.out_dtype), sizeof(d.out_dtype));
  k.append(reinterpret_cast<const char*>(d.params.data()), sizeof(d.params));
  for (const auto* s : {&d.in_shapes[0], &d.in_shapes[1], &d.in_shapes[2], &d.out_shape}) {
    k.append(reinterpret_cast<const char*>(&s->rank), sizeof(s->rank));
    k.append(reinterpret_cast<const char*>(s->dims.data()), sizeof(int64_t) * static_cast<size_t>(s->rank));
  }
  return k;
}
}  // namespace

namespace {
/// The one-line form's workspace pool on `device`, created on first use and kept for the process's
/// lifetime. It keeps up to 1 MiB of what it has freed (its release threshold), so a synchronize
/// between calls does not hand the memory back to the driver to be mapped again on the next call,
/// as the device's default pool (threshold 0) would. Created in relaxed capture mode: another
/// thread's capture must not be invalidated by it. nullptr where the device has no memory pools.
cudaMemPool_t workspace_pool(int device) {
  static std::mutex m;
  static std::map<int, cudaMemPool_t> pools;
  const std::lock_guard<std::mutex> lock(m);
  if (const auto it = pools.find(device); it != pools.end()) return it->second;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  const bool relaxed = cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess;
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  cudaMemPool_t pool = nullptr;
  if (cudaMemPoolCreate(&pool, &props) == cudaSuccess) {
    uint64_t keep = uint64_t{1} << 20;
    if (cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep) != cudaSuccess) (void)cudaGetLastError();
  } else {
    (void)cudaGetLastError();
    pool = nullptr;
  }
  if (relaxed) cudaThreadExchangeStreamCaptureMode(&mode);
  pools.emplace(device, pool);
  return pool;
}
}  // namespace

Result<void> elementwise(cudaStream_t stream, const ElementwiseDesc& desc, const ElementwiseArgs& args, Workspace ws,
                         const PlanPreference& pref) {
  auto plan = detail::cached_plan<ElementwisePlan>(
      desc_key(desc), pref, [&](const Target& t) { return ElementwisePlan::select(t, desc, pref); });
  if (!plan) return plan.error();
  const size_t need = (*plan)->workspace_size();
  if (ws.bytes >= need && (need == 0 || ws.ptr)) return (*plan)->run(stream, ws, args);
  // A smaller caller buffer: a stream-ordered allocation of what the plan asks for (capturable:
  // an allocation node). Refused, the plan runs with the caller's buffer.
  void* p = nullptr;
  int dev = -1;
  const cudaMemPool_t pool = cudaGetDevice(&dev) == cudaSuccess ? workspace_pool(dev) : nullptr;
  if ((pool ? cudaMallocFromPoolAsync(&p, need, pool, stream) : cudaMallocAsync(&p, need, stream)) != cudaSuccess) {
    (void)cudaGetLastError();
    return (*plan)->run(stream, ws, args);
  }
  Result<void> r = (*plan)->run(stream, Workspace{p, need}, args);
  if (cudaFreeAsync(p, stream) != cudaSuccess) (void)cudaGetLastError();
  return r;
}

Result<std::array<TensorRef, 2>> split_halves(const TensorRef& t, int dim) {
  if (dim < 0) dim += t.rank();
  if (dim < 0 || dim >= t.rank())
    return invalid("split_halves: dim expected in [-" + std::to_string(t.rank()) + ", " + std::to_string(t.rank()) +
                   "), got " + std::to_string(dim));
  if (t.size(dim) % 2 != 0)
    return invalid("split_halves: size of dim " + std::to_string(dim) + " expected even, got " +
                   std::to_string(t.size(dim)));
  std::array<TensorRef, 2> h{t, t};
  const int64_t half = t.size(dim) / 2;
  h[0].layout.shape[dim] = half;
  h[1].layout.shape[dim] = half;
  h[1].data = static_cast<const char*>(t.data) + half * t.stride(dim) * size_in_bytes(t.dtype);
  return h;
}

}  // namespace baracuda
