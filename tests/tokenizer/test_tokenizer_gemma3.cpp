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
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
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

#if defined(__SANITIZE_ADDRESS__)
constexpr double kSlowdown = 5.0;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr double kSlowdown = 5.0;
#else
constexpr double kSlowdown = 1.0;
#endif
#else
constexpr double kSlowdown = 1.0;
#endif

fs::path model_path() {
  const char* env = std::getenv("FLASHNORM_GEMMA3_GGUF");
  if (env != nullptr && *env != '\0') return env;
  return "/root/.cache/flashnorm/models/gemma3/gemma-3-270m-q4_k_m.gguf";
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

struct Fixture {
  GgufFile file;
  Tokenizer tok;
  nlohmann::json ref;
  double load_ms;  // GgufFile::open + Tokenizer::from_gguf
};

const Fixture& fixture() {
  static const Fixture* f = [] {
    fs::path p = model_path();
    if (!fs::exists(p)) {
      ADD_FAILURE() << "Gemma 3 GGUF not found at " << p
                    << " (set FLASHNORM_GEMMA3_GGUF or run the model fetch script)";
      std::abort();
    }
    auto t0 = std::chrono::steady_clock::now();
    GgufFile file = GgufFile::open(p);
    Tokenizer tok = Tokenizer::from_gguf(file);
    double load_ms = ms_since(t0);
    std::ifstream in(fs::path(FLASHNORM_SOURCE_DIR) / "tests/tokenizer/data/gemma3_reference.json");
    if (!in) {
      ADD_FAILURE() << "reference JSON missing";
      std::abort();
    }
    nlohmann::json ref = nlohmann::json::parse(in);
    return new Fixture{std::move(file), std::move(tok), std::move(ref), load_ms};
  }();
  return *f;
}

std::string show(const std::string& s) { return nlohmann::json(s).dump(); }

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
  EXPECT_EQ(tok.vocab_size(), 262144u);
  EXPECT_EQ(tok.bos(), 2);
  EXPECT_EQ(tok.eos(), 1);
  EXPECT_TRUE(tok.add_bos());
  EXPECT_EQ(tok.token_id("<start_of_turn>"), 105);
  EXPECT_EQ(tok.token_id("<end_of_turn>"), 106);
  EXPECT_EQ(tok.token_id("<0x00>"), 238);
  EXPECT_EQ(tok.token_id("<0xFF>"), 493);
  EXPECT_TRUE(tok.is_eog(1));    // <eos>
  EXPECT_TRUE(tok.is_eog(106));  // <end_of_turn>
  EXPECT_FALSE(tok.is_eog(105));
  EXPECT_FALSE(tok.is_eog(2));
  EXPECT_FALSE(tok.is_eog(0));
  EXPECT_FALSE(tok.is_eog(-1));
  EXPECT_FALSE(tok.is_eog(262144));
  // Pieces: control tokens give their text, byte tokens their byte, "▁" is a space.
  EXPECT_EQ(tok.piece(105), "<start_of_turn>");
  EXPECT_EQ(tok.piece(238), std::string(1, '\0'));
  EXPECT_EQ(tok.piece(238 + 0x41), "A");
  EXPECT_EQ(tok.piece(493), "\xff");
  EXPECT_EQ(tok.piece(*tok.token_id("\xe2\x96\x81the")), " the");
  EXPECT_THROW(tok.piece(262144), flashnorm::Error);
  EXPECT_THROW(tok.piece(-1), flashnorm::Error);
  std::vector<int32_t> bad{5, 262144};
  EXPECT_THROW(tok.decode(bad), flashnorm::Error);
  // Every control token is matched with parse_special, including <unk> (the sentencepiece
  // reference cannot cover this one: see make_gemma3_reference.py).
  EXPECT_EQ(tok.encode("<unk>"), (std::vector<int32_t>{3}));
  EXPECT_EQ(tok.encode("<bos>"), (std::vector<int32_t>{2}));
}

