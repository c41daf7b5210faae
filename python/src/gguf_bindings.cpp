// baracuda._C bindings of the GGUF block formats (include/baracuda/ops/gguf.hpp). The format travels
// as its name ("q4_K", case-insensitive, or the ggml type number as text); the descriptor's sizes
// come from the tensors: dequantize's rows and cols from `out` [rows, cols], the matvec's m and k
// from x [m, k], n from y [m, n], the dtype from x (or out). Packed weights are uint8 tensors of
// raw GGUF bytes.
#include <cuda_runtime_api.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <string>
#include <vector>

#include "baracuda/ops/gguf.hpp"
#include "ext_common.hpp"

namespace nb = nanobind;
using namespace baracuda;
using namespace baracuda::py;

namespace {

bool present(const TensorRef& t) { return t.data != nullptr || t.layout.rank != 0; }

GgufFormat format_of(const std::string& label, const std::string& fmt) {
  if (auto f = gguf_format_from_name(fmt)) return *f;
  std::string names;
  for (const auto& r : gguf_formats()) names += std::string(names.empty() ? "" : ", ") + r.name;
  fail(label + ": unknown GGUF format '" + fmt + "' (expected one of " + names + ", or a ggml type number)");
}

nb::list format_rows() {
  nb::list rows;
  for (const auto& r : gguf_formats()) {
    nb::dict d;
    d["name"] = r.name;
    d["ggml_type"] = r.ggml_type;
    d["block_size"] = r.block_size;
    d["block_bytes"] = r.block_bytes;
    rows.append(d);
  }
  return rows;
}

// ---- dequantize ---------------------------------------------------------------------------------------
struct DequantCall {
  GgufDequantizeDesc desc;
  GgufDequantizeArgs args;
  std::vector<View> views;
  int device = -1;
};

/// packed: uint8 bytes; out: [rows, cols] float32 / float16 / bfloat16.
DequantCall make_dequant(nb::handle packed, nb::handle out, const std::string& fmt) {
  const char* label = "gguf_dequantize";
  DequantCall c;
  View p = to_view(label, packed, "packed", 0, false);
  View o = to_view(label, out, "out", 0, true);
  c.args.packed = p.t;
  c.args.out = o.t;
  c.device = p.device >= 0 ? p.device : o.device;
  c.views.push_back(std::move(p));
  c.views.push_back(std::move(o));
  if (c.args.out.layout.rank != 2) fail(std::string(label) + ": expected a 2-D 'out' [rows, cols]");
  c.desc.format = format_of(label, fmt);
  c.desc.dtype = c.args.out.dtype;
  c.desc.rows = c.args.out.layout.shape[0];
  c.desc.cols = c.args.out.layout.shape[1];
  return c;
}

// ---- matvec ------------------------------------------------------------------------------------------------
struct MatvecCall {
  GgufMatvecDesc desc;
  GgufMatvecArgs args;
  std::vector<View> views;
  int device = -1;
};

/// tensors: x [m, k], weight (uint8 bytes), bias [n] (optional), y [m, n].
MatvecCall make_matvec(const nb::dict& tensors, const std::string& fmt) {
  const char* label = "gguf_matvec";
  MatvecCall c;
  const char* const roles[] = {"x", "weight", "bias", "y"};
  TensorRef* refs[] = {&c.args.x, &c.args.weight, &c.args.bias};
  for (auto [k, v] : tensors) {
    const std::string key = nb::cast<std::string>(k);
    if (v.is_none()) continue;
    size_t i = 0;
    while (i < std::size(roles) && key != roles[i]) ++i;
    if (i == std::size(roles)) fail(std::string(label) + ": unknown tensor role '" + key + "' (x, weight, bias, y)");
    View view = to_view(label, v, roles[i], 0, i == 3);
    if (i == 3)
      c.args.y = view.t;
    else
      *refs[i] = view.t;
    if (c.device < 0) c.device = view.device;
    c.views.push_back(std::move(view));
  }
  if (!present(c.args.x) || c.args.x.layout.rank != 2 || !present(c.args.y) || c.args.y.layout.rank != 2)
    fail(std::string(label) + ": expected 2-D 'x' [m, k] and 'y' [m, n] tensors");
  GgufMatvecDesc& d = c.desc;
  d.format = format_of(label, fmt);
  d.dtype = c.args.x.dtype;
  d.m = c.args.x.layout.shape[0];
  d.k = c.args.x.layout.shape[1];
  d.n = c.args.y.layout.shape[1];
  d.bias = present(c.args.bias);
  return c;
}

void bind_gguf(nb::module_& m) {
  m.def("gguf_formats", &format_rows,
        "One dict per GGUF format (BARACUDA_GGUF_FORMATS): name, ggml_type, block_size, block_bytes.");
  m.def(
      "gguf_dequantize",
      [](nb::handle packed, nb::handle out, const std::string& fmt, uintptr_t stream) {
        DequantCall c = make_dequant(packed, out, fmt);
        Result<void> r;
        {
          nb::gil_scoped_release release;
          DeviceGuard g(c.device);
          r = baracuda::gguf_dequantize(reinterpret_cast<cudaStream_t>(stream), c.desc, c.args);
        }
        unwrap(r);
      },
      nb::arg("packed"), nb::arg("out"), nb::arg("fmt"), nb::arg("stream") = 0,
      "Dequantizes GGUF bytes `packed` (uint8, rows * cols / block * block_bytes bytes) into `out` [rows, cols] "
      "(float32 / float16 / bfloat16) on `stream`.");
  m.def(
      "gguf_dequantize_sku",
      [](nb::handle packed, nb::handle out, const std::string& fmt) {
        DequantCall c = make_dequant(packed, out, fmt);
        const GgufDequantizePlan p = unwrap(GgufDequantizePlan::select(target_for(c.device), c.desc));
        unwrap(p.can_implement(c.args));
        return p.sku().to_string();
      },
      nb::arg("packed"), nb::arg("out"), nb::arg("fmt"));
  m.def(
      "gguf_matvec",
      [](nb::dict tensors, const std::string& fmt, uintptr_t stream, nb::object workspace) {
        MatvecCall c = make_matvec(tensors, fmt);
        View wsv;
        const Workspace ws = workspace_of("gguf_matvec", workspace, wsv);
        Result<void> r;
        {
          nb::gil_scoped_release release;
          DeviceGuard g(c.device);
          r = baracuda::gguf_matvec(reinterpret_cast<cudaStream_t>(stream), c.desc, c.args, ws);
        }
        unwrap(r);
      },
      nb::arg("tensors"), nb::arg("fmt"), nb::arg("stream") = 0, nb::arg("workspace") = nb::none(),
      "y = x @ W^T (+ bias) with W [n, k] in GGUF format `fmt`: tensors x [m, k] (m <= 8; float32 / float16 / "
      "bfloat16), weight (uint8 GGUF bytes), bias [n] (optional), y [m, n].");
  m.def(
      "gguf_matvec_workspace_size",
      [](nb::dict tensors, const std::string& fmt) {
        MatvecCall c = make_matvec(tensors, fmt);
        return unwrap(GgufMatvecPlan::select(target_for(c.device), c.desc)).workspace_size();
      },
      nb::arg("tensors"), nb::arg("fmt"));
  m.def(
      "gguf_matvec_sku",
      [](nb::dict tensors, const std::string& fmt) {
        MatvecCall c = make_matvec(tensors, fmt);
        const GgufMatvecPlan p = unwrap(GgufMatvecPlan::select(target_for(c.device), c.desc));
        const auto& g = p.geometry();
        return p.sku().to_string() + " splits=" + std::to_string(g.splits) +
               " rows_per_warp=" + std::to_string(g.rows_per_warp);
      },
      nb::arg("tensors"), nb::arg("fmt"));
}

const bool reg = baracuda::py::register_bindings(&bind_gguf);

}  // namespace
