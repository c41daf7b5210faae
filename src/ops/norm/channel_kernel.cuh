// Kernels of the channel normalizations (batch_norm, instance_norm, group_norm forward and
// backward; local_response_norm), on the [N, C, S] view of channel_launch.hpp.
//
// One mechanism serves batch/instance/group norm: statistics of a "stat group" (a channel over
// (N, S) for batch_norm and for every op in evaluation mode; a (sample, group of cpg channels)
// over (cpg, S) for group_norm and instance_norm, cpg = 1) are sums over the group's (n, c)
// planes, and the output is an affine map of each element with per-(n, c) coefficients:
//
//   forward:  y  = beta * (x - mu) + gamma              beta = rstd * w[c], mu = mean, gamma = b[c]
//   backward: dx = alpha * dy + beta * (x - mu) + gamma  alpha = rstd * w[c], with g = dy * w[c]:
//             beta = -rstd^2 * mean(g * xhat), gamma = -rstd * mean(g), mu = mean
//
// so three kernels do every case: sums (per (n, c, chunk) partial sums of (x - x0, (x - x0)^2)
// forward, with x0 = x at the stat group's first element, or (dy, dy * (x - mean)) backward),
// finish (one warp per stat group sums its partials in a fixed order: statistics, running-stat
// update, coefficients, and batch_norm's dweight = rstd * sum dy * (x - mean), dbias = sum dy),
// and apply. Group-mode parameter gradients and instance_norm's running stats sum over the
// batch per channel (over_n_kernel, fixed order). Evaluation mode computes the coefficients from
// the running stats inside apply (one kernel, no workspace). No float atomics anywhere: every
// sum has one writer and a fixed order, so results are bit-identical run to run.
//
// Group/instance norm rows that fit in shared memory with unit-stride planes take one kernel
// instead (smem_rows_kernel): the (sample, group) row is staged with cp.async, reduced on chip
// (exact two-pass centred variance forward) and written: one read and one write of the tensor,
// where the three-kernel path reads the input twice.
//
// Memory order: apply walks its blocks in the reverse order of sums, so it starts on the part of
// the input that sums read last, which is the part still in L2 (a [32, 256, 56, 56] bf16 tensor
// is 51 MB, about the L2 of an H100); apply's loads and stores are marked evict-first (.cs) so
// the output does not push the rest of the input out.
#pragma once
#include <cuda_runtime.h>

#include "kernels/common/cp_async.cuh"
#include "kernels/common/dtype_traits.cuh"
#include "ops/norm/channel_launch.hpp"

