// CUDA inference engine (Hopper, sm_90a) for the llama and gemma3 architectures: the CPU engine's
// forward pass (engine/cpu_engine.h) with weights in bf16 (or fp16) on the GPU, dequantized and,
// in FlashNorm mode, folded at load in fp32 and rounded once. Residual stream, queries, KV cache,
// attention and every GEMM output (q|k|v, o, gate|up, down, logits) in fp32; GEMM inputs (the
// normed or raw x, the attention output, the GLU output) in the weight dtype; fp32 accumulation.
//
// Per layer: embed -> [norm + q|k|v] -> RoPE/QK-norm/KV write -> attention -> o -> residual add ->
// [norm + gate|up] -> GLU -> down -> residual add; final [norm + LM head] -> sampling on the GPU.
// (Decode fuses the residual adds and the GLU into the o/down projections and RoPE/KV write into
// the attention kernel: fuse_decode_ops.)
// The bracketed "normed projections" are where the modes differ (design notes sections 1-3):
//   Standard:  rms_norm (kernels.h, gain in the weight dtype) then the plain projection.
//   FlashNorm: flashnorm_linear on the raw x with folded weights (kDecode's fused kernel for
//              decode, kPrefill for prompts; Deferred::kTwoStream: the seed's two-stream scheme
//              with its event join), QK-norm-cancelled columns unscaled (scale_mask) when `cancel`.
// Plain projections (o, down, and the Standard mode's normed ones) use the same kernel in both
// modes: the decode kernel with every column unscaled for M <= 16 tokens, cuBLASLt above, so that
// the modes differ by the normalization alone.
//
// Decode steps (one token) replay a CUDA graph captured on first use: token id and position live
// in device memory, the sampler writes the next id and advances the position, so a whole generation
// runs without the host in the loop (generate()). Buffers are reused across steps, as in a
// production engine; this is what the long-generation race test exercises.
// Errors: flashnorm::Error for unsupported models (a v renorm with a gain), a missing GPU, CUDA
// failures (message names the call), bad token ids, a full KV cache.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "flashnorm/engine/engine.h"
#include "flashnorm/kernels/cuda/kernels.h"

