// CudaEngine (engine/cuda_engine.h): owns the parts of internal.h and runs prefill, the decode
// loop, generation on the device and the decode-step timings. Host code only; the kernels are in
// src/kernels/cuda (kernels.cu: RMSNorm and flashnorm_linear; engine_ops.cu: the rest).
#include "flashnorm/engine/cuda_engine.h"

#include <fmt/format.h>

#include <algorithm>

#include "flashnorm/error.h"
#include "internal.h"

namespace flashnorm {
using namespace cuda_engine;

bool cuda_device_available(std::string* why) { return fk::hopper_device_available(why); }

namespace {
// Throws before any CUDA object is made when no usable GPU is present.
void require_gpu() {
  std::string why;
  if (!cuda_device_available(&why)) throw Error("no usable NVIDIA GPU: " + why);
}
}  // namespace

struct CudaEngine::Impl {
  Impl(const Model& m, NormMode mode, const CudaEngineOptions& opt)
      : cfg(m.cfg),
        hooks(m.arch->hooks),
        mode(mode),
        opt(opt),
        d(make_dims(m.cfg, *m.arch, opt.capacity)),
        w(upload_weights(m, mode, opt, d)),
        ws(d, m.cfg, w.tile_elems),
        ctx(std::make_unique<fk::LinearContext>()),
        f{cfg, hooks, mode, this->opt, to_dtype(opt.dtype), d, w, ws, *ctx, prof, stream.get()} {
    ctx->set_race_hooks(opt.debug);
    if (!opt.gemv_configs.empty()) {
      use_gemv_configs(f, opt.gemv_configs);
      tuning = opt.gemv_configs;
    } else if (opt.gemv.choice == GemvChoice::kTune) {
      tuning = tune_gemvs(f);
    }
    FN_CUDA_CHECK(cudaDeviceSynchronize());
  }

  ModelConfig cfg;
  ArchHooks hooks;
  NormMode mode;
  CudaEngineOptions opt;
  fk::Stream stream;
  Dims d;
  DeviceWeights w;
  Workspace ws;
  std::unique_ptr<fk::LinearContext> ctx;
  StepProfiler prof;
  Forward f;
  DecodeGraph graph;
  std::vector<GemvTuning> tuning;
  int pos = 0;
  bool pos_stale = true;  // d_pos does not hold pos

  cudaStream_t s() const { return stream.get(); }

  void set_pos_device(int p) {
    *ws.h_pos.as<int32_t>() = p;
    FN_CUDA_CHECK(
        cudaMemcpyAsync(ws.d_pos.get(), ws.h_pos.as<int32_t>(), 4, cudaMemcpyHostToDevice, s()));
    FN_CUDA_CHECK(cudaStreamSynchronize(s()));  // h_pos is reused by the next call
    pos_stale = false;
  }

  // One decode step of the token already in d_tokens[0] at position pos (DecodeGraph::step).
  void decode_step(float temperature, uint64_t seed) {
    check_capacity(1);
    if (pos_stale) set_pos_device(pos);
    graph.step(f, pos, temperature, seed);
    ++pos;
  }

  void check_capacity(size_t n) const {
    if (size_t(pos) + n > size_t(d.max_ctx)) {
      throw Error(
          fmt::format("context full: {} + {} tokens exceed the KV cache of {}", pos, n, d.max_ctx));
    }
  }

  void check_ids(std::span<const int32_t> tokens) const {
    for (int32_t t : tokens) {
      if (t < 0 || t >= d.V) {
        throw Error(fmt::format("token id {} is outside the vocabulary of {}", t, d.V));
      }
    }
  }

