// One validation of a model file for every subcommand: `generate` runs these checks when it loads
// a model (through the same functions), `inspect` reports their first failure after printing what
// it could read, and `fold` runs them before computing anything. A file one subcommand refuses is
// refused by all of them with the same one-line error.
#pragma once

#include <filesystem>
#include <string>

#include "flashnorm/model/model.h"

namespace flashnorm {

// Checks a model file exactly as `generate` does at load, in the same order, and returns the
// model's hyperparameters and shapes (tensors without data):
//  1. GGUF with a vocabulary: the tokenizer built from it (Tokenizer::from_gguf: every
//     tokenizer.ggml.* key well-formed);
//  2. load_model(path, with_data = false): hyperparameters, every tensor's shape, no tensor the
//     forward pass does not use (extra layers, biases), HF config strictness;
//  3. check_finite_weights: every weight finite, dequantized tensor by tensor (a chunk of rows at
//     a time: the model is never held in fp32);
//  4. GGUF with a vocabulary: check_vocab_fits (tokenizer/model_tokenizer.h) against the
//     embedding's rows.
// A HF directory has no GGUF vocabulary: steps 1 and 4 are skipped; instead, when it holds a
// tokenizer.json, load_model_tokenizer reads it and fits it to the embedding's rows.
// Errors: the Error / FormatError that step throws (the line `generate` prints).
Model check_model_file(const std::filesystem::path& path);

}  // namespace flashnorm
