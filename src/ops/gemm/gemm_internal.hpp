// Internal interfaces of the GEMM family: the column-major normal form that cuBLASLt consumes,
// the native kernels' launchers (gemm_kernels.cu), the CUTLASS int8 and grouped kernels
// (gemm_cutlass_int8_<dtype>.cu and gemm_cutlass_grouped_<dtype>.cu, the only files of the family
// that include CUTLASS) and the cuBLASLt backend (gemm_cublaslt.cpp, the only file of the family
// that includes cublasLt.h).
#pragma once
#include <cuda_runtime_api.h>

#include <memory>

#include "baracuda/ops/gemm.hpp"

namespace baracuda::detail {

// ---- column-major normal form ----------------------------------------------------------------
/// One operand as cuBLAS sees it: a column-major stored matrix [rows, cols] with leading
/// dimension ld, used transposed or not.
struct CmOperand {
  bool trans = false;
  int64_t rows = 0, cols = 0, ld = 1, batch_stride = 0;
};
/// The problem rewritten for a column-major D: when D is row-major the product is computed as
/// D^T = op(B)^T op(A)^T (`swapped`), so A' is built from B and B' from A.
struct CmProblem {
  bool swapped = false;
  int64_t m = 0, n = 0, k = 0, batch = 1;
  CmOperand a, b, c, d;
};

enum class Order : uint8_t { Row, Col };
/// The storage order of a logical [rows, cols] matrix with strides (rs, cs), preferring `prefer`
/// when both fit (a single row or column). Fails when neither stride is unit or the other stride
/// is smaller than the extent it must skip (overlapping rows/columns).
Result<Order> storage_order(int64_t rows, int64_t cols, int64_t rs, int64_t cs, Order prefer);
/// Requires every operand to have a storage order and C to share D's.
Result<CmProblem> to_col_major(const std::string& op, const GemmDesc& d);

// ---- native kernels (gemm_kernels.cu) ---------------------------------------------------------
/// The small-M streaming kernel: A [m,k] and B [k,n] both K-contiguous (B stored [n,k] like
/// torch's linear weight), m <= 16, k % 8 == 0, 16-byte aligned rows.
struct SmallMParams {
  DType dt = DType::bf16;
  int64_t m = 0, n = 0, k = 0, batch = 1;
  const void* a = nullptr;
  int64_t a_row = 0, a_batch = 0;
  const void* b = nullptr;
  int64_t b_col = 0, b_batch = 0;  ///< element (kk, nn) of op(B) at nn*b_col + kk
  const void* c = nullptr;
  MatrixStrides cs;
  void* d = nullptr;
  MatrixStrides ds;
  float alpha = 1.f, beta = 0.f;
  const void* bias = nullptr;
  GemmActivation act = GemmActivation::None;
};
inline constexpr int kSmallMMax = 16;
cudaError_t launch_small_m(const SmallMParams& p, cudaStream_t s);

/// Native epilogue over D in place: z = (from_c ? beta*C : D) [+ bias[n]]; forward: aux = z,
/// D = act(z); backward: D = z * act'(aux_in). Real dtypes; complex and int32 only scale
/// (from_c) without bias/activation. Used when cuBLASLt cannot fuse the epilogue and for k = 0.
struct EpilogueParams {
  DType dt = DType::f32;
  int64_t batch = 1, m = 0, n = 0;
  void* d = nullptr;
  MatrixStrides ds;
  bool from_c = false;
  const void* c = nullptr;  ///< null with from_c: z = 0
  MatrixStrides cs;
  double beta = 0.0;
  const void* bias = nullptr;
  void* aux_out = nullptr;
  const void* aux_in = nullptr;
  GemmActivation act = GemmActivation::None;
  bool backward = false;
};
cudaError_t launch_epilogue(const EpilogueParams& p, cudaStream_t s);

/// amax = max |D| over [batch, m, n] (strided), for outputs cuBLASLt does not reduce itself (its
/// AMAX_D serves fp8 D only). Zeroes amax first; a max is order-independent, so deterministic.
cudaError_t launch_amax(DType dt, int64_t batch, int64_t m, int64_t n, const void* d, MatrixStrides ds, float* amax,
                        cudaStream_t s);

/// Deterministic bias-gradient reduction: out[col] = sum over batch and rows of X[b, row, col]
/// (two passes through an f32/f64 workspace, fixed order, independent of the device).
struct ReduceParams {
  DType dt = DType::f32;  ///< X's and out's dtype (f16, bf16, f32, f64)
  int64_t batch = 1, rows = 0, cols = 0;
  const void* x = nullptr;
  MatrixStrides xs;
  void* out = nullptr;
};
size_t reduce_workspace_bytes(const ReduceParams& p);
cudaError_t launch_reduce(const ReduceParams& p, void* ws, cudaStream_t s);

/// Grouped GEMM (grouped.cpp / gemm_kernels.cu): tiles of 64 rows x 64 columns, one block each;
/// a block finds its (group, row tile) by scanning the device offsets.
struct GroupedParams {
  DType dt = DType::bf16;
  int64_t groups = 0, rows = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* w = nullptr;
  int64_t ldw = 0, w_group = 0;
  const void* offsets = nullptr;
  bool offsets_i32 = false;
  bool ends_only = false;  ///< offsets = [groups] ends (group 0 starts at 0), else [groups + 1]
  void* d = nullptr;
  int64_t ldd = 0;
};
inline constexpr int kGroupedTileM = 64, kGroupedTileN = 64;
cudaError_t launch_grouped(const GroupedParams& p, cudaStream_t s);

/// The per-group arrays the CUTLASS grouped kernel reads (device memory, in the plan's workspace):
/// problem shape (m_g, n, k) as 3 int32, pointers to the group's first row of A, its W[g] and its
/// first row of D, and the row strides (lda, ldw, ldd) as int64 — the memory layouts of CUTLASS's
/// Shape<int, int, int> and Stride<int64_t, _1, _0>, which gemm_cutlass_grouped.cuh static_asserts.
struct GroupedArrays {
  int32_t* shapes = nullptr;  ///< [groups][3]
  const void** ptr_a = nullptr;
  const void** ptr_w = nullptr;
  void** ptr_d = nullptr;
  int64_t* stride_a = nullptr;
  int64_t* stride_w = nullptr;
  int64_t* stride_d = nullptr;
};

/// The preparation kernel that runs before either grouped implementation: clamps the offsets the
/// way the native kernel does (every boundary to [0, rows], each end raised to its start), writes
/// zeros to the rows no group covers ([0, start(0)) and [last end, rows), or every row when
/// `zero_all`), and, when `arrays.shapes` is set, block 0 scans the groups and fills the arrays.
struct GroupedPrepareParams {
  GroupedParams g;
  GroupedArrays arrays;   ///< all null: zeroing only (native path)
  bool zero_all = false;  ///< k == 0 or groups == 0: D = 0 everywhere, nothing else to do
  int num_sms = 132;      ///< sizes the zeroing grid
};
cudaError_t launch_grouped_prepare(const GroupedPrepareParams& p, cudaStream_t s);

// ---- CUTLASS grouped GEMM (gemm_cutlass_grouped.cuh, gemm_cutlass_grouped_<dtype>.cu) ------------------
/// One CTA tile configuration of the Hopper grouped kernel (CUTLASS 3.x ptr-array grouped GEMM:
/// A [m_g, k] K-major x W[g] [n, k] K-major -> D [m_g, n] row-major, TMA loads, WGMMA with an f32
/// accumulator, persistent group tile scheduler, TMA descriptors patched per group on the device).
struct CutlassGroupedTile {
  int m, n, k;               ///< CTA tile
  int cluster_m, cluster_n;  ///< cluster (TMA multicast of the operand shared along it)
  bool cooperative;          ///< two consumer warp groups split one tile (else ping-pong: a tile each)
  const char* name;          ///< for the SKU
};
/// [0] large groups: 128x256x64 cooperative (a 64x256 f32 accumulator per consumer warp group),
/// 2x1 cluster multicasting the 256-row W tile to both CTAs, which halves W's traffic from L2; the
/// MMAs, not L2, bound it. The scheduler rounds every group's row tiles up to the cluster's 2, so
/// this pays only when groups are tall (a 256-row granularity).
/// [1] short groups (many experts, skewed routing): 128x128x64 ping-pong, each consumer warp group
/// a whole tile so one's epilogue overlaps the other's MMAs, with a 1x2 cluster multicasting the A
/// tile along n: n is known on the host, so that cluster rounds nothing when the column tiles are
/// even, where a 2x1 cluster would round every group's rows to 256. 64-row tiles would waste fewer
/// rows but need ~1.6x the L2 -> SM bytes per flop, more than L2 delivers at the MMA rate.
inline constexpr CutlassGroupedTile kCutlassGroupedTiles[] = {
    {128, 256, 64, 2, 1, true, "128x256x64 cluster 2x1x1 warp-specialized cooperative persistent"},
    {128, 128, 64, 1, 2, false, "128x128x64 cluster 1x2x1 warp-specialized ping-pong persistent"},
};
inline constexpr int kCutlassGroupedLarge = 0, kCutlassGroupedSmall = 1;

/// One launch of the CUTLASS grouped kernel over the arrays (already filled on the stream).
struct CutlassGroupedParams {
  int config = kCutlassGroupedLarge;
  int groups = 0;
  GroupedArrays arrays;
  int device = 0;    ///< the current device at launch
  int sm_count = 0;  ///< persistent CTAs (the workspace holds this many SMs' TMA descriptors)
};
/// The kernels of one dtype (bf16, f16), explicitly instantiated in gemm_cutlass_grouped_<dtype>.cu.
/// `built` is false when the library was compiled without CUTLASS or without sm_90a (null functions).
struct CutlassGroupedKernels {
  bool built = false;
  /// CUTLASS's own can_implement (the per-group checks need host shapes, so grouped.cpp checks
  /// n, k and the strides itself).
  bool (*implementable)(const CutlassGroupedParams&) = nullptr;
  /// CUTLASS's workspace (per-SM TMA descriptors), not counting the arrays.
  size_t (*workspace)(const CutlassGroupedParams&) = nullptr;
  cudaError_t (*launch)(const CutlassGroupedParams&, void* ws, cudaStream_t) = nullptr;
};
template <DType D>
CutlassGroupedKernels cutlass_grouped_kernels();

// ---- CUTLASS int8 GEMM with a scale epilogue (gemm_cutlass_int8.cuh, gemm_cutlass_int8_<d>.cu) ----
/// D[i, j] = a_scale[i] * b_scale[j] * sum_k A[i, k] B[k, j] (+ bias[j]) on Hopper tensor cores
/// (CUTLASS 3.x sm90 warp-specialized: TMA loads, WGMMA int8 x int8 -> int32, persistent). The
/// int32 accumulator is exact; the epilogue converts it to f32 and computes
/// ((acc * a_scale) * b_scale) + bias with one rounding per operation (no FMA contraction), then
/// rounds once to D's dtype, so the result does not depend on the tile configuration.
/// One CTA tile configuration of the kernel; the CUTLASS TUs build their types from this table.
struct CutlassInt8Tile {
  int m, n, k;               ///< CTA tile
  int cluster_m, cluster_n;  ///< thread-block cluster (TMA multicast of the operand shared along it)
  bool cooperative;          ///< two consumer warp groups split one tile (else ping-pong: a tile each)
  int max_swizzle;           ///< persistent scheduler's tile swizzle (L2 reuse between concurrent tiles)
  const char* name;          ///< for the SKU
};
/// [0] large problems: the 128x256 tile keeps a 64x256 int32 accumulator per consumer warp group
/// (128 registers a thread), the 2x1 cluster multicasts the 256-wide B tile to both CTAs, and a
/// swizzle of 8 makes the tiles that run concurrently share A rows and B columns in L2.
/// [1] small M (m <= 64) or too few large tiles to fill the device: 64-row tiles, ping-pong so one
/// warp group's epilogue overlaps the other's MMAs.
inline constexpr CutlassInt8Tile kCutlassInt8Tiles[] = {
    {128, 256, 128, 2, 1, true, 8, "128x256x128 cluster 2x1x1 warp-specialized cooperative persistent"},
    {64, 128, 128, 1, 1, false, 1, "64x128x128 cluster 1x1x1 warp-specialized ping-pong persistent"},
};
inline constexpr int kCutlassInt8Large = 0, kCutlassInt8SmallM = 1;

/// One launch: TN problem (A [m, k] row-major, B stored [n, k] row-major like torch's linear
/// weight, D [m, n] row-major), batch 1. Strides in elements.
struct CutlassInt8Params {
  int config = kCutlassInt8Large;
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  void* d = nullptr;
  int64_t ldd = 0;
  const float* a_scale = nullptr;  ///< [m] when a_vector, else [1]; null = 1
  bool a_vector = false;
  const float* b_scale = nullptr;  ///< [n] when b_vector, else [1]; null = 1
  bool b_vector = false;
  const void* bias = nullptr;  ///< [n] of D's dtype; null = none
  int device = 0;              ///< the current device at launch
  int sm_count = 0;            ///< 0: asked from the device at launch
};
/// The kernels of one output dtype (bf16, f16, f32), explicitly instantiated in
/// gemm_cutlass_int8_<dtype>.cu. `built` is false when the library was compiled without the
/// CUTLASS headers (the functions are then null).
struct CutlassInt8Kernels {
  bool built = false;
  /// CUTLASS's own can_implement on the shapes and strides (pointers unused).
  bool (*implementable)(const CutlassInt8Params&) = nullptr;
  size_t (*workspace)(const CutlassInt8Params&) = nullptr;
  cudaError_t (*launch)(const CutlassInt8Params&, void* ws, cudaStream_t) = nullptr;
};
template <DType D>
CutlassInt8Kernels cutlass_int8_kernels();

// ---- cuBLASLt backend (gemm_cublaslt.cpp) ------------------------------------------------------
struct CublasConfig {
  CmProblem cm;
  bool tf32 = false;
  bool f16_accumulate = false;
  bool deterministic = false;
  bool fused_epilogue = false;  ///< cuBLASLt applies bias / act / aux / bgrad (OfD) itself
  size_t max_workspace = 0;
};
/// Upper bound of the workspace cuBLASLt may use on `sm` (NVIDIA's recommendation).
size_t cublaslt_workspace_cap(int sm);
/// Creates the backend state; with device >= 0 also queries the heuristic now. `ws_bytes`
/// receives the algorithm's workspace (the cap when the query is deferred).
Result<std::shared_ptr<GemmState>> cublaslt_prepare(const std::string& op, const GemmDesc& desc,
                                                    const CublasConfig& cfg, int device, size_t* ws_bytes);
/// Whether cuBLASLt applies the epilogue itself: the configured value, cleared when the heuristic
/// found no kernel fusing it (the plan then runs its native epilogue after the plain GEMM).
bool cublaslt_fused(const GemmState& st);
/// Runs the GEMM (with its fused epilogue when configured). Queries the heuristic on first use
/// if select ran offline; `fused` receives cublaslt_fused() as of this call.
Result<void> cublaslt_run(const std::string& op, GemmState& st, const GemmArgs& args, void* ws, size_t ws_bytes,
                          cudaStream_t stream, bool* fused);

}  // namespace baracuda::detail
