// Gemma 3 (270M GGUF) SentencePiece BPE tokenizer and Gemma chat prompt against outside references.
//
// Expected ids, decoded texts and chat prompts are in tests/tokenizer/data/gemma3_reference.json,
// produced by Google's `sentencepiece` 0.2.3 (a BPE ModelProto assembled from the GGUF vocabulary
// read with the `gguf` package; settings and the control-token handling are described in the
// script) and `jinja2` 3.1.6 (Gemma 3's published chat template, google/gemma-3-4b-it
// tokenizer_config.json; the 270M GGUF is the pre-trained model and has no template) with this
// exact command:
//   pip install gguf==0.19.0 sentencepiece==0.2.3 protobuf==7.36.2 jinja2==3.1.6
//   python3 tests/tokenizer/make_gemma3_reference.py \
//       /root/.cache/flashnorm/models/gemma3/gemma-3-270m-q4_k_m.gguf \
//       tests/tokenizer/data/gemma3_reference.json
// Metadata facts checked below (262144 tokens, bos 2, eos 1, unk 3, pad 0, add_bos true,
// add_space_prefix false, <start_of_turn> 105, <end_of_turn> 106, byte tokens <0x00>..<0xFF> at
// 238..493, no tokenizer.chat_template, general.architecture gemma3) were read from the file with
// gguf.GGUFReader.
//
// The model comes from FLASHNORM_GEMMA3_GGUF (default: the fetch script's cache path); the test
// fails when it is missing.
#include <gtest/gtest.h>

#include <chrono>
#include <limits>
#include <string>
#include <vector>

#include "flashnorm/error.h"
#include "flashnorm/io/gguf.h"
#include "flashnorm/tokenizer/chat.h"
#include "flashnorm/tokenizer/model_tokenizer.h"
#include "flashnorm/tokenizer/tokenizer.h"
#include "support/gguf_rewrite.h"
#include "support/random_llama.h"
#include "support/tokenizer_reference.h"

using flashnorm::Tokenizer;
using flashnorm::io::GgufKv;
using flashnorm::io::GgufValue;
using namespace flashnorm::testing;  // test support: fixtures and checks

