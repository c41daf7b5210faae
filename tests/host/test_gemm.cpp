// GEMM family, host only: descriptor validation and its messages, the implementation choice
// (small-M kernel, CUTLASS int8, cuBLASLt), preferences, the column-major normal form,
// can_implement on fake pointers, workspace sizing and coverage rows. Every select runs offline
// (no GPU). The CUTLASS int8 expectations follow how the library was built (with or without the
// CUTLASS headers: detail::cutlass_int8_kernels<>().built).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "baracuda/core/coverage.hpp"
#include "baracuda/ops/gemm.hpp"
#include "ops/gemm/gemm_internal.hpp"
#include "test_util.hpp"

namespace baracuda {
namespace {
using test::fake_ptr;

const Target kOff = Target::offline(90);

/// Tensors matching a dense descriptor (rank 2 when batch == 1), at distinct fake addresses.
TensorMut matrix(int slot, DType dt, int64_t batch, int64_t rows, int64_t cols, const MatrixStrides& s) {
  TensorMut t{fake_ptr(slot), dt, {}};
  if (batch == 1) {
    t.layout = test::strided({rows, cols}, {s.row, s.col});
  } else {
    t.layout = test::strided({batch, rows, cols}, {s.batch, s.row, s.col});
  }
  return t;
}
GemmArgs args_for(const GemmDesc& d) {
  GemmArgs a;
  a.a = matrix(0, d.a_dtype, d.batch, d.m, d.k, d.a);
  a.b = matrix(1, d.b_dtype, d.batch, d.k, d.n, d.b);
  a.c = matrix(2, d.d_dtype, d.batch, d.m, d.n, d.c);
  a.d = matrix(3, d.d_dtype, d.batch, d.m, d.n, d.d);
  a.bias = make_ref(fake_ptr(4), d.d_dtype, {d.n});
  a.aux = matrix(5, d.d_dtype, d.batch, d.m, d.n, d.d);
  a.aux_in = matrix(6, d.d_dtype, d.batch, d.m, d.n, d.d);
  a.bgrad = make_mut(fake_ptr(7), d.d_dtype, {d.bgrad == GemmBiasGrad::OfA ? d.m : d.n});
  return a;
}

TEST(Gemm, AcceptsEveryDeclaredDtype) {
  for (DType t : {DType::f64, DType::f32, DType::f16, DType::bf16, DType::c64, DType::c128}) {
    auto p = GemmPlan::select(kOff, GemmDesc::dense(t, 128, 96, 64));
    ASSERT_TRUE(p.ok()) << name(t) << ": " << p.message();
    EXPECT_EQ(p->sku().backend, Backend::CuBlasLt);
    EXPECT_EQ(p->sku().category, "gemm");
  }
  for (DType o : {DType::bf16, DType::f16, DType::f32}) {
    auto p = GemmPlan::select(kOff, GemmDesc::dense(DType::f8e4m3, o, 128, 128, 128, false, true));
    EXPECT_TRUE(p.ok()) << p.message();
  }
  GemmDesc mixed = GemmDesc::dense(DType::f8e4m3, DType::bf16, 128, 128, 128, false, true);
  mixed.b_dtype = DType::f8e5m2;
  EXPECT_TRUE(GemmPlan::select(kOff, mixed).ok());
  EXPECT_TRUE(GemmPlan::select(kOff, GemmDesc::dense(DType::s8, DType::s32, 128, 128, 128, false, true)).ok());
}

TEST(Gemm, RefusesUndeclaredDtypes) {
  EXPECT_FAILS_WITH(GemmPlan::select(kOff, GemmDesc::dense(DType::s32, 8, 8, 8)), Status::Unsupported, "gemm", "int32",
                    "not supported");
  EXPECT_FAILS_WITH(GemmPlan::select(kOff, GemmDesc::dense(DType::f16, DType::f32, 8, 8, 8)), Status::Unsupported,
                    "D dtype expected float16", "got float32");
  GemmDesc d = GemmDesc::dense(DType::f16, 8, 8, 8);
  d.b_dtype = DType::bf16;
  EXPECT_FAILS_WITH(GemmPlan::select(kOff, d), Status::Unsupported, "A and B dtypes expected equal");
  EXPECT_FAILS_WITH(GemmPlan::select(kOff, GemmDesc::dense(DType::f8e5m2, DType::bf16, 64, 64, 64, false, true)),
                    Status::Unsupported, "e5m2");
  EXPECT_FAILS_WITH(GemmPlan::select(kOff, GemmDesc::dense(DType::s8, DType::s8, 64, 64, 64, false, true)),
                    Status::Unsupported, "int8", "int32");
  EXPECT_FAILS_WITH(GemmPlan::select(kOff, GemmDesc::dense(DType::f8e4m3, DType::f8e4m3, 64, 64, 64, false, true)),
                    Status::Unsupported, "D dtype for fp8");
}

TEST(Gemm, LowPrecisionNeedsKContiguousOperands) {
  // B row-major [k, n] is N-contiguous: refused with the layout named.
  EXPECT_FAILS_WITH(GemmPlan::select(kOff, GemmDesc::dense(DType::f8e4m3, DType::bf16, 64, 64, 64)),
                    Status::Unsupported, "K-contiguous");
  EXPECT_FAILS_WITH(GemmPlan::select(kOff, GemmDesc::dense(DType::f8e4m3, DType::bf16, 64, 64, 40, false, true)),
                    Status::Unsupported, "multiple of 16");
  EXPECT_FAILS_WITH(
      GemmPlan::select(Target::offline(80), GemmDesc::dense(DType::f8e4m3, DType::bf16, 64, 64, 64, false, true)),
      Status::Unsupported, "sm >= 89");
}

TEST(Gemm, ProblemChecks) {
  EXPECT_FAILS_WITH(GemmPlan::select(kOff, GemmDesc::dense(DType::f32, -1, 8, 8)), Status::InvalidProblem,
                    "m expected >= 0, got -1");
  EXPECT_FAILS_WITH(GemmPlan::select(kOff, GemmDesc::dense(DType::f32, int64_t{1} << 32, 8, 8)), Status::InvalidProblem,
                    "m expected <= 2^31-1");
  GemmDesc d = GemmDesc::dense(DType::f32, 8, 8, 8);
  d.a.row = 4;  // rows overlap: ld 4 < 8 columns
  EXPECT_FAILS_WITH(GemmPlan::select(kOff, d), Status::InvalidProblem, "gemm: A [8, 8] strides (4, 1)", "unit stride");
  d = GemmDesc::dense(DType::f32, 8, 8, 8);
  d.b = {16, 2, 0};  // no unit stride
  EXPECT_FAILS_WITH(GemmPlan::select(kOff, d), Status::InvalidProblem, "B [8, 8]");
  d = GemmDesc::dense(DType::f32, 8, 8, 8, false, false, 4);
  d.d.batch = 0;  // batches of D would collide
  EXPECT_FAILS_WITH(GemmPlan::select(kOff, d), Status::InvalidProblem, "D overlaps itself");
  d = GemmDesc::dense(DType::f32, 8, 8, 8);
  d.a.row = int64_t{1} << 62;
  EXPECT_FAILS_WITH(GemmPlan::select(kOff, d), Status::InvalidProblem, "A footprint overflows");
  d = GemmDesc::dense(DType::f32, 8, 8, 8);
  d.c = MatrixStrides::col_major(8);
  d.beta = 1.0;
  EXPECT_FAILS_WITH(GemmPlan::select(kOff, d), Status::Unsupported, "C storage order expected row-major like D");
  d.beta = 0.0;  // C unread: its strides do not matter
  EXPECT_TRUE(GemmPlan::select(kOff, d).ok());
  d = GemmDesc::dense(DType::s8, DType::s32, 64, 64, 64, false, true);
  d.alpha = 0.5;
  EXPECT_FAILS_WITH(GemmPlan::select(kOff, d), Status::InvalidProblem, "integers");
  d = GemmDesc::dense(DType::f32, 8, 8, 8);
  d.align[1] = 12;
  EXPECT_FAILS_WITH(GemmPlan::select(kOff, d), Status::InvalidProblem, "align[1] expected a power of two");
  // Empty and k = 0 problems are valid.
  EXPECT_TRUE(GemmPlan::select(kOff, GemmDesc::dense(DType::f32, 0, 8, 8)).ok());
  EXPECT_TRUE(GemmPlan::select(kOff, GemmDesc::dense(DType::f32, 8, 8, 0)).ok());
  EXPECT_TRUE(GemmPlan::select(kOff, GemmDesc::dense(DType::f32, 8, 8, 8, false, false, 0)).ok());
}

TEST(Gemm, EpilogueChecks) {
  GemmDesc d = GemmDesc::dense(DType::bf16, 64, 64, 64);
  d.aux = true;
  EXPECT_FAILS_WITH(GemmPlan::select(kOff, d), Status::InvalidProblem, "aux", "act=none");
  d = GemmDesc::dense(DType::bf16, 64, 64, 64);
  d.bgrad = GemmBiasGrad::OfD;
  EXPECT_FAILS_WITH(GemmPlan::select(kOff, d), Status::InvalidProblem, "bgrad expected none in the forward");
  d.direction = Direction::Backward;
  EXPECT_TRUE(GemmPlan::select(kOff, d).ok());
  d.bias = true;
  EXPECT_FAILS_WITH(GemmPlan::select(kOff, d), Status::InvalidProblem, "gemm_backward: bias expected false");
  d = GemmDesc::dense(DType::c64, 8, 8, 8);
  d.bias = true;
  EXPECT_FAILS_WITH(GemmPlan::select(kOff, d), Status::Unsupported, "real floating D", "complex64");
}

TEST(Gemm, FusedOrNativeEpilogue) {
  auto epi = [](GemmDesc d) {
    auto p = GemmPlan::select(kOff, d);
    EXPECT_TRUE(p.ok()) << p.message();
    return p.ok() ? p->sku().epilogue : std::string();
  };
  GemmDesc d = GemmDesc::dense(DType::bf16, 64, 64, 64, false, true);
  d.bias = true;
  d.act = GemmActivation::GeluTanh;
  d.aux = true;
  EXPECT_EQ(epi(d), "bias+gelu_tanh+aux");
  d.act = GemmActivation::Gelu;  // erf gelu: cuBLASLt has only the tanh form
  EXPECT_EQ(epi(d), "bias+gelu+aux (native epilogue)");
  d.act = GemmActivation::Silu;
  EXPECT_EQ(epi(d), "bias+silu+aux (native epilogue)");
  d.act = GemmActivation::Relu;
  d.aux = false;
  EXPECT_EQ(epi(d), "bias+relu");
  d.d = d.c = MatrixStrides::col_major(64);  // bias per column of a column-major D: native
  EXPECT_EQ(epi(d), "bias+relu (native epilogue)");
  d = GemmDesc::dense(DType::f16, 64, 64, 64, false, true);
  d.direction = Direction::Backward;
  d.act = GemmActivation::GeluTanh;
  d.bgrad = GemmBiasGrad::OfD;
  EXPECT_EQ(epi(d), "dgelu_tanh+bgrad_of_d");
  d.bgrad = GemmBiasGrad::OfA;
  EXPECT_EQ(epi(d), "dgelu_tanh+bgrad_of_a (native epilogue)");
}

TEST(Gemm, SmallMChosenForDecodeShapes) {
  for (int64_t m : {1, 7, 16}) {
    auto p = GemmPlan::select(kOff, GemmDesc::dense(DType::bf16, m, 4096, 4096, false, true));
    ASSERT_TRUE(p.ok()) << p.message();
    EXPECT_EQ(p->sku().backend, Backend::Native) << m;
    EXPECT_TRUE(p->precision().bit_stable);
    EXPECT_EQ(p->workspace_size(), 0u);
  }
  // m = 17, N-contiguous B, k % 8 != 0, f32: cuBLASLt.
  EXPECT_EQ(GemmPlan::select(kOff, GemmDesc::dense(DType::bf16, 17, 64, 64, false, true))->sku().backend,
            Backend::CuBlasLt);
  EXPECT_EQ(GemmPlan::select(kOff, GemmDesc::dense(DType::bf16, 4, 64, 64))->sku().backend, Backend::CuBlasLt);
  EXPECT_EQ(GemmPlan::select(kOff, GemmDesc::dense(DType::bf16, 4, 64, 60, false, true))->sku().backend,
            Backend::CuBlasLt);
  EXPECT_EQ(GemmPlan::select(kOff, GemmDesc::dense(DType::f32, 4, 64, 64, false, true))->sku().backend,
            Backend::CuBlasLt);
  // Few column blocks and a long K: cuBLASLt (it splits K); a short K keeps the native kernel.
  EXPECT_EQ(GemmPlan::select(kOff, GemmDesc::dense(DType::bf16, 4, 64, 1 << 20, false, true))->sku().backend,
            Backend::CuBlasLt);
  EXPECT_EQ(GemmPlan::select(kOff, GemmDesc::dense(DType::bf16, 4, 3, 8, false, true))->sku().backend, Backend::Native);
  // Forcing native where it cannot serve names the reason.
  PlanPreference native;
  native.backend = Backend::Native;
  EXPECT_FAILS_WITH(GemmPlan::select(kOff, GemmDesc::dense(DType::bf16, 4, 64, 60, false, true), native),
                    Status::Unsupported, "small-m: k expected a multiple of 8", "cublaslt: backend=native");
  PlanPreference lt;
  lt.backend = Backend::CuBlasLt;
  EXPECT_EQ(GemmPlan::select(kOff, GemmDesc::dense(DType::bf16, 4, 64, 64, false, true), lt)->sku().backend,
            Backend::CuBlasLt);
}

TEST(Gemm, Preferences) {
  PlanPreference p;
  p.tf32 = Tristate::Require;
  auto tf = GemmPlan::select(kOff, GemmDesc::dense(DType::f32, 64, 64, 64), p);
  ASSERT_TRUE(tf.ok()) << tf.message();
  EXPECT_NE(tf->precision().note.find("tf32"), std::string::npos);
  auto ieee = GemmPlan::select(kOff, GemmDesc::dense(DType::f32, 64, 64, 64));
  EXPECT_EQ(ieee->precision().note.find("tf32"), std::string::npos);  // IEEE by default
  EXPECT_FAILS_WITH(GemmPlan::select(kOff, GemmDesc::dense(DType::f64, 64, 64, 64), p), Status::Unsupported,
                    "tf32=Require applies to float32", "float64");
  p = {};
  p.reduced_precision_reduction = Tristate::Require;
  auto h = GemmPlan::select(kOff, GemmDesc::dense(DType::f16, 64, 64, 64), p);
  ASSERT_TRUE(h.ok()) << h.message();
  EXPECT_EQ(h->precision().accumulator, DType::f16);
  EXPECT_FAILS_WITH(GemmPlan::select(kOff, GemmDesc::dense(DType::bf16, 64, 64, 64), p), Status::Unsupported,
                    "reduced_precision_reduction");
  p = {};
  p.require_bit_stable = true;
  EXPECT_FAILS_WITH(GemmPlan::select(kOff, GemmDesc::dense(DType::f32, 64, 64, 64), p), Status::Unsupported,
                    "require_bit_stable");
  EXPECT_TRUE(GemmPlan::select(kOff, GemmDesc::dense(DType::bf16, 4, 64, 64, false, true), p).ok());
  p = {};
  p.require_deterministic = true;
  auto det = GemmPlan::select(kOff, GemmDesc::dense(DType::f32, 64, 64, 64), p);
  ASSERT_TRUE(det.ok());
  EXPECT_TRUE(det->precision().deterministic);
  p = {};
  p.vectorized = Tristate::Forbid;
  EXPECT_FAILS_WITH(GemmPlan::select(kOff, GemmDesc::dense(DType::f32, 64, 64, 64), p), Status::Unsupported,
                    "vectorized=Forbid");
  p = {};
  p.backend = Backend::CuDnn;
  EXPECT_FAILS_WITH(GemmPlan::select(kOff, GemmDesc::dense(DType::f32, 64, 64, 64), p), Status::Unsupported,
                    "backend expected any, native, cublaslt or cutlass");
}

TEST(Gemm, ColumnMajorNormalForm) {
  // Row-major D: computed as D^T = B^T A^T; A row-major becomes the non-transposed B'.
  auto cm = detail::to_col_major("gemm", GemmDesc::dense(DType::f32, 3, 5, 7, false, true));
  ASSERT_TRUE(cm.ok());
  EXPECT_TRUE(cm->swapped);
  EXPECT_EQ(cm->m, 5);
  EXPECT_EQ(cm->n, 3);
  EXPECT_TRUE(cm->a.trans);  // B stored [n, k] row-major: B^T = [n, k] is op T of col-major [k, n]
  EXPECT_EQ(cm->a.ld, 7);
  EXPECT_FALSE(cm->b.trans);  // A^T [k, m] col-major with ld k
  EXPECT_EQ(cm->b.ld, 7);
  EXPECT_EQ(cm->d.ld, 5);
  // Column-major everything: no swap, no transposes.
  GemmDesc d = GemmDesc::dense(DType::f32, 3, 5, 7);
  d.a = MatrixStrides::col_major(3, 4);
  d.b = MatrixStrides::col_major(7);
  d.c = d.d = MatrixStrides::col_major(3, 8);
  cm = detail::to_col_major("gemm", d);
  ASSERT_TRUE(cm.ok());
  EXPECT_FALSE(cm->swapped);
  EXPECT_FALSE(cm->a.trans);
  EXPECT_EQ(cm->a.ld, 4);
  EXPECT_EQ(cm->d.ld, 8);
  // A single row takes any row stride.
  EXPECT_EQ(detail::storage_order(1, 5, 0, 1, detail::Order::Row).value(), detail::Order::Row);
  EXPECT_EQ(detail::storage_order(5, 2, 1, 5, detail::Order::Row).value(), detail::Order::Col);
  EXPECT_FALSE(detail::storage_order(5, 2, 1, 1, detail::Order::Row).ok());  // rows and columns overlap
}

TEST(Gemm, CanImplement) {
  GemmDesc d = GemmDesc::dense(DType::bf16, 64, 32, 16, false, true);
  d.bias = true;
  auto p = GemmPlan::select(kOff, d);
  ASSERT_TRUE(p.ok()) << p.message();
  GemmArgs a = args_for(d);
  EXPECT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
  GemmArgs bad = a;
  bad.a.dtype = DType::f16;
  EXPECT_FAILS_WITH(p->can_implement(bad), Status::InvalidProblem, "gemm: A dtype expected bfloat16, got float16");
  bad = a;
  bad.b.layout = test::strided({32, 16}, {16, 1});
  EXPECT_FAILS_WITH(p->can_implement(bad), Status::InvalidProblem, "B shape expected [16, 32], got [32, 16]");
  bad = a;
  bad.d.layout.stride[0] = 64;
  EXPECT_FAILS_WITH(p->can_implement(bad), Status::InvalidProblem, "D strides expected (32, 1)", "got (64, 1)");
  bad = a;
  bad.a.data = fake_ptr(0, 2);
  EXPECT_FAILS_WITH(p->can_implement(bad), Status::MisalignedOperand, "A pointer expected 16-byte aligned");
  bad = a;
  bad.bias = make_ref(fake_ptr(4), DType::bf16, {31});
  EXPECT_FAILS_WITH(p->can_implement(bad), Status::InvalidProblem, "bias shape expected [32], got [31]");
  bad = a;
  bad.bias.data = fake_ptr(4, 2);  // fused bias: cuBLASLt assumed 16-byte alignment
  EXPECT_FAILS_WITH(p->can_implement(bad), Status::MisalignedOperand, "bias pointer expected 16-byte");
  bad = a;
  bad.d.data = fake_ptr(0, 64);  // D inside A
  EXPECT_FAILS_WITH(p->can_implement(bad), Status::InvalidProblem, "D overlaps A");
  bad = a;
  bad.b.data = nullptr;
  EXPECT_FAILS_WITH(p->can_implement(bad), Status::InvalidProblem, "B is null");
  bad = a;
  bad.a_scale = make_ref(fake_ptr(9), DType::f32, {1});
  EXPECT_FAILS_WITH(p->can_implement(bad), Status::InvalidProblem, "a_scale / b_scale / amax_d expected absent",
                    "bfloat16 -> bfloat16");
  // Rank 3 with batch 1 is fine too; a wrong batch is named.
  bad = a;
  bad.a.layout = test::strided({1, 64, 16}, {0, 16, 1});
  EXPECT_TRUE(p->can_implement(bad).ok());
  bad.a.layout.shape[0] = 2;
  EXPECT_FAILS_WITH(p->can_implement(bad), Status::InvalidProblem, "A shape expected [64, 16]");
  // run refuses before launching (no GPU needed).
  EXPECT_FAILS_WITH(p->run(nullptr, {}, bad), Status::InvalidProblem, "A shape");
}

TEST(Gemm, Fp8Scales) {
  GemmDesc d = GemmDesc::dense(DType::f8e4m3, DType::bf16, 64, 32, 128, false, true);
  auto p = GemmPlan::select(kOff, d);
  ASSERT_TRUE(p.ok()) << p.message();
  GemmArgs a = args_for(d);
  EXPECT_TRUE(p->can_implement(a).ok());  // absent scales are 1
  a.a_scale = make_ref(fake_ptr(9), DType::f32, {1});
  a.b_scale = make_ref(fake_ptr(10), DType::f32, {1});
  a.amax_d = make_mut(fake_ptr(11), DType::f32, {1});
  EXPECT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
  GemmArgs bad = a;
  bad.b_scale = make_ref(fake_ptr(10), DType::f32, {32});
  EXPECT_FAILS_WITH(p->can_implement(bad), Status::InvalidProblem, "b_scale expected 1 contiguous float32");
  bad = a;
  bad.a_scale.dtype = DType::bf16;
  EXPECT_FAILS_WITH(p->can_implement(bad), Status::InvalidProblem, "a_scale dtype expected float32, got bfloat16");
  // Per-row / per-column scales: [m] and [n], both required.
  d.scale_mode = GemmScaleMode::PerRowCol;
  p = GemmPlan::select(kOff, d);
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_NE(p->precision().note.find("per-row"), std::string::npos);
  a.a_scale = make_ref(fake_ptr(9), DType::f32, {64});
  a.b_scale = make_ref(fake_ptr(10), DType::f32, {32});
  EXPECT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
  bad = a;
  bad.a_scale = TensorRef{};
  EXPECT_FAILS_WITH(p->can_implement(bad), Status::InvalidProblem, "a_scale expected [64] float32 (per_row_col)");
  GemmDesc f = GemmDesc::dense(DType::bf16, 64, 32, 128);
  f.scale_mode = GemmScaleMode::PerRowCol;
  EXPECT_FAILS_WITH(GemmPlan::select(kOff, f), Status::Unsupported, "scale_mode=per_row_col applies to fp8");
}

TEST(Gemm, InPlaceCAndBatches) {
  GemmDesc d = GemmDesc::dense(DType::f32, 16, 16, 16, false, false, 3);
  d.beta = 1.0;
  auto p = GemmPlan::select(kOff, d);
  ASSERT_TRUE(p.ok()) << p.message();
  GemmArgs a = args_for(d);
  EXPECT_TRUE(p->can_implement(a).ok());
  a.c.data = a.d.data;  // exact in-place
  EXPECT_TRUE(p->can_implement(a).ok());
  a.c.data = static_cast<char*>(a.d.data) + 64;
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "D partially overlaps C");
  // Broadcast weight: B batch stride 0.
  d = GemmDesc::dense(DType::f32, 16, 16, 16, false, false, 3);
  d.b.batch = 0;
  p = GemmPlan::select(kOff, d);
  ASSERT_TRUE(p.ok());
  a = args_for(d);
  EXPECT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
}

TEST(Gemm, Workspace) {
  auto p = GemmPlan::select(kOff, GemmDesc::dense(DType::bf16, 256, 256, 256));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->workspace_size(), size_t{32} << 20);  // offline: the cap, exact once selected on a GPU
  GemmDesc d = GemmDesc::dense(DType::bf16, 256, 256, 256);
  d.direction = Direction::Backward;
  d.bgrad = GemmBiasGrad::OfA;  // native reduction: + chunks x m x f32
  auto q = GemmPlan::select(kOff, d);
  ASSERT_TRUE(q.ok());
  EXPECT_GT(q->workspace_size(), size_t{32} << 20);
  auto r = p->run(nullptr, {nullptr, 16}, args_for(GemmDesc::dense(DType::bf16, 256, 256, 256)));
  EXPECT_FAILS_WITH(r, Status::WorkspaceTooSmall, "workspace expected >= 33554432 bytes, got 16");
}

