#include "flashnorm/engine/cpu_engine.h"

#include <cblas.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "flashnorm/engine/layer_plan.h"
#include "flashnorm/error.h"
#include "flashnorm/fold/fold_gain.h"
#include "flashnorm/io/dequant.h"
#include "flashnorm/kernels/cpu/blas_threads.h"
#include "flashnorm/kernels/cpu/decode_attention.h"
#include "flashnorm/kernels/cpu/fp8.h"
#include "flashnorm/model/audit.h"

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

// mean(x^2) accumulated in fp64.
double mean_sq(const float* x, int k) {
  double ss = 0;
  for (int i = 0; i < k; ++i) ss += double(x[i]) * x[i];
  return ss / k;
}

// rstd = 1 / sqrt(mean(x^2) + eps), eps inside the square root.
float rstd(const float* x, int k, float eps) {
  return static_cast<float>(1.0 / std::sqrt(mean_sq(x, k) + eps));
}

// y[T, n] += bias[n] for every row (nothing when bias is null).
void add_bias(float* y, int T, int n, const float* bias) {
  if (!bias) return;
  for (int t = 0; t < T; ++t) {
    for (int j = 0; j < n; ++j) y[size_t(t) * n + j] += bias[j];
  }
}

// In-place RMSNorm of a row with an optional gain.
void rms_norm_row(float* x, int k, const float* gain, float eps) {
  const float r = rstd(x, k, eps);
  for (int i = 0; i < k; ++i) x[i] = x[i] * r * (gain ? gain[i] : 1.0f);
}

// Returns W diag(g) rounded once to fp32 (product formed in fp64: fold/fold_gain.h), or a copy of
// W without a gain.
std::vector<float> fold_columns(const Tensor& w, const float* gain) {
  if (!gain) return w.data;
  std::vector<float> out(w.data.size());
  const std::vector<double> g(gain, gain + w.cols());
  fold_gain(w.data, w.cols(), g, FoldTarget::kF32, out);
  return out;
}

// compressed-tensors' dynamic per-token FP8 activations (ModelConfig::fp8) on each row of x [T, k].
void fp8_tokens(float* x, int T, int k) {
  for (int t = 0; t < T; ++t) kernels::cpu::fp8_fake_quantize_row({x + size_t(t) * k, size_t(k)});
}

// Final logit soft-capping in place: y = cap * tanh(y / cap) in fp32, in transformers' order
// (Gemma3ForCausalLM.forward); nothing when cap is 0.
void softcap(std::vector<float>& y, float cap) {
  if (cap == 0) return;
  for (float& v : y) v = std::tanh(v / cap) * cap;
}

float gelu_tanh(float x) {
  const float c = 0.7978845608028654f;  // sqrt(2 / pi)
  return 0.5f * x * (1.0f + std::tanh(c * (x + 0.044715f * x * x * x)));
}

// The native view of a tensor loaded with WeightStorage::kNative.
kernels::cpu::QuantMatrix native_view(const Tensor& t) {
  return {t.type, t.raw.data(), static_cast<int>(t.rows()), static_cast<int>(t.cols())};
}

}  // namespace

