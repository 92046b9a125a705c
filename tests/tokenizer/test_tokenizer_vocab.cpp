// Hostile tokenizer vocabularies and chat template styles.
//
// Hostile cases start from the real SmolLM2 vocabulary (FLASHNORM_SMOLLM2_GGUF, default the fetch
// script's cache path; the test fails when it is missing), change one thing, write a GGUF image
// with flashnorm::io::write_gguf to a temporary directory, reopen it and expect a FormatError
// naming the key (and for element errors the index). The unchanged image must still load and encode
// "Hello world" to [19556, 905] (ids from tests/tokenizer/data/smollm2_reference.json, made by HF
// tokenizers; see make_smollm2_reference.py).
//
// Chat prompts for the extra templates are jinja2 renderings recorded in the same JSON by
// make_smollm2_reference.py (command in test_tokenizer_smollm2.cpp).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "flashnorm/error.h"
#include "flashnorm/io/gguf.h"
#include "flashnorm/tokenizer/chat.h"
#include "flashnorm/tokenizer/tokenizer.h"
#include "support/gguf_rewrite.h"
#include "support/random_llama.h"
#include "support/tokenizer_reference.h"

namespace fs = std::filesystem;
using flashnorm::FormatError;
using flashnorm::Tokenizer;
using flashnorm::io::GgufFile;
using flashnorm::io::GgufKv;
using flashnorm::io::GgufType;
using flashnorm::io::GgufValue;
using namespace flashnorm::testing;  // test support: fixtures and checks

namespace {

// The tokenizer KVs of the real file (values only; the writer recomputes offsets).
const std::vector<GgufKv>& base_kvs() {
  static const std::vector<GgufKv> kvs = [] {
    const fs::path p = smollm2_path();
    if (!fs::exists(p)) {
      ADD_FAILURE() << "SmolLM2 GGUF not found at " << p;
      std::abort();
    }
    return tokenizer_kvs(GgufFile::open(p));
  }();
  return kvs;
}

GgufValue string_array(std::vector<std::string> v) {
  return GgufValue::make_string_array(std::move(v));
}
GgufValue int32_array(std::vector<int64_t> v) {
  return GgufValue::make_int_array(GgufType::INT32, std::move(v));
}

class TokenizerVocabTest : public GgufVocabTest {
 protected:
  const std::vector<GgufKv>& base() const override { return base_kvs(); }
  std::vector<std::string> tokens() const { return kv_value(kvs_, "tokenizer.ggml.tokens").strs; }
  std::vector<std::string> merges() const { return kv_value(kvs_, "tokenizer.ggml.merges").strs; }
};

}  // namespace

TEST_F(TokenizerVocabTest, UnchangedVocabularyLoads) {
  Tokenizer tok = load();
  EXPECT_EQ(tok.vocab_size(), 49152u);
  EXPECT_EQ(tok.encode("Hello world"), (std::vector<int32_t>{19556, 905}));
}

TEST_F(TokenizerVocabTest, TokensMustBeStringArray) {
  set_kv(kvs_, "tokenizer.ggml.tokens",
         GgufValue::make_uint_array(GgufType::UINT32, std::vector<uint64_t>(49152, 7)));
  expect_format_error({"tokenizer.ggml.tokens"});
}

TEST_F(TokenizerVocabTest, TokensScalarString) {
  set_kv(kvs_, "tokenizer.ggml.tokens", GgufValue::make_string("abc"));
  expect_format_error({"tokenizer.ggml.tokens"});
}

TEST_F(TokenizerVocabTest, TokensMissing) {
  erase_kv(kvs_, "tokenizer.ggml.tokens");
  expect_format_error({"tokenizer.ggml.tokens"});
}

TEST_F(TokenizerVocabTest, TokensEmpty) {
  set_kv(kvs_, "tokenizer.ggml.tokens", string_array({}));
  set_kv(kvs_, "tokenizer.ggml.token_type", int32_array({}));
  expect_format_error({"tokenizer.ggml.tokens", "empty"});
}

TEST_F(TokenizerVocabTest, DuplicateToken) {
  auto t = tokens();
  t[500] = t[400];
  set_kv(kvs_, "tokenizer.ggml.tokens", string_array(t));
  expect_format_error({"tokenizer.ggml.tokens[500]", "duplicates token 400"});
}

TEST_F(TokenizerVocabTest, TokenTypeMustBeIntegerArray) {
  set_kv(kvs_, "tokenizer.ggml.token_type", string_array(std::vector<std::string>(49152, "1")));
  expect_format_error({"tokenizer.ggml.token_type"});
  set_kv(kvs_, "tokenizer.ggml.token_type",
         GgufValue::make_float_array(GgufType::FLOAT32, std::vector<double>(49152, 1.0)));
  expect_format_error({"tokenizer.ggml.token_type"});
  set_kv(kvs_, "tokenizer.ggml.token_type", GgufValue::make_i32(1));
  expect_format_error({"tokenizer.ggml.token_type"});
}