TEST(Gemm, SkuAndKey) {
  auto p = GemmPlan::select(kOff, GemmDesc::dense(DType::f8e4m3, DType::bf16, 64, 64, 64, false, true));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->sku().dtypes, "float8_e4m3fn->bfloat16");
  EXPECT_NE(p->sku().to_string().find("gemm"), std::string::npos);
  GemmDesc a = GemmDesc::dense(DType::f32, 8, 8, 8), b = a;
  EXPECT_EQ(a.key(), b.key());
  b.alpha = 2;
  EXPECT_NE(a.key(), b.key());
}

TEST(Gemm, CoverageRows) {
  const auto rows = coverage(kOff);
  auto has = [&](const std::string& dt, Direction dir, Backend be) {
    return std::any_of(rows.begin(), rows.end(), [&](const CoverageRow& r) {
      return r.family == "gemm" && r.dtype == dt && r.direction == dir && r.backend == be;
    });
  };
  for (const char* t : {"float64", "float32", "float16", "bfloat16", "complex64", "complex128"})
    EXPECT_TRUE(has(t, Direction::Forward, Backend::CuBlasLt)) << t;
  EXPECT_TRUE(has("bfloat16", Direction::Forward, Backend::Native));
  EXPECT_TRUE(has("float16", Direction::Forward, Backend::Native));
  EXPECT_FALSE(has("float32", Direction::Forward, Backend::Native));
  EXPECT_TRUE(has("bfloat16", Direction::Backward, Backend::CuBlasLt));
  EXPECT_FALSE(has("complex64", Direction::Backward, Backend::CuBlasLt));
  EXPECT_TRUE(has("float8_e4m3fn,float8_e4m3fn->bfloat16", Direction::Forward, Backend::CuBlasLt));
  EXPECT_TRUE(has("int8,int8->int32", Direction::Forward, Backend::CuBlasLt));
  EXPECT_FALSE(has("int32", Direction::Forward, Backend::CuBlasLt));
  const bool cutlass = detail::cutlass_int8_kernels<DType::bf16>().built;
  for (const char* t : {"int8,int8->bfloat16", "int8,int8->float16", "int8,int8->float32"}) {
    EXPECT_EQ(has(t, Direction::Forward, Backend::Cutlass), cutlass) << t;
    EXPECT_FALSE(has(t, Direction::Forward, Backend::CuBlasLt)) << t;
    EXPECT_FALSE(has(t, Direction::Backward, Backend::Cutlass)) << t;
  }
  EXPECT_FALSE(has("int8,int8->int32", Direction::Forward, Backend::Cutlass));
  // bf16 reaches CUTLASS only through the grouped GEMM (when its kernels are built).
  const bool grouped_cutlass = detail::cutlass_grouped_kernels<DType::bf16>().built;
  for (const CoverageRow& r : rows) {
    if (r.family == "gemm" && r.dtype == "bfloat16" && r.backend == Backend::Cutlass) {
      EXPECT_TRUE(r.op == "grouped_gemm" && grouped_cutlass) << r.op;
    }
  }
  EXPECT_TRUE(std::any_of(rows.begin(), rows.end(), [&](const CoverageRow& r) {
    return r.op == "grouped_gemm" && r.dtype == "bfloat16" &&
           r.backend == (grouped_cutlass ? Backend::Cutlass : Backend::Native);
  }));
  // sm_80: no CUTLASS rows (the kernel is sm_90a only).
  const auto rows80 = coverage(Target::offline(80));
  EXPECT_FALSE(
      std::any_of(rows80.begin(), rows80.end(), [](const CoverageRow& r) { return r.backend == Backend::Cutlass; }));
}

