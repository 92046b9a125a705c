#include "flashnorm/engine/cpu_engine.h"

#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "flashnorm/io/error.h"

namespace flashnorm {
namespace {

// Y[T, N] = X[T, K] W[N, K]^T.
void matmul(const float* x, int T, const float* w, int n, int k, float* y) {
  if (T == 1) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, n, k, 1.0f, w, k, x, 1, 0.0f, y, 1);
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, n, k, 1.0f, x, k, w, k, 0.0f, y, n);
  }
}

// rstd = 1 / sqrt(mean(x^2) + eps), sum of squares accumulated in fp64.
float rstd(const float* x, int k, float eps) {
  double ss = 0;
  for (int i = 0; i < k; ++i) ss += double(x[i]) * x[i];
  return static_cast<float>(1.0 / std::sqrt(ss / k + eps));
}

// Returns W diag(g) rounded once to fp32 (product formed in fp64), or a copy of W.
std::vector<float> fold_columns(const Tensor& w, const float* gain) {
  std::vector<float> out(w.data);
  if (!gain) return out;
  const size_t k = w.cols();
  for (size_t r = 0; r < w.rows(); ++r) {
    float* row = out.data() + r * k;
    for (size_t i = 0; i < k; ++i) row[i] = static_cast<float>(double(row[i]) * double(gain[i]));
  }
  return out;
}

// Gains as fp32 multipliers (1 + w for OnePlus files).
std::vector<float> gain_values(const Tensor& t, GainConvention c) {
  std::vector<float> g;
  for (double v : effective_gain(t, c)) g.push_back(static_cast<float>(v));
  return g;
}

}  // namespace

CpuEngine::CpuEngine(Model model, NormMode mode, int max_context) : m_(std::move(model)), mode_(mode) {
  const ModelConfig& c = m_.cfg;
  if (c.arch != "llama") {
    throw Error(fmt::format("the CPU engine runs llama models; '{}' is not supported yet", c.arch));
  }
  max_ctx_ = max_context > 0 ? max_context : std::min(c.context, 8192);
  const bool fold = mode == NormMode::FlashNorm;
  // Gains stay owned by the model (replaced by their multiplier form for OnePlus files).
  auto gains = [&](const std::string& name) {
    Tensor& t = m_.get(name);
    t.data = gain_values(t, c.gains);
    return t.data.data();
  };
  auto fuse = [&](std::initializer_list<std::string> names, const float* gain) {
    std::vector<float> out;
    for (const auto& n : names) {
      std::vector<float> part = fold_columns(m_.get(n), fold ? gain : nullptr);
      out.insert(out.end(), part.begin(), part.end());
      m_.tensors.erase(n);  // the fused copy replaces it
    }
    return out;
  };
  for (int l = 0; l < c.n_layer; ++l) {
    auto n = [&](const char* p) { return expand_layer(p, l); };
    Layer L;
    L.attn_gain = gains(n("blk.{L}.attn_norm.weight"));
    L.ffn_gain = gains(n("blk.{L}.ffn_norm.weight"));
    L.wqkv = fuse({n("blk.{L}.attn_q.weight"), n("blk.{L}.attn_k.weight"),
                   n("blk.{L}.attn_v.weight")},
                  L.attn_gain);
    L.wgu = fuse({n("blk.{L}.ffn_gate.weight"), n("blk.{L}.ffn_up.weight")}, L.ffn_gain);
    L.wo = m_.get(n("blk.{L}.attn_output.weight")).data.data();
    L.wdown = m_.get(n("blk.{L}.ffn_down.weight")).data.data();
    layers_.push_back(std::move(L));
  }
  out_gain_ = gains("output_norm.weight");
  // The LM head: in FlashNorm mode a folded copy, so the (tied) embedding lookup stays unfolded.
  head_ = fold_columns(m_.head(), fold ? out_gain_ : nullptr);
  if (m_.has(m_.arch->head)) m_.tensors.erase(m_.arch->head);

  const size_t kv = size_t(c.n_head_kv) * c.head_dim;
  k_cache_.assign(size_t(c.n_layer) * max_ctx_ * kv, 0.0f);
  v_cache_.assign(k_cache_.size(), 0.0f);
  const int half = c.head_dim / 2;
  rope_cos_.resize(size_t(max_ctx_) * half);
  rope_sin_.resize(rope_cos_.size());
  for (int p = 0; p < max_ctx_; ++p) {
    for (int i = 0; i < half; ++i) {
      double theta = p * std::pow(double(c.rope_base), -2.0 * i / c.head_dim);
      rope_cos_[size_t(p) * half + i] = static_cast<float>(std::cos(theta));
      rope_sin_[size_t(p) * half + i] = static_cast<float>(std::sin(theta));
    }
  }
}

void CpuEngine::reset() { pos_ = 0; }

// Standard: y = (x * rstd * g) W^T. FlashNorm: y = rstd * (x W*^T) with W* folded at load;
// the GEMM reads raw x and the row scale is applied after both it and rstd are complete.
void CpuEngine::normed_projection(const float* x, int T, const float* gain, const float* w, int n,
                                  float* y) {
  const int k = m_.cfg.hidden;
  const float eps = m_.cfg.eps;
  if (mode_ == NormMode::Standard) {
    std::vector<float> xn(size_t(T) * k);
    for (int t = 0; t < T; ++t) {
      const float r = rstd(x + size_t(t) * k, k, eps);
      for (int i = 0; i < k; ++i) xn[size_t(t) * k + i] = x[size_t(t) * k + i] * r * gain[i];
    }
    matmul(xn.data(), T, w, n, k, y);
  } else {
    matmul(x, T, w, n, k, y);
    for (int t = 0; t < T; ++t) {
      const float r = rstd(x + size_t(t) * k, k, eps);
      float* row = y + size_t(t) * n;
      for (int j = 0; j < n; ++j) row[j] *= r;
    }
  }
}