TEST_F(TokenizerVocabTest, TokenTypeLengthMismatch) {
  set_kv(kvs_, "tokenizer.ggml.token_type", int32_array(std::vector<int64_t>(49151, 1)));
  expect_format_error({"tokenizer.ggml.token_type", "49151", "49152"});
}

TEST_F(TokenizerVocabTest, TokenTypeOutOfRange) {
  std::vector<int64_t> types(49152, 1);
  types[7] = 9;
  set_kv(kvs_, "tokenizer.ggml.token_type", int32_array(types));
  expect_format_error({"tokenizer.ggml.token_type[7]"});
  types[7] = -1;
  set_kv(kvs_, "tokenizer.ggml.token_type", int32_array(types));
  expect_format_error({"tokenizer.ggml.token_type[7]"});
}

TEST_F(TokenizerVocabTest, MergesMustBeStringArray) {
  set_kv(kvs_, "tokenizer.ggml.merges", int32_array(std::vector<int64_t>(10, 1)));
  expect_format_error({"tokenizer.ggml.merges"});
}

TEST_F(TokenizerVocabTest, MergesMissing) {
  erase_kv(kvs_, "tokenizer.ggml.merges");
  expect_format_error({"tokenizer.ggml.merges"});
}

TEST_F(TokenizerVocabTest, MalformedMerges) {
  const std::vector<std::string> bad = {
      "\xc4\xa0t",                // "Ġt": no separator
      "\xc4\xa0 t he",            // two spaces
      "\xc4\xa0  t",              // empty right part
      " \xc4\xa0t",               // empty left part
      "\xc4\xa0t ",               // empty right part at the end
      "\xc4\xa0 zz_not_a_token",  // right part unknown
      "<|im_start|> <|im_end|>",  // both tokens, but their concatenation is not one
      "",
  };
  for (const std::string& m : bad) {
    auto ms = merges();
    ms[123] = m;
    set_kv(kvs_, "tokenizer.ggml.merges", string_array(ms));
    SCOPED_TRACE("merge '" + m + "'");
    expect_format_error({"tokenizer.ggml.merges[123]"});
  }
}

TEST_F(TokenizerVocabTest, SpecialIdsPastVocabulary) {
  for (const char* key : {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                          "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id"}) {
    SCOPED_TRACE(key);
    kvs_ = base_kvs();
    set_kv(kvs_, key, GgufValue::make_u32(49152));
    expect_format_error({key, "49152"});
    set_kv(kvs_, key, GgufValue::make_u64(uint64_t{1} << 40));
    expect_format_error({key});
    set_kv(kvs_, key, GgufValue::make_i32(-1));
    expect_format_error({key});
    set_kv(kvs_, key, GgufValue::make_string("2"));
    expect_format_error({key});
  }
}

TEST_F(TokenizerVocabTest, UnsupportedModelAndPre) {
  set_kv(kvs_, "tokenizer.ggml.model", GgufValue::make_string("bert"));
  expect_format_error({"tokenizer.ggml.model", "bert"});
  // "llama" (SentencePiece) is supported but needs tokenizer.ggml.scores, which SmolLM2 lacks.
  set_kv(kvs_, "tokenizer.ggml.model", GgufValue::make_string("llama"));
  expect_format_error({"tokenizer.ggml.scores", "missing"});
  kvs_ = base_kvs();
  erase_kv(kvs_, "tokenizer.ggml.model");
  expect_format_error({"tokenizer.ggml.model"});
  kvs_ = base_kvs();
  set_kv(kvs_, "tokenizer.ggml.pre", GgufValue::make_string("qwen2"));
  expect_format_error({"tokenizer.ggml.pre", "qwen2"});
  kvs_ = base_kvs();
  set_kv(kvs_, "tokenizer.ggml.pre", GgufValue::make_u32(3));
  expect_format_error({"tokenizer.ggml.pre"});
}

TEST_F(TokenizerVocabTest, AddBosMustBeBool) {
  set_kv(kvs_, "tokenizer.ggml.add_bos_token", GgufValue::make_u32(1));
  expect_format_error({"tokenizer.ggml.add_bos_token"});
  set_kv(kvs_, "tokenizer.ggml.add_bos_token", GgufValue::make_bool(true));
  EXPECT_TRUE(load().add_bos());
}

// A vocabulary without token types has no special tokens: "<|im_start|>" is then plain text.
TEST_F(TokenizerVocabTest, MissingTokenTypesMeansNoSpecials) {
  erase_kv(kvs_, "tokenizer.ggml.token_type");
  Tokenizer tok = load();
  std::vector<int32_t> ids = tok.encode("<|im_start|>");
  EXPECT_GT(ids.size(), 1u);
  EXPECT_EQ(tok.decode(ids), "<|im_start|>");
}