// ---- int8 x int8 -> bf16 / f16 / f32 with scales (CUTLASS) ---------------------------------------------
GemmDesc int8_desc(DType out, int64_t m, int64_t n, int64_t k, GemmScaleMode mode = GemmScaleMode::PerRowCol,
                   bool bias = false) {
  GemmDesc d = GemmDesc::dense(DType::s8, out, m, n, k, false, true);  // A [m,k], B stored [n,k]
  d.scale_mode = mode;
  d.bias = bias;
  return d;
}
GemmArgs int8_args(const GemmDesc& d) {
  GemmArgs a = args_for(d);
  const bool outer = d.scale_mode == GemmScaleMode::PerRowCol;
  a.a_scale = make_ref(fake_ptr(9), DType::f32, {outer ? d.m : 1});
  a.b_scale = make_ref(fake_ptr(10), DType::f32, {outer ? d.n : 1});
  return a;
}
bool cutlass_built() { return detail::cutlass_int8_kernels<DType::bf16>().built; }

TEST(GemmInt8Scaled, SelectsCutlassOrSaysItWasNotBuilt) {
  for (DType o : {DType::bf16, DType::f16, DType::f32}) {
    for (GemmScaleMode mode : {GemmScaleMode::PerTensor, GemmScaleMode::PerRowCol}) {
      for (bool bias : {false, true}) {
        auto p = GemmPlan::select(kOff, int8_desc(o, 8192, 8192, 8192, mode, bias));
        EXPECT_EQ(detail::cutlass_int8_kernels<DType::f16>().built, cutlass_built());
        if (!cutlass_built()) {
          EXPECT_FAILS_WITH(p, Status::Unsupported, "cutlass-int8: baracuda was built without CUTLASS",
                            "cublaslt: int8 -> " + std::string(name(o)) + " has no cuBLASLt variant");
          continue;
        }
        ASSERT_TRUE(p.ok()) << p.message();
        EXPECT_EQ(p->sku().backend, Backend::Cutlass);
        EXPECT_EQ(p->sku().dtypes, "int8->" + std::string(name(o)));
        EXPECT_NE(p->sku().layout.find("cutlass sm90 int8 TN"), std::string::npos) << p->sku().layout;
        EXPECT_NE(p->sku().layout.find("128x256x128 cluster 2x1x1"), std::string::npos) << p->sku().layout;
        EXPECT_EQ(p->sku().epilogue, bias ? "bias" : "none");
        const PrecisionGuarantee& g = p->precision();
        EXPECT_EQ(g.math, DType::s32);
        EXPECT_EQ(g.accumulator, DType::s32);
        EXPECT_TRUE(g.deterministic);
        EXPECT_TRUE(g.bit_stable);
        EXPECT_NE(g.note.find("int32 exact accumulation (no split-K)"), std::string::npos) << g.note;
        EXPECT_NE(g.note.find("one rounding to " + std::string(name(o))), std::string::npos) << g.note;
        EXPECT_NE(g.note.find(mode == GemmScaleMode::PerRowCol ? "per-row (A) and per-column (B)" : "per-tensor"),
                  std::string::npos)
            << g.note;
        EXPECT_EQ(p->workspace_size() % 256, 0u);
      }
    }
  }
}

