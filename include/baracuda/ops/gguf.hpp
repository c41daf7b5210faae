// GGUF block formats (OPS.md P; issue 5 item 7): the weight quantizations of ggml / llama.cpp,
// dequantized (GgufDequantizePlan) and multiplied by a few activation rows without materialising
// the weight (GgufMatvecPlan, the decode step of a GGUF model).
//
//   GgufMatvecDesc d{GgufFormat::q4_k, DType::bf16, /*m=*/1, /*n=*/4096, /*k=*/4096};
//   auto plan = GgufMatvecPlan::select(Target::current().value(), d);
//   GgufMatvecArgs a; a.x = x; a.weight = packed; a.y = y;
//   plan->run(stream, Workspace{ws, plan->workspace_size()}, a);
//
// ---- Storage ------------------------------------------------------------------------------------------
// A [rows, cols] matrix in a GGUF format is rows x (cols / B) blocks, row-major, each block B
// consecutive elements of one row in `block_bytes` bytes (ggml's `block_q4_0` ... `block_q6_K`, packed,
// little-endian, no padding): exactly the bytes of a GGUF tensor of ggml shape [cols, rows] (ne0 =
// cols). cols must be a multiple of B (32 for the legacy formats, 256 for the k-quants). The packed
// tensor is a dense uint8 (or int8) tensor of any shape holding rows * (cols / B) * block_bytes bytes
// ([rows, cols / B * block_bytes] is the natural one).
//
// ---- Formats (ggml-common.h; d, dmin, m are IEEE half; "code" = an unsigned bit field) ------------------
// q4_0  {d; qs[16]}                     w[j] = (lo4(qs[j]) - 8) d, w[j + 16] = (hi4(qs[j]) - 8) d
// q4_1  {d; m; qs[16]}                  w[j] = lo4(qs[j]) d + m, w[j + 16] = hi4(qs[j]) d + m
// q5_0  {d; qh[4]; qs[16]}              5-bit code = nibble | bit k of qh (uint32 LE) << 4; w = (code - 16) d
// q5_1  {d; m; qh[4]; qs[16]}           w = code d + m
// q8_0  {d; qs[32] int8}                w[j] = qs[j] d
// q2_K  {scales[16]; qs[64]; d; dmin}   element k = 128n + 32j + l (l < 32): code = (qs[32n + l] >> 2j) & 3,
//                                       sub-block s = k / 16: w = (d (scales[s] & 15)) code - dmin (scales[s] >> 4)
// q3_K  {hmask[32]; qs[64]; scales[12]; d}  low 2 bits as q2_K, bit (4n + j) of hmask[l] clear subtracts 4;
//                                       6-bit scale s = k / 16 (low 4 bits: scales[s] (s < 8) or scales[s - 8] >> 4,
//                                       high 2: scales[8 + s % 4] >> 2 (s / 4)): w = (d (scale - 32)) q
// q4_K  {d; dmin; scales[12]; qs[128]}  element k = 64c + l: lo4(qs[32c + l]), k = 64c + 32 + l: hi4(qs[32c + l]);
//                                       sub-block s = k / 32 with 6-bit scale sc and min mn (get_scale_min_k4):
//                                       w = (d sc) code - (dmin mn)
// q5_K  {d; dmin; scales[12]; qh[32]; qs[128]}  as q4_K with bit (2c) / (2c + 1) of qh[l] as the code's bit 4
// q6_K  {ql[128]; qh[64]; scales[16] int8; d}  element k = 128n + 32p + l: code = nibble of ql (p even: low, odd:
//                                       high; byte 64n + l (+ 32 for p = 1, 3)) | ((qh[32n + l] >> 2p) & 3) << 4;
//                                       w = (d scales[k / 16]) (code - 32)
// Dequantization follows ggml's dequantize_row_* in float32 (the products d * scale * code are exact
// in float32; formats with a minimum round once, `scaled code - min`), so the result is bit for bit
// ggml's (and gguf-py's) for any bytes, NaN / inf in d included; f16 / bf16 outputs round that float
// to nearest even.
//
// ---- Matvec -------------------------------------------------------------------------------------------
// y[m, n] = sum_k x[m, k] w[n, k] (+ bias[n]) for m <= 8 rows (decode), x / y / bias float32, float16
// or bfloat16, float32 accumulation. The weight is streamed once at 16-byte loads; each sub-block
// contributes scale * sum(code x) (+ min * sum(x), the x sums computed once per CTA), so the result
// differs from "dequantize, then x.float() @ w.T" by float32 rounding only (bounded by K-scaled
// multiples of 2^-24 |x| |scale code|). Deterministic and bit-stable: the sums' order depends on the
// problem only. A long K is split into chunks whose partial sums are added in a fixed order by a
// second kernel (workspace_size() > 0 then).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "baracuda/core/preference.hpp"
#include "baracuda/core/sku.hpp"
#include "baracuda/core/status.hpp"
#include "baracuda/core/tensor.hpp"
#include "baracuda/core/workspace.hpp"

