// The GEMM family (OPS.md A): D = epilogue(alpha * op(A) * op(B) + beta * C), strided batched,
// any transposes and leading dimensions, with fused bias / activation / auxiliary output and the
// matching backward epilogues (activation gradient, bias gradient).
//
//   GemmDesc d = GemmDesc::dense(DType::bf16, m, n, k);        // row-major A[m,k], B[k,n], D[m,n]
//   d.bias = true; d.act = GemmActivation::Gelu;              // D = gelu(A*B + bias)
//   auto plan = GemmPlan::select(Target::current().value(), d);
//   std::vector<char> ws(plan->workspace_size());             // device memory in real code
//   plan->run(stream, {ws_ptr, ws_bytes}, args);
//
// Operands are described by their *logical* (already transposed) matrices: A is [m, k], B is
// [k, n], C and D are [m, n], each with a row stride, a column stride and a batch stride in
// elements. One of the two strides must be 1 (the storage order) and the other at least the
// extent it skips; a transpose is a view with the strides swapped, so "row- or column-major,
// transposed or not, any leading dimension" is one mechanism. Batch strides may be 0 for A, B and
// C (broadcast over the batch), never for D.
//
// Forward (Direction::Forward): Z = alpha*A*B + beta*C (+ bias[n], the same for every batch);
// D = act(Z); `aux` writes Z (the pre-activation, D's dtype and strides) for the backward.
// Backward (Direction::Backward): G = alpha*A*B + beta*C; D = G * act'(aux_in) (aux_in = the
// forward's aux; relu may pass the forward output instead); `bgrad` writes a bias gradient (sum
// of D over rows and batch, or of op(A)/op(B) over k, see GemmBiasGrad). A linear layer's
// backward is two backward GEMMs: dX = dY*W and dW = dY^T*X with bgrad = OfA (db = sum of dY).
//
// Low precision: fp8 (e4m3/e5m2) A and B with f32 scales (per tensor, or per row of A and column
// of B) and a bf16/f16/f32 D, optional amax of D; int8 x int8 -> int32 (cuBLASLt); int8 x int8 ->
// bf16/f16/f32 with f32 scales and an optional bias (CUTLASS, sm_90, W8A8 linear layers):
//
//   GemmDesc d = GemmDesc::dense(DType::s8, DType::bf16, m, n, k, false, true);  // B stored [n,k]
//   d.scale_mode = GemmScaleMode::PerRowCol;  // a_scale [m], b_scale [n] f32 (PerTensor: [1] each)
//   d.bias = true;                            // bias [n], D's dtype
//   D[i,j] = a_scale[i] * b_scale[j] * sum_k A[i,k] B[k,j] + bias[j]
//
// The int32 accumulation is exact; the epilogue computes ((f32(acc) * a_scale) * b_scale) + bias in
// f32, each operation rounded (no FMA), then rounds once to D's dtype: deterministic and
// bit-stable (no split-K; the tile choice never changes a bit). Requirements: A row-major and B
// stored [n, k] row-major (both K-contiguous), k % 16 == 0, n % 8 == 0 for a 16-bit D (n % 4 for
// f32), row strides of A/B multiples of 16 elements and of D 16 bytes, 16-byte aligned A, B, D,
// batch 1, alpha = 1, beta = 0, forward, no activation. Low precision always needs A and B
// K-contiguous.
#pragma once
#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "baracuda/core/preference.hpp"
#include "baracuda/core/sku.hpp"
#include "baracuda/core/status.hpp"
#include "baracuda/core/tensor.hpp"
#include "baracuda/core/workspace.hpp"

