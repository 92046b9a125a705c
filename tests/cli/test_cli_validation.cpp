// One validation for every subcommand (issue 17, item 4): a file `generate` refuses is refused by
// `inspect` (after printing what it could read) and by `fold` (before writing anything) with the
// same one-line error and exit code 1. Before, inspect exited 0 on such files and fold copied bad
// tokenizer metadata into a "folded" model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>

#include "cli_run.h"
#include "flashnorm/io/gguf.h"
#include "support/gguf_rewrite.h"
#include "support/random_llama.h"

namespace flashnorm {
namespace {
namespace fs = std::filesystem;
using testing::run_cli;

class CliValidation : public ::testing::Test {
 protected:
  void SetUp() override {
    vocab_ = testing::smollm2_path();
    if (!fs::exists(vocab_)) GTEST_SKIP() << "needs the SmolLM2 GGUF (scripts/fetch_models.sh)";
    dir_ = testing::fresh_dir("cli_validation");
    testing::RandomLlamaOptions o;
    o.vocab = 49152;  // SmolLM2's vocabulary, whose tokenizer keys every model here carries
    testing::write_random_gguf(dir_ / "plain.gguf", o);
  }

  // A model with SmolLM2's tokenizer, then `edit` applied.
  fs::path make(const std::string& name, const testing::GgufEdit& edit) {
    testing::rewrite_gguf(dir_ / "plain.gguf", dir_ / name, [&](auto& kvs, auto& ts) {
      testing::add_vocabulary(kvs, vocab_);
      edit(kvs, ts);
    });
    return dir_ / name;
  }

  // inspect, fold and generate all refuse `model` with one identical stderr line containing
  // `needle`; inspect printed what it read first; fold wrote nothing.
  void expect_refused_alike(const fs::path& model, const std::string& needle) {
    SCOPED_TRACE(model.string());
    const auto gen = run_cli("generate -m " + model.string() + " -p hi -n 1 --device cpu");
    const auto insp = run_cli("inspect " + model.string());
    const fs::path out = dir_ / "out.gguf";
    const auto fold = run_cli("fold " + model.string() + " -o " + out.string());
    for (const auto* r : {&gen, &insp, &fold}) {
      EXPECT_EQ(r->code, 1) << r->err;
      EXPECT_EQ(std::count(r->err.begin(), r->err.end(), '\n'), 1) << r->err;
    }
    EXPECT_NE(gen.err.find(needle), std::string::npos) << gen.err;
    EXPECT_EQ(insp.err, gen.err);
    EXPECT_EQ(fold.err, gen.err);
    EXPECT_NE(insp.out.find("architecture: llama (2 layers)"), std::string::npos) << insp.out;
    EXPECT_FALSE(fs::exists(out));
  }

  fs::path vocab_, dir_;
};

TEST_F(CliValidation, ValidModelPassesEverySubcommand) {
  const fs::path m = make("good.gguf", [](auto&, auto&) {});
  EXPECT_EQ(run_cli("inspect " + m.string()).code, 0);
  const auto f = run_cli("fold " + m.string() + " -o " + (dir_ / "good_out.gguf").string());
  EXPECT_EQ(f.code, 0) << f.err;
  EXPECT_EQ(run_cli("inspect " + (dir_ / "good_out.gguf").string()).code, 0);
  const auto g = run_cli("generate -m " + m.string() + " -p hi -n 1 --device cpu");
  EXPECT_EQ(g.code, 0) << g.err;
}

TEST_F(CliValidation, BadTokenizerMetadataIsRefusedByAll) {
  // A special token id past the vocabulary.
  expect_refused_alike(make("bos.gguf",
                            [](auto& kvs, auto&) {
                              for (auto& kv : kvs) {
                                if (kv.key == "tokenizer.ggml.bos_token_id")
                                  kv.value = io::GgufValue::make_u32(4000000);
                              }
                            }),
                       "tokenizer.ggml.bos_token_id");
  // A token_type array shorter than the tokens.
  expect_refused_alike(make("types.gguf",
                            [](auto& kvs, auto&) {
                              for (auto& kv : kvs) {
                                if (kv.key == "tokenizer.ggml.token_type") kv.value.i_arr.resize(7);
                              }
                            }),
                       "tokenizer.ggml.token_type");
  // An unknown pre-tokenizer.
  expect_refused_alike(make("pre.gguf",
                            [](auto& kvs, auto&) {
                              for (auto& kv : kvs) {
                                if (kv.key == "tokenizer.ggml.pre")
                                  kv.value = io::GgufValue::make_string("no-such-pre");
                              }
                            }),
                       "tokenizer.ggml.pre");
}

TEST_F(CliValidation, WeightsTheEngineWouldNotComputeAsStoredAreRefusedByAll) {
  expect_refused_alike(make("nan.gguf",
                            [](auto&, auto& ts) {
                              testing::set_f32(*testing::find_f32(ts, "blk.1.ffn_up.weight"), 123,
                                               NAN);
                            }),
                       "'blk.1.ffn_up.weight' element 123 is nan");
  expect_refused_alike(make("bias.gguf",
                            [](auto&, auto& ts) {
                              ts.push_back(testing::f32_tensor("blk.1.attn_v.bias", {32}, 0.1f));
                            }),
                       "is a bias that the llama model does not declare");
  expect_refused_alike(
      make("layer2.gguf",
           [](auto&, auto& ts) {
             ts.push_back(testing::f32_tensor("blk.2.attn_norm.weight", {64}, 1.0f));
           }),
      "belongs to layer 2, but block_count = 2");
}

}  // namespace
}  // namespace flashnorm
