// Internal: added-token matching and the split of a text at added (special) tokens.
// Control / user-defined tokens are found verbatim, leftmost and longest first. Used by Tokenizer
// (tokenizer.cpp). Sources: HF tokenizers added_vocabulary.rs (leftmost-longest split),
// sentencepiece user-defined symbols (behaviour references only, no code taken).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace flashnorm::tokenizer_detail {

// Tokens matched verbatim in a text: one-byte tokens by their byte, longer ones by their first two
// bytes, longest first (leftmost-longest, as HF's added-token splitter and sentencepiece's
// user-defined symbols).
class SpecialTable {
 public:
  SpecialTable() { single_.fill(-1); }
  void add(int32_t id, std::string match) {
    if (match.empty()) return;
    if (match.size() == 1) {
      int32_t& slot = single_[static_cast<unsigned char>(match[0])];
      if (slot < 0) slot = id;
    } else {
      multi_[key(match, 0)].push_back({id, std::move(match)});
    }
  }
  // Longest first; call once after the last add().
  void finish() {
    for (auto& [k, list] : multi_) {
      std::stable_sort(list.begin(), list.end(), [](const Entry& x, const Entry& y) {
        return x.text.size() > y.text.size();
      });
    }
  }
  // Id of the longest token at text[i] that `allowed(id)`, or -1; `len` gets its length in bytes.
  template <typename Allowed>
  int32_t match(std::string_view text, size_t i, Allowed&& allowed, size_t& len) const {
    if (i + 1 < text.size() && !multi_.empty()) {
      auto it = multi_.find(key(text, i));
      if (it != multi_.end()) {
        for (const Entry& s : it->second) {
          if (allowed(s.id) && text.compare(i, s.text.size(), s.text) == 0) {
            len = s.text.size();
            return s.id;
          }
        }
      }
    }
    int32_t id = single_[static_cast<unsigned char>(text[i])];
    len = 1;
    return id >= 0 && allowed(id) ? id : -1;
  }

 private:
  struct Entry {
    int32_t id;
    std::string text;
  };
  static uint16_t key(std::string_view s, size_t i) {
    return static_cast<uint16_t>((static_cast<unsigned char>(s[i]) << 8) |
                                 static_cast<unsigned char>(s[i + 1]));
  }
  std::array<int32_t, 256> single_{};
  std::unordered_map<uint16_t, std::vector<Entry>> multi_;
};

// Splits `text` at the tokens of `table` that `allowed(id)`: calls on_plain(stretch) for every
// stretch between them (an empty one too) and appends each token's id to `out`, in text order.
template <typename Allowed, typename OnPlain>
void split_at_specials(const SpecialTable& table, std::string_view text, Allowed&& allowed,
                       std::vector<int32_t>& out, OnPlain&& on_plain) {
  size_t plain_begin = 0;
  size_t i = 0;
  while (i < text.size()) {
    size_t len = 0;
    const int32_t hit = table.match(text, i, allowed, len);
    if (hit < 0) {
      ++i;
      continue;
    }
    on_plain(text.substr(plain_begin, i - plain_begin));
    out.push_back(hit);
    i += len;
    plain_begin = i;
  }
  on_plain(text.substr(plain_begin));
}

}  // namespace flashnorm::tokenizer_detail
