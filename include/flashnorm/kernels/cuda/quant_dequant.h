// GGML blocks to half-precision rows on the GPU (sm_90a): the prefill side of quantized weights
// A projection whose weights stay quantized on the device is
// expanded into a dt tile before a prompt's GEMM, optionally with an RMSNorm gain folded in:
//   y[n, k] = round_dt(w[n, k] * gain[k])   (gain fp32, or 1 when null),
// w[n, k] as io::dequantize computes it (io/dequant.h: deq_q4_0 ... deq_q6_k, the same fp32
// operations in the same order, no contraction), so that without a gain the tile is the fp32
// dequantized value rounded once to dt, as the bf16 engine's weights are.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "flashnorm/kernels/cuda/quant_gemv.h"
#include "flashnorm/kernels/cuda/status.h"

namespace flashnorm::kernels::cuda {

// Arguments of quant_dequantize. w: N rows of K / quant_block_elems(type) whole blocks in the
// planar device layout of quant_gemv.h (quant_layout.h) of exactly these N rows, 16-byte aligned;
// gain: [K] fp32 or null; y: [N, K] in dt with row stride ldy (elements), 16-byte aligned.
struct QuantDequantArgs {
  QuantType type = QuantType::kQ4_K;
  DType dt = DType::kBF16;
  int N = 0, K = 0;
  const void* w = nullptr;
  const float* gain = nullptr;
  void* y = nullptr;
  int64_t ldy = 0;
};

// y = round_dt(dequantize(w) * gain), one thread per 32 elements. Errors (kInvalidArgument naming
// the field): N < 1; K not a positive multiple of the block; ldy < K or ldy % 8 != 0; null or
// misaligned pointers. kCudaError for a failed launch.
Status quant_dequantize(const QuantDequantArgs& a, cudaStream_t s);

}  // namespace flashnorm::kernels::cuda
