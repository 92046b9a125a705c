// AVX-512 (F + BW + VL + DQ, with FMA and F16C) dot products of one weight row in GGML blocks with
// one activation row, and multi-row kernels (quant_dot.h); built with -mavx512f -mavx512bw
// -mavx512vl -mavx512dq -mfma -mf16c for this file only and called only when the CPU has all of
// them (quant_isa_available(kAvx512)). Same arithmetic as quant_dot_scalar.cpp: a block's 32 codes
// widened to the 32 16-bit lanes of one register and multiplied with the activation block's 32
// int16 by vpmaddwd (exact: at most 2 * 128 * 32767 per pair; plain AVX512BW, no VNNI), the
// integer sums exact in int32, scales in fp32. F32, F16 and BF16 weights take the AVX2 functions.
// Everything here has internal linkage (quant_dot_x86.h's helpers too): no function compiled with
// AVX-512 can stand in for another file's (an inline function's out-of-line copy is chosen by the
// linker).
// GCC 12's AVX-512 headers initialize their "undefined" vectors from themselves (GCC bug 105593):
// false -Wuninitialized warnings inside the headers wherever an intrinsic is inlined.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#include "quant_dot.h"
#include "quant_dot_x86.h"

namespace flashnorm::kernels::cpu::detail {
namespace {

using namespace x86;  // f16, load32, hsum, q6_k_codes, rows_each (this file's own copies)

constexpr int QK = 32;
constexpr int QK_K = 256;

// The sum of the 16 lanes.
float hsum(__m512 v) {
  return x86::hsum(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
}

// The activation block's 32 codes, 16-bit lane j = element j.
__m512i act_codes(const ActBlock* a) { return _mm512_loadu_si512(a->qs); }

// 16 int32 lanes (lane i: elements 2i and 2i + 1) of 32 codes in 16-bit lanes times a block's
// activations.
__m512i block_isum(__m512i codes, const ActBlock* a) {
  return _mm512_madd_epi16(codes, act_codes(a));
}

// The 32 codes of one block of the block32 types in 16-bit lanes (lane j = element j), minus the
// type's zero: Q8_0's signed bytes, or the nibbles (element j the low nibble of byte j, element
// j + 16 its high nibble) plus 16 where bit j of the u32 qh is set (Q5_0, Q5_1).
template <class L>
__m512i block32_codes(const uint8_t* w) {
  if constexpr (L::kQ8) {
    return _mm512_cvtepi8_epi16(load32(w + 2));
  } else {
    const __m128i m4 = _mm_set1_epi8(0x0f);
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + L::kQsOff));
    // bytes 0-15: low nibbles (elements 0-15), bytes 16-31: high nibbles (elements 16-31)
    const __m256i nib =
        _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m4), _mm_and_si128(q, m4));
    __m512i v = _mm512_cvtepu8_epi16(nib);
    if constexpr (L::kQhOff > 0) {
      // mask bit j selects 16-bit lane j
      const __mmask32 h = static_cast<__mmask32>(load_u32(w + L::kQhOff));
      v = _mm512_mask_add_epi16(v, h, v, _mm512_set1_epi16(16));
    }
    if constexpr (L::kZero != 0) v = _mm512_sub_epi16(v, _mm512_set1_epi16(L::kZero));
    return v;
  }
}

// The block32 types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0), one row: acc += d_w a.d sum((q - zero) qs)
// per block; for the types with a min, m a.s summed beside it.
template <class L>
float dot_block32(const uint8_t* w, const void* act, int k) {
  const ActBlock* a = static_cast<const ActBlock*>(act);
  __m512 acc = _mm512_setzero_ps();
  float off = 0;
  for (int b = 0; b < k / QK; ++b, w += L::kBytes, ++a) {
    const __m512i isum = block_isum(block32_codes<L>(w), a);
    acc = _mm512_fmadd_ps(_mm512_set1_ps(f16(w) * a->d), _mm512_cvtepi32_ps(isum), acc);
    if constexpr (L::kHasMin) off += f16(w + 2) * a->s;
  }
  return hsum(acc) + off;
}

// Rows per group of the block32 multi-row kernel.
constexpr int kGroupRows = 8;

