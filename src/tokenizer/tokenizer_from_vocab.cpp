// Tokenizer::from_vocab: a TokenizerVocab checked and built into Tokenizer::Impl.
// Errors name the GGUF key a field stands for, or the tokenizer.json field for model "bpe". Built:
// token pieces, the lookup table, merges, special ids, added tokens, the end-of-generation set.
// Sources: GGUF spec "tokenizer.ggml.*" keys; llama.cpp llama-vocab.cpp token types and
// end-of-generation set; HF tokenizers decoders (ByteLevel, Replace, ByteFallback) of one token
// (behaviour references only, no code taken).
#include <fmt/format.h>

#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <utility>

#include "byte_alphabet.h"
#include "flashnorm/error.h"
#include "tokenizer_impl.h"
#include "utf8.h"

namespace flashnorm {
namespace {

using tokenizer_detail::alphabet;
using tokenizer_detail::alphabet_to_bytes;
using tokenizer_detail::append_utf8;
using tokenizer_detail::decode_utf8;
using tokenizer_detail::kKeyMerges;
using tokenizer_detail::kKeyModel;
using tokenizer_detail::kKeyPre;
using tokenizer_detail::kKeyScores;
using tokenizer_detail::kKeyTokens;
using tokenizer_detail::kKeyTypes;
using tokenizer_detail::kTypeControl;
using tokenizer_detail::kTypeMax;
using tokenizer_detail::kTypeMin;
using tokenizer_detail::kTypeUserDefined;
using tokenizer_detail::Merge;
using tokenizer_detail::pair_key;

// A token text for a message: control bytes and quotes as \xNN, cut at 40 bytes.
std::string printable(std::string_view s) {
  std::string out;
  for (unsigned char c : s.substr(0, 40)) {
    if (c < 0x20 || c == 0x7F || c == '\'') {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  if (s.size() > 40) out += "...";
  return out;
}

// HF ByteLevel decoder of one token: its characters' bytes when every character is in the byte
// alphabet, else the token's own text.
std::string byte_level_piece(std::string_view text) {
  const auto& a = alphabet();
  std::string out;
  for (size_t i = 0; i < text.size();) {
    char32_t cp = 0;
    size_t len = decode_utf8(text, i, cp);
    if (len == 0 || cp >= a.from_cp.size() || a.from_cp[cp] < 0) return std::string(text);
    out.push_back(static_cast<char>(a.from_cp[cp]));
    i += len;
  }
  return out;
}

}  // namespace

Tokenizer Tokenizer::from_vocab(TokenizerVocab vocab) {
  auto impl = std::make_unique<Impl>();
  impl->build(vocab, [](std::string_view) -> uint64_t { return 0; });
  return Tokenizer(std::move(impl));
}

void Tokenizer::Impl::build(TokenizerVocab& v,
                            const std::function<uint64_t(std::string_view)>& offset_of) {
  Impl& t = *this;
  const std::string& src = v.source;
  const bool is_spm = v.model == "llama";
  const bool hf = v.model == "bpe";
  // HF decoders on one token: ByteLevel, or Replace("▁", " ") (every token, control tokens too)
  // and ByteFallback.
  auto hf_piece = [&v](std::string_view text) {
    if (v.byte_level) return byte_level_piece(text);
    const int byte = v.byte_fallback ? tokenizer_detail::spm_byte_value(text) : -1;
    if (byte >= 0) return std::string(1, static_cast<char>(byte));
    return tokenizer_detail::spm_piece_bytes(text, 1);
  };
  // Errors name the GGUF key a field stands for, or for model "bpe" the tokenizer.json field.
  auto fail = [&](std::string_view key, std::string field, const std::string& what) {
    if (!hf) throw FormatError(src, field, offset_of(key), what);
    for (auto [gguf, json] : {std::pair{kKeyTokens, "model.vocab"},
                              {kKeyMerges, "model.merges"},
                              {kKeyTypes, "added_tokens"},
                              {kKeyPre, "pre_tokenizer"}}) {
      if (field.starts_with(gguf)) field = json + field.substr(std::string_view(gguf).size());
    }
    throw Error(fmt::format("{}: {}: {}", src, field, what));
  };

  if (v.model != "gpt2" && !is_spm && !hf) {
    fail(kKeyModel, kKeyModel,
         fmt::format("unsupported tokenizer model '{}' (supported: gpt2, llama, bpe)",
                     printable(v.model)));
  }
  std::vector<PreSplit> pre_splits = v.pre_splits;
  if (v.model == "gpt2") {
    pre_splits = tokenizer_detail::gguf_pre_splits(v.pre);
    if (pre_splits.empty()) {
      fail(kKeyPre, kKeyPre,
           fmt::format("unsupported pre-tokenizer '{}' (supported: smollm, gpt-2)",
                       printable(v.pre)));
    }
  }
  // SentencePiece vocabularies have no pre-tokenizer; llama.cpp ignores the name ("default").
  if (hf && !v.normalized.empty() && v.normalized.size() != v.tokens.size()) {
    fail(kKeyTypes, "normalized",
         fmt::format("{} entries but there are {} tokens", v.normalized.size(), v.tokens.size()));
  }

  const size_t n = v.tokens.size();
  if (n == 0) fail(kKeyTokens, kKeyTokens, "empty vocabulary");
  if (n > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    fail(kKeyTokens, kKeyTokens, fmt::format("{} tokens exceed the int32 id range", n));
  }
  if (v.types.size() != n) {
    fail(kKeyTypes, kKeyTypes,
         fmt::format("{} entries but tokenizer.ggml.tokens has {}", v.types.size(), n));
  }
  std::vector<float> scores;
  if (is_spm) {
    if (v.scores.size() != n) {
      fail(kKeyScores, kKeyScores,
           fmt::format("{} entries but tokenizer.ggml.tokens has {}", v.scores.size(), n));
    }
    scores.resize(n);
    for (size_t i = 0; i < n; ++i) {
      if (std::isnan(v.scores[i])) {
        fail(kKeyScores, fmt::format("{}[{}]", kKeyScores, i), "score is NaN");
      }
      scores[i] = static_cast<float>(v.scores[i]);
    }
  }

  t.source = src;
  if (hf && !v.added_only.empty()) {
    if (v.added_only.size() != n) {
      fail(kKeyTypes, "added_only",
           fmt::format("{} entries but there are {} tokens", v.added_only.size(), n));
    }
    t.added_only = std::move(v.added_only);
  }
  t.tokens = std::move(v.tokens);
  t.types.resize(n);
  t.pieces.resize(n);
  t.by_text.reserve(n * 2);
  for (size_t i = 0; i < n; ++i) {
    int64_t ty = v.types[i];
    if (ty < kTypeMin || ty > kTypeMax) {
      fail(kKeyTypes, fmt::format("{}[{}]", kKeyTypes, i),
           fmt::format("token type {} is not one of 0..6", ty));
    }
    t.types[i] = static_cast<int8_t>(ty);
    const std::string& text = t.tokens[i];
    if (hf) {
      t.pieces[i] = hf_piece(text);
    } else if (is_spm) {
      if (ty == tokenizer_detail::kSpmTypeByte && tokenizer_detail::spm_byte_value(text) < 0) {
        fail(kKeyTokens, fmt::format("{}[{}]", kKeyTokens, i),
             fmt::format("byte token (type 6) '{}' is not of the form <0xNN>", printable(text)));
      }
      t.pieces[i] = tokenizer_detail::spm_piece_bytes(text, static_cast<int8_t>(ty));
    } else {
      bool verbatim = ty == kTypeControl || ty == kTypeUserDefined;
      t.pieces[i] = verbatim ? text : alphabet_to_bytes(text);
    }
    if (text.empty()) continue;  // cannot be looked up or matched
    auto [it, fresh] = t.by_text.emplace(std::string_view(text), static_cast<int32_t>(i));
    if (!fresh) {
      fail(kKeyTokens, fmt::format("{}[{}]", kKeyTokens, i),
           fmt::format("token '{}' duplicates token {}", printable(text), it->second));
    }
  }

  const auto& a = alphabet();
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    append_utf8(ch, a.to_cp[b]);
    // Vocabularies may lack some bytes (SmolLM2 has no token for 0x04, 0x06, ..., 0xf1..0xff);
    // such bytes are dropped, as HF tokenizers' BPE without unk_token and llama.cpp do.
    t.byte_token[b] = t.model_id(ch);
  }

  t.merges.reserve(v.merges.size() * 2);
  for (size_t r = 0; r < v.merges.size(); ++r) {
    const std::string& m = v.merges[r];
    auto field = [&] { return fmt::format("{}[{}]", kKeyMerges, r); };
    size_t sp = m.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 == m.size() ||
        m.find(' ', sp + 1) != std::string::npos) {
      fail(kKeyMerges, field(),
           fmt::format("merge '{}' is not two tokens separated by one space", printable(m)));
    }
    std::string_view left(m.data(), sp), right(m.data() + sp + 1, m.size() - sp - 1);
    const int32_t li = t.model_id(left), ri = t.model_id(right);
    if (li < 0 || ri < 0) {
      fail(kKeyMerges, field(),
           fmt::format("merge '{}': '{}' is not a token", printable(m),
                       printable(li < 0 ? left : right)));
    }
    std::string joined = std::string(left) + std::string(right);
    const int32_t ji = t.model_id(joined);
    if (ji < 0) {
      fail(kKeyMerges, field(),
           fmt::format("merge '{}': result '{}' is not a token", printable(m), printable(joined)));
    }
    if (r > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
      fail(kKeyMerges, kKeyMerges, "too many merges");
    }
    // A repeated pair keeps its first (best) rank.
    t.merges.try_emplace(pair_key(li, ri), Merge{static_cast<int32_t>(r), ji});
  }

