// `flashnorm verify` on the real SmolLM2-135M: original GGUF (standard mode) against the folded
// GGUF stored as F32 (flashnorm mode), on the GPL-3 text every Debian machine carries.
// Bars (issue "Fold a real checkpoint and run it"): perplexities within 1e-4 relative, greedy
// generations identical for 64 tokens on 3 prompts, largest relative logit difference <= 1e-4.
// The same run reports BF16 and requantized Q4_1 folds (no bar; the figures go to docs/).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "support/random_llama.h"

namespace flashnorm {
namespace {
namespace fs = std::filesystem;
using testing::run_cli;

TEST(VerifySmolLM2, FoldedF32ComputesTheSameFunction) {
  const std::string src = testing::smollm2_path();
  ASSERT_TRUE(fs::exists(src)) << src << " missing: run scripts/fetch_models.sh";
  const fs::path dir = testing::fresh_dir("verify");
  const std::string f32 = (dir / "f32.gguf").string(), bf16 = (dir / "bf16.gguf").string(),
                    q41 = (dir / "q4_1.gguf").string();
  auto r = run_cli("fold " + src + " -o " + f32);
  ASSERT_EQ(r.code, 0) << r.err;
  r = run_cli("fold " + src + " -o " + bf16 + " --dtype bf16");
  ASSERT_EQ(r.code, 0) << r.err;
  r = run_cli("fold " + src + " -o " + q41 + " --requantize");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("relative RMS error added"), std::string::npos) << r.out;

  const std::string gpl3 = "/usr/share/common-licenses/GPL-3";
  ASSERT_TRUE(fs::exists(gpl3));
  // Keeps a copy beside the build for docs/verify.md.
  const nlohmann::json v =
      testing::run_verify(src + " " + f32 + " " + bf16 + " " + q41 + " --text " + gpl3, dir,
                          fs::path(FLASHNORM_BINARY_DIR) / "verify_smollm2.json");
  ASSERT_FALSE(v.is_null());
  ASSERT_EQ(v["results"].size(), 3u);
  EXPECT_EQ(v["text_tokens"].get<int>(), testing::kVerifyTextTokens);  // GPL-3's first
  fs::remove_all(dir);  // the folded models are large
  const auto& f = v["results"][0];
  EXPECT_LE(f["ppl_rel_diff"].get<double>(), 1e-4);
  EXPECT_LE(f["max_rel_logit_diff"].get<double>(), 1e-4);
  EXPECT_EQ(f["greedy_identical_prompts"].get<int>(), 3);
  for (const auto& g : f["greedy"])
    EXPECT_EQ(g["agree_prefix"].get<int>(), testing::kVerifyGreedyTokens) << g["prompt"];
  // Sanity of the measurement itself: a real perplexity, and the lossy folds do differ.
  EXPECT_GT(f["ppl_original"].get<double>(), 1.5);
  EXPECT_LT(f["ppl_original"].get<double>(), 100.0);
  EXPECT_GT(v["results"][1]["max_rel_logit_diff"].get<double>(),
            f["max_rel_logit_diff"].get<double>());
  EXPECT_GT(v["results"][2]["max_rel_logit_diff"].get<double>(),
            v["results"][1]["max_rel_logit_diff"].get<double>());
}

}  // namespace
}  // namespace flashnorm