// Lane r (r < 8) of the result: the sum of v[r]'s 16 int32 lanes (exact: a block's integer sum is
// below 2^31 in magnitude).
__m256i reduce8(const __m512i* v) {
  // per 128-bit quarter: unpack lo/hi of (a, b) added = [a0+a2, b0+b2, a1+a3, b1+b3]
  auto pair = [](__m512i a, __m512i b) {
    return _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
  };
  // two pairs per quarter: [sum a, sum b, sum c, sum d] of that quarter
  auto quad = [](__m512i ab, __m512i cd) {
    return _mm512_add_epi32(_mm512_unpacklo_epi64(ab, cd), _mm512_unpackhi_epi64(ab, cd));
  };
  const __m512i q0 = quad(pair(v[0], v[1]), pair(v[2], v[3]));  // quarters: rows 0-3
  const __m512i q1 = quad(pair(v[4], v[5]), pair(v[6], v[7]));  // quarters: rows 4-7
  // quarters [q0.0 + q0.1, q0.2 + q0.3, q1.0 + q1.1, q1.2 + q1.3]
  const __m512i s =
      _mm512_add_epi32(_mm512_shuffle_i32x4(q0, q1, 0x88), _mm512_shuffle_i32x4(q0, q1, 0xdd));
  // quarters [s.0 + s.1, s.2 + s.3, (again)]: rows 0-3 then rows 4-7
  const __m512i t =
      _mm512_add_epi32(_mm512_shuffle_i32x4(s, s, 0x88), _mm512_shuffle_i32x4(s, s, 0xdd));
  return _mm512_castsi512_si256(t);
}

// The f16 at p + r * rb for r < 8, as 8 floats.
__m256 f16x8(const uint8_t* p, size_t rb) {
  alignas(16) uint16_t h[kGroupRows];
  for (int r = 0; r < kGroupRows; ++r) h[r] = load_u16(p + r * rb);
  return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(h)));
}

// Eight rows at a time of the block32 types: per block, each row's 16 int32 lanes summed to one
// exact integer (reduce8), the eight converted to fp32 and scaled by the rows' d (one f16
// conversion for the eight) times the block's activation scale; the min terms (m * s) of
// Q4_1/Q5_1 accumulated eight rows at once beside. The next eight rows (past the end of this
// call's rows too: the next task's; a prefetch never faults) are prefetched non-temporally a few
// cache lines per block, as the AVX2 kernel does (the distance is not measured on an AVX-512 CPU).
// Remaining rows: the row dot.
template <class L>
void rows_block32(const uint8_t* w, size_t rb, int rows, const void* act, int k, float* y) {
  const ActBlock* a0 = static_cast<const ActBlock*>(act);
  const int nb = k / QK;
  int r = 0;
  for (; r + kGroupRows <= rows; r += kGroupRows, w += kGroupRows * rb) {
    const uint8_t* pf = w + kGroupRows * rb;
    const int pf_lines = int((kGroupRows * rb + 63) / 64);
    const int pf_step = (pf_lines + nb - 1) / nb;
    __m256 acc = _mm256_setzero_ps();
    __m256 off = _mm256_setzero_ps();
    const ActBlock* a = a0;
    const uint8_t* wb = w;  // block b of row 0; row i's at wb + i * rb
    for (int b = 0; b < nb; ++b, ++a, wb += L::kBytes) {
      for (int i = 0; i < pf_step; ++i) {
        _mm_prefetch(reinterpret_cast<const char*>(pf + (size_t(b) * pf_step + i) * 64),
                     _MM_HINT_NTA);
      }
      const __m512i x = act_codes(a);
      __m512i isum[kGroupRows];
      for (int i = 0; i < kGroupRows; ++i) {
        isum[i] = _mm512_madd_epi16(block32_codes<L>(wb + i * rb), x);
      }
      const __m256 s = _mm256_cvtepi32_ps(reduce8(isum));
      acc = _mm256_fmadd_ps(s, _mm256_mul_ps(f16x8(wb, rb), _mm256_set1_ps(a->d)), acc);
      if constexpr (L::kHasMin) off = _mm256_fmadd_ps(f16x8(wb + 2, rb), _mm256_set1_ps(a->s), off);
    }
    if constexpr (L::kHasMin) acc = _mm256_add_ps(acc, off);
    _mm256_storeu_ps(y + r, acc);
  }
  for (; r < rows; ++r, w += rb) {
    y[r] = dot_block32<L>(w, act, k);
  }
}

