// CPU reference implementations (fp64 accumulation) of the flashnorm kernels; the GPU tests compare
// against these. Source: docs/design.md sections 2 and 4 (eps inside the square root,
// as HF Llama/Gemma/Qwen RMSNorm; scale before bias).
#pragma once

#include <cstdint>
#include <vector>

namespace flashnorm::kernels::cpu {

// IEEE binary16 / bfloat16 conversions (round to nearest even; NaN stays NaN): flashnorm/half.h.
float bf16_to_float(uint16_t v);
uint16_t float_to_bf16(float f);
float fp16_to_float(uint16_t v);
uint16_t float_to_fp16(float f);

// rstd of one row: 1 / sqrt(sum_k x_k^2 / K + eps), accumulated in fp64. x: [K].
double row_rstd(const float* x, int64_t K, double eps);

// RMSNorm reference. x, y: [M, K] row-major (dense); gain: [K] or null (no gain);
// gain_one_plus: use (1 + gain) (Gemma). y = x * rstd(x) * G in fp64. Throws flashnorm::Error on
// M < 1 or K < 1.
void rms_norm(const float* x, const float* gain, bool gain_one_plus, int64_t M, int64_t K,
              double eps, double* y);

// flashnorm_linear reference: y[m, n] = s_mn * sum_k x[m, k] W[n, k] + bias[n], with
// s_mn = rstd(x_m) where mask is null or mask[n] != 0, else 1. x: [M, K], w: [N, K], y: [M, N]
// (all dense, row-major, fp64 accumulation); bias: [N] or null; mask: [N] or null.
// Throws flashnorm::Error on M, N or K < 1.
void flashnorm_linear(const float* x, const float* w, const float* bias, const uint8_t* mask,
                      int64_t M, int64_t N, int64_t K, double eps, double* y);

// ||a - b||_2 / ||b||_2 over n values (returns +inf if a has a NaN/Inf, or b is all zero and a
// not).
double rel_error(const float* a, const double* b, int64_t n);

}  // namespace flashnorm::kernels::cpu
