// Internal: the prefill GEMMs of flashnorm_linear (prefill_sm90.cu, prefill_sm90_pdl.cu), y =
// rstd(x) * (x W^T) on the tensor cores. Callers validate the arguments (validate_linear) first.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "flashnorm/kernels/cuda/linear.h"

namespace flashnorm::kernels::cuda::detail {

// Configuration indices (PrefillConfig, linear.h, as one number): config = tile + kPrefillTiles *
// order + kPrefillTiles * kPrefillOrders * (mode == kRstdPdl); kPrefillPrescale for the prescale
// path. Tiles (CTA tile M x N x 64, cluster, CUTLASS 3.x sm90 kernel schedule; 0-3 with x read by
// the wgmma from shared memory, 4-7 the same tiles with x in registers, 8-9 two more register-A
// tiles), each instantiated for bf16 and fp16 (y in the input type or fp32); orders: the persistent
// tile scheduler's raster direction and swizzle (runtime arguments of the same kernel).
constexpr int kPrefillTiles = PrefillConfig::kTiles;
constexpr int kPrefillOrders = PrefillConfig::kOrders;
constexpr int kPrefillPdlFirst = kPrefillTiles * kPrefillOrders;
constexpr int kPrefillConfigs = 2 * kPrefillPdlFirst;
constexpr int kPrefillPrescale = -1;
// PrefillConfig <-> index: -1 for prescale (and for a tile or order out of range).
inline int prefill_index(const PrefillConfig& c) {
  if (!c.is_fused() || c.tile < 0 || c.tile >= kPrefillTiles || c.order < 0 ||
      c.order >= kPrefillOrders)
    return kPrefillPrescale;
  return c.tile + kPrefillTiles * c.order +
         (c.rstd == PrefillConfig::Rstd::kKernelPdl ? kPrefillPdlFirst : 0);
}
inline PrefillConfig prefill_from_index(int config) {
  if (config < 0 || config >= kPrefillConfigs) return PrefillConfig::prescale();
  const bool pdl = config >= kPrefillPdlFirst;
  const int c = config % kPrefillPdlFirst;
  return PrefillConfig::fused(
      c % kPrefillTiles, c / kPrefillTiles,
      pdl ? PrefillConfig::Rstd::kKernelPdl : PrefillConfig::Rstd::kMainloop);
}
// "RS 128x256 cluster 2x1 cooperative, raster N swizzle 4" (PrefillConfig::name); "?" outside
// 0 .. kPrefillConfigs - 1.
std::string prefill_tile_name(int config);

// How the prefill GEMM gets rstd:
//  kFused:    the consumer warps sum the squares of the x rows from the tiles the mainloop already
//             loaded and scale the fp32 accumulators (one kernel, no rstd buffer);
//  kRstdPdl:  a separate rstd kernel (launch_rstd) runs first and the GEMM is launched behind it
//             with programmatic dependent launch: the GEMM's mainloop overlaps the reduction, its
//             epilogue waits (griddepcontrol.wait) and multiplies by rstd[m] from the buffer;
//  kPlain:    neither (y = x W^T; bf16 in and out only): the benchmark's measure of what the
//             reduction costs, not a flashnorm_linear result.
enum class PrefillMode { kPlain, kFused, kRstdPdl };
PrefillMode prefill_mode(int config);  // kFused or kRstdPdl, from the configuration number

// kRstdPdl's rstd buffer and launch: rstd fp32 [M] on the device (overwritten), the rstd kernel's
// CTA count (0: one warp per row), its test delay (SM clocks, 0 in production) and whether the
// rstd kernel waits for the kernel before it and the GEMM for the rstd kernel (false only in the
// race test's --no-join run: the bugs it must catch).
struct PrefillRstd {
  float* rstd = nullptr;
  int ctas = 0;
  long long delay = 0;
  bool join = true;
};

// Tile-scheduler order: swizzle width and raster direction (0: CUTLASS's heuristic; 1: M; 2: N).
struct PrefillOrder {
  int swizzle, raster;
};
inline constexpr PrefillOrder kPrefillOrderTable[kPrefillOrders] = {
    {1, 0}, {1, 1}, {1, 2}, {2, 1}, {2, 2}, {4, 1}, {4, 2}, {8, 1}, {8, 2}};

// CTA tile (rows of x, rows of W) of a configuration's tile.
struct PrefillTileShape {
  int bm, bn;
};
PrefillTileShape prefill_tile_shape(int config);

// False when this build has no CUTLASS (FLASHNORM_HAVE_CUTLASS unset): every call below then
// returns kUnsupported.
bool prefill_fused_available();
// sm_count: the current device's SM count (the persistent tile scheduler's grid).
// Bytes of device workspace the kernel needs for this call (the tile scheduler's; often 0).
// plain: the kPlain variant of the configuration's tile instead of its own mode.
size_t prefill_fused_workspace(const LinearArgs& a, int config, bool plain, int sm_count);
// Launches configuration `config` on s (kRstdPdl: the rstd kernel, then the GEMM; r required).
// plain: the kPlain GEMM of the configuration's tile and order. workspace: prefill_fused_workspace
// bytes. *refused (nullable) is set when the status is kUnsupported because CUTLASS cannot
// implement the shape with this tile (alignment) or the build has no CUTLASS.
Status launch_prefill_fused(const LinearArgs& a, int config, bool plain, int sm_count,
                            void* workspace, cudaStream_t s, bool* refused = nullptr,
                            const PrefillRstd* r = nullptr);
// Heuristic choice for a shape (no tuning): a tile 0 .. kPrefillTiles - 1 or kPrefillPrescale.
int prefill_default_tile(int M, int N, int K, int sm_count);

// The kRstdPdl instantiations (prefill_sm90_pdl.cu): tile 0 .. kPrefillTiles - 1, order.
size_t prefill_pdl_workspace(const LinearArgs& a, int tile, int order, int sm_count);
Status launch_prefill_pdl(const LinearArgs& a, int tile, int order, int sm_count, void* workspace,
                          cudaStream_t s, bool* refused, const PrefillRstd& r);

}  // namespace flashnorm::kernels::cuda::detail
