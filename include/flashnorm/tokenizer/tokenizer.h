// Tokenizers read from a GGUF file's own vocabulary ("tokenizer.ggml.*" keys).
// gpt2 model (byte-level BPE, GPT-2 byte-to-unicode map, merges by rank) with the pre-tokenizer
// named by "tokenizer.ggml.pre" (smollm: digits one by one, then the GPT-2 split pattern; the
// regex runs through PCRE2 with Unicode properties). Special/control tokens (token_type 3 or 4)
// are matched verbatim in the text before pre-tokenization when parse_special is set.
// Behaviour matches Hugging Face tokenizers configured as SmolLM2's tokenizer.json (BPE without
// unk/byte fallback; pre-tokenizers Digits(individual_digits) then ByteLevel(use_regex)); checked
// by tests/tokenizer against ids that HF tokenizers produced.
// Sources: GGUF spec "tokenizer.ggml" keys; GPT-2 encoder.py (bytes_to_unicode); HF tokenizers BPE
// and pre-tokenizers; llama.cpp llama-vocab.cpp "smollm" pre-tokenizer (behaviour, not code).
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

// A tokenizer vocabulary as plain data, with the same meaning as the GGUF "tokenizer.ggml.*" keys.
// Tokenizer::from_gguf fills one from the file; from_vocab lets other sources (tests, a future
// tokenizer.json reader) build the same tokenizer. Field <-> key:
//   model  "tokenizer.ggml.model" ("gpt2" is the only supported value)
//   pre    "tokenizer.ggml.pre" ("smollm": digits split one by one, then the GPT-2 pattern;
//          "gpt-2" / "gpt2": the GPT-2 pattern alone)
//   tokens "tokenizer.ggml.tokens" (token texts in the GPT-2 byte alphabet; ids are indices)
//   types  "tokenizer.ggml.token_type" (llama.cpp values: 0 undefined, 1 normal, 2 unknown,
//          3 control, 4 user-defined, 5 unused, 6 byte; same length as tokens)
//   merges "tokenizer.ggml.merges" ("left right", rank = index)
//   bos/eos/unk/pad "tokenizer.ggml.{bos,eos,unknown,padding}_token_id"
//   add_bos "tokenizer.ggml.add_bos_token"
// `source` names the origin in error messages (a file name).
struct TokenizerVocab {
  std::string source;
  std::string model = "gpt2";
  std::string pre = "smollm";
  std::vector<std::string> tokens;
  std::vector<int64_t> types;
  std::vector<std::string> merges;
  std::optional<uint64_t> bos, eos, unk, pad;
  bool add_bos = false;
};

class Tokenizer {
 public:
  // Builds a tokenizer from plain data (see TokenizerVocab). Same checks and errors as from_gguf
  // (FormatError with byte offset 0, naming the GGUF key the field stands for).
  static Tokenizer from_vocab(TokenizerVocab vocab);
  // Reads tokenizer.ggml.{model, pre, tokens, token_type, merges, bos/eos/unknown/padding_token_id,
  // add_bos_token}. An absent token_type means every token is normal (no specials); an absent pre
  // is unsupported. Vocabulary sizes are limited to int32 ids.
  // Errors: throws FormatError naming the key (and the element index where one is at fault) for a
  // missing or mistyped tokenizer array (tokens must be a STRING array without duplicates,
  // token_type an integer array of the same length with values 0..6, each merge two tokens
  // separated by one space whose concatenation is a token), special token ids at or past the
  // vocabulary, or an unsupported model/pre name.
  static Tokenizer from_gguf(const io::GgufFile& f);
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // UTF-8 text -> token ids. No BOS is added (see add_bos()). With parse_special, control tokens
  // (type 3) in the text become their ids; user-defined tokens (type 4) are always matched. Longest
  // match at the leftmost position wins (as HF tokenizers' added-token splitter). Invalid UTF-8
  // never crashes: bytes that are not part of a valid sequence form their own pre-tokens and go
  // through the byte alphabet like any byte. Bytes whose alphabet character is not a token are
  // dropped, as HF and llama.cpp do (SmolLM2 lacks 21: 0x04 0x06 0x13 0x14 0x16 0x1d 0xc0 0xc1
  // 0xf1 0xf2 0xf5..0xff); for every other byte string s, decode(encode(s)) == s.
  // Cost: O(n log n) in the text length; thread-safe.
  std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const;
  // Bytes of one token (byte-level decoded; control tokens give their text). Throws Error for an
  // id outside the vocabulary.
  std::string piece(int32_t id) const;
  // Concatenated pieces of `ids` (bytes; not necessarily valid UTF-8 when a multi-byte character is
  // split across a prefix of a sequence). Throws Error for an id outside the vocabulary.
  std::string decode(std::span<const int32_t> ids) const;

  size_t vocab_size() const;
  std::optional<int32_t> bos() const;
  std::optional<int32_t> eos() const;
  bool add_bos() const;
  // End-of-generation: eos, and any control token named "<|im_end|>", "<end_of_turn>",
  // "<|eot_id|>" or "<|endoftext|>" (as llama.cpp's end-of-generation set). False out of range.
  bool is_eog(int32_t id) const;
  // Id of a token by its exact text, if present.
  std::optional<int32_t> token_id(std::string_view text) const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace flashnorm
