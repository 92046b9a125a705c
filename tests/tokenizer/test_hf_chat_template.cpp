// read_hf_chat_template: where a Hugging Face directory keeps its chat template
// (chat_template.jinja first, then tokenizer_config.json's "chat_template" as a string or a list of
// named templates, as transformers reads them), and one-line refusals of malformed files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "flashnorm/error.h"
#include "flashnorm/tokenizer/chat.h"
#include "support/random_llama.h"

namespace {
namespace fs = std::filesystem;
using flashnorm::read_hf_chat_template;

void write(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }

TEST(HfChatTemplate, SourcesInTransformersOrder) {
  const fs::path d = flashnorm::testing::fresh_dir("hf_chat_template");
  EXPECT_EQ(read_hf_chat_template(d), std::nullopt);  // neither file
  write(d / "tokenizer_config.json", R"({"model_max_length": 8})");
  EXPECT_EQ(read_hf_chat_template(d), std::nullopt);  // no key
  write(d / "tokenizer_config.json", R"({"chat_template": null})");
  EXPECT_EQ(read_hf_chat_template(d), std::nullopt);
  write(d / "tokenizer_config.json", R"({"chat_template": "<|im_start|>{{ x }}"})");
  EXPECT_EQ(read_hf_chat_template(d), "<|im_start|>{{ x }}");
  write(d / "tokenizer_config.json",
        R"({"chat_template": [{"name": "tool_use", "template": "T"},
                              {"name": "default", "template": "D"}]})");
  EXPECT_EQ(read_hf_chat_template(d), "D");
  write(d / "chat_template.jinja", "J");  // transformers reads the .jinja file first
  EXPECT_EQ(read_hf_chat_template(d), "J");
  fs::remove_all(d);
}

TEST(HfChatTemplate, MalformedIsOneLine) {
  const fs::path d = flashnorm::testing::fresh_dir("hf_chat_template_bad");
  auto expect_error = [&](const std::string& config, const std::string& needle) {
    write(d / "tokenizer_config.json", config);
    try {
      read_hf_chat_template(d);
      ADD_FAILURE() << "no error for " << config;
    } catch (const flashnorm::Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(needle), std::string::npos) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
  };
  expect_error(R"({"chat_template": 5})", "not a string or a list");
  expect_error(R"({"chat_template": [{"name": "tool_use", "template": "T"}]})", "\"default\"");
  expect_error(R"({"chat_template": "x",)", "at byte");
  expect_error("[1]", "not a JSON object");
  fs::create_directory(d / "chat_template.jinja.d");
  fs::remove(d / "tokenizer_config.json");
  fs::create_directory(d / "tokenizer_config.json");  // a directory named like the file
  EXPECT_THROW(read_hf_chat_template(d), flashnorm::Error);
  fs::remove_all(d);
}

}  // namespace
