// The cuBLASLt backend of GemmPlan: the only file of the family that includes cublasLt.h. It
// builds the matmul descriptor and layouts once (select), keeps the heuristic's algorithm, and
// run() only sets the per-call pointers and enqueues.
#include <cublasLt.h>
#include <cuda_fp16.h>

#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#include "ops/gemm/gemm_internal.hpp"

namespace baracuda::detail {

namespace {
Error backend_error(const std::string& op, const char* what, cublasStatus_t s) {
  return make_error(Status::BackendError, op + ": cuBLASLt " + what + " failed: " + cublasLtGetStatusString(s) + " (" +
                                              std::to_string(s) + ")");
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::f64:
      return CUDA_R_64F;
    case DType::f32:
      return CUDA_R_32F;
    case DType::f16:
      return CUDA_R_16F;
    case DType::bf16:
      return CUDA_R_16BF;
    case DType::f8e4m3:
      return CUDA_R_8F_E4M3;
    case DType::f8e5m2:
      return CUDA_R_8F_E5M2;
    case DType::s8:
      return CUDA_R_8I;
    case DType::s32:
      return CUDA_R_32I;
    case DType::c64:
      return CUDA_C_32F;
    case DType::c128:
      return CUDA_C_64F;
    default:
      return CUDA_R_32F;  // plan.cpp admits no other dtype
  }
}

/// The handle of `device` for this thread. Handles are never destroyed: a thread_local
/// destructor may run after the CUDA runtime has been torn down at process exit.
Result<cublasLtHandle_t> handle_for(const std::string& op, int device) {
  thread_local std::unordered_map<int, cublasLtHandle_t> cache;
  auto it = cache.find(device);
  if (it != cache.end()) return it->second;
  cublasLtHandle_t h = nullptr;
  const cublasStatus_t s = cublasLtCreate(&h);
  if (s != CUBLAS_STATUS_SUCCESS) return backend_error(op, "cublasLtCreate", s);
  cache.emplace(device, h);
  return h;
}
}  // namespace

struct GemmState {
  std::mutex mu;  ///< run() sets per-call pointers on the shared descriptor
  GemmDesc desc;
  CublasConfig cfg;
  int device = -1;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr, ld = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool built = false;  ///< descriptors complete (a failed build is retried from scratch)
  bool have_algo = false;
  size_t algo_ws = 0;
  alignas(16) unsigned char alpha[16]{};  ///< in the scale type
  alignas(16) unsigned char beta[16]{};
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;

  void release() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    for (auto* l : {la, lb, lc, ld})
      if (l) cublasLtMatrixLayoutDestroy(l);
    if (op) cublasLtMatmulDescDestroy(op);
    pref = nullptr, la = lb = lc = ld = nullptr, op = nullptr;
    built = false;
  }
  ~GemmState() { release(); }
};

bool cublaslt_fused(const GemmState& st) { return st.cfg.fused_epilogue; }

size_t cublaslt_workspace_cap(int sm) { return sm >= 90 ? (size_t{32} << 20) : (size_t{4} << 20); }

