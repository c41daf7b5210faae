// What NormPlan::run hands to the channel-normalization kernels (channel_kernel.cuh): batch_norm,
// instance_norm, group_norm and local_response_norm of x = [N, C, *spatial]. A plain struct shared
// by the host plan (plan.cpp) and the per-dtype kernel translation units (channel_<dtype>_<dir>.cu);
// no CUDA types, so the plan compiles with a plain C++ compiler.
//
// The kernels see x as [N, C, S] (S = the spatial dims flattened) in one of three mappings, the
// same for every main tensor of a call (x, dy, out):
//   planes   every (n, c) plane of S elements is unit-stride (NCHW, channel slices of it);
//   pixels   channels are unit-stride and the spatial dims merge into one stride (channels-last,
//            and [N, C] inputs); with per-channel statistics and dense samples the batch folds
//            into S (N = 1, S = N * S), so a chunk of pixels never stops at a sample boundary;
//   strided  anything else: one 64-bit offset per element over up to 6 spatial dims.
// Statistics of a "stat group" (batch_norm: a channel; instance/group norm: a (sample, group)
// of C / G channels) come from per-(n, c, chunk) partial sums in the workspace, summed in a
// fixed order by one warp per stat group: deterministic and independent of the device.
#pragma once
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "baracuda/ops/norm.hpp"