namespace baracuda {

// X(enum, name, ggml_type, block_size, block_bytes) — the one table of the formats: ggml_type is the
// GGML_TYPE_* / GGMLQuantizationType value a GGUF file stores, block_bytes = sizeof(block_<name>).
#define BARACUDA_GGUF_FORMATS(X) \
  X(q4_0, "q4_0", 2, 32, 18)     \
  X(q4_1, "q4_1", 3, 32, 20)     \
  X(q5_0, "q5_0", 6, 32, 22)     \
  X(q5_1, "q5_1", 7, 32, 24)     \
  X(q8_0, "q8_0", 8, 32, 34)     \
  X(q2_k, "q2_K", 10, 256, 84)   \
  X(q3_k, "q3_K", 11, 256, 110)  \
  X(q4_k, "q4_K", 12, 256, 144)  \
  X(q5_k, "q5_K", 13, 256, 176)  \
  X(q6_k, "q6_K", 14, 256, 210)

enum class GgufFormat : uint8_t {
#define BARACUDA_X(e, n, t, b, s) e,
  BARACUDA_GGUF_FORMATS(BARACUDA_X)
#undef BARACUDA_X
};

inline constexpr int kNumGgufFormats = 0
#define BARACUDA_X(e, n, t, b, s) +1
    BARACUDA_GGUF_FORMATS(BARACUDA_X)
#undef BARACUDA_X
    ;

/// One row of the format table.
struct GgufFormatInfo {
  GgufFormat format;
  const char* name;  ///< ggml's spelling: "q4_0", "q4_K"
  int ggml_type;     ///< GGML_TYPE_Q4_0 = 2, ... GGML_TYPE_Q6_K = 14
  int block_size;    ///< elements a block: 32 or 256
  int block_bytes;   ///< bytes a block
};

std::span<const GgufFormatInfo> gguf_formats();
const GgufFormatInfo& info(GgufFormat f);
/// "q4_0", "Q4_K", "q4_k" (case-insensitive), or the ggml type number as text ("12").
std::optional<GgufFormat> gguf_format_from_name(std::string_view name);
std::optional<GgufFormat> gguf_format_from_ggml_type(int ggml_type);
/// Bytes of a [rows, cols] matrix (cols a multiple of the block size; -1 otherwise or when negative).
int64_t gguf_packed_bytes(GgufFormat f, int64_t rows, int64_t cols);

// ---- dequantize -----------------------------------------------------------------------------------------
struct GgufDequantizeDesc {
  GgufFormat format = GgufFormat::q4_0;
  DType dtype = DType::f32;  ///< output: float32, float16 or bfloat16
  int64_t rows = 0, cols = 0;
  Direction direction = Direction::Forward;
};

/// packed: dense uint8 / int8 of rows * cols / B * block_bytes bytes (any shape), 16-byte aligned;
/// out: [rows, cols] of desc.dtype, dense row-major.
struct GgufDequantizeArgs {
  TensorRef packed;
  TensorMut out;
};

class GgufDequantizePlan {
 public:
  /// Validates the descriptor (format, output dtype, sizes >= 0, cols a multiple of the block
  /// size) and picks the kernel. Preferences: backend Any/Native; tf32 / reduced-precision Require
  /// are refused; the kernel is deterministic and bit-stable.
  static Result<GgufDequantizePlan> select(const Target& target, const GgufDequantizeDesc& desc,
                                           const PlanPreference& pref = {});
  size_t workspace_size() const { return 0; }
  Result<void> can_implement(const GgufDequantizeArgs& args) const;
  /// Enqueues on `stream`; never allocates or synchronizes (capture-safe).
  Result<void> run(cudaStream_t stream, Workspace ws, const GgufDequantizeArgs& args) const;
  const KernelSku& sku() const { return sku_; }
  const PrecisionGuarantee& precision() const { return sku_.precision; }
  const GgufDequantizeDesc& desc() const { return desc_; }

