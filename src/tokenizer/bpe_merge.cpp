// The BPE merge loop of Tokenizer: a word's initial symbols and their merge by rank.
// Models gpt2 and bpe; initial symbols are bytes, or characters with byte fallback and unk.
// Sources: HF tokenizers BPE model (merge order: lowest rank first, ties to the leftmost pair;
// Word::merge_all's staleness test; BPE::merge_word's unk handling); behaviour references only, no
// code taken.
#include <algorithm>
#include <string>

#include "byte_alphabet.h"
#include "tokenizer_impl.h"
#include "utf8.h"

namespace flashnorm {
namespace {

using tokenizer_detail::alphabet;
using tokenizer_detail::append_utf8;
using tokenizer_detail::CandidateAfter;
using tokenizer_detail::decode_utf8;
using tokenizer_detail::pair_key;

}  // namespace

void Tokenizer::Impl::initial_symbols(std::string_view word, std::vector<Symbol>& syms) const {
  syms.clear();
  auto add = [&](int32_t id) { syms.push_back({id, static_cast<int32_t>(syms.size()) - 1, -1}); };
  // A run of symbols without a token: one unk (fuse_unk) or one unk each, placed where the run
  // ends (HF BPE::merge_word); nothing without an unk token.
  bool unk_open = false;
  auto flush_unk = [&] {
    if (unk_open) add(*bpe_unk);
    unk_open = false;
  };
  auto missing = [&] {
    if (!bpe_unk) return;
    if (unk_open && !fuse_unk) add(*bpe_unk);
    unk_open = true;
  };
  if (byte_level) {
    // One symbol per byte that has a token (bytes without one are skipped, so their neighbours
    // become adjacent, as in HF's BPE word construction).
    for (char ch : word) {
      int32_t id = byte_token[static_cast<unsigned char>(ch)];
      if (id < 0) {
        missing();
        continue;
      }
      flush_unk();
      add(id);
    }
  } else {
    // One symbol per character (each byte of an invalid sequence counts as one).
    for (size_t i = 0; i < word.size();) {
      char32_t cp = 0;
      size_t len = decode_utf8(word, i, cp);
      if (len == 0) len = 1;
      const std::string_view ch = word.substr(i, len);
      i += len;
      if (const int32_t id = model_id(ch); id >= 0) {
        flush_unk();
        add(id);
        continue;
      }
      bool all = byte_fallback;
      for (size_t k = 0; all && k < ch.size(); ++k) {
        all = fallback_token[static_cast<unsigned char>(ch[k])] >= 0;
      }
      if (all) {  // byte fallback does not end an unk run (as HF)
        for (char c : ch) add(fallback_token[static_cast<unsigned char>(c)]);
        continue;
      }
      missing();
    }
  }
  flush_unk();
  for (size_t i = 0; i + 1 < syms.size(); ++i) syms[i].next = static_cast<int32_t>(i + 1);
}

void Tokenizer::Impl::bpe(std::string_view word, std::vector<int32_t>& out,
                          std::vector<Symbol>& syms, std::vector<Candidate>& heap) const {
  if (ignore_merges) {  // a word that is a token is that token (HF BPE ignore_merges)
    std::string mapped;
    if (byte_level) {
      for (char ch : word) append_utf8(mapped, alphabet().to_cp[static_cast<unsigned char>(ch)]);
    }
    if (const int32_t id = model_id(byte_level ? std::string_view(mapped) : word); id >= 0) {
      out.push_back(id);
      return;
    }
  }
  initial_symbols(word, syms);
  const auto n = static_cast<int32_t>(syms.size());
  if (n == 0) return;
  heap.clear();
  auto push = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    auto it = merges.find(pair_key(syms[l].id, syms[r].id));
    if (it == merges.end()) return;
    heap.push_back({it->second.rank, l, r, it->second.result});
    std::push_heap(heap.begin(), heap.end(), CandidateAfter{});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i, i + 1);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), CandidateAfter{});
    Candidate c = heap.back();
    heap.pop_back();
    Symbol& l = syms[c.left];
    // An entry is stale when its left symbol was consumed, has no right neighbour any more, or its
    // pair with the current neighbour no longer merges into the same token (HF Word::merge_all's
    // test, which accepts a changed pair with the same result).
    if (l.id < 0 || l.next < 0) continue;
    auto cur = merges.find(pair_key(l.id, syms[l.next].id));
    if (cur == merges.end() || cur->second.result != c.result) continue;
    const int32_t right = l.next;
    const Symbol& r = syms[right];
    l.id = c.result;
    l.next = r.next;
    if (r.next >= 0) syms[r.next].prev = c.left;
    syms[right].id = -1;
    push(l.prev, c.left);
    push(c.left, l.next);
  }
  for (int32_t i = 0; i >= 0; i = syms[i].next) out.push_back(syms[i].id);
}

}  // namespace flashnorm
