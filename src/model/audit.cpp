#include "flashnorm/model/audit.h"

#include <fmt/format.h>

#include <cmath>

namespace flashnorm {

std::vector<NormAudit> audit_layer(const ArchDescription& a, int layer,
                                   const std::function<bool(const std::string&)>& has_tensor) {
  std::vector<NormAudit> out;
  const auto& sites = layer < 0 ? a.final_norms : a.layer_norms;
  for (const NormSite& s : sites) {
    NormAudit na;
    na.norm = expand_layer(s.norm, std::max(layer, 0));
    if (!has_tensor(na.norm)) continue;
    na.foldable = s.foldable();
    if (!s.direct_uses.empty()) {
      na.fold_reason = fmt::format("its output is used directly by {}",
                                   expand_layer(s.direct_uses[0], std::max(layer, 0)));
    } else if (s.consumers.empty()) {
      na.fold_reason = s.why_not.empty() ? "no linear layer reads it" : s.why_not;
    }
    bool all = !s.consumers.empty() && s.direct_uses.empty();
    for (const Consumer& c : s.consumers) {
      ConsumerAudit ca;
      ca.tensor = expand_layer(c.tensor, std::max(layer, 0));
      ca.biased = c.has_bias || has_tensor(bias_name(ca.tensor));
      if (!s.direct_uses.empty()) {
        ca.reason = na.fold_reason;
      } else if (!c.renorm) {
        ca.reason = "output used without renormalization";
      } else if (ca.biased) {
        ca.reason = "bias after the projection breaks scale invariance";
      } else if (!c.renorm->empty() && !has_tensor(expand_layer(*c.renorm, std::max(layer, 0)))) {
        ca.reason = fmt::format("renorm gain {} missing from the file",
                                expand_layer(*c.renorm, std::max(layer, 0)));
      } else {
        ca.cancellable = true;
        ca.reason = c.renorm->empty()
                        ? "output renormalized (RMSNorm without gain)"
                        : "output renormalized by " + expand_layer(*c.renorm, std::max(layer, 0));
      }
      all = all && ca.cancellable;
      na.consumers.push_back(std::move(ca));
    }
    na.skip_reduction = all;
    out.push_back(std::move(na));
  }
  return out;
}

double cancellation_rel_error(double ms, double c, double eps) {
  return std::sqrt((ms + eps / (c * c)) / (ms + eps)) - 1.0;
}

}  // namespace flashnorm
