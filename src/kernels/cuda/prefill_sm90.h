// Internal: the fused prefill GEMM of flashnorm_linear (prefill_sm90.cu), y = rstd(x) * (x W^T)
// in one kernel. Callers validate the arguments (validate_linear) first.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "flashnorm/kernels/cuda/kernels.h"

namespace flashnorm::kernels::cuda::detail {

// Configurations: config = tile + kPrefillTiles * order. Tiles (CTA tile M x N x 64, cluster,
// CUTLASS 3.x sm90 kernel schedule; 0-3 with x read by the wgmma from shared memory, 4-7 the same
// tiles with x in registers, 8-9 two more register-A tiles), each instantiated for bf16 and fp16
// (y in the input type or fp32); orders: the persistent tile
// scheduler's raster direction and swizzle (runtime arguments of the same kernel).
constexpr int kPrefillTiles = LinearContext::kPrefillTiles;
constexpr int kPrefillOrders = LinearContext::kPrefillOrders;
std::string prefill_tile_name(int config);

// One fused prefill call on validated LinearArgs (validate_linear; no bias or mask): x [M, K],
// W [N, K], y [M, N] (dtype, or fp32 with y_f32). row_scale = false runs the same kernel without
// the sum of squares and the scale (y = x W^T; bf16 in and out only): the benchmark's measure of
// what the in-kernel reduction costs, not a flashnorm_linear result.

// False when this build has no CUTLASS (FLASHNORM_HAVE_CUTLASS unset): every call below then
// returns kUnsupported.
bool prefill_fused_available();
// sm_count: the current device's SM count (the persistent tile scheduler's grid).
// Bytes of device workspace the kernel needs for this call (the tile scheduler's; often 0).
size_t prefill_fused_workspace(const LinearArgs& a, int config, bool row_scale, int sm_count);
// Launches the kernel of configuration `config` on s. workspace: prefill_fused_workspace bytes.
// *refused (nullable) is set when the status is kUnsupported because CUTLASS cannot implement the
// shape with this tile (alignment) or the build has no CUTLASS.
Status launch_prefill_fused(const LinearArgs& a, int config, bool row_scale, int sm_count,
                            void* workspace, cudaStream_t s, bool* refused = nullptr);
// Heuristic choice for a shape (no tuning): a tile 0 .. kPrefillTiles - 1 or
// LinearContext::kPrefillPrescale.
int prefill_default_tile(int M, int N, int K, int sm_count);

}  // namespace flashnorm::kernels::cuda::detail
