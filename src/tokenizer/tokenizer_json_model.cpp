// The "model" section of a tokenizer.json: BPE settings, vocab, merges, unk_token.
// See tokenizer_json_sections.h. Source: HF tokenizers models/bpe (serialization); behaviour
// reference, no code taken.
#include <fmt/format.h>

#include <string>
#include <unordered_set>

#include "tokenizer_json_sections.h"

namespace flashnorm::tokenizer_detail {

void read_model(const Reader& r, const json& model, HfTokenIds& ids, TokenizerVocab& v) {
  r.only(model,
         {"type", "dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix",
          "fuse_unk", "byte_fallback", "ignore_merges", "vocab", "merges"},
         "model");
  if (r.type(model, "model") != "BPE") r.unsupported("model.type", model.at("type"));
  if (const json* d = r.find(model, "dropout"); d != nullptr && !d->is_null()) {
    r.unsupported("model.dropout", *d);
  }
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (const json* p = r.find(model, k); p != nullptr && !p->is_null() && *p != "") {
      r.unsupported(join("model", k), *p);
    }
  }
  auto flag = [&](const char* k) {
    const json* f = r.find(model, k);
    return f != nullptr && r.boolean(*f, join("model", k));
  };
  v.fuse_unk = flag("fuse_unk");
  v.byte_fallback = flag("byte_fallback");
  v.ignore_merges = flag("ignore_merges");

  const json& vocab = r.object(r.member(model, "vocab", "model"), "model.vocab");
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    auto path = [&] { return fmt::format("model.vocab[{}]", show(json(it.key()))); };
    const json& idv = it.value();
    const int64_t id = idv.is_number_unsigned() && idv.get<uint64_t>() < kMaxId
                           ? idv.get<int64_t>()
                           : r.id(idv, path());  // fails
    ids.place(r, id, it.key(), path);
  }

  const json& merges = r.array(r.member(model, "merges", "model"), "model.merges");
  v.merges.reserve(merges.size());
  std::unordered_set<std::string> seen;
  seen.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    if (m.is_string()) {
      v.merges.push_back(m.get_ref<const std::string&>());  // "a b", checked by from_vocab
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      const auto& a = m[0].get_ref<const std::string&>();
      const auto& b = m[1].get_ref<const std::string&>();
      if (a.find(' ') != std::string::npos || b.find(' ') != std::string::npos) {
        r.fail(index("model.merges", i), "a merge of a token with a space is not supported");
      }
      std::string& joined = v.merges.emplace_back();
      joined.reserve(a.size() + b.size() + 1);
      joined.append(a).append(" ").append(b);
    } else {
      r.fail(index("model.merges", i),
             fmt::format("expected \"a b\" or [\"a\", \"b\"], found {}", show(m)));
    }
    // tokenizers keeps a repeated merge's last rank, flashnorm's merge table its first: refused
    // rather than tokenized differently
    if (!seen.insert(v.merges.back()).second) {
      r.fail(index("model.merges", i), fmt::format("duplicate merge \"{}\"", v.merges.back()));
    }
  }
}

void read_unk_token(const Reader& r, const json& model, const HfTokenIds& ids, TokenizerVocab& v) {
  if (const json* u = r.find(model, "unk_token"); u != nullptr && !u->is_null()) {
    auto it = ids.ids.find(r.string(*u, "model.unk_token"));
    if (it == ids.ids.end()) r.fail("model.unk_token", fmt::format("{} is not a token", show(*u)));
    v.unk = static_cast<uint64_t>(it->second);
  }
}

}  // namespace flashnorm::tokenizer_detail
