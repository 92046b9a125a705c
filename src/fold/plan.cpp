#include "plan.h"

namespace flashnorm::detail {

FoldPlan make_fold_plan(const ArchDescription& a, int n_layer) {
  FoldPlan p;
  auto add = [&](const NormSite& s, int layer) {
    if (!s.foldable()) return;
    const std::string norm = expand_layer(s.norm, layer);
    p.norms.push_back(norm);
    for (const auto& c : s.consumers) p.consumer_to_norm[expand_layer(c.tensor, layer)] = norm;
  };
  for (int l = 0; l < n_layer; ++l) {
    for (const auto& s : a.layer_norms) add(s, l);
  }
  for (const auto& s : a.final_norms) add(s, 0);
  return p;
}

std::string tensor_kind(const std::string& name) {
  std::string k = name;
  if (k.starts_with("blk.")) {
    auto dot = k.find('.', 4);
    k = dot == std::string::npos ? k : k.substr(dot + 1);
  }
  if (k.ends_with(".weight")) k.resize(k.size() - 7);
  return k;
}

}  // namespace flashnorm::detail
