// float8_e4m3fn on the CPU: the reference of FP8 activations (compressed-tensors' dynamic
// per-token scheme, the CPU engine's FP8 path and the torch.ops.flashnorm FP8 ops). The format is
// OCP FP8 E4M3 as torch.float8_e4m3fn: sign, 4 exponent bits (bias 7), 3 mantissa bits, no
// infinities, 0x7F / 0xFF NaN, largest finite 448; decoding: io::fp8_e4m3_to_fp32.
#pragma once

#include <cstdint>
#include <span>

namespace flashnorm::kernels::cpu {

// x rounded to the nearest float8_e4m3fn value (ties to even), saturated at +-448 (as PyTorch
// casts an fp32 tensor to torch.float8_e4m3fn); NaN stays NaN. As fp32 / as its byte (NaN: 0x7F).
float fp8_e4m3_round(float x);
uint8_t fp8_e4m3_encode(float x);

// One token's dynamic quantization: with v_i = x_i * gain_i (gain null: 1), s = max_i |v_i| / 448
// and payload_i = fp8_e4m3_encode(v_i / s); returns s. A row of zeros gives s = 0 and zero bytes.
// payload: x.size() bytes.
float fp8_quantize_row(std::span<const float> x, const float* gain, uint8_t* payload);

// The same quantization of one token in place, as its dequantized values: x_i becomes
// fp8_e4m3_round(x_i / s) * s, s = max_i |x_i| / 448 (compressed-tensors' dynamic activations as
// its fake quantization computes them; a row of zeros stays zeros).
void fp8_fake_quantize_row(std::span<float> x);

}  // namespace flashnorm::kernels::cpu
