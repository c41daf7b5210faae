// What ran, and what it promises numerically. Every plan reports both.
#pragma once
#include <cstdint>
#include <string>

#include "baracuda/core/dtype.hpp"

namespace baracuda {

/// Propagation kind (oneDNN's term): every family's plans run forward or backward.
enum class Direction : uint8_t { Forward, Backward };
const char* to_string(Direction d);

enum class Backend { Any, Native, CuBlasLt, CuDnn, CuFft, CuSolver, CuRand, CuSparse, Nccl, Cutlass };
const char* to_string(Backend b);

struct PrecisionGuarantee {
  DType math = DType::f32;         ///< precision the arithmetic is carried out in ("opmath")
  DType accumulator = DType::f32;  ///< accumulator type of any reduction inside the plan
  bool deterministic = true;       ///< same inputs, same device -> same bits, run to run
  bool bit_stable = true;          ///< result independent of launch config / SM count
  std::string note;                ///< e.g. "gelu tanh approximation", "fp8 saturating cast"
  std::string to_string() const;
};

struct KernelSku {
  std::string category;  ///< family: "elementwise", "gemm", ...
  std::string op;        ///< "gelu", "add_backward", ...
  std::string dtypes;    ///< "bf16->bf16"
  std::string layout;    ///< "contiguous-vec16", "strided", "strided-i64"; decided per run
  std::string epilogue;
  std::string arch;      ///< "sm_90a"
  Backend backend = Backend::Native;
  PrecisionGuarantee precision;
  std::string to_string() const;
};

}  // namespace baracuda