TEST(GemmInt8Scaled, TileChoiceByShape) {
  if (!cutlass_built()) GTEST_SKIP() << "built without CUTLASS";
  auto layout = [](int64_t m, int64_t n, int64_t k) {
    auto p = GemmPlan::select(kOff, int8_desc(DType::bf16, m, n, k));
    EXPECT_TRUE(p.ok()) << p.message();
    return p.ok() ? p->sku().layout : std::string();
  };
  const std::string big = "128x256x128", small = "64x128x128";
  EXPECT_NE(layout(8192, 8192, 8192).find(big), std::string::npos);
  EXPECT_NE(layout(1024, 4096, 4096).find(big), std::string::npos);    // 128 large tiles: about a wave
  EXPECT_NE(layout(1, 4096, 4096).find(small), std::string::npos);     // decode
  EXPECT_NE(layout(64, 8192, 8192).find(small), std::string::npos);    // m <= 64 always takes 64-row tiles
  EXPECT_NE(layout(128, 14336, 4096).find(small), std::string::npos);  // 56 large tiles < half the SMs
  // The choice never changes the numbers: both are bit-stable.
  PlanPreference stable;
  stable.require_bit_stable = true;
  stable.require_deterministic = true;
  EXPECT_TRUE(GemmPlan::select(kOff, int8_desc(DType::f16, 33, 64, 64), stable).ok());
}

