// embedding_bag's fused forward (the rows engine): each bag's rows are read once and reduced in
// registers, no [L, D] intermediate. A group of G lanes owns (bag, chunk of G row vectors);
// its lanes read G ids (and per-sample weights) with one load each and pass them around by
// shuffles, keep kUnroll row loads in flight, accumulate in f32 (f64 for f64) in id order
// (torch's order, so sums match its CUDA kernel bit for bit up to FMA contraction), and write
// the bag's row once. One kernel per dtype x index dtype x {sum / mean, max} x {16-byte
// vectors, scalar}.
#include "ops/index/index_bag.cuh"

namespace baracuda::detail::idx {
namespace {
using bag::group_mask;
using bag::id_ok;
using bag::load_index;

constexpr int kUnroll = 4;  ///< row loads a lane keeps in flight

template <class T, class IT, int V, bool kMax>
__global__ void __launch_bounds__(256) bag_forward_kernel(const BagParams p, int G, int64_t chunks) {
  using A = kern::opmath_t<T>;
  const T* weight = static_cast<const T*>(p.weight);
  T* out = static_cast<T*>(p.out);
  IT* max_indices = static_cast<IT*>(p.max_indices);
  const T* psw = static_cast<const T*>(p.psw);
  const int lane = static_cast<int>(threadIdx.x) & (G - 1);
  const unsigned mask = group_mask(G);
  const int64_t vectors = (p.dim + V - 1) / V;
  const int64_t units = p.bags * chunks;
  const int64_t groups = int64_t{gridDim.x} * blockDim.x / G;
  for (int64_t u = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / G; u < units; u += groups) {
    const int64_t b = u / chunks;
    const int64_t vidx = (u - b * chunks) * G + lane;  // this lane's vector of the row
    const bool live = vidx < vectors;
    int64_t begin, end;
    bag::bag_range<IT>(p, b, &begin, &end);
    const int64_t id_base = b * p.id_bstride, psw_base = b * p.psw_bstride;
    A acc[V];
    int64_t word[kMax ? V : 1];
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] = A(0);
#pragma unroll
    for (int j = 0; j < (kMax ? V : 1); ++j) word[j] = -1;
    int64_t count = 0;  // ids used so far (not padding, in range)
    for (int64_t e0 = begin; e0 < end; e0 += G) {
      // One id (and weight) a lane, then broadcast within the group.
      const int64_t mine = e0 + lane;
      int64_t my_id = -1;
      A my_w = A(1);
      if (mine < end) {
        my_id = load_index<IT>(p.ids, id_base + mine * p.id_stride);
        if (psw) my_w = kern::load_as_opmath(psw[psw_base + mine * p.psw_stride]);
      }
      const int n = end - e0 < G ? static_cast<int>(end - e0) : G;
      for (int k0 = 0; k0 < n; k0 += kUnroll) {
        int64_t id[kUnroll];
        A w[kUnroll];
        bool use[kUnroll];
        A v[kUnroll][V];
#pragma unroll
        for (int k = 0; k < kUnroll; ++k) {
          const int src = (k0 + k) & (G - 1);
          id[k] = __shfl_sync(mask, my_id, src, G);
          w[k] = __shfl_sync(mask, my_w, src, G);
          use[k] = k0 + k < n && id_ok(p, id[k]);
          if (use[k] && live)
            bag::load_vec<T, V>(weight + id[k] * p.w_stride0 + bag::vec_offset<V>(vidx, p.w_stride1), p.w_stride1,
                                v[k]);
        }
#pragma unroll
        for (int k = 0; k < kUnroll; ++k) {
          if (!use[k]) continue;  // uniform within the group
          if constexpr (kMax) {
            // torch: the first value wins unless a later one is strictly greater (NaN only
            // when it comes first).
#pragma unroll
            for (int j = 0; j < V; ++j)
              if (count == 0 || v[k][j] > acc[j]) {
                acc[j] = v[k][j];
                word[j] = id[k];
              }
          } else if (psw) {
#pragma unroll
            for (int j = 0; j < V; ++j) acc[j] = fma(w[k], v[k][j], acc[j]);
          } else {
#pragma unroll
            for (int j = 0; j < V; ++j) acc[j] += v[k][j];
          }
          ++count;
        }
      }
    }
    if (!live) continue;
    if (!kMax && p.mode == kBagMean && count > 0) {
#pragma unroll
      for (int j = 0; j < V; ++j) acc[j] = acc[j] / static_cast<A>(count);
    }
    if constexpr (V > 1) {
      bag::store_vec<T, V>(out + b * p.out_stride0 + vidx * V, acc);
    } else {
      out[b * p.out_stride0 + vidx * p.out_stride1] = kern::convert<T>(acc[0]);
    }
    if constexpr (kMax) {
#pragma unroll
      for (int j = 0; j < V; ++j)
        if (vidx * V + j < p.dim)
          max_indices[b * p.mi_stride0 + (V > 1 ? vidx * V + j : vidx) * p.mi_stride1] = static_cast<IT>(word[j]);
    }
  }
}

template <class T, class IT, int V>
cudaError_t forward_with(const BagParams& p, cudaStream_t stream) {
  const int64_t vectors = (p.dim + V - 1) / V;
  const int G = bag::group_lanes(vectors);
  const int64_t chunks = (vectors + G - 1) / G;
  const unsigned blocks = grid_for(p.bags * chunks * G, 1, 256);
  if (p.mode == kBagMax)
    bag_forward_kernel<T, IT, V, true><<<blocks, 256, 0, stream>>>(p, G, chunks);
  else
    bag_forward_kernel<T, IT, V, false><<<blocks, 256, 0, stream>>>(p, G, chunks);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_bag_forward(const BagParams& p, DType dt, DType index_dtype, cudaStream_t stream) {
  if (p.bags * p.dim == 0) return cudaSuccess;
  cudaError_t e = cudaErrorInvalidValue;
  kern::dispatch<dtypes::kFloat>(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int kVec = 16 / static_cast<int>(sizeof(T));
    const bool vec = p.vec == kVec;
    if (index_dtype == DType::s32)
      e = vec ? forward_with<T, int32_t, kVec>(p, stream) : forward_with<T, int32_t, 1>(p, stream);
    else
      e = vec ? forward_with<T, int64_t, kVec>(p, stream) : forward_with<T, int64_t, 1>(p, stream);
  });
  return e;
}

int bag_vec(const BagParams& p, int elem_bytes, bool backward) {
  const int v = 16 / elem_bytes;
  if (v < 2 || p.dim % v != 0) return 1;
  auto row_ok = [&](const void* ptr, int64_t s0, int64_t s1) { return ptr == nullptr || vec_rows_ok(ptr, s0, s1, v); };
  bool ok = backward ? row_ok(p.dy, p.dy_stride0, p.dy_stride1) && row_ok(p.grad_weight, p.gw_stride0, p.gw_stride1) &&
                           row_ok(p.weight, p.w_stride0, p.w_stride1)
                     : row_ok(p.weight, p.w_stride0, p.w_stride1) && row_ok(p.out, p.out_stride0, p.out_stride1);
  return ok ? v : 1;
}

}  // namespace baracuda::detail::idx
