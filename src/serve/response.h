// OpenAI response bodies: the whole answer of /v1/completions ("text_completion") and
// /v1/chat/completions ("chat.completion") with choices[0], finish_reason and usage, and their
// streamed chunks ("text_completion" / "chat.completion.chunk") framed as server-sent events.
// Source: OpenAI API reference (Completions, Chat Completions, streaming).
#pragma once

#include <ctime>
#include <nlohmann/json.hpp>
#include <string>

namespace flashnorm::serve {

struct ResponseHeader {
  std::string id;     // "cmpl-N" or "chatcmpl-N"
  std::string model;  // the served model's name
  std::time_t created = 0;
  bool chat = false;
};

// The non-streamed answer.
nlohmann::json full_response(const ResponseHeader& h, const std::string& text,
                             const std::string& finish_reason, int prompt_tokens,
                             int completion_tokens);

// A streamed chunk: `text` as choices[0].text (completions) or delta.content (chat); with
// `role`, the chat delta also says role "assistant"; a non-empty finish_reason ends the choice.
nlohmann::json chunk(const ResponseHeader& h, const std::string& text,
                     const std::string& finish_reason, bool role = false);

// JSON text with invalid UTF-8 (a token that splits a character at the end of a generation)
// replaced by U+FFFD instead of throwing.
std::string dump(const nlohmann::json& j);

// "data: <json>\n\n".
std::string sse_event(const nlohmann::json& j);

// The event that ends every stream.
inline constexpr const char* kSseDone = "data: [DONE]\n\n";

}  // namespace flashnorm::serve
