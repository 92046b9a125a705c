// The prefill path of flashnorm_linear on the tensor cores: configuration names, the untuned
// heuristic, and the kFused / kPlain GEMMs (prefill_gemm.cuh; kRstdPdl in prefill_sm90_pdl.cu).
//
// kFused: y = rstd(x) * (x W^T) in one tensor-core GEMM kernel, with the sum of squares of every x
// row taken inside the GEMM's mainloop from the x tiles it has already loaded (tiles 0-3: from
// shared memory, where the wgmma reads them; tiles 4-9: from the registers the register-A wgmma
// reads), and rstd applied to the fp32 accumulators before the epilogue. No second kernel, no
// extra pass over x in memory, no rstd buffer.
#include <fmt/format.h>

#include "prefill_sm90.h"

#if FLASHNORM_HAVE_CUTLASS
#include "prefill_gemm.cuh"
#endif

namespace flashnorm::kernels::cuda::detail {

namespace {
// A configuration's tile (0 .. kPrefillTiles - 1) and tile-scheduler order, in either mode.
struct TileOrder {
  int tile, order;
};
TileOrder tile_order(int config) {
  return {config % kPrefillTiles, (config % kPrefillPdlFirst) / kPrefillTiles};
}
}  // namespace

PrefillMode prefill_mode(int config) {
  return config >= kPrefillPdlFirst ? PrefillMode::kRstdPdl : PrefillMode::kFused;
}

PrefillTileShape prefill_tile_shape(int config) {
  static constexpr PrefillTileShape kShapes[kPrefillTiles] = {
      {128, 256}, {128, 128}, {64, 128}, {64, 64},   {128, 256},
      {128, 128}, {64, 128},  {64, 64},  {256, 128}, {128, 192}};
  return kShapes[((config % kPrefillTiles) + kPrefillTiles) % kPrefillTiles];
}

std::string prefill_tile_name(int config) {
  static const char* const kTiles[kPrefillTiles] = {"128x256 cluster 2x1 cooperative",
                                                    "128x128 cooperative",
                                                    "64x128 ping-pong",
                                                    "64x64 ping-pong",
                                                    "RS 128x256 cluster 2x1 cooperative",
                                                    "RS 128x128 cooperative",
                                                    "RS 64x128 ping-pong",
                                                    "RS 64x64 ping-pong",
                                                    "RS 256x128 cluster 1x2 cooperative",
                                                    "RS 128x192 cluster 2x1 cooperative"};
  if (config < 0 || config >= kPrefillConfigs) return "?";
  const bool pdl = config >= kPrefillPdlFirst;
  const auto [tile, order] = tile_order(config);
  std::string name = kTiles[tile];
  if (order != 0)
    name = fmt::format("{}, raster {} swizzle {}", name,
                       kPrefillOrderTable[order].raster == 1 ? 'M' : 'N',
                       kPrefillOrderTable[order].swizzle);
  return pdl ? name + ", rstd kernel + PDL" : name;
}

int prefill_default_tile(int M, int N, int K, int sm_count) {
  auto tiles = [&](int bm, int bn) {
    return static_cast<int64_t>((M + bm - 1) / bm) * ((N + bn - 1) / bn);
  };
  // Compute-bound sizes: the register-A 128x256 tile (its reduction costs 1-3 %) when it fills
  // every SM at least once, else prescale (a partial wave of 128x256 tiles lost up to 1.33x to
  // cuBLAS). Smaller sizes: the shared-memory tiles, the largest that still gives every SM a tile
  // (launch and the norm's extra pass dominate there; fused won every measured shape up to
  // M*N*K ~ 2e9).
  if (static_cast<double>(M) * N * K > 4e9)
    return tiles(128, 256) >= sm_count ? 4 : kPrefillPrescale;
  if (tiles(128, 256) >= sm_count) return 0;
  if (tiles(128, 128) >= sm_count) return 1;
  if (tiles(64, 128) >= sm_count) return 2;
  return 3;
}

#if FLASHNORM_HAVE_CUTLASS
namespace {
using namespace prefill;

// f.template operator()<G>() with G the FusedGemm of (dtype, output type, tile) in mode kFused, or
// kPlain (bf16 in and out only).
template <class F>
auto with_gemm(DType dt, bool y_f32, int tile, bool plain, const F& f) {
  using cutlass::bfloat16_t;
  using cutlass::half_t;
  constexpr PrefillMode kF = PrefillMode::kFused;
  if (dt == DType::kFP16)
    return y_f32 ? with_tile<half_t, float, kF>(tile, f) : with_tile<half_t, half_t, kF>(tile, f);
  if (plain) return with_tile<bfloat16_t, bfloat16_t, PrefillMode::kPlain>(tile, f);
  return y_f32 ? with_tile<bfloat16_t, float, kF>(tile, f)
               : with_tile<bfloat16_t, bfloat16_t, kF>(tile, f);
}
}  // namespace

bool prefill_fused_available() { return true; }

size_t prefill_fused_workspace(const LinearArgs& p, int config, bool plain, int sm_count) {
  if (config < 0 || config >= kPrefillConfigs) return 0;
  const auto [tile, order] = tile_order(config);
  if (!plain && prefill_mode(config) == PrefillMode::kRstdPdl)
    return prefill_pdl_workspace(p, tile, order, sm_count);
  return with_gemm(p.dtype, p.y_f32, tile, plain, WorkspaceOf{p, sm_count, order});
}

Status launch_prefill_fused(const LinearArgs& p, int config, bool plain, int sm_count,
                            void* workspace, cudaStream_t s, bool* refused, const PrefillRstd* r) {
  if (refused) *refused = false;
  if (config < 0 || config >= kPrefillConfigs)
    return {Code::kInvalidArgument,
            fmt::format("flashnorm_linear: no fused prefill configuration {}", config)};
  const auto [tile, order] = tile_order(config);
  if (plain && (p.dtype != DType::kBF16 || p.y_f32)) {
    if (refused) *refused = true;
    return {Code::kUnsupported,
            "flashnorm_linear: the plain-GEMM reference is bf16 in and out only"};
  }
  if (!plain && prefill_mode(config) == PrefillMode::kRstdPdl) {
    if (!r)
      return {Code::kInvalidArgument,
              "flashnorm_linear: rstd-by-PDL prefill configuration without an rstd buffer"};
    return launch_prefill_pdl(p, tile, order, sm_count, workspace, s, refused, *r);
  }
  return with_gemm(p.dtype, p.y_f32, tile, plain,
                   LaunchOf{p, sm_count, order, workspace, s, refused, nullptr});
}

#else  // no CUTLASS in this build

bool prefill_fused_available() { return false; }
size_t prefill_fused_workspace(const LinearArgs&, int, bool, int) { return 0; }
Status launch_prefill_fused(const LinearArgs&, int, bool, int, void*, cudaStream_t, bool* refused,
                            const PrefillRstd*) {
  if (refused) *refused = true;
  return {Code::kUnsupported, "flashnorm_linear: this build has no CUTLASS (fused prefill)"};
}

#endif

}  // namespace flashnorm::kernels::cuda::detail
