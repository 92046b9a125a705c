// engine/evaluate.h's comparison helpers (src/engine/evaluate.cpp): max_rel_diff on plain values,
// and on NaN and infinite values, which must never compare as small (every GPU-vs-CPU logit test
// bounds it; a NaN once passed as a difference of 0 because std::max drops it); the chunks and
// scored positions of compare_teacher_forced's two layouts, written out by hand from their
// definitions (llama.cpp's tools/perplexity: chunks of n_ctx tokens of the text tokenized with
// BOS, each chunk's first token set to BOS, predictions from n_ctx / 2 on).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "flashnorm/engine/evaluate.h"
#include "flashnorm/error.h"

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

// Logits 0.1 * ((j + t) % V) at chunk position t whatever the tokens (each row a rotation of the
// same values, so one logsumexp): a target j scored at position t costs logsumexp - 0.1 ((j + t) %
// V) nats, so reading another position's row shows. Records every sequence it is given.
class Recorder final : public Engine {
 public:
  Recorder() { cfg_.vocab = kVocab; }
  static constexpr int kVocab = 16;
  void reset() override { pos_ = 0; }
  int position() const override { return pos_; }
  int max_context() const override { return 64; }
  const ModelConfig& config() const override { return cfg_; }
  NormMode mode() const override { return NormMode::Standard; }
  std::vector<float> forward(std::span<const int32_t> tokens, bool all_logits) override {
    seen.emplace_back(tokens.begin(), tokens.end());
    pos_ += tokens.size();
    std::vector<float> l((all_logits ? tokens.size() : 1) * kVocab);
    for (size_t i = 0; i < l.size(); ++i) l[i] = 0.1f * ((i % kVocab + i / kVocab) % kVocab);
    return l;
  }
  const char* device() const override { return "cpu"; }
  std::string describe() const override { return "recorder"; }
  std::vector<std::vector<int32_t>> seen;

 private:
  ModelConfig cfg_;
  int pos_ = 0;
};

// The summed NLL of (position, target) pairs under Recorder's logits, in fp64.
double nll_of(const std::vector<std::pair<int, int32_t>>& scored) {
  double lse = 0;
  for (int j = 0; j < Recorder::kVocab; ++j) lse += std::exp(double(0.1f * j));
  double nll = 0;
  for (auto [t, j] : scored) nll += std::log(lse) - double(0.1f * ((j + t) % Recorder::kVocab));
  return nll;
}

std::vector<int32_t> iota(int n) {
  std::vector<int32_t> v(n);
  for (int i = 0; i < n; ++i) v[i] = i;
  return v;
}

TEST(TeacherForcedChunks, LlamaPerplexityWithBos) {
  Recorder a;
  const std::vector<int32_t> text = iota(11);  // s = [99, 0 .. 10]: 12 tokens, 3 chunks of 4
  const auto st = compare_teacher_forced(
      a, {}, text, TextChunks{.ctx = 4, .bos = 99, .layout = ChunkLayout::kLlamaPerplexity});
  const std::vector<std::vector<int32_t>> want = {{99, 0, 1, 2}, {99, 4, 5, 6}, {99, 8, 9, 10}};
  EXPECT_EQ(a.seen, want);
  ASSERT_EQ(st.size(), 1u);
  EXPECT_EQ(st[0].positions, 3u);  // position 2 of each chunk predicts position 3
  EXPECT_NEAR(st[0].nll_a, nll_of({{2, 2}, {2, 6}, {2, 10}}), 1e-9);
}

TEST(TeacherForcedChunks, LlamaPerplexityWithoutBosDropsThePartialChunk) {
  Recorder a;
  const auto st = compare_teacher_forced(
      a, {}, iota(9), TextChunks{.ctx = 4, .layout = ChunkLayout::kLlamaPerplexity});
  const std::vector<std::vector<int32_t>> want = {{0, 1, 2, 3}, {4, 5, 6, 7}};
  EXPECT_EQ(a.seen, want);
  EXPECT_EQ(st[0].positions, 2u);
  EXPECT_NEAR(st[0].nll_a, nll_of({{2, 3}, {2, 7}}), 1e-9);
}

TEST(TeacherForcedChunks, EveryPositionPrependsBosAndScoresAll) {
  Recorder a;
  const auto st = compare_teacher_forced(a, {}, iota(5), TextChunks{.ctx = 3, .bos = 99});
  const std::vector<std::vector<int32_t>> want = {{99, 0, 1}, {99, 2, 3}, {99, 4}};
  EXPECT_EQ(a.seen, want);
  EXPECT_EQ(st[0].positions, 5u);
  EXPECT_NEAR(st[0].nll_a, nll_of({{0, 0}, {1, 1}, {0, 2}, {1, 3}, {0, 4}}), 1e-9);
  // the layouts differ: the same text and ctx scored as llama-perplexity gives other figures
  Recorder b;
  const auto sl = compare_teacher_forced(
      b, {}, iota(5), TextChunks{.ctx = 3, .bos = 99, .layout = ChunkLayout::kLlamaPerplexity});
  EXPECT_NE(sl[0].positions, st[0].positions);
}

TEST(TeacherForcedChunks, NoWholeChunkOrNoScoredPositionIsAnError) {
  Recorder a;
  EXPECT_THROW(compare_teacher_forced(
                   a, {}, iota(8), TextChunks{.ctx = 2, .layout = ChunkLayout::kLlamaPerplexity}),
               Error);
  EXPECT_THROW(compare_teacher_forced(
                   a, {}, iota(2), TextChunks{.ctx = 4, .layout = ChunkLayout::kLlamaPerplexity}),
               Error);
}

}  // namespace
}  // namespace flashnorm
