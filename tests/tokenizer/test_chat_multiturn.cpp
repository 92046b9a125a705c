// Whole conversations (system, user and assistant turns) against jinja2 renderings of the
// published templates of SmolLM2 (ChatML), Gemma 3 and Llama 3.0 / 3.1 / 3.2:
// tests/tokenizer/data/chat_multiturn_reference.json, made by make_chat_multiturn_reference.py.
// And the orders chat_order_problem refuses.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "flashnorm/error.h"
#include "flashnorm/tokenizer/chat.h"
#include "support/tokenizer_reference.h"

namespace {

using flashnorm::ChatMessage;

std::vector<ChatMessage> messages_of(const nlohmann::json& j) {
  std::vector<ChatMessage> out;
  for (const auto& m : j) out.push_back({m.at("role"), m.at("content")});
  return out;
}

TEST(ChatMultiturn, MatchesJinjaRenderings) {
  const nlohmann::json ref =
      flashnorm::testing::read_tokenizer_reference("chat_multiturn_reference.json");
  const std::string today = ref.at("today");
  const auto& cases = ref.at("chat");
  ASSERT_GE(cases.size(), 20u);
  size_t multi = 0;
  for (const auto& c : cases) {
    const std::string tmpl = c.at("template");
    const std::vector<ChatMessage> m = messages_of(c.at("messages"));
    multi += m.size() > 2;
    EXPECT_EQ(flashnorm::format_chat(flashnorm::detect_chat_style(tmpl), tmpl, m, today),
              c.at("prompt").get<std::string>())
        << c.at("template_name") << ", " << m.size() << " messages";
  }
  EXPECT_GE(multi, 15u);  // most cases hold earlier assistant turns
}

// The first message out of order, by index; nothing for the orders the templates render.
TEST(ChatMultiturn, OrderProblems) {
  using M = std::vector<ChatMessage>;
  const std::pair<M, int> cases[] = {
      {{}, 0},
      {{{"user", "a"}}, -1},
      {{{"system", "s"}, {"user", "a"}}, -1},
      {{{"user", "a"}, {"assistant", "b"}, {"user", "c"}}, -1},
      {{{"system", "s"}}, 1},
      {{{"assistant", "a"}}, 0},
      {{{"user", "a"}, {"assistant", "b"}}, 1},
      {{{"user", "a"}, {"user", "b"}}, 1},
      {{{"user", "a"}, {"system", "s"}, {"user", "b"}}, 1},
      {{{"system", "s"}, {"system", "t"}, {"user", "b"}}, 1},
      {{{"tool", "x"}}, 0},
      {{{"User", "x"}}, 0},
  };
  for (const auto& [m, want] : cases) {
    const auto p = flashnorm::chat_order_problem(m);
    EXPECT_EQ(p ? static_cast<int>(p->index) : -1, want) << m.size() << " messages";
    if (want >= 0) {
      EXPECT_THROW(flashnorm::format_chat(flashnorm::ChatStyle::kChatML, "", m, ""),
                   flashnorm::Error);
    }
  }
}

// A bad role is shown, not echoed: control bytes escaped, a long one cut (one short line).
TEST(ChatMultiturn, BadRoleIsShownShort) {
  const std::vector<ChatMessage> m = {{"us\ner\x1b[2J" + std::string(100000, 'x'), "a"}};
  const auto p = flashnorm::chat_order_problem(m);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->message.find('\n'), std::string::npos) << p->message;
  EXPECT_EQ(p->message.find('\x1b'), std::string::npos) << p->message;
  EXPECT_LT(p->message.size(), 300u) << p->message;
  EXPECT_NE(p->message.find("100009 bytes"), std::string::npos) << p->message;
}

}  // namespace
