// How the CUDA engine runs (engine/cuda_engine.h), as small groups of choices instead of a row of
// flags. CUDA-free, so that the engine factory (engine/make_engine.h) and the CLI take these in a
// build without CUDA; the kernel-level extras (tuned GEMV configurations, race-test hooks) are in
// CudaEngineOptions.
#pragma once

namespace flashnorm {

// Weight and activation type of the CUDA engine's GEMM inputs.
enum class HalfType { kBF16, kFP16 };

// How FlashNorm mode runs its deferred normalization.
enum class Deferred {
  kFused,      // flashnorm_linear's dispatcher (kAuto): one fused kernel in decode
  kTwoStream,  // cuBLASLt GEMM + rstd on a side stream, events, post-scale
};

// Where FlashNorm mode applies rstd in passes of more than 64 tokens (prompts; shorter passes,
// decode included, always defer it to the projection's output rows).
enum class PrefillNorm {
  // The residual add that produces x also computes rstd(x) and writes x * rstd (the gain is folded
  // into W; with native weights, whose blocks cannot hold it, x * rstd * g), and the projection is
  // the plain GEMM: Standard's kFusedAdd kernels less the gain multiply (with native weights,
  // those kernels), with no standalone norm kernel after the first layer's. Every column gets rstd,
  // those QK-norm cancels included (CudaFlashNorm::cancel applies to the deferred passes only). A
  // standalone fused GEMM does
  // not beat cuBLAS on prefill shapes (docs/kernels.md); the add that already exists carries the
  // reduction instead.
  kInAdd,
  // flashnorm_linear on raw x (the prefill GEMM with rstd in its epilogue; with
  // Deferred::kTwoStream, the GEMM and rstd on two streams joined by an event).
  kDeferred,
};

// FlashNorm mode with an LM head tied to the token embedding (SmolLM2, Gemma). No effect on an
// untied head (a folded file's included).
enum class TiedHead {
  // Keep it tied and run the final RMSNorm with its gain (one rms_norm launch per pass that
  // computes logits; the head reads the same dtype weights as Standard's).
  kKeepGain,
  // Fold the final gain into an untied copy of the head (no norm kernel at all, but vocab x hidden
  // more weights on the GPU, e.g. +57 MB in bf16 for SmolLM2-135M, +336 MB for Gemma 3 270M, and
  // the head rounded to dtype as round(g * E) instead of Standard's round(E) with g applied to the
  // activation).
  kFoldCopy,
};

// Standard mode's RMSNorm before a normed projection.
enum class StandardNorm {
  kSeparate,  // its own rms_norm kernel
  // The residual add also writes the next RMSNorm's output (vLLM's fused_add_rms_norm), so no
  // standalone norm kernel runs after the first layer's.
  kFusedAdd,
};

// How decode steps (one token) are launched.
enum class DecodeLaunch {
  kGraph,  // replayed from a CUDA graph captured on first use
  kEager,  // launched kernel by kernel
};

// The kernel of plain projections (o, down, Standard's normed ones).
enum class PlainGemm {
  kAuto,      // the decode kernel up to CudaLaunch::decode_max_rows tokens, cuBLASLt above
  kCublasLt,  // cuBLASLt at every M
};

// KV cache and batch capacity.
struct CudaCapacity {
  int max_context = 0;  // KV cache positions; 0: min(model context, 8192); at most 32768
  int max_batch = 512;  // largest number of tokens in one forward pass (longer ones are split)
  // Sequences open at once for batched decode (Engine::open_sequence, forward_batch); each has its
  // own KV cache slot of max_context positions, allocated at load. 0: no batched sequences
  // (batches() false).
  int max_sequences = 0;
};

// FlashNorm mode's choices.
struct CudaFlashNorm {
  // drop the rstd that QK-norm cancels (scale mask 0 on those columns) in passes that defer it
  // (all of them with PrefillNorm::kDeferred; up to 64 tokens with kInAdd, whose add normalizes x
  // for every column)
  bool cancel = true;
  Deferred deferred = Deferred::kFused;
  TiedHead tied_head = TiedHead::kKeepGain;
  PrefillNorm prefill = PrefillNorm::kInAdd;
  // Batched decode passes of more than CudaLaunch::decode_max_rows rows (past the decode GEMV,
  // whose kernel computes rstd and carries the residual add in its epilogue) normalize in the
  // residual add as kInAdd prompts do, instead of deferring rstd to flashnorm_linear's GEMM
  // epilogue (measured on Hopper at 32 and 64 rows: the deferred GEMM was 0.96-0.99x of Standard
  // with the fused add+norm). Every column gets rstd in those passes, as in kInAdd. With
  // PrefillNorm::kDeferred, they defer too.
  bool batched_in_add = true;
};

// Kernel launches of a forward pass.
struct CudaLaunch {
  DecodeLaunch decode = DecodeLaunch::kGraph;
  // Programmatic dependent launch for every kernel (both modes): each may start while the
  // preceding one finishes and waits for it before touching memory; the decode GEMV streams its
  // weights during the wait (linear.h, LinearArgs::pdl).
  bool pdl = true;
  // Forward passes whose plain projections take the decode kernel (PlainGemm::kAuto; see
  // decode_max_rows): the residual add runs in the epilogue of the o and down projections
  // (LinearArgs::accumulate; layers without a post-norm, and not with StandardNorm::kFusedAdd,
  // whose add carries the next norm), the GLU inside the down projection (LinearArgs::x_glu; up to
  // 16 tokens, when its staged input, T x ffn dtype elements, is at most 48 KiB); and passes of up
  // to 16 tokens (or batched decode passes) run RoPE / QK-norm / KV write, split-key attention and
  // the merge of the key chunks as one kernel (decode_attention). Same functions as the separate
  // kernels, in both modes; up to five fewer launches per layer (two with post-norms).
  bool fuse_decode_ops = true;
  // Native weights, one-token passes with fuse_decode_ops: where gate and up share one block type
  // (no bias; K not split), the gate|up quant_gemv writes the GLU (QuantGemvArgs::glu_out, dt) and
  // down reads it, instead of down staging the GLU of the fp32 gate|up rows in every CTA (x_glu).
  // The same values bit for bit (QuantGemv.GluEpilogue). describe() counts the layers that take
  // it. Off until measured on Hopper (bench --model --weights native times it: "..., native,
  // GLU in gate|up").
  bool quant_glu_out = false;
  PlainGemm plain = PlainGemm::kAuto;
  // Batched decode passes (forward_batch) of at most this many rows (1 .. 64) take the decode
  // path: the decode GEMV (deferred rstd computed in the kernel) with the fused ops above, in
  // slices of 32 rows above 32; longer ones cuBLASLt. Other passes take it up to min(this, 16)
  // tokens. With max_sequences > 0 and this above 16, the tuning at load also times the decode
  // GEMV's 16- and 32-row tiles, and the LM head's GEMV against cuBLASLt at those tiles
  // (GemvTuning::gemm_us): from the first tile where cuBLASLt was faster, the head normalizes x
  // first and runs cuBLASLt. 32: on Hopper the 32-row path was 1.05-1.07x of cuBLASLt's at 32
  // rows with SmolLM2 and 1.01-1.02x with Gemma 3; the 64-row tile 0.93-0.94x at 64 rows and two
  // 32-row slices 0.88-0.92x (docs/results_h200.md). Out of range: Error at load.
  int decode_max_rows = 32;
  // decode_attention's CTAs per SM (AttentionArgs::ctas_per_sm: 1, or 3 with at most 80
  // registers) and its PDL trigger after the chunk's work (AttentionArgs::late_trigger). Launch
  // ablations; the same logits bit for bit. On Hopper (docs/results_h200.md, "Decode
  // attention and Q4_K occupancy") 3 CTAs per SM made Llama-3-8B-shaped native steps about 170-200
  // us faster and its bf16 graph steps 250-1500 us slower, for a reason not yet known; hence 1 and
  // early. Other values: Error at load.
  int attention_ctas_per_sm = 1;
  bool attention_late_trigger = false;
};

// Where the decode GEMV's launch configurations come from (CudaEngineOptions::gemv_configs, when
// given, overrides both).
enum class GemvChoice {
  // At load, autotune the CTA shape and split-K for each one-token projection shape over the
  // layers' own weights (LinearContext::tune_decode).
  kTune,
  kHeuristic,  // LinearContext's heuristic (quick; e.g. under compute-sanitizer)
};

// The decode GEMV's configurations.
struct CudaGemv {
  GemvChoice choice = GemvChoice::kTune;
  // Let the tuning pick the decode GEMV's cp.async ring (DecodeConfig::stages; M <= 8). Off by
  // default: the ring won on SmolLM2's q|k|v and o shapes timed alone, yet the engine's decode step
  // was slower with it (Hopper: docs/results.md, "Decode speed at batch 1").
  bool allow_ring = false;
};

}  // namespace flashnorm
