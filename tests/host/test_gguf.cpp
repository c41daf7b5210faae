// The GGUF block formats without a GPU: the format table against ggml's block sizes, names, dtype
// coverage (declared == accepted), every descriptor refusal with its message, the matvec's launch
// shape (row tiers, K chunks, shared memory, workspace), argument checks on fake pointers, and run()
// refusing a small workspace before launching.
#include <gtest/gtest.h>

#include <string>

#include "baracuda/core/coverage.hpp"
#include "baracuda/ops/gguf.hpp"
#include "ops/quant/gguf_launch.hpp"
#include "test_util.hpp"

namespace baracuda {
namespace {

using test::fake_ptr;
using test::mut_of;
using test::ref_of;
using test::strided;

const Target kTarget = Target::offline(90);

// ggml-common.h: GGML_TYPE_*, QK, sizeof(block_*).
struct Spec {
  GgufFormat f;
  const char* name;
  int type, block, bytes;
};
const Spec kSpec[] = {{GgufFormat::q4_0, "q4_0", 2, 32, 18},    {GgufFormat::q4_1, "q4_1", 3, 32, 20},
                      {GgufFormat::q5_0, "q5_0", 6, 32, 22},    {GgufFormat::q5_1, "q5_1", 7, 32, 24},
                      {GgufFormat::q8_0, "q8_0", 8, 32, 34},    {GgufFormat::q2_k, "q2_K", 10, 256, 84},
                      {GgufFormat::q3_k, "q3_K", 11, 256, 110}, {GgufFormat::q4_k, "q4_K", 12, 256, 144},
                      {GgufFormat::q5_k, "q5_K", 13, 256, 176}, {GgufFormat::q6_k, "q6_K", 14, 256, 210}};

GgufMatvecDesc mv(GgufFormat f = GgufFormat::q4_k, int64_t m = 1, int64_t n = 64, int64_t k = 512,
                  DType dt = DType::bf16) {
  GgufMatvecDesc d;
  d.format = f, d.dtype = dt, d.m = m, d.n = n, d.k = k;
  return d;
}
GgufMatvecArgs mv_args(const GgufMatvecDesc& d) {
  GgufMatvecArgs a;
  a.x = ref_of(0, d.dtype, Layout::contiguous({d.m, d.k}));
  a.weight = ref_of(1, DType::u8, Layout::contiguous({gguf_packed_bytes(d.format, d.n, d.k)}));
  if (d.bias) a.bias = ref_of(2, d.dtype, Layout::contiguous({d.n}));
  a.y = mut_of(3, d.dtype, Layout::contiguous({d.m, d.n}));
  return a;
}
GgufDequantizeDesc dq(GgufFormat f = GgufFormat::q6_k, int64_t rows = 4, int64_t cols = 512, DType dt = DType::f32) {
  GgufDequantizeDesc d;
  d.format = f, d.dtype = dt, d.rows = rows, d.cols = cols;
  return d;
}
GgufDequantizeArgs dq_args(const GgufDequantizeDesc& d) {
  GgufDequantizeArgs a;
  a.packed = ref_of(0, DType::u8, Layout::contiguous({d.rows, gguf_packed_bytes(d.format, 1, d.cols)}));
  a.out = mut_of(1, d.dtype, Layout::contiguous({d.rows, d.cols}));
  return a;
}

// ---- the table -------------------------------------------------------------------------------------------
TEST(GgufTable, MatchesGgml) {
  ASSERT_EQ(gguf_formats().size(), std::size(kSpec));
  for (const Spec& s : kSpec) {
    const auto& in = info(s.f);
    EXPECT_STREQ(in.name, s.name);
    EXPECT_EQ(in.ggml_type, s.type) << s.name;
    EXPECT_EQ(in.block_size, s.block) << s.name;
    EXPECT_EQ(in.block_bytes, s.bytes) << s.name;
    EXPECT_EQ(gguf_format_from_name(s.name), s.f);
    EXPECT_EQ(gguf_format_from_ggml_type(s.type), s.f);
    EXPECT_EQ(gguf_format_from_name(std::to_string(s.type)), s.f);
    // The kernels' shape table agrees, and a warp step is whole blocks of whole sub-blocks.
    const auto sh = detail::gguf_shape(s.f);
    EXPECT_EQ(sh.block_size, s.block);
    EXPECT_EQ(sh.block_bytes, s.bytes);
    EXPECT_EQ(32 % sh.regions, 0);
    EXPECT_EQ(s.block % sh.group, 0);
    EXPECT_EQ(detail::gguf_stage_bytes(sh) % 16, 0);
  }
  EXPECT_EQ(gguf_format_from_name("Q4_K"), GgufFormat::q4_k);
  EXPECT_EQ(gguf_format_from_name("q6_k"), GgufFormat::q6_k);
  EXPECT_FALSE(gguf_format_from_name("q4_2").has_value());
  EXPECT_FALSE(gguf_format_from_name("9").has_value());  // q8_1: not a weight format here
  EXPECT_FALSE(gguf_format_from_ggml_type(0).has_value());
  EXPECT_EQ(gguf_packed_bytes(GgufFormat::q4_0, 3, 64), 3 * 2 * 18);
  EXPECT_EQ(gguf_packed_bytes(GgufFormat::q6_k, 2, 512), 2 * 2 * 210);
  EXPECT_EQ(gguf_packed_bytes(GgufFormat::q4_k, 2, 100), -1);
  EXPECT_EQ(gguf_packed_bytes(GgufFormat::q4_k, -1, 256), -1);
}

TEST(GgufCoverage, AcceptsExactlyFloatDtypes) {
  const DTypeSet ok = bit(DType::f32) | bit(DType::f16) | bit(DType::bf16);
  const auto rows = coverage(kTarget);
  for (const Spec& s : kSpec)
    for (int i = 0; i < kNumDTypes; ++i) {
      const DType t = static_cast<DType>(i);
      auto d = dq(s.f, 2, s.block, t);
      auto m = mv(s.f, 1, 8, s.block, t);
      EXPECT_EQ(GgufDequantizePlan::select(kTarget, d).ok(), contains(ok, t)) << s.name << " " << name(t);
      EXPECT_EQ(GgufMatvecPlan::select(kTarget, m).ok(), contains(ok, t)) << s.name << " " << name(t);
      const std::string dt(name(t));
      EXPECT_EQ(
          test::has_coverage_row(rows, "quant", "gguf_dequantize", Direction::Forward, std::string(s.name) + "->" + dt),
          contains(ok, t));
      EXPECT_EQ(test::has_coverage_row(rows, "quant", "gguf_matvec", Direction::Forward, dt + "," + s.name + "->" + dt),
                contains(ok, t));
    }
}

// ---- select --------------------------------------------------------------------------------------------
TEST(GgufSelect, DequantizeRefusals) {
  auto d = dq();
  d.direction = Direction::Backward;
  EXPECT_FAILS_WITH(GgufDequantizePlan::select(kTarget, d), Status::Unsupported, "gguf_dequantize_backward");
  d = dq(GgufFormat::q6_k, 4, 512, DType::f64);
  EXPECT_FAILS_WITH(GgufDequantizePlan::select(kTarget, d), Status::Unsupported, "gguf_dequantize",
                    "dtype expected one of", "got float64");
  d = dq(GgufFormat::q6_k, 4, 300);
  EXPECT_FAILS_WITH(GgufDequantizePlan::select(kTarget, d), Status::InvalidProblem, "cols=300",
                    "multiple of q6_K's block size 256");
  d = dq(GgufFormat::q4_0, -1, 64);
  EXPECT_FAILS_WITH(GgufDequantizePlan::select(kTarget, d), Status::InvalidProblem, "rows expected >= 0", "got -1");
  d = dq();
  d.format = static_cast<GgufFormat>(99);
  EXPECT_FAILS_WITH(GgufDequantizePlan::select(kTarget, d), Status::InvalidProblem, "format expected", "got value 99");
  auto ok = test::expect_native_preferences<GgufDequantizePlan>(kTarget, dq(), "gguf_dequantize");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->workspace_size(), 0u);
  EXPECT_EQ(ok->sku().dtypes, "q6_K->float32");
  EXPECT_NE(ok->precision().note.find("bit for bit"), std::string::npos);
}

TEST(GgufSelect, MatvecRefusals) {
  auto d = mv();
  d.direction = Direction::Backward;
  EXPECT_FAILS_WITH(GgufMatvecPlan::select(kTarget, d), Status::Unsupported, "gguf_matvec_backward", "inference-only");
  EXPECT_FAILS_WITH(GgufMatvecPlan::select(kTarget, mv(GgufFormat::q4_k, 1, 64, 512, DType::f64)), Status::Unsupported,
                    "gguf_matvec: dtype expected one of", "got float64");
  EXPECT_FAILS_WITH(GgufMatvecPlan::select(kTarget, mv(GgufFormat::q4_k, 9)), Status::Unsupported,
                    "gguf_matvec: m expected <= 8", "got 9");
  EXPECT_FAILS_WITH(GgufMatvecPlan::select(kTarget, mv(GgufFormat::q4_0, 1, 64, 48)), Status::InvalidProblem, "k=48",
                    "multiple of q4_0's block size 32");
  EXPECT_FAILS_WITH(GgufMatvecPlan::select(kTarget, mv(GgufFormat::q4_0, 1, -2, 64)), Status::InvalidProblem,
                    "n expected >= 0", "got -2");
  auto ok = test::expect_native_preferences<GgufMatvecPlan>(kTarget, mv(), "gguf_matvec");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->sku().dtypes, "bfloat16,q4_K->bfloat16");
  EXPECT_EQ(ok->precision().accumulator, DType::f32);
  // Empty problems are valid.
  EXPECT_TRUE(GgufMatvecPlan::select(kTarget, mv(GgufFormat::q4_k, 0, 0, 0)).ok());
}

