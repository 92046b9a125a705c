// PCRE2-based pre-tokenizer; see pretokenizer.h.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "pretokenizer.h"

#include <fmt/format.h>
#include <pcre2.h>

#include <string>

#include "flashnorm/error.h"

namespace flashnorm::tokenizer_detail {
namespace {

// GPT-2's split pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// with `\s` spelled out as the Unicode White_Space property, which is what HF tokenizers'
// Oniguruma `\s` matches (checked: U+0085, U+00A0, U+1680, U+2028, U+3000 are spaces there; U+180E,
// U+200B, U+001C are not). PCRE2's UCP `\s` differs (it has U+180E and lacks U+0085).
std::string gpt2_pattern() {
  const std::string ws = std::string(R"(\t\n\x{0B}\f\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A})") +
                         R"(\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";
  return R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^)" + ws + R"(\p{L}\p{N}]+|[)" + ws +
         "]+(?![^" + ws + "])|[" + ws + "]+";
}
constexpr const char* kDigitPattern = R"(\p{N})";

struct CodeDeleter {
  void operator()(pcre2_code* c) const { pcre2_code_free(c); }
};
struct MatchDataDeleter {
  void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};
using CodePtr = std::unique_ptr<pcre2_code, CodeDeleter>;
using MatchDataPtr = std::unique_ptr<pcre2_match_data, MatchDataDeleter>;

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  int n = pcre2_get_error_message(code, buf, sizeof(buf));
  return n < 0 ? fmt::format("PCRE2 error {}", code) : std::string(reinterpret_cast<char*>(buf));
}

CodePtr compile(const char* pattern) {
  int err = 0;
  PCRE2_SIZE err_off = 0;
  pcre2_code* c =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                    PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &err_off, nullptr);
  if (c == nullptr) {
    throw Error(
        fmt::format("tokenizer: PCRE2 cannot compile pre-tokenizer pattern at offset {}: {}",
                    err_off, pcre2_message(err)));
  }
  // JIT is an optimization only: if it is unavailable, pcre2_match interprets the pattern.
  (void)pcre2_jit_compile(c, PCRE2_JIT_COMPLETE);
  return CodePtr(c);
}

// Calls on_match(begin, end) for each match and on_gap(begin, end) for each unmatched stretch of
// `text` (only invalid UTF-8 can be unmatched by our patterns), in order, covering all of `text`.
template <typename OnMatch, typename OnGap>
void scan(const pcre2_code* code, pcre2_match_data* md, std::string_view text, OnMatch&& on_match,
          OnGap&& on_gap) {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const size_t n = text.size();
  size_t pos = 0;
  while (pos < n) {
    int rc = pcre2_match(code, subject, n, pos, 0, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      throw Error(fmt::format("tokenizer: PCRE2 match failed at byte {} of a {}-byte text: {}", pos,
                              n, pcre2_message(rc)));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    size_t b = ov[0], e = ov[1];
    if (b < pos || e > n || e <= b) {
      // Our patterns never match empty; treat anything odd as one unmatched byte and move on.
      on_gap(pos, pos + 1);
      ++pos;
      continue;
    }
    if (b > pos) on_gap(pos, b);
    on_match(b, e);
    pos = e;
  }
  if (pos < n) on_gap(pos, n);
}

}  // namespace

struct PreTokenizer::Impl {
  bool split_digits = false;
  CodePtr gpt2;
  CodePtr digits;
};

PreTokenizer::PreTokenizer(bool split_digits) : impl_(std::make_unique<Impl>()) {
  impl_->split_digits = split_digits;
  impl_->gpt2 = compile(gpt2_pattern().c_str());
  if (split_digits) impl_->digits = compile(kDigitPattern);
}
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;
PreTokenizer::~PreTokenizer() = default;

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& out) const {
  MatchDataPtr md(pcre2_match_data_create_from_pattern(impl_->gpt2.get(), nullptr));
  if (!md) throw Error("tokenizer: out of memory for PCRE2 match data");
  auto gpt2_split = [&](std::string_view stretch) {
    scan(
        impl_->gpt2.get(), md.get(), stretch,
        [&](size_t b, size_t e) { out.push_back(stretch.substr(b, e - b)); },
        [&](size_t b, size_t e) { out.push_back(stretch.substr(b, e - b)); });
  };
  if (!impl_->split_digits) {
    gpt2_split(text);
    return;
  }
  // Stage 1 (Digits): each \p{N} code point is a piece; the stretches between them (including any
  // invalid bytes) go through stage 2 (the GPT-2 pattern), each stretch on its own, so that the
  // pattern's look-ahead never sees across a digit (as HF's Sequence of pre-tokenizers).
  MatchDataPtr md_digits(pcre2_match_data_create_from_pattern(impl_->digits.get(), nullptr));
  if (!md_digits) throw Error("tokenizer: out of memory for PCRE2 match data");
  scan(
      impl_->digits.get(), md_digits.get(), text,
      [&](size_t b, size_t e) { out.push_back(text.substr(b, e - b)); },
      [&](size_t b, size_t e) { gpt2_split(text.substr(b, e - b)); });
}

}  // namespace flashnorm::tokenizer_detail
