// Chat prompt formatting; see include/flashnorm/tokenizer/chat.h.
#include "flashnorm/tokenizer/chat.h"

#include <fmt/format.h>

#include "flashnorm/io/error.h"
#include "flashnorm/io/gguf.h"

namespace flashnorm {
namespace {

constexpr std::string_view kImStart = "<|im_start|>";
constexpr std::string_view kImEnd = "<|im_end|>";
constexpr std::string_view kStartOfTurn = "<start_of_turn>";
constexpr const char* kAsciiSpace = " \t\n\r\f\v";

}  // namespace

ChatStyle detect_chat_style(std::string_view tmpl) {
  if (tmpl.find(kImStart) != std::string_view::npos) return ChatStyle::kChatML;
  if (tmpl.find(kStartOfTurn) != std::string_view::npos) return ChatStyle::kGemma;
  throw Error(fmt::format(
      "unsupported chat template (neither ChatML '<|im_start|>' nor Gemma '<start_of_turn>'): "
      "'{}{}'",
      tmpl.substr(0, 60), tmpl.size() > 60 ? "..." : ""));
}

std::optional<std::string> chatml_default_system(std::string_view tmpl) {
  const std::string head = std::string(kImStart) + "system";
  size_t pos = 0;
  while ((pos = tmpl.find(head, pos)) != std::string_view::npos) {
    size_t p = pos + head.size();
    pos = p;
    // The newline after the role: a real one, or the Jinja string escape "\n".
    if (tmpl.substr(p, 1) == "\n") {
      p += 1;
    } else if (tmpl.substr(p, 2) == "\\n") {
      p += 2;
    } else {
      continue;
    }
    size_t end = tmpl.find(kImEnd, p);
    if (end == std::string_view::npos) return std::nullopt;
    std::string_view raw = tmpl.substr(p, end - p);
    // Only a plain literal counts: quotes, braces or '+' mean the content is computed (e.g.
    // "'<|im_start|>system\n' + message['content']").
    if (raw.empty() || raw.find_first_of("'\"{}+") != std::string_view::npos) continue;
    std::string text;
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] == '\\' && i + 1 < raw.size()) {
        char e = raw[++i];
        text.push_back(e == 'n' ? '\n' : e == 't' ? '\t' : e);
      } else {
        text.push_back(raw[i]);
      }
    }
    return text;
  }
  return std::nullopt;
}

std::string apply_chat_template(std::string_view tmpl, std::string_view user,
                                std::optional<std::string_view> system) {
  std::string out;
  switch (detect_chat_style(tmpl)) {
    case ChatStyle::kChatML: {
      std::optional<std::string> sys;
      if (system) {
        sys = std::string(*system);
      } else {
        sys = chatml_default_system(tmpl);
      }
      if (sys) out += fmt::format("{}system\n{}{}\n", kImStart, *sys, kImEnd);
      out += fmt::format("{}user\n{}{}\n", kImStart, user, kImEnd);
      out += fmt::format("{}assistant\n", kImStart);
      break;
    }
    case ChatStyle::kGemma: {
      // Gemma templates render the message content through Jinja's `trim` filter.
      const size_t b = user.find_first_not_of(kAsciiSpace);
      std::string_view trimmed = b == std::string_view::npos
                                     ? std::string_view()
                                     : user.substr(b, user.find_last_not_of(kAsciiSpace) - b + 1);
      out += fmt::format("{}user\n", kStartOfTurn);
      if (system) out += fmt::format("{}\n\n", *system);
      out += fmt::format("{}<end_of_turn>\n{}model\n", trimmed, kStartOfTurn);
      break;
    }
  }
  return out;
}

std::string apply_chat_template(const io::GgufFile& f, std::string_view user,
                                std::optional<std::string_view> system) {
  return apply_chat_template(f.get_string("tokenizer.chat_template"), user, system);
}

}  // namespace flashnorm
