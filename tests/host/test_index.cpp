// The indexing family without a GPU: the table, dtype coverage (declared == accepted),
// descriptor and argument refusals with their messages, preferences (the sorted scatter), the
// workspace, and the kernel run() would take (layout_for: widening, tiled transpose, 64-bit
// indexing) on fake pointers.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "baracuda/core/coverage.hpp"
#include "baracuda/ops/index.hpp"
#include "test_util.hpp"

namespace baracuda {
namespace {

using test::fake_ptr;
using test::mut_of;
using test::ref_of;
using test::strided;

const Target kTarget = Target::offline(90);

bool contains_text(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
#define EXPECT_MSG(result, part) \
  EXPECT_TRUE(contains_text((result).message(), part)) << "message: " << (result).message()

// ---- table and coverage ------------------------------------------------------------------------
TEST(IndexTable, RowsAndNames) {
  for (const char* n : {"copy",
                        "cat",
                        "stack",
                        "pad",
                        "flip",
                        "roll",
                        "tile",
                        "repeat_interleave",
                        "triu",
                        "tril",
                        "gather",
                        "index_select",
                        "embedding",
                        "scatter",
                        "scatter_add",
                        "index_copy",
                        "index_add",
                        "segment_sum",
                        "segment_max",
                        "segment_min",
                        "scatter_reduce",
                        "segment_prod",
                        "segment_mean",
                        "index",
                        "index_put",
                        "one_hot",
                        "nonzero",
                        "masked_select",
                        "masked_scatter",
                        "lax_gather",
                        "lax_scatter",
                        "embedding_bag",
                        "embedding_renorm",
                        "tril_indices",
                        "triu_indices"}) {
    auto op = index_op_from_name(n);
    ASSERT_TRUE(op.has_value()) << n;
    EXPECT_STREQ(info(*op).name, n);
  }
  EXPECT_FALSE(index_op_from_name("meshgrid").has_value());
  EXPECT_TRUE(info(IndexOp::masked_scatter).reports_errors);
  EXPECT_FALSE(info(IndexOp::masked_scatter).takes_index);
  EXPECT_FALSE(info(IndexOp::segment_sum).reports_errors);  // JAX drops bad ids
  EXPECT_EQ(info(IndexOp::nonzero).engine, IndexEngine::select);
  EXPECT_EQ(scatter_reduce_from_name("amax"), ScatterReduce::amax);
  EXPECT_FALSE(scatter_reduce_from_name("max").has_value());
  EXPECT_EQ(index_mode_from_name("clip"), IndexMode::clip);
  EXPECT_TRUE(info(IndexOp::gather).takes_index);
  EXPECT_FALSE(info(IndexOp::pad).takes_index);
  EXPECT_EQ(pad_mode_from_name("reflect"), PadMode::reflect);
  EXPECT_FALSE(pad_mode_from_name("mirror").has_value());
  EXPECT_EQ(info(IndexOp::embedding_bag).engine, IndexEngine::rows);
  EXPECT_EQ(info(IndexOp::embedding_renorm).engine, IndexEngine::rows);
  EXPECT_EQ(info(IndexOp::tril_indices).engine, IndexEngine::generate);
  EXPECT_TRUE(info(IndexOp::embedding_bag).reports_errors);
  EXPECT_FALSE(info(IndexOp::triu_indices).takes_index);
}

TEST(IndexCoverage, DeclaredEqualsAccepted) {
  for (const auto& in : index_ops()) {
    for (Direction dir : {Direction::Forward, Direction::Backward}) {
      const DTypeSet declared = dir == Direction::Forward ? in.fw_dtypes : in.bw_dtypes;
      for (int i = 0; i < kNumDTypes; ++i) {
        const DType t = static_cast<DType>(i);
        for (DType it : {DType::s32, DType::s64}) {
          auto p = IndexPlan::select(kTarget, index_probe(in.op, t, it, dir));
          EXPECT_EQ(p.ok(), contains(declared, t))
              << in.name << " " << to_string(dir) << " " << name(t) << " " << name(it) << ": " << p.message();
          if (!p.ok()) {
            EXPECT_EQ(p.status(), Status::Unsupported) << p.message();
          }
        }
      }
    }
  }
}

TEST(IndexCoverage, RegisteredRows) {
  int gather_rows = 0, pad_bw = 0;
  for (const auto& r : coverage(kTarget)) {
    if (r.family != "index") continue;
    if (r.op == "gather") ++gather_rows;
    if (r.op == "pad" && r.direction == Direction::Backward) ++pad_bw;
  }
  EXPECT_EQ(gather_rows, 2 * __builtin_popcount(dtypes::kAll));  // every dtype x {s32, s64}
  EXPECT_EQ(pad_bw, 4);
}

// ---- descriptor refusals -----------------------------------------------------------------------
TEST(IndexSelect, DescriptorRefusals) {
  auto r =
      IndexPlan::select(kTarget, IndexDesc::gather(DType::f32, DType::f32, Shape::of({4, 8}), Shape::of({4, 3}), 1));
  EXPECT_EQ(r.status(), Status::InvalidProblem);
  EXPECT_MSG(r, "gather: index dtype expected int32 or int64, got float32");

  r = IndexPlan::select(kTarget, IndexDesc::gather(DType::f32, DType::s64, Shape::of({4, 8}), Shape::of({5, 3}), 1));
  EXPECT_MSG(r, "index.shape[0]=5 expected <= input.shape[0]=4");

  r = IndexPlan::select(kTarget, IndexDesc::index_select(DType::f32, DType::s64, Shape::of({4, 8}), 3, 2));
  EXPECT_MSG(r, "index_select: dim expected in [0, 2)");

  const int64_t pads[] = {4, 0, 0, 0};
  r = IndexPlan::select(kTarget, IndexDesc::pad_nd(DType::f32, Shape::of({4, 8}), pads, PadMode::reflect));
  EXPECT_MSG(r, "reflect padding of dim 0 expected < the input size 4");
  const int64_t crop[] = {-1, 0, 0, 0};
  r = IndexPlan::select(kTarget, IndexDesc::pad_nd(DType::f32, Shape::of({4, 8}), crop, PadMode::replicate));
  EXPECT_MSG(r, "negative padding (cropping) is supported by constant mode only");
  EXPECT_TRUE(
      IndexPlan::select(kTarget, IndexDesc::pad_nd(DType::f32, Shape::of({4, 8}), crop, PadMode::constant)).ok());
  const int64_t three[] = {1, 1, 1};
  r = IndexPlan::select(kTarget, IndexDesc::pad_nd(DType::f32, Shape::of({4, 8}), three, PadMode::constant));
  EXPECT_MSG(r, "pads expected 2 per dim (4 values");
  const int64_t circ[] = {5, 0, 0, 0};
  r = IndexPlan::select(kTarget, IndexDesc::pad_nd(DType::f32, Shape::of({4, 8}), circ, PadMode::circular));
  EXPECT_MSG(r, "circular padding of dim 0 expected <= the input size 4");

  r = IndexPlan::select(kTarget, IndexDesc::triu(DType::f32, Shape::of({8}), 0));
  EXPECT_MSG(r, "triu: input rank expected >= 2, got 1");

  r = IndexPlan::select(kTarget, IndexDesc::embedding(DType::f32, DType::s64, 10, 8, Shape::of({3}), 10));
  EXPECT_MSG(r, "padding_idx expected -1 (none) or in [0, 10)");

  r = IndexPlan::select(kTarget, IndexDesc::index_add(DType::f32, DType::s64, Shape::of({4, 8}), Shape::of({3, 7}), 0));
  EXPECT_MSG(r, "src.shape[1]=7 expected 8 (self's)");

  r = IndexPlan::select(kTarget,
                        IndexDesc::segment(DType::f32, DType::s32, Shape::of({4, 8}), -1, IndexOp::segment_sum));
  EXPECT_MSG(r, "num_segments expected >= 0, got -1");

  const int64_t reps[] = {1, -2};
  r = IndexPlan::select(kTarget, IndexDesc::tile(DType::f32, Shape::of({4, 8}), reps));
  EXPECT_EQ(r.status(), Status::InvalidProblem);

  r = IndexPlan::select(kTarget, IndexDesc::repeat_interleave(DType::f32, Shape::of({4, 8}), -1, 1));
  EXPECT_MSG(r, "repeat_interleave: repeats expected >= 0");
  r = IndexPlan::select(kTarget, IndexDesc::repeat_interleave(DType::f32, Shape::of({4, 8}), 2, 2));
  EXPECT_MSG(r, "repeat_interleave: dim expected in [0, 2)");

  r = IndexPlan::select(kTarget, IndexDesc::flip(DType::f32, Shape::of({4, 8}), 4u));
  EXPECT_MSG(r, "flip_dims names a dim >= the rank 2");

  r = IndexPlan::select(kTarget, IndexDesc::cat(DType::f32, Shape::of({4, 8}), 1, 0));
  EXPECT_MSG(r, "num_inputs expected >= 1");
}

TEST(IndexSelect, DTypeAndBackwardRefusals) {
  auto r =
      IndexPlan::select(kTarget, IndexDesc::segment(DType::u8, DType::s32, Shape::of({4, 8}), 3, IndexOp::segment_sum));
  EXPECT_EQ(r.status(), Status::Unsupported);
  EXPECT_MSG(r, "segment_sum: dtype expected one of {");
  IndexDesc g = IndexDesc::gather(DType::f32, DType::s64, Shape::of({4, 8}), Shape::of({4, 3}), 1);
  g.direction = Direction::Backward;
  r = IndexPlan::select(kTarget, g);
  EXPECT_MSG(r, "gather has no backward plan");
  const int64_t pads[] = {1, 1, 1, 1};
  r = IndexPlan::select(
      kTarget, IndexDesc::pad_nd(DType::s32, Shape::of({4, 8}), pads, PadMode::constant, 0, Direction::Backward));
  EXPECT_MSG(r, "pad_backward: dtype expected one of {float64, float32, float16, bfloat16}, got int32");
}

TEST(IndexSelect, Preferences) {
  const IndexDesc d = IndexDesc::index_add(DType::f32, DType::s64, Shape::of({10, 8}), Shape::of({300, 8}), 0);
  auto atomic = IndexPlan::select(kTarget, d);
  ASSERT_TRUE(atomic.ok()) << atomic.message();
  EXPECT_FALSE(atomic->sorted());
  EXPECT_FALSE(atomic->precision().deterministic);
  EXPECT_EQ(atomic->workspace_size(), 0u);
  EXPECT_TRUE(contains_text(atomic->sku().layout, "scatter-atomic"));

  PlanPreference det;
  det.require_deterministic = true;
  auto sorted = IndexPlan::select(kTarget, d, det);
  ASSERT_TRUE(sorted.ok()) << sorted.message();
  EXPECT_TRUE(sorted->sorted());
  EXPECT_TRUE(sorted->precision().deterministic);
  EXPECT_TRUE(sorted->precision().bit_stable);
  EXPECT_GE(sorted->workspace_size(), 4u * 300 * 8);
  EXPECT_TRUE(contains_text(sorted->sku().layout, "scatter-sorted"));

  PlanPreference bits;
  bits.require_bit_stable = true;
  EXPECT_TRUE(IndexPlan::select(kTarget, d, bits)->sorted());

  // Ops without atomics meet determinism as they are.
  auto g = IndexPlan::select(kTarget, IndexDesc::index_select(DType::bf16, DType::s32, Shape::of({10, 8}), 3, 0), det);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->workspace_size(), 0u);
  EXPECT_TRUE(g->precision().deterministic);
  // segment_max: atomic max is order-independent.
  auto m = IndexPlan::select(
      kTarget, IndexDesc::segment(DType::f32, DType::s64, Shape::of({10, 8}), 4, IndexOp::segment_min), det);
  ASSERT_TRUE(m.ok());
  EXPECT_FALSE(m->sorted());
  EXPECT_TRUE(m->precision().deterministic);
  // embedding backward is always sorted.
  auto e = IndexPlan::select(
      kTarget, IndexDesc::embedding(DType::bf16, DType::s64, 100, 64, Shape::of({7}), -1, Direction::Backward));
  ASSERT_TRUE(e.ok()) << e.message();
  EXPECT_TRUE(e->sorted());

  PlanPreference p;
  p.backend = Backend::CuBlasLt;
  auto r = IndexPlan::select(kTarget, d, p);
  EXPECT_EQ(r.status(), Status::Unsupported);
  EXPECT_MSG(r, "preference backend=");
  p = {};
  p.tf32 = Tristate::Require;
  EXPECT_MSG(IndexPlan::select(kTarget, d, p), "tf32=Require");
  p = {};
  p.reduced_precision_reduction = Tristate::Require;
  EXPECT_MSG(IndexPlan::select(kTarget, d, p), "reduced_precision_reduction=Require");
  EXPECT_MSG(IndexPlan::select(Target::offline(75), d), "below the minimum sm_80");
  p = {};
  p.vectorized = Tristate::Forbid;
  EXPECT_TRUE(contains_text(IndexPlan::select(kTarget, d, p)->sku().layout, "vectorization forbidden"));
}

// ---- arguments -----------------------------------------------------------------------------------
TEST(IndexArgs, CopyChecks) {
  auto plan = IndexPlan::select(kTarget, IndexDesc::copy(DType::f32, Shape::of({4, 8})));
  ASSERT_TRUE(plan.ok());
  IndexArgs a;
  a.x = ref_of(0, DType::f32, strided({4, 8}, {1, 4}));  // a transposed view
  a.out = mut_of(1, DType::f32, Layout::contiguous({4, 8}));
  EXPECT_TRUE(plan->can_implement(a).ok()) << plan->can_implement(a).message();

  IndexArgs b = a;
  b.x.dtype = DType::f16;
  EXPECT_MSG(plan->can_implement(b), "copy: x dtype expected float32, got float16");
  b = a;
  b.out.layout = Layout::contiguous({4, 9});
  EXPECT_MSG(plan->can_implement(b), "copy: out shape expected [4, 8], got [4, 9]");
  b = a;
  b.x.layout = strided({4, 8}, {8, -1});
  EXPECT_MSG(plan->can_implement(b), "x stride[1] expected >= 0, got -1");
  b = a;
  b.out.layout = strided({4, 8}, {0, 1});
  EXPECT_MSG(plan->can_implement(b), "out overlaps itself");
  b = a;
  b.x.data = nullptr;
  EXPECT_MSG(plan->can_implement(b), "x is null but has elements");
  b = a;
  b.out.data = fake_ptr(0, 8);  // partially overlapping the input
  EXPECT_MSG(plan->can_implement(b), "out overlaps x");
  b = a;
  b.x = TensorRef(b.out);  // exact in-place copy is a no-op and allowed
  EXPECT_TRUE(plan->can_implement(b).ok());
  b = a;
  b.index = ref_of(2, DType::s64, Layout::contiguous({3}));
  EXPECT_MSG(plan->can_implement(b), "index given but copy takes none");
  b = a;
  b.x.layout = strided({4, 8}, {int64_t{1} << 61, 1});
  EXPECT_MSG(plan->can_implement(b), "footprint overflows");
}

TEST(IndexArgs, CatChecks) {
  auto plan = IndexPlan::select(kTarget, IndexDesc::cat(DType::bf16, Shape::of({4, 10}), 1, 2));
  ASSERT_TRUE(plan.ok());
  std::vector<TensorRef> ins = {ref_of(0, DType::bf16, Layout::contiguous({4, 3})),
                                ref_of(1, DType::bf16, Layout::contiguous({4, 7}))};
  IndexArgs a;
  a.inputs = ins;
  a.out = mut_of(2, DType::bf16, Layout::contiguous({4, 10}));
  EXPECT_TRUE(plan->can_implement(a).ok()) << plan->can_implement(a).message();
  ins[1].layout = Layout::contiguous({4, 6});
  EXPECT_MSG(plan->can_implement(a), "inputs' sizes along dim 1 sum to 9, expected 10");
  ins[1].layout = Layout::contiguous({5, 7});
  EXPECT_MSG(plan->can_implement(a), "cat: inputs[1] shape expected [4, 7], got [5, 7]");
  ins[1].layout = Layout::contiguous({4, 7});
  std::vector<TensorRef> one = {ins[0]};
  a.inputs = one;
  EXPECT_MSG(plan->can_implement(a), "inputs expected 2 tensors, got 1");
  a.inputs = ins;
  a.x = ins[0];
  EXPECT_MSG(plan->can_implement(a), "x given but cat/stack read `inputs`");
}

TEST(IndexArgs, IndexChecks) {
  auto plan = IndexPlan::select(kTarget, IndexDesc::index_select(DType::f32, DType::s32, Shape::of({10, 8}), 3, 0));
  ASSERT_TRUE(plan.ok());
  IndexArgs a;
  a.x = ref_of(0, DType::f32, Layout::contiguous({10, 8}));
  a.index = ref_of(1, DType::s32, Layout::contiguous({3}));
  a.out = mut_of(2, DType::f32, Layout::contiguous({3, 8}));
  a.error = mut_of(3, DType::s32, Layout::contiguous({1}));
  EXPECT_TRUE(plan->can_implement(a).ok()) << plan->can_implement(a).message();
  IndexArgs b = a;
  b.index.dtype = DType::s64;
  EXPECT_MSG(plan->can_implement(b), "index_select: index dtype expected int32, got int64");
  b = a;
  b.error.dtype = DType::f32;
  EXPECT_MSG(plan->can_implement(b), "error flag expected a non-null int32 tensor of one element");
  b = a;
  b.error.data = fake_ptr(2, 4);
  EXPECT_MSG(plan->can_implement(b), "error flag overlaps out");
  b = a;
  b.out.data = fake_ptr(0, 16);
  EXPECT_MSG(plan->can_implement(b), "out overlaps x");
  b = a;
  b.error.data = fake_ptr(1, 8);
  EXPECT_MSG(plan->can_implement(b), "error flag overlaps index");
  b = a;
  b.src = a.x;
  EXPECT_MSG(plan->can_implement(b), "src given but index_select takes none");
}

TEST(IndexSelect, AssignPaths) {
  const IndexDesc d = IndexDesc::index_copy(DType::bf16, DType::s32, Shape::of({10, 8}), Shape::of({30, 8}), 0);
  auto plain = IndexPlan::select(kTarget, d);
  ASSERT_TRUE(plain.ok()) << plain.message();
  EXPECT_FALSE(plain->sorted());
  EXPECT_FALSE(plain->precision().deterministic);
  PlanPreference det;
  det.require_deterministic = true;
  auto sorted = IndexPlan::select(kTarget, d, det);
  ASSERT_TRUE(sorted.ok());
  EXPECT_TRUE(sorted->sorted());
  EXPECT_TRUE(sorted->precision().deterministic);
  EXPECT_TRUE(contains_text(sorted->precision().note, "last duplicate"));
  IndexArgs a;
  a.x = ref_of(0, DType::bf16, Layout::contiguous({10, 8}));
  a.src = ref_of(1, DType::bf16, Layout::contiguous({30, 8}));
  a.index = ref_of(2, DType::s32, Layout::contiguous({30}));
  a.out = mut_of(3, DType::bf16, Layout::contiguous({10, 8}));
  EXPECT_TRUE(plain->can_implement(a).ok()) << plain->can_implement(a).message();
  EXPECT_EQ(plain->layout_for(a), "scatter-copy");
  EXPECT_EQ(sorted->layout_for(a), "scatter-sorted-copy");
  // fp8 and complex move as bytes
  EXPECT_TRUE(IndexPlan::select(kTarget, IndexDesc::scatter(DType::f8e4m3, DType::s64, Shape::of({4, 8}),
                                                            Shape::of({4, 3}), Shape::of({4, 8}), 1))
                  .ok());
}

TEST(IndexArgs, ScatterInPlace) {
  const IndexDesc d = IndexDesc::index_add(DType::f32, DType::s64, Shape::of({10, 8}), Shape::of({3, 8}), 0);
  auto plan = IndexPlan::select(kTarget, d);
  ASSERT_TRUE(plan.ok());
  IndexArgs a;
  a.out = mut_of(0, DType::f32, Layout::contiguous({10, 8}));
  a.x = a.out;  // self is the output: accumulates in place
  a.src = ref_of(1, DType::f32, Layout::contiguous({3, 8}));
  a.index = ref_of(2, DType::s64, Layout::contiguous({3}));
  EXPECT_TRUE(plan->can_implement(a).ok()) << plan->can_implement(a).message();
  IndexArgs b = a;
  b.src = ref_of(0, DType::f32, Layout::contiguous({3, 8}));
  EXPECT_MSG(plan->can_implement(b), "out overlaps src");
  EXPECT_EQ(plan->layout_for(a), "scatter-atomic-rows-vec16");  // dense rows of 2 x 16 bytes
}

TEST(IndexLayout, ScatterVariants) {
  // Row mode with one slice dim of >= 8 elements: the row kernel (the vector row kernel where the
  // rows are dense 16-byte vectors, aligned); shorter rows and element mode (scatter_add): one
  // thread per element. Contiguous slice dims merge first ([L, 4, 2] -> 8).
  auto seg = IndexPlan::select(
      kTarget, IndexDesc::segment(DType::f32, DType::s32, Shape::of({100, 4, 2}), 7, IndexOp::segment_max));
  ASSERT_TRUE(seg.ok()) << seg.message();
  IndexArgs a;
  a.x = ref_of(0, DType::f32, Layout::contiguous({100, 4, 2}));
  a.index = ref_of(1, DType::s32, Layout::contiguous({100}));
  a.out = mut_of(2, DType::f32, Layout::contiguous({7, 4, 2}));
  EXPECT_TRUE(seg->can_implement(a).ok()) << seg->can_implement(a).message();
  EXPECT_EQ(seg->layout_for(a), "scatter-atomic-rows-vec16");
  {
    IndexArgs m = a;
    m.x = ref_of(0, DType::f32, Layout::contiguous({100, 4, 2}), 4);  // source 4 bytes off 16
    EXPECT_EQ(seg->layout_for(m), "scatter-atomic-rows");
    m = a;
    m.x.layout = strided({100, 4, 2}, {10, 2, 1});  // rows 40 bytes apart: not whole vectors
    EXPECT_EQ(seg->layout_for(m), "scatter-atomic-rows");
    m = a;
    m.x.layout = strided({100, 4, 2}, {16, 4, 2});  // column stride 2: per-column kernel
    EXPECT_EQ(seg->layout_for(m), "scatter-atomic-rows");
  }
  a.x.layout = strided({100, 4, 2}, {8, 1, 4});  // slice dims no longer contiguous together
  EXPECT_EQ(seg->layout_for(a), "scatter-atomic");
  auto small = IndexPlan::select(
      kTarget, IndexDesc::segment(DType::f32, DType::s32, Shape::of({100, 7}), 7, IndexOp::segment_sum));
  IndexArgs b;
  b.x = ref_of(0, DType::f32, Layout::contiguous({100, 7}));
  b.index = ref_of(1, DType::s32, Layout::contiguous({100}));
  b.out = mut_of(2, DType::f32, Layout::contiguous({7, 7}));
  EXPECT_EQ(small->layout_for(b), "scatter-atomic");
  auto sa = IndexPlan::select(kTarget, IndexDesc::scatter_add(DType::f32, DType::s64, Shape::of({4, 64}),
                                                              Shape::of({4, 64}), Shape::of({4, 64}), 1));
  IndexArgs c;
  c.x = ref_of(0, DType::f32, Layout::contiguous({4, 64}));
  c.src = ref_of(1, DType::f32, Layout::contiguous({4, 64}));
  c.index = ref_of(2, DType::s64, Layout::contiguous({4, 64}));
  c.out = mut_of(3, DType::f32, Layout::contiguous({4, 64}));
  EXPECT_EQ(sa->layout_for(c), "scatter-atomic");
}

TEST(IndexRun, RefusalsBeforeLaunch) {
  PlanPreference det;
  det.require_deterministic = true;
  const IndexDesc d = IndexDesc::index_add(DType::f32, DType::s64, Shape::of({10, 8}), Shape::of({3, 8}), 0);
  auto plan = IndexPlan::select(kTarget, d, det);
  ASSERT_TRUE(plan.ok());
  IndexArgs a;
  a.out = mut_of(0, DType::f32, Layout::contiguous({10, 8}));
  a.x = ref_of(3, DType::f32, Layout::contiguous({10, 9}));  // wrong shape: can_implement first
  a.src = ref_of(1, DType::f32, Layout::contiguous({3, 8}));
  a.index = ref_of(2, DType::s64, Layout::contiguous({3}));
  auto r = plan->run(nullptr, {}, a);
  EXPECT_EQ(r.status(), Status::InvalidProblem);
  EXPECT_MSG(r, "index_add: x shape expected [10, 8]");
}

// ---- what run() would launch ---------------------------------------------------------------------
TEST(IndexLayout, CopyVariants) {
  auto plan = IndexPlan::select(kTarget, IndexDesc::copy(DType::bf16, Shape::of({64, 128})));
  ASSERT_TRUE(plan.ok());
  IndexArgs a;
  a.x = ref_of(0, DType::bf16, Layout::contiguous({64, 128}));
  a.out = mut_of(1, DType::bf16, Layout::contiguous({64, 128}));
  EXPECT_EQ(plan->layout_for(a), "row-copy-16B-i32");  // merged to 1-d, widened to 8 x bf16
  a.x.layout = strided({64, 128}, {1, 64});            // a transposed input: 8 x 8 register blocks
  EXPECT_EQ(plan->layout_for(a), "register-transpose-2B-16B-vectors");
  {
    // The widest vector of >= 2 elements that the sizes, strides and pointers allow.
    auto f32 = IndexPlan::select(kTarget, IndexDesc::copy(DType::f32, Shape::of({64, 128})));
    IndexArgs t;
    t.x = ref_of(0, DType::f32, strided({64, 128}, {1, 64}));
    t.out = mut_of(1, DType::f32, Layout::contiguous({64, 128}));
    EXPECT_EQ(f32->layout_for(t), "register-transpose-4B-16B-vectors");
    t.x.data = fake_ptr(0, 8);  // 8-byte aligned only: 2-element vectors
    EXPECT_EQ(f32->layout_for(t), "register-transpose-4B-8B-vectors");
    t.x.data = fake_ptr(0, 4);  // no vector of two f32 fits: element tiles
    EXPECT_EQ(f32->layout_for(t), "tiled-transpose-4B");
    auto f64 = IndexPlan::select(kTarget, IndexDesc::copy(DType::f64, Shape::of({64, 127})));
    IndexArgs o;
    o.x = ref_of(0, DType::f64, strided({64, 127}, {1, 64}));
    o.out = mut_of(1, DType::f64, Layout::contiguous({64, 127}));
    EXPECT_EQ(f64->layout_for(o), "tiled-transpose-8B");  // an odd inner size: element tiles
    o.x.layout = strided({64, 128}, {1, 64});
    o.out.layout = Layout::contiguous({64, 128});
    auto f64b = IndexPlan::select(kTarget, IndexDesc::copy(DType::f64, Shape::of({64, 128})));
    EXPECT_EQ(f64b->layout_for(o), "register-transpose-8B-16B-vectors");
    auto c128 = IndexPlan::select(kTarget, IndexDesc::copy(DType::c128, Shape::of({64, 128})));
    IndexArgs c;
    c.x = ref_of(0, DType::c128, strided({64, 128}, {1, 64}));
    c.out = mut_of(1, DType::c128, Layout::contiguous({64, 128}));
    EXPECT_EQ(c128->layout_for(c), "tiled-transpose-16B");  // no vector holds two of them
  }
  {
    // bf16 with inner sizes that are whole 4-element but not 8-element vectors.
    auto p12 = IndexPlan::select(kTarget, IndexDesc::copy(DType::bf16, Shape::of({24, 20})));
    IndexArgs t;
    t.x = ref_of(0, DType::bf16, strided({24, 20}, {1, 24}));
    t.out = mut_of(1, DType::bf16, Layout::contiguous({24, 20}));
    EXPECT_EQ(p12->layout_for(t), "register-transpose-2B-8B-vectors");
  }
  a.x.data = fake_ptr(0, 2);  // bf16 vectors need at least 4-byte aligned pointers: element tiles
  EXPECT_EQ(plan->layout_for(a), "tiled-transpose-2B");
  a.x.data = fake_ptr(0, 4);
  EXPECT_EQ(plan->layout_for(a), "register-transpose-2B-4B-vectors");
  a.x.data = fake_ptr(0);
  a.x.layout = strided({64, 128}, {256, 2});  // every other element: no widening
  EXPECT_EQ(plan->layout_for(a), "strided-copy-2B-i32");
  a.x.layout = Layout::contiguous({64, 128});
  a.x.data = fake_ptr(0, 2);  // misaligned by one element: no widening
  EXPECT_EQ(plan->layout_for(a), "row-copy-2B-i32");
  a.x.data = fake_ptr(0, 4);  // 4-byte aligned: 4-byte words
  EXPECT_EQ(plan->layout_for(a), "row-copy-4B-i32");
  a.x.data = fake_ptr(0);
  a.x.layout = strided({64, 128}, {0, 1});                 // expand of a row: stride 0 kept
  EXPECT_EQ(plan->layout_for(a), "strided-copy-16B-i32");  // rows of 16 words: per element

  {
    // A row slice of a wider tensor (cat along dim 1's destination view): rows of >= 512 words
    // take the row kernel, shorter rows the per-element one.
    auto wide = IndexPlan::select(kTarget, IndexDesc::copy(DType::bf16, Shape::of({64, 4096})));
    IndexArgs w;
    w.x = ref_of(0, DType::bf16, Layout::contiguous({64, 4096}));
    w.out = mut_of(1, DType::bf16, strided({64, 4096}, {8192, 1}));
    EXPECT_EQ(wide->layout_for(w), "row-copy-16B-i32");  // 512 words a row
    auto narrow = IndexPlan::select(kTarget, IndexDesc::copy(DType::bf16, Shape::of({64, 4088})));
    w.x.layout = Layout::contiguous({64, 4088});
    w.out.layout = strided({64, 4088}, {8192, 1});
    EXPECT_EQ(narrow->layout_for(w), "strided-copy-16B-i32");  // 511 words a row
  }
  PlanPreference nov;
  nov.vectorized = Tristate::Forbid;
  auto scalar = IndexPlan::select(kTarget, IndexDesc::copy(DType::bf16, Shape::of({64, 128})), nov);
  a.x.layout = Layout::contiguous({64, 128});
  EXPECT_EQ(scalar->layout_for(a), "row-copy-2B-i32");
  a.x.layout = strided({64, 128}, {1, 64});
  EXPECT_EQ(scalar->layout_for(a), "tiled-transpose-2B");

  auto big = IndexPlan::select(kTarget, IndexDesc::copy(DType::u8, Shape::of({int64_t{1} << 16, int64_t{1} << 16})));
  IndexArgs b;
  b.x = ref_of(0, DType::u8, strided({int64_t{1} << 16, int64_t{1} << 16}, {int64_t{1} << 16, 1}));
  b.out = mut_of(1, DType::u8, strided({int64_t{1} << 16, int64_t{1} << 16}, {int64_t{1} << 16, 1}));
  b.out.data = fake_ptr(5);
  EXPECT_EQ(big->layout_for(b), "row-copy-16B-i32");  // 2^32 bytes = 2^28 words
  b.x.layout = strided({int64_t{1} << 16, int64_t{1} << 16}, {int64_t{1} << 17, 2});
  EXPECT_EQ(big->layout_for(b), "strided-copy-1B-i64");
}

TEST(IndexLayout, MappedOps) {
  const int64_t pads[] = {0, 0, 2, 3};
  auto pad = IndexPlan::select(kTarget, IndexDesc::pad_nd(DType::f32, Shape::of({4, 8}), pads, PadMode::reflect));
  ASSERT_TRUE(pad.ok());
  IndexArgs a;
  a.x = ref_of(0, DType::f32, Layout::contiguous({4, 8}));
  a.out = mut_of(1, DType::f32, Layout::contiguous({4, 13}));
  EXPECT_TRUE(pad->can_implement(a).ok()) << pad->can_implement(a).message();
  EXPECT_EQ(pad->layout_for(a), "mapped-rows-4B-i32");  // 16-byte chunks along the padded rows
  {
    // An output whose unit-stride dim holds 2 floats (less than one 16-byte chunk): per element.
    auto col = IndexPlan::select(kTarget, IndexDesc::pad_nd(DType::f32, Shape::of({2, 8}), pads, PadMode::reflect));
    IndexArgs c;
    c.x = ref_of(0, DType::f32, Layout::contiguous({2, 8}));
    c.out = mut_of(1, DType::f32, strided({2, 13}, {1, 2}));
    EXPECT_EQ(col->layout_for(c), "mapped-copy-4B-i32");
  }
  PlanPreference nov;
  nov.vectorized = Tristate::Forbid;
  auto scalar_pad =
      IndexPlan::select(kTarget, IndexDesc::pad_nd(DType::f32, Shape::of({4, 8}), pads, PadMode::reflect), nov);
  EXPECT_EQ(scalar_pad->layout_for(a), "mapped-copy-4B-i32");
  // Rows shorter than one 16-byte chunk (13 bytes of u8) keep the per-element copy.
  auto short_rows = IndexPlan::select(kTarget, IndexDesc::pad_nd(DType::u8, Shape::of({4, 8}), pads, PadMode::reflect));
  IndexArgs u;
  u.x = ref_of(0, DType::u8, Layout::contiguous({4, 8}));
  u.out = mut_of(1, DType::u8, Layout::contiguous({4, 13}));
  EXPECT_EQ(short_rows->layout_for(u), "mapped-copy-1B-i32");
  // A large constant pad of bf16 rows (the bench's shape, smaller): chunks of 8 elements.
  const int64_t hw[] = {0, 0, 0, 0, 1, 1, 1, 1};
  auto img =
      IndexPlan::select(kTarget, IndexDesc::pad_nd(DType::bf16, Shape::of({2, 3, 128, 128}), hw, PadMode::constant));
  IndexArgs im;
  im.x = ref_of(0, DType::bf16, Layout::contiguous({2, 3, 128, 128}));
  im.out = mut_of(1, DType::bf16, Layout::contiguous({2, 3, 130, 130}));
  EXPECT_EQ(img->layout_for(im), "mapped-rows-2B-i32");
  // Output rows of at least 512 bytes take the word variant (aligned 16-byte output words).
  const int64_t lr[] = {0, 0, 3, 5};
  auto long_rows =
      IndexPlan::select(kTarget, IndexDesc::pad_nd(DType::bf16, Shape::of({37, 1000}), lr, PadMode::reflect));
  IndexArgs lra;
  lra.x = ref_of(0, DType::bf16, Layout::contiguous({37, 1000}));
  lra.out = mut_of(1, DType::bf16, Layout::contiguous({37, 1008}));
  EXPECT_EQ(long_rows->layout_for(lra), "mapped-rows-words-2B-i32");
  // Rows of at least 4 KB: warp tasks inside one row (2048 bf16 = 4096 bytes; 2038 stay on words).
  for (const int64_t n : {2040, 2030}) {
    auto lr4k = IndexPlan::select(kTarget, IndexDesc::pad_nd(DType::bf16, Shape::of({37, n}), lr, PadMode::reflect));
    IndexArgs la;
    la.x = ref_of(0, DType::bf16, Layout::contiguous({37, n}));
    la.out = mut_of(1, DType::bf16, Layout::contiguous({37, n + 8}));
    EXPECT_EQ(lr4k->layout_for(la), n == 2040 ? "mapped-rows-long-2B-i32" : "mapped-rows-words-2B-i32");
  }
  // 255 bf16 (510 bytes) stay on the element kernels.
  auto below = IndexPlan::select(kTarget, IndexDesc::pad_nd(DType::bf16, Shape::of({37, 247}), lr, PadMode::reflect));
  IndexArgs ba;
  ba.x = ref_of(0, DType::bf16, Layout::contiguous({37, 247}));
  ba.out = mut_of(1, DType::bf16, Layout::contiguous({37, 255}));
  EXPECT_EQ(below->layout_for(ba), "mapped-rows-2B-i32");

  // Constant padding of an outer dim keeps the contiguous inner rows widened.
  const int64_t outer[] = {1, 1, 0, 0};
  auto cpad =
      IndexPlan::select(kTarget, IndexDesc::pad_nd(DType::f32, Shape::of({4, 8}), outer, PadMode::constant, 1.5));
  a.out = mut_of(1, DType::f32, Layout::contiguous({6, 8}));
  EXPECT_EQ(cpad->layout_for(a), "mapped-copy-16B-i32");

  auto tri = IndexPlan::select(kTarget, IndexDesc::triu(DType::f32, Shape::of({4, 8}), 1));
  a.out = mut_of(1, DType::f32, Layout::contiguous({4, 8}));
  EXPECT_EQ(tri->layout_for(a), "mapped-copy-4B-i32");

  std::vector<TensorRef> ins = {ref_of(2, DType::f32, Layout::contiguous({4, 8})),
                                ref_of(3, DType::f32, Layout::contiguous({4, 8}))};
  auto st = IndexPlan::select(kTarget, IndexDesc::stack(DType::f32, Shape::of({4, 8}), 0, 2));
  IndexArgs s;
  s.inputs = ins;
  s.out = mut_of(1, DType::f32, Layout::contiguous({2, 4, 8}));
  EXPECT_TRUE(st->can_implement(s).ok()) << st->can_implement(s).message();
  EXPECT_EQ(st->layout_for(s), "row-copy-16B-i32");

  const int64_t pb[] = {1, 1, 1, 1};
  auto bw = IndexPlan::select(
      kTarget, IndexDesc::pad_nd(DType::f32, Shape::of({4, 8}), pb, PadMode::replicate, 0, Direction::Backward));
  ASSERT_TRUE(bw.ok()) << bw.message();
  IndexArgs g;
  g.x = ref_of(0, DType::f32, Layout::contiguous({6, 10}));  // grad of the padded output
  g.out = mut_of(1, DType::f32, Layout::contiguous({4, 8}));
  EXPECT_TRUE(bw->can_implement(g).ok()) << bw->can_implement(g).message();
  EXPECT_EQ(bw->layout_for(g), "pad-backward");
}

TEST(IndexLayout, GatherWidening) {
  auto emb = IndexPlan::select(kTarget, IndexDesc::embedding(DType::bf16, DType::s64, 1000, 4096, Shape::of({16, 8})));
  ASSERT_TRUE(emb.ok());
  IndexArgs a;
  a.x = ref_of(0, DType::bf16, Layout::contiguous({1000, 4096}));
  a.index = ref_of(1, DType::s64, Layout::contiguous({16, 8}));
  a.out = mut_of(2, DType::bf16, Layout::contiguous({16, 8, 4096}));
  EXPECT_TRUE(emb->can_implement(a).ok()) << emb->can_implement(a).message();
  EXPECT_EQ(emb->layout_for(a), "gather-rows-16B");  // a warp per row of 512 16-byte words
  auto odd = IndexPlan::select(kTarget, IndexDesc::embedding(DType::bf16, DType::s64, 1000, 7, Shape::of({16})));
  IndexArgs b;
  b.x = ref_of(0, DType::bf16, Layout::contiguous({1000, 7}));
  b.index = ref_of(1, DType::s64, Layout::contiguous({16}));
  b.out = mut_of(2, DType::bf16, Layout::contiguous({16, 7}));
  EXPECT_EQ(odd->layout_for(b), "gather-2B-i32");
  auto ga =
      IndexPlan::select(kTarget, IndexDesc::gather(DType::f64, DType::s32, Shape::of({4, 8}), Shape::of({4, 3}), 1));
  IndexArgs c;
  c.x = ref_of(0, DType::f64, Layout::contiguous({4, 8}));
  c.index = ref_of(1, DType::s32, Layout::contiguous({4, 3}));
  c.out = mut_of(2, DType::f64, Layout::contiguous({4, 3}));
  EXPECT_TRUE(ga->can_implement(c).ok()) << ga->can_implement(c).message();
  EXPECT_EQ(ga->layout_for(c), "gather-staged-8B");  // the unit-stride source line through shared memory
  c.x.layout = strided({4, 8}, {1, 4});              // the gathered dim is strided: per element
  EXPECT_EQ(ga->layout_for(c), "gather-8B-i32");

  // The bench's torch.gather: 1024 of 4096 bf16 per row, staged.
  auto gb = IndexPlan::select(
      kTarget, IndexDesc::gather(DType::bf16, DType::s64, Shape::of({16384, 4096}), Shape::of({16384, 1024}), 1));
  IndexArgs d;
  d.x = ref_of(0, DType::bf16, Layout::contiguous({16384, 4096}));
  d.index = ref_of(1, DType::s64, Layout::contiguous({16384, 1024}));
  d.out = mut_of(2, DType::bf16, Layout::contiguous({16384, 1024}));
  EXPECT_EQ(gb->layout_for(d), "gather-staged-2B");
  // Few positions per line (staging 8 KB for 16 elements reads more than the 16 sectors a
  // direct gather touches) and lines past the 48 KB stage: per element.
  auto few = IndexPlan::select(
      kTarget, IndexDesc::gather(DType::bf16, DType::s64, Shape::of({64, 4096}), Shape::of({64, 16}), 1));
  d.x.layout = Layout::contiguous({64, 4096});
  d.index.layout = Layout::contiguous({64, 16});
  d.out.layout = Layout::contiguous({64, 16});
  EXPECT_EQ(few->layout_for(d), "gather-2B-i32");
  auto wide = IndexPlan::select(
      kTarget, IndexDesc::gather(DType::f32, DType::s64, Shape::of({4, 20000}), Shape::of({4, 20000}), 1));
  IndexArgs w;
  w.x = ref_of(0, DType::f32, Layout::contiguous({4, 20000}));
  w.index = ref_of(1, DType::s64, Layout::contiguous({4, 20000}));
  w.out = mut_of(2, DType::f32, Layout::contiguous({4, 20000}));
  EXPECT_EQ(wide->layout_for(w), "gather-4B-i32");
}

TEST(IndexLayout, EmptyTensors) {
  auto plan = IndexPlan::select(kTarget, IndexDesc::copy(DType::f32, Shape::of({0, 8})));
  ASSERT_TRUE(plan.ok());
  IndexArgs a;
  a.x = ref_of(0, DType::f32, Layout::contiguous({0, 8}));
  a.out = mut_of(1, DType::f32, Layout::contiguous({0, 8}));
  a.x.data = nullptr;
  a.out.data = nullptr;
  EXPECT_TRUE(plan->can_implement(a).ok()) << plan->can_implement(a).message();
  EXPECT_EQ(plan->layout_for(a), "empty");
  EXPECT_TRUE(plan->run(nullptr, {}, a).ok());  // nothing launched
}

// ---- scatter_reduce, segment prod / mean ---------------------------------------------------------
TEST(IndexReduce, PathsAndPrecision) {
  const Shape self = Shape::of({10, 8}), idx = Shape::of({30, 8});
  auto plan = [&](DType dt, ScatterReduce r, bool det, bool include_self = true) {
    PlanPreference p;
    p.require_deterministic = det;
    return IndexPlan::select(kTarget, IndexDesc::scatter_reduce(dt, DType::s64, self, idx, idx, 0, r, include_self), p);
  };
  auto sum = plan(DType::f32, ScatterReduce::sum, false);
  ASSERT_TRUE(sum.ok()) << sum.message();
  EXPECT_FALSE(sum->sorted());
  EXPECT_FALSE(sum->precision().deterministic);
  EXPECT_EQ(sum->workspace_size(), 0u);
  auto det = plan(DType::f32, ScatterReduce::prod, true);
  EXPECT_TRUE(det->sorted());
  EXPECT_TRUE(det->precision().deterministic);
  EXPECT_TRUE(contains_text(det->precision().note, "products"));
  EXPECT_GE(det->workspace_size(), 4u * 240 * 8);
  auto mean = plan(DType::bf16, ScatterReduce::mean, false);  // always sorted: the run is the count
  EXPECT_TRUE(mean->sorted());
  EXPECT_EQ(mean->precision().accumulator, DType::f32);
  auto amax = plan(DType::f64, ScatterReduce::amax, true);  // order-independent: atomic even so
  EXPECT_FALSE(amax->sorted());
  EXPECT_TRUE(amax->precision().deterministic);
  EXPECT_TRUE(contains_text(amax->sku().epilogue, "reduce=amax"));
  auto small = plan(DType::s8, ScatterReduce::amin, false);  // no 8-bit atomics
  ASSERT_TRUE(small.ok()) << small.message();
  EXPECT_TRUE(small->sorted());
  EXPECT_TRUE(contains_text(plan(DType::u8, ScatterReduce::sum, false, false)->sku().epilogue, "include_self=false"));
  auto seg = IndexPlan::select(kTarget, IndexDesc::segment(DType::f32, DType::s32, self, 4, IndexOp::segment_mean));
  ASSERT_TRUE(seg.ok()) << seg.message();
  EXPECT_TRUE(seg->sorted());
  auto prod = IndexPlan::select(kTarget, IndexDesc::segment(DType::s64, DType::s32, self, 4, IndexOp::segment_prod));
  EXPECT_FALSE(prod->sorted());

  auto r = IndexPlan::select(kTarget,
                             IndexDesc::scatter_reduce(DType::f32, DType::s64, self, idx, idx, 0, ScatterReduce::none));
  EXPECT_EQ(r.status(), Status::InvalidProblem);
  EXPECT_MSG(r, "scatter_reduce: reduce expected sum, prod, mean, amax or amin, got none");
  r = IndexPlan::select(kTarget,
                        IndexDesc::scatter_reduce(DType::c64, DType::s64, self, idx, idx, 0, ScatterReduce::sum));
  EXPECT_EQ(r.status(), Status::Unsupported);
  EXPECT_MSG(r, "scatter_reduce: dtype expected one of {");
}

TEST(IndexReduce, Layouts) {
  auto p = IndexPlan::select(kTarget,
                             IndexDesc::scatter_reduce(DType::f32, DType::s64, Shape::of({10, 8}), Shape::of({30, 8}),
                                                       Shape::of({30, 8}), 0, ScatterReduce::amax, false));
  ASSERT_TRUE(p.ok());
  IndexArgs a;
  a.x = ref_of(0, DType::f32, Layout::contiguous({10, 8}));
  a.src = ref_of(1, DType::f32, Layout::contiguous({30, 8}));
  a.index = ref_of(2, DType::s64, Layout::contiguous({30, 8}));
  a.out = mut_of(3, DType::f32, Layout::contiguous({10, 8}));
  EXPECT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
  EXPECT_EQ(p->layout_for(a), "scatter-atomic");
  a.out = mut_of(0, DType::f32, Layout::contiguous({10, 8}));  // in place
  EXPECT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
}

// ---- advanced indexing, one_hot -------------------------------------------------------------------
TEST(IndexAdvanced, DescriptorsAndArgs) {
  const IndexDesc g = IndexDesc::index(DType::bf16, DType::s64, Shape::of({1000, 64, 4096}), Shape::of({7, 3}), 2);
  EXPECT_EQ(g.out_shape, Shape::of({7, 3, 4096}));
  auto plan = IndexPlan::select(kTarget, g);
  ASSERT_TRUE(plan.ok()) << plan.message();
  EXPECT_GE(plan->workspace_size(), 21u * 8);                                    // the linearized offsets
  std::vector<TensorRef> ids = {ref_of(1, DType::s64, strided({7, 3}, {1, 0})),  // broadcast views
                                ref_of(2, DType::s64, strided({7, 3}, {0, 1}))};
  IndexArgs a;
  a.x = ref_of(0, DType::bf16, Layout::contiguous({1000, 64, 4096}));
  a.indices = ids;
  a.out = mut_of(3, DType::bf16, Layout::contiguous({7, 3, 4096}));
  EXPECT_TRUE(plan->can_implement(a).ok()) << plan->can_implement(a).message();
  EXPECT_EQ(plan->layout_for(a), "linearize+gather-rows-16B");  // rows of 4096 bf16 widen to 16-byte words
  IndexArgs b = a;
  std::vector<TensorRef> one = {ids[0]};
  b.indices = one;
  EXPECT_MSG(plan->can_implement(b), "index: indices expected 2 tensors, got 1");
  b = a;
  b.index = ids[0];
  EXPECT_MSG(plan->can_implement(b), "index given but index reads `indices`");
  std::vector<TensorRef> wrong = {ids[0], ref_of(2, DType::s32, strided({7, 3}, {0, 1}))};
  b = a;
  b.indices = wrong;
  EXPECT_MSG(plan->can_implement(b), "index: indices[1] dtype expected int64, got int32");

  auto r = IndexPlan::select(kTarget, IndexDesc::index(DType::f32, DType::s64, Shape::of({4, 5}), Shape::of({3}), 3));
  EXPECT_MSG(r, "index: index tensors expected 1..2 (one per leading dim), got 3");
  r = IndexPlan::select(
      kTarget, IndexDesc::index(DType::f32, DType::s64, Shape::of({4, 5, 6}), Shape::of({1, 1, 1, 1, 1, 1, 1}), 1));
  EXPECT_MSG(r, "expected <= 8");

  const IndexDesc put =
      IndexDesc::index_put(DType::f32, DType::s32, Shape::of({10, 8}), Shape::of({5}), 1, /*accumulate=*/false);
  EXPECT_EQ(put.src_shape, Shape::of({5, 8}));
  auto pp = IndexPlan::select(kTarget, put);
  ASSERT_TRUE(pp.ok()) << pp.message();
  std::vector<TensorRef> pid = {ref_of(1, DType::s32, Layout::contiguous({5}))};
  IndexArgs c;
  c.x = ref_of(0, DType::f32, Layout::contiguous({10, 8}));
  c.indices = pid;
  c.src = ref_of(2, DType::f32, strided({5, 8}, {0, 1}));  // a broadcast value row
  c.out = mut_of(3, DType::f32, Layout::contiguous({10, 8}));
  EXPECT_TRUE(pp->can_implement(c).ok()) << pp->can_implement(c).message();
  EXPECT_EQ(pp->layout_for(c), "linearize+scatter-copy");
  PlanPreference det;
  det.require_deterministic = true;
  EXPECT_EQ(IndexPlan::select(kTarget, put, det)->layout_for(c), "linearize+scatter-sorted-copy");
  auto acc = IndexPlan::select(
      kTarget, IndexDesc::index_put(DType::c64, DType::s32, Shape::of({10, 8}), Shape::of({5}), 1, true));
  EXPECT_EQ(acc.status(), Status::Unsupported);
  EXPECT_MSG(acc, "index_put: accumulate=true expects dtype one of {");
  EXPECT_TRUE(
      IndexPlan::select(kTarget, IndexDesc::index_put(DType::c64, DType::s32, Shape::of({10, 8}), Shape::of({5}), 1,
                                                      false))
          .ok());  // assignments move bytes of any dtype
}

TEST(IndexAdvanced, OneHot) {
  const IndexDesc d = IndexDesc::one_hot(DType::s64, DType::s64, Shape::of({4, 5}), 10);
  EXPECT_EQ(d.out_shape, Shape::of({4, 5, 10}));
  auto p = IndexPlan::select(kTarget, d);
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(p->sku().dtypes, "int64->int64");
  IndexArgs a;
  a.index = ref_of(0, DType::s64, Layout::contiguous({4, 5}));
  a.out = mut_of(1, DType::s64, Layout::contiguous({4, 5, 10}));
  EXPECT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
  EXPECT_EQ(p->layout_for(a), "one-hot");
  a.x = ref_of(2, DType::s64, Layout::contiguous({4, 5}));
  EXPECT_MSG(p->can_implement(a), "x given but one_hot reads `index` only");
  EXPECT_MSG(IndexPlan::select(kTarget, IndexDesc::one_hot(DType::s64, DType::s64, Shape::of({4}), -1)),
             "num_classes expected >= 0");
}

// ---- the select engine ---------------------------------------------------------------------------
TEST(IndexSelectEngine, PhasesAndArgs) {
  const Shape s = Shape::of({3, 5000});
  auto p = IndexPlan::select(kTarget, IndexDesc::nonzero(DType::f32, s, 100));
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(p->sku().dtypes, "float32->int64");
  EXPECT_GE(p->workspace_size(), 2u * 4 * 8);  // tile counts and offsets (15000 elements = 1 tile of 16384)
  IndexArgs a;
  a.x = ref_of(0, DType::f32, Layout::contiguous({3, 5000}));
  a.out = mut_of(1, DType::s64, Layout::contiguous({100, 2}));
  a.count = mut_of(2, DType::s64, Layout::contiguous({1}));
  EXPECT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
  EXPECT_EQ(p->layout_for(a), "select-tiles");
  IndexArgs b = a;
  b.count.dtype = DType::s32;
  EXPECT_MSG(p->can_implement(b), "count expected a non-null int64 tensor of one element");
  b = a;
  b.count.data = fake_ptr(1, 8);
  EXPECT_MSG(p->can_implement(b), "count overlaps out");
  b = a;
  b.out.layout = Layout::contiguous({100, 3});
  EXPECT_MSG(p->can_implement(b), "nonzero: out shape expected [100, 2], got [100, 3]");

  auto count = IndexPlan::select(kTarget, IndexDesc::nonzero(DType::f32, s, 0, -1, SelectPhase::count));
  ASSERT_TRUE(count.ok());
  EXPECT_EQ(count->workspace_size(), p->workspace_size());  // the write phase reuses the count's workspace
  EXPECT_MSG(count->can_implement(a), "out given to the count phase");
  IndexArgs c = a;
  c.out = TensorMut{};
  EXPECT_TRUE(count->can_implement(c).ok()) << count->can_implement(c).message();

  EXPECT_MSG(IndexPlan::select(kTarget, IndexDesc::nonzero(DType::f32, s, -1)), "max_count expected >= 0");

  auto ms = IndexPlan::select(kTarget, IndexDesc::masked_scatter(DType::bf16, s, Shape::of({20})));
  ASSERT_TRUE(ms.ok()) << ms.message();
  IndexArgs m;
  m.x = ref_of(0, DType::bf16, Layout::contiguous({3, 5000}));
  m.mask = ref_of(1, DType::b8, strided({3, 5000}, {0, 1}));  // a broadcast mask row
  m.src = ref_of(2, DType::bf16, Layout::contiguous({20}));
  m.out = mut_of(0, DType::bf16, Layout::contiguous({3, 5000}));  // in place
  EXPECT_TRUE(ms->can_implement(m).ok()) << ms->can_implement(m).message();
  IndexArgs n = m;
  n.mask.dtype = DType::u8;
  EXPECT_MSG(ms->can_implement(n), "masked_scatter: mask dtype expected bool, got uint8");
  n = m;
  n.count = mut_of(3, DType::s64, Layout::contiguous({1}));
  EXPECT_MSG(ms->can_implement(n), "count given but masked_scatter writes none");
  n = m;
  n.error = mut_of(3, DType::s32, Layout::contiguous({1}));
  EXPECT_TRUE(ms->can_implement(n).ok());  // a source too short is reported
}

// ---- lax.gather / lax.scatter ----------------------------------------------------------------------
TEST(IndexLax, GatherShapesAndRefusals) {
  // jnp's x[ids] on [N, D] with ids [B, 1]: offset_dims (1,), collapsed (0,), start_index_map (0,)
  const int off[] = {1}, coll[] = {0}, map[] = {0};
  const int64_t sizes[] = {1, 64};
  const IndexDesc d = IndexDesc::lax_gather(DType::f32, DType::s32, Shape::of({100, 64}), Shape::of({7, 1}),
                                            GatherDims{off, coll, map, -1}, sizes);
  EXPECT_EQ(d.out_shape, Shape::of({7, 64}));
  EXPECT_EQ(d.index_vector_dim, 1);
  auto p = IndexPlan::select(kTarget, d);
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_TRUE(contains_text(p->sku().epilogue, "mode=fill"));
  IndexArgs a;
  a.x = ref_of(0, DType::f32, Layout::contiguous({100, 64}));
  a.index = ref_of(1, DType::s32, Layout::contiguous({7, 1}));
  a.out = mut_of(2, DType::f32, Layout::contiguous({7, 64}));
  EXPECT_TRUE(p->can_implement(a).ok()) << p->can_implement(a).message();
  EXPECT_EQ(p->layout_for(a), "linearize+gather-16B-i64");  // offsets in 4-float units: 16-byte words
  const int64_t wide_rows[] = {1, 128};                     // 32 words a row: a warp per row
  auto rows =
      IndexPlan::select(kTarget, IndexDesc::lax_gather(DType::f32, DType::s32, Shape::of({100, 128}), Shape::of({7, 1}),
                                                       GatherDims{off, coll, map, -1}, wide_rows));
  ASSERT_TRUE(rows.ok()) << rows.message();
  a.x.layout = Layout::contiguous({100, 128});
  a.out.layout = Layout::contiguous({7, 128});
  EXPECT_EQ(rows->layout_for(a), "linearize+gather-rows-16B");

  // dynamic_slice's form: indices [2] (no batch dims), every dim an offset dim
  const int off2[] = {0, 1}, map2[] = {0, 1};
  const int64_t win[] = {3, 5};
  const IndexDesc ds = IndexDesc::lax_gather(DType::bf16, DType::s64, Shape::of({10, 20}), Shape::of({2}),
                                             GatherDims{off2, {}, map2, -1}, win, IndexMode::clip);
  EXPECT_EQ(ds.out_shape, Shape::of({3, 5}));
  EXPECT_TRUE(IndexPlan::select(kTarget, ds).ok());

  const int64_t big[] = {1, 65};
  auto r = IndexPlan::select(kTarget, IndexDesc::lax_gather(DType::f32, DType::s32, Shape::of({100, 64}),
                                                            Shape::of({7, 1}), GatherDims{off, coll, map, -1}, big));
  EXPECT_MSG(r, "lax_gather: slice_sizes[1]=65 expected in [0, 64]");
  const int map_bad[] = {0, 1};
  r = IndexPlan::select(kTarget, IndexDesc::lax_gather(DType::f32, DType::s32, Shape::of({100, 64}), Shape::of({7, 1}),
                                                       GatherDims{off, coll, map_bad, -1}, sizes));
  EXPECT_MSG(r, "start_index_map expected indices.shape[1]=1 entries, got 2");
  const int off_bad[] = {1, 0};
  r = IndexPlan::select(kTarget, IndexDesc::lax_gather(DType::f32, DType::s32, Shape::of({100, 64}), Shape::of({7, 1}),
                                                       GatherDims{off_bad, {}, map, -1}, sizes));
  EXPECT_MSG(r, "offset_dims [1, 0] expected strictly increasing entries");
  const int64_t wide[] = {2, 64};
  r = IndexPlan::select(kTarget, IndexDesc::lax_gather(DType::f32, DType::s32, Shape::of({100, 64}), Shape::of({7, 1}),
                                                       GatherDims{off, coll, map, -1}, wide));
  EXPECT_MSG(r, "collapsed dim 0 expected slice size <= 1, got 2");
}

TEST(IndexLax, ScatterRefusals) {
  const int win[] = {1}, ins[] = {0}, map[] = {0};
  const ScatterDims dims{win, ins, map, -1};
  auto ok = IndexPlan::select(kTarget,
                              IndexDesc::lax_scatter(DType::f32, DType::s32, Shape::of({100, 64}), Shape::of({7, 1}),
                                                     Shape::of({7, 64}), dims, ScatterReduce::amax, IndexMode::clip));
  ASSERT_TRUE(ok.ok()) << ok.message();
  auto r =
      IndexPlan::select(kTarget, IndexDesc::lax_scatter(DType::f32, DType::s32, Shape::of({100, 64}), Shape::of({7, 1}),
                                                        Shape::of({6, 64}), dims, ScatterReduce::sum));
  EXPECT_MSG(r, "updates.shape[0]=6 expected indices.shape[0]=7 (a scatter dim)");
  r = IndexPlan::select(kTarget, IndexDesc::lax_scatter(DType::f32, DType::s32, Shape::of({100, 64}), Shape::of({7, 1}),
                                                        Shape::of({7, 65}), dims, ScatterReduce::sum));
  EXPECT_MSG(r, "updates window along operand dim 1 is 65, expected <= 64");
  r = IndexPlan::select(kTarget, IndexDesc::lax_scatter(DType::f32, DType::s32, Shape::of({100, 64}), Shape::of({7, 1}),
                                                        Shape::of({7, 64}), dims, ScatterReduce::mean));
  EXPECT_MSG(r, "lax_scatter: reduce expected none, sum, prod, amax or amin, got mean");
  r = IndexPlan::select(kTarget, IndexDesc::lax_scatter(DType::b8, DType::s32, Shape::of({100, 64}), Shape::of({7, 1}),
                                                        Shape::of({7, 64}), dims, ScatterReduce::sum));
  EXPECT_MSG(r, "lax_scatter: reduce=sum expects dtype one of {");
}

}  // namespace
}  // namespace baracuda