namespace baracuda::kern::chnorm {

using detail::ChannelLaunch;
using detail::ChannelMap;
using detail::kChDy;
using detail::kChOut;
using detail::kChX;
constexpr int kBlock = detail::kChannelBlock;
constexpr int kWarps = kBlock / 32;

template <class M>
struct Pair {
  M a, b;
};
/// out = alpha * dy + beta * (x - mu) + gamma (forward: no dy term). 16 bytes for f32 (one load).
template <class M>
struct alignas(4 * sizeof(M)) Coef {
  M alpha, beta, mu, gamma;
};

/// XOR butterfly: every lane ends with the same bits (a + b == b + a at each level).
template <class M>
__device__ __forceinline__ M warp_sum(M v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// ---- memory helpers ----------------------------------------------------------------------------------
template <class T>
inline constexpr int kVecOf = 16 / int(sizeof(T));

template <class T>
__device__ __forceinline__ float half_bits_to_float(uint32_t b) {
  if constexpr (cuda::std::is_same_v<T, __nv_bfloat16>)
    return __uint_as_float(b << 16);  // bf16 is the high half of an f32: exact
  else
    return __half2float(__ushort_as_half(static_cast<unsigned short>(b)));
}
template <class T>
__device__ __forceinline__ uint32_t float_to_half_bits(float v) {
  if constexpr (cuda::std::is_same_v<T, __nv_bfloat16>)
    return __bfloat16_as_ushort(__float2bfloat16_rn(v));
  else
    return __half_as_ushort(__float2half_rn(v));
}
/// One 16-byte vector (moved as one integer of its width: see docs/design.md, load_vec) to opmath.
template <class T, class M>
__device__ __forceinline__ void unpack(const uint4& r, M (&d)[kVecOf<T>]) {
  if constexpr (sizeof(T) == 2) {
    const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      d[2 * q] = half_bits_to_float<T>(w[q] & 0xffffu);
      d[2 * q + 1] = half_bits_to_float<T>(w[q] >> 16);
    }
  } else if constexpr (sizeof(T) == 4) {
    d[0] = __uint_as_float(r.x), d[1] = __uint_as_float(r.y), d[2] = __uint_as_float(r.z), d[3] = __uint_as_float(r.w);
  } else {
    d[0] = __hiloint2double(static_cast<int>(r.y), static_cast<int>(r.x));
    d[1] = __hiloint2double(static_cast<int>(r.w), static_cast<int>(r.z));
  }
}
/// opmath values rounded to T (round to nearest even, as convert<T>) in one 16-byte vector.
template <class T, class M>
__device__ __forceinline__ uint4 pack(const M (&s)[kVecOf<T>]) {
  uint4 r;
  if constexpr (sizeof(T) == 2) {
    uint32_t w[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) w[q] = float_to_half_bits<T>(s[2 * q]) | (float_to_half_bits<T>(s[2 * q + 1]) << 16);
    r = make_uint4(w[0], w[1], w[2], w[3]);
  } else if constexpr (sizeof(T) == 4) {
    r = make_uint4(__float_as_uint(s[0]), __float_as_uint(s[1]), __float_as_uint(s[2]), __float_as_uint(s[3]));
  } else {
    r = make_uint4(static_cast<unsigned>(__double2loint(s[0])), static_cast<unsigned>(__double2hiint(s[0])),
                   static_cast<unsigned>(__double2loint(s[1])), static_cast<unsigned>(__double2hiint(s[1])));
  }
  return r;
}
/// Read-only path for data read again later (sums: the input stays in L2 for apply).
__device__ __forceinline__ uint4 ld16(const void* p) { return __ldg(static_cast<const uint4*>(p)); }
/// Last use (apply): evict-first, so the rest of the input keeps its L2 lines.
__device__ __forceinline__ uint4 ld16_last(const void* p) { return __ldcs(static_cast<const uint4*>(p)); }
__device__ __forceinline__ void st16(void* p, uint4 v) { __stcs(static_cast<uint4*>(p), v); }

/// A [C] parameter (weight, bias, running stats) of the param dtype (f32, or T), or `dflt` when absent.
template <class T, class M>
__device__ __forceinline__ M param_at(const void* p, bool f32, int64_t i, M dflt) {
  if (p == nullptr) return dflt;
  if (f32) return static_cast<M>(static_cast<const float*>(p)[i]);
  return static_cast<M>(load_as_opmath(static_cast<const T*>(p)[i]));
}
template <class T, class M>
__device__ __forceinline__ void param_store(void* p, bool f32, int64_t i, M v) {
  if (f32)
    static_cast<float*>(p)[i] = static_cast<float>(v);
  else
    static_cast<T*>(p)[i] = convert<T>(v);
}

/// Offset of spatial element s in slot t (planes: unit stride; pixels: one merged stride;
/// strided: the spatial dims, unrolled so the launch struct stays in parameter space).
template <ChannelMap kMap, int kSlot>
__device__ __forceinline__ int64_t spatial_offset(const ChannelLaunch& p, int64_t s) {
  if constexpr (kMap == ChannelMap::planes) {
    return s;
  } else if constexpr (kMap == ChannelMap::pixels) {
    return s * p.ss[kSlot][0];
  } else {
    int64_t off = 0;
#pragma unroll
    for (int d = detail::kChannelMaxSpatial - 1; d >= 0; --d) {
      if (d < p.sdims) {
        const int64_t sz = p.ssize[d];
        off += (s % sz) * p.ss[kSlot][d];
        s /= sz;
      }
    }
    return off;
  }
}
template <int kSlot, class T>
__device__ __forceinline__ const T* plane_ptr(const ChannelLaunch& p, int64_t n, int64_t c) {
  return static_cast<const T*>(p.ptr[kSlot]) + n * p.sn[kSlot] + c * p.sc[kSlot];
}

/// Index of (n, c)'s stat group in the saved statistics: channel c, or (n, c / cpg).
__device__ __forceinline__ int64_t stat_index(const ChannelLaunch& p, int64_t n, int64_t c) {
  return p.group_mode ? n * p.G + c / p.cpg : c;
}
/// The forward's shift: x at the stat group's first (sample, channel) and spatial element 0, the
/// same value for every partial of the group. Sums of (x - x0) and (x - x0)^2 then keep the
/// variance accurate when |mean| >> std (plain sums of x and x^2 would cancel).
template <class T, class M>
__device__ __forceinline__ M pivot(const ChannelLaunch& p, int64_t n, int64_t c) {
  const int64_t n0 = p.group_mode ? n : 0;
  const int64_t c0 = p.group_mode ? c / p.cpg * p.cpg : c;
  return static_cast<M>(load_as_opmath(*plane_ptr<kChX, T>(p, n0, c0)));
}
/// The backward's centre: the saved mean (training) or the running mean (evaluation).
template <class T, class M>
__device__ __forceinline__ M bw_centre(const ChannelLaunch& p, int64_t n, int64_t c) {
  if (p.training) return static_cast<const M*>(p.mean_in)[stat_index(p, n, c)];
  return param_at<T, M>(p.running_mean, p.param_f32, c, M(0));
}
/// What (n, c)'s elements are mapped with: the finish kernel's coefficients, or (evaluation
/// mode) the running statistics directly.
template <class T, bool kBw, class M>
__device__ __forceinline__ Coef<M> coef_at(const ChannelLaunch& p, int64_t n, int64_t c) {
  if (p.coef != nullptr) return static_cast<const Coef<M>*>(p.coef)[p.group_mode ? n * p.C + c : c];
  const M mean = param_at<T, M>(p.running_mean, p.param_f32, c, M(0));
  const M rstd = M(1) / sqrt(param_at<T, M>(p.running_var, p.param_f32, c, M(1)) + static_cast<M>(p.eps));
  const M w = param_at<T, M>(p.weight, p.param_f32, c, M(1));
  if constexpr (kBw)
    return {rstd * w, M(0), mean, M(0)};
  else
    return {M(0), rstd * w, mean, param_at<T, M>(p.bias, p.param_f32, c, M(0))};
}
/// The affine map of one element. Evaluation-mode backward reads no x (dx = rstd * w * dy).
template <bool kBw, class M>
__device__ __forceinline__ M affine(const Coef<M>& k, M x, M dy, bool use_x) {
  if constexpr (kBw) {
    const M r = k.alpha * dy + k.gamma;
    return use_x ? r + k.beta * (x - k.mu) : r;
  } else {
    return k.beta * (x - k.mu) + k.gamma;
  }
}

// ---- stage 1: partial sums ---------------------------------------------------------------------------
/// Planes and strided mappings: one warp per (n, c, chunk) item, lanes over the chunk
/// (16-byte vectors where the plan allows), a butterfly sum; partial[item] = (a, b).
template <class T, bool kBw, int kV, ChannelMap kMap>
__global__ void __launch_bounds__(kBlock) sums_planes_kernel(const ChannelLaunch p) {
  using M = opmath_t<T>;
  const int lane = threadIdx.x & 31;
  const int64_t K = p.chunks.count;
  const int64_t items = p.N * p.C * K;
  for (int64_t item = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5); item < items;
       item += int64_t(gridDim.x) * kWarps) {
    const int64_t k = item % K, nc = item / K, c = nc % p.C, n = nc / p.C;
    const int64_t s0 = k * p.chunks.len;
    const int64_t s1 = s0 + p.chunks.len < p.S ? s0 + p.chunks.len : p.S;
    const T* x = plane_ptr<kChX, T>(p, n, c);
    const T* dy = kBw ? plane_ptr<kChDy, T>(p, n, c) : nullptr;
    const M shift = kBw ? bw_centre<T, M>(p, n, c) : pivot<T, M>(p, n, c);
    M a = 0, b = 0;
    if constexpr (kV > 1) {
      constexpr int U = kBw ? 2 : 4;  // vectors in flight a lane (per stream)
      constexpr int64_t kStep = 32 * kV;
      for (int64_t j = s0 + lane * kV; j < s1; j += kStep * U) {
        uint4 rx[U], rd[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          rx[u] = rd[u] = make_uint4(0, 0, 0, 0);
          if (j + u * kStep < s1) {
            rx[u] = ld16(x + j + u * kStep);
            if constexpr (kBw) rd[u] = ld16(dy + j + u * kStep);
          }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
          if (j + u * kStep >= s1) continue;
          M xv[kV];
          unpack<T>(rx[u], xv);
          if constexpr (kBw) {
            M dv[kV];
            unpack<T>(rd[u], dv);
#pragma unroll
            for (int e = 0; e < kV; ++e) {
              a += dv[e];
              b += dv[e] * (xv[e] - shift);
            }
          } else {
#pragma unroll
            for (int e = 0; e < kV; ++e) {
              const M d = xv[e] - shift;
              a += d;
              b += d * d;
            }
          }
        }
      }
    } else {
#pragma unroll 4
      for (int64_t s = s0 + lane; s < s1; s += 32) {
        const M xv = static_cast<M>(load_as_opmath(x[spatial_offset<kMap, kChX>(p, s)]));
        if constexpr (kBw) {
          const M dv = static_cast<M>(load_as_opmath(dy[spatial_offset<kMap, kChDy>(p, s)]));
          a += dv;
          b += dv * (xv - shift);
        } else {
          const M d = xv - shift;
          a += d;
          b += d * d;
        }
      }
    }
    a = warp_sum(a);
    b = warp_sum(b);
    if (lane == 0) static_cast<Pair<M>*>(p.partial)[item] = {a, b};
  }
}

