// embedding_bag's backward (the rows engine), sum and mean (max routes dy through max_indices
// with the scatter engine, run.cpp). Two ways to the dense grad_weight:
//  - atomic (f32 / f64 only): the forward's lane groups read dy[bag] once and add dy * scale to
//    each id's row (16-byte atomics for f32 on sm_90). f16 / bf16 atomics would round every
//    add to the storage dtype, so those dtypes always take the sorted path (rows_choice);
//  - sorted (f16 / bf16, require_deterministic, scale_grad_by_freq): the flat positions keyed
//    by their id, a stable radix sort (index_sort.cu), then a lane group per (run of one id, row
//    chunk) sums dy[bag] * scale over the run in position order in f32 (f64) and writes the row
//    once: bit-identical run to run, as torch's embedding_bag_backward_cuda_sum_avg.
// And the per-sample weights' gradient, dy[bag] . weight[id], a lane group per position.
#include "ops/index/index_bag.cuh"

namespace baracuda::detail::idx {
namespace {
using bag::group_mask;
using bag::id_ok;
using bag::load_index;

constexpr int kUnroll = 4;  ///< rows a lane keeps in flight

/// The dtypes of the atomic backward: their atomics add at the sorted path's precision.
constexpr DTypeSet kAtomicBagDTypes = bit(DType::f32) | bit(DType::f64);

/// dst[j] += v[j] (j < V; T float or double) with atomics of the widest kind the architecture has.
template <class T, int V>
__device__ __forceinline__ void atomic_add_vec(T* dst, const T (&v)[V]) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "16-bit dtypes take the sorted path");
  if constexpr (V == 4 && std::is_same_v<T, float>) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    atomicAdd(reinterpret_cast<float4*>(dst), make_float4(v[0], v[1], v[2], v[3]));
#else
#pragma unroll
    for (int j = 0; j < V; ++j) atomicAdd(dst + j, v[j]);
#endif
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) atomicAdd(dst + j, v[j]);
  }
}

/// Atomic backward: a group per (bag, chunk). For mean the group first counts the bag's usable
/// ids (ballots); dy / count is formed once, as torch's gradient /= bag_size.
template <class T, class IT, int V>
__global__ void __launch_bounds__(256) bag_backward_atomic_kernel(const BagParams p, int G, int64_t chunks) {
  using A = kern::opmath_t<T>;
  const T* dy = static_cast<const T*>(p.dy);
  T* gw = static_cast<T*>(p.grad_weight);
  const T* psw = static_cast<const T*>(p.psw);
  const int lane = static_cast<int>(threadIdx.x) & (G - 1);
  const unsigned mask = group_mask(G);
  const int64_t vectors = (p.dim + V - 1) / V;
  const int64_t units = p.bags * chunks;
  const int64_t groups = int64_t{gridDim.x} * blockDim.x / G;
  for (int64_t u = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / G; u < units; u += groups) {
    const int64_t b = u / chunks;
    const int64_t vidx = (u - b * chunks) * G + lane;
    const bool live = vidx < vectors;
    int64_t begin, end;
    bag::bag_range<IT>(p, b, &begin, &end);
    const int64_t id_base = b * p.id_bstride, psw_base = b * p.psw_bstride;
    int64_t count = 1;
    if (p.mode == kBagMean) {
      count = 0;
      for (int64_t e = begin + lane; e - lane < end; e += G) {
        bool ok = false;
        if (e < end) {
          const int64_t id = load_index<IT>(p.ids, id_base + e * p.id_stride);
          ok = id >= 0 && id < p.num_weights && id != p.padding_idx;
        }
        count += __popc(__ballot_sync(mask, ok));
      }
      if (count == 0) continue;  // nothing to add (uniform within the group)
    }
    A g[V];
    if (live) bag::load_vec<T, V>(dy + b * p.dy_stride0 + bag::vec_offset<V>(vidx, p.dy_stride1), p.dy_stride1, g);
    if (p.mode == kBagMean) {
#pragma unroll
      for (int j = 0; j < V; ++j) g[j] = g[j] / static_cast<A>(count);
    }
    for (int64_t e0 = begin; e0 < end; e0 += G) {
      const int64_t mine = e0 + lane;
      int64_t my_id = -1;
      A my_w = A(1);
      if (mine < end) {
        my_id = load_index<IT>(p.ids, id_base + mine * p.id_stride);
        if (psw) my_w = kern::load_as_opmath(psw[psw_base + mine * p.psw_stride]);
      }
      const int n = end - e0 < G ? static_cast<int>(end - e0) : G;
      for (int k = 0; k < n; ++k) {
        const int64_t id = __shfl_sync(mask, my_id, k, G);
        const A w = __shfl_sync(mask, my_w, k, G);
        if (!live || !id_ok(p, id)) continue;
        A add[V];
#pragma unroll
        for (int j = 0; j < V; ++j) add[j] = g[j] * w;
        if constexpr (V > 1)
          atomic_add_vec<T, V>(gw + id * p.gw_stride0 + vidx * V, add);
        else
          atomic_add_vec<T, 1>(gw + id * p.gw_stride0 + vidx * p.gw_stride1, add);
      }
    }
  }
}

