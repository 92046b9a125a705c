// Chat prompt formatting; see include/flashnorm/tokenizer/chat.h.
#include "flashnorm/tokenizer/chat.h"

#include <fmt/format.h>

#include "flashnorm/error.h"
#include "flashnorm/io/gguf.h"

namespace flashnorm {
namespace {

constexpr std::string_view kImStart = "<|im_start|>";
constexpr std::string_view kImEnd = "<|im_end|>";
constexpr std::string_view kStartOfTurn = "<start_of_turn>";

// Python's str.isspace() set (what Jinja's `trim` filter, i.e. str.strip(), removes).
bool is_python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

// Code point of the UTF-8 sequence starting at s[i] and its length (0 if invalid: such bytes are
// never spaces).
char32_t utf8_at(std::string_view s, size_t i, size_t& len) {
  auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char b0 = b(0);
  len = b0 < 0x80             ? 1
        : (b0 & 0xE0) == 0xC0 ? 2
        : (b0 & 0xF0) == 0xE0 ? 3
        : (b0 & 0xF8) == 0xF0 ? 4
                              : 0;
  if (len == 0 || i + len > s.size()) return len = 0, 0;
  char32_t cp = len == 1 ? b0 : b0 & (0x7F >> len);
  for (size_t k = 1; k < len; ++k) {
    if ((b(k) & 0xC0) != 0x80) return len = 0, 0;
    cp = (cp << 6) | (b(k) & 0x3F);
  }
  return cp;
}

// Jinja's `trim` (Python str.strip()): removes leading and trailing Unicode white space.
std::string_view python_strip(std::string_view s) {
  size_t b = 0;
  while (b < s.size()) {
    size_t len = 0;
    char32_t cp = utf8_at(s, b, len);
    if (len == 0 || !is_python_space(cp)) break;
    b += len;
  }
  size_t e = s.size();
  while (e > b) {
    // Step back to the start of the last sequence (at most 4 bytes).
    size_t start = e - 1;
    while (start > b && e - start < 4 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) {
      --start;
    }
    size_t len = 0;
    char32_t cp = utf8_at(s, start, len);
    if (len == 0 || start + len != e || !is_python_space(cp)) break;
    e = start;
  }
  return s.substr(b, e - b);
}

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
      // Gemma templates render the message content through Jinja's `trim` filter; the system
      // text is prepended untrimmed.
      std::string_view trimmed = python_strip(user);
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
  if (f.find("tokenizer.chat_template") == nullptr) {
    // Pre-trained Gemma 3 GGUFs (e.g. gemma-3-270m) carry no template; their instruction-tuned
    // siblings use the Gemma turn format.
    std::optional<std::string> arch = f.get_string_opt("general.architecture");
    if (arch && arch->rfind("gemma", 0) == 0) {
      return apply_chat_template(std::string_view(kStartOfTurn), user, system);
    }
  }
  return apply_chat_template(f.get_string("tokenizer.chat_template"), user, system);
}

}  // namespace flashnorm
