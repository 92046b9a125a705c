// Internal: kernel launchers (decode_gemv.cu, rms_norm.cu, row_scale.cu, race_hooks.cu); no
// validation here, callers validate.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "flashnorm/kernels/cuda/rms_norm.h"
#include "flashnorm/kernels/cuda/status.h"

namespace flashnorm::kernels::cuda::detail {

// Decode kernel: CTA = rw row-warps (16 output features each) x kw k-warps; at most
// kDecodeMaxThreads threads and kDecodeMaxSmem bytes of dynamic shared memory (cross-warp
// partials).
constexpr int kMaxDecodeM = 64;
constexpr int kDecodeMaxThreads = 256;
constexpr int kDecodeMaxSmem = 96 * 1024;
// With the cp.async ring (DecodeParams::stages > 0) the CTA may use up to this much in all.
constexpr int kDecodeMaxSmemRing = 200 * 1024;

struct DecodeParams {
  const void* x;
  int64_t ldx;
  const void* w;
  int64_t ldw;
  void* y;
  int64_t ldy;
  const void* bias;
  const uint8_t* mask;
  int y_f32;  // 1: y is fp32
  int x_glu;  // 0: x in dtype; 1 SwiGLU / 2 GeGLU of fp32 gate|up rows [M, ldx] (staged in smem)
  int accumulate;  // 1: y (fp32) += result, and y_rounded (nullable, dtype) = round(new y)
  void* y_rounded;
  int M, N, K;
  float eps;
  int rw, kw;          // row-warps (1, 2, 4) and k-warps per CTA
  int stages;          // 0: W through registers; 3 or 4: cp.async ring in smem (M <= 8, no GLU)
  int pdl;             // 1: launched with programmatic stream serialization
  int ksplit;          // gridDim.y
  int kchunk;          // K elements per CTA (multiple of 32)
  int n_pad;           // gridDim.x * 16 * rw
  float* part;         // [ksplit][mp][n_pad] fp32 partial dot products (ksplit > 1)
  float* ss_part;      // [ksplit][row blocks][mp] fp32 partial sums of squares (ksplit > 1)
  unsigned* counters;  // [row blocks], zero between launches
};
// Padded M of the decode kernel (multiple of 8: 8, 16, 32 or 64).
int decode_mp(int M);
// Dynamic shared memory of one decode CTA: cross-warp partials, plus M x x_stage_k dtype elements
// of staged x (the GLU input; 0 otherwise), plus the cp.async ring of `stages` W batches.
size_t decode_smem_bytes(int M, int rw, int kw, int x_stage_k = 0, int stages = 0);
cudaError_t launch_decode(DType dt, const DecodeParams& p, cudaStream_t s);
cudaError_t launch_rms_norm(const RmsNormArgs& a, cudaStream_t s);
// rstd[m] = 1 / sqrt(mean(x[m, :]^2) + eps), fp32, one warp per row on at most max_ctas CTAs of 8
// warps (0: ceil(M / 8), one row per warp); lets a PDL-launched successor start at once. delay:
// SM clocks each warp spins, once, before reading x (race tests; 0 in production). pdl: launched
// with programmatic stream serialization, waiting for the preceding kernel before touching x or
// rstd (wait_prev = false only for the race test's --no-join run).
cudaError_t launch_rstd(DType dt, int64_t M, int64_t K, const void* x, int64_t ldx, float eps,
                        float* rstd, cudaStream_t s, int max_ctas = 0, long long delay = 0,
                        bool pdl = false, bool wait_prev = true);
// y[m, n] = (mask ? (mask[n] ? y*rstd[m] : y) : y*rstd[m]) + bias[n], in place.
// y_f32: y is fp32 (bias stays in dt).
cudaError_t launch_postscale(DType dt, int64_t M, int64_t N, void* y, int64_t ldy,
                             const float* rstd, const void* bias, const uint8_t* mask,
                             cudaStream_t s, bool y_f32 = false);
// One thread spinning for `cycles` SM clocks (race tests delay a producer with it); a successor
// launched with PDL may start at once (it triggers launch_dependents first).
cudaError_t launch_spin(long long cycles, cudaStream_t s);

}  // namespace flashnorm::kernels::cuda::detail
