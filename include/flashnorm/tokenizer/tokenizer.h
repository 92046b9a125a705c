// Tokenizers read from a GGUF file's own vocabulary ("tokenizer.ggml.*" keys), or from a Hugging
// Face tokenizer.json (model "bpe", see TokenizerVocab and tokenizer_json.h). The GGUF models:
//
// llama model (SentencePiece BPE, e.g. Gemma 3): spaces become U+2581 "▁" (and, when
// tokenizer.ggml.add_space_prefix is true, a "▁" is put in front of the text); control tokens
// (type 3, with parse_special) and user-defined tokens (type 4) are matched verbatim, leftmost and
// longest first, in that normalized text; between them the characters are merged pairwise, always
// the adjacent pair whose concatenation is a normal/user-defined/unused token with the highest
// tokenizer.ggml.scores value (ties: leftmost); characters left without a token become their
// UTF-8 bytes' "<0xNN>" tokens (byte fallback). Decoding maps "▁" back to a space and byte tokens
// to raw bytes. Behaviour matches Google's sentencepiece library run on a ModelProto built from
// the GGUF vocabulary (BPE, byte_fallback, identity normalizer with whitespace escaping, Gemma's
// add_dummy_prefix false), with control tokens treated as user-defined when parse_special is set;
// checked by tests/tokenizer/test_tokenizer_gemma3.cpp against ids that sentencepiece produced.
//
// gpt2 model (byte-level BPE, GPT-2 byte-to-unicode map, merges by rank) with the pre-tokenizer
// named by "tokenizer.ggml.pre" (smollm: digits one by one, then the GPT-2 split pattern; each
// name stands for its HF regexes, run through PCRE2 with Unicode properties by the same
// pre-tokenizer that runs a tokenizer.json's own regexes). Special/control tokens (token_type 3 or
// 4) are matched verbatim in the text before pre-tokenization when parse_special is set. Behaviour
// matches Hugging Face tokenizers configured as SmolLM2's tokenizer.json (BPE without unk/byte
// fallback; pre-tokenizers Digits(individual_digits) then ByteLevel(use_regex)); checked by
// tests/tokenizer against ids that HF tokenizers produced. Sources: GGUF spec "tokenizer.ggml"
// keys; GPT-2 encoder.py (bytes_to_unicode); HF tokenizers BPE and pre-tokenizers; llama.cpp
// llama-vocab.cpp "smollm" pre-tokenizer (behaviour, not code); sentencepiece bpe_model.cc /
// normalizer.cc / sentencepiece_processor.cc (llama model; behaviour, not code).
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

// How a pre-tokenizer split stage treats the text its regex matches (HF tokenizers'
// SplitDelimiterBehavior): kIsolated makes every match and every stretch between matches a piece;
// kMergedWithPrevious appends each match to the stretch before it; kMergedWithNext prepends it to
// the stretch after it; kRemoved drops matches and keeps the stretches.
enum class SplitBehavior { kIsolated, kMergedWithPrevious, kMergedWithNext, kRemoved };

// Where HF's Metaspace pre-tokenizer puts a "▁" in front of a piece that does not start with one:
// never, only in front of the piece that starts the text, or in front of every piece.
enum class MetaspacePrepend { kNever, kFirst, kAlways };

// One pre-tokenizer stage: a regex in Oniguruma syntax as HF tokenizers writes it (run through
// PCRE2 in UTF/UCP mode, with `\s` and `\S` spelled as Oniguruma's White_Space set).
struct PreSplit {
  std::string regex;
  SplitBehavior behavior = SplitBehavior::kIsolated;
};