/// Sorted backward, step 1: one thread per flat position.
template <class IT>
__global__ void __launch_bounds__(256)
    bag_keys_kernel(const BagParams p, int64_t n, int64_t* keys, int64_t* vals, int64_t* bag_of) {
  for (int64_t l = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; l < n; l += int64_t{gridDim.x} * blockDim.x) {
    int64_t e;
    const int64_t b = bag::position_bag<IT>(p, l, &e);
    int64_t key = p.num_weights;  // the sentinel: sorts last, never written
    if (b >= 0) {                 // -1: no bags at all, or decreasing offsets (bag_range reported those)
      const int64_t id = load_index<IT>(p.ids, b * p.id_bstride + e * p.id_stride);
      if (id_ok(p, id)) key = id;
    }
    keys[l] = key;
    vals[l] = l;
    bag_of[l] = b < 0 ? 0 : b;
  }
}

/// Mean's divisor per bag: its ids that are in range and not padding_idx (a warp per bag).
template <class IT>
__global__ void __launch_bounds__(256) bag_sizes_kernel(const BagParams p, int64_t* bag_size) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int64_t warps = int64_t{gridDim.x} * blockDim.x / 32;
  for (int64_t b = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32; b < p.bags; b += warps) {
    int64_t begin, end;
    bag::bag_range<IT>(p, b, &begin, &end);
    int64_t count = 0;
    for (int64_t e = begin + lane; e - lane < end; e += 32) {
      bool ok = false;
      if (e < end) {
        const int64_t id = load_index<IT>(p.ids, b * p.id_bstride + e * p.id_stride);
        ok = id >= 0 && id < p.num_weights && id != p.padding_idx;
      }
      count += __popc(__ballot_sync(0xffffffffu, ok));
    }
    if (lane == 0) bag_size[b] = count;
  }
}

