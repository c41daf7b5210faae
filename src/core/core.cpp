// Core vocabulary: dtype names, status strings, layouts, SKU printing, DLPack, Target.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>

#include "baracuda/core/dlpack.hpp"
#include "baracuda/core/dtype.hpp"
#include "baracuda/core/preference.hpp"
#include "baracuda/core/sku.hpp"
#include "baracuda/core/status.hpp"
#include "baracuda/core/tensor.hpp"
#include "core/plan_common.hpp"

namespace baracuda {

namespace {
struct DTypeRow {
  DType t;
  const char* name;
  int bits;
  char kind;
};
constexpr DTypeRow kDTypeRows[] = {
#define BARACUDA_X(e, n, b, k) {DType::e, n, b, #k[0]},
    BARACUDA_DTYPES(BARACUDA_X)
#undef BARACUDA_X
};
// An id past the table (a DType cast from a bad integer) reads as this row: named in messages,
// zero bits, of no kind, so no predicate holds for it.
constexpr DTypeRow kInvalidRow{DType::f32, "invalid-dtype", 0, '?'};
const DTypeRow& row(DType t) {
  return static_cast<size_t>(t) < std::size(kDTypeRows) ? kDTypeRows[static_cast<int>(t)] : kInvalidRow;
}
}  // namespace

std::string_view name(DType t) { return row(t).name; }
int size_in_bits(DType t) { return row(t).bits; }
bool is_floating(DType t) { return row(t).kind == 'F'; }
bool is_complex(DType t) { return row(t).kind == 'C'; }
bool is_integral(DType t) { return row(t).kind == 'I' || row(t).kind == 'U'; }
bool is_packed(DType t) { return row(t).kind == 'P'; }

std::optional<DType> dtype_from_name(std::string_view s) {
  for (const auto& r : kDTypeRows) {
    if (s == r.name) return r.t;
  }
  static constexpr std::pair<std::string_view, DType> kShort[] = {
#define BARACUDA_X(e, n, b, k) {#e, DType::e},
      BARACUDA_DTYPES(BARACUDA_X)
#undef BARACUDA_X
      {"bool", DType::b8}, {"half", DType::f16}, {"float", DType::f32}, {"double", DType::f64},
  };
  for (const auto& [k, v] : kShort)
    if (s == k) return v;
  return std::nullopt;
}

const char* to_string(Status s) {
  switch (s) {
    case Status::Ok: return "Ok";
    case Status::InvalidProblem: return "InvalidProblem";
    case Status::Unsupported: return "Unsupported";
    case Status::MisalignedOperand: return "MisalignedOperand";
    case Status::BufferTooSmall: return "BufferTooSmall";
    case Status::WorkspaceTooSmall: return "WorkspaceTooSmall";
    case Status::BackendError: return "BackendError";
    case Status::CudaError: return "CudaError";
    case Status::NoDevice: return "NoDevice";
  }
  return "?";
}

const char* to_string(Direction d) { return d == Direction::Forward ? "forward" : "backward"; }

const char* to_string(Backend b) {
  switch (b) {
    case Backend::Any: return "any";
    case Backend::Native: return "native";
    case Backend::CuBlasLt: return "cublaslt";
    case Backend::CuDnn: return "cudnn";
    case Backend::CuFft: return "cufft";
    case Backend::CuSolver: return "cusolver";
    case Backend::CuRand: return "curand";
    case Backend::CuSparse: return "cusparse";
    case Backend::Nccl: return "nccl";
    case Backend::Cutlass: return "cutlass";
  }
  return "?";
}

// ---- Shape (every family describes its problems with it) ------------------------------------
Shape Shape::of(const Layout& l) {
  Shape s;
  s.rank = l.rank;
  s.dims = l.shape;
  return s;
}
Shape Shape::of(std::initializer_list<int64_t> d) {
  Shape s;
  if (d.size() > static_cast<size_t>(kMaxRank)) {
    s.rank = -1;  // more dims than we store: an invalid shape that select() refuses
    return s;
  }
  s.rank = static_cast<int>(d.size());
  std::copy(d.begin(), d.end(), s.dims.begin());
  return s;
}
int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= dims[i];
  return n;
}
bool Shape::operator==(const Shape& o) const {
  return rank == o.rank && std::equal(dims.begin(), dims.begin() + rank, o.dims.begin());
}
static std::string join(const std::array<int64_t, kMaxRank>& v, int n, char open, char close);
// Refusals print the shapes they refuse: a rank outside 0..8 is said, never walked.
std::string Shape::str() const { return join(dims, rank, '[', ']'); }