namespace {

const TokenizerFixture& fixture() {
  static const auto f =
      load_tokenizer_fixture(gemma3_path(), "FLASHNORM_GEMMA3_GGUF", "gemma3_reference.json");
  return *f;
}

// What decode(encode(s)) gives back: s itself, except that a literal U+2581 in the text is
// SentencePiece's space marker and comes back as a space (sentencepiece decodes it the same way).
std::string lower_blocks_as_spaces(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s.compare(i, 3, "\xe2\x96\x81") == 0) {
      out.push_back(' ');
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

}  // namespace

TEST(TokenizerGemma3, Metadata) {
  const Tokenizer& tok = fixture().tok;
  expect_vocab_facts(
      tok,
      {.vocab_size = 262144,
       .bos = 2,
       .eos = 1,
       .add_bos = true,
       .ids = {{"<start_of_turn>", 105}, {"<end_of_turn>", 106}, {"<0x00>", 238}, {"<0xFF>", 493}},
       .eog = {1, 106},  // <eos>, <end_of_turn>
       .not_eog = {105, 2, 0}});
  // Pieces: control tokens give their text, byte tokens their byte, "▁" is a space.
  EXPECT_EQ(tok.piece(105), "<start_of_turn>");
  EXPECT_EQ(tok.piece(238), std::string(1, '\0'));
  EXPECT_EQ(tok.piece(238 + 0x41), "A");
  EXPECT_EQ(tok.piece(493), "\xff");
  EXPECT_EQ(tok.piece(*tok.token_id("\xe2\x96\x81the")), " the");
  // Every control token is matched with parse_special, including <unk> (the sentencepiece
  // reference cannot cover this one: see make_gemma3_reference.py).
  EXPECT_EQ(tok.encode("<unk>"), (std::vector<int32_t>{3}));
  EXPECT_EQ(tok.encode("<bos>"), (std::vector<int32_t>{2}));
}

// Building the tokenizer twice from one file gives the same tokenizer (load times recorded as
// gtest properties, not asserted).
TEST(TokenizerGemma3, Loads) {
  RecordProperty("open_and_load_ms", std::to_string(fixture().load_ms));
  auto t0 = std::chrono::steady_clock::now();
  Tokenizer again = Tokenizer::from_gguf(fixture().file);
  RecordProperty("load_ms", std::to_string(ms_since(t0)));
  EXPECT_EQ(again.encode("Hello world"), (std::vector<int32_t>{9259, 1902}));
}

// Hand-written cases (ids and decoded texts), random strings, and texts encoded with special-token
// parsing off.
TEST(TokenizerGemma3, ReferenceCases) {
  expect_reference_sections(fixture().tok, fixture().ref, 60, 100, 4);
}

TEST(TokenizerGemma3, ByteFallback) {
  const auto& [file, tok, ref, load_ms] = fixture();
  const auto chars = ref.at("byte_fallback_chars").get<std::vector<std::string>>();
  ASSERT_GE(chars.size(), 6u);
  for (const std::string& ch : chars) {
    EXPECT_FALSE(tok.token_id(ch).has_value());
    std::vector<int32_t> want;
    for (unsigned char b : ch) want.push_back(238 + b);
    EXPECT_EQ(tok.encode(ch), want) << show(ch);
    EXPECT_EQ(tok.decode(want), ch);
  }
}

// Byte fallback covers every byte, so decode(encode(s)) == s for all texts (U+2581 aside), with and
// without special-token parsing.
TEST(TokenizerGemma3, RoundTrip) {
  const size_t n = expect_round_trips(
      fixture().tok, fixture().ref, {"cases", "random_cases", "no_special_cases"},
      [](const nlohmann::json& c, const std::string&) -> std::optional<std::string> {
        return lower_blocks_as_spaces(c.at("text"));
      });
  EXPECT_GE(n, 350u);
}

TEST(TokenizerGemma3, Gpl3TextMatchesReference) {
  expect_gpl3_ids(fixture().tok, fixture().ref.at("gpl3"));
}

// Invalid UTF-8 (no Python reference can take it): never crashes, ids in range, and every byte
// comes back (invalid bytes become their <0xNN> tokens).
TEST(TokenizerGemma3, InvalidUtf8NeverCrashesAndKeepsBytes) {
  const Tokenizer& tok = fixture().tok;
  auto expect_bytes = [&](const std::string& s) {
    std::vector<int32_t> ids = tok.encode(s);
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && static_cast<size_t>(id) < tok.vocab_size());
    EXPECT_EQ(tok.decode(ids), lower_blocks_as_spaces(s))
        << "input " << ::testing::PrintToString(s);
  };
  EXPECT_EQ(tok.encode("\x80"), (std::vector<int32_t>{238 + 0x80}));
  EXPECT_EQ(tok.encode("\xc3("), (std::vector<int32_t>{238 + 0xc3, *tok.token_id("(")}));
  expect_bytes("\xe2\x96 cut lower block \xe2\x96\x81");
  for_each_invalid_utf8("<end_of_turn>", expect_bytes);
}

TEST(TokenizerGemma3, LargeInputs) {
  const Tokenizer& tok = fixture().tok;
  // 256 KiB runs: one symbol sequence each (SentencePiece has no pre-tokenizer), or long runs of
  // user-defined space/newline/tab pieces.
  expect_large_runs_round_trip(tok, " a7\n!<");
  // 31 spaces is the longest user-defined run: 62 spaces are two of them.
  EXPECT_EQ(tok.encode(std::string(62, ' ')), (std::vector<int32_t>{167, 167}));
}

// Gemma's chat format against jinja2 renderings of the real Gemma 3 template, and the ids of the
// whole prompt (BOS + prompt) against sentencepiece.
TEST(TokenizerGemma3, ChatTemplate) {
  const TokenizerFixture& f = fixture();
  const Tokenizer& tok = f.tok;
  const flashnorm::ModelTokenizer model_tok =
      flashnorm::load_model_tokenizer(gemma3_path(), "", tok.vocab_size());
  const nlohmann::json& ref = f.ref;
  const std::string tmpl = ref.at("chat_template");
  EXPECT_EQ(flashnorm::detect_chat_style(tmpl), flashnorm::ChatStyle::kGemma);
  expect_chat_prompts(
      ref.at("chat"), 5,
      [&](const nlohmann::json& c, const std::string& user,
          std::optional<std::string_view> system) {
        // The GGUF has no template: its architecture (gemma3) selects the Gemma style.
        const std::string prompt = flashnorm::model_chat_prompt(model_tok, "", user, system);
        EXPECT_EQ(prompt, c.at("prompt").get<std::string>()) << "user " << show(user);
        std::vector<int32_t> ids;
        if (tok.add_bos()) ids.push_back(*tok.bos());
        for (int32_t id : tok.encode(prompt)) ids.push_back(id);
        EXPECT_EQ(ids, c.at("ids_with_bos").get<std::vector<int32_t>>()) << "user " << show(user);
        return flashnorm::apply_chat_template(std::string_view(tmpl), user, system);
      });
}

