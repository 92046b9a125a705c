// The byte alphabet of byte-level BPE vocabularies: src/tokenizer/byte_alphabet.h.
#include "byte_alphabet.h"

#include "utf8.h"

namespace flashnorm::tokenizer_detail {

const ByteAlphabet& alphabet() {
  static const ByteAlphabet a;
  return a;
}

std::string alphabet_to_bytes(std::string_view text) {
  const auto& a = alphabet();
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    char32_t cp = 0;
    size_t len = decode_utf8(text, i, cp);
    if (len == 0) {
      out.push_back(text[i]);
      ++i;
      continue;
    }
    if (cp < a.from_cp.size() && a.from_cp[cp] >= 0) {
      out.push_back(static_cast<char>(a.from_cp[cp]));
    } else {
      out.append(text.substr(i, len));
    }
    i += len;
  }
  return out;
}

}  // namespace flashnorm::tokenizer_detail
