#include "flashnorm/engine/evaluate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "flashnorm/engine/sampler.h"
#include "flashnorm/error.h"

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

double max_rel_diff(std::span<const float> ref, std::span<const float> got) {
  double scale = 0, diff = 0;
  for (size_t j = 0; j < ref.size(); ++j) {
    const double d = std::fabs(double(ref[j]) - got[j]);
    // std::max would drop a NaN (every comparison with it is false): a NaN or infinite value on
    // either side is an infinite difference
    if (!std::isfinite(d)) return std::numeric_limits<double>::infinity();
    scale = std::max(scale, std::fabs(double(ref[j])));
    diff = std::max(diff, d);
  }
  return diff / std::max(scale, 1e-30);
}

namespace {

// One chunk of a text: its tokens and the first position whose prediction is scored.
struct Chunk {
  std::vector<int32_t> seq;
  size_t first_scored = 0;
};

std::vector<Chunk> cut(std::span<const int32_t> tokens, const TextChunks& c) {
  std::vector<Chunk> out;
  const size_t ctx = c.ctx;
  if (c.layout == ChunkLayout::kLlamaPerplexity) {
    if (ctx < 3) throw Error("compare: llama-perplexity chunks need ctx >= 3 (a scored position)");
    std::vector<int32_t> s;
    if (c.bos) s.push_back(*c.bos);
    s.insert(s.end(), tokens.begin(), tokens.end());
    for (size_t start = 0; start + ctx <= s.size(); start += ctx) {
      Chunk ch{{s.begin() + start, s.begin() + start + ctx}, ctx / 2};
      if (c.bos) ch.seq[0] = *c.bos;
      out.push_back(std::move(ch));
    }
    if (out.empty()) {
      throw Error(fmt::format("compare: {} tokens make no whole chunk of {}", s.size(), ctx));
    }
    return out;
  }
  const size_t step = c.bos ? ctx - 1 : ctx;  // text tokens per chunk
  for (size_t start = 0; start < tokens.size(); start += step) {
    Chunk ch;
    if (c.bos) ch.seq.push_back(*c.bos);
    const size_t take = std::min(step, tokens.size() - start);
    ch.seq.insert(ch.seq.end(), tokens.begin() + start, tokens.begin() + start + take);
    if (ch.seq.size() < 2) break;
    out.push_back(std::move(ch));
  }
  return out;
}

}  // namespace

std::vector<ComparisonStats> compare_teacher_forced(
    Engine& a, std::span<Engine* const> bs, std::span<const int32_t> tokens,
    const TextChunks& chunks, const std::function<void(size_t, size_t)>& progress) {
  if (chunks.ctx < 2 || tokens.size() < 2) {
    throw Error("compare: need ctx >= 2 and at least 2 tokens");
  }
  for (Engine* b : bs) {
    if (b->config().vocab != a.config().vocab) throw Error("compare: vocabularies differ");
  }
  std::vector<ComparisonStats> st(std::max<size_t>(bs.size(), 1));
  const size_t V = a.config().vocab;
  const std::vector<Chunk> all = cut(tokens, chunks);
  size_t done = 0;
  for (const Chunk& ch : all) {
    std::span<const int32_t> span(ch.seq);
    const size_t len = span.size();
    a.reset();
    const std::vector<float> la = a.forward(span, true);
    double nll_a = 0;
    for (size_t t = ch.first_scored; t + 1 < len; ++t) {
      nll_a -= log_prob({&la[t * V], V}, span[t + 1]);
    }
    for (auto& s : st) {
      s.nll_a += nll_a;
      s.positions += len - 1 - ch.first_scored;
    }
    for (size_t k = 0; k < bs.size(); ++k) {
      bs[k]->reset();
      const std::vector<float> lb = bs[k]->forward(span, true);
      ComparisonStats& s = st[k];
      for (size_t t = ch.first_scored; t + 1 < len; ++t) {
        std::span<const float> ra(&la[t * V], V), rb(&lb[t * V], V);
        s.nll_b -= log_prob(rb, span[t + 1]);
        s.max_rel_logit_diff = std::max(s.max_rel_logit_diff, max_rel_diff(ra, rb));
        s.top1_agree += argmax(ra) == argmax(rb);
      }
    }
    if (progress) progress(++done, all.size());
  }
  return st;
}

std::vector<ComparisonStats> compare_teacher_forced(
    Engine& a, std::span<Engine* const> bs, std::span<const int32_t> tokens, int ctx,
    const std::function<void(size_t, size_t)>& progress, std::optional<int32_t> bos) {
  return compare_teacher_forced(a, bs, tokens, TextChunks{.ctx = ctx, .bos = bos}, progress);
}

ComparisonStats compare_teacher_forced(Engine& a, Engine* b, std::span<const int32_t> tokens,
                                       int ctx, const std::function<void(size_t, size_t)>& progress,
                                       std::optional<int32_t> bos) {
  std::vector<Engine*> bs;
  if (b) bs.push_back(b);
  return compare_teacher_forced(a, bs, tokens, ctx, progress, bos)[0];
}

std::vector<int32_t> greedy_tokens(Engine& e, std::span<const int32_t> prompt, int n) {
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