// ---- vocabulary variants and hostile vocabularies (written as GGUF images) ----

namespace {

// The tokenizer KVs of the real file (values only; the writer recomputes offsets).
const std::vector<GgufKv>& base_kvs() {
  static const std::vector<GgufKv> kvs = tokenizer_kvs(fixture().file);
  return kvs;
}

class Gemma3VocabTest : public GgufVocabTest {
 protected:
  const std::vector<GgufKv>& base() const override { return base_kvs(); }
};

}  // namespace

// tokenizer.ggml.add_space_prefix = true: a "▁" goes in front of the text and decode removes it
// again (reference: sentencepiece with add_dummy_prefix true, same vocabulary).
TEST_F(Gemma3VocabTest, DummyPrefixMatchesSentencepiece) {
  set_kv(kvs_, "tokenizer.ggml.add_space_prefix", GgufValue::make_bool(true));
  Tokenizer tok = load();
  expect_reference_ids(tok, fixture().ref.at("dummy_prefix_cases"), 5, /*decoded=*/true);
}

TEST_F(Gemma3VocabTest, ScoresMissing) {
  erase_kv(kvs_, "tokenizer.ggml.scores");
  expect_format_error({"tokenizer.ggml.scores"});
}

TEST_F(Gemma3VocabTest, ScoresWrongTypeOrLength) {
  set_kv(kvs_, "tokenizer.ggml.scores",
         GgufValue::make_string_array(std::vector<std::string>(262144, "0")));
  expect_format_error({"tokenizer.ggml.scores"});
  set_kv(kvs_, "tokenizer.ggml.scores", GgufValue::make_f32(0.5f));
  expect_format_error({"tokenizer.ggml.scores"});
  GgufValue shorter = kv_value(base_kvs(), "tokenizer.ggml.scores");
  shorter.f_arr.pop_back();
  set_kv(kvs_, "tokenizer.ggml.scores", shorter);
  expect_format_error({"tokenizer.ggml.scores", "262143", "262144"});
}

TEST_F(Gemma3VocabTest, ScoreNaN) {
  GgufValue scores = kv_value(base_kvs(), "tokenizer.ggml.scores");
  scores.f_arr[1000] = std::numeric_limits<double>::quiet_NaN();
  set_kv(kvs_, "tokenizer.ggml.scores", scores);
  expect_format_error({"tokenizer.ggml.scores[1000]", "NaN"});
}

TEST_F(Gemma3VocabTest, MalformedByteToken) {
  GgufValue tokens = kv_value(base_kvs(), "tokenizer.ggml.tokens");
  tokens.strs[238 + 0x41] = "<0x4g>";
  set_kv(kvs_, "tokenizer.ggml.tokens", tokens);
  expect_format_error({"tokenizer.ggml.tokens[303]", "<0xNN>"});
}

// Without the byte tokens (made normal and renamed), unknown characters become <unk> (id 3), one
// per byte, and nothing crashes.
TEST_F(Gemma3VocabTest, NoByteTokensGivesUnknown) {
  GgufValue tokens = kv_value(base_kvs(), "tokenizer.ggml.tokens");
  GgufValue types = kv_value(base_kvs(), "tokenizer.ggml.token_type");
  for (int b = 0; b < 256; ++b) {
    tokens.strs[238 + b] = "<byte" + std::to_string(b) + ">";
    types.i_arr[238 + b] = 1;
  }
  set_kv(kvs_, "tokenizer.ggml.tokens", tokens);
  set_kv(kvs_, "tokenizer.ggml.token_type", types);
  Tokenizer tok = load();
  const std::string rare = fixture().ref.at("byte_fallback_chars").at(0);
  std::vector<int32_t> want(rare.size(), 3);
  EXPECT_EQ(tok.encode(rare), want);
  EXPECT_EQ(tok.encode("Hello world"), (std::vector<int32_t>{9259, 1902}));
}
