// CtcLossPlan: descriptor validation, launch shape, argument checks and the launch sequence of
// ctc_loss (kernels: ctc_kernel.cuh), plus its rows of the coverage listing (family "loss").
#include <algorithm>
#include <string>
#include <vector>

#include "baracuda/core/coverage.hpp"
#include "baracuda/ops/ctc_loss.hpp"
#include "core/impl_list.hpp"
#include "core/operands.hpp"
#include "core/plan_common.hpp"
#include "ops/loss/ctc_launch.hpp"

namespace baracuda {

namespace {
using detail::dtype_list;
using detail::invalid;
using detail::unsupported;

std::string dname(DType t) { return std::string(name(t)); }
bool is_index_dtype(DType t) { return t == DType::s32 || t == DType::s64; }
std::string op_label(const CtcLossDesc& d) {
  return d.direction == Direction::Backward ? "ctc_loss_backward" : "ctc_loss";
}

/// The dtypes of loss_ops.def's ctc_loss row. Until that row exists, the dtypes this file
/// implements (kernels for f32, f64, f16, bf16 in both directions).
struct CtcRow {
  DTypeSet fw = dtypes::kFloat;
  DTypeSet bw = dtypes::kFloat;
};
CtcRow ctc_row() {
  CtcRow r;
  if (const auto op = loss_op_from_name("ctc_loss")) {
    r.fw = info(*op).fw_dtypes;
    r.bw = info(*op).bw_dtypes;
  }
  return r;
}

constexpr size_t align256(size_t b) { return (b + 255) / 256 * 256; }

/// ATen's choice between its two gradient algorithms (ctc_loss_backward_gpu_template), which decides
/// which classes of an infeasible item are NaN (ctc_loss.hpp). Integer arithmetic as in ATen.
bool aten_large_path(int64_t T, int64_t N, int64_t C) { return (2 * T + (24 * N) / 10 + (2 * C) / 10) > 450; }

Result<void> check_desc(const CtcLossDesc& d) {
  const std::string label = op_label(d);
  const Shape& lp = d.log_probs;
  if (lp.rank != 2 && lp.rank != 3)
    return invalid(label + ": log_probs rank expected 3 ([T, N, C]) or 2 ([T, C], unbatched), got " +
                   std::to_string(lp.rank));
  BARACUDA_TRY(detail::check_shape(label, "log_probs", lp));
  const int64_t N = lp.rank == 3 ? lp.dims[1] : 1;
  const int64_t C = lp.dims[lp.rank - 1];
  if (C < 1) return invalid(label + ": log_probs classes (last dim) expected >= 1, got " + std::to_string(C));
  if (d.blank < 0 || d.blank >= C)
    return invalid(label + ": blank expected in [0, " + std::to_string(C) + ") (blank must be in label range), got " +
                   std::to_string(d.blank));
  const Shape& tg = d.targets;
  if (tg.rank != 1 && tg.rank != 2)
    return invalid(label + ": targets rank expected 2 ([N, S], padded) or 1 (concatenated), got " +
                   std::to_string(tg.rank));
  BARACUDA_TRY(detail::check_shape(label, "targets", tg));
  if (tg.rank == 2 && tg.dims[0] != N)
    return invalid(label + ": targets.shape[0] expected " + std::to_string(N) + " (the batch size), got " +
                   std::to_string(tg.dims[0]));
  if (!is_index_dtype(d.target_dtype))
    return invalid(label + ": targets dtype expected int32 or int64, got " + dname(d.target_dtype));
  if (!is_index_dtype(d.input_lengths_dtype))
    return invalid(label + ": input_lengths dtype expected int32 or int64, got " + dname(d.input_lengths_dtype));
  if (!is_index_dtype(d.target_lengths_dtype))
    return invalid(label + ": target_lengths dtype expected int32 or int64, got " + dname(d.target_lengths_dtype));
  if (d.reduction != Reduction::none && d.reduction != Reduction::mean && d.reduction != Reduction::sum)
    return invalid(label + ": reduction expected none, mean or sum, got " + to_string(d.reduction));
  if (d.max_target_length < -1)
    return invalid(label + ": max_target_length expected -1 (from the shapes) or >= 0, got " +
                   std::to_string(d.max_target_length));
  return {};
}

Result<void> native_accepts(const Target& target, const CtcLossDesc& d, const PlanPreference& pref) {
  const std::string label = op_label(d);
  if (pref.backend != Backend::Any && pref.backend != Backend::Native)
    return unsupported(label + ": preference backend=" + to_string(pref.backend) +
                       " cannot be honoured (ctc_loss has only the native backend)");
  if (pref.tf32 == Tristate::Require)
    return unsupported(label + ": preference tf32=Require cannot be honoured (no TF32 mode in ctc_loss)");
  if (pref.reduced_precision_reduction == Tristate::Require)
    return unsupported(label +
                       ": preference reduced_precision_reduction=Require cannot be honoured (the recursion runs in "
                       "f32, f64 for f64)");
  if (target.sm < 80)
    return unsupported(label + ": target sm_" + std::to_string(target.sm) + " is below the minimum sm_80");
  const CtcRow row = ctc_row();
  const DTypeSet allowed = d.direction == Direction::Backward ? row.bw : row.fw;
  if (!contains(allowed, d.dtype))
    return unsupported(label + ": dtype expected one of {" + dtype_list(allowed) + "}, got " + dname(d.dtype));
  return {};
}

struct CtcImpl {
  const char* name;
  Result<void> (*accepts)(const Target&, const CtcLossDesc&, const PlanPreference&);
};
constexpr CtcImpl kCtcImpls[] = {{"native", native_accepts}};
}  // namespace

CtcLossDesc CtcLossDesc::make(DType dt, const Shape& log_probs, const Shape& targets, DType target_dtype, Reduction r,
                              int64_t blank, bool zero_infinity, Direction dir) {
  CtcLossDesc d;
  d.direction = dir;
  d.dtype = dt;
  d.target_dtype = target_dtype;
  d.log_probs = log_probs;
  d.targets = targets;
  d.reduction = r;
  d.blank = blank;
  d.zero_infinity = zero_infinity;
  return d;
}

// ---- select ------------------------------------------------------------------------------------------------
Result<CtcLossPlan> CtcLossPlan::select(const Target& target, const CtcLossDesc& desc, const PlanPreference& pref) {
  const std::string label = op_label(desc);
  BARACUDA_TRY(check_desc(desc));
  auto impl = detail::first_accepting<CtcImpl>(label, kCtcImpls, target, desc, pref);
  if (!impl) return impl.error();
  CtcLossPlan p;
  p.desc_ = desc;
  const Shape& lp = desc.log_probs;
  p.time_ = lp.dims[0];
  p.batch_ = lp.rank == 3 ? lp.dims[1] : 1;
  p.classes_ = lp.dims[lp.rank - 1];
  p.loss_shape_ = desc.reduction == Reduction::none && desc.batched() ? Shape::of({p.batch_}) : Shape{};
  // States: an item's target longer than T has no alignment (nll = +inf) and keeps no state, so the
  // bound is capped at T.
  const int64_t bound = desc.max_target_length >= 0 ? desc.max_target_length
                                                    : (desc.padded() ? desc.targets.dims[1] : desc.targets.numel());
  p.s_cap_ = std::min(bound, p.time_);
  p.states_ = 2 * p.s_cap_ + 1;
  if (p.states_ > kCtcMaxStates)
    return unsupported(label + ": 2 * min(max target length, T) + 1 = " + std::to_string(p.states_) +
                       " states expected <= " + std::to_string(kCtcMaxStates) +
                       " (one CTA holds an item's states; pass a tighter max_target_length)");
  if (p.batch_ > int64_t{0x7fffffff})
    return unsupported(label + ": batch size expected <= 2^31 - 1 (one CTA per item), got " + std::to_string(p.batch_));
  if ((p.time_ * p.batch_ + detail::kCtcGradWarps - 1) / detail::kCtcGradWarps > int64_t{0x7fffffff})
    return unsupported(label + ": T * N expected < 2^34 (one warp per gradient row), got " +
                       std::to_string(p.time_ * p.batch_));
  // Launch shape, a function of the problem only: one state a thread up to 1024 states, else 2 or 4.
  Config& c = p.cfg_;
  c.k = p.states_ <= detail::kCtcMaxThreads ? 1 : (p.states_ <= 2 * detail::kCtcMaxThreads ? 2 : 4);
  c.threads = static_cast<int>(((p.states_ + c.k - 1) / c.k + 31) / 32 * 32);
  const DType stats = loss_stats_dtype(desc.dtype);
  const size_t acc = static_cast<size_t>(size_in_bytes(stats));
  c.smem_bytes = 2 * static_cast<size_t>(p.states_) * acc + (static_cast<size_t>(p.s_cap_) * 4 + 15) / 16 * 16;
  c.torch_large = aten_large_path(p.time_, p.batch_, p.classes_);

  const bool bw = desc.direction == Direction::Backward;
  size_t ws = 0;
  if (!bw && desc.reduction != Reduction::none) ws += align256(static_cast<size_t>(p.batch_) * acc);
  if (bw) {
    ws += align256(static_cast<size_t>(p.batch_) * sizeof(detail::CtcItem));
    ws += align256(static_cast<size_t>(p.batch_) * static_cast<size_t>(p.classes_) * 4);
    ws += align256(static_cast<size_t>(p.batch_) * static_cast<size_t>(p.s_cap_) * 4);
    if (!desc.fused_beta)
      ws +=
          align256(static_cast<size_t>(p.batch_) * static_cast<size_t>(p.time_) * static_cast<size_t>(p.states_) * acc);
  }
  p.workspace_bytes_ = ws;

  p.sku_.category = "loss";
  p.sku_.op = label;
  p.sku_.dtypes = dname(desc.dtype) + "," + dname(desc.target_dtype) + "->" + dname(desc.dtype);
  p.sku_.arch = target.sm >= 90 ? "sm_90a" : "sm_80";
  p.sku_.backend = Backend::Native;
  p.sku_.epilogue =
      std::string("reduction=") + to_string(desc.reduction) + (desc.zero_infinity ? ",zero_infinity" : "");
  const std::string shape = "(threads=" + std::to_string(c.threads) + ",k=" + std::to_string(c.k) + ")";
  p.sku_.layout = bw ? (desc.fused_beta ? "tables+grad-rows" : "tables+beta" + shape + "+grad-rows")
                     : (desc.fused_beta ? "alpha+beta" : "alpha") + shape;
  p.sku_.precision.math = stats;
  p.sku_.precision.accumulator = stats;
  p.sku_.precision.deterministic = true;
  p.sku_.precision.bit_stable = true;
  p.sku_.precision.note =
      std::string("log-space alpha/beta recursion, one CTA per item") +
      (stats == DType::f32 ? " (base 2, ex2/lg2.approx)" : " (ATen's arithmetic)") +
      (bw ? std::string("; gradient exp(lp) - exp(lcab + nll - lp) as ATen (") + (c.torch_large ? "large" : "small") +
                "-path NaN pattern), per-class sums in a fixed order"
          : (desc.reduction != Reduction::none ? "; fixed-order sum of the per-item losses" : ""));
  return p;
}

// ---- argument checks ---------------------------------------------------------------------------------------
namespace {
using detail::given;
using detail::Operand;
}  // namespace

Result<void> CtcLossPlan::can_implement(const CtcLossArgs& a) const {
  const std::string label = op_label(desc_);
  const bool bw = desc_.direction == Direction::Backward;
  const bool reduced = desc_.reduction != Reduction::none;
  const DType stats = loss_stats_dtype(desc_.dtype);
  auto must_not = [&](bool present, const char* role, const char* why) -> Result<void> {
    if (present) return invalid(label + ": " + role + " given but " + why);
    return {};
  };
  if (bw) {
    BARACUDA_TRY(must_not(given(a.out), "out", "the backward writes grad"));
    BARACUDA_TRY(must_not(given(a.save_log_alpha) || given(a.save_log_beta) || given(a.save_neg_log_likelihood),
                          "a save_* output", "the backward saves nothing"));
    BARACUDA_TRY(must_not(given(a.log_beta) && !desc_.fused_beta, "log_beta",
                          "desc.fused_beta is false (the backward recomputes it)"));
  } else {
    BARACUDA_TRY(must_not(given(a.dy), "dy", "the forward reads no dy"));
    BARACUDA_TRY(must_not(given(a.log_alpha) || given(a.log_beta) || given(a.neg_log_likelihood),
                          "log_alpha/log_beta/neg_log_likelihood", "only the backward reads them"));
    BARACUDA_TRY(must_not(given(a.grad), "grad", "the forward writes no gradient"));
    BARACUDA_TRY(must_not(given(a.save_log_beta) && !desc_.fused_beta, "save_log_beta",
                          "desc.fused_beta is false (the forward computes no log_beta)"));
  }

  std::vector<Operand> used;
  // Exact shape (or one element / N elements of rank <= 1), dtype; a missing required tensor with
  // elements is refused.
  enum class Want { Exact, OneElement, Lengths, Dense };
  auto check = [&](const std::string& role, const void* data, DType dtype, const Layout& l, bool is_output, DType dt,
                   Want w, const Shape& s, bool required) -> Result<void> {
    if (data == nullptr && l.rank == 0) {  // not given
      const bool empty = (w == Want::Exact || w == Want::Dense) ? s.numel() == 0 : (w == Want::Lengths && batch_ == 0);
      if (required && !empty) return invalid(label + ": " + role + " is required but was not given");
      return {};
    }
    if (dtype != dt) return invalid(label + ": " + role + " dtype expected " + dname(dt) + ", got " + dname(dtype));
    switch (w) {
      case Want::Exact:
      case Want::Dense:
        if (!(Shape::of(l) == s))
          return invalid(label + ": " + role + " shape expected " + s.str() + ", got " + l.shape_str());
        if (w == Want::Dense && l.numel() > 0 && !l.is_contiguous())
          return invalid(label + ": " + role + " expected a contiguous tensor, got strides " + l.stride_str());
        break;
      case Want::OneElement:
        if (l.numel() != 1)
          return invalid(label + ": " + role + " expected one element (a reduced loss), got shape " + l.shape_str());
        break;
      case Want::Lengths:
        if (l.rank > 1 || l.numel() != batch_)
          return invalid(label + ": " + role + " expected " + std::to_string(batch_) +
                         " elements (one per batch item, rank <= 1), got shape " + l.shape_str());
        break;
    }
    used.push_back(Operand{role, data, dtype, &l, is_output, false});
    return {};
  };
  auto in = [&](const char* role, const TensorRef& t, DType dt, Want w, const Shape& s, bool req) {
    return check(role, t.data, t.dtype, t.layout, false, dt, w, s, req);
  };
  auto out = [&](const char* role, const TensorMut& t, DType dt, Want w, const Shape& s, bool req) {
    return check(role, t.data, t.dtype, t.layout, true, dt, w, s, req);
  };
  const Shape none{};
  const Shape items = Shape::of({batch_});
  const Shape states = log_alpha_shape();
  const Want loss_want = reduced ? Want::OneElement : Want::Exact;
  BARACUDA_TRY(in("log_probs", a.log_probs, desc_.dtype, Want::Exact, desc_.log_probs, true));
  BARACUDA_TRY(in("targets", a.targets, desc_.target_dtype, Want::Exact, desc_.targets, true));
  BARACUDA_TRY(in("input_lengths", a.input_lengths, desc_.input_lengths_dtype, Want::Lengths, none, true));
  BARACUDA_TRY(in("target_lengths", a.target_lengths, desc_.target_lengths_dtype, Want::Lengths, none, true));
  if (bw) {
    BARACUDA_TRY(in("dy", a.dy, desc_.dtype, loss_want, loss_shape_, true));
    BARACUDA_TRY(in("log_alpha", a.log_alpha, stats, Want::Dense, states, true));
    BARACUDA_TRY(in("neg_log_likelihood", a.neg_log_likelihood, stats, Want::Dense, items, true));
    if (desc_.fused_beta) BARACUDA_TRY(in("log_beta", a.log_beta, stats, Want::Dense, states, true));
    BARACUDA_TRY(out("grad", a.grad, desc_.dtype, Want::Exact, desc_.log_probs, true));
  } else {
    BARACUDA_TRY(out("out", a.out, desc_.dtype, loss_want, loss_shape_, true));
    BARACUDA_TRY(out("save_log_alpha", a.save_log_alpha, stats, Want::Dense, states, false));
    BARACUDA_TRY(out("save_log_beta", a.save_log_beta, stats, Want::Dense, states, desc_.fused_beta));
    BARACUDA_TRY(out("save_neg_log_likelihood", a.save_neg_log_likelihood, stats, Want::Dense, items, false));
  }
  BARACUDA_TRY(out("error", a.error, DType::s32, Want::OneElement, none, false));
  // Footprints, null data, outputs overlapping themselves or anything else (no output is computed in
  // place of an input here).
  BARACUDA_TRY(detail::check_operands(label, used));
  return {};
}

std::string CtcLossPlan::layout_for(const CtcLossArgs&) const {
  const bool bw = desc_.direction == Direction::Backward;
  if (bw && time_ * batch_ == 0) return "empty";
  if (!bw && batch_ == 0) return desc_.reduction == Reduction::none ? "empty" : "sum";
  return sku_.layout + (!bw && desc_.reduction != Reduction::none ? "+sum" : "");
}

// ---- run ---------------------------------------------------------------------------------------------------
namespace {
struct Launcher {
  DType dtype;
  cudaError_t (*run)(const detail::CtcLaunch&, cudaStream_t);
};
constexpr Launcher kLaunchers[] = {
    {DType::f32, &detail::ctc_run<DType::f32>},
    {DType::f64, &detail::ctc_run<DType::f64>},
    {DType::f16, &detail::ctc_run<DType::f16>},
    {DType::bf16, &detail::ctc_run<DType::bf16>},
};

/// Element stride of a lengths tensor (rank 0 or 1).
int64_t length_stride(const Layout& l) { return l.rank == 1 ? l.stride[0] : 0; }
}  // namespace

Result<void> CtcLossPlan::run(cudaStream_t stream, Workspace ws, const CtcLossArgs& a) const {
  BARACUDA_TRY(can_implement(a));
  const std::string label = op_label(desc_);
  if (workspace_bytes_ > 0 && (ws.bytes < workspace_bytes_ || !ws.ptr))
    return make_error(Status::WorkspaceTooSmall, label + ": workspace expected >= " + std::to_string(workspace_bytes_) +
                                                     " bytes, got " + std::to_string(ws.bytes));
  const Launcher* L = nullptr;
  for (const auto& l : kLaunchers)
    if (l.dtype == desc_.dtype) L = &l;
  if (!L) return unsupported(label + ": no kernel for dtype " + dname(desc_.dtype));
  const bool bw = desc_.direction == Direction::Backward;
  if (bw && time_ * batch_ == 0) return {};  // an empty gradient
  if (!bw && batch_ == 0 && desc_.reduction == Reduction::none) return {};

  detail::CtcLaunch p;
  p.backward = bw;
  p.beta = bw ? !desc_.fused_beta : desc_.fused_beta;
  p.reduction = desc_.reduction;
  p.zero_infinity = desc_.zero_infinity;
  p.torch_large = cfg_.torch_large;
  p.T = time_;
  p.N = batch_;
  p.C = classes_;
  p.blank = desc_.blank;
  p.s_cap = s_cap_;
  p.states = states_;
  const Layout& lpl = a.log_probs.layout;
  p.log_probs = a.log_probs.data;
  p.lp_st = lpl.stride[0];
  p.lp_sn = desc_.batched() ? lpl.stride[1] : 0;
  p.lp_sc = lpl.stride[lpl.rank - 1];
  const Layout& tgl = a.targets.layout;
  p.targets = a.targets.data;
  p.target64 = desc_.target_dtype == DType::s64;
  p.padded = desc_.padded();
  if (p.padded) {
    p.tg_s0 = tgl.stride[0];
    p.tg_s1 = tgl.stride[1];
    p.tg_len = tgl.shape[1];
  } else {
    p.tg_s1 = tgl.stride[0];
    p.tg_len = tgl.shape[0];
  }
  p.input_lengths = a.input_lengths.data;
  p.il64 = desc_.input_lengths_dtype == DType::s64;
  p.il_stride = length_stride(a.input_lengths.layout);
  p.target_lengths = a.target_lengths.data;
  p.tl64 = desc_.target_lengths_dtype == DType::s64;
  p.tl_stride = length_stride(a.target_lengths.layout);
  p.error = static_cast<int32_t*>(a.error.data);
  p.threads = cfg_.threads;
  p.k = cfg_.k;
  p.smem_bytes = cfg_.smem_bytes;
  char* w = static_cast<char*>(ws.ptr);
  if (!bw) {
    p.log_alpha = a.save_log_alpha.data;
    p.log_beta = a.save_log_beta.data;
    p.nll = a.save_neg_log_likelihood.data;
    p.out = a.out.data;
    p.out_stride = a.out.layout.rank == 1 ? a.out.layout.stride[0] : 0;
    if (desc_.reduction != Reduction::none) p.item_loss = w;
  } else {
    p.log_alpha = const_cast<void*>(a.log_alpha.data);
    p.nll = const_cast<void*>(a.neg_log_likelihood.data);
    p.dy = a.dy.data;
    p.dy_scalar = desc_.reduction != Reduction::none;
    p.dy_stride = a.dy.layout.rank == 1 ? a.dy.layout.stride[0] : 0;
    const Layout& gl = a.grad.layout;
    p.grad = a.grad.data;
    p.g_st = gl.stride[0];
    p.g_sn = desc_.batched() ? gl.stride[1] : 0;
    p.g_sc = gl.stride[gl.rank - 1];
    // Workspace: [items][first][next][log_beta], as sized in select().
    p.items = reinterpret_cast<detail::CtcItem*>(w);
    w += align256(static_cast<size_t>(batch_) * sizeof(detail::CtcItem));
    p.first = reinterpret_cast<int32_t*>(w);
    w += align256(static_cast<size_t>(batch_) * static_cast<size_t>(classes_) * 4);
    p.next = reinterpret_cast<int32_t*>(w);
    w += align256(static_cast<size_t>(batch_) * static_cast<size_t>(s_cap_) * 4);
    p.log_beta = desc_.fused_beta ? const_cast<void*>(a.log_beta.data) : static_cast<void*>(w);
  }
  const cudaError_t e = L->run(p, stream);
  if (e != cudaSuccess)
    return make_error(Status::CudaError, label + ": kernel launch failed: " + cudaGetErrorString(e));
  return {};
}

// ---- convenience -------------------------------------------------------------------------------------------
namespace {
std::string desc_key(const CtcLossDesc& d) {
  std::string k;
  auto put = [&](const auto& v) { k.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  put(d.direction);
  put(d.dtype);
  put(d.target_dtype);
  put(d.input_lengths_dtype);
  put(d.target_lengths_dtype);
  for (const Shape* s : {&d.log_probs, &d.targets}) {
    put(s->rank);
    k.append(reinterpret_cast<const char*>(s->dims.data()),
             sizeof(int64_t) * static_cast<size_t>(std::clamp(s->rank, 0, kMaxRank)));
  }
  put(d.max_target_length);
  put(d.blank);
  put(d.reduction);
  put(d.zero_infinity);
  put(d.fused_beta);
  return k;
}

Result<const CtcLossPlan*> cached(const CtcLossDesc& desc, const PlanPreference& pref) {
  return detail::cached_plan<CtcLossPlan>(desc_key(desc), pref,
                                          [&](const Target& t) { return CtcLossPlan::select(t, desc, pref); });
}

/// Coverage rows (family "loss", op "ctc_loss"): every (direction, dtype) select() accepts, probed with
/// int64 targets; dtype strings as the loss family lists class ops ("float32").
void ctc_coverage(const Target& target, std::vector<CoverageRow>& rows) {
  for (Direction dir : {Direction::Forward, Direction::Backward})
    for (int i = 0; i < kNumDTypes; ++i) {
      const DType t = static_cast<DType>(i);
      const CtcLossDesc d =
          CtcLossDesc::make(t, Shape::of({8, 2, 5}), Shape::of({2, 3}), DType::s64, Reduction::mean, 0, false, dir);
      if (auto plan = CtcLossPlan::select(target, d))
        rows.push_back({"loss", "ctc_loss", dir, std::string(name(t)), plan->sku().backend});
    }
}
[[maybe_unused]] const bool registered = detail::register_coverage("loss", &ctc_coverage);
}  // namespace

Result<void> ctc_loss(cudaStream_t stream, const CtcLossDesc& desc, const CtcLossArgs& args, Workspace ws,
                      const PlanPreference& pref) {
  auto plan = cached(desc, pref);
  if (!plan) return plan.error();
  return (*plan)->run(stream, ws, args);
}

Result<size_t> ctc_loss_workspace_size(const CtcLossDesc& desc, const PlanPreference& pref) {
  auto plan = cached(desc, pref);
  if (!plan) return plan.error();
  return (*plan)->workspace_size();
}

}  // namespace baracuda
