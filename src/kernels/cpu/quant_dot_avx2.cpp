// AVX2 + FMA + F16C dot products of one weight row in GGML blocks with one activation row
// (quant_dot.h); built with -mavx2 -mfma -mf16c for this file only and called only when the CPU
// has all three (quant_isa_available). Same arithmetic as quant_dot_scalar.cpp: each block's
// codes widened to 16 bits and multiplied with the 16-bit activations by vpmaddwd (exact: at most
// 2 * 128 * 32767 per pair), scales in fp32.
#include <immintrin.h>

#include "quant_dot.h"
#include "quant_dot_x86.h"

namespace flashnorm::kernels::cpu::detail {
namespace {

using namespace x86;  // f16, load32, hsum, q6_k_codes, rows_each (this file's own copies)

constexpr int QK = 32;
constexpr int QK_K = 256;

// 32 bytes, 0x10 where bit j of qh is set (byte j), else 0.
__m256i fifth_bits(uint32_t qh) {
  const __m256i pick = _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101,
                                          0x0202020202020202, 0x0303030303030303);
  const __m256i bits = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));
  __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(qh)), pick);
  b = _mm256_cmpeq_epi8(_mm256_and_si256(b, bits), bits);
  return _mm256_and_si256(b, _mm256_set1_epi8(0x10));
}

// 8 int32 partial sums of 32 signed 8-bit codes (byte j = element j) times a block's activations.
__m256i block_isum(__m256i q8, const int16_t* x) {
  const __m256i lo = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(q8));
  const __m256i hi = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(q8, 1));
  return _mm256_add_epi32(_mm256_madd_epi16(lo, load32(x)), _mm256_madd_epi16(hi, load32(x + 16)));
}

float dot_f32(const uint8_t* w, const void* act, int k) {
  const float* x = static_cast<const float*>(act);
  const float* wf = reinterpret_cast<const float*>(w);
  __m256 acc = _mm256_setzero_ps();
  int i = 0;
  for (; i + 8 <= k; i += 8)
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(wf + i), _mm256_loadu_ps(x + i), acc);
  float s = hsum(acc);
  for (; i < k; ++i) s += wf[i] * x[i];
  return s;
}

float dot_f16(const uint8_t* w, const void* act, int k) {
  const float* x = static_cast<const float*>(act);
  __m256 acc = _mm256_setzero_ps();
  int i = 0;
  for (; i + 8 <= k; i += 8) {
    const __m256 wv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2 * i)));
    acc = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + i), acc);
  }
  float s = hsum(acc);
  for (; i < k; ++i) s += f16(w + 2 * i) * x[i];
  return s;
}

float dot_bf16(const uint8_t* w, const void* act, int k) {
  const float* x = static_cast<const float*>(act);
  __m256 acc = _mm256_setzero_ps();
  int i = 0;
  for (; i + 8 <= k; i += 8) {
    const __m256i h =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2 * i)));
    acc =
        _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(h, 16)), _mm256_loadu_ps(x + i), acc);
  }
  float s = hsum(acc);
  for (; i < k; ++i) {
    const uint32_t b = static_cast<uint32_t>(load_u16(w + 2 * i)) << 16;
    float v;
    std::memcpy(&v, &b, 4);
    s += v * x[i];
  }
  return s;
}

// 8 int32 lanes of the block sum of one 32-element block of the block32 types (the codes minus
// their zero, or Q8_0's signed bytes) with the activation block's two halves x0 (elements 0-15)
// and x1 (16-31).
template <class L>
__m256i block32_isum(const uint8_t* w, __m256i x0, __m256i x1) {
  if constexpr (L::kQ8) {
    const __m256i lo =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2)));
    const __m256i hi =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 18)));
    return _mm256_add_epi32(_mm256_madd_epi16(lo, x0), _mm256_madd_epi16(hi, x1));
  } else {
    const __m256i m4 = _mm256_set1_epi16(0x0f);
    const __m256i v =
        _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + L::kQsOff)));
    __m256i lo = _mm256_and_si256(v, m4);
    __m256i hi = _mm256_srli_epi16(v, 4);
    if constexpr (L::kQhOff > 0) {
      const __m256i h = fifth_bits(load_u32(w + L::kQhOff));
      lo = _mm256_or_si256(lo, _mm256_cvtepu8_epi16(_mm256_castsi256_si128(h)));
      hi = _mm256_or_si256(hi, _mm256_cvtepu8_epi16(_mm256_extracti128_si256(h, 1)));
    }
    if constexpr (L::kZero != 0) {
      lo = _mm256_sub_epi16(lo, _mm256_set1_epi16(L::kZero));
      hi = _mm256_sub_epi16(hi, _mm256_set1_epi16(L::kZero));
    }
    return _mm256_add_epi32(_mm256_madd_epi16(lo, x0), _mm256_madd_epi16(hi, x1));
  }
}

