// Shared pieces of the model-running subcommands: loading an engine and its tokenizer.
#pragma once

#include <memory>
#include <string>

#include "flashnorm/engine/cpu_engine.h"
#include "flashnorm/io/gguf.h"
#include "flashnorm/tokenizer/tokenizer.h"

namespace flashnorm::cli {

// "standard" / "flashnorm" -> NormMode. Throws Error otherwise.
NormMode parse_norm_mode(const std::string& s);

// The GGUF file whose vocabulary tokenizes for `model`: the model itself when it is a GGUF file,
// else `tokenizer_gguf` (required for Hugging Face directories).
io::GgufFile open_vocab(const std::string& model, const std::string& tokenizer_gguf);

// Number of bytes at the start of `s` that form complete UTF-8 sequences (for streaming output).
size_t complete_utf8_prefix(const std::string& s);

}  // namespace flashnorm::cli
