// engine/evaluate.h's comparison helpers (src/engine/evaluate.cpp): max_rel_diff on plain values,
// and on NaN and infinite values, which must never compare as small (every GPU-vs-CPU logit test
// bounds it; a NaN once passed as a difference of 0 because std::max drops it).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "flashnorm/engine/evaluate.h"

namespace flashnorm {
namespace {

TEST(MaxRelDiff, LargestDifferenceOverTheLargestReference) {
  const std::vector<float> ref = {1.0f, -4.0f, 2.0f}, got = {1.5f, -4.0f, 1.0f};
  EXPECT_DOUBLE_EQ(max_rel_diff(ref, got), 1.0 / 4.0);
  EXPECT_EQ(max_rel_diff(ref, ref), 0.0);
}

TEST(MaxRelDiff, NanOrInfinityOnEitherSideIsInfinite) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> ref = {1.0f, 2.0f, 3.0f};
  for (size_t j = 0; j < ref.size(); ++j) {
    for (float bad : {nan, inf, -inf}) {
      std::vector<float> got = ref;
      got[j] = bad;
      EXPECT_TRUE(std::isinf(max_rel_diff(ref, got))) << "got[" << j << "] = " << bad;
      EXPECT_TRUE(std::isinf(max_rel_diff(got, ref))) << "ref[" << j << "] = " << bad;
    }
  }
}

}  // namespace
}  // namespace flashnorm
