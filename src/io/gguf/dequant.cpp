// GGML block formats -> fp32. Each routine follows ggml-quants.c dequantize_row_* and computes
// the same float expressions in the same order as gguf-py quants.py dequantize_blocks, so the
// results are bit-identical to that package (this file is built with -ffp-contract=off so no
// multiply-add is fused). Block layouts: ggml-common.h.
#include "flashnorm/io/dequant.h"

#include <fmt/format.h>

#include <array>
#include <cstring>

#include "flashnorm/error.h"
#include "flashnorm/io/ggml_blocks.h"
#include "gguf_internal.h"

namespace flashnorm::io {
namespace {

constexpr int QK = 32;     // elements per block of the legacy quants
constexpr int QK_K = 256;  // elements per super-block of the k-quants

using HalfTable = std::array<float, 65536>;

// fp16 -> fp32 for all 65536 codes (256 KiB), built once.
const HalfTable& half_table() {
  static const auto* table = [] {
    auto* t = new std::array<float, 65536>;
    for (uint32_t h = 0; h < 65536; ++h) (*t)[h] = fp16_to_fp32(static_cast<uint16_t>(h));
    return t;
  }();
  return *table;
}

// block_q4_0 {fp16 d; uint8 qs[16]}: x = (q - 8) * d; low nibbles are elements 0..15.
void deq_q4_0(const uint8_t* b, size_t nb, float* y, const HalfTable& h) {
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
void deq_q4_1(const uint8_t* b, size_t nb, float* y, const HalfTable& h) {
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
void deq_q5_0(const uint8_t* b, size_t nb, float* y, const HalfTable& h) {
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
void deq_q5_1(const uint8_t* b, size_t nb, float* y, const HalfTable& h) {
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
void deq_q8_0(const uint8_t* b, size_t nb, float* y, const HalfTable& h) {
  for (size_t i = 0; i < nb; ++i, b += 34, y += QK) {
    const float d = h[load_u16(b)];
    const int8_t* qs = reinterpret_cast<const int8_t*>(b + 2);
    for (int j = 0; j < QK; ++j) y[j] = d * static_cast<float>(qs[j]);
  }
}

// The head of a Q4_K/Q5_K super-block: fp16 d, fp16 dmin, then 12 bytes of packed 6-bit scales
// and mins.
struct KHead {
  float d, dmin;
  const uint8_t* scales;
};
inline KHead k_head(const uint8_t* b, const HalfTable& h) {
  return {h[load_u16(b)], h[load_u16(b + 2)], b + 4};
}

// Scales and mins of the sub-blocks `is` and `is + 1` of a Q4_K/Q5_K super-block:
// d1 = d * sc, m1 = dmin * m (ggml dequantize_row_q4_K).
struct SubBlockScales {
  float d1, m1, d2, m2;
};
inline SubBlockScales sub_block_scales(const KHead& k, int is) {
  uint8_t sc, m;
  k_scale_min(is, k.scales, &sc, &m);
  const float d1 = k.d * static_cast<float>(sc), m1 = k.dmin * static_cast<float>(m);
  k_scale_min(is + 1, k.scales, &sc, &m);
  return {d1, m1, k.d * static_cast<float>(sc), k.dmin * static_cast<float>(m)};
}

// block_q4_K {fp16 d; fp16 dmin; uint8 scales[12]; uint8 qs[128]}: 8 sub-blocks of 32, each
// x = (d * sc) * q - (dmin * m).
void deq_q4_k(const uint8_t* b, size_t nb, float* y, const HalfTable& h) {
  for (size_t i = 0; i < nb; ++i, b += 144) {
    const KHead k = k_head(b, h);
    const uint8_t* q = b + 16;
    for (int j = 0, is = 0; j < QK_K; j += 64, is += 2, q += 32) {
      const auto [d1, m1, d2, m2] = sub_block_scales(k, is);
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0x0f) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

// block_q5_K {fp16 d; fp16 dmin; uint8 scales[12]; uint8 qh[32]; uint8 qs[128]}.
void deq_q5_k(const uint8_t* b, size_t nb, float* y, const HalfTable& h) {
  for (size_t i = 0; i < nb; ++i, b += 176) {
    const KHead k = k_head(b, h);
    const uint8_t* qh = b + 16;
    const uint8_t* ql = b + 48;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0, is = 0; j < QK_K; j += 64, is += 2, ql += 32) {
      const auto [d1, m1, d2, m2] = sub_block_scales(k, is);
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
void deq_q6_k(const uint8_t* b, size_t nb, float* y, const HalfTable& h) {
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
void deq_q8_k(const uint8_t* b, size_t nb, float* y, const HalfTable&) {
  for (size_t i = 0; i < nb; ++i, b += 292, y += QK_K) {
    float d;
    std::memcpy(&d, b, 4);
    const int8_t* qs = reinterpret_cast<const int8_t*>(b + 4);
    for (int j = 0; j < QK_K; ++j) y[j] = d * static_cast<float>(qs[j]);
  }
}

// Plain types: one element per block.
void deq_f32(const uint8_t* b, size_t n, float* y, const HalfTable&) { std::memcpy(y, b, n * 4); }
void deq_f16(const uint8_t* b, size_t n, float* y, const HalfTable& h) {
  for (size_t i = 0; i < n; ++i) y[i] = h[load_u16(b + 2 * i)];
}
void deq_bf16(const uint8_t* b, size_t n, float* y, const HalfTable&) {
  for (size_t i = 0; i < n; ++i) y[i] = bf16_to_fp32(load_u16(b + 2 * i));
}

// The supported types and the routine that converts `nb` blocks of each.
using DequantFn = void (*)(const uint8_t* b, size_t nb, float* y, const HalfTable& h);
constexpr gguf_detail::Converter<DequantFn> kDequantizers[] = {
    {GgmlType::F32, deq_f32},   {GgmlType::F16, deq_f16},   {GgmlType::BF16, deq_bf16},
    {GgmlType::Q4_0, deq_q4_0}, {GgmlType::Q4_1, deq_q4_1}, {GgmlType::Q5_0, deq_q5_0},
    {GgmlType::Q5_1, deq_q5_1}, {GgmlType::Q8_0, deq_q8_0}, {GgmlType::Q4_K, deq_q4_k},
    {GgmlType::Q5_K, deq_q5_k}, {GgmlType::Q6_K, deq_q6_k}, {GgmlType::Q8_K, deq_q8_k}};

DequantFn dequantizer(GgmlType type) { return gguf_detail::find_converter(kDequantizers, type); }

}  // namespace

bool dequant_supported(GgmlType type) { return dequantizer(type) != nullptr; }

void dequantize(GgmlType type, std::span<const uint8_t> src, std::span<float> dst) {
  const size_t n = dst.size();
  const GgmlTypeTraits traits =
      gguf_detail::conversion_traits(type, n, dequant_supported(type), "dequantize");
  const size_t nb = n / traits.block_elems;
  size_t need = 0;
  if (__builtin_mul_overflow(nb, size_t{traits.block_bytes}, &need) || src.size() != need) {
    throw Error(fmt::format("dequantize: {} {} elements need {} bytes, got {}", n, traits.name,
                            need, src.size()));
  }
  if (n == 0) return;
  dequantizer(type)(src.data(), nb, dst.data(), half_table());
}

}  // namespace flashnorm::io