  auto special_id = [&](const std::optional<uint64_t>& id,
                        const char* key) -> std::optional<int32_t> {
    if (!id) return std::nullopt;
    if (*id >= n) {
      fail(key, key, fmt::format("token id {} is not below the vocabulary size {}", *id, n));
    }
    return static_cast<int32_t>(*id);
  };
  t.bos = special_id(v.bos, "tokenizer.ggml.bos_token_id");
  t.eos = special_id(v.eos, "tokenizer.ggml.eos_token_id");
  const std::optional<int32_t> unk = special_id(v.unk, "tokenizer.ggml.unknown_token_id");
  (void)special_id(v.pad, "tokenizer.ggml.padding_token_id");
  t.add_bos = v.add_bos;
  if (v.suffix) {
    t.appended = special_id(v.suffix, "post_processor");
    t.appended_source = "tokenizer.json post_processor";
  } else if (v.add_eos && t.eos) {
    t.appended = t.eos;
    t.appended_source = "tokenizer.ggml.add_eos_token";
  }

  if (is_spm) {
    t.spm.emplace(t.tokens, t.types, t.by_text, std::move(scores), unk, v.add_space_prefix);
  } else {
    try {
      t.pre.emplace(pre_splits);
    } catch (const Error& e) {  // a regex PCRE2 refuses (only a tokenizer.json can bring one)
      fail(kKeyPre, kKeyPre, e.what());
    }
  }
  if (hf) {
    t.byte_level = v.byte_level;
    t.nfc = v.nfc;
    t.replace_space = v.replace_space;
    t.prepend_space = v.add_space_prefix;
    t.byte_fallback = v.byte_fallback;
    t.fuse_unk = v.fuse_unk;
    t.ignore_merges = v.ignore_merges;
    t.bpe_unk = unk;
    t.strip_leading_spaces = v.strip_leading_spaces;
    t.metaspace = v.metaspace;
    t.metaspace_prepend = v.metaspace_prepend;
    t.fallback_token.fill(-1);
    for (int b = 0; b < 256; ++b) {
      t.fallback_token[b] = t.model_id(fmt::format("<0x{:02X}>", b));
    }
  }

