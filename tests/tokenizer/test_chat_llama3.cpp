// Llama 3 chat prompts against jinja2 renderings of Meta's published templates (Llama 3.0, 3.1's
// fixed date, 3.2's strftime_now date), tests/tokenizer/data/chat_llama3_reference.json made by
// make_chat_llama3_reference.py; and the family names `--chat-format` accepts.
#include <gtest/gtest.h>

#include <cctype>
#include <string>

#include "flashnorm/error.h"
#include "flashnorm/tokenizer/chat.h"
#include "support/tokenizer_reference.h"

namespace {

using flashnorm::ChatStyle;

TEST(ChatLlama3, MatchesJinjaRenderings) {
  const nlohmann::json ref =
      flashnorm::testing::read_tokenizer_reference("chat_llama3_reference.json");
  const std::string today = ref.at("today");
  flashnorm::testing::expect_chat_prompts(
      ref.at("chat"), 18,
      [&](const nlohmann::json& c, const std::string& user,
          std::optional<std::string_view> system) {
        const std::string tmpl = c.at("template");
        EXPECT_EQ(flashnorm::detect_chat_style(tmpl), ChatStyle::kLlama3);
        return flashnorm::format_chat(ChatStyle::kLlama3, tmpl, user, system, today);
      });
}

// The date is today's only where the template asks for it (3.2); 3.1 prints its own literal.
TEST(ChatLlama3, DateSource) {
  const nlohmann::json ref =
      flashnorm::testing::read_tokenizer_reference("chat_llama3_reference.json");
  for (const auto& c : ref.at("chat")) {
    if (c.at("user") != "Hello!") continue;
    const std::string tmpl = c.at("template");
    const std::string p =
        flashnorm::format_chat(ChatStyle::kLlama3, tmpl, "Hello!", std::nullopt, "01 Jan 2030");
    const bool has_today = p.find("01 Jan 2030") != std::string::npos;
    EXPECT_EQ(has_today, c.at("template_name") == "llama3.2") << c.at("template_name");
  }
  // A 3.1+ template whose date cannot be determined is refused, not guessed.
  EXPECT_THROW(flashnorm::format_chat(ChatStyle::kLlama3,
                                      "<|start_header_id|>Cutting Knowledge Date<|eot_id|>", "hi",
                                      std::nullopt, "01 Jan 2030"),
               flashnorm::Error);
  // chat_today() has strftime's "%d %b %Y" shape.
  const std::string t = flashnorm::chat_today();
  ASSERT_EQ(t.size(), 11u) << t;
  EXPECT_TRUE(std::isdigit(static_cast<unsigned char>(t[0])) && t[2] == ' ' && t[6] == ' ') << t;
}

TEST(ChatFormat, Names) {
  EXPECT_EQ(flashnorm::chat_style_from_name("chatml"), ChatStyle::kChatML);
  EXPECT_EQ(flashnorm::chat_style_from_name("gemma"), ChatStyle::kGemma);
  EXPECT_EQ(flashnorm::chat_style_from_name("llama3"), ChatStyle::kLlama3);
  EXPECT_THROW(flashnorm::chat_style_from_name("mistral"), flashnorm::Error);
  // Mistral's [INST] family is not recognised: refused, never guessed.
  EXPECT_THROW(flashnorm::detect_chat_style("{{ bos_token }}[INST] {{ m }} [/INST]"),
               flashnorm::Error);
  // A family named without a template: Llama 3.0 turns, ChatML without a default system line.
  EXPECT_EQ(flashnorm::format_chat(ChatStyle::kLlama3, "", " hi ", std::nullopt, ""),
            "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(flashnorm::format_chat(ChatStyle::kChatML, "", "hi", std::nullopt, ""),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

}  // namespace