TEST(GemmInt8Scaled, DescriptorRefusals) {
  // Independent of CUTLASS: what the int8 -> floating D contract excludes.
  GemmDesc d = int8_desc(DType::bf16, 64, 64, 64);
  d.alpha = 2.0;
  EXPECT_FAILS_WITH(GemmPlan::select(kOff, d), Status::Unsupported, "int8 -> bfloat16 GEMM expected alpha = 1",
                    "a_scale / b_scale");
  d = int8_desc(DType::bf16, 64, 64, 64);
  d.beta = 1.0;
  EXPECT_FAILS_WITH(GemmPlan::select(kOff, d), Status::Unsupported, "beta = 0", "beta=1");
  d = int8_desc(DType::bf16, 64, 64, 64, GemmScaleMode::PerRowCol, true);
  d.act = GemmActivation::Relu;
  EXPECT_FAILS_WITH(GemmPlan::select(kOff, d), Status::Unsupported, "epilogues are not supported with int8",
                    "forward bias only");
  d = int8_desc(DType::s32, 64, 64, 64);  // int8 -> int32 keeps per-tensor, unscaled cuBLASLt
  EXPECT_FAILS_WITH(GemmPlan::select(kOff, d), Status::Unsupported, "scale_mode=per_row_col applies to",
                    "int8 -> int32");
  d = int8_desc(DType::s32, 64, 64, 64, GemmScaleMode::PerTensor, true);
  EXPECT_FAILS_WITH(GemmPlan::select(kOff, d), Status::Unsupported, "real floating D", "int32");
  EXPECT_FAILS_WITH(GemmPlan::select(kOff, GemmDesc::dense(DType::s8, DType::f64, 64, 64, 64, false, true)),
                    Status::Unsupported, "D dtype for int8 inputs expected int32, bfloat16, float16 or float32",
                    "float64");
  // Forcing cuBLASLt for int8 -> bf16 names the missing variant; forcing CUTLASS elsewhere is refused.
  PlanPreference lt;
  lt.backend = Backend::CuBlasLt;
  EXPECT_FAILS_WITH(GemmPlan::select(kOff, int8_desc(DType::bf16, 64, 64, 64), lt), Status::Unsupported,
                    "cublaslt: int8 -> bfloat16 has no cuBLASLt variant on Hopper", "cutlass-int8: backend=cublaslt");
  PlanPreference cut;
  cut.backend = Backend::Cutlass;
  EXPECT_FAILS_WITH(GemmPlan::select(kOff, GemmDesc::dense(DType::bf16, 64, 64, 64, false, true), cut),
                    Status::Unsupported, "small-m: backend=cutlass requested",
                    "cutlass-int8: serves int8 x int8 -> bfloat16, float16 or float32, got bfloat16 -> bfloat16",
                    "cublaslt: backend=cutlass requested");
  EXPECT_FAILS_WITH(GemmPlan::select(kOff, GemmDesc::dense(DType::s8, DType::s32, 64, 64, 64, false, true), cut),
                    Status::Unsupported, "got int8 -> int32");
}

