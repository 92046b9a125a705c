// Graph-level eligibility audit for dropped redundant normalization (docs/design.md
// section 3). For each normalization and each consumer of its output: the norm's rstd cancels
// for that consumer when the consumer is a bias-free linear layer whose output is RMS-normalized
// again (QK-norm), because RMSNorm((s x) W^T) = RMSNorm(x W^T) for any s > 0. The whole rstd
// reduction can be skipped only when every consumer is cancellable and nothing else (a residual
// or skip branch) uses the normed value. Decided from the graph (ArchDescription plus the tensors
// the file has), never from the architecture's name.
//
// eps bound: with the cancelled scale c = rstd(x) and the consumer output q = x W^T (raw x), the
// renormalized output differs from the exact one by the factor sqrt(1 + u) with
// u = (1 - c^2) * eps / (c^2 * (ms(q) + eps)), ms(q) = mean(q^2) per renormalized row (head).
// So the relative error of every renormalized row is at most |u| (for any c; at most |u|/2 when
// c <= 1) and about |u|/2 to first order; exactly 0 when eps = 0.
// cancellation_rel_error() computes the exact sqrt(1 + u) - 1.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "flashnorm/model/arch.h"

namespace flashnorm {

struct ConsumerAudit {
  std::string tensor;
  // a bias is added to the output (the description's has_bias, or the file holds
  // bias_name(tensor)): with deferred normalization it is added after the row scale,
  // y = rstd * (x W*^T) + b, and it breaks cancellation
  bool biased = false;
  bool cancellable = false;
  std::string reason;  // e.g. "output renormalized by blk.0.attn_q_norm.weight"
};

struct NormAudit {
  std::string norm;
  bool foldable = false;
  std::string fold_reason;  // why not, when !foldable
  std::vector<ConsumerAudit> consumers;
  bool skip_reduction = false;  // every consumer cancellable and no direct use
};

// Audits one layer (layer < 0: the final norms). `has_tensor` says whether the file holds a
// tensor (a named renorm gain that is missing makes the consumer not cancellable; a consumer's
// bias tensor makes it biased).
std::vector<NormAudit> audit_layer(const ArchDescription& a, int layer,
                                   const std::function<bool(const std::string&)>& has_tensor);

// Exact relative change of a renormalized row when the input scale c is dropped:
// sqrt((ms + eps / c^2) / (ms + eps)) - 1, where ms = mean(q^2) of the raw-x output row.
double cancellation_rel_error(double ms, double c, double eps);

}  // namespace flashnorm