// ---- launch shape ----------------------------------------------------------------------------------------------
TEST(GgufGeometry, TiersChunksAndWorkspace) {
  for (const Spec& s : kSpec) {
    for (int64_t m : {1, 2, 3, 5, 8}) {
      const int64_t k = 14336 / s.block * s.block;
      auto p = GgufMatvecPlan::select(kTarget, mv(s.f, m, 4096, k));
      ASSERT_TRUE(p.ok()) << p.message();
      const auto& g = p->geometry();
      EXPECT_EQ(g.m_tier, m == 1 ? 1 : m == 2 ? 2 : m <= 4 ? 4 : 8) << s.name << " m=" << m;
      EXPECT_GE(g.m_tier, m);
      const int64_t nb = k / s.block;
      EXPECT_EQ(g.splits, (nb + g.chunk_blocks - 1) / g.chunk_blocks);  // equal chunks covering K
      EXPECT_GE(g.chunk_blocks * g.splits, nb);
      EXPECT_LT(g.chunk_blocks * (g.splits - 1), nb);
      EXPECT_LE(g.smem_bytes, 227u * 1024) << s.name;
      EXPECT_EQ(g.grid_x, (4096 + 8 * g.rows_per_warp - 1) / (8 * g.rows_per_warp));
      const size_t partials = static_cast<size_t>(g.splits) * static_cast<size_t>(m) * 4096 * 4;
      EXPECT_EQ(p->workspace_size(), g.splits > 1 ? (partials + 255) / 256 * 256 : size_t{0});
    }
  }
  // One x row of the decode case holds a whole 4096- or 14336-element K: no split.
  auto p = GgufMatvecPlan::select(kTarget, mv(GgufFormat::q4_0, 1, 4096, 14336));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->geometry().splits, 1);
  EXPECT_EQ(p->workspace_size(), 0u);
  p = GgufMatvecPlan::select(kTarget, mv(GgufFormat::q4_k, 8, 4096, 14336));
  ASSERT_TRUE(p.ok());
  EXPECT_GT(p->geometry().splits, 1);
  // k = 0: no chunk; run() writes the bias (or zeros) through the reduction.
  p = GgufMatvecPlan::select(kTarget, mv(GgufFormat::q4_k, 2, 16, 0));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->geometry().splits, 0);
  // The shape depends on the problem only (bit-stable across GPUs).
  const auto a = detail::gguf_matvec_shape(GgufFormat::q5_k, DType::f16, 3, 1000, 2048, 132);
  const auto b = detail::gguf_matvec_shape(GgufFormat::q5_k, DType::f16, 3, 1000, 2048, 78);
  EXPECT_EQ(a.grid_x, b.grid_x);
  EXPECT_EQ(a.chunk_blocks, b.chunk_blocks);
  EXPECT_EQ(a.smem_bytes, b.smem_bytes);
}

