#include "model_args.h"

#include <fmt/format.h>

#include <filesystem>

#include "flashnorm/io/error.h"

namespace flashnorm::cli {

NormMode parse_norm_mode(const std::string& s) {
  if (s == "standard") return NormMode::Standard;
  if (s == "flashnorm") return NormMode::FlashNorm;
  throw Error(fmt::format("--norm must be standard or flashnorm, not '{}'", s));
}

io::GgufFile open_vocab(const std::string& model, const std::string& tokenizer_gguf) {
  if (!tokenizer_gguf.empty()) return io::GgufFile::open(tokenizer_gguf);
  if (std::filesystem::is_directory(model)) {
    throw Error(
        fmt::format("{} is a Hugging Face directory: give --tokenizer FILE.gguf for its "
                    "vocabulary",
                    model));
  }
  return io::GgufFile::open(model);
}

size_t complete_utf8_prefix(const std::string& s) {
  // Walk back over at most 3 continuation bytes to the last lead byte; keep it only if its
  // sequence is complete.
  size_t n = s.size();
  size_t i = n;
  int cont = 0;
  while (i > 0 && cont < 4 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) {
    --i;
    ++cont;
  }
  if (i == 0) return cont >= 4 ? n : 0;
  const unsigned char lead = static_cast<unsigned char>(s[i - 1]);
  const int need = lead >= 0xF0 ? 3 : lead >= 0xE0 ? 2 : lead >= 0xC0 ? 1 : 0;
  if (need == 0) return n;  // ASCII or stray continuation bytes: emit as is
  return cont >= need ? n : i - 1;
}

}  // namespace flashnorm::cli