namespace baracuda {

enum class GemmActivation : uint8_t { None, Relu, Gelu, GeluTanh, Silu };
const char* to_string(GemmActivation a);

/// What the backward's bias gradient sums. OfD: db[n] = sum over batch and rows of D (after the
/// activation gradient); OfA: db[m] = sum over batch and k of op(A); OfB: db[n] = sum over batch
/// and k of op(B). Written contiguous, D's dtype.
enum class GemmBiasGrad : uint8_t { None, OfD, OfA, OfB };
const char* to_string(GemmBiasGrad b);

/// How fp8 (and int8 -> floating D) scales apply. PerTensor: one f32 each for A and B.
/// PerRowCol (Hopper's "outer vector" scaling): a_scale has m values (row i of op(A)), b_scale has
/// n values (column j of op(B)), and D[i, j] = a_scale[i] * b_scale[j] * sum_k A[i, k] B[k, j].
enum class GemmScaleMode : uint8_t { PerTensor, PerRowCol };

/// Element strides of one logical matrix of a (batched) problem.
struct MatrixStrides {
  int64_t row = 0;
  int64_t col = 1;
  int64_t batch = 0;
  /// Row-major [rows, cols] with leading dimension `ld` (0 = cols) and the given batch stride.
  static MatrixStrides row_major(int64_t cols, int64_t ld = 0, int64_t batch = 0);
  /// Column-major [rows, cols] with leading dimension `ld` (0 = rows).
  static MatrixStrides col_major(int64_t rows, int64_t ld = 0, int64_t batch = 0);
  MatrixStrides transposed() const { return {col, row, batch}; }
  bool operator==(const MatrixStrides&) const = default;
};

struct GemmDesc {
  int64_t m = 0, n = 0, k = 0;
  int64_t batch = 1;
  DType a_dtype = DType::f32, b_dtype = DType::f32;
  DType d_dtype = DType::f32;      ///< also C's, bias's and aux's dtype
  MatrixStrides a, b, c, d;        ///< A [m,k], B [k,n], C and D [m,n]; aux uses d's strides
  double alpha = 1.0, beta = 0.0;  ///< beta = 0: C is not read (may be absent)
  Direction direction = Direction::Forward;
  GemmActivation act = GemmActivation::None;            ///< forward: applied; backward: its gradient
  bool bias = false;                                    ///< forward only: + bias[n]
  bool aux = false;                                     ///< forward only: write the pre-activation
  GemmBiasGrad bgrad = GemmBiasGrad::None;              ///< backward only
  GemmScaleMode scale_mode = GemmScaleMode::PerTensor;  ///< fp8, and int8 -> floating D
  /// Pointer alignment (bytes, a power of two) the caller guarantees for A, B, C, D: kernels are
  /// chosen for it and can_implement refuses pointers that break it.
  std::array<uint16_t, 4> align{16, 16, 16, 16};

  /// Dense row-major problem: A [m,k] (or its transpose stored [k,m] when trans_a), B [k,n]
  /// (stored [n,k] when trans_b, torch linear's weight), C = D [m,n], packed batches.
  static GemmDesc dense(DType dt, int64_t m, int64_t n, int64_t k, bool trans_a = false, bool trans_b = false,
                        int64_t batch = 1);
  /// Mixed-dtype variant (fp8 -> bf16, int8 -> int32).
  static GemmDesc dense(DType ab, DType d, int64_t m, int64_t n, int64_t k, bool trans_a = false, bool trans_b = false,
                        int64_t batch = 1);
  /// Byte-wise key for plan caches.
  std::string key() const;
};

/// Per-call tensors. A, B, C, D are rank 2 ([rows, cols]) when batch == 1, else rank 3
/// ([batch, rows, cols]); their shapes and strides must equal the descriptor's. bias is [n];
/// aux / aux_in are D-shaped with D's strides; bgrad is [n] (OfD, OfB) or [m] (OfA).
struct GemmArgs {
  TensorRef a, b, c;
  TensorMut d;
  TensorRef bias;
  TensorMut aux;
  TensorRef aux_in;
  TensorMut bgrad;
  /// fp8, and int8 with a floating D: dequantization scales of A and B, contiguous 16-byte aligned
  /// float32 ([1] each, or [m] and [n] with GemmScaleMode::PerRowCol; absent = 1 for per-tensor);
  /// fp8 only: amax_d ([1] float32, optional), which receives max|D|.
  TensorRef a_scale, b_scale;
  TensorMut amax_d;
};

namespace detail {
struct GemmState;  // backend state (cuBLASLt descriptors and algorithm), shared between plan copies
}

class GemmPlan {
 public:
  /// Validates the descriptor and chooses an implementation: the small-M streaming kernel
  /// (f16/bf16, m <= 16, K-contiguous A and B, no aux/bgrad), then the CUTLASS int8 kernel (int8 ->
  /// floating D only; its SKU names the tile: 128x256x128 with a 2x1 cluster for large problems,
  /// 64x128x128 for m <= 64 or too few large tiles to fill half the SMs), then cuBLASLt. With a device
  /// target the cuBLASLt heuristic runs here and its algorithm is kept; offline (device < 0)
  /// everything is validated and the query waits for the first run.
  /// Preferences: backend Native, Cutlass or CuBlasLt forces that path (refused if it cannot serve);
  /// tf32 Require = TF32 for f32 (refused for other dtypes), else IEEE f32;
  /// reduced_precision_reduction Require = f16 accumulation (f16 only), Forbid/Default = f32;
  /// require_deterministic = no atomics-based split-K reductions; require_bit_stable is met by the
  /// native and CUTLASS kernels only (cuBLASLt's choice depends on the device); vectorized=Forbid is refused
  /// (both paths are inherently vectorized).
  static Result<GemmPlan> select(const Target& target, const GemmDesc& desc, const PlanPreference& pref = {});
  size_t workspace_size() const { return workspace_bytes_; }
  /// Tensors vs descriptor: presence, dtypes, shapes, strides, alignment, no null data with
  /// elements, outputs not overlapping inputs (C == D exactly is allowed), footprints in range.
  Result<void> can_implement(const GemmArgs& args) const;
  /// Enqueues on `stream`: can_implement, workspace check, launch. Never allocates device memory
  /// or synchronizes; capture-safe (the cuBLASLt handle comes from a per-device, per-thread cache).
  Result<void> run(cudaStream_t stream, Workspace ws, const GemmArgs& args) const;
  const KernelSku& sku() const { return sku_; }
  const PrecisionGuarantee& precision() const { return sku_.precision; }
  const GemmDesc& desc() const { return desc_; }