CpuEngine::CpuEngine(Model model, NormMode mode, const CpuEngineOptions& o)
    : m_(std::move(model)),
      mode_(mode),
      cancel_(o.cancel && mode == NormMode::FlashNorm),
      track_(o.track_cancellation) {
  const ModelConfig& c = m_.cfg;
  const ArchDescription& a = *m_.arch;
  max_ctx_ = o.max_context > 0 ? o.max_context : std::min(c.context, 8192);
  if (max_ctx_ > c.context) {
    throw Error(fmt::format("a KV cache of {} positions exceeds the model's context length {}",
                            max_ctx_, c.context));
  }
  native_ = m_.has(a.tied_source) && !m_.get(a.tied_source).raw.empty();
  if (native_) {
    isa_ = kernels::cpu::chosen_quant_isa();
    pool_ = std::make_unique<kernels::cpu::ThreadPool>();
    one_blas_thread_ = pool_->size() > 1 && kernels::cpu::BlasThreads::available();
  }
  // Native weights are never folded: the gain multiplies x instead. FP8 layers neither: their
  // inputs are quantized per token with the gain on x (x * g, then fp8; rstd after the GEMM).
  const bool fold = mode == NormMode::FlashNorm && !native_;
  const bool fold_layers = fold && !c.fp8;
  // Gains stay owned by the model, replaced by their multiplier form (1 + w for OnePlus files).
  auto gains = [&](const std::string& name) {
    Tensor& t = m_.get(name);
    std::vector<double> g = gain_multipliers(t.data, c.gains);
    t.data.assign(g.begin(), g.end());
    return t.data.data();
  };
  auto fuse = [&](std::initializer_list<std::string> names, const float* gain) {
    std::vector<float> out;
    for (const auto& n : names) {
      std::vector<float> part = fold_columns(m_.get(n), fold_layers ? gain : nullptr);
      out.insert(out.end(), part.begin(), part.end());
      m_.tensors.erase(n);  // the fused copy replaces it
    }
    return out;
  };
  for (const LayerPlan& p : plan_layers(m_)) {
    Layer L;
    L.attn_gain = gains(p.attn_norm);
    L.ffn_gain = gains(p.ffn_norm);
    if (!p.q_norm.empty()) L.q_norm = gains(p.q_norm);
    if (!p.k_norm.empty()) L.k_norm = gains(p.k_norm);
    L.v_renorm = p.v_renorm;
    L.cancels = p.qkv_cancels;
    // biases before the fused weights replace their parts
    L.bqkv = fused_bias(
        m_, {{p.qkv[0], p.qkv_bias[0]}, {p.qkv[1], p.qkv_bias[1]}, {p.qkv[2], p.qkv_bias[2]}});
    L.bgu = fused_bias(m_, {{p.gate, p.gate_bias}, {p.up, p.up_bias}});
    if (!p.attn_output_bias.empty()) L.bo = m_.get(p.attn_output_bias).data.data();
    if (!p.down_bias.empty()) L.bdown = m_.get(p.down_bias).data.data();
    if (native_) {
      for (const auto& n : p.qkv) L.qkv_q.push_back(native_view(m_.get(n)));
      L.gu_q = {native_view(m_.get(p.gate)), native_view(m_.get(p.up))};
      L.wo_q = native_view(m_.get(p.attn_output));
      L.wdown_q = native_view(m_.get(p.down));
    } else {
      L.wqkv = fuse({p.qkv[0], p.qkv[1], p.qkv[2]}, L.attn_gain);
      L.wgu = fuse({p.gate, p.up}, L.ffn_gain);
      L.wo = m_.get(p.attn_output).data.data();
      L.wdown = m_.get(p.down).data.data();
    }
    if (!p.post_attn.empty()) L.post_attn = gains(p.post_attn);
    if (!p.post_ffn.empty()) L.post_ffn = gains(p.post_ffn);
    L.local = p.local;
    layers_.push_back(std::move(L));
  }
  // Dropped normalization: the whole reduction goes when q, k and v are all renormalized.
  skip_attn_rstd_ = cancel_ && !layers_.empty() && layers_[0].cancels[0] && layers_[0].cancels[1] &&
                    layers_[0].cancels[2];
  out_gain_ = gains("output_norm.weight");
  // The LM head: in FlashNorm mode a folded copy, so the (tied) embedding lookup stays unfolded.
  if (c.headless) {
    // no LM head (encode() only)
  } else if (native_) {
    head_q_ = native_view(m_.head());  // tied or not, read in place; the gain goes on x
  } else {
    head_ = fold_columns(m_.head(), fold ? out_gain_ : nullptr);
    if (m_.has(a.head)) m_.tensors.erase(a.head);
  }

  const size_t kv = size_t(c.n_head_kv) * c.head_dim;
  // The KV cache and RoPE tables grow with the context and head_dim read from the file: refuse
  // sizes this machine cannot hold (one line) instead of being killed for memory.
  const double kv_bytes = 2.0 * c.n_layer * max_ctx_ * static_cast<double>(kv) * sizeof(float);
  const double rope_bytes = (!c.layer_local.empty() ? 2.0 : 1.0) * max_ctx_ *
                            static_cast<double>(c.head_dim) * sizeof(float);
  const double phys =
      static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
  if (phys > 0 && kv_bytes + rope_bytes > phys) {
    throw Error(fmt::format(
        "the CPU engine's KV cache of {} positions (block_count {} x head_count_kv {} x "
        "key_length {} x 2 x fp32) and RoPE tables need {:.1f} GB, more than this machine's "
        "{:.1f} GB: give a smaller --ctx",
        max_ctx_, c.n_layer, c.n_head_kv, c.head_dim, (kv_bytes + rope_bytes) / 1e9, phys / 1e9));
  }
  // caches (forward()'s included) grow on demand: reserve()
  rope_tables(max_ctx_, c.head_dim, c.rope_global, rope_cos_, rope_sin_);
  if (!c.layer_local.empty()) {
    rope_tables(max_ctx_, c.head_dim, c.rope_local, rope_cos_local_, rope_sin_local_);
  }
}