/// Thread layout of the pixels mapping: a CTA covers `cb` vector columns (kV channels each) of a
/// chunk of pixels, `phases` pixels at a time (so a warp reads whole rows of channels).
struct PixelTile {
  int cb, phases, col, ph;
  int64_t vc;  ///< this thread's vector column
  bool active;
  __device__ PixelTile(int64_t vcols) {
    cb = vcols < kBlock ? static_cast<int>(vcols) : kBlock;
    phases = kBlock / cb;
    col = static_cast<int>(threadIdx.x) % cb;
    ph = static_cast<int>(threadIdx.x) / cb;
    vc = int64_t(blockIdx.y) * cb + col;
    active = ph < phases && vc < vcols;
  }
};

/// Pixels mapping: one CTA per (n, chunk of pixels) x block of vector columns; each thread sums
/// its kV channels over the pixels of its phase, then the phases are summed in a fixed order.
template <class T, bool kBw, int kV>
__global__ void __launch_bounds__(kBlock) sums_pixels_kernel(const ChannelLaunch p) {
  using M = opmath_t<T>;
  __shared__ Pair<M> red[kBlock * kV];
  const int64_t vcols = p.C / kV;  // the plan takes kV > 1 only when C % kV == 0
  const PixelTile t(vcols);
  const int64_t K = p.chunks.count;
  const int64_t c0 = t.vc * kV;
  const int64_t xs = p.ss[kChX][0], ds = p.ss[kChDy][0];
  for (int64_t item = blockIdx.x; item < p.N * K; item += gridDim.x) {
    const int64_t k = item % K, n = item / K;
    const int64_t s0 = k * p.chunks.len;
    const int64_t s1 = s0 + p.chunks.len < p.S ? s0 + p.chunks.len : p.S;
    M a[kV], b[kV];
#pragma unroll
    for (int e = 0; e < kV; ++e) a[e] = b[e] = M(0);
    if (t.active) {
      M shift[kV];
#pragma unroll
      for (int e = 0; e < kV; ++e) shift[e] = kBw ? bw_centre<T, M>(p, n, c0 + e) : pivot<T, M>(p, n, c0 + e);
      const T* x = plane_ptr<kChX, T>(p, n, c0);
      const T* dy = kBw ? plane_ptr<kChDy, T>(p, n, c0) : nullptr;
      auto add = [&](const M(&xv)[kV], const M(&dv)[kV]) {
#pragma unroll
        for (int e = 0; e < kV; ++e) {
          if constexpr (kBw) {
            a[e] += dv[e];
            b[e] += dv[e] * (xv[e] - shift[e]);
          } else {
            const M d = xv[e] - shift[e];
            a[e] += d;
            b[e] += d * d;
          }
        }
      };
      // Pixels in flight a thread: two forward; the backward's two streams already give two.
      constexpr int kPix = kBw ? 1 : 2;
      for (int64_t s = s0 + t.ph; s < s1; s += kPix * t.phases) {
        const int here = s + (kPix - 1) * t.phases < s1 ? kPix : 1;
        if constexpr (kV > 1) {
          // Raw vectors first (4 registers each), widened one pixel at a time.
          uint4 rx[kPix], rd[kPix];
#pragma unroll
          for (int u = 0; u < kPix; ++u) {
            rx[u] = rd[u] = make_uint4(0, 0, 0, 0);
            if (u < here) {
              rx[u] = ld16(x + (s + u * t.phases) * xs);
              if constexpr (kBw) rd[u] = ld16(dy + (s + u * t.phases) * ds);
            }
          }
#pragma unroll
          for (int u = 0; u < kPix; ++u) {
            if (u >= here) break;
            M xv[kV], dv[kV];
            unpack<T>(rx[u], xv);
            if constexpr (kBw) unpack<T>(rd[u], dv);
            add(xv, dv);
          }
        } else {
#pragma unroll
          for (int u = 0; u < kPix; ++u) {
            if (u >= here) break;
            const int64_t su = s + u * t.phases;
            M xv[1] = {static_cast<M>(load_as_opmath(x[su * xs]))};
            M dv[1] = {kBw ? static_cast<M>(load_as_opmath(dy[su * ds])) : M(0)};
            add(xv, dv);
          }
        }
      }
    }
    if (t.ph < t.phases) {
#pragma unroll
      for (int e = 0; e < kV; ++e) red[(t.ph * t.cb + t.col) * kV + e] = {a[e], b[e]};
    }
    __syncthreads();
    if (t.ph == 0 && t.vc < vcols) {
#pragma unroll
      for (int e = 0; e < kV; ++e) {
        M sa = 0, sb = 0;
        for (int q = 0; q < t.phases; ++q) {  // fixed order
          const Pair<M> v = red[(q * t.cb + t.col) * kV + e];
          sa += v.a;
          sb += v.b;
        }
        static_cast<Pair<M>*>(p.partial)[(n * p.C + c0 + e) * K + k] = {sa, sb};
      }
    }
    __syncthreads();  // red is reused by the next item
  }
}

