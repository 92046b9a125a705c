// tokenizer.json's normalizer, pre_tokenizer, decoder and post_processor sections.
// See tokenizer_json_sections.h. Source: HF tokenizers normalizers, pre_tokenizers, decoders and
// processors/template.rs (serialization and behaviour); behaviour reference, no code taken.
#include <fmt/format.h>

#include <cctype>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "pretokenizer.h"
#include "tokenizer_json_sections.h"

namespace flashnorm::tokenizer_detail {
namespace {

constexpr const char* kSpace = "\xE2\x96\x81";  // U+2581

// The items of a "Sequence" node (`list_key` holds them) or the node itself.
std::vector<std::pair<const json*, std::string>> flatten(const Reader& r, const json& node,
                                                         std::string_view path,
                                                         const char* list_key) {
  std::vector<std::pair<const json*, std::string>> items;
  if (r.type(node, path) != "Sequence") {
    items.emplace_back(&node, std::string(path));
    return items;
  }
  r.only(node, {"type", list_key}, path);
  const std::string list_path = join(path, list_key);
  const json& list = r.array(r.member(node, list_key, path), list_path);
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string p = index(list_path, i);
    if (r.type(list[i], p) == "Sequence") r.fail(p, "nested Sequence is not supported");
    items.emplace_back(&list[i], p);
  }
  return items;
}

// A Replace/Split pattern: {"String": s} (its literal text, as a regex) or {"Regex": s}.
std::string pattern_regex(const Reader& r, const json& pat, std::string_view path,
                          bool* is_string = nullptr) {
  r.object(pat, path);
  if (pat.size() != 1) r.fail(path, "expected one of {\"String\": ...} or {\"Regex\": ...}");
  if (const json* s = r.find(pat, "String")) {
    std::string text = r.string(*s, join(path, "String"));
    if (text.empty()) r.unsupported(join(path, "String"), *s);
    if (is_string != nullptr) *is_string = true;
    std::string out;
    for (char c : text) {
      auto u = static_cast<unsigned char>(c);
      if (u < 0x80 && !std::isalnum(u)) out.push_back('\\');
      out.push_back(c);
    }
    return out;
  }
  if (const json* s = r.find(pat, "Regex")) {
    if (is_string != nullptr) *is_string = false;
    return r.string(*s, join(path, "Regex"));
  }
  r.fail(path, "expected one of {\"String\": ...} or {\"Regex\": ...}");
}

// The value of the string `v` among `names`; any other string is unsupported.
template <typename E>
E pick(const Reader& r, const json& v, const std::string& path,
       std::initializer_list<std::pair<const char*, E>> names) {
  const std::string s = r.string(v, path);
  for (const auto& [name, value] : names) {
    if (s == name) return value;
  }
  r.unsupported(path, v);
}

}  // namespace

void read_normalizer(const Reader& r, const json& node, TokenizerVocab& v) {
  if (node.is_null()) return;
  bool seen_replace = false, seen_prepend = false, seen_nfc = false;
  for (const auto& [n, path] : flatten(r, node, "normalizer", "normalizers")) {
    const std::string type = r.type(*n, path);
    if (type == "Replace" && !seen_replace) {
      r.only(*n, {"type", "pattern", "content"}, path);
      bool is_string = false;
      const std::string pat =
          pattern_regex(r, r.member(*n, "pattern", path), join(path, "pattern"), &is_string);
      const std::string content = r.string(r.member(*n, "content", path), join(path, "content"));
      if (!is_string || pat != "\\ " || content != kSpace) {
        r.fail(path, "Replace other than \" \" -> \"\u2581\" is not supported");
      }
      v.replace_space = seen_replace = true;
    } else if (type == "NFC" && !seen_nfc) {
      r.only(*n, {"type"}, path);
      v.nfc = seen_nfc = true;
    } else if (type == "Prepend" && !seen_prepend) {
      r.only(*n, {"type", "prepend"}, path);
      const json& p = r.member(*n, "prepend", path);
      if (r.string(p, join(path, "prepend")) != kSpace) r.unsupported(join(path, "prepend"), p);
      v.add_space_prefix = seen_prepend = true;
    } else {
      r.unsupported(join(path, "type"), n->at("type"));
    }
  }
}

