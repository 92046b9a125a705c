// The per-head loops behind decode_attention (kernels/cpu/decode_attention.h): one query head
// against keys and values whose head starts at k and v (position j at + j * stride), D floats
// each; scores: scratch of at least `end` floats; out: D floats.
#pragma once

#include <cstddef>

namespace flashnorm::kernels::cpu {
// kernels/cpu/decode_attention.h's, declared here for decode_attention_avx2.cpp
void softmax_range(float* s, int first, int end);
}  // namespace flashnorm::kernels::cpu

namespace flashnorm::kernels::cpu::detail {

// Portable C++.
void attend_head_scalar(const float* q, const float* k, const float* v, size_t stride, int D,
                        int first, int end, float scale, float* scores, float* out);
#if defined(FLASHNORM_HAVE_AVX2_KERNELS)
// AVX2 + FMA (decode_attention_avx2.cpp); D a multiple of 8.
void attend_head_avx2(const float* q, const float* k, const float* v, size_t stride, int D,
                      int first, int end, float scale, float* scores, float* out);
#endif

}  // namespace flashnorm::kernels::cpu::detail
