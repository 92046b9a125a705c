// OpenAI request bodies of POST /v1/completions and /v1/chat/completions, parsed and validated.
// Fields: model (string), prompt (completions: a non-empty string) or messages (chat: {"role",
// "content"} objects with string contents: an optional "system" message, then "user" and
// "assistant" turns alternating, ending with a non-empty "user" message; tokenizer/chat.h formats
// them), max_tokens / max_completion_tokens
// (integer >= 1; default 16 for completions, the rest of the context for chat), temperature
// (0 to 100; default 1), top_p ((0, 1]; default 1), top_k (integer >= 0, 0 = all; default 0; an
// extension), seed (integer 0 to 2^64 - 1; default random), stop (a string or up to 4 non-empty
// strings), n (1 only), stream (bool). Any other field is refused, naming it.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "flashnorm/engine/sampler.h"
#include "flashnorm/tokenizer/chat.h"

namespace flashnorm::serve {

struct CompletionRequest {
  std::string model;
  bool chat = false;
  std::string prompt;                 // completions
  std::vector<ChatMessage> messages;  // chat
  std::optional<int> max_tokens;      // absent: the endpoint's default
  SamplerOptions sampling;
  std::vector<std::string> stop;
  bool stream = false;
};

// A request body as a JSON object (io::parse_json_strict: syntax, numbers past double's range,
// duplicate keys, nesting past 64 levels). Errors: ApiError 400 for malformed JSON or another
// value than an object.
nlohmann::ordered_json parse_body(std::string_view body);

// Errors: ApiError 400 naming the field (param) for malformed JSON (invalid UTF-8 included), a
// body that is not an object, a missing or mistyped field, a value out of range, or an
// unsupported field.
CompletionRequest parse_request(std::string_view body, bool chat);

}  // namespace flashnorm::serve
