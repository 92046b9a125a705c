// Chat prompt formatting; see include/flashnorm/tokenizer/chat.h.
#include "flashnorm/tokenizer/chat.h"

#include <fmt/format.h>

#include <ctime>
#include <vector>

#include "flashnorm/error.h"
#include "flashnorm/io/gguf.h"

namespace flashnorm {
namespace {

constexpr std::string_view kImStart = "<|im_start|>";
constexpr std::string_view kImEnd = "<|im_end|>";
constexpr std::string_view kStartOfTurn = "<start_of_turn>";
constexpr std::string_view kHeaderStart = "<|start_header_id|>";
constexpr std::string_view kHeaderEnd = "<|end_header_id|>";
constexpr std::string_view kEotId = "<|eot_id|>";

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

ChatStyle chat_style_from_name(std::string_view name) {
  if (name == "chatml") return ChatStyle::kChatML;
  if (name == "gemma") return ChatStyle::kGemma;
  if (name == "llama3") return ChatStyle::kLlama3;
  throw Error(fmt::format("unknown chat format '{}' (known: chatml, gemma, llama3)", name));
}

ChatStyle detect_chat_style(std::string_view tmpl) {
  if (tmpl.find(kImStart) != std::string_view::npos) return ChatStyle::kChatML;
  if (tmpl.find(kStartOfTurn) != std::string_view::npos) return ChatStyle::kGemma;
  if (tmpl.find(kHeaderStart) != std::string_view::npos &&
      tmpl.find(kEotId) != std::string_view::npos) {
    return ChatStyle::kLlama3;
  }
  throw Error(fmt::format(
      "unsupported chat template (not ChatML '<|im_start|>', Gemma '<start_of_turn>' or Llama 3 "
      "'<|start_header_id|>'): '{}{}'",
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

std::string chat_today() {
  static constexpr const char* kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                            "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  return fmt::format("{:02d} {} {}", local.tm_mday, kMonths[local.tm_mon], local.tm_year + 1900);
}

namespace {

// The date a Llama 3.1+ template prints after "Today Date: ": `today` where it calls
// strftime_now, else its `date_string = "..."` literal.
std::string llama3_date(std::string_view tmpl, std::string_view today) {
  if (tmpl.find("strftime_now") != std::string_view::npos) return std::string(today);
  for (std::string_view key : {"date_string = \"", "date_string = '"}) {
    const size_t p = tmpl.find(key);
    if (p == std::string_view::npos) continue;
    const size_t b = p + key.size();
    const size_t e = tmpl.find(key.back(), b);
    if (e != std::string_view::npos) return std::string(tmpl.substr(b, e - b));
  }
  throw Error(
      "unsupported chat template: a Llama 3.1+ template ('Cutting Knowledge Date') with neither "
      "strftime_now nor a date_string literal");
}

std::string llama3_turn(std::string_view role, std::string_view content) {
  return fmt::format("{}{}{}\n\n{}{}", kHeaderStart, role, kHeaderEnd, content, kEotId);
}

}  // namespace

namespace {

// A role as error messages show it: printable ASCII kept, other bytes as \xNN, at most 32 bytes
// of it (a role is one of three short words: anything else is shown, not echoed whole).
std::string shown_role(std::string_view role) {
  std::string out;
  for (size_t i = 0; i < role.size() && i < 32; ++i) {
    const auto c = static_cast<unsigned char>(role[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  if (role.size() > 32) out += fmt::format("... ({} bytes)", role.size());
  return out;
}

}  // namespace

std::optional<ChatOrderProblem> chat_order_problem(std::span<const ChatMessage> messages) {
  if (messages.empty()) return ChatOrderProblem{0, "no messages: a user message is required"};
  size_t first = messages[0].role == "system" ? 1 : 0;
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    const char* want = i < first ? "system" : ((i - first) % 2 == 0 ? "user" : "assistant");
    if (role != want) {
      return ChatOrderProblem{
          i, fmt::format("role is \"{}\": expected \"{}\" (an optional system message, then user "
                         "and assistant turns alternating, ending with a user turn)",
                         shown_role(role), want)};
    }
  }
  if (messages.size() == first) {
    return ChatOrderProblem{first, "a system message must be followed by a user message"};
  }
  if (messages.back().role != "user") {
    return ChatOrderProblem{messages.size() - 1,
                            "the conversation must end with a user message (the assistant's turn "
                            "is what is generated)"};
  }
  return std::nullopt;
}

std::string format_chat(ChatStyle style, std::string_view tmpl,
                        std::span<const ChatMessage> messages, std::string_view today) {
  if (auto p = chat_order_problem(messages)) {
    throw Error(fmt::format("messages[{}]: {}", p->index, p->message));
  }
  std::optional<std::string_view> system;
  if (messages[0].role == "system") {
    system = messages[0].content;
    messages = messages.subspan(1);
  }
  std::string out;
  switch (style) {
    case ChatStyle::kChatML: {
      std::optional<std::string> sys;
      if (system) {
        sys = std::string(*system);
      } else {
        sys = chatml_default_system(tmpl);
      }
      if (sys) out += fmt::format("{}system\n{}{}\n", kImStart, *sys, kImEnd);
      for (const ChatMessage& m : messages) {
        out += fmt::format("{}{}\n{}{}\n", kImStart, m.role, m.content, kImEnd);
      }
      out += fmt::format("{}assistant\n", kImStart);
      break;
    }
    case ChatStyle::kGemma: {
      // Gemma templates render every message's content through Jinja's `trim` filter and write
      // the assistant's turns as "model"; the system text is prepended, untrimmed, to the first
      // user turn.
      for (size_t i = 0; i < messages.size(); ++i) {
        const bool user = messages[i].role == "user";
        out += fmt::format("{}{}\n", kStartOfTurn, user ? "user" : "model");
        if (i == 0 && system) out += fmt::format("{}\n\n", *system);
        out += fmt::format("{}<end_of_turn>\n", python_strip(messages[i].content));
      }
      out += fmt::format("{}model\n", kStartOfTurn);
      break;
    }
    case ChatStyle::kLlama3: {
      // Every message's content goes through Jinja's `trim`.
      if (tmpl.find("Cutting Knowledge Date") != std::string_view::npos) {
        out += llama3_turn(
            "system", fmt::format("Cutting Knowledge Date: December 2023\nToday "
                                  "Date: {}\n\n{}",
                                  llama3_date(tmpl, today), system ? python_strip(*system) : ""));
      } else if (system) {
        out += llama3_turn("system", python_strip(*system));
      }
      for (const ChatMessage& m : messages) out += llama3_turn(m.role, python_strip(m.content));
      out += fmt::format("{}assistant{}\n\n", kHeaderStart, kHeaderEnd);
      break;
    }
  }
  return out;
}

std::string format_chat(ChatStyle style, std::string_view tmpl, std::string_view user,
                        std::optional<std::string_view> system, std::string_view today) {
  std::vector<ChatMessage> messages;
  if (system) messages.push_back({"system", std::string(*system)});
  messages.push_back({"user", std::string(user)});
  return format_chat(style, tmpl, messages, today);
}

std::string apply_chat_template(std::string_view tmpl, std::string_view user,
                                std::optional<std::string_view> system) {
  return format_chat(detect_chat_style(tmpl), tmpl, user, system, chat_today());
}

std::optional<std::string> gguf_chat_template(const io::GgufFile& f) {
  if (f.find("tokenizer.chat_template") == nullptr) return std::nullopt;
  return f.get_string("tokenizer.chat_template");
}

}  // namespace flashnorm
