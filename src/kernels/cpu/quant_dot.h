// The per-row dot products behind quant_matmul, one table per instruction set
// (quant_dot_scalar.cpp, quant_dot_avx2.cpp, quant_dot_avx512.cpp). Each function takes one weight
// row of `k` elements in its GGML type and the matching activation row (const float* for
// F32/F16/BF16, const ActBlock* (32 elements each) for the quantized types).
#pragma once

#include <cstdint>
#include <cstring>

#include "flashnorm/io/ggml_blocks.h"
#include "flashnorm/io/ggml_types.h"
#include "flashnorm/kernels/cpu/quant_matmul.h"

namespace flashnorm::kernels::cpu::detail {

using QuantDotFn = float (*)(const uint8_t* w, const void* act, int k);

struct QuantDots {
  QuantDotFn f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q4_k, q5_k, q6_k;
};

// y[r] = dot of weight row r (at w + r * row_bytes) with the activation row, for r < rows: several
// rows per pass over the activations (their loads and conversions shared, the rows' block sums
// reduced together), the weight rows ahead prefetched. Same arithmetic bound as QuantDotFn.
using QuantRowsFn = void (*)(const uint8_t* w, size_t row_bytes, int rows, const void* act, int k,
                             float* y);

const QuantDots& scalar_dots();
#if defined(FLASHNORM_HAVE_AVX2_KERNELS)
const QuantDots& avx2_dots();
// The AVX2 multi-row kernel of `type`, or nullptr where it has none (the row dot then runs per
// row).
QuantRowsFn avx2_rows(io::GgmlType type);
// io::dequantize of `nb` whole blocks of `type` at w into y, bit for bit, for Q4_0, Q4_1, Q5_0,
// Q8_0, Q4_K and Q6_K (the prefill tiles' common types); false (nothing written) for the others.
bool dequantize_avx2(io::GgmlType type, const uint8_t* w, size_t nb, float* y);
// quantize_act_row (quant_matmul.h) in AVX2, bit for bit the same blocks.
void quantize_act_row_avx2(const float* x, int k, ActBlock* out);
#endif
#if defined(FLASHNORM_HAVE_AVX512_KERNELS)
// The AVX-512 table (quant_dot_avx512.cpp): its own kernels for the quantized types, the AVX2
// functions for F32, F16 and BF16. Call only where quant_isa_available(QuantIsa::kAvx512).
const QuantDots& avx512_dots();
// The AVX-512 multi-row kernel of `type` (eight rows per pass for the block32 types, the row dot
// per row with prefetch for the K-quants), else avx2_rows(type).
QuantRowsFn avx512_rows(io::GgmlType type);
#endif

// The table's function for `type`; nullptr when the type has none.
inline QuantDotFn dot_for(const QuantDots& t, io::GgmlType type) {
  switch (type) {
    case io::GgmlType::F32:
      return t.f32;
    case io::GgmlType::F16:
      return t.f16;
    case io::GgmlType::BF16:
      return t.bf16;
    case io::GgmlType::Q4_0:
      return t.q4_0;
    case io::GgmlType::Q4_1:
      return t.q4_1;
    case io::GgmlType::Q5_0:
      return t.q5_0;
    case io::GgmlType::Q5_1:
      return t.q5_1;
    case io::GgmlType::Q8_0:
      return t.q8_0;
    case io::GgmlType::Q4_K:
      return t.q4_k;
    case io::GgmlType::Q5_K:
      return t.q5_k;
    case io::GgmlType::Q6_K:
      return t.q6_k;
    default:
      return nullptr;
  }
}

using io::load_u16;
using io::load_u32;

// k_scale_min of io/ggml_blocks.h as ints.
inline void k_scale_min(int j, const uint8_t* q, int* sc, int* m) {
  uint8_t s8, m8;
  io::k_scale_min(j, q, &s8, &m8);
  *sc = s8;
  *m = m8;
}

}  // namespace flashnorm::kernels::cpu::detail
