#include "flashnorm/tokenizer/utf8_text.h"

#include <fmt/format.h>

#include "flashnorm/error.h"

namespace flashnorm {

size_t complete_utf8_prefix(const std::string& s) {
  // Walk back over at most 3 continuation bytes to the last lead byte; keep it only if its
  // sequence is complete.
  size_t n = s.size();
  size_t i = n;
  int cont = 0;
  while (i > 0 && cont < 4 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) {
    --i;
    ++cont;
  }
  if (i == 0) return cont >= 4 ? n : 0;
  const unsigned char lead = static_cast<unsigned char>(s[i - 1]);
  const int need = lead >= 0xF0 ? 3 : lead >= 0xE0 ? 2 : lead >= 0xC0 ? 1 : 0;
  if (need == 0) return n;  // ASCII or stray continuation bytes: emit as is
  return cont >= need ? n : i - 1;
}

std::optional<size_t> first_invalid_utf8(std::string_view s) {
  const auto* b = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = b[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    int len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // overlong
      if (c == 0xED) hi = 0x9F;  // surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;  // overlong
      if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
    } else {
      return i;  // 0x80-0xC1 (stray continuation, overlong lead) or 0xF5-0xFF
    }
    if (i + len > n) return i;  // truncated
    if (b[i + 1] < lo || b[i + 1] > hi) return i;
    for (int k = 2; k < len; ++k) {
      if ((b[i + k] & 0xC0) != 0x80) return i;
    }
    i += len;
  }
  return std::nullopt;
}

void require_utf8(std::string_view s, const std::string& what) {
  if (auto at = first_invalid_utf8(s)) {
    throw Error(fmt::format(
        "{} is not valid UTF-8: the sequence at byte offset {} (byte 0x{:02X}) is ill-formed", what,
        *at, static_cast<unsigned char>(s[*at])));
  }
}

}  // namespace flashnorm
