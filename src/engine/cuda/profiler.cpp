// The CUDA engine's step profiler (internal.h): per-class sums of the event-bracketed kernels of
// one eager pass.
#include <algorithm>

#include "flashnorm/median.h"
#include "internal.h"

namespace flashnorm::cuda_engine {

std::vector<double> StepProfiler::class_us() const {
  std::vector<double> sum(kClasses, 0.0);
  for (size_t i = 0; i < cls_.size(); ++i) {
    float ms = 0;
    FN_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[2 * i]->get(), events_[2 * i + 1]->get()));
    sum[cls_[i]] += 1000.0 * ms;
  }
  return sum;
}

StepProfile median_profile(const std::vector<std::vector<double>>& per_class) {
  StepProfile p;
  p.norm_us = median(per_class[kNorm]);
  p.normed_proj_us = median(per_class[kNormedProj]);
  p.other_proj_us = median(per_class[kOtherProj]);
  p.attention_us = median(per_class[kAttn]);
  p.other_us = median(per_class[kOther]);
  return p;
}

}  // namespace flashnorm::cuda_engine
