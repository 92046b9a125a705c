// The worker of a served embedding model: requests of /v1/embeddings wait in a queue, and each
// pass takes every request waiting (up to max_batch_tokens rows) and runs their inputs together
// through the Embedder (engine/embedder.h), inputs of all requests stacked into each projection.
// Requests arrive while a pass runs and join the next one (continuous batching at request
// granularity); an embedding model's queue runs beside the completion models' schedulers in the
// same process.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "flashnorm/engine/embedder.h"
#include "metrics.h"

namespace flashnorm::serve {

// One request's inputs (token ids, validated) and, once done, its embeddings or its error.
struct EmbedJob {
  std::vector<std::vector<int32_t>> inputs;
  int dimensions = 0;  // 0: the model's
  // set by the worker
  std::vector<Embedding> result;
  std::string error;
  int error_status = 0;
  // Blocks until the worker has answered the job.
  void wait();

 private:
  friend class EmbedQueue;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
};

class EmbedQueue {
 public:
  struct Limits {
    int max_queued = 64;          // requests waiting at most (more: 429)
    int max_batch_tokens = 8192;  // rows of one pass (a longer request runs alone)
  };
  // Starts the worker thread, which owns the embedder.
  EmbedQueue(std::unique_ptr<Embedder> embedder, const Limits& limits, ModelMetrics& metrics);
  ~EmbedQueue();  // shutdown() and join
  EmbedQueue(const EmbedQueue&) = delete;
  EmbedQueue& operator=(const EmbedQueue&) = delete;

  // The embedder, for tokenizing and checks that need no pass (thread-safe const members).
  const Embedder& embedder() const { return *embedder_; }
  // Queues a job. Errors: ApiError 429 when max_queued jobs wait already; 503 after shutdown().
  void submit(const std::shared_ptr<EmbedJob>& job);
  // Refuses new jobs, answers those waiting, and stops the worker after its pass.
  void shutdown();

 private:
  void run();
  std::unique_ptr<Embedder> embedder_;
  Limits limits_;
  ModelMetrics& metrics_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<EmbedJob>> queue_;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace flashnorm::serve