TEST(GemmInt8Scaled, KernelRefusals) {
  if (!cutlass_built()) GTEST_SKIP() << "built without CUTLASS";
  auto refuses = [](const GemmDesc& d, const std::string& why, const Target& t = kOff) {
    EXPECT_FAILS_WITH(GemmPlan::select(t, d), Status::Unsupported, "cutlass-int8: " + why);
  };
  refuses(int8_desc(DType::bf16, 64, 64, 40), "k expected a multiple of 16 (16-byte TMA rows of int8 A and B), got 40");
  refuses(int8_desc(DType::bf16, 64, 12, 64), "n expected a multiple of 8 for a bfloat16 D (16-byte TMA rows), got 12");
  refuses(int8_desc(DType::f16, 64, 100, 64), "n expected a multiple of 8 for a float16 D");
  refuses(int8_desc(DType::f32, 64, 10, 64), "n expected a multiple of 4 for a float32 D");
  EXPECT_TRUE(GemmPlan::select(kOff, int8_desc(DType::f32, 64, 12, 64)).ok());
  refuses(int8_desc(DType::bf16, 64, 64, 64), "needs sm_90", Target::offline(80));
  refuses(int8_desc(DType::bf16, 64, 64, 64), "needs sm_90 (the kernel is built for sm_90a: TMA + WGMMA), got sm_100",
          Target::offline(100));
  GemmDesc d = GemmDesc::dense(DType::s8, DType::bf16, 8, 64, 64, false, true, 2);
  refuses(d, "batch expected 1 (no batched variant: fold the batch into m), got 2");
  d = int8_desc(DType::bf16, 64, 64, 64);
  d.direction = Direction::Backward;
  refuses(d, "forward only");
  refuses(GemmDesc::dense(DType::s8, DType::bf16, 64, 64, 64, true, true), "A expected K-contiguous");
  d = GemmDesc::dense(DType::s8, DType::bf16, 64, 64, 64);  // B row-major [k, n]: N-contiguous
  d.scale_mode = GemmScaleMode::PerRowCol;
  refuses(d, "B expected K-contiguous (stored [n, k] row-major");
  d = int8_desc(DType::bf16, 64, 64, 64);
  d.a.row = 72;  // a padded leading dimension that breaks 16-byte rows
  refuses(d, "A row stride expected a multiple of 16 elements (TMA), got 72");
  d = int8_desc(DType::bf16, 64, 64, 64);
  d.b.col = 88;
  refuses(d, "B column stride (row stride of the stored [n, k]) expected a multiple of 16 elements (TMA), got 88");
  d = int8_desc(DType::bf16, 64, 64, 64);
  d.a.row = 80, d.b.col = 96;  // padded but 16-byte rows: fine
  EXPECT_TRUE(GemmPlan::select(kOff, d).ok());
  d = int8_desc(DType::bf16, 64, 64, 64);
  d.c = d.d = MatrixStrides::col_major(64);
  refuses(d, "D expected row-major [m, n]");
  d = int8_desc(DType::bf16, 64, 64, 64);
  d.c = d.d = MatrixStrides::row_major(64, 68);
  refuses(d, "D row stride expected a multiple of 8 elements (16 bytes, TMA), got 68");
  d = int8_desc(DType::bf16, 64, 64, 64);
  d.align[1] = 8;
  refuses(d, "A, B and D expected 16-byte aligned pointers (TMA), got align (16, 8, 16)");
  // Empty problems and k = 0 (the bias alone, written natively) are accepted; so is one row.
  EXPECT_TRUE(GemmPlan::select(kOff, int8_desc(DType::bf16, 0, 64, 64)).ok());
  EXPECT_TRUE(GemmPlan::select(kOff, int8_desc(DType::bf16, 64, 64, 0, GemmScaleMode::PerTensor, true)).ok());
  d = int8_desc(DType::bf16, 1, 64, 32);
  d.a.row = 5;  // a single row: its stride never matters
  EXPECT_TRUE(GemmPlan::select(kOff, d).ok());
}