namespace {
/// Compute and scale types, and alpha/beta in the scale type.
void compute_types(const GemmDesc& d, const CublasConfig& cfg, cublasComputeType_t* ct, cudaDataType_t* st) {
  switch (d.a_dtype) {
    case DType::f64:
      *ct = CUBLAS_COMPUTE_64F;
      *st = CUDA_R_64F;
      return;
    case DType::c128:
      *ct = CUBLAS_COMPUTE_64F;
      *st = CUDA_C_64F;
      return;
    case DType::c64:
      *ct = CUBLAS_COMPUTE_32F;
      *st = CUDA_C_32F;
      return;
    case DType::s8:
      *ct = CUBLAS_COMPUTE_32I;
      *st = CUDA_R_32I;
      return;
    case DType::f32:
      *ct = cfg.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
      *st = CUDA_R_32F;
      return;
    case DType::f16:
      if (cfg.f16_accumulate) {
        *ct = CUBLAS_COMPUTE_16F;
        *st = CUDA_R_16F;
        return;
      }
      [[fallthrough]];
    default:
      *ct = CUBLAS_COMPUTE_32F;
      *st = CUDA_R_32F;
      return;
  }
}

void store_scalar(unsigned char* out, double v, cudaDataType_t st) {
  std::memset(out, 0, 16);
  switch (st) {
    case CUDA_R_64F:
    case CUDA_C_64F:
      std::memcpy(out, &v, sizeof v);
      return;  // imaginary part 0
    case CUDA_R_32I: {
      const int32_t i = static_cast<int32_t>(v);
      std::memcpy(out, &i, sizeof i);
      return;
    }
    case CUDA_R_16F: {
      const __half h = __double2half(v);
      std::memcpy(out, &h, sizeof h);
      return;
    }
    default: {
      const float f = static_cast<float>(v);
      std::memcpy(out, &f, sizeof f);
      return;
    }
  }
}

cublasLtEpilogue_t epilogue_of(const GemmDesc& d, const CublasConfig& cfg) {
  if (!cfg.fused_epilogue) return CUBLASLT_EPILOGUE_DEFAULT;
  if (d.direction == Direction::Backward) {  // plan.cpp fuses only DGELU(+BGRAD of D), or a plain product
    if (d.act == GemmActivation::None) return CUBLASLT_EPILOGUE_DEFAULT;
    return d.bgrad == GemmBiasGrad::OfD ? CUBLASLT_EPILOGUE_DGELU_BGRAD : CUBLASLT_EPILOGUE_DGELU;
  }
  switch (d.act) {
    case GemmActivation::Relu:
      return d.bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    case GemmActivation::GeluTanh:
      if (d.aux) return d.bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
      return d.bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    default:
      return d.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  }
}

template <class T>
cublasStatus_t set_desc(cublasLtMatmulDesc_t op, cublasLtMatmulDescAttributes_t attr, const T& v) {
  return cublasLtMatmulDescSetAttribute(op, attr, &v, sizeof v);
}

Result<cublasLtMatrixLayout_t> make_layout(const std::string& op, DType dt, const CmOperand& o, int64_t batch) {
  cublasLtMatrixLayout_t l = nullptr;
  cublasStatus_t s =
      cublasLtMatrixLayoutCreate(&l, cuda_type(dt), static_cast<uint64_t>(o.rows), static_cast<uint64_t>(o.cols), o.ld);
  if (s != CUBLAS_STATUS_SUCCESS) return backend_error(op, "cublasLtMatrixLayoutCreate", s);
  if (batch > 1) {
    const int32_t count = static_cast<int32_t>(batch);
    const int64_t stride = o.batch_stride;
    s = cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count);
    if (s == CUBLAS_STATUS_SUCCESS)
      s = cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride);
    if (s != CUBLAS_STATUS_SUCCESS) {
      cublasLtMatrixLayoutDestroy(l);
      return backend_error(op, "cublasLtMatrixLayoutSetAttribute", s);
    }
  }
  return l;
}