 private:
  GgufDequantizeDesc desc_;
  KernelSku sku_;
  int num_sms_ = 132;  ///< sizes the grid-stride grid (every element is computed alone: no effect on results)
};

// ---- matvec (decode linear) ----------------------------------------------------------------------------
/// y[m, n] = x[m, k] · W[n, k]^T (+ bias[n]), W in `format` ([n, k] row-major blocks along k).
struct GgufMatvecDesc {
  GgufFormat format = GgufFormat::q4_0;
  DType dtype = DType::bf16;    ///< x, y and bias: float32, float16 or bfloat16
  int64_t m = 0, n = 0, k = 0;  ///< m <= 8; k a multiple of the block size
  bool bias = false;
  Direction direction = Direction::Forward;
};

/// x [m, k] (unit column stride, any row stride >= k), weight: dense uint8 / int8 of
/// n * k / B * block_bytes bytes (any shape), 16-byte aligned; bias [n] (dtype); y [m, n] dense.
struct GgufMatvecArgs {
  TensorRef x;
  TensorRef weight;
  TensorRef bias;
  TensorMut y;
};

class GgufMatvecPlan {
 public:
  /// Validates the descriptor (format, dtype, 0 <= m <= 8, n, k >= 0, k a multiple of the block
  /// size) and fixes the launch shape (K chunking, rows per warp) from the problem and the target's
  /// SM count. Preferences as GgufDequantizePlan.
  static Result<GgufMatvecPlan> select(const Target& target, const GgufMatvecDesc& desc,
                                       const PlanPreference& pref = {});
  /// float32 partial sums [splits, m, n] when K is split into chunks (0 otherwise), 256-byte rounded.
  size_t workspace_size() const { return workspace_bytes_; }
  Result<void> can_implement(const GgufMatvecArgs& args) const;
  /// Enqueues on `stream`; never allocates or synchronizes (capture-safe).
  Result<void> run(cudaStream_t stream, Workspace ws, const GgufMatvecArgs& args) const;
  const KernelSku& sku() const { return sku_; }
  const PrecisionGuarantee& precision() const { return sku_.precision; }
  const GgufMatvecDesc& desc() const { return desc_; }

  /// The launch shape: rows of x the kernel is compiled for (1, 2, 4, 8), blocks of K a CTA holds
  /// (its x chunk in shared memory), chunks (splits), weight rows a warp streams, CTAs along n,
  /// dynamic shared memory bytes.
  struct Geometry {
    int m_tier = 1;
    int64_t chunk_blocks = 0;
    int splits = 1;
    int rows_per_warp = 1;
    int64_t grid_x = 0;
    size_t smem_bytes = 0;
  };
  const Geometry& geometry() const { return geo_; }

 private:
  GgufMatvecDesc desc_;
  KernelSku sku_;
  Geometry geo_;
  size_t workspace_bytes_ = 0;
};

/// One-line conveniences (plans cached per thread by descriptor and preference).
Result<void> gguf_dequantize(cudaStream_t stream, const GgufDequantizeDesc& desc, const GgufDequantizeArgs& args,
                             Workspace ws = {}, const PlanPreference& pref = {});
Result<void> gguf_matvec(cudaStream_t stream, const GgufMatvecDesc& desc, const GgufMatvecArgs& args, Workspace ws = {},
                         const PlanPreference& pref = {});
Result<size_t> gguf_matvec_workspace_size(const GgufMatvecDesc& desc, const PlanPreference& pref = {});

}  // namespace baracuda