void CpuEngine::reset() { single_.pos = 0; }

void CpuEngine::reserve(Sequence& s, int need) const {
  if (need <= s.cap) return;
  const size_t nkv = size_t(m_.cfg.n_head_kv) * m_.cfg.head_dim;
  const int blocks = (need + kKvBlock - 1) / kKvBlock;
  const int cap = std::min(max_ctx_, std::max(blocks * kKvBlock, 2 * s.cap));
  const int layers = s.scratch ? 1 : m_.cfg.n_layer;
  s.k.resize(layers);
  s.v.resize(layers);
  for (int l = 0; l < layers; ++l) {
    s.k[l].resize(size_t(cap) * nkv);
    s.v[l].resize(size_t(cap) * nkv);
  }
  s.cap = cap;
}

int CpuEngine::open_sequence() {
  const int id = next_seq_++;
  seqs_.emplace(id, Sequence{});
  return id;
}

void CpuEngine::close_sequence(int seq) {
  if (seqs_.erase(seq) == 0) throw Error(fmt::format("sequence {} is not open", seq));
}

int CpuEngine::sequence_position(int seq) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) throw Error(fmt::format("sequence {} is not open", seq));
  return it->second.pos;
}

int CpuEngine::kv_blocks_in_use() const {
  int n = 0;
  for (const auto& [id, s] : seqs_) n += s.cap / kKvBlock + (s.cap % kKvBlock != 0);
  return n;
}

int CpuEngine::sequence_kv_blocks(int seq) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) throw Error(fmt::format("sequence {} is not open", seq));
  return it->second.cap / kKvBlock + (it->second.cap % kKvBlock != 0);
}

void CpuEngine::rewind_sequence(int seq, int length) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) throw Error(fmt::format("sequence {} is not open", seq));
  Sequence& s = it->second;
  if (length < 0 || length > s.pos) {
    throw Error(
        fmt::format("cannot rewind sequence {} to {} of its {} positions", seq, length, s.pos));
  }
  s.pos = length;  // the allocation is kept (reallocating it fragmented a server's heap)
}

std::vector<float> CpuEngine::forward_batch(std::span<const SequenceChunk> chunks) {
  std::vector<Sequence*> seqs;
  for (const SequenceChunk& ch : chunks) {
    auto it = seqs_.find(ch.seq);
    if (it == seqs_.end()) throw Error(fmt::format("sequence {} is not open", ch.seq));
    if (std::find(seqs.begin(), seqs.end(), &it->second) != seqs.end()) {
      throw Error(fmt::format("sequence {} appears twice in one batch", ch.seq));
    }
    seqs.push_back(&it->second);
  }
  return run(chunks, seqs, false);
}

std::string CpuEngine::describe() const {
  const char* norm = mode_ == NormMode::Standard ? "standard" : "flashnorm";
  if (native_) {
    return fmt::format("native weights ({}, {} threads), norm {}",
                       kernels::cpu::quant_isa_name(isa_), pool_->size(), norm);
  }
  return fmt::format("fp32, norm {}", norm);
}

void CpuEngine::native_matmul(const float* x, int T, const QuantMatrix& w, float* y) {
  acts_.prepare(x, T, w.cols);
  kernels::cpu::quant_matmul(w, acts_, y, w.rows, isa_, pool_.get(), pass_gemm_rows_);
}