TEST(GemmInt8Scaled, CanImplement) {
  if (!cutlass_built()) GTEST_SKIP() << "built without CUTLASS";
  GemmDesc d = int8_desc(DType::bf16, 64, 32, 128, GemmScaleMode::PerRowCol, true);
  auto p = GemmPlan::select(kOff, d);
  ASSERT_TRUE(p.ok()) << p.message();
  const GemmArgs a = int8_args(d);
  EXPECT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
  GemmArgs bad = a;
  bad.a_scale = TensorRef{};
  EXPECT_FAILS_WITH(p->can_implement(bad), Status::InvalidProblem, "gemm: a_scale expected [64] float32 (per_row_col)");
  bad = a;
  bad.b_scale = make_ref(fake_ptr(10), DType::f32, {1});
  EXPECT_FAILS_WITH(p->can_implement(bad), Status::InvalidProblem, "b_scale expected 32 contiguous float32");
  bad = a;
  bad.b_scale.dtype = DType::bf16;
  EXPECT_FAILS_WITH(p->can_implement(bad), Status::InvalidProblem, "b_scale dtype expected float32, got bfloat16");
  bad = a;
  bad.a_scale.data = fake_ptr(9, 4);
  EXPECT_FAILS_WITH(p->can_implement(bad), Status::MisalignedOperand, "a_scale pointer expected 16-byte aligned");
  bad = a;
  bad.bias.dtype = DType::f32;
  EXPECT_FAILS_WITH(p->can_implement(bad), Status::InvalidProblem, "bias dtype expected bfloat16, got float32");
  bad = a;
  bad.bias.data = fake_ptr(4, 2);  // element-aligned bias is enough (loaded element-wise)
  EXPECT_TRUE(p->can_implement(bad).ok()) << p->can_implement(bad).message();
  bad = a;
  bad.amax_d = make_mut(fake_ptr(11), DType::f32, {1});
  EXPECT_FAILS_WITH(p->can_implement(bad), Status::InvalidProblem, "amax_d expected absent for int8 inputs");
  bad = a;
  bad.d.dtype = DType::f16;
  EXPECT_FAILS_WITH(p->can_implement(bad), Status::InvalidProblem, "D dtype expected bfloat16, got float16");
  bad = a;
  bad.d.data = fake_ptr(9, 32);  // D over a_scale
  EXPECT_FAILS_WITH(p->can_implement(bad), Status::InvalidProblem, "D overlaps a_scale");
  EXPECT_FAILS_WITH(p->run(nullptr, {}, bad), Status::InvalidProblem, "D overlaps a_scale");  // before any launch
  // Per-tensor: [1] each, or absent (= 1).
  d = int8_desc(DType::f32, 64, 32, 128, GemmScaleMode::PerTensor);
  p = GemmPlan::select(kOff, d);
  ASSERT_TRUE(p.ok()) << p.message();
  GemmArgs pt = int8_args(d);
  EXPECT_TRUE(p->can_implement(pt).ok()) << p->can_implement(pt).message();
  pt.a_scale = pt.b_scale = TensorRef{};
  EXPECT_TRUE(p->can_implement(pt).ok());
  pt.a_scale = make_ref(fake_ptr(9), DType::f32, {64});
  EXPECT_FAILS_WITH(p->can_implement(pt), Status::InvalidProblem, "a_scale expected 1 contiguous float32");
  // int8 -> int32 still takes no scales.
  auto q = GemmPlan::select(kOff, GemmDesc::dense(DType::s8, DType::s32, 64, 32, 128, false, true));
  ASSERT_TRUE(q.ok());
  GemmArgs i32 = int8_args(GemmDesc::dense(DType::s8, DType::s32, 64, 32, 128, false, true));
  EXPECT_FAILS_WITH(q->can_implement(i32), Status::InvalidProblem, "expected absent for int8 -> int32");
}

}  // namespace
}  // namespace baracuda

