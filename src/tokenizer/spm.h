// Internal: SentencePiece BPE (GGUF tokenizer.ggml.model "llama"): merges chosen by token score,
// spaces written as U+2581, byte fallback to <0xNN> tokens. Used by Tokenizer (tokenizer.cpp),
// which owns the vocabulary and splits control / user-defined tokens out of the text first.
// Sources: sentencepiece bpe_model.cc (Model::Encode: symbols are the characters of the
// normalized text, the adjacent pair whose concatenation is a NORMAL / USER_DEFINED / UNUSED piece
// with the highest score merges first, ties to the leftmost pair; UNUSED results are split back
// into the pair that formed them), normalizer.cc (escape_whitespaces, add_dummy_prefix) and
// sentencepiece_processor.cc (byte fallback of unknown pieces, dummy-prefix removal on decode).
// Behaviour references only, no code taken.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace flashnorm::tokenizer_detail {

// Token types (llama.cpp / sentencepiece numbering).
inline constexpr int8_t kSpmTypeUnused = 5;
inline constexpr int8_t kSpmTypeByte = 6;

// "\xE2\x96\x81", U+2581 LOWER ONE EIGHTH BLOCK: SentencePiece's visible space.
inline constexpr std::string_view kSpmSpace = "\xE2\x96\x81";

// Value 0..255 of a byte token text "<0xNN>" (two upper-case hex digits, as sentencepiece writes
// them), or -1 when `text` is not of that form.
int spm_byte_value(std::string_view text);

// Bytes one token stands for when decoding: a byte token (type 6) gives its byte; a control token
// (type 3) its own text; any other token its text with every U+2581 replaced by a space.
std::string spm_piece_bytes(std::string_view text, int8_t type);

// The SentencePiece-style normalizer: with replace_space each ASCII space becomes U+2581 (HF
// Replace " " -> "▁"; nothing else changes), with prepend a U+2581 goes in front of non-empty text
// (sentencepiece add_dummy_prefix; HF Prepend "▁").
std::string spm_normalize(std::string_view text, bool replace_space, bool prepend);

class SpmModel {
 public:
  // The vocabulary is owned by the caller and must outlive the model, unchanged:
  //   tokens  token texts (ids are indices), types the token types, by_text text -> id for every
  //   non-empty token. scores: one per token (higher merges first). unk: id emitted for a byte that
  //   has no byte token (dropped when absent). add_space_prefix: normalize() starts non-empty text
  //   with U+2581 (sentencepiece add_dummy_prefix; GGUF tokenizer.ggml.add_space_prefix).
  // Byte tokens are the type-6 tokens spelled "<0xNN>" (the caller has checked the spelling).
  SpmModel(const std::vector<std::string>& tokens, const std::vector<int8_t>& types,
           const std::unordered_map<std::string_view, int32_t>& by_text, std::vector<float> scores,
           std::optional<int32_t> unk, bool add_space_prefix);

  // UTF-8 text -> normalized text: spm_normalize(text, true, add_space_prefix) (Gemma's
  // normalizer is "identity" without a character map).
  std::string normalize(std::string_view text) const {
    return spm_normalize(text, true, add_space_prefix_);
  }

  // Appends the ids of normalized text `norm` (which holds no control / user-defined token the
  // caller wants matched verbatim). Characters of valid UTF-8 are the initial symbols; each byte
  // of an invalid sequence is a symbol of its own that never merges. A final symbol that is not a
  // token becomes its bytes' <0xNN> tokens (byte fallback), or unk for a byte without one.
  // Cost: O(n log n) in the length of `norm`. Thread-safe.
  void encode(std::string_view norm, std::vector<int32_t>& out) const;

  bool add_space_prefix() const { return add_space_prefix_; }

 private:
  const std::vector<std::string>& tokens_;
  const std::vector<int8_t>& types_;
  const std::unordered_map<std::string_view, int32_t>& by_text_;
  std::vector<float> scores_;
  std::optional<int32_t> unk_;
  bool add_space_prefix_;
  std::array<int32_t, 256> byte_token_{};  // -1 when the vocabulary lacks <0xNN>
};

}  // namespace flashnorm::tokenizer_detail
