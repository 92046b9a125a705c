// fp32 -> the k-quant block formats (Q4_K, Q5_K, Q6_K: super-blocks of 256) with an
// error-minimizing scale search (quantize_k.cpp). Internal to io::quantize (io/dequant.h).
#pragma once

#include <cstddef>
#include <cstdint>

namespace flashnorm::io::kquant {

// Each writes `nb` super-blocks of 256 values from `x` to `out` (144, 176 and 210 bytes each,
// ggml-common.h block_q4_K / block_q5_K / block_q6_K), read back by io::dequantize. Non-finite
// inputs give non-finite or zero scales, never undefined behaviour.
void q4_k(const float* x, size_t nb, uint8_t* out);
void q5_k(const float* x, size_t nb, uint8_t* out);
void q6_k(const float* x, size_t nb, uint8_t* out);

}  // namespace flashnorm::io::kquant
