// baracuda._C bindings of the quantization family (include/baracuda/ops/quant.hpp). Tensors arrive
// by role in a dict ({"x": t, "scale": s, "out": q, ...}, the QuantArgs field names) and the
// descriptor's remaining fields in a params dict; what the tensors say is derived from them:
// dtype and shape from x (forward), dy (backward) or out (dequantize), zero-point kind from the
// zero_point tensor's dtype (or int32 when a zero_point_out is given: asymmetric dynamic
// quantization), scale_on_device from a per-tensor scale tensor, record_amax from amax_out, the
// history length from amax_history. Packed int4 tensors travel as uint8 (two
// elements a byte, the last dim halved) and are reinterpreted here as the params' q_dtype.
#include <cuda_runtime_api.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <optional>
#include <string>
#include <vector>

#include "baracuda/ops/quant.hpp"
#include "ext_common.hpp"

namespace nb = nanobind;
using namespace baracuda;
using namespace baracuda::py;

namespace {

struct QuantCall {
  std::string label;
  QuantDesc desc;
  QuantArgs args;
  std::vector<View> views;  ///< keeps the DLPack exports alive for the call
  int device = -1;
};

const char* const kInRoles[] = {"x", "q", "dy", "scale", "zero_point"};
const char* const kOutRoles[] = {"out",      "mask",         "scale_out", "zero_point_out",
                                 "amax_out", "amax_history", "dscale",    "dzero_point"};

std::string role_list() {
  std::string s;
  for (const char* r : kInRoles) s += std::string(s.empty() ? "" : ", ") + r;
  for (const char* r : kOutRoles) s += std::string(", ") + r;
  return s;
}

template <class T>
T param(const nb::dict& p, const char* key, T dflt) {
  if (!p.contains(key)) return dflt;
  nb::object v = p[key];
  if (v.is_none()) return dflt;
  return nb::cast<T>(v);
}

std::optional<QuantGranularity> granularity_from(const std::string& s) {
  for (auto g : {QuantGranularity::per_tensor, QuantGranularity::per_channel, QuantGranularity::per_token,
                 QuantGranularity::per_group})
    if (s == to_string(g)) return g;
  return std::nullopt;
}

bool present(const TensorRef& t) { return t.data != nullptr || t.layout.rank != 0; }

QuantCall make_call(const std::string& op, bool backward, const nb::dict& tensors, const nb::dict& params) {
  QuantCall c;
  const auto o = quant_op_from_name(op);
  if (!o || info(*o).engine == QuantEngine::linear)
    fail("baracuda: unknown quant op '" + op + "' (quantized_linear has its own binding)");
  c.label = op + (backward ? "_backward" : "");
  QuantDesc& d = c.desc;
  d.op = *o;
  d.direction = backward ? Direction::Backward : Direction::Forward;

  // q dtype first: packed outputs/inputs are reinterpreted with it.
  const auto& in = info(*o);
  std::string qname = param<std::string>(params, "q_dtype", in.q_dtypes == bit(DType::s32) ? "int32" : "");
  if (qname.empty()) fail(c.label + ": params['q_dtype'] is required (one of " + std::string(in.name) + "'s q dtypes)");
  const auto q = dtype_from_name(qname);
  if (!q) fail(c.label + ": unknown q_dtype '" + qname + "'");
  d.q_dtype = *q;

  TensorRef* refs[] = {&c.args.x, &c.args.q, &c.args.dy, &c.args.scale, &c.args.zero_point};
  TensorMut* muts[] = {&c.args.out,      &c.args.mask,         &c.args.scale_out, &c.args.zero_point_out,
                       &c.args.amax_out, &c.args.amax_history, &c.args.dscale,    &c.args.dzero_point};
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
        known = true;
      }
    for (size_t i = 0; i < std::size(kOutRoles); ++i)
      if (key == kOutRoles[i]) {
        View view = to_view(c.label, v, kOutRoles[i], 0, true);
        *muts[i] = view.t;
        if (c.device < 0) c.device = view.device;
        c.views.push_back(std::move(view));
        known = true;
      }
    if (!known) fail(c.label + ": unknown tensor role '" + key + "' (expected one of " + role_list() + ")");
  }
  const bool q_side_out = !backward && (d.op == QuantOp::quantize || d.op == QuantOp::dynamic_quantize);
  if (is_packed(d.q_dtype)) {  // uint8 carriers of two int4 each
    if (present(c.args.q) && (c.args.q.dtype == DType::u8 || c.args.q.dtype == DType::s8)) c.args.q.dtype = d.q_dtype;
    if (q_side_out && (c.args.out.dtype == DType::u8 || c.args.out.dtype == DType::s8)) c.args.out.dtype = d.q_dtype;
  }

  // dtype and logical shape.
  const TensorRef out_ref = c.args.out;
  const TensorRef* main = backward ? &c.args.dy : (d.op == QuantOp::dequantize ? &out_ref : &c.args.x);
  if (!present(*main))
    fail(c.label + ": expected a '" + std::string(backward ? "dy" : (d.op == QuantOp::dequantize ? "out" : "x")) +
         "' tensor");
  d.dtype = main->dtype;
  d.shape = Shape::of(main->layout);

  const std::string gname = param<std::string>(params, "granularity", "per_tensor");
  const auto g = granularity_from(gname);
  if (!g) fail(c.label + ": unknown granularity '" + gname + "' (per_tensor, per_channel, per_token, per_group)");
  d.granularity = *g;
  d.axis = param<int>(params, "axis", -1);
  d.group_size = param<int64_t>(params, "group_size", 0);
  d.q_min = param<int64_t>(params, "q_min", quant_min_of(d.q_dtype));
  d.q_max = param<int64_t>(params, "q_max", quant_max_of(d.q_dtype));
  d.scale = param<double>(params, "scale", 1.0);
  d.zero_point = param<int64_t>(params, "zero_point", 0);
  d.grad_factor = param<double>(params, "grad_factor", 1.0);
  d.scale_on_device = d.granularity != QuantGranularity::per_tensor || present(c.args.scale) ||
                      d.op == QuantOp::fake_quantize_learnable || in.engine == QuantEngine::dynamic;
  const bool fp8 = d.q_dtype == DType::f8e4m3 || d.q_dtype == DType::f8e5m2;
  if (present(c.args.zero_point))
    d.zero_point_kind = c.args.zero_point.dtype == DType::f32 ? QuantZeroPoint::float32 : QuantZeroPoint::int32;
  else if (present(c.args.zero_point_out))
    d.zero_point_kind = QuantZeroPoint::int32;  // asymmetric dynamic quantization
  else if (d.op == QuantOp::fake_quantize_learnable)
    d.zero_point_kind = QuantZeroPoint::float32;  // select() refuses a missing one by name
  else if (fp8 || in.engine == QuantEngine::dynamic || d.scale_on_device)
    d.zero_point_kind = QuantZeroPoint::none;
  else
    d.zero_point_kind = QuantZeroPoint::int32;  // host per-tensor: params['zero_point']
  if (params.contains("zero_point_kind")) {
    const std::string z = param<std::string>(params, "zero_point_kind", "");
    d.zero_point_kind = z == "none"      ? QuantZeroPoint::none
                        : z == "float32" ? QuantZeroPoint::float32
                                         : QuantZeroPoint::int32;
  }
  // dequantize's backward reads no zero point, but the descriptor may still say the forward had one.
  d.record_amax = d.op == QuantOp::quantize && !backward && c.args.amax_out.data != nullptr;
  d.history_len = c.args.amax_history.data ? c.args.amax_history.numel() : 0;
  d.delayed = d.history_len > 0;
  return c;
}

