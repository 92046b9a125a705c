// Test support for the tokenizer tests (see tokenizer_reference.h).
#include "support/tokenizer_reference.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <random>

#include "flashnorm/error.h"

namespace flashnorm::testing {
namespace fs = std::filesystem;

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::string show(const std::string& s) { return nlohmann::json(s).dump(); }

nlohmann::json read_tokenizer_reference(const std::string& name) {
  std::ifstream in(fs::path(FLASHNORM_SOURCE_DIR) / "tests/tokenizer/data" / name);
  if (!in) {
    ADD_FAILURE() << "reference JSON missing: " << name;
    std::abort();
  }
  return nlohmann::json::parse(in);
}

std::unique_ptr<TokenizerFixture> load_tokenizer_fixture(const std::string& model,
                                                         const char* env_var,
                                                         const std::string& ref_name) {
  if (!fs::exists(model)) {
    ADD_FAILURE() << "GGUF not found at " << model << " (set " << env_var
                  << " or run the model fetch script)";
    std::abort();
  }
  auto t0 = std::chrono::steady_clock::now();
  io::GgufFile file = io::GgufFile::open(model);
  Tokenizer tok = Tokenizer::from_gguf(file);
  const double load_ms = ms_since(t0);
  return std::make_unique<TokenizerFixture>(TokenizerFixture{
      std::move(file), std::move(tok), read_tokenizer_reference(ref_name), load_ms});
}

void expect_reference_sections(const Tokenizer& tok, const nlohmann::json& ref, size_t min_cases,
                               size_t min_random, size_t min_no_special) {
  expect_reference_ids(tok, ref.at("cases"), min_cases, /*decoded=*/true);
  expect_reference_ids(tok, ref.at("random_cases"), min_random, /*decoded=*/false);
  expect_reference_ids(tok, ref.at("no_special_cases"), min_no_special, /*decoded=*/false,
                       /*parse_special=*/false);
}

size_t expect_round_trips(
    const Tokenizer& tok, const nlohmann::json& ref, const std::vector<std::string>& sections,
    const std::function<std::optional<std::string>(const nlohmann::json& record,
                                                   const std::string& section)>& expected) {
  size_t n = 0;
  for (const std::string& section : sections) {
    for (const auto& c : ref.at(section)) {
      const std::string text = c.at("text");
      const std::optional<std::string> back = expected(c, section);
      if (!back) continue;
      EXPECT_EQ(tok.decode(tok.encode(text)), *back) << "text " << show(text);
      EXPECT_EQ(tok.decode(tok.encode(text, false)), *back) << "text " << show(text);
      n += *back == text;
    }
  }
  return n;
}

void expect_chat_prompts(const nlohmann::json& cases, size_t min_cases, const ChatRender& render) {
  ASSERT_GE(cases.size(), min_cases);
  for (const auto& c : cases) {
    const std::string user = c.at("user");
    std::optional<std::string> system;
    if (!c.at("system").is_null()) system = c.at("system").get<std::string>();
    std::optional<std::string_view> sys_view;
    if (system) sys_view = *system;
    EXPECT_EQ(render(c, user, sys_view), c.at("prompt").get<std::string>())
        << c.value("template_name", "") << " user " << show(user);
  }
}

void expect_vocab_facts(const Tokenizer& tok, const VocabFacts& facts) {
  EXPECT_EQ(tok.vocab_size(), facts.vocab_size);
  EXPECT_EQ(tok.bos(), facts.bos);
  EXPECT_EQ(tok.eos(), facts.eos);
  EXPECT_EQ(tok.add_bos(), facts.add_bos);
  for (const auto& [text, id] : facts.ids) EXPECT_EQ(tok.token_id(text), id) << text;
  for (int32_t id : facts.eog) EXPECT_TRUE(tok.is_eog(id)) << id;
  for (int32_t id : facts.not_eog) EXPECT_FALSE(tok.is_eog(id)) << id;
  const auto past = static_cast<int32_t>(facts.vocab_size);
  EXPECT_FALSE(tok.is_eog(-1));
  EXPECT_FALSE(tok.is_eog(past));
  EXPECT_THROW(tok.piece(past), Error);
  EXPECT_THROW(tok.piece(-1), Error);
  std::vector<int32_t> bad{5, past};
  EXPECT_THROW(tok.decode(bad), Error);
}

void expect_reference_ids(const Tokenizer& tok, const nlohmann::json& cases, size_t min_cases,
                          bool decoded, bool parse_special) {
  ASSERT_GE(cases.size(), min_cases);
  for (const auto& c : cases) {
    const std::string text = c.at("text");
    const auto want = c.at("ids").get<std::vector<int32_t>>();
    EXPECT_EQ(tok.encode(text, parse_special), want) << "text " << show(text);
    if (decoded) {
      EXPECT_EQ(tok.decode(want), c.at("decoded").get<std::string>()) << "text " << show(text);
    }
  }
}

void expect_gpl3_ids(const Tokenizer& tok, const nlohmann::json& gpl3) {
  const std::string text = gpl3.at("text");
  ASSERT_GT(text.size(), 30000u);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<int32_t> ids = tok.encode(text);
  ::testing::Test::RecordProperty("encode_ms", std::to_string(ms_since(t0)));
  EXPECT_EQ(ids, gpl3.at("ids").get<std::vector<int32_t>>());
  EXPECT_EQ(tok.decode(ids), text);
}

void for_each_invalid_utf8(const std::string& special,
                           const std::function<void(const std::string&)>& check) {
  check("abc\x80\x81 def");
  check("\xe2\x82 euro cut");       // truncated three-byte sequence
  check("\xed\xa0\x80 surrogate");  // UTF-16 surrogate encoded in UTF-8
  check("\xc0\xaf overlong");
  check("\xf4\x90\x80\x80 past U+10FFFF");
  check(
      "12\xff"
      "34" +
      special + "\xfe");
  std::mt19937 rng(12345);
  for (int i = 0; i < 2000; ++i) {
    std::string s(rng() % 24 + 1, '\0');
    for (char& c : s) c = static_cast<char>(rng() & 0xFF);
    check(s);
  }
}

void expect_large_runs_round_trip(const Tokenizer& tok, const std::string& chars) {
  for (char ch : chars) {
    const std::string s(1 << 18, ch);
    auto t0 = std::chrono::steady_clock::now();
    std::vector<int32_t> ids = tok.encode(s);
    ::testing::Test::RecordProperty(
        "encode_ms_char_" + std::to_string(static_cast<unsigned char>(ch)),
        std::to_string(ms_since(t0)));
    EXPECT_EQ(tok.decode(ids), s);
  }
}

void GgufVocabTest::SetUp() {
  dir_ =
      fs::temp_directory_path() / ("flashnorm_vocab_" + std::to_string(getpid()) + "_" +
                                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
  fs::create_directories(dir_);
  kvs_ = base();
}

void GgufVocabTest::TearDown() { fs::remove_all(dir_); }

Tokenizer GgufVocabTest::load() {
  fs::path p = dir_ / ("t" + std::to_string(n_++) + ".gguf");
  io::write_gguf(p, kvs_, {});
  io::GgufFile f = io::GgufFile::open(p);
  return Tokenizer::from_gguf(f);
}

void GgufVocabTest::expect_format_error(const std::vector<std::string>& parts) {
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

}  // namespace flashnorm::testing
