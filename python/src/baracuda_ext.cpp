// baracuda._C: the nanobind module behind the Python package (contract: docs/python-api.md).
// Tensors arrive as any DLPack-capable object (torch, CuPy, JAX, a DLPack capsule) or as a
// pair (tensor, dtype_name) that reinterprets the tensor's storage as another dtype of the same
// element size (the Python layer uses it for dtypes a framework cannot export, e.g. float8).
#include <cuda_runtime_api.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "baracuda/core/coverage.hpp"
#include "baracuda/ops/elementwise.hpp"
#include "ext_common.hpp"

namespace nb = nanobind;
using namespace baracuda;
using namespace baracuda::py;

namespace {

struct Call {
  std::string name;
  ElementwiseDesc desc;
  ElementwiseArgs args;
  std::vector<View> ins, outs;
  int device = -1;
};

/// Builds descriptor and arguments from the tensors, as the contract describes.
Call make_call(const std::string& name, bool backward, const std::vector<nb::object>& inputs, const std::vector<nb::object>& outputs,
               const std::vector<double>& params) {
  Call c;
  c.name = name;
  const auto op = elementwise_op_from_name(name);
  if (!op) fail("baracuda: unknown elementwise op '" + name + "'");
  const auto& in = info(*op);
  const std::string label = name + (backward ? "_backward" : "");
  if (static_cast<int>(params.size()) > in.num_params())
    fail(label + ": expected at most " + std::to_string(in.num_params()) + " parameter(s) (\"" + in.params +
         "\"), got " + std::to_string(params.size()));
  // Tensor counts first: a wrong count would otherwise surface as a confusing shape error.
  const bool needs_in = in.bw == BackwardNeeds::Inputs || in.bw == BackwardNeeds::InputsAndOutput;
  const bool needs_out = in.bw == BackwardNeeds::Output || in.bw == BackwardNeeds::InputsAndOutput;
  const size_t want_in = backward ? 1 + (needs_in ? in.nin : 0) + (needs_out ? 1 : 0) : in.nin;
  const size_t want_out = backward ? static_cast<size_t>(in.num_grads()) : 1;
  const bool differentiable = !backward || in.bw != BackwardNeeds::None;  // else select() says so
  if (inputs.size() > c.args.in.size() || outputs.size() > c.args.out.size() ||
      (differentiable && (inputs.size() != want_in || outputs.size() != want_out)))
    fail(label + ": expected " + std::to_string(want_in) + " input tensor(s) and " + std::to_string(want_out) +
         " output tensor(s), got " + std::to_string(inputs.size()) + " and " + std::to_string(outputs.size()));
  c.ins.reserve(inputs.size());
  c.outs.reserve(outputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) c.ins.push_back(to_view(label, inputs[i], "input", i, false));
  for (size_t i = 0; i < outputs.size(); ++i) c.outs.push_back(to_view(label, outputs[i], "output", i, true));
  c.device = !c.ins.empty() ? c.ins[0].device : (!c.outs.empty() ? c.outs[0].device : -1);

  const Direction dir = backward ? Direction::Backward : Direction::Forward;
  // dtype: backward = grad_output's; generators = the output's; else the first non-bool input's.
  DType dtype = !c.outs.empty() ? c.outs[0].t.dtype : DType::f32;
  if (backward) {
    if (!c.ins.empty()) dtype = c.ins[0].t.dtype;
  } else {
    for (size_t i = 0; i < c.ins.size(); ++i)
      if (!((in.bool_inputs >> i) & 1)) {
        dtype = c.ins[i].t.dtype;
        break;
      }
  }
  ElementwiseDesc d = ElementwiseDesc::make(*op, dtype, {}, dir);
  auto shape_of = [](const View& v) { return Shape::of(v.t.layout); };
  if (!backward) {
    for (int i = 0; i < in.nin && i < static_cast<int>(c.ins.size()); ++i) d.in_shapes[i] = shape_of(c.ins[i]);
    if (!c.outs.empty()) {
      d.out_shape = shape_of(c.outs[0]);
      d.out_dtype = c.outs[0].t.dtype;
    }
  } else {
    if (!c.ins.empty()) d.out_shape = shape_of(c.ins[0]);
    for (int i = 0, g = 0; i < in.nin; ++i) {
      Shape s = d.out_shape;
      if (needs_in && 1 + i < static_cast<int>(c.ins.size())) s = shape_of(c.ins[1 + i]);
      if ((in.grad_mask >> i) & 1) {
        if (g < static_cast<int>(c.outs.size())) s = shape_of(c.outs[g]);
        ++g;
      }
      d.in_shapes[i] = s;
    }
  }
  for (size_t i = 0; i < params.size(); ++i) d.params[i] = params[i];
  c.desc = d;
  c.args.nin = static_cast<int>(c.ins.size());
  c.args.nout = static_cast<int>(c.outs.size());
  for (size_t i = 0; i < c.ins.size(); ++i) c.args.in[i] = c.ins[i].t;
  for (size_t i = 0; i < c.outs.size(); ++i) c.args.out[i] = c.outs[i].t;
  return c;
}

ElementwisePlan select_plan(const Call& c) {
  return unwrap(ElementwisePlan::select(target_for(c.device), c.desc));
}

const char* out_rule(OutRule r) {
  switch (r) {
    case OutRule::Same: return "same";
    case OutRule::Bool: return "bool";
    case OutRule::Cast: return "cast";
  }
  return "?";
}
const char* bw_rule(BackwardNeeds b) {
  switch (b) {
    case BackwardNeeds::None: return "none";
    case BackwardNeeds::GradOnly: return "dy";
    case BackwardNeeds::Inputs: return "in";
    case BackwardNeeds::Output: return "out";
    case BackwardNeeds::InputsAndOutput: return "inout";
  }
  return "?";
}
nb::list ops() {
  nb::list rows;
  for (const auto& r : elementwise_ops()) {
    nb::list params;
    for (int i = 0; i < r.num_params(); ++i) {
      // The spec item is "name=default" or "name=a|b|c" (enumerated).
      std::string_view spec(r.params);
      for (int k = 0; k < i; ++k) spec.remove_prefix(spec.find(',') + 1);
      spec = spec.substr(0, spec.find(','));
      const std::string_view value = spec.substr(spec.find('=') + 1);
      nb::object choices = nb::none();
      if (value.find('|') != std::string_view::npos) {
        nb::list ch;
        for (std::string_view v = value;;) {
          const auto bar = v.find('|');
          ch.append(std::string(v.substr(0, bar)));
          if (bar == std::string_view::npos) break;
          v.remove_prefix(bar + 1);
        }
        choices = ch;
      }
      nb::dict p;
      p["name"] = std::string(r.param_name(i));
      p["default"] = r.param_default(i);
      p["choices"] = choices;
      params.append(p);
    }
    nb::dict d;
    d["name"] = r.name;
    d["group"] = r.group;
    d["nin"] = r.nin;
    d["bool_inputs"] = r.bool_inputs;
    d["params"] = params;
    d["fw_dtypes"] = dtype_names(r.fw_dtypes);
    d["out"] = out_rule(r.out);
    d["bw"] = bw_rule(r.bw);
    d["bw_dtypes"] = dtype_names(r.bw_dtypes);
    d["grad_mask"] = r.grad_mask;
    d["tol"] = r.tol;
    rows.append(d);
  }
  return rows;
}

/// Every (family, op, direction, dtype) a plan can be selected for on sm_90, without a GPU.
nb::list coverage_rows() {
  nb::list rows;
  for (const auto& r : coverage(Target::offline(90))) {
    nb::dict d;
    d["family"] = r.family;
    d["op"] = r.op;
    d["direction"] = to_string(r.direction);
    d["dtype"] = r.dtype;
    d["backend"] = to_string(r.backend);
    rows.append(d);
  }
  return rows;
}

nb::dict device_info() {
  auto t = unwrap(Target::current());
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, t.device) != cudaSuccess) {
    cudaGetLastError();
    fail("device_info: cudaGetDeviceProperties failed");
  }
  int rt = 0, drv = 0;
  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&drv);
  nb::dict d;
  d["name"] = std::string(prop.name);
  d["sm"] = t.sm;
  d["num_sms"] = t.num_sms;
  d["runtime_version"] = rt;
  d["driver_version"] = drv;
  return d;
}

}  // namespace