PlanPreference pref_of(bool vectorized) {
  PlanPreference p;
  if (!vectorized) p.vectorized = Tristate::Forbid;
  return p;
}

nb::list quant_ops_rows() {
  nb::list rows;
  for (const auto& r : quant_ops()) {
    nb::dict d;
    d["name"] = r.name;
    d["engine"] = r.engine == QuantEngine::affine ? "affine" : r.engine == QuantEngine::dynamic ? "dynamic" : "linear";
    d["fw_dtypes"] = dtype_names(r.fw_dtypes);
    d["bw_dtypes"] = dtype_names(r.bw_dtypes);
    d["q_dtypes"] = dtype_names(r.q_dtypes);
    d["granularities"] = r.granularities;
    d["torch"] = r.torch;
    rows.append(d);
  }
  return rows;
}

// ---- quantized_linear ------------------------------------------------------------------------------
struct LinearCall {
  QuantizedLinearDesc desc;
  QuantizedLinearArgs args;
  std::vector<View> views;
  int device = -1;
};

LinearCall make_linear(const nb::dict& tensors) {
  LinearCall c;
  const char* label = "quantized_linear";
  const char* const roles[] = {"x", "weight", "w_scale", "bias", "y"};
  TensorRef* refs[] = {&c.args.x, &c.args.weight, &c.args.w_scale, &c.args.bias};
  for (auto [k, v] : tensors) {
    const std::string key = nb::cast<std::string>(k);
    if (v.is_none()) continue;
    size_t i = 0;
    while (i < std::size(roles) && key != roles[i]) ++i;
    if (i == std::size(roles))
      fail(std::string(label) + ": unknown tensor role '" + key + "' (x, weight, w_scale, bias, y)");
    View view = to_view(label, v, roles[i], 0, i == 4);
    if (i == 4)
      c.args.y = view.t;
    else
      *refs[i] = view.t;
    if (c.device < 0) c.device = view.device;
    c.views.push_back(std::move(view));
  }
  if (!present(c.args.x) || !present(c.args.weight) || c.args.x.layout.rank != 2 || c.args.weight.layout.rank != 2)
    fail(std::string(label) + ": expected 2-D 'x' [m, k] and 'weight' [n, k] tensors");
  c.desc.dtype = c.args.x.dtype;
  c.desc.m = c.args.x.layout.shape[0];
  c.desc.k = c.args.x.layout.shape[1];
  c.desc.n = c.args.weight.layout.shape[0];
  c.desc.bias = present(c.args.bias);
  return c;
}

