// baracuda._C bindings of the GEMM family: one entry point that builds a GemmDesc from the
// tensors' own shapes, strides and pointer alignment, and runs the per-thread cached plan.
//
//   _C.gemm(a, b, d, c=None, bias=None, aux=None, aux_in=None, bgrad=None, alpha=1, beta=0,
//           act="none", backward=False, bgrad_of="none", a_scale=None, b_scale=None,
//           amax_d=None, tf32=False, backend="any", deterministic=False, stream=0,
//           workspace=None) -> int
//
// A, B, C, D (and aux, aux_in) are rank 2, or rank 3 with the batch first (all of one rank;
// batch stride 0 broadcasts an input). fp8 scales, and those of int8 x int8 -> bf16/f16/f32 (the
// CUTLASS kernel, W8A8), are float32 tensors of 1 value each, or of m and n values (per-row /
// per-column scaling). backend: any, native, cublaslt or cutlass. Returns 0 after enqueuing, or, without launching, the
// workspace size in bytes when `workspace` is missing or smaller (the caller allocates and calls
// again). _C.gemm_sku(...) takes the same tensors and returns the chosen SKU as a string.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "baracuda/ops/gemm.hpp"
#include "ext_common.hpp"

namespace nb = nanobind;
using namespace baracuda;
using namespace baracuda::py;

namespace {

GemmActivation act_from(const std::string& s) {
  if (s == "none") return GemmActivation::None;
  if (s == "relu") return GemmActivation::Relu;
  if (s == "gelu") return GemmActivation::Gelu;
  if (s == "gelu_tanh" || s == "tanh") return GemmActivation::GeluTanh;
  if (s == "silu") return GemmActivation::Silu;
  fail("gemm: act expected one of none, relu, gelu, gelu_tanh, silu, got '" + s + "'");
}
GemmBiasGrad bgrad_from(const std::string& s) {
  if (s == "none") return GemmBiasGrad::None;
  if (s == "d") return GemmBiasGrad::OfD;
  if (s == "a") return GemmBiasGrad::OfA;
  if (s == "b") return GemmBiasGrad::OfB;
  fail("gemm: bgrad_of expected one of none, d, a, b, got '" + s + "'");
}
Backend backend_from(const std::string& s) {
  if (s == "any") return Backend::Any;
  if (s == "native") return Backend::Native;
  if (s == "cublaslt") return Backend::CuBlasLt;
  if (s == "cutlass") return Backend::Cutlass;
  fail("gemm: backend expected any, native, cublaslt or cutlass, got '" + s + "'");
}

/// Largest power of two (<= 256) dividing the address; 256 for null.
uint16_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  if (a == 0) return 256;
  const uintptr_t low = a & (~a + 1);
  return static_cast<uint16_t>(low > 256 ? 256 : low);
}

struct GemmCall {
  GemmDesc desc;
  GemmArgs args;
  PlanPreference pref;
  std::vector<View> keep;  // DLPack exports alive for the call
  int device = -1;
};

MatrixStrides strides_of(const TensorRef& t) {
  const Layout& l = t.layout;
  const int r = l.rank;
  return MatrixStrides{l.stride[r - 2], l.stride[r - 1], r == 3 ? l.stride[0] : 0};
}

