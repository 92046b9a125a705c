// What every inference backend offers (CPU fp32 engine, CUDA bf16 engine): append tokens to the
// KV cache and get fp32 logits, describe itself, and (where the backend has them) generate with
// sampling on the device and time its decode step, and run many sequences in one batched forward
// pass. Used by `generate`, `verify`, `bench --model`
// and the equivalence tests so that the same code drives either backend; engines are made by
// make_engine (engine/make_engine.h).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "flashnorm/model/model.h"

namespace flashnorm {

// Normalization modes (docs/design.md sections 1-2):
//   Standard:  z = (x * rstd(x) * g) W^T   — RMSNorm with gain, then the projection.
//   FlashNorm: z = rstd(x) * (x W*^T)       — folded weights W* = W diag(g), rstd beside the GEMM.
enum class NormMode { Standard, FlashNorm };
// "standard" / "flashnorm" -> NormMode. Errors: Error ("--norm must be standard or flashnorm, not
// 'X'") otherwise.
NormMode parse_norm_mode(std::string_view s);

// Per-step time by kernel class from an eager, event-bracketed decode step (median of reps).
struct StepProfile {
  // RMSNorm kernels (Standard mode; with StandardNorm::kFusedAdd, the add+norm kernels; FlashNorm
  // mode: the final norm of a tied LM head that keeps its gain)
  double norm_us = 0;
  double normed_proj_us = 0;  // q|k|v, gate|up and LM-head projections (FlashNorm: incl. rstd)
  double other_proj_us = 0;   // o and down projections
  double attention_us = 0;    // RoPE/KV write + attention
  double other_us = 0;        // embedding, residual adds, GLU, sampling
  double total_us() const {
    return norm_us + normed_proj_us + other_proj_us + attention_us + other_us;
  }
};

// One sequence's new tokens in a batched step (Engine::forward_batch): the sequence id from
// open_sequence() and the tokens appended at its positions sequence_position(seq)...
struct SequenceChunk {
  int seq = 0;
  std::span<const int32_t> tokens;
};

// What Engine::encode applies of the final norm y = x * rstd(x) * g to the rows it returns: the
// embedding pipeline (engine/embedder.h) drops the rstd where a later L2 normalization cancels it
// and leaves the gain out where it is folded into the first Dense layer.
struct FinalNorm {
  bool rstd = true;
  bool gain = true;
};
// Which rows of each input Engine::encode returns.
enum class EncodeRows { kAll, kFirst, kLast };
struct EncodeOptions {
  FinalNorm final_norm;
  EncodeRows rows = EncodeRows::kAll;
};

// Positions per KV cache block: open sequences' caches grow in whole blocks (kv_blocks_in_use).
inline constexpr int kKvBlock = 16;

class Engine {
 public:
  virtual ~Engine() = default;
  // Clears the KV cache (position back to 0).
  virtual void reset() = 0;
  // Tokens in the KV cache.
  virtual int position() const = 0;
  // KV cache capacity in tokens.
  virtual int max_context() const = 0;
  virtual const ModelConfig& config() const = 0;
  virtual NormMode mode() const = 0;
  // Appends `tokens` at positions position()..position()+n-1 and returns fp32 logits, row-major
  // [n, vocab] when all_logits, else [1, vocab] for the last token.
  // Errors: Error if a token id is outside [0, vocab) or the KV cache would overflow.
  virtual std::vector<float> forward(std::span<const int32_t> tokens, bool all_logits = false) = 0;
  // The prompt pass of every input without the LM head (embeddings): each input on its own
  // scratch cache (nothing kept; position() and open sequences unchanged), attention causal or
  // bidirectional as the model's config says (ModelConfig::causal), the final norm as
  // o.final_norm says. Returns fp32 rows [n, hidden], inputs in order: every row of each input
  // (kAll), or one per input. Errors: Error for no inputs, an empty input, a token outside
  // [0, vocab) or an input longer than max_context(); the default (engines without it) always.
  virtual std::vector<float> encode(std::span<const std::span<const int32_t>> inputs,
                                    const EncodeOptions& o);
  // "cpu" or "cuda".
  virtual const char* device() const = 0;
  // What runs, in one line after the device (the CLI prints "<device>, <describe()>"): the
  // CPU engine's "fp32, norm flashnorm"; the CUDA engine's dtype, mode, variant, graph, PDL.
  virtual std::string describe() const = 0;

