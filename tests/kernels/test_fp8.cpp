// float8_e4m3fn rounding and encoding (kernels/cpu/fp8.h) against the format's definition: every
// finite byte decodes (io::fp8_e4m3_to_fp32) and encodes back to itself; a value halfway between
// two neighbours goes to the one with the even mantissa; above 448 saturates. (Bit equality with
// PyTorch's own cast on random values: tests/python/test_fp8_ops.py.)
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "flashnorm/io/safetensors.h"
#include "flashnorm/kernels/cpu/fp8.h"

namespace flashnorm::kernels::cpu {
namespace {

TEST(Fp8, EveryFiniteByteRoundTrips) {
  for (int b = 0; b < 256; ++b) {
    const float v = io::fp8_e4m3_to_fp32(uint8_t(b));
    if (std::isnan(v)) {
      EXPECT_TRUE((b & 0x7F) == 0x7F) << b;
      continue;
    }
    EXPECT_EQ(fp8_e4m3_round(v), v) << b;
    if (v != 0) EXPECT_EQ(fp8_e4m3_encode(v), b) << b;
  }
  EXPECT_EQ(io::fp8_e4m3_to_fp32(0x7E), 448.0f);
  EXPECT_EQ(io::fp8_e4m3_to_fp32(0x01), std::ldexp(1.0f, -9));
}

TEST(Fp8, TiesGoToEvenAndLargeValuesSaturate) {
  // between 1 (mantissa 0) and 1.125 (mantissa 1): 1.0625 -> 1; between 1.125 and 1.25 -> 1.25
  EXPECT_EQ(fp8_e4m3_round(1.0625f), 1.0f);
  EXPECT_EQ(fp8_e4m3_round(1.1875f), 1.25f);
  EXPECT_EQ(fp8_e4m3_round(-1.1875f), -1.25f);
  EXPECT_EQ(fp8_e4m3_round(1.07f), 1.125f);
  EXPECT_EQ(fp8_e4m3_round(500.0f), 448.0f);
  EXPECT_EQ(fp8_e4m3_encode(-1e9f), 0xFE);
  EXPECT_EQ(fp8_e4m3_round(std::ldexp(1.0f, -11)), 0.0f);  // a quarter of the smallest subnormal
  EXPECT_EQ(fp8_e4m3_encode(NAN), 0x7F);
}

TEST(Fp8, QuantizeRowScalesByTheLargestMagnitude) {
  const std::vector<float> x = {0.5f, -2.0f, 1.0f, 0.0f};
  const std::vector<float> g = {2.0f, 1.0f, 0.25f, 3.0f};
  std::vector<uint8_t> p(x.size());
  const float s = fp8_quantize_row(x, g.data(), p.data());
  EXPECT_EQ(s, 2.0f / 448.0f);
  EXPECT_EQ(io::fp8_e4m3_to_fp32(p[1]), -448.0f);
  EXPECT_EQ(io::fp8_e4m3_to_fp32(p[0]), 224.0f);  // 0.5 * 2 / (2 / 448)
  EXPECT_EQ(io::fp8_e4m3_to_fp32(p[2]), 56.0f);
  EXPECT_EQ(p[3], 0);
  const std::vector<float> zeros(5, 0.0f);
  std::vector<uint8_t> z(5, 1);
  EXPECT_EQ(fp8_quantize_row(zeros, nullptr, z.data()), 0.0f);
  EXPECT_EQ(z, std::vector<uint8_t>(5, 0));
  // in place, dequantized: the payload's values times s
  std::vector<float> v = {0.5f, -2.0f, 1.0f, 0.0f, 0.3f};
  std::vector<uint8_t> q(v.size());
  const float sv = fp8_quantize_row(v, nullptr, q.data());
  fp8_fake_quantize_row(v);
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(v[i], io::fp8_e4m3_to_fp32(q[i]) * sv) << i;
}

}  // namespace
}  // namespace flashnorm::kernels::cpu