// Q4_K / Q5_K (scalar k_superblock in quant_dot_scalar.cpp): per 64 elements, the low nibbles are
// sub-block 2c and the high nibbles sub-block 2c + 1, each one activation block; Q5_K's fifth bits
// are bits 2c and 2c + 1 of qh[l] for element l.
template <bool kQ5>
float dot_k45(const uint8_t* w, const void* act, int k) {
  const ActBlock* a = static_cast<const ActBlock*>(act);
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m512i sixteen = _mm512_set1_epi16(16);
  __m512 acc = _mm512_setzero_ps();
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
      __m512i lo = _mm512_cvtepu8_epi16(_mm256_and_si256(q, m4));
      __m512i hi = _mm512_cvtepu8_epi16(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
      if constexpr (kQ5) {
        // mask bit l: bit 2c (2c + 1) of byte l of qh
        const __mmask32 h0 = _mm256_test_epi8_mask(qh, _mm256_set1_epi8(char(1 << (2 * c))));
        const __mmask32 h1 = _mm256_test_epi8_mask(qh, _mm256_set1_epi8(char(2 << (2 * c))));
        lo = _mm512_mask_add_epi16(lo, h0, lo, sixteen);
        hi = _mm512_mask_add_epi16(hi, h1, hi, sixteen);
      }
      acc = _mm512_fmadd_ps(_mm512_set1_ps(d * static_cast<float>(sc0) * a[0].d),
                            _mm512_cvtepi32_ps(block_isum(lo, a)), acc);
      acc = _mm512_fmadd_ps(_mm512_set1_ps(d * static_cast<float>(sc1) * a[1].d),
                            _mm512_cvtepi32_ps(block_isum(hi, a + 1)), acc);
      off -= dmin * static_cast<float>(m0) * a[0].s + dmin * static_cast<float>(m1) * a[1].s;
    }
  }
  return hsum(acc) + off;
}

// Q6_K (scalar dot_q6_k in quant_dot_scalar.cpp): per half of 128 elements, four 32-element
// activation blocks whose 6-bit codes come from ql (low or high nibbles) and qh (2-bit fields),
// each block's two 16-element groups with their own scale: the products' int32 lanes 0-7 are
// elements 0-15, lanes 8-15 elements 16-31, scaled by a blend of the two groups' scales.
float dot_q6_k(const uint8_t* w, const void* act, int k) {
  const ActBlock* a = static_cast<const ActBlock*>(act);
  const __m512i z32 = _mm512_set1_epi16(32);
  __m512 acc = _mm512_setzero_ps();
  for (int b = 0; b < k / QK_K; ++b, w += 210, a += 8) {
    const int8_t* sc = reinterpret_cast<const int8_t*>(w + 192);
    const float d = f16(w + 208);
    for (int h = 0; h < 2; ++h) {
      __m256i q[4];  // byte l of q[i]: element 32 i + l of this half
      q6_k_codes(w, h, q);
      for (int i = 0; i < 4; ++i) {
        const ActBlock* x = a + 4 * h + i;
        const int g = 8 * h + 2 * i;  // the two 16-element groups of these 32 elements
        const __m512i codes = _mm512_sub_epi16(_mm512_cvtepu8_epi16(q[i]), z32);
        const __m512 scale =
            _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(d * static_cast<float>(sc[g]) * x->d),
                                 _mm512_set1_ps(d * static_cast<float>(sc[g + 1]) * x->d));
        acc = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(block_isum(codes, x)), acc);
      }
    }
  }
  return hsum(acc);
}

}  // namespace

QuantRowsFn avx512_rows(io::GgmlType type) {
  switch (type) {
    case io::GgmlType::Q4_K:
      return rows_each<dot_k45<false>>;
    case io::GgmlType::Q5_K:
      return rows_each<dot_k45<true>>;
    case io::GgmlType::Q6_K:
      return rows_each<dot_q6_k>;
    default:  // the block32 types, else AVX2's
      return for_block32<QuantRowsFn>(
          type, []<class L>() -> QuantRowsFn { return rows_block32<L>; }, avx2_rows(type));
  }
}

const QuantDots& avx512_dots() {
  static const QuantDots t = [] {
    auto block32 = [](io::GgmlType t) {
      return for_block32<QuantDotFn>(
          t, []<class L>() -> QuantDotFn { return dot_block32<L>; }, nullptr);
    };
    QuantDots d = avx2_dots();  // F32, F16, BF16 stay AVX2
    d.q4_0 = block32(io::GgmlType::Q4_0);
    d.q4_1 = block32(io::GgmlType::Q4_1);
    d.q5_0 = block32(io::GgmlType::Q5_0);
    d.q5_1 = block32(io::GgmlType::Q5_1);
    d.q8_0 = block32(io::GgmlType::Q8_0);
    d.q4_k = dot_k45<false>;
    d.q5_k = dot_k45<true>;
    d.q6_k = dot_q6_k;
    return d;
  }();
  return t;
}

}  // namespace flashnorm::kernels::cpu::detail
