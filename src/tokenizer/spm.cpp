// SentencePiece BPE encoding; see spm.h.
#include "spm.h"

#include <algorithm>
#include <utility>

#include "utf8.h"

namespace flashnorm::tokenizer_detail {
namespace {

// Length (1..4) of the valid, shortest-form UTF-8 sequence of a scalar value at s[i], or 0.
size_t utf8_len(std::string_view s, size_t i) {
  char32_t cp;
  return decode_utf8(s, i, cp);
}

bool mergeable(int8_t type) {
  // sentencepiece's pieces_ map: NORMAL, USER_DEFINED, UNUSED (llama.cpp's 0 "undefined" is
  // treated as normal). CONTROL, UNKNOWN and BYTE pieces never result from a merge.
  return type == 0 || type == 1 || type == 4 || type == kSpmTypeUnused;
}

// One symbol of the text being merged: bytes [begin, begin + len) of the normalized text, in a
// doubly linked list; len 0 once merged into its left neighbour.
struct Symbol {
  uint32_t begin;
  uint32_t len;
  int32_t prev;
  int32_t next;
  bool frozen;
};

struct Pair {
  float score;
  int32_t left;
  int32_t right;
  uint32_t size;  // bytes of the merged piece; a mismatch later means the pair is stale
};
struct PairAfter {  // max-heap order: highest score first, then the leftmost pair
  bool operator()(const Pair& a, const Pair& b) const {
    return a.score != b.score ? a.score < b.score : a.left > b.left;
  }
};

}  // namespace

int spm_byte_value(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  int v = 0;
  for (char c : text.substr(3, 2)) {
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'A' && c <= 'F') {
      d = c - 'A' + 10;
    } else {
      return -1;
    }
    v = v * 16 + d;
  }
  return v;
}

std::string spm_piece_bytes(std::string_view text, int8_t type) {
  if (type == kSpmTypeByte) {
    int b = spm_byte_value(text);
    if (b >= 0) return std::string(1, static_cast<char>(b));
  }
  if (type == 3) return std::string(text);
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    if (text.compare(i, kSpmSpace.size(), kSpmSpace) == 0) {
      out.push_back(' ');
      i += kSpmSpace.size();
    } else {
      out.push_back(text[i++]);
    }
  }
  return out;
}

SpmModel::SpmModel(const std::vector<std::string>& tokens, const std::vector<int8_t>& types,
                   const std::unordered_map<std::string_view, int32_t>& by_text,
                   std::vector<float> scores, std::optional<int32_t> unk, bool add_space_prefix)
    : tokens_(tokens),
      types_(types),
      by_text_(by_text),
      scores_(std::move(scores)),
      unk_(unk),
      add_space_prefix_(add_space_prefix) {
  byte_token_.fill(-1);
  for (size_t i = 0; i < tokens_.size(); ++i) {
    if (types_[i] != kSpmTypeByte) continue;
    int b = spm_byte_value(tokens_[i]);
    if (b >= 0 && byte_token_[b] < 0) byte_token_[b] = static_cast<int32_t>(i);
  }
}

std::string spm_normalize(std::string_view text, bool replace_space, bool prepend) {
  std::string out;
  out.reserve(text.size() + text.size() / 4 + 3);
  if (prepend && !text.empty()) out += kSpmSpace;
  for (char c : text) {
    if (c == ' ' && replace_space) {
      out += kSpmSpace;
    } else {
      out.push_back(c);
    }
  }
  return out;
}

void SpmModel::encode(std::string_view norm, std::vector<int32_t>& out) const {
  if (norm.empty()) return;
  std::vector<Symbol> syms;
  syms.reserve(norm.size());
  for (size_t i = 0; i < norm.size();) {
    size_t len = utf8_len(norm, i);
    const bool bad = len == 0;
    if (bad) len = 1;
    const auto idx = static_cast<int32_t>(syms.size());
    syms.push_back({static_cast<uint32_t>(i), static_cast<uint32_t>(len), idx - 1, idx + 1, bad});
    i += len;
  }
  syms.back().next = -1;

  // Pieces of UNUSED tokens formed by a merge -> the two pieces that formed them (sentencepiece
  // records the pair when it is queued, the last one queued wins).
  std::unordered_map<std::string_view, std::pair<std::string_view, std::string_view>> rev_merge;
  std::vector<Pair> heap;
  auto view = [&](const Symbol& s) { return norm.substr(s.begin, s.len); };
  auto push = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0 || syms[l].frozen || syms[r].frozen) return;
    std::string_view joined = norm.substr(syms[l].begin, syms[l].len + syms[r].len);
    auto it = by_text_.find(joined);
    if (it == by_text_.end() || !mergeable(types_[it->second])) return;
    heap.push_back({scores_[it->second], l, r, static_cast<uint32_t>(joined.size())});
    std::push_heap(heap.begin(), heap.end(), PairAfter{});
    if (types_[it->second] == kSpmTypeUnused) {
      rev_merge[joined] = {view(syms[l]), view(syms[r])};
    }
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(syms.size()); ++i) push(i, i + 1);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), PairAfter{});
    const Pair p = heap.back();
    heap.pop_back();
    Symbol& l = syms[p.left];
    Symbol& r = syms[p.right];
    if (l.len == 0 || r.len == 0 || l.len + r.len != p.size) continue;  // stale
    l.len += r.len;
    l.next = r.next;
    if (r.next >= 0) syms[r.next].prev = p.left;
    r.len = 0;
    push(l.prev, p.left);
    push(p.left, l.next);
  }

  // An UNUSED piece is replaced by the two pieces that formed it, recursively; with an explicit
  // stack (a hostile vocabulary can chain thousands of such merges: no deep call recursion). Each
  // replacement is strictly shorter, so this ends.
  std::vector<std::string_view> stack;
  auto emit = [&](std::string_view first) {
    stack.push_back(first);
    while (!stack.empty()) {
      const std::string_view piece = stack.back();
      stack.pop_back();
      auto it = by_text_.find(piece);
      if (it != by_text_.end()) {
        if (types_[it->second] == kSpmTypeUnused) {
          auto rm = rev_merge.find(piece);
          if (rm != rev_merge.end()) {
            stack.push_back(rm->second.second);  // popped after the first half
            stack.push_back(rm->second.first);
            continue;
          }
        }
        out.push_back(it->second);
        continue;
      }
      for (char c : piece) {  // byte fallback
        int32_t id = byte_token_[static_cast<unsigned char>(c)];
        if (id >= 0) {
          out.push_back(id);
        } else if (unk_) {
          out.push_back(*unk_);
        }
      }
    }
  };
  for (int32_t i = 0; i >= 0; i = syms[i].next) emit(view(syms[i]));
}

}  // namespace flashnorm::tokenizer_detail