TEST(TokenizerGemma3, LoadsFast) {
  EXPECT_LT(fixture().load_ms, 1000.0 * kSlowdown)
      << "GgufFile::open + Tokenizer::from_gguf took " << fixture().load_ms << " ms";
  auto t0 = std::chrono::steady_clock::now();
  Tokenizer again = Tokenizer::from_gguf(fixture().file);
  double ms = ms_since(t0);
  EXPECT_LT(ms, 700.0 * kSlowdown) << "Tokenizer::from_gguf took " << ms << " ms";
  EXPECT_EQ(again.encode("Hello world"), (std::vector<int32_t>{9259, 1902}));
}

TEST(TokenizerGemma3, ReferenceCases) {
  const auto& [file, tok, ref, load_ms] = fixture();
  const auto& cases = ref.at("cases");
  ASSERT_GE(cases.size(), 60u);
  for (const auto& c : cases) {
    const std::string text = c.at("text");
    const auto want = c.at("ids").get<std::vector<int32_t>>();
    EXPECT_EQ(tok.encode(text), want) << "text " << show(text);
    EXPECT_EQ(tok.decode(want), c.at("decoded").get<std::string>()) << "text " << show(text);
  }
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

TEST(TokenizerGemma3, RandomReferenceCases) {
  const auto& [file, tok, ref, load_ms] = fixture();
  const auto& cases = ref.at("random_cases");
  ASSERT_GE(cases.size(), 100u);
  for (const auto& c : cases) {
    const std::string text = c.at("text");
    EXPECT_EQ(tok.encode(text), c.at("ids").get<std::vector<int32_t>>()) << "text " << show(text);
  }
}

TEST(TokenizerGemma3, SpecialTokensAsText) {
  const auto& [file, tok, ref, load_ms] = fixture();
  ASSERT_GE(ref.at("no_special_cases").size(), 4u);
  for (const auto& c : ref.at("no_special_cases")) {
    const std::string text = c.at("text");
    EXPECT_EQ(tok.encode(text, /*parse_special=*/false), c.at("ids").get<std::vector<int32_t>>())
        << "text " << show(text);
  }
}

// Byte fallback covers every byte, so decode(encode(s)) == s for all texts (U+2581 aside), with and
// without special-token parsing.
TEST(TokenizerGemma3, RoundTrip) {
  const auto& [file, tok, ref, load_ms] = fixture();
  size_t n = 0;
  for (const char* section : {"cases", "random_cases", "no_special_cases"}) {
    for (const auto& c : ref.at(section)) {
      const std::string text = c.at("text");
      const std::string back = lower_blocks_as_spaces(text);
      EXPECT_EQ(tok.decode(tok.encode(text)), back) << "text " << show(text);
      EXPECT_EQ(tok.decode(tok.encode(text, false)), back) << "text " << show(text);
      n += back == text;
    }
  }
  EXPECT_GE(n, 350u);
}

TEST(TokenizerGemma3, Gpl3TextMatchesReferenceAndIsFast) {
  const auto& [file, tok, ref, load_ms] = fixture();
  const std::string text = ref.at("gpl3").at("text");
  ASSERT_GT(text.size(), 30000u);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<int32_t> ids = tok.encode(text);
  double ms = ms_since(t0);
  EXPECT_EQ(ids, ref.at("gpl3").at("ids").get<std::vector<int32_t>>());
  EXPECT_LT(ms, 1000.0 * kSlowdown) << "encoding 35 KB took " << ms << " ms";
  EXPECT_EQ(tok.decode(ids), text);
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
  expect_bytes("abc\x80\x81 def");
  expect_bytes("\xe2\x82 euro cut");
  expect_bytes("\xed\xa0\x80 surrogate");
  expect_bytes("\xc0\xaf overlong");
  expect_bytes("\xf4\x90\x80\x80 past U+10FFFF");
  expect_bytes("\xe2\x96 cut lower block \xe2\x96\x81");
  expect_bytes(
      "12\xff"
      "34<end_of_turn>\xfe");
  std::mt19937 rng(12345);
  for (int i = 0; i < 2000; ++i) {
    std::string s(rng() % 24 + 1, '\0');
    for (char& c : s) c = static_cast<char>(rng() & 0xFF);
    expect_bytes(s);
  }
}

TEST(TokenizerGemma3, LargeInputs) {
  const Tokenizer& tok = fixture().tok;
  // 256 KiB runs: one symbol sequence each (SentencePiece has no pre-tokenizer), or long runs of
  // user-defined space/newline/tab pieces.
  for (std::string s :
       {std::string(1 << 18, ' '), std::string(1 << 18, 'a'), std::string(1 << 18, '7'),
        std::string(1 << 18, '\n'), std::string(1 << 18, '!'), std::string(1 << 18, '<')}) {
    auto t0 = std::chrono::steady_clock::now();
    std::vector<int32_t> ids = tok.encode(s);
    double ms = ms_since(t0);
    EXPECT_EQ(tok.decode(ids), s);
    EXPECT_LT(ms, 5000.0 * kSlowdown) << "256 KiB of '" << s[0] << "' took " << ms << " ms";
  }
  // 31 spaces is the longest user-defined run: 62 spaces are two of them.
  EXPECT_EQ(tok.encode(std::string(62, ' ')), (std::vector<int32_t>{167, 167}));
}

// Gemma's chat format against jinja2 renderings of the real Gemma 3 template, and the ids of the
// whole prompt (BOS + prompt) against sentencepiece.
TEST(TokenizerGemma3, ChatTemplate) {
  const auto& [file, tok, ref, load_ms] = fixture();
  const std::string tmpl = ref.at("chat_template");
  EXPECT_EQ(flashnorm::detect_chat_style(tmpl), flashnorm::ChatStyle::kGemma);
  ASSERT_GE(ref.at("chat").size(), 5u);
  for (const auto& c : ref.at("chat")) {
    const std::string user = c.at("user");
    std::optional<std::string> system;
    if (!c.at("system").is_null()) system = c.at("system").get<std::string>();
    std::optional<std::string_view> sys_view;
    if (system) sys_view = *system;
    const std::string want = c.at("prompt");
    EXPECT_EQ(flashnorm::apply_chat_template(std::string_view(tmpl), user, sys_view), want)
        << "user " << show(user);
    // The GGUF has no template: its architecture (gemma3) selects the Gemma style.
    const std::string prompt = flashnorm::apply_chat_template(file, user, sys_view);
    EXPECT_EQ(prompt, want) << "user " << show(user);
    std::vector<int32_t> ids;
    if (tok.add_bos()) ids.push_back(*tok.bos());
    for (int32_t id : tok.encode(prompt)) ids.push_back(id);
    EXPECT_EQ(ids, c.at("ids_with_bos").get<std::vector<int32_t>>()) << "user " << show(user);
  }
}

// ---- vocabulary variants and hostile vocabularies (written as GGUF images) ----

namespace {

const std::vector<GgufKv>& base_kvs() {
  static const std::vector<GgufKv> kvs = [] {
    std::vector<GgufKv> out;
    for (const GgufKv& kv : fixture().file.kvs()) {
      if (kv.key.rfind("tokenizer.", 0) == 0) out.push_back(kv);
    }
    return out;
  }();
  return kvs;
}

void set(std::vector<GgufKv>& kvs, const std::string& key, GgufValue v) {
  for (GgufKv& kv : kvs) {
    if (kv.key == key) {
      kv.value = std::move(v);
      return;
    }
  }
  kvs.push_back(GgufKv{key, std::move(v), 0});
}

const GgufValue& get(const std::vector<GgufKv>& kvs, std::string_view key) {
  for (const GgufKv& kv : kvs) {
    if (kv.key == key) return kv.value;
  }
  throw std::runtime_error("fixture lacks " + std::string(key));
}

class Gemma3VocabTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("flashnorm_gemma3_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    kvs_ = base_kvs();
  }
  void TearDown() override { fs::remove_all(dir_); }

  Tokenizer load() {
    fs::path p = dir_ / ("t" + std::to_string(n_++) + ".gguf");
    flashnorm::io::write_gguf(p, kvs_, {});
    GgufFile f = GgufFile::open(p);
    return Tokenizer::from_gguf(f);
  }

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

  fs::path dir_;
  std::vector<GgufKv> kvs_;
  int n_ = 0;
};

}  // namespace

