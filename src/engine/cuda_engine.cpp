// CUDA engine: include/flashnorm/engine/cuda_engine.h. Host code only; the kernels are in
// src/kernels/cuda (kernels.cu: RMSNorm and flashnorm_linear; engine_ops.cu: the rest).
#include "flashnorm/engine/cuda_engine.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "flashnorm/engine/layer_plan.h"
#include "flashnorm/fold/fold.h"
#include "flashnorm/error.h"
#include "flashnorm/kernels/cuda/device.h"
#include "flashnorm/kernels/cuda/engine_ops.h"

namespace flashnorm {
namespace fk = kernels::cuda;
using fk::DeviceBuffer;

namespace {

void ok(const fk::Status& s) { fk::throw_if_error(s); }

// One value rounded once to the engine dtype.
uint16_t round_dt(fk::DType dt, double v) {
  return dt == fk::DType::kBF16 ? round_to_bf16(v) : round_to_f16(v);
}

// Rows of `w` ([rows, cols] fp32), each column i multiplied by gain[i] when gain is set (the fold,
// formed in fp64 and rounded once), appended to `out` as dtype bits.
void append_rows(fk::DType dt, const Tensor& w, const std::vector<double>* gain,
                 std::vector<uint16_t>& out) {
  const size_t cols = w.cols();
  out.reserve(out.size() + w.data.size());
  for (size_t r = 0; r < w.rows(); ++r) {
    const float* row = w.data.data() + r * cols;
    for (size_t i = 0; i < cols; ++i) {
      out.push_back(round_dt(dt, gain ? double(row[i]) * (*gain)[i] : double(row[i])));
    }
  }
}

template <class T>
DeviceBuffer upload(const std::vector<T>& v) {
  DeviceBuffer b(v.size() * sizeof(T));
  FN_CUDA_CHECK(cudaMemcpy(b.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return b;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

enum Cls { kNorm, kNormedProj, kOtherProj, kAttn, kOther, kClasses };

// Decode attention splits the keys in chunks of split_keys(D) over CTAs (forward passes of at most
// kSplitMaxT tokens); longer passes (prefill) have enough (head, query) CTAs without.
constexpr int kSplitMaxT = fk::kDecodeAttentionMaxT;
// Keys per chunk: 128 for head_dim 64, fewer for wider heads (decode_attention keeps a chunk's keys
// and values in shared memory: split * D <= 8192 floats each).
int split_keys(int D) { return std::clamp(8192 / D, 16, 128); }

}  // namespace

bool cuda_device_available(std::string* why) { return fk::hopper_device_available(why); }

struct CudaEngine::Impl {
  ModelConfig cfg;
  ArchHooks hooks;
  NormMode mode;
  CudaEngineOptions opt;
  fk::DType dt;
  int H, F, nq, nkv, nqkv, V, D, L, max_ctx, tmax;
  int ldv;  // logits row stride: V rounded up to a multiple of 8 (the kernels' 16-byte rows)
  float emb_scale = 1.0f;

  struct Layer {
    DeviceBuffer wqkv, wo, wgu, wdown;  // dt; wqkv/wgu folded in FlashNorm mode
    DeviceBuffer attn_gain, ffn_gain;   // dt multipliers (Standard mode)
    DeviceBuffer q_norm, k_norm;        // fp32 multipliers, or empty
    DeviceBuffer post_attn, post_ffn;   // fp32 multipliers, or empty
    bool has_q_norm = false, has_k_norm = false, v_renorm = false, has_post = false;
    bool local = false;
  };
  std::vector<Layer> layers;
  DeviceBuffer emb, head, out_gain;
  bool head_is_emb = false;
  DeviceBuffer qkv_mask, zero_mask;  // uint8 scale masks
  bool qkv_masked = false, qkv_all_unscaled = false;
  DeviceBuffer cos_g, sin_g, cos_l, sin_l;
  DeviceBuffer kc, vc;
  DeviceBuffer d_tokens, d_pos, d_history;
  DeviceBuffer x32, xb, xn, qkv, q, att, proj, gu, act, logits;
  kernels::cuda::PinnedBuffer h_tokens, h_pos, h_logits;
  fk::Stream stream;
  std::unique_ptr<fk::LinearContext> ctx;
  fk::GraphExec graph;
  float graph_temp = -1;
  uint64_t graph_seed = 0;
  uint64_t graph_generation = 0;  // LinearContext workspaces the graph was captured with
  bool warmed = false;    // one eager decode step has run (LinearContext buffers and plans exist)
  bool pos_stale = true;  // d_pos does not hold pos
  bool xn_ready = false;  // xn holds the next normed projection's input (fused_add_norm)
  DeviceBuffer partials;  // split-key attention (decode)
  DeviceBuffer attn_counters;  // decode_attention's per-(token, head) arrival counters
  DeviceBuffer sample_ws;      // sample_tokens' per-CTA winners and arrival counter
  std::vector<GemvTuning> tuning;
  int pos = 0;
  // profiling
  bool profiling = false;
  std::vector<std::unique_ptr<fk::Event>> events;
  std::vector<int> event_cls;

  cudaStream_t s() const { return stream.get(); }

  template <class F>
  void op(Cls c, F&& f) {
    if (!profiling) {
      f();
      return;
    }
    const size_t i = event_cls.size();
    while (events.size() < 2 * (i + 1)) events.push_back(std::make_unique<fk::Event>());
    FN_CUDA_CHECK(cudaEventRecord(events[2 * i]->get(), s()));
    f();
    FN_CUDA_CHECK(cudaEventRecord(events[2 * i + 1]->get(), s()));
    event_cls.push_back(c);
  }

  fk::GluKind glu_kind() const {
    return hooks.act == Activation::GeluTanh ? fk::GluKind::kGeGLU : fk::GluKind::kSwiGLU;
  }
  // The GLU runs inside the down projection for passes of T tokens (decode path; its staged input,
  // T x F elements, well inside the decode kernel's shared memory).
  bool glu_in_down(int T) const {
    return opt.fuse_decode_ops && decode_path(T) && size_t(T) * F * 2 <= 48 * 1024;
  }

  // Plain projections of M tokens go through the decode kernel (M <= 16 and not cublas_plain).
  bool decode_path(int M) const {
    return M <= fk::LinearContext::kAutoDecodeMaxM && !opt.cublas_plain;
  }

  // y[M, N] = x[M, K] W[N, K]^T with no normalization (same kernel in both modes). With
  // add_residual (decode_path(M) only): x32 += the result and xb = round(x32) instead (the residual
  // add in the GEMV's epilogue; y, ldy, y_f32 unused). With glu (decode_path(M) only): x is the
  // fp32 gate|up output [M, 2K] and the GLU is applied as the kernel stages it.
  void plain(const void* x, int M, int K, const void* w, int N, void* y, int ldy = 0,
             bool y_f32 = false, bool add_residual = false, bool glu = false) {
    if (ldy == 0) ldy = N;
    if (decode_path(M)) {
      fk::LinearArgs a;
      a.dtype = dt, a.M = M, a.N = N, a.K = K, a.x = x, a.ldx = glu ? 2 * K : K, a.w = w;
      a.ldw = K, a.y = y, a.ldy = ldy, a.eps = cfg.eps, a.scale_mask = zero_mask.as<uint8_t>();
      a.y_f32 = y_f32, a.pdl = opt.pdl, a.x_glu = glu, a.glu_kind = glu_kind();
      if (add_residual) {
        a.y = x32.get(), a.ldy = H, a.y_f32 = true, a.accumulate = true, a.y_rounded = xb.get();
      }
      ok(ctx->run(a, fk::LinearImpl::kDecode, s()));
    } else {
      if (add_residual || glu) throw Error("internal: fused decode op outside the decode path");
      ok(ctx->gemm(dt, M, N, K, x, K, w, K, y, ldy, nullptr, s(), y_f32));
    }
  }

  // y = normalized(x) W^T for a projection fed by an RMSNorm, x = rows row0 .. row0+M-1 of xb.
  // Standard runs the norm (unless the preceding residual add already wrote xn: fused_add_norm)
  // then the plain projection; FlashNorm runs flashnorm_linear on raw x with the folded W.
  // keep_gain: FlashNorm mode's tied LM head (CudaEngineOptions::fold_tied_head off), normalized
  // as in Standard mode since its gain is not folded.
  void normed(int row0, int M, const void* gain, const void* w, int N, void* y, const uint8_t* mask,
              bool all_unscaled, int ldy = 0, bool y_f32 = false, bool keep_gain = false) {
    if (ldy == 0) ldy = N;
    const void* x = static_cast<const char*>(xb.get()) + size_t(row0) * H * 2;
    const void* xnr = static_cast<const char*>(xn.get()) + size_t(row0) * H * 2;
    if (mode == NormMode::Standard || keep_gain) {
      if (!xn_ready) {
        op(kNorm, [&] {
          fk::RmsNormArgs a;
          a.dtype = dt, a.M = M, a.K = H, a.x = x, a.ldx = H, a.gain = gain;
          a.y = const_cast<void*>(xnr), a.ldy = H, a.eps = cfg.eps, a.pdl = opt.pdl;
          ok(fk::rms_norm(a, s()));
        });
      }
      xn_ready = false;
      op(kNormedProj, [&] { plain(xnr, M, H, w, N, y, ldy, y_f32); });
      return;
    }
    op(kNormedProj, [&] {
      if (all_unscaled) return plain(x, M, H, w, N, y, ldy, y_f32);  // dropped: no rstd at all
      fk::LinearArgs a;
      a.dtype = dt, a.M = M, a.N = N, a.K = H, a.x = x, a.ldx = H, a.w = w, a.ldw = H, a.y = y;
      a.ldy = ldy, a.eps = cfg.eps, a.scale_mask = mask, a.y_f32 = y_f32;
      a.pdl = opt.pdl && M <= fk::LinearContext::kAutoDecodeMaxM;  // kDecode's option
      const fk::LinearImpl impl =
          opt.deferred == Deferred::kTwoStream ? fk::LinearImpl::kTwoStream : fk::LinearImpl::kAuto;
      ok(ctx->run(a, impl, s()));
    });
  }

  // x32 += sublayer output (post-norm for Gemma); xb = round(x32). With fused_add_norm (Standard
  // mode) also xn = RMSNorm(x32) * next_gain, the input of the next normed projection.
  void residual(int T, const DeviceBuffer& post, bool has_post, const void* next_gain) {
    const bool fuse = mode == NormMode::Standard && opt.fused_add_norm;
    op(fuse ? kNorm : kOther, [&] {
      ok(fk::residual_add(dt, T, H, proj.as<float>(), has_post ? post.as<float>() : nullptr,
                          cfg.eps, x32.as<float>(), xb.get(), s(), fuse ? next_gain : nullptr,
                          fuse ? xn.get() : nullptr, opt.pdl));
    });
    xn_ready = fuse;
  }

  // One forward pass of T tokens (ids in d_tokens, first position in d_pos): logits of the last
  // `rows` tokens into `logits` (rows = 0: none); with `sample`, then samples the next token
  // (decode-loop step: d_tokens[0] and d_pos advance).
  void run(int T, int rows, bool sample, float temperature, uint64_t seed) {
    xn_ready = false;  // never carried over from a pass that threw
    op(kOther, [&] {
      ok(fk::embed_tokens(dt, T, H, V, d_tokens.as<int32_t>(), emb.get(), emb_scale,
                          x32.as<float>(), xb.get(), s(), opt.pdl));
    });
    for (int l = 0; l < L; ++l) {
      Layer& ly = layers[l];
      normed(0, T, ly.attn_gain.get(), ly.wqkv.get(), nqkv, qkv.get(),
             qkv_masked ? qkv_mask.as<uint8_t>() : nullptr, qkv_all_unscaled, 0, true);
      fk::RopeKvArgs ra;
      ra.dt = dt, ra.T = T, ra.n_head = cfg.n_head, ra.n_head_kv = cfg.n_head_kv, ra.D = D;
      ra.max_ctx = max_ctx, ra.qkv = qkv.as<float>(), ra.ldqkv = nqkv, ra.pos = d_pos.as<int32_t>();
      ra.cos = (ly.local ? cos_l : cos_g).as<float>();
      ra.sin = (ly.local ? sin_l : sin_g).as<float>();
      ra.neox = cfg.rope == RopeLayout::Neox;
      ra.q_norm = ly.has_q_norm ? ly.q_norm.as<float>() : nullptr;
      ra.k_norm = ly.has_k_norm ? ly.k_norm.as<float>() : nullptr;
      ra.v_renorm = ly.v_renorm, ra.eps = cfg.eps, ra.q = q.as<float>();
      ra.k_cache = kc.as<float>() + size_t(l) * max_ctx * nkv;
      ra.v_cache = vc.as<float>() + size_t(l) * max_ctx * nkv;
      ra.pdl = opt.pdl;
      fk::AttentionArgs aa;
      aa.dt = dt, aa.T = T, aa.n_head = cfg.n_head, aa.n_head_kv = cfg.n_head_kv, aa.D = D;
      aa.max_ctx = max_ctx, aa.window = ly.local ? cfg.sliding_window : 0;
      aa.scale = cfg.attn_scale, aa.pos = d_pos.as<int32_t>(), aa.q = q.as<float>();
      aa.k_cache = ra.k_cache, aa.v_cache = ra.v_cache, aa.out = att.get(), aa.pdl = opt.pdl;
      if (T <= kSplitMaxT) aa.split_keys = split_keys(D), aa.partials = partials.as<float>();
      if (T <= kSplitMaxT && opt.fuse_decode_ops) {  // one kernel (engine_ops.h)
        op(kAttn, [&] { ok(fk::decode_attention(ra, aa, attn_counters.as<unsigned>(), s())); });
      } else {
        op(kAttn, [&] { ok(fk::rope_kv(ra, s())); });
        op(kAttn, [&] { ok(fk::attention(aa, s())); });
      }
      const bool fuse_res = opt.fuse_decode_ops && decode_path(T) && !ly.has_post &&
                            !(mode == NormMode::Standard && opt.fused_add_norm);
      op(kOtherProj,
         [&] { plain(att.get(), T, nq, ly.wo.get(), H, proj.get(), 0, true, fuse_res); });
      if (!fuse_res) residual(T, ly.post_attn, ly.has_post, ly.ffn_gain.get());
      normed(0, T, ly.ffn_gain.get(), ly.wgu.get(), 2 * F, gu.get(), nullptr, false, 0, true);
      const bool fuse_glu = glu_in_down(T);
      if (!fuse_glu) {
        op(kOther,
           [&] { ok(fk::glu(dt, glu_kind(), T, F, gu.as<float>(), act.get(), s(), opt.pdl)); });
      }
      op(kOtherProj, [&] {
        plain(fuse_glu ? gu.get() : act.get(), T, F, ly.wdown.get(), H, proj.get(), 0, true,
              fuse_res, fuse_glu);
      });
      if (!fuse_res) {
        residual(T, ly.post_ffn, ly.has_post,
                 l + 1 < L ? layers[l + 1].attn_gain.get() : out_gain.get());
      }
    }
    if (rows > 0) {
      normed(T - rows, rows, out_gain.get(), head_is_emb ? emb.get() : head.get(), V, logits.get(),
             nullptr, false, ldv, /*y_f32=*/true, /*keep_gain=*/head_is_emb);
    }
    xn_ready = false;
    if (sample) {
      op(kOther, [&] {
        ok(fk::sample_tokens(V, logits.as<float>() + size_t(rows - 1) * ldv, temperature, seed,
                             d_pos.as<int32_t>(), 1, d_tokens.as<int32_t>(),
                             d_history.as<int32_t>(), max_ctx + 1, sample_ws.get(), s(), opt.pdl));
      });
    }
  }

  // Autotunes the decode kernel's launch configuration for each one-token projection shape over
  // the layers' own weights (LinearContext::tune_decode); the results stay in ctx.
  void tune_gemvs() {
    struct Shape {
      const char* name;
      int N, K, ldy;
      const void* x;
      std::vector<const void*> w;
    };
    std::vector<Shape> shapes = {
        {"q|k|v", nqkv, H, nqkv, xb.get(), {}},
        {"o", H, nq, H, att.get(), {}},
        {"gate|up", 2 * F, H, 2 * F, xb.get(), {}},
        {"down", H, F, H, glu_in_down(1) ? gu.get() : act.get(), {}},
        {"lm_head", V, H, ldv, xb.get(), {head_is_emb ? emb.get() : head.get()}}};
    for (const Layer& l : layers) {
      shapes[0].w.push_back(l.wqkv.get()), shapes[1].w.push_back(l.wo.get());
      shapes[2].w.push_back(l.wgu.get()), shapes[3].w.push_back(l.wdown.get());
    }
    FN_CUDA_CHECK(cudaMemsetAsync(xb.get(), 0, xb.bytes(), s()));
    FN_CUDA_CHECK(cudaMemsetAsync(att.get(), 0, att.bytes(), s()));
    FN_CUDA_CHECK(cudaMemsetAsync(act.get(), 0, act.bytes(), s()));
    FN_CUDA_CHECK(cudaMemsetAsync(gu.get(), 0, gu.bytes(), s()));
    for (const Shape& sh : shapes) {
      std::vector<fk::LinearArgs> sets;
      for (const void* w : sh.w) {
        fk::LinearArgs a;
        const bool glu = sh.x == gu.get();
        a.dtype = dt, a.M = 1, a.N = sh.N, a.K = sh.K, a.x = sh.x, a.ldx = glu ? 2 * sh.K : sh.K;
        a.w = w, a.x_glu = glu, a.glu_kind = glu_kind();
        a.ldw = sh.K, a.y = logits.get(), a.ldy = sh.ldy, a.eps = cfg.eps, a.y_f32 = true;
        a.scale_mask = zero_mask.as<uint8_t>(), a.pdl = opt.pdl;
        sets.push_back(a);
      }
      fk::Status st;
      double us = 0;
      const fk::DecodeConfig c = ctx->tune_decode(sets.data(), static_cast<int>(sets.size()), s(),
                                                  &st, &us, nullptr, opt.decode_ring);
      ok(st);
      tuning.push_back({sh.name, sh.N, sh.K, c, us});
    }
  }

  // The decode GEMV configurations of another engine (CudaEngineOptions::gemv_configs).
  void use_gemv_configs(const std::vector<GemvTuning>& cfgs) {
    const std::pair<int, int> shapes[] = {{nqkv, H}, {H, nq}, {2 * F, H}, {H, F}, {V, H}};
    for (const GemvTuning& t : cfgs) {
      if (std::find(std::begin(shapes), std::end(shapes), std::pair{t.N, t.K}) == std::end(shapes))
        throw Error(fmt::format("gemv_configs: {} N={} K={} is not a projection of this model",
                                t.name, t.N, t.K));
      ok(ctx->set_decode_config(1, t.N, t.K, t.config));
    }
    for (const auto& [n, k] : shapes)  // a shape left out would run the heuristic instead
      if (std::none_of(cfgs.begin(), cfgs.end(),
                       [&](const GemvTuning& t) { return t.N == n && t.K == k; }))
        throw Error(
            fmt::format("gemv_configs: no configuration for the N={} K={} projection", n, k));
    tuning = cfgs;
  }

  void set_pos_device(int p) {
    *h_pos.as<int32_t>() = p;
    FN_CUDA_CHECK(
        cudaMemcpyAsync(d_pos.get(), h_pos.as<int32_t>(), 4, cudaMemcpyHostToDevice, s()));
    FN_CUDA_CHECK(cudaStreamSynchronize(s()));  // h_pos is reused by the next call
    pos_stale = false;
  }

  // One decode step of the token already in d_tokens[0] at position pos (d_pos current): graph
  // replay when enabled (captured on the second step: the first runs eagerly and warms up
  // LinearContext's buffers and cuBLASLt plans so that capture allocates nothing).
  void decode_step(float temperature, uint64_t seed) {
    check_capacity(1);
    if (pos_stale) set_pos_device(pos);
    if (!opt.graph || !warmed) {
      run(1, 1, true, temperature, seed);
      warmed = true;
    } else {
      if (graph.empty() || graph_temp != temperature || graph_seed != seed ||
          graph_generation != ctx->workspace_generation()) {
        cudaGraph_t g = nullptr;
        FN_CUDA_CHECK(cudaStreamBeginCapture(s(), cudaStreamCaptureModeThreadLocal));
        try {
          run(1, 1, true, temperature, seed);
        } catch (...) {
          cudaStreamEndCapture(s(), &g);
          if (g) cudaGraphDestroy(g);
          throw;
        }
        FN_CUDA_CHECK(cudaStreamEndCapture(s(), &g));
        graph.set(g);
        graph_temp = temperature, graph_seed = seed;
        graph_generation = ctx->workspace_generation();
      }
      graph.launch(s());
    }
    ++pos;
  }

  void check_capacity(size_t n) const {
    if (size_t(pos) + n > size_t(max_ctx)) {
      throw Error(
          fmt::format("context full: {} + {} tokens exceed the KV cache of {}", pos, n, max_ctx));
    }
  }

  // Eager forward of tokens in chunks of tmax; logits (rows of the last chunk, or all) to host.
  std::vector<float> prefill(std::span<const int32_t> tokens, bool all_logits) {
    std::vector<float> out;
    if (all_logits) out.reserve(tokens.size() * size_t(V));
    for (size_t start = 0; start < tokens.size(); start += tmax) {
      const int n = static_cast<int>(std::min<size_t>(tmax, tokens.size() - start));
      const bool last = start + n == tokens.size();
      const int rows = all_logits ? n : (last ? 1 : 0);
      std::copy(tokens.begin() + start, tokens.begin() + start + n, h_tokens.as<int32_t>());
      *h_pos.as<int32_t>() = pos;
      FN_CUDA_CHECK(cudaMemcpyAsync(d_tokens.get(), h_tokens.as<int32_t>(), n * 4,
                                    cudaMemcpyHostToDevice, s()));
      FN_CUDA_CHECK(
          cudaMemcpyAsync(d_pos.get(), h_pos.as<int32_t>(), 4, cudaMemcpyHostToDevice, s()));
      run(n, rows, false, 0, 0);
      if (rows > 0) {
        FN_CUDA_CHECK(cudaMemcpyAsync(h_logits.as<float>(), logits.get(), size_t(rows) * ldv * 4,
                                      cudaMemcpyDeviceToHost, s()));
      }
      FN_CUDA_CHECK(cudaStreamSynchronize(s()));
      const float* hl = h_logits.as<float>();
      for (size_t r = 0; r < size_t(rows); ++r) {
        out.insert(out.end(), hl + r * ldv, hl + r * ldv + V);
      }
      pos += n;
      pos_stale = true;
    }
    return out;
  }
};

namespace {
// Throws before any CUDA object is made when no usable GPU is present.
void require_gpu() {
  std::string why;
  if (!cuda_device_available(&why)) throw Error("no usable NVIDIA GPU: " + why);
}
}  // namespace

CudaEngine::CudaEngine(const Model& m, NormMode mode, const CudaEngineOptions& opt)
    : p_((require_gpu(), std::make_unique<Impl>())) {
  Impl& e = *p_;
  const ModelConfig& c = m.cfg;
  const ArchDescription& a = *m.arch;
  e.cfg = c, e.hooks = a.hooks, e.mode = mode, e.opt = opt, e.dt = opt.dtype;
  e.H = c.hidden, e.F = c.ffn, e.D = c.head_dim, e.L = c.n_layer, e.V = c.vocab;
  e.ldv = (e.V + 7) / 8 * 8;
  e.nq = c.n_head * c.head_dim, e.nkv = c.n_head_kv * c.head_dim, e.nqkv = e.nq + 2 * e.nkv;
  e.max_ctx = opt.max_context > 0 ? opt.max_context : std::min(c.context, 8192);
  if (e.max_ctx > c.context || e.max_ctx > 32768) {
    throw Error(
        fmt::format("a KV cache of {} positions exceeds the model's context length {} "
                    "(or the CUDA engine's 32768)",
                    e.max_ctx, c.context));
  }
  e.tmax = std::clamp(opt.max_batch, 1, e.max_ctx);
  if (e.H % 8 || e.F % 8 || e.nq % 8 || e.nkv % 8 || e.D % 4 || e.D > 256) {
    throw Error(
        fmt::format("the CUDA engine needs hidden, ffn and head widths that are multiples "
                    "of 8 and head_dim <= 256 (hidden {}, ffn {}, head_dim {})",
                    e.H, e.F, e.D));
  }
  e.emb_scale = a.hooks.embed_scale_sqrt_hidden ? std::sqrt(float(e.H)) : 1.0f;
  const bool fold = mode == NormMode::FlashNorm;
  const bool cancel = opt.cancel && fold;
  const fk::DType dt = e.dt;
  auto gain_of = [&](const std::string& name) { return effective_gain(m.get(name), c.gains); };
  auto gain_dt = [&](const std::vector<double>& g) {
    std::vector<uint16_t> b;
    for (double v : g) b.push_back(round_dt(dt, v));
    return upload(b);
  };
  auto gain_f32 = [&](const std::vector<double>& g) {
    return upload(std::vector<float>(g.begin(), g.end()));
  };
  for (const LayerPlan& p : plan_layers(m)) {
    Impl::Layer ly;
    const std::vector<double> ag = gain_of(p.attn_norm), fg = gain_of(p.ffn_norm);
    ly.attn_gain = gain_dt(ag);
    ly.ffn_gain = gain_dt(fg);
    if (!p.q_norm.empty()) ly.q_norm = gain_f32(gain_of(p.q_norm)), ly.has_q_norm = true;
    if (!p.k_norm.empty()) ly.k_norm = gain_f32(gain_of(p.k_norm)), ly.has_k_norm = true;
    ly.v_renorm = p.v_renorm;
    std::vector<uint16_t> w;
    for (const std::string& t : p.qkv) append_rows(dt, m.get(t), fold ? &ag : nullptr, w);
    ly.wqkv = upload(w);
    w.clear();
    append_rows(dt, m.get(p.gate), fold ? &fg : nullptr, w);
    append_rows(dt, m.get(p.up), fold ? &fg : nullptr, w);
    ly.wgu = upload(w);
    w.clear();
    append_rows(dt, m.get(p.attn_output), nullptr, w);
    ly.wo = upload(w);
    w.clear();
    append_rows(dt, m.get(p.down), nullptr, w);
    ly.wdown = upload(w);
    if (!p.post_attn.empty()) {
      ly.post_attn = gain_f32(gain_of(p.post_attn));
      ly.post_ffn = gain_f32(gain_of(p.post_ffn));
      ly.has_post = true;
    }
    ly.local = p.local;
    e.layers.push_back(std::move(ly));
  }
  // q|k|v columns whose rstd cancels (QK-norm renormalizes them): scale mask 0 there.
  if (cancel && !e.layers.empty()) {
    const Impl::Layer& l0 = e.layers[0];
    std::vector<uint8_t> mask(e.nqkv, 1);
    if (l0.has_q_norm) std::fill(mask.begin(), mask.begin() + e.nq, 0);
    if (l0.has_k_norm) std::fill(mask.begin() + e.nq, mask.begin() + e.nq + e.nkv, 0);
    if (l0.v_renorm) std::fill(mask.begin() + e.nq + e.nkv, mask.end(), 0);
    e.qkv_masked = std::count(mask.begin(), mask.end(), 0) > 0;
    e.qkv_all_unscaled = std::count(mask.begin(), mask.end(), 0) == e.nqkv;
    e.qkv_mask = upload(mask);
  }
  e.zero_mask = upload(std::vector<uint8_t>(std::max({e.V, e.nqkv, 2 * e.F, e.H}), 0));
  const std::vector<double> og = gain_of("output_norm.weight");
  e.out_gain = gain_dt(og);
  {
    std::vector<uint16_t> w;
    append_rows(dt, m.get(a.tied_source), nullptr, w);
    e.emb = upload(w);
    if (c.tied_head && (!fold || !opt.fold_tied_head)) {
      e.head_is_emb = true;
    } else {
      w.clear();
      append_rows(dt, m.head(), fold ? &og : nullptr, w);
      e.head = upload(w);
    }
  }
  std::vector<float> cs, sn;
  rope_tables(e.max_ctx, e.D, c.rope_global, cs, sn);
  e.cos_g = upload(cs), e.sin_g = upload(sn);
  if (!c.layer_local.empty()) {
    rope_tables(e.max_ctx, e.D, c.rope_local, cs, sn);
    e.cos_l = upload(cs), e.sin_l = upload(sn);
  } else {
    e.cos_l = upload(std::vector<float>(1)), e.sin_l = upload(std::vector<float>(1));
  }
  const size_t kv = size_t(e.L) * e.max_ctx * e.nkv * sizeof(float);
  e.kc = DeviceBuffer(kv), e.vc = DeviceBuffer(kv);
  const size_t T = e.tmax;
  e.d_tokens = DeviceBuffer(T * 4), e.d_pos = DeviceBuffer(4);
  e.d_history = DeviceBuffer((size_t(e.max_ctx) + 1) * 4);
  e.x32 = DeviceBuffer(T * e.H * 4), e.xb = DeviceBuffer(T * e.H * 2);
  e.xn = DeviceBuffer(T * e.H * 2), e.qkv = DeviceBuffer(T * e.nqkv * 4);
  e.q = DeviceBuffer(T * e.nq * 4), e.att = DeviceBuffer(T * e.nq * 2);
  e.proj = DeviceBuffer(T * e.H * 4), e.gu = DeviceBuffer(T * 2 * e.F * 4);
  e.act = DeviceBuffer(T * e.F * 2),
  e.logits = DeviceBuffer(  // also the scratch output of tune_gemvs
      std::max(T * e.ldv, size_t(std::max({e.nqkv, 2 * e.F, e.H}))) * 4);
  e.h_tokens = kernels::cuda::PinnedBuffer(T * 4), e.h_pos = kernels::cuda::PinnedBuffer(4);
  e.h_logits = kernels::cuda::PinnedBuffer(T * e.ldv * 4);
  {
    fk::AttentionArgs aa;
    aa.max_ctx = e.max_ctx, aa.split_keys = split_keys(e.D);
    e.partials = DeviceBuffer(size_t(std::min<size_t>(T, kSplitMaxT)) * c.n_head *
                              fk::attention_splits(aa) * (e.D + 2) * sizeof(float));
    e.attn_counters = DeviceBuffer(size_t(fk::kDecodeAttentionMaxT) * c.n_head * sizeof(unsigned));
    FN_CUDA_CHECK(cudaMemset(e.attn_counters.get(), 0, e.attn_counters.bytes()));
    e.sample_ws = DeviceBuffer(fk::sample_workspace_bytes());
    FN_CUDA_CHECK(cudaMemset(e.sample_ws.get(), 0, e.sample_ws.bytes()));
  }
  FN_CUDA_CHECK(cudaMemset(e.kc.get(), 0, kv));
  FN_CUDA_CHECK(cudaMemset(e.vc.get(), 0, kv));
  e.ctx = std::make_unique<fk::LinearContext>();
  e.ctx->debug = opt.debug;
  if (!opt.gemv_configs.empty()) {
    e.use_gemv_configs(opt.gemv_configs);
  } else if (opt.tune) {
    e.tune_gemvs();
  }
  FN_CUDA_CHECK(cudaDeviceSynchronize());
}

const std::vector<GemvTuning>& CudaEngine::gemv_tuning() const { return p_->tuning; }

CudaEngine::~CudaEngine() {
  if (p_) cudaStreamSynchronize(p_->s());
}

void CudaEngine::reset() { p_->pos = 0, p_->pos_stale = true; }
int CudaEngine::position() const { return p_->pos; }
int CudaEngine::max_context() const { return p_->max_ctx; }
const ModelConfig& CudaEngine::config() const { return p_->cfg; }
NormMode CudaEngine::mode() const { return p_->mode; }

std::string CudaEngine::describe() const {
  const Impl& e = *p_;
  std::string variant;
  if (e.mode == NormMode::FlashNorm) {
    variant = e.opt.deferred == Deferred::kTwoStream ? " (two-stream" : " (fused";
    if (e.head_is_emb) variant += "; tied LM head: final RMSNorm keeps its gain";
    if (e.cfg.tied_head && !e.head_is_emb) variant += "; tied LM head folded into an untied copy";
    variant += ")";
  } else if (e.opt.fused_add_norm) {
    variant = " (residual add + RMSNorm fused)";
  }
  return fmt::format("{} weights, norm {}{}, decode {}{}{}",
                     e.dt == fk::DType::kBF16 ? "bf16" : "fp16",
                     e.mode == NormMode::Standard ? "standard" : "flashnorm", variant,
                     e.opt.graph ? "CUDA graph" : "eager", e.opt.pdl ? " + PDL" : "",
                     e.opt.fuse_decode_ops ? ", fused decode ops" : "");
}

std::vector<float> CudaEngine::forward(std::span<const int32_t> tokens, bool all_logits) {
  Impl& e = *p_;
  if (tokens.empty()) throw Error("forward: no tokens");
  for (int32_t t : tokens) {
    if (t < 0 || t >= e.V) {
      throw Error(fmt::format("token id {} is outside the vocabulary of {}", t, e.V));
    }
  }
  e.check_capacity(tokens.size());
  if (tokens.size() > 1) return e.prefill(tokens, all_logits);
  // One token: the decode step (graph replay), logits copied out.
  *e.h_tokens.as<int32_t>() = tokens[0];
  FN_CUDA_CHECK(cudaMemcpyAsync(e.d_tokens.get(), e.h_tokens.as<int32_t>(), 4,
                                cudaMemcpyHostToDevice, e.s()));
  e.decode_step(0.0f, 0);
  FN_CUDA_CHECK(cudaMemcpyAsync(e.h_logits.as<float>(), e.logits.get(), size_t(e.V) * 4,
                                cudaMemcpyDeviceToHost, e.s()));
  FN_CUDA_CHECK(cudaStreamSynchronize(e.s()));
  return std::vector<float>(e.h_logits.as<float>(), e.h_logits.as<float>() + e.V);
}

std::vector<int32_t> CudaEngine::generate(std::span<const int32_t> prompt, int n, float temperature,
                                          uint64_t seed,
                                          const std::function<bool(int32_t)>& on_token) {
  Impl& e = *p_;
  if (prompt.empty()) throw Error("generate: empty prompt");
  if (n < 1) return {};
  for (int32_t t : prompt) {
    if (t < 0 || t >= e.V) {
      throw Error(fmt::format("token id {} is outside the vocabulary of {}", t, e.V));
    }
  }
  e.check_capacity(prompt.size() + n - 1);
  e.prefill(prompt, false);
  // First token from the prompt's last logits (position pos - 1 advances to pos).
  e.set_pos_device(e.pos - 1);
  ok(fk::sample_tokens(e.V, e.logits.as<float>(), temperature, seed, e.d_pos.as<int32_t>(), 1,
                       e.d_tokens.as<int32_t>(), e.d_history.as<int32_t>(), e.max_ctx + 1,
                       e.sample_ws.get(), e.s()));
  const int first = e.pos;  // position of the first generated token
  int produced = 1;
  auto read_token = [&]() {
    FN_CUDA_CHECK(cudaMemcpyAsync(e.h_tokens.as<int32_t>(), e.d_tokens.get(), 4,
                                  cudaMemcpyDeviceToHost, e.s()));
    FN_CUDA_CHECK(cudaStreamSynchronize(e.s()));
    return *e.h_tokens.as<int32_t>();
  };
  bool go = on_token ? on_token(read_token()) : true;
  while (go && produced < n) {
    e.decode_step(temperature, seed);
    ++produced;
    if (on_token) go = on_token(read_token());
  }
  std::vector<int32_t> out(produced);
  FN_CUDA_CHECK(cudaMemcpyAsync(out.data(), e.d_history.as<int32_t>() + first, produced * 4,
                                cudaMemcpyDeviceToHost, e.s()));
  FN_CUDA_CHECK(cudaStreamSynchronize(e.s()));
  return out;
}

double CudaEngine::time_decode_steps(int reps) {
  Impl& e = *p_;
  e.check_capacity(reps + 2);
  e.decode_step(0.0f, 0);  // warm-up (and graph capture)
  e.decode_step(0.0f, 0);
  FN_CUDA_CHECK(cudaStreamSynchronize(e.s()));
  fk::Event a, b;
  FN_CUDA_CHECK(cudaEventRecord(a.get(), e.s()));
  for (int i = 0; i < reps; ++i) e.decode_step(0.0f, 0);
  FN_CUDA_CHECK(cudaEventRecord(b.get(), e.s()));
  FN_CUDA_CHECK(cudaEventSynchronize(b.get()));
  float ms = 0;
  FN_CUDA_CHECK(cudaEventElapsedTime(&ms, a.get(), b.get()));
  return 1000.0 * ms / reps;
}

StepProfile CudaEngine::profile_decode_step(int reps) {
  Impl& e = *p_;
  e.check_capacity(reps + 1);
  e.decode_step(0.0f, 0);  // warm (eager when no step ran yet)
  std::vector<std::vector<double>> per(kClasses);
  for (int r = 0; r < reps; ++r) {
    if (e.pos_stale) e.set_pos_device(e.pos);
    FN_CUDA_CHECK(cudaStreamSynchronize(e.s()));
    e.profiling = true;
    e.event_cls.clear();
    try {
      e.run(1, 1, true, 0.0f, 0);
    } catch (...) {
      e.profiling = false;
      throw;
    }
    e.profiling = false;
    ++e.pos;
    FN_CUDA_CHECK(cudaStreamSynchronize(e.s()));
    std::vector<double> sum(kClasses, 0.0);
    for (size_t i = 0; i < e.event_cls.size(); ++i) {
      float ms = 0;
      FN_CUDA_CHECK(cudaEventElapsedTime(&ms, e.events[2 * i]->get(), e.events[2 * i + 1]->get()));
      sum[e.event_cls[i]] += 1000.0 * ms;
    }
    for (int c = 0; c < kClasses; ++c) per[c].push_back(sum[c]);
  }
  StepProfile p;
  p.norm_us = median(per[kNorm]);
  p.normed_proj_us = median(per[kNormedProj]);
  p.other_proj_us = median(per[kOtherProj]);
  p.attention_us = median(per[kAttn]);
  p.other_us = median(per[kOther]);
  return p;
}

}  // namespace flashnorm
