// GGML block formats -> fp32. Each routine follows ggml-quants.c dequantize_row_* and computes
// the same float expressions in the same order as gguf-py quants.py dequantize_blocks, so the
// results are bit-identical to that package (this file is built with -ffp-contract=off so no
// multiply-add is fused). Block layouts: ggml-common.h.
#include "flashnorm/io/dequant.h"

#include <fmt/format.h>

#include <array>
#include <cstring>

#include "flashnorm/error.h"

namespace flashnorm::io {
namespace {

constexpr int QK = 32;     // elements per block of the legacy quants
constexpr int QK_K = 256;  // elements per super-block of the k-quants

// fp16 -> fp32 for all 65536 codes (256 KiB), built once.
const std::array<float, 65536>& half_table() {
  static const auto* table = [] {
    auto* t = new std::array<float, 65536>;
    for (uint32_t h = 0; h < 65536; ++h) (*t)[h] = fp16_to_fp32(static_cast<uint16_t>(h));
    return t;
  }();
  return *table;
}

inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// block_q4_0 {fp16 d; uint8 qs[16]}: x = (q - 8) * d; low nibbles are elements 0..15.
void deq_q4_0(const uint8_t* b, size_t nb, float* y, const std::array<float, 65536>& h) {
  for (size_t i = 0; i < nb; ++i, b += 18, y += QK) {
    const float d = h[load_u16(b)];
    const uint8_t* qs = b + 2;
    for (int j = 0; j < QK / 2; ++j) {
      y[j] = d * static_cast<float>((qs[j] & 0x0f) - 8);
      y[j + QK / 2] = d * static_cast<float>((qs[j] >> 4) - 8);
    }
  }
}

// block_q4_1 {fp16 d; fp16 m; uint8 qs[16]}: x = q * d + m.
void deq_q4_1(const uint8_t* b, size_t nb, float* y, const std::array<float, 65536>& h) {
  for (size_t i = 0; i < nb; ++i, b += 20, y += QK) {
    const float d = h[load_u16(b)];
    const float m = h[load_u16(b + 2)];
    const uint8_t* qs = b + 4;
    for (int j = 0; j < QK / 2; ++j) {
      y[j] = d * static_cast<float>(qs[j] & 0x0f) + m;
      y[j + QK / 2] = d * static_cast<float>(qs[j] >> 4) + m;
    }
  }
}

// block_q5_0 {fp16 d; uint8 qh[4]; uint8 qs[16]}: 5-bit q (bit 4 from qh), x = (q - 16) * d.
void deq_q5_0(const uint8_t* b, size_t nb, float* y, const std::array<float, 65536>& h) {
  for (size_t i = 0; i < nb; ++i, b += 22, y += QK) {
    const float d = h[load_u16(b)];
    const uint32_t qh = load_u32(b + 2);
    const uint8_t* qs = b + 6;
    for (int j = 0; j < QK / 2; ++j) {
      const int hi0 = ((qh >> j) << 4) & 0x10;
      const int hi1 = (qh >> (j + 12)) & 0x10;
      y[j] = d * static_cast<float>(((qs[j] & 0x0f) | hi0) - 16);
      y[j + QK / 2] = d * static_cast<float>(((qs[j] >> 4) | hi1) - 16);
    }
  }
}

// block_q5_1 {fp16 d; fp16 m; uint8 qh[4]; uint8 qs[16]}: x = q * d + m.
void deq_q5_1(const uint8_t* b, size_t nb, float* y, const std::array<float, 65536>& h) {
  for (size_t i = 0; i < nb; ++i, b += 24, y += QK) {
    const float d = h[load_u16(b)];
    const float m = h[load_u16(b + 2)];
    const uint32_t qh = load_u32(b + 4);
    const uint8_t* qs = b + 8;
    for (int j = 0; j < QK / 2; ++j) {
      const int hi0 = ((qh >> j) << 4) & 0x10;
      const int hi1 = (qh >> (j + 12)) & 0x10;
      y[j] = d * static_cast<float>((qs[j] & 0x0f) | hi0) + m;
      y[j + QK / 2] = d * static_cast<float>((qs[j] >> 4) | hi1) + m;
    }
  }
}

// block_q8_0 {fp16 d; int8 qs[32]}: x = q * d.
void deq_q8_0(const uint8_t* b, size_t nb, float* y, const std::array<float, 65536>& h) {
  for (size_t i = 0; i < nb; ++i, b += 34, y += QK) {
    const float d = h[load_u16(b)];
    const int8_t* qs = reinterpret_cast<const int8_t*>(b + 2);
    for (int j = 0; j < QK; ++j) y[j] = d * static_cast<float>(qs[j]);
  }
}

// 6-bit scale and min number j (0..7) of a Q4_K/Q5_K super-block (ggml get_scale_min_k4).
inline void scale_min_k4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// block_q4_K {fp16 d; fp16 dmin; uint8 scales[12]; uint8 qs[128]}: 8 sub-blocks of 32, each
// x = (d * sc) * q - (dmin * m).
void deq_q4_k(const uint8_t* b, size_t nb, float* y, const std::array<float, 65536>& h) {
  for (size_t i = 0; i < nb; ++i, b += 144) {
    const float d = h[load_u16(b)];
    const float dmin = h[load_u16(b + 2)];
    const uint8_t* scales = b + 4;
    const uint8_t* q = b + 16;
    for (int j = 0, is = 0; j < QK_K; j += 64, is += 2, q += 32) {
      uint8_t sc, m;
      scale_min_k4(is, scales, &sc, &m);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
      scale_min_k4(is + 1, scales, &sc, &m);
      const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0x0f) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

// block_q5_K {fp16 d; fp16 dmin; uint8 scales[12]; uint8 qh[32]; uint8 qs[128]}.
void deq_q5_k(const uint8_t* b, size_t nb, float* y, const std::array<float, 65536>& h) {
  for (size_t i = 0; i < nb; ++i, b += 176) {
    const float d = h[load_u16(b)];
    const float dmin = h[load_u16(b + 2)];
    const uint8_t* scales = b + 4;
    const uint8_t* qh = b + 16;
    const uint8_t* ql = b + 48;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0, is = 0; j < QK_K; j += 64, is += 2, ql += 32) {
      uint8_t sc, m;
      scale_min_k4(is, scales, &sc, &m);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
      scale_min_k4(is + 1, scales, &sc, &m);
      const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
      for (int l = 0; l < 32; ++l) {
        *y++ = d1 * static_cast<float>((ql[l] & 0x0f) + (qh[l] & u1 ? 16 : 0)) - m1;
      }
      for (int l = 0; l < 32; ++l) {
        *y++ = d2 * static_cast<float>((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
      }
      u1 = static_cast<uint8_t>(u1 << 2);
      u2 = static_cast<uint8_t>(u2 << 2);
    }
  }
}

// block_q6_K {uint8 ql[128]; uint8 qh[64]; int8 scales[16]; fp16 d}: x = (d * sc) * (q - 32).
void deq_q6_k(const uint8_t* b, size_t nb, float* y, const std::array<float, 65536>& h) {
  for (size_t i = 0; i < nb; ++i, b += 210) {
    const float d = h[load_u16(b + 208)];
    const uint8_t* ql = b;
    const uint8_t* qh = b + 128;
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
    for (int n = 0; n < QK_K; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l + 0] = d * static_cast<float>(sc[is + 0]) * static_cast<float>(q1);
        y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
    }
  }
}

// block_q8_K {float d; int8 qs[256]; int16 bsums[16]}: x = d * q.
void deq_q8_k(const uint8_t* b, size_t nb, float* y) {
  for (size_t i = 0; i < nb; ++i, b += 292, y += QK_K) {
    float d;
    std::memcpy(&d, b, 4);
    const int8_t* qs = reinterpret_cast<const int8_t*>(b + 4);
    for (int j = 0; j < QK_K; ++j) y[j] = d * static_cast<float>(qs[j]);
  }
}

}  // namespace

bool dequant_supported(GgmlType type) {
  switch (type) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::Q8_0:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::Q8_K:
      return true;
    default:
      return false;
  }
}

void dequantize(GgmlType type, std::span<const uint8_t> src, std::span<float> dst) {
  const uint32_t id = static_cast<uint32_t>(type);
  const auto traits = ggml_type_traits(id);
  if (!traits || !dequant_supported(type)) {
    throw Error(fmt::format("dequantize: type {} is not supported", ggml_type_name(id)));
  }
  const size_t n = dst.size();
  if (n % traits->block_elems != 0) {
    throw Error(fmt::format("dequantize: {} elements is not a multiple of the {} block size {}", n,
                            traits->name, traits->block_elems));
  }
  const size_t nb = n / traits->block_elems;
  size_t need = 0;
  if (__builtin_mul_overflow(nb, size_t{traits->block_bytes}, &need) || src.size() != need) {
    throw Error(fmt::format("dequantize: {} {} elements need {} bytes, got {}", n, traits->name,
                            need, src.size()));
  }
  const uint8_t* b = src.data();
  float* y = dst.data();
  if (n == 0) return;
  switch (type) {
    case GgmlType::F32:
      std::memcpy(y, b, n * 4);
      return;
    case GgmlType::F16: {
      const auto& h = half_table();
      for (size_t i = 0; i < n; ++i) y[i] = h[load_u16(b + 2 * i)];
      return;
    }
    case GgmlType::BF16:
      for (size_t i = 0; i < n; ++i) y[i] = bf16_to_fp32(load_u16(b + 2 * i));
      return;
    case GgmlType::Q4_0:
      return deq_q4_0(b, nb, y, half_table());
    case GgmlType::Q4_1:
      return deq_q4_1(b, nb, y, half_table());
    case GgmlType::Q5_0:
      return deq_q5_0(b, nb, y, half_table());
    case GgmlType::Q5_1:
      return deq_q5_1(b, nb, y, half_table());
    case GgmlType::Q8_0:
      return deq_q8_0(b, nb, y, half_table());
    case GgmlType::Q4_K:
      return deq_q4_k(b, nb, y, half_table());
    case GgmlType::Q5_K:
      return deq_q5_k(b, nb, y, half_table());
    case GgmlType::Q6_K:
      return deq_q6_k(b, nb, y, half_table());
    case GgmlType::Q8_K:
      return deq_q8_k(b, nb, y);
    default:
      break;
  }
}

}  // namespace flashnorm::io
