#include "flashnorm/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "flashnorm/error.h"

namespace flashnorm {

int32_t argmax(std::span<const float> logits) {
  int32_t best = 0;
  float bv = -INFINITY;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] > bv) {
      bv = logits[i];
      best = static_cast<int32_t>(i);
    }
  }
  return best;
}

Sampler::Sampler(SamplerOptions opt) : opt_(opt), rng_(opt.seed) {
  if (!(opt.temperature >= 0.0f)) throw Error("temperature must be >= 0");
  if (!(opt.top_p > 0.0f && opt.top_p <= 1.0f)) throw Error("top-p must be in (0, 1]");
}

int32_t Sampler::sample(std::span<const float> logits) {
  if (opt_.temperature == 0.0f) return argmax(logits);
  std::vector<int32_t> idx(logits.size());
  std::iota(idx.begin(), idx.end(), 0);
  auto by_logit = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  size_t n = idx.size();
  if (opt_.top_k > 0 && size_t(opt_.top_k) < n) {
    n = size_t(opt_.top_k);
    std::partial_sort(idx.begin(), idx.begin() + n, idx.end(), by_logit);
  } else {
    std::sort(idx.begin(), idx.end(), by_logit);
  }
  std::vector<double> p(n);
  const double mx = logits[idx[0]];
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += p[i] = std::exp((logits[idx[i]] - mx) / opt_.temperature);
  size_t keep = n;
  double cum = 0;
  for (size_t i = 0; i < n; ++i) {
    cum += p[i] / sum;
    if (cum >= opt_.top_p) {
      keep = i + 1;
      break;
    }
  }
  std::discrete_distribution<size_t> d(p.begin(), p.begin() + keep);
  return idx[d(rng_)];
}

}  // namespace flashnorm