// ---- stage 2: statistics and coefficients ---------------------------------------------------------------
/// One warp per stat group: sums its partials in a fixed order (lanes strided, then the
/// butterfly), then writes the statistics, the running-stat update (batch_norm), the
/// coefficients of its channels, and batch_norm's parameter gradients.
template <class T, bool kBw>
__global__ void __launch_bounds__(kBlock) finish_kernel(const ChannelLaunch p) {
  using M = opmath_t<T>;
  const int lane = threadIdx.x & 31;
  const int64_t gi = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  const int64_t groups = p.group_mode ? p.N * p.G : p.C;
  if (gi >= groups) return;  // whole warps
  const int64_t K = p.chunks.count;
  const int64_t n = p.group_mode ? gi / p.G : 0;
  const int64_t c_lo = p.group_mode ? (gi % p.G) * p.cpg : gi;
  const int64_t nch = p.group_mode ? p.cpg : 1;
  const Pair<M>* part = static_cast<const Pair<M>*>(p.partial);
  // Backward group mode weighs each channel's sums by its weight (g = dy * w); batch_norm's
  // channel has one weight, applied after (its dweight needs the unweighted sum).
  M sa = 0, sb = 0;
  if (p.group_mode) {
    const int64_t base = (n * p.C + c_lo) * K;
    for (int64_t i = lane; i < nch * K; i += 32) {
      const Pair<M> v = part[base + i];
      const M w = kBw ? param_at<T, M>(p.weight, p.param_f32, c_lo + i / K, M(1)) : M(1);
      sa += w * v.a;
      sb += w * v.b;
    }
  } else {
    for (int64_t i = lane; i < p.N * K; i += 32) {
      const Pair<M> v = part[((i / K) * p.C + gi) * K + i % K];
      sa += v.a;
      sb += v.b;
    }
  }
  sa = warp_sum(sa);
  sb = warp_sum(sb);
  const M cnt = static_cast<M>(p.count);
  const M eps = static_cast<M>(p.eps);
  Coef<M>* coef = static_cast<Coef<M>*>(p.coef);
  const int64_t coef_row = p.group_mode ? n * p.C : 0;
  if constexpr (!kBw) {
    const M m1 = sa / cnt;
    const M mean = pivot<T, M>(p, n, c_lo) + m1;
    const M var = sb / cnt - m1 * m1 > M(0) ? sb / cnt - m1 * m1 : M(0);
    const M rstd = M(1) / sqrt(var + eps);
    if (lane == 0) {
      if (p.save_mean) static_cast<M*>(p.save_mean)[gi] = mean;
      if (p.save_rstd) static_cast<M*>(p.save_rstd)[gi] = rstd;
      if (p.gstat) static_cast<Pair<M>*>(p.gstat)[gi] = {mean, var};
      if (!p.group_mode && p.running_mean) {
        // torch: running = (1 - momentum) * running + momentum * stat, the variance unbiased.
        const M mom = static_cast<M>(p.momentum);
        const M rm = param_at<T, M>(p.running_mean, p.param_f32, gi, M(0));
        const M rv = param_at<T, M>(p.running_var, p.param_f32, gi, M(0));
        param_store<T, M>(p.running_mean, p.param_f32, gi, (M(1) - mom) * rm + mom * mean);
        param_store<T, M>(p.running_var, p.param_f32, gi, (M(1) - mom) * rv + mom * (var * cnt / (cnt - M(1))));
      }
    }
    for (int64_t q = lane; q < nch; q += 32) {
      const int64_t c = c_lo + q;
      const M w = param_at<T, M>(p.weight, p.param_f32, c, M(1));
      coef[coef_row + c] = {M(0), rstd * w, mean, param_at<T, M>(p.bias, p.param_f32, c, M(0))};
    }
  } else {
    M mean, rstd;
    if (p.training) {
      mean = static_cast<const M*>(p.mean_in)[gi];
      rstd = static_cast<const M*>(p.rstd_in)[gi];
    } else {  // evaluation: the running stats (apply computes its coefficients itself)
      mean = param_at<T, M>(p.running_mean, p.param_f32, gi, M(0));
      rstd = M(1) / sqrt(param_at<T, M>(p.running_var, p.param_f32, gi, M(1)) + eps);
    }
    (void)mean;
    if (!p.group_mode && lane == 0) {  // dweight = sum dy * xhat, dbias = sum dy
      if (p.dweight) param_store<T, M>(p.dweight, p.param_f32, gi, rstd * sb);
      if (p.dbias) param_store<T, M>(p.dbias, p.param_f32, gi, sa);
    }
    if (!p.training) return;
    // c1 = mean over the group of g, c2 = mean of g * xhat.
    const M w0 = p.group_mode ? M(1) : param_at<T, M>(p.weight, p.param_f32, gi, M(1));
    const M c1 = w0 * sa / cnt;
    const M c2 = w0 * rstd * sb / cnt;
    for (int64_t q = lane; q < nch; q += 32) {
      const int64_t c = c_lo + q;
      const M w = param_at<T, M>(p.weight, p.param_f32, c, M(1));
      coef[coef_row + c] = {rstd * w, -rstd * rstd * c2, mean, -rstd * c1};
      if (p.rstat) static_cast<M*>(p.rstat)[n * p.C + c] = rstd;
    }
  }
}

/// One warp per channel, summing over the batch in a fixed order: group-mode parameter
/// gradients (dweight[c] = sum_n rstd(n, c) * sum dy * (x - mean), dbias[c] = sum dy) or, with
/// `running`, instance_norm's running stats (the batch mean of the per-sample statistics, the
/// variance unbiased over S, as torch's instance_norm does through batch_norm).
template <class T>
__global__ void __launch_bounds__(kBlock) over_n_kernel(const ChannelLaunch p, bool running) {
  using M = opmath_t<T>;
  const int lane = threadIdx.x & 31;
  const int64_t c = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (c >= p.C) return;
  M sa = 0, sb = 0;
  if (running) {
    const Pair<M>* g = static_cast<const Pair<M>*>(p.gstat);
    for (int64_t n = lane; n < p.N; n += 32) {
      const Pair<M> v = g[n * p.C + c];
      sa += v.a;
      sb += v.b;
    }
  } else {
    const int64_t K = p.chunks.count;
    const Pair<M>* part = static_cast<const Pair<M>*>(p.partial);
    const M* rs = static_cast<const M*>(p.rstat);
    for (int64_t i = lane; i < p.N * K; i += 32) {
      const int64_t n = i / K;
      const Pair<M> v = part[(n * p.C + c) * K + i % K];
      sa += v.a;
      sb += rs[n * p.C + c] * v.b;
    }
  }
  sa = warp_sum(sa);
  sb = warp_sum(sb);
  if (lane != 0) return;
  if (running) {
    const M mom = static_cast<M>(p.momentum);
    const M nn = static_cast<M>(p.N), s = static_cast<M>(p.S);
    const M rm = param_at<T, M>(p.running_mean, p.param_f32, c, M(0));
    const M rv = param_at<T, M>(p.running_var, p.param_f32, c, M(0));
    param_store<T, M>(p.running_mean, p.param_f32, c, (M(1) - mom) * rm + mom * (sa / nn));
    param_store<T, M>(p.running_var, p.param_f32, c, (M(1) - mom) * rv + mom * (sb / nn * s / (s - M(1))));
  } else {
    if (p.dweight) param_store<T, M>(p.dweight, p.param_f32, c, sb);
    if (p.dbias) param_store<T, M>(p.dbias, p.param_f32, c, sa);
  }
}