// Standard: y = (x * rstd * g) W^T + b. FlashNorm: y = rstd * (x W*^T) + b with W* folded at
// load; the GEMM reads raw x and the row scale is applied after both it and rstd are complete, the
// bias after the scale. Columns in `unscaled` keep the raw-x result (their rstd cancels
// downstream).
void CpuEngine::normed_projection(const float* x, int T, const float* gain, const float* w, int n,
                                  float* y, const float* bias,
                                  std::span<const std::pair<int, int>> unscaled,
                                  std::span<const QuantMatrix> q) {
  const int k = m_.cfg.hidden;
  const float eps = m_.cfg.eps;
  if (!q.empty()) {
    // Native: x' = x * g (Standard: x * rstd * g) quantized once for every part.
    std::vector<float> r;
    if (mode_ == NormMode::Standard) {
      r.resize(T);
      for (int t = 0; t < T; ++t) r[t] = rstd(x + size_t(t) * k, k, eps);
    }
    acts_.prepare(x, T, k, gain, r.empty() ? nullptr : r.data());
    kernels::cpu::quant_matmul_parts(q, acts_, y, n, isa_, pool_.get(), pass_gemm_rows_);
    if (mode_ == NormMode::Standard) {
      add_bias(y, T, n, bias);
      return;
    }
  } else if (mode_ == NormMode::Standard) {
    std::vector<float> xn(size_t(T) * k);
    for (int t = 0; t < T; ++t) {
      const float r = rstd(x + size_t(t) * k, k, eps);
      for (int i = 0; i < k; ++i) xn[size_t(t) * k + i] = x[size_t(t) * k + i] * r * gain[i];
    }
    if (fp8_inputs(w)) fp8_tokens(xn.data(), T, k);
    matmul(xn.data(), T, w, n, k, y);
    add_bias(y, T, n, bias);
    return;
  } else if (fp8_inputs(w)) {
    // FP8 with the gain on x: fp8(x * g / s) * s, s = max|x * g| / 448 per token (the payload
    // Standard's normalized x gives, up to rounding: max|rstd * x * g| = rstd * max|x * g|);
    // the rows' rstd after the GEMM, below
    std::vector<float> xg(size_t(T) * k);
    for (size_t i = 0; i < xg.size(); ++i) xg[i] = x[i] * gain[i % size_t(k)];
    fp8_tokens(xg.data(), T, k);
    matmul(xg.data(), T, w, n, k, y);
  } else {
    matmul(x, T, w, n, k, y);
  }
  int scaled_cols = n;
  for (const auto& [b, e] : unscaled) scaled_cols -= e - b;
  // every consumer renormalizes: no reduction at all
  for (int t = 0; t < T && scaled_cols > 0; ++t) {
    const float r = rstd(x + size_t(t) * k, k, eps);
    float* row = y + size_t(t) * n;
    int j = 0;
    for (const auto& [b, e] : unscaled) {
      for (; j < b; ++j) row[j] *= r;
      j = e;
    }
    for (; j < n; ++j) row[j] *= r;
  }
  add_bias(y, T, n, bias);
}