// A tokenizer vocabulary as plain data, with the same meaning as the GGUF "tokenizer.ggml.*" keys.
// Tokenizer::from_gguf fills one from the file; from_vocab lets other sources (tests, a future
// tokenizer.json reader) build the same tokenizer. Field <-> key:
//   model  "tokenizer.ggml.model" ("gpt2": byte-level BPE; "llama": SentencePiece BPE)
//   pre    "tokenizer.ggml.pre" (gpt2 only: "smollm": digits split one by one, then the GPT-2
//          pattern; "gpt-2" / "gpt2": the GPT-2 pattern alone. Ignored for llama)
//   tokens "tokenizer.ggml.tokens" (token texts, ids are indices: gpt2 in the GPT-2 byte
//          alphabet; llama with "▁" for spaces, byte tokens spelled "<0xNN>")
//   types  "tokenizer.ggml.token_type" (llama.cpp values: 0 undefined, 1 normal, 2 unknown,
//          3 control, 4 user-defined, 5 unused, 6 byte; same length as tokens)
//   merges "tokenizer.ggml.merges" ("left right", rank = index; gpt2 only)
//   scores "tokenizer.ggml.scores" (llama only: one float per token, higher merges first)
//   add_space_prefix "tokenizer.ggml.add_space_prefix" (llama only; absent means true, as in
//          llama.cpp; Gemma 3 sets false)
//   bos/eos/unk/pad "tokenizer.ggml.{bos,eos,unknown,padding}_token_id"
//   add_bos "tokenizer.ggml.add_bos_token"
//   add_eos "tokenizer.ggml.add_eos_token" (-> Tokenizer::appended)
// model "bpe" is Hugging Face tokenizers' BPE model as a tokenizer.json describes it (filled by
// read_hf_tokenizer, tokenizer_json.h): text is split at added tokens (types 3 special / 4 not),
// first those with normalized false in the raw text; each stretch between them is normalized
// (nfc: Unicode NFC; replace_space; add_space_prefix: HF Prepend "▁", per stretch), split at
// normalized added tokens, pre-tokenized (metaspace, then pre_splits; and mapped to the byte
// alphabet when byte_level), and each piece is merged by merge rank: initial symbols are its
// characters (byte_level: its bytes), a character without a token becomes its bytes' <0xNN> tokens
// (byte_fallback), else unk (one per run with fuse_unk), else nothing; with ignore_merges a piece
// that is a token is that token. Decoding: byte_level maps every token through the byte alphabet
// (HF ByteLevel decoder); else "▁" -> space, <0xNN> -> that byte (byte_fallback) and
// strip_leading_spaces spaces removed from the start of the output (HF Replace, ByteFallback, Fuse,
// Strip). `source` names the origin in error messages (a file name).
struct TokenizerVocab {
  std::string source;
  std::string model = "gpt2";
  std::string pre = "smollm";
  std::vector<std::string> tokens;
  std::vector<int64_t> types;
  std::vector<std::string> merges;
  std::vector<double> scores;
  bool add_space_prefix = true;
  std::optional<uint64_t> bos, eos, unk, pad;
  bool add_bos = false;
  bool add_eos = false;
  // model "bpe": the special token tokenizer.json's template puts after a text ("$A <special>").
  std::optional<uint64_t> suffix;
  // model "bpe" only (see above); for gpt2 pre_splits come from `pre`.
  std::vector<PreSplit> pre_splits;
  std::vector<bool> normalized;  // per token; true: an added token matched in normalized text
  std::vector<bool> added_only;  // per token; true: absent from the BPE model's own vocabulary
  bool byte_level = false;
  bool nfc = false;
  bool replace_space = false;
  bool byte_fallback = false;
  bool fuse_unk = false;
  bool ignore_merges = false;
  int strip_leading_spaces = 0;
  // HF Metaspace pre-tokenizer, run before pre_splits: spaces -> "▁", then metaspace_prepend.
  bool metaspace = false;
  MetaspacePrepend metaspace_prepend = MetaspacePrepend::kAlways;

  // Extends the vocabulary to `n` ids (no-op when it has as many) with unused (type 5), empty
  // tokens, which are never matched and decode to nothing; every per-token array above that is in
  // use grows with it. For models whose embedding has more rows than the tokenizer names ids.
  void pad_to(size_t n) {
    if (tokens.size() >= n) return;
    const size_t old = tokens.size();
    tokens.resize(n);
    types.resize(n, 5);
    if (scores.size() == old && old > 0) scores.resize(n, 0.0);
    if (normalized.size() == old) normalized.resize(n, false);
    if (added_only.size() == old) added_only.resize(n, false);
  }
};

