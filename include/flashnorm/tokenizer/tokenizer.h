// Tokenizers read from a GGUF file's own vocabulary ("tokenizer.ggml.*" keys).
// gpt2 model (byte-level BPE, GPT-2 byte-to-unicode map, merges by rank) with the pre-tokenizer
// named by "tokenizer.ggml.pre" (smollm: digits one by one, then the GPT-2 split pattern; the
// regex runs through PCRE2 with Unicode properties). Special/control tokens (token_type 3 or 4)
// are matched verbatim in the text before pre-tokenization when parse_special is set.
// Sources: GGUF spec "tokenizer.ggml" keys; GPT-2 encoder.py (bytes_to_unicode); llama.cpp
// llama-vocab.cpp pre-tokenizer regexes for "smollm" (reference behaviour, not code).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace flashnorm::io {
class GgufFile;
}

namespace flashnorm {

class Tokenizer {
 public:
  // Errors: throws FormatError for a missing or mistyped tokenizer array (tokens must be a STRING
  // array, token_type an integer array of the same length, merges STRING "a b" pairs of known
  // tokens), special token ids at or past the vocabulary, or an unsupported model/pre name.
  static Tokenizer from_gguf(const io::GgufFile& f);
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // UTF-8 text -> token ids. Invalid UTF-8 never crashes (bytes map through the byte alphabet).
  std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const;
  // Bytes of one token (byte-level decoded; control tokens give their text). Throws Error for an
  // id outside the vocabulary.
  std::string piece(int32_t id) const;
  std::string decode(std::span<const int32_t> ids) const;

  size_t vocab_size() const;
  std::optional<int32_t> bos() const;
  std::optional<int32_t> eos() const;
  bool add_bos() const;
  // End-of-generation: eos, and any control token named "<|im_end|>", "<end_of_turn>", "<|eot_id|>".
  bool is_eog(int32_t id) const;
  // Id of a token by its exact text, if present.
  std::optional<int32_t> token_id(std::string_view text) const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace flashnorm
