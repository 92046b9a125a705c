// Argument checks of dequantize/quantize and properties of the scalar half conversions.
// (Values are checked against the `gguf` package in test_dequant_reference.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "flashnorm/error.h"
#include "flashnorm/io/dequant.h"

namespace flashnorm::io {
namespace {

TEST(Dequant, RejectsWrongSizesAndTypes) {
  std::vector<uint8_t> raw(18);
  std::vector<float> out(32);
  EXPECT_NO_THROW(dequantize(GgmlType::Q4_0, raw, out));
  std::vector<float> out31(31);
  EXPECT_THROW(dequantize(GgmlType::Q4_0, raw, out31), Error);  // not a multiple of 32
  std::vector<uint8_t> raw17(17);
  EXPECT_THROW(dequantize(GgmlType::Q4_0, raw17, out), Error);  // 17 bytes for one block
  EXPECT_THROW(dequantize(GgmlType::Q2_K, raw, out), Error);    // unsupported
  EXPECT_THROW(dequantize(static_cast<GgmlType>(99), raw, out), Error);
  EXPECT_THROW(quantize(GgmlType::Q4_K, std::vector<float>(255)), Error);  // not whole blocks
  EXPECT_THROW(quantize(GgmlType::Q8_0, std::vector<float>(33)), Error);
  try {  // a type with no quantizer (Q2_K, Q3_K: read, never written) is named
    quantize(GgmlType::Q3_K, std::vector<float>(256));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Q3_K"), std::string::npos) << e.what();
  }
}

TEST(Dequant, SupportTables) {
  for (auto t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0,
                 GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q4_K, GgmlType::Q6_K}) {
    EXPECT_TRUE(dequant_supported(t)) << ggml_type_name(static_cast<uint32_t>(t));
  }
  for (auto t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0,
                 GgmlType::Q4_1, GgmlType::Q5_0}) {
    EXPECT_TRUE(quant_supported(t)) << ggml_type_name(static_cast<uint32_t>(t));
  }
}

// Every non-NaN half survives fp16 -> fp32 -> fp16 unchanged (fp32 holds all halves exactly).
TEST(Half, AllCodesRoundTrip) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = fp16_to_fp32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(fp32_to_fp16(f), h) << std::hex << h;
  }
}

TEST(Half, KnownValues) {
  EXPECT_EQ(fp16_to_fp32(0x3c00), 1.0f);
  EXPECT_EQ(fp16_to_fp32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(fp16_to_fp32(0x7bff), 65504.0f);
  EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7c00);  // ties to even overflows to inf
  EXPECT_EQ(fp32_to_fp16(-1e9f), 0xfc00);
  EXPECT_TRUE(std::isnan(fp16_to_fp32(fp32_to_fp16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(bf16_to_fp32(0x3f80), 1.0f);
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(fp32_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
}

TEST(ModelTypes, TraitsAndNames) {
  auto q4k = ggml_type_traits(12);
  ASSERT_TRUE(q4k);
  EXPECT_EQ(q4k->block_elems, 256u);
  EXPECT_EQ(q4k->block_bytes, 144u);
  EXPECT_FALSE(ggml_type_traits(4));  // removed Q4_2
  EXPECT_FALSE(ggml_type_traits(99));
  EXPECT_EQ(ggml_type_name(99), "type 99");
  EXPECT_EQ(ggml_type_from_name("bf16"), GgmlType::BF16);
  EXPECT_EQ(ggml_type_from_name("q4_k"), GgmlType::Q4_K);
  EXPECT_FALSE(ggml_type_from_name("Q4_K_M"));
}

}  // namespace
}  // namespace flashnorm::io
