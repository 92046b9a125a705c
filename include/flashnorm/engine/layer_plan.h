// What an engine needs to know about each transformer layer, resolved once from the architecture
// description (model/arch.h) and shared by the CPU and CUDA engines: the tensors of the attention
// norm's q/k/v consumers and of the FFN, which consumers are renormalized (QK-norm, Gemma-4-style v
// norm), Gemma's post-norms, and whether the layer uses sliding-window attention. Also the RoPE
// tables both engines use.
// Source: HF modeling_llama.py / modeling_gemma3.py (sliding-window pattern, local RoPE base).
#pragma once

#include <array>
#include <initializer_list>
#include <string>
#include <vector>

#include "flashnorm/model/model.h"

namespace flashnorm {

// Tensor names of one layer ("" where the architecture has none).
struct LayerPlan {
  std::string attn_norm, ffn_norm;  // RMSNorm gains
  std::array<std::string, 3> qkv;   // q, k, v projections, in that order
  std::string q_norm, k_norm;       // per-head renorm gains (QK-norm)
  bool v_renorm = false;            // v renormalized without a gain (Gemma-4 style)
  // q, k, v: output renormalized and without a bias, so the attention norm's rstd cancels for it
  // (model/audit.h; a bias breaks scale invariance)
  std::array<bool, 3> qkv_cancels{};
  std::string gate, up, attn_output, down;
  // biases of the projections ("" where the model has none: ModelConfig::biases)
  std::array<std::string, 3> qkv_bias;
  std::string gate_bias, up_bias, attn_output_bias, down_bias;
  std::string post_attn, post_ffn;  // Gemma post-attention / post-FFN norms
  bool local = false;               // sliding-window layer (ModelConfig::layer_local)
};

// One plan per layer of `m` (only names and flags; no tensor data is touched).
// Errors: flashnorm::Error when the attention norm does not feed exactly q, k and v, or v is
// renormalized with a gain (no engine supports it).
std::vector<LayerPlan> plan_layers(const Model& m);

// The biases of projections fused side by side (q|k|v, gate|up): for each (weight, bias) pair the
// bias [rows of the weight] or, where the bias name is "", that many zeros (adding 0 is exact);
// empty when no part has a bias. Reads tensor shapes and bias data from `m`.
std::vector<float> fused_bias(const Model& m,
                              std::initializer_list<std::pair<std::string, std::string>> parts);

// Rotary inverse frequencies [D/2] in fp64: base^(-2i/D) (RoFormer, Su et al. 2021, eq. 15),
// then the scaling of `f` (linear: / factor; llama3: transformers' _compute_llama3_parameters).
std::vector<double> rope_inv_freq(int D, const RopeFrequencies& f);

// RoPE tables cos/sin [n_pos][D/2]: theta(p, i) = p * rope_inv_freq(D, f)[i], formed in fp64 and
// rounded to fp32.
void rope_tables(int n_pos, int D, const RopeFrequencies& f, std::vector<float>& cos,
                 std::vector<float>& sin);

}  // namespace flashnorm
