// `flashnorm verify` on the real Gemma 3 270M (issue "Gemma 3 with FlashNorm"): original GGUF in
// standard mode against the folded GGUF stored as F32 in flashnorm mode with cancellation on
// (q and k get no rstd: QK-norm renormalizes them). Bars: perplexity within 1e-4 relative,
// identical greedy tokens for 64 tokens on 3 prompts; the relative logit difference caused by
// the dropped rstd stays within rounding plus the measured eps bound (model/audit.h). BOS is
// prepended to every prompt and text chunk, as Gemma expects.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "support/random_llama.h"

namespace flashnorm {
namespace {
namespace fs = std::filesystem;
using testing::run_cli;

TEST(VerifyGemma3, FoldedF32WithCancellationComputesTheSameFunction) {
  const std::string src = testing::gemma3_path();
  ASSERT_TRUE(fs::exists(src)) << src << " missing: run scripts/fetch_models.sh gemma3";
  const fs::path dir = testing::fresh_dir("verify_gemma3");
  const std::string f32 = (dir / "f32.gguf").string();
  auto r = run_cli("fold " + src + " -o " + f32);
  ASSERT_EQ(r.code, 0) << r.err;
  r = run_cli("inspect " + f32);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("folded:       yes"), std::string::npos);
  EXPECT_NE(r.out.find("rstd cancels: output renormalized by blk.0.attn_q_norm.weight"),
            std::string::npos);

  const nlohmann::json v =
      testing::run_verify(src + " " + f32 + " --text /usr/share/common-licenses/GPL-3", dir,
                          fs::path(FLASHNORM_BINARY_DIR) / "verify_gemma3.json");
  ASSERT_FALSE(v.is_null());
  fs::remove_all(dir);  // the folded models are large
  const auto& f = v["results"][0];
  EXPECT_EQ(v["text_tokens"].get<int>(), testing::kVerifyTextTokens);
  EXPECT_TRUE(f["cancellation"].get<bool>());
  EXPECT_LE(f["ppl_rel_diff"].get<double>(), 1e-4);
  EXPECT_EQ(f["greedy_identical_prompts"].get<int>(), 3);
  for (const auto& g : f["greedy"])
    EXPECT_EQ(g["agree_prefix"].get<int>(), testing::kVerifyGreedyTokens) << g["prompt"];
  const double row_err = f["max_cancellation_row_error"].get<double>();
  EXPECT_GT(row_err, 0.0);
  // The logits move no more than the largest renormalized row does (plus fp32 rounding).
  EXPECT_LE(f["cancellation_rel_logit_diff"].get<double>(), row_err + 1e-5);
  EXPECT_GT(f["ppl_original"].get<double>(), 1.5);
  EXPECT_LT(f["ppl_original"].get<double>(), 100.0);
}

}  // namespace
}  // namespace flashnorm