// The 32-element nibble types (L::kQ8 false): acc += d_w a.d sum((q - zero) qs) per block; for
// the types with a min, m a.s summed beside it.
template <class L>
float dot_nibbles(const uint8_t* w, const void* act, int k) {
  const ActBlock* a = static_cast<const ActBlock*>(act);
  __m256 acc = _mm256_setzero_ps();
  float off = 0;
  for (int b = 0; b < k / QK; ++b, w += L::kBytes, ++a) {
    const __m256i isum = block32_isum<L>(w, load32(a->qs), load32(a->qs + 16));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(w) * a->d), _mm256_cvtepi32_ps(isum), acc);
    if constexpr (L::kHasMin) off += f16(w + 2) * a->s;
  }
  return hsum(acc) + off;
}

float dot_q8_0(const uint8_t* w, const void* act, int k) {
  const ActBlock* a = static_cast<const ActBlock*>(act);
  __m256 acc = _mm256_setzero_ps();
  for (int b = 0; b < k / QK; ++b, w += 34, ++a) {
    const __m256 p = _mm256_cvtepi32_ps(block_isum(load32(w + 2), a->qs));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(w) * a->d), p, acc);
  }
  return hsum(acc);
}

// Q4_K / Q5_K (scalar k_superblock in quant_dot_scalar.cpp): per 64 elements, the low nibbles are
// sub-block 2c and the high nibbles sub-block 2c + 1, each one activation block.
template <bool kQ5>
float dot_k45(const uint8_t* w, const void* act, int k) {
  const ActBlock* a = static_cast<const ActBlock*>(act);
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i one = _mm256_set1_epi8(1);
  __m256 acc = _mm256_setzero_ps();
  float off = 0;
  for (int b = 0; b < k / QK_K; ++b, w += kQ5 ? 176 : 144) {
    const float d = f16(w), dmin = f16(w + 2);
    const uint8_t* ql = w + (kQ5 ? 48 : 16);
    const __m256i qh = kQ5 ? load32(w + 16) : _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c, ql += 32, a += 2) {
      int sc0, m0, sc1, m1;
      k_scale_min(2 * c, w + 4, &sc0, &m0);
      k_scale_min(2 * c + 1, w + 4, &sc1, &m1);
      const __m256i q = load32(ql);
      __m256i lo = _mm256_and_si256(q, m4);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
      if constexpr (kQ5) {
        const __m256i h0 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), one);
        const __m256i h1 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * c + 1), one);
        lo = _mm256_or_si256(lo, _mm256_slli_epi16(h0, 4));
        hi = _mm256_or_si256(hi, _mm256_slli_epi16(h1, 4));
      }
      acc = _mm256_fmadd_ps(_mm256_set1_ps(d * static_cast<float>(sc0) * a[0].d),
                            _mm256_cvtepi32_ps(block_isum(lo, a[0].qs)), acc);
      acc = _mm256_fmadd_ps(_mm256_set1_ps(d * static_cast<float>(sc1) * a[1].d),
                            _mm256_cvtepi32_ps(block_isum(hi, a[1].qs)), acc);
      off -= dmin * static_cast<float>(m0) * a[0].s + dmin * static_cast<float>(m1) * a[1].s;
    }
  }
  return hsum(acc) + off;
}

float dot_q6_k(const uint8_t* w, const void* act, int k) {
  const ActBlock* a = static_cast<const ActBlock*>(act);
  const __m256i z32 = _mm256_set1_epi8(32);
  __m256 acc = _mm256_setzero_ps();
  for (int b = 0; b < k / QK_K; ++b, w += 210, a += 8) {
    const int8_t* sc = reinterpret_cast<const int8_t*>(w + 192);
    const float d = f16(w + 208);
    for (int h = 0; h < 2; ++h) {
      __m256i q[4];
      q6_k_codes(w, h, q);
      for (int i = 0; i < 4; ++i) {
        const ActBlock& x = a[4 * h + i];
        const int g = 8 * h + 2 * i;  // the two 16-element groups of these 32 elements
        const __m256i qs = _mm256_sub_epi8(q[i], z32);
        const __m256i lo = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(qs));
        const __m256i hi = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(qs, 1));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d * static_cast<float>(sc[g]) * x.d),
                              _mm256_cvtepi32_ps(_mm256_madd_epi16(lo, load32(x.qs))), acc);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d * static_cast<float>(sc[g + 1]) * x.d),
                              _mm256_cvtepi32_ps(_mm256_madd_epi16(hi, load32(x.qs + 16))), acc);
      }
    }
  }
  return hsum(acc);
}

