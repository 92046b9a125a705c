// fp32 -> GGML block formats: the legacy types with the reference round-to-nearest quantizers of
// ggml-quants.c (quantize_row_*_ref), whose float expressions and their order equal those of
// gguf-py quants.py quantize_blocks, which the tests compare against byte for byte (this file is
// built with -ffp-contract=off); the k-quants with flashnorm's own scale search (quantize_k.h).
// Block layouts: ggml-common.h.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "flashnorm/error.h"
#include "flashnorm/io/dequant.h"
#include "gguf_internal.h"
#include "quantize_k.h"

namespace flashnorm::io {
namespace {

constexpr int QK = 32;

inline void store_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

// The value of largest magnitude (first one on ties), with its sign.
inline float signed_absmax(const float* x) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < QK; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

// The smallest and largest of a block of 32 values, scanned in order with std::min/max.
inline std::pair<float, float> min_max(const float* x) {
  float mn = x[0], mx = x[0];
  for (int j = 1; j < QK; ++j) {
    mn = std::min(mn, x[j]);
    mx = std::max(mx, x[j]);
  }
  return {mn, mx};
}

// Truncation toward zero of a value known to be >= 0 (within rounding), clamped to [0, hi].
inline int trunc_clamp(float v, int hi) {
  if (!(v >= 0.0f)) return 0;  // also NaN
  if (v >= static_cast<float>(hi)) return hi;
  return static_cast<int>(v);
}

// Q4_0: d = max / -8, q = min(15, trunc(x / d + 8.5)).
void q4_0(const float* x, size_t nb, uint8_t* out) {
  for (size_t i = 0; i < nb; ++i, x += QK, out += 18) {
    const float d = signed_absmax(x) / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_u16(out, fp32_to_fp16(d));
    for (int j = 0; j < QK / 2; ++j) {
      const int q0 = trunc_clamp(x[j] * id + 8.5f, 15);
      const int q1 = trunc_clamp(x[j + QK / 2] * id + 8.5f, 15);
      out[2 + j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

// Q4_1: d = (max - min) / 15, m = min, q = min(15, trunc((x - min) / d + 0.5)).
void q4_1(const float* x, size_t nb, uint8_t* out) {
  for (size_t i = 0; i < nb; ++i, x += QK, out += 20) {
    const auto [mn, mx] = min_max(x);
    const float d = (mx - mn) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_u16(out, fp32_to_fp16(d));
    store_u16(out + 2, fp32_to_fp16(mn));
    for (int j = 0; j < QK / 2; ++j) {
      const int q0 = trunc_clamp((x[j] - mn) * id + 0.5f, 15);
      const int q1 = trunc_clamp((x[j + QK / 2] - mn) * id + 0.5f, 15);
      out[4 + j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

// Q5_0: d = max / -16, q = min(31, trunc(x / d + 16.5)); bit 4 of element j goes to qh bit j.
void q5_0(const float* x, size_t nb, uint8_t* out) {
  for (size_t i = 0; i < nb; ++i, x += QK, out += 22) {
    const float d = signed_absmax(x) / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_u16(out, fp32_to_fp16(d));
    uint32_t qh = 0;
    for (int j = 0; j < QK / 2; ++j) {
      const int q0 = trunc_clamp(x[j] * id + 16.5f, 31);
      const int q1 = trunc_clamp(x[j + QK / 2] * id + 16.5f, 31);
      out[6 + j] = static_cast<uint8_t>((q0 & 0x0f) | ((q1 & 0x0f) << 4));
      qh |= static_cast<uint32_t>((q0 & 0x10) >> 4) << j;
      qh |= static_cast<uint32_t>((q1 & 0x10) >> 4) << (j + QK / 2);
    }
    std::memcpy(out + 2, &qh, 4);
  }
}

// Q5_1: d = (max - min) / 31, m = min, q = min(31, trunc((x - min) / d + 0.5)); bit 4 of element
// j goes to qh bit j.
void q5_1(const float* x, size_t nb, uint8_t* out) {
  for (size_t i = 0; i < nb; ++i, x += QK, out += 24) {
    const auto [mn, mx] = min_max(x);
    const float d = (mx - mn) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_u16(out, fp32_to_fp16(d));
    store_u16(out + 2, fp32_to_fp16(mn));
    uint32_t qh = 0;
    for (int j = 0; j < QK / 2; ++j) {
      const int q0 = trunc_clamp((x[j] - mn) * id + 0.5f, 31);
      const int q1 = trunc_clamp((x[j + QK / 2] - mn) * id + 0.5f, 31);
      out[8 + j] = static_cast<uint8_t>((q0 & 0x0f) | ((q1 & 0x0f) << 4));
      qh |= static_cast<uint32_t>((q0 & 0x10) >> 4) << j;
      qh |= static_cast<uint32_t>((q1 & 0x10) >> 4) << (j + QK / 2);
    }
    std::memcpy(out + 4, &qh, 4);
  }
}

// Q8_0: d = absmax / 127, q = round_half_away(x / d).
void q8_0(const float* x, size_t nb, uint8_t* out) {
  for (size_t i = 0; i < nb; ++i, x += QK, out += 34) {
    float amax = 0.0f;
    for (int j = 0; j < QK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_u16(out, fp32_to_fp16(d));
    for (int j = 0; j < QK; ++j) {
      const float r = std::round(x[j] * id);
      out[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::clamp(r, -128.0f, 127.0f)));
    }
  }
}

// Plain types: one element per block.
void to_f32(const float* x, size_t n, uint8_t* out) {
  if (n) std::memcpy(out, x, n * 4);
}
void to_f16(const float* x, size_t n, uint8_t* out) {
  for (size_t i = 0; i < n; ++i) store_u16(out + 2 * i, fp32_to_fp16(x[i]));
}
void to_bf16(const float* x, size_t n, uint8_t* out) {
  for (size_t i = 0; i < n; ++i) store_u16(out + 2 * i, fp32_to_bf16(x[i]));
}

// The supported types and the routine that writes `nb` blocks of each.
using QuantFn = void (*)(const float* x, size_t nb, uint8_t* out);
constexpr gguf_detail::Converter<QuantFn> kQuantizers[] = {
    {GgmlType::F32, to_f32},        {GgmlType::F16, to_f16},       {GgmlType::BF16, to_bf16},
    {GgmlType::Q8_0, q8_0},         {GgmlType::Q4_0, q4_0},        {GgmlType::Q4_1, q4_1},
    {GgmlType::Q5_0, q5_0},         {GgmlType::Q5_1, q5_1},        {GgmlType::Q4_K, kquant::q4_k},
    {GgmlType::Q5_K, kquant::q5_k}, {GgmlType::Q6_K, kquant::q6_k}};

QuantFn quantizer(GgmlType type) { return gguf_detail::find_converter(kQuantizers, type); }

}  // namespace

bool quant_supported(GgmlType type) { return quantizer(type) != nullptr; }

std::vector<uint8_t> quantize(GgmlType type, std::span<const float> src) {
  const size_t n = src.size();
  const GgmlTypeTraits traits =
      gguf_detail::conversion_traits(type, n, quant_supported(type), "quantize");
  const size_t nb = n / traits.block_elems;
  std::vector<uint8_t> out(nb * traits.block_bytes);
  quantizer(type)(src.data(), nb, out.data());
  return out;
}

}  // namespace flashnorm::io
