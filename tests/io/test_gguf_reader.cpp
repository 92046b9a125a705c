// The GGUF reader on the real model files, compared field by field with the `gguf` Python
// package's GGUFReader: every KV (key, offset, type, value), every tensor info (name, dims, type,
// data offset, byte size, record offset), the alignment and the data section offset.
// Reference: python3 tests/io/gguf_dump_reference.py <model.gguf> <out.json>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "flashnorm/error.h"
#include "flashnorm/io/gguf.h"
#include "test_gguf_util.h"

namespace flashnorm::io {
namespace {

void check_model(const std::filesystem::path& model, const std::string& tag) {
  ASSERT_TRUE(std::filesystem::exists(model)) << "model missing: " << model;
  const auto out = test::scratch_dir() / (tag + "_dump.json");
  bool ok = false;
  const auto cmd =
      test::run_reference_script("gguf_dump_reference.py", {model.string(), out.string()}, &ok);
  ASSERT_TRUE(ok);
  std::ifstream in(out);
  const auto ref = nlohmann::json::parse(in);
  const auto f = GgufFile::open(model);
  test::compare_with_dump(f, ref, cmd);
}

TEST(GgufReader, SmolLM2MatchesGgufPy) { check_model(test::smollm2_gguf(), "smollm2"); }
TEST(GgufReader, Gemma3MatchesGgufPy) { check_model(test::gemma3_gguf(), "gemma3"); }

// Typed accessors on SmolLM2 (values cross-checked with gguf-py in the test above; here the
// conversions and their refusals are tested).
TEST(GgufReader, TypedAccessors) {
  const auto path = test::smollm2_gguf();
  ASSERT_TRUE(std::filesystem::exists(path)) << "model missing: " << path;
  const auto f = GgufFile::open(path);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_uint("llama.block_count"), 30u);
  EXPECT_EQ(f.get_uint("llama.embedding_length"), 576u);
  EXPECT_FLOAT_EQ(static_cast<float>(f.get_float("llama.rope.freq_base")), 100000.0f);
  EXPECT_EQ(f.string_array("tokenizer.ggml.tokens").size(), 49152u);
  EXPECT_EQ(f.int_array("tokenizer.ggml.token_type").size(), 49152u);
  EXPECT_FALSE(f.get_uint_opt("no.such.key"));
  EXPECT_TRUE(f.get_bool_or("no.such.key", true));
  // Wrong types are refused with the key in the message.
  auto expect_format_error = [](auto fn, const std::string& needle) {
    try {
      fn();
      ADD_FAILURE() << "no FormatError; expected one naming " << needle;
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_format_error([&] { f.string_array("tokenizer.ggml.token_type"); },
                      "\"tokenizer.ggml.token_type\"");
  expect_format_error([&] { f.int_array("tokenizer.ggml.tokens"); }, "expected an integer");
  expect_format_error([&] { f.get_uint("general.architecture"); }, "expected an integer");
  expect_format_error([&] { f.get_string("llama.block_count"); }, "expected STRING");
  expect_format_error([&] { f.get_float("llama.block_count"); }, "FLOAT32");
  expect_format_error([&] { f.get_uint("no.such.key"); }, "missing");
  expect_format_error([&] { f.get_bool_or("llama.block_count", false); }, "expected BOOL");
  expect_format_error([&] { f.float_array("tokenizer.ggml.tokens"); }, "FLOAT32");
}

TEST(GgufReader, OpenErrors) {
  EXPECT_THROW(GgufFile::open("/nonexistent/x.gguf"), Error);
  EXPECT_THROW(GgufFile::open("/tmp"), Error);  // not a regular file
  const auto empty = test::scratch_dir() / "empty.gguf";
  { std::ofstream(empty.string()); }
  try {
    GgufFile::open(empty);
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_EQ(e.field(), "header.magic");
  }
}

}  // namespace
}  // namespace flashnorm::io