// ---- w4a16_linear ----------------------------------------------------------------------------------
struct W4Call {
  W4A16LinearDesc desc;
  W4A16LinearArgs args;
  std::vector<View> views;
  int device = -1;
};

/// tensors: x [m, k], weight [n, k / 2] (uint8 carrying two 4-bit codes a byte, reinterpreted as
/// params' weight_dtype), scale [n, k / G] float32, zero_point [n, k / G] int32 (optional), bias [n]
/// (optional), y [m, n]; params: weight_dtype ("int4" / "uint4"), group_size.
W4Call make_w4(const nb::dict& tensors, const nb::dict& params) {
  W4Call c;
  const char* label = "w4a16_linear";
  const char* const roles[] = {"x", "weight", "scale", "zero_point", "bias", "y"};
  TensorRef* refs[] = {&c.args.x, &c.args.weight, &c.args.scale, &c.args.zero_point, &c.args.bias};
  for (auto [k, v] : tensors) {
    const std::string key = nb::cast<std::string>(k);
    if (v.is_none()) continue;
    size_t i = 0;
    while (i < std::size(roles) && key != roles[i]) ++i;
    if (i == std::size(roles))
      fail(std::string(label) + ": unknown tensor role '" + key + "' (x, weight, scale, zero_point, bias, y)");
    View view = to_view(label, v, roles[i], 0, i == 5);
    if (i == 5)
      c.args.y = view.t;
    else
      *refs[i] = view.t;
    if (c.device < 0) c.device = view.device;
    c.views.push_back(std::move(view));
  }
  if (!present(c.args.x) || !present(c.args.weight) || c.args.x.layout.rank != 2 || c.args.weight.layout.rank != 2)
    fail(std::string(label) + ": expected 2-D 'x' [m, k] and 'weight' [n, k / 2] tensors");
  const std::string wname = param<std::string>(params, "weight_dtype", "uint4");
  const auto wdt = dtype_from_name(wname);
  if (!wdt) fail(std::string(label) + ": unknown weight_dtype '" + wname + "'");
  if (c.args.weight.dtype == DType::u8 || c.args.weight.dtype == DType::s8) c.args.weight.dtype = *wdt;
  W4A16LinearDesc& d = c.desc;
  d.dtype = c.args.x.dtype;
  d.weight_dtype = *wdt;
  d.m = c.args.x.layout.shape[0];
  d.k = c.args.x.layout.shape[1];
  d.n = c.args.weight.layout.shape[0];
  d.group_size = param<int64_t>(params, "group_size", 128);
  d.zero_point = present(c.args.zero_point);
  d.bias = present(c.args.bias);
  return c;
}

