// Bad descriptors never crash select(): a deterministic randomized test over every family's plans.
// Each case starts from a descriptor the family's factories build (select() accepts it), sets 1-3
// fields to hostile values (negative, zero and huge sizes, ranks outside 0..8, out-of-range enum
// ids, far axes, NaN / inf / negative scalars, mismatched dtypes, packed int4 where it makes no
// sense) and calls select() on Target::offline(). It must return; a refusal must carry a
// message that names the op or its family; an accepted plan must report a workspace below 2^44
// bytes and a SKU of its family. Accepted plans also get deliberately wrong tensors (nothing, null
// pointers, wrong dtypes and shapes, fake pointers from test_util.hpp) that can_implement must refuse
// with a message. run() is never called. Every case seeds its own std::mt19937_64 from (family,
// case number), so a failure names a case that replays alone; the failure lists the base descriptor
// and the fields set.
//
// Inputs that read out of bounds inside the library when this test was written (DType ids past the
// table, an elementwise out_shape whose rank field is outside 0..8) are generated only by
// FormerlyUnsafeInputs, which keeps them apart so a regression names its class.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "baracuda/ops/ctc_loss.hpp"
#include "baracuda/ops/elementwise.hpp"
#include "baracuda/ops/gemm.hpp"
#include "baracuda/ops/gguf.hpp"
#include "baracuda/ops/index.hpp"
#include "baracuda/ops/loss.hpp"
#include "baracuda/ops/norm.hpp"
#include "baracuda/ops/quant.hpp"
#include "test_util.hpp"

namespace baracuda {
namespace {

using test::fake_ptr;

constexpr uint64_t kSeed = 0x5eedba2ac0da0001ull;
constexpr uint64_t kMaxWorkspace = uint64_t{1} << 44;
const Target kOff = Target::offline();

/// Set by FormerlyUnsafeInputs: the input classes that used to read out of bounds in the library
/// (see there) are generated too.
bool g_known_unsafe = false;
/// The case being run (descriptor and fields set), for a debugger when a case crashes.
std::string g_current_case;

// ---- hostile values ------------------------------------------------------------------------------------
/// One case's random source and the record of what it changed ("field=value; ...").
class Fuzz {
 public:
  Fuzz(uint64_t family, uint64_t index)
      : g_(kSeed ^ (family * 0x9e3779b97f4a7c15ull) ^ (index * 0xbf58476d1ce4e5b9ull)) {}

  uint64_t below(uint64_t n) { return n == 0 ? 0 : g_() % n; }
  bool coin() { return (g_() >> 17) & 1; }
  template <class T>
  T pick(std::initializer_list<T> v) {
    return v.begin()[below(v.size())];
  }

  int64_t dim() {
    return pick<int64_t>({-1, -2, -7, -(int64_t{1} << 40), INT64_MIN, INT64_MIN + 1, 0, 0, int64_t{1} << 31,
                          (int64_t{1} << 32) + 1, int64_t{1} << 40, INT64_MAX / 3, INT64_MAX, 3, 5});
  }
  int rank() { return pick<int>({-1, -8, 9, 9, 16, 100, INT_MAX, INT_MIN}); }
  /// Any dtype of the table (packed s4 / u4 included).
  DType dtype() {
    if (g_known_unsafe && below(3) == 0)
      // Ids up to 31 only: bit() (include/baracuda/core/dtype.hpp) still shifts past DTypeSet's 32
      // bits for ids >= 32, which alias real dtypes (32, 33, 64 were accepted). Its guard changes a
      // header every translation unit includes, so it lands with a full CI rebuild.
      return static_cast<DType>(pick<int>({kNumDTypes, kNumDTypes + 1, 20, 24, 28, 31}));
    return static_cast<DType>(below(kNumDTypes));
  }
  double real() {
    return pick<double>({std::numeric_limits<double>::quiet_NaN(), HUGE_VAL, -HUGE_VAL, -1.0, -0.0, 0.0, 1e-320, 1e-45,
                         1e300, 3.5e38, 9.3e18, -9.3e18, 0.5, 3.0});
  }
  int axis() { return pick<int>({INT_MIN, INT_MIN + 1, -1000, -9, -3, -1, 2, 7, 8, 9, 1000, INT_MAX}); }
  int count() { return pick<int>({INT_MIN, -1, 0, 1, 9, 17, 1000, INT_MAX}); }
  int64_t i64() {
    return coin() ? dim() : pick<int64_t>({-100, -9, -1, 0, 1, 2, 8, 9, 255, 256, INT32_MAX, int64_t{1} << 33});
  }
  /// An enum value: sometimes a valid one, mostly one past the end of the enum.
  template <class E>
  E enumv(int valid, int max_value) {
    if (below(4) == 0) return static_cast<E>(below(static_cast<uint64_t>(valid)));
    return static_cast<E>(pick<int>({valid, valid + 1, max_value / 2 + 1, max_value}) & max_value);
  }

  // ---- the record ----
  void note(const std::string& field, const std::string& value) { log_ += "; " + field + "=" + value; }
  void note(const std::string& field, int64_t v) { note(field, std::to_string(v)); }
  void note(const std::string& field, int v) { note(field, std::to_string(v)); }
  void note(const std::string& field, bool v) { note(field, std::string(v ? "true" : "false")); }
  void note(const std::string& field, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    note(field, std::string(buf));
  }
  void note(const std::string& field, DType t) {
    const int id = static_cast<int>(t);
    note(field, id < kNumDTypes ? std::string(name(t)) : "dtype#" + std::to_string(id));
  }
  const std::string& log() const { return log_; }

  /// Sets `s` to a hostile shape: a negative / zero / huge dim, a rank outside 0..8 (the dims
  /// array stays as it is: only `rank` says more; with !rank_field, Shape::of's rank -1 instead),
  /// Shape::of with 9 dims (rank -1), rank 0.
  void shape(Shape& s, const std::string& f, bool rank_field = true) {
    switch (below(7)) {
      case 0:
      case 1:
        if (s.rank > 0 && s.rank <= kMaxRank) {
          const int i = static_cast<int>(below(static_cast<uint64_t>(s.rank)));
          s.dims[i] = dim();
          note(f + ".dims[" + std::to_string(i) + "]", s.dims[i]);
        } else {
          s = Shape::of({dim(), 4});
          note(f, shape_str(s));
        }
        return;
      case 2:
        if (rank_field) {
          s.rank = rank();
          note(f + ".rank", s.rank);
          return;
        }
        [[fallthrough]];
      case 3:
        s = Shape::of({1, 2, 1, 2, 1, 2, 1, 2, 1});
        note(f, std::string("Shape::of(9 dims) (rank -1)"));
        return;
      case 4:
        s = Shape{};
        note(f, std::string("[] (rank 0)"));
        return;
      case 5:
        s = pick<Shape>({Shape::of({int64_t{1} << 40, int64_t{1} << 40, int64_t{1} << 40}),
                         Shape::of({INT64_MAX / 3, 3}), Shape::of({int64_t{1} << 31, int64_t{1} << 31}),
                         Shape::of({1, 1, 1, 1, 1, 1, 1, INT64_MAX})});
        note(f, shape_str(s));
        return;
      default:
        if (s.rank > 0 && s.rank <= kMaxRank) {
          s.dims[below(static_cast<uint64_t>(s.rank))] = 0;
        } else {
          s = Shape::of({0, 4});
        }
        note(f, shape_str(s));
        return;
    }
  }

  /// Shape text that never reads past the dims array (Shape::str() trusts rank).
  static std::string shape_str(const Shape& s) {
    if (s.rank < 0 || s.rank > kMaxRank) return "<rank " + std::to_string(s.rank) + ">";
    std::string r = "[";
    for (int i = 0; i < s.rank; ++i) r += (i ? ", " : "") + std::to_string(s.dims[i]);
    return r + "]";
  }

