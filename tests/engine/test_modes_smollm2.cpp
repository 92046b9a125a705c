// standard and flashnorm modes, on the unfolded and on the folded SmolLM2 file, give the same
// greedy tokens.
#include <gtest/gtest.h>

#include "flashnorm/engine/cpu_engine.h"
#include "flashnorm/engine/evaluate.h"
#include "flashnorm/fold/fold.h"
#include "flashnorm/io/gguf.h"
#include "flashnorm/model/model.h"
#include "flashnorm/tokenizer/tokenizer.h"
#include "support/random_llama.h"

namespace flashnorm {
namespace {
namespace fs = std::filesystem;

TEST(ModesSmolLM2, SameGreedyTokensInEveryModeAndFile) {
  const std::string src = testing::smollm2_path();
  ASSERT_TRUE(fs::exists(src)) << src << " missing: run scripts/fetch_models.sh";
  const fs::path folded = testing::fresh_dir("modes") / "folded.gguf";
  fold_gguf(src, folded);
  io::GgufFile vocab = io::GgufFile::open(src);
  Tokenizer tok = Tokenizer::from_gguf(vocab);
  std::vector<int32_t> prompt = tok.encode("The three primary colors are", false);
  const int n = 48;
  CpuEngine ref_engine(load_model(src), NormMode::Standard, {.max_context = 128});
  const std::vector<int32_t> ref = greedy_tokens(ref_engine, prompt, n);
  for (const auto& file : {fs::path(src), folded}) {
    for (NormMode mode : {NormMode::Standard, NormMode::FlashNorm}) {
      if (file == src && mode == NormMode::Standard) continue;
      CpuEngine e(load_model(file), mode, {.max_context = 128});
      EXPECT_EQ(greedy_tokens(e, prompt, n), ref)
          << file << " in " << (mode == NormMode::Standard ? "standard" : "flashnorm") << " mode";
    }
  }
  fs::remove_all(folded.parent_path());
  // The generation is English text, not a degenerate repetition of one token.
  std::string text = tok.decode(ref);
  EXPECT_GT(std::set<int32_t>(ref.begin(), ref.end()).size(), 10u) << text;
}

}  // namespace
}  // namespace flashnorm