// ---- stage 3: apply ----------------------------------------------------------------------------------------
/// Planes and strided mappings. A CTA takes one unit of at most kBlock * U vectors (elements on
/// the scalar path): a tile of one plane (coefficients loaded once), or, for planes shorter than
/// half a unit, `ppt` whole consecutive planes (so [N, 2048, 7, 7] is not 65536 CTAs of 49
/// elements). Units in the reverse order of sums_planes_kernel.
template <class T, bool kBw, int kV, ChannelMap kMap>
__global__ void __launch_bounds__(kBlock) apply_planes_kernel(const ChannelLaunch p, int64_t tiles, int ppt) {
  using M = opmath_t<T>;
  constexpr int U = kV > 1 ? 2 : 4;
  constexpr int kUnit = kBlock * U;
  const bool use_x = !kBw || p.training;
  const int64_t planes = p.N * p.C;
  const int64_t sv = p.S / kV;  // vectors a plane (kV divides S on the vector path)
  const int64_t units = ppt > 1 ? (planes + ppt - 1) / ppt : planes * tiles;
  for (int64_t i = blockIdx.x; i < units; i += gridDim.x) {
    const int64_t unit = units - 1 - i;
    const int64_t nc0 = ppt > 1 ? unit * ppt : unit / tiles;
    const int64_t v0 = ppt > 1 ? 0 : (unit % tiles) * kUnit;
    const int64_t len = ppt > 1 ? (planes - nc0 < ppt ? planes - nc0 : ppt) * sv : (sv - v0 < kUnit ? sv - v0 : kUnit);
    const int64_t c0 = nc0 % p.C, n0 = nc0 / p.C;
    const Coef<M> k0 = coef_at<T, kBw, M>(p, n0, c0);
    // Vector u of this thread: plane nc0 + q, vector sv_u of it.
    int64_t n[U], c[U], s[U];
    bool ok[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t v = v0 + int64_t(u) * kBlock + threadIdx.x;
      ok[u] = v - v0 < len;
      const int64_t q = ppt > 1 ? v / sv : 0;
      s[u] = v - q * sv;
      n[u] = n0;
      c[u] = c0;
      if (q != 0) {
        const int64_t nc = nc0 + q;
        c[u] = nc % p.C;
        n[u] = nc / p.C;
      }
    }
    if constexpr (kV > 1) {
      uint4 rx[U], rd[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        rx[u] = rd[u] = make_uint4(0, 0, 0, 0);
        if (ok[u]) {
          if (use_x) rx[u] = ld16_last(plane_ptr<kChX, T>(p, n[u], c[u]) + s[u] * kV);
          if constexpr (kBw) rd[u] = ld16_last(plane_ptr<kChDy, T>(p, n[u], c[u]) + s[u] * kV);
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (!ok[u]) continue;
        const Coef<M> k = (n[u] == n0 && c[u] == c0) ? k0 : coef_at<T, kBw, M>(p, n[u], c[u]);
        M xv[kV], dv[kV], o[kV];
        unpack<T>(rx[u], xv);
        if constexpr (kBw) unpack<T>(rd[u], dv);
#pragma unroll
        for (int e = 0; e < kV; ++e) o[e] = affine<kBw>(k, xv[e], kBw ? dv[e] : M(0), use_x);
        st16(const_cast<T*>(plane_ptr<kChOut, T>(p, n[u], c[u])) + s[u] * kV, pack<T>(o));
      }
    } else {
      M xv[U], dv[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        xv[u] = dv[u] = M(0);
        if (ok[u]) {
          if (use_x)
            xv[u] =
                static_cast<M>(load_as_opmath(plane_ptr<kChX, T>(p, n[u], c[u])[spatial_offset<kMap, kChX>(p, s[u])]));
          if constexpr (kBw)
            dv[u] = static_cast<M>(
                load_as_opmath(plane_ptr<kChDy, T>(p, n[u], c[u])[spatial_offset<kMap, kChDy>(p, s[u])]));
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (!ok[u]) continue;
        const Coef<M> k = (n[u] == n0 && c[u] == c0) ? k0 : coef_at<T, kBw, M>(p, n[u], c[u]);
        const_cast<T*>(plane_ptr<kChOut, T>(p, n[u], c[u]))[spatial_offset<kMap, kChOut>(p, s[u])] =
            convert<T>(affine<kBw>(k, xv[u], dv[u], use_x));
      }
    }
  }
}

/// Pixels mapping: the tiles of sums_pixels_kernel in reverse order, each thread's kV channels'
/// coefficients held in registers across its pixels.
template <class T, bool kBw, int kV>
__global__ void __launch_bounds__(kBlock) apply_pixels_kernel(const ChannelLaunch p) {
  using M = opmath_t<T>;
  const int64_t vcols = p.C / kV;
  const PixelTile t(vcols);
  if (!t.active) return;
  const bool use_x = !kBw || p.training;
  const int64_t K = p.chunks.count;
  const int64_t c0 = t.vc * kV;
  const int64_t xs = p.ss[kChX][0], ds = p.ss[kChDy][0], os = p.ss[kChOut][0];
  for (int64_t i = blockIdx.x; i < p.N * K; i += gridDim.x) {
    const int64_t item = p.N * K - 1 - i;
    const int64_t k = item % K, n = item / K;
    const int64_t s0 = k * p.chunks.len;
    const int64_t s1 = s0 + p.chunks.len < p.S ? s0 + p.chunks.len : p.S;
    Coef<M> cf[kV];
#pragma unroll
    for (int e = 0; e < kV; ++e) cf[e] = coef_at<T, kBw, M>(p, n, c0 + e);
    const T* x = plane_ptr<kChX, T>(p, n, c0);
    const T* dy = kBw ? plane_ptr<kChDy, T>(p, n, c0) : nullptr;
    T* out = const_cast<T*>(plane_ptr<kChOut, T>(p, n, c0));
    for (int64_t s = s0 + t.ph; s < s1; s += 2 * t.phases) {  // two pixels in flight
      const bool two = s + t.phases < s1;
      if constexpr (kV > 1) {
        uint4 rx[2], rd[2];
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          const int64_t su = s + u * t.phases;
          const bool ok = u == 0 || two;
          rx[u] = ok && use_x ? ld16_last(x + su * xs) : make_uint4(0, 0, 0, 0);
          rd[u] = make_uint4(0, 0, 0, 0);
          if constexpr (kBw)
            if (ok) rd[u] = ld16_last(dy + su * ds);
        }
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          if (u == 1 && !two) break;
          M xv[kV], dv[kV], o[kV];
          unpack<T>(rx[u], xv);
          if constexpr (kBw) unpack<T>(rd[u], dv);
#pragma unroll
          for (int e = 0; e < kV; ++e) o[e] = affine<kBw>(cf[e], xv[e], kBw ? dv[e] : M(0), use_x);
          st16(out + (s + u * t.phases) * os, pack<T>(o));
        }
      } else {
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          if (u == 1 && !two) break;
          const int64_t su = s + u * t.phases;
          const M xv = use_x ? static_cast<M>(load_as_opmath(x[su * xs])) : M(0);
          const M dv = kBw ? static_cast<M>(load_as_opmath(dy[su * ds])) : M(0);
          out[su * os] = convert<T>(affine<kBw>(cf[0], xv, dv, use_x));
        }
      }
    }
  }
}