// tokenizer.ggml.add_space_prefix = true: a "▁" goes in front of the text and decode removes it
// again (reference: sentencepiece with add_dummy_prefix true, same vocabulary).
TEST_F(Gemma3VocabTest, DummyPrefixMatchesSentencepiece) {
  set(kvs_, "tokenizer.ggml.add_space_prefix", GgufValue::make_bool(true));
  Tokenizer tok = load();
  const auto& cases = fixture().ref.at("dummy_prefix_cases");
  ASSERT_GE(cases.size(), 5u);
  for (const auto& c : cases) {
    const std::string text = c.at("text");
    const auto want = c.at("ids").get<std::vector<int32_t>>();
    EXPECT_EQ(tok.encode(text), want) << "text " << show(text);
    EXPECT_EQ(tok.decode(want), c.at("decoded").get<std::string>()) << "text " << show(text);
  }
}

TEST_F(Gemma3VocabTest, ScoresMissing) {
  std::erase_if(kvs_, [](const GgufKv& kv) { return kv.key == "tokenizer.ggml.scores"; });
  expect_format_error({"tokenizer.ggml.scores"});
}

TEST_F(Gemma3VocabTest, ScoresWrongTypeOrLength) {
  GgufValue strs;
  strs.type = GgufType::ARRAY;
  strs.elem_type = GgufType::STRING;
  strs.strs.assign(262144, "0");
  set(kvs_, "tokenizer.ggml.scores", strs);
  expect_format_error({"tokenizer.ggml.scores"});
  set(kvs_, "tokenizer.ggml.scores", GgufValue::make_f32(0.5f));
  expect_format_error({"tokenizer.ggml.scores"});
  GgufValue shorter = get(base_kvs(), "tokenizer.ggml.scores");
  shorter.f_arr.pop_back();
  set(kvs_, "tokenizer.ggml.scores", shorter);
  expect_format_error({"tokenizer.ggml.scores", "262143", "262144"});
}

