// The byte alphabet of byte-level BPE vocabularies (GPT-2, Llama 3, Qwen, SmolLM2): every byte as
// one printable code point, so that token texts are valid UTF-8 (internal).
// Source: GPT-2 encoder.py bytes_to_unicode(); HF tokenizers ByteLevel decoder.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace flashnorm::tokenizer_detail {

// GPT-2 bytes_to_unicode(): printable bytes (0x21..0x7e, 0xa1..0xac, 0xae..0xff) stand for
// themselves; the other 68 bytes map, in increasing order, to U+0100, U+0101, ...
struct ByteAlphabet {
  std::array<char32_t, 256> to_cp{};
  std::array<int16_t, 256 + 68> from_cp{};  // code point -> byte, -1 if not in the alphabet
  ByteAlphabet() {
    from_cp.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      to_cp[b] = printable ? static_cast<char32_t>(b) : next++;
      from_cp[to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};
// The one alphabet (built once).
const ByteAlphabet& alphabet();

// Token text (byte alphabet) -> bytes. Code points outside the alphabet, and invalid UTF-8, are
// kept as they are (as HF's ByteLevel decoder does).
std::string alphabet_to_bytes(std::string_view text);

}  // namespace flashnorm::tokenizer_detail