  t.eog.assign(n, false);
  if (t.eos) t.eog[*t.eos] = true;
  for (size_t i = 0; i < n; ++i) {
    const std::string& text = t.tokens[i];
    if (text.empty() || (t.types[i] != kTypeControl && t.types[i] != kTypeUserDefined)) continue;
    const auto id = static_cast<int32_t>(i);
    if (is_spm) {
      // SentencePiece matches user-defined pieces after spaces became U+2581 (GGUF converters
      // store Gemma's "▁▁" runs as plain spaces), so the match text is normalized like the input.
      std::string match = t.spm->normalize(text);
      if (t.spm->add_space_prefix()) match.erase(0, tokenizer_detail::kSpmSpace.size());
      t.norm_specials.add(id, std::move(match));
    } else if (hf && !v.normalized.empty() && v.normalized[i]) {
      // HF matches the normalized content, and decodes it too (id_to_token gives that form).
      std::string match = t.normalize(text);
      t.pieces[i] = hf_piece(match);
      t.norm_specials.add(id, std::move(match));
    } else {
      t.raw_specials.add(id, text);
    }
    if (t.types[i] == kTypeControl && (text == "<|im_end|>" || text == "<end_of_turn>" ||
                                       text == "<|eot_id|>" || text == "<|endoftext|>")) {
      t.eog[i] = true;
    }
  }
  t.raw_specials.finish();
  t.norm_specials.finish();
}

}  // namespace flashnorm
