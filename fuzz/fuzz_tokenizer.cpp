// libFuzzer target for the tokenizer/vocabulary loader: parses arbitrary bytes as a GGUF image,
// builds a Tokenizer from its "tokenizer.ggml.*" keys (Tokenizer::from_gguf), then encodes a few
// fixed texts plus the file's own "fuzz.text" string (so mutations reach the pre-tokenizer and the
// merges), decodes the ids back, and formats a chat prompt from "tokenizer.chat_template".
// Anything but success or a flashnorm::Error is a bug (sanitizers report memory errors and UB).
// Invariant checked: every id encode() returns lies inside the vocabulary and decodes.
// Seeds: fuzz/make_seeds.py (real SmolLM2 / Gemma 3 metadata with the vocabulary cut small).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "flashnorm/error.h"
#include "flashnorm/io/gguf.h"
#include "flashnorm/tokenizer/chat.h"
#include "flashnorm/tokenizer/tokenizer.h"

namespace {

// Encodes `text` both ways (with and without special-token parsing) and decodes the result.
void round_trip(const flashnorm::Tokenizer& tok, std::string_view text) {
  for (const bool special : {true, false}) {
    const std::vector<int32_t> ids = tok.encode(text, special);
    for (const int32_t id : ids) {
      if (id < 0 || static_cast<size_t>(id) >= tok.vocab_size()) __builtin_trap();
      (void)tok.is_eog(id);
    }
    (void)tok.decode(ids);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace flashnorm;
  try {
    const auto f = io::GgufFile::parse(std::span<const uint8_t>(data, size), "fuzz.gguf");
    const Tokenizer tok = Tokenizer::from_gguf(f);
    if (tok.bos() && static_cast<size_t>(*tok.bos()) >= tok.vocab_size()) __builtin_trap();
    if (tok.eos() && static_cast<size_t>(*tok.eos()) >= tok.vocab_size()) __builtin_trap();
    static const char* const kTexts[] = {
        "Hello, world! 12345 don't  stop\n\ttabs",
        "<|im_start|>user\nhi<|im_end|><start_of_turn>model\n<bos><eos>",
        "\xc3\xa9t\xc3\xa9 \xe2\x96\x81 \xf0\x9f\x98\x80 \xe4\xb8\xad\xe6\x96\x87",
        "\xc0\xc1\xf8\xff\x80 bad \xe2\x82 utf8 \xed\xa0\x80",
    };
    for (const char* t : kTexts) round_trip(tok, t);
    std::string own;
    try {
      own = f.get_string_opt("fuzz.text").value_or("");
    } catch (const Error&) {
    }
    if (!own.empty()) round_trip(tok, own);
    try {
      if (const std::optional<std::string> tmpl = gguf_chat_template(f)) {
        const std::string prompt = apply_chat_template(*tmpl, "What is 2+2?", std::nullopt);
        round_trip(tok, prompt);
        (void)apply_chat_template(*tmpl, " user ", std::string_view("be brief"));
      }
    } catch (const Error&) {
    }
    if (std::getenv("FUZZ_VERBOSE")) std::fprintf(stderr, "loaded: %zu tokens\n", tok.vocab_size());
    if (tok.vocab_size() > 0) {
      (void)tok.piece(0);
      (void)tok.piece(static_cast<int32_t>(tok.vocab_size() - 1));
    }
  } catch (const Error& e) {
    // Refused input (flashnorm::FormatError derives from Error): expected.
    // FUZZ_VERBOSE=1: say why (to check that seeds get past the parser).
    if (std::getenv("FUZZ_VERBOSE")) std::fprintf(stderr, "refused: %s\n", e.what());
  }
  return 0;
}
