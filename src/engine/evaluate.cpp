#include "flashnorm/engine/evaluate.h"

#include <algorithm>
#include <cmath>

#include "flashnorm/engine/sampler.h"
#include "flashnorm/io/error.h"

namespace flashnorm {

double ComparisonStats::ppl_a() const { return std::exp(nll_a / double(positions)); }
double ComparisonStats::ppl_b() const { return std::exp(nll_b / double(positions)); }

double log_prob(std::span<const float> logits, int32_t target) {
  double mx = -INFINITY;
  for (float v : logits) mx = std::max(mx, double(v));
  double sum = 0;
  for (float v : logits) sum += std::exp(double(v) - mx);
  return double(logits[target]) - mx - std::log(sum);
}

ComparisonStats compare_teacher_forced(CpuEngine& a, CpuEngine* b,
                                       std::span<const int32_t> tokens, int ctx,
                                       const std::function<void(size_t, size_t)>& progress) {
  if (ctx < 2 || tokens.size() < 2) throw Error("compare: need ctx >= 2 and at least 2 tokens");
  ComparisonStats st;
  const size_t V = a.config().vocab;
  const size_t n_chunks = (tokens.size() - 1 + ctx - 1) / ctx;
  size_t chunk = 0;
  for (size_t start = 0; start + 1 < tokens.size(); start += ctx) {
    const size_t len = std::min<size_t>(ctx, tokens.size() - start);
    if (len < 2) break;
    auto span = tokens.subspan(start, len);
    a.reset();
    std::vector<float> la = a.forward(span, true), lb;
    if (b) {
      b->reset();
      lb = b->forward(span, true);
    }
    for (size_t t = 0; t + 1 < len; ++t) {
      std::span<const float> ra(&la[t * V], V);
      const int32_t next = span[t + 1];
      st.nll_a -= log_prob(ra, next);
      if (b) {
        std::span<const float> rb(&lb[t * V], V);
        st.nll_b -= log_prob(rb, next);
        double scale = 0, diff = 0;
        for (size_t j = 0; j < V; ++j) {
          scale = std::max(scale, std::fabs(double(ra[j])));
          diff = std::max(diff, std::fabs(double(ra[j]) - rb[j]));
        }
        st.max_rel_logit_diff = std::max(st.max_rel_logit_diff, diff / std::max(scale, 1e-30));
        st.top1_agree += argmax(ra) == argmax(rb);
      }
      ++st.positions;
    }
    if (progress) progress(++chunk, n_chunks);
  }
  return st;
}

std::vector<int32_t> greedy_tokens(CpuEngine& e, std::span<const int32_t> prompt, int n) {
  e.reset();
  std::vector<int32_t> out;
  std::vector<float> logits = e.forward(prompt);
  for (int i = 0; i < n; ++i) {
    int32_t t = argmax(logits);
    out.push_back(t);
    if (i + 1 < n) logits = e.forward(std::span<const int32_t>(&t, 1));
  }
  return out;
}

}  // namespace flashnorm
