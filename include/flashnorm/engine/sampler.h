// Next-token sampling from fp32 logits: greedy (temperature 0) or seeded temperature / top-k /
// top-p (nucleus) sampling, applied in that order: top-k, softmax at temperature, top-p.
// Source: Holtzman et al. 2019 "The Curious Case of Neural Text Degeneration" (top-p); the
// order matches llama.cpp's and HF generate's default warpers.
#pragma once

#include <cstdint>
#include <random>
#include <span>

namespace flashnorm {

struct SamplerOptions {
  float temperature = 0.0f;  // 0: greedy (argmax; ties go to the lowest id)
  int top_k = 40;            // <= 0: no top-k cut
  float top_p = 0.95f;       // >= 1: no nucleus cut
  uint64_t seed = 0;
};

class Sampler {
 public:
  // Errors: throws Error for a negative temperature or a top_p outside (0, 1].
  explicit Sampler(SamplerOptions opt);
  // logits: [vocab] fp32. Returns a token id in [0, vocab).
  int32_t sample(std::span<const float> logits);

 private:
  SamplerOptions opt_;
  std::mt19937_64 rng_;
};

// Index of the largest logit (lowest index on ties); NaN logits are never chosen.
int32_t argmax(std::span<const float> logits);

}  // namespace flashnorm
