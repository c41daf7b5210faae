// GemmPlan: descriptor validation, the implementation list (small-M kernel, CUTLASS int8 with a
// scale epilogue, cuBLASLt), argument checks and the launch sequence (GEMM, then the native
// epilogue / bias-gradient reduction when cuBLASLt cannot fuse them).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "baracuda/ops/gemm.hpp"
#include "core/impl_list.hpp"
#include "core/plan_common.hpp"
#include "ops/gemm/gemm_internal.hpp"

namespace baracuda {

const char* to_string(GemmActivation a) {
  switch (a) {
    case GemmActivation::None:
      return "none";
    case GemmActivation::Relu:
      return "relu";
    case GemmActivation::Gelu:
      return "gelu";
    case GemmActivation::GeluTanh:
      return "gelu_tanh";
    case GemmActivation::Silu:
      return "silu";
  }
  return "?";
}
const char* to_string(GemmBiasGrad b) {
  switch (b) {
    case GemmBiasGrad::None:
      return "none";
    case GemmBiasGrad::OfD:
      return "of_d";
    case GemmBiasGrad::OfA:
      return "of_a";
    case GemmBiasGrad::OfB:
      return "of_b";
  }
  return "?";
}

MatrixStrides MatrixStrides::row_major(int64_t cols, int64_t ld, int64_t batch) {
  return {ld ? ld : std::max<int64_t>(cols, 1), 1, batch};
}
MatrixStrides MatrixStrides::col_major(int64_t rows, int64_t ld, int64_t batch) {
  return {1, ld ? ld : std::max<int64_t>(rows, 1), batch};
}

GemmDesc GemmDesc::dense(DType dt, int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b, int64_t batch) {
  return dense(dt, dt, m, n, k, trans_a, trans_b, batch);
}
GemmDesc GemmDesc::dense(DType ab, DType dd, int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b,
                         int64_t batch) {
  GemmDesc d;
  d.m = m, d.n = n, d.k = k, d.batch = batch;
  d.a_dtype = d.b_dtype = ab;
  d.d_dtype = dd;
  const int64_t bs = batch > 1 ? 1 : 0;  // packed batches; 0 when there is one
  d.a = trans_a ? MatrixStrides::col_major(m, 0, bs * m * k) : MatrixStrides::row_major(k, 0, bs * m * k);
  d.b = trans_b ? MatrixStrides::col_major(k, 0, bs * k * n) : MatrixStrides::row_major(n, 0, bs * k * n);
  d.c = d.d = MatrixStrides::row_major(n, 0, bs * m * n);
  return d;
}

std::string GemmDesc::key() const {
  // Every field is plain data; copy them one by one so padding never enters the key.
  std::string k_;
  auto put = [&](const auto& v) { k_.append(reinterpret_cast<const char*>(&v), sizeof v); };
  put(m), put(n), put(k), put(batch), put(a_dtype), put(b_dtype), put(d_dtype);
  for (const MatrixStrides* s : {&a, &b, &c, &d}) put(s->row), put(s->col), put(s->batch);
  put(alpha), put(beta), put(direction), put(act), put(bias), put(aux), put(bgrad), put(scale_mode), put(align);
  return k_;
}

namespace {
using detail::invalid;
using detail::unsupported;
std::string str(int64_t v) { return std::to_string(v); }
std::string dt(DType t) { return std::string(name(t)); }

std::string op_label(const GemmDesc& d) { return d.direction == Direction::Backward ? "gemm_backward" : "gemm"; }

bool is_fp8(DType t) { return t == DType::f8e4m3 || t == DType::f8e5m2; }
bool is_half(DType t) { return t == DType::f16 || t == DType::bf16; }
bool is_real_float(DType t) { return t == DType::f64 || t == DType::f32 || is_half(t); }
bool is_low_precision(const GemmDesc& d) { return is_fp8(d.a_dtype) || d.a_dtype == DType::s8; }
/// int8 x int8 -> a floating D (scaled in the epilogue): the CUTLASS variant.
bool is_int8_scaled(const GemmDesc& d) { return d.a_dtype == DType::s8 && is_real_float(d.d_dtype); }

/// The highest offset (elements) + 1 a [batch, rows, cols] view reaches; nullopt on overflow.
std::optional<int64_t> span_of(int64_t batch, int64_t rows, int64_t cols, const MatrixStrides& s) {
  if (batch == 0 || rows == 0 || cols == 0) return 0;
  int64_t t, acc = 1;
  for (auto [n, st] : {std::pair{batch, s.batch}, std::pair{rows, s.row}, std::pair{cols, s.col}}) {
    if (__builtin_mul_overflow(n - 1, st, &t) || __builtin_add_overflow(acc, t, &acc)) return std::nullopt;
  }
  return acc;
}

Layout layout3(int64_t batch, int64_t rows, int64_t cols, const MatrixStrides& s) {
  Layout l;
  l.rank = 3;
  l.shape = {batch, rows, cols};
  l.stride = {s.batch, s.row, s.col};
  return l;
}

struct Operand {
  const char* name;
  int64_t rows, cols;
  const MatrixStrides* s;
  DType dtype;
};
std::array<Operand, 4> operands(const GemmDesc& d) {
  return {Operand{"A", d.m, d.k, &d.a, d.a_dtype}, Operand{"B", d.k, d.n, &d.b, d.b_dtype},
          Operand{"C", d.m, d.n, &d.c, d.d_dtype}, Operand{"D", d.m, d.n, &d.d, d.d_dtype}};
}
}  // namespace

// ---- column-major normal form ------------------------------------------------------------------
namespace detail {
Result<Order> storage_order(int64_t rows, int64_t cols, int64_t rs, int64_t cs, Order prefer) {
  const bool row_ok = (cs == 1 || cols <= 1) && (rows <= 1 || rs >= std::max<int64_t>(cols, 1));
  const bool col_ok = (rs == 1 || rows <= 1) && (cols <= 1 || cs >= std::max<int64_t>(rows, 1));
  if (row_ok && (prefer == Order::Row || !col_ok)) return Order::Row;
  if (col_ok) return Order::Col;
  return invalid("");  // the caller writes the message
}

namespace {
/// Logical [rows, cols] with strides (rs, cs) as a column-major stored operand.
CmOperand cm_operand(int64_t rows, int64_t cols, int64_t rs, int64_t cs, int64_t bs, Order o) {
  CmOperand r;
  r.batch_stride = bs;
  if (o == Order::Col) {
    r.trans = false, r.rows = rows, r.cols = cols;
    r.ld = cols <= 1 ? std::max<int64_t>(rows, 1) : cs;
  } else {  // row-major = the transpose of a column-major [cols, rows]
    r.trans = true, r.rows = cols, r.cols = rows;
    r.ld = rows <= 1 ? std::max<int64_t>(cols, 1) : rs;
  }
  r.ld = std::max<int64_t>(r.ld, std::max<int64_t>(r.rows, 1));  // a single row/column: any ld >= rows
  return r;
}
}  // namespace

Result<CmProblem> to_col_major(const std::string& op, const GemmDesc& d) {
  auto order_of = [&](const Operand& o, Order prefer) -> Result<Order> {
    auto r = storage_order(o.rows, o.cols, o.s->row, o.s->col, prefer);
    if (!r)
      return invalid(op + ": " + o.name + " [" + str(o.rows) + ", " + str(o.cols) + "] strides (" + str(o.s->row) +
                     ", " + str(o.s->col) +
                     ") expected one unit stride and the other >= the extent it skips (row- or column-major "
                     "with a valid leading dimension)");
    return *r;
  };
  const auto ops = operands(d);
  auto od = order_of(ops[3], Order::Row);
  if (!od) return od.error();
  CmProblem cm;
  cm.swapped = *od == Order::Row;
  cm.batch = d.batch;
  // C: beta = 0 never reads it, so it takes D's form; otherwise it must share D's order.
  MatrixStrides cs = d.beta == 0.0 ? d.d : d.c;
  if (d.beta != 0.0) {
    auto oc = order_of(ops[2], *od);
    if (!oc) return oc.error();
    if (*oc != *od)
      return unsupported(op + ": C storage order expected " + (*od == Order::Row ? "row" : "column") +
                         "-major like D, got " + (*oc == Order::Row ? "row" : "column") + "-major");
  }
  auto oa = order_of(ops[0], Order::Row);
  if (!oa) return oa.error();
  auto ob = order_of(ops[1], Order::Col);
  if (!ob) return ob.error();
  auto flip = [](Order o) { return o == Order::Row ? Order::Col : Order::Row; };
  if (!cm.swapped) {
    cm.m = d.m, cm.n = d.n, cm.k = d.k;
    cm.a = cm_operand(d.m, d.k, d.a.row, d.a.col, d.a.batch, *oa);
    cm.b = cm_operand(d.k, d.n, d.b.row, d.b.col, d.b.batch, *ob);
    cm.c = cm_operand(d.m, d.n, cs.row, cs.col, cs.batch, Order::Col);
    cm.d = cm_operand(d.m, d.n, d.d.row, d.d.col, d.d.batch, Order::Col);
  } else {  // D^T = op(B)^T op(A)^T: transposed views swap strides and orders
    cm.m = d.n, cm.n = d.m, cm.k = d.k;
    cm.a = cm_operand(d.n, d.k, d.b.col, d.b.row, d.b.batch, flip(*ob));
    cm.b = cm_operand(d.k, d.m, d.a.col, d.a.row, d.a.batch, flip(*oa));
    cm.c = cm_operand(d.n, d.m, cs.col, cs.row, cs.batch, Order::Col);
    cm.d = cm_operand(d.n, d.m, d.d.col, d.d.row, d.d.batch, Order::Col);
  }
  return cm;
}
}  // namespace detail

// ---- descriptor checks ---------------------------------------------------------------------------
namespace {
Result<void> check_dtypes(const std::string& op, const GemmDesc& d) {
  const DType a = d.a_dtype, b = d.b_dtype, o = d.d_dtype;
  const bool same = a == b && b == o;
  if (same && (is_real_float(a) || a == DType::c64 || a == DType::c128)) return {};
  if (is_fp8(a) && is_fp8(b)) {
    if (a == DType::f8e5m2 && b == DType::f8e5m2)
      return unsupported(op +
                         ": A and B dtypes float8_e5m2 x float8_e5m2 are not supported (one must be "
                         "float8_e4m3fn)");
    if (o != DType::bf16 && o != DType::f16 && o != DType::f32)
      return unsupported(op + ": D dtype for fp8 inputs expected bfloat16, float16 or float32, got " + dt(o));
    return {};
  }
  if (a == DType::s8 && b == DType::s8) {
    if (o != DType::s32 && o != DType::bf16 && o != DType::f16 && o != DType::f32)
      return unsupported(op + ": D dtype for int8 inputs expected int32, bfloat16, float16 or float32, got " + dt(o));
    return {};
  }
  if (a != b) return unsupported(op + ": A and B dtypes expected equal, got " + dt(a) + " and " + dt(b));
  if (is_real_float(a) || a == DType::c64 || a == DType::c128)
    return unsupported(op + ": D dtype expected " + dt(a) + " (A's), got " + dt(o));
  return unsupported(op + ": dtype " + dt(a) +
                     " is not supported (expected float64, float32, float16, bfloat16, complex64, complex128, "
                     "float8 x float8 or int8 x int8)");
}

Result<void> check_epilogue(const std::string& op, const GemmDesc& d) {
  const bool fw = d.direction == Direction::Forward;
  const bool any_epi = d.act != GemmActivation::None || d.bias || d.aux || d.bgrad != GemmBiasGrad::None;
  if (any_epi && !is_real_float(d.d_dtype))
    return unsupported(op + ": epilogues (bias, activation, aux, bias gradient) need a real floating D, got " +
                       dt(d.d_dtype));
  // int8 -> floating D fuses a bias into its scale epilogue (CUTLASS); nothing else.
  const bool int8_bias_only =
      is_int8_scaled(d) && fw && d.act == GemmActivation::None && !d.aux && d.bgrad == GemmBiasGrad::None;
  if (any_epi && is_low_precision(d) && !int8_bias_only)
    return unsupported(op + ": epilogues are not supported with " + dt(d.a_dtype) + " inputs" +
                       (is_int8_scaled(d) ? " (int8 -> floating D takes a forward bias only)" : ""));
  if (fw) {
    if (d.bgrad != GemmBiasGrad::None)
      return invalid(op + ": bgrad expected none in the forward direction, got " + to_string(d.bgrad));
    if (d.aux && d.act == GemmActivation::None)
      return invalid(op +
                     ": aux (the pre-activation for the backward) expected only with an activation, got "
                     "act=none");
  } else {
    if (d.bias) return invalid(op + ": bias expected false in the backward direction (use bgrad), got true");
    if (d.aux) return invalid(op + ": aux output expected false in the backward direction (pass aux_in), got true");
    if ((d.bgrad == GemmBiasGrad::OfA || d.bgrad == GemmBiasGrad::OfB) && d.a_dtype != d.d_dtype)
      return unsupported(op + ": bgrad of A/B needs A, B and D of one dtype");
  }
  return {};
}

Result<void> check_desc(const std::string& op, const GemmDesc& d) {
  for (auto [nm, v] : {std::pair{"m", d.m}, std::pair{"n", d.n}, std::pair{"k", d.k}, std::pair{"batch", d.batch}}) {
    if (v < 0) return invalid(op + ": " + nm + " expected >= 0, got " + str(v));
    if (v > INT32_MAX) return invalid(op + ": " + nm + " expected <= 2^31-1 (cuBLASLt limit), got " + str(v));
  }
  BARACUDA_TRY(check_dtypes(op, d));
  BARACUDA_TRY(check_epilogue(op, d));
  if (d.scale_mode != GemmScaleMode::PerTensor && !is_fp8(d.a_dtype) && !is_int8_scaled(d))
    return unsupported(op + ": scale_mode=per_row_col applies to fp8 inputs or int8 inputs with a floating D, got " +
                       dt(d.a_dtype) + " -> " + dt(d.d_dtype));
  if (is_int8_scaled(d) && (d.alpha != 1.0 || d.beta != 0.0))
    return unsupported(op + ": int8 -> " + dt(d.d_dtype) +
                       " GEMM expected alpha = 1 and beta = 0 (scale through a_scale / b_scale), got alpha=" +
                       std::to_string(d.alpha) + ", beta=" + std::to_string(d.beta));
  if (!std::isfinite(d.alpha) || !std::isfinite(d.beta))
    return invalid(op + ": alpha and beta expected finite, got " + std::to_string(d.alpha) + " and " +
                   std::to_string(d.beta));
  if (d.a_dtype == DType::s8 && (d.alpha != std::floor(d.alpha) || d.beta != std::floor(d.beta)))
    return invalid(op + ": alpha and beta of an int8 GEMM expected integers, got " + std::to_string(d.alpha) + " and " +
                   std::to_string(d.beta));
  for (int i = 0; i < 4; ++i) {
    const unsigned al = d.align[i];
    if (!std::has_single_bit(al) || al > 256)
      return invalid(op + ": align[" + std::to_string(i) + "] expected a power of two <= 256, got " +
                     std::to_string(al));
  }
  for (const Operand& o : operands(d)) {
    if (o.s->row < 0 || o.s->col < 0 || o.s->batch < 0)
      return invalid(op + ": " + o.name + " strides expected >= 0, got (" + str(o.s->row) + ", " + str(o.s->col) +
                     ", batch " + str(o.s->batch) + ")");
    const auto sp = span_of(d.batch, o.rows, o.cols, *o.s);
    int64_t bytes;
    if (!sp || __builtin_mul_overflow(*sp, static_cast<int64_t>(size_in_bytes(o.dtype)), &bytes))
      return invalid(op + ": " + o.name + " footprint overflows 64 bits (batch " + str(d.batch) + ", [" + str(o.rows) +
                     ", " + str(o.cols) + "], strides (" + str(o.s->row) + ", " + str(o.s->col) + ", batch " +
                     str(o.s->batch) + "))");
  }
  // D must not overlap itself, also across batches (stride 0 batches are for inputs only).
  if (layout3(d.batch, d.m, d.n, d.d).has_internal_overlap())
    return invalid(op + ": D overlaps itself (batch " + str(d.batch) + ", [" + str(d.m) + ", " + str(d.n) +
                   "], strides (" + str(d.d.row) + ", " + str(d.d.col) + ", batch " + str(d.d.batch) +
                   ")); outputs need distinct elements");
  BARACUDA_TRY(detail::to_col_major(op, d));
  return {};
}

Result<void> check_general_prefs(const std::string& op, const GemmDesc& d, const PlanPreference& p) {
  if (p.backend != Backend::Any && p.backend != Backend::Native && p.backend != Backend::CuBlasLt &&
      p.backend != Backend::Cutlass)
    return unsupported(op + ": backend expected any, native, cublaslt or cutlass, got " + to_string(p.backend));
  if (p.tf32 == Tristate::Require && d.a_dtype != DType::f32)
    return unsupported(op + ": tf32=Require applies to float32 GEMMs, got " + dt(d.a_dtype));
  if (p.reduced_precision_reduction == Tristate::Require && d.a_dtype != DType::f16)
    return unsupported(op + ": reduced_precision_reduction=Require (f16 accumulation) applies to float16 GEMMs, got " +
                       dt(d.a_dtype));
  if (p.vectorized == Tristate::Forbid)
    return unsupported(op +
                       ": vectorized=Forbid cannot be honoured (the small-M kernel and cuBLASLt both use "
                       "vector loads)");
  return {};
}

// ---- implementations ------------------------------------------------------------------------------
struct Ctx {
  const Target& t;
  const std::string& op;
  const GemmDesc& d;
  const PlanPreference& p;
  const detail::CmProblem& cm;
};

struct GemmImpl {
  const char* name;
  GemmPlan::Path path;
  Result<void> (*check)(const Ctx&);
  Result<void> accepts(const Ctx& c) const { return check(c); }
};

Result<void> small_m_accepts(const Ctx& c) {
  const GemmDesc& d = c.d;
  const std::string why = "small-m: ";
  if (c.p.backend == Backend::CuBlasLt || c.p.backend == Backend::Cutlass)
    return unsupported(why + "backend=" + to_string(c.p.backend) + " requested");
  if (!is_half(d.a_dtype) || d.a_dtype != d.d_dtype)
    return unsupported(why + "dtype expected float16 or bfloat16, got " + dt(d.a_dtype));
  if (d.m > detail::kSmallMMax)
    return unsupported(why + "m expected <= " + std::to_string(detail::kSmallMMax) + ", got " + str(d.m));
  if (d.k % 8 != 0) return unsupported(why + "k expected a multiple of 8 (16-byte loads), got " + str(d.k));
  if (d.direction != Direction::Forward || d.aux)
    return unsupported(why + "backward epilogues and aux outputs go to cuBLASLt");
  if (c.p.reduced_precision_reduction == Tristate::Require)
    return unsupported(why + "accumulates in float32 (reduced_precision_reduction=Require)");
  const bool a_ok = (d.a.col == 1 || d.k <= 1) && (d.m <= 1 || d.a.row % 8 == 0) && d.a.batch % 8 == 0;
  if (!a_ok || d.align[0] < 16)
    return unsupported(why +
                       "A expected K-contiguous rows with 16-byte aligned starts (row stride % 8 == 0), got "
                       "strides (" +
                       str(d.a.row) + ", " + str(d.a.col) + ")");
  const bool b_ok = (d.b.row == 1 || d.k <= 1) && (d.n <= 1 || d.b.col % 8 == 0) && d.b.batch % 8 == 0;
  if (!b_ok || d.align[1] < 16)
    return unsupported(why +
                       "B expected K-contiguous ([n, k] row-major weight, column stride % 8 == 0), got "
                       "strides (" +
                       str(d.b.row) + ", " + str(d.b.col) + ")");
  // A block per 8 columns and batch, each reading all of K: with few blocks and a long K the
  // device sits mostly idle, where cuBLASLt splits K across it.
  const int64_t blocks = (d.n + 7) / 8 * std::max<int64_t>(d.batch, 1);
  if (blocks < c.t.num_sms && d.k > 16384)
    return unsupported(why + "too few column blocks (" + str(blocks) + " < " + std::to_string(c.t.num_sms) +
                       " SMs) for k = " + str(d.k) + " > 16384");
  return {};
}

Result<void> cublaslt_accepts(const Ctx& c) {
  const GemmDesc& d = c.d;
  const std::string why = "cublaslt: ";
  if (c.p.backend == Backend::Native || c.p.backend == Backend::Cutlass)
    return unsupported(why + "backend=" + to_string(c.p.backend) + " requested");
  if (is_int8_scaled(d))
    return unsupported(why + "int8 -> " + dt(d.d_dtype) +
                       " has no cuBLASLt variant on Hopper (no int8 outer-vector scaling); the CUTLASS kernel "
                       "serves it");
  if (c.p.require_bit_stable)
    return unsupported(why + "require_bit_stable: the heuristic's algorithm depends on the device");
  if (is_low_precision(d)) {
    // Hopper's fp8 and int8 kernels take "TN": both operands K-contiguous.
    if (!c.cm.a.trans || c.cm.b.trans)
      return unsupported(why + dt(d.a_dtype) +
                         " GEMM needs A and B K-contiguous (A row-major [m,k], B column-major "
                         "[k,n], as torch._scaled_mm / _int_mm)");
    const int q = d.a_dtype == DType::s8 ? 4 : 16;
    if (d.k % q != 0 || c.cm.a.ld % 16 != 0 || c.cm.b.ld % 16 != 0)
      return unsupported(why + dt(d.a_dtype) + " GEMM needs k a multiple of " + std::to_string(q) +
                         " and leading dimensions multiples of 16, got k=" + str(d.k) + ", ld=" + str(c.cm.a.ld) + "/" +
                         str(c.cm.b.ld));
    if (d.align[0] < 16 || d.align[1] < 16)
      return unsupported(why + dt(d.a_dtype) + " GEMM needs 16-byte aligned A and B");
  }
  return {};
}

// ---- CUTLASS int8 x int8 -> f32 / bf16 / f16 with per-row x per-column scales -----------------------
/// The kernels of each output dtype (gemm_cutlass_int8_<dtype>.cu).
struct CutlassInt8Entry {
  DType d;
  detail::CutlassInt8Kernels (*kernels)();
};
constexpr CutlassInt8Entry kCutlassInt8[] = {
    {DType::bf16, &detail::cutlass_int8_kernels<DType::bf16>},
    {DType::f16, &detail::cutlass_int8_kernels<DType::f16>},
    {DType::f32, &detail::cutlass_int8_kernels<DType::f32>},
};
detail::CutlassInt8Kernels cutlass_int8_for(DType d) {
  for (const CutlassInt8Entry& e : kCutlassInt8)
    if (e.d == d) return e.kernels();
  return {};
}

/// The large tile when the problem is tall enough for it and gives at least half a wave of large
/// tiles; otherwise the 64-row tile (decode and small batches, or narrow problems where the large
/// tile would leave most SMs idle).
int cutlass_int8_config(const GemmDesc& d, int num_sms) {
  const detail::CutlassInt8Tile& big = detail::kCutlassInt8Tiles[detail::kCutlassInt8Large];
  const int64_t tiles = (d.m + big.m - 1) / big.m * ((d.n + big.n - 1) / big.n);
  return d.m > detail::kCutlassInt8Tiles[detail::kCutlassInt8SmallM].m && 2 * tiles >= num_sms
             ? detail::kCutlassInt8Large
             : detail::kCutlassInt8SmallM;
}

/// The TN problem as the kernel sees it (no pointers). A single row's stride is irrelevant to the
/// product but enters the TMA descriptor, so it is normalized to the dense row length.
detail::CutlassInt8Params cutlass_int8_params(const GemmDesc& d, int config) {
  detail::CutlassInt8Params p;
  p.config = config;
  p.m = d.m, p.n = d.n, p.k = d.k;
  p.lda = d.m <= 1 ? d.k : d.a.row;
  p.ldb = d.n <= 1 ? d.k : d.b.col;
  p.ldd = d.m <= 1 ? d.n : d.d.row;
  p.a_vector = p.b_vector = d.scale_mode == GemmScaleMode::PerRowCol;
  return p;
}

Result<void> cutlass_int8_accepts(const Ctx& c) {
  const GemmDesc& d = c.d;
  const std::string why = "cutlass-int8: ";
  if (c.p.backend == Backend::Native || c.p.backend == Backend::CuBlasLt)
    return unsupported(why + "backend=" + to_string(c.p.backend) + " requested");
  if (!is_int8_scaled(d))
    return unsupported(why + "serves int8 x int8 -> bfloat16, float16 or float32, got " + dt(d.a_dtype) + " -> " +
                       dt(d.d_dtype));
  const detail::CutlassInt8Kernels kern = cutlass_int8_for(d.d_dtype);
  if (!kern.built)
    return unsupported(why +
                       "baracuda was built without CUTLASS (pip install nvidia-cutlass, or configure with "
                       "-DBARACUDA_CUTLASS_DIR=<dir holding cutlass/cutlass.h>; BARACUDA_CUDA_ARCHS must include 90a)");
  if (c.t.sm != 90)
    return unsupported(why + "needs sm_90 (the kernel is built for sm_90a: TMA + WGMMA), got sm_" +
                       std::to_string(c.t.sm));
  if (d.direction != Direction::Forward) return unsupported(why + "forward only, got the backward direction");
  if (d.batch != 1)
    return unsupported(why + "batch expected 1 (no batched variant: fold the batch into m), got " + str(d.batch));
  if (d.k % 16 != 0)
    return unsupported(why + "k expected a multiple of 16 (16-byte TMA rows of int8 A and B), got " + str(d.k));
  const int64_t vec = 16 / static_cast<int64_t>(size_in_bytes(d.d_dtype));
  if (d.n % vec != 0)
    return unsupported(why + "n expected a multiple of " + str(vec) + " for a " + dt(d.d_dtype) +
                       " D (16-byte TMA rows), got " + str(d.n));
  if (d.m == 0 || d.n == 0 || d.k == 0) return {};  // nothing launches (k = 0 writes the bias natively)
  const detail::CutlassInt8Params p = cutlass_int8_params(d, cutlass_int8_config(d, c.t.num_sms));
  if (d.a.col != 1)
    return unsupported(why + "A expected K-contiguous (row-major [m, k]), got strides (" + str(d.a.row) + ", " +
                       str(d.a.col) + ")");
  if (p.lda % 16 != 0)
    return unsupported(why + "A row stride expected a multiple of 16 elements (TMA), got " + str(p.lda));
  if (d.b.row != 1 && d.k > 1)
    return unsupported(why +
                       "B expected K-contiguous (stored [n, k] row-major like torch linear's weight, logical "
                       "strides (1, ldb)), got strides (" +
                       str(d.b.row) + ", " + str(d.b.col) + ")");
  if (p.ldb % 16 != 0)
    return unsupported(why +
                       "B column stride (row stride of the stored [n, k]) expected a multiple of 16 elements "
                       "(TMA), got " +
                       str(p.ldb));
  if (d.d.col != 1 && d.n > 1)
    return unsupported(why + "D expected row-major [m, n], got strides (" + str(d.d.row) + ", " + str(d.d.col) + ")");
  if (p.ldd % vec != 0)
    return unsupported(why + "D row stride expected a multiple of " + str(vec) + " elements (16 bytes, TMA), got " +
                       str(p.ldd));
  if (d.align[0] < 16 || d.align[1] < 16 || d.align[3] < 16)
    return unsupported(why + "A, B and D expected 16-byte aligned pointers (TMA), got align (" +
                       std::to_string(d.align[0]) + ", " + std::to_string(d.align[1]) + ", " +
                       std::to_string(d.align[3]) + ")");
  if (!kern.implementable(p))
    return unsupported(why + "CUTLASS can_implement refused m=" + str(p.m) + " n=" + str(p.n) + " k=" + str(p.k) +
                       " lda=" + str(p.lda) + " ldb=" + str(p.ldb) + " ldd=" + str(p.ldd));
  return {};
}

constexpr GemmImpl kImpls[] = {
    {"small-m", GemmPlan::Path::SmallM, &small_m_accepts},
    {"cutlass-int8", GemmPlan::Path::CutlassInt8, &cutlass_int8_accepts},
    {"cublaslt", GemmPlan::Path::CuBlasLt, &cublaslt_accepts},
};

/// Whether cuBLASLt's own epilogue computes exactly what the descriptor asks.
bool can_fuse(const GemmDesc& d, const detail::CmProblem& cm) {
  const bool plain = d.act == GemmActivation::None && !d.bias && !d.aux && d.bgrad == GemmBiasGrad::None;
  if (plain) return true;
  // Bias and bias gradient are per row of the column-major D: per column n of ours only when D
  // is row-major (swapped). Aux ld / batch stride must be multiples of 8.
  if (!cm.swapped || !(d.d_dtype == DType::f32 || is_half(d.d_dtype)) || d.a_dtype != d.d_dtype) return false;
  const bool aux_ok = cm.d.ld % 8 == 0 && (cm.batch <= 1 || cm.d.batch_stride % 8 == 0);
  if (d.direction == Direction::Forward) {
    if (d.act == GemmActivation::Relu) return !d.aux;  // cuBLASLt's relu aux is a bit mask
    if (d.act == GemmActivation::GeluTanh) return !d.aux || aux_ok;
    return d.act == GemmActivation::None;
  }
  if (d.act != GemmActivation::GeluTanh || !aux_ok) return false;
  return d.bgrad == GemmBiasGrad::None || (d.bgrad == GemmBiasGrad::OfD && d.batch == 1);
}

size_t align256(size_t n) { return (n + 255) / 256 * 256; }

/// The bias-gradient reduction's input view.
detail::ReduceParams reduce_params(const GemmDesc& d, const GemmArgs* a) {
  detail::ReduceParams r;
  r.dt = d.d_dtype;
  r.batch = d.batch;
  switch (d.bgrad) {
    case GemmBiasGrad::OfA:  // X[b, kk, mm] = op(A)[b, mm, kk]
      r.rows = d.k, r.cols = d.m, r.xs = d.a.transposed();
      if (a) r.x = a->a.data;
      break;
    case GemmBiasGrad::OfB:
      r.rows = d.k, r.cols = d.n, r.xs = d.b;
      if (a) r.x = a->b.data;
      break;
    default:
      r.rows = d.m, r.cols = d.n, r.xs = d.d;
      if (a) r.x = a->d.data;
      break;
  }
  if (a) r.out = a->bgrad.data;
  return r;
}

DType math_dtype(const GemmDesc& d) {
  switch (d.a_dtype) {
    case DType::f64:
    case DType::c128:
      return DType::f64;
    case DType::s8:
      return DType::s32;
    default:
      return DType::f32;  // f16/bf16/fp8 multiply exactly into f32; tf32 shows in the note
  }
}

std::string epilogue_name(const GemmDesc& d) {
  std::string e;
  auto add = [&](const std::string& s) { e += (e.empty() ? "" : "+") + s; };
  if (d.bias) add("bias");
  if (d.act != GemmActivation::None) add(std::string(d.direction == Direction::Backward ? "d" : "") + to_string(d.act));
  if (d.aux) add("aux");
  if (d.bgrad != GemmBiasGrad::None) add(std::string("bgrad_") + to_string(d.bgrad));
  if (d.beta != 0.0) add("beta*C");
  return e.empty() ? "none" : e;
}
}  // namespace

// ---- select ------------------------------------------------------------------------------------------
struct GemmPlanAccess {
  static Result<GemmPlan> select(const Target& target, const GemmDesc& desc, const PlanPreference& pref) {
    const std::string op = op_label(desc);
    BARACUDA_TRY(check_desc(op, desc));
    BARACUDA_TRY(check_general_prefs(op, desc, pref));
    if (target.sm < 80) return unsupported(op + ": sm expected >= 80, got " + std::to_string(target.sm));
    if (is_fp8(desc.a_dtype) && target.sm < 89)
      return unsupported(op + ": fp8 GEMM needs sm >= 89, got " + std::to_string(target.sm));
    auto cm = detail::to_col_major(op, desc);
    if (!cm) return cm.error();
    const Ctx ctx{target, op, desc, pref, *cm};
    auto impl = detail::first_accepting<GemmImpl>(op, std::span<const GemmImpl>(kImpls), ctx);
    if (!impl) return impl.error();

    GemmPlan p;
    p.desc_ = desc;
    p.target_ = target;
    p.path_ = (*impl)->path;
    p.tf32_ = pref.tf32 == Tristate::Require;
    p.f16_accumulate_ = pref.reduced_precision_reduction == Tristate::Require;
    p.deterministic_ = pref.require_deterministic;
    const bool small = p.path_ == GemmPlan::Path::SmallM;
    const bool cutlass = p.path_ == GemmPlan::Path::CutlassInt8;
    p.fused_epilogue_ = small || cutlass || can_fuse(desc, *cm);

    KernelSku& s = p.sku_;
    s.category = "gemm";
    s.op = op;
    s.dtypes = desc.a_dtype == desc.b_dtype ? dt(desc.a_dtype) : dt(desc.a_dtype) + "," + dt(desc.b_dtype);
    s.dtypes += "->" + dt(desc.d_dtype);
    s.arch = target.sm >= 90 ? "sm_90a" : "sm_80";
    s.backend = small ? Backend::Native : cutlass ? Backend::Cutlass : Backend::CuBlasLt;
    s.precision.math = math_dtype(desc);
    s.precision.accumulator = p.f16_accumulate_ ? DType::f16 : math_dtype(desc);
    // The native kernels fix their reduction order by the problem alone; the CUTLASS int8 kernel
    // accumulates exactly in int32 (no split-K) and scales element-wise, so neither its tile
    // choice nor the device changes a bit.
    s.precision.deterministic = small || cutlass || p.deterministic_;
    s.precision.bit_stable = small || cutlass;
    std::string note;
    if (p.tf32_) note = "tf32 inputs (10-bit mantissa), f32 accumulation";
    if (desc.act == GemmActivation::GeluTanh) note += std::string(note.empty() ? "" : "; ") + "gelu tanh approximation";
    if (is_fp8(desc.a_dtype))
      note += std::string(note.empty() ? "" : "; ") + (desc.scale_mode == GemmScaleMode::PerRowCol
                                                           ? "fp8 with per-row (A) and per-column (B) scales"
                                                           : "fp8 with per-tensor scales");
    if (cutlass)
      note +=
          std::string(note.empty() ? "" : "; ") +
          "int32 exact accumulation (no split-K); f32 epilogue (acc * a_scale) * b_scale" +
          (desc.bias ? " + bias" : "") + ", each step rounded, then one rounding to " + dt(desc.d_dtype) + "; " +
          (desc.scale_mode == GemmScaleMode::PerRowCol ? "per-row (A) and per-column (B) scales" : "per-tensor scales");
    s.precision.note = note;

    size_t ws = 0;
    if (small) {
      s.layout = "small-m (mma.m16n8k16, k-contiguous 16-byte streams, 8-warp split-k, fixed-order reduction)";
    } else if (cutlass) {
      p.cutlass_tile_ = static_cast<uint8_t>(cutlass_int8_config(desc, target.num_sms));
      s.layout = std::string("cutlass sm90 int8 TN (TMA + WGMMA) ") + detail::kCutlassInt8Tiles[p.cutlass_tile_].name;
      if (desc.m > 0 && desc.n > 0 && desc.k > 0)
        ws = align256(cutlass_int8_for(desc.d_dtype).workspace(cutlass_int8_params(desc, p.cutlass_tile_)));
      p.backend_ws_bytes_ = ws;
    } else {
      const auto& c = *cm;
      s.layout = std::string("cublaslt ") + (c.a.trans ? "T" : "N") + (c.b.trans ? "T" : "N") +
                 (c.swapped ? " (row-major D as D^T)" : "") + (desc.batch > 1 ? " strided-batched" : "");
      detail::CublasConfig cfg;
      cfg.cm = c;
      cfg.tf32 = p.tf32_;
      cfg.f16_accumulate = p.f16_accumulate_;
      cfg.deterministic = p.deterministic_;
      cfg.fused_epilogue = p.fused_epilogue_;
      cfg.max_workspace = detail::cublaslt_workspace_cap(target.sm);
      size_t bws = 0;
      // Empty problems and k = 0 never call cuBLASLt (run writes beta*C natively).
      const bool needs_gemm = desc.m > 0 && desc.n > 0 && desc.k > 0 && desc.batch > 0;
      if (needs_gemm) {
        auto st = detail::cublaslt_prepare(op, desc, cfg, target.device, &bws);
        if (!st) return st.error();
        p.state_ = *st;
        p.fused_epilogue_ = detail::cublaslt_fused(*p.state_);
      }
      p.backend_ws_bytes_ = align256(bws);
      ws = p.backend_ws_bytes_;
    }
    // Reserved even when cuBLASLt fuses the bias gradient: an offline-selected plan learns only at
    // its first run whether a fused kernel exists.
    if (desc.bgrad != GemmBiasGrad::None) ws += align256(detail::reduce_workspace_bytes(reduce_params(desc, nullptr)));
    p.workspace_bytes_ = ws;
    s.epilogue = epilogue_name(desc) + (p.fused_epilogue_ ? "" : " (native epilogue)");
    return p;
  }
};

Result<GemmPlan> GemmPlan::select(const Target& target, const GemmDesc& desc, const PlanPreference& pref) {
  return GemmPlanAccess::select(target, desc, pref);
}

// ---- argument checks ---------------------------------------------------------------------------------
namespace {
struct ArgView {
  const char* role;
  const void* data;
  DType dtype;
  const Layout* l;
  bool output;
};

/// Byte range [lo, hi) of a tensor (strides already checked non-negative); {0,0} when empty.
std::pair<uintptr_t, uintptr_t> byte_range(const ArgView& v) {
  int64_t lo = 0, hi = 0;
  v.l->extent(&lo, &hi);
  if (hi <= lo) return {0, 0};
  const auto base = reinterpret_cast<uintptr_t>(v.data);
  return {base + static_cast<uintptr_t>(lo) * size_in_bytes(v.dtype),
          base + static_cast<uintptr_t>(hi) * size_in_bytes(v.dtype)};
}

Result<void> check_matrix(const std::string& op, const char* role, const TensorRef& t, DType want, int64_t batch,
                          int64_t rows, int64_t cols, const MatrixStrides& s, unsigned align) {
  if (t.dtype != want) return invalid(op + ": " + role + " dtype expected " + dt(want) + ", got " + dt(t.dtype));
  const Layout& l = t.layout;
  const bool rank_ok = l.rank == 3 || (l.rank == 2 && batch == 1);
  const int off = l.rank - 2;
  const std::string want_shape =
      "[" + (batch == 1 ? std::string() : str(batch) + ", ") + str(rows) + ", " + str(cols) + "]";
  if (!rank_ok || (l.rank == 3 && l.shape[0] != batch) || l.shape[off] != rows || l.shape[off + 1] != cols)
    return invalid(op + ": " + role + " shape expected " + want_shape + ", got " + l.shape_str());
  const bool strides_ok = (rows <= 1 || l.stride[off] == s.row) && (cols <= 1 || l.stride[off + 1] == s.col) &&
                          (l.rank == 2 || batch <= 1 || l.stride[0] == s.batch);
  if (!strides_ok)
    return invalid(op + ": " + role + " strides expected (" + (l.rank == 3 ? str(s.batch) + ", " : std::string()) +
                   str(s.row) + ", " + str(s.col) + ") as described, got " + l.stride_str());
  const int64_t n = l.numel();
  if (n > 0 && t.data == nullptr) return invalid(op + ": " + role + " is null but has " + str(n) + " elements");
  if (n > 0 && reinterpret_cast<uintptr_t>(t.data) % align != 0)
    return make_error(Status::MisalignedOperand, op + ": " + role + " pointer expected " + std::to_string(align) +
                                                     "-byte aligned (GemmDesc::align), got address " +
                                                     std::to_string(reinterpret_cast<uintptr_t>(t.data)));
  return {};
}

Result<void> check_vector(const std::string& op, const char* role, const TensorRef& t, DType want, int64_t len,
                          unsigned align) {
  if (t.dtype != want) return invalid(op + ": " + role + " dtype expected " + dt(want) + ", got " + dt(t.dtype));
  if (t.layout.rank != 1 || t.layout.shape[0] != len)
    return invalid(op + ": " + role + " shape expected [" + str(len) + "], got " + t.layout.shape_str());
  if (len > 1 && t.layout.stride[0] != 1)
    return invalid(op + ": " + role + " stride expected 1 (contiguous), got " + str(t.layout.stride[0]));
  if (len > 0 && t.data == nullptr) return invalid(op + ": " + role + " is null but has " + str(len) + " elements");
  if (len > 0 && reinterpret_cast<uintptr_t>(t.data) % align != 0)
    return make_error(Status::MisalignedOperand, op + ": " + role + " pointer expected " + std::to_string(align) +
                                                     "-byte aligned, got address " +
                                                     std::to_string(reinterpret_cast<uintptr_t>(t.data)));
  return {};
}
}  // namespace

Result<void> GemmPlan::can_implement(const GemmArgs& a) const {
  const GemmDesc& d = desc_;
  const std::string op = op_label(d);
  const unsigned esz_d = static_cast<unsigned>(size_in_bytes(d.d_dtype));
  // cuBLASLt reads epilogue pointers' alignment at select time (null = any): they must be
  // 16-byte aligned when it fuses them.
  const unsigned epi_align = fused_epilogue_ && path_ == Path::CuBlasLt ? 16u : esz_d;
  BARACUDA_TRY(check_matrix(op, "A", a.a, d.a_dtype, d.batch, d.m, d.k, d.a, d.align[0]));
  BARACUDA_TRY(check_matrix(op, "B", a.b, d.b_dtype, d.batch, d.k, d.n, d.b, d.align[1]));
  if (d.beta != 0.0) BARACUDA_TRY(check_matrix(op, "C", a.c, d.d_dtype, d.batch, d.m, d.n, d.c, d.align[2]));
  BARACUDA_TRY(check_matrix(op, "D", a.d, d.d_dtype, d.batch, d.m, d.n, d.d, d.align[3]));
  std::vector<ArgView> views = {{"A", a.a.data, a.a.dtype, &a.a.layout, false},
                                {"B", a.b.data, a.b.dtype, &a.b.layout, false},
                                {"D", a.d.data, a.d.dtype, &a.d.layout, true}};
  if (d.bias) {
    BARACUDA_TRY(check_vector(op, "bias", a.bias, d.d_dtype, d.n, epi_align));
    views.push_back({"bias", a.bias.data, a.bias.dtype, &a.bias.layout, false});
  }
  if (d.aux) {
    BARACUDA_TRY(check_matrix(op, "aux", a.aux, d.d_dtype, d.batch, d.m, d.n, d.d, epi_align));
    views.push_back({"aux", a.aux.data, a.aux.dtype, &a.aux.layout, true});
  }
  if (d.direction == Direction::Backward && d.act != GemmActivation::None) {
    BARACUDA_TRY(check_matrix(op, "aux_in", a.aux_in, d.d_dtype, d.batch, d.m, d.n, d.d, epi_align));
    views.push_back({"aux_in", a.aux_in.data, a.aux_in.dtype, &a.aux_in.layout, false});
  }
  if (d.bgrad != GemmBiasGrad::None) {
    const int64_t len = d.bgrad == GemmBiasGrad::OfA ? d.m : d.n;
    BARACUDA_TRY(check_vector(op, "bgrad", a.bgrad, d.d_dtype, len, epi_align));
    views.push_back({"bgrad", a.bgrad.data, a.bgrad.dtype, &a.bgrad.layout, true});
  }
  if (!is_fp8(d.a_dtype) && !is_int8_scaled(d)) {
    if (a.a_scale.data || a.b_scale.data || a.amax_d.data)
      return invalid(op + ": a_scale / b_scale / amax_d expected absent for " + dt(d.a_dtype) + " -> " + dt(d.d_dtype) +
                     " (fp8, and int8 with a floating D, only)");
  } else {
    const bool outer = d.scale_mode == GemmScaleMode::PerRowCol;
    auto scale = [&](const char* role, const TensorRef& t, int64_t len) -> Result<void> {
      if (!t.data) {
        if (outer && len > 0)
          return invalid(op + ": " + role + " expected [" + str(len) + "] float32 (per_row_col), got none");
        return {};
      }
      if (t.dtype != DType::f32) return invalid(op + ": " + role + " dtype expected float32, got " + dt(t.dtype));
      if (t.numel() != len || !t.layout.is_contiguous())
        return invalid(op + ": " + role + " expected " + str(len) + " contiguous float32 value(s), got shape " +
                       t.layout.shape_str() + " strides " + t.layout.stride_str());
      if (len > 0 && reinterpret_cast<uintptr_t>(t.data) % 16 != 0)
        return make_error(Status::MisalignedOperand, op + ": " + role + " pointer expected 16-byte aligned");
      return {};
    };
    BARACUDA_TRY(scale("a_scale", a.a_scale, outer ? d.m : 1));
    BARACUDA_TRY(scale("b_scale", a.b_scale, outer ? d.n : 1));
    if (a.amax_d.data && is_int8_scaled(d)) return invalid(op + ": amax_d expected absent for int8 inputs (fp8 only)");
    if (a.amax_d.data && (a.amax_d.dtype != DType::f32 || a.amax_d.numel() != 1))
      return invalid(op + ": amax_d expected one float32, got " + dt(a.amax_d.dtype) + " " +
                     a.amax_d.layout.shape_str());
    if (a.a_scale.data) views.push_back({"a_scale", a.a_scale.data, a.a_scale.dtype, &a.a_scale.layout, false});
    if (a.b_scale.data) views.push_back({"b_scale", a.b_scale.data, a.b_scale.dtype, &a.b_scale.layout, false});
    if (a.amax_d.data) views.push_back({"amax_d", a.amax_d.data, a.amax_d.dtype, &a.amax_d.layout, true});
  }
  // Outputs must not overlap any other operand; C may be D exactly (in place).
  for (size_t i = 0; i < views.size(); ++i) {
    if (!views[i].output) continue;
    const auto ri = byte_range(views[i]);
    if (ri.first == ri.second) continue;
    for (size_t j = 0; j < views.size(); ++j) {
      if (i == j) continue;
      const auto rj = byte_range(views[j]);
      if (rj.first < ri.second && ri.first < rj.second)
        return invalid(op + ": " + views[i].role + " overlaps " + views[j].role + " (outputs need their own memory)");
    }
    if (d.beta != 0.0 && std::string_view(views[i].role) != "D") {
      const auto rc = byte_range({"C", a.c.data, a.c.dtype, &a.c.layout, false});
      if (rc.first < ri.second && ri.first < rc.second) return invalid(op + ": " + views[i].role + " overlaps C");
    }
  }
  if (d.beta != 0.0 && a.c.data != a.d.data) {
    const auto rc = byte_range({"C", a.c.data, a.c.dtype, &a.c.layout, false});
    const auto rd = byte_range(views[2]);
    if (rc.first < rd.second && rd.first < rc.second)
      return invalid(op + ": D partially overlaps C (only C == D with equal strides is allowed)");
  }
  if (d.beta != 0.0 && a.c.data == a.d.data && !(d.c == d.d))
    return invalid(op + ": C is D in place but their strides differ");
  return {};
}

// ---- run ---------------------------------------------------------------------------------------------
Result<void> GemmPlan::run(cudaStream_t stream, Workspace ws, const GemmArgs& a) const {
  BARACUDA_TRY(can_implement(a));
  const GemmDesc& d = desc_;
  const std::string op = op_label(d);
  if (ws.bytes < workspace_bytes_ || (workspace_bytes_ && !ws.ptr))
    return make_error(Status::WorkspaceTooSmall, op + ": workspace expected >= " + std::to_string(workspace_bytes_) +
                                                     " bytes, got " + std::to_string(ws.bytes));
  auto cuda_check = [&](cudaError_t e, const char* what) -> Result<void> {
    if (e != cudaSuccess) return make_error(Status::CudaError, op + ": " + what + " failed: " + cudaGetErrorString(e));
    return {};
  };
  const bool empty = d.m == 0 || d.n == 0 || d.batch == 0;
  bool fused = fused_epilogue_;
  if (!empty) {
    if (path_ == Path::SmallM) {
      detail::SmallMParams p;
      p.dt = d.a_dtype;
      p.m = d.m, p.n = d.n, p.k = d.k, p.batch = d.batch;
      p.a = a.a.data, p.a_row = d.a.row, p.a_batch = d.a.batch;
      p.b = a.b.data, p.b_col = d.b.col, p.b_batch = d.b.batch;
      p.c = d.beta != 0.0 ? a.c.data : nullptr, p.cs = d.c;
      p.d = a.d.data, p.ds = d.d;
      p.alpha = static_cast<float>(d.alpha), p.beta = static_cast<float>(d.beta);
      p.bias = d.bias ? a.bias.data : nullptr;
      p.act = d.act;
      return cuda_check(detail::launch_small_m(p, stream), "small-m kernel launch");
    }
    const bool k0 = d.k == 0;
    if (!k0 && path_ == Path::CutlassInt8) {
      detail::CutlassInt8Params p = cutlass_int8_params(d, cutlass_tile_);
      p.a = a.a.data, p.b = a.b.data, p.d = a.d.data;
      p.a_scale = static_cast<const float*>(a.a_scale.data);
      p.b_scale = static_cast<const float*>(a.b_scale.data);
      p.bias = d.bias ? a.bias.data : nullptr;
      // The device the launch goes to; the plan's SM count when it was selected for that device,
      // else (selected offline or elsewhere) asked at launch.
      BARACUDA_TRY(cuda_check(cudaGetDevice(&p.device), "cudaGetDevice"));
      p.sm_count = p.device == target_.device ? target_.num_sms : 0;
      BARACUDA_TRY(cuda_check(cutlass_int8_for(d.d_dtype).launch(p, ws.ptr, stream), "CUTLASS int8 GEMM launch"));
    } else if (!k0) {
      BARACUDA_TRY(detail::cublaslt_run(op, *state_, a, ws.ptr, backend_ws_bytes_, stream, &fused));
    }
    const bool native_epi = k0 || (!fused && (d.act != GemmActivation::None || d.bias || d.aux));
    if (native_epi) {
      detail::EpilogueParams e;
      e.dt = d.d_dtype;
      e.batch = d.batch, e.m = d.m, e.n = d.n;
      e.d = a.d.data, e.ds = d.d;
      e.from_c = k0;
      e.c = d.beta != 0.0 ? a.c.data : nullptr, e.cs = d.c, e.beta = d.beta;
      e.bias = d.bias ? a.bias.data : nullptr;
      e.aux_out = d.aux ? a.aux.data : nullptr;
      e.aux_in = d.direction == Direction::Backward ? a.aux_in.data : nullptr;
      e.act = d.act;
      e.backward = d.direction == Direction::Backward;
      BARACUDA_TRY(cuda_check(detail::launch_epilogue(e, stream), "epilogue kernel launch"));
    }
  }
  if (a.amax_d.data && size_in_bits(d.d_dtype) != 8)
    BARACUDA_TRY(cuda_check(detail::launch_amax(d.d_dtype, empty ? 0 : d.batch, d.m, d.n, a.d.data, d.d,
                                                static_cast<float*>(a.amax_d.data), stream),
                            "amax launch"));
  const bool native_bgrad = d.bgrad != GemmBiasGrad::None && !(fused && d.k > 0 && !empty);
  if (native_bgrad && a.bgrad.layout.numel() > 0) {
    auto r = reduce_params(d, &a);
    if (empty) r.rows = 0;  // a sum over nothing: zeros
    if (d.batch == 0) r.batch = 0;
    void* rws = static_cast<char*>(ws.ptr) + backend_ws_bytes_;
    BARACUDA_TRY(cuda_check(detail::launch_reduce(r, rws, stream), "bias-gradient reduction launch"));
  }
  return {};
}

// ---- convenience -------------------------------------------------------------------------------------
namespace {
Result<const GemmPlan*> cached_plan(const GemmDesc& desc, const PlanPreference& pref) {
  return detail::cached_plan<GemmPlan>(desc.key(), pref,
                                       [&](const Target& t) { return GemmPlan::select(t, desc, pref); });
}
}  // namespace

Result<void> gemm(cudaStream_t stream, const GemmDesc& desc, const GemmArgs& args, Workspace ws,
                  const PlanPreference& pref) {
  auto p = cached_plan(desc, pref);
  if (!p) return p.error();
  return (*p)->run(stream, ws, args);
}

Result<size_t> gemm_workspace_size(const GemmDesc& desc, const PlanPreference& pref) {
  auto p = cached_plan(desc, pref);
  if (!p) return p.error();
  return (*p)->workspace_size();
}

}  // namespace baracuda
