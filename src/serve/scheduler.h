// Continuous batching for one served model: requests wait in a queue, are admitted at step
// boundaries while fewer than max_concurrent sequences run, and every step is one
// Engine::forward_batch over all running sequences (a decode token each, or the next prefill chunk
// of at most prefill_chunk prompt tokens, so that a long prompt does not stall running decodes).
// Tokens are sampled per request (engine/sampler.h); a greedy request's comes from the engine's
// top-1 (Engine::forward_batch_top1: on the GPU in the CUDA engine, which then copies no logits)
// and turned into text as `flashnorm generate` does (text_stream.h); a request ends at an
// end-of-generation token or a stop string (finish_reason "stop"), at max_tokens ("length"), or
// when cancelled (its client went away), and its sequence's KV cache is freed at that step. A
// request the engine fails on fails alone.
// Prefix reuse (Limits::prefix_cache, engines that rewind): a sequence whose request ended keeps
// the KV cache of its prompt (and the logits or top-1 of the prompt's last row) while its slot is
// idle, until a new request needs the slot (least recently used first; running and cached
// sequences together at most max_concurrent). A new request takes the cached sequence that saves
// it the most prompt: its whole prompt when it equals the cached one (the first token then comes
// from the kept row, no pass), else the longest common prefix rounded down to whole prefill chunks
// (at least one token left to feed), so that the rest is fed in the same chunks at the same
// positions as without reuse. Run alone, the logits are bit for bit those of a fresh sequence
// (tests/engine/test_prefix_reuse.cpp); beside other sequences, as batching already makes them
// (native weights choose a matmul path by a pass's rows). A request whose admission fails (the
// engine has no sequence for it) fails alone with 500.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "flashnorm/engine/engine.h"
#include "flashnorm/engine/sampler.h"
#include "flashnorm/tokenizer/tokenizer.h"
#include "metrics.h"

namespace flashnorm::serve {

// One request's generation, shared by the HTTP handler waiting on it and the scheduler.
struct Generation {
  // Set before Scheduler::submit.
  std::vector<int32_t> prompt;  // token ids, BOS included
  int max_tokens = 16;
  SamplerOptions sampling;
  std::vector<std::string> stop;
  std::chrono::steady_clock::time_point arrived = std::chrono::steady_clock::now();
  // Set by the HTTP side: stop at the next step (the client disconnected).
  std::atomic<bool> cancel{false};

  // Waits up to `timeout` for new text or the end; returns the text released since the last call
  // and sets `done` once the generation has ended (all its text then returned).
  std::string take(bool& done, std::chrono::milliseconds timeout);
  // After the end: "stop" or "length" ("" when it failed or was cancelled), the error message
  // when it failed, and the tokens generated.
  std::string finish_reason, error;
  int error_status = 500;
  int completion_tokens = 0;

 private:
  friend class Scheduler;
  std::mutex mu_;
  std::condition_variable cv_;
  std::string text_;  // released, not yet taken
  bool done_ = false;
};

class Scheduler {
 public:
  struct Limits {
    int max_concurrent = 8;    // sequences in the batch
    int max_queued = 64;       // requests waiting beyond those
    int prefill_chunk = 64;    // prompt tokens per sequence per step
    bool prefix_cache = true;  // keep finished prompts' caches for reuse (engines that rewind)
  };
  // Starts the scheduling thread. `engine` must batch (Engine::batches); `tok` must outlive this.
  // Errors: Error when the engine does not batch.
  Scheduler(std::unique_ptr<Engine> engine, const Tokenizer& tok, Limits limits,
            ModelMetrics& metrics);
  // shutdown() and join.
  ~Scheduler();
  // Queues a generation. Errors: ApiError 429 when max_concurrent + max_queued requests are
  // already running or waiting; 503 after shutdown().
  void submit(const std::shared_ptr<Generation>& g);
  // Stops admitting: waiting requests fail with 503, running ones run to their end; returns once
  // the scheduling thread has finished them.
  void shutdown();
  // The KV cache length of every sequence (immutable).
  int max_context() const { return max_ctx_; }

 private:
  struct Active;
  // A finished request's sequence kept for prefix reuse.
  struct Cached {
    int seq = 0;
    std::vector<int32_t> prompt;  // the sequence holds its KV cache, positions [0, prompt.size())
    std::vector<float> logits;    // the prompt's last-row logits, or empty
    int32_t top1 = -1;            // or its top-1 (-1: not known)
    uint64_t used = 0;            // least recently used goes first
  };
  void loop();
  void finish(Active& a, const std::string& reason);
  // Handles the next token of a request whose prompt is in the cache: text out, and the end
  // (finish) at an end-of-generation token, a stop string, max_tokens or the context. Returns
  // true when the request ended.
  bool emit(Active& a, int32_t next, std::chrono::steady_clock::time_point now);
  // A sequence for `g` (called under mu_): a cached one rewound to the prefix it reuses, or a new
  // one (the least recently used cached sequence closed first when the slots are full).
  Active admit(std::shared_ptr<Generation> g, size_t running);
  void publish_kv();  // the KV gauges

  std::vector<Cached> cache_;  // finished prompts' sequences (scheduling thread only)
  uint64_t cache_clock_ = 0;

  std::unique_ptr<Engine> engine_;
  const Tokenizer& tok_;
  Limits limits_;
  ModelMetrics& metrics_;
  int max_ctx_ = 0;
  bool reuse_ = false;  // limits_.prefix_cache on an engine that rewinds
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Generation>> waiting_;
  int running_ = 0;            // admitted, not finished (guarded by mu_)
  std::vector<float> logits_;  // the scheduling thread's step logits [sequences, vocab]
  std::vector<int32_t> top1_;  // and the greedy sequences' next tokens
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace flashnorm::serve