// ---- arguments ---------------------------------------------------------------------------------------------
TEST(GgufArgs, Dequantize) {
  const auto d = dq();
  auto p = GgufDequantizePlan::select(kTarget, d);
  ASSERT_TRUE(p.ok());
  auto a = dq_args(d);
  EXPECT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
  a.packed.layout = Layout::contiguous({4 * 2 * 210 - 1});
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem,
                    "gguf_dequantize: packed expected 1680 bytes (q6_K: 4 rows x 512 cols = 4 x 2 blocks of 210 bytes)",
                    "got 1679");
  a = dq_args(d);
  a.packed.dtype = DType::f16;
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "packed dtype expected uint8", "got float16");
  a = dq_args(d);
  a.packed.data = fake_ptr(0, 2);
  EXPECT_FAILS_WITH(p->can_implement(a), Status::MisalignedOperand, "packed expected a 16-byte aligned address");
  a = dq_args(d);
  a.packed.layout = strided({4, 420}, {840, 1});
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "packed expected dense bytes");
  a = dq_args(d);
  a.out.layout = Layout::contiguous({4, 256});
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "out shape expected [4, 512]", "[4, 256]");
  a = dq_args(d);
  a.out.dtype = DType::bf16;
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "out dtype expected float32", "got bfloat16");
  a = dq_args(d);
  a.out.layout = strided({4, 512}, {1024, 1});
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "out expected dense row-major");
  a = dq_args(d);
  a.out.data = fake_ptr(0, 64);  // inside the packed bytes
  EXPECT_FALSE(p->can_implement(a).ok());
  // An empty problem launches nothing.
  auto e = GgufDequantizePlan::select(kTarget, dq(GgufFormat::q6_k, 0, 512));
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(e->run(nullptr, {}, dq_args(dq(GgufFormat::q6_k, 0, 512))).ok());
}