// Hostile token texts (invalid UTF-8, characters outside the byte alphabet, huge strings) load and
// decode without crashing; a user-defined token (type 4) is matched verbatim even when special
// parsing is off.
TEST_F(TokenizerVocabTest, OddTokenTexts) {
  auto t = tokens();
  t[3] = "\xff\xfe";
  t[4] = std::string(100000, 'x');
  t[5] = "<think>";
  set_kv(kvs_, "tokenizer.ggml.tokens", string_array(t));
  std::vector<int64_t> types(49152, 1);
  for (int i = 0; i < 17; ++i) types[i] = 3;
  types[5] = 4;
  set_kv(kvs_, "tokenizer.ggml.token_type", int32_array(types));
  Tokenizer tok = load();
  EXPECT_EQ(tok.piece(3), "\xff\xfe");
  EXPECT_EQ(tok.piece(4).size(), 100000u);
  EXPECT_EQ(tok.encode("a<think>b", /*parse_special=*/false),
            (std::vector<int32_t>{tok.encode("a")[0], 5, tok.encode("b")[0]}));
  EXPECT_EQ(tok.decode(tok.encode("\xff\xfe")), "\xff\xfe");
}

// ---- chat templates ----

TEST(ChatTemplate, MatchesJinjaForEachStyle) {
  const nlohmann::json ref = read_tokenizer_reference("smollm2_reference.json");
  expect_chat_prompts(
      ref.at("chat_extra_templates"), 10,
      [](const nlohmann::json& c, const std::string& user, std::optional<std::string_view> system) {
        const std::string tmpl = c.at("template");
        return flashnorm::apply_chat_template(tmpl, user, system);
      });
}

TEST(ChatTemplate, DetectsStyles) {
  EXPECT_EQ(flashnorm::detect_chat_style("x<|im_start|>y"), flashnorm::ChatStyle::kChatML);
  EXPECT_EQ(flashnorm::detect_chat_style("x<start_of_turn>y"), flashnorm::ChatStyle::kGemma);
  EXPECT_THROW(flashnorm::detect_chat_style("[INST] {{ m }} [/INST]"), flashnorm::Error);
  EXPECT_THROW(flashnorm::apply_chat_template(std::string_view(""), "hi", std::nullopt),
               flashnorm::Error);
  try {
    flashnorm::apply_chat_template(std::string_view("{{ '<|user|>' }}"), "hi", std::nullopt);
    ADD_FAILURE() << "no error";
  } catch (const flashnorm::Error& e) {
    EXPECT_NE(std::string(e.what()).find("unsupported chat template"), std::string::npos);
  }
}

TEST(ChatTemplate, DefaultSystemOnlyFromPlainLiterals) {
  using flashnorm::chatml_default_system;
  EXPECT_EQ(chatml_default_system("'<|im_start|>system\nHi there<|im_end|>\n'"), "Hi there");
  EXPECT_EQ(chatml_default_system(R"('<|im_start|>system\nA\nB<|im_end|>')"), "A\nB");
  // Computed content, not a literal.
  EXPECT_EQ(chatml_default_system("'<|im_start|>system\n' + m['content'] + '<|im_end|>'"),
            std::nullopt);
  EXPECT_EQ(chatml_default_system("<|im_start|>system\n{{ content }}<|im_end|>"), std::nullopt);
  // No end marker, no newline after the role, or nothing at all.
  EXPECT_EQ(chatml_default_system("<|im_start|>system\nunterminated"), std::nullopt);
  EXPECT_EQ(chatml_default_system("<|im_start|>systemX<|im_end|>"), std::nullopt);
  EXPECT_EQ(chatml_default_system(""), std::nullopt);
}

TEST(ChatTemplate, MissingOrMistypedKeyInGguf) {
  const fs::path dir = fs::temp_directory_path() / ("flashnorm_chat_" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::vector<GgufKv> kvs = {{"general.architecture", GgufValue::make_string("llama"), 0}};
  flashnorm::io::write_gguf(dir / "a.gguf", kvs, {});
  EXPECT_EQ(flashnorm::gguf_chat_template(GgufFile::open(dir / "a.gguf")), std::nullopt);
  kvs.push_back({"tokenizer.chat_template", GgufValue::make_u32(5), 0});
  flashnorm::io::write_gguf(dir / "b.gguf", kvs, {});
  EXPECT_THROW(flashnorm::gguf_chat_template(GgufFile::open(dir / "b.gguf")), FormatError);
  fs::remove_all(dir);
}

// GGUF add_eos_token: EOS is the token appended after a text (the embedding pipeline adds it),
// and the commands that prompt a model refuse such a vocabulary naming the key; without the key
// nothing is appended or refused (the negative control).
TEST_F(TokenizerVocabTest, AddEosTokenIsAppendedAndRefusedForPrompts) {
  const Tokenizer plain = load();
  EXPECT_FALSE(plain.appended());
  EXPECT_NO_THROW(flashnorm::refuse_appended_token(plain, "generate"));
  set_kv(kvs_, "tokenizer.ggml.add_eos_token", GgufValue::make_bool(true));
  const Tokenizer tok = load();
  ASSERT_TRUE(tok.appended());
  EXPECT_EQ(tok.appended(), tok.eos());
  try {
    flashnorm::refuse_appended_token(tok, "generate");
    ADD_FAILURE() << "not refused";
  } catch (const flashnorm::Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.add_eos_token"), std::string::npos)
        << e.what();
  }
}