GemmCall make_gemm_call(nb::handle a, nb::handle b, nb::handle d, nb::handle c, nb::handle bias, nb::handle aux,
                        nb::handle aux_in, nb::handle bgrad, double alpha, double beta, const std::string& act,
                        bool backward, const std::string& bgrad_of, nb::handle a_scale, nb::handle b_scale,
                        nb::handle amax_d, bool tf32, const std::string& backend, bool deterministic) {
  GemmCall g;
  const std::string op = backward ? "gemm_backward" : "gemm";
  auto in = [&](nb::handle h, const char* role) -> TensorRef {
    if (h.is_none()) return TensorRef{};
    g.keep.push_back(to_view(op, h, role, 0, false));
    return g.keep.back().t;
  };
  auto out = [&](nb::handle h, const char* role) -> TensorMut {
    if (h.is_none()) return TensorMut{};
    g.keep.push_back(to_view(op, h, role, 0, true));
    return g.keep.back().t;
  };
  g.keep.reserve(12);
  GemmArgs& x = g.args;
  x.a = in(a, "A");
  x.b = in(b, "B");
  x.d = out(d, "D");
  g.device = g.keep[2].device;
  x.c = in(c, "C");
  x.bias = in(bias, "bias");
  x.aux = out(aux, "aux");
  x.aux_in = in(aux_in, "aux_in");
  x.bgrad = out(bgrad, "bgrad");
  x.a_scale = in(a_scale, "a_scale");
  x.b_scale = in(b_scale, "b_scale");
  x.amax_d = out(amax_d, "amax_d");
  if (x.a.rank() != x.d.rank() || x.b.rank() != x.d.rank())
    fail(op + ": A, B and D expected of one rank (2, or 3 with the batch first), got " + std::to_string(x.a.rank()) +
         ", " + std::to_string(x.b.rank()) + ", " + std::to_string(x.d.rank()));
  const int r = x.d.rank();
  if (r != 2 && r != 3) fail(op + ": D expected rank 2 or 3, got " + std::to_string(r));
  GemmDesc& s = g.desc;
  s.batch = r == 3 ? x.d.size(0) : 1;
  s.m = x.d.size(r - 2);
  s.n = x.d.size(r - 1);
  s.k = x.a.size(r - 1);
  s.a_dtype = x.a.dtype;
  s.b_dtype = x.b.dtype;
  s.d_dtype = x.d.dtype;
  s.a = strides_of(x.a);
  s.b = strides_of(x.b);
  s.d = strides_of(x.d);
  s.c = s.d;
  if (!c.is_none()) {
    if (x.c.rank() != r) fail(op + ": C expected rank " + std::to_string(r) + ", got " + std::to_string(x.c.rank()));
    s.c = strides_of(x.c);
  }
  s.alpha = alpha;
  s.beta = beta;
  if (beta != 0.0 && c.is_none()) fail(op + ": beta != 0 needs C");
  s.direction = backward ? Direction::Backward : Direction::Forward;
  s.act = act_from(act);
  s.bias = !bias.is_none();
  s.aux = !aux.is_none();
  s.bgrad = bgrad_from(bgrad_of);
  if ((s.bgrad != GemmBiasGrad::None) != !bgrad.is_none())
    fail(op + ": bgrad_of and the bgrad tensor go together (bgrad_of='" + bgrad_of + "', bgrad " +
         (bgrad.is_none() ? "missing" : "given") + ")");
  s.align = {alignment_of(x.a.data), alignment_of(x.b.data), alignment_of(c.is_none() ? x.d.data : x.c.data),
             alignment_of(x.d.data)};
  // A scale vector (more than one value) means per-row / per-column scaling (fp8, int8 -> float).
  if (x.a_scale.numel() > 1 || x.b_scale.numel() > 1) s.scale_mode = GemmScaleMode::PerRowCol;
  g.pref.tf32 = tf32 ? Tristate::Require : Tristate::Default;
  g.pref.backend = backend_from(backend);
  g.pref.require_deterministic = deterministic;
  return g;
}

#define GEMM_TENSOR_ARGS                                                                                               \
  nb::handle a, nb::handle b, nb::handle d, nb::handle c, nb::handle bias, nb::handle aux, nb::handle aux_in,          \
      nb::handle bgrad, double alpha, double beta, const std::string &act, bool backward, const std::string &bgrad_of, \
      nb::handle a_scale, nb::handle b_scale, nb::handle amax_d, bool tf32, const std::string &backend,                \
      bool deterministic
#define GEMM_FORWARD                                                                                                   \
  a, b, d, c, bias, aux, aux_in, bgrad, alpha, beta, act, backward, bgrad_of, a_scale, b_scale, amax_d, tf32, backend, \
      deterministic
#define GEMM_NB_ARGS                                                                                                \
  nb::arg("a"), nb::arg("b"), nb::arg("d"),                                                                         \
      nb::arg("c") = nb::none(), nb::arg("bias") = nb::none(), nb::arg("aux") = nb::none(),                         \
      nb::arg("aux_in") = nb::none(), nb::arg("bgrad") = nb::none(), nb::arg("alpha") = 1.0, nb::arg("beta") = 0.0, \
      nb::arg("act") = "none", nb::arg("backward") = false, nb::arg("bgrad_of") = "none",                           \
      nb::arg("a_scale") = nb::none(), nb::arg("b_scale") = nb::none(), nb::arg("amax_d") = nb::none(),             \
      nb::arg("tf32") = false, nb::arg("backend") = "any", nb::arg("deterministic") = false

/// A grouped GEMM call: the descriptor from the tensors' own shapes, strides and D's alignment.
struct GroupedCall {
  GroupedGemmDesc desc;
  GroupedGemmArgs args;
  PlanPreference pref;
  std::vector<View> keep;  // DLPack exports alive for the call
  int device = -1;
};

GroupedCall make_grouped_call(nb::handle a, nb::handle w, nb::handle offsets, nb::handle d, bool ends_only,
                              const std::string& backend) {
  GroupedCall g;
  g.keep.reserve(4);
  g.keep.push_back(to_view("grouped_gemm", a, "A", 0, false));
  g.keep.push_back(to_view("grouped_gemm", w, "W", 0, false));
  g.keep.push_back(to_view("grouped_gemm", offsets, "offsets", 0, false));
  g.keep.push_back(to_view("grouped_gemm", d, "D", 0, true));
  g.args = GroupedGemmArgs{g.keep[0].t, g.keep[1].t, g.keep[2].t, g.keep[3].t};
  const TensorRef &ta = g.args.a, &tw = g.args.w;
  const TensorMut& td = g.args.d;
  if (ta.rank() != 2 || tw.rank() != 3 || td.rank() != 2)
    fail("grouped_gemm: expected A [rows, k], W [groups, n, k] and D [rows, n], got ranks " +
         std::to_string(ta.rank()) + ", " + std::to_string(tw.rank()) + ", " + std::to_string(td.rank()));
  GroupedGemmDesc& s = g.desc;
  s.dtype = ta.dtype;
  s.groups = tw.size(0), s.rows = ta.size(0), s.n = tw.size(1), s.k = ta.size(1);
  // Strides of a size-1 dimension or of an empty tensor address nothing (torch reports anything
  // there): 0 asks for the dense value.
  auto ld = [](const TensorRef& t, int dim) { return t.numel() > 0 && t.size(dim) > 1 ? t.stride(dim) : int64_t{0}; };
  s.lda = ld(ta, 0);
  s.ldw = ld(tw, 1);
  s.w_group = ld(tw, 0);
  s.ldd = ld(td, 0);
  s.ends_only = ends_only;
  s.d_align = alignment_of(td.data);
  g.pref.backend = backend_from(backend);
  g.device = g.keep[3].device;
  return g;
}