/// Builds descriptor, layouts and preference (host-only cuBLASLt calls, no device needed).
Result<void> build(const std::string& op, GemmState& st) {
  st.release();
  const GemmDesc& d = st.desc;
  const CmProblem& cm = st.cfg.cm;
  cublasComputeType_t ct;
  cudaDataType_t scale_t;
  compute_types(d, st.cfg, &ct, &scale_t);
  cublasStatus_t s = cublasLtMatmulDescCreate(&st.op, ct, scale_t);
  if (s != CUBLAS_STATUS_SUCCESS) return backend_error(op, "cublasLtMatmulDescCreate", s);
  store_scalar(st.alpha, d.alpha, scale_t);
  store_scalar(st.beta, d.beta, scale_t);
  const cublasOperation_t ta = cm.a.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = cm.b.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  st.epilogue = epilogue_of(d, st.cfg);
  s = set_desc(st.op, CUBLASLT_MATMUL_DESC_TRANSA, ta);
  if (s == CUBLAS_STATUS_SUCCESS) s = set_desc(st.op, CUBLASLT_MATMUL_DESC_TRANSB, tb);
  if (s == CUBLAS_STATUS_SUCCESS) s = set_desc(st.op, CUBLASLT_MATMUL_DESC_EPILOGUE, st.epilogue);
  const bool uses_aux = st.epilogue == CUBLASLT_EPILOGUE_GELU_AUX || st.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
                        st.epilogue == CUBLASLT_EPILOGUE_DGELU || st.epilogue == CUBLASLT_EPILOGUE_DGELU_BGRAD;
  if (uses_aux && s == CUBLAS_STATUS_SUCCESS) {
    // aux has D's strides; in the column-major form that is D's leading dimension.
    s = set_desc(st.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, cm.d.ld);
    if (s == CUBLAS_STATUS_SUCCESS && cm.batch > 1)
      s = set_desc(st.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, cm.d.batch_stride);
  }
  if (s == CUBLAS_STATUS_SUCCESS && d.scale_mode == GemmScaleMode::PerRowCol) {
    // Outer-vector scales: cuBLASLt's A (our B when swapped) gets its rows' scales; the swap of
    // the pointers in run() keeps "rows of op(A)" and "columns of op(B)" ours.
    const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    s = set_desc(st.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, mode);
    if (s == CUBLAS_STATUS_SUCCESS) s = set_desc(st.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, mode);
  }
  if (s != CUBLAS_STATUS_SUCCESS) return backend_error(op, "cublasLtMatmulDescSetAttribute", s);

  auto la = make_layout(op, cm.swapped ? d.b_dtype : d.a_dtype, cm.a, cm.batch);
  if (!la) return la.error();
  st.la = *la;
  auto lb = make_layout(op, cm.swapped ? d.a_dtype : d.b_dtype, cm.b, cm.batch);
  if (!lb) return lb.error();
  st.lb = *lb;
  auto lc = make_layout(op, d.d_dtype, cm.c, cm.batch);
  if (!lc) return lc.error();
  st.lc = *lc;
  auto ld = make_layout(op, d.d_dtype, cm.d, cm.batch);
  if (!ld) return ld.error();
  st.ld = *ld;

  s = cublasLtMatmulPreferenceCreate(&st.pref);
  if (s != CUBLAS_STATUS_SUCCESS) return backend_error(op, "cublasLtMatmulPreferenceCreate", s);
  const uint64_t ws = st.cfg.max_workspace;
  s = cublasLtMatmulPreferenceSetAttribute(st.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  // The alignments the caller guarantees (GemmDesc::align); the default assumes 256 bytes.
  const uint32_t al[4] = {d.align[cm.swapped ? 1 : 0], d.align[cm.swapped ? 0 : 1], d.align[2], d.align[3]};
  const cublasLtMatmulPreferenceAttributes_t al_attr[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4 && s == CUBLAS_STATUS_SUCCESS; ++i)
    s = cublasLtMatmulPreferenceSetAttribute(st.pref, al_attr[i], &al[i], sizeof al[i]);
  if (st.cfg.deterministic && s == CUBLAS_STATUS_SUCCESS) {
    // In-place split-K reductions may accumulate in a varying order; the workspace-based ones
    // sum in a fixed order.
    const uint32_t mask =
        CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE | CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
    s = cublasLtMatmulPreferenceSetAttribute(st.pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &mask, sizeof mask);
  }
  if (s != CUBLAS_STATUS_SUCCESS) return backend_error(op, "cublasLtMatmulPreferenceSetAttribute", s);
  st.built = true;
  return {};
}

/// Asks the heuristic for its first choice and keeps it (the epilogue pointers still hold their
/// defaults, null, which the heuristic reads as maximally aligned; can_implement requires 16 bytes).
Result<void> query(const std::string& op, GemmState& st, cublasLtHandle_t h) {
  cublasLtMatmulHeuristicResult_t res{};
  int count = 0;
  cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(h, st.op, st.la, st.lb, st.lc, st.ld, st.pref, 1, &res, &count);
  const bool found = s == CUBLAS_STATUS_SUCCESS && count >= 1 && res.state == CUBLAS_STATUS_SUCCESS;
  if (!found && st.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
    // No kernel fuses this epilogue for these types/layouts (e.g. DGELU for f32): run the plain
    // GEMM and let the plan apply the epilogue with its native kernels (cublaslt_fused says so).
    st.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    st.cfg.fused_epilogue = false;
    s = set_desc(st.op, CUBLASLT_MATMUL_DESC_EPILOGUE, st.epilogue);
    if (s != CUBLAS_STATUS_SUCCESS) return backend_error(op, "cublasLtMatmulDescSetAttribute", s);
    return query(op, st, h);
  }
  if (s == CUBLAS_STATUS_NOT_SUPPORTED || s == CUBLAS_STATUS_INVALID_VALUE)
    return make_error(Status::Unsupported, op + ": cuBLASLt does not support this configuration (" +
                                               std::string(cublasLtGetStatusString(s)) + "; e.g. outer-vector fp8 scales)");
  if (s != CUBLAS_STATUS_SUCCESS) return backend_error(op, "cublasLtMatmulAlgoGetHeuristic", s);
  if (!found)
    return make_error(Status::Unsupported,
                      op + ": cuBLASLt has no algorithm for this problem (m=" + std::to_string(st.desc.m) +
                          ", n=" + std::to_string(st.desc.n) + ", k=" + std::to_string(st.desc.k) + ", " +
                          std::string(name(st.desc.a_dtype)) + "->" + std::string(name(st.desc.d_dtype)) + ")");
  st.algo = res.algo;
  st.algo_ws = res.workspaceSize;
  st.have_algo = true;
  return {};
}
}  // namespace

