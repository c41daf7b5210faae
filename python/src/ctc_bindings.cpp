// baracuda._C bindings of ctc_loss (include/baracuda/ops/ctc_loss.hpp). Tensors arrive by role in a
// dict: "log_probs", "targets", "input_lengths", "target_lengths", "dy", "log_alpha", "log_beta",
// "neg_log_likelihood" (inputs) and "out", "save_log_alpha", "save_log_beta",
// "save_neg_log_likelihood", "grad", "error" (outputs). The descriptor is derived from them: dtype
// and shape from log_probs, the targets' shape and dtype, the lengths' dtypes.
#include <cuda_runtime_api.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <string>
#include <vector>

#include "baracuda/ops/ctc_loss.hpp"
#include "ext_common.hpp"

namespace nb = nanobind;
using namespace baracuda;
using namespace baracuda::py;

namespace {

struct CtcCall {
  std::string label;
  CtcLossDesc desc;
  CtcLossArgs args;
  std::vector<View> views;  ///< keeps the DLPack exports alive for the call
  int device = -1;
};

const char* const kInRoles[] = {"log_probs", "targets",   "input_lengths", "target_lengths",
                                "dy",        "log_alpha", "log_beta",      "neg_log_likelihood"};
const char* const kOutRoles[] = {"out", "save_log_alpha", "save_log_beta", "save_neg_log_likelihood", "grad", "error"};

std::string role_list() {
  std::string s;
  for (const char* r : kInRoles) s += (s.empty() ? "" : ", ") + std::string(r);
  for (const char* r : kOutRoles) s += ", " + std::string(r);
  return s;
}

CtcCall make_call(bool backward, const nb::dict& tensors, int64_t blank, const std::string& reduction,
                  bool zero_infinity, bool fused_beta, int64_t max_target_length) {
  CtcCall c;
  c.label = backward ? "ctc_loss_backward" : "ctc_loss";
  const auto r = reduction_from_name(reduction);
  if (!r || *r == Reduction::batchmean)
    fail(c.label + ": reduction expected one of none, mean, sum, got '" + reduction + "'");
  TensorRef* ins[] = {&c.args.log_probs, &c.args.targets,   &c.args.input_lengths, &c.args.target_lengths,
                      &c.args.dy,        &c.args.log_alpha, &c.args.log_beta,      &c.args.neg_log_likelihood};
  TensorMut* outs[] = {&c.args.out,  &c.args.save_log_alpha, &c.args.save_log_beta, &c.args.save_neg_log_likelihood,
                       &c.args.grad, &c.args.error};
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
    for (size_t i = 0; i < std::size(kInRoles) && !known; ++i)
      if (key == kInRoles[i]) {
        *ins[i] = take(kInRoles[i], false);
        known = true;
      }
    for (size_t i = 0; i < std::size(kOutRoles) && !known; ++i)
      if (key == kOutRoles[i]) {
        *outs[i] = take(kOutRoles[i], true);
        known = true;
      }
    if (!known) fail(c.label + ": unknown tensor role '" + key + "' (expected one of " + role_list() + ")");
  }
  if (c.args.log_probs.data == nullptr && c.args.log_probs.layout.rank == 0)
    fail(c.label + ": expected a 'log_probs' tensor");
  if (c.args.targets.data == nullptr && c.args.targets.layout.rank == 0)
    fail(c.label + ": expected a 'targets' tensor");
  c.desc = CtcLossDesc::make(c.args.log_probs.dtype, Shape::of(c.args.log_probs.layout),
                             Shape::of(c.args.targets.layout), c.args.targets.dtype, *r, blank, zero_infinity,
                             backward ? Direction::Backward : Direction::Forward);
  c.desc.input_lengths_dtype = c.args.input_lengths.dtype;
  c.desc.target_lengths_dtype = c.args.target_lengths.dtype;
  c.desc.fused_beta = fused_beta;
  c.desc.max_target_length = max_target_length;
  return c;
}

nb::list shape_list(const Shape& s) {
  nb::list l;
  for (int i = 0; i < s.rank; ++i) l.append(s.dims[i]);
  return l;
}

void bind_ctc(nb::module_& m) {
  m.def(
      "ctc_loss",
      [](bool backward, nb::dict tensors, int64_t blank, const std::string& reduction, bool zero_infinity,
         bool fused_beta, int64_t max_target_length, uintptr_t stream, nb::object workspace) {
        CtcCall c = make_call(backward, tensors, blank, reduction, zero_infinity, fused_beta, max_target_length);
        View wsv;
        const Workspace ws = workspace_of(c.label, workspace, wsv);
        Result<void> r;
        {
          nb::gil_scoped_release release;
          DeviceGuard g(c.device);
          r = baracuda::ctc_loss(reinterpret_cast<cudaStream_t>(stream), c.desc, c.args, ws);
        }
        unwrap(r);
      },
      nb::arg("backward"), nb::arg("tensors"), nb::arg("blank") = 0, nb::arg("reduction") = "mean",
      nb::arg("zero_infinity") = false, nb::arg("fused_beta") = false, nb::arg("max_target_length") = -1,
      nb::arg("stream") = 0, nb::arg("workspace") = nb::none(),
      "Runs a CtcLossPlan (cached by descriptor) on `stream`. `tensors` maps roles to tensors: log_probs, targets, "
      "input_lengths, target_lengths, dy, log_alpha, log_beta, neg_log_likelihood, out, save_log_alpha, "
      "save_log_beta, save_neg_log_likelihood, grad, error.");
  m.def(
      "ctc_loss_plan",
      [](bool backward, nb::dict tensors, int64_t blank, const std::string& reduction, bool zero_infinity,
         bool fused_beta, int64_t max_target_length) {
        CtcCall c = make_call(backward, tensors, blank, reduction, zero_infinity, fused_beta, max_target_length);
        const CtcLossPlan p = unwrap(CtcLossPlan::select(target_for(c.device), c.desc));
        nb::dict d;
        d["workspace_size"] = p.workspace_size();
        d["log_alpha_shape"] = shape_list(p.log_alpha_shape());
        d["loss_shape"] = shape_list(p.loss_shape());
        d["states"] = p.states();
        std::string sku = p.sku().to_string();
        if (p.can_implement(c.args)) sku += " layout=" + p.layout_for(c.args);
        d["sku"] = sku;
        return d;
      },
      nb::arg("backward"), nb::arg("tensors"), nb::arg("blank") = 0, nb::arg("reduction") = "mean",
      nb::arg("zero_infinity") = false, nb::arg("fused_beta") = false, nb::arg("max_target_length") = -1,
      "The plan of these tensors (only shapes and dtypes are read): workspace_size, log_alpha_shape ([N, T, "
      "states]), loss_shape, states, sku (with the layout when the tensors pass can_implement).");
}

const bool reg = baracuda::py::register_bindings(&bind_ctc);

}  // namespace
