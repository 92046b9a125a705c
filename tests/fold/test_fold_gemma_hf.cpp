// Folding a Hugging Face Gemma 3 checkpoint, whose norm gains are stored as w and applied as
// (1 + w): the folded model equals the original; a fold that treats w as a plain gain is caught;
// the HF file and its GGUF form (1 added in, as llama.cpp's converter does) are the same model.
#include <gtest/gtest.h>

#include "flashnorm/engine/cpu_engine.h"
#include "flashnorm/engine/evaluate.h"
#include "flashnorm/fold/fold.h"
#include "flashnorm/io/safetensors.h"
#include "flashnorm/model/model.h"
#include "support/random_llama.h"

namespace flashnorm {
namespace {
namespace fs = std::filesystem;

class FoldGemmaHf : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::fresh_dir("fold_gemma_hf");
    opt_ = testing::small_gemma3_options(21);
    testing::write_random_llama(dir_ / "hf", opt_);
    for (int i = 0; i < 48; ++i) seq_.push_back((i * 53 + 5) % opt_.vocab);
  }
  fs::path dir_;
  testing::RandomLlamaOptions opt_;
  std::vector<int32_t> seq_;
};

TEST_F(FoldGemmaHf, OnePlusGainsFoldToTheSameFunction) {
  FoldReport r = fold_hf(dir_ / "hf", dir_ / "folded");
  EXPECT_EQ(r.arch, "gemma3");
  // Folded: attn_norm and ffn_norm of 6 layers + output_norm; never the post norms / QK norms.
  EXPECT_EQ(r.folded_norms.size(), 6u * 2 + 1);
  io::HfModelDir f = io::HfModelDir::open(dir_ / "folded");
  for (float v : f.load_fp32("model.layers.0.input_layernorm.weight")) ASSERT_EQ(v, 0.0f);
  io::HfModelDir o = io::HfModelDir::open(dir_ / "hf");
  EXPECT_EQ(f.load_fp32("model.layers.0.post_attention_layernorm.weight"),
            o.load_fp32("model.layers.0.post_attention_layernorm.weight"));
  EXPECT_EQ(f.load_fp32("model.layers.0.self_attn.q_norm.weight"),
            o.load_fp32("model.layers.0.self_attn.q_norm.weight"));
  for (bool cancel : {false, true}) {
    CpuEngine a(load_model(dir_ / "hf"), NormMode::Standard, {.max_context = 64});
    CpuEngine b(load_model(dir_ / "folded"), NormMode::FlashNorm,
                {.max_context = 64, .cancel = cancel});
    ComparisonStats st = compare_teacher_forced(a, &b, seq_, 48);
    EXPECT_LE(st.max_rel_logit_diff, 1e-5) << "cancel " << cancel;
    EXPECT_EQ(st.top1_agree, st.positions);
    std::vector<int32_t> prompt(seq_.begin(), seq_.begin() + 5);
    EXPECT_EQ(greedy_tokens(a, prompt, 20), greedy_tokens(b, prompt, 20));
  }
}

TEST_F(FoldGemmaHf, TreatingWAsAPlainGainIsCaught) {
  FoldOptions wrong;
  wrong.assume_gains = GainConvention::Plain;
  fold_hf(dir_ / "hf", dir_ / "wrong", wrong);
  CpuEngine a(load_model(dir_ / "hf"), NormMode::Standard, {.max_context = 64});
  CpuEngine b(load_model(dir_ / "wrong"), NormMode::FlashNorm, {.max_context = 64});
  ComparisonStats st = compare_teacher_forced(a, &b, seq_, 48);
  EXPECT_GT(st.max_rel_logit_diff, 1e-2);
}

TEST_F(FoldGemmaHf, HfAndGgufFormsAreTheSameModel) {
  testing::write_random_gguf(dir_ / "g.gguf", opt_);
  for (NormMode mode : {NormMode::Standard, NormMode::FlashNorm}) {
    CpuEngine a(load_model(dir_ / "hf"), mode, {.max_context = 64});
    CpuEngine b(load_model(dir_ / "g.gguf"), mode, {.max_context = 64});
    ComparisonStats st = compare_teacher_forced(a, &b, seq_, 48);
    EXPECT_LE(st.max_rel_logit_diff, 1e-5);
  }
}

}  // namespace
}  // namespace flashnorm
