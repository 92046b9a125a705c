// Folding rounds once: fp64 products go to f16/bf16 without passing through a nearest-even fp32.
#include <gtest/gtest.h>

#include <cmath>

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

TEST(FoldMatrix, MultipliesColumnsByGain) {
  std::vector<float> w = {1, 2, 3, 4, 5, 6};  // [2, 3]
  std::vector<double> g = {2, -1, 0.5};
  std::vector<double> out = fold_matrix(w, 2, 3, g);
  EXPECT_EQ(out, (std::vector<double>{2, -2, 1.5, 8, -5, 3}));
}

}  // namespace
}  // namespace flashnorm
