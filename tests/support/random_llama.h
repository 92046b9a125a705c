// Test support: a small random Llama checkpoint written as a Hugging Face directory, and the
// paths of the real models the suite runs on.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace flashnorm::testing {

struct RandomLlamaOptions {
  int n_layer = 2, hidden = 64, n_head = 4, n_head_kv = 2, ffn = 96, vocab = 300;
  bool tied = true;
  int n_shards = 2;
  uint64_t seed = 1;
};

// Writes config.json + shards of a LlamaForCausalLM with random weights (std normal scaled by
// 1/sqrt(fan_in)) and random gains in [0.5, 1.5] with random signs on a few entries, in F32.
void write_random_llama(const std::filesystem::path& dir, const RandomLlamaOptions& opt = {});

// Real model paths from the environment (FLASHNORM_SMOLLM2_GGUF), with the fetch script's
// default location as fallback.
std::string smollm2_path();

// A fresh empty directory under the test's temporary directory.
std::filesystem::path fresh_dir(const std::string& name);

// SHA-256-free content fingerprint of a file or of every file in a directory (FNV-1a 64 over
// names and bytes), to prove inputs are untouched.
uint64_t fingerprint(const std::filesystem::path& p);

}  // namespace flashnorm::testing
