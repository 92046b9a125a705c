// Byte-level BPE tokenizer built from a GGUF vocabulary; see
// include/flashnorm/tokenizer/tokenizer.h. Sources: GGUF spec "tokenizer.ggml.*" keys; GPT-2
// encoder.py bytes_to_unicode(); HF tokenizers BPE model (merge order: lowest rank first, ties to
// the leftmost pair) and added-token splitting (leftmost-longest); llama.cpp llama-vocab.cpp token
// types and end-of-generation set (behaviour references only, no code taken).
#include "flashnorm/tokenizer/tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <unordered_map>
#include <utility>

#include "byte_alphabet.h"
#include "flashnorm/error.h"
#include "flashnorm/io/gguf.h"
#include "pretokenizer.h"
#include "spm.h"
#include "utf8.h"

namespace flashnorm {
namespace {

using tokenizer_detail::alphabet;
using tokenizer_detail::alphabet_to_bytes;
using tokenizer_detail::append_utf8;
using tokenizer_detail::decode_utf8;

constexpr int64_t kTypeMin = 0;  // llama.cpp LLAMA_TOKEN_TYPE_UNDEFINED
constexpr int64_t kTypeControl = 3;
constexpr int64_t kTypeUserDefined = 4;
constexpr int64_t kTypeMax = 6;  // LLAMA_TOKEN_TYPE_BYTE

constexpr const char* kKeyTokens = "tokenizer.ggml.tokens";
constexpr const char* kKeyTypes = "tokenizer.ggml.token_type";
constexpr const char* kKeyMerges = "tokenizer.ggml.merges";
constexpr const char* kKeyModel = "tokenizer.ggml.model";
constexpr const char* kKeyPre = "tokenizer.ggml.pre";
constexpr const char* kKeyScores = "tokenizer.ggml.scores";

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

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

struct Merge {
  int32_t rank;
  int32_t result;
};

// One BPE symbol in a word being merged (a doubly linked list over a vector).
struct Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
};

// A candidate merge of symbols `left` and its current right neighbour `right`.
struct Candidate {
  int32_t rank;
  int32_t left;
  int32_t right;
  int32_t left_id;
  int32_t right_id;
  int32_t result;
};
struct CandidateAfter {  // max-heap comparator giving the lowest rank, then the leftmost pair
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.rank != b.rank ? a.rank > b.rank : a.left > b.left;
  }
};

}  // namespace

struct Tokenizer::Impl {
  std::string source;
  std::vector<std::string> tokens;  // as stored (byte alphabet)
  std::vector<int8_t> types;
  std::vector<std::string> pieces;                        // bytes each token decodes to
  std::unordered_map<std::string_view, int32_t> by_text;  // views into `tokens`
  std::array<int32_t, 256> byte_token{};
  std::unordered_map<uint64_t, Merge> merges;
  // Tokens matched verbatim in the text (control and user-defined), as matched (for SentencePiece
  // vocabularies with spaces written as U+2581, since matching runs on the normalized text):
  // one-byte tokens by their byte, longer ones by their first two bytes, longest first.
  struct Special {
    int32_t id;
    std::string text;
  };
  std::array<int32_t, 256> special_single{};
  std::unordered_map<uint16_t, std::vector<Special>> special_multi;
  std::optional<int32_t> bos, eos;
  bool add_bos = false;
  std::vector<bool> eog;
  std::optional<tokenizer_detail::PreTokenizer> pre;  // gpt2 model
  std::optional<tokenizer_detail::SpmModel> spm;      // llama model (SentencePiece BPE)

  // Validates `v` and fills this object. offset_of(key) gives the byte offset that errors name for
  // a key (0 when unknown).
  void build(TokenizerVocab& v, const std::function<uint64_t(std::string_view)>& offset_of);
  void bpe(std::string_view word, std::vector<int32_t>& out, std::vector<Symbol>& syms,
           std::vector<Candidate>& heap) const;
  void encode_plain(std::string_view text, std::vector<int32_t>& out) const;
  // Id of the control / user-defined token at text[i] (longest first), or -1; `len` gets the
  // number of bytes it covers.
  int32_t match_special(std::string_view text, size_t i, bool parse_special, size_t& len) const;
};

