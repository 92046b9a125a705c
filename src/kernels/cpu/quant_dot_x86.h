// Helpers shared by the x86 kernel files (quant_dot_avx2.cpp, quant_dot_avx512.cpp), each built
// with its own instruction-set flags. Everything here is `static`: every file compiles its own
// copy with its own flags, so the linker can never let one file call another's copy (an inline
// function's out-of-line copy built with AVX-512 would otherwise be free to serve the AVX2 path on
// a CPU without AVX-512). Needs AVX2 + FMA + F16C at least.
#pragma once

#include <immintrin.h>

#include "quant_dot.h"

namespace flashnorm::kernels::cpu::detail::x86 {

// The f16 at p as a float.
static inline float f16(const uint8_t* p) { return _cvtsh_ss(load_u16(p)); }

// 32 bytes from p (unaligned).
static inline __m256i load32(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

// The sum of the 8 lanes.
static inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// The unsigned 6-bit codes of half h (0 or 1, elements 128 h .. 128 h + 127) of the block_q6_K at
// w (quant_dot_scalar.cpp's dot_q6_k has the layout): q[i] byte l = element 128 h + 32 i + l.
static inline void q6_k_codes(const uint8_t* w, int h, __m256i q[4]) {
  const __m256i m4 = _mm256_set1_epi8(0x0f), m3 = _mm256_set1_epi8(0x03);
  const __m256i ql0 = load32(w + 64 * h), ql1 = load32(w + 64 * h + 32);
  const __m256i qh = load32(w + 128 + 32 * h);
  // the 2-bit field of qh at bit `shift` (masked after the 16-bit shift), moved to bits 4-5
  auto high = [&](int shift) {
    return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, shift), m3), 4);
  };
  q[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4), high(0));
  q[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4), high(2));
  q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), high(4));
  q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4), high(6));
}

// The layout of a block32 type (32 elements per block; ggml-common.h's block_q4_0 {f16 d; u8
// qs[16]}, block_q4_1 {f16 d, m; u8 qs[16]}, block_q5_0 {f16 d; u32 qh; u8 qs[16]}, block_q5_1
// {f16 d, m; u32 qh; u8 qs[16]}, block_q8_0 {f16 d; i8 qs[32]}) as the kernels' template argument.
template <int kBytes_, int kQsOff_, int kQhOff_, bool kHasMin_, int kZero_, bool kQ8_>
struct Block32Layout {
  static constexpr int kBytes = kBytes_;  // bytes per block
  static constexpr int kQsOff = kQsOff_;  // offset of the codes
  static constexpr int kQhOff =
      kQhOff_;  // offset of the u32 fifth bits (bit j: element j); 0: none
  static constexpr bool kHasMin = kHasMin_;  // an f16 m at offset 2: w = d q + m
  static constexpr int kZero = kZero_;       // w = d (q - kZero) otherwise
  static constexpr bool kQ8 = kQ8_;          // 32 signed bytes rather than nibbles
};

// fn.template operator()<L>() with L the Block32Layout of `type` (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0),
// else `other`.
template <class R, class Fn>
static R for_block32(io::GgmlType type, Fn fn, R other) {
  switch (type) {
    case io::GgmlType::Q4_0:
      return fn.template operator()<Block32Layout<18, 2, 0, false, 8, false>>();
    case io::GgmlType::Q4_1:
      return fn.template operator()<Block32Layout<20, 4, 0, true, 0, false>>();
    case io::GgmlType::Q5_0:
      return fn.template operator()<Block32Layout<22, 6, 2, false, 16, false>>();
    case io::GgmlType::Q5_1:
      return fn.template operator()<Block32Layout<24, 8, 4, true, 0, false>>();
    case io::GgmlType::Q8_0:
      return fn.template operator()<Block32Layout<34, 2, 0, false, 0, true>>();
    default:
      return other;
  }
}

// Rows ahead of the one being computed that rows_each prefetches.
constexpr int kPrefetchRows = 4;

// Prefetches `bytes` bytes from p into the cache, one line at a time.
static inline void prefetch(const uint8_t* p, size_t bytes) {
  for (size_t o = 0; o < bytes; o += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(p + o), _MM_HINT_T0);
  }
}

// A QuantRowsFn for any type: the row dot per row, the row kPrefetchRows ahead prefetched.
template <QuantDotFn kDot>
static void rows_each(const uint8_t* w, size_t rb, int rows, const void* act, int k, float* y) {
  for (int r = 0; r < rows; ++r, w += rb) {
    prefetch(w + kPrefetchRows * rb, rb);
    y[r] = kDot(w, act, k);
  }
}

}  // namespace flashnorm::kernels::cpu::detail::x86
