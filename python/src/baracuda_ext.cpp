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

#include "baracuda/core/dlpack.hpp"
#include "baracuda/ops/elementwise.hpp"

namespace nb = nanobind;
using namespace baracuda;

namespace {

[[noreturn]] void fail(const std::string& msg) { throw std::runtime_error(msg); }
template <class T>
T unwrap(Result<T> r) {
  if (!r) fail(r.message());
  return std::move(r.value());
}
void unwrap(const Result<void>& r) {
  if (!r) fail(r.message());
}

const char* device_name(int type) {
  switch (type) {
    case 1: return "cpu";
    case 2: return "cuda";
    case 3: return "cuda_host";
    case 13: return "cuda_managed";
    default: return "non-CUDA";
  }
}

/// One converted tensor; `keep` holds the DLPack export alive for the duration of the call.
struct View {
  nb::ndarray<nb::ro> keep_ro;
  nb::ndarray<> keep_rw;
  TensorMut t;
  int device = -1;
};

View to_view(const std::string& op, nb::handle obj, const char* role, size_t idx, bool writable) {
  View v;
  nb::handle arr = obj;
  std::string reinterpret;
  if (nb::isinstance<nb::tuple>(obj)) {
    auto tup = nb::borrow<nb::tuple>(obj);
    if (tup.size() != 2 || !nb::isinstance<nb::str>(tup[1]))
      throw nb::type_error((op + ": " + role + " " + std::to_string(idx) +
                            " expected a tensor or a (tensor, dtype name) pair").c_str());
    arr = tup[0];
    reinterpret = nb::cast<std::string>(tup[1]);
  }
  const bool ok = writable ? nb::try_cast(arr, v.keep_rw, false) : nb::try_cast(arr, v.keep_ro, false);
  if (!ok)
    throw nb::type_error((op + ": " + role + " " + std::to_string(idx) + " is not a DLPack tensor (got " +
                          std::string(nb::type_name(arr.type()).c_str()) + ")")
                             .c_str());
  const int dev_type = writable ? v.keep_rw.device_type() : v.keep_ro.device_type();
  if (dev_type != 2 && dev_type != 3 && dev_type != 13)
    fail(op + ": " + role + " " + std::to_string(idx) + " is on the " + device_name(dev_type) +
         " device; baracuda runs on CUDA tensors only");
  dlpack::Tensor t{};
  auto fill = [&](const auto& a) {
    t.data = const_cast<void*>(static_cast<const void*>(a.data()));  // byte_offset already applied
    t.device = {a.device_type(), a.device_id()};
    t.ndim = static_cast<int32_t>(a.ndim());
    const auto d = a.dtype();
    t.dtype = {d.code, d.bits, d.lanes};
    t.shape = const_cast<int64_t*>(a.shape_ptr());
    t.strides = const_cast<int64_t*>(a.stride_ptr());
    t.byte_offset = 0;
  };
  if (writable) fill(v.keep_rw);
  else fill(v.keep_ro);
  v.device = t.device.device_id;
  if (!reinterpret.empty()) {
    auto dt = dtype_from_name(reinterpret);
    if (!dt) fail(op + ": " + role + " " + std::to_string(idx) + ": unknown dtype name '" + reinterpret + "'");
    if (t.dtype.bits != size_in_bits(*dt) || t.dtype.lanes != 1)
      fail(op + ": " + role + " " + std::to_string(idx) + ": cannot reinterpret " + std::to_string(t.dtype.bits) +
           "-bit elements as " + reinterpret);
    t.dtype = dlpack::from_dtype(*dt);
  }
  auto m = dlpack::to_tensor(t);
  if (!m) fail(op + ": " + role + " " + std::to_string(idx) + ": " + m.message());
  v.t = *m;
  return v;
}

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

/// Makes `dev` current for the scope (the library launches on the current device).
struct DeviceGuard {
  int prev = -1;
  explicit DeviceGuard(int dev) {
    if (dev < 0 || cudaGetDevice(&prev) != cudaSuccess) {
      cudaGetLastError();
      prev = -1;
      return;
    }
    if (prev == dev || cudaSetDevice(dev) != cudaSuccess) prev = -1;
  }
  ~DeviceGuard() {
    if (prev >= 0) cudaSetDevice(prev);
  }
};

Target target_for(int device) {
  thread_local std::optional<Target> cached;
  if (!cached || (device >= 0 && cached->device != device)) {
    DeviceGuard g(device);
    auto t = Target::current();
    if (!t) return Target::offline();
    cached = *t;
  }
  return *cached;
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
nb::list dtype_names(DTypeSet s) {
  nb::list l;
  for (int i = 0; i < kNumDTypes; ++i)
    if (contains(s, static_cast<DType>(i))) l.append(std::string(name(static_cast<DType>(i))));
  return l;
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

/// Every (op, direction, dtype) a plan can be selected for on sm_90, without a GPU.
nb::list coverage() {
  nb::list rows;
  const Target target = Target::offline(90);
  auto add = [&](const ElementwiseOpInfo& r, Direction dir, const std::string& dt, const ElementwisePlan& p) {
    nb::dict d;
    d["family"] = "elementwise";
    d["op"] = r.name;
    d["direction"] = to_string(dir);
    d["dtype"] = dt;
    d["backend"] = to_string(p.sku().backend);
    rows.append(d);
  };
  for (const auto& r : elementwise_ops()) {
    for (Direction dir : {Direction::Forward, Direction::Backward}) {
      if (dir == Direction::Backward && r.bw == BackwardNeeds::None) continue;
      const DTypeSet set = dir == Direction::Forward ? r.fw_dtypes : r.bw_dtypes;
      for (int i = 0; i < kNumDTypes; ++i) {
        const DType dt = static_cast<DType>(i);
        if (!contains(set, dt)) continue;
        // Generators get a 1x1 output (eye needs 2-D, linspace's default steps=1 needs 1 element).
        ElementwiseDesc d = r.nin == 0 ? ElementwiseDesc::make(r.op, dt, {Shape::of({1, 1})}, dir)
                                       : ElementwiseDesc::make(r.op, dt, {Shape::of({1}), Shape::of({1}), Shape::of({1})}, dir);
        if (r.out == OutRule::Cast && dir == Direction::Forward) {
          for (int j = 0; j < kNumDTypes; ++j) {
            d.out_dtype = static_cast<DType>(j);
            if (!contains(dtypes::kAll, d.out_dtype)) continue;
            auto p = ElementwisePlan::select(target, d);
            if (p) add(r, dir, std::string(name(dt)) + "->" + std::string(name(d.out_dtype)), *p);
          }
          continue;
        }
        auto p = ElementwisePlan::select(target, d);
        if (p) add(r, dir, std::string(name(dt)), *p);
      }
    }
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
  m.def("coverage", &coverage, "Rows {family, op, direction, dtype, backend} that select() accepts on sm_90.");
  m.def("device_info", &device_info, "The current CUDA device: name, sm, num_sms, runtime and driver versions.");
  m.def(
      "elementwise",
      [](const std::string& op, bool backward, std::vector<nb::object> inputs, std::vector<nb::object> outputs, std::vector<double> params,
         uintptr_t stream, nb::object workspace) {
        Call c = make_call(op, backward, inputs, outputs, params);
        Workspace ws{};
        View wsv;
        if (!workspace.is_none()) {
          wsv = to_view(c.name, workspace, "workspace", 0, true);
          ws.ptr = wsv.t.data;
          ws.bytes = static_cast<size_t>(wsv.t.numel()) * static_cast<size_t>(size_in_bytes(wsv.t.dtype));
        }
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
}