void Tokenizer::Impl::bpe(std::string_view word, std::vector<int32_t>& out,
                          std::vector<Symbol>& syms, std::vector<Candidate>& heap) const {
  // Initial symbols: one per byte that has a token (bytes without one are skipped, so their
  // neighbours become adjacent, as in HF's BPE word construction).
  syms.clear();
  for (char ch : word) {
    int32_t id = byte_token[static_cast<unsigned char>(ch)];
    if (id >= 0) syms.push_back({id, static_cast<int32_t>(syms.size()) - 1, -1});
  }
  const auto n = static_cast<int32_t>(syms.size());
  if (n == 0) return;
  for (int32_t i = 0; i + 1 < n; ++i) syms[i].next = i + 1;
  heap.clear();
  auto push = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    auto it = merges.find(pair_key(syms[l].id, syms[r].id));
    if (it == merges.end()) return;
    heap.push_back({it->second.rank, l, r, syms[l].id, syms[r].id, it->second.result});
    std::push_heap(heap.begin(), heap.end(), CandidateAfter{});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i, i + 1);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), CandidateAfter{});
    Candidate c = heap.back();
    heap.pop_back();
    Symbol& l = syms[c.left];
    // Stale if either side was merged since: a merged symbol changes id (ids of merge results are
    // longer than their parts), and a consumed right symbol is no longer l's neighbour.
    if (l.id != c.left_id || l.next != c.right || syms[c.right].id != c.right_id) continue;
    const Symbol& r = syms[c.right];
    l.id = c.result;
    l.next = r.next;
    if (r.next >= 0) syms[r.next].prev = c.left;
    syms[c.right].id = -1;
    push(l.prev, c.left);
    push(c.left, l.next);
  }
  for (int32_t i = 0; i >= 0; i = syms[i].next) out.push_back(syms[i].id);
}