  enum class Path : uint8_t { SmallM, CutlassInt8, CuBlasLt };

 private:
  GemmDesc desc_;
  Target target_;
  KernelSku sku_;
  Path path_ = Path::CuBlasLt;
  uint8_t cutlass_tile_ = 0;     ///< CutlassInt8: the tile configuration chosen by shape
  bool fused_epilogue_ = false;  ///< cuBLASLt applies bias/act/aux/bgrad itself
  bool tf32_ = false, f16_accumulate_ = false, deterministic_ = false;
  size_t workspace_bytes_ = 0;
  size_t backend_ws_bytes_ = 0;  ///< part of the workspace cuBLASLt may use
  std::shared_ptr<detail::GemmState> state_;
  friend struct GemmPlanAccess;
};

// ---- grouped GEMM (mixture of experts) ---------------------------------------------------------------
/// D[t, :] = A[t, :] * W[g]^T for every row t of group g, where group g owns the rows
/// start(g) <= t < end(g) (tokens sorted by expert). One launch for all groups; the boundaries live
/// on the device, so run() never reads them on the host (no synchronization, graph-capturable).
/// A [rows, k] and D [rows, n] are row-major with leading dimensions; W [groups, n, k] is
/// K-contiguous (each group a torch linear weight). f16 / bf16, f32 accumulation.
///
///   GroupedGemmDesc d;  d.dtype = DType::bf16;  d.groups = 8, d.rows = tokens, d.n = 4096, d.k = 4096;
///   d.ends_only = true;                                     // offsets = torch._grouped_mm's offs
///   auto plan = GroupedGemmPlan::select(Target::current().value(), d);
///   plan->run(stream, {ws_ptr, plan->workspace_size()}, {a, w, offs, out});
struct GroupedGemmDesc {
  DType dtype = DType::bf16;
  int64_t groups = 0, rows = 0, n = 0, k = 0;
  int64_t lda = 0;      ///< A's row stride (0 = k)
  int64_t ldw = 0;      ///< W's stride between the n rows of a group (0 = k)
  int64_t w_group = 0;  ///< W's stride between groups (0 = n * ldw)
  int64_t ldd = 0;      ///< D's row stride (0 = n)
  /// false: offsets holds the groups + 1 boundaries, start(g) = offsets[g], end(g) = offsets[g + 1].
  /// true: offsets holds the groups ends only (torch._grouped_mm's offs), start(0) = 0 and
  /// start(g) = offsets[g - 1], end(g) = offsets[g].
  bool ends_only = false;
  /// Alignment in bytes (a power of two) the caller guarantees for D's pointer; the Hopper kernel
  /// stores D by TMA and needs 16 (below that select() takes the native kernel).
  uint16_t d_align = 16;
  /// Leading dimensions filled in (0 -> dense).
  GroupedGemmDesc normalized() const;
};

/// offsets: int64 or int32 device tensor, [groups + 1] (or [groups] with ends_only), non-decreasing
/// within [0, rows]. Malformed offsets are clamped on the device, never refused and never read or
/// written out of bounds: every boundary is clamped to [0, rows] and an end below its start is
/// raised to the start (so a decreasing offset gives its group 0 rows and the next group starts at
/// the running maximum). Rows that no group covers (before start(0), from the last end on, or all
/// rows when k == 0 or groups == 0) are written with zeros, so D is always fully defined.
struct GroupedGemmArgs {
  TensorRef a, w, offsets;
  TensorMut d;
};

class GroupedGemmPlan {
 public:
  /// Validates the descriptor and picks the first implementation that accepts it:
  ///  1. cutlass-grouped (sm_90, built with CUTLASS): CUTLASS 3.x Hopper grouped GEMM (TMA + WGMMA,
  ///     warp-specialized, persistent, per-group TMA descriptors updated on the device); a small
  ///     kernel first turns the device offsets into per-group shapes and pointers in the workspace.
  ///     Needs n % 8 == 0, ldd % 8 == 0 and d_align >= 16 (TMA stores of 16-byte rows). Its tile
  ///     (named in the SKU) follows the average rows per group: 128x256 cooperative with a 2x1
  ///     cluster for groups of >= 512 rows on average, 128x128 ping-pong with a 1x2 cluster otherwise.
  ///  2. native: one block per 64 x 64 tile, mma.sync from global memory (any sm >= 80, any ldd).
  /// Refuses (naming the field) dtypes other than f16/bf16, k % 8 != 0, strides that break 16-byte
  /// rows, more than 65535 groups, tf32 / reduced-precision requirements and vectorized=Forbid;
  /// backend Native or Cutlass forces that implementation (refused where it cannot serve).
  /// Both are deterministic and bit-stable (no split-K; f32 accumulation in a fixed k order per
  /// output, one rounding to the output dtype); they may differ from each other in the last bit.
  static Result<GroupedGemmPlan> select(const Target& target, const GroupedGemmDesc& desc,
                                        const PlanPreference& pref = {});
  /// Device scratch run() needs: the per-group problem shapes, pointers and strides plus CUTLASS's
  /// per-SM TMA descriptors for cutlass-grouped (about 60 bytes a group + 64 KB); 0 for native.
  size_t workspace_size() const { return workspace_bytes_; }
  Result<void> can_implement(const GroupedGemmArgs& args) const;
  /// Enqueues on `stream`: can_implement, workspace check, then the zeroing/preparation kernel and
  /// the GEMM. Never allocates, never synchronizes.
  Result<void> run(cudaStream_t stream, Workspace ws, const GroupedGemmArgs& args) const;
  const KernelSku& sku() const { return sku_; }
  const PrecisionGuarantee& precision() const { return sku_.precision; }
  const GroupedGemmDesc& desc() const { return desc_; }

  enum class Path : uint8_t { Cutlass, Native };
  Path path() const { return path_; }

 private:
  GroupedGemmDesc desc_;
  Target target_;
  KernelSku sku_;
  Path path_ = Path::Native;
  uint8_t cutlass_tile_ = 0;  ///< Cutlass: the tile configuration chosen by shape
  size_t workspace_bytes_ = 0;
  friend struct GroupedGemmPlanAccess;
};

/// One-line convenience: select (cached per thread by descriptor and preference) and run.
Result<void> gemm(cudaStream_t stream, const GemmDesc& desc, const GemmArgs& args, Workspace ws = {},
                  const PlanPreference& pref = {});
/// The workspace the cached plan of `desc` needs (selects it when needed).
Result<size_t> gemm_workspace_size(const GemmDesc& desc, const PlanPreference& pref = {});

}  // namespace baracuda
