// Internal: the regex pre-tokenizer of BPE vocabularies (PCRE2, UTF + UCP mode): a sequence of
// split stages (HF tokenizers' Split / Digits / ByteLevel(use_regex) pre-tokenizers).
// Sources: HF tokenizers pre_tokenizers (split.rs, digits.rs, byte_level.rs, sequence.rs) and
// normalizer.rs (SplitDelimiterBehavior); GPT-2 encoder.py split pattern; llama.cpp llama-vocab.cpp
// "smollm" entry (behaviour references, not code).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "flashnorm/tokenizer/tokenizer.h"

namespace flashnorm::tokenizer_detail {

// GPT-2's split pattern as HF tokenizers' ByteLevel(use_regex) writes it (Oniguruma syntax).
inline constexpr const char* kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// The stages a GGUF "tokenizer.ggml.pre" name stands for ("smollm": each \p{N} alone, then the
// GPT-2 pattern; "gpt-2" / "gpt2": the GPT-2 pattern), or an empty list for an unknown name.
std::vector<PreSplit> gguf_pre_splits(std::string_view name);

// An Oniguruma pattern rewritten for PCRE2: `\s` becomes Oniguruma's set (the Unicode White_Space
// property: U+0085 is a space there, U+180E is not; PCRE2's UCP `\s` differs), `\S` outside a
// character class its complement. Throws flashnorm::Error for `\S` inside a class and for `\h` /
// `\H` (a hex digit in Oniguruma, horizontal space in PCRE2).
std::string onig_to_pcre2(std::string_view pattern);

class PreTokenizer {
 public:
  // Compiles each stage's regex (onig_to_pcre2, then PCRE2 with UTF | UCP | MATCH_INVALID_UTF).
  // Errors: throws flashnorm::Error naming the stage and the pattern offset if PCRE2 refuses one.
  explicit PreTokenizer(const std::vector<PreSplit>& stages);
  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;
  ~PreTokenizer();

  // Appends to `out` the pre-tokens of `text`, in order: stage 1 splits the text, each later stage
  // splits every piece of the one before (a look-ahead never sees past its piece, as in HF's
  // Sequence). Without stages the text is one piece. Pieces cover `text` byte for byte, except
  // what kRemoved stages drop. Bytes that are not valid UTF-8 never match; empty matches are
  // skipped. Thread-safe (match data is per call).
  // Errors: throws flashnorm::Error on a PCRE2 matching failure (e.g. a resource limit).
  void split(std::string_view text, std::vector<std::string_view>& out) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace flashnorm::tokenizer_detail