 private:
  std::mt19937_64 g_;
  std::string log_;
};

/// A mutator sets one field of a descriptor to a hostile value and notes it.
template <class Desc>
using Mutator = std::function<void(Desc&, Fuzz&)>;

// ---- the checks ----------------------------------------------------------------------------------------
struct Findings {
  std::vector<std::string> problems;
  int cases = 0, accepted = 0, refused = 0, arg_checks = 0;
  void add(const std::string& where, const std::string& what) { problems.push_back(where + ": " + what); }
};

bool contains_any(const std::string& msg, const std::vector<std::string>& tokens) {
  for (const auto& t : tokens)
    if (!t.empty() && msg.find(t) != std::string::npos) return true;
  return false;
}

/// A shape with a zero size (an empty problem: plans need no tensors for it).
bool has_zero(const Shape& s) {
  if (s.rank < 0 || s.rank > kMaxRank) return false;
  for (int i = 0; i < s.rank; ++i)
    if (s.dims[i] == 0) return true;
  return false;
}

/// Why an accepted plan should not compute with `s` ("" when it can): a rank outside 0..8, a
/// negative size, or an element count past int64 (it wraps, and the wrapped count is what the
/// plan then sizes and checks with).
std::string shape_problem(const Shape& s) {
  if (s.rank < 0 || s.rank > kMaxRank) return "rank " + std::to_string(s.rank) + " outside 0..8";
  for (int i = 0; i < s.rank; ++i)
    if (s.dims[i] < 0) return "negative size " + std::to_string(s.dims[i]);
  if (has_zero(s)) return {};
  int64_t n = 1;
  for (int i = 0; i < s.rank; ++i)
    if (__builtin_mul_overflow(n, s.dims[i], &n)) return "element count overflows int64";
  return {};
}

/// Records each named shape of an accepted descriptor that shape_problem() objects to; returns
/// whether there was none (the argument checks are pointless otherwise).
bool accepted_shapes_ok(std::initializer_list<std::pair<std::string, const Shape*>> shapes, const std::string& where,
                        Findings& f) {
  bool ok = true;
  for (const auto& [field, s] : shapes) {
    const std::string p = shape_problem(*s);
    if (p.empty()) continue;
    f.add(where, "accepted " + field + " " + Fuzz::shape_str(*s) + ": " + p);
    ok = false;
  }
  return ok;
}

/// A message a user can read: non-empty, bounded, no control bytes besides newline and tab (a
/// string read through a stray pointer would show here, if it did not crash).
std::string message_problem(const std::string& msg, const std::vector<std::string>& tokens) {
  if (msg.empty()) return "refused with an empty message";
  if (msg.size() > 4096) return "refused with a " + std::to_string(msg.size()) + "-byte message";
  for (unsigned char c : msg)
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f)
      return "refused with a control byte " + std::to_string(c) + " in its message: " + msg;
  if (!contains_any(msg, tokens)) {
    std::string want;
    for (const auto& t : tokens) want += (want.empty() ? "'" : ", '") + t + "'";
    return "refusal does not name the op or family (" + want + "): " + msg;
  }
  return {};
}

template <class Plan>
bool check_select(const Result<Plan>& r, const char* family, const std::vector<std::string>& tokens,
                  const std::string& where, Findings& f) {
  ++f.cases;
  if (!r.ok()) {
    ++f.refused;
    if (r.status() == Status::Ok) f.add(where, "failed Result with Status::Ok");
    const std::string p = message_problem(r.message(), tokens);
    if (!p.empty()) f.add(where, p);
    return false;
  }
  ++f.accepted;
  const size_t ws = r->workspace_size();
  if (ws >= kMaxWorkspace) f.add(where, "accepted with workspace_size " + std::to_string(ws) + " >= 2^44");
  if (r->sku().category != family) f.add(where, "accepted with sku().category '" + r->sku().category + "'");
  if (r->sku().op.empty()) f.add(where, "accepted with an empty sku().op");
  return true;
}

/// can_implement(args) must refuse with a message (`why`: what is wrong with the args).
template <class Plan, class Args>
void expect_refused(const Plan& plan, const Args& args, const std::string& why, const std::string& where, Findings& f) {
  ++f.arg_checks;
  auto r = plan.can_implement(args);
  if (r.ok())
    f.add(where, "can_implement accepted " + why);
  else if (r.message().empty())
    f.add(where, "can_implement refused " + why + " with an empty message");
  else if (r.status() == Status::Ok)
    f.add(where, "can_implement failed with Status::Ok for " + why);
}

/// Applies 1-3 mutators.
template <class Desc>
void mutate(Desc& d, Fuzz& z, const std::vector<Mutator<Desc>>& ms) {
  const int n = 1 + static_cast<int>(z.below(3));
  for (int i = 0; i < n; ++i) ms[z.below(ms.size())](d, z);
}

/// A valid shape small enough to build contiguous fake tensors of.
bool modest(const Shape& s) {
  if (s.rank < 0 || s.rank > kMaxRank) return false;
  int64_t n = 1;
  for (int i = 0; i < s.rank; ++i) {
    if (s.dims[i] < 0 || s.dims[i] > (int64_t{1} << 20)) return false;
    n *= std::max<int64_t>(s.dims[i], 1);
    if (n > (int64_t{1} << 30)) return false;
  }
  return true;
}
Layout layout_of(const Shape& s) { return Layout::contiguous(s.rank, s.dims.data()); }

/// A layout whose rank field is out of range (its arrays untouched): eight dims of 2 and rank 9,
/// or rank -1.
Layout bad_rank_layout(int rank) {
  Layout l = Layout::contiguous({2, 2, 2, 2, 2, 2, 2, 2});
  l.rank = rank;
  return l;
}

DType other_dtype(DType t) { return t == DType::c128 ? DType::c64 : DType::c128; }

/// Wrong tensors every plan must refuse: none at all (unless the problem is empty), one fake
/// [3, 5, 7] complex tensor in every slot, the same with null pointers, and layouts whose rank
/// field is 9 or -1.
template <class Args, class Fill>
void refuse_wrong_args(const auto& plan, DType dt, bool empty_problem, Fill fill, const std::string& where,
                       Findings& f) {
  if (!empty_problem) expect_refused(plan, Args{}, "no tensors at all", where, f);
  const DType wrong = other_dtype(dt);
  const Layout junk = Layout::contiguous({3, 5, 7});
  const auto wrong_ref = [&](int slot) { return TensorRef{fake_ptr(slot), wrong, junk}; };
  const auto wrong_mut = [&](int slot) { return TensorMut{fake_ptr(slot), wrong, junk}; };
  Args a{};
  fill(a, wrong_ref, wrong_mut);
  expect_refused(plan, a, "fake [3, 5, 7] " + std::string(name(wrong)) + " tensors in every slot", where, f);
  const auto null_ref = [&](int) { return TensorRef{nullptr, dt, junk}; };
  const auto null_mut = [&](int) { return TensorMut{nullptr, dt, junk}; };
  Args n{};
  fill(n, null_ref, null_mut);
  expect_refused(plan, n, "null [3, 5, 7] tensors in every slot", where, f);
  for (int r : {kMaxRank + 1, -1}) {
    const auto rank_ref = [&](int slot) { return TensorRef{fake_ptr(slot), dt, bad_rank_layout(r)}; };
    const auto rank_mut = [&](int slot) { return TensorMut{fake_ptr(slot), dt, bad_rank_layout(r)}; };
    Args b{};
    fill(b, rank_ref, rank_mut);
    expect_refused(plan, b, "tensors whose layout rank is " + std::to_string(r), where, f);
  }
}

template <class Desc>
Mutator<Desc> dtype_field(DType Desc::*field, const char* nm) {
  return [field, nm](Desc& d, Fuzz& z) {
    d.*field = z.dtype();
    z.note(nm, d.*field);
  };
}
template <class Desc>
Mutator<Desc> dir_field() {
  return [](Desc& d, Fuzz& z) {
    d.direction = z.enumv<Direction>(2, 255);
    z.note("direction", static_cast<int>(d.direction));
  };
}
template <class Desc>
Mutator<Desc> shape_field(Shape Desc::*field, const char* nm) {
  return [field, nm](Desc& d, Fuzz& z) { z.shape(d.*field, nm); };
}
template <class Desc, class T>
Mutator<Desc> int_field(T Desc::*field, const char* nm) {
  return [field, nm](Desc& d, Fuzz& z) {
    if constexpr (sizeof(T) == 8)
      d.*field = static_cast<T>(z.i64());
    else
      d.*field = static_cast<T>(z.coin() ? z.axis() : z.count());
    z.note(nm, static_cast<int64_t>(d.*field));
  };
}
template <class Desc>
Mutator<Desc> real_field(double Desc::*field, const char* nm) {
  return [field, nm](Desc& d, Fuzz& z) {
    d.*field = z.real();
    z.note(nm, d.*field);
  };
}
template <class Desc>
Mutator<Desc> flip_field(bool Desc::*field, const char* nm) {
  return [field, nm](Desc& d, Fuzz& z) {
    d.*field = !(d.*field);
    z.note(nm, d.*field);
  };
}
template <class Desc, class E>
Mutator<Desc> enum_field(E Desc::*field, const char* nm, int valid) {
  return [field, nm, valid](Desc& d, Fuzz& z) {
    d.*field = z.enumv<E>(valid, 255);
    z.note(nm, static_cast<int>(d.*field));
  };
}

/// A dtype of `set` (for the base descriptor: always a table id).
DType pick_dtype(Fuzz& z, DTypeSet set) {
  if (set == 0) return DType::f32;
  for (;;) {
    const DType t = static_cast<DType>(z.below(kNumDTypes));
    if (contains(set, t)) return t;
  }
}

/// "family case i: base descriptor; field=value; ..." (also left in g_current_case).
std::string where_of(const char* family, int i, const std::string& base, const Fuzz& z) {
  g_current_case = std::string(family) + " case " + std::to_string(i) + ": " + base + z.log();
  return g_current_case;
}

// ---- elementwise ---------------------------------------------------------------------------------------
const std::vector<Mutator<ElementwiseDesc>>& ew_mutators() {
  using D = ElementwiseDesc;
  static const std::vector<Mutator<D>> ms = {
      [](D& d, Fuzz& z) {
        const auto n = static_cast<int>(elementwise_ops().size());
        d.op = z.coin() ? static_cast<ElementwiseOp>(z.below(static_cast<uint64_t>(n)))
                        : static_cast<ElementwiseOp>(z.pick<int>({n, n + 1, 1000, 0x7fff, 0xffff}));
        z.note("op", static_cast<int>(d.op));
      },
      dir_field<D>(),
      dtype_field<D>(&D::dtype, "dtype"),
      dtype_field<D>(&D::out_dtype, "out_dtype"),
      [](D& d, Fuzz& z) {
        const int i = static_cast<int>(z.below(4));
        d.params[i] = z.real();
        z.note("params[" + std::to_string(i) + "]", d.params[i]);
      },
      [](D& d, Fuzz& z) {
        const int i = static_cast<int>(z.below(3));
        z.shape(d.in_shapes[i], "in_shapes[" + std::to_string(i) + "]");
      },
      // A rank field outside 0..8 in out_shape: see FormerlyUnsafeInputs.
      [](D& d, Fuzz& z) { z.shape(d.out_shape, "out_shape", g_known_unsafe); },
  };
  return ms;
}

std::vector<std::string> ew_tokens(const ElementwiseDesc& d) {
  std::vector<std::string> t{"elementwise"};
  if (static_cast<size_t>(d.op) < elementwise_ops().size()) t.push_back(info(d.op).name);
  return t;
}

/// Forward args matching `d` (inputs of in_shapes, output of out_shape), when the shapes are modest.
bool ew_args(const ElementwiseDesc& d, ElementwiseArgs& a) {
  if (static_cast<size_t>(d.op) >= elementwise_ops().size() || d.direction != Direction::Forward) return false;
  const auto& in = info(d.op);
  if (!modest(d.out_shape)) return false;
  for (int k = 0; k < in.nin; ++k) {
    if (!modest(d.in_shapes[k])) return false;
    const DType t = (in.bool_inputs >> k) & 1 ? DType::b8 : d.dtype;
    a.in[k] = TensorRef{fake_ptr(k), t, layout_of(d.in_shapes[k])};
  }
  a.out[0] = TensorMut{fake_ptr(7), d.out_dtype, layout_of(d.out_shape)};
  a.nin = in.nin;
  a.nout = 1;
  return true;
}

void fuzz_elementwise(int i, Findings& f) {
  Fuzz z(1, static_cast<uint64_t>(i));
  const auto ops = elementwise_ops();
  const ElementwiseOpInfo& in = ops[z.below(ops.size())];
  const bool bw = in.bw != BackwardNeeds::None && z.below(3) == 0;
  const Direction dir = bw ? Direction::Backward : Direction::Forward;
  const DType dt = pick_dtype(z, bw ? in.bw_dtypes : in.fw_dtypes);
  const std::string base =
      std::string("test::probe_desc(") + in.name + ", " + std::string(name(dt)) + (bw ? ", Backward)" : ")");
  ElementwiseDesc d = test::probe_desc(in.op, dt, dir);
  mutate(d, z, ew_mutators());
  const std::string where = where_of("elementwise", i, base, z);
  auto r = ElementwisePlan::select(kOff, d);
  if (!check_select(r, "elementwise", ew_tokens(d), where, f)) return;
  const ElementwiseOpInfo& op = info(d.op);  // select() accepted it: in range
  bool empty = has_zero(d.out_shape);
  for (int k = 0; k < op.nin; ++k) empty = empty || has_zero(d.in_shapes[k]);
  bool shapes_ok = accepted_shapes_ok({{"out_shape", &d.out_shape}}, where, f);
  for (int k = 0; k < op.nin; ++k)
    shapes_ok = accepted_shapes_ok({{"in_shapes[" + std::to_string(k) + "]", &d.in_shapes[k]}}, where, f) && shapes_ok;
  if (!shapes_ok) return;
  const auto fill = [](ElementwiseArgs& a, auto ref, auto mut) {
    for (int k = 0; k < 5; ++k) a.in[k] = ref(k);
    for (int k = 0; k < 3; ++k) a.out[k] = mut(5 + k);
    a.nin = 5;
    a.nout = 3;
  };
  refuse_wrong_args<ElementwiseArgs>(*r, d.dtype, empty, fill, where, f);
  ElementwiseArgs a;
  if (!ew_args(d, a) || !r->can_implement(a).ok()) return;
  // The matching tensors pass: each single fault must be refused.
  if (d.out_shape.numel() > 0) {
    ElementwiseArgs b = a;
    b.out[0].data = nullptr;
    expect_refused(*r, b, "a null output pointer", where, f);
    b = a;
    b.out[0].dtype = other_dtype(b.out[0].dtype);
    expect_refused(*r, b, "an output of the wrong dtype", where, f);
  }
  if (op.nin > 0 && d.in_shapes[0].numel() > 0) {
    ElementwiseArgs b = a;
    b.in[0].data = nullptr;
    expect_refused(*r, b, "a null input pointer", where, f);
    b = a;
    b.in[0].dtype = other_dtype(b.in[0].dtype);
    expect_refused(*r, b, "an input of the wrong dtype", where, f);
  }
  if (d.out_shape.rank < kMaxRank) {
    ElementwiseArgs b = a;
    Shape s = d.out_shape;
    s.dims[s.rank++] = 2;
    b.out[0].layout = layout_of(s);
    expect_refused(*r, b, "an output with an extra dim of 2", where, f);
  }
  ElementwiseArgs b = a;
  b.nin = a.nin + 1;
  b.in[a.nin] = TensorRef{fake_ptr(6), d.dtype, layout_of(d.out_shape)};
  expect_refused(*r, b, "one input too many", where, f);
}

// ---- norm ----------------------------------------------------------------------------------------------
const std::vector<Mutator<NormDesc>>& norm_mutators() {
  using D = NormDesc;
  static const std::vector<Mutator<D>> ms = {
      enum_field<D, NormOp>(&D::op, "op", static_cast<int>(norm_ops().size())),
      dir_field<D>(),
      dtype_field<D>(&D::dtype, "dtype"),
      dtype_field<D>(&D::param_dtype, "param_dtype"),
      shape_field<D>(&D::shape, "shape"),
      shape_field<D>(&D::shape, "shape"),
      int_field<D>(&D::axis, "axis"),
      int_field<D>(&D::norm_ndim, "norm_ndim"),
      flip_field<D>(&D::weight, "weight"),
      flip_field<D>(&D::bias, "bias"),
      flip_field<D>(&D::residual, "residual"),
      real_field<D>(&D::eps, "eps"),
      real_field<D>(&D::p, "p"),
      real_field<D>(&D::tau, "tau"),
      flip_field<D>(&D::hard, "hard"),
      enum_field<D, NormMask>(&D::mask, "mask", 3),
      shape_field<D>(&D::mask_shape, "mask_shape"),
      int_field<D>(&D::num_groups, "num_groups"),
      flip_field<D>(&D::training, "training"),
      flip_field<D>(&D::running_stats, "running_stats"),
      real_field<D>(&D::momentum, "momentum"),
      int_field<D>(&D::lrn_size, "lrn_size"),
      real_field<D>(&D::lrn_alpha, "lrn_alpha"),
      real_field<D>(&D::lrn_beta, "lrn_beta"),
      real_field<D>(&D::lrn_k, "lrn_k"),
  };
  return ms;
}

NormDesc norm_base(NormOp op, DType dt, Direction dir, std::string& text) {
  const std::string t = std::string(name(dt)) + (dir == Direction::Backward ? ", Backward" : "");
  switch (op) {
    case NormOp::softmax:
    case NormOp::log_softmax:
      text = std::string("NormDesc::softmax(") + t + ", [4, 8], 1, log=" + (op == NormOp::log_softmax ? "1)" : "0)");
      return NormDesc::softmax(dt, Shape::of({4, 8}), 1, op == NormOp::log_softmax, dir);
    case NormOp::layer_norm:
      text = "NormDesc::layer_norm(" + t + ", [4, 64], 1, true, true, 1e-5)";
      return NormDesc::layer_norm(dt, Shape::of({4, 64}), 1, true, true, 1e-5, dir);
    case NormOp::rms_norm:
      text = "NormDesc::rms_norm(" + t + ", [2, 3, 64], 1, true, 1e-6)";
      return NormDesc::rms_norm(dt, Shape::of({2, 3, 64}), 1, true, 1e-6, dir);
    case NormOp::normalize:
      text = "NormDesc::normalize(" + t + ", [4, 8], -1, 1e-12, p=3)";
      return NormDesc::normalize(dt, Shape::of({4, 8}), -1, 1e-12, dir, 3.0);
    case NormOp::sparsemax:
      text = "NormDesc::sparsemax(" + t + ", [4, 8], 0)";
      return NormDesc::sparsemax(dt, Shape::of({4, 8}), 0, dir);
    case NormOp::gumbel_softmax:
      text = "NormDesc::gumbel_softmax(" + t + ", [4, 8], 1, 0.5, hard=true)";
      return NormDesc::gumbel_softmax(dt, Shape::of({4, 8}), 1, 0.5, true, dir);
    case NormOp::batch_norm:
      text = "NormDesc::batch_norm(" + t + ", [2, 3, 4, 5], true, true, training, running_stats, 0.1, 1e-5)";
      return NormDesc::batch_norm(dt, Shape::of({2, 3, 4, 5}), true, true, true, true, 0.1, 1e-5, dir);
    case NormOp::instance_norm:
      text = "NormDesc::instance_norm(" + t + ", [2, 3, 16], true, false, eval, running_stats, 0.1, 1e-5)";
      return NormDesc::instance_norm(dt, Shape::of({2, 3, 16}), true, false, false, true, 0.1, 1e-5, dir);
    case NormOp::group_norm:
      text = "NormDesc::group_norm(" + t + ", [2, 6, 4, 4], 3, true, true, 1e-5)";
      return NormDesc::group_norm(dt, Shape::of({2, 6, 4, 4}), 3, true, true, 1e-5, dir);
    case NormOp::local_response_norm:
      text = "NormDesc::local_response_norm(" + t + ", [2, 8, 5], 3, 1e-4, 0.75, 1)";
      return NormDesc::local_response_norm(dt, Shape::of({2, 8, 5}), 3, 1e-4, 0.75, 1.0, dir);
  }
  text = "NormDesc{}";
  return NormDesc{};
}

void fuzz_norm(int i, Findings& f) {
  Fuzz z(2, static_cast<uint64_t>(i));
  const auto ops = norm_ops();
  const NormOpInfo& in = ops[z.below(ops.size())];
  const bool bw = z.below(3) == 0;
  const Direction dir = bw ? Direction::Backward : Direction::Forward;
  const DType dt = pick_dtype(z, bw ? in.bw_dtypes : in.fw_dtypes);
  std::string base;
  NormDesc d = norm_base(in.op, dt, dir, base);
  if (in.op == NormOp::softmax && !bw && z.coin()) {
    d.mask = NormMask::boolean;
    d.mask_shape = Shape::of({1, 8});
    base += " + boolean mask [1, 8]";
  }
  mutate(d, z, norm_mutators());
  const std::string where = where_of("norm", i, base, z);
  auto r = NormPlan::select(kOff, d);
  std::vector<std::string> tokens{"norm"};
  if (static_cast<size_t>(d.op) < ops.size()) tokens.push_back(info(d.op).name);
  if (!check_select(r, "norm", tokens, where, f)) return;
  if (!accepted_shapes_ok({{"shape", &d.shape}}, where, f)) return;
  refuse_wrong_args<NormArgs>(
      *r, d.dtype, has_zero(d.shape),
      [](NormArgs& a, auto ref, auto mut) {
        a.x = ref(0), a.mask = ref(1), a.residual = ref(2), a.weight = ref(3), a.bias = ref(4), a.dy = ref(5);
        a.y = ref(6), a.mean = ref(7), a.rstd = ref(8), a.noise = ref(9);
        a.out = mut(10), a.residual_out = mut(11), a.save_mean = mut(12), a.save_rstd = mut(13);
        a.dweight = mut(14), a.dbias = mut(15), a.running_mean = mut(16), a.running_var = mut(17);
        a.y_soft = mut(18);
      },
      where, f);
  // x and out of the problem's shape but with null pointers / the wrong dtype.
  if (modest(d.shape) && d.shape.numel() > 0) {
    NormArgs a;
    a.x = TensorRef{nullptr, d.dtype, layout_of(d.shape)};
    a.dy = a.x;
    a.y = a.x;
    a.out = TensorMut{fake_ptr(1), d.dtype, layout_of(d.shape)};
    expect_refused(*r, a, "null x / dy / y", where, f);
    a.x.data = a.dy.data = a.y.data = fake_ptr(0);
    a.out.dtype = other_dtype(d.dtype);
    expect_refused(*r, a, "an output of the wrong dtype", where, f);
  }
}

// ---- loss (LossPlan) -----------------------------------------------------------------------------------
const std::vector<Mutator<LossDesc>>& loss_mutators() {
  using D = LossDesc;
  static const std::vector<Mutator<D>> ms = {
      enum_field<D, LossOp>(&D::op, "op", static_cast<int>(loss_ops().size())),
      dir_field<D>(),
      dtype_field<D>(&D::dtype, "dtype"),
      dtype_field<D>(&D::target_dtype, "target_dtype"),
      enum_field<D, Reduction>(&D::reduction, "reduction", 4),
      [](D& d, Fuzz& z) {
        const int k = static_cast<int>(z.below(kLossMaxInputs));
        z.shape(d.shapes[k], "shapes[" + std::to_string(k) + "]");
      },
      [](D& d, Fuzz& z) {
        const int k = static_cast<int>(z.below(kLossMaxInputs));
        z.shape(d.shapes[k], "shapes[" + std::to_string(k) + "]");
      },
      [](D& d, Fuzz& z) {
        d.present = static_cast<uint8_t>(z.coin() ? z.below(256) : (d.present ^ (1u << z.below(8))));
        z.note("present", static_cast<int>(d.present));
      },
      [](D& d, Fuzz& z) {
        const int k = static_cast<int>(z.below(kLossMaxParams));
        d.params[k] = z.coin() ? z.real() : static_cast<double>(z.i64());
        z.note("params[" + std::to_string(k) + "]", d.params[k]);
      },
      flip_field<D>(&D::fused_grad, "fused_grad"),
  };
  return ms;
}

/// test::loss_probe (test_util.hpp), with the linear + CE factory, and its text for the failure report.
LossDesc loss_probe(const LossOpInfo& in, DType dt, Direction dir, std::string& text) {
  const std::string t = std::string(name(dt)) + (dir == Direction::Backward ? ", Backward" : "");
  text = std::string("loss probe(") + in.name + ", " + t + ")";
  if (in.kind == LossKind::linear) {
    text = "LossDesc::linear_cross_entropy(" + t + ", 4, 8, 16)";
    return LossDesc::linear_cross_entropy(dt, 4, 8, 16, DType::s64, Reduction::mean, -100, 0.0, 0, dir);
  }
  return test::loss_probe(in, dt, dir);
}

void fuzz_loss(int i, Findings& f) {
  Fuzz z(3, static_cast<uint64_t>(i));
  const auto ops = loss_ops();
  const LossOpInfo* in = &ops[z.below(ops.size())];
  while (in->kind == LossKind::ctc) in = &ops[z.below(ops.size())];  // CtcLossPlan: fuzz_ctc
  const bool bw = z.below(3) == 0;
  const Direction dir = bw ? Direction::Backward : Direction::Forward;
  const DType dt = pick_dtype(z, bw ? in->bw_dtypes : in->fw_dtypes);
  std::string base;
  LossDesc d = loss_probe(*in, dt, dir, base);
  mutate(d, z, loss_mutators());
  const std::string where = where_of("loss", i, base, z);
  auto r = LossPlan::select(kOff, d);
  std::vector<std::string> tokens{"loss"};
  if (static_cast<size_t>(d.op) < ops.size()) tokens.push_back(info(d.op).name);
  if (!check_select(r, "loss", tokens, where, f)) return;
  bool empty = false, shapes_ok = true;
  const LossOpInfo& op = info(d.op);
  for (int k = 0; k < op.num_inputs() && k < kLossMaxInputs; ++k) {
    if (!d.has(k)) continue;
    empty = empty || has_zero(d.shapes[k]);
    shapes_ok = accepted_shapes_ok({{"shapes[" + std::to_string(k) + "]", &d.shapes[k]}}, where, f) && shapes_ok;
  }
  if (!shapes_ok) return;
  refuse_wrong_args<LossArgs>(
      *r, d.dtype, empty,
      [](LossArgs& a, auto ref, auto mut) {
        for (int k = 0; k < kLossMaxInputs; ++k) a.in[k] = ref(k);
        a.dy = ref(4), a.lse = ref(5), a.total_weight = ref(6);
        a.out = mut(7), a.save_lse = mut(8), a.save_total_weight = mut(9), a.error = mut(10);
        for (int k = 0; k < kLossMaxGrads; ++k) a.grad[k] = mut(11 + k);
      },
      where, f);
}

// ---- loss (CtcLossPlan) --------------------------------------------------------------------------------
void fuzz_ctc(int i, Findings& f) {
  using D = CtcLossDesc;
  static const std::vector<Mutator<D>> ms = {
      dir_field<D>(),
      dtype_field<D>(&D::dtype, "dtype"),
      dtype_field<D>(&D::target_dtype, "target_dtype"),
      dtype_field<D>(&D::input_lengths_dtype, "input_lengths_dtype"),
      dtype_field<D>(&D::target_lengths_dtype, "target_lengths_dtype"),
      shape_field<D>(&D::log_probs, "log_probs"),
      shape_field<D>(&D::targets, "targets"),
      int_field<D>(&D::max_target_length, "max_target_length"),
      int_field<D>(&D::blank, "blank"),
      enum_field<D, Reduction>(&D::reduction, "reduction", 3),
      flip_field<D>(&D::zero_infinity, "zero_infinity"),
      flip_field<D>(&D::fused_beta, "fused_beta"),
  };
  Fuzz z(4, static_cast<uint64_t>(i));
  const bool bw = z.below(3) == 0;
  const Direction dir = bw ? Direction::Backward : Direction::Forward;
  const DType dt = pick_dtype(z, dtypes::kFloat);
  const bool padded = z.coin();
  D d = CtcLossDesc::make(dt, Shape::of({50, 4, 20}), padded ? Shape::of({4, 10}) : Shape::of({37}), DType::s64,
                          Reduction::mean, 0, false, dir);
  const std::string base = std::string("CtcLossDesc::make(") + std::string(name(dt)) + ", [50, 4, 20], " +
                           (padded ? "[4, 10]" : "[37]") + (bw ? ", Backward)" : ")");
  mutate(d, z, ms);
  const std::string where = where_of("ctc_loss", i, base, z);
  auto r = CtcLossPlan::select(kOff, d);
  if (!check_select(r, "loss", {"ctc_loss"}, where, f)) return;
  if (!accepted_shapes_ok({{"log_probs", &d.log_probs}, {"targets", &d.targets}}, where, f)) return;
  refuse_wrong_args<CtcLossArgs>(
      *r, d.dtype, has_zero(d.log_probs) || has_zero(d.targets),
      [](CtcLossArgs& a, auto ref, auto mut) {
        a.log_probs = ref(0), a.targets = ref(1), a.input_lengths = ref(2), a.target_lengths = ref(3);
        a.dy = ref(4), a.log_alpha = ref(5), a.log_beta = ref(6), a.neg_log_likelihood = ref(7);
        a.out = mut(8), a.save_log_alpha = mut(9), a.save_log_beta = mut(10);
        a.save_neg_log_likelihood = mut(11), a.grad = mut(12), a.error = mut(13);
      },
      where, f);
}

// ---- index ---------------------------------------------------------------------------------------------
const std::vector<Mutator<IndexDesc>>& index_mutators() {
  using D = IndexDesc;
  auto arr64 = [](auto field, const char* nm, int n) -> Mutator<D> {
    return [field, nm, n](D& d, Fuzz& z) {
      const int k = static_cast<int>(z.below(static_cast<uint64_t>(n)));
      (d.*field)[k] = z.i64();
      z.note(std::string(nm) + "[" + std::to_string(k) + "]", static_cast<int64_t>((d.*field)[k]));
    };
  };
  auto arr8 = [](std::array<int8_t, kMaxRank> D::*field, const char* nm) -> Mutator<D> {
    return [field, nm](D& d, Fuzz& z) {
      const int k = static_cast<int>(z.below(kMaxRank));
      (d.*field)[k] = static_cast<int8_t>(z.pick<int>({-128, -9, -1, 8, 9, 127}));
      z.note(std::string(nm) + "[" + std::to_string(k) + "]", static_cast<int>((d.*field)[k]));
    };
  };
  static const std::vector<Mutator<D>> ms = {
      enum_field<D, IndexOp>(&D::op, "op", static_cast<int>(index_ops().size())),
      dir_field<D>(),
      dtype_field<D>(&D::dtype, "dtype"),
      dtype_field<D>(&D::index_dtype, "index_dtype"),
      shape_field<D>(&D::in_shape, "in_shape"),
      shape_field<D>(&D::in_shape, "in_shape"),
      shape_field<D>(&D::out_shape, "out_shape"),
      shape_field<D>(&D::index_shape, "index_shape"),
      shape_field<D>(&D::src_shape, "src_shape"),
      int_field<D>(&D::dim, "dim"),
      int_field<D>(&D::num_inputs, "num_inputs"),
      enum_field<D, PadMode>(&D::pad_mode, "pad_mode", 4),
      arr64(&D::pad, "pad", 2 * kMaxRank),
      real_field<D>(&D::value, "value"),
      int_field<D>(&D::fill_index, "fill_index"),
      arr64(&D::shifts, "shifts", kMaxRank),
      arr64(&D::repeats, "repeats", kMaxRank),
      [](D& d, Fuzz& z) {
        d.flip_dims = z.pick<uint32_t>({0xffffffffu, 0x100u, 0x80000000u, 0xffu});
        z.note("flip_dims", static_cast<int64_t>(d.flip_dims));
      },
      int_field<D>(&D::diagonal, "diagonal"),
      int_field<D>(&D::padding_idx, "padding_idx"),
      int_field<D>(&D::num_segments, "num_segments"),
      enum_field<D, ScatterReduce>(&D::reduce, "reduce", 6),
      flip_field<D>(&D::include_self, "include_self"),
      flip_field<D>(&D::accumulate, "accumulate"),
      enum_field<D, IndexMode>(&D::mode, "mode", 3),
      enum_field<D, SelectPhase>(&D::phase, "phase", 3),
      int_field<D>(&D::num_indices, "num_indices"),
      arr8(&D::start_index_map, "start_index_map"),
      int_field<D>(&D::num_offset_dims, "num_offset_dims"),
      arr8(&D::offset_dims, "offset_dims"),
      int_field<D>(&D::num_collapsed_dims, "num_collapsed_dims"),
      arr8(&D::collapsed_dims, "collapsed_dims"),
      int_field<D>(&D::index_vector_dim, "index_vector_dim"),
      arr64(&D::slice_sizes, "slice_sizes", kMaxRank),
      flip_field<D>(&D::include_last_offset, "include_last_offset"),
      flip_field<D>(&D::per_sample_weights, "per_sample_weights"),
      flip_field<D>(&D::scale_grad_by_freq, "scale_grad_by_freq"),
      real_field<D>(&D::max_norm, "max_norm"),
      real_field<D>(&D::norm_type, "norm_type"),
  };
  return ms;
}

void fuzz_index(int i, Findings& f) {
  Fuzz z(5, static_cast<uint64_t>(i));
  const auto ops = index_ops();
  const IndexOpInfo& in = ops[z.below(ops.size())];
  const bool bw = in.bw_dtypes != 0 && z.below(3) == 0;
  const Direction dir = bw ? Direction::Backward : Direction::Forward;
  const DType dt = pick_dtype(z, bw ? in.bw_dtypes : in.fw_dtypes);
  const DType it = z.coin() ? DType::s32 : DType::s64;
  const std::string base = std::string("index_probe(") + in.name + ", " + std::string(name(dt)) + ", " +
                           std::string(name(it)) + (bw ? ", Backward)" : ")");
  IndexDesc d = index_probe(in.op, dt, it, dir);
  mutate(d, z, index_mutators());
  const std::string where = where_of("index", i, base, z);
  auto r = IndexPlan::select(kOff, d);
  std::vector<std::string> tokens{"index"};
  if (static_cast<size_t>(d.op) < ops.size()) tokens.push_back(info(d.op).name);
  if (!check_select(r, "index", tokens, where, f)) return;
  // in_shape is a tensor's shape for every op but one_hot (no x) and tril/triu_indices ([row, col]).
  // (out_shape is not compared with what in_shape implies; can_implement holds the tensors to it.)
  const bool in_is_tensor = d.op != IndexOp::one_hot && d.op != IndexOp::tril_indices && d.op != IndexOp::triu_indices;
  if (in_is_tensor && !accepted_shapes_ok({{"in_shape", &d.in_shape}}, where, f)) return;
  const bool empty = has_zero(d.in_shape) || has_zero(d.out_shape) || has_zero(d.index_shape) || has_zero(d.src_shape);
  std::array<TensorRef, 3> many{};
  refuse_wrong_args<IndexArgs>(
      *r, d.dtype, empty,
      [&many](IndexArgs& a, auto ref, auto mut) {
        a.x = ref(0), a.src = ref(1), a.index = ref(2), a.mask = ref(3);
        for (int k = 0; k < 3; ++k) many[k] = ref(4 + k);
        a.inputs = many;
        a.indices = many;
        a.out = mut(7), a.count = mut(8), a.error = mut(9);
        a.offsets = ref(10), a.per_sample_weights = ref(11), a.weight = ref(12);
        a.max_indices = mut(13), a.grad_per_sample_weights = mut(14);
      },
      where, f);
}

// ---- gemm ----------------------------------------------------------------------------------------------
const std::vector<Mutator<GemmDesc>>& gemm_mutators() {
  using D = GemmDesc;
  auto strides = [](MatrixStrides D::*field, const char* nm) -> Mutator<D> {
    return [field, nm](D& d, Fuzz& z) {
      MatrixStrides& s = d.*field;
      const int which = static_cast<int>(z.below(3));
      int64_t& v = which == 0 ? s.row : (which == 1 ? s.col : s.batch);
      v = z.coin() ? z.dim() : z.pick<int64_t>({-1, 0, 1, 2, 7});
      z.note(std::string(nm) + (which == 0 ? ".row" : (which == 1 ? ".col" : ".batch")), v);
    };
  };
  static const std::vector<Mutator<D>> ms = {
      int_field<D>(&D::m, "m"),
      int_field<D>(&D::n, "n"),
      int_field<D>(&D::k, "k"),
      int_field<D>(&D::batch, "batch"),
      dtype_field<D>(&D::a_dtype, "a_dtype"),
      dtype_field<D>(&D::b_dtype, "b_dtype"),
      dtype_field<D>(&D::d_dtype, "d_dtype"),
      strides(&D::a, "a"),
      strides(&D::b, "b"),
      strides(&D::c, "c"),
      strides(&D::d, "d"),
      real_field<D>(&D::alpha, "alpha"),
      real_field<D>(&D::beta, "beta"),
      dir_field<D>(),
      enum_field<D, GemmActivation>(&D::act, "act", 5),
      flip_field<D>(&D::bias, "bias"),
      flip_field<D>(&D::aux, "aux"),
      enum_field<D, GemmBiasGrad>(&D::bgrad, "bgrad", 4),
      enum_field<D, GemmScaleMode>(&D::scale_mode, "scale_mode", 2),
      [](D& d, Fuzz& z) {
        const int k = static_cast<int>(z.below(4));
        d.align[k] = z.pick<uint16_t>({0, 1, 3, 24, 32768, 65535});
        z.note("align[" + std::to_string(k) + "]", static_cast<int>(d.align[k]));
      },
  };
  return ms;
}

GemmDesc gemm_base(Fuzz& z, std::string& text) {
  switch (z.below(8)) {
    case 0:
      text = "GemmDesc::dense(f32, 64, 48, 32)";
      return GemmDesc::dense(DType::f32, 64, 48, 32);
    case 1:
      text = "GemmDesc::dense(bf16, 8, 256, 128, false, true)";
      return GemmDesc::dense(DType::bf16, 8, 256, 128, false, true);
    case 2:
      text = "GemmDesc::dense(f16, 128, 64, 64, true, false, batch=3)";
      return GemmDesc::dense(DType::f16, 128, 64, 64, true, false, 3);
    case 3:
      text = "GemmDesc::dense(f8e4m3, bf16, 64, 64, 64, false, true)";
      return GemmDesc::dense(DType::f8e4m3, DType::bf16, 64, 64, 64, false, true);
    case 4:
      text = "GemmDesc::dense(s8, s32, 64, 64, 64, false, true)";
      return GemmDesc::dense(DType::s8, DType::s32, 64, 64, 64, false, true);
    case 5: {
      text = "GemmDesc::dense(s8, bf16, 128, 256, 128, false, true) + PerRowCol, bias";
      GemmDesc d = GemmDesc::dense(DType::s8, DType::bf16, 128, 256, 128, false, true);
      d.scale_mode = GemmScaleMode::PerRowCol;
      d.bias = true;
      return d;
    }
    case 6: {
      text = "GemmDesc::dense(bf16, 64, 64, 64) + bias, gelu, aux";
      GemmDesc d = GemmDesc::dense(DType::bf16, 64, 64, 64);
      d.bias = true;
      d.aux = true;
      d.act = GemmActivation::Gelu;
      return d;
    }
    default: {
      text = "GemmDesc::dense(bf16, 64, 32, 16, Backward) + relu, bgrad=OfD";
      GemmDesc d = GemmDesc::dense(DType::bf16, 64, 32, 16);
      d.direction = Direction::Backward;
      d.act = GemmActivation::Relu;
      d.bgrad = GemmBiasGrad::OfD;
      return d;
    }
  }
}

/// A, B, C, D of the descriptor's strides (batch 1, small sizes).
bool gemm_args(const GemmDesc& d, GemmArgs& a) {
  if (d.batch != 1 || d.m < 0 || d.n < 0 || d.k < 0 || d.m > 4096 || d.n > 4096 || d.k > 4096) return false;
  auto mat = [](int64_t r, int64_t c, const MatrixStrides& s) {
    Layout l;
    l.rank = 2;
    l.shape = {r, c};
    l.stride = {s.row, s.col};
    return l;
  };
  a.a = TensorRef{fake_ptr(0), d.a_dtype, mat(d.m, d.k, d.a)};
  a.b = TensorRef{fake_ptr(1), d.b_dtype, mat(d.k, d.n, d.b)};
  if (d.beta != 0) a.c = TensorRef{fake_ptr(2), d.d_dtype, mat(d.m, d.n, d.c)};
  a.d = TensorMut{fake_ptr(3), d.d_dtype, mat(d.m, d.n, d.d)};
  if (d.bias) a.bias = TensorRef{fake_ptr(4), d.d_dtype, Layout::contiguous({d.n})};
  if (d.aux) a.aux = TensorMut{fake_ptr(5), d.d_dtype, mat(d.m, d.n, d.d)};
  return true;
}

void fuzz_gemm(int i, Findings& f) {
  Fuzz z(6, static_cast<uint64_t>(i));
  std::string base;
  GemmDesc d = gemm_base(z, base);
  mutate(d, z, gemm_mutators());
  const std::string where = where_of("gemm", i, base, z);
  auto r = GemmPlan::select(kOff, d);
  if (!check_select(r, "gemm", {"gemm"}, where, f)) return;
  refuse_wrong_args<GemmArgs>(
      *r, d.a_dtype, d.m == 0 || d.n == 0 || d.k == 0 || d.batch == 0,
      [](GemmArgs& a, auto ref, auto mut) {
        a.a = ref(0), a.b = ref(1), a.c = ref(2), a.d = mut(3), a.bias = ref(4), a.aux = mut(5), a.aux_in = ref(6);
        a.bgrad = mut(7), a.a_scale = ref(8), a.b_scale = ref(9), a.amax_d = mut(10);
      },
      where, f);
  GemmArgs a;
  if (!gemm_args(d, a) || !r->can_implement(a).ok()) return;
  if (d.m > 0 && d.k > 0) {
    GemmArgs b = a;
    b.a.data = nullptr;
    expect_refused(*r, b, "a null A", where, f);
    b = a;
    b.a.dtype = other_dtype(b.a.dtype);
    expect_refused(*r, b, "an A of the wrong dtype", where, f);
  }
  GemmArgs b = a;
  b.d.layout.shape[0] += 1;
  expect_refused(*r, b, "a D one row too tall", where, f);
}

// ---- grouped gemm --------------------------------------------------------------------------------------
void fuzz_grouped(int i, Findings& f) {
  using D = GroupedGemmDesc;
  static const std::vector<Mutator<D>> ms = {
      dtype_field<D>(&D::dtype, "dtype"),
      int_field<D>(&D::groups, "groups"),
      int_field<D>(&D::rows, "rows"),
      int_field<D>(&D::n, "n"),
      int_field<D>(&D::k, "k"),
      int_field<D>(&D::lda, "lda"),
      int_field<D>(&D::ldw, "ldw"),
      int_field<D>(&D::w_group, "w_group"),
      int_field<D>(&D::ldd, "ldd"),
      flip_field<D>(&D::ends_only, "ends_only"),
      [](D& d, Fuzz& z) {
        d.d_align = z.pick<uint16_t>({0, 1, 3, 8, 24, 32768, 65535});
        z.note("d_align", static_cast<int>(d.d_align));
      },
  };
  Fuzz z(7, static_cast<uint64_t>(i));
  D d;
  d.dtype = z.coin() ? DType::bf16 : DType::f16;
  d.groups = 3, d.rows = 100, d.n = 48, d.k = 64;
  const std::string base = "GroupedGemmDesc{" + std::string(name(d.dtype)) + ", groups=3, rows=100, n=48, k=64}";
  mutate(d, z, ms);
  const std::string where = where_of("grouped_gemm", i, base, z);
  auto r = GroupedGemmPlan::select(kOff, d);
  if (!check_select(r, "gemm", {"grouped_gemm"}, where, f)) return;
  refuse_wrong_args<GroupedGemmArgs>(
      *r, d.dtype, d.rows == 0 || d.n == 0,
      [](GroupedGemmArgs& a, auto ref, auto mut) { a.a = ref(0), a.w = ref(1), a.offsets = ref(2), a.d = mut(3); },
      where, f);
}

// ---- quant (QuantPlan) ---------------------------------------------------------------------------------
const std::vector<Mutator<QuantDesc>>& quant_mutators() {
  using D = QuantDesc;
  static const std::vector<Mutator<D>> ms = {
      enum_field<D, QuantOp>(&D::op, "op", static_cast<int>(quant_ops().size())),
      dir_field<D>(),
      dtype_field<D>(&D::dtype, "dtype"),
      dtype_field<D>(&D::q_dtype, "q_dtype"),
      dtype_field<D>(&D::q_dtype, "q_dtype"),
      shape_field<D>(&D::shape, "shape"),
      shape_field<D>(&D::shape, "shape"),
      enum_field<D, QuantGranularity>(&D::granularity, "granularity", 4),
      int_field<D>(&D::axis, "axis"),
      int_field<D>(&D::group_size, "group_size"),
      enum_field<D, QuantZeroPoint>(&D::zero_point_kind, "zero_point_kind", 3),
      int_field<D>(&D::q_min, "q_min"),
      int_field<D>(&D::q_max, "q_max"),
      flip_field<D>(&D::scale_on_device, "scale_on_device"),
      real_field<D>(&D::scale, "scale"),
      int_field<D>(&D::zero_point, "zero_point"),
      flip_field<D>(&D::record_amax, "record_amax"),
      flip_field<D>(&D::delayed, "delayed"),
      int_field<D>(&D::history_len, "history_len"),
      real_field<D>(&D::grad_factor, "grad_factor"),
  };
  return ms;
}

QuantDesc quant_base(Fuzz& z, Direction dir, std::string& text) {
  const std::string t = dir == Direction::Backward ? ", Backward" : "";
  switch (z.below(9)) {
    case 0:
      text = "QuantDesc::per_tensor(quantize, f32, s8, [4, 8], 0.5, 3" + t + ")";
      return QuantDesc::per_tensor(QuantOp::quantize, DType::f32, DType::s8, Shape::of({4, 8}), 0.5, 3, dir);
    case 1:
      text = "QuantDesc::per_tensor(dequantize, bf16, f8e4m3, [4, 8], 0.25" + t + ")";
      return QuantDesc::per_tensor(QuantOp::dequantize, DType::bf16, DType::f8e4m3, Shape::of({4, 8}), 0.25, 0, dir);
    case 2:
      text = "QuantDesc::per_channel(quantize, f16, u8, [8, 64], 0" + t + ")";
      return QuantDesc::per_channel(QuantOp::quantize, DType::f16, DType::u8, Shape::of({8, 64}), 0, false, dir);
    case 3:
      text = "QuantDesc::per_group(dequantize, bf16, s4, [4, 64], 1, 32" + t + ")";
      return QuantDesc::per_group(QuantOp::dequantize, DType::bf16, DType::s4, Shape::of({4, 64}), 1, 32, true, dir);
    case 4:
      text = "QuantDesc::per_channel(fake_quantize, f32, s32, [8, 64], 1" + t + ")";
      return QuantDesc::per_channel(QuantOp::fake_quantize, DType::f32, DType::s32, Shape::of({8, 64}), 1, false, dir);
    case 5:
      text = "QuantDesc::per_channel(fake_quantize_learnable, f32, s32, [16, 32], 0" + t + ")";
      return QuantDesc::per_channel(QuantOp::fake_quantize_learnable, DType::f32, DType::s32, Shape::of({16, 32}), 0,
                                    false, dir);
    case 6:
      text = "QuantDesc::dynamic_per_token(bf16, s8, [2, 8, 64]" + t + ")";
      return QuantDesc::dynamic_per_token(DType::bf16, DType::s8, Shape::of({2, 8, 64}), false, dir);
    case 7:
      text = "QuantDesc::dynamic_per_group(f16, u4, [4, 64], 32, asymmetric" + t + ")";
      return QuantDesc::dynamic_per_group(DType::f16, DType::u4, Shape::of({4, 64}), 32, true, dir);
    default:
      text = "QuantDesc::dynamic_per_tensor(bf16, f8e4m3, [8, 8], history_len=4)";
      return QuantDesc::dynamic_per_tensor(DType::bf16, DType::f8e4m3, Shape::of({8, 8}), 4);
  }
}

void fuzz_quant(int i, Findings& f) {
  Fuzz z(8, static_cast<uint64_t>(i));
  const Direction dir = z.below(3) == 0 ? Direction::Backward : Direction::Forward;
  std::string base;
  QuantDesc d = quant_base(z, dir, base);
  mutate(d, z, quant_mutators());
  const std::string where = where_of("quant", i, base, z);
  auto r = QuantPlan::select(kOff, d);
  std::vector<std::string> tokens{"quant"};
  if (static_cast<size_t>(d.op) < quant_ops().size()) tokens.push_back(info(d.op).name);
  if (!check_select(r, "quant", tokens, where, f)) return;
  if (!accepted_shapes_ok({{"shape", &d.shape}}, where, f)) return;
  refuse_wrong_args<QuantArgs>(
      *r, d.dtype, has_zero(d.shape),
      [](QuantArgs& a, auto ref, auto mut) {
        a.x = ref(0), a.q = ref(1), a.dy = ref(2), a.scale = ref(3), a.zero_point = ref(4);
        a.out = mut(5), a.mask = mut(6), a.scale_out = mut(7), a.zero_point_out = mut(8), a.amax_out = mut(9);
        a.amax_history = mut(10), a.dscale = mut(11), a.dzero_point = mut(12);
      },
      where, f);
}

// ---- quant: the linear plans and GGUF ------------------------------------------------------------------
void fuzz_quant_linear(int i, Findings& f) {
  Fuzz z(9, static_cast<uint64_t>(i));
  switch (i % 4) {
    case 0: {
      using D = QuantizedLinearDesc;
      static const std::vector<Mutator<D>> ms = {
          dtype_field<D>(&D::dtype, "dtype"), int_field<D>(&D::m, "m"),        int_field<D>(&D::n, "n"),
          int_field<D>(&D::k, "k"),           flip_field<D>(&D::bias, "bias"), dir_field<D>(),
      };
      D d;
      d.dtype = DType::bf16;
      d.m = 64, d.n = 128, d.k = 256;
      mutate(d, z, ms);
      const std::string where = where_of("quantized_linear", i, "QuantizedLinearDesc{bf16, 64, 128, 256}", z);
      auto r = QuantizedLinearPlan::select(kOff, d);
      if (!check_select(r, "quant", {"quantized_linear"}, where, f)) return;
      refuse_wrong_args<QuantizedLinearArgs>(
          *r, d.dtype, d.m == 0 || d.n == 0,
          [](QuantizedLinearArgs& a, auto ref, auto mut) {
            a.x = ref(0), a.weight = ref(1), a.w_scale = ref(2), a.bias = ref(3), a.y = mut(4);
          },
          where, f);
      return;
    }
    case 1: {
      using D = W4A16LinearDesc;
      static const std::vector<Mutator<D>> ms = {
          dtype_field<D>(&D::dtype, "dtype"),
          dtype_field<D>(&D::weight_dtype, "weight_dtype"),
          int_field<D>(&D::m, "m"),
          int_field<D>(&D::n, "n"),
          int_field<D>(&D::k, "k"),
          int_field<D>(&D::group_size, "group_size"),
          flip_field<D>(&D::zero_point, "zero_point"),
          flip_field<D>(&D::bias, "bias"),
          dir_field<D>(),
      };
      D d;
      d.dtype = DType::bf16;
      d.weight_dtype = DType::u4;
      d.m = z.coin() ? 4 : 64, d.n = 256, d.k = 512;
      d.group_size = 128;
      const std::string base = "W4A16LinearDesc{bf16, u4, m=" + std::to_string(d.m) + ", 256, 512, G=128}";
      mutate(d, z, ms);
      const std::string where = where_of("w4a16_linear", i, base, z);
      auto r = W4A16LinearPlan::select(kOff, d);
      if (!check_select(r, "quant", {"w4a16_linear"}, where, f)) return;
      refuse_wrong_args<W4A16LinearArgs>(
          *r, d.dtype, d.m == 0 || d.n == 0,
          [](W4A16LinearArgs& a, auto ref, auto mut) {
            a.x = ref(0), a.weight = ref(1), a.scale = ref(2), a.zero_point = ref(3), a.bias = ref(4), a.y = mut(5);
          },
          where, f);
      return;
    }
    case 2: {
      using D = GgufDequantizeDesc;
      static const std::vector<Mutator<D>> ms = {
          enum_field<D, GgufFormat>(&D::format, "format", kNumGgufFormats),
          dtype_field<D>(&D::dtype, "dtype"),
          int_field<D>(&D::rows, "rows"),
          int_field<D>(&D::cols, "cols"),
          dir_field<D>(),
      };
      D d;
      d.format = static_cast<GgufFormat>(z.below(kNumGgufFormats));
      d.dtype = DType::bf16;
      d.rows = 16, d.cols = 512;
      const std::string base = std::string("GgufDequantizeDesc{") + info(d.format).name + ", bf16, 16, 512}";
      mutate(d, z, ms);
      const std::string where = where_of("gguf_dequantize", i, base, z);
      auto r = GgufDequantizePlan::select(kOff, d);
      if (!check_select(r, "quant", {"gguf_dequantize"}, where, f)) return;
      refuse_wrong_args<GgufDequantizeArgs>(
          *r, d.dtype, d.rows == 0 || d.cols == 0,
          [](GgufDequantizeArgs& a, auto ref, auto mut) { a.packed = ref(0), a.out = mut(1); }, where, f);
      return;
    }
    default: {
      using D = GgufMatvecDesc;
      static const std::vector<Mutator<D>> ms = {
          enum_field<D, GgufFormat>(&D::format, "format", kNumGgufFormats),
          dtype_field<D>(&D::dtype, "dtype"),
          int_field<D>(&D::m, "m"),
          int_field<D>(&D::n, "n"),
          int_field<D>(&D::k, "k"),
          flip_field<D>(&D::bias, "bias"),
          dir_field<D>(),
      };
      D d;
      d.format = static_cast<GgufFormat>(z.below(kNumGgufFormats));
      d.dtype = DType::f16;
      d.m = 2, d.n = 256, d.k = 1024;
      const std::string base = std::string("GgufMatvecDesc{") + info(d.format).name + ", f16, 2, 256, 1024}";
      mutate(d, z, ms);
      const std::string where = where_of("gguf_matvec", i, base, z);
      auto r = GgufMatvecPlan::select(kOff, d);
      if (!check_select(r, "quant", {"gguf_matvec"}, where, f)) return;
      refuse_wrong_args<GgufMatvecArgs>(
          *r, d.dtype, d.m == 0 || d.n == 0,
          [](GgufMatvecArgs& a, auto ref, auto mut) { a.x = ref(0), a.weight = ref(1), a.bias = ref(2), a.y = mut(3); },
          where, f);
      return;
    }
  }
}

// ---- the tests -----------------------------------------------------------------------------------------
/// Runs `cases` cases of a family; fails listing (up to 20 of) the problems, each with its descriptor.
void run_family(const char* family, int cases, void (*one)(int, Findings&)) {
  Findings f;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < cases; ++i) {
    try {
      one(i, f);
    } catch (const std::exception& e) {
      f.add(g_current_case, std::string("exception escaped: ") + e.what());
    } catch (...) {
      f.add(g_current_case, "non-standard exception escaped");
    }
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(f.cases, cases);
  std::string list;
  for (size_t k = 0; k < f.problems.size() && k < 20; ++k) list += "\n  " + f.problems[k];
  EXPECT_TRUE(f.problems.empty()) << f.problems.size() << " problem(s) in " << family << ":" << list;
  ::testing::Test::RecordProperty("accepted", f.accepted);
  ::testing::Test::RecordProperty("refused", f.refused);
  std::printf("[ fuzz     ] %s: %d descriptors (%d accepted, %d refused), %d can_implement checks, %.0f ms\n", family,
              f.cases, f.accepted, f.refused, f.arg_checks, ms);
}

TEST(FuzzSelect, Elementwise) { run_family("elementwise", 1200, fuzz_elementwise); }
TEST(FuzzSelect, Norm) { run_family("norm", 800, fuzz_norm); }
TEST(FuzzSelect, Loss) { run_family("loss", 800, fuzz_loss); }
TEST(FuzzSelect, CtcLoss) { run_family("ctc_loss", 300, fuzz_ctc); }
TEST(FuzzSelect, Index) { run_family("index", 1200, fuzz_index); }
TEST(FuzzSelect, Gemm) { run_family("gemm", 800, fuzz_gemm); }
TEST(FuzzSelect, GroupedGemm) { run_family("grouped_gemm", 300, fuzz_grouped); }
TEST(FuzzSelect, Quant) { run_family("quant", 800, fuzz_quant); }
TEST(FuzzSelect, QuantLinearAndGguf) { run_family("quant linear / gguf", 400, fuzz_quant_linear); }

// The input classes this test found reading out of bounds (fixed since):
//  - DType ids past the table (17..255) in every dtype field: the table lookups (name(),
//    size_in_bits(): src/core/core.cpp row()) read past kDTypeRows, and bit(dtype) shifted past
//    DTypeSet's width for ids >= 32 (ids 32, 33, 64 were accepted as real dtypes). Now an id past
//    the table reads as "invalid-dtype"; ids 17..31 are in no DTypeSet, ids >= 32 still alias
//    through bit() until its guard lands (see Fuzz::dtype).
//  - ElementwiseDesc::out_shape with a rank field outside 0..8 (inputs valid): the refusal
//    printed it with Shape::str(), which walked `rank` dims (rank 2^31-1: SIGSEGV). Now
//    check_shape refuses the rank first, and str() never walks a bad rank.
TEST(FuzzSelect, FormerlyUnsafeInputs) {
  g_known_unsafe = true;
  run_family("elementwise", 300, fuzz_elementwise);
  run_family("norm", 300, fuzz_norm);
  run_family("loss", 300, fuzz_loss);
  run_family("ctc_loss", 100, fuzz_ctc);
  run_family("index", 300, fuzz_index);
  run_family("gemm", 300, fuzz_gemm);
  run_family("grouped_gemm", 100, fuzz_grouped);
  run_family("quant", 300, fuzz_quant);
  run_family("quant linear / gguf", 200, fuzz_quant_linear);
  g_known_unsafe = false;
}

}  // namespace
}  // namespace baracuda