// ---- group/instance norm rows on chip ----------------------------------------------------------------
extern __shared__ __align__(16) unsigned char chnorm_dyn_smem[];

/// One CTA per (n, group) row of cpg unit-stride planes (planes mapping, group mode, batch
/// statistics), the row in shared memory (channel_smem_rows_bytes). Reductions split the row into
/// cpg x parts items, one warp each (lanes over 16-byte vectors), the item sums combined in a
/// fixed order. Forward: mean, then the centred variance (two passes on chip), y. Backward: the
/// per-channel sums of dy and dy * (x - mean) (written for the batch sums of dweight/dbias), their
/// weighted group totals, dx.
template <class T, bool kBw, int kV>
__global__ void __launch_bounds__(kBlock) smem_rows_kernel(const ChannelLaunch p) {
  using M = opmath_t<T>;
  __shared__ M bcast[2];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t row = blockIdx.x;  // stat group (n, g)
  const int64_t n = row / p.G, c0 = (row % p.G) * p.cpg;
  const int cpg = static_cast<int>(p.cpg), S = static_cast<int>(p.S), R = cpg * S;
  const int parts = kWarps / cpg > 1 ? kWarps / cpg : 1;  // channel_row_parts
  const int items = cpg * parts;
  const int Lp = ((S + parts - 1) / parts + 7) / 8 * 8;
  const size_t row_bytes = (static_cast<size_t>(R) * sizeof(T) + 15) / 16 * 16;
  T* xs = reinterpret_cast<T*>(chnorm_dyn_smem);
  T* ds = reinterpret_cast<T*>(chnorm_dyn_smem + row_bytes);
  Pair<M>* part = reinterpret_cast<Pair<M>*>(chnorm_dyn_smem + row_bytes * (kBw ? 2 : 1));
  Pair<M>* chan = part + items;  // backward: per-channel (sum dy, sum dy * (x - mean))
  Pair<M>* cco = chan + cpg;     // per-channel coefficients

  // Stage the row: plane q of the group at smem [q * S, (q + 1) * S).
  auto stage = [&](T* dst, const T* src, int64_t sc) {
    if constexpr (kV > 1) {
      const int Sv = S / kV;
      for (int q = tid; q < R / kV; q += kBlock) {
        const int cc = q / Sv, sv = q - cc * Sv;
        cp_async16(dst + q * kV, src + cc * sc + sv * kV);
      }
    } else {
      for (int q = tid; q < R; q += kBlock) {
        const int cc = q / S, s = q - cc * S;
        dst[q] = src[cc * sc + s];
      }
    }
  };
  stage(xs, plane_ptr<kChX, T>(p, n, c0), p.sc[kChX]);
  if constexpr (kBw) stage(ds, plane_ptr<kChDy, T>(p, n, c0), p.sc[kChDy]);
  if constexpr (kV > 1) cp_async_wait_all();
  __syncthreads();

  // part[it] = f summed over item it (plane it / parts, range it % parts); ends with a barrier.
  auto reduce_items = [&](auto f) {
    for (int it = warp; it < items; it += kWarps) {
      const int q = it / parts, pp = it % parts;
      const int b0 = pp * Lp, b1 = b0 + Lp < S ? b0 + Lp : S;
      const T* xr = xs + q * S;
      const T* dr = ds + q * S;
      M a = 0, b = 0;
      if constexpr (kV > 1) {
        for (int j = b0 + lane * kV; j < b1; j += 32 * kV) {
          M xv[kV], dv[kV];
          unpack<T>(*reinterpret_cast<const uint4*>(xr + j), xv);
          if constexpr (kBw) unpack<T>(*reinterpret_cast<const uint4*>(dr + j), dv);
#pragma unroll
          for (int e = 0; e < kV; ++e) f(xv[e], kBw ? dv[e] : M(0), a, b);
        }
      } else {
        for (int j = b0 + lane; j < b1; j += 32)
          f(static_cast<M>(load_as_opmath(xr[j])), kBw ? static_cast<M>(load_as_opmath(dr[j])) : M(0), a, b);
      }
      a = warp_sum(a);
      b = warp_sum(b);
      if (lane == 0) part[it] = {a, b};
    }
    __syncthreads();
  };
  // Sum of part[0, items) (or of weighted per-channel pairs), broadcast to every thread.
  auto total = [&](auto get, int count) -> Pair<M> {
    if (warp == 0) {
      M a = 0, b = 0;
      for (int i = lane; i < count; i += 32) {
        const Pair<M> v = get(i);
        a += v.a;
        b += v.b;
      }
      a = warp_sum(a);
      b = warp_sum(b);
      if (lane == 0) bcast[0] = a, bcast[1] = b;
    }
    __syncthreads();
    const Pair<M> r{bcast[0], bcast[1]};
    __syncthreads();
    return r;
  };
  auto item_sum = [&](int i) { return part[i]; };

  const M rn = static_cast<M>(R);
  M mean, beta = 0, gamma = 0;
  if constexpr (!kBw) {
    reduce_items([](M xv, M, M& a, M&) { a += xv; });
    mean = total(item_sum, items).a / rn;
    reduce_items([mean](M xv, M, M& a, M&) {
      const M d = xv - mean;
      a += d * d;
    });
    const M var = total(item_sum, items).a / rn;
    const M rstd = M(1) / sqrt(var + static_cast<M>(p.eps));
    if (tid == 0) {
      if (p.save_mean) static_cast<M*>(p.save_mean)[row] = mean;
      if (p.save_rstd) static_cast<M*>(p.save_rstd)[row] = rstd;
      if (p.gstat) static_cast<Pair<M>*>(p.gstat)[row] = {mean, var};
    }
    for (int q = tid; q < cpg; q += kBlock)
      cco[q] = {rstd * param_at<T, M>(p.weight, p.param_f32, c0 + q, M(1)),
                param_at<T, M>(p.bias, p.param_f32, c0 + q, M(0))};
  } else {
    mean = static_cast<const M*>(p.mean_in)[row];
    const M rstd = static_cast<const M*>(p.rstd_in)[row];
    reduce_items([mean](M xv, M dv, M& a, M& b) {
      a += dv;
      b += dv * (xv - mean);
    });
    for (int q = tid; q < cpg; q += kBlock) {
      M a = 0, b = 0;
      for (int pp = 0; pp < parts; ++pp) {
        a += part[q * parts + pp].a;
        b += part[q * parts + pp].b;
      }
      chan[q] = {a, b};
      if (p.partial) {  // parameter gradients: summed over the batch by over_n_kernel
        static_cast<Pair<M>*>(p.partial)[n * p.C + c0 + q] = {a, b};
        static_cast<M*>(p.rstat)[n * p.C + c0 + q] = rstd;
      }
    }
    __syncthreads();
    const Pair<M> g = total(
        [&](int q) {
          const M w = param_at<T, M>(p.weight, p.param_f32, c0 + q, M(1));
          return Pair<M>{w * chan[q].a, w * chan[q].b};
        },
        cpg);
    const M c1 = g.a / rn, c2 = rstd * g.b / rn;
    beta = -rstd * rstd * c2;
    gamma = -rstd * c1;
    for (int q = tid; q < cpg; q += kBlock) cco[q] = {rstd * param_at<T, M>(p.weight, p.param_f32, c0 + q, M(1)), M(0)};
    if (p.ptr[kChOut] == nullptr) return;  // dweight/dbias only
  }
  __syncthreads();

  // out = (x - mean) * scale_c + shift_c (forward) or alpha_c * dy + beta * (x - mean) + gamma.
  T* out = const_cast<T*>(plane_ptr<kChOut, T>(p, n, c0));
  const int64_t osc = p.sc[kChOut];
  if constexpr (kV > 1) {
    const int Sv = S / kV;
    for (int q = tid; q < R / kV; q += kBlock) {
      const int cc = q / Sv, sv = q - cc * Sv;
      M xv[kV], dv[kV], o[kV];
      unpack<T>(*reinterpret_cast<const uint4*>(xs + q * kV), xv);
      if constexpr (kBw) unpack<T>(*reinterpret_cast<const uint4*>(ds + q * kV), dv);
      const Pair<M> k = cco[cc];
#pragma unroll
      for (int e = 0; e < kV; ++e) {
        if constexpr (kBw)
          o[e] = k.a * dv[e] + beta * (xv[e] - mean) + gamma;
        else
          o[e] = (xv[e] - mean) * k.a + k.b;
      }
      st16(out + cc * osc + sv * kV, pack<T>(o));
    }
  } else {
    for (int q = tid; q < R; q += kBlock) {
      const int cc = q / S, s = q - cc * S;
      const M xv = static_cast<M>(load_as_opmath(xs[q]));
      const Pair<M> k = cco[cc];
      M o;
      if constexpr (kBw)
        o = k.a * static_cast<M>(load_as_opmath(ds[q])) + beta * (xv - mean) + gamma;
      else
        o = (xv - mean) * k.a + k.b;
      out[cc * osc + s] = convert<T>(o);
    }
  }
}