void CpuEngine::attention(int layer, Sequence& seq, float* qkv, const float* rstd_x, int T,
                          float* out) {
  const ModelConfig& c = m_.cfg;
  const Layer& L = layers_[layer];
  const int D = c.head_dim, half = D / 2, nq = c.n_head * D, nkv = c.n_head_kv * D;
  const int row = nq + 2 * nkv, group = c.n_head / c.n_head_kv;
  float* kc = seq.k[seq.scratch ? 0 : layer].data();
  float* vc = seq.v[seq.scratch ? 0 : layer].data();
  const bool causal = !seq.scratch || c.causal;
  const int pos0 = seq.pos;
  const std::vector<float>& cos_t = L.local ? rope_cos_local_ : rope_cos_;
  const std::vector<float>& sin_t = L.local ? rope_sin_local_ : rope_sin_;
  std::vector<float> q(size_t(T) * nq);
  auto rope = [&](float* v, int p) {
    const float* cs = &cos_t[size_t(p) * half];
    const float* sn = &sin_t[size_t(p) * half];
    for (int i = 0; i < half; ++i) {
      // Adjacent: pairs (2i, 2i+1). Neox: pairs (i, i + D/2).
      float* a = c.rope == RopeLayout::Adjacent ? v + 2 * i : v + i;
      float* b = c.rope == RopeLayout::Adjacent ? v + 2 * i + 1 : v + i + half;
      const float x0 = *a, x1 = *b;
      *a = x0 * cs[i] - x1 * sn[i];
      *b = x0 * sn[i] + x1 * cs[i];
    }
  };
  // Per-head renormalization (QK-norm); with tracking, the eps bound of the cancelled scale.
  auto renorm = [&](float* head, const float* gain, int t) {
    if (rstd_x) {
      const double err = std::fabs(cancellation_rel_error(mean_sq(head, D), rstd_x[t], c.eps));
      max_cancel_err_ = std::max(max_cancel_err_, err);
    }
    rms_norm_row(head, D, gain, c.eps);
  };
  for (int t = 0; t < T; ++t) {
    float* r = qkv + size_t(t) * row;
    const int p = pos0 + t;
    for (int h = 0; h < c.n_head; ++h) {
      if (L.q_norm) renorm(r + h * D, L.q_norm, t);
    }
    for (int h = 0; h < c.n_head_kv; ++h) {
      if (L.k_norm) renorm(r + nq + h * D, L.k_norm, t);
      if (L.v_renorm) renorm(r + nq + nkv + h * D, nullptr, t);
    }
    std::copy(r, r + nq, &q[size_t(t) * nq]);
    std::copy(r + nq, r + nq + nkv, kc + size_t(p) * nkv);
    std::copy(r + nq + nkv, r + row, vc + size_t(p) * nkv);
    for (int h = 0; h < c.n_head; ++h) rope(&q[size_t(t) * nq + h * D], p);
    for (int h = 0; h < c.n_head_kv; ++h) rope(kc + size_t(p) * nkv + h * D, p);
  }
  const int P = pos0 + T;  // keys visible to the last query
  if (T == 1 && native_) {
    // Native decode: one query per head, the heads spread over the pool (no BLAS call per head)
    kernels::cpu::DecodeAttention da;
    da.q = q.data();
    da.k = kc;
    da.v = vc;
    da.kv_stride = size_t(nkv);
    da.n_head = c.n_head;
    da.group = group;
    da.head_dim = D;
    da.first = L.local ? std::max(0, P - c.sliding_window) : 0;
    da.end = P;
    da.scale = c.attn_scale;
    da.out = out;
    kernels::cpu::decode_attention(da, isa_, pool_.get());
    return;
  }
  // Native weights with a pool: the heads spread over it, each sgemm on its thread (BLAS on one
  // thread during native passes: run()); else one head after another, BLAS threaded.
  auto head = [&](int h) {
    thread_local std::vector<float> s;
    s.resize(size_t(T) * P);
    const int kh = h / group;
    // S[T, P] = Q_h K_h^T * scale; causal (query t sees keys 0..pos0+t), and on sliding-window
    // layers only the last `sliding_window` of them.
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, P, D, c.attn_scale, &q[h * D], nq,
                kc + kh * D, nkv, 0.0f, s.data(), P);
    for (int t = 0; t < T; ++t) {
      float* sr = &s[size_t(t) * P];
      // causal: keys up to the query's own position; bidirectional: every key, on sliding layers
      // those less than the window away on either side
      const int self = pos0 + t + 1;
      const int visible = causal ? self : (L.local ? std::min(P, pos0 + t + c.sliding_window) : P);
      const int first = L.local ? std::max(0, self - c.sliding_window) : 0;
      kernels::cpu::softmax_range(sr, first, visible);
      std::fill(sr, sr + first, 0.0f);
      std::fill(sr + visible, sr + P, 0.0f);
    }
    // O_h[T, D] = S V_h.
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, D, P, 1.0f, s.data(), P, vc + kh * D,
                nkv, 0.0f, out + h * D, nq);
  };
  if (one_blas_thread_) {
    pool_->run(c.n_head, head);
  } else {
    for (int h = 0; h < c.n_head; ++h) head(h);
  }
}

std::vector<float> CpuEngine::encode(std::span<const std::span<const int32_t>> inputs,
                                     const EncodeOptions& o) {
  const ModelConfig& c = m_.cfg;
  const int H = c.hidden;
  if (inputs.empty()) throw Error("encode: no inputs");
  std::vector<Sequence> scratch(inputs.size());
  std::vector<Sequence*> seqs;
  std::vector<SequenceChunk> chunks;
  for (size_t i = 0; i < inputs.size(); ++i) {
    scratch[i].scratch = true;
    seqs.push_back(&scratch[i]);
    chunks.push_back({.seq = 0, .tokens = inputs[i]});
  }
  std::optional<kernels::cpu::BlasThreads> blas_on_one_thread;
  if (one_blas_thread_) blas_on_one_thread.emplace(1);
  std::vector<float> x = layers_pass(chunks, seqs);
  // the rows asked for, moved to the front in order
  int n = 0;
  for (size_t i = 0, r = 0; i < inputs.size(); r += inputs[i].size(), ++i) {
    const size_t len = inputs[i].size();
    if (o.rows == EncodeRows::kAll) {
      n += static_cast<int>(len);
      continue;
    }
    const size_t src = o.rows == EncodeRows::kFirst ? r : r + len - 1;
    if (src != size_t(n)) std::copy_n(&x[src * H], H, &x[size_t(n) * H]);
    ++n;
  }
  x.resize(size_t(n) * H);
  const float* gain = o.final_norm.gain ? out_gain_ : nullptr;
  for (int t = 0; t < n; ++t) {
    float* row = &x[size_t(t) * H];
    if (o.final_norm.rstd) {
      rms_norm_row(row, H, gain, c.eps);
    } else if (gain) {
      for (int i = 0; i < H; ++i) row[i] *= gain[i];
    }
  }
  return x;
}

