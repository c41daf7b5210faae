// baracuda._C bindings of the loss family (include/baracuda/ops/loss.hpp). Tensors arrive by role
// in a dict: the op's inputs by their table names ({"input": x, "target": t, "weight": w}, see
// loss_ops()), "dy", "lse", "total_weight", "out", "save_lse", "save_total_weight", "error", and
// the gradients as "grad_<input name>" ({"grad_input": dx}); scalar parameters by table name in a
// second dict. The descriptor is derived from them: dtype from the first input, shapes and the
// optional inputs from what is present, the target's dtype from the tensor named "target" (class
// indices, or cross_entropy's probabilities; the other ops' targets have the input's dtype).
// `tf32` lets linear_cross_entropy's float32 GEMMs use TF32 (torch's allow_tf32 flag).
#include <cuda_runtime_api.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <string>
#include <vector>

#include "baracuda/ops/loss.hpp"
#include "ext_common.hpp"

namespace nb = nanobind;
using namespace baracuda;
using namespace baracuda::py;

namespace {

struct LossCall {
  std::string label;
  LossDesc desc;
  LossArgs args;
  std::vector<View> views;  ///< keeps the DLPack exports alive for the call
  int device = -1;
};

const char* const kExtraIn[] = {"dy", "lse", "total_weight"};
const char* const kExtraOut[] = {"out", "save_lse", "save_total_weight", "error"};

std::string role_list(const LossOpInfo& in) {
  std::string s;
  for (int k = 0; k < in.num_inputs(); ++k) s += (s.empty() ? "" : ", ") + in.input_name(k);
  for (const char* r : kExtraIn) s += std::string(", ") + r;
  for (const char* r : kExtraOut) s += std::string(", ") + r;
  for (int g = 0; g < in.num_grads(); ++g) s += ", grad_" + in.grad_name(g);
  return s;
}

LossCall make_call(const std::string& op, bool backward, const nb::dict& tensors, const nb::dict& params,
                   const std::string& reduction, bool fused_grad) {
  LossCall c;
  const auto o = loss_op_from_name(op);
  if (!o) fail("baracuda: unknown loss op '" + op + "'");
  const auto& in = info(*o);
  c.label = op + (backward ? "_backward" : "");
  const auto r = reduction_from_name(reduction);
  if (!r) fail(c.label + ": reduction expected one of none, mean, sum, batchmean, got '" + reduction + "'");
  TensorRef* extra_in[] = {&c.args.dy, &c.args.lse, &c.args.total_weight};
  TensorMut* extra_out[] = {&c.args.out, &c.args.save_lse, &c.args.save_total_weight, &c.args.error};
  uint8_t present = 0;
  for (auto [k, v] : tensors) {
    const std::string key = nb::cast<std::string>(k);
    if (v.is_none()) continue;
    auto take = [&](const char* role, bool writable) {
      View view = to_view(c.label, v, role, 0, writable);
      if (c.device < 0) c.device = view.device;
      const TensorMut t = view.t;
      c.views.push_back(std::move(view));
      return t;
    };
    bool known = false;
    const int ki = in.input_index(key);
    if (ki >= 0 && ki < kLossMaxInputs) {
      c.args.in[ki] = take(key.c_str(), false);
      present |= uint8_t(1u << ki);
      known = true;
    }
    for (size_t i = 0; i < std::size(kExtraIn) && !known; ++i)
      if (key == kExtraIn[i]) {
        *extra_in[i] = take(kExtraIn[i], false);
        known = true;
      }
    for (size_t i = 0; i < std::size(kExtraOut) && !known; ++i)
      if (key == kExtraOut[i]) {
        *extra_out[i] = take(kExtraOut[i], true);
        known = true;
      }
    for (int g = 0; g < in.num_grads() && g < kLossMaxGrads && !known; ++g)
      if (key == "grad_" + in.grad_name(g)) {
        c.args.grad[g] = take(key.c_str(), true);
        known = true;
      }
    if (!known) fail(c.label + ": unknown tensor role '" + key + "' (expected one of " + role_list(in) + ")");
  }
  const Direction dir = backward ? Direction::Backward : Direction::Forward;
  // The backward of a fused cross_entropy forward reads dy and the gradient only (the logits are not
  // kept): the descriptor takes the input's shape from grad_input, a class-index target of that shape.
  const bool rescale =
      backward && fused_grad && !(present & 1) && in.kind == LossKind::classes && c.args.grad[0].data != nullptr;
  if (!(present & 1) && !rescale) fail(c.label + ": expected a '" + in.input_name(0) + "' tensor");
  if (rescale) {
    const TensorMut& g = c.args.grad[0];
    c.desc = LossDesc::cross_entropy(g.dtype, Shape::of(g.layout), DType::s64, false, *r, -100, 0.0, dir);
    c.desc.op = *o;
  } else {
    c.desc = LossDesc::make(*o, c.args.in[0].dtype, {}, *r, dir);
    c.desc.present = present;
    for (int k = 0; k < kLossMaxInputs; ++k)
      if (present & (1u << k)) c.desc.shapes[k] = Shape::of(c.args.in[k].layout);
    const int ti = in.input_index("target");
    if (ti >= 0 && ti < kLossMaxInputs && (present & (1u << ti))) c.desc.target_dtype = c.args.in[ti].dtype;
  }
  c.desc.fused_grad = fused_grad;
  for (auto [k, v] : params) {
    const std::string key = nb::cast<std::string>(k);
    if (v.is_none()) continue;
    unwrap(c.desc.set_param(key, nb::cast<double>(v)));
  }
  return c;
}

PlanPreference pref_of(bool vectorized, bool tf32) {
  PlanPreference p;
  if (!vectorized) p.vectorized = Tristate::Forbid;
  if (tf32) p.tf32 = Tristate::Require;
  return p;
}

const char* kind_name(LossKind k) {
  switch (k) {
    case LossKind::classes:
      return "classes";
    case LossKind::pointwise:
      return "pointwise";
    case LossKind::linear:
      return "linear";
    case LossKind::rows:
      return "rows";
    case LossKind::ctc:
      return "ctc";
  }
  return "?";
}

nb::list loss_ops_rows() {
  nb::list rows;
  for (const auto& r : loss_ops()) {
    nb::dict d;
    d["name"] = r.name;
    d["kind"] = kind_name(r.kind);
    d["fw_dtypes"] = dtype_names(r.fw_dtypes);
    d["bw_dtypes"] = dtype_names(r.bw_dtypes);
    nb::list inputs, optional, grads, params;
    for (int k = 0; k < r.num_inputs(); ++k) {
      inputs.append(r.input_name(k));
      optional.append(r.input_optional(k));
    }
    for (int g = 0; g < r.num_grads(); ++g) grads.append(r.grad_name(g));
    for (int k = 0; k < r.num_params(); ++k) {
      nb::dict p;
      p["name"] = r.param_name(k);
      p["default"] = r.param_default(k);
      params.append(p);
    }
    d["inputs"] = inputs;
    d["optional"] = optional;
    d["grads"] = grads;
    d["params"] = params;
    d["tol"] = r.tol;
    rows.append(d);
  }
  return rows;
}

void bind_loss(nb::module_& m) {
  m.def("loss_ops", &loss_ops_rows, "One dict per row of loss_ops.def.");
  m.def(
      "loss",
      [](const std::string& op, bool backward, nb::dict tensors, nb::dict params, const std::string& reduction,
         uintptr_t stream, nb::object workspace, bool vectorized, bool fused_grad, bool tf32) {
        LossCall c = make_call(op, backward, tensors, params, reduction, fused_grad);
        View wsv;
        const Workspace ws = workspace_of(c.label, workspace, wsv);
        Result<void> r;
        {
          nb::gil_scoped_release release;
          DeviceGuard g(c.device);
          r = baracuda::loss(reinterpret_cast<cudaStream_t>(stream), c.desc, c.args, ws, pref_of(vectorized, tf32));
        }
        unwrap(r);
      },
      nb::arg("op"), nb::arg("backward"), nb::arg("tensors"), nb::arg("params") = nb::dict(),
      nb::arg("reduction") = "mean", nb::arg("stream") = 0, nb::arg("workspace") = nb::none(),
      nb::arg("vectorized") = true, nb::arg("fused_grad") = false, nb::arg("tf32") = false,
      "Runs a loss plan (cached by descriptor) on `stream`. `tensors` maps roles to tensors: the op's inputs by "
      "their loss_ops() names, dy, lse, total_weight, out, save_lse, save_total_weight, error, grad_<input>; "
      "`params` maps the op's parameter names to numbers.");
  m.def(
      "loss_workspace_size",
      [](const std::string& op, bool backward, nb::dict tensors, nb::dict params, const std::string& reduction,
         bool fused_grad, bool tf32) {
        LossCall c = make_call(op, backward, tensors, params, reduction, fused_grad);
        // The plan loss() will run (the same per-thread cache, on the tensors' device).
        DeviceGuard g(c.device);
        return unwrap(baracuda::loss_workspace_size(c.desc, pref_of(true, tf32)));
      },
      nb::arg("op"), nb::arg("backward"), nb::arg("tensors"), nb::arg("params") = nb::dict(),
      nb::arg("reduction") = "mean", nb::arg("fused_grad") = false, nb::arg("tf32") = false);
  m.def(
      "loss_sku",
      [](const std::string& op, bool backward, nb::dict tensors, nb::dict params, const std::string& reduction,
         bool vectorized, bool fused_grad, bool tf32) {
        LossCall c = make_call(op, backward, tensors, params, reduction, fused_grad);
        const LossPlan p = unwrap(LossPlan::select(target_for(c.device), c.desc, pref_of(vectorized, tf32)));
        unwrap(p.can_implement(c.args));
        return p.sku().to_string() + " layout=" + p.layout_for(c.args);
      },
      nb::arg("op"), nb::arg("backward"), nb::arg("tensors"), nb::arg("params") = nb::dict(),
      nb::arg("reduction") = "mean", nb::arg("vectorized") = true, nb::arg("fused_grad") = false,
      nb::arg("tf32") = false);
}

const bool reg = baracuda::py::register_bindings(&bind_loss);

}  // namespace
