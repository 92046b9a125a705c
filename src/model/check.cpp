#include "flashnorm/model/check.h"

#include <fmt/format.h>

#include <optional>

#include "flashnorm/error.h"
#include "flashnorm/io/gguf.h"
#include "flashnorm/tokenizer/model_tokenizer.h"
#include "flashnorm/tokenizer/tokenizer.h"

namespace flashnorm {
namespace fs = std::filesystem;

Model check_model_file(const fs::path& path) {
  std::optional<Tokenizer> tok;
  if (!fs::is_directory(path)) {
    io::GgufFile f = io::GgufFile::open(path);
    if (has_gguf_vocabulary(f)) tok.emplace(Tokenizer::from_gguf(f));
  }
  Model m = load_model(path, /*with_data=*/false);
  check_finite_weights(m);
  if (tok) check_vocab_fits(*tok, m.cfg.vocab, path.string(), path.string());
  // A Hugging Face directory's tokenizer.json: read and fitted to the embedding now, not when a
  // run first needs it.
  if (fs::is_directory(path) && fs::exists(path / "tokenizer.json")) {
    load_model_tokenizer(path, "", static_cast<size_t>(m.cfg.vocab));
  }
  return m;
}

}  // namespace flashnorm