// ---- Layout ----------------------------------------------------------------------------------
int64_t Layout::numel() const {
  int64_t n = 1;
  for (int d = 0; d < rank; ++d) n *= shape[d];
  return n;
}

bool Layout::is_contiguous() const {
  int64_t expect = 1;
  for (int d = rank - 1; d >= 0; --d) {
    if (shape[d] == 1) continue;
    if (stride[d] != expect) return false;
    expect *= shape[d];
  }
  return true;
}

Layout Layout::contiguous(int r, const int64_t* s) {
  Layout l;
  if (r < 0 || r > kMaxRank) {
    l.rank = -1;  // more dims than we store: every plan's shape check refuses it
    return l;
  }
  l.rank = r;
  int64_t st = 1;
  for (int d = r - 1; d >= 0; --d) {
    l.shape[d] = s[d];
    l.stride[d] = st;
    st *= std::max<int64_t>(s[d], 1);
  }
  return l;
}

Layout Layout::contiguous(std::initializer_list<int64_t> s) {
  return contiguous(static_cast<int>(s.size()), s.begin());
}

void Layout::extent(int64_t* lo, int64_t* hi) const {
  *lo = 0;
  *hi = 0;
  if (numel() == 0) return;
  int64_t l = 0, h = 0;
  for (int d = 0; d < rank; ++d) {
    const int64_t span = (shape[d] - 1) * stride[d];
    if (span < 0) l += span;
    else h += span;
  }
  *lo = l;
  *hi = h + 1;
}

bool Layout::has_zero_stride() const {
  for (int d = 0; d < rank; ++d)
    if (shape[d] > 1 && stride[d] == 0) return true;
  return false;
}

bool Layout::has_internal_overlap() const {
  // Sort the non-trivial dims by |stride|; the layout is overlap-free if every stride exceeds
  // the span of all smaller-stride dims (a sufficient test, exact for the usual layouts).
  int64_t st[kMaxRank], sz[kMaxRank];
  int n = 0;
  for (int d = 0; d < rank; ++d) {
    if (shape[d] <= 1) continue;
    st[n] = stride[d] < 0 ? -stride[d] : stride[d];
    sz[n] = shape[d];
    ++n;
  }
  for (int i = 1; i < n; ++i)
    for (int j = i; j > 0 && st[j] < st[j - 1]; --j) {
      std::swap(st[j], st[j - 1]);
      std::swap(sz[j], sz[j - 1]);
    }
  int64_t span = 0;  // max offset reachable with dims before i
  for (int i = 0; i < n; ++i) {
    if (st[i] == 0 || st[i] <= span) return true;
    span += (sz[i] - 1) * st[i];
  }
  return false;
}

namespace {
/// Can `delta` be written as sum k_d * stride_d with |k_d| <= size_d - 1 (dims sorted by
/// decreasing stride, `span[d]` = reach of dims d..n-1)? Each stride exceeds the reach of the
/// smaller ones, so at most two coefficients per dim are candidates: <= 2^8 paths.
bool lattice_reaches(int64_t delta, const int64_t* st, const int64_t* sz, const int64_t* span, int d, int n) {
  if (d == n) return delta == 0;
  if (delta > span[d] || delta < -span[d]) return false;
  const int64_t q = delta / st[d];
  const int64_t k0 = (delta < 0 && q * st[d] != delta) ? q - 1 : q;  // floor division
  for (int64_t k = k0; k <= k0 + 1; ++k) {
    if (k > sz[d] - 1 || k < -(sz[d] - 1)) continue;
    if (lattice_reaches(delta - k * st[d], st, sz, span, d + 1, n)) return true;
  }
  return false;
}
}  // namespace