class Tokenizer {
 public:
  // Builds a tokenizer from plain data (see TokenizerVocab). Same checks and errors as from_gguf
  // (FormatError with byte offset 0, naming the GGUF key the field stands for; for model "bpe" an
  // Error naming the tokenizer.json field instead, e.g. "model.merges[3]"). Merges of model "bpe"
  // must join tokens of the model's own vocabulary (not added_only ones).
  static Tokenizer from_vocab(TokenizerVocab vocab);
  // Reads tokenizer.ggml.{model, pre, tokens, token_type, merges (gpt2), scores and
  // add_space_prefix (llama), bos/eos/unknown/padding_token_id, add_bos_token}. An absent
  // token_type means every token is normal (no specials); an absent pre is unsupported for gpt2.
  // Vocabulary sizes are limited to int32 ids. Gemma 3's 262144-token vocabulary loads in well
  // under a second (tested).
  // Errors: throws FormatError naming the key (and the element index where one is at fault) for a
  // missing or mistyped tokenizer array (tokens must be a STRING array without duplicates,
  // token_type an integer array of the same length with values 0..6, each merge two tokens
  // separated by one space whose concatenation is a token; llama: scores a float array of the
  // same length without NaN, every byte token (type 6) spelled "<0xNN>"), special token ids at or
  // past the vocabulary, or an unsupported model/pre name.
  static Tokenizer from_gguf(const io::GgufFile& f);
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // UTF-8 text -> token ids. No BOS is added (see add_bos()). With parse_special, control tokens
  // (type 3) in the text become their ids; user-defined tokens (type 4) are always matched. Longest
  // match at the leftmost position wins (as HF tokenizers' added-token splitter and
  // sentencepiece's user-defined symbols). Invalid UTF-8 never crashes.
  // gpt2: bytes that are not part of a valid sequence form their own pre-tokens and go through the
  // byte alphabet like any byte. Bytes whose alphabet character is not a token are dropped, as HF
  // and llama.cpp do (SmolLM2 lacks 21: 0x04 0x06 0x13 0x14 0x16 0x1d 0xc0 0xc1 0xf1 0xf2
  // 0xf5..0xff); for every other byte string s, decode(encode(s)) == s.
  // llama: each byte of an invalid sequence becomes its <0xNN> token (sentencepiece itself would
  // substitute U+FFFD; no Python reference can pass such text); a byte without a <0xNN> token
  // becomes the unknown token (dropped without one). With all 256 byte tokens (Gemma 3) and
  // add_space_prefix false, decode(encode(s)) == s for every byte string s, except that a literal
  // U+2581 in s is the space marker and comes back as a space (as in sentencepiece). The dummy
  // prefix of add_space_prefix goes in front of the whole text (also when it starts with a control
  // token). Cost: O(n log n) in the text length; thread-safe.
  std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const;
  // Bytes of one token (gpt2: byte-level decoded; llama: "▁" -> space, "<0xNN>" -> that byte;
  // control tokens give their text; bpe: the tokenizer.json decoder on this token alone, a
  // normalized added token in its normalized spelling, as HF). Throws Error for an id outside the
  // vocabulary.
  std::string piece(int32_t id) const;
  // Concatenated pieces of `ids` (bytes; not necessarily valid UTF-8 when a multi-byte character is
  // split across a prefix of a sequence). llama with add_space_prefix: the first non-control piece
  // loses one leading space (as sentencepiece's decoder). bpe: strip_leading_spaces spaces are
  // removed from the start of the whole text (HF Strip after Fuse); where HF's decoders substitute
  // U+FFFD for bytes that are not valid UTF-8, the bytes are returned as they are. Throws Error
  // for an id outside the vocabulary.
  std::string decode(std::span<const int32_t> ids) const;

  size_t vocab_size() const;
  std::optional<int32_t> bos() const;
  std::optional<int32_t> eos() const;
  bool add_bos() const;
  // The token the vocabulary puts after a text: tokenizer.json's template suffix ("$A <special>",
  // what transformers appends with add_special_tokens), else EOS where GGUF's add_eos_token asks
  // for it (what llama.cpp appends). The embedding pipeline adds it (engine/embedder.h); commands
  // that prompt a model refuse such a vocabulary (refuse_appended_token).
  std::optional<int32_t> appended() const;
  // Where the appended token comes from, for messages ("tokenizer.json post_processor" or
  // "tokenizer.ggml.add_eos_token"); empty when there is none.
  std::string_view appended_source() const;
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

// Refuses, for a command that prompts a model (`command`: "generate", "verify", "serve"), a
// vocabulary that appends a token after every text (Tokenizer::appended: an embedding model's
// tokenizer). Errors: Error naming the setting and the token.
void refuse_appended_token(const Tokenizer& tok, std::string_view command);

}  // namespace flashnorm
