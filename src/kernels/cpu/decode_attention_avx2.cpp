// AVX2 + FMA loops of one decode attention head (decode_attention_detail.h); built with -mavx2
// -mfma for this file only and called only when the CPU has both (quant_isa_available(kAvx2)).
// It includes no standard header: an inline function compiled here with AVX2 could be the copy
// the linker keeps for every file.
// Scores: one 8-lane fma accumulator per key, then its horizontal sum; the weighted sum of the
// values: 64 output floats at a time held in 8 registers across all keys.
#include <immintrin.h>

#include "decode_attention_detail.h"

namespace flashnorm::kernels::cpu::detail {
namespace {

float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace

void attend_head_avx2(const float* q, const float* k, const float* v, size_t stride, int D,
                      int first, int end, float scale, float* scores, float* out) {
  for (int j = first; j < end; ++j) {
    const float* kj = k + size_t(j) * stride;
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < D; i += 8) {
      acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(kj + i), acc);
    }
    scores[j] = hsum(acc) * scale;
  }
  softmax_range(scores, first, end);
  for (int i0 = 0; i0 < D; i0 += 64) {
    const int n = (D - i0 < 64 ? D - i0 : 64) / 8;  // vectors in this chunk (1..8)
    __m256 o[8];
    for (int c = 0; c < 8; ++c) o[c] = _mm256_setzero_ps();
    for (int j = first; j < end; ++j) {
      const __m256 p = _mm256_set1_ps(scores[j]);
      const float* vj = v + size_t(j) * stride + i0;
      for (int c = 0; c < n; ++c) o[c] = _mm256_fmadd_ps(p, _mm256_loadu_ps(vj + 8 * c), o[c]);
    }
    for (int c = 0; c < n; ++c) _mm256_storeu_ps(out + i0 + 8 * c, o[c]);
  }
}

}  // namespace flashnorm::kernels::cpu::detail
