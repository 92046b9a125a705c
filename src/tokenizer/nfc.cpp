// NFC through ICU; see nfc.h.
#include "nfc.h"

#include <fmt/format.h>
#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>

#include "flashnorm/error.h"
#include "utf8.h"

namespace flashnorm::tokenizer_detail {
namespace {

const icu::Normalizer2& nfc_instance() {
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* n = icu::Normalizer2::getNFCInstance(err);
  if (U_FAILURE(err) || n == nullptr) {
    throw Error(fmt::format("tokenizer: ICU has no NFC data: {}", u_errorName(err)));
  }
  return *n;
}

void append_nfc(const icu::Normalizer2& n, std::string_view run, std::string& out) {
  if (run.empty()) return;
  UErrorCode err = U_ZERO_ERROR;
  const icu::StringPiece piece(run.data(), static_cast<int32_t>(run.size()));
  if (n.isNormalizedUTF8(piece, err) && U_SUCCESS(err)) {
    out.append(run);
    return;
  }
  err = U_ZERO_ERROR;
  icu::StringByteSink<std::string> sink(&out);
  n.normalizeUTF8(0, piece, sink, nullptr, err);
  if (U_FAILURE(err)) throw Error(fmt::format("tokenizer: ICU NFC failed: {}", u_errorName(err)));
}

}  // namespace

std::string nfc(std::string_view text) {
  const icu::Normalizer2& n = nfc_instance();
  std::string out;
  out.reserve(text.size());
  size_t run = 0;  // start of the current valid run
  for (size_t i = 0; i < text.size();) {
    char32_t cp;
    size_t len = decode_utf8(text, i, cp);
    if (len > 0) {
      i += len;
      continue;
    }
    append_nfc(n, text.substr(run, i - run), out);
    out.push_back(text[i]);
    run = ++i;
  }
  append_nfc(n, text.substr(run), out);
  return out;
}

}  // namespace flashnorm::tokenizer_detail
