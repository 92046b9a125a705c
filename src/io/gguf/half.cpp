// io's scalar half-precision conversions (flashnorm/io/dequant.h): the shared definitions of
// flashnorm/half.h.
#include "flashnorm/half.h"

#include "flashnorm/io/dequant.h"

namespace flashnorm::io {

float fp16_to_fp32(uint16_t h) { return half::f16_to_f32(h); }
uint16_t fp32_to_fp16(float f) { return half::f32_to_f16(f); }
float bf16_to_fp32(uint16_t b) { return half::bf16_to_f32(b); }
uint16_t fp32_to_bf16(float f) { return half::f32_to_bf16(f); }

}  // namespace flashnorm::io
