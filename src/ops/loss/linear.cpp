// linear_cross_entropy: cross_entropy(hidden * weight^T, target) without materialising the [N, V]
// logits. The tokens go in chunks of T rows; per chunk:
//
//   1. logits_c = hidden_c * weight^T          GemmPlan, into the workspace ([T, V], input dtype)
//   2. row losses and dlogits_c, in place       the fused cross_entropy kernel (cluster_kernel.cuh
//                                               on sm_90 for long rows, class_kernel.cuh otherwise)
//   3. grad_input_c = dlogits_c * weight        GemmPlan, straight into grad_input's rows
//   4. grad_weight (+)= dlogits_c^T * hidden_c  GemmPlan, beta = 0 on the first chunk, 1 after
//
// Before the first chunk one small kernel sums the weights of the non-ignored targets over every
// token (the mean's divisor, which scales each chunk's dlogits); after the last, the per-row losses
// of all chunks are summed in a fixed order (loss_sum.cuh). Nothing reads device memory on the
// host: the sequence is capture-safe. The chunk order is fixed and no sum uses atomics, so the
// result is deterministic. T changes only the GEMMs' shapes (cuBLASLt may pick another kernel for
// another row count) and grad_weight's accumulation order: the per-row losses and their
// fixed-order sum do not depend on it.
#include <algorithm>
#include <string>
#include <vector>

#include "core/operands.hpp"
#include "core/plan_common.hpp"
#include "ops/loss/linear_ce.hpp"
#include "ops/loss/loss_launch.hpp"

