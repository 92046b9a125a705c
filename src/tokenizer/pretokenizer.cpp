// PCRE2-based pre-tokenizer; see pretokenizer.h.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "pretokenizer.h"

#include <fmt/format.h>
#include <pcre2.h>

#include <string>

#include "flashnorm/error.h"
#include "utf8.h"

namespace flashnorm::tokenizer_detail {
namespace {

// Oniguruma's `\s` (what HF tokenizers' regexes run on), the Unicode White_Space property, as the
// inside of a PCRE2 character class (checked against HF tokenizers: U+0085, U+00A0, U+1680,
// U+2028, U+3000 are spaces there; U+180E, U+200B, U+001C are not).
constexpr const char* kOnigSpace = R"(\t\n\x{0B}\f\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A})"
                                   R"(\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";
constexpr const char* kDigitRegex = R"(\p{N})";

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

CodePtr compile(const std::string& pattern, size_t stage) {
  int err = 0;
  PCRE2_SIZE err_off = 0;
  pcre2_code* c =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &err_off, nullptr);
  if (c == nullptr) {
    throw Error(fmt::format(
        "tokenizer: PCRE2 cannot compile pre-tokenizer stage {} pattern at offset {}: {}", stage,
        err_off, pcre2_message(err)));
  }
  // JIT is an optimization only: if it is unavailable, pcre2_match interprets the pattern.
  (void)pcre2_jit_compile(c, PCRE2_JIT_COMPLETE);
  return CodePtr(c);
}

// One stretch of a piece: bytes [begin, end), and whether the stage's regex matched it.
struct Span {
  size_t begin, end;
  bool match;
};

// The matches of `code` in `text` and the stretches between them, in order, covering `text` (HF
// Pattern::find_matches). An empty match is kept (it separates the stretches around it) and the
// search goes on one character later, as Oniguruma's find_iter does.
void find_matches(const pcre2_code* code, pcre2_match_data* md, std::string_view text,
                  std::vector<Span>& spans) {
  spans.clear();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const size_t n = text.size();
  size_t gap = 0;  // start of the stretch not matched yet
  size_t pos = 0;  // where the next search starts
  while (pos <= n) {
    int rc = pcre2_match(code, subject, n, pos, 0, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      throw Error(fmt::format("tokenizer: PCRE2 match failed at byte {} of a {}-byte text: {}", pos,
                              n, pcre2_message(rc)));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t b = ov[0], e = ov[1];
    if (b < pos || e > n || e < b) break;  // cannot happen; end the search safely
    if (b > gap) spans.push_back({gap, b, false});
    spans.push_back({b, e, true});
    gap = e;
    if (e > b) {
      pos = e;
    } else {
      if (b == n) break;
      char32_t cp;
      size_t len = decode_utf8(text, b, cp);
      pos = b + (len == 0 ? 1 : len);
    }
  }
  if (gap < n) spans.push_back({gap, n, false});
}

}  // namespace

std::vector<PreSplit> gguf_pre_splits(std::string_view name) {
  if (name == "smollm") return {{kDigitRegex}, {kGpt2Regex}};
  if (name == "gpt-2" || name == "gpt2") return {{kGpt2Regex}};
  return {};
}

std::string onig_to_pcre2(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 64);
  int depth = 0;  // character class nesting (Oniguruma allows [a[b]])
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char d = p[++i];
      if (d == 's') {
        out += depth > 0 ? std::string(kOnigSpace) : fmt::format("[{}]", kOnigSpace);
      } else if (d == 'S') {
        if (depth > 0) throw Error("tokenizer: \\S inside a character class is not supported");
        out += fmt::format("[^{}]", kOnigSpace);
      } else if (d == 'h' || d == 'H') {  // Oniguruma: hex digit; PCRE2: horizontal space
        throw Error(fmt::format("tokenizer: \\{} (Oniguruma's hex digit) is not supported", d));
      } else {
        out.push_back(c);
        out.push_back(d);
      }
      continue;
    }
    if (c == '[') {
      ++depth;
      out.push_back(c);
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < p.size() && p[i + 1] == '^') out.push_back(p[++i]);
      if (i + 1 < p.size() && p[i + 1] == ']') out.push_back(p[++i]);
      continue;
    }
    if (c == ']' && depth > 0) --depth;
    out.push_back(c);
  }
  return out;
}

struct PreTokenizer::Impl {
  std::vector<CodePtr> codes;
  std::vector<SplitBehavior> behaviors;
};

PreTokenizer::PreTokenizer(const std::vector<PreSplit>& stages) : impl_(std::make_unique<Impl>()) {
  for (size_t s = 0; s < stages.size(); ++s) {
    impl_->codes.push_back(compile(onig_to_pcre2(stages[s].regex), s));
    impl_->behaviors.push_back(stages[s].behavior);
  }
}
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;
PreTokenizer::~PreTokenizer() = default;

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& out) const {
  std::vector<std::string_view> pieces{text}, next;
  std::vector<Span> spans;
  for (size_t s = 0; s < impl_->codes.size(); ++s) {
    MatchDataPtr md(pcre2_match_data_create_from_pattern(impl_->codes[s].get(), nullptr));
    if (!md) throw Error("tokenizer: out of memory for PCRE2 match data");
    next.clear();
    for (std::string_view piece : pieces) {
      find_matches(impl_->codes[s].get(), md.get(), piece, spans);
      // Spans -> pieces by the stage's behaviour (HF NormalizedString::split).
      const size_t first = next.size();
      bool previous_match = false;
      auto view = [&](size_t b, size_t e) { return piece.substr(b, e - b); };
      switch (impl_->behaviors[s]) {
        case SplitBehavior::kIsolated:
          for (const Span& sp : spans) next.push_back(view(sp.begin, sp.end));
          break;
        case SplitBehavior::kRemoved:
          for (const Span& sp : spans) {
            if (!sp.match) next.push_back(view(sp.begin, sp.end));
          }
          break;
        case SplitBehavior::kMergedWithPrevious:
          for (const Span& sp : spans) {
            if (sp.match && !previous_match && next.size() > first) {
              std::string_view& last = next.back();
              last = std::string_view(last.data(), sp.end - (last.data() - piece.data()));
            } else {
              next.push_back(view(sp.begin, sp.end));
            }
            previous_match = sp.match;
          }
          break;
        case SplitBehavior::kMergedWithNext: {
          // A match joins the stretch after it: walk backwards, as HF does.
          std::vector<std::string_view> rev;
          for (size_t k = spans.size(); k-- > 0;) {
            const Span& sp = spans[k];
            if (sp.match && !previous_match && !rev.empty()) {
              std::string_view& last = rev.back();
              last = view(sp.begin, (last.data() - piece.data()) + last.size());
            } else {
              rev.push_back(view(sp.begin, sp.end));
            }
            previous_match = sp.match;
          }
          next.insert(next.end(), rev.rbegin(), rev.rend());
          break;
        }
      }
    }
    std::swap(pieces, next);
  }
  for (std::string_view p : pieces) {
    if (!p.empty()) out.push_back(p);
  }
}

}  // namespace flashnorm::tokenizer_detail