namespace baracuda::detail {

enum class ChannelMap : uint8_t { planes, pixels, strided };
inline constexpr int kChannelMaxSpatial = kMaxRank - 2;
/// Main tensors: x (forward input; backward: the forward's input), dy (backward), out (y or dx).
enum ChannelSlot : int { kChX = 0, kChDy = 1, kChOut = 2, kChSlots = 3 };
/// Threads of every channel kernel's CTA (8 warps).
inline constexpr int kChannelBlock = 256;

/// A partition of S into `count` chunks of `len` elements (the last one shorter), len a multiple
/// of 8 so that 16-byte vectors never straddle chunks.
struct ChannelChunks {
  int64_t len = 8;
  int64_t count = 1;
};
inline ChannelChunks channel_chunks_of(int64_t S, int64_t want) {
  want = std::clamp<int64_t>(want, 1, std::max<int64_t>(S, 1));
  ChannelChunks k;
  k.len = std::max<int64_t>((S + want - 1) / want, 1);
  k.len = (k.len + 7) / 8 * 8;
  k.count = std::max<int64_t>((S + k.len - 1) / k.len, 1);
  return k;
}
/// Planes mapping: one warp per (n, c, chunk). A plane is one chunk unless there are fewer than
/// 2048 planes (then planes split into chunks of >= 2048 elements until there are 2048 items),
/// so small batches of large images still fill the GPU. A function of the problem only.
inline ChannelChunks channel_plane_chunks(int64_t planes, int64_t S) {
  const int64_t by_items = (2048 + std::max<int64_t>(planes, 1) - 1) / std::max<int64_t>(planes, 1);
  return channel_chunks_of(S, std::min<int64_t>(by_items, (S + 2047) / 2048));
}
/// Pixels mapping: one CTA per (sample, chunk of pixels) x block of 256 vector columns; about 512
/// CTAs, each at least 2048 elements.
inline ChannelChunks channel_pixel_chunks(int64_t samples, int64_t S, int64_t C) {
  const int64_t s = std::max<int64_t>(samples, 1);
  const int64_t by_ctas = (512 + s - 1) / s;
  const int64_t by_size = std::max<int64_t>(S * std::max<int64_t>(C, 1) / 2048, 1);
  return channel_chunks_of(S, std::min(by_ctas, by_size));
}

/// Workspace sections (bytes from the workspace start; each 256-byte aligned), sized for every
/// mapping the descriptor's shape can take: partial sums [N][C][chunks] (two values each),
/// coefficients [N][C] (four values), the rstd of each (n, c)'s stat group [N][C], and the
/// (mean, biased var) of each instance_norm stat group [N][C] for the running-stat update.
struct ChannelWorkspace {
  size_t partial = 0, coef = 0, rstat = 0, gstat = 0, total = 0;
};
inline ChannelWorkspace channel_workspace(int64_t N, int64_t C, int64_t S, int stats_bytes) {
  auto up = [](size_t b) { return (b + 255) / 256 * 256; };
  const int64_t planes = N * C;
  int64_t items = planes * channel_plane_chunks(planes, S).count;
  items = std::max(items, C * channel_pixel_chunks(1, N * S, C).count);  // batch folded into S
  items = std::max(items, planes * channel_pixel_chunks(N, S, C).count);
  ChannelWorkspace w;
  const size_t m = static_cast<size_t>(stats_bytes);
  w.partial = 0;
  w.coef = up(static_cast<size_t>(items) * 2 * m);
  w.rstat = w.coef + up(static_cast<size_t>(planes) * 4 * m);
  w.gstat = w.rstat + up(static_cast<size_t>(planes) * m);
  w.total = w.gstat + up(static_cast<size_t>(planes) * 2 * m);
  return w;
}

/// Dynamic shared memory of the kernel that keeps a whole (sample, group) row on chip (group and
/// instance norm, planes mapping): the row (x; backward also dy) as stored, the per-item partial
/// sums of the row's reductions (cpg x parts, parts = max(1, 8 / cpg) so that the 8 warps share
/// the work) and two per-channel pairs (channel sums and coefficients).
inline int channel_row_parts(int64_t cpg) {
  return static_cast<int>(std::max<int64_t>(1, 8 / std::max<int64_t>(cpg, 1)));
}
inline size_t channel_smem_rows_bytes(bool backward, int64_t cpg, int64_t S, int elem_bytes, int stats_bytes) {
  const size_t row = (static_cast<size_t>(cpg * S) * static_cast<size_t>(elem_bytes) + 15) / 16 * 16;
  const size_t pair = 2 * static_cast<size_t>(stats_bytes);
  return row * (backward ? 2 : 1) + static_cast<size_t>(cpg) * static_cast<size_t>(channel_row_parts(cpg)) * pair +
         2 * static_cast<size_t>(cpg) * pair;
}
/// Most dynamic shared memory the on-chip rows may take on an architecture: two CTAs an SM on
/// Hopper/Blackwell datacenter parts (227 KB an SM), one on A100 (163 KB), 96 KB elsewhere (the
/// 99 KB per-CTA limit of sm_86/89/120). A function of the architecture only, never of the SM
/// count.
inline size_t channel_smem_rows_budget(int sm) {
  if (sm == 90 || sm == 100 || sm == 103) return 112 * 1024;
  if (sm == 80 || sm == 87) return 160 * 1024;
  return 96 * 1024;
}

struct ChannelLaunch {
  NormOp op = NormOp::batch_norm;
  bool training = true;         ///< batch statistics (false: running stats, per-channel mode)
  bool group_mode = false;      ///< statistics per (n, group) (instance/group norm with batch statistics)
  int64_t N = 0, C = 0, S = 0;  ///< the mapped problem (pixels mapping may fold N into S)
  int64_t G = 1, cpg = 1;       ///< group mode: groups a sample, channels a group
  int64_t count = 0;            ///< elements of one stat group (batch_norm: N * S of the input)
  int64_t S_orig = 0;           ///< instance norm: spatial elements (unbiased running variance)
  int64_t N_orig = 0;           ///< instance norm: samples averaged into the running stats
  ChannelMap map = ChannelMap::planes;
  bool vec = false;  ///< 16-byte vectors (unit inner stride, aligned, whole vectors per plane / pixel)
  // Strided mapping: the spatial dims (outer to inner, size-1 dims dropped) and every slot's strides.
  int sdims = 0;
  int64_t ssize[kChannelMaxSpatial] = {};
  const void* ptr[kChSlots] = {nullptr, nullptr, nullptr};
  int64_t sn[kChSlots] = {};
  int64_t sc[kChSlots] = {};
  int64_t ss[kChSlots][kChannelMaxSpatial] = {};  ///< pixels: ss[t][0] is the pixel stride
  ChannelChunks chunks;
  // Parameters and statistics (param dtype: f32 when param_f32, else the input dtype; stats
  // dtype: f64 for f64 inputs, else f32).
  bool param_f32 = false;
  const void* weight = nullptr;
  const void* bias = nullptr;
  void* running_mean = nullptr;
  void* running_var = nullptr;
  void* save_mean = nullptr;
  void* save_rstd = nullptr;
  const void* mean_in = nullptr;
  const void* rstd_in = nullptr;
  void* dweight = nullptr;
  void* dbias = nullptr;
  double eps = 1e-5, momentum = 0.1;
  // Workspace sections (ChannelWorkspace); null where the call does not use them.
  void* partial = nullptr;
  void* coef = nullptr;
  void* rstat = nullptr;
  void* gstat = nullptr;
  /// > 0: group/instance norm rows staged in shared memory (this many dynamic bytes).
  int smem_rows = 0;
  // local_response_norm
  int lrn_size = 5;
  double lrn_alpha = 1e-4, lrn_beta = 0.75, lrn_k = 1.0;
};

/// The launcher of one (dtype, direction); explicitly instantiated in channel_<dtype>_<dir>.cu.
template <DType D, Direction Dir>
cudaError_t channel_launch(const ChannelLaunch& p, cudaStream_t stream);

}  // namespace baracuda::detail