// Four f16 values (one per row) as four floats.
__m128 f16x4(const uint8_t* p0, const uint8_t* p1, const uint8_t* p2, const uint8_t* p3) {
  const uint64_t v = uint64_t(load_u16(p0)) | uint64_t(load_u16(p1)) << 16 |
                     uint64_t(load_u16(p2)) << 32 | uint64_t(load_u16(p3)) << 48;
  return _mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<long long>(v)));
}

// Four rows at a time of the block32 types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0): per block, the four
// rows' 8-lane sums converted to fp32 (each lane a sum of 4 products, exact: below 2^24) and
// reduced by two levels of horizontal adds to [r0 r1 r2 r3 | r0 r1 r2 r3], scaled by the four
// rows' d (one f16 conversion for the four) times the block's activation scale; the min terms
// (m * s) of Q4_1/Q5_1 accumulated four rows at once beside. Remaining rows: the row dot.
template <class L>
void rows_block32(const uint8_t* w, size_t rb, int rows, const void* act, int k, float* y) {
  const ActBlock* a0 = static_cast<const ActBlock*>(act);
  const int nb = k / QK;
  int r = 0;
  for (; r + 4 <= rows; r += 4, w += 4 * rb) {
    // the next four rows (past the end of this call's rows too: the next task's; a prefetch never
    // faults), a few cache lines per block rather than all at once, non-temporal (read once per
    // step). Measured on Gemma 3's Q8_0 head (2 threads, bench/probes/quant_matmul_probe): a burst
    // of 40-odd T0 prefetches 8 rows ahead at the start of each group, 9.6 ms per token; spread,
    // 7.8 ms; spread 4 rows ahead, 7.3 ms; NTA, 7.0 ms; no prefetch, 11.7 ms.
    const uint8_t* pf = w + kPrefetchRows * rb;
    const int pf_lines = int((4 * rb + 63) / 64);
    const int pf_step = (pf_lines + nb - 1) / nb;
    const uint8_t* w0 = w;
    const uint8_t* w1 = w + rb;
    const uint8_t* w2 = w + 2 * rb;
    const uint8_t* w3 = w + 3 * rb;
    __m256 acc = _mm256_setzero_ps();
    __m128 off = _mm_setzero_ps();
    const ActBlock* a = a0;
    for (int b = 0; b < nb;
         ++b, ++a, w0 += L::kBytes, w1 += L::kBytes, w2 += L::kBytes, w3 += L::kBytes) {
      for (int i = 0; i < pf_step; ++i) {
        _mm_prefetch(reinterpret_cast<const char*>(pf + (size_t(b) * pf_step + i) * 64),
                     _MM_HINT_NTA);
      }
      const __m256i x0 = load32(a->qs), x1 = load32(a->qs + 16);
      const __m256 s0 = _mm256_cvtepi32_ps(block32_isum<L>(w0, x0, x1));
      const __m256 s1 = _mm256_cvtepi32_ps(block32_isum<L>(w1, x0, x1));
      const __m256 s2 = _mm256_cvtepi32_ps(block32_isum<L>(w2, x0, x1));
      const __m256 s3 = _mm256_cvtepi32_ps(block32_isum<L>(w3, x0, x1));
      const __m256 s = _mm256_hadd_ps(_mm256_hadd_ps(s0, s1), _mm256_hadd_ps(s2, s3));
      const __m128 d = _mm_mul_ps(f16x4(w0, w1, w2, w3), _mm_set1_ps(a->d));
      acc = _mm256_fmadd_ps(s, _mm256_set_m128(d, d), acc);
      if constexpr (L::kHasMin) {
        off = _mm_fmadd_ps(f16x4(w0 + 2, w1 + 2, w2 + 2, w3 + 2), _mm_set1_ps(a->s), off);
      }
    }
    __m128 res = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    if constexpr (L::kHasMin) res = _mm_add_ps(res, off);
    _mm_storeu_ps(y + r, res);
  }
  for (; r < rows; ++r, w += rb) {
    if constexpr (L::kQ8) {
      y[r] = dot_q8_0(w, act, k);
    } else {
      y[r] = dot_nibbles<L>(w, act, k);
    }
  }
}

}  // namespace