namespace baracuda {
namespace {
bool grouped_cutlass_built() { return detail::cutlass_grouped_kernels<DType::bf16>().built; }

GroupedGemmArgs grouped_args(const GroupedGemmDesc& d) {
  GroupedGemmArgs a;
  a.a = make_ref(fake_ptr(0), d.dtype, {d.rows, d.k});
  a.w = make_ref(fake_ptr(1), d.dtype, {d.groups, d.n, d.k});
  a.offsets = make_ref(fake_ptr(2), DType::s64, {d.ends_only ? d.groups : d.groups + 1});
  a.d = make_mut(fake_ptr(3), d.dtype, {d.rows, d.n});
  return a;
}

TEST(GroupedGemm, SelectAndCanImplement) {
  GroupedGemmDesc d;
  d.dtype = DType::bf16;
  d.groups = 3, d.rows = 100, d.n = 48, d.k = 64;
  auto p = GroupedGemmPlan::select(kOff, d);
  ASSERT_TRUE(p.ok()) << p.message();
  // sm_90 takes the CUTLASS kernel when it is built; its per-group arrays and per-SM TMA descriptors
  // live in the workspace. Without it (or on sm_80) the native kernel needs none.
  if (grouped_cutlass_built()) {
    EXPECT_EQ(p->sku().backend, Backend::Cutlass);
    EXPECT_EQ(p->path(), GroupedGemmPlan::Path::Cutlass);
    EXPECT_GT(p->workspace_size(), 7u * 256u);
    EXPECT_EQ(p->workspace_size() % 256, 0u);
  } else {
    EXPECT_EQ(p->sku().backend, Backend::Native);
    EXPECT_EQ(p->workspace_size(), 0u);
  }
  EXPECT_TRUE(p->precision().deterministic && p->precision().bit_stable);
  auto p80 = GroupedGemmPlan::select(Target::offline(80), d);
  ASSERT_TRUE(p80.ok()) << p80.message();
  EXPECT_EQ(p80->sku().backend, Backend::Native);
  EXPECT_EQ(p80->workspace_size(), 0u);

  GroupedGemmArgs a = grouped_args(d);
  EXPECT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
  GroupedGemmArgs bad = a;
  bad.offsets = make_ref(fake_ptr(2), DType::s32, {3});
  EXPECT_FAILS_WITH(p->can_implement(bad), Status::InvalidProblem, "grouped_gemm: offsets shape expected [4], got [3]");
  bad = a;
  bad.offsets.dtype = DType::f32;
  EXPECT_FAILS_WITH(p->can_implement(bad), Status::InvalidProblem, "offsets dtype expected int64, got float32");
  bad = a;
  bad.w = make_ref(fake_ptr(1), DType::bf16, {3, 64, 48});
  EXPECT_FAILS_WITH(p->can_implement(bad), Status::InvalidProblem, "W shape expected [3, 48, 64]");
  bad = a;
  bad.a.data = fake_ptr(0, 8);
  EXPECT_FAILS_WITH(p->can_implement(bad), Status::MisalignedOperand, "A pointer expected 16-byte aligned");
  bad = a;
  bad.d.data = fake_ptr(3, 8);  // d_align promised 16
  EXPECT_FAILS_WITH(p->can_implement(bad), Status::MisalignedOperand, "D pointer expected 16-byte aligned");
  bad = a;
  bad.d.data = fake_ptr(1, 64);
  EXPECT_FAILS_WITH(p->can_implement(bad), Status::InvalidProblem, "D overlaps W");

  GroupedGemmDesc e = d;
  e.k = 60;
  EXPECT_FAILS_WITH(GroupedGemmPlan::select(kOff, e), Status::Unsupported, "k expected a multiple of 8");
  e = d;
  e.dtype = DType::f32;
  EXPECT_FAILS_WITH(GroupedGemmPlan::select(kOff, e), Status::Unsupported, "dtype expected float16 or bfloat16");
  e = d;
  e.lda = 66;
  EXPECT_FAILS_WITH(GroupedGemmPlan::select(kOff, e), Status::InvalidProblem, "lda expected >= k and a multiple of 8");
  e = d;
  e.w_group = 48 * 64 - 8;
  EXPECT_FAILS_WITH(GroupedGemmPlan::select(kOff, e), Status::InvalidProblem, "w_group expected");
  e = d;
  e.d_align = 12;
  EXPECT_FAILS_WITH(GroupedGemmPlan::select(kOff, e), Status::InvalidProblem,
                    "d_align expected a power of two, got 12");
  e = d;
  e.groups = 65536;
  EXPECT_FAILS_WITH(GroupedGemmPlan::select(kOff, e), Status::Unsupported, "groups expected <= 65535");
  PlanPreference pref;
  pref.backend = Backend::CuBlasLt;
  EXPECT_FAILS_WITH(GroupedGemmPlan::select(kOff, d, pref), Status::Unsupported,
                    "backend expected any, native or cutlass, got cublaslt");
  pref.backend = Backend::Any;
  pref.tf32 = Tristate::Require;
  EXPECT_FAILS_WITH(GroupedGemmPlan::select(kOff, d, pref), Status::Unsupported, "tf32=Require");
  const auto rows = coverage(kOff);
  EXPECT_TRUE(std::any_of(rows.begin(), rows.end(), [](const CoverageRow& r) { return r.op == "grouped_gemm"; }));
}

TEST(GroupedGemm, OffsetsFormsAndEmptyTensors) {
  GroupedGemmDesc d;
  d.dtype = DType::f16;
  d.groups = 4, d.rows = 50, d.n = 32, d.k = 16;
  d.ends_only = true;  // torch._grouped_mm's offs: [groups] ends
  auto p = GroupedGemmPlan::select(kOff, d);
  ASSERT_TRUE(p.ok()) << p.message();
  GroupedGemmArgs a = grouped_args(d);
  a.offsets.dtype = DType::s32;
  EXPECT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
  a.offsets = make_ref(fake_ptr(2), DType::s32, {5});
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "offsets shape expected [4], got [5]");
  // k = 0: A and W have no element, so their strides address nothing and any value passes.
  GroupedGemmDesc z = d;
  z.k = 0;
  auto pz = GroupedGemmPlan::select(kOff, z);
  ASSERT_TRUE(pz.ok()) << pz.message();
  GroupedGemmArgs az = grouped_args(z);
  az.a.layout = test::strided({50, 0}, {1, 1});
  az.w.layout = test::strided({4, 32, 0}, {32, 1, 1});
  EXPECT_TRUE(pz->can_implement(az).ok()) << pz->can_implement(az).message();
  // No groups: every row is uncovered (written as zeros).
  GroupedGemmDesc g0 = d;
  g0.groups = 0;
  auto p0 = GroupedGemmPlan::select(kOff, g0);
  ASSERT_TRUE(p0.ok()) << p0.message();
  GroupedGemmArgs a0 = grouped_args(g0);
  a0.offsets.data = nullptr;  // [0]
  EXPECT_TRUE(p0->can_implement(a0).ok()) << p0->can_implement(a0).message();
}

TEST(GroupedGemm, ImplementationChoice) {
  GroupedGemmDesc d;
  d.dtype = DType::bf16;
  d.groups = 8, d.rows = 8192, d.n = 4096, d.k = 4096;
  PlanPreference native;
  native.backend = Backend::Native;
  auto pn = GroupedGemmPlan::select(kOff, d, native);
  ASSERT_TRUE(pn.ok()) << pn.message();
  EXPECT_EQ(pn->sku().backend, Backend::Native);
  PlanPreference cut;
  cut.backend = Backend::Cutlass;
  if (!grouped_cutlass_built()) {
    EXPECT_FAILS_WITH(GroupedGemmPlan::select(kOff, d, cut), Status::Unsupported,
                      "cutlass-grouped: baracuda was built without CUTLASS", "native: backend=cutlass requested");
    return;
  }
  // 1024 rows per expert: the 128x256 cooperative tile with the 2x1 cluster.
  auto big = GroupedGemmPlan::select(kOff, d);
  ASSERT_TRUE(big.ok()) << big.message();
  EXPECT_EQ(big->sku().backend, Backend::Cutlass);
  EXPECT_NE(big->sku().layout.find("128x256x64 cluster 2x1x1"), std::string::npos) << big->sku().layout;
  // 64 experts, 128 rows each on average: the 128x128 ping-pong tile (no row rounding by the cluster).
  GroupedGemmDesc moe = d;
  moe.groups = 64, moe.n = 2048, moe.k = 2048;
  auto small = GroupedGemmPlan::select(kOff, moe);
  ASSERT_TRUE(small.ok()) << small.message();
  EXPECT_NE(small->sku().layout.find("128x128x64 cluster 1x2x1"), std::string::npos) << small->sku().layout;
  // 256 rows per expert: below the large tile's 512 (its granularity is 256 rows).
  moe.groups = 32;
  EXPECT_NE(GroupedGemmPlan::select(kOff, moe)->sku().layout.find("128x128x64"), std::string::npos);
  // The arrays grow with the groups (60 bytes a group, 256-byte aligned segments).
  EXPECT_GT(small->workspace_size(), big->workspace_size());

  // What the TMA stores of D exclude: "any" falls back to native, forcing CUTLASS names the field.
  GroupedGemmDesc e = d;
  e.n = 44;
  EXPECT_EQ(GroupedGemmPlan::select(kOff, e)->sku().backend, Backend::Native);
  EXPECT_FAILS_WITH(GroupedGemmPlan::select(kOff, e, cut), Status::Unsupported,
                    "cutlass-grouped: n expected a multiple of 8 (16-byte TMA rows of D), got 44");
  e = d;
  e.ldd = 4100;
  EXPECT_EQ(GroupedGemmPlan::select(kOff, e)->sku().backend, Backend::Native);
  EXPECT_FAILS_WITH(GroupedGemmPlan::select(kOff, e, cut), Status::Unsupported,
                    "cutlass-grouped: ldd expected a multiple of 8");
  e = d;
  e.d_align = 8;
  EXPECT_EQ(GroupedGemmPlan::select(kOff, e)->sku().backend, Backend::Native);
  EXPECT_FAILS_WITH(GroupedGemmPlan::select(kOff, e, cut), Status::Unsupported,
                    "cutlass-grouped: D expected a 16-byte aligned pointer (TMA stores), got d_align 8");
  EXPECT_FAILS_WITH(GroupedGemmPlan::select(Target::offline(80), d, cut), Status::Unsupported,
                    "cutlass-grouped: needs sm_90", "got sm_80");
}

TEST(GroupedGemm, RunChecksWorkspaceBeforeLaunching) {
  if (!grouped_cutlass_built()) GTEST_SKIP() << "built without CUTLASS (the native kernel needs no workspace)";
  GroupedGemmDesc d;
  d.dtype = DType::bf16;
  d.groups = 3, d.rows = 100, d.n = 48, d.k = 64;
  auto p = GroupedGemmPlan::select(kOff, d);
  ASSERT_TRUE(p.ok()) << p.message();
  const GroupedGemmArgs a = grouped_args(d);
  EXPECT_FAILS_WITH(p->run(nullptr, {}, a), Status::WorkspaceTooSmall, "grouped_gemm: workspace expected >= ", "got 0");
  EXPECT_FAILS_WITH(p->run(nullptr, {fake_ptr(4, 64), p->workspace_size()}, a), Status::MisalignedOperand,
                    "workspace pointer expected 256-byte aligned");
  GroupedGemmArgs bad = a;
  bad.d.data = fake_ptr(0, 32);  // D over A: refused before the workspace is even looked at
  EXPECT_FAILS_WITH(p->run(nullptr, {}, bad), Status::InvalidProblem, "D overlaps A");
}
}  // namespace
}  // namespace baracuda
