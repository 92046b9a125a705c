// Test support for the tokenizer tests: a real model's tokenizer with its reference JSON (ids and
// prompts recorded by an outside implementation, tests/tokenizer/make_*_reference.py), the checks
// every tokenizer's reference runs through, and a fixture for hostile vocabularies written as GGUF
// images.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "flashnorm/io/gguf.h"
#include "flashnorm/tokenizer/tokenizer.h"

namespace flashnorm::testing {

// Milliseconds since `t0` (steady clock).
double ms_since(std::chrono::steady_clock::time_point t0);

// `s` as a JSON string literal, for messages (control bytes escaped).
std::string show(const std::string& s);

// tests/tokenizer/data/<name> parsed; fails the test and aborts when it is missing.
nlohmann::json read_tokenizer_reference(const std::string& name);

// A real model's GGUF, its tokenizer and the reference JSON.
struct TokenizerFixture {
  io::GgufFile file;
  Tokenizer tok;
  nlohmann::json ref;
  double load_ms;  // GgufFile::open + Tokenizer::from_gguf
};

// Opens the GGUF at `model` (missing: fails the test naming `env_var` and aborts), builds its
// tokenizer (timed) and reads the reference JSON `ref_name` (read_tokenizer_reference).
std::unique_ptr<TokenizerFixture> load_tokenizer_fixture(const std::string& model,
                                                         const char* env_var,
                                                         const std::string& ref_name);

// Facts about a vocabulary (read from the GGUF file with gguf.GGUFReader by the test's author).
struct VocabFacts {
  size_t vocab_size = 0;
  int32_t bos = -1, eos = -1;
  bool add_bos = false;
  std::vector<std::pair<std::string, int32_t>> ids;  // token text and its id
  std::vector<int32_t> eog, not_eog;                 // ids that end a generation, ids that do not
};

// Checks the facts; also that -1 and vocab_size are no end-of-generation ids, and that piece()
// and decode() throw flashnorm::Error for ids outside [0, vocab_size).
void expect_vocab_facts(const Tokenizer& tok, const VocabFacts& facts);

// Reference sections, each a list of {"text", "ids"} records (at least `min_cases` of them):
// encode(text) must give ids; with `decoded` set each record's "decoded" must be decode(ids);
// with `parse_special` false the text is encoded with special-token parsing off.
void expect_reference_ids(const Tokenizer& tok, const nlohmann::json& cases, size_t min_cases,
                          bool decoded, bool parse_special = true);

// The three id sections of a reference: "cases" (ids and decoded texts, at least `min_cases`),
// "random_cases" (at least `min_random`) and "no_special_cases" (special-token parsing off, at
// least `min_no_special`).
void expect_reference_sections(const Tokenizer& tok, const nlohmann::json& ref, size_t min_cases,
                               size_t min_random, size_t min_no_special);

// For every record of the reference `sections` for which `expected(record, section)` gives a text,
// decode(encode(record's text)) must be that text, with special-token parsing on and off. Returns
// how many of the records checked came back as their own text.
size_t expect_round_trips(const Tokenizer& tok, const nlohmann::json& ref,
                          const std::vector<std::string>& sections,
                          const std::function<std::optional<std::string>(
                              const nlohmann::json& record, const std::string& section)>& expected);

// For every reference chat record in `cases` (at least `min_cases`): render(record, user, system)
// must give the record's "prompt" (system: the record's optional system text).
using ChatRender = std::function<std::string(const nlohmann::json& record, const std::string& user,
                                             std::optional<std::string_view> system)>;
void expect_chat_prompts(const nlohmann::json& cases, size_t min_cases, const ChatRender& render);

// The reference's "gpl3" record: encode gives its ids, decode gives the text. The encoding time
// is recorded (gtest property "encode_ms"), never asserted: unit tests do not assert timings (a
// pathologically slow tokenizer meets the test's ctest TIMEOUT).
void expect_gpl3_ids(const Tokenizer& tok, const nlohmann::json& gpl3);

// Calls `check` on invalid UTF-8 inputs: truncated, surrogate, overlong and out-of-range
// sequences, one with the control token `special` between invalid bytes, and 2000 random byte
// strings (mt19937 seed 12345, 1..24 bytes).
void for_each_invalid_utf8(const std::string& special,
                           const std::function<void(const std::string&)>& check);

// 256 KiB runs of each character of `chars`: decode(encode(run)) == run (each run's encoding time
// recorded as a gtest property, not asserted).
void expect_large_runs_round_trip(const Tokenizer& tok, const std::string& chars);

// A fixture for hostile vocabularies: kvs_ starts as base() (a real model's tokenizer KVs);
// load() writes kvs_ as a tensor-less GGUF in a per-test temporary directory and builds a tokenizer
// from it.
class GgufVocabTest : public ::testing::Test {
 protected:
  virtual const std::vector<io::GgufKv>& base() const = 0;
  void SetUp() override;
  void TearDown() override;
  Tokenizer load();
  // Expects load() to throw a FormatError whose message contains every string in `parts`.
  void expect_format_error(const std::vector<std::string>& parts);

  std::filesystem::path dir_;
  std::vector<io::GgufKv> kvs_;
  int n_ = 0;
};

}  // namespace flashnorm::testing