namespace baracuda::detail {
namespace {

std::string dname(DType t) { return std::string(name(t)); }
std::string str(int64_t v) { return std::to_string(v); }
constexpr size_t align256(size_t b) { return (b + 255) / 256 * 256; }

std::string label_of(const LossDesc& d) {
  return d.direction == Direction::Backward ? "linear_cross_entropy_backward" : "linear_cross_entropy";
}

/// The largest power of two <= 16 dividing `bytes` (16 for 0): the alignment the rows of a chunk
/// keep inside a 16-byte aligned tensor (the GEMMs are chosen for it).
uint16_t offset_align(int64_t bytes) {
  if (bytes == 0) return 16;
  const auto b = static_cast<uint64_t>(bytes);
  return static_cast<uint16_t>(std::min<uint64_t>(b & (~b + 1), 16));
}

/// A [rows, cols] view of `data` with explicit strides (the transposed operands of the GEMMs).
TensorRef view2(const void* data, DType dt, int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  TensorRef t{data, dt, Layout{}};
  t.layout.rank = 2;
  t.layout.shape[0] = rows, t.layout.shape[1] = cols;
  t.layout.stride[0] = row_stride, t.layout.stride[1] = col_stride;
  return t;
}

const void* advance(const void* p, int64_t elems, int elem_bytes) {
  return static_cast<const char*>(p) + elems * elem_bytes;
}
void* advance(void* p, int64_t elems, int elem_bytes) { return static_cast<char*>(p) + elems * elem_bytes; }

}  // namespace

Result<std::shared_ptr<const LinearCe>> LinearCe::select(const Target& target, const LossDesc& d,
                                                         const PlanPreference& pref) {
  const std::string label = label_of(d);
  auto p = std::make_shared<LinearCe>();
  const DType dt = d.dtype;
  const int es = size_in_bytes(dt);
  const int vec = 16 / es;
  const size_t acc = static_cast<size_t>(size_in_bytes(loss_stats_dtype(dt)));
  const bool bw = d.direction == Direction::Backward;
  const bool reduced = d.reduction != Reduction::none;
  const bool mean = d.reduction == Reduction::mean;
  p->n_ = d.shapes[0].dims[0];
  p->h_ = d.shapes[0].dims[1];
  p->v_ = d.shapes[1].dims[0];
  p->grads_ = bw || d.fused_grad;
  p->allow_vectorized_ = pref.vectorized != Tristate::Forbid;
  const int64_t N = p->n_, H = p->h_, V = p->v_;

  // Chunk: as many tokens as keep the [T, V] logits within the budget (a multiple of 128 rows when
  // that many fit: whole GEMM tiles), or the caller's chunk_tokens; never more than N.
  int64_t T = static_cast<int64_t>(d.params[2]);
  if (T == 0) {
    const int64_t row_bytes = std::max<int64_t>(1, V * es);
    T = std::max<int64_t>(1, static_cast<int64_t>(kLinearCeLogitsBudget) / row_bytes);
    if (T >= 128) T = T / 128 * 128;
  }
  T = N == 0 ? 0 : std::min(T, N);
  p->chunk_ = T;
  p->chunks_ = T == 0 ? 0 : (N + T - 1) / T;
  p->tail_ = T == 0 ? 0 : N - (p->chunks_ - 1) * T;

  // GEMMs: every chunk's rows start at a multiple of T * H elements of input / grad_input.
  PlanPreference gp = pref;
  gp.vectorized = Tristate::Default;  // applies to the cross-entropy kernel only
  gp.require_deterministic = true;
  const uint16_t ah = p->chunks_ > 1 ? offset_align(T * H * es) : uint16_t{16};
  auto pick = [&](const char* what, GemmDesc g, std::optional<GemmPlan>* out) -> Result<void> {
    auto r = GemmPlan::select(target, g, gp);
    if (!r)
      return make_error(r.status(), label + ": the " + what + " GEMM (m=" + str(g.m) + ", n=" + str(g.n) +
                                        ", k=" + str(g.k) + ", " + dname(dt) + ") is not available: " + r.message());
    *out = std::move(r.value());
    return {};
  };
  auto gemms_for = [&](int64_t m, bool first, bool next, ChunkGemms* g) -> Result<void> {
    GemmDesc lg = GemmDesc::dense(dt, m, V, H, false, true);  // hidden_c [m, H] x (weight [V, H])^T
    lg.align = {ah, 16, 16, 16};
    BARACUDA_TRY(pick("logits (input x weight^T)", lg, &g->logits));
    if (!p->grads_) return {};
    GemmDesc gi = GemmDesc::dense(dt, m, H, V);  // dlogits_c [m, V] x weight [V, H]
    gi.align = {16, 16, 16, ah};
    BARACUDA_TRY(pick("grad_input (dlogits x weight)", gi, &g->dinput));
    GemmDesc gw = GemmDesc::dense(dt, V, H, m, true, false);  // (dlogits_c [m, V])^T x hidden_c [m, H]
    gw.align = {16, ah, 16, 16};
    if (first) BARACUDA_TRY(pick("grad_weight (dlogits^T x input)", gw, &g->dweight_first));
    gw.beta = 1.0;
    if (next) BARACUDA_TRY(pick("grad_weight (dlogits^T x input, accumulating)", gw, &g->dweight_next));
    return {};
  };
  const bool has_last = p->tail_ != T;
  const int64_t full_chunks = p->chunks_ - (has_last ? 1 : 0);
  if (N > 0) {
    BARACUDA_TRY(gemms_for(T, true, full_chunks > 1, &p->full_));
    if (has_last) BARACUDA_TRY(gemms_for(p->tail_, false, true, &p->last_));
  }

  // The cross-entropy kernel of a chunk: cross_entropy's launch shape for V classes (the cluster
  // kernel when the gradient is fused and a row spans 2..16 CTAs on sm_90).
  LossPlan::Config& c = p->cfg_;
  const ClassShape shape =
      class_launch_shape(dt, V, p->grads_, !p->grads_, target.sm, p->allow_vectorized_ && V % vec == 0);
  c.tpr = shape.tpr;
  c.block = shape.block;
  c.cluster = shape.cluster;
  loss_sum_partition(N, &c.parts, &c.chunk);
  c.chunk_tokens = T;
  c.chunks = p->chunks_;

  // Workspace: [logits chunk][row losses][row weights][partial sums][2 scalars][GEMM workspace].
  size_t off = align256(static_cast<size_t>(T) * static_cast<size_t>(V) * static_cast<size_t>(es));
  if (!bw && reduced) {
    p->off_rows_ = off;
    off += align256(static_cast<size_t>(N) * acc);
    p->off_weight_rows_ = off;
    off += align256(static_cast<size_t>(N) * acc);
  }
  if ((!bw && reduced) || (p->grads_ && mean)) {
    p->off_partial_ = off;
    off += align256(size_t(kSumMaxParts) * 2 * acc);
    p->off_scratch_ = off;
    off += align256(2 * acc);
  }
  p->off_gemm_ = off;
  size_t gemm_ws = 0;
  const GemmPlan* first_gemm = nullptr;
  bool bit_stable = true, deterministic = true;
  std::string gemm_note;
  for (const ChunkGemms* g : {&p->full_, &p->last_})
    for (const std::optional<GemmPlan>* q : {&g->logits, &g->dinput, &g->dweight_first, &g->dweight_next}) {
      if (!q->has_value()) continue;
      const GemmPlan& gpl = **q;
      if (!first_gemm) first_gemm = &gpl;
      gemm_ws = std::max(gemm_ws, gpl.workspace_size());
      bit_stable = bit_stable && gpl.precision().bit_stable;
      deterministic = deterministic && gpl.precision().deterministic;
      if (gemm_note.empty()) gemm_note = gpl.precision().note;
    }
  p->workspace_ = off + align256(gemm_ws);

  // SKU.
  KernelSku& s = p->sku_;
  const DType stats = loss_stats_dtype(dt);
  s.category = "loss";
  s.op = label;
  s.dtypes = dname(dt) + "," + dname(d.target_dtype) + "->" + dname(dt);
  s.arch = target.sm >= 90 ? "sm_90a" : "sm_80";
  s.backend = first_gemm ? first_gemm->sku().backend : Backend::CuBlasLt;
  const std::string ce = c.cluster > 0 ? "cluster-rows(ctas=" + str(c.cluster) + ")"
                                       : std::string(c.tpr > 32 ? "cta" : (c.tpr == 32 ? "warp" : "subwarp")) +
                                             "-rows(tpr=" + str(c.tpr) + ")";
  s.layout = "chunks(" + str(p->chunks_) + "x" + str(T) + ") gemm[" +
             (first_gemm ? first_gemm->sku().layout : std::string("none")) + "] + " + ce +
             (p->allow_vectorized_ ? "" : " (vectorization forbidden)");
  s.epilogue = std::string("reduction=") + to_string(d.reduction) + (p->grads_ ? " + grad_input, grad_weight" : "");
  s.precision.math = stats;
  s.precision.accumulator = stats;
  s.precision.deterministic = deterministic;
  s.precision.bit_stable = bit_stable;
  std::string note = "logits rounded to " + dname(dt) +
                     " (F.linear's output) before the softmax; online (max, sum exp) per row, exp via " +
                     (es == 2 ? "ex2.approx.ftz (16-bit storage)" : (es == 8 ? "exp" : "expf"));
  if (d.has(3))
    note +=
        "; class weights as cross_entropy's (a row's loss and gradient times weight[target]; the mean divides "
        "by the sum of the non-ignored targets' weights)";
  if (p->grads_)
    note += "; dlogits rounded to " + dname(dt) + " before the gradient GEMMs" +
            (p->chunks_ > 1 ? "; grad_weight accumulated over " + str(p->chunks_) + " chunks in " + dname(dt) +
                                  " (beta = 1: one rounding a chunk)"
                            : std::string());
  if (!bw && reduced) note += "; per-row losses, fixed-order two-stage sum (" + str(c.parts) + " parts)";
  if (!gemm_note.empty()) note += "; gemm: " + gemm_note;
  s.precision.note = note;
  return std::shared_ptr<const LinearCe>(std::move(p));
}

// ---- arguments ------------------------------------------------------------------------------------------
Result<void> LinearCe::can_implement(const LossDesc& d, const LossArgs& a) const {
  const std::string label = label_of(d);
  const bool bw = d.direction == Direction::Backward;
  const bool reduced = d.reduction != Reduction::none;
  auto must_not = [&](bool present, const char* role, const char* why) -> Result<void> {
    if (present) return invalid(label + ": " + role + " given but " + why);
    return {};
  };
  const char* no_stats = "linear_cross_entropy keeps no statistics (its backward recomputes the logits)";
  BARACUDA_TRY(must_not(given(a.lse) || given(a.total_weight), "lse/total_weight", no_stats));
  BARACUDA_TRY(must_not(given(a.save_lse) || given(a.save_total_weight), "save_lse/save_total_weight", no_stats));
  BARACUDA_TRY(must_not(given(a.in[3]) && !d.has(3), "in[3] (class_weight)", "desc.present does not list it"));
  BARACUDA_TRY(must_not(given(a.grad[2]), "grad[2]", "the op has 2 gradients (input, weight)"));
  BARACUDA_TRY(must_not(!grads_ && (given(a.grad[0]) || given(a.grad[1])), "grad[0]/grad[1]",
                        "the forward writes no gradient (fused_grad is false)"));
  BARACUDA_TRY(must_not(!grads_ && given(a.dy), "dy", "the forward reads no dy (fused_grad is false)"));
  BARACUDA_TRY(must_not(bw && given(a.out), "out", "the backward writes grad[0] / grad[1] only"));

  enum class Want { Dense, Rows, One, Vector };
  const Shape rows_shape = Shape::of({n_});
  std::vector<Operand> used;
  auto check = [&](const std::string& role, const void* data, DType got, const Layout& l, bool output, DType want,
                   Want how, const Shape& shape, bool required) -> Result<void> {
    const bool present = data != nullptr || l.rank != 0;
    if (!present) {
      if (required && !(how != Want::One && shape.numel() == 0))
        return invalid(label + ": " + role + " is required but was not given");
      return {};
    }
    if (got != want) return invalid(label + ": " + role + " dtype expected " + dname(want) + ", got " + dname(got));
    if (how == Want::One) {
      if (l.numel() != 1)
        return invalid(label + ": " + role + " expected one element (a reduced loss), got shape " + l.shape_str());
    } else if (!(Shape::of(l) == shape)) {
      return invalid(label + ": " + role + " shape expected " + shape.str() + ", got " + l.shape_str());
    }
    if (how == Want::Vector && l.numel() > 1 && l.stride[0] != 1)  // the kernels index it densely
      return invalid(label + ": " + role + " expected a dense vector (stride 1), got strides " + l.stride_str());
    if (how == Want::Dense && l.numel() > 0) {
      if (!l.is_contiguous())
        return invalid(label + ": " + role + " expected a dense row-major " + shape.str() +
                       " tensor (the GEMMs were chosen for it), got strides " + l.stride_str());
      if (data != nullptr && reinterpret_cast<uintptr_t>(data) % 16 != 0)
        return make_error(Status::MisalignedOperand, label + ": " + role +
                                                         " pointer expected 16-byte aligned (the GEMMs were chosen "
                                                         "for it), got address " +
                                                         std::to_string(reinterpret_cast<uintptr_t>(data)));
    }
    // No in-place pairs: the GEMMs read input and weight after grad_input's rows are written.
    used.push_back(Operand{role, data, got, &l, output, false});
    return {};
  };
  const DType dt = d.dtype;
  const Shape hidden = Shape::of({n_, h_}), weight = Shape::of({v_, h_});
  BARACUDA_TRY(check("input", a.in[0].data, a.in[0].dtype, a.in[0].layout, false, dt, Want::Dense, hidden, true));
  BARACUDA_TRY(check("weight", a.in[1].data, a.in[1].dtype, a.in[1].layout, false, dt, Want::Dense, weight, true));
  BARACUDA_TRY(check("target", a.in[2].data, a.in[2].dtype, a.in[2].layout, false, d.target_dtype, Want::Rows,
                     rows_shape, true));
  if (d.has(3))
    BARACUDA_TRY(check("class_weight", a.in[3].data, a.in[3].dtype, a.in[3].layout, false, dt, Want::Vector,
                       Shape::of({v_}), true));
  const Want per_row = reduced ? Want::One : Want::Rows;
  if (!bw) BARACUDA_TRY(check("out", a.out.data, a.out.dtype, a.out.layout, true, dt, per_row, rows_shape, true));
  if (grads_) {
    BARACUDA_TRY(check("dy", a.dy.data, a.dy.dtype, a.dy.layout, false, dt, per_row, rows_shape, bw));
    BARACUDA_TRY(check("grad[0] (input)", a.grad[0].data, a.grad[0].dtype, a.grad[0].layout, true, dt, Want::Dense,
                       hidden, false));
    BARACUDA_TRY(check("grad[1] (weight)", a.grad[1].data, a.grad[1].dtype, a.grad[1].layout, true, dt, Want::Dense,
                       weight, false));
  }
  BARACUDA_TRY(
      check("error", a.error.data, a.error.dtype, a.error.layout, true, DType::s32, Want::One, Shape{}, false));
  return check_operands(label, used);
}

std::string LinearCe::layout_for(const LossDesc& d, const LossArgs& a) const {
  if (n_ == 0) return "empty";
  const bool dl = grads_ && ((a.grad[0].data && a.grad[0].numel() > 0) || (a.grad[1].data && a.grad[1].numel() > 0));
  const bool vec = allow_vectorized_ && v_ % (16 / size_in_bytes(d.dtype)) == 0;
  const std::string ce = dl && cfg_.cluster > 0 && vec
                             ? "cluster-rows(ctas=" + str(cfg_.cluster) + ")-vec16"
                             : std::string(cfg_.tpr > 32 ? "cta" : (cfg_.tpr == 32 ? "warp" : "subwarp")) +
                                   "-rows(tpr=" + str(cfg_.tpr) + ")-" + (vec ? "vec16" : "scalar");
  return "chunks(" + str(chunks_) + "x" + str(chunk_) + ")+" + ce + (dl ? "+grad-gemms" : "");
}

// ---- run ---------------------------------------------------------------------------------------------
Result<void> LinearCe::run(const LossDesc& d, cudaStream_t stream, Workspace ws, const LossArgs& a) const {
  const std::string label = label_of(d);
  const DType dt = d.dtype;
  const int es = size_in_bytes(dt);
  const int tes = size_in_bytes(d.target_dtype);
  const size_t acc = static_cast<size_t>(size_in_bytes(loss_stats_dtype(dt)));
  const bool bw = d.direction == Direction::Backward;
  const bool reduced = d.reduction != Reduction::none;
  const bool mean = d.reduction == Reduction::mean;
  const bool want_gi = grads_ && a.grad[0].data != nullptr && a.grad[0].numel() > 0;
  const bool want_gw = grads_ && a.grad[1].data != nullptr && a.grad[1].numel() > 0;
  const bool dl = want_gi || want_gw;  // the chunks' dlogits are needed
  const int64_t N = n_, H = h_, V = v_;
  auto cuda = [&](cudaError_t e, const char* what) -> Result<void> {
    if (e != cudaSuccess)
      return make_error(Status::CudaError, label + ": " + what + " failed: " + cudaGetErrorString(e));
    return {};
  };
  auto gemm = [&](const std::optional<GemmPlan>& plan, const char* what, const GemmArgs& ga) -> Result<void> {
    char* g = static_cast<char*>(ws.ptr) + off_gemm_;
    auto r = plan->run(stream, Workspace{g, ws.bytes - off_gemm_}, ga);
    if (!r) return make_error(r.status(), label + ": the " + what + " GEMM: " + r.message());
    return {};
  };
  if (reinterpret_cast<uintptr_t>(ws.ptr) % 16 != 0)
    return make_error(Status::MisalignedOperand, label +
                                                     ": workspace pointer expected 16-byte aligned (the logits "
                                                     "chunk is a GEMM output), got address " +
                                                     std::to_string(reinterpret_cast<uintptr_t>(ws.ptr)));
  char* w = static_cast<char*>(ws.ptr);
  void* logits = w;
  void* row_losses = w + off_rows_;
  void* row_weights = w + off_weight_rows_;

  // What every cross-entropy launch of this run shares: one row dim (token), unit class stride.
  ClassLaunch base;
  base.op = LossOp::cross_entropy;
  base.fw = true;
  base.grad = dl;
  base.reduction = d.reduction;
  base.classes = V;
  base.row_ndim = 1;
  base.cstride[kCsInput] = base.cstride[kCsDinput] = 1;
  base.row_stride[kCsInput][0] = base.row_stride[kCsDinput][0] = V;
  const int64_t ts = a.in[2].layout.rank > 0 ? a.in[2].layout.stride[0] : 0;
  base.row_stride[kCsTarget][0] = ts;
  base.target64 = d.target_dtype == DType::s64;
  base.ignore_index = static_cast<int64_t>(d.params[0]);
  base.smoothing = d.params[1];
  base.weight = d.has(3) ? a.in[3].data : nullptr;  // per-class weights: cross_entropy's, every kernel
  base.error = static_cast<int*>(a.error.data);
  base.partial = w + off_partial_;
  base.scratch = w + off_scratch_;
  base.parts = cfg_.parts;
  base.chunk = cfg_.chunk;
  base.tpr = cfg_.tpr;
  base.block = cfg_.block;
  const int64_t os = !reduced && a.out.layout.rank > 0 ? a.out.layout.stride[0] : 0;
  const int64_t dys = !reduced && a.dy.layout.rank > 0 ? a.dy.layout.stride[0] : 0;
  base.row_stride[kCsLoss][0] = os;
  base.row_stride[kCsDy][0] = dys;
  base.dy_rows = !reduced && a.dy.data != nullptr;
  const bool post = !bw && reduced;
  if (post) {
    base.loss_rows = row_losses;
    base.weight_rows = row_weights;
  }

  if (N == 0) {  // no token: grad_weight is zero; a mean of nothing is NaN, a sum 0
    if (grads_ && a.grad[1].data != nullptr && a.grad[1].numel() > 0)
      BARACUDA_TRY(cuda(cudaMemsetAsync(a.grad[1].data, 0, static_cast<size_t>(a.grad[1].numel()) * es, stream),
                        "zeroing grad_weight"));
  }
  // 1. The mean's divisor over every token: each chunk's dlogits are scaled by it.
  if (dl && mean && N > 0) {
    ClassLaunch pre = base;
    pre.phases = kClassPhasePre;
    pre.rows = N;
    pre.row_size[0] = N;
    pre.target = a.in[2].data;
    BARACUDA_TRY(cuda(loss_class_launch(dt, pre, stream), "the divisor kernel launch"));
  }
  // 2. The chunks.
  const int vec = 16 / es;
  for (int64_t c = 0; c < chunks_; ++c) {
    const int64_t r0 = c * chunk_;
    const int64_t rows = std::min(chunk_, N - r0);
    const ChunkGemms& g = rows == chunk_ ? full_ : last_;
    const void* hidden_c = advance(a.in[0].data, r0 * H, es);
    GemmArgs la;
    la.a = view2(hidden_c, dt, rows, H, H, 1);
    la.b = view2(a.in[1].data, dt, H, V, 1, H);  // weight [V, H] seen as its transpose [H, V]
    la.d = TensorMut{logits, dt, view2(logits, dt, rows, V, V, 1).layout};
    BARACUDA_TRY(gemm(g.logits, "logits", la));

    ClassLaunch cl = base;
    cl.phases = kClassPhaseRows;
    cl.rows = rows;
    cl.row_size[0] = rows;
    cl.input = logits;
    cl.dinput = dl ? logits : nullptr;  // dlogits replace the logits (each element read first)
    cl.target = advance(a.in[2].data, r0 * ts, tes);
    cl.loss = !bw && !reduced ? advance(a.out.data, r0 * os, es) : nullptr;
    if (post) {
      cl.loss_rows = static_cast<char*>(row_losses) + static_cast<size_t>(r0) * acc;
      cl.weight_rows = static_cast<char*>(row_weights) + static_cast<size_t>(r0) * acc;
    }
    cl.dy = a.dy.data == nullptr ? nullptr : (reduced ? a.dy.data : advance(a.dy.data, r0 * dys, es));
    cl.total_weight_in = dl && mean ? base.scratch : nullptr;
    cl.vec = allow_vectorized_ && V % vec == 0;
    if (dl && cfg_.cluster > 0 && cl.vec) {
      cl.cluster = cfg_.cluster;
      const int64_t per = (V + cfg_.cluster - 1) / cfg_.cluster;
      cl.cluster_seg = (per + vec - 1) / vec * vec;
    }
    BARACUDA_TRY(cuda(loss_class_launch(dt, cl, stream), "the cross-entropy kernel launch"));

    if (want_gi) {
      GemmArgs ga;
      ga.a = view2(logits, dt, rows, V, V, 1);
      ga.b = view2(a.in[1].data, dt, V, H, H, 1);
      ga.d = TensorMut{advance(a.grad[0].data, r0 * H, es), dt, view2(nullptr, dt, rows, H, H, 1).layout};
      BARACUDA_TRY(gemm(g.dinput, "grad_input", ga));
    }
    if (want_gw) {
      GemmArgs ga;
      ga.a = view2(logits, dt, V, rows, 1, V);  // dlogits_c^T
      ga.b = view2(hidden_c, dt, rows, H, H, 1);
      ga.d = TensorMut{a.grad[1].data, dt, view2(nullptr, dt, V, H, H, 1).layout};
      const bool first = c == 0;
      if (!first) ga.c = view2(a.grad[1].data, dt, V, H, H, 1);
      BARACUDA_TRY(gemm(first ? g.dweight_first : g.dweight_next, "grad_weight", ga));
    }
  }
  // 3. The loss: every chunk's per-row losses summed in a fixed order (mean: over the divisor).
  if (post) {
    ClassLaunch fin = base;
    fin.phases = kClassPhasePost;
    fin.rows = N;
    fin.row_size[0] = N;
    fin.out = a.out.data;
    BARACUDA_TRY(cuda(loss_class_launch(dt, fin, stream), "the reduction kernel launch"));
  }
  return {};
}

}  // namespace baracuda::detail