std::vector<float> CpuEngine::forward(std::span<const int32_t> tokens, bool all_logits) {
  const SequenceChunk chunk{0, tokens};
  Sequence* seq = &single_;
  return run(std::span(&chunk, 1), std::span(&seq, 1), all_logits);
}

std::vector<float> CpuEngine::layers_pass(std::span<const SequenceChunk> chunks,
                                          std::span<Sequence* const> seqs) {
  const ModelConfig& c = m_.cfg;
  const ArchHooks& hk = m_.arch->hooks;
  if (chunks.empty()) throw Error("forward: no sequences");
  int T = 0;  // rows of all chunks, stacked
  for (size_t i = 0; i < chunks.size(); ++i) {
    const int n = static_cast<int>(chunks[i].tokens.size());
    if (n == 0) throw Error("forward: no tokens");
    if (seqs[i]->pos + n > max_ctx_) {
      throw Error(fmt::format("context full: {} + {} tokens exceed the KV cache of {}",
                              seqs[i]->pos, n, max_ctx_));
    }
    for (int32_t id : chunks[i].tokens) {
      if (id < 0 || id >= c.vocab) {
        throw Error(fmt::format("token id {} is outside the vocabulary of {}", id, c.vocab));
      }
    }
    T += n;
  }
  for (size_t i = 0; i < chunks.size(); ++i) {
    reserve(*seqs[i], seqs[i]->pos + static_cast<int>(chunks[i].tokens.size()));
  }
  // Native weights: a pass of decode rows only (one token per sequence) stays on the integer path
  // whatever its row count; a pass with a prompt chunk takes the tiled sgemm from gemm_rows_ rows.
  const bool decode_rows_only = size_t(T) == chunks.size();
  pass_gemm_rows_ = decode_rows_only ? std::numeric_limits<int>::max() : gemm_rows_;
  const int H = c.hidden, F = c.ffn, nq = c.n_head * c.head_dim;
  const int nkv = c.n_head_kv * c.head_dim, nqkv = nq + 2 * nkv;
  const Tensor& emb = m_.get(m_.arch->tied_source);
  const float emb_scale = hk.embed_scale_sqrt_hidden ? std::sqrt(float(H)) : 1.0f;
  std::vector<float> x(size_t(T) * H);
  std::vector<int32_t> tokens;
  for (const SequenceChunk& ch : chunks)
    tokens.insert(tokens.end(), ch.tokens.begin(), ch.tokens.end());
  for (int t = 0; t < T; ++t) {
    float* row = &x[size_t(t) * H];
    if (native_) {
      const size_t rb = native_view(emb).row_bytes();
      io::dequantize(emb.type, emb.raw.subspan(size_t(tokens[t]) * rb, rb), {row, size_t(H)});
    } else {
      std::copy_n(&emb.data[size_t(tokens[t]) * H], H, row);
    }
    for (int i = 0; i < H; ++i) row[i] *= emb_scale;
  }
  std::vector<float> qkv(size_t(T) * nqkv), att(size_t(T) * nq), proj(size_t(T) * H);
  std::vector<float> gu(size_t(T) * 2 * F), act(size_t(T) * F), rstd_x;
  for (int l = 0; l < c.n_layer; ++l) {
    const Layer& L = layers_[l];
    // Column ranges of q|k|v whose rstd cancels (renormalized right after the projection).
    std::vector<std::pair<int, int>> unscaled;
    if (cancel_) {
      if (L.cancels[0]) unscaled.push_back({0, nq});
      if (L.cancels[1]) unscaled.push_back({nq, nq + nkv});
      if (L.cancels[2]) unscaled.push_back({nq + nkv, nqkv});
    }
    const float* track = nullptr;
    if (cancel_ && track_ && !unscaled.empty()) {
      rstd_x.resize(T);
      for (int t = 0; t < T; ++t) rstd_x[t] = rstd(&x[size_t(t) * H], H, c.eps);
      track = rstd_x.data();
    }
    normed_projection(x.data(), T, L.attn_gain, L.wqkv.data(), nqkv, qkv.data(),
                      L.bqkv.empty() ? nullptr : L.bqkv.data(), unscaled, L.qkv_q);
    for (size_t i = 0, r = 0; i < chunks.size(); r += chunks[i].tokens.size(), ++i) {
      attention(l, *seqs[i], &qkv[r * nqkv], track ? track + r : nullptr,
                static_cast<int>(chunks[i].tokens.size()), &att[r * nq]);
    }
    if (native_) {
      native_matmul(att.data(), T, L.wo_q, proj.data());
    } else {
      if (c.fp8) fp8_tokens(att.data(), T, nq);
      matmul(att.data(), T, L.wo, H, nq, proj.data());
    }
    add_bias(proj.data(), T, H, L.bo);
    if (L.post_attn) {
      for (int t = 0; t < T; ++t) rms_norm_row(&proj[size_t(t) * H], H, L.post_attn, c.eps);
    }
    for (size_t i = 0; i < x.size(); ++i) x[i] += proj[i];
    normed_projection(x.data(), T, L.ffn_gain, L.wgu.data(), 2 * F, gu.data(),
                      L.bgu.empty() ? nullptr : L.bgu.data(), {}, L.gu_q);
    auto glu_row = [&](int t) {
      const float* g = &gu[size_t(t) * 2 * F];
      const float* u = g + F;
      float* a = &act[size_t(t) * F];
      if (hk.act == Activation::GeluTanh) {
        for (int i = 0; i < F; ++i) a[i] = gelu_tanh(g[i]) * u[i];
      } else {
        for (int i = 0; i < F; ++i) a[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];  // SiLU
      }
    };
    if (pool_ && T > 1) {  // native prompts: rows over the pool (the same values)
      pool_->run(T, glu_row);
    } else {
      for (int t = 0; t < T; ++t) glu_row(t);
    }
    if (native_) {
      native_matmul(act.data(), T, L.wdown_q, proj.data());
    } else {
      if (c.fp8) fp8_tokens(act.data(), T, F);
      matmul(act.data(), T, L.wdown, H, F, proj.data());
    }
    add_bias(proj.data(), T, H, L.bdown);
    if (L.post_ffn) {
      for (int t = 0; t < T; ++t) rms_norm_row(&proj[size_t(t) * H], H, L.post_ffn, c.eps);
    }
    for (size_t i = 0; i < x.size(); ++i) x[i] += proj[i];
  }
  for (size_t i = 0; i < chunks.size(); ++i) seqs[i]->pos += chunks[i].tokens.size();
  return x;
}