bool views_may_overlap(const void* a, const Layout& la, const void* b, const Layout& lb, int elem_bytes) {
  if (la.numel() == 0 || lb.numel() == 0) return false;
  int64_t alo, ahi, blo, bhi;
  la.extent(&alo, &ahi);
  lb.extent(&blo, &bhi);
  const auto pa = reinterpret_cast<intptr_t>(a), pb = reinterpret_cast<intptr_t>(b);
  if (pa + ahi * elem_bytes <= pb + blo * elem_bytes || pb + bhi * elem_bytes <= pa + alo * elem_bytes) return false;
  // Exact test for equal lattices shifted by a whole number of elements.
  bool same = la.rank == lb.rank;
  for (int d = 0; same && d < la.rank; ++d)
    same = la.shape[d] == lb.shape[d] && (la.shape[d] == 1 || la.stride[d] == lb.stride[d]);
  if (!same || la.has_internal_overlap() || (pb - pa) % elem_bytes != 0) return true;
  int64_t st[kMaxRank], sz[kMaxRank], span[kMaxRank + 1];
  int n = 0;
  for (int d = 0; d < la.rank; ++d) {
    if (la.shape[d] <= 1) continue;
    st[n] = la.stride[d] < 0 ? -la.stride[d] : la.stride[d];
    sz[n++] = la.shape[d];
  }
  for (int i = 1; i < n; ++i)  // decreasing stride
    for (int j = i; j > 0 && st[j] > st[j - 1]; --j) {
      std::swap(st[j], st[j - 1]);
      std::swap(sz[j], sz[j - 1]);
    }
  span[n] = 0;
  for (int d = n - 1; d >= 0; --d) span[d] = span[d + 1] + (sz[d] - 1) * st[d];
  return lattice_reaches((pb - pa) / elem_bytes, st, sz, span, 0, n);
}

// No iostreams in the library: inside processes that load another libstdc++ first (torch),
// std::ostringstream from our copy of the templates crashed (seen on the H200, 2026-11-26).
static std::string join(const std::array<int64_t, kMaxRank>& v, int n, char open, char close) {
  if (n < 0 || n > kMaxRank) return std::string(1, open) + "rank " + std::to_string(n) + ", outside 0..8" + close;
  std::string s(1, open);
  for (int d = 0; d < n; ++d) s += (d ? ", " : "") + std::to_string(v[d]);
  return s + close;
}
std::string Layout::shape_str() const { return join(shape, rank, '[', ']'); }
std::string Layout::stride_str() const { return join(stride, rank, '(', ')'); }

TensorRef make_ref(const void* data, DType dt, std::initializer_list<int64_t> shape) {
  return TensorRef{data, dt, Layout::contiguous(shape)};
}
TensorMut make_mut(void* data, DType dt, std::initializer_list<int64_t> shape) {
  return TensorMut{data, dt, Layout::contiguous(shape)};
}

// ---- SKU ------------------------------------------------------------------------------------
std::string PrecisionGuarantee::to_string() const {
  std::string s = "math=" + std::string(name(math)) + " acc=" + std::string(name(accumulator)) +
                  (deterministic ? " deterministic" : " nondeterministic") + (bit_stable ? " bit-stable" : "");
  if (!note.empty()) s += " (" + note + ")";
  return s;
}

std::string KernelSku::to_string() const {
  std::string s = category + "/" + op + " " + dtypes + " [" + baracuda::to_string(backend);
  if (!arch.empty()) s += " " + arch;
  if (!layout.empty()) s += " " + layout;
  if (!epilogue.empty()) s += " +" + epilogue;
  return s + "] " + precision.to_string();
}

// ---- Target ---------------------------------------------------------------------------------
Result<Target> Target::current() {
  int dev = -1;
  cudaError_t e = cudaGetDevice(&dev);
  int count = 0;
  if (e == cudaSuccess) e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    cudaGetLastError();  // clear the sticky "no device" error
    return make_error(Status::NoDevice, std::string("Target::current: no CUDA device (") +
                                            (e != cudaSuccess ? cudaGetErrorString(e) : "0 devices") + ")");
  }
  cudaDeviceProp prop{};
  e = cudaGetDeviceProperties(&prop, dev);
  if (e != cudaSuccess) return make_error(Status::CudaError, std::string("Target::current: ") + cudaGetErrorString(e));
  return Target{dev, prop.major * 10 + prop.minor, prop.multiProcessorCount};
}