// ---- local_response_norm ------------------------------------------------------------------------------
/// One thread per element; the window sums read the neighbouring channels directly (L1/L2 hits:
/// a warp's neighbours are the same rows of other channels). Forward: y = x * d^-beta with
/// d = k + alpha / size * sum_{window(c)} x^2. Backward: dx_j = dy_j * d_j^-beta - 2 alpha beta /
/// size * x_j * sum over the c whose window holds j of dy_c x_c d_c^(-beta-1) (O(size^2) loads).
template <class T, bool kBw, ChannelMap kMap>
__global__ void __launch_bounds__(kBlock) lrn_kernel(const ChannelLaunch p) {
  using M = opmath_t<T>;
  const int64_t total = p.N * p.C * p.S;
  const int64_t before = p.lrn_size / 2, after = (p.lrn_size - 1) / 2;
  const M an = static_cast<M>(p.lrn_alpha) / static_cast<M>(p.lrn_size);
  const M beta = static_cast<M>(p.lrn_beta), kk = static_cast<M>(p.lrn_k);
  for (int64_t i = int64_t(blockIdx.x) * kBlock + threadIdx.x; i < total; i += int64_t(gridDim.x) * kBlock) {
    int64_t n, c, s;
    if constexpr (kMap == ChannelMap::pixels) {  // channels fastest: coalesced
      c = i % p.C;
      const int64_t r = i / p.C;
      s = r % p.S;
      n = r / p.S;
    } else {
      s = i % p.S;
      const int64_t r = i / p.S;
      c = r % p.C;
      n = r / p.C;
    }
    const T* x = static_cast<const T*>(p.ptr[kChX]) + n * p.sn[kChX] + spatial_offset<kMap, kChX>(p, s);
    const int64_t xc = p.sc[kChX];
    auto xat = [&](int64_t cc) { return static_cast<M>(load_as_opmath(x[cc * xc])); };
    auto denom = [&](int64_t cc) {
      const int64_t lo = cc - before > 0 ? cc - before : 0;
      const int64_t hi = cc + after < p.C - 1 ? cc + after : p.C - 1;
      M acc = 0;
      for (int64_t q = lo; q <= hi; ++q) {
        const M v = xat(q);
        acc += v * v;
      }
      return kk + an * acc;
    };
    M o;
    if constexpr (!kBw) {
      o = xat(c) * pow(denom(c), -beta);
    } else {
      const T* dy = static_cast<const T*>(p.ptr[kChDy]) + n * p.sn[kChDy] + spatial_offset<kMap, kChDy>(p, s);
      const int64_t dc = p.sc[kChDy];
      const int64_t lo = c - after > 0 ? c - after : 0;
      const int64_t hi = c + before < p.C - 1 ? c + before : p.C - 1;
      M acc = 0;
      for (int64_t q = lo; q <= hi; ++q) {
        const M d = denom(q);
        acc += static_cast<M>(load_as_opmath(dy[q * dc])) * xat(q) * (pow(d, -beta) / d);
      }
      o = static_cast<M>(load_as_opmath(dy[c * dc])) * pow(denom(c), -beta) - M(2) * an * beta * xat(c) * acc;
    }
    T* out = static_cast<T*>(const_cast<void*>(p.ptr[kChOut]));
    out[n * p.sn[kChOut] + c * p.sc[kChOut] + spatial_offset<kMap, kChOut>(p, s)] = convert<T>(o);
  }
}