TEST(GgufArgs, Matvec) {
  auto d = mv(GgufFormat::q4_k, 4, 64, 512);
  d.bias = true;
  auto p = GgufMatvecPlan::select(kTarget, d);
  ASSERT_TRUE(p.ok());
  auto a = mv_args(d);
  EXPECT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
  a.weight.layout = Layout::contiguous({64, 288});  // any dense shape of the right byte count
  EXPECT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
  a.weight.layout = Layout::contiguous({64, 2, 144});
  a.weight.dtype = DType::s8;
  EXPECT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
}

TEST(GgufArgs, MatvecRefusals) {
  auto d = mv(GgufFormat::q4_k, 4, 64, 512);
  d.bias = true;
  auto p = GgufMatvecPlan::select(kTarget, d);
  ASSERT_TRUE(p.ok());
  auto a = mv_args(d);
  a.weight.layout = Layout::contiguous({64 * 288 + 16});
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "weight expected 18432 bytes", "got 18448");
  a = mv_args(d);
  a.weight.data = fake_ptr(1, 8);
  EXPECT_FAILS_WITH(p->can_implement(a), Status::MisalignedOperand, "weight expected a 16-byte aligned address");
  a = mv_args(d);
  a.x.layout = strided({4, 512}, {1, 4});
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "x expected a unit column stride");
  a = mv_args(d);
  a.x.layout = strided({4, 512}, {500, 1});
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "x row stride expected >= k=512", "got 500");
  a = mv_args(d);
  a.x.layout = strided({4, 512}, {520, 1});  // padded rows are fine
  EXPECT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
  a = mv_args(d);
  a.x.dtype = DType::f16;
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "x dtype expected bfloat16", "got float16");
  a = mv_args(d);
  a.bias = {};
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "bias is required");
  a = mv_args(d);
  a.bias.layout = strided({64}, {2});
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "bias expected a unit stride");
  a = mv_args(d);
  a.y.layout = strided({4, 64}, {128, 1});
  EXPECT_FAILS_WITH(p->can_implement(a), Status::InvalidProblem, "y expected dense row-major");
  a = mv_args(d);
  a.y.data = const_cast<void*>(a.x.data);  // on top of x
  EXPECT_FALSE(p->can_implement(a).ok());
  auto nob = mv(GgufFormat::q4_k, 4, 64, 512);
  auto pn = GgufMatvecPlan::select(kTarget, nob);
  ASSERT_TRUE(pn.ok());
  a = mv_args(nob);
  a.bias = ref_of(2, DType::bf16, Layout::contiguous({64}));
  EXPECT_FAILS_WITH(pn->can_implement(a), Status::InvalidProblem, "bias given but desc.bias is false");
}

TEST(GgufArgs, RunRefusesASmallWorkspaceBeforeLaunching) {
  auto d = mv(GgufFormat::q6_k, 8, 256, 14336);
  auto p = GgufMatvecPlan::select(kTarget, d);
  ASSERT_TRUE(p.ok());
  ASSERT_GT(p->workspace_size(), 0u);
  EXPECT_FAILS_WITH(p->run(nullptr, Workspace{fake_ptr(9), 64}, mv_args(d)), Status::WorkspaceTooSmall,
                    "gguf_matvec: workspace expected >=", "got 64");
  // m = 0: nothing to launch.
  auto e = mv(GgufFormat::q6_k, 0, 256, 512);
  auto pe = GgufMatvecPlan::select(kTarget, e);
  ASSERT_TRUE(pe.ok());
  EXPECT_TRUE(pe->run(nullptr, {}, mv_args(e)).ok());
}

}  // namespace
}  // namespace baracuda
