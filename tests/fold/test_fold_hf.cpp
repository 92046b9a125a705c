// Folding a Hugging Face Llama directory (two shards): the folded model in flashnorm mode
// computes the same function as the original in standard mode; folding twice is refused; the
// input is untouched; a tied LM head is untied with the embedding unchanged.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "flashnorm/engine/cpu_engine.h"
#include "flashnorm/engine/evaluate.h"
#include "flashnorm/error.h"
#include "flashnorm/fold/fold.h"
#include "flashnorm/io/safetensors.h"
#include "flashnorm/model/model.h"
#include "support/random_llama.h"

namespace flashnorm {
namespace {
namespace fs = std::filesystem;
using testing::fingerprint;
using testing::fresh_dir;

class FoldHf : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fresh_dir("fold_hf");
    in_ = root_ / "orig";
    out_ = root_ / "folded";
    testing::write_random_llama(in_);
  }
  fs::path root_, in_, out_;
};

TEST_F(FoldHf, WritesTwoShardsWithIndex) {
  EXPECT_TRUE(fs::exists(in_ / "model.safetensors.index.json"));
  EXPECT_TRUE(fs::exists(in_ / "model-00001-of-00002.safetensors"));
  EXPECT_TRUE(fs::exists(in_ / "model-00002-of-00002.safetensors"));
}

TEST_F(FoldHf, FoldedMatchesOriginalInEngine) {
  FoldReport r = fold_hf(in_, out_);
  EXPECT_EQ(r.arch, "llama");
  EXPECT_EQ(r.folded_norms.size(), 2u * 2 + 1);
  EXPECT_EQ(r.tensors.size(), 2u * 5 + 1);
  EXPECT_TRUE(r.untied_head);

  CpuEngine orig(load_model(in_), NormMode::Standard, {.max_context = 256});
  CpuEngine folded(load_model(out_), NormMode::FlashNorm, {.max_context = 256});
  std::vector<int32_t> prompt = {5, 17, 42, 99, 3, 250, 7};
  // Teacher-forced logits over a longer random sequence: relative difference within 1e-5.
  std::vector<int32_t> seq;
  for (int i = 0; i < 200; ++i) seq.push_back((i * 7919 + 13) % 300);
  ComparisonStats st = compare_teacher_forced(orig, &folded, seq, 100);
  EXPECT_LE(st.max_rel_logit_diff, 1e-5);
  EXPECT_GT(st.max_rel_logit_diff, 0.0) << "folding with gains != 1 must change rounding somewhere";
  EXPECT_EQ(st.top1_agree, st.positions);
  EXPECT_NEAR(st.ppl_a(), st.ppl_b(), 1e-5 * st.ppl_a());
  // Greedy tokens identical.
  EXPECT_EQ(greedy_tokens(orig, prompt, 64), greedy_tokens(folded, prompt, 64));
}

TEST_F(FoldHf, FoldedWithoutDeferralIsDifferentFunction) {
  // Guard against a test that cannot fail: the folded weights run with their gains re-applied
  // (treating the folded file as unfolded with the original gains) must not match.
  fold_hf(in_, out_);
  Model bad = load_model(out_);
  Model orig = load_model(in_);
  for (auto& [name, t] : bad.tensors) {
    if (name.find("norm") != std::string::npos) t.data = orig.get(name).data;
  }
  CpuEngine a(std::move(orig), NormMode::Standard, {.max_context = 64});
  CpuEngine b(std::move(bad), NormMode::Standard, {.max_context = 64});
  std::vector<int32_t> seq = {1, 2, 3, 4, 5, 6, 7, 8};
  ComparisonStats st = compare_teacher_forced(a, &b, seq, 8);
  EXPECT_GT(st.max_rel_logit_diff, 1e-3);
}

TEST_F(FoldHf, TiedHeadIsUntiedAndEmbeddingUnchanged) {
  fold_hf(in_, out_);
  io::HfModelDir a = io::HfModelDir::open(in_), b = io::HfModelDir::open(out_);
  EXPECT_EQ(a.find("lm_head.weight"), nullptr);
  ASSERT_NE(b.find("lm_head.weight"), nullptr);
  EXPECT_EQ(a.load_fp32("model.embed_tokens.weight"), b.load_fp32("model.embed_tokens.weight"));
  EXPECT_FALSE(b.config().at("tie_word_embeddings").get<bool>());
  // The new head is the embedding times the final gain, column by column.
  auto emb = a.load_fp32("model.embed_tokens.weight");
  auto g = a.load_fp32("model.norm.weight");
  auto head = b.load_fp32("lm_head.weight");
  const size_t H = g.size();
  for (size_t i = 0; i < head.size(); ++i) {
    ASSERT_EQ(head[i], static_cast<float>(double(emb[i]) * g[i % H])) << i;
  }
  // Norms are at identity; the rest of the config is unchanged.
  for (float v : b.load_fp32("model.norm.weight")) ASSERT_EQ(v, 1.0f);
  nlohmann::json ca = a.config(), cb = b.config();
  ca.erase("tie_word_embeddings");
  cb.erase("tie_word_embeddings");
  EXPECT_EQ(ca, cb);
  EXPECT_EQ(b.shards().size(), 2u);
}

TEST_F(FoldHf, FoldingTwiceIsRefused) {
  fold_hf(in_, out_);
  try {
    fold_hf(out_, root_ / "twice");
    FAIL() << "second fold was not refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("already folded"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(root_ / "twice" / "model.safetensors.index.json"));
}

TEST_F(FoldHf, InputIsNeverTouched) {
  const uint64_t before = fingerprint(in_);
  fold_hf(in_, out_);
  EXPECT_EQ(fingerprint(in_), before);
  EXPECT_THROW(fold_hf(in_, in_), Error);
  EXPECT_EQ(fingerprint(in_), before);
}

}  // namespace
}  // namespace flashnorm
