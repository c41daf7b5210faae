// baracuda._C bindings of the softmax/normalization family (include/baracuda/ops/norm.hpp).
// Tensors arrive by role in a dict ({"x": t, "weight": w, "out": y, ...}, the NormArgs field
// names); the descriptor is derived from them: dtype and shape from x (forward) or dy
// (backward), affine flags from which parameters are present, param_dtype from their dtype.
// Scalars beyond axis/norm_ndim/eps travel in a `params` dict: the channel ops' (batch/instance/
// group norm, local_response_norm) num_groups, training, momentum, size, alpha, beta, k (running
// stats are present when running_mean/running_var are); normalize's p; gumbel_softmax's tau,
// hard and its Philox stream (seed, offset).
#include <cuda_runtime_api.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <string>
#include <vector>

#include "baracuda/ops/norm.hpp"
#include "ext_common.hpp"

namespace nb = nanobind;
using namespace baracuda;
using namespace baracuda::py;

namespace {

struct NormCall {
  std::string label;
  NormDesc desc;
  NormArgs args;
  std::vector<View> views;  ///< keeps the DLPack exports alive for the call
  int device = -1;
};

const char* const kInRoles[] = {"x", "residual", "weight", "bias", "dy", "y", "mean", "rstd", "mask", "noise"};
const char* const kOutRoles[] = {"out",   "residual_out", "save_mean",   "save_rstd", "dweight",
                                 "dbias", "running_mean", "running_var", "y_soft"};

std::string role_list() {
  std::string s;
  for (const char* r : kInRoles) s += std::string(s.empty() ? "" : ", ") + r;
  for (const char* r : kOutRoles) s += std::string(", ") + r;
  return s;
}

/// The scalars of the `params` dict (absent keys keep NormDesc's and NormRng's defaults).
void apply_params(const std::string& label, NormDesc& d, NormRng& rng, const nb::handle& params) {
  if (params.is_none()) return;
  if (!nb::isinstance<nb::dict>(params)) fail(label + ": params expected a dict or None");
  for (auto [k, v] : nb::borrow<nb::dict>(params)) {
    const std::string key = nb::cast<std::string>(k);
    if (key == "p")
      d.p = nb::cast<double>(v);
    else if (key == "tau")
      d.tau = nb::cast<double>(v);
    else if (key == "hard")
      d.hard = nb::cast<bool>(v);
    else if (key == "seed")
      rng.seed = nb::cast<uint64_t>(v);
    else if (key == "offset")
      rng.offset = nb::cast<uint64_t>(v);
    else if (key == "num_groups")
      d.num_groups = nb::cast<int>(v);
    else if (key == "training")
      d.training = nb::cast<bool>(v);
    else if (key == "momentum")
      d.momentum = nb::cast<double>(v);
    else if (key == "size")
      d.lrn_size = nb::cast<int>(v);
    else if (key == "alpha")
      d.lrn_alpha = nb::cast<double>(v);
    else if (key == "beta")
      d.lrn_beta = nb::cast<double>(v);
    else if (key == "k")
      d.lrn_k = nb::cast<double>(v);
    else
      fail(label + ": unknown param '" + key +
           "' (expected p, tau, hard, seed, offset, num_groups, training, momentum, size, alpha, beta, k)");
  }
}

NormCall make_call(const std::string& op, bool backward, const nb::dict& tensors, int axis, int norm_ndim, double eps,
                   const nb::handle& params = nb::none()) {
  NormCall c;
  const auto o = norm_op_from_name(op);
  if (!o) fail("baracuda: unknown norm op '" + op + "'");
  c.label = op + (backward ? "_backward" : "");
  TensorRef* refs[] = {&c.args.x, &c.args.residual, &c.args.weight, &c.args.bias, &c.args.dy,
                       &c.args.y, &c.args.mean,     &c.args.rstd,   &c.args.mask, &c.args.noise};
  TensorMut* muts[] = {&c.args.out,   &c.args.residual_out, &c.args.save_mean,   &c.args.save_rstd, &c.args.dweight,
                       &c.args.dbias, &c.args.running_mean, &c.args.running_var, &c.args.y_soft};
  static_assert(std::size(refs) == std::size(kInRoles) && std::size(muts) == std::size(kOutRoles));
  bool present[std::size(kInRoles) + std::size(kOutRoles)] = {};
  for (auto [k, v] : tensors) {
    const std::string key = nb::cast<std::string>(k);
    if (v.is_none()) continue;
    bool known = false;
    for (size_t i = 0; i < std::size(kInRoles); ++i)
      if (key == kInRoles[i]) {
        View view = to_view(c.label, v, kInRoles[i], 0, false);
        *refs[i] = view.t;
        if (c.device < 0) c.device = view.device;
        c.views.push_back(std::move(view));
        present[i] = known = true;
      }
    for (size_t i = 0; i < std::size(kOutRoles); ++i)
      if (key == kOutRoles[i]) {
        View view = to_view(c.label, v, kOutRoles[i], 0, true);
        *muts[i] = view.t;
        if (c.device < 0) c.device = view.device;
        c.views.push_back(std::move(view));
        present[std::size(kInRoles) + i] = known = true;
      }
    if (!known) fail(c.label + ": unknown tensor role '" + key + "' (expected one of " + role_list() + ")");
  }
  const TensorRef& main = backward ? c.args.dy : c.args.x;
  if (main.data == nullptr && main.layout.rank == 0)
    fail(c.label + ": expected a '" + std::string(backward ? "dy" : "x") + "' tensor");
  const Direction dir = backward ? Direction::Backward : Direction::Forward;
  const Shape shape = Shape::of(main.layout);
  const auto& in = info(*o);
  const bool has_w = present[2] || present[std::size(kInRoles) + 4];
  const bool has_b = present[3] || present[std::size(kInRoles) + 5];
  if (in.kind == NormKind::axis) {
    c.desc = NormDesc::softmax(main.dtype, shape, axis, *o == NormOp::log_softmax, dir);
    c.desc.op = *o;
    c.desc.eps = eps;       // normalize's floor
    c.desc.weight = has_w;  // select() refuses them with the op's name
    c.desc.bias = has_b;
    apply_params(c.label, c.desc, c.args.rng, params);
  } else if (in.kind == NormKind::channel) {
    const bool has_running = present[std::size(kInRoles) + 6] || present[std::size(kInRoles) + 7];
    c.desc = NormDesc::batch_norm(main.dtype, shape, has_w, has_b, true, has_running, 0.1, eps, dir);
    c.desc.op = *o;
    apply_params(c.label, c.desc, c.args.rng, params);
  } else {
    c.desc = NormDesc::layer_norm(main.dtype, shape, norm_ndim, has_w, has_b, eps, dir);
    c.desc.op = *o;
  }
  c.desc.residual = present[1];
  if (present[8]) {  // a bool mask excludes where true; a float mask is added (NormMask)
    c.desc.mask = c.args.mask.dtype == DType::b8 ? NormMask::boolean : NormMask::additive;
    c.desc.mask_shape = Shape::of(c.args.mask.layout);
  }
  for (const TensorRef* p : {&c.args.weight, &c.args.bias})
    if (p->data) {
      c.desc.param_dtype = p->dtype;
      break;
    }
  if (!c.args.weight.data && !c.args.bias.data) {
    if (c.args.dweight.data)
      c.desc.param_dtype = c.args.dweight.dtype;
    else if (c.args.dbias.data)
      c.desc.param_dtype = c.args.dbias.dtype;
    else if (c.args.running_mean.data)
      c.desc.param_dtype = c.args.running_mean.dtype;
  }
  return c;
}

PlanPreference pref_of(bool vectorized) {
  PlanPreference p;
  if (!vectorized) p.vectorized = Tristate::Forbid;
  return p;
}

nb::list norm_ops_rows() {
  nb::list rows;
  for (const auto& r : norm_ops()) {
    nb::dict d;
    d["name"] = r.name;
    d["kind"] = r.kind == NormKind::axis ? "axis" : (r.kind == NormKind::norm ? "norm" : "channel");
    d["fw_dtypes"] = dtype_names(r.fw_dtypes);
    d["bw_dtypes"] = dtype_names(r.bw_dtypes);
    d["params"] = r.params;
    d["bw_reads"] = r.bw_reads;
    d["tol"] = r.tol;
    rows.append(d);
  }
  return rows;
}

void bind_norm(nb::module_& m) {
  m.def("norm_ops", &norm_ops_rows, "One dict per row of norm_ops.def.");
  m.def(
      "norm",
      [](const std::string& op, bool backward, nb::dict tensors, int axis, int norm_ndim, double eps, uintptr_t stream,
         nb::object workspace, bool vectorized, nb::object params) {
        NormCall c = make_call(op, backward, tensors, axis, norm_ndim, eps, params);
        View wsv;
        const Workspace ws = workspace_of(c.label, workspace, wsv);
        Result<void> r;
        {
          nb::gil_scoped_release release;
          DeviceGuard g(c.device);
          r = baracuda::norm(reinterpret_cast<cudaStream_t>(stream), c.desc, c.args, ws, pref_of(vectorized));
        }
        unwrap(r);
      },
      nb::arg("op"), nb::arg("backward"), nb::arg("tensors"), nb::arg("axis") = -1, nb::arg("norm_ndim") = 1,
      nb::arg("eps") = 1e-5, nb::arg("stream") = 0, nb::arg("workspace") = nb::none(), nb::arg("vectorized") = true,
      nb::arg("params") = nb::none(),
      "Runs a softmax/normalization plan (cached by descriptor) on `stream`. `tensors` maps NormArgs roles "
      "(x, residual, weight, bias, dy, y, mean, rstd, mask, noise, out, residual_out, save_mean, save_rstd, "
      "dweight, dbias, running_mean, running_var, y_soft) to tensors; a bool mask excludes where true, a float "
      "mask is added. `params`: normalize's p; gumbel_softmax's tau, hard, seed, offset; the channel ops' "
      "num_groups, training, momentum, size, alpha, beta, k.");
  m.def(
      "norm_workspace_size",
      [](const std::string& op, bool backward, nb::dict tensors, int axis, int norm_ndim, double eps,
         nb::object params) {
        NormCall c = make_call(op, backward, tensors, axis, norm_ndim, eps, params);
        return unwrap(NormPlan::select(target_for(c.device), c.desc)).workspace_size();
      },
      nb::arg("op"), nb::arg("backward"), nb::arg("tensors"), nb::arg("axis") = -1, nb::arg("norm_ndim") = 1,
      nb::arg("eps") = 1e-5, nb::arg("params") = nb::none());
  m.def(
      "norm_sku",
      [](const std::string& op, bool backward, nb::dict tensors, int axis, int norm_ndim, double eps, bool vectorized,
         nb::object params) {
        NormCall c = make_call(op, backward, tensors, axis, norm_ndim, eps, params);
        const NormPlan p = unwrap(NormPlan::select(target_for(c.device), c.desc, pref_of(vectorized)));
        unwrap(p.can_implement(c.args));
        return p.sku().to_string() + " layout=" + p.layout_for(c.args);
      },
      nb::arg("op"), nb::arg("backward"), nb::arg("tensors"), nb::arg("axis") = -1, nb::arg("norm_ndim") = 1,
      nb::arg("eps") = 1e-5, nb::arg("vectorized") = true, nb::arg("params") = nb::none());
}

const bool reg = baracuda::py::register_bindings(&bind_norm);

}  // namespace