Result<std::shared_ptr<GemmState>> cublaslt_prepare(const std::string& op, const GemmDesc& desc,
                                                    const CublasConfig& cfg, int device, size_t* ws_bytes) {
  auto st = std::make_shared<GemmState>();
  st->desc = desc;
  st->cfg = cfg;
  st->device = device;
  *ws_bytes = cfg.max_workspace;
  // Offline (no device): no cuBLASLt call at all; descriptors and algorithm wait for the first run.
  if (device >= 0) {
    BARACUDA_TRY(build(op, *st));
    int prev = -1;
    const bool switch_dev = cudaGetDevice(&prev) == cudaSuccess && prev != device;
    if (switch_dev && cudaSetDevice(device) != cudaSuccess) {
      cudaGetLastError();
      return make_error(Status::CudaError, op + ": cannot make device " + std::to_string(device) + " current");
    }
    auto h = handle_for(op, device);
    Result<void> q = h ? query(op, *st, *h) : Result<void>(h.error());
    if (switch_dev) cudaSetDevice(prev);
    if (!q) return q.error();
    *ws_bytes = st->algo_ws;
  }
  return st;
}

Result<void> cublaslt_run(const std::string& op, GemmState& st, const GemmArgs& a, void* ws, size_t ws_bytes,
                          cudaStream_t stream, bool* fused) {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    return make_error(Status::CudaError, op + ": cudaGetDevice failed");
  }
  if (st.device >= 0 && dev != st.device)
    return make_error(Status::InvalidProblem, op + ": plan was selected for device " + std::to_string(st.device) +
                                                  ", current device is " + std::to_string(dev));
  auto h = handle_for(op, dev);
  if (!h) return h.error();
  std::lock_guard<std::mutex> lock(st.mu);
  if (!st.have_algo) {  // selected offline: build and choose now, once
    if (!st.built) BARACUDA_TRY(build(op, st));
    BARACUDA_TRY(query(op, st, *h));
    st.device = dev;
  }
  *fused = st.cfg.fused_epilogue;
  if (st.algo_ws > ws_bytes)
    return make_error(Status::WorkspaceTooSmall, op + ": cuBLASLt workspace expected >= " + std::to_string(st.algo_ws) +
                                                     " bytes, got " + std::to_string(ws_bytes));
  const CmProblem& cm = st.cfg.cm;
  const GemmDesc& d = st.desc;
  cublasStatus_t s = CUBLAS_STATUS_SUCCESS;
  auto set_ptr = [&](cublasLtMatmulDescAttributes_t attr, const void* p) {
    if (s == CUBLAS_STATUS_SUCCESS) s = set_desc(st.op, attr, p);
  };
  switch (st.epilogue) {
    case CUBLASLT_EPILOGUE_BIAS:
    case CUBLASLT_EPILOGUE_RELU_BIAS:
    case CUBLASLT_EPILOGUE_GELU_BIAS:
      set_ptr(CUBLASLT_MATMUL_DESC_BIAS_POINTER, a.bias.data);
      break;
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
      set_ptr(CUBLASLT_MATMUL_DESC_BIAS_POINTER, a.bias.data);
      set_ptr(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, a.aux.data);
      break;
    case CUBLASLT_EPILOGUE_GELU_AUX:
      set_ptr(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, a.aux.data);
      break;
    case CUBLASLT_EPILOGUE_DGELU:
      set_ptr(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, a.aux_in.data);
      break;
    case CUBLASLT_EPILOGUE_DGELU_BGRAD:
      set_ptr(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, a.aux_in.data);
      set_ptr(CUBLASLT_MATMUL_DESC_BIAS_POINTER, a.bgrad.data);
      break;
    default:
      break;
  }
  if (is_floating(d.a_dtype) && size_in_bits(d.a_dtype) == 8) {  // fp8 per-tensor scales
    set_ptr(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, cm.swapped ? a.b_scale.data : a.a_scale.data);
    set_ptr(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, cm.swapped ? a.a_scale.data : a.b_scale.data);
    // cuBLASLt reduces amax only for an fp8 D; plan.cpp runs a native amax otherwise.
    if (size_in_bits(d.d_dtype) == 8) set_ptr(CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, a.amax_d.data);
  }
  if (s != CUBLAS_STATUS_SUCCESS) return backend_error(op, "cublasLtMatmulDescSetAttribute", s);
  const void* pa = cm.swapped ? a.b.data : a.a.data;
  const void* pb = cm.swapped ? a.a.data : a.b.data;
  // beta = 0 never reads C; cuBLASLt still wants a valid pointer, D serves.
  const void* pc = d.beta != 0.0 && a.c.data ? a.c.data : a.d.data;
  s = cublasLtMatmul(*h, st.op, st.alpha, pa, st.la, pb, st.lb, st.beta, pc, st.lc, a.d.data, st.ld, &st.algo,
                     st.algo_ws ? ws : nullptr, st.algo_ws, stream);
  if (s != CUBLAS_STATUS_SUCCESS) return backend_error(op, "cublasLtMatmul", s);
  return {};
}

}  // namespace baracuda::detail