namespace flashnorm {

// How FlashNorm mode runs its deferred normalization.
enum class Deferred {
  kFused,      // flashnorm_linear's dispatcher (kAuto): one fused kernel in decode
  kTwoStream,  // the seed's scheme: cuBLASLt GEMM + rstd on a side stream, events, post-scale
};

// The decode GEMV launch configuration chosen at load for one one-token projection shape
// (options.tune), with its time per call in microseconds (graph replay, weights rotated over the
// layers; LinearContext::tune_decode).
struct GemvTuning {
  std::string name;  // "q|k|v", "o", "gate|up", "down", "lm_head"
  int N = 0, K = 0;
  kernels::cuda::DecodeConfig config;
  double us = 0;
};

struct CudaEngineOptions {
  int max_context = 0;  // KV cache positions; 0: min(model context, 8192); at most 32768
  int max_batch = 512;  // largest number of tokens in one forward pass (longer ones are split)
  bool cancel = true;   // FlashNorm mode: drop the rstd that QK-norm cancels
  // FlashNorm mode, LM head tied to the token embedding (SmolLM2, Gemma): false keeps it tied and
  // runs the final RMSNorm with its gain (one rms_norm launch per pass that computes logits; the
  // head reads the same dtype weights as Standard's); true folds the final gain into an untied
  // copy of the head (no norm kernel at all, but vocab x hidden more weights on the GPU, e.g.
  // +57 MB in bf16 for SmolLM2-135M, +336 MB for Gemma 3 270M, and the head rounded to dtype as
  // round(g * E) instead of Standard's round(E) with g applied to the activation). No effect on an
  // untied head (a folded file's included).
  bool fold_tied_head = false;
  kernels::cuda::DType dtype = kernels::cuda::DType::kBF16;
  Deferred deferred = Deferred::kFused;
  bool graph = true;          // replay decode steps from a CUDA graph (false: eager launches)
  bool cublas_plain = false;  // plain projections through cuBLASLt at every M
  // Standard mode: the residual add also writes the next RMSNorm's output (vLLM's
  // fused_add_rms_norm), so no standalone norm kernel runs after the first layer's.
  bool fused_add_norm = false;
  // Launch every kernel of a forward pass with programmatic dependent launch (both modes): each
  // may start while the preceding one finishes and waits for it before touching memory; the decode
  // GEMV streams its weights during the wait (kernels.h, LinearArgs::pdl).
  bool pdl = true;
  // Forward passes of at most 16 tokens (decode) whose plain projections take the decode kernel
  // (not with cublas_plain): the residual add runs in the epilogue of the o and down projections
  // (LinearArgs::accumulate; layers without a post-norm, and not with fused_add_norm, whose add
  // carries the next norm), the GLU inside the down projection (LinearArgs::x_glu; when its staged
  // input, T x ffn dtype elements, is at most 48 KiB), and RoPE / QK-norm / KV write, split-key
  // attention and the merge of the key chunks as one kernel (decode_attention). Same functions as
  // the separate kernels, in both modes; up to five fewer launches per layer (two with post-norms).
  bool fuse_decode_ops = true;
  // At load, autotune the decode GEMV's launch configuration (CTA shape, split-K) for each
  // one-token projection shape over the layers' own weights (LinearContext::tune_decode).
  bool tune = true;
  // Let that tuning pick the decode GEMV's cp.async ring (DecodeConfig::stages; M <= 8). Off by
  // default: the ring won on SmolLM2's q|k|v and o shapes timed alone, yet the engine's decode step
  // was slower with it (H200, 2026-12-01: docs/results.md, "Decode speed at batch 1").
  // Not consulted with gemv_configs (those are applied as given, rings included).
  bool decode_ring = false;
  // When not empty: these decode GEMV configurations (another engine's gemv_tuning()) instead of
  // tuning, so that two engines on the same model run identical kernels (the long-generation race
  // test's eager reference must differ from the graph-replayed engine only in the graph). An entry
  // whose (N, K) is not one of this model's projections, or a projection without an entry, is an
  // error.
  std::vector<GemvTuning> gemv_configs;
  kernels::cuda::DebugHooks debug;  // race tests only (no_join, producer delays)
};

// Per-step time by kernel class from an eager, event-bracketed decode step (median of reps).
struct StepProfile {
  // RMSNorm kernels (Standard mode; with fused_add_norm, the add+norm kernels; FlashNorm mode: the
  // final norm of a tied LM head that keeps its gain)
  double norm_us = 0;
  double normed_proj_us = 0;  // q|k|v, gate|up and LM-head projections (FlashNorm: incl. rstd)
  double other_proj_us = 0;   // o and down projections
  double attention_us = 0;    // RoPE/KV write + attention
  double other_us = 0;        // embedding, residual adds, GLU, sampling
  double total_us() const {
    return norm_us + normed_proj_us + other_proj_us + attention_us + other_us;
  }
};

class CudaEngine final : public Engine {
 public:
  // Uploads the model to the current CUDA device. Errors: Error when no GPU is usable, when the
  // model needs something this engine lacks, or when memory runs out.
  CudaEngine(const Model& model, NormMode mode, const CudaEngineOptions& opt = {});
  ~CudaEngine() override;
  CudaEngine(const CudaEngine&) = delete;
  CudaEngine& operator=(const CudaEngine&) = delete;

  void reset() override;
  int position() const override;
  int max_context() const override;
  const ModelConfig& config() const override;
  NormMode mode() const override;
  const char* device() const override { return "cuda"; }
  // Logits come from the LM head in fp32. One-token calls replay the decode graph (when
  // options.graph).
  std::vector<float> forward(std::span<const int32_t> tokens, bool all_logits = false) override;

  // Generation on the GPU: feeds `prompt`, then produces n tokens, each sampled on the device
  // (greedy when temperature == 0, else Gumbel-max at that temperature with `seed`) and fed back
  // without a host round trip. on_token (optional) is called with each token as it is produced —
  // which synchronizes every step; return false from it to stop early. Returns the tokens.
  std::vector<int32_t> generate(std::span<const int32_t> prompt, int n, float temperature,
                                uint64_t seed, const std::function<bool(int32_t)>& on_token = {});

  // Microseconds per decode step at the current position: the mean of `reps` back-to-back graph
  // replays (or eager steps when options.graph is false), timed with CUDA events after 2 warm-up
  // steps. Advances the position by reps + 2 (tokens fed from the greedy sampler) and needs that
  // much room in the KV cache; the caller resets afterwards.
  double time_decode_steps(int reps);
  // The same decode step split by kernel class (eager launches, CUDA events around each kernel,
  // median over reps). Advances the position by reps + 1.
  StepProfile profile_decode_step(int reps);

  // The tuned decode GEMV configurations (empty when options.tune is off).
  const std::vector<GemvTuning>& gemv_tuning() const;

  // Human-readable description: dtype, mode, deferred variant, graph on/off.
  std::string describe() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> p_;
};

// True when a CUDA device with compute capability 9.0 is present (the kernels are built for
// sm_90a only).
bool cuda_device_available(std::string* why = nullptr);

}  // namespace flashnorm
