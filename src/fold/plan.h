// Which tensors a fold rewrites, derived from the architecture description (internal).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "flashnorm/model/arch.h"

namespace flashnorm::detail {

struct FoldPlan {
  std::map<std::string, std::string> consumer_to_norm;  // canonical consumer -> canonical norm
  std::vector<std::string> norms;                       // foldable norms, canonical
};

FoldPlan make_fold_plan(const ArchDescription& a, int n_layer);

// "blk.3.attn_q.weight" -> "attn_q"; "output.weight" -> "output".
std::string tensor_kind(const std::string& canonical);

}  // namespace flashnorm::detail