std::vector<float> CpuEngine::run(std::span<const SequenceChunk> chunks,
                                  std::span<Sequence* const> seqs, bool all_logits) {
  const ModelConfig& c = m_.cfg;
  const int H = c.hidden;
  if (c.headless || !c.causal) {
    throw Error(fmt::format(
        "{}: {}: the model computes embeddings only (no logits)", m_.source.string(),
        c.headless ? "a base model without an LM head" : "bidirectional attention (config.json)"));
  }
  std::optional<kernels::cpu::BlasThreads> blas_on_one_thread;
  if (one_blas_thread_) blas_on_one_thread.emplace(1);
  std::vector<float> x = layers_pass(chunks, seqs);
  const int T = static_cast<int>(x.size() / H);
  // The rows whose logits are returned: every row, or each chunk's last (moved together).
  int n = T;
  if (!all_logits) {
    n = 0;
    for (size_t i = 0, r = 0; i < chunks.size(); ++i) {
      r += chunks[i].tokens.size();
      if (size_t(n) != r - 1) std::copy_n(&x[(r - 1) * H], H, &x[size_t(n) * H]);
      ++n;
    }
  }
  std::vector<float> logits(size_t(n) * c.vocab);
  normed_projection(x.data(), n, out_gain_, head_.data(), c.vocab, logits.data(), nullptr, {},
                    std::span<const QuantMatrix>(&head_q_, native_ ? 1 : 0));
  softcap(logits, c.final_softcap);
  return logits;
}

}  // namespace flashnorm
