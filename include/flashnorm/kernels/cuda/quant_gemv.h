// Decode GEMV straight from GGML blocks on the GPU (sm_90a), the deferred normalization of
// docs/design.md on quantized weights without refolding them:
//   y[m, n] = s[m] * sum_k (x[m, k] * gain[k]) * W[n, k],  s[m] = rstd(x[m, :]) or 1,
//   rstd(x) = 1 / sqrt(mean_k x[k]^2 + eps) (sum of squares of the raw x in fp32),
// so a file's quantized weights are read as they are (the gain multiplies x as it is staged; rstd
// scales the output rows after the join of each warp's sums; the blocks' bytes are rearranged into
// planes at load, quant_layout.h, no value changed). W: N rows of K elements, each row
// K / block_elems whole blocks of the GGUF layout of ggml-common.h as decoded by io/dequant.h:
// Q4_0 (18-byte blocks of 32: fp16 d, 4-bit q[32]; w = d * (q - 8)), Q4_1 (20 bytes: fp16 d,
// fp16 m, 4-bit q; w = d * q + m), Q5_0 (22 bytes: fp16 d, 32 fifth bits, 4-bit q; w =
// d * (q - 16)), Q8_0 (34-byte blocks of 32: fp16 d, int8 q[32]; w = d * q), Q4_K (144-byte
// super-blocks of 256: fp16 d, fp16 dmin, 12 bytes of 6-bit scales/mins, 4-bit q[256]; w = d * sc *
// q - dmin * m per sub-block of 32), Q6_K (210-byte super-blocks of 256: 4-bit ql, 2-bit qh, int8
// scales[16], fp16 d; w = d * sc * (q - 32) per 16).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <optional>

#include "flashnorm/io/ggml_types.h"
#include "flashnorm/kernels/cuda/linear.h"
#include "flashnorm/kernels/cuda/status.h"

