// tokenizer_config.json: bos_token, eos_token, add_bos_token and add_eos_token.
// See tokenizer_json_sections.h. Source: transformers' tokenizer_config.json keys (special tokens
// as strings or AddedToken objects; the Llama tokenizers' add_bos_token and add_eos_token).
#include <fmt/format.h>

#include <optional>
#include <string>

#include "tokenizer_json_sections.h"

namespace flashnorm::tokenizer_detail {
namespace {

// The content of a tokenizer_config.json special token: a string, {"content": ...} or null.
std::optional<std::string> config_token(const Reader& r, const json& cfg, const char* key) {
  const json* v = r.find(cfg, key);
  if (v == nullptr || v->is_null()) return std::nullopt;
  if (v->is_object()) return r.string(r.member(*v, "content", key), join(key, "content"));
  return r.string(*v, key);
}

}  // namespace

void read_tokenizer_config(std::string_view config_json, const std::string& source,
                           const HfTokenIds& ids, std::optional<int64_t> template_bos,
                           TokenizerVocab& v) {
  std::string cname = source;
  if (cname.ends_with("tokenizer.json")) {
    cname.replace(cname.size() - 14, 14, "tokenizer_config.json");
  } else {
    cname = "tokenizer_config.json";
  }
  const Reader c(cname);
  const json cfg = c.parse(config_json);
  c.object(cfg, "(top level)");
  auto id_of = [&](const char* key) -> std::optional<uint64_t> {
    std::optional<std::string> text = config_token(c, cfg, key);
    if (!text) return std::nullopt;
    auto it = ids.ids.find(*text);
    if (it == ids.ids.end()) c.fail(key, fmt::format("{} is not a token", show(json(*text))));
    return static_cast<uint64_t>(it->second);
  };
  if (auto b = id_of("bos_token")) {
    if (template_bos && *b != static_cast<uint64_t>(*template_bos)) {
      c.fail("bos_token", fmt::format("token {} but the post_processor template adds token {}", *b,
                                      *template_bos));
    }
    v.bos = b;
  }
  v.eos = id_of("eos_token");
  if (const json* a = c.find(cfg, "add_bos_token"); a != nullptr && !a->is_null()) {
    v.add_bos = c.boolean(*a, "add_bos_token");
    if (v.add_bos && !v.bos) c.fail("add_bos_token", "true without a bos_token");
  }
  if (const json* a = c.find(cfg, "add_eos_token"); a != nullptr && !a->is_null()) {
    if (c.boolean(*a, "add_eos_token")) c.unsupported("add_eos_token", *a);
  }
}

}  // namespace flashnorm::tokenizer_detail
