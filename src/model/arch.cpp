#include "flashnorm/model/arch.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "flashnorm/error.h"

namespace flashnorm {
namespace {

// GGUF -> Hugging Face names that llama and Gemma checkpoints share (HF modeling_llama.py /
// modeling_gemma3.py module names; llama.cpp's tensor names).
std::vector<std::pair<std::string, std::string>> hf_names_common() {
  return {
      {"token_embd.weight", "model.embed_tokens.weight"},
      {"output_norm.weight", "model.norm.weight"},
      {"output.weight", "lm_head.weight"},
      {"blk.{L}.attn_norm.weight", "model.layers.{L}.input_layernorm.weight"},
      {"blk.{L}.attn_q.weight", "model.layers.{L}.self_attn.q_proj.weight"},
      {"blk.{L}.attn_k.weight", "model.layers.{L}.self_attn.k_proj.weight"},
      {"blk.{L}.attn_v.weight", "model.layers.{L}.self_attn.v_proj.weight"},
      {"blk.{L}.attn_output.weight", "model.layers.{L}.self_attn.o_proj.weight"},
      {"blk.{L}.ffn_gate.weight", "model.layers.{L}.mlp.gate_proj.weight"},
      {"blk.{L}.ffn_up.weight", "model.layers.{L}.mlp.up_proj.weight"},
      {"blk.{L}.ffn_down.weight", "model.layers.{L}.mlp.down_proj.weight"},
      // biases (attention_bias, mlp_bias, Qwen2's q/k/v), allowed only where the description and
      // the config say so (model.cpp)
      {"blk.{L}.attn_q.bias", "model.layers.{L}.self_attn.q_proj.bias"},
      {"blk.{L}.attn_k.bias", "model.layers.{L}.self_attn.k_proj.bias"},
      {"blk.{L}.attn_v.bias", "model.layers.{L}.self_attn.v_proj.bias"},
      {"blk.{L}.attn_output.bias", "model.layers.{L}.self_attn.o_proj.bias"},
      {"blk.{L}.ffn_gate.bias", "model.layers.{L}.mlp.gate_proj.bias"},
      {"blk.{L}.ffn_up.bias", "model.layers.{L}.mlp.up_proj.bias"},
      {"blk.{L}.ffn_down.bias", "model.layers.{L}.mlp.down_proj.bias"},
  };
}

ArchDescription make_llama() {
  ArchDescription a;
  a.name = "llama";
  a.layer_norms = {
      {"blk.{L}.attn_norm.weight",
       {{"blk.{L}.attn_q.weight"}, {"blk.{L}.attn_k.weight"}, {"blk.{L}.attn_v.weight"}}},
      {"blk.{L}.ffn_norm.weight", {{"blk.{L}.ffn_gate.weight"}, {"blk.{L}.ffn_up.weight"}}},
  };
  a.final_norms = {{"output_norm.weight", {{"output.weight"}}}};
  a.hf_names = hf_names_common();
  a.hf_names.push_back(
      {"blk.{L}.ffn_norm.weight", "model.layers.{L}.post_attention_layernorm.weight"});
  // LlamaConfig attention_bias (q, k, v and o) and mlp_bias
  a.attn_biases = {"blk.{L}.attn_q.bias", "blk.{L}.attn_k.bias", "blk.{L}.attn_v.bias",
                   "blk.{L}.attn_output.bias"};
  a.mlp_biases = {"blk.{L}.ffn_gate.bias", "blk.{L}.ffn_up.bias", "blk.{L}.ffn_down.bias"};
  return a;
}

// Qwen 2 (HF Qwen2ForCausalLM / modeling_qwen2.py; llama.cpp "qwen2"): Llama's graph with a bias
// on the q, k and v projections (never on o or the MLP), NEOX rotation in both formats (llama.cpp
// converts Qwen 2 without permuting q/k rows).
ArchDescription make_qwen2() {
  ArchDescription a = make_llama();
  a.name = "qwen2";
  for (Consumer& c : a.layer_norms[0].consumers) c.has_bias = true;
  a.biases = {"blk.{L}.attn_q.bias", "blk.{L}.attn_k.bias", "blk.{L}.attn_v.bias"};
  a.attn_biases.clear(), a.mlp_biases.clear();
  a.gguf_rope = RopeLayout::Neox;
  return a;
}

// QK-norm blocks (Gemma 3, Qwen 3): the attention norm feeds q and k, each RMS-normalized again
// per head (so the attention norm's rstd cancels for them), and v, used as is.
NormSite qk_norm_attention() {
  return {"blk.{L}.attn_norm.weight",
          {{"blk.{L}.attn_q.weight", "blk.{L}.attn_q_norm.weight"},
           {"blk.{L}.attn_k.weight", "blk.{L}.attn_k_norm.weight"},
           {"blk.{L}.attn_v.weight"}}};
}

// The per-head q or k norm itself: no linear layer reads it, so nothing folds into one.
NormSite qk_norm_site(const std::string& qk) {
  return {"blk.{L}.attn_" + qk + "_norm.weight",
          {},
          {},
          "per-head norm before RoPE, not a linear layer"};
}

// Gemma 3 (HF Gemma3ForCausalLM / modeling_gemma3.py; GGUF names from llama.cpp's converter,
// which adds the 1 of `1 + w` into every norm gain and keeps NEOX q/k rows).
ArchDescription make_gemma3() {
  ArchDescription a;
  a.name = "gemma3";
  a.layer_norms = {
      qk_norm_attention(),
      {"blk.{L}.post_attention_norm.weight", {}, {}, "its output enters the residual stream"},
      {"blk.{L}.ffn_norm.weight", {{"blk.{L}.ffn_gate.weight"}, {"blk.{L}.ffn_up.weight"}}},
      {"blk.{L}.post_ffw_norm.weight", {}, {}, "its output enters the residual stream"},
      qk_norm_site("q"),
      qk_norm_site("k"),
  };
  a.final_norms = {{"output_norm.weight", {{"output.weight"}}}};
  a.gguf_gains = GainConvention::Plain;
  a.hf_gains = GainConvention::OnePlus;
  a.gguf_rope = RopeLayout::Neox;
  a.hf_rope = RopeLayout::Neox;
  a.hooks.embed_scale_sqrt_hidden = true;
  a.hooks.act = Activation::GeluTanh;
  a.hooks.post_attn_norm = "blk.{L}.post_attention_norm.weight";
  a.hooks.post_ffn_norm = "blk.{L}.post_ffw_norm.weight";
  a.hooks.sliding_window_pattern = 6;
  a.hooks.uses_query_pre_attn_scalar = true;
  a.hf_names = hf_names_common();
  a.hf_names.insert(
      a.hf_names.end(),
      {
          {"blk.{L}.attn_q_norm.weight", "model.layers.{L}.self_attn.q_norm.weight"},
          {"blk.{L}.attn_k_norm.weight", "model.layers.{L}.self_attn.k_norm.weight"},
          {"blk.{L}.post_attention_norm.weight",
           "model.layers.{L}.post_attention_layernorm.weight"},
          {"blk.{L}.ffn_norm.weight", "model.layers.{L}.pre_feedforward_layernorm.weight"},
          {"blk.{L}.post_ffw_norm.weight", "model.layers.{L}.post_feedforward_layernorm.weight"},
      });

  return a;
}

// Qwen 3 (HF Qwen3ForCausalLM / modeling_qwen3.py; llama.cpp "qwen3"): Llama's blocks with a
// per-head RMSNorm of q and k before RoPE (plain gains), NEOX rotation in both formats.
ArchDescription make_qwen3() {
  ArchDescription a = make_llama();
  a.name = "qwen3";
  a.layer_norms = {
      qk_norm_attention(),
      {"blk.{L}.ffn_norm.weight", {{"blk.{L}.ffn_gate.weight"}, {"blk.{L}.ffn_up.weight"}}},
      qk_norm_site("q"),
      qk_norm_site("k"),
  };
  a.gguf_rope = RopeLayout::Neox;
  a.hf_names.insert(a.hf_names.end(),
                    {{"blk.{L}.attn_q_norm.weight", "model.layers.{L}.self_attn.q_norm.weight"},
                     {"blk.{L}.attn_k_norm.weight", "model.layers.{L}.self_attn.k_norm.weight"}});
  a.mlp_biases.clear();  // Qwen3Config: attention_bias only (kept from Llama)
  return a;
}

// Mistral (HF MistralForCausalLM / modeling_mistral.py): Llama's graph; its config's sliding
// window applies to every layer; MistralConfig has no attention_bias / mlp_bias. llama.cpp
// converts Mistral checkpoints to "llama" GGUF files.
ArchDescription make_mistral() {
  ArchDescription a = make_llama();
  a.name = "mistral";
  a.attn_biases.clear(), a.mlp_biases.clear();
  return a;
}

const std::vector<ArchDescription>& registry() {
  static const std::vector<ArchDescription> r = {make_llama(), make_gemma3(), make_qwen2(),
                                                 make_qwen3(), make_mistral()};
  return r;
}

// Matches `name` against `pattern` with "{L}" as a decimal layer index; returns the index
// (or -1 for patterns without "{L}") or std::nullopt.
std::optional<int> match_pattern(std::string_view pattern, std::string_view name) {
  auto p = pattern.find("{L}");
  if (p == std::string_view::npos) {
    return pattern == name ? std::optional<int>(-1) : std::nullopt;
  }
  std::string_view pre = pattern.substr(0, p), post = pattern.substr(p + 3);
  if (name.size() <= pre.size() + post.size() || !name.starts_with(pre) || !name.ends_with(post)) {
    return std::nullopt;
  }
  std::string_view digits = name.substr(pre.size(), name.size() - pre.size() - post.size());
  if (digits.size() > 6) return std::nullopt;
  int v = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

std::optional<std::string> map_name(const ArchDescription& a, std::string_view name, bool to_hf) {
  for (const auto& [canon, hf] : a.hf_names) {
    const std::string& from = to_hf ? canon : hf;
    const std::string& to = to_hf ? hf : canon;
    if (auto l = match_pattern(from, name)) return *l < 0 ? to : expand_layer(to, *l);
  }
  return std::nullopt;
}

}  // namespace

const ArchDescription& arch_by_name(std::string_view name) {
  for (const auto& a : registry()) {
    if (a.name == name) return a;
  }
  // quoted as a JSON string: a NUL, control bytes or invalid UTF-8 from a file reach the terminal
  // escaped, not raw
  throw Error(
      fmt::format("unsupported architecture {} (supported: llama, gemma3, qwen2, qwen3, mistral)",
                  nlohmann::json(std::string(name))
                      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)));
}

const ArchDescription* arch_by_hf_class(std::string_view hf_class) {
  if (hf_class == "LlamaForCausalLM") return &arch_by_name("llama");
  if (hf_class == "Gemma3ForCausalLM") return &arch_by_name("gemma3");
  if (hf_class == "Qwen2ForCausalLM") return &arch_by_name("qwen2");
  if (hf_class == "Qwen3ForCausalLM") return &arch_by_name("qwen3");
  if (hf_class == "MistralForCausalLM") return &arch_by_name("mistral");
  return nullptr;
}

const ArchDescription* arch_by_hf_base_class(std::string_view hf_class) {
  if (hf_class == "LlamaModel") return &arch_by_name("llama");
  if (hf_class == "Gemma3TextModel") return &arch_by_name("gemma3");
  if (hf_class == "Qwen2Model") return &arch_by_name("qwen2");
  if (hf_class == "Qwen3Model") return &arch_by_name("qwen3");
  if (hf_class == "MistralModel") return &arch_by_name("mistral");
  return nullptr;
}

std::string bias_name(std::string_view weight) {
  constexpr std::string_view kWeight = ".weight";
  if (!weight.ends_with(kWeight)) return std::string(weight);
  return std::string(weight.substr(0, weight.size() - kWeight.size())) + ".bias";
}

std::string expand_layer(std::string_view pattern, int layer) {
  std::string s(pattern);
  auto p = s.find("{L}");
  if (p != std::string::npos) s.replace(p, 3, std::to_string(layer));
  return s;
}

std::optional<std::string> to_hf_name(const ArchDescription& a, std::string_view canonical) {
  return map_name(a, canonical, true);
}

std::optional<std::string> from_hf_name(const ArchDescription& a, std::string_view hf) {
  return map_name(a, hf, false);
}

}  // namespace flashnorm
