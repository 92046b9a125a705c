// Tokenizer's public methods: encode, piece, decode and the vocabulary lookups.
// encode splits the text at added tokens, normalizes, pre-tokenizes and hands each piece to the
// model; see include/flashnorm/tokenizer/tokenizer.h. Sources: HF tokenizers added-token
// splitting (leftmost-longest), Metaspace pre-tokenizer and Strip decoder; sentencepiece's decoder
// (dummy-prefix removal); behaviour references only, no code taken.
#include "flashnorm/tokenizer/tokenizer.h"

#include <fmt/format.h>

#include <memory>
#include <utility>

#include "flashnorm/error.h"
#include "nfc.h"
#include "tokenizer_impl.h"

namespace flashnorm {
namespace {

using tokenizer_detail::kTypeControl;
using tokenizer_detail::kTypeUserDefined;
using tokenizer_detail::split_at_specials;

}  // namespace

void Tokenizer::Impl::encode_plain(std::string_view text, bool at_start,
                                   std::vector<int32_t>& out) const {
  if (text.empty()) return;
  if (spm) {
    spm->encode(text, out);
    return;
  }
  std::string meta;
  if (metaspace) {  // HF Metaspace: spaces -> "▁", then the prepend scheme
    meta = tokenizer_detail::spm_normalize(text, true, false);
    if ((metaspace_prepend == MetaspacePrepend::kAlways ||
         (metaspace_prepend == MetaspacePrepend::kFirst && at_start)) &&
        !std::string_view(meta).starts_with(tokenizer_detail::kSpmSpace)) {
      meta.insert(0, tokenizer_detail::kSpmSpace);
    }
    text = meta;
  }
  std::vector<std::string_view> words;
  pre->split(text, words);
  std::vector<Symbol> syms;
  std::vector<Candidate> heap;
  for (std::string_view w : words) bpe(w, out, syms, heap);
}

std::string Tokenizer::Impl::normalize(std::string_view text) const {
  if (spm) return spm->normalize(text);
  if (nfc)
    return tokenizer_detail::spm_normalize(tokenizer_detail::nfc(text), replace_space,
                                           prepend_space);
  return tokenizer_detail::spm_normalize(text, replace_space, prepend_space);
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special) const {
  const Impl& t = *impl_;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  // Raw specials first; each stretch between them is normalized (an empty one stays empty), then
  // split at the normalized specials; the rest goes to the model.
  auto allowed = [&](int32_t id) { return parse_special || t.types[id] == kTypeUserDefined; };
  split_at_specials(t.raw_specials, text, allowed, out, [&](std::string_view plain) {
    if (plain.empty()) return;
    const bool plain_at_start = plain.data() == text.data();
    const std::string norm = t.normalize(plain);
    split_at_specials(t.norm_specials, norm, allowed, out, [&](std::string_view rest) {
      t.encode_plain(rest, plain_at_start && rest.data() == norm.data(), out);
    });
  });
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
  // HF Strip(" ", n, 0) after Fuse: up to n leading spaces of the whole text.
  size_t cut = 0;
  while (cut < out.size() && cut < static_cast<size_t>(impl_->strip_leading_spaces) &&
         out[cut] == ' ') {
    ++cut;
  }
  out.erase(0, cut);
  return out;
}

size_t Tokenizer::vocab_size() const { return impl_->tokens.size(); }
std::optional<int32_t> Tokenizer::bos() const { return impl_->bos; }
std::optional<int32_t> Tokenizer::eos() const { return impl_->eos; }
bool Tokenizer::add_bos() const { return impl_->add_bos; }
std::optional<int32_t> Tokenizer::appended() const { return impl_->appended; }
std::string_view Tokenizer::appended_source() const { return impl_->appended_source; }

bool Tokenizer::is_eog(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->eog.size() &&
         impl_->eog[static_cast<size_t>(id)];
}

std::optional<int32_t> Tokenizer::token_id(std::string_view text) const {
  auto it = impl_->by_text.find(text);
  if (it == impl_->by_text.end()) return std::nullopt;
  return it->second;
}

void refuse_appended_token(const Tokenizer& tok, std::string_view command) {
  if (!tok.appended()) return;
  throw Error(
      fmt::format("{}: appends token {} after every text (an embedding model's tokenizer); {} "
                  "does not prompt a model with it (flashnorm embed does)",
                  tok.appended_source(), *tok.appended(), command));
}

}  // namespace flashnorm