NB_MODULE(_C, m) {
  m.doc() = "baracuda native module (see docs/python-api.md)";
#ifdef BARACUDA_VERSION
  m.attr("__version__") = BARACUDA_VERSION;
#endif
  m.def("ops", &ops, "One dict per row of elementwise_ops.def.");
  m.def("coverage", &coverage_rows, "Rows {family, op, direction, dtype, backend} that select() accepts on sm_90.");
  m.def("device_info", &device_info, "The current CUDA device: name, sm, num_sms, runtime and driver versions.");
  m.def(
      "elementwise",
      [](const std::string& op, bool backward, std::vector<nb::object> inputs, std::vector<nb::object> outputs, std::vector<double> params,
         uintptr_t stream, nb::object workspace) {
        Call c = make_call(op, backward, inputs, outputs, params);
        View wsv;
        const Workspace ws = workspace_of(c.name, workspace, wsv);
        Result<void> r;
        {
          nb::gil_scoped_release release;
          DeviceGuard g(c.device);
          r = baracuda::elementwise(reinterpret_cast<cudaStream_t>(stream), c.desc, c.args, ws);
        }
        unwrap(r);
      },
      nb::arg("op"), nb::arg("backward"), nb::arg("inputs"), nb::arg("outputs"), nb::arg("params"),
      nb::arg("stream"), nb::arg("workspace") = nb::none(),
      "Selects (cached by descriptor) and runs the plan on `stream` (an integer cudaStream_t).");
  m.def(
      "workspace_size",
      [](const std::string& op, bool backward, std::vector<nb::object> inputs, std::vector<nb::object> outputs, std::vector<double> params) {
        Call c = make_call(op, backward, inputs, outputs, params);
        return select_plan(c).workspace_size();
      },
      nb::arg("op"), nb::arg("backward"), nb::arg("inputs"), nb::arg("outputs"), nb::arg("params"));
  m.def(
      "sku",
      [](const std::string& op, bool backward, std::vector<nb::object> inputs, std::vector<nb::object> outputs, std::vector<double> params) {
        Call c = make_call(op, backward, inputs, outputs, params);
        const ElementwisePlan p = select_plan(c);
        unwrap(p.can_implement(c.args));
        return p.sku().to_string() + " layout=" + std::string(p.layout_for(c.args));
      },
      nb::arg("op"), nb::arg("backward"), nb::arg("inputs"), nb::arg("outputs"), nb::arg("params"));
  bind_all(m);  // the other families (their binding files register themselves)
}
