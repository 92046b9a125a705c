// Architecture descriptions as data: which normalization feeds which projections, the gain
// convention of each file format, whether the LM head is tied, and which consumers renormalize
// their input (the graph facts that FlashNorm's folding, deferral and cancellation rely on).
// Tensor names are canonical GGUF names (llama.cpp's gguf-py constants.py, MODEL_TENSOR names);
// Hugging Face names map onto them through `hf_names`.
// Sources: docs/design.md sections 1-3; llama: HF LlamaForCausalLM
// (modeling_llama.py); qwen2: HF Qwen2ForCausalLM (modeling_qwen2.py); llama.cpp
// convert_hf_to_gguf.py for the GGUF naming and q/k permutation.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace flashnorm {

// How a stored RMSNorm gain is applied: Plain: y = x * rstd * w (identity w = 1);
// OnePlus: y = x * rstd * (1 + w) (identity w = 0; Gemma 1-3 in HF files).
enum class GainConvention { Plain, OnePlus };

// RoPE pairing of q/k rows: Adjacent pairs (2i, 2i+1) (llama.cpp "normal", what the GGUF
// converter produces for llama by permuting q/k rows) or Neox half-split pairs (i, i + d/2)
// (HF rotate_half; Gemma GGUF).
enum class RopeLayout { Adjacent, Neox };

// A linear layer [N, K] that reads a normalization's output. `renorm` describes what happens to
// the layer's output: std::nullopt = used as is; a tensor name = RMS-normalized again with that
// gain (per head, e.g. QK-norm); "" = RMS-normalized again without a gain (Gemma 4's v norm).
// A consumer whose output is renormalized (and that has no bias) makes the input norm's rstd
// cancel for it: RMSNorm((s x) W^T) = RMSNorm(x W^T) for s > 0 (docs/design.md section 3).
// `has_bias`: every checkpoint of the architecture adds a bias (bias_name(tensor)) to the output
// (Qwen2's q, k, v); a bias a config option adds is seen from the file's tensors (audit.h).
struct Consumer {
  std::string tensor;                 // e.g. "blk.{L}.attn_q.weight"
  std::optional<std::string> renorm;  // e.g. "blk.{L}.attn_q_norm.weight"
  bool has_bias = false;
};

// One normalization and every use of its output: the linear `consumers` (which the gain folds
// into) and `direct_uses`, uses of the normed value that are not a linear layer (a residual or
// skip branch, e.g. Gemma 3n's LAuReL) — any direct use makes folding and cancellation
// ineligible. Names may contain "{L}" for the layer index. A norm with no consumers (Gemma's
// post_attention_norm / post_ffw_norm, whose output enters the residual stream) is not foldable;
// `why_not` says why (printed by `inspect`).
struct NormSite {
  std::string norm;  // e.g. "blk.{L}.attn_norm.weight"
  std::vector<Consumer> consumers;
  std::vector<std::string> direct_uses;
  std::string why_not;
  bool foldable() const { return !consumers.empty() && direct_uses.empty(); }
};

// Activation of the gated FFN: down(act(gate) * up).
enum class Activation { SiLU, GeluTanh };

// Forward-pass hooks that differ between the architectures the engine runs (data, not code
// paths). Sources: HF modeling_llama.py, modeling_gemma3.py.
struct ArchHooks {
  bool embed_scale_sqrt_hidden = false;  // Gemma: embeddings * sqrt(hidden)
  Activation act = Activation::SiLU;
  std::string post_attn_norm;  // Gemma: RMSNorm of the attention output before the residual add
  std::string post_ffn_norm;   // Gemma: RMSNorm of the FFN output before the residual add
  // Sliding-window attention: layer i is local when (i + 1) % pattern != 0 (Gemma 3: 6).
  int sliding_window_pattern = 0;
  bool uses_query_pre_attn_scalar = false;  // attention scale 1/sqrt(query_pre_attn_scalar)
};

struct ArchDescription {
  std::string name;                   // GGUF general.architecture, e.g. "llama"
  std::vector<NormSite> layer_norms;  // per layer ("{L}" in names)
  std::vector<NormSite> final_norms;  // once (output_norm -> LM head)
  // LM head: `head` when present; else tied to `tied_source` (the embedding).
  std::string head = "output.weight";
  std::string tied_source = "token_embd.weight";
  GainConvention gguf_gains = GainConvention::Plain;
  GainConvention hf_gains = GainConvention::Plain;
  RopeLayout gguf_rope = RopeLayout::Adjacent;
  RopeLayout hf_rope = RopeLayout::Neox;
  ArchHooks hooks;
  // Bias tensors of the linear layers (patterns, "blk.{L}.attn_q.bias"), added to the layer's
  // output after the FlashNorm row scale: y = rstd * (x W*^T) + b (paper Proposition 2).
  // `biases`: in every checkpoint (Qwen2: q, k, v). `attn_biases` / `mlp_biases`: those a
  // checkpoint may add: config.json's attention_bias / mlp_bias (HF, all of the group); in GGUF
  // each one present or not (llama.cpp loads them as optional tensors).
  std::vector<std::string> biases, attn_biases, mlp_biases;
  // canonical pattern -> HF pattern, "{L}" for the layer index.
  std::vector<std::pair<std::string, std::string>> hf_names;
};

// Known descriptions: "llama", "gemma3", "qwen2", "qwen3", "mistral". Throws flashnorm::Error for
// an unknown architecture name.
const ArchDescription& arch_by_name(std::string_view name);
// HF "architectures"[0] (LlamaForCausalLM, Gemma3ForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM,
// MistralForCausalLM) -> description; nullptr if unknown.
const ArchDescription* arch_by_hf_class(std::string_view hf_class);
// The same for the base-model classes without an LM head (LlamaModel, Gemma3TextModel,
// Qwen2Model, Qwen3Model, MistralModel), whose tensors are named without the "model." prefix;
// nullptr if unknown.
const ArchDescription* arch_by_hf_base_class(std::string_view hf_class);
// The prefix a base-model class's tensor names lack ("model.").
inline constexpr std::string_view kHfModelPrefix = "model.";

// The bias of a linear layer's weight: "blk.{L}.attn_q.weight" -> "blk.{L}.attn_q.bias" (any
// name ending in ".weight"; others unchanged).
std::string bias_name(std::string_view weight);

// "blk.{L}.attn_q.weight", 3 -> "blk.3.attn_q.weight".
std::string expand_layer(std::string_view pattern, int layer);
// Canonical name -> HF name (and back); std::nullopt if no pattern matches.
std::optional<std::string> to_hf_name(const ArchDescription& a, std::string_view canonical);
std::optional<std::string> from_hf_name(const ArchDescription& a, std::string_view hf);

// Metadata key marking a folded file (GGUF bool KV; safetensors __metadata__ "true").
inline constexpr std::string_view kFoldedKey = "flashnorm.folded";
// GGUF bool KV of a file folded with `fold --keep-tied-head`: the final norm keeps its gain and the
// LM head stays tied to the embedding, so engines apply that gain to x (both engines apply every
// gain the file holds; a folded file's other gains are identity).
inline constexpr std::string_view kFinalNormKeptKey = "flashnorm.final_norm_kept";

}  // namespace flashnorm
