// baracuda._C bindings of the indexing family (include/baracuda/ops/index.hpp). Tensors arrive
// by role in a dict ({"x": t, "index": i, "out": y, "error": flag, "inputs": [a, b],
// "indices": [i0, i1], "mask": m, "count": c}, the IndexArgs field names) and scalar
// parameters in a second dict (dim, pads, mode, value, shifts, repeats, flip_dims, diagonal,
// padding_idx, num_segments, reduce, include_self, accumulate, phase, max_count, fill_index,
// lax's dimension numbers, embedding_bag's mode / include_last_offset / scale_grad_by_freq,
// embedding_renorm's max_norm / norm_type, tril/triu_indices' row / col / offset); the
// descriptor is derived from both: dtype from the output (from x for nonzero / masked_select /
// embedding_bag), shapes from the tensors.
#include <cuda_runtime_api.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "baracuda/ops/index.hpp"
#include "ext_common.hpp"

namespace nb = nanobind;
using namespace baracuda;
using namespace baracuda::py;

namespace {

struct IndexCall {
  std::string label;
  IndexDesc desc;
  IndexArgs args;
  std::vector<TensorRef> inputs;
  std::vector<TensorRef> indices;
  std::vector<int> lists[3];  ///< lax dimension numbers (the spans of GatherDims / ScatterDims)
  std::vector<View> views;    ///< keeps the DLPack exports alive for the call
  int device = -1;
};

template <class T>
T param(const nb::dict& p, const char* key, T fallback) {
  if (!p.contains(key) || p[key].is_none()) return fallback;
  return nb::cast<T>(p[key]);
}

std::vector<int64_t> int_list(const nb::dict& p, const char* key) {
  std::vector<int64_t> v;
  if (!p.contains(key) || p[key].is_none()) return v;
  for (nb::handle h : nb::iter(p[key])) v.push_back(nb::cast<int64_t>(h));
  return v;
}

std::vector<int> small_list(const nb::dict& p, const char* key) {
  std::vector<int> v;
  for (int64_t x : int_list(p, key)) v.push_back(static_cast<int>(x));
  return v;
}

template <class E>
E enum_param(const std::string& label, const nb::dict& p, const char* key, E fallback,
             std::optional<E> (*parse)(std::string_view), const char* choices) {
  if (!p.contains(key) || p[key].is_none()) return fallback;
  const std::string v = nb::cast<std::string>(p[key]);
  const auto e = parse(v);
  if (!e) fail(label + ": " + key + " expected " + choices + ", got '" + v + "'");
  return *e;
}

std::optional<SelectPhase> phase_from_name(std::string_view n) {
  if (n == "all") return SelectPhase::all;
  if (n == "count") return SelectPhase::count;
  if (n == "write") return SelectPhase::write;
  return std::nullopt;
}

IndexCall make_call(const std::string& op, bool backward, const nb::dict& tensors, const nb::dict& params) {
  IndexCall c;
  const auto o = index_op_from_name(op);
  if (!o) fail("baracuda: unknown index op '" + op + "'");
  c.label = op + (backward ? "_backward" : "");
  const Direction dir = backward ? Direction::Backward : Direction::Forward;
  bool have_out = false;
  for (auto [k, v] : tensors) {
    const std::string key = nb::cast<std::string>(k);
    if (v.is_none()) continue;
    auto take = [&](const char* role, bool writable, size_t idx = 0) -> TensorMut {
      View view = to_view(c.label, v, role, idx, writable);
      if (c.device < 0) c.device = view.device;
      const TensorMut t = view.t;
      c.views.push_back(std::move(view));
      return t;
    };
    if (key == "x")
      c.args.x = take("x", false);
    else if (key == "src")
      c.args.src = take("src", false);
    else if (key == "index")
      c.args.index = take("index", false);
    else if (key == "out") {
      c.args.out = take("out", true);
      have_out = true;
    } else if (key == "error")
      c.args.error = take("error", true);
    else if (key == "count")
      c.args.count = take("count", true);
    else if (key == "mask")
      c.args.mask = take("mask", false);
    else if (key == "offsets")
      c.args.offsets = take("offsets", false);
    else if (key == "per_sample_weights")
      c.args.per_sample_weights = take("per_sample_weights", false);
    else if (key == "weight")
      c.args.weight = take("weight", false);
    else if (key == "max_indices")
      c.args.max_indices = take("max_indices", !backward);  // the forward writes it, the backward reads it
    else if (key == "grad_per_sample_weights")
      c.args.grad_per_sample_weights = take("grad_per_sample_weights", true);
    else if (key == "inputs" || key == "indices") {
      auto& list = key == "inputs" ? c.inputs : c.indices;
      size_t i = 0;
      for (nb::handle h : nb::iter(v)) {
        View view = to_view(c.label, h, key.c_str(), i++, false);
        if (c.device < 0) c.device = view.device;
        list.push_back(view.t);
        c.views.push_back(std::move(view));
      }
    } else {
      fail(c.label + ": unknown tensor role '" + key +
           "' (expected x, src, index, indices, inputs, mask, out, count, error, offsets, per_sample_weights, "
           "weight, max_indices, grad_per_sample_weights)");
    }
  }
  c.args.inputs = c.inputs;
  c.args.indices = c.indices;
  const bool select_op = *o == IndexOp::nonzero || *o == IndexOp::masked_select;
  const SelectPhase phase =
      enum_param<SelectPhase>(c.label, params, "phase", SelectPhase::all, phase_from_name, "all, count or write");
  const bool bag = *o == IndexOp::embedding_bag;
  // embedding_bag's backward may write grad_per_sample_weights alone.
  const bool out_optional =
      (select_op && phase == SelectPhase::count) || (bag && backward && c.args.grad_per_sample_weights.data);
  if (!have_out && !out_optional) fail(c.label + ": expected an 'out' tensor");
  // The data dtype: the output's, except where the output is of another kind (nonzero's int64
  // coordinates) or may be absent (the count phase, embedding_bag's backward).
  const DType dt = select_op || bag ? c.args.x.dtype : c.args.out.dtype;
  const DType it = c.args.index.data || c.args.index.layout.rank ? c.args.index.dtype
                   : !c.indices.empty()                          ? c.indices[0].dtype
                                                                 : DType::s64;
  const Shape xs = Shape::of(c.args.x.layout), os = Shape::of(c.args.out.layout);
  const Shape is = Shape::of(c.args.index.layout), ss = Shape::of(c.args.src.layout);
  const int dim = param<int>(params, "dim", 0);
  switch (*o) {
    case IndexOp::copy:
      c.desc = IndexDesc::copy(dt, os);
      break;
    case IndexOp::cat:
      c.desc = IndexDesc::cat(dt, os, dim, static_cast<int>(c.inputs.size()));
      break;
    case IndexOp::stack:
      if (c.inputs.empty()) fail(c.label + ": expected at least one input");
      c.desc = IndexDesc::stack(dt, Shape::of(c.inputs[0].layout), dim, static_cast<int>(c.inputs.size()));
      break;
    case IndexOp::pad: {
      const auto mode = pad_mode_from_name(param<std::string>(params, "mode", "constant"));
      if (!mode) fail(c.label + ": mode expected constant, reflect, replicate or circular");
      const auto pads = int_list(params, "pads");
      c.desc = IndexDesc::pad_nd(dt, backward ? os : xs, pads, *mode, param<double>(params, "value", 0.0), dir);
      break;
    }
    case IndexOp::flip: {
      uint32_t mask = 0;
      for (int64_t d : int_list(params, "flip_dims")) mask |= 1u << (d & 31);
      c.desc = IndexDesc::flip(dt, xs, mask);
      break;
    }
    case IndexOp::roll:
      c.desc = IndexDesc::roll(dt, xs, int_list(params, "shifts"));
      break;
    case IndexOp::tile:
      c.desc = IndexDesc::tile(dt, xs, int_list(params, "repeats"));
      break;
    case IndexOp::triu:
      c.desc = IndexDesc::triu(dt, xs, param<int64_t>(params, "diagonal", 0));
      break;
    case IndexOp::tril:
      c.desc = IndexDesc::tril(dt, xs, param<int64_t>(params, "diagonal", 0));
      break;
    case IndexOp::gather:
      c.desc = IndexDesc::gather(dt, it, xs, is, dim);
      break;
    case IndexOp::index_select:
      c.desc = IndexDesc::index_select(dt, it, xs, is.numel(), dim);
      break;
    case IndexOp::embedding: {
      const Shape& table = backward ? os : xs;
      if (table.rank != 2) fail(c.label + ": weight expected 2-d, got shape " + table.str());
      c.desc = IndexDesc::embedding(dt, it, table.dims[0], table.dims[1], is, param<int64_t>(params, "padding_idx", -1),
                                    dir, param<bool>(params, "scale_grad_by_freq", false));
      break;
    }
    case IndexOp::embedding_bag: {
      // The table: the weight (forward), grad_weight or, without it, the weight read for
      // grad_per_sample_weights (backward).
      const Shape table = !backward ? xs : have_out ? os : Shape::of(c.args.weight.layout);
      if (table.rank != 2) fail(c.label + ": weight expected 2-d, got shape " + table.str());
      const std::string mode = param<std::string>(params, "mode", "mean");
      ScatterReduce red = ScatterReduce::sum;
      if (mode == "mean")
        red = ScatterReduce::mean;
      else if (mode == "max")
        red = ScatterReduce::amax;
      else if (mode != "sum")
        fail(c.label + ": mode expected sum, mean or max, got '" + mode + "'");
      EmbeddingBagOptions opt;
      opt.include_last_offset = param<bool>(params, "include_last_offset", false);
      opt.per_sample_weights = c.args.per_sample_weights.data != nullptr || c.args.per_sample_weights.layout.rank != 0;
      opt.padding_idx = param<int64_t>(params, "padding_idx", -1);
      opt.scale_grad_by_freq = param<bool>(params, "scale_grad_by_freq", false);
      const int64_t num_offsets = c.args.offsets.layout.rank == 1 ? c.args.offsets.layout.shape[0] : 0;
      c.desc = IndexDesc::embedding_bag(dt, it, table.dims[0], table.dims[1], is, num_offsets, red, opt, dir);
      break;
    }
    case IndexOp::embedding_renorm:
      if (os.rank != 2) fail(c.label + ": weight (out) expected 2-d, got shape " + os.str());
      c.desc = IndexDesc::embedding_renorm(dt, it, os.dims[0], os.dims[1], is, param<double>(params, "max_norm", 0.0),
                                           param<double>(params, "norm_type", 2.0));
      break;
    case IndexOp::tril_indices:
    case IndexOp::triu_indices: {
      const int64_t row = param<int64_t>(params, "row", 0), col = param<int64_t>(params, "col", 0);
      const int64_t off = param<int64_t>(params, "offset", 0);
      c.desc = *o == IndexOp::tril_indices ? IndexDesc::tril_indices(dt, row, col, off)
                                           : IndexDesc::triu_indices(dt, row, col, off);
      break;
    }
    case IndexOp::scatter_add:
      c.desc = IndexDesc::scatter_add(dt, it, xs, is, ss, dim);
      break;
    case IndexOp::scatter:
      c.desc = IndexDesc::scatter(dt, it, xs, is, ss, dim);
      break;
    case IndexOp::index_copy:
      c.desc = IndexDesc::index_copy(dt, it, xs, ss, dim);
      break;
    case IndexOp::index_add:
      c.desc = IndexDesc::index_add(dt, it, xs, ss, dim);
      break;
    case IndexOp::repeat_interleave:
      c.desc = IndexDesc::repeat_interleave(dt, xs, param<int64_t>(params, "repeats", 1), dim);
      break;
    case IndexOp::segment_sum:
    case IndexOp::segment_max:
    case IndexOp::segment_min:
    case IndexOp::segment_prod:
    case IndexOp::segment_mean:
      c.desc = IndexDesc::segment(dt, it, xs, param<int64_t>(params, "num_segments", 0), *o);
      break;
    case IndexOp::scatter_reduce:
      c.desc = IndexDesc::scatter_reduce(
          dt, it, xs, is, ss, dim,
          enum_param<ScatterReduce>(c.label, params, "reduce", ScatterReduce::sum, scatter_reduce_from_name,
                                    "sum, prod, mean, amax or amin"),
          param<bool>(params, "include_self", true));
      break;
    case IndexOp::index:
    case IndexOp::index_put: {
      if (c.indices.empty()) fail(c.label + ": expected at least one tensor in 'indices'");
      const Shape ishape = Shape::of(c.indices[0].layout);
      const int k = static_cast<int>(c.indices.size());
      c.desc = *o == IndexOp::index
                   ? IndexDesc::index(dt, it, xs, ishape, k)
                   : IndexDesc::index_put(dt, it, xs, ishape, k, param<bool>(params, "accumulate", false));
      break;
    }
    case IndexOp::one_hot:
      if (os.rank < 1) fail(c.label + ": out expected at least 1 dim (the classes)");
      c.desc = IndexDesc::one_hot(dt, it, is, os.dims[os.rank - 1]);
      break;
    case IndexOp::nonzero:
    case IndexOp::masked_select: {
      const int64_t bound = have_out ? (os.rank >= 1 ? os.dims[0] : 0) : param<int64_t>(params, "max_count", 0);
      c.desc = *o == IndexOp::nonzero
                   ? IndexDesc::nonzero(dt, xs, bound, param<int64_t>(params, "fill_index", -1), phase)
                   : IndexDesc::masked_select(dt, xs, bound, phase);
      break;
    }
    case IndexOp::masked_scatter:
      c.desc = IndexDesc::masked_scatter(dt, xs, ss);
      break;
    case IndexOp::lax_gather:
    case IndexOp::lax_scatter: {
      const IndexMode mode =
          enum_param<IndexMode>(c.label, params, "mode", IndexMode::fill, index_mode_from_name, "clip, fill or check");
      const int ivd = param<int>(params, "index_vector_dim", -1);
      if (*o == IndexOp::lax_gather) {
        c.lists[0] = small_list(params, "offset_dims");
        c.lists[1] = small_list(params, "collapsed_slice_dims");
        c.lists[2] = small_list(params, "start_index_map");
        const auto sizes = int_list(params, "slice_sizes");
        c.desc = IndexDesc::lax_gather(dt, it, xs, is, GatherDims{c.lists[0], c.lists[1], c.lists[2], ivd}, sizes, mode,
                                       param<double>(params, "value", 0.0));
      } else {
        c.lists[0] = small_list(params, "update_window_dims");
        c.lists[1] = small_list(params, "inserted_window_dims");
        c.lists[2] = small_list(params, "scatter_dims_to_operand_dims");
        c.desc =
            IndexDesc::lax_scatter(dt, it, xs, is, ss, ScatterDims{c.lists[0], c.lists[1], c.lists[2], ivd},
                                   enum_param<ScatterReduce>(c.label, params, "reduce", ScatterReduce::none,
                                                             scatter_reduce_from_name, "none, sum, prod, amax or amin"),
                                   mode);
      }
      break;
    }
  }
  c.desc.direction = dir;
  return c;
}

PlanPreference pref_of(bool deterministic, bool vectorized) {
  PlanPreference p;
  p.require_deterministic = deterministic;
  if (!vectorized) p.vectorized = Tristate::Forbid;
  return p;
}

nb::list index_ops_rows() {
  nb::list rows;
  for (const auto& r : index_ops()) {
    nb::dict d;
    d["name"] = r.name;
    d["engine"] = r.engine == IndexEngine::copy       ? "copy"
                  : r.engine == IndexEngine::gather   ? "gather"
                  : r.engine == IndexEngine::select   ? "select"
                  : r.engine == IndexEngine::rows     ? "rows"
                  : r.engine == IndexEngine::generate ? "generate"
                                                      : "scatter";
    d["fw_dtypes"] = dtype_names(r.fw_dtypes);
    d["bw_dtypes"] = dtype_names(r.bw_dtypes);
    d["index"] = r.takes_index;
    d["flag"] = r.reports_errors;
    rows.append(d);
  }
  return rows;
}

void bind_index(nb::module_& m) {
  m.def("index_ops", &index_ops_rows, "One dict per row of index_ops.def.");
  m.def(
      "index",
      [](const std::string& op, bool backward, nb::dict tensors, nb::dict params, uintptr_t stream,
         nb::object workspace, bool deterministic, bool vectorized) {
        IndexCall c = make_call(op, backward, tensors, params);
        c.args.inputs = c.inputs;  // the spans follow the vectors into this frame
        c.args.indices = c.indices;
        View wsv;
        const Workspace ws = workspace_of(c.label, workspace, wsv);
        Result<void> r;
        {
          nb::gil_scoped_release release;
          DeviceGuard g(c.device);
          r = baracuda::index(reinterpret_cast<cudaStream_t>(stream), c.desc, c.args, ws,
                              pref_of(deterministic, vectorized));
        }
        unwrap(r);
      },
      nb::arg("op"), nb::arg("backward"), nb::arg("tensors"), nb::arg("params"), nb::arg("stream") = 0,
      nb::arg("workspace") = nb::none(), nb::arg("deterministic") = false, nb::arg("vectorized") = true,
      "Runs an indexing-family plan (cached by descriptor) on `stream`. `tensors` maps IndexArgs roles (x, src, "
      "index, indices (a list), inputs (a list), mask, out, count, error, offsets, per_sample_weights, weight, "
      "max_indices, grad_per_sample_weights) to tensors; `params` holds dim, pads, mode, value, shifts, repeats, "
      "flip_dims, diagonal, padding_idx, num_segments, reduce, include_self, accumulate, phase (all / count / "
      "write), max_count, fill_index, offset_dims, collapsed_slice_dims, start_index_map, slice_sizes, "
      "update_window_dims, inserted_window_dims, scatter_dims_to_operand_dims, index_vector_dim, "
      "include_last_offset, scale_grad_by_freq, max_norm, norm_type, row, col, offset (embedding_bag's mode is "
      "'sum', 'mean' or 'max'). `deterministic` = PlanPreference::require_deterministic.");
  m.def(
      "index_workspace_size",
      [](const std::string& op, bool backward, nb::dict tensors, nb::dict params, bool deterministic) {
        IndexCall c = make_call(op, backward, tensors, params);
        c.args.inputs = c.inputs;  // the spans follow the vectors into this frame
        c.args.indices = c.indices;
        DeviceGuard g(c.device);
        return unwrap(IndexPlan::select(target_for(c.device), c.desc, pref_of(deterministic, true))).workspace_size();
      },
      nb::arg("op"), nb::arg("backward"), nb::arg("tensors"), nb::arg("params"), nb::arg("deterministic") = false);
  m.def(
      "index_sku",
      [](const std::string& op, bool backward, nb::dict tensors, nb::dict params, bool deterministic, bool vectorized) {
        IndexCall c = make_call(op, backward, tensors, params);
        c.args.inputs = c.inputs;  // the spans follow the vectors into this frame
        c.args.indices = c.indices;
        DeviceGuard g(c.device);
        const IndexPlan p = unwrap(IndexPlan::select(target_for(c.device), c.desc, pref_of(deterministic, vectorized)));
        unwrap(p.can_implement(c.args));
        return p.sku().to_string() + " layout=" + p.layout_for(c.args);
      },
      nb::arg("op"), nb::arg("backward"), nb::arg("tensors"), nb::arg("params"), nb::arg("deterministic") = false,
      nb::arg("vectorized") = true);
}

const bool reg = baracuda::py::register_bindings(&bind_index);

}  // namespace
