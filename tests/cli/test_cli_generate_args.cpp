// `generate` arguments that must be refused (one line on stderr, exit 1) instead of silently
// meaning something else: a negative --top-k, a --seed outside 0..2^64-1, --system without
// --chat, a prompt that is not valid UTF-8, a --tokenizer whose vocabulary does not fit the
// model; and the prompt from a file (-f FILE, - for standard input).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "cli_run.h"
#include "support/random_llama.h"

namespace flashnorm {
namespace {
namespace fs = std::filesystem;
using testing::run_cli;

void expect_one_line_error(const testing::CliResult& r, const std::string& needle) {
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
}

// A random GGUF model of SmolLM2's vocabulary size, with "--tokenizer SmolLM2" for its words.
// `vocab` other than 49152 gives a model the tokenizer does not fit.
std::string model_args(const fs::path& dir, int vocab = 49152) {
  testing::RandomLlamaOptions o;
  o.vocab = vocab;
  const fs::path p = dir / ("m" + std::to_string(vocab) + ".gguf");
  if (!fs::exists(p)) testing::write_random_gguf(p, o);
  return "generate -m " + p.string() + " --tokenizer " + testing::smollm2_path() +
         " -n 2 --device cpu";
}

// `s` as one shell word that printf expands to exactly its bytes (every byte octal-escaped).
std::string shell_bytes(const std::string& s) {
  std::string w = "\"$(printf '";
  char buf[8];
  for (unsigned char c : s) {
    std::snprintf(buf, sizeof buf, "\\%03o", c);
    w += buf;
  }
  return w + "')\"";
}

TEST(GenerateArgs, TopKMustNotBeNegative) {
  const std::string m = model_args(testing::fresh_dir("gen_topk"));
  expect_one_line_error(run_cli(m + " -p hi --temperature 0.8 --top-k -5"), "--top-k");
  EXPECT_EQ(run_cli(m + " -p hi --temperature 0.8 --top-k 0").code, 0);
}

TEST(GenerateArgs, SeedMustFitUint64) {
  const std::string m = model_args(testing::fresh_dir("gen_seed"));
  for (const char* bad : {"-1", "18446744073709551616", "99999999999999999999999", "1.5", "0x10"}) {
    SCOPED_TRACE(bad);
    expect_one_line_error(run_cli(m + " -p hi --temperature 0.8 --seed " + bad), "--seed");
  }
  const auto r = run_cli(m + " -p hi --temperature 0.8 --seed 18446744073709551615");
  EXPECT_EQ(r.code, 0) << r.err;
}

TEST(GenerateArgs, SystemNeedsChat) {
  const std::string m = model_args(testing::fresh_dir("gen_system"));
  expect_one_line_error(run_cli(m + " -p hi --system 'be brief'"), "--chat");
  const auto r = run_cli(m + " -p hi --chat --system 'be brief'");
  EXPECT_EQ(r.code, 0) << r.err;
}

// Ill-formed UTF-8 (Unicode table 3-7) is refused with the offset of the first bad sequence,
// never dropped (SmolLM2 has no token for 0xC0, 0xC1, 0xF5..0xFF); well-formed text passes.
TEST(GenerateArgs, InvalidUtf8PromptIsRefusedWithItsOffset) {
  const fs::path d = testing::fresh_dir("gen_utf8");
  const std::string m = model_args(d);
  const std::pair<std::string, int> bad[] = {
      {"ab\xC0\x80", 2},            // overlong lead 0xC0
      {"\xC1\xBF", 0},              // overlong lead 0xC1
      {"x\xF8", 1},                 // 0xF8: no such lead
      {"hi \xFF", 3},               // 0xFF
      {"\xE2\x82", 0},              // truncated 3-byte sequence
      {"ok\xE0\x80\x80", 2},        // overlong 3-byte form of U+0000
      {"\xED\xA0\x80", 0},          // surrogate U+D800
      {"\xF4\x90\x80\x80", 0},      // above U+10FFFF
      {"a\x80", 1},                 // stray continuation byte
      {"\xE6\x97\xA5\xF0\x9F", 3},  // truncated 4-byte sequence after a valid one
  };
  for (const auto& [text, at] : bad) {
    SCOPED_TRACE(at);
    expect_one_line_error(run_cli(m + " -p " + shell_bytes(text)),
                          "byte offset " + std::to_string(at));
  }
  std::ofstream(d / "bad.txt", std::ios::binary) << "fine\n\xF5 then";
  const auto r = run_cli(m + " -f " + (d / "bad.txt").string());
  expect_one_line_error(r, "byte offset 5");
  EXPECT_NE(r.err.find("bad.txt"), std::string::npos) << r.err;
  const std::string good = "h\xC3\xA9llo \xE6\x97\xA5 \xF0\x9F\x98\x80";
  const auto ok = run_cli(m + " -p " + shell_bytes(good));
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_EQ(ok.out.rfind(good, 0), 0u) << ok.out;
}

// The vocabulary must have exactly the embedding's rows: fewer rows than tokens let prompt ids
// fall outside the embedding, more let the model sample ids the tokenizer cannot print.
TEST(GenerateArgs, TokenizerMustFitTheModel) {
  const fs::path d = testing::fresh_dir("gen_vocab");
  for (int vocab : {300, 49153}) {
    SCOPED_TRACE(vocab);
    expect_one_line_error(run_cli(model_args(d, vocab) + " -p hi"), "does not fit");
    expect_one_line_error(run_cli(model_args(d, vocab) + " -p 'a much longer prompt'"),
                          "does not fit");
  }
}

TEST(GenerateArgs, PromptFromFile) {
  const fs::path d = testing::fresh_dir("gen_file");
  const std::string m = model_args(d);
  std::string text = "Once upon a time";
  for (int i = 0; i < 25; ++i) text += " there was a long prompt, line " + std::to_string(i);
  std::ofstream(d / "prompt.txt") << text;
  auto r = run_cli(m + " -f " + (d / "prompt.txt").string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.rfind(text, 0), 0u) << r.out;
  r = run_cli(m + " --file " + (d / "prompt.txt").string() + " --ctx 64");
  expect_one_line_error(r, "exceeds the context");  // the whole file is the prompt
}

TEST(GenerateArgs, PromptFromStandardInput) {
  const fs::path d = testing::fresh_dir("gen_stdin");
  const std::string m = model_args(d);
  std::ofstream(d / "in.txt") << "Once upon a time";
  const fs::path out = d / "out.txt", err = d / "err.txt";
  const std::string cmd = "cat " + (d / "in.txt").string() + " | " FLASHNORM_CLI " " + m.substr(0) +
                          " -f - >" + out.string() + " 2>" + err.string();
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  std::ifstream o(out), e(err);
  std::stringstream so, se;
  so << o.rdbuf();
  se << e.rdbuf();
  EXPECT_EQ(WEXITSTATUS(status), 0) << se.str();
  EXPECT_EQ(so.str().rfind("Once upon a time", 0), 0u) << so.str();
}

TEST(GenerateArgs, PromptFileErrors) {
  const fs::path d = testing::fresh_dir("gen_file_err");
  const std::string m = model_args(d);
  auto r = run_cli(m + " -f " + (d / "missing.txt").string());
  expect_one_line_error(r, "missing.txt");
  expect_one_line_error(r, "No such file");
  fs::create_directories(d / "adir");
  expect_one_line_error(run_cli(m + " -f " + (d / "adir").string()), "not a regular file");
  // a device that never ends (was read until memory ran out)
  expect_one_line_error(run_cli(m + " -f /dev/zero"), "not a regular file");
  std::ofstream(d / "p.txt") << "hi";
  expect_one_line_error(run_cli(m + " -p hi -f " + (d / "p.txt").string()), "excludes");
  expect_one_line_error(run_cli(m), "-f FILE");
  if (::geteuid() != 0) {  // root reads any file
    fs::permissions(d / "p.txt", fs::perms::none);
    expect_one_line_error(run_cli(m + " -f " + (d / "p.txt").string()), "cannot open");
  }
}

TEST(GenerateArgs, FlagsThatWouldDoNothingAreRefused) {
  const fs::path d = testing::fresh_dir("gen_noop_flags");
  const std::string m = model_args(d);
  expect_one_line_error(run_cli(m + " -p hi --norm standard --no-cancel"), "--no-cancel");
  expect_one_line_error(run_cli(m + " -p hi --tokenizer ''"), "--tokenizer");
  testing::write_random_gguf(d / "r.gguf");
  expect_one_line_error(run_cli("fold " + (d / "r.gguf").string() + " -o " +
                                (d / "o.gguf").string() + " --requantize --dtype f16"),
                        "--requantize");
  EXPECT_FALSE(fs::exists(d / "o.gguf"));
}

TEST(FoldArgs, RequantizeTypeInAnyCase) {
  const fs::path d = testing::fresh_dir("fold_requantize_case");
  testing::write_random_gguf(d / "r.gguf");
  const std::string fold = "fold " + (d / "r.gguf").string() + " -o ";
  const testing::CliResult r = run_cli(fold + (d / "a.gguf").string() + " --requantize SaMe");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::exists(d / "a.gguf"));
  expect_one_line_error(run_cli(fold + (d / "b.gguf").string() + " --requantize q3_k"),
                        "--requantize");
}

}  // namespace
}  // namespace flashnorm
