// CUDA inference engine (Hopper, sm_90a) for the llama and gemma3 architectures: the CPU engine's
// forward pass (engine/cpu_engine.h) with weights in bf16 (or fp16) on the GPU, dequantized and,
// in FlashNorm mode, folded at load in fp32 and rounded once. Residual stream, queries, KV cache,
// attention and every GEMM output (q|k|v, o, gate|up, down, logits) in fp32; GEMM inputs (the
// normed or raw x, the attention output, the GLU output) in the weight dtype; fp32 accumulation.
//
// Per layer: embed -> [norm + q|k|v] -> RoPE/QK-norm/KV write -> attention -> o -> residual add ->
// [norm + gate|up] -> GLU -> down -> residual add; final [norm + LM head] -> logit soft-capping
// (Gemma 3's final_logit_softcapping, where set) -> sampling on the GPU.
// (Decode fuses the residual adds and the GLU into the o/down projections and RoPE/KV write into
// the attention kernel: CudaLaunch::fuse_decode_ops.)
// The bracketed "normed projections" are where the modes differ (docs/design.md sections 1-3):
//   Standard:  rms_norm (rms_norm.h, gain in the weight dtype) then the plain projection
//              (StandardNorm::kFusedAdd: the norm written by the preceding residual add).
//   FlashNorm: flashnorm_linear on the raw x with folded weights (kDecode's fused kernel for
//              decode, kPrefill up to 64 tokens; Deferred::kTwoStream: the seed's two-stream
//              scheme with its event join), QK-norm-cancelled columns unscaled (scale_mask) when
//              CudaFlashNorm::cancel; passes of more than 64 tokens (PrefillNorm::kInAdd): the
//              residual add writes x * rstd and the plain projection runs on it with the folded
//              weights (PrefillNorm::kDeferred: flashnorm_linear as above).
// Plain projections (o, down, and the Standard mode's normed ones) use the same kernel in both
// modes: the decode kernel with every column unscaled for M <= 16 tokens (batched decode passes: up
// to CudaLaunch::decode_max_rows), cuBLASLt above, so that the modes differ by the normalization
// alone.
//
// Decode steps (one token) replay a CUDA graph captured on first use: token id and position live
// in device memory, the sampler writes the next id and advances the position, so a whole generation
// runs without the host in the loop (generate()). Buffers are reused across steps, as in a
// production engine; this is what the long-generation race test exercises.
// Sources: src/engine/cuda/ (weights.cpp: upload and fold at load; workspace.cpp: activation
// buffers and KV cache; forward.cpp: the forward pass; decode_graph.cpp: capture and replay;
// profiler.cpp: the step profile; cuda_engine.cpp: this class).
// Errors: flashnorm::Error for unsupported models (a v renorm with a gain), a missing GPU, CUDA
// failures (message names the call), bad token ids, a full KV cache.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "flashnorm/engine/cuda_options.h"
#include "flashnorm/engine/engine.h"
#include "flashnorm/kernels/cuda/linear.h"
#include "flashnorm/kernels/cuda/rms_norm.h"

namespace flashnorm {

// The decode GEMV launch configuration chosen at load for one projection shape and row count
// (CudaGemv: GemvChoice::kTune), with its time per call in microseconds (graph replay, weights
// rotated over the layers; LinearContext::tune_decode; the LM head above 8 rows: the paired timing
// against cuBLASLt, its one weight).
struct GemvTuning {
  std::string name;  // "q|k|v", "o", "gate|up", "down", "lm_head"
  // rows it was tuned at: 1 (it serves every M up to 8), or 16 / 32 (CudaLaunch::decode_max_rows
  // above 16: M up to that padded count; longer passes run 32-row slices)
  int M = 1;
  int N = 0, K = 0;
  kernels::cuda::DecodeConfig config;
  double us = 0;
  // The LM head at tiles above 8 only: cuBLASLt's time for the same call, timed paired with the
  // GEMV (then `us`); the head takes cuBLASLt at that tile when it is faster. 0: not timed.
  double gemm_us = 0;
};

// How the CUDA engine runs: groups of choices (engine/cuda_options.h) plus the kernel-level extras.
struct CudaEngineOptions {
  CudaCapacity capacity;
  HalfType dtype = HalfType::kBF16;
  CudaFlashNorm flashnorm;                          // FlashNorm mode only
  StandardNorm standard = StandardNorm::kSeparate;  // Standard mode only
  CudaLaunch launch;
  CudaGemv gemv;
  // When not empty: these decode GEMV configurations (another engine's gemv_tuning()) instead of
  // `gemv`, so that two engines on the same model run identical kernels (the long-generation race
  // test's eager reference must differ from the graph-replayed engine only in the graph). An entry
  // whose (N, K) is not one of this model's projections, or a projection without an entry, is an
  // error. Applied as given, rings included.
  std::vector<GemvTuning> gemv_configs;
  kernels::cuda::RaceHooks debug;  // race tests only (no_join, producer delays)
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
  // DecodeLaunch::kGraph).
  std::vector<float> forward(std::span<const int32_t> tokens, bool all_logits = false) override;

