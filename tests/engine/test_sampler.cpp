#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "flashnorm/engine/sampler.h"
#include "flashnorm/error.h"

namespace flashnorm {
namespace {

TEST(Sampler, GreedyIsArgmaxLowestIdOnTies) {
  std::vector<float> l = {0.1f, 2.0f, 2.0f, -1.0f};
  Sampler s({0.0f, 40, 0.95f, 1});
  EXPECT_EQ(s.sample(l), 1);
  EXPECT_EQ(argmax(std::vector<float>{NAN, 1.0f, 0.5f}), 1);
}

TEST(Sampler, SeededRunsRepeatAndTopKOneIsGreedy) {
  std::vector<float> l(100);
  for (int i = 0; i < 100; ++i) l[i] = std::sin(i * 0.37f) * 3;
  auto run = [&](SamplerOptions o) {
    Sampler s(o);
    std::vector<int32_t> v;
    for (int i = 0; i < 50; ++i) v.push_back(s.sample(l));
    return v;
  };
  EXPECT_EQ(run({1.0f, 0, 1.0f, 7}), run({1.0f, 0, 1.0f, 7}));
  EXPECT_NE(run({1.0f, 0, 1.0f, 7}), run({1.0f, 0, 1.0f, 8}));
  for (int32_t t : run({1.5f, 1, 1.0f, 3})) EXPECT_EQ(t, argmax(l));
}

TEST(Sampler, TopPKeepsTheNucleusOnly) {
  // p = softmax: token 0 has ~0.88 of the mass; top-p 0.5 keeps only it.
  std::vector<float> l = {4.0f, 2.0f, 0.0f, -1.0f};
  Sampler s({1.0f, 0, 0.5f, 11});
  for (int i = 0; i < 200; ++i) EXPECT_EQ(s.sample(l), 0);
  // Without the cut every token appears, at roughly its probability.
  Sampler all({1.0f, 0, 1.0f, 11});
  std::map<int32_t, int> counts;
  for (int i = 0; i < 20000; ++i) counts[all.sample(l)]++;
  EXPECT_EQ(counts.size(), 4u);
  const double p0 = std::exp(4.0) / (std::exp(4.0) + std::exp(2.0) + 1 + std::exp(-1.0));
  EXPECT_NEAR(counts[0] / 20000.0, p0, 0.01);
}

TEST(Sampler, RejectsBadOptions) {
  EXPECT_THROW(Sampler({-1.0f, 0, 1.0f, 0}), Error);
  EXPECT_THROW(Sampler({1.0f, 0, 0.0f, 0}), Error);
  EXPECT_THROW(Sampler({1.0f, 0, 1.5f, 0}), Error);
}

}  // namespace
}  // namespace flashnorm
