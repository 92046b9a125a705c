// tokenizer.json / tokenizer_config.json reader: the file's top level and its sections' order.
// The sections' readers are in tokenizer_json_sections.h; see
// include/flashnorm/tokenizer/tokenizer_json.h.
#include "flashnorm/tokenizer/tokenizer_json.h"

#include <fmt/format.h>

#include <optional>
#include <string>

#include "flashnorm/error.h"
#include "flashnorm/io/side_file.h"
#include "tokenizer_json_sections.h"

namespace flashnorm {
namespace {

using tokenizer_detail::HfTokenIds;
using tokenizer_detail::json;
using tokenizer_detail::kNull;
using tokenizer_detail::read_added_tokens;
using tokenizer_detail::read_decoder;
using tokenizer_detail::read_model;
using tokenizer_detail::read_normalizer;
using tokenizer_detail::read_post_processor;
using tokenizer_detail::read_pre_tokenizer;
using tokenizer_detail::read_tokenizer_config;
using tokenizer_detail::read_unk_token;
using tokenizer_detail::Reader;

// parse_hf_tokenizer without the guard against a json exception (none is expected: every access
// is checked first).
TokenizerVocab parse_unguarded(std::string_view tokenizer_json,
                               std::optional<std::string_view> config_json,
                               const std::string& source) {
  const Reader r(source);
  const json root = r.parse(tokenizer_json);
  r.object(root, "(top level)");
  r.only(root,
         {"version", "truncation", "padding", "added_tokens", "normalizer", "pre_tokenizer",
          "post_processor", "decoder", "model"},
         "");
  if (const json* ver = r.find(root, "version"); ver != nullptr && *ver != "1.0") {
    r.unsupported("version", *ver);  // as tokenizers, which knows only "1.0"
  }
  for (const char* k : {"truncation", "padding"}) {
    if (const json* t = r.find(root, k); t != nullptr && !t->is_null()) {
      r.fail(k, "non-null is not supported");
    }
  }

  TokenizerVocab v;
  v.source = source;
  v.model = "bpe";
  v.pre.clear();
  v.add_space_prefix = false;

  const json& model = r.object(r.member(root, "model", ""), "model");
  HfTokenIds ids;
  read_model(r, model, ids, v);
  read_added_tokens(r, root, ids, v);
  read_unk_token(r, model, ids, v);

  auto node = [&](const char* key) -> const json& {
    const json* p = r.find(root, key);
    return p != nullptr ? *p : kNull;
  };
  read_normalizer(r, node("normalizer"), v);
  read_pre_tokenizer(r, node("pre_tokenizer"), v);
  if (v.byte_level && (v.replace_space || v.add_space_prefix || v.metaspace)) {
    r.fail("normalizer", "Replace, Prepend or Metaspace with ByteLevel is not supported");
  }
  if (v.byte_level && v.byte_fallback) {
    r.fail("model.byte_fallback", "true with a ByteLevel pre-tokenizer is not supported");
  }
  read_decoder(r, r.member(root, "decoder", ""), v);
  const tokenizer_detail::TemplateSpecials specials =
      read_post_processor(r, node("post_processor"));
  const std::optional<int64_t> template_bos = specials.bos;
  for (const std::optional<int64_t>& id : {specials.bos, specials.suffix}) {
    if (id && static_cast<size_t>(*id) >= v.tokens.size())
      r.fail("post_processor", fmt::format("token id {} is not in the vocabulary", *id));
  }
  if (specials.suffix) v.suffix = static_cast<uint64_t>(*specials.suffix);

  // tokenizer_config.json
  v.add_bos = template_bos.has_value();
  if (template_bos) v.bos = static_cast<uint64_t>(*template_bos);
  if (config_json) read_tokenizer_config(*config_json, source, ids, template_bos, v);
  return v;
}

}  // namespace

TokenizerVocab parse_hf_tokenizer(std::string_view tokenizer_json,
                                  std::optional<std::string_view> config_json,
                                  const std::string& source) {
  try {
    return parse_unguarded(tokenizer_json, config_json, source);
  } catch (const json::exception& e) {
    throw Error(fmt::format("{}: {}", source, e.what()));
  }
}

TokenizerVocab read_hf_tokenizer(const std::filesystem::path& dir) {
  const std::filesystem::path tj = dir / "tokenizer.json";
  const std::optional<std::string> text = io::read_side_file(tj);
  if (!text) throw Error(fmt::format("{}: cannot open", tj.string()));
  const std::optional<std::string> config = io::read_side_file(dir / "tokenizer_config.json");
  return parse_hf_tokenizer(*text, config ? std::optional<std::string_view>(*config) : std::nullopt,
                            tj.string());
}

Tokenizer tokenizer_from_hf_dir(const std::filesystem::path& dir) {
  return Tokenizer::from_vocab(read_hf_tokenizer(dir));
}

}  // namespace flashnorm