TEST_F(Gemma3VocabTest, ScoreNaN) {
  GgufValue scores = get(base_kvs(), "tokenizer.ggml.scores");
  scores.f_arr[1000] = std::numeric_limits<double>::quiet_NaN();
  set(kvs_, "tokenizer.ggml.scores", scores);
  expect_format_error({"tokenizer.ggml.scores[1000]", "NaN"});
}

TEST_F(Gemma3VocabTest, MalformedByteToken) {
  GgufValue tokens = get(base_kvs(), "tokenizer.ggml.tokens");
  tokens.strs[238 + 0x41] = "<0x4g>";
  set(kvs_, "tokenizer.ggml.tokens", tokens);
  expect_format_error({"tokenizer.ggml.tokens[303]", "<0xNN>"});
}

// Without the byte tokens (made normal and renamed), unknown characters become <unk> (id 3), one
// per byte, and nothing crashes.
TEST_F(Gemma3VocabTest, NoByteTokensGivesUnknown) {
  GgufValue tokens = get(base_kvs(), "tokenizer.ggml.tokens");
  GgufValue types = get(base_kvs(), "tokenizer.ggml.token_type");
  for (int b = 0; b < 256; ++b) {
    tokens.strs[238 + b] = "<byte" + std::to_string(b) + ">";
    types.i_arr[238 + b] = 1;
  }
  set(kvs_, "tokenizer.ggml.tokens", tokens);
  set(kvs_, "tokenizer.ggml.token_type", types);
  Tokenizer tok = load();
  const std::string rare = fixture().ref.at("byte_fallback_chars").at(0);
  std::vector<int32_t> want(rare.size(), 3);
  EXPECT_EQ(tok.encode(rare), want);
  EXPECT_EQ(tok.encode("Hello world"), (std::vector<int32_t>{9259, 1902}));
}