  // Generation on the GPU: feeds `prompt`, then produces n tokens, each sampled on the device
  // (greedy when temperature == 0, else Gumbel-max at that temperature with `seed`) and fed back
  // without a host round trip. on_token (optional) is called with each token as it is produced —
  // which synchronizes every step; return false from it to stop early. Returns the tokens.
  bool samples_on_device() const override { return true; }
  std::vector<int32_t> generate(std::span<const int32_t> prompt, int n, float temperature,
                                uint64_t seed,
                                const std::function<bool(int32_t)>& on_token = {}) override;

  // Microseconds per decode step at the current position: the mean of `reps` back-to-back graph
  // replays (or eager steps with DecodeLaunch::kEager), timed with CUDA events after 2 warm-up
  // steps. Advances the position by reps + 2 (tokens fed from the greedy sampler) and needs that
  // much room in the KV cache; the caller resets afterwards.
  double time_decode_steps(int reps) override;
  // The same decode step split by kernel class (eager launches, CUDA events around each kernel,
  // median over reps). Advances the position by reps + 1.
  StepProfile profile_decode_step(int reps) override;

  // Batched sequences (Engine's contract), with CudaCapacity::max_sequences > 0: each open sequence
  // has its own KV cache slot of max_context() positions, allocated at load (not paged). In
  // forward_batch, each chunk of several tokens runs as its own prompt pass on its slot; the
  // one-token chunks run together, up to 64 per pass, as one batched decode pass (projections with
  // M = the sequences, as a prompt chunk of that many tokens would; decode_attention's batched
  // form, each row over its own slot), replayed from a CUDA graph per batch bucket
  // (1, 2, 4, ..., 64 rows, padding rows in a spare slot) and key bucket. Passes of up to
  // CudaLaunch::decode_max_rows rows take the decode GEMV (rstd in the kernel, the residual add in
  // its epilogue); in FlashNorm mode a longer pass normalizes in the residual add
  // (CudaFlashNorm::batched_in_add). A
  // sequence's logits differ between batch sizes by the GEMM kernels' rounding and the M-dependent
  // choice of kernel and normalization.
  bool batches() const override;
  int open_sequence() override;  // Errors: Error when max_sequences sequences are open
  void close_sequence(int seq) override;
  int sequence_position(int seq) const override;
  std::vector<float> forward_batch(std::span<const SequenceChunk> chunks) override;
  void forward_batch_into(std::span<const SequenceChunk> chunks,
                          std::vector<float>& logits) override;
  // Greedy rows' top-1 from argmax_rows on the device; a batched decode pass of greedy rows only
  // copies no logits (one of [64, 262144] fp32 is 67 MB).
  void forward_batch_top1(std::span<const SequenceChunk> chunks, std::span<const uint8_t> greedy,
                          std::vector<float>& logits, std::vector<int32_t>& top1) override;
  // Positions the open sequences hold, in blocks of kKvBlock (their slots are allocated at load).
  int kv_blocks_in_use() const override;
  // Microseconds per batched decode step of `batch` sequences (1 .. min(64, max_sequences)), each
  // fed `prompt` first: the mean of `reps` graph replays after 2 warm-up steps, each step's tokens
  // the argmax of its logits (argmax_rows, on the device). Opens and closes the sequences itself.
  // Errors: Error when the engine does not batch, batch is out of range, sequences are open
  // already, or prompt.size() + reps + 2 positions exceed the cache.
  double time_batch_decode_steps(std::span<const int32_t> prompt, int batch, int reps);

  // The tuned decode GEMV configurations (empty with GemvChoice::kHeuristic).
  const std::vector<GemvTuning>& gemv_tuning() const;

  // Human-readable description: dtype, mode, deferred variant, graph on/off, PDL, fused ops.
  std::string describe() const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> p_;
};

// True when a CUDA device with compute capability 9.0 is present (the kernels are built for
// sm_90a only).
bool cuda_device_available(std::string* why = nullptr);

}  // namespace flashnorm