namespace flashnorm::kernels::cuda {

// The weight block formats quant_gemv reads.
enum class QuantType { kQ4_0, kQ4_1, kQ5_0, kQ8_0, kQ4_K, kQ6_K };

// The GGML type of a format, and the format of a GGML type (none for the types quant_gemv does not
// read).
inline io::GgmlType ggml_type(QuantType t) {
  switch (t) {
    case QuantType::kQ4_0:
      return io::GgmlType::Q4_0;
    case QuantType::kQ4_1:
      return io::GgmlType::Q4_1;
    case QuantType::kQ5_0:
      return io::GgmlType::Q5_0;
    case QuantType::kQ8_0:
      return io::GgmlType::Q8_0;
    case QuantType::kQ4_K:
      return io::GgmlType::Q4_K;
    default:
      return io::GgmlType::Q6_K;
  }
}
inline std::optional<QuantType> quant_type(io::GgmlType t) {
  for (QuantType q : {QuantType::kQ4_0, QuantType::kQ4_1, QuantType::kQ5_0, QuantType::kQ8_0,
                      QuantType::kQ4_K, QuantType::kQ6_K})
    if (ggml_type(q) == t) return q;
  return std::nullopt;
}

// Elements per block (32 or 256) and bytes per block (18, 20, 22, 34, 144, 210) of `t`.
int quant_block_elems(QuantType t);
int quant_block_bytes(QuantType t);

// Bytes per block of plane j (0-based) of `type`'s device layout (quant_layout.h: the planes in
// the order listed there); 0 past its last plane. The one description of the planes: the host
// conversion (quant_layout.cpp) and the kernels use it.
__host__ __device__ constexpr int quant_plane_bytes(QuantType type, int j) {
  switch (type) {
    case QuantType::kQ4_0:
      return j == 0 ? 16 : (j == 1 ? 2 : 0);
    case QuantType::kQ4_1:
      return j == 0 ? 16 : (j == 1 ? 4 : 0);
    case QuantType::kQ5_0:
      return j == 0 ? 16 : (j == 1 ? 4 : (j == 2 ? 2 : 0));
    case QuantType::kQ8_0:
      return j == 0 ? 32 : (j == 1 ? 2 : 0);
    case QuantType::kQ4_K:
      return j == 0 ? 144 : 0;
    default:  // Q6_K
      return j == 0 ? 128 : (j == 1 ? 64 : (j == 2 ? 16 : (j == 3 ? 2 : 0)));
  }
}

// The number of planes of `type` (1 to 4).
__host__ __device__ constexpr int quant_plane_count(QuantType type) {
  int n = 0;
  while (quant_plane_bytes(type, n) > 0) ++n;
  return n;
}

// Bytes per block of the planes before plane j of `type`: plane j of the device layout of nb
// blocks starts at byte nb * quant_plane_before(type, j).
__host__ __device__ constexpr int quant_plane_before(QuantType type, int j) {
  int before = 0;
  for (int k = 0; k < j; ++k) before += quant_plane_bytes(type, k);
  return before;
}

// Shared memory (bytes) quant_gemv stages x in for M rows of K (M rounded up to 1, 2, 4, 8; about
// 2.5 bytes per element: int16 values with 16 bytes of padding per 128, a scale and a sum per
// block of 32), and the most it takes: larger M * K are refused.
size_t quant_gemv_shared_bytes(int M, int K);
inline constexpr size_t kQuantGemvMaxSharedBytes = 200 * 1024;

// Arguments of quant_gemv. x: [M, K] in dt, row stride ldx (elements); gain: [K] fp32, 16-byte
// aligned, or null (1); w: the N * (K / block_elems) blocks of the N rows (row-major, as in the
// file) in the device layout of quant_layout.h (to_device_layout: each field in its own plane, so
// that the codes of a block are one aligned piece; Q4_K as in the file), 16-byte aligned: exactly
// the layout of these N rows (the planes' offsets follow from N, so a row range of a larger
// upload is not one); y: [M, N]
// fp32, row stride ldy. scale_rows: multiply row m by rstd(x[m, :]) (false: a consumer whose rstd
// cancels, or the standard order fed a normalized x).
struct QuantGemvArgs {
  QuantType type = QuantType::kQ4_K;
  DType dt = DType::kBF16;
  int M = 1, N = 0, K = 0;
  const void* x = nullptr;
  int64_t ldx = 0;
  const float* gain = nullptr;
  const void* w = nullptr;
  float* y = nullptr;
  int64_t ldy = 0;
  bool scale_rows = true;
  float eps = 1e-6f;
  // Programmatic dependent launch (sm_90): W and the gain are read before the wait for the
  // preceding kernel (the one-row instances load their first steps of W there), x and y only
  // after it; so, as for LinearArgs::pdl, W and the gain must not be written by any kernel that
  // may still be in flight (in the CUDA engine both are constant after load). Off by default.
  bool pdl = false;
  // Fused decode ops (the bf16 decode GEMV's, linear.h): x_glu (M = 1 only): x is the fp32 gate|up
  // output [1, 2K] (ldx >= 2K) and the staged input is round_dt(act(gate) * up) (glu_kind);
  // accumulate:
  // y += the result (the residual add), and y_rounded (dt, stride ldy, or null) = round_dt(y).
  bool x_glu = false;
  GluKind glu_kind = GluKind::kSwiGLU;
  bool accumulate = false;
  void* y_rounded = nullptr;
  // Split K across a thread block cluster where quant_gemv_split(type, M, N, K, pdl) > 1; false:
  // whole rows per CTA whatever the shape (the kernel lab's comparison of the two).
  bool split_k = true;
  // The GLU in the epilogue (M = 1 only): W is a gate|up projection, rows [0, N / 2) gate and
  // [N / 2, N) up (N even), and instead of y the kernel writes glu_out[i] = round_dt(act(y_i) *
  // y_{N/2 + i}) (dt, N / 2 values, 2-byte aligned; act by glu_kind; y the values it would have
  // written), exactly what x_glu stages from the fp32 gate|up rows: the projection fed glu_out
  // computes the same bits as the one fed those rows with x_glu, without staging the GLU of all N
  // fp32 values in each of its CTAs. A warp takes rows i and N / 2 + i. y null (ldy unused); not
  // with x_glu, accumulate, y_rounded. Never split: the same bits as the launch without glu_out
  // where that one is not split either (quant_gemv_split(type, 1, N, K, pdl) == 1).
  void* glu_out = nullptr;
};

// y = s * ((x * gain) W^T), one launch: each CTA stages its x rows (times the gain) in shared
// memory quantized to int16 per block of 32 (the CPU engine's activation rule, so each element of
// x * gain is off by about amax / 65534 of its block) with their sums of squares, then each warp
// reduces output rows over whole blocks with integer dot products (dp2a) scaled in fp32. With
// M = 1, K of 4096 or more (8192 without PDL) and few rows (quant_gemv_split), K is split across a
// thread block cluster: each CTA stages and reduces one slice of every row of its row groups, and
// the cluster sums the slices' partial results and sums of squares in rank order through
// distributed shared memory (the same bits whatever the timing). Errors (kInvalidArgument naming
// the field): 1 <= M <= 8; N >= 1; K a positive multiple of the block; M (rounded up to 1, 2, 4, 8)
// * about 2.5 K bytes within 200 KiB of shared memory; ldx >= K, ldx % 8 == 0 and x 16-byte
// aligned; ldy >= N; null pointers; w or gain not 16-byte aligned. kCudaError for a failed launch.
Status quant_gemv(const QuantGemvArgs& a, cudaStream_t s);

// The CTAs per cluster among which quant_gemv splits K for these arguments (1: no split; at most
// 8): M = 1 only, where N / 16 row groups leave CTA slots idle (the slots per group), at most K /
// 2048 slices with PDL (QuantGemvArgs::pdl) and K / 4096 without, in whole steps of the format's
// warp loop (the last slice may be shorter). Uses the current device's SM count; the summation
// order, hence the bits of y, follows the split.
int quant_gemv_split(QuantType type, int M, int N, int K, bool pdl);

}  // namespace flashnorm::kernels::cuda