namespace {

// 8 floats d * float(q_i) + m (mul, then add: io::dequantize's rounding; this file is built with
// -ffp-contract=off) from 8 int32 codes.
inline void store8(float* y, __m256i q, __m256 d, __m256 m, bool with_m) {
  const __m256 v = _mm256_mul_ps(d, _mm256_cvtepi32_ps(q));
  _mm256_storeu_ps(y, with_m ? _mm256_add_ps(v, m) : v);
}
// 16 signed bytes (a 128-bit vector) as 16 floats d * q + m at y.
inline void store16_i8(float* y, __m128i q, __m256 d, __m256 m, bool with_m) {
  store8(y, _mm256_cvtepi8_epi32(q), d, m, with_m);
  store8(y + 8, _mm256_cvtepi8_epi32(_mm_srli_si128(q, 8)), d, m, with_m);
}

}  // namespace

bool dequantize_avx2(io::GgmlType type, const uint8_t* w, size_t nb, float* y) {
  const __m128i m4 = _mm_set1_epi8(0x0f);
  const __m256 zero = _mm256_setzero_ps();
  switch (type) {
    case io::GgmlType::Q4_0:
    case io::GgmlType::Q4_1: {
      const bool q41 = type == io::GgmlType::Q4_1;
      const size_t bytes = q41 ? 20 : 18;
      for (size_t b = 0; b < nb; ++b, w += bytes, y += QK) {
        const __m256 d = _mm256_set1_ps(f16(w));
        const __m256 m = q41 ? _mm256_set1_ps(f16(w + 2)) : zero;
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + (q41 ? 4 : 2)));
        __m128i lo = _mm_and_si128(q, m4), hi = _mm_and_si128(_mm_srli_epi16(q, 4), m4);
        if (!q41) {
          lo = _mm_sub_epi8(lo, _mm_set1_epi8(8));
          hi = _mm_sub_epi8(hi, _mm_set1_epi8(8));
        }
        store16_i8(y, lo, d, m, q41);
        store16_i8(y + 16, hi, d, m, q41);
      }
      return true;
    }
    case io::GgmlType::Q5_0: {
      for (size_t b = 0; b < nb; ++b, w += 22, y += QK) {
        const __m256 d = _mm256_set1_ps(f16(w));
        const __m256i h = fifth_bits(load_u32(w + 2));  // byte j: 0x10 where bit j is set
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 6));
        const __m128i sixteen = _mm_set1_epi8(16);
        const __m128i lo =
            _mm_sub_epi8(_mm_or_si128(_mm_and_si128(q, m4), _mm256_castsi256_si128(h)), sixteen);
        const __m128i hi = _mm_sub_epi8(
            _mm_or_si128(_mm_and_si128(_mm_srli_epi16(q, 4), m4), _mm256_extracti128_si256(h, 1)),
            sixteen);
        store16_i8(y, lo, d, zero, false);
        store16_i8(y + 16, hi, d, zero, false);
      }
      return true;
    }
    case io::GgmlType::Q8_0: {
      for (size_t b = 0; b < nb; ++b, w += 34, y += QK) {
        const __m256 d = _mm256_set1_ps(f16(w));
        store16_i8(y, _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2)), d, zero, false);
        store16_i8(y + 16, _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 18)), d, zero,
                   false);
      }
      return true;
    }
    case io::GgmlType::Q4_K: {
      for (size_t b = 0; b < nb; ++b, w += 144) {
        const float d = f16(w), dmin = f16(w + 2);
        const uint8_t* q = w + 16;
        for (int c = 0; c < 4; ++c, q += 32, y += 64) {
          int sc0, m0, sc1, m1;
          k_scale_min(2 * c, w + 4, &sc0, &m0);
          k_scale_min(2 * c + 1, w + 4, &sc1, &m1);
          // d1 * q - m1 as io::dequantize: x = d1 * q + (-m1) rounds the same (negation is exact)
          const __m256 d1 = _mm256_set1_ps(d * float(sc0)),
                       n1 = _mm256_set1_ps(-(dmin * float(m0)));
          const __m256 d2 = _mm256_set1_ps(d * float(sc1)),
                       n2 = _mm256_set1_ps(-(dmin * float(m1)));
          for (int h = 0; h < 2; ++h) {
            const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16 * h));
            store16_i8(y + 16 * h, _mm_and_si128(v, m4), d1, n1, true);
            store16_i8(y + 32 + 16 * h, _mm_and_si128(_mm_srli_epi16(v, 4), m4), d2, n2, true);
          }
        }
      }
      return true;
    }
    case io::GgmlType::Q6_K: {
      const __m256i z32 = _mm256_set1_epi8(32);
      for (size_t b = 0; b < nb; ++b, w += 210) {
        const float d = f16(w + 208);
        const int8_t* sc = reinterpret_cast<const int8_t*>(w + 192);
        for (int h = 0; h < 2; ++h, y += 128, sc += 8) {
          __m256i q[4];
          q6_k_codes(w, h, q);
          for (int s = 0; s < 4; ++s) {
            const __m256i v = _mm256_sub_epi8(q[s], z32);
            // (d * sc) * q, as io::dequantize
            const __m256 d0 = _mm256_set1_ps(d * static_cast<float>(sc[2 * s]));
            const __m256 d1 = _mm256_set1_ps(d * static_cast<float>(sc[2 * s + 1]));
            store16_i8(y + 32 * s, _mm256_castsi256_si128(v), d0, zero, false);
            store16_i8(y + 32 * s + 16, _mm256_extracti128_si256(v, 1), d1, zero, false);
          }
        }
      }
      return true;
    }
    default:
      return false;
  }
}

