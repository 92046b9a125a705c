// Tokenizer::from_gguf: the tokenizer vocabulary read from a GGUF file's tokenizer.ggml.* keys.
// Source: GGUF spec "tokenizer.ggml" keys; llama.cpp llama-vocab.cpp defaults (absent token_type
// and add_space_prefix; behaviour references only, no code taken).
#include <memory>
#include <utility>

#include "flashnorm/io/gguf.h"
#include "tokenizer_impl.h"

namespace flashnorm {

Tokenizer Tokenizer::from_gguf(const io::GgufFile& f) {
  auto offset_of = [&f](std::string_view key) -> uint64_t {
    const io::GgufKv* kv = f.find(key);
    return kv != nullptr ? kv->offset : 0;
  };
  TokenizerVocab v;
  v.source = f.name();
  v.model = f.get_string(tokenizer_detail::kKeyModel);
  v.pre = f.get_string_opt(tokenizer_detail::kKeyPre).value_or("default");
  v.tokens = f.string_array(tokenizer_detail::kKeyTokens);
  if (f.find(tokenizer_detail::kKeyTypes) != nullptr) {
    v.types = f.int_array(tokenizer_detail::kKeyTypes);
  } else {
    v.types.assign(v.tokens.size(), 1);  // absent: every token is normal (as llama.cpp)
  }
  if (v.model == "gpt2") v.merges = f.string_array(tokenizer_detail::kKeyMerges);
  if (v.model == "llama") {
    v.scores = f.float_array(tokenizer_detail::kKeyScores);
    v.add_space_prefix = f.get_bool_or("tokenizer.ggml.add_space_prefix", true);
  }
  v.bos = f.get_uint_opt("tokenizer.ggml.bos_token_id");
  v.eos = f.get_uint_opt("tokenizer.ggml.eos_token_id");
  v.unk = f.get_uint_opt("tokenizer.ggml.unknown_token_id");
  v.pad = f.get_uint_opt("tokenizer.ggml.padding_token_id");
  v.add_bos = f.get_bool_or("tokenizer.ggml.add_bos_token", false);
  v.add_eos = f.get_bool_or("tokenizer.ggml.add_eos_token", false);
  auto impl = std::make_unique<Impl>();
  impl->build(v, offset_of);
  return Tokenizer(std::move(impl));
}

}  // namespace flashnorm
