// CudaEngine (engine/cuda_engine.h) for one sequence: construction, prefill, the decode loop,
// generation on the device and the decode-step timings (batched sequences: sequences.cpp). Host
// code only; the kernels are in src/kernels/cuda.
#include "flashnorm/engine/cuda_engine.h"

#include <fmt/format.h>

#include <algorithm>

#include "engine_impl.h"
#include "flashnorm/error.h"

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

namespace {
// FP8 models (ModelConfig::fp8: per-token quantized activations) are the CPU engine's only.
bool refuse_fp8(const Model& m) {
  if (m.cfg.fp8) {
    throw Error(fmt::format(
        "{}/config.json: quantization_config (FP8): the CUDA engine does not run FP8 models yet",
        m.source.string()));
  }
  return true;
}
}  // namespace

CudaEngine::CudaEngine(const Model& m, NormMode mode, const CudaEngineOptions& opt)
    : p_((refuse_fp8(m), require_gpu(), std::make_unique<Impl>(m, mode, opt))) {}

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
  // CudaLaunch::quant_glu_out: the layers whose one-token passes take it
  int glu_layers = 0;
  for (const auto& ly : e.w.layers) glu_layers += e.f.glu_in_gate_up(1, ly);
  const std::string glu =
      o.launch.quant_glu_out
          ? fmt::format(", GLU in the gate|up epilogue ({} of {} layers)", glu_layers, e.d.L)
          : "";
  std::string attn;  // the launch ablations of decode_attention, when set
  if (o.launch.attention_ctas_per_sm != 1)
    attn += fmt::format(", attention at {} CTAs per SM", o.launch.attention_ctas_per_sm);
  if (o.launch.attention_late_trigger) attn += ", attention's PDL trigger late";
  return fmt::format("{} weights, norm {}{}, decode {}{}{}{}{}", weights,
                     e.mode == NormMode::Standard ? "standard" : "flashnorm", variant,
                     o.launch.decode == DecodeLaunch::kGraph ? "CUDA graph" : "eager",
                     o.launch.pdl ? " + PDL" : "",
                     o.launch.fuse_decode_ops ? ", fused decode ops" : "", glu, attn);
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
