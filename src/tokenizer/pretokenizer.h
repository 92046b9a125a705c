// Internal: the regex pre-tokenizer of byte-level BPE vocabularies (PCRE2, UTF + UCP mode).
// Sources: GPT-2 encoder.py split pattern; HF tokenizers pre_tokenizers::Digits and ByteLevel
// (use_regex) as configured in SmolLM2's tokenizer.json; llama.cpp llama-vocab.cpp "smollm" entry
// (behaviour reference, not code).
#pragma once

#include <memory>
#include <string_view>
#include <vector>

namespace flashnorm::tokenizer_detail {

class PreTokenizer {
 public:
  // split_digits: first isolate every \p{N} code point as its own piece (HF Digits with
  // individual_digits=true), then run the GPT-2 pattern inside each remaining stretch.
  // Errors: throws flashnorm::Error if PCRE2 refuses a pattern (an internal bug).
  explicit PreTokenizer(bool split_digits);
  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;
  ~PreTokenizer();

  // Appends to `out` the pre-tokens of `text`, in order; together they cover `text` byte for byte.
  // Bytes that are not valid UTF-8 never match a pattern item; each maximal run of them becomes a
  // piece of its own. Thread-safe (match data is per call).
  // Errors: throws flashnorm::Error on a PCRE2 matching failure (e.g. a resource limit).
  void split(std::string_view text, std::vector<std::string_view>& out) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace flashnorm::tokenizer_detail