void Tokenizer::Impl::encode_plain(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  if (spm) {
    spm->encode(text, out);
    return;
  }
  std::vector<std::string_view> words;
  pre->split(text, words);
  std::vector<Symbol> syms;
  std::vector<Candidate> heap;
  for (std::string_view w : words) bpe(w, out, syms, heap);
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_vocab(TokenizerVocab vocab) {
  auto impl = std::make_unique<Impl>();
  impl->build(vocab, [](std::string_view) -> uint64_t { return 0; });
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_gguf(const io::GgufFile& f) {
  auto offset_of = [&f](std::string_view key) -> uint64_t {
    const io::GgufKv* kv = f.find(key);
    return kv != nullptr ? kv->offset : 0;
  };
  TokenizerVocab v;
  v.source = f.name();
  v.model = f.get_string(kKeyModel);
  v.pre = f.get_string_opt(kKeyPre).value_or("default");
  v.tokens = f.string_array(kKeyTokens);
  if (f.find(kKeyTypes) != nullptr) {
    v.types = f.int_array(kKeyTypes);
  } else {
    v.types.assign(v.tokens.size(), 1);  // absent: every token is normal (as llama.cpp)
  }
  if (v.model == "gpt2") v.merges = f.string_array(kKeyMerges);
  if (v.model == "llama") {
    v.scores = f.float_array(kKeyScores);
    v.add_space_prefix = f.get_bool_or("tokenizer.ggml.add_space_prefix", true);
  }
  v.bos = f.get_uint_opt("tokenizer.ggml.bos_token_id");
  v.eos = f.get_uint_opt("tokenizer.ggml.eos_token_id");
  v.unk = f.get_uint_opt("tokenizer.ggml.unknown_token_id");
  v.pad = f.get_uint_opt("tokenizer.ggml.padding_token_id");
  v.add_bos = f.get_bool_or("tokenizer.ggml.add_bos_token", false);
  auto impl = std::make_unique<Impl>();
  impl->build(v, offset_of);
  return Tokenizer(std::move(impl));
}

void Tokenizer::Impl::build(TokenizerVocab& v,
                            const std::function<uint64_t(std::string_view)>& offset_of) {
  Impl& t = *this;
  const std::string& src = v.source;
  auto fail = [&](std::string_view key, std::string_view field, const std::string& what) {
    throw FormatError(src, field, offset_of(key), what);
  };

  const bool is_spm = v.model == "llama";
  if (v.model != "gpt2" && !is_spm) {
    fail(kKeyModel, kKeyModel,
         fmt::format("unsupported tokenizer model '{}' (supported: gpt2, llama)",
                     printable(v.model)));
  }
  bool split_digits = false;
  if (is_spm) {
    // SentencePiece vocabularies have no pre-tokenizer; llama.cpp ignores the name ("default").
  } else if (v.pre == "smollm") {
    split_digits = true;
  } else if (v.pre == "gpt-2" || v.pre == "gpt2") {
    split_digits = false;
  } else {
    fail(
        kKeyPre, kKeyPre,
        fmt::format("unsupported pre-tokenizer '{}' (supported: smollm, gpt-2)", printable(v.pre)));
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
    if (is_spm) {
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
    auto it = t.by_text.find(ch);
    // Vocabularies may lack some bytes (SmolLM2 has no token for 0x04, 0x06, ..., 0xf1..0xff);
    // such bytes are dropped, as HF tokenizers' BPE without unk_token and llama.cpp do.
    t.byte_token[b] = it == t.by_text.end() ? -1 : it->second;
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
    auto li = t.by_text.find(left);
    auto ri = t.by_text.find(right);
    if (li == t.by_text.end() || ri == t.by_text.end()) {
      fail(kKeyMerges, field(),
           fmt::format("merge '{}': '{}' is not a token", printable(m),
                       printable(li == t.by_text.end() ? left : right)));
    }
    std::string joined = std::string(left) + std::string(right);
    auto ji = t.by_text.find(joined);
    if (ji == t.by_text.end()) {
      fail(kKeyMerges, field(),
           fmt::format("merge '{}': result '{}' is not a token", printable(m), printable(joined)));
    }
    if (r > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
      fail(kKeyMerges, kKeyMerges, "too many merges");
    }
    // A repeated pair keeps its first (best) rank.
    t.merges.try_emplace(pair_key(li->second, ri->second),
                         Merge{static_cast<int32_t>(r), ji->second});
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

  if (is_spm) {
    t.spm.emplace(t.tokens, t.types, t.by_text, std::move(scores), unk, v.add_space_prefix);
  } else {
    t.pre.emplace(split_digits);
  }

  t.eog.assign(n, false);
  if (t.eos) t.eog[*t.eos] = true;
  t.special_single.fill(-1);
  for (size_t i = 0; i < n; ++i) {
    const std::string& text = t.tokens[i];
    if (text.empty() || (t.types[i] != kTypeControl && t.types[i] != kTypeUserDefined)) continue;
    // SentencePiece matches user-defined pieces after spaces became U+2581 (GGUF converters store
    // Gemma's "▁▁" runs as plain spaces), so the match text is normalized like the input.
    std::string match = is_spm ? t.spm->normalize(text) : text;
    if (is_spm && t.spm->add_space_prefix()) match.erase(0, tokenizer_detail::kSpmSpace.size());
    const auto id = static_cast<int32_t>(i);
    if (match.size() == 1) {
      int32_t& slot = t.special_single[static_cast<unsigned char>(match[0])];
      if (slot < 0) slot = id;
    } else {
      const auto key = static_cast<uint16_t>((static_cast<unsigned char>(match[0]) << 8) |
                                             static_cast<unsigned char>(match[1]));
      t.special_multi[key].push_back({id, std::move(match)});
    }
    if (t.types[i] == kTypeControl && (text == "<|im_end|>" || text == "<end_of_turn>" ||
                                       text == "<|eot_id|>" || text == "<|endoftext|>")) {
      t.eog[i] = true;
    }
  }
  for (auto& [key, list] : t.special_multi) {
    std::stable_sort(list.begin(), list.end(), [](const Special& x, const Special& y) {
      return x.text.size() > y.text.size();
    });
  }
}

int32_t Tokenizer::Impl::match_special(std::string_view text, size_t i, bool parse_special,
                                       size_t& len) const {
  auto allowed = [&](int32_t id) { return parse_special || types[id] == kTypeUserDefined; };
  if (i + 1 < text.size() && !special_multi.empty()) {
    const auto key = static_cast<uint16_t>((static_cast<unsigned char>(text[i]) << 8) |
                                           static_cast<unsigned char>(text[i + 1]));
    auto it = special_multi.find(key);
    if (it != special_multi.end()) {
      for (const Special& s : it->second) {  // longest first
        if (allowed(s.id) && text.compare(i, s.text.size(), s.text) == 0) {
          len = s.text.size();
          return s.id;
        }
      }
    }
  }
  int32_t id = special_single[static_cast<unsigned char>(text[i])];
  len = 1;
  return id >= 0 && allowed(id) ? id : -1;
}

std::vector<int32_t> Tokenizer::encode(std::string_view raw, bool parse_special) const {
  const Impl& t = *impl_;
  std::string normalized;
  std::string_view text = raw;
  if (t.spm) {  // SentencePiece: specials and pieces are matched in the normalized text
    normalized = t.spm->normalize(raw);
    text = normalized;
  }
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  size_t plain_begin = 0;
  size_t i = 0;
  while (i < text.size()) {
    size_t len = 0;
    const int32_t hit = t.match_special(text, i, parse_special, len);
    if (hit < 0) {
      ++i;
      continue;
    }
    t.encode_plain(text.substr(plain_begin, i - plain_begin), out);
    out.push_back(hit);
    i += len;
    plain_begin = i;
  }
  t.encode_plain(text.substr(plain_begin), out);
  return out;
}

std::string Tokenizer::piece(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->pieces.size()) {
    throw Error(fmt::format("{}: token id {} is outside the vocabulary of {} tokens", impl_->source,
                            id, impl_->pieces.size()));
  }
  return impl_->pieces[static_cast<size_t>(id)];
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  // SentencePiece with a dummy prefix: the first visible piece loses its leading space.
  bool strip_space = impl_->spm && impl_->spm->add_space_prefix();
  for (int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= impl_->pieces.size()) {
      throw Error(fmt::format("{}: token id {} is outside the vocabulary of {} tokens",
                              impl_->source, id, impl_->pieces.size()));
    }
    const std::string& p = impl_->pieces[static_cast<size_t>(id)];
    if (strip_space && impl_->types[static_cast<size_t>(id)] != kTypeControl && !p.empty()) {
      strip_space = false;
      if (p[0] == ' ') {
        out.append(p, 1);
        continue;
      }
    }
    out += p;
  }
  return out;
}

size_t Tokenizer::vocab_size() const { return impl_->tokens.size(); }
std::optional<int32_t> Tokenizer::bos() const { return impl_->bos; }
std::optional<int32_t> Tokenizer::eos() const { return impl_->eos; }
bool Tokenizer::add_bos() const { return impl_->add_bos; }

bool Tokenizer::is_eog(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->eog.size() &&
         impl_->eog[static_cast<size_t>(id)];
}

std::optional<int32_t> Tokenizer::token_id(std::string_view text) const {
  auto it = impl_->by_text.find(text);
  if (it == impl_->by_text.end()) return std::nullopt;
  return it->second;
}

}  // namespace flashnorm