void read_pre_tokenizer(const Reader& r, const json& node, TokenizerVocab& v) {
  if (node.is_null()) return;
  for (const auto& [n, path] : flatten(r, node, "pre_tokenizer", "pretokenizers")) {
    const std::string type = r.type(*n, path);
    if (v.byte_level) r.fail(path, "a pre-tokenizer after ByteLevel is not supported");
    if (type == "Split") {
      r.only(*n, {"type", "pattern", "behavior", "invert"}, path);
      PreSplit s;
      s.regex = pattern_regex(r, r.member(*n, "pattern", path), join(path, "pattern"));
      s.behavior = pick<SplitBehavior>(r, r.member(*n, "behavior", path), join(path, "behavior"),
                                       {{"Isolated", SplitBehavior::kIsolated},
                                        {"MergedWithPrevious", SplitBehavior::kMergedWithPrevious},
                                        {"MergedWithNext", SplitBehavior::kMergedWithNext},
                                        {"Removed", SplitBehavior::kRemoved}});
      const json& inv = r.member(*n, "invert", path);
      if (r.boolean(inv, join(path, "invert"))) r.unsupported(join(path, "invert"), inv);
      v.pre_splits.push_back(std::move(s));
    } else if (type == "Digits") {
      r.only(*n, {"type", "individual_digits"}, path);
      const bool each =
          r.boolean(r.member(*n, "individual_digits", path), join(path, "individual_digits"));
      v.pre_splits.push_back({each ? R"(\p{N})" : R"(\p{N}+)", SplitBehavior::kIsolated});
    } else if (type == "Metaspace" && v.pre_splits.empty() && !v.metaspace) {
      r.only(*n, {"type", "replacement", "prepend_scheme", "split", "add_prefix_space"}, path);
      const json& rep = r.member(*n, "replacement", path);
      if (r.string(rep, join(path, "replacement")) != kSpace) {
        r.unsupported(join(path, "replacement"), rep);
      }
      v.metaspace_prepend = pick<MetaspacePrepend>(r, r.member(*n, "prepend_scheme", path),
                                                   join(path, "prepend_scheme"),
                                                   {{"always", MetaspacePrepend::kAlways},
                                                    {"first", MetaspacePrepend::kFirst},
                                                    {"never", MetaspacePrepend::kNever}});
      if (const json* a = r.find(*n, "add_prefix_space")) {  // legacy spelling; must agree
        if (r.boolean(*a, join(path, "add_prefix_space")) !=
            (v.metaspace_prepend != MetaspacePrepend::kNever)) {
          r.fail(join(path, "add_prefix_space"), "disagrees with prepend_scheme");
        }
      }
      v.metaspace = true;
      if (r.boolean(r.member(*n, "split", path), join(path, "split"))) {
        v.pre_splits.push_back({kSpace, SplitBehavior::kMergedWithNext});
      }
    } else if (type == "ByteLevel") {
      r.only(*n, {"type", "add_prefix_space", "trim_offsets", "use_regex"}, path);
      const json& aps = r.member(*n, "add_prefix_space", path);
      if (r.boolean(aps, join(path, "add_prefix_space"))) {
        r.unsupported(join(path, "add_prefix_space"), aps);
      }
      if (const json* t = r.find(*n, "trim_offsets")) r.boolean(*t, join(path, "trim_offsets"));
      bool use_regex = true;  // serde default
      if (const json* u = r.find(*n, "use_regex"))
        use_regex = r.boolean(*u, join(path, "use_regex"));
      if (use_regex) v.pre_splits.push_back({tokenizer_detail::kGpt2Regex});
      v.byte_level = true;
    } else {
      r.unsupported(join(path, "type"), n->at("type"));
    }
  }
}