void quantize_act_row_avx2(const float* x, int k, ActBlock* out) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 lim = _mm256_set1_ps(32767.0f), nlim = _mm256_set1_ps(-32767.0f);
  for (int b = 0; b < k / QK; ++b, x += QK, ++out) {
    __m256 v[4];
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(x + 8 * i);
      // |x| first: a NaN there leaves m as it was, as std::max(amax, |x|) does
      m = _mm256_max_ps(_mm256_andnot_ps(sign, v[i]), m);
    }
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    const float d = _mm_cvtss_f32(h) / 32767.0f;
    const __m256 id = _mm256_set1_ps(d >= 1.17549435e-38f ? 1.0f / d : 0.0f);  // FLT_MIN: the rule
    __m256i q[4];
    for (int i = 0; i < 4; ++i) {
      // clamped, then rounded to nearest even (the default MXCSR mode, as nearbyint)
      q[i] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(v[i], id), nlim), lim));
    }
    const __m256i sum8 =
        _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum8), _mm256_extracti128_si256(sum8, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
    // packs interleaves 128-bit lanes ([q0 lo, q1 lo, q0 hi, q1 hi]); the permute restores order
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out->qs),
                        _mm256_permute4x64_epi64(_mm256_packs_epi32(q[0], q[1]), 0xd8));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out->qs + 16),
                        _mm256_permute4x64_epi64(_mm256_packs_epi32(q[2], q[3]), 0xd8));
    out->d = d;
    out->s = d * static_cast<float>(_mm_cvtsi128_si32(s4));
  }
}

QuantRowsFn avx2_rows(io::GgmlType type) {
  switch (type) {
    case io::GgmlType::Q4_K:
      return rows_each<dot_k45<false>>;
    case io::GgmlType::Q5_K:
      return rows_each<dot_k45<true>>;
    case io::GgmlType::Q6_K:
      return rows_each<dot_q6_k>;
    default:  // the block32 types, else none
      return for_block32<QuantRowsFn>(
          type, []<class L>() -> QuantRowsFn { return rows_block32<L>; }, nullptr);
  }
}

const QuantDots& avx2_dots() {
  auto block32 = [](io::GgmlType t) {
    return for_block32<QuantDotFn>(
        t,
        []<class L>() -> QuantDotFn {
          if constexpr (L::kQ8) {
            return dot_q8_0;
          } else {
            return dot_nibbles<L>;
          }
        },
        nullptr);
  };
  using T = io::GgmlType;
  static const QuantDots t{dot_f32,          dot_f16,          dot_bf16,         block32(T::Q4_0),
                           block32(T::Q4_1), block32(T::Q5_0), block32(T::Q5_1), block32(T::Q8_0),
                           dot_k45<false>,   dot_k45<true>,    dot_q6_k};
  return t;
}

}  // namespace flashnorm::kernels::cpu::detail
