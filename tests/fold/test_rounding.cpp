// Folding rounds once: fp64 products go to f16/bf16 without passing through a nearest-even fp32.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <limits>

#include "flashnorm/fold/fold.h"
#include "flashnorm/io/dequant.h"

namespace flashnorm {
namespace {

TEST(Rounding, Bf16AvoidsDoubleRounding) {
  // 1 + 2^-8 is halfway between bf16 neighbours 1 and 1 + 2^-7; the extra 2^-30 puts the exact
  // value above the tie, so one correct rounding gives 1 + 2^-7. Rounding to fp32 first loses the
  // 2^-30 and the tie then goes to even (1.0).
  const double v = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30);
  EXPECT_EQ(io::bf16_to_fp32(round_to_bf16(v)), 1.0f + std::ldexp(1.0f, -7));
  EXPECT_EQ(io::bf16_to_fp32(io::fp32_to_bf16(static_cast<float>(v))), 1.0f);
  EXPECT_EQ(io::bf16_to_fp32(round_to_bf16(-v)), -(1.0f + std::ldexp(1.0f, -7)));
}

TEST(Rounding, F16AvoidsDoubleRounding) {
  const double v = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -30);
  EXPECT_EQ(io::fp16_to_fp32(round_to_f16(v)), 1.0f + std::ldexp(1.0f, -10));
  EXPECT_EQ(io::fp16_to_fp32(io::fp32_to_fp16(static_cast<float>(v))), 1.0f);
}

TEST(Rounding, ExactValuesAndTiesStayNearestEven) {
  EXPECT_EQ(io::bf16_to_fp32(round_to_bf16(1.0 + std::ldexp(1.0, -8))), 1.0f);  // exact tie
  EXPECT_EQ(io::bf16_to_fp32(round_to_bf16(3.0)), 3.0f);
  EXPECT_EQ(round_to_f32(0.1), 0.1f);
  EXPECT_TRUE(std::isinf(io::bf16_to_fp32(round_to_bf16(1e300))));
  EXPECT_TRUE(std::isnan(io::bf16_to_fp32(round_to_bf16(NAN))));
}

// Round to odd (the fp32 step before the 16-bit rounding): the fp64 value truncated toward zero to
// fp32, the last bit set when that dropped anything. Expected values from the definition.
TEST(Rounding, RoundToOddTruncatesThenSetsTheStickyBit) {
  const float next1 = std::nextafter(1.0f, 2.0f);  // 1 + 2^-23, odd
  EXPECT_EQ(round_to_odd_f32(1.0), 1.0f);          // exact: unchanged, even
  // nearest rounds up to 1 + 2^-23 (odd) or 1 + 2^-22 (even): truncation gives 1 or 1 + 2^-23
  EXPECT_EQ(round_to_odd_f32(1.0 + std::ldexp(1.0, -23) - std::ldexp(1.0, -40)), next1);
  EXPECT_EQ(round_to_odd_f32(1.0 + std::ldexp(1.0, -22) - std::ldexp(1.0, -40)), next1);
  EXPECT_EQ(round_to_odd_f32(-(1.0 + std::ldexp(1.0, -30))), -next1);
  // past FLT_MAX but finite (nearest would be infinity): FLT_MAX, which is odd
  const double big = static_cast<double>(FLT_MAX) + std::ldexp(1.0, 103) + std::ldexp(1.0, 90);
  EXPECT_EQ(round_to_odd_f32(big), FLT_MAX);
  EXPECT_EQ(round_to_odd_f32(-big), -FLT_MAX);
  // below the smallest subnormal (nearest would be zero): the smallest subnormal, sign kept
  const float tiny = std::numeric_limits<float>::denorm_min();
  EXPECT_EQ(round_to_odd_f32(std::ldexp(1.0, -160)), tiny);
  EXPECT_EQ(round_to_odd_f32(-std::ldexp(1.0, -160)), -tiny);
  EXPECT_TRUE(std::isinf(round_to_odd_f32(INFINITY)));
}

TEST(FoldMatrix, MultipliesColumnsByGain) {
  std::vector<float> w = {1, 2, 3, 4, 5, 6};  // [2, 3]
  std::vector<double> g = {2, -1, 0.5};
  std::vector<double> out = fold_matrix(w, 2, 3, g);
  EXPECT_EQ(out, (std::vector<double>{2, -2, 1.5, 8, -5, 3}));
}

}  // namespace
}  // namespace flashnorm