/// Sorted backward, step 2: a group per (sorted slot, chunk); the group whose slot starts a run
/// of equal ids sums the run in slot order (the sort is stable: position order) and writes the
/// id's row once. Per term, as torch's compute_grad_weight_bags: scale = 1 / count (with
/// scale_grad_by_freq) times the per-sample weight, gradient = dy[bag] (/ bag size for mean),
/// acc += gradient * scale.
template <class T, int V>
__global__ void __launch_bounds__(256)
    bag_backward_sorted_kernel(const BagParams p, const int64_t* keys, const int64_t* vals, const int64_t* bag_of,
                               const int64_t* bag_size, int64_t n, int G, int64_t chunks) {
  using A = kern::opmath_t<T>;
  const T* dy = static_cast<const T*>(p.dy);
  T* gw = static_cast<T*>(p.grad_weight);
  const T* psw = static_cast<const T*>(p.psw);
  const int lane = static_cast<int>(threadIdx.x) & (G - 1);
  const int64_t vectors = (p.dim + V - 1) / V;
  const int64_t units = n * chunks;
  const int64_t groups = int64_t{gridDim.x} * blockDim.x / G;
  for (int64_t u = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / G; u < units; u += groups) {
    const int64_t s = u / chunks;
    const int64_t vidx = (u - s * chunks) * G + lane;
    const int64_t key = keys[s];
    if (key >= p.num_weights || (s > 0 && keys[s - 1] == key) || vidx >= vectors) continue;
    int64_t run_end = s + 1;
    while (run_end < n && keys[run_end] == key) ++run_end;
    const A inv_count = p.scale_grad_by_freq ? static_cast<A>(1.0 / static_cast<double>(run_end - s)) : A(1);
    A acc[V];
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] = A(0);
    for (int64_t r0 = s; r0 < run_end; r0 += kUnroll) {
      A g[kUnroll][V];
      A scale[kUnroll];
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        if (r0 + k >= run_end) continue;
        const int64_t l = vals[r0 + k];
        const int64_t b = bag_of[l];
        bag::load_vec<T, V>(dy + b * p.dy_stride0 + bag::vec_offset<V>(vidx, p.dy_stride1), p.dy_stride1, g[k]);
        if (p.mode == kBagMean) {
          const A c = static_cast<A>(bag_size[b]);
#pragma unroll
          for (int j = 0; j < V; ++j) g[k][j] = g[k][j] / c;
        }
        scale[k] = inv_count;
        if (psw) {
          const int64_t e = p.offsets ? l : l - b * p.len;
          scale[k] *= kern::load_as_opmath(psw[b * p.psw_bstride + e * p.psw_stride]);
        }
      }
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        if (r0 + k >= run_end) continue;
#pragma unroll
        for (int j = 0; j < V; ++j) acc[j] = fma(g[k][j], scale[k], acc[j]);
      }
    }
    if constexpr (V > 1)
      bag::store_vec<T, V>(gw + key * p.gw_stride0 + vidx * V, acc);
    else
      gw[key * p.gw_stride0 + vidx * p.gw_stride1] = kern::convert<T>(acc[0]);
  }
}

/// grad_psw[l] = dy[bag(l)] . weight[id(l)]: a group per flat position walks the whole row.
template <class T, class IT, int V>
__global__ void __launch_bounds__(256) bag_psw_grad_kernel(const BagParams p, int64_t n, int G) {
  using A = kern::opmath_t<T>;
  const T* dy = static_cast<const T*>(p.dy);
  const T* weight = static_cast<const T*>(p.weight);
  T* out = static_cast<T*>(p.grad_psw);
  const int lane = static_cast<int>(threadIdx.x) & (G - 1);
  const unsigned mask = group_mask(G);
  const int64_t vectors = (p.dim + V - 1) / V;
  const int64_t groups = int64_t{gridDim.x} * blockDim.x / G;
  for (int64_t l = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / G; l < n; l += groups) {
    int64_t e;
    const int64_t b = bag::position_bag<IT>(p, l, &e);
    int64_t id = -1;
    bool ok = b >= 0;
    if (ok) {
      id = load_index<IT>(p.ids, b * p.id_bstride + e * p.id_stride);
      ok = id_ok(p, id);
    }
    A dot = A(0);
    if (ok) {  // uniform within the group
      for (int64_t vi = lane; vi < vectors; vi += G) {
        A g[V], w[V];
        bag::load_vec<T, V>(dy + b * p.dy_stride0 + bag::vec_offset<V>(vi, p.dy_stride1), p.dy_stride1, g);
        bag::load_vec<T, V>(weight + id * p.w_stride0 + bag::vec_offset<V>(vi, p.w_stride1), p.w_stride1, w);
#pragma unroll
        for (int j = 0; j < V; ++j) dot = fma(g[j], w[j], dot);
      }
    }
    dot = bag::group_sum(dot, G, mask);
    if (lane == 0) {
      const int64_t b0 = b < 0 ? 0 : b;
      out[b0 * p.gpsw_bstride + e * p.gpsw_stride] = kern::convert<T>(dot);
    }
  }
}

/// The group size and chunking of a row of p.dim elements in vectors of V.
struct RowSplit {
  int G;
  int64_t chunks;
};
template <int V>
RowSplit row_split(const BagParams& p) {
  const int64_t vectors = (p.dim + V - 1) / V;
  const int G = bag::group_lanes(vectors);
  return {G, (vectors + G - 1) / G};
}

