// Internal: Unicode Normalization Form C of UTF-8 text (HF tokenizers' NFC normalizer, as Qwen 2 /
// 2.5 / 3 tokenizer.json files configure it), through ICU's Normalizer2.
// Source: Unicode Standard Annex #15; ICU unicode/normalizer2.h.
#pragma once

#include <string>
#include <string_view>

namespace flashnorm::tokenizer_detail {

// `text` in NFC. Each maximal run of valid UTF-8 is normalized on its own; bytes that are not
// valid UTF-8 are copied unchanged (HF tokenizers only sees valid text). Thread-safe.
// Errors: throws flashnorm::Error when ICU reports a failure (e.g. missing data).
std::string nfc(std::string_view text);

}  // namespace flashnorm::tokenizer_detail