void bind_gemm(nb::module_& m) {
  m.def(
      "gemm",
      [](GEMM_TENSOR_ARGS, uintptr_t stream, nb::handle workspace) -> size_t {
        GemmCall g = make_gemm_call(GEMM_FORWARD);
        Workspace ws{};
        if (!workspace.is_none()) {
          g.keep.push_back(to_view("gemm", workspace, "workspace", 0, true));
          const TensorMut& w = g.keep.back().t;
          ws.ptr = w.data;
          ws.bytes = static_cast<size_t>(w.numel()) * static_cast<size_t>(size_in_bytes(w.dtype));
        }
        Result<size_t> need = size_t{0};
        Result<void> r;
        {
          nb::gil_scoped_release release;
          DeviceGuard guard(g.device);
          need = gemm_workspace_size(g.desc, g.pref);
          if (need.ok() && *need <= ws.bytes)
            r = gemm(reinterpret_cast<cudaStream_t>(stream), g.desc, g.args, ws, g.pref);
        }
        const size_t n = unwrap(std::move(need));
        if (n > ws.bytes) return n;
        unwrap(r);
        return 0;
      },
      GEMM_NB_ARGS, nb::arg("stream") = 0, nb::arg("workspace") = nb::none(),
      "D = epilogue(alpha*A@B + beta*C) on `stream`; returns 0, or the workspace bytes needed (no launch).");
  m.def(
      "gemm_sku",
      [](GEMM_TENSOR_ARGS) {
        GemmCall g = make_gemm_call(GEMM_FORWARD);
        DeviceGuard guard(g.device);
        const GemmPlan p = unwrap(GemmPlan::select(target_for(g.device), g.desc, g.pref));
        unwrap(p.can_implement(g.args));
        return p.sku().to_string() + " epilogue=" + p.sku().epilogue + " ws=" + std::to_string(p.workspace_size());
      },
      GEMM_NB_ARGS, "The SKU select() chooses for these tensors (no launch).");
  m.def(
      "grouped_gemm",
      [](nb::handle a, nb::handle w, nb::handle offsets, nb::handle d, uintptr_t stream, nb::handle workspace,
         bool ends_only, const std::string& backend) -> size_t {
        GroupedCall g = make_grouped_call(a, w, offsets, d, ends_only, backend);
        View ws_keep;
        const Workspace ws = workspace_of("grouped_gemm", workspace, ws_keep);
        size_t need = 0;
        Result<void> r;
        {
          nb::gil_scoped_release release;
          DeviceGuard guard(g.device);
          auto plan = GroupedGemmPlan::select(target_for(g.device), g.desc, g.pref);
          if (!plan) {
            r = plan.error();
          } else {
            need = plan->workspace_size();
            if (need <= ws.bytes) r = plan->run(reinterpret_cast<cudaStream_t>(stream), ws, g.args);
          }
        }
        unwrap(r);
        return need > ws.bytes ? need : 0;
      },
      nb::arg("a"), nb::arg("w"), nb::arg("offsets"), nb::arg("d"), nb::arg("stream") = 0,
      nb::arg("workspace") = nb::none(), nb::arg("ends_only") = false, nb::arg("backend") = "any",
      "D[t] = A[t] @ W[g]^T for the rows of group g (offsets: [groups + 1] boundaries, or [groups] ends with "
      "ends_only); rows no group covers become 0. Returns 0 after enqueuing, or, without launching, the "
      "workspace bytes needed when `workspace` is missing or smaller.");
  m.def(
      "grouped_gemm_sku",
      [](nb::handle a, nb::handle w, nb::handle offsets, nb::handle d, bool ends_only, const std::string& backend) {
        GroupedCall g = make_grouped_call(a, w, offsets, d, ends_only, backend);
        DeviceGuard guard(g.device);
        const GroupedGemmPlan p = unwrap(GroupedGemmPlan::select(target_for(g.device), g.desc, g.pref));
        unwrap(p.can_implement(g.args));
        return p.sku().to_string() + " ws=" + std::to_string(p.workspace_size());
      },
      nb::arg("a"), nb::arg("w"), nb::arg("offsets"), nb::arg("d"), nb::arg("ends_only") = false,
      nb::arg("backend") = "any", "The SKU GroupedGemmPlan::select chooses for these tensors (no launch).");
}

const bool reg = register_bindings(&bind_gemm);

}  // namespace
