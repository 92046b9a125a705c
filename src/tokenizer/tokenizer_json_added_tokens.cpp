// The "added_tokens" section of a tokenizer.json and the token table it completes.
// The table: model.vocab and added_tokens together (types, added-only and normalized flags); see
// tokenizer_json_sections.h. Source: HF tokenizers tokenizer/added_vocabulary.rs
// (AddedVocabulary::add_tokens id assignment); behaviour reference, no code taken.
#include <fmt/format.h>

#include <string>
#include <utility>
#include <vector>

#include "tokenizer_json_sections.h"

namespace flashnorm::tokenizer_detail {
namespace {

constexpr int64_t kTypeNormal = 1;
constexpr int64_t kTypeControl = 3;
constexpr int64_t kTypeUserDefined = 4;
constexpr int64_t kTypeUnused = 5;

}  // namespace

void read_added_tokens(const Reader& r, const json& root, HfTokenIds& ids, TokenizerVocab& v) {
  // tokenizers gives an added token its model.vocab id, or else the next id from the number of
  // model.vocab entries on (AddedVocabulary::add_tokens); the file's "id" must agree.
  int64_t next_added_id = static_cast<int64_t>(ids.ids.size());

  std::vector<std::pair<int64_t, bool>> added;  // id, special
  std::vector<int64_t> added_only;              // ids of added tokens not in model.vocab
  std::vector<int64_t> normalized_ids;
  if (const json* at = r.find(root, "added_tokens")) {
    r.array(*at, "added_tokens");
    for (size_t i = 0; i < at->size(); ++i) {
      const std::string path = index("added_tokens", i);
      const json& t = r.object((*at)[i], path);
      r.only(t, {"id", "content", "single_word", "lstrip", "rstrip", "normalized", "special"},
             path);
      const int64_t id = r.id(r.member(t, "id", path), join(path, "id"));
      const std::string content = r.string(r.member(t, "content", path), join(path, "content"));
      if (content.empty()) r.fail(join(path, "content"), "empty");
      auto known = ids.ids.find(content);
      const int64_t hf_id = known != ids.ids.end() ? known->second : next_added_id++;
      if (known == ids.ids.end()) added_only.push_back(hf_id);
      if (id != hf_id) {
        r.fail(join(path, "id"),
               fmt::format("{} but tokenizers gives {} the id {}", id, show(json(content)), hf_id));
      }
      for (const char* k : {"single_word", "lstrip", "rstrip"}) {
        const json& f = r.member(t, k, path);
        if (r.boolean(f, join(path, k))) r.unsupported(join(path, k), f);
      }
      const bool special = r.boolean(r.member(t, "special", path), join(path, "special"));
      const bool norm = r.boolean(r.member(t, "normalized", path), join(path, "normalized"));
      ids.place(r, id, content, [&] { return path; });
      added.emplace_back(id, special);
      if (norm) normalized_ids.push_back(id);
    }
  }

  std::vector<std::optional<std::string>>& by_id = ids.by_id;
  const size_t n = by_id.size();
  if (n == 0) r.fail("model.vocab", "empty vocabulary");
  v.tokens.resize(n);
  v.types.assign(n, kTypeNormal);
  for (size_t i = 0; i < n; ++i) {
    if (by_id[i]) {
      v.tokens[i] = std::move(*by_id[i]);
    } else {
      v.types[i] = kTypeUnused;  // an id neither list names: decodes to nothing
    }
  }
  for (auto [id, special] : added) v.types[id] = special ? kTypeControl : kTypeUserDefined;
  v.added_only.assign(n, false);
  for (int64_t id : added_only) v.added_only[id] = true;
  v.normalized.assign(n, false);
  for (int64_t id : normalized_ids) v.normalized[id] = true;
}

}  // namespace flashnorm::tokenizer_detail
