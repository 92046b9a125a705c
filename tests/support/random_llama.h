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
  std::string arch = "llama";  // or "gemma3" (QK-norm, post norms, `1 + w` gains in HF files)
  int head_dim = 0;            // 0: hidden / n_head
  int sliding_window = 8;      // gemma3: local layers attend to the last 8 positions
  int context = 512;           // max_position_embeddings / context_length
  float eps = 0;               // rms_norm_eps; 0: 1e-5 (llama) / 1e-6 (gemma3)
  float rope_base = 0;         // rope_theta / rope.freq_base; 0: 1e4 (llama) / 1e6 (gemma3)
  float gain_scale = 1;        // every norm multiplier times this (hostile tests)
  // llama: a random bias (std normal / 2) on q, k, v, o, gate, up and down (HF config
  // attention_bias and mlp_bias true)
  bool biases = false;
  float final_softcap = 0;  // gemma3: final_logit_softcapping (0: not written)
};

// A small Gemma 3 layout: 6 layers (0-4 local with window 8, layer 5 global), hidden 64, 4 heads,
// 1 kv head, head_dim 32, FFN 128.
RandomLlamaOptions small_gemma3_options(uint64_t seed);

// Writes config.json + shards of a LlamaForCausalLM (or Gemma3ForCausalLM) with random weights
// (std normal scaled by 1/sqrt(fan_in)) and random gains in F32: llama gains in [0.5, 1.5] with
// a few negative; gemma3 stores w in [-0.5, 0.5] (applied as 1 + w, as HF Gemma does).
void write_random_llama(const std::filesystem::path& dir, const RandomLlamaOptions& opt = {});

// The same model as a GGUF file with canonical names and plain gains (gemma3: 1 + w stored, as
// llama.cpp's converter does); q/k rows in the layout the architecture's GGUF files use.
void write_random_gguf(const std::filesystem::path& path, const RandomLlamaOptions& opt = {});

// Real model paths from the environment (FLASHNORM_SMOLLM2_GGUF), with the fetch script's
// default location as fallback.
std::string smollm2_path();
// The same for Gemma 3 270M (FLASHNORM_GEMMA3_GGUF).
std::string gemma3_path();

// A fresh empty directory under the test's temporary directory, unique to this process; removed
// with its contents when the process exits (FLASHNORM_KEEP_TEST_DIRS=1 keeps it).
std::filesystem::path fresh_dir(const std::string& name);
// Removes `dir` with its contents when this process exits (as fresh_dir's directories;
// FLASHNORM_KEEP_TEST_DIRS=1 keeps them).
void remove_at_exit(const std::filesystem::path& dir);

// SHA-256-free content fingerprint of a file or of every file in a directory (FNV-1a 64 over
// names and bytes), to prove inputs are untouched.
uint64_t fingerprint(const std::filesystem::path& p);

}  // namespace flashnorm::testing
