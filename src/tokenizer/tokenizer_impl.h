// Internal: Tokenizer::Impl, the state the parts of Tokenizer share, and the names they use.
// The parts: tokenizer.cpp (encode and decode), tokenizer_from_vocab.cpp (checking and building),
// tokenizer_from_gguf.cpp (the GGUF reader), bpe_merge.cpp (the BPE merge loop). The names: token
// types (llama.cpp numbering) and GGUF "tokenizer.ggml.*" keys.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "bpe_merge.h"
#include "flashnorm/tokenizer/tokenizer.h"
#include "pretokenizer.h"
#include "special_tokens.h"
#include "spm.h"

namespace flashnorm {
namespace tokenizer_detail {

inline constexpr int64_t kTypeMin = 0;  // llama.cpp LLAMA_TOKEN_TYPE_UNDEFINED
inline constexpr int64_t kTypeControl = 3;
inline constexpr int64_t kTypeUserDefined = 4;
inline constexpr int64_t kTypeMax = 6;  // LLAMA_TOKEN_TYPE_BYTE

inline constexpr const char* kKeyTokens = "tokenizer.ggml.tokens";
inline constexpr const char* kKeyTypes = "tokenizer.ggml.token_type";
inline constexpr const char* kKeyMerges = "tokenizer.ggml.merges";
inline constexpr const char* kKeyModel = "tokenizer.ggml.model";
inline constexpr const char* kKeyPre = "tokenizer.ggml.pre";
inline constexpr const char* kKeyScores = "tokenizer.ggml.scores";

}  // namespace tokenizer_detail

struct Tokenizer::Impl {
  using Symbol = tokenizer_detail::Symbol;
  using Candidate = tokenizer_detail::Candidate;

  std::string source;
  std::vector<std::string> tokens;  // as stored (byte alphabet)
  std::vector<int8_t> types;
  std::vector<std::string> pieces;                        // bytes each token decodes to
  std::unordered_map<std::string_view, int32_t> by_text;  // views into `tokens`
  std::array<int32_t, 256> byte_token{};
  std::unordered_map<uint64_t, tokenizer_detail::Merge> merges;
  // Tokens matched verbatim (control and user-defined): `raw` in the text as given, `normalized`
  // in each stretch between raw matches after normalize().
  tokenizer_detail::SpecialTable raw_specials, norm_specials;
  std::optional<int32_t> bos, eos;
  bool add_bos = false;
  std::optional<int32_t> appended;  // Tokenizer::appended
  std::string appended_source;
  std::vector<bool> eog;
  std::optional<tokenizer_detail::PreTokenizer> pre;  // gpt2 and bpe models
  std::optional<tokenizer_detail::SpmModel> spm;      // llama model (SentencePiece BPE)
  // bpe model (HF tokenizers BPE; see TokenizerVocab)
  bool byte_level = true;
  bool nfc = false, replace_space = false, prepend_space = false;
  bool byte_fallback = false, fuse_unk = false, ignore_merges = false;
  std::optional<int32_t> bpe_unk;  // emitted for a symbol without a token (bpe model only)
  std::array<int32_t, 256> fallback_token{};  // "<0xNN>" ids for byte_fallback, -1 if absent
  int strip_leading_spaces = 0;
  bool metaspace = false;
  MetaspacePrepend metaspace_prepend = MetaspacePrepend::kAlways;
  std::vector<bool> added_only;  // tokens BPE never uses (bpe model; empty: none)

  // Id of the model token (not an added-only one) spelled `text`, or -1.
  int32_t model_id(std::string_view text) const {
    auto it = by_text.find(text);
    if (it == by_text.end() || (!added_only.empty() && added_only[it->second])) return -1;
    return it->second;
  }
  // A stretch between raw specials, normalized (llama: sentencepiece's; bpe: spm_normalize).
  std::string normalize(std::string_view text) const;

  // Validates `v` and fills this object. offset_of(key) gives the byte offset that errors name for
  // a key (0 when unknown).
  void build(TokenizerVocab& v, const std::function<uint64_t(std::string_view)>& offset_of);
  // Initial symbols of `word` (bytes or characters with fallback and unk; see TokenizerVocab).
  void initial_symbols(std::string_view word, std::vector<Symbol>& syms) const;
  void bpe(std::string_view word, std::vector<int32_t>& out, std::vector<Symbol>& syms,
           std::vector<Candidate>& heap) const;
  // `at_start`: the text begins the input (HF Metaspace prepend_scheme "first").
  void encode_plain(std::string_view text, bool at_start, std::vector<int32_t>& out) const;
};

}  // namespace flashnorm
