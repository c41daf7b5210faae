// embedding_renorm (torch.embedding_renorm_, the max_norm of embedding / embedding_bag), in the
// rows engine: every row the ids reference whose p-norm exceeds max_norm is scaled in place by
// max_norm / (norm + 1e-7), once. A warp per id: lane 0 claims the row with an atomicOr on a
// bit of the workspace, and only the claiming warp reads and rescales it; the scale depends on
// the row alone, so the result is deterministic whichever warp claims it (torch dedupes with a
// sort; the claim bits cost N / 8 bytes and no sort). The table is the output, updated in place:
// when the caller asks for the error flag, a check pass first looks at every id, and one out of
// range makes the rescale pass change nothing (a refused call must not leave rows rescaled that
// no retry could restore).
#include <cmath>

#include "kernels/common/dtype_traits.cuh"
#include "ops/index/index_kernels.cuh"

namespace baracuda::detail::idx {
namespace {

template <class A>
__device__ __forceinline__ A warp_sum(A v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
template <class A>
__device__ __forceinline__ A warp_max(A v) {
  for (int o = 16; o > 0; o /= 2) {
    const A w = __shfl_xor_sync(0xffffffffu, v, o);
    v = w > v || isnan(w) ? w : v;
  }
  return v;
}

/// The id at flat position l of the ids (row-major over their shape, any strides).
template <class IT>
__device__ __forceinline__ int64_t id_at(const RenormParams& p, int64_t l) {
  int64_t off = 0, rem = l;
#pragma unroll
  for (int d = kRank - 1; d >= 0; --d) {
    if (d >= p.rank) continue;
    const int64_t c = rem % p.size[d];
    rem /= p.size[d];
    off += c * p.stride[d];
  }
  return static_cast<int64_t>(__ldg(static_cast<const IT*>(p.ids) + off));
}

/// The check pass: an id out of range sets the caller's flag and the abort word (both
/// idempotent stores).
template <class IT>
__global__ void __launch_bounds__(256) renorm_check_kernel(const RenormParams p, unsigned* abort) {
  for (int64_t l = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; l < p.L; l += int64_t{gridDim.x} * blockDim.x) {
    const int64_t id = id_at<IT>(p, l);
    if (id < 0 || id >= p.num_weights) {
      *abort = 1;
      *p.error = 1;
    }
  }
}

/// kind: 1 (p = 1), 2 (p = 2), 3 (p = inf), 0 (any other p > 0). abort: the check pass's word
/// (null without the error flag: ids out of range are then skipped).
template <class T, class IT>
__global__ void __launch_bounds__(256) renorm_kernel(const RenormParams p, int kind, const unsigned* abort) {
  using A = kern::opmath_t<T>;
  if (abort && *abort) return;  // written by the previous kernel on the stream: uniform, visible
  T* weight = static_cast<T*>(p.weight);
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int64_t warps = int64_t{gridDim.x} * blockDim.x / 32;
  const A max_norm = static_cast<A>(p.max_norm);  // torch: static_cast<accscalar_t>(max_norm)
  const A norm_type = static_cast<A>(p.norm_type);
  for (int64_t l = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32; l < p.L; l += warps) {
    const int64_t id = id_at<IT>(p, l);
    if (id < 0 || id >= p.num_weights) continue;  // the check pass reported it (or no flag was asked)
    unsigned claimed = 0;
    if (lane == 0) {
      const unsigned bit = 1u << (id & 31);
      claimed = (atomicOr(p.claimed + (id >> 5), bit) & bit) == 0;
    }
    if (!__shfl_sync(0xffffffffu, claimed, 0)) continue;  // another warp has (or had) this row
    T* row = weight + id * p.w_stride0;
    A acc = A(0);
    for (int64_t d = lane; d < p.dim; d += 32) {
      const A x = kern::load_as_opmath(row[d * p.w_stride1]);
      switch (kind) {
        case 1:
          acc += fabs(x);
          break;
        case 2:
          acc += x * x;
          break;
        case 3:
          acc = fabs(x) > acc || isnan(x) ? fabs(x) : acc;
          break;
        default:
          acc += pow(fabs(x), norm_type);
      }
    }
    acc = kind == 3 ? warp_max(acc) : warp_sum(acc);
    const A norm = kind == 1 || kind == 3 ? acc : kind == 2 ? sqrt(acc) : pow(acc, A(1) / norm_type);
    if (!(norm > max_norm)) continue;
    // torch: static_cast<scalar_t>(max_norm / (norm + 1e-7)) in double, then w *= factor.
    const T factor = kern::convert<T>(static_cast<double>(max_norm) / (static_cast<double>(norm) + 1e-7));
    const A f = kern::load_as_opmath(factor);
    for (int64_t d = lane; d < p.dim; d += 32) {
      T* e = row + d * p.w_stride1;
      *e = kern::convert<T>(kern::load_as_opmath(*e) * f);
    }
  }
}

}  // namespace

cudaError_t launch_embedding_renorm(const RenormParams& p, DType dt, DType index_dtype, cudaStream_t stream) {
  if (p.L == 0) return cudaSuccess;  // an empty table still goes on: its every id is out of range
  if (const cudaError_t e = cudaMemsetAsync(p.claimed, 0, renorm_claim_bytes(p.num_weights), stream); e != cudaSuccess)
    return e;
  const double q = p.norm_type;
  const int kind = q == 1.0 ? 1 : q == 2.0 ? 2 : std::isinf(q) ? 3 : 0;
  unsigned* abort = nullptr;
  if (p.error) {
    abort = p.claimed + (renorm_claim_bytes(p.num_weights) / 4 - 1);  // the last word
    const unsigned check_blocks = grid_for(p.L, 1, 256);
    if (index_dtype == DType::s32)
      renorm_check_kernel<int32_t><<<check_blocks, 256, 0, stream>>>(p, abort);
    else
      renorm_check_kernel<int64_t><<<check_blocks, 256, 0, stream>>>(p, abort);
    if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  const unsigned blocks = grid_for(p.L * 32, 1, 256);
  cudaError_t e = cudaErrorInvalidValue;
  kern::dispatch<dtypes::kFloat>(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (index_dtype == DType::s32)
      renorm_kernel<T, int32_t><<<blocks, 256, 0, stream>>>(p, kind, abort);
    else
      renorm_kernel<T, int64_t><<<blocks, 256, 0, stream>>>(p, kind, abort);
    e = cudaGetLastError();
  });
  return e;
}

}  // namespace baracuda::detail::idx
