#include "flashnorm/engine/embedder.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "flashnorm/error.h"
#include "flashnorm/fold/fold_gain.h"

namespace flashnorm {
namespace {

// x / max(|x|, 1e-12) (torch.nn.functional.normalize's eps), the norm summed in fp64.
void l2_normalize(std::span<float> x) {
  double ss = 0;
  for (float v : x) ss += double(v) * v;
  const double n = std::max(std::sqrt(ss), 1e-12);
  for (float& v : x) v = static_cast<float>(v / n);
}

// rows [n, H] of one input -> one vector [H].
std::vector<float> pool(Pooling p, const float* rows, int n, int H) {
  std::vector<float> out(H);
  if (p == Pooling::kCls || p == Pooling::kLastToken) {  // encode returned that one row
    std::copy_n(rows, H, out.begin());
    return out;
  }
  for (int i = 0; i < H; ++i) {
    double acc = p == Pooling::kMax ? -INFINITY : 0.0, wsum = 0;
    for (int t = 0; t < n; ++t) {
      const double v = rows[size_t(t) * H + i];
      if (p == Pooling::kMax) {
        acc = std::max(acc, v);
      } else {
        const double w = p == Pooling::kWeightedMean ? t + 1 : 1;
        acc += w * v;
        wsum += w;
      }
    }
    if (p == Pooling::kMean || p == Pooling::kWeightedMean) acc /= wsum;
    if (p == Pooling::kMeanSqrtLen) acc /= std::sqrt(double(n));
    out[i] = static_cast<float>(acc);
  }
  return out;
}

// y = act(x W^T + b), fp64 sums.
std::vector<float> dense(const DenseLayer& d, std::span<const float> x) {
  std::vector<float> y(d.out);
  for (int o = 0; o < d.out; ++o) {
    const float* w = &d.weight[size_t(o) * d.in];
    double acc = d.bias.empty() ? 0.0 : d.bias[o];
    for (int i = 0; i < d.in; ++i) acc += double(w[i]) * x[i];
    const float v = static_cast<float>(acc);
    y[o] = d.act == DenseLayer::Activation::kTanh ? std::tanh(v) : v;
  }
  return y;
}

}  // namespace

Embedder::Embedder(Model model, Tokenizer tokenizer, EmbeddingSpec spec, NormMode mode,
                   const EngineOptions& engine, const EmbedderOptions& o)
    : tok_(std::move(tokenizer)), spec_(std::move(spec)), opt_(o) {
  const int hidden = model.cfg.hidden;
  dims_ = spec_.dimensions(hidden);
  if (!spec_.dense.empty() && spec_.dense[0].in != hidden) {
    throw Error(fmt::format("{}: the first Dense layer takes {} values, the model gives {}",
                            model.source.string(), spec_.dense[0].in, hidden));
  }
  if (mode == NormMode::FlashNorm) {
    audit_ = audit_pooled_norm(spec_);
    final_norm_.rstd = !audit_.rstd_cancels;
    if (audit_.gain_folds) {
      // W*[r, i] = g_i W[r, i], fp64 product, one rounding
      const Tensor& g = model.get("output_norm.weight");
      const std::vector<double> gain = gain_multipliers(g.data, model.cfg.gains);
      DenseLayer& d = spec_.dense[0];
      std::vector<float> folded(d.weight.size());
      fold_gain(d.weight, size_t(d.in), gain, FoldTarget::kF32, folded);
      d.weight = std::move(folded);
      final_norm_.gain = false;
    }
  } else {
    audit_.reason = "standard mode";
  }
  if (spec_.pooling == Pooling::kCls) rows_ = EncodeRows::kFirst;
  if (spec_.pooling == Pooling::kLastToken) rows_ = EncodeRows::kLast;
  engine_ = make_engine(std::move(model), mode, engine);
}

std::string Embedder::describe() const {
  std::string s = fmt::format("{}; {} pooling, {} Dense, {}", describe_engine(*engine_),
                              pooling_name(spec_.pooling), spec_.dense.size(),
                              spec_.normalize ? "normalize" : "no normalize");
  if (engine_->mode() == NormMode::FlashNorm) {
    s += fmt::format("; final rstd {} ({})", final_norm_.rstd ? "kept" : "dropped", audit_.reason);
    if (!final_norm_.gain) s += "; final gain folded into Dense 0";
  }
  return s;
}

std::vector<int32_t> Embedder::tokenize(std::string_view text, std::string_view prompt_name) const {
  std::string name(prompt_name.empty() ? spec_.default_prompt : std::string(prompt_name));
  std::string full;
  if (!name.empty()) {
    const auto it = spec_.prompts.find(name);
    if (it == spec_.prompts.end()) {
      throw Error(fmt::format("prompt name '{}' is not one of the model's prompts", name));
    }
    full = it->second;
  }
  full += text;
  std::vector<int32_t> ids;
  if (tok_.add_bos() && tok_.bos()) ids.push_back(*tok_.bos());
  const std::vector<int32_t> body = tok_.encode(full);
  ids.insert(ids.end(), body.begin(), body.end());
  if (tok_.appended()) ids.push_back(*tok_.appended());
  return ids;
}

std::optional<std::string> Embedder::input_problem(std::span<const int32_t> ids, int limit) const {
  const int ctx = engine_->max_context(), vocab = engine_->config().vocab;
  limit = limit > 0 ? std::min(limit, ctx) : ctx;
  if (ids.empty()) return "is empty";
  if (ids.size() > size_t(limit)) {
    return fmt::format("has {} tokens, more than the limit of {}", ids.size(), limit);
  }
  for (int32_t t : ids) {
    if (t < 0 || t >= vocab) {
      return fmt::format("token id {} is outside the vocabulary of {}", t, vocab);
    }
  }
  return std::nullopt;
}

std::vector<Embedding> Embedder::embed(std::span<const EmbedInput> inputs, int dimensions,
                                       std::string_view prompt_name) {
  if (dimensions < 0 || dimensions > dims_) {
    throw Error(fmt::format("dimensions {} is outside 1..{}, the model's embedding size",
                            dimensions, dims_));
  }
  std::vector<std::vector<int32_t>> ids(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    ids[i] = inputs[i].is_tokens ? inputs[i].tokens : tokenize(inputs[i].text, prompt_name);
    // texts cut to max_seq_length, as sentence-transformers' tokenizer call cuts them: the text's
    // tokens, keeping the appended special token last
    if (!inputs[i].is_tokens && spec_.max_tokens > 0 && ids[i].size() > size_t(spec_.max_tokens)) {
      ids[i].resize(spec_.max_tokens);
      if (tok_.appended()) ids[i].back() = *tok_.appended();
    }
    if (const auto problem = input_problem(ids[i])) {
      throw Error(fmt::format("input {}: {}", i, *problem));
    }
  }
  std::vector<Embedding> out(inputs.size());
  const int H = engine_->config().hidden;
  for (size_t first = 0; first < ids.size();) {
    // inputs [first, last) in one pass: up to max_batch_tokens rows (one input at least)
    size_t last = first;
    size_t rows = 0;
    while (last < ids.size() &&
           (last == first || rows + ids[last].size() <= size_t(opt_.max_batch_tokens))) {
      rows += ids[last++].size();
    }
    std::vector<std::span<const int32_t>> batch(ids.begin() + first, ids.begin() + last);
    const std::vector<float> h =
        engine_->encode(batch, EncodeOptions{.final_norm = final_norm_, .rows = rows_});
    size_t r = 0;
    for (size_t i = first; i < last; ++i) {
      const int n = rows_ == EncodeRows::kAll ? static_cast<int>(ids[i].size()) : 1;
      std::vector<float> v = pool(spec_.pooling, &h[r * H], n, H);
      r += n;
      for (const DenseLayer& d : spec_.dense) v = dense(d, v);
      if (spec_.normalize) l2_normalize(v);
      if (dimensions > 0 && dimensions < dims_) {
        v.resize(dimensions);
        if (spec_.normalize) l2_normalize(v);
      }
      out[i] = {.values = std::move(v), .tokens = static_cast<int>(ids[i].size())};
    }
    first = last;
  }
  return out;
}

}  // namespace flashnorm