template <DTypeSet kDTypes, class F>
cudaError_t with_dtypes(DType dt, DType index_dtype, int vec, F&& f) {
  cudaError_t e = cudaErrorInvalidValue;
  kern::dispatch<kDTypes>(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int kVec = 16 / static_cast<int>(sizeof(T));
    auto go = [&](auto it_tag) {
      using IT = typename decltype(it_tag)::type;
      e = vec == kVec ? f(kern::Tag<T>{}, kern::Tag<IT>{}, std::integral_constant<int, kVec>{})
                      : f(kern::Tag<T>{}, kern::Tag<IT>{}, std::integral_constant<int, 1>{});
    };
    if (index_dtype == DType::s32)
      go(kern::Tag<int32_t>{});
    else
      go(kern::Tag<int64_t>{});
  });
  return e;
}

}  // namespace

cudaError_t launch_bag_backward_atomic(const BagParams& p, DType dt, DType index_dtype, cudaStream_t stream) {
  if (p.bags * p.dim == 0) return cudaSuccess;
  return with_dtypes<kAtomicBagDTypes>(dt, index_dtype, p.vec, [&](auto t, auto it, auto v) {
    using T = typename decltype(t)::type;
    using IT = typename decltype(it)::type;
    constexpr int V = decltype(v)::value;
    const RowSplit rs = row_split<V>(p);
    bag_backward_atomic_kernel<T, IT, V>
        <<<grid_for(p.bags * rs.chunks * rs.G, 1, 256), 256, 0, stream>>>(p, rs.G, rs.chunks);
    return cudaGetLastError();
  });
}

cudaError_t launch_bag_keys(const BagParams& p, DType index_dtype, int64_t* keys, int64_t* vals, int64_t* bag_of,
                            int64_t* bag_size, cudaStream_t stream) {
  const int64_t n = bag_positions(p);
  if (n > 0) {
    const unsigned blocks = grid_for(n, 1, 256);
    if (index_dtype == DType::s32)
      bag_keys_kernel<int32_t><<<blocks, 256, 0, stream>>>(p, n, keys, vals, bag_of);
    else
      bag_keys_kernel<int64_t><<<blocks, 256, 0, stream>>>(p, n, keys, vals, bag_of);
    if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  if (bag_size && p.bags > 0) {
    const unsigned blocks = grid_for(p.bags * 32, 1, 256);
    if (index_dtype == DType::s32)
      bag_sizes_kernel<int32_t><<<blocks, 256, 0, stream>>>(p, bag_size);
    else
      bag_sizes_kernel<int64_t><<<blocks, 256, 0, stream>>>(p, bag_size);
    return cudaGetLastError();
  }
  return cudaSuccess;
}

cudaError_t launch_bag_backward_sorted(const BagParams& p, DType dt, const int64_t* keys, const int64_t* vals,
                                       const int64_t* bag_of, const int64_t* bag_size, int64_t n, cudaStream_t stream) {
  if (n * p.dim == 0) return cudaSuccess;
  cudaError_t e = cudaErrorInvalidValue;
  kern::dispatch<dtypes::kFloat>(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int kVec = 16 / static_cast<int>(sizeof(T));
    auto go = [&](auto v) {
      constexpr int V = decltype(v)::value;
      const RowSplit rs = row_split<V>(p);
      bag_backward_sorted_kernel<T, V><<<grid_for(n * rs.chunks * rs.G, 1, 256), 256, 0, stream>>>(
          p, keys, vals, bag_of, bag_size, n, rs.G, rs.chunks);
      e = cudaGetLastError();
    };
    if (p.vec == kVec)
      go(std::integral_constant<int, kVec>{});
    else
      go(std::integral_constant<int, 1>{});
  });
  return e;
}

cudaError_t launch_bag_psw_grad(const BagParams& p, DType dt, DType index_dtype, cudaStream_t stream) {
  const int64_t n = bag_positions(p);
  if (n == 0) return cudaSuccess;
  return with_dtypes<dtypes::kFloat>(dt, index_dtype, p.vec, [&](auto t, auto it, auto v) {
    using T = typename decltype(t)::type;
    using IT = typename decltype(it)::type;
    constexpr int V = decltype(v)::value;
    const int G = bag::group_lanes((p.dim + V - 1) / V);
    bag_psw_grad_kernel<T, IT, V><<<grid_for(n * G, 1, 256), 256, 0, stream>>>(p, n, G);
    return cudaGetLastError();
  });
}

}  // namespace baracuda::detail::idx
