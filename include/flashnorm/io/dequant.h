// Conversion between GGML block formats and fp32.
// Sources: ggml-quants.c (dequantize_row_*, quantize_row_*_ref) as mirrored by the `gguf` Python
// package's quants.py; the tests compare against that package on real tensors.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "flashnorm/io/ggml_types.h"

namespace flashnorm::io {

// Dequantizes `n` elements (a multiple of the type's block size) from `src` to `dst`.
// Supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, Q8_K (see
// dequant_supported); results are bit-identical to gguf.quants.dequantize (tested except Q8_K,
// which gguf.quants cannot dequantize). Errors: throws Error if the type is unsupported, n is not
// a multiple of the block size, or src.size() is not exactly the bytes n elements occupy.
void dequantize(GgmlType type, std::span<const uint8_t> src, std::span<float> dst);

bool dequant_supported(GgmlType type);

// Quantizes fp32 values to `type`. F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1: the reference
// round-to-nearest quantizers (ggml *_ref), byte-identical to gguf.quants.quantize. Q4_K, Q5_K,
// Q6_K: flashnorm's least-squares scale search per sub-block and super-block (quantize_k.cpp; its
// added RMS error against llama.cpp's quantizer: scripts/quant_compare.sh). The caller keeps rows
// a multiple of the block size (256 for k-quants). Errors: throws Error naming the type if it is
// not supported, or if src.size() is not a multiple of the block size.
std::vector<uint8_t> quantize(GgmlType type, std::span<const float> src);

bool quant_supported(GgmlType type);

// Scalar conversions (IEEE binary16 and bfloat16; fp32 -> half/bf16 round to nearest even).
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);
float bf16_to_fp32(uint16_t b);
uint16_t fp32_to_bf16(float f);

}  // namespace flashnorm::io
