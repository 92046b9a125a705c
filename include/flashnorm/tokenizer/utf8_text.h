// Checks of UTF-8 text at the edges of the product: prompts and messages refused when ill-formed,
// streamed text released only in whole sequences.
// Source: the Unicode Standard, table 3-7 (well-formed UTF-8 byte sequences).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace flashnorm {

// Number of bytes at the start of `s` that form complete UTF-8 sequences (for streaming output).
size_t complete_utf8_prefix(const std::string& s);

// Byte offset of the first ill-formed UTF-8 sequence in `s` (Unicode table 3-7: no 0xC0/0xC1 or
// 0xF5-0xFF, no overlong forms, no surrogates, nothing above U+10FFFF, no truncated sequence);
// nullopt when all of `s` is well-formed.
std::optional<size_t> first_invalid_utf8(std::string_view s);

// Throws Error naming `what` (e.g. "the prompt"), the byte offset and the byte's value when `s`
// is not well-formed UTF-8: text is refused rather than silently losing bytes in the tokenizer.
void require_utf8(std::string_view s, const std::string& what);

}  // namespace flashnorm
