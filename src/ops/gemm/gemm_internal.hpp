// Internal interfaces of the GEMM family: the column-major normal form that cuBLASLt consumes,
// the native kernels' launchers (gemm_kernels.cu) and the cuBLASLt backend (gemm_cublaslt.cpp,
// the only file of the family that includes cublasLt.h).
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
  void* d = nullptr;
  int64_t ldd = 0;
};
inline constexpr int kGroupedTileM = 64, kGroupedTileN = 64;
cudaError_t launch_grouped(const GroupedParams& p, cudaStream_t s);

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
