// flashnorm::hf_plan: what flashnorm.hf needs to know about a transformers model, taken from the
// C++ architecture description (flashnorm/model/arch.h) and the cancellation audit
// (flashnorm/model/audit.h), so that Python holds no second table. Schema: registration.cpp.
//
// hf_plan(hf_class, num_layers, tensors) -> JSON (every name a Hugging Face parameter name):
//   {"arch": "gemma3", "gain_convention": "plain" | "one_plus",
//    "head": "lm_head.weight", "tied_source": "model.embed_tokens.weight",
//    "layers": [[site, ...] per layer 0 .. num_layers - 1], "final": [site, ...]}
//   site = {"norm": name, "foldable": bool, "fold_reason": str, "skip_reduction": bool,
//           "consumers": [{"tensor": name, "bias": name | null, "cancellable": bool,
//                          "reason": str}, ...]}
//   bias: the consumer's bias parameter when the audit finds it biased (the description's has_bias,
//   Qwen2's q/k/v, or the bias among `tensors`, e.g. Llama's attention_bias), added after the row
//   scale; null for a bias-free consumer.
// `tensors` lists the model's parameter names (the audit's "does the file hold it"); a site whose
// norm is not among them is left out (audit_layer). Errors: an unknown class (naming the ones
// known), num_layers < 0, a description name without a Hugging Face spelling.
#include <fmt/format.h>
#include <torch/csrc/stable/library.h>

#include <nlohmann/json.hpp>
#include <unordered_set>

#include "flashnorm/model/arch.h"
#include "flashnorm/model/audit.h"
#include "tensor_checks.h"

namespace flashnorm::torch_ops {
namespace {

std::string hf(const ArchDescription& a, const std::string& canonical) {
  auto n = to_hf_name(a, canonical);
  require(n.has_value(), "hf_plan", "{} has no Hugging Face name in the {} description", canonical,
          a.name);
  return *n;
}

nlohmann::json sites(const ArchDescription& a, int layer,
                     const std::unordered_set<std::string>& canonical) {
  nlohmann::json out = nlohmann::json::array();
  auto has = [&](const std::string& n) { return canonical.count(n) > 0; };
  for (const NormAudit& na : audit_layer(a, layer, has)) {
    nlohmann::json consumers = nlohmann::json::array();
    for (const ConsumerAudit& c : na.consumers) {
      nlohmann::json bias = nullptr;
      if (c.biased) bias = hf(a, bias_name(c.tensor));
      consumers.push_back({{"tensor", hf(a, c.tensor)},
                           {"bias", bias},
                           {"cancellable", c.cancellable},
                           {"reason", c.reason}});
    }
    out.push_back({{"norm", hf(a, na.norm)},
                   {"foldable", na.foldable},
                   {"fold_reason", na.fold_reason},
                   {"skip_reduction", na.skip_reduction},
                   {"consumers", consumers}});
  }
  return out;
}

std::string hf_plan(std::string hf_class, int64_t num_layers, std::vector<std::string> tensors) {
  const ArchDescription* a = arch_by_hf_class(hf_class);
  require(a != nullptr, "hf_plan",
          "unsupported model class {} (supported: LlamaForCausalLM, Gemma3ForCausalLM, "
          "Qwen2ForCausalLM, Qwen3ForCausalLM, MistralForCausalLM)",
          nlohmann::json(hf_class).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  require(num_layers >= 0, "hf_plan", "num_layers must be >= 0, got {}", num_layers);
  std::unordered_set<std::string> canonical;
  for (const std::string& t : tensors) {
    if (auto c = from_hf_name(*a, t)) canonical.insert(*c);
  }
  nlohmann::json layers = nlohmann::json::array();
  for (int l = 0; l < num_layers; ++l) layers.push_back(sites(*a, l, canonical));
  nlohmann::json j = {
      {"arch", a->name},
      {"gain_convention", a->hf_gains == GainConvention::OnePlus ? "one_plus" : "plain"},
      {"head", hf(*a, a->head)},
      {"tied_source", hf(*a, a->tied_source)},
      {"layers", layers},
      {"final", sites(*a, -1, canonical)}};
  return j.dump();
}

}  // namespace

// No tensor arguments: registered for every backend.
STABLE_TORCH_LIBRARY_IMPL(flashnorm, CompositeExplicitAutograd, m) {
  m.impl("hf_plan", TORCH_BOX(&hf_plan));
}

}  // namespace flashnorm::torch_ops