// ---- DLPack ---------------------------------------------------------------------------------
namespace dlpack {

Result<DType> to_dtype(DataType dt) {
  auto bad = [&] {
    return make_error(Status::Unsupported, "dlpack: dtype code=" + std::to_string(dt.code) + " bits=" +
                                               std::to_string(dt.bits) + " lanes=" + std::to_string(dt.lanes) +
                                               " has no baracuda equivalent");
  };
  if (dt.lanes != 1) return bad();
  switch (dt.code) {
    case kDLInt:
      switch (dt.bits) { case 8: return DType::s8; case 16: return DType::s16; case 32: return DType::s32; case 64: return DType::s64; case 4: return DType::s4; }
      break;
    case kDLUInt:
      switch (dt.bits) { case 8: return DType::u8; case 32: return DType::u32; case 4: return DType::u4; case 1: return DType::b8; }
      break;
    case kDLFloat:
      switch (dt.bits) { case 16: return DType::f16; case 32: return DType::f32; case 64: return DType::f64; }
      break;
    case kDLBfloat:
      if (dt.bits == 16) return DType::bf16;
      break;
    case kDLComplex:
      if (dt.bits == 64) return DType::c64;
      if (dt.bits == 128) return DType::c128;
      break;
    case kDLBool:
      if (dt.bits == 8) return DType::b8;
      break;
    case kDLFloat8_e4m3fn:
      if (dt.bits == 8) return DType::f8e4m3;
      break;
    case kDLFloat8_e5m2:
      if (dt.bits == 8) return DType::f8e5m2;
      break;
    default: break;
  }
  return bad();
}

DataType from_dtype(DType t) {
  const uint8_t bits = static_cast<uint8_t>(size_in_bits(t));
  switch (t) {
    case DType::f64: case DType::f32: case DType::f16: return {kDLFloat, bits, 1};
    case DType::bf16: return {kDLBfloat, 16, 1};
    case DType::f8e4m3: return {kDLFloat8_e4m3fn, 8, 1};
    case DType::f8e5m2: return {kDLFloat8_e5m2, 8, 1};
    case DType::s8: case DType::s16: case DType::s32: case DType::s64: case DType::s4: return {kDLInt, bits, 1};
    case DType::u8: case DType::u32: case DType::u4: return {kDLUInt, bits, 1};
    case DType::b8: return {kDLBool, 8, 1};
    case DType::c64: case DType::c128: return {kDLComplex, bits, 1};
  }
  return {kDLFloat, 32, 1};
}

Result<TensorMut> to_tensor(const Tensor& t) {
  if (t.ndim < 0 || t.ndim > kMaxRank)
    return make_error(Status::Unsupported, "dlpack: ndim must be in [0, 8], got " + std::to_string(t.ndim));
  auto dt = to_dtype(t.dtype);
  if (!dt) return dt.error();
  const int esize = size_in_bytes(*dt);
  if (t.byte_offset % static_cast<uint64_t>(esize) != 0)
    return make_error(Status::MisalignedOperand, "dlpack: byte_offset " + std::to_string(t.byte_offset) +
                                                     " is not a multiple of the element size " + std::to_string(esize));
  TensorMut m;
  m.data = static_cast<char*>(t.data) + t.byte_offset;
  m.dtype = *dt;
  m.layout.rank = t.ndim;
  for (int d = 0; d < t.ndim; ++d) m.layout.shape[d] = t.shape[d];
  if (t.strides) {
    for (int d = 0; d < t.ndim; ++d) m.layout.stride[d] = t.strides[d];
  } else {
    m.layout = Layout::contiguous(t.ndim, t.shape);
  }
  return m;
}

Tensor from_tensor(const TensorRef& t, Device dev, int64_t* shape, int64_t* strides) {
  for (int d = 0; d < t.rank(); ++d) {
    shape[d] = t.size(d);
    strides[d] = t.stride(d);
  }
  return Tensor{const_cast<void*>(t.data), dev, t.rank(), from_dtype(t.dtype), shape, strides, 0};
}

}  // namespace dlpack
namespace detail {
std::string dtype_list(DTypeSet set) {
  std::string out;
  for (int i = 0; i < kNumDTypes; ++i) {
    if (!contains(set, static_cast<DType>(i))) continue;
    if (!out.empty()) out += ", ";
    out += name(static_cast<DType>(i));
  }
  return out.empty() ? "none" : out;
}

std::string preference_key(const PlanPreference& p) {
  const int v[] = {static_cast<int>(p.backend), p.require_deterministic, p.require_bit_stable,
                   static_cast<int>(p.tf32), static_cast<int>(p.reduced_precision_reduction),
                   static_cast<int>(p.vectorized)};
  return std::string(reinterpret_cast<const char*>(v), sizeof v);
}
}  // namespace detail

}  // namespace baracuda