void read_decoder(const Reader& r, const json& node, TokenizerVocab& v) {
  if (node.is_null()) r.fail("decoder", "null (tokens joined by spaces) is not supported");
  if (v.byte_level) {
    if (r.type(node, "decoder") != "ByteLevel") {
      r.fail("decoder.type", fmt::format("{} with a ByteLevel pre-tokenizer is not supported "
                                         "(expected ByteLevel)",
                                         show(node.at("type"))));
    }
    r.only(node, {"type", "add_prefix_space", "trim_offsets", "use_regex"}, "decoder");
    return;
  }
  // Replace "▁" -> " ", ByteFallback, Fuse, Strip, each at most once and in this order.
  int stage = 0;
  bool replace = false, byte_fallback = false, fuse = false;
  for (const auto& [n, path] : flatten(r, node, "decoder", "decoders")) {
    const std::string type = r.type(*n, path);
    if (type == "Replace" && stage < 1) {
      r.only(*n, {"type", "pattern", "content"}, path);
      bool is_string = false;
      const std::string pat =
          pattern_regex(r, r.member(*n, "pattern", path), join(path, "pattern"), &is_string);
      if (!is_string || pat != kSpace ||
          r.string(r.member(*n, "content", path), join(path, "content")) != " ") {
        r.fail(path, "Replace other than \"\u2581\" -> \" \" is not supported");
      }
      replace = true;
      stage = 1;
    } else if (type == "ByteFallback" && stage < 2) {
      r.only(*n, {"type"}, path);
      byte_fallback = true;
      stage = 2;
    } else if (type == "Fuse" && stage < 3) {
      r.only(*n, {"type"}, path);
      fuse = true;
      stage = 3;
    } else if (type == "Strip" && stage == 3) {
      r.only(*n, {"type", "content", "start", "stop"}, path);
      const json& c = r.member(*n, "content", path);
      if (r.string(c, join(path, "content")) != " ") r.unsupported(join(path, "content"), c);
      const json& stop = r.member(*n, "stop", path);
      if (!stop.is_number_unsigned() || stop.get<uint64_t>() != 0) {
        r.unsupported(join(path, "stop"), stop);
      }
      const json& start = r.member(*n, "start", path);
      if (!start.is_number_unsigned() || start.get<uint64_t>() > 16) {
        r.unsupported(join(path, "start"), start);
      }
      v.strip_leading_spaces = static_cast<int>(start.get<uint64_t>());
      stage = 4;
    } else {
      r.fail(join(path, "type"),
             fmt::format("{} is not supported here (expected a Sequence of Replace \"\u2581\" -> "
                         "\" \", ByteFallback, Fuse, Strip, in this order)",
                         show(n->at("type"))));
    }
  }
  (void)fuse;
  if (!replace) r.fail("decoder", "a Replace \"\u2581\" -> \" \" step is required");
  if (byte_fallback != v.byte_fallback) {
    r.fail("decoder", fmt::format("ByteFallback {} but model.byte_fallback is {}",
                                  byte_fallback ? "present" : "absent", v.byte_fallback));
  }
}

// TemplateProcessing's single sequence -> the special tokens around $A (bos before, suffix after).
TemplateSpecials read_post_processor(const Reader& r, const json& node) {
  TemplateSpecials out;
  if (node.is_null()) return out;
  for (const auto& [n, path] : flatten(r, node, "post_processor", "processors")) {
    const std::string type = r.type(*n, path);
    if (type == "ByteLevel") {
      continue;  // offsets only
    }
    if (type != "TemplateProcessing") r.unsupported(join(path, "type"), n->at("type"));
    r.only(*n, {"type", "single", "pair", "special_tokens"}, path);
    const std::string sp = join(path, "single");
    const std::string tokens_path = join(path, "special_tokens");  // (lambdas below: no binding)
    const json& single = r.array(r.member(*n, "single", path), sp);
    const json& specials = r.object(r.member(*n, "special_tokens", path), tokens_path);
    auto is_a = [&](const json& piece) {
      const json* s = piece.is_object() ? r.find(piece, "Sequence") : nullptr;
      const json* id = s != nullptr && s->is_object() ? r.find(*s, "id") : nullptr;
      return id != nullptr && *id == "A";
    };
    auto special = [&](size_t i) -> const json* {
      return i < single.size() && single[i].is_object() ? r.find(single[i], "SpecialToken")
                                                        : nullptr;
    };
    // "$A", "<special> $A", "$A <special>" or "<special> $A <special>"
    const size_t a = special(0) != nullptr ? 1 : 0;
    if (single.size() < a + 1 || single.size() > a + 2 || !is_a(single[a]) ||
        (single.size() == a + 2 && special(a + 1) == nullptr)) {
      r.fail(sp, "only \"$A\" with at most one special token before and one after is supported");
    }
    auto id_of = [&](size_t i) {
      const std::string stp = index(sp, i) + ".SpecialToken";
      const std::string name =
          r.string(r.member(r.object(*special(i), stp), "id", stp), stp + ".id");
      const std::string tp = join(tokens_path, name);
      const json& tok = r.object(r.member(specials, name.c_str(), tokens_path), tp);
      const json& ids = r.array(r.member(tok, "ids", tp), join(tp, "ids"));
      if (ids.size() != 1) r.fail(join(tp, "ids"), "exactly one id is supported");
      return r.id(ids[0], index(join(tp, "ids"), 0));
    };
    if (a == 1) out.bos = id_of(0);
    if (single.size() == a + 2) out.suffix = id_of(a + 1);
  }
  return out;
}

}  // namespace flashnorm::tokenizer_detail