void bind_quant(nb::module_& m) {
  m.def("quant_ops", &quant_ops_rows, "One dict per row of quant_ops.def.");
  m.def(
      "quant",
      [](const std::string& op, bool backward, nb::dict tensors, nb::dict params, uintptr_t stream,
         nb::object workspace, bool vectorized) {
        QuantCall c = make_call(op, backward, tensors, params);
        View wsv;
        const Workspace ws = workspace_of(c.label, workspace, wsv);
        Result<void> r;
        {
          nb::gil_scoped_release release;
          DeviceGuard g(c.device);
          r = baracuda::quant(reinterpret_cast<cudaStream_t>(stream), c.desc, c.args, ws, pref_of(vectorized));
        }
        unwrap(r);
      },
      nb::arg("op"), nb::arg("backward"), nb::arg("tensors"), nb::arg("params"), nb::arg("stream") = 0,
      nb::arg("workspace") = nb::none(), nb::arg("vectorized") = true,
      "Runs a quantization plan (cached by descriptor) on `stream`. `tensors` maps QuantArgs roles (x, q, dy, "
      "scale, zero_point, out, mask, scale_out, zero_point_out, amax_out, amax_history, dscale, dzero_point) to "
      "tensors; `params` "
      "holds q_dtype, granularity, axis, group_size, q_min, q_max, scale, zero_point, zero_point_kind, grad_factor.");
  m.def(
      "quant_workspace_size",
      [](const std::string& op, bool backward, nb::dict tensors, nb::dict params) {
        QuantCall c = make_call(op, backward, tensors, params);
        return unwrap(QuantPlan::select(target_for(c.device), c.desc)).workspace_size();
      },
      nb::arg("op"), nb::arg("backward"), nb::arg("tensors"), nb::arg("params"));
  m.def(
      "quant_sku",
      [](const std::string& op, bool backward, nb::dict tensors, nb::dict params, bool vectorized) {
        QuantCall c = make_call(op, backward, tensors, params);
        const QuantPlan p = unwrap(QuantPlan::select(target_for(c.device), c.desc, pref_of(vectorized)));
        unwrap(p.can_implement(c.args));
        return p.sku().to_string() + " layout=" + p.layout_for(c.args);
      },
      nb::arg("op"), nb::arg("backward"), nb::arg("tensors"), nb::arg("params"), nb::arg("vectorized") = true);
  m.def(
      "quantized_linear",
      [](nb::dict tensors, uintptr_t stream, nb::object workspace) {
        LinearCall c = make_linear(tensors);
        View wsv;
        const Workspace ws = workspace_of("quantized_linear", workspace, wsv);
        Result<void> r;
        {
          nb::gil_scoped_release release;
          DeviceGuard g(c.device);
          r = baracuda::quantized_linear(reinterpret_cast<cudaStream_t>(stream), c.desc, c.args, ws);
        }
        unwrap(r);
      },
      nb::arg("tensors"), nb::arg("stream") = 0, nb::arg("workspace") = nb::none(),
      "W8A8 linear: tensors x [m, k] (bf16/f16/f32), weight [n, k] int8, w_scale [n] float32, bias [n] (optional), "
      "y [m, n].");
  m.def(
      "quantized_linear_workspace_size",
      [](nb::dict tensors) {
        LinearCall c = make_linear(tensors);
        return unwrap(QuantizedLinearPlan::select(target_for(c.device), c.desc)).workspace_size();
      },
      nb::arg("tensors"));
  m.def(
      "w4a16_linear",
      [](nb::dict tensors, nb::dict params, uintptr_t stream, nb::object workspace) {
        W4Call c = make_w4(tensors, params);
        View wsv;
        const Workspace ws = workspace_of("w4a16_linear", workspace, wsv);
        Result<void> r;
        {
          nb::gil_scoped_release release;
          DeviceGuard g(c.device);
          r = baracuda::w4a16_linear(reinterpret_cast<cudaStream_t>(stream), c.desc, c.args, ws);
        }
        unwrap(r);
      },
      nb::arg("tensors"), nb::arg("params"), nb::arg("stream") = 0, nb::arg("workspace") = nb::none(),
      "W4A16 linear: tensors x [m, k] (bf16/f16), weight [n, k/2] (uint8, two 4-bit codes a byte, even k low), "
      "scale [n, k/G] float32, zero_point [n, k/G] int32 (optional), bias [n] (optional), y [m, n]; params "
      "weight_dtype ('int4' / 'uint4'), group_size.");
  m.def(
      "w4a16_linear_workspace_size",
      [](nb::dict tensors, nb::dict params) {
        W4Call c = make_w4(tensors, params);
        return unwrap(W4A16LinearPlan::select(target_for(c.device), c.desc)).workspace_size();
      },
      nb::arg("tensors"), nb::arg("params"));
  m.def(
      "w4a16_linear_sku",
      [](nb::dict tensors, nb::dict params) {
        W4Call c = make_w4(tensors, params);
        const W4A16LinearPlan p = unwrap(W4A16LinearPlan::select(target_for(c.device), c.desc));
        return p.sku().to_string() + " path=" + p.path();
      },
      nb::arg("tensors"), nb::arg("params"));
  m.def(
      "quantized_linear_sku",
      [](nb::dict tensors) {
        LinearCall c = make_linear(tensors);
        return unwrap(QuantizedLinearPlan::select(target_for(c.device), c.desc)).sku().to_string();
      },
      nb::arg("tensors"));
}

const bool reg = baracuda::py::register_bindings(&bind_quant);

}  // namespace