// ---- launch ------------------------------------------------------------------------------------------------
inline unsigned grid_of(int64_t blocks) {
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > (int64_t{1} << 30) ? (int64_t{1} << 30) : blocks));
}

template <class T, bool kBw>
cudaError_t launch_channel(const ChannelLaunch& p, cudaStream_t stream) {
  constexpr int kV = kVecOf<T>;
  const auto map = p.map;
  if (p.op == NormOp::local_response_norm) {
    const unsigned g = grid_of((p.N * p.C * p.S + kBlock - 1) / kBlock);
    if (map == ChannelMap::planes)
      lrn_kernel<T, kBw, ChannelMap::planes><<<g, kBlock, 0, stream>>>(p);
    else if (map == ChannelMap::pixels)
      lrn_kernel<T, kBw, ChannelMap::pixels><<<g, kBlock, 0, stream>>>(p);
    else
      lrn_kernel<T, kBw, ChannelMap::strided><<<g, kBlock, 0, stream>>>(p);
    return cudaGetLastError();
  }
  const bool pgrad = kBw && (p.dweight != nullptr || p.dbias != nullptr);
  const unsigned per_c = grid_of((p.C + kWarps - 1) / kWarps);
  if (p.smem_rows > 0) {
    auto k = p.vec ? smem_rows_kernel<T, kBw, kV> : smem_rows_kernel<T, kBw, 1>;
    if (p.smem_rows > 48 * 1024)
      if (const cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, p.smem_rows);
          e != cudaSuccess)
        return e;
    k<<<grid_of(p.N * p.G), kBlock, static_cast<size_t>(p.smem_rows), stream>>>(p);
    if (!kBw && p.gstat) over_n_kernel<T><<<per_c, kBlock, 0, stream>>>(p, true);
    if (pgrad) over_n_kernel<T><<<per_c, kBlock, 0, stream>>>(p, false);
    return cudaGetLastError();
  }
  // Stage 1 + 2 wherever statistics or parameter gradients are computed; evaluation mode
  // without them goes straight to apply (coefficients from the running stats).
  if (p.training || pgrad) {
    const int64_t vcols = (map == ChannelMap::pixels && p.vec) ? p.C / kV : p.C;
    const dim3 pix_grid(grid_of(p.N * p.chunks.count), static_cast<unsigned>((vcols + kBlock - 1) / kBlock));
    const unsigned plane_grid = grid_of((p.N * p.C * p.chunks.count + kWarps - 1) / kWarps);
    if (map == ChannelMap::pixels) {
      if (p.vec)
        sums_pixels_kernel<T, kBw, kV><<<pix_grid, kBlock, 0, stream>>>(p);
      else
        sums_pixels_kernel<T, kBw, 1><<<pix_grid, kBlock, 0, stream>>>(p);
    } else if (map == ChannelMap::planes) {
      if (p.vec)
        sums_planes_kernel<T, kBw, kV, ChannelMap::planes><<<plane_grid, kBlock, 0, stream>>>(p);
      else
        sums_planes_kernel<T, kBw, 1, ChannelMap::planes><<<plane_grid, kBlock, 0, stream>>>(p);
    } else {
      sums_planes_kernel<T, kBw, 1, ChannelMap::strided><<<plane_grid, kBlock, 0, stream>>>(p);
    }
    const int64_t groups = p.group_mode ? p.N * p.G : p.C;
    finish_kernel<T, kBw><<<grid_of((groups + kWarps - 1) / kWarps), kBlock, 0, stream>>>(p);
    if (p.group_mode && !kBw && p.gstat) over_n_kernel<T><<<per_c, kBlock, 0, stream>>>(p, true);
    if (p.group_mode && pgrad) over_n_kernel<T><<<per_c, kBlock, 0, stream>>>(p, false);
  }
  if (p.ptr[kChOut] != nullptr) {
    if (map == ChannelMap::pixels) {
      const int64_t vcols = p.vec ? p.C / kV : p.C;
      const dim3 g(grid_of(p.N * p.chunks.count), static_cast<unsigned>((vcols + kBlock - 1) / kBlock));
      if (p.vec)
        apply_pixels_kernel<T, kBw, kV><<<g, kBlock, 0, stream>>>(p);
      else
        apply_pixels_kernel<T, kBw, 1><<<g, kBlock, 0, stream>>>(p);
    } else {
      // Units of kBlock * U vectors (apply_planes_kernel): tiles of a plane, or whole planes.
      const int64_t unit = int64_t(kBlock) * (p.vec ? 2 : 4);
      const int64_t sv = p.vec ? p.S / kV : p.S;
      const int ppt = sv * 2 <= unit ? static_cast<int>(unit / (sv > 0 ? sv : 1)) : 1;
      const int64_t tiles = (sv + unit - 1) / unit;
      const unsigned g = grid_of(ppt > 1 ? (p.N * p.C + ppt - 1) / ppt : p.N * p.C * tiles);
      if (map == ChannelMap::planes && p.vec)
        apply_planes_kernel<T, kBw, kV, ChannelMap::planes><<<g, kBlock, 0, stream>>>(p, tiles, ppt);
      else if (map == ChannelMap::planes)
        apply_planes_kernel<T, kBw, 1, ChannelMap::planes><<<g, kBlock, 0, stream>>>(p, tiles, ppt);
      else
        apply_planes_kernel<T, kBw, 1, ChannelMap::strided><<<g, kBlock, 0, stream>>>(p, tiles, ppt);
    }
  }
  return cudaGetLastError();
}

}  // namespace baracuda::kern::chnorm

namespace baracuda::detail {

template <DType D, Direction Dir>
cudaError_t channel_launch(const ChannelLaunch& p, cudaStream_t stream) {
  return kern::chnorm::launch_channel<kern::storage_t<D>, Dir == Direction::Backward>(p, stream);
}

}  // namespace baracuda::detail

/// One translation unit per (dtype, direction) so the build parallelizes.
#define BARACUDA_CHANNEL_NORM_INSTANTIATE(D, DIR)                                                      \
  template cudaError_t baracuda::detail::channel_launch<baracuda::DType::D, baracuda::Direction::DIR>( \
      const baracuda::detail::ChannelLaunch&, cudaStream_t);
