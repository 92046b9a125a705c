// Portable dot products of one weight row in GGML blocks with one activation row (quant_dot.h).
// Block layouts: ggml-common.h (block_q4_0 ... block_q6_K), as io/dequant.cpp decodes them.
#include "flashnorm/half.h"
#include "quant_dot.h"

namespace flashnorm::kernels::cpu::detail {
namespace {

constexpr int QK = 32;
constexpr int QK_K = 256;

float f16(const uint8_t* p) { return half::f16_to_f32(load_u16(p)); }

float dot_f32(const uint8_t* w, const void* act, int k) {
  const float* x = static_cast<const float*>(act);
  float s = 0;
  for (int i = 0; i < k; ++i) {
    float v;
    std::memcpy(&v, w + 4 * i, 4);
    s += v * x[i];
  }
  return s;
}

float dot_f16(const uint8_t* w, const void* act, int k) {
  const float* x = static_cast<const float*>(act);
  float s = 0;
  for (int i = 0; i < k; ++i) s += f16(w + 2 * i) * x[i];
  return s;
}

float dot_bf16(const uint8_t* w, const void* act, int k) {
  const float* x = static_cast<const float*>(act);
  float s = 0;
  for (int i = 0; i < k; ++i) s += half::bf16_to_f32(load_u16(w + 2 * i)) * x[i];
  return s;
}

// sum((q - zero) * a.qs) of a 32-element block whose 4-bit codes sit in 16 bytes (element j in
// the low nibble of byte j, element j + 16 in the high nibble), with a fifth bit per element from
// `qh` (bit j for element j) when has_qh. At most 32 * 31 * 32767 in magnitude.
int nibble_block_isum(const uint8_t* qs, uint32_t qh, bool has_qh, int zero, const int16_t* x) {
  int s = 0;
  for (int j = 0; j < QK / 2; ++j) {
    int lo = qs[j] & 0x0f, hi = qs[j] >> 4;
    if (has_qh) {
      lo |= static_cast<int>((qh >> j) & 1) << 4;
      hi |= static_cast<int>((qh >> (j + 16)) & 1) << 4;
    }
    s += (lo - zero) * x[j] + (hi - zero) * x[j + QK / 2];
  }
  return s;
}

// block_q4_0 {f16 d; u8 qs[16]}: w = d (q - 8).
float dot_q4_0(const uint8_t* w, const void* act, int k) {
  const ActBlock* a = static_cast<const ActBlock*>(act);
  float s = 0;
  for (int b = 0; b < k / QK; ++b, w += 18, ++a) {
    s += f16(w) * a->d * static_cast<float>(nibble_block_isum(w + 2, 0, false, 8, a->qs));
  }
  return s;
}

// block_q4_1 {f16 d; f16 m; u8 qs[16]}: w = d q + m; sum = d a.d sum(q qs) + m a.s.
float dot_q4_1(const uint8_t* w, const void* act, int k) {
  const ActBlock* a = static_cast<const ActBlock*>(act);
  float s = 0;
  for (int b = 0; b < k / QK; ++b, w += 20, ++a) {
    const int isum = nibble_block_isum(w + 4, 0, false, 0, a->qs);
    s += f16(w) * a->d * static_cast<float>(isum) + f16(w + 2) * a->s;
  }
  return s;
}

// block_q5_0 {f16 d; u32 qh; u8 qs[16]}: w = d (q - 16).
float dot_q5_0(const uint8_t* w, const void* act, int k) {
  const ActBlock* a = static_cast<const ActBlock*>(act);
  float s = 0;
  for (int b = 0; b < k / QK; ++b, w += 22, ++a) {
    const int isum = nibble_block_isum(w + 6, load_u32(w + 2), true, 16, a->qs);
    s += f16(w) * a->d * static_cast<float>(isum);
  }
  return s;
}

// block_q5_1 {f16 d; f16 m; u32 qh; u8 qs[16]}: w = d q + m.
float dot_q5_1(const uint8_t* w, const void* act, int k) {
  const ActBlock* a = static_cast<const ActBlock*>(act);
  float s = 0;
  for (int b = 0; b < k / QK; ++b, w += 24, ++a) {
    const int isum = nibble_block_isum(w + 8, load_u32(w + 4), true, 0, a->qs);
    s += f16(w) * a->d * static_cast<float>(isum) + f16(w + 2) * a->s;
  }
  return s;
}

// block_q8_0 {f16 d; i8 qs[32]}: w = d q.
float dot_q8_0(const uint8_t* w, const void* act, int k) {
  const ActBlock* a = static_cast<const ActBlock*>(act);
  float s = 0;
  for (int b = 0; b < k / QK; ++b, w += 34, ++a) {
    const int8_t* q = reinterpret_cast<const int8_t*>(w + 2);
    int isum = 0;
    for (int j = 0; j < QK; ++j) isum += q[j] * a->qs[j];
    s += f16(w) * a->d * static_cast<float>(isum);
  }
  return s;
}

// Q4_K / Q5_K: 8 sub-blocks of 32 (each one activation block), w = d sc_j q - dmin m_j; sum over
// sub-block j = d sc_j a_j.d sum(q qs) - dmin m_j a_j.s. qh is null for Q4_K.
float k_superblock(const uint8_t* head, const uint8_t* qh, const uint8_t* ql, const ActBlock* a) {
  const float d = f16(head), dmin = f16(head + 2);
  float s = 0;
  for (int c = 0; c < 4; ++c, ql += 32, a += 2) {
    int sc0, m0, sc1, m1;
    k_scale_min(2 * c, head + 4, &sc0, &m0);
    k_scale_min(2 * c + 1, head + 4, &sc1, &m1);
    int s0 = 0, s1 = 0;
    for (int l = 0; l < 32; ++l) {
      int lo = ql[l] & 0x0f, hi = ql[l] >> 4;
      if (qh) {
        lo += ((qh[l] >> (2 * c)) & 1) << 4;
        hi += ((qh[l] >> (2 * c + 1)) & 1) << 4;
      }
      s0 += lo * a[0].qs[l];
      s1 += hi * a[1].qs[l];
    }
    s += d * static_cast<float>(sc0) * a[0].d * static_cast<float>(s0) -
         dmin * static_cast<float>(m0) * a[0].s;
    s += d * static_cast<float>(sc1) * a[1].d * static_cast<float>(s1) -
         dmin * static_cast<float>(m1) * a[1].s;
  }
  return s;
}

// block_q4_K {f16 d; f16 dmin; u8 scales[12]; u8 qs[128]}.
float dot_q4_k(const uint8_t* w, const void* act, int k) {
  const ActBlock* a = static_cast<const ActBlock*>(act);
  float s = 0;
  for (int b = 0; b < k / QK_K; ++b, w += 144) s += k_superblock(w, nullptr, w + 16, a + 8 * b);
  return s;
}

// block_q5_K {f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}.
float dot_q5_k(const uint8_t* w, const void* act, int k) {
  const ActBlock* a = static_cast<const ActBlock*>(act);
  float s = 0;
  for (int b = 0; b < k / QK_K; ++b, w += 176) s += k_superblock(w, w + 16, w + 48, a + 8 * b);
  return s;
}

// block_q6_K {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}: element e has the 6-bit code q_e and
// scale sc[e / 16], w = d sc (q - 32). Within each half of 128: element l (l < 32) is the low
// nibble of ql[l] with qh[l] bits 0-1; l + 32: low nibble of ql[l + 32], bits 2-3; l + 64: high
// nibble of ql[l], bits 4-5; l + 96: high nibble of ql[l + 32], bits 6-7.
float dot_q6_k(const uint8_t* w, const void* act, int k) {
  const ActBlock* a = static_cast<const ActBlock*>(act);
  float s = 0;
  for (int b = 0; b < k / QK_K; ++b, w += 210, a += 8) {
    const int8_t* sc = reinterpret_cast<const int8_t*>(w + 192);
    int group[16] = {};
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = w + 64 * h;
      const uint8_t* qh = w + 128 + 32 * h;
      const ActBlock* x = a + 4 * h;  // elements 128 h + 32 i .. + 31 are block x[i]
      for (int l = 0; l < 32; ++l) {
        const int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        const int g = 8 * h + l / 16;
        group[g] += q1 * x[0].qs[l];
        group[g + 2] += q2 * x[1].qs[l];
        group[g + 4] += q3 * x[2].qs[l];
        group[g + 6] += q4 * x[3].qs[l];
      }
    }
    const float d = f16(w + 208);
    for (int g = 0; g < 16; ++g) {
      s += d * static_cast<float>(sc[g]) * a[g / 2].d * static_cast<float>(group[g]);
    }
  }
  return s;
}

}  // namespace

const QuantDots& scalar_dots() {
  static const QuantDots t{dot_f32,  dot_f16,  dot_bf16, dot_q4_0, dot_q4_1, dot_q5_0,
                           dot_q5_1, dot_q8_0, dot_q4_k, dot_q5_k, dot_q6_k};
  return t;
}

}  // namespace flashnorm::kernels::cpu::detail