void CpuEngine::attention(int layer, const float* qkv, int T, float* out) {
  const ModelConfig& c = m_.cfg;
  const int D = c.head_dim, half = D / 2, nq = c.n_head * D, nkv = c.n_head_kv * D;
  const int row = nq + 2 * nkv, group = c.n_head / c.n_head_kv;
  float* kc = k_cache_.data() + size_t(layer) * max_ctx_ * nkv;
  float* vc = v_cache_.data() + size_t(layer) * max_ctx_ * nkv;
  std::vector<float> q(size_t(T) * nq);
  auto rope = [&](float* v, int p) {
    const float* cs = &rope_cos_[size_t(p) * half];
    const float* sn = &rope_sin_[size_t(p) * half];
    for (int i = 0; i < half; ++i) {
      // Adjacent: pairs (2i, 2i+1). Neox: pairs (i, i + D/2).
      float* a = c.rope == RopeLayout::Adjacent ? v + 2 * i : v + i;
      float* b = c.rope == RopeLayout::Adjacent ? v + 2 * i + 1 : v + i + half;
      const float x0 = *a, x1 = *b;
      *a = x0 * cs[i] - x1 * sn[i];
      *b = x0 * sn[i] + x1 * cs[i];
    }
  };
  for (int t = 0; t < T; ++t) {
    const float* r = qkv + size_t(t) * row;
    const int p = pos_ + t;
    std::copy(r, r + nq, &q[size_t(t) * nq]);
    std::copy(r + nq, r + nq + nkv, kc + size_t(p) * nkv);
    std::copy(r + nq + nkv, r + row, vc + size_t(p) * nkv);
    for (int h = 0; h < c.n_head; ++h) rope(&q[size_t(t) * nq + h * D], p);
    for (int h = 0; h < c.n_head_kv; ++h) rope(kc + size_t(p) * nkv + h * D, p);
  }
  const int P = pos_ + T;  // keys visible to the last query
  const float scale = 1.0f / std::sqrt(float(D));
  std::vector<float> s(size_t(T) * P);
  for (int h = 0; h < c.n_head; ++h) {
    const int kh = h / group;
    // S[T, P] = Q_h K_h^T * scale; causal: query t sees keys 0..pos_+t.
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, P, D, scale, &q[h * D], nq,
                kc + kh * D, nkv, 0.0f, s.data(), P);
    for (int t = 0; t < T; ++t) {
      float* sr = &s[size_t(t) * P];
      const int visible = pos_ + t + 1;
      float mx = *std::max_element(sr, sr + visible);
      double sum = 0;
      for (int j = 0; j < visible; ++j) sum += (sr[j] = std::exp(sr[j] - mx));
      const float inv = static_cast<float>(1.0 / sum);
      for (int j = 0; j < visible; ++j) sr[j] *= inv;
      std::fill(sr + visible, sr + P, 0.0f);
    }
    // O_h[T, D] = S V_h.
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, D, P, 1.0f, s.data(), P,
                vc + kh * D, nkv, 0.0f, out + h * D, nq);
  }
}

std::vector<float> CpuEngine::forward(std::span<const int32_t> tokens, bool all_logits) {
  const ModelConfig& c = m_.cfg;
  const int T = static_cast<int>(tokens.size());
  if (T == 0) throw Error("forward: no tokens");
  if (pos_ + T > max_ctx_) {
    throw Error(fmt::format("context full: {} + {} tokens exceed the KV cache of {}", pos_, T,
                            max_ctx_));
  }
  const int H = c.hidden, F = c.ffn, nq = c.n_head * c.head_dim;
  const int nkv = c.n_head_kv * c.head_dim, nqkv = nq + 2 * nkv;
  const Tensor& emb = m_.get(m_.arch->tied_source);
  std::vector<float> x(size_t(T) * H);
  for (int t = 0; t < T; ++t) {
    if (tokens[t] < 0 || tokens[t] >= c.vocab) {
      throw Error(fmt::format("token id {} is outside the vocabulary of {}", tokens[t], c.vocab));
    }
    std::copy_n(&emb.data[size_t(tokens[t]) * H], H, &x[size_t(t) * H]);
  }
  std::vector<float> qkv(size_t(T) * nqkv), att(size_t(T) * nq), proj(size_t(T) * H);
  std::vector<float> gu(size_t(T) * 2 * F), act(size_t(T) * F);
  for (int l = 0; l < c.n_layer; ++l) {
    const Layer& L = layers_[l];
    normed_projection(x.data(), T, L.attn_gain, L.wqkv.data(), nqkv, qkv.data());
    attention(l, qkv.data(), T, att.data());
    matmul(att.data(), T, L.wo, H, nq, proj.data());
    for (size_t i = 0; i < x.size(); ++i) x[i] += proj[i];
    normed_projection(x.data(), T, L.ffn_gain, L.wgu.data(), 2 * F, gu.data());
    for (int t = 0; t < T; ++t) {
      const float* g = &gu[size_t(t) * 2 * F];
      const float* u = g + F;
      float* a = &act[size_t(t) * F];
      for (int i = 0; i < F; ++i) a[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];  // SiLU(g) * u
    }
    matmul(act.data(), T, L.wdown, H, F, proj.data());
    for (size_t i = 0; i < x.size(); ++i) x[i] += proj[i];
  }
  pos_ += T;
  const int first = all_logits ? 0 : T - 1, n = T - first;
  std::vector<float> logits(size_t(n) * c.vocab);
  normed_projection(&x[size_t(first) * H], n, out_gain_, head_.data(), c.vocab, logits.data());
  return logits;
}

}  // namespace flashnorm