  // True when generate() samples on the device (the CUDA engine); otherwise callers sample the
  // logits of forward() on the host (engine/sampler.h).
  virtual bool samples_on_device() const { return false; }
  // Feeds `prompt`, then produces n tokens sampled on the device (greedy when temperature == 0,
  // else Gumbel-max at that temperature with `seed`), each passed to on_token (optional; return
  // false to stop early). Returns the tokens. Errors: Error on a backend without device sampling
  // (samples_on_device() false), a bad token id or a full KV cache.
  virtual std::vector<int32_t> generate(std::span<const int32_t> prompt, int n, float temperature,
                                        uint64_t seed,
                                        const std::function<bool(int32_t)>& on_token = {});
  // Microseconds per decode step at the current position (mean of `reps` steps after 2 warm-up
  // steps); advances the position by reps + 2. Errors: Error on a backend without a timed decode
  // step (the CPU engine).
  virtual double time_decode_steps(int reps);
  // The decode step split by kernel class (median over reps); advances the position by reps + 1.
  // Errors: as time_decode_steps.
  virtual StepProfile profile_decode_step(int reps);

  // Batched sequences (continuous batching; `flashnorm serve`). Each open sequence has its own KV
  // cache of at most max_context() positions, separate from the one forward() appends to.
  // Engines without them (a CUDA engine made with CudaCapacity::max_sequences 0) refuse every call
  // with Error. True when the engine batches sequences (the CPU engine; the CUDA engine with
  // max_sequences > 0).
  virtual bool batches() const { return false; }
  // Opens an empty sequence and returns its id (>= 1, never reused by this engine).
  virtual int open_sequence();
  // Frees the sequence's KV cache. Errors: Error for an id that is not open.
  virtual void close_sequence(int seq);
  // Tokens in the sequence's KV cache. Errors: Error for an id that is not open.
  virtual int sequence_position(int seq) const;
  // One forward pass over every chunk (at most one per sequence): each chunk's tokens are
  // appended to its sequence, the rows of all chunks stacked into every projection GEMM
  // (M = total tokens), attention per sequence over its own cache. Returns fp32 logits, row-major
  // [chunks, vocab], of each chunk's last token. Errors (nothing is appended): Error for no chunks,
  // an empty chunk, an id not open or given twice, a token outside [0, vocab), or a sequence
  // whose cache would pass max_context().
  virtual std::vector<float> forward_batch(std::span<const SequenceChunk> chunks);
  // forward_batch's logits into `logits` (resized to [chunks, vocab], its capacity reused: a
  // server's steps allocate nothing once warm; a fresh [32, 262144] fp32 block per step had cost
  // Gemma 3 more page faults than its GPU step). Same errors; default: the returning form.
  virtual void forward_batch_into(std::span<const SequenceChunk> chunks,
                                  std::vector<float>& logits);
  // forward_batch_into for callers that need only some rows' top-1: where greedy[i] is set (one
  // flag per chunk), top1[i] = argmax of chunk i's logits (sampler.h's argmax: the lowest id on
  // ties, NaN never chosen) and that row of `logits` may be left unwritten (the CUDA engine
  // computes it on the device and copies no logits for a pass of greedy rows only); other rows'
  // logits as forward_batch_into. top1: resized to the chunks (0 where not greedy). Same errors,
  // and Error when greedy's size is not the chunks'. Default: forward_batch_into and a host argmax.
  virtual void forward_batch_top1(std::span<const SequenceChunk> chunks,
                                  std::span<const uint8_t> greedy, std::vector<float>& logits,
                                  std::vector<int32_t>& top1);
  // KV cache blocks (kKvBlock positions of every layer's K and V) held by open sequences.
  virtual int kv_blocks_in_use() const { return 0; }
  // Prefix reuse (serve's prompt cache): true when rewind_sequence works (the CPU engine).
  virtual bool rewinds() const { return false; }
  // Keeps the first `length` positions of the sequence's cache, bit for bit (its allocation
  // unchanged): the next chunk is appended at position `length`. Errors: Error for an id that is
  // not open, a length outside [0, sequence_position(seq)], or an engine that does not rewind.
  virtual void rewind_sequence(int seq, int length);
  // KV cache blocks held by one open sequence (0 where the engine does not count them). Errors:
  // Error for an id that is not open.
  virtual int sequence_kv_blocks(int seq) const;
};

}  // namespace flashnorm
