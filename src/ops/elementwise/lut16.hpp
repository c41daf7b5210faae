// 16-bit unary ops through a table of all 65536 inputs (ElementwisePlan's lut16 variant).
//
// Why: a unary op on bf16/f16 storage has only 65536 distinct inputs. Where the direct kernel is
// compute-bound in 16-bit (lgamma, digamma, polygamma: 54-83% of copy bandwidth on H100 with
// their short forms), a table makes it a gather from shared memory at copy bandwidth. The table
// is the op's own direct kernel run once over every bit pattern, so results are bit-identical to
// the direct path (NaN payloads included).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "ops/elementwise/ew_registry.hpp"

namespace baracuda::detail {

/// Tensors at least this large take the table (its 128 KiB are loaded into every SM's shared
/// memory once per launch, ~2 us: amortized from here on).
inline constexpr int64_t kLut16MinNumel = int64_t{1} << 22;

/// The table of a unary 16-bit -> 16-bit forward `entry` with params `p` on the current device:
/// built on first request (entry over every bit pattern, on a private stream, synchronized) and
/// kept for the process's lifetime (256 KiB per device, op, dtype and params; at most 16 parameter
/// sets per device, op and dtype, past which it returns nullptr). nullptr when it
/// cannot be built (no device, allocation refused); the caller then runs the entry directly.
/// Thread-safe. Never called during run(): plans request it in select().
const uint16_t* ew_lut16_table(const EwEntry* entry, const EwParams& p);

/// Thread instructions the device can issue per element of a 16-bit unary op streamed at its peak
/// DRAM bandwidth (SMs x 128 a clock x SM clock / (bandwidth / 4 bytes)): ~40 on an H100 SXM,
/// ~28 on an H200 (same SMs, 1.4x the bandwidth). 0 when the attributes are unavailable.
/// An op whose direct kernel issues more than this per element is issue-bound there.
int ew_issue_budget(int device);
/// The same from the device's attributes: SMs, SM clock and memory clock (kHz), bus width (bits).
int ew_issue_budget_of(int sms, int sm_khz, int mem_khz, int bus_bits);

/// Thread instructions an element of `op`'s 16-bit forward costs where its direct kernel can be
/// issue-bound; 0 for the ops that never take the table. A plan reads the table where this
/// exceeds the device's ew_issue_budget.
int ew_lut16_cost(ElementwiseOp op);

/// Workspace bytes the table kernel uses: its task counter (zeroed on the stream before each
/// launch, so concurrent launches need separate workspaces, as any plan's do).
inline constexpr size_t kLut16WorkspaceBytes = 256;
/// Elements past which the kernel's 32-bit task counter could wrap: larger calls run the direct
/// kernel (2^44; 64 KiB tasks).
inline constexpr int64_t kLut16MaxNumel = int64_t{1} << 44;

/// out[i] = table[in[i]] for n contiguous 16-bit elements; `in` and `out` 16-byte aligned;
/// `task_counter` kLut16WorkspaceBytes of device memory this launch alone uses.
cudaError_t ew_lut16_launch(const uint16_t* table, const void* in, void* out, int64_t n, int num_sms,
                            void* task_counter, cudaStream_t stream);

}  // namespace baracuda::detail
