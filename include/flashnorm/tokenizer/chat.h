// Chat prompts from a GGUF's "tokenizer.chat_template". flashnorm does not run Jinja: it recognises
// the template's style from its text and formats a conversation (an optional system message, then
// user and assistant turns alternating, ending with a user turn) the way that template renders it
// with add_generation_prompt=true. The result holds special-token texts
// ("<|im_start|>" ...): encode it with parse_special = true. User and system texts are inserted
// verbatim, as the templates do (a user text containing "<|im_end|>" is not escaped).
// Templates are never executed (template injection advisories against GGUF/HF runtimes): a template
// of no known family is refused, and the caller may name the family instead (`--chat-format`).
// Sources: ChatML (OpenAI chat markup, as in SmolLM2's and Qwen's templates); Gemma 3 turn format
// (<start_of_turn>role\n...<end_of_turn>\n, system text prepended to the first user turn); Meta
// Llama 3 / 3.1 / 3.2 Instruct templates
// (<|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>).
#pragma once

#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace flashnorm::io {
class GgufFile;
}

namespace flashnorm {

enum class ChatStyle {
  // "<|im_start|>{role}\n{content}<|im_end|>\n" turns; generation prompt "<|im_start|>assistant\n".
  // When no system text is given, the template's default system line (a literal
  // "<|im_start|>system\n...<|im_end|>" in the template text, if there is one) is used.
  kChatML,
  // "<start_of_turn>user\n{system}\n\n{user}<end_of_turn>\n<start_of_turn>model\n", the user text
  // trimmed as the templates' `| trim` does (Python str.strip(): Unicode White_Space plus the
  // \x1c..\x1f separators), the system text untrimmed. The template's leading "{{ bos_token }}"
  // is not written: the caller adds BOS as Tokenizer::add_bos() says. Checked against jinja2
  // renderings of google/gemma-3-4b-it's published template (tests/tokenizer).
  kGemma,
  // "<|start_header_id|>{role}<|end_header_id|>\n\n{content | trim}<|eot_id|>" turns; generation
  // prompt "<|start_header_id|>assistant<|end_header_id|>\n\n". Llama 3.1+ templates (their text
  // holds "Cutting Knowledge Date") always write a system turn that starts with
  // "Cutting Knowledge Date: December 2023\nToday Date: {date}\n\n" followed by the trimmed
  // system text (empty without one); {date} is today's date where the template calls
  // strftime_now (3.2: transformers and llama.cpp define it), else the template's own
  // `date_string` literal (3.1: "26 Jul 2024"). Llama 3.0 templates write a system turn only for
  // a system message. The leading "{{ bos_token }}" is not written (see kGemma). Checked against
  // jinja2 renderings of the published templates (tests/tokenizer/test_chat_llama3.cpp).
  kLlama3,
};

// Family name -> style: "chatml", "gemma", "llama3". Throws Error naming the accepted names.
ChatStyle chat_style_from_name(std::string_view name);

// Template text -> style. Detection: contains "<|im_start|>" -> kChatML; contains
// "<start_of_turn>" -> kGemma; contains "<|start_header_id|>" and "<|eot_id|>" -> kLlama3.
// Errors: throws Error("unsupported chat template ...") otherwise (e.g. Mistral's "[INST]").
ChatStyle detect_chat_style(std::string_view template_text);

// The default system text a ChatML template writes when the conversation has no system message:
// the literal between "<|im_start|>system\n" (real newline or the escape "\n") and "<|im_end|>",
// when that stretch is plain text (no quotes, braces or Jinja). nullopt when there is none.
std::optional<std::string> chatml_default_system(std::string_view template_text);

// Today's local date as Python's strftime("%d %b %Y") writes it in the C locale ("02 Dec 2026"):
// the value of transformers' strftime_now("%d %b %Y"), which Llama 3.2 templates print.
std::string chat_today();

// One message of a conversation: role "system", "user" or "assistant"; content as sent (the
// formatter trims it where the template does).
struct ChatMessage {
  std::string role;
  std::string content;
};

// The first message of `messages` that breaks the order format_chat formats: index and what is
// wrong ("is \"assistant\": expected \"user\""). The order: an optional "system" message first,
// then "user" and "assistant" alternating, starting and ending with "user" (what the Gemma 3
// template enforces; ChatML and Llama 3 templates render any order, flashnorm accepts this one).
struct ChatOrderProblem {
  size_t index = 0;
  std::string message;
};
// nullopt when the order is formattable; an empty list is a problem at index 0.
std::optional<ChatOrderProblem> chat_order_problem(std::span<const ChatMessage> messages);

// Formats a conversation plus the generation prompt in `style`: each turn as the family's
// template renders it (ChatML: every message verbatim in its own turn, the template's default
// system line when the first message is not "system"; Gemma: "assistant" written "model", every
// content trimmed, the system text prepended to the first user turn; Llama 3: every content
// trimmed, 3.1+ templates' dated system turn always written). `template_text` and `today` as in
// the single-exchange overload below. Errors: throws Error for an order chat_order_problem
// reports (naming messages[i]) and for a Llama 3.1+ template whose date it cannot determine.
// Checked against jinja2 renderings of the published templates
// (tests/tokenizer/test_chat_multiturn.cpp).
std::string format_chat(ChatStyle style, std::string_view template_text,
                        std::span<const ChatMessage> messages, std::string_view today);

// Formats one user turn (and an optional system turn) plus the generation prompt in `style`.
// `template_text` supplies what a family reads from its template (ChatML's default system line,
// Llama 3's version and date literal); it may be empty (a family named by the user without a
// template: ChatML without default system, Llama 3.0's turns). `system` = nullopt means "no
// system message"; an empty string is an empty system message. `today` is the date a Llama 3.2
// template would print (chat_today()).
// Errors: throws Error for a Llama 3.1+ template whose date it cannot determine.
std::string format_chat(ChatStyle style, std::string_view template_text, std::string_view user,
                        std::optional<std::string_view> system, std::string_view today);

// format_chat(detect_chat_style(template_text), template_text, user, system, chat_today()).
// Errors: throws Error for an unsupported template.
std::string apply_chat_template(std::string_view template_text, std::string_view user,
                                std::optional<std::string_view> system);

// The template text of a GGUF file's "tokenizer.chat_template"; nullopt when the key is absent.
// Errors: throws FormatError when the key is not a STRING.
std::optional<std::string> gguf_chat_template(const io::GgufFile& f);

// The chat template of a Hugging Face directory: DIR/chat_template.jinja (where transformers
// >= 4.43 saves it), else tokenizer_config.json's "chat_template" (a string, or a list of {"name",
// "template"} objects whose "default" entry is used, as transformers does). nullopt when neither
// has one. Errors: throws Error (one line naming the file and, for JSON, the byte offset) for a
// malformed tokenizer_config.json, a chat_template of another type, or a list without "default".
std::optional<std::string> read_hf_chat_template(const std::filesystem::path& dir);

}  // namespace flashnorm
