// CPU inference engine for the llama architecture in fp32: embedding, RMSNorm, fused q|k|v and
// gate|up projections (BLAS sgemm/sgemv), RoPE (adjacent or NEOX pairs), GQA attention over a
// KV cache, SwiGLU, residual adds, final norm and LM head.
// Two normalization modes over one code path (FlashNorm design notes sections 1-2):
//   Standard:  z = (x * rstd(x) * g) W^T         — RMSNorm with gain, then the projection.
//   FlashNorm: z = rstd(x) * (x W*^T), W* = W diag(g) — folded weights (folded at load when the
//              file is not folded already), the projection on raw x, rstd computed beside it
//              and applied to the output rows.
// Source: HF LlamaForCausalLM (modeling_llama.py) for the forward pass.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "flashnorm/model/model.h"

namespace flashnorm {

enum class NormMode { Standard, FlashNorm };

class CpuEngine {
 public:
  // Takes the model's weights. `max_context` caps the KV cache (0: the model's context length,
  // at most 8192). Errors: throws Error if the model's architecture is not llama.
  CpuEngine(Model model, NormMode mode, int max_context = 0);

  // Clears the KV cache (position back to 0).
  void reset();
  int position() const { return pos_; }
  int max_context() const { return max_ctx_; }
  const ModelConfig& config() const { return m_.cfg; }
  NormMode mode() const { return mode_; }

  // Appends `tokens` at positions position()..position()+n-1 and returns fp32 logits, row-major
  // [n, vocab] when all_logits, else [1, vocab] for the last token.
  // Errors: Error if a token id is outside [0, vocab) or the KV cache would overflow.
  std::vector<float> forward(std::span<const int32_t> tokens, bool all_logits = false);

 private:
  struct Layer {
    const float* attn_gain;  // [H] (Standard mode)
    std::vector<float> wqkv;  // [q + 2 kv, H], rows of q, then k, then v
    const float* wo;          // [H, q]
    const float* ffn_gain;    // [H]
    std::vector<float> wgu;   // [2F, H], gate rows then up rows
    const float* wdown;       // [H, F]
  };
  void normed_projection(const float* x, int T, const float* gain, const float* w, int n,
                         float* y);
  void attention(int layer, const float* qkv, int T, float* out);

  Model m_;
  NormMode mode_;
  int max_ctx_ = 0, pos_ = 0;
  std::vector<Layer> layers_;
  std::vector<float> head_;  // [vocab, H]: the LM head (folded in FlashNorm mode)
  const float* out_gain_ = nullptr;
  std::vector<float> k_cache_, v_cache_;  // [layer][pos][n_kv * D]
  std::vector<float> rope_cos_, rope_sin_;  // [pos][D/2]
};

}  // namespace flashnorm
