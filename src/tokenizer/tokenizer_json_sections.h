// Internal: the readers of tokenizer.json's sections and of tokenizer_config.json.
// parse_hf_tokenizer (tokenizer_json.cpp) calls them in turn; each fills its part of a
// TokenizerVocab or refuses the section with one line naming the field. Source: HF tokenizers
// (models/bpe, normalizers, pre_tokenizers, decoders, processors/template.rs,
// tokenizer/added_vocabulary.rs); behaviour reference, no code taken.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "flashnorm/tokenizer/tokenizer.h"
#include "tokenizer_json_reader.h"

namespace flashnorm::tokenizer_detail {

// The token ids a tokenizer.json names (model.vocab, then added_tokens), as they are read.
struct HfTokenIds {
  std::vector<std::optional<std::string>> by_id;  // id -> text
  std::unordered_map<std::string, int64_t> ids;   // text -> id

  // Records token `text` at `id`; path() names the entry in an error (formatted only then: this
  // runs once per token). Errors: an id that already holds another text, a text with another id.
  template <typename Path>
  void place(const Reader& r, int64_t id, const std::string& text, Path&& path) {
    if (static_cast<size_t>(id) >= by_id.size()) by_id.resize(static_cast<size_t>(id) + 1);
    if (by_id[id] && *by_id[id] != text) {
      r.fail(path(), fmt::format("id {} is already {}", id, show(json(*by_id[id]))));
    }
    auto [it, fresh] = ids.emplace(text, id);
    if (!fresh && it->second != id) {
      r.fail(path(), fmt::format("{} already has id {}", show(json(text)), it->second));
    }
    by_id[id] = text;
  }
};

// The "model" object (BPE only): dropout, subword prefix and word suffix refused; fuse_unk,
// byte_fallback and ignore_merges into `v`; model.vocab into `ids`; model.merges into v.merges
// ("a b"; [a, b] pairs joined by a space).
void read_model(const Reader& r, const json& model, HfTokenIds& ids, TokenizerVocab& v);

// model.unk_token (null or a token's text, looked up in `ids`) into v.unk.
void read_unk_token(const Reader& r, const json& model, const HfTokenIds& ids, TokenizerVocab& v);

// The "added_tokens" array of `root` (absent: none) into `ids`, each id checked against the one
// tokenizers assigns; then v.tokens, types, added_only and normalized for every id of model.vocab
// and added_tokens together (ids neither names: empty, unused tokens); the texts are moved out of
// ids.by_id (ids.ids stays whole).
void read_added_tokens(const Reader& r, const json& root, HfTokenIds& ids, TokenizerVocab& v);

// The "normalizer" node (null: none): NFC, Replace " " -> "▁", Prepend "▁", or a Sequence of those.
void read_normalizer(const Reader& r, const json& node, TokenizerVocab& v);

// The "pre_tokenizer" node (null: none): Split, Digits, ByteLevel (last), Metaspace (first), or a
// Sequence of those, into v.pre_splits, byte_level and metaspace.
void read_pre_tokenizer(const Reader& r, const json& node, TokenizerVocab& v);

// The "decoder" node: ByteLevel with a ByteLevel pre-tokenizer, else a Sequence of Replace "▁" ->
// " ", ByteFallback (exactly when v.byte_fallback), Fuse, Strip (into v.strip_leading_spaces).
void read_decoder(const Reader& r, const json& node, TokenizerVocab& v);

// The "post_processor" node: TemplateProcessing's single sequence "$A" with at most one special
// token before it (bos) and one after it (suffix: Qwen3-Embedding's "$A <|endoftext|>");
// ByteLevel (offsets only) and null change nothing.
struct TemplateSpecials {
  std::optional<int64_t> bos, suffix;
};
TemplateSpecials read_post_processor(const Reader& r, const json& node);

// tokenizer_config.json's text (`source` names the tokenizer.json beside it): bos_token and
// eos_token (looked up in `ids`; bos must agree with `template_bos`) and add_bos_token into `v`;
// add_eos_token true is refused.
void read_tokenizer_config(std::string_view config_json, const std::string& source,
                           const HfTokenIds& ids, std::optional<int64_t> template_bos,
                           TokenizerVocab& v);

}  // namespace flashnorm::tokenizer_detail
