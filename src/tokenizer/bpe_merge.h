// Internal: the data of the BPE merge loop (merge table entries, symbols, candidate merges).
// The loop itself is Tokenizer::Impl::bpe (bpe_merge.cpp).
#pragma once

#include <cstdint>

namespace flashnorm::tokenizer_detail {

// Key of the merge table: the ids of a pair's left and right token.
inline uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// A merge table entry: its rank (position in the merge list, lower merges first) and the token the
// pair becomes.
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
  int32_t result;
};
struct CandidateAfter {  // max-heap comparator giving the lowest rank, then the leftmost pair
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.rank != b.rank ? a.rank > b.rank : a.left > b.left;
  }
};

}  // namespace flashnorm::tokenizer_detail
