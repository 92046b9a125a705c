// What every inference backend offers (CPU fp32 engine, CUDA bf16 engine): append tokens to the
// KV cache and get fp32 logits. Used by `generate`, `verify` and the equivalence tests so that the
// same measurement code runs on either backend.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "flashnorm/model/model.h"

namespace flashnorm {

// Normalization modes (FlashNorm design notes sections 1-2):
//   Standard:  z = (x * rstd(x) * g) W^T   — RMSNorm with gain, then the projection.
//   FlashNorm: z = rstd(x) * (x W*^T)       — folded weights W* = W diag(g), rstd beside the GEMM.
enum class NormMode { Standard, FlashNorm };

class Engine {
 public:
  virtual ~Engine() = default;
  // Clears the KV cache (position back to 0).
  virtual void reset() = 0;
  // Tokens in the KV cache.
  virtual int position() const = 0;
  // KV cache capacity in tokens.
  virtual int max_context() const = 0;
  virtual const ModelConfig& config() const = 0;
  virtual NormMode mode() const = 0;
  // Appends `tokens` at positions position()..position()+n-1 and returns fp32 logits, row-major
  // [n, vocab] when all_logits, else [1, vocab] for the last token.
  // Errors: Error if a token id is outside [0, vocab) or the KV cache would overflow.
  virtual std::vector<float> forward(std::span<const int32_t> tokens, bool all_logits = false) = 0;
  // "cpu" or "cuda".
  virtual const char* device() const = 0;
};

}  // namespace flashnorm
