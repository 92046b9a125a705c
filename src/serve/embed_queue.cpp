#include "embed_queue.h"

#include <fmt/format.h>

#include <chrono>

#include "api_error.h"
#include "flashnorm/error.h"

namespace flashnorm::serve {

void EmbedJob::wait() {
  std::unique_lock lk(mu_);
  cv_.wait(lk, [&] { return done_; });
}

EmbedQueue::EmbedQueue(std::unique_ptr<Embedder> embedder, const Limits& limits,
                       ModelMetrics& metrics)
    : embedder_(std::move(embedder)), limits_(limits), metrics_(metrics) {
  worker_ = std::thread([this] { run(); });
}

EmbedQueue::~EmbedQueue() {
  shutdown();
  if (worker_.joinable()) worker_.join();
}

void EmbedQueue::submit(const std::shared_ptr<EmbedJob>& job) {
  std::lock_guard lk(mu_);
  if (stopping_) throw ApiError(503, "the server is shutting down", "", "server_error");
  if (queue_.size() >= size_t(limits_.max_queued)) {
    metrics_.count(Outcome::kRejected);
    throw ApiError(
        429, fmt::format("{} embedding requests are waiting already; retry later", queue_.size()),
        "", "rate_limit_error");
  }
  queue_.push_back(job);
  metrics_.queue_depth = static_cast<int>(queue_.size());
  cv_.notify_one();
}

void EmbedQueue::shutdown() {
  std::lock_guard lk(mu_);
  stopping_ = true;
  cv_.notify_one();
}

void EmbedQueue::run() {
  for (;;) {
    std::vector<std::shared_ptr<EmbedJob>> pass;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      // every waiting job of one dimensions value, up to max_batch_tokens rows
      size_t rows = 0;
      const int dims = queue_.front()->dimensions;
      for (auto it = queue_.begin(); it != queue_.end();) {
        size_t n = 0;
        for (const auto& in : (*it)->inputs) n += in.size();
        if ((*it)->dimensions != dims ||
            (!pass.empty() && rows + n > size_t(limits_.max_batch_tokens))) {
          ++it;
          continue;
        }
        rows += n;
        pass.push_back(*it);
        it = queue_.erase(it);
      }
      metrics_.queue_depth = static_cast<int>(queue_.size());
    }
    std::vector<EmbedInput> inputs;
    for (const auto& job : pass) {
      for (const auto& ids : job->inputs) {
        inputs.push_back(EmbedInput::of_tokens(ids));
      }
    }
    std::vector<Embedding> out;
    std::string error;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      out = embedder_->embed(inputs, pass.front()->dimensions);
    } catch (const std::exception& e) {  // inputs were validated: a fault of the server
      error = e.what();
    }
    metrics_.ttft.observe(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    metrics_.batch_size.observe(double(inputs.size()));
    ++metrics_.steps;
    size_t k = 0;
    for (const auto& job : pass) {
      if (error.empty()) {
        job->result.assign(out.begin() + k, out.begin() + k + job->inputs.size());
        for (const auto& e : job->result) metrics_.prompt_tokens += e.tokens;
        metrics_.count(Outcome::kOk);
      } else {
        job->error = error;
        job->error_status = 500;
        metrics_.count(Outcome::kError);
      }
      k += job->inputs.size();
      std::lock_guard lk(job->mu_);
      job->done_ = true;
      job->cv_.notify_all();
    }
  }
}

}  // namespace flashnorm::serve
