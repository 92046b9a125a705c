// Chat prompts from a GGUF's "tokenizer.chat_template". flashnorm does not run Jinja: it recognises
// the template's style from its text and formats one (system, user) exchange the way that template
// renders it with add_generation_prompt=true. The result holds special-token texts
// ("<|im_start|>" ...): encode it with parse_special = true. User and system texts are inserted
// verbatim, as the templates do (a user text containing "<|im_end|>" is not escaped).
// Sources: ChatML (OpenAI chat markup, as in SmolLM2's and Qwen's templates); Gemma 3 turn format
// (<start_of_turn>role\n...<end_of_turn>\n, system text prepended to the first user turn).
#pragma once

#include <optional>
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
};

// Template text -> style. Detection: contains "<|im_start|>" -> kChatML; contains
// "<start_of_turn>" -> kGemma. Errors: throws Error("unsupported chat template ...") otherwise.
ChatStyle detect_chat_style(std::string_view template_text);

// The default system text a ChatML template writes when the conversation has no system message:
// the literal between "<|im_start|>system\n" (real newline or the escape "\n") and "<|im_end|>",
// when that stretch is plain text (no quotes, braces or Jinja). nullopt when there is none.
std::optional<std::string> chatml_default_system(std::string_view template_text);

// Formats one user turn (and an optional system turn) plus the generation prompt for the style of
// `template_text`. `system` = nullopt means "no system message" (ChatML then uses the template's
// default system line, if any); an empty string is an empty system message.
// Errors: throws Error for an unsupported template.
std::string apply_chat_template(std::string_view template_text, std::string_view user,
                                std::optional<std::string_view> system);

// Same, reading the template from the file's "tokenizer.chat_template" (a STRING). When the key is
// absent and "general.architecture" starts with "gemma" (pre-trained Gemma 3 GGUFs such as
// gemma-3-270m ship no template), the Gemma style is used.
// Errors: throws FormatError when the key is absent (other architectures) or not a string; Error
// when unsupported.
std::string apply_chat_template(const io::GgufFile& f, std::string_view user,
                                std::optional<std::string_view> system);

}  // namespace flashnorm