namespace baracuda {
namespace {
// ---- embedding_bag, embedding_renorm, tril/triu_indices (rows / generate engines) ----------------
IndexDesc bag_desc(ScatterReduce mode, Direction dir = Direction::Forward, EmbeddingBagOptions opt = {},
                   DType dt = DType::f32) {
  // 25 ids in 4 bags (5 offsets with include_last_offset) of a [30, 16] table
  return IndexDesc::embedding_bag(dt, DType::s64, 30, 16, Shape::of({25}), opt.include_last_offset ? 5 : 4, mode, opt,
                                  dir);
}

IndexArgs bag_args(const IndexDesc& d, DType dt = DType::f32) {
  IndexArgs a;
  const bool bw = d.direction == Direction::Backward;
  a.x = ref_of(0, dt,
               Layout::contiguous(bw ? std::initializer_list<int64_t>{4, 16} : std::initializer_list<int64_t>{30, 16}));
  a.index = ref_of(1, DType::s64, Layout::contiguous({25}));
  a.offsets = ref_of(2, DType::s64, Layout::contiguous({d.include_last_offset ? 5 : 4}));
  a.out = mut_of(
      3, dt, Layout::contiguous(bw ? std::initializer_list<int64_t>{30, 16} : std::initializer_list<int64_t>{4, 16}));
  if (d.reduce == ScatterReduce::amax) a.max_indices = mut_of(4, DType::s64, Layout::contiguous({4, 16}));
  if (d.per_sample_weights) a.per_sample_weights = ref_of(5, dt, Layout::contiguous({25}));
  return a;
}
}  // namespace

TEST(IndexRows, Descriptors) {
  const IndexDesc f = bag_desc(ScatterReduce::mean);
  EXPECT_EQ(f.out_shape, Shape::of({4, 16}));
  EXPECT_EQ(f.num_segments, 4);
  EmbeddingBagOptions last;
  last.include_last_offset = true;
  EXPECT_EQ(bag_desc(ScatterReduce::sum, Direction::Forward, last).num_segments, 4);  // 5 offsets, 4 bags
  const IndexDesc b = bag_desc(ScatterReduce::sum, Direction::Backward);
  EXPECT_EQ(b.in_shape, Shape::of({4, 16}));
  EXPECT_EQ(b.out_shape, Shape::of({30, 16}));
  const IndexDesc two_d =
      IndexDesc::embedding_bag(DType::bf16, DType::s32, 30, 8, Shape::of({6, 3}), 0, ScatterReduce::amax);
  EXPECT_EQ(two_d.out_shape, Shape::of({6, 8}));
  EXPECT_TRUE(IndexPlan::select(kTarget, two_d).ok());

  // tril / triu of a 4 x 8 matrix: 1 + 2 + 3 + 4 and 8 + 7 + 6 + 5 pairs
  EXPECT_EQ(IndexDesc::tril_indices(DType::s64, 4, 8).out_shape, Shape::of({2, 10}));
  EXPECT_EQ(IndexDesc::triu_indices(DType::s64, 4, 8).out_shape, Shape::of({2, 26}));
  EXPECT_EQ(IndexDesc::tril_indices(DType::s64, 4, 8, -2).out_shape, Shape::of({2, 3}));
  EXPECT_EQ(IndexDesc::triu_indices(DType::s32, 4, 8, 6).out_shape, Shape::of({2, 3}));
  EXPECT_EQ(IndexDesc::tril_indices(DType::s64, 0, 8).out_shape, Shape::of({2, 0}));
  EXPECT_EQ(IndexDesc::triu_indices(DType::s64, 5, 3, -10).out_shape, Shape::of({2, 15}));
  // select() recomputes the output from (row, col, offset) rather than trusting out_shape.
  auto tri = IndexDesc::tril_indices(DType::s64, 4, 8);
  EXPECT_TRUE(IndexPlan::select(kTarget, tri).ok());
  tri.in_shape.dims[0] = 6;  // sizes changed after the factory: [2, 10] is stale (now 21 pairs)
  EXPECT_FAILS_WITH(IndexPlan::select(kTarget, tri), Status::InvalidProblem, "tril_indices",
                    "out_shape expected [2, 21]", "got [2, 10]");
}

TEST(IndexRows, DescriptorRefusals) {
  auto r = IndexPlan::select(kTarget, bag_desc(ScatterReduce::prod));
  EXPECT_FAILS_WITH(r, Status::InvalidProblem, "embedding_bag: mode expected sum, mean or max (amax), got prod");
  EmbeddingBagOptions psw;
  psw.per_sample_weights = true;
  r = IndexPlan::select(kTarget, bag_desc(ScatterReduce::mean, Direction::Forward, psw));
  EXPECT_FAILS_WITH(r, Status::InvalidProblem, "per_sample_weights expects mode sum, got mean");
  EmbeddingBagOptions sgf;
  sgf.scale_grad_by_freq = true;
  r = IndexPlan::select(kTarget, bag_desc(ScatterReduce::amax, Direction::Backward, sgf));
  EXPECT_FAILS_WITH(r, Status::InvalidProblem, "scale_grad_by_freq expects mode sum or mean, got max");
  EmbeddingBagOptions pad;
  pad.padding_idx = 30;
  r = IndexPlan::select(kTarget, bag_desc(ScatterReduce::sum, Direction::Forward, pad));
  EXPECT_FAILS_WITH(r, Status::InvalidProblem, "padding_idx expected -1 (none) or in [0, 30)", "got 30");
  EmbeddingBagOptions last;
  last.include_last_offset = true;
  r = IndexPlan::select(
      kTarget, IndexDesc::embedding_bag(DType::f32, DType::s64, 30, 16, Shape::of({25}), 0, ScatterReduce::sum, last));
  EXPECT_FAILS_WITH(r, Status::InvalidProblem, "include_last_offset expects at least 1 offset, got 0");
  r = IndexPlan::select(
      kTarget, IndexDesc::embedding_bag(DType::f32, DType::s64, 30, 16, Shape::of({2, 3, 4}), 0, ScatterReduce::sum));
  EXPECT_FAILS_WITH(r, Status::InvalidProblem, "input expected 1-d (with offsets) or 2-d (bags x ids), got rank 3");
  r = IndexPlan::select(kTarget, IndexDesc::embedding_bag(DType::f32, DType::s64, 30, 16, Shape::of({5, 5}), 0,
                                                          ScatterReduce::sum, last));
  EXPECT_FAILS_WITH(r, Status::InvalidProblem, "include_last_offset expects 1-d ids with offsets, got 2-d ids");
  r = IndexPlan::select(
      kTarget, IndexDesc::embedding_bag(DType::f32, DType::f32, 30, 16, Shape::of({25}), 4, ScatterReduce::sum));
  EXPECT_FAILS_WITH(r, Status::InvalidProblem, "index dtype expected int32 or int64, got float32");
  r = IndexPlan::select(kTarget, bag_desc(ScatterReduce::sum, Direction::Forward, {}, DType::s32));
  EXPECT_FAILS_WITH(r, Status::Unsupported, "embedding_bag: dtype expected one of {", "got int32");

  r = IndexPlan::select(kTarget, IndexDesc::embedding_renorm(DType::f32, DType::s64, 10, 8, Shape::of({3}), 1.0, 0));
  EXPECT_FAILS_WITH(r, Status::InvalidProblem, "embedding_renorm: norm_type expected > 0");
  IndexDesc rb = IndexDesc::embedding_renorm(DType::f32, DType::s64, 10, 8, Shape::of({3}), 1.0);
  rb.direction = Direction::Backward;
  EXPECT_FAILS_WITH(IndexPlan::select(kTarget, rb), Status::Unsupported, "embedding_renorm has no backward plan");

  r = IndexPlan::select(kTarget, IndexDesc::tril_indices(DType::s64, -1, 3));
  EXPECT_FAILS_WITH(r, Status::InvalidProblem, "tril_indices: row expected >= 0, got -1");
  r = IndexPlan::select(kTarget, IndexDesc::triu_indices(DType::s64, 3, -2));
  EXPECT_FAILS_WITH(r, Status::InvalidProblem, "triu_indices: col expected >= 0, got -2");
  r = IndexPlan::select(kTarget, IndexDesc::tril_indices(DType::s64, int64_t{1} << 40, int64_t{1} << 40));
  EXPECT_FAILS_WITH(r, Status::InvalidProblem, "overflows int64");
  r = IndexPlan::select(kTarget, IndexDesc::tril_indices(DType::s32, 2, int64_t{1} << 32));
  EXPECT_FAILS_WITH(r, Status::InvalidProblem, "expected to fit dtype int32");
  r = IndexPlan::select(kTarget, IndexDesc::tril_indices(DType::f32, 2, 3));
  EXPECT_FAILS_WITH(r, Status::Unsupported, "tril_indices: dtype expected one of {int32, int64}, got float32");
}

TEST(IndexRows, PathsAndPrecision) {
  auto fw = IndexPlan::select(kTarget, bag_desc(ScatterReduce::sum));
  ASSERT_TRUE(fw.ok()) << fw.message();
  EXPECT_EQ(fw->workspace_size(), 0u);
  EXPECT_TRUE(fw->precision().deterministic);
  EXPECT_EQ(fw->precision().accumulator, DType::f32);
  EXPECT_TRUE(contains_text(fw->sku().layout, "bag-forward"));
  EXPECT_TRUE(contains_text(fw->sku().epilogue, "mode=sum"));

  auto atomic = IndexPlan::select(kTarget, bag_desc(ScatterReduce::mean, Direction::Backward));
  ASSERT_TRUE(atomic.ok()) << atomic.message();
  EXPECT_FALSE(atomic->sorted());
  EXPECT_FALSE(atomic->precision().deterministic);
  EXPECT_EQ(atomic->workspace_size(), 0u);
  EXPECT_TRUE(contains_text(atomic->sku().layout, "bag-backward-atomic"));

  PlanPreference det;
  det.require_deterministic = true;
  auto sorted = IndexPlan::select(kTarget, bag_desc(ScatterReduce::mean, Direction::Backward), det);
  ASSERT_TRUE(sorted.ok());
  EXPECT_TRUE(sorted->sorted());
  EXPECT_TRUE(sorted->precision().bit_stable);
  EXPECT_GE(sorted->workspace_size(), 5u * 25 * 8 + 4 * 8);  // keys, positions, bag of each position, bag sizes
  EXPECT_TRUE(contains_text(sorted->sku().layout, "bag-backward-sorted"));

  EmbeddingBagOptions sgf;
  sgf.scale_grad_by_freq = true;
  auto freq = IndexPlan::select(kTarget, bag_desc(ScatterReduce::sum, Direction::Backward, sgf));
  ASSERT_TRUE(freq.ok());
  EXPECT_TRUE(freq->sorted());  // the counts come from the sorted runs
  EXPECT_TRUE(contains_text(freq->precision().note, "divided by its id's count"));

  auto mx = IndexPlan::select(kTarget, bag_desc(ScatterReduce::amax, Direction::Backward));
  ASSERT_TRUE(mx.ok());
  EXPECT_EQ(mx->sku().layout, "bag-max-scatter-atomic");
  auto mxs = IndexPlan::select(kTarget, bag_desc(ScatterReduce::amax, Direction::Backward), det);
  ASSERT_TRUE(mxs.ok());
  EXPECT_EQ(mxs->sku().layout, "bag-max-scatter-sorted");
  EXPECT_GE(mxs->workspace_size(), 4u * 4 * 16 * 8);
  // f16 / bf16 take the sorted path unasked: atomics of their width would round every add
  for (DType dt : {DType::f16, DType::bf16}) {
    auto narrow = IndexPlan::select(kTarget, bag_desc(ScatterReduce::sum, Direction::Backward, {}, dt));
    ASSERT_TRUE(narrow.ok()) << narrow.message();
    EXPECT_TRUE(narrow->sorted());
    EXPECT_TRUE(narrow->precision().deterministic);
    EXPECT_EQ(narrow->precision().accumulator, DType::f32);
    EXPECT_TRUE(contains_text(narrow->sku().layout, "bag-backward-sorted"));
    EXPECT_TRUE(contains_text(narrow->precision().note, "atomics (they round every add)"));
    auto narrow_max = IndexPlan::select(kTarget, bag_desc(ScatterReduce::amax, Direction::Backward, {}, dt));
    ASSERT_TRUE(narrow_max.ok()) << narrow_max.message();
    EXPECT_EQ(narrow_max->sku().layout, "bag-max-scatter-sorted");
  }

  auto renorm =
      IndexPlan::select(kTarget, IndexDesc::embedding_renorm(DType::bf16, DType::s32, 1000, 8, Shape::of({3}), 1.0));
  ASSERT_TRUE(renorm.ok());
  EXPECT_EQ(renorm->workspace_size(), 256u);  // 1000 claim bits in 32 words, 256-byte aligned
  EXPECT_TRUE(renorm->precision().deterministic);
  auto renorm_big =
      IndexPlan::select(kTarget, IndexDesc::embedding_renorm(DType::f32, DType::s64, 8192, 8, Shape::of({3}), 1.0));
  ASSERT_TRUE(renorm_big.ok());
  EXPECT_EQ(renorm_big->workspace_size(), 1280u);  // 8192 claim bits in 256 words, the abort word: 1028 -> 1280
  auto tri = IndexPlan::select(kTarget, IndexDesc::triu_indices(DType::s32, 4, 8));
  ASSERT_TRUE(tri.ok());
  EXPECT_EQ(tri->sku().dtypes, "sizes->int32");

  auto emb = IndexPlan::select(
      kTarget, IndexDesc::embedding(DType::f32, DType::s64, 100, 64, Shape::of({7}), -1, Direction::Backward, true));
  ASSERT_TRUE(emb.ok());
  EXPECT_TRUE(contains_text(emb->precision().note, "scale_grad_by_freq"));
}

TEST(IndexRows, Args) {
  const IndexDesc d = bag_desc(ScatterReduce::amax);
  auto plan = IndexPlan::select(kTarget, d);
  ASSERT_TRUE(plan.ok());
  const IndexArgs a = bag_args(d);
  EXPECT_TRUE(plan->can_implement(a).ok()) << plan->can_implement(a).message();
  EXPECT_EQ(plan->layout_for(a), "bag-forward-16B");
  IndexArgs b = a;
  b.x.layout = strided({30, 16}, {17, 1});  // rows 17 floats apart: no 16-byte vectors
  EXPECT_EQ(plan->layout_for(b), "bag-forward-4B");
  b = a;
  b.offsets = {};
  EXPECT_FAILS_WITH(plan->can_implement(b), Status::InvalidProblem, "offsets expected for 1-d ids (shape [4])");
  b = a;
  b.offsets.dtype = DType::s32;
  EXPECT_FAILS_WITH(plan->can_implement(b), Status::InvalidProblem, "offsets dtype expected int64, got int32");
  b = a;
  b.max_indices = {};
  EXPECT_FAILS_WITH(plan->can_implement(b), Status::InvalidProblem, "max_indices expected for mode max");
  b = a;
  b.max_indices.layout = Layout::contiguous({4, 15});
  EXPECT_FAILS_WITH(plan->can_implement(b), Status::InvalidProblem, "max_indices shape expected [4, 16], got [4, 15]");
  b = a;
  b.per_sample_weights = ref_of(5, DType::f32, Layout::contiguous({25}));
  EXPECT_FAILS_WITH(plan->can_implement(b), Status::InvalidProblem,
                    "per_sample_weights given but the descriptor has none");
  b = a;
  b.weight = ref_of(6, DType::f32, Layout::contiguous({30, 16}));
  EXPECT_FAILS_WITH(plan->can_implement(b), Status::InvalidProblem, "weight given to the forward");
  b = a;
  b.out.data = fake_ptr(0, 64);  // inside the weight
  EXPECT_FAILS_WITH(plan->can_implement(b), Status::InvalidProblem, "out overlaps x");
  b = a;
  b.src = ref_of(7, DType::f32, Layout::contiguous({25}));
  EXPECT_FAILS_WITH(plan->can_implement(b), Status::InvalidProblem, "src given but embedding_bag takes none");

  // 2-d ids: no offsets
  const IndexDesc d2 =
      IndexDesc::embedding_bag(DType::f32, DType::s64, 30, 16, Shape::of({5, 3}), 0, ScatterReduce::sum);
  auto p2 = IndexPlan::select(kTarget, d2);
  ASSERT_TRUE(p2.ok());
  IndexArgs c;
  c.x = ref_of(0, DType::f32, Layout::contiguous({30, 16}));
  c.index = ref_of(1, DType::s64, Layout::contiguous({5, 3}));
  c.out = mut_of(3, DType::f32, Layout::contiguous({5, 16}));
  EXPECT_TRUE(p2->can_implement(c).ok()) << p2->can_implement(c).message();
  c.offsets = ref_of(2, DType::s64, Layout::contiguous({5}));
  EXPECT_FAILS_WITH(p2->can_implement(c), Status::InvalidProblem, "offsets given but 2-d ids make one bag a row");

  // backward: grad_weight and/or the per-sample weights' gradient
  EmbeddingBagOptions psw;
  psw.per_sample_weights = true;
  const IndexDesc bd = bag_desc(ScatterReduce::sum, Direction::Backward, psw);
  auto bp = IndexPlan::select(kTarget, bd);
  ASSERT_TRUE(bp.ok());
  IndexArgs g = bag_args(bd);
  EXPECT_TRUE(bp->can_implement(g).ok()) << bp->can_implement(g).message();
  EXPECT_EQ(bp->layout_for(g), "bag-backward-atomic-16B");
  g.grad_per_sample_weights = mut_of(8, DType::f32, Layout::contiguous({25}));
  EXPECT_FAILS_WITH(bp->can_implement(g), Status::InvalidProblem, "weight expected (the table [30, 16])");
  g.weight = ref_of(9, DType::f32, Layout::contiguous({30, 16}));
  EXPECT_TRUE(bp->can_implement(g).ok()) << bp->can_implement(g).message();
  EXPECT_EQ(bp->layout_for(g), "bag-backward-atomic-16B+bag-psw-grad-16B");
  g.out = {};
  EXPECT_TRUE(bp->can_implement(g).ok()) << bp->can_implement(g).message();
  EXPECT_EQ(bp->layout_for(g), "bag-psw-grad-16B");
  g.grad_per_sample_weights = {};
  g.weight = {};
  EXPECT_FAILS_WITH(bp->can_implement(g), Status::InvalidProblem,
                    "expected out (grad_weight) or grad_per_sample_weights");

  // renorm and tri: the roles they take
  auto rp =
      IndexPlan::select(kTarget, IndexDesc::embedding_renorm(DType::f32, DType::s64, 30, 16, Shape::of({7}), 1.0));
  ASSERT_TRUE(rp.ok());
  IndexArgs ra;
  ra.index = ref_of(1, DType::s64, Layout::contiguous({7}));
  ra.out = mut_of(0, DType::f32, Layout::contiguous({30, 16}));
  EXPECT_TRUE(rp->can_implement(ra).ok()) << rp->can_implement(ra).message();
  EXPECT_EQ(rp->layout_for(ra), "renorm-rows");
  auto run = rp->run(nullptr, {}, ra);
  EXPECT_EQ(run.status(), Status::WorkspaceTooSmall);
  EXPECT_MSG(run, "embedding_renorm: workspace expected >= 256 bytes, got 0");
  ra.x = ref_of(2, DType::f32, Layout::contiguous({30, 16}));
  EXPECT_FAILS_WITH(rp->can_implement(ra), Status::InvalidProblem,
                    "x given but embedding_renorm updates `out` in place");
  auto tp = IndexPlan::select(kTarget, IndexDesc::tril_indices(DType::s64, 4, 8));
  ASSERT_TRUE(tp.ok());
  IndexArgs ta;
  ta.out = mut_of(0, DType::s64, Layout::contiguous({2, 10}));
  EXPECT_TRUE(tp->can_implement(ta).ok());
  EXPECT_EQ(tp->layout_for(ta), "tri-indices");
  ta.out.layout = Layout::contiguous({2, 11});
  EXPECT_FAILS_WITH(tp->can_implement(ta), Status::InvalidProblem, "out shape expected [2, 10], got [2, 11]");
  ta.out.layout = Layout::contiguous({2, 10});
  ta.index = ref_of(1, DType::s64, Layout::contiguous({3}));
  EXPECT_FAILS_WITH(tp->can_implement(ta), Status::InvalidProblem, "index given but tril_indices takes none");

  // the other ops refuse embedding_bag's roles
  auto gp = IndexPlan::select(kTarget, IndexDesc::index_select(DType::f32, DType::s64, Shape::of({4, 8}), 3, 0));
  ASSERT_TRUE(gp.ok());
  IndexArgs ga;
  ga.x = ref_of(0, DType::f32, Layout::contiguous({4, 8}));
  ga.index = ref_of(1, DType::s64, Layout::contiguous({3}));
  ga.out = mut_of(2, DType::f32, Layout::contiguous({3, 8}));
  ga.offsets = ref_of(3, DType::s64, Layout::contiguous({2}));
  EXPECT_FAILS_WITH(gp->can_implement(ga), Status::InvalidProblem, "offsets given but only embedding_bag takes it");
}
}  // namespace baracuda
