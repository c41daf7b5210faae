// IndexPlan::run: lowers each op onto its engine (index_launch.hpp). Copy-engine ops become one
// or more mapped copies (cat/stack: one per input), simplified on the host (size-1 dims folded,
// dims ordered by the output's strides, contiguous dims merged, contiguous inner runs widened
// to 16-byte words, permutations routed to the tiled transpose); gather/scatter ops become a
// slice geometry (Geom).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "baracuda/ops/index.hpp"
#include "core/plan_common.hpp"
#include "ops/index/index_launch.hpp"
#include "ops/index/index_plan.hpp"

namespace baracuda {
namespace {
namespace ix = detail::idx;

Error cuda_error(const std::string& label, const char* what, cudaError_t e) {
  return make_error(Status::CudaError, label + ": " + what + " failed: " + cudaGetErrorString(e));
}

bool is_segment_op(IndexOp op) {
  return op == IndexOp::segment_sum || op == IndexOp::segment_max || op == IndexOp::segment_min ||
         op == IndexOp::segment_prod || op == IndexOp::segment_mean;
}

std::string op_label(const IndexDesc& d) {
  return std::string(info(d.op).name) + (d.direction == Direction::Backward ? "_backward" : "");
}

// ---- the mapped copy -------------------------------------------------------------------------------
struct MapSpec {
  int64_t out_size = 1, out_stride = 0, in_size = 1, in_stride = 0, a = 0;
  int mode = ix::kIdentity;
  int tri = 0;  ///< 1: triangle row dim, 2: triangle column dim
  bool plain() const { return mode == ix::kIdentity && a == 0 && in_size == out_size && tri == 0; }
};

struct CopyJob {
  std::vector<MapSpec> dims;
  char* out = nullptr;
  const char* in = nullptr;
  int eb = 1;
  unsigned char fill[16] = {};
  int64_t tri_k = 0;
  int tri_upper = 0;
};

/// Host copy of the kernels' map (MapMode), for folding size-1 dims.
int64_t host_map(const MapSpec& m, int64_t o) {
  const int64_t n = m.in_size;
  switch (m.mode) {
    case ix::kFlip:
      return n - 1 - o;
    case ix::kRoll: {
      const int64_t i = o - m.a;
      return i < 0 ? i + n : i;
    }
    case ix::kReflect: {
      int64_t i = o - m.a;
      if (i < 0) i = -i;
      if (i >= n) i = 2 * (n - 1) - i;
      return i;
    }
    case ix::kReplicate:
      return std::clamp<int64_t>(o - m.a, 0, std::max<int64_t>(n - 1, 0));
    case ix::kCircular: {
      if (n == 0) return -1;
      const int64_t i = (o - m.a) % n;
      return i < 0 ? i + n : i;
    }
    case ix::kTile:
      return n == 0 ? -1 : o % n;
    case ix::kRepeat:
      return m.a > 0 ? o / m.a : -1;
    default:
      return o - m.a;
  }
}

struct Lowered {
  bool transpose = false;
  bool rows = false;  ///< the row variant (launch_row_copy)
  bool empty = false;
  ix::CopyParams cp;
  ix::TransposeParams tp;
  int eb = 1;
  bool i64 = false;
  std::string layout() const {
    if (empty) return "empty";
    if (transpose)
      return tp.words ? "register-transpose-" + std::to_string(eb) + "B-" + std::to_string(tp.words) + "B-vectors"
                      : "tiled-transpose-" + std::to_string(eb) + "B";
    const bool plain = ix::plain_copy(cp);
    return std::string(cp.in == nullptr        ? "fill"
                       : ix::plain_rows_ok(cp) ? "row-copy"
                       : plain                 ? "strided-copy"
                       : rows                  ? (ix::row_copy_long_rows(cp, eb) ? "mapped-rows-long"
                                                  : ix::row_copy_words(cp, eb) ? "mapped-rows-words"
                                                                               : "mapped-rows")
                                               : "mapped-copy") +
           "-" + std::to_string(eb) + "B-" + (i64 ? "i64" : "i32");
  }
};

/// allow_rows: a mapped (not plain) copy whose innermost output dim is unit-stride may take the
/// row variant (pad's forward).
Lowered lower_copy(CopyJob job, bool allow_vec, bool allow_rows = false) {
  Lowered L;
  int64_t total = 1;
  for (const auto& m : job.dims) total *= m.out_size;
  if (total == 0) {
    L.empty = true;
    return L;
  }
  // Fold size-1 output dims: their one input coordinate moves the input pointer (or, when it
  // falls outside the input, makes every element the fill value).
  std::vector<MapSpec> dims;
  for (const auto& m : job.dims) {
    if (m.out_size == 1 && m.tri == 0) {
      if (job.in) {
        const int64_t i = host_map(m, 0);
        if (i < 0 || i >= m.in_size)
          job.in = nullptr;
        else
          job.in += i * m.in_stride * job.eb;
      }
      continue;
    }
    dims.push_back(m);
  }
  if (!job.in)
    for (auto& m : dims) {
      m.in_stride = 0;
      m.mode = ix::kIdentity;
      m.a = 0;
      m.in_size = m.out_size;
    }
  // Output memory order: outer dims first, so consecutive threads write consecutive addresses.
  std::stable_sort(dims.begin(), dims.end(),
                   [](const MapSpec& x, const MapSpec& y) { return x.out_stride > y.out_stride; });
  // Merge plain dims contiguous on both sides.
  std::vector<MapSpec> merged;
  for (const auto& m : dims) {
    if (!merged.empty()) {
      MapSpec& p = merged.back();
      if (p.plain() && m.plain() && p.out_stride == m.out_stride * m.out_size &&
          p.in_stride == m.in_stride * m.in_size) {
        p.out_size *= m.out_size;
        p.in_size = p.out_size;
        p.out_stride = m.out_stride;
        p.in_stride = m.in_stride;
        continue;
      }
    }
    merged.push_back(m);
  }
  dims.swap(merged);
  int eb = job.eb;
  const int rank = static_cast<int>(dims.size());
  bool all_plain = job.in != nullptr;
  for (const auto& m : dims) all_plain = all_plain && m.plain();

  // A permutation whose innermost output dim is not the input's unit-stride dim: tiles.
  if (all_plain && rank >= 2 && dims.back().out_stride == 1 && dims.back().in_stride != 1) {
    int j = -1;
    for (int k = 0; k < rank - 1; ++k)
      if (dims[k].in_stride == 1 && dims[k].out_size > 1) j = k;
    if (j >= 0 && dims[j].out_size >= 16 && dims.back().out_size >= 16) {
      L.transpose = true;
      L.eb = eb;
      auto& t = L.tp;
      t.rank = rank;
      for (int k = 0; k < rank; ++k) {
        t.size[k] = dims[k].out_size;
        t.in_stride[k] = dims[k].in_stride;
        t.out_stride[k] = dims[k].out_stride;
      }
      t.in_inner = j;
      t.out_inner = rank - 1;
      t.out = job.out;
      t.in = job.in;
      t.batch = total / (dims[j].out_size * dims.back().out_size);
      t.words = allow_vec ? ix::transpose_words_bytes(t, eb) : 0;
      return L;
    }
  }
  // Widen a contiguous, unmapped inner run to words of up to 16 bytes.
  if (allow_vec && rank >= 1) {
    MapSpec& in = dims.back();
    const bool inner_ok = in.plain() || (!job.in && in.tri == 0);
    if (inner_ok && in.out_stride == 1 && (!job.in || in.in_stride == 1)) {
      for (int k = 16 / eb; k >= 2; k /= 2) {
        bool ok = in.out_size % k == 0 && reinterpret_cast<uintptr_t>(job.out) % (eb * k) == 0 &&
                  (!job.in || reinterpret_cast<uintptr_t>(job.in) % (eb * k) == 0);
        for (int d = 0; d + 1 < rank && ok; ++d) ok = dims[d].out_stride % k == 0 && dims[d].in_stride % k == 0;
        if (!ok) continue;
        for (int d = 0; d + 1 < rank; ++d) {
          dims[d].out_stride /= k;
          dims[d].in_stride /= k;
        }
        in.out_size /= k;
        in.in_size /= k;
        unsigned char f[16];
        for (int r = 0; r < k; ++r) std::memcpy(f + r * eb, job.fill, eb);
        std::memcpy(job.fill, f, eb * k);
        eb *= k;
        break;
      }
    }
  }
  auto& p = L.cp;
  p.rank = rank;
  int64_t out_reach = 0, in_reach = 0, elems = 1;
  for (int k = 0; k < rank; ++k) {
    const MapSpec& m = dims[k];
    p.d[k] = {m.out_size, m.out_stride, m.in_size, m.in_stride, m.a, m.mode};
    if (m.tri == 1) p.tri_row = k;
    if (m.tri == 2) p.tri_col = k;
    out_reach += (m.out_size - 1) * m.out_stride;
    in_reach += std::max<int64_t>(m.in_size - 1, 0) * m.in_stride;
    elems *= m.out_size;
    if (std::abs(m.a) >= (int64_t{1} << 30) || m.out_size >= (int64_t{1} << 30)) in_reach = int64_t{1} << 40;
  }
  p.out = job.out;
  p.in = job.in;
  p.total = elems;
  p.tri_k = job.tri_k;
  p.tri_upper = job.tri_upper;
  std::memcpy(p.fill, job.fill, 16);
  // 32-bit arithmetic while offsets fit and the grid-stride counter cannot overflow.
  const int64_t lim = std::numeric_limits<int32_t>::max();
  L.i64 = elems >= (int64_t{1} << 30) || out_reach >= lim || in_reach >= lim;
  L.eb = eb;
  L.rows = allow_rows && allow_vec && !all_plain && ix::row_copy_ok(p, eb);
  return L;
}

cudaError_t launch_lowered(const Lowered& L, cudaStream_t stream) {
  if (L.empty) return cudaSuccess;
  if (L.transpose) return ix::launch_transpose(L.tp, L.eb, stream);
  if (L.rows) return ix::launch_row_copy(L.cp, L.eb, L.i64, stream);
  return ix::launch_copy(L.cp, L.eb, L.i64, stream);
}

/// One identity dim per dim of `out`, reading `in` with its strides.
CopyJob identity_job(const TensorMut& out, const TensorRef& in, int eb) {
  CopyJob j;
  j.out = static_cast<char*>(out.data);
  j.in = static_cast<const char*>(in.data);
  j.eb = eb;
  for (int d = 0; d < out.layout.rank; ++d) {
    MapSpec m;
    m.out_size = out.layout.shape[d];
    m.out_stride = out.layout.stride[d];
    m.in_size = in.layout.shape[d];
    m.in_stride = in.layout.stride[d];
    j.dims.push_back(m);
  }
  return j;
}

/// The mapped copies of a copy-engine op, in launch order.
std::vector<CopyJob> copy_jobs(const IndexDesc& d, const IndexArgs& a) {
  const int eb = size_in_bytes(d.dtype);
  std::vector<CopyJob> jobs;
  switch (d.op) {
    case IndexOp::cat: {
      int64_t off = 0;
      for (const TensorRef& t : a.inputs) {
        TensorMut view = a.out;
        view.data = static_cast<char*>(a.out.data) + off * a.out.layout.stride[d.dim] * eb;
        view.layout.shape[d.dim] = t.layout.shape[d.dim];
        off += t.layout.shape[d.dim];
        jobs.push_back(identity_job(view, t, eb));
      }
      return jobs;
    }
    case IndexOp::stack: {
      int64_t k = 0;
      for (const TensorRef& t : a.inputs) {
        TensorMut view = a.out;
        view.data = static_cast<char*>(a.out.data) + k++ * a.out.layout.stride[d.dim] * eb;
        view.layout.rank = a.out.layout.rank - 1;
        for (int i = d.dim; i < view.layout.rank; ++i) {
          view.layout.shape[i] = a.out.layout.shape[i + 1];
          view.layout.stride[i] = a.out.layout.stride[i + 1];
        }
        jobs.push_back(identity_job(view, t, eb));
      }
      return jobs;
    }
    default:
      break;
  }
  CopyJob j = identity_job(a.out, a.x, eb);
  const int r = a.out.layout.rank;
  switch (d.op) {
    case IndexOp::pad: {
      ix::fill_bits(d.dtype, d.value, j.fill);
      for (int i = 0; i < r; ++i) {
        MapSpec& m = j.dims[i];
        const int64_t before = d.pad[2 * i], after = d.pad[2 * i + 1];
        m.a = before;
        if (d.pad_mode == PadMode::constant || (before == 0 && after == 0)) continue;
        m.mode = d.pad_mode == PadMode::reflect     ? ix::kReflect
                 : d.pad_mode == PadMode::replicate ? ix::kReplicate
                                                    : ix::kCircular;
      }
      break;
    }
    case IndexOp::flip:
      for (int i = 0; i < r; ++i)
        if ((d.flip_dims >> i) & 1u) j.dims[i].mode = ix::kFlip;
      break;
    case IndexOp::roll:
      for (int i = 0; i < r; ++i) {
        const int64_t n = j.dims[i].in_size;
        if (n == 0) continue;
        const int64_t s = ((d.shifts[i] % n) + n) % n;
        if (s == 0) continue;
        j.dims[i].mode = ix::kRoll;
        j.dims[i].a = s;
      }
      break;
    case IndexOp::tile:
      for (int i = 0; i < r; ++i)
        if (d.repeats[i] != 1) j.dims[i].mode = ix::kTile;
      break;
    case IndexOp::repeat_interleave:
      if (d.repeats[d.dim] != 1) {
        j.dims[d.dim].mode = ix::kRepeat;
        j.dims[d.dim].a = d.repeats[d.dim];
      }
      break;
    case IndexOp::triu:
    case IndexOp::tril:
      j.dims[r - 2].tri = 1;
      j.dims[r - 1].tri = 2;
      j.tri_k = d.diagonal;
      j.tri_upper = d.op == IndexOp::triu ? 1 : 0;
      break;
    default:
      break;
  }
  jobs.push_back(std::move(j));
  return jobs;
}

/// out := value (every element), through the copy engine's fill path.
CopyJob fill_job(const TensorMut& out, DType dt, double value) {
  CopyJob j;
  j.out = static_cast<char*>(out.data);
  j.eb = size_in_bytes(dt);
  ix::fill_bits(dt, value, j.fill);
  for (int d = 0; d < out.layout.rank; ++d) {
    MapSpec m;
    m.out_size = m.in_size = out.layout.shape[d];
    m.out_stride = out.layout.stride[d];
    j.dims.push_back(m);
  }
  return j;
}

// ---- gather / scatter geometry --------------------------------------------------------------------
struct GeomInfo {
  ix::Geom g;
  const char* a_ptr = nullptr;  ///< side A base (gather: out; scatter: src)
  const char* b_ptr = nullptr;  ///< side B base (gather: source; scatter: out)
  int64_t b_reach = 0;          ///< B's largest element offset + 1
  int64_t a_reach = 0;
};

int64_t reach(const Layout& l) {
  int64_t r = 0;
  for (int d = 0; d < l.rank; ++d) {
    if (l.shape[d] == 0) return 0;
    r += (l.shape[d] - 1) * l.stride[d];
  }
  return r + 1;
}

void add_index_dim(ix::Geom& g, int64_t size, int64_t istride, int64_t astride, int64_t bstride) {
  g.isize[g.ri] = size;
  g.index_stride[g.ri] = istride;
  g.a_istride[g.ri] = astride;
  g.b_istride[g.ri] = bstride;
  ++g.ri;
}
void add_slice_dim(ix::Geom& g, int64_t size, int64_t astride, int64_t bstride) {
  if (size == 1) return;
  g.ssize[g.rs] = size;
  g.a_sstride[g.rs] = astride;
  g.b_sstride[g.rs] = bstride;
  ++g.rs;
}

bool in_list(const std::array<int8_t, kMaxRank>& a, int n, int v) {
  for (int i = 0; i < n && i < kMaxRank; ++i)
    if (a[i] == v) return true;
  return false;
}

/// The batch dims of a lax op's indices: every dim but index_vector_dim, in order.
std::vector<int> lax_batch_dims(const IndexDesc& d) {
  std::vector<int> b;
  for (int i = 0; i < d.index_shape.rank; ++i)
    if (i != d.index_vector_dim) b.push_back(i);
  return b;
}

/// Side A is the tensor addressed by position, side B the one addressed by the index. `lin`:
/// the linearized offsets of index / index_put / lax ops (element offsets in B divided by
/// `unit`). per_element: lax_scatter's sorted form, one offset per updates element (no slice
/// dims).
GeomInfo geometry(const IndexDesc& d, const IndexArgs& a, const int64_t* lin = nullptr, int64_t unit = 1,
                  bool per_element = false) {
  GeomInfo gi;
  ix::Geom& g = gi.g;
  g.index = a.index.data;
  g.error = static_cast<int*>(a.error.data);
  const Layout& il = a.index.layout;
  const bool gather = info(d.op).engine == IndexEngine::gather && d.direction == Direction::Forward;
  const bool from_src = d.op == IndexOp::scatter_add || d.op == IndexOp::index_add || d.op == IndexOp::scatter ||
                        d.op == IndexOp::index_copy || d.op == IndexOp::scatter_reduce || d.op == IndexOp::index_put ||
                        d.op == IndexOp::lax_scatter;
  const TensorRef A = gather ? TensorRef(a.out) : (from_src ? a.src : a.x);
  const TensorRef B = gather ? a.x : TensorRef(a.out);
  gi.a_ptr = static_cast<const char*>(A.data);
  gi.b_ptr = static_cast<const char*>(B.data);
  const Layout& al = A.layout;
  const Layout& bl = B.layout;
  if (ix::is_linearized(d.op)) {
    // Index dims: the batch dims, reading the offsets (row-major over them); B's share of the
    // offset is all in the index value (b_istride 0).
    g.index = lin;
    g.kstride = unit;
    g.ksize = std::numeric_limits<int64_t>::max();
    g.report = 0;  // the linearization reported already (check mode)
    std::vector<int64_t> bsize;
    std::vector<int> a_batch;  // A's dim of each batch dim
    const int R = d.in_shape.rank;
    if (d.op == IndexOp::index || d.op == IndexOp::index_put) {
      for (int i = 0; i < d.index_shape.rank; ++i) {
        bsize.push_back(d.index_shape.dims[i]);
        a_batch.push_back(i);
      }
    } else if (per_element) {  // every updates dim is a batch dim
      for (int i = 0; i < al.rank; ++i) {
        bsize.push_back(al.shape[i]);
        a_batch.push_back(i);
      }
    } else {
      for (int b : lax_batch_dims(d)) bsize.push_back(d.index_shape.dims[b]);
      for (int i = 0; i < al.rank; ++i)
        if (!in_list(d.offset_dims, d.num_offset_dims, i)) a_batch.push_back(i);
    }
    int64_t st = 1;
    std::vector<int64_t> lin_stride(bsize.size());
    for (int i = static_cast<int>(bsize.size()) - 1; i >= 0; --i) {
      lin_stride[i] = st;
      st *= bsize[i];
    }
    for (size_t i = 0; i < bsize.size(); ++i) add_index_dim(g, bsize[i], lin_stride[i], al.stride[a_batch[i]], 0);
    if (d.op == IndexOp::index || d.op == IndexOp::index_put) {
      const int rb = d.index_shape.rank, k = d.num_indices;
      for (int i = k; i < R; ++i) add_slice_dim(g, d.in_shape.dims[i], al.stride[rb + i - k], bl.stride[i]);
    } else if (per_element) {
      // no slice dims: the offsets hold the window position too
    } else if (d.op == IndexOp::lax_gather) {  // operand dims not collapsed <-> out's offset dims
      for (int o = 0, j = 0; o < R; ++o) {
        if (in_list(d.collapsed_dims, d.num_collapsed_dims, o)) continue;
        add_slice_dim(g, d.slice_sizes[o], al.stride[d.offset_dims[j++]], bl.stride[o]);
      }
    } else {  // lax_scatter: operand dims not inserted <-> updates' window dims
      for (int o = 0, j = 0; o < R; ++o) {
        if (in_list(d.collapsed_dims, d.num_collapsed_dims, o)) continue;
        const int u = d.offset_dims[j++];
        add_slice_dim(g, al.shape[u], al.stride[u], bl.stride[o]);
      }
    }
  } else {
    switch (d.op) {
      case IndexOp::gather:
      case IndexOp::scatter:
      case IndexOp::scatter_add:
      case IndexOp::scatter_reduce:  // element mode: the index's dims, the indexed dim replaced
        for (int i = 0; i < il.rank; ++i)
          add_index_dim(g, il.shape[i], il.stride[i], al.stride[i], i == d.dim ? 0 : bl.stride[i]);
        g.kstride = bl.stride[d.dim];
        g.ksize = bl.shape[d.dim];
        break;
      case IndexOp::index_select:
      case IndexOp::index_copy:
      case IndexOp::index_add:
        add_index_dim(g, il.shape[0], il.stride[0], al.stride[d.dim], 0);
        for (int i = 0; i < al.rank; ++i)
          if (i != d.dim) add_slice_dim(g, al.shape[i], al.stride[i], bl.stride[i]);
        g.kstride = bl.stride[d.dim];
        g.ksize = bl.shape[d.dim];
        break;
      case IndexOp::embedding:  // A = rows [*ids, D], B = table [N, D]
        for (int i = 0; i < il.rank; ++i) add_index_dim(g, il.shape[i], il.stride[i], al.stride[i], 0);
        add_slice_dim(g, al.shape[il.rank], al.stride[il.rank], bl.stride[1]);
        g.kstride = bl.stride[0];
        g.ksize = bl.shape[0];
        if (d.direction == Direction::Backward) g.skip = d.padding_idx;
        break;
      case IndexOp::segment_sum:
      case IndexOp::segment_max:
      case IndexOp::segment_min:
      case IndexOp::segment_prod:
      case IndexOp::segment_mean:
        add_index_dim(g, il.shape[0], il.stride[0], al.stride[0], 0);
        for (int i = 1; i < al.rank; ++i) add_slice_dim(g, al.shape[i], al.stride[i], bl.stride[i]);
        g.kstride = bl.stride[0];
        g.ksize = bl.shape[0];
        g.report = 0;  // JAX drops out-of-range segment ids
        break;
      case IndexOp::one_hot: {  // A = out [*index, C]; the slice dim is the classes
        gi.b_ptr = nullptr;
        for (int i = 0; i < il.rank; ++i) add_index_dim(g, il.shape[i], il.stride[i], a.out.layout.stride[i], 0);
        add_slice_dim(g, d.num_segments, a.out.layout.stride[il.rank], 0);
        g.ksize = d.num_segments;
        break;
      }
      default:
        break;
    }
  }
  // Merge slice dims contiguous on both sides (a [L, 7, 3] segment slice becomes 21 elements):
  // fewer divisions per element, and the row kernels see one long row.
  int rs = 0;
  for (int i = 0; i < g.rs; ++i) {
    if (rs > 0 && g.a_sstride[rs - 1] == g.a_sstride[i] * g.ssize[i] &&
        g.b_sstride[rs - 1] == g.b_sstride[i] * g.ssize[i]) {
      g.ssize[rs - 1] *= g.ssize[i];
      g.a_sstride[rs - 1] = g.a_sstride[i];
      g.b_sstride[rs - 1] = g.b_sstride[i];
      continue;
    }
    g.ssize[rs] = g.ssize[i];
    g.a_sstride[rs] = g.a_sstride[i];
    g.b_sstride[rs] = g.b_sstride[i];
    ++rs;
  }
  g.rs = rs;
  g.L = 1;
  for (int i = 0; i < g.ri; ++i) g.L *= g.isize[i];
  g.P = 1;
  for (int i = 0; i < g.rs; ++i) g.P *= g.ssize[i];
  gi.a_reach = reach(al);
  gi.b_reach = d.op == IndexOp::one_hot ? 0 : reach(bl);
  return gi;
}

/// The operand whose dims the linearized offsets address (gather side: x; scatter side: out).
const Layout& indexed_layout(const IndexDesc& d, const IndexArgs& a) {
  return info(d.op).engine == IndexEngine::gather ? a.x.layout : a.out.layout;
}

/// The widest unit (a power of two up to 16 / elem_bytes elements) that divides every stride the
/// linearized components multiply: offsets in those units let the gather widen its words as
/// index_select's does (x[ids] of rows moves 16-byte words). 1 for scatters (they do not widen).
int64_t linear_unit(const IndexDesc& d, const IndexArgs& a, bool allow_vec) {
  if (!allow_vec || info(d.op).engine != IndexEngine::gather) return 1;
  const Layout& l = indexed_layout(d, a);
  int64_t u = 16 / size_in_bytes(d.dtype);
  for (int j = 0; j < d.num_indices && j < kMaxRank; ++j) {
    const int od = d.op == IndexOp::index ? j : d.start_index_map[j];
    while (u > 1 && l.stride[od] % u != 0) u /= 2;
  }
  return u;
}

/// The linearization of the index components of index / index_put / lax ops (per_element: see
/// geometry()).
ix::LinParams lin_params(const IndexDesc& d, const IndexArgs& a, int64_t* out, int64_t unit, bool per_element = false) {
  ix::LinParams p;
  const Layout& l = indexed_layout(d, a);
  p.mode = static_cast<int>(d.mode);
  p.out = out;
  p.error = static_cast<int*>(a.error.data);
  p.k = d.num_indices;
  const int isz = size_in_bytes(d.index_dtype);
  if (d.op == IndexOp::index || d.op == IndexOp::index_put) {
    p.rb = d.index_shape.rank;
    for (int i = 0; i < p.rb; ++i) p.bsize[i] = d.index_shape.dims[i];
    for (int j = 0; j < p.k; ++j) {
      p.comp[j] = a.indices[j].data;
      for (int i = 0; i < p.rb; ++i) p.cstride[j][i] = a.indices[j].layout.stride[i];
      p.size[j] = l.shape[j];
      p.stride[j] = l.stride[j] / unit;
      p.window[j] = 1;
    }
  } else {
    const std::vector<int> bd = lax_batch_dims(d);
    const Layout& il = a.index.layout;
    // Batch dim i of the offsets and the indices' dim it walks (-1: a window dim, per_element).
    std::vector<int> walk;
    if (per_element) {
      const Layout& ul = a.src.layout;
      int b = 0, w = 0;
      for (int u = 0; u < ul.rank; ++u) {
        p.bsize[u] = ul.shape[u];
        if (in_list(d.offset_dims, d.num_offset_dims, u)) {
          int od = 0, seen = -1;  // the w-th operand dim not inserted
          for (; od < l.rank; ++od)
            if (!in_list(d.collapsed_dims, d.num_collapsed_dims, od) && ++seen == w) break;
          p.bout[u] = l.stride[od] / unit;
          walk.push_back(-1);
          ++w;
        } else {
          walk.push_back(bd[b++]);
        }
      }
      p.rb = ul.rank;
    } else {
      p.rb = static_cast<int>(bd.size());
      for (int i = 0; i < p.rb; ++i) {
        p.bsize[i] = il.shape[bd[i]];
        walk.push_back(bd[i]);
      }
    }
    const bool vec = d.index_vector_dim < il.rank;
    for (int j = 0; j < p.k; ++j) {
      const int od = d.start_index_map[j];
      p.comp[j] = static_cast<const char*>(a.index.data) + (vec ? j * il.stride[d.index_vector_dim] * isz : 0);
      for (int i = 0; i < p.rb; ++i) p.cstride[j][i] = walk[i] >= 0 ? il.stride[walk[i]] : 0;
      p.size[j] = l.shape[od];
      p.stride[j] = l.stride[od] / unit;
      if (d.op == IndexOp::lax_gather) {
        p.window[j] = d.slice_sizes[od];
      } else if (in_list(d.collapsed_dims, d.num_collapsed_dims, od)) {
        p.window[j] = 1;
      } else {  // the update window's size along od: its position among the window dims
        int pos = 0;
        for (int o = 0; o < od; ++o) pos += in_list(d.collapsed_dims, d.num_collapsed_dims, o) ? 0 : 1;
        p.window[j] = a.src.layout.shape[d.offset_dims[pos]];
      }
    }
  }
  p.L = 1;
  for (int i = 0; i < p.rb; ++i) p.L *= p.bsize[i];
  return p;
}

/// Gather only (byte movers): widens a unit-stride innermost slice dim to words of up to 16 bytes.
int widen_gather(ix::Geom& g, const char* a, const char* b, int eb) {
  if (g.rs == 0) return eb;
  const int in = g.rs - 1;
  if (g.a_sstride[in] != 1 || g.b_sstride[in] != 1) return eb;
  for (int k = 16 / eb; k >= 2; k /= 2) {
    bool ok = g.ssize[in] % k == 0 && g.kstride % k == 0 && reinterpret_cast<uintptr_t>(a) % (eb * k) == 0 &&
              reinterpret_cast<uintptr_t>(b) % (eb * k) == 0;
    for (int i = 0; i < g.ri && ok; ++i) ok = g.a_istride[i] % k == 0 && g.b_istride[i] % k == 0;
    for (int i = 0; i < in && ok; ++i) ok = g.a_sstride[i] % k == 0 && g.b_sstride[i] % k == 0;
    if (!ok) continue;
    g.kstride /= k;
    for (int i = 0; i < g.ri; ++i) {
      g.a_istride[i] /= k;
      g.b_istride[i] /= k;
    }
    for (int i = 0; i < in; ++i) {
      g.a_sstride[i] /= k;
      g.b_sstride[i] /= k;
    }
    g.ssize[in] /= k;
    g.P /= k;
    return eb * k;
  }
  return eb;
}

bool gather_i64(const GeomInfo& gi) {
  const int64_t lim = std::numeric_limits<int32_t>::max();
  // Linearized offsets are 64-bit element offsets: their product with kstride needs 64 bits.
  return gi.g.L * gi.g.P >= (int64_t{1} << 30) || gi.a_reach >= lim || gi.b_reach >= lim ||
         gi.g.ksize == std::numeric_limits<int64_t>::max();
}

/// The gather kernel for these tensors (after widening to `eb`-byte words): staged (torch.gather
/// along a unit-stride source dim), rows (one slice dim of >= 32 words) or per element.
enum class GatherKind { staged, rows, element };
GatherKind gather_kind(const IndexDesc& d, const ix::Geom& g, int eb, bool allow_vec) {
  if (allow_vec && d.op == IndexOp::gather && ix::gather_staged_ok(g, d.dim, eb)) return GatherKind::staged;
  if (allow_vec && ix::gather_rows_ok(g)) return GatherKind::rows;
  return GatherKind::element;
}

/// The kernel-level reduction of a reducing scatter (the atomic and sorted paths share it).
ix::Reduce reduce_of(const IndexDesc& d) {
  // embedding's backward with scale_grad_by_freq: each row's sum over its run of equal ids
  // divided by the run's length, i.e. the sorted path's mean.
  if (d.op == IndexOp::embedding && d.direction == Direction::Backward && d.scale_grad_by_freq) return ix::Reduce::mean;
  switch (ix::reduction_of(d)) {
    case ScatterReduce::prod:
      return ix::Reduce::prod;
    case ScatterReduce::mean:
      return ix::Reduce::mean;
    case ScatterReduce::amax:
      return ix::Reduce::max;
    case ScatterReduce::amin:
      return ix::Reduce::min;
    default:
      return ix::Reduce::sum;
  }
}

/// Whether the sorted reduction combines with what `out` holds before it (self, or the
/// identity the segment ops start from); false: it writes the reduction of the sources alone.
bool sorted_include_self(const IndexDesc& d) {
  if (d.op == IndexOp::scatter_reduce) return d.include_self;
  if (d.op == IndexOp::embedding && d.scale_grad_by_freq) return false;  // the mean of the run alone
  return d.op != IndexOp::segment_mean;
}

bool is_scatter(const IndexDesc& d) {
  return info(d.op).engine == IndexEngine::scatter ||
         (d.op == IndexOp::embedding && d.direction == Direction::Backward);
}

/// Scatters whose output starts as a copy of x (self / operand); the others (segment ops,
/// embedding's backward) start from the reduction's identity.
bool starts_from_self(const IndexDesc& d) {
  return d.op == IndexOp::scatter_add || d.op == IndexOp::index_add || d.op == IndexOp::scatter ||
         d.op == IndexOp::index_copy || d.op == IndexOp::scatter_reduce || d.op == IndexOp::index_put ||
         d.op == IndexOp::lax_scatter || d.op == IndexOp::masked_scatter;
}

size_t round256(size_t v) { return (v + 255) / 256 * 256; }

/// The select engine's parameters: dims merged where every operand allows (nonzero's
/// coordinates use the input's own dims, coord_size).
ix::SelectParams select_params(const IndexDesc& d, const IndexArgs& a) {
  ix::SelectParams p;
  const bool nz = d.op == IndexOp::nonzero;
  const Layout& sl = nz ? a.x.layout : a.mask.layout;
  const Layout* al = d.op == IndexOp::masked_select    ? &a.x.layout
                     : d.op == IndexOp::masked_scatter ? &a.out.layout
                                                       : nullptr;
  p.sel = static_cast<const char*>(nz ? a.x.data : a.mask.data);
  p.sel_bytes = nz ? size_in_bytes(d.dtype) : 1;
  p.n = std::max<int64_t>(d.in_shape.numel(), 0);
  p.tiles = (p.n + ix::kSelectTile - 1) / ix::kSelectTile;
  // Dims in order, size-1 dims dropped and contiguous neighbours merged.
  int r = 0;
  p.coord_rank = d.in_shape.rank;
  for (int i = 0; i < d.in_shape.rank; ++i) {
    const int64_t n = d.in_shape.dims[i], ss = sl.stride[i], as = al ? al->stride[i] : 0;
    p.coord_size[i] = n;
    if (n == 1) continue;
    if (r > 0 && p.sel_stride[r - 1] == ss * n && p.a_stride[r - 1] == as * n) {
      p.size[r - 1] *= n;
      p.sel_stride[r - 1] = ss;
      p.a_stride[r - 1] = as;
      continue;
    }
    p.size[r] = n;
    p.sel_stride[r] = ss;
    p.a_stride[r] = as;
    ++r;
  }
  p.rank = r;
  // Nonzero: every bit but the sign of each floating part (-0 is zero, NaN is not).
  unsigned long long m = ~0ull;
  if (nz) {
    switch (d.dtype) {
      case DType::f64:
      case DType::c128:
        m = 0x7fffffffffffffffull;
        break;
      case DType::f32:
        m = 0x7fffffffull;
        break;
      case DType::c64:
        m = 0x7fffffff7fffffffull;
        break;
      case DType::f16:
      case DType::bf16:
        m = 0x7fffull;
        break;
      case DType::f8e4m3:
      case DType::f8e5m2:
        m = 0x7full;
        break;
      default: {
        const int b = size_in_bytes(d.dtype);
        m = b >= 8 ? ~0ull : ((1ull << (8 * b)) - 1);
      }
    }
  }
  p.nz_mask[0] = m;
  p.nz_mask[1] = d.dtype == DType::c128 && nz ? 0x7fffffffffffffffull : 0;
  p.count = static_cast<int64_t*>(a.count.data);
  p.error = static_cast<int*>(a.error.data);
  if (d.op == IndexOp::nonzero || d.op == IndexOp::masked_select) {
    p.out = static_cast<char*>(a.out.data);
    p.bound = d.out_shape.dims[0];
    p.out_stride[0] = a.out.layout.rank > 0 ? a.out.layout.stride[0] : 0;
    p.out_stride[1] = a.out.layout.rank > 1 ? a.out.layout.stride[1] : 0;
    p.fill = d.fill_index;
    p.a = static_cast<const char*>(a.x.data);
  } else {
    p.out = static_cast<char*>(a.out.data);
    p.src = static_cast<const char*>(a.src.data);
    p.src_numel = a.src.numel();
    // The source's dims merged the same way: a contiguous source (any shape) is one dim, read
    // at r * stride with no decomposition of its position r.
    int sr = 0;
    for (int i = 0; i < a.src.layout.rank && p.src_numel > 0; ++i) {
      const int64_t n = a.src.layout.shape[i], s = a.src.layout.stride[i];
      if (n == 1) continue;
      if (sr > 0 && p.src_stride[sr - 1] == s * n) {
        p.src_size[sr - 1] *= n;
        p.src_stride[sr - 1] = s;
        continue;
      }
      p.src_size[sr] = n;
      p.src_stride[sr] = s;
      ++sr;
    }
    p.src_rank = sr;
  }
  return p;
}
}  // namespace

namespace detail::idx {
cudaError_t fill_zeros(const TensorMut& out, DType dt, bool allow_vec, cudaStream_t stream) {
  if (out.numel() == 0) return cudaSuccess;
  return launch_lowered(lower_copy(fill_job(out, dt, 0.0), allow_vec), stream);
}
}  // namespace detail::idx

/// The workspace run() carves: [linearized offsets][sorted: keys x2, positions x2, sort
/// scratch] or [select: tile counts, tile offsets, scan scratch], each part 256-byte aligned.
struct WsPlan {
  size_t lin = 0;        ///< bytes of the linearized offsets
  int64_t n_sort = 0;    ///< keys of the sorted path
  int sort_end_bit = 1;  ///< radix bits the keys need
  size_t sort_part = 0, sort_temp = 0;
  int64_t tiles = 0;
  size_t sel_part = 0, sel_temp = 0;
  size_t total() const { return lin + 4 * sort_part + round256(sort_temp) + 2 * sel_part + round256(sel_temp); }
};

std::string IndexPlan::layout_for(const IndexArgs& a) const {
  const auto& in = info(desc_.op);
  if (ix::is_rows_op(desc_.op)) return ix::rows_layout(desc_, sorted_, allow_vectorized_, a);
  if (desc_.op == IndexOp::pad && desc_.direction == Direction::Backward)
    return a.out.numel() == 0 ? "empty" : "pad-backward";
  if (in.engine == IndexEngine::copy) {
    std::string s;
    for (const CopyJob& j : copy_jobs(desc_, a)) {
      const std::string l = lower_copy(j, allow_vectorized_, desc_.op == IndexOp::pad).layout();
      if (s.find(l) == std::string::npos) s += (s.empty() ? "" : "+") + l;
    }
    return s.empty() ? "empty" : s;
  }
  if (in.engine == IndexEngine::select)
    return desc_.in_shape.numel() == 0 && desc_.op == IndexOp::masked_scatter ? "empty" : "select-tiles";
  if (desc_.op == IndexOp::one_hot) return a.out.numel() == 0 ? "empty" : "one-hot";
  const std::string pre = linearized_ ? "linearize+" : "";
  const int64_t unit = linearized_ ? linear_unit(desc_, a, allow_vectorized_) : 1;
  GeomInfo gi = geometry(desc_, a, nullptr, unit);
  if (gi.g.L * gi.g.P == 0 && a.out.numel() == 0) return "empty";
  if (!is_scatter(desc_)) {
    const int eb = allow_vectorized_
                       ? widen_gather(gi.g, static_cast<const char*>(a.out.data), gi.b_ptr, size_in_bytes(desc_.dtype))
                       : size_in_bytes(desc_.dtype);
    switch (gather_kind(desc_, gi.g, eb, allow_vectorized_)) {
      case GatherKind::staged:
        return pre + "gather-staged-" + std::to_string(eb) + "B";
      case GatherKind::rows:
        return pre + "gather-rows-" + std::to_string(eb) + "B";
      default:
        return pre + "gather-" + std::to_string(eb) + "B-" + (gather_i64(gi) ? "i64" : "i32");
    }
  }
  if (ix::is_assign(desc_)) return pre + (sorted_ ? "scatter-sorted-copy" : "scatter-copy");
  if (sorted_) return pre + "scatter-sorted";
  if (!ix::scatter_rows_ok(gi.g)) return pre + "scatter-atomic";
  const bool vec = ix::scatter_vec_rows_ok(gi.g, a.out.data, gi.a_ptr, size_in_bytes(desc_.dtype), reduce_of(desc_));
  return pre + (vec ? "scatter-atomic-rows-vec16" : "scatter-atomic-rows");
}

Result<void> IndexPlan::run(cudaStream_t stream, Workspace ws, const IndexArgs& a) const {
  BARACUDA_TRY(can_implement(a));
  const std::string label = op_label(desc_);
  const IndexDesc& d = desc_;
  const auto& in = info(d.op);
  const int eb = size_in_bytes(d.dtype);
  if (ix::is_rows_op(d.op)) return ix::run_rows(d, sorted_, allow_vectorized_, workspace_bytes_, stream, ws, a, label);

  if (d.op == IndexOp::pad && d.direction == Direction::Backward) {
    ix::PadBwParams p;
    p.rank = a.out.layout.rank;
    for (int i = 0; i < p.rank; ++i) {
      p.in_size[i] = a.out.layout.shape[i];
      p.gin_stride[i] = a.out.layout.stride[i];
      p.out_size[i] = a.x.layout.shape[i];
      p.dy_stride[i] = a.x.layout.stride[i];
      p.before[i] = d.pad[2 * i];
    }
    p.mode = static_cast<int>(d.pad_mode);
    p.gin = a.out.data;
    p.dy = a.x.data;
    p.total = a.out.numel();
    if (const cudaError_t e = ix::launch_pad_backward(p, d.dtype, stream); e != cudaSuccess)
      return cuda_error(label, "kernel launch", e);
    return {};
  }
  if (in.engine == IndexEngine::copy) {
    // Consecutive plain row copies of one element size and index width (cat / stack inputs) go
    // out together, kCopyBatch a launch; anything else launches alone.
    ix::CopyBatch batch;
    int batch_eb = 0;
    bool batch_i64 = false;
    auto flush = [&]() -> cudaError_t {
      if (batch.count == 0) return cudaSuccess;
      const cudaError_t e = ix::launch_plain_rows(batch, batch_eb, batch_i64, stream);
      batch.count = 0;
      return e;
    };
    for (const CopyJob& j : copy_jobs(d, a)) {
      const Lowered L = lower_copy(j, allow_vectorized_, d.op == IndexOp::pad);
      const bool rows = !L.empty && !L.transpose && !L.rows && ix::plain_rows_ok(L.cp);
      if (batch.count > 0 && (!rows || L.eb != batch_eb || L.i64 != batch_i64 || batch.count == ix::kCopyBatch))
        if (const cudaError_t e = flush(); e != cudaSuccess) return cuda_error(label, "kernel launch", e);
      if (rows) {
        batch.job[batch.count++] = L.cp;
        batch_eb = L.eb;
        batch_i64 = L.i64;
      } else if (const cudaError_t e = launch_lowered(L, stream); e != cudaSuccess) {
        return cuda_error(label, "kernel launch", e);
      }
    }
    if (const cudaError_t e = flush(); e != cudaSuccess) return cuda_error(label, "kernel launch", e);
    return {};
  }

  // The workspace this call needs, exactly (CUB's scratch asked now, for these sizes).
  WsPlan wp;
  const bool per_element = d.op == IndexOp::lax_scatter && sorted_;  // windows may overlap: key elements
  if (linearized_)
    wp.lin = round256(static_cast<size_t>(std::max<int64_t>(ix::linearized_slices(d, per_element), 0)) * 8);
  if (in.engine == IndexEngine::select) {
    wp.tiles = ix::select_tiles(d);
    wp.sel_part = round256(static_cast<size_t>(wp.tiles) * 8);
    if (wp.tiles > 0)
      if (const cudaError_t e = ix::scan_temp_bytes(wp.tiles, &wp.sel_temp); e != cudaSuccess)
        return cuda_error(label, "scan sizing", e);
  }
  char* w = static_cast<char*>(ws.ptr);
  auto need_ws = [&](size_t need) -> Result<void> {
    need = std::max(need, workspace_bytes_);
    if (need > 0 && (ws.ptr == nullptr || ws.bytes < need))
      return make_error(Status::WorkspaceTooSmall, label + ": workspace expected >= " + std::to_string(need) +
                                                       " bytes, got " + std::to_string(ws.bytes));
    return {};
  };

  // ---- select engine: count, scan, write ----
  if (in.engine == IndexEngine::select) {
    BARACUDA_TRY(need_ws(wp.total()));
    if (d.op == IndexOp::masked_scatter && a.out.data != a.x.data && a.out.numel() > 0)
      if (const cudaError_t e = launch_lowered(lower_copy(identity_job(a.out, a.x, eb), allow_vectorized_), stream);
          e != cudaSuccess)
        return cuda_error(label, "copy of self", e);
    ix::SelectParams p = select_params(d, a);
    p.tile_counts = reinterpret_cast<int64_t*>(w);
    p.tile_offsets = reinterpret_cast<int64_t*>(w + wp.sel_part);
    void* temp = w + 2 * wp.sel_part;
    if (d.phase != SelectPhase::write && p.tiles > 0) {
      if (const cudaError_t e = ix::launch_select_count(p, stream); e != cudaSuccess)
        return cuda_error(label, "count kernel launch", e);
      if (const cudaError_t e =
              ix::exclusive_scan(temp, round256(wp.sel_temp), p.tile_counts, p.tile_offsets, p.tiles, stream);
          e != cudaSuccess)
        return cuda_error(label, "scan", e);
    }
    if (d.phase == SelectPhase::count) {
      if (const cudaError_t e = ix::launch_select_total(p, stream); e != cudaSuccess)
        return cuda_error(label, "count kernel launch", e);
      return {};
    }
    const ix::SelectOp op = d.op == IndexOp::nonzero         ? ix::SelectOp::nonzero
                            : d.op == IndexOp::masked_select ? ix::SelectOp::masked_select
                                                             : ix::SelectOp::masked_scatter;
    if (const cudaError_t e = ix::launch_select_write(p, op, eb, stream); e != cudaSuccess)
      return cuda_error(label, "write kernel launch", e);
    return {};
  }

  if (d.op == IndexOp::one_hot) {
    GeomInfo gi = geometry(d, a);
    unsigned char one[16];
    ix::fill_bits(d.dtype, 1.0, one);
    if (const cudaError_t e = ix::launch_one_hot(gi.g, static_cast<char*>(a.out.data), one, eb, d.index_dtype, stream);
        e != cudaSuccess)
      return cuda_error(label, "kernel launch", e);
    return {};
  }

  // ---- linearized indices ----
  const bool scatter = is_scatter(d);
  const bool assign = ix::is_assign(d);
  GeomInfo probe = geometry(d, a, nullptr, 1, per_element);
  if (sorted_) {
    wp.n_sort = probe.g.L;
    const int64_t sentinel = probe.b_reach;  // one past every real destination offset
    wp.sort_end_bit = std::max(1, static_cast<int>(std::bit_width(static_cast<uint64_t>(sentinel))));
    wp.sort_part = round256(static_cast<size_t>(wp.n_sort) * 8);
    if (const cudaError_t e = ix::sort_temp_bytes(wp.n_sort, wp.sort_end_bit, &wp.sort_temp); e != cudaSuccess)
      return cuda_error(label, "radix sort sizing", e);
  }
  BARACUDA_TRY(need_ws(wp.total()));
  const int64_t unit = linearized_ ? linear_unit(d, a, allow_vectorized_) : 1;
  const int64_t* lin = nullptr;
  if (linearized_) {
    auto* offsets = reinterpret_cast<int64_t*>(w);
    lin = offsets;
    if (const cudaError_t e = ix::launch_linearize(lin_params(d, a, offsets, unit, per_element), d.index_dtype, stream);
        e != cudaSuccess)
      return cuda_error(label, "index linearization launch", e);
  }
  GeomInfo gi = geometry(d, a, lin, unit, per_element);
  const DType it = linearized_ ? DType::s64 : d.index_dtype;  // the offsets are int64

  if (!scatter) {
    const int web = allow_vectorized_ ? widen_gather(gi.g, static_cast<const char*>(a.out.data), gi.b_ptr, eb) : eb;
    char* out = static_cast<char*>(a.out.data);
    cudaError_t e = cudaSuccess;
    switch (gather_kind(d, gi.g, web, allow_vectorized_)) {
      case GatherKind::staged:
        e = ix::launch_gather_staged(gi.g, d.dim, out, gi.b_ptr, gi.b_ptr + gi.b_reach * web, web, it, stream);
        break;
      case GatherKind::rows:
        e = ix::launch_gather_rows(gi.g, out, gi.b_ptr, web, it, stream);
        break;
      default:
        e = ix::launch_gather(gi.g, out, gi.b_ptr, web, it, gather_i64(gi), stream);
    }
    if (e != cudaSuccess) return cuda_error(label, "kernel launch", e);
    if (d.op == IndexOp::lax_gather && d.mode == IndexMode::fill) {
      // Dropped windows were written as zeros; a non-zero fill_value overwrites them.
      unsigned char fill[16];
      ix::fill_bits(d.dtype, d.value, fill);
      bool zero = true;
      for (unsigned char b : fill) zero = zero && b == 0;
      if (!zero) {
        const GeomInfo plain = geometry(d, a, lin, unit);  // unwidened element geometry
        if (const cudaError_t f = ix::launch_fill_slices(plain.g, out, fill, eb, stream); f != cudaSuccess)
          return cuda_error(label, "fill kernel launch", f);
      }
    }
    return {};
  }

  // Scatter: initialise the output (a copy of self, or the reduction's identity), then reduce.
  const ix::Reduce r = reduce_of(d);
  if (starts_from_self(d)) {
    const bool inplace = a.x.data == a.out.data;  // can_implement allows only the exact view
    if (!inplace)
      if (const cudaError_t e = launch_lowered(lower_copy(identity_job(a.out, a.x, eb), allow_vectorized_), stream);
          e != cudaSuccess)
        return cuda_error(label, "copy of self", e);
  } else {
    // The reduction's identity (empty segments keep it, as JAX), in the storage the atomics use.
    CopyJob fill = fill_job(a.out, d.dtype, 0.0);
    ix::reduce_identity_bits(d.dtype, r, fill.fill);
    if (const cudaError_t e = launch_lowered(lower_copy(fill, allow_vectorized_), stream); e != cudaSuccess)
      return cuda_error(label, "output initialisation", e);
  }
  if (gi.g.L * gi.g.P == 0) return {};  // nothing to reduce
  const void* src = gi.a_ptr;
  void* out = a.out.data;
  if (!sorted_ && assign) {
    if (const cudaError_t e =
            ix::launch_scatter_copy(gi.g, static_cast<char*>(out), static_cast<const char*>(src), eb, it, stream);
        e != cudaSuccess)
      return cuda_error(label, "kernel launch", e);
    return {};
  }
  if (!sorted_) {
    if (d.op == IndexOp::scatter_reduce && !d.include_self) {
      // Every destination an index names restarts from the identity (torch's include_self=false).
      unsigned char id[16];
      ix::reduce_identity_bits(d.dtype, r, id);
      if (const cudaError_t e = ix::launch_scatter_fill(gi.g, static_cast<char*>(out), id, eb, it, stream);
          e != cudaSuccess)
        return cuda_error(label, "identity fill launch", e);
    }
    if (const cudaError_t e = ix::launch_scatter_atomic(gi.g, out, src, d.dtype, it, r, stream); e != cudaSuccess)
      return cuda_error(label, "kernel launch", e);
    return {};
  }
  // Sorted: keys (destinations) and positions, double-buffered, then the radix sort's scratch.
  const int64_t n = gi.g.L;
  const int64_t sentinel = gi.b_reach;
  char* sw = w + wp.lin;
  const size_t part = wp.sort_part;
  auto* k0 = reinterpret_cast<int64_t*>(sw);
  auto* k1 = reinterpret_cast<int64_t*>(sw + part);
  auto* v0 = reinterpret_cast<int64_t*>(sw + 2 * part);
  auto* v1 = reinterpret_cast<int64_t*>(sw + 3 * part);
  if (const cudaError_t e = ix::launch_scatter_keys(gi.g, it, sentinel, k0, v0, stream); e != cudaSuccess)
    return cuda_error(label, "key kernel launch", e);
  int which = 0;
  if (const cudaError_t e = ix::sort_pairs(sw + 4 * part, ws.bytes - wp.lin - 4 * part, k0, k1, v0, v1, n,
                                           wp.sort_end_bit, &which, stream);
      e != cudaSuccess)
    return cuda_error(label, "radix sort", e);
  const int64_t* keys = which ? k1 : k0;
  const int64_t* vals = which ? v1 : v0;
  const cudaError_t e = assign ? ix::launch_scatter_sorted_copy(gi.g, keys, vals, sentinel, static_cast<char*>(out),
                                                                static_cast<const char*>(src), eb, stream)
                               : ix::launch_scatter_sorted(gi.g, keys, vals, sentinel, out, src, d.dtype, r,
                                                           sorted_include_self(d), stream);
  if (e != cudaSuccess) return cuda_error(label, "kernel launch", e);
  return {};
}

namespace {
/// The descriptor's bytes (the shared cache appends the preference and the device).
std::string desc_key(const IndexDesc& d) {
  std::string k;
  auto put = [&](const auto& v) { k.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  put(d.op);
  put(d.direction);
  put(d.dtype);
  put(d.index_dtype);
  for (const Shape* s : {&d.in_shape, &d.out_shape, &d.index_shape, &d.src_shape}) {
    put(s->rank);
    for (int i = 0; i < s->rank && i < kMaxRank; ++i) put(s->dims[i]);
  }
  put(d.dim);
  put(d.num_inputs);
  put(d.pad_mode);
  put(d.pad);
  put(d.value);
  put(d.shifts);
  put(d.repeats);
  put(d.flip_dims);
  put(d.diagonal);
  put(d.padding_idx);
  put(d.num_segments);
  put(d.reduce);
  put(d.include_self);
  put(d.accumulate);
  put(d.mode);
  put(d.phase);
  put(d.num_indices);
  put(d.start_index_map);
  put(d.num_offset_dims);
  put(d.offset_dims);
  put(d.num_collapsed_dims);
  put(d.collapsed_dims);
  put(d.index_vector_dim);
  put(d.slice_sizes);
  put(d.fill_index);
  put(d.include_last_offset);
  put(d.per_sample_weights);
  put(d.scale_grad_by_freq);
  put(d.max_norm);
  put(d.norm_type);
  return k;
}
}  // namespace

Result<void> index(cudaStream_t stream, const IndexDesc& desc, const IndexArgs& args, Workspace ws,
                   const PlanPreference& pref) {
  auto plan = detail::cached_plan<IndexPlan>(desc_key(desc), pref,
                                             [&](const Target& t) { return IndexPlan::select(t, desc, pref); });
  if (!plan) return plan.error();
  return (*plan)->run(stream, ws, args);
}

}  // namespace baracuda
