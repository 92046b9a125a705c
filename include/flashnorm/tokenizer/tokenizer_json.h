// Tokenizers read from a Hugging Face model directory: tokenizer.json (the `tokenizers` library's
// serialization) and, when present, tokenizer_config.json (bos/eos token names, add_bos_token).
//
// Supported (everything else that changes tokenization is refused, one line naming the field):
//   model          BPE (merges as "a b" strings or [a, b] pairs, ranked by position), dropout
//                  null, byte_fallback, unk_token, fuse_unk, ignore_merges; no subword prefix or
//                  word suffix
//   normalizer     null, NFC, Replace " " -> "▁", Prepend "▁", a Sequence of those
//   pre_tokenizer  null, Split (Regex or String pattern; Isolated, MergedWithPrevious,
//                  MergedWithNext or Removed; not inverted), Digits, ByteLevel (no prefix space;
//                  last), Metaspace ("▁"; prepend_scheme always, first or never; split or not;
//                  first), a Sequence of those
//   decoder        ByteLevel (with a ByteLevel pre-tokenizer), or a Sequence of Replace "▁" -> " ",
//                  ByteFallback (exactly when model.byte_fallback), Fuse, Strip " " (start n,
//                  stop 0, after Fuse)
//   post_processor null, ByteLevel (offsets only), TemplateProcessing whose single sequence is
//                  "$A" with at most one special token before it (-> add_bos) and one after it
//                  (-> Tokenizer::appended), a Sequence of those
//   added_tokens   special (-> control, type 3) and not (user-defined, type 4), normalized or
//                  not; lstrip, rstrip and single_word must be false; each id must be the one
//                  tokenizers assigns (its model.vocab id, else the next from the vocab size on)
//   truncation, padding: null
// Llama 3, Qwen 2/2.5/3, SmolLM2/GPT-2 (byte-level BPE with their own regexes) and Gemma,
// Mistral/Llama 2 (SentencePiece-style BPE with byte fallback) files are of this form.
// Behaviour matches HF tokenizers' Tokenizer.encode(text, add_special_tokens=False) (ids) and
// decode (for token sequences that decode to valid UTF-8; otherwise we return the raw bytes where
// HF substitutes U+FFFD); checked by tests/tokenizer/hf_tokenizer_json_test.py against the
// `tokenizers` library. Source: HF tokenizers (tokenizers/src: models/bpe, normalizers,
// pre_tokenizers, decoders, processors/template.rs, tokenizer/added_vocabulary.rs); behaviour
// reference, no code taken.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "flashnorm/tokenizer/tokenizer.h"

namespace flashnorm {

// Parses the text of a tokenizer.json (and of a tokenizer_config.json, when given) into a
// TokenizerVocab with model "bpe". Token ids are the union of model.vocab and added_tokens (ids
// neither names are empty, unused tokens). bos/eos: tokenizer_config.json's bos_token/eos_token
// (a string or {"content": ...}), else the TemplateProcessing token for bos. add_bos:
// tokenizer_config.json's add_bos_token when present, else whether the post_processor's template
// starts with a special token. `source` names the file in errors.
// Errors: throws flashnorm::Error, one line "SOURCE: FIELD: what" (JSON syntax errors with the
// byte offset), for malformed JSON, a wrong type, an unknown key or an unsupported setting.
TokenizerVocab parse_hf_tokenizer(std::string_view tokenizer_json,
                                  std::optional<std::string_view> config_json,
                                  const std::string& source = "tokenizer.json");

// Reads DIR/tokenizer.json and DIR/tokenizer_config.json (optional) with parse_hf_tokenizer.
// Errors: flashnorm::Error for a missing or unreadable tokenizer.json, and parse_hf_tokenizer's.
TokenizerVocab read_hf_tokenizer(const std::filesystem::path& dir);

// Tokenizer::from_vocab(read_hf_tokenizer(dir)).
Tokenizer tokenizer_from_hf_dir(const std::filesystem::path& dir);

}  // namespace flashnorm