  // Eager forward of tokens in chunks of tmax; logits (rows of the last chunk, or all) to host.
  std::vector<float> prefill(std::span<const int32_t> tokens, bool all_logits) {
    std::vector<float> out;
    if (all_logits) out.reserve(tokens.size() * size_t(d.V));
    for (size_t start = 0; start < tokens.size(); start += d.tmax) {
      const int n = static_cast<int>(std::min<size_t>(d.tmax, tokens.size() - start));
      const bool last = start + n == tokens.size();
      const int rows = all_logits ? n : (last ? 1 : 0);
      std::copy(tokens.begin() + start, tokens.begin() + start + n, ws.h_tokens.as<int32_t>());
      *ws.h_pos.as<int32_t>() = pos;
      FN_CUDA_CHECK(cudaMemcpyAsync(ws.d_tokens.get(), ws.h_tokens.as<int32_t>(), n * 4,
                                    cudaMemcpyHostToDevice, s()));
      FN_CUDA_CHECK(
          cudaMemcpyAsync(ws.d_pos.get(), ws.h_pos.as<int32_t>(), 4, cudaMemcpyHostToDevice, s()));
      f.run(n, rows, false, 0, 0, pos + n);
      if (rows > 0) {
        FN_CUDA_CHECK(cudaMemcpyAsync(ws.h_logits.as<float>(), ws.logits.get(),
                                      size_t(rows) * d.ldv * 4, cudaMemcpyDeviceToHost, s()));
      }
      FN_CUDA_CHECK(cudaStreamSynchronize(s()));
      const float* hl = ws.h_logits.as<float>();
      for (size_t r = 0; r < size_t(rows); ++r) {
        out.insert(out.end(), hl + r * d.ldv, hl + r * d.ldv + d.V);
      }
      pos += n;
      pos_stale = true;
    }
    return out;
  }
};

CudaEngine::CudaEngine(const Model& m, NormMode mode, const CudaEngineOptions& opt)
    : p_((require_gpu(), std::make_unique<Impl>(m, mode, opt))) {}

const std::vector<GemvTuning>& CudaEngine::gemv_tuning() const { return p_->tuning; }

CudaEngine::~CudaEngine() {
  if (p_) cudaStreamSynchronize(p_->s());
}

void CudaEngine::reset() { p_->pos = 0, p_->pos_stale = true; }
int CudaEngine::position() const { return p_->pos; }
int CudaEngine::max_context() const { return p_->d.max_ctx; }
const ModelConfig& CudaEngine::config() const { return p_->cfg; }
NormMode CudaEngine::mode() const { return p_->mode; }

std::string CudaEngine::describe() const {
  const Impl& e = *p_;
  const CudaEngineOptions& o = e.opt;
  std::string variant;
  if (e.mode == NormMode::FlashNorm) {
    variant = o.flashnorm.deferred == Deferred::kTwoStream ? " (two-stream" : " (fused";
    variant += o.flashnorm.prefill == PrefillNorm::kInAdd ? "; prompts: rstd in the residual add"
                                                          : "; prompts: rstd deferred";
    if (e.w.head_is_emb) variant += "; tied LM head: final RMSNorm keeps its gain";
    if (e.cfg.tied_head && !e.w.head_is_emb) {
      variant += e.w.qhead.empty() ? "; tied LM head folded into an untied copy"
                                   : "; tied LM head in its blocks, the final gain applied to x";
    }
    variant += ")";
  } else if (o.standard == StandardNorm::kFusedAdd) {
    variant = " (residual add + RMSNorm fused)";
  }
  std::string weights = o.dtype == HalfType::kBF16 ? "bf16" : "fp16";
  if (e.w.any_quant) weights = "native GGML weights (" + e.w.quant_summary + "), " + weights;
  return fmt::format("{} weights, norm {}{}, decode {}{}{}", weights,
                     e.mode == NormMode::Standard ? "standard" : "flashnorm", variant,
                     o.launch.decode == DecodeLaunch::kGraph ? "CUDA graph" : "eager",
                     o.launch.pdl ? " + PDL" : "",
                     o.launch.fuse_decode_ops ? ", fused decode ops" : "");
}

std::vector<float> CudaEngine::forward(std::span<const int32_t> tokens, bool all_logits) {
  Impl& e = *p_;
  if (tokens.empty()) throw Error("forward: no tokens");
  e.check_ids(tokens);
  e.check_capacity(tokens.size());
  if (tokens.size() > 1) return e.prefill(tokens, all_logits);
  // One token: the decode step (graph replay), logits copied out.
  *e.ws.h_tokens.as<int32_t>() = tokens[0];
  FN_CUDA_CHECK(cudaMemcpyAsync(e.ws.d_tokens.get(), e.ws.h_tokens.as<int32_t>(), 4,
                                cudaMemcpyHostToDevice, e.s()));
  e.decode_step(0.0f, 0);
  FN_CUDA_CHECK(cudaMemcpyAsync(e.ws.h_logits.as<float>(), e.ws.logits.get(), size_t(e.d.V) * 4,
                                cudaMemcpyDeviceToHost, e.s()));
  FN_CUDA_CHECK(cudaStreamSynchronize(e.s()));
  return std::vector<float>(e.ws.h_logits.as<float>(), e.ws.h_logits.as<float>() + e.d.V);
}

std::vector<int32_t> CudaEngine::generate(std::span<const int32_t> prompt, int n, float temperature,
                                          uint64_t seed,
                                          const std::function<bool(int32_t)>& on_token) {
  Impl& e = *p_;
  Workspace& ws = e.ws;
  if (prompt.empty()) throw Error("generate: empty prompt");
  if (n < 1) return {};
  e.check_ids(prompt);
  e.check_capacity(prompt.size() + n - 1);
  e.prefill(prompt, false);
  // First token from the prompt's last logits (position pos - 1 advances to pos).
  e.set_pos_device(e.pos - 1);
  ok(fk::sample_tokens(e.d.V, ws.logits.as<float>(), temperature, seed, ws.d_pos.as<int32_t>(), 1,
                       ws.d_tokens.as<int32_t>(), ws.d_history.as<int32_t>(), e.d.max_ctx + 1,
                       ws.sample_ws.get(), e.s()));
  const int first = e.pos;  // position of the first generated token
  int produced = 1;
  auto read_token = [&]() {
    FN_CUDA_CHECK(cudaMemcpyAsync(ws.h_tokens.as<int32_t>(), ws.d_tokens.get(), 4,
                                  cudaMemcpyDeviceToHost, e.s()));
    FN_CUDA_CHECK(cudaStreamSynchronize(e.s()));
    return *ws.h_tokens.as<int32_t>();
  };
  bool go = on_token ? on_token(read_token()) : true;
  while (go && produced < n) {
    e.decode_step(temperature, seed);
    ++produced;
    if (on_token) go = on_token(read_token());
  }
  std::vector<int32_t> out(produced);
  FN_CUDA_CHECK(cudaMemcpyAsync(out.data(), ws.d_history.as<int32_t>() + first, produced * 4,
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
    e.prof.start();
    try {
      e.f.run(1, 1, true, 0.0f, 0, e.pos + 1);
    } catch (...) {
      e.prof.stop();
      throw;
    }
    e.prof.stop();
    ++e.pos;
    FN_CUDA_CHECK(cudaStreamSynchronize(e.s()));
    const std::vector<double> sum = e.prof.class_us();
    for (int c = 0; c < kClasses; ++c) per[c].push_back(sum[c]);
  }
  return median_profile(per);
}

}  // namespace flashnorm
