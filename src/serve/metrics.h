// Prometheus metrics of `flashnorm serve` (text exposition format 0.0.4): per model, counters of
// requests by outcome and of prompt/completion tokens (prompt tokens prefilled, and those a cached
// prefix saved), gauges of queue depth, active sequences, KV cache blocks held by running sequences
// and by cached prompts (prefix reuse) with the number of the latter, the last step's batch size
// (and the largest so far), and histograms
// of the step batch size, time to first token and time per output token (seconds).
// Source: https://prometheus.io/docs/instrumenting/exposition_formats/
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace flashnorm::serve {

// A cumulative histogram over fixed upper bounds (plus +Inf); thread-safe.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  // The `name_bucket`, `name_sum` and `name_count` lines with `labels` (e.g. model="a").
  std::string render(const std::string& name, const std::string& labels) const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // per bound, then +Inf (not cumulative)
  double sum_ = 0;
  uint64_t n_ = 0;
};

// Outcomes counted in flashnorm_requests_total{outcome=...}.
enum class Outcome { kOk, kCancelled, kRejected, kError };

// One model's metrics; updated by its scheduler and the HTTP handlers.
struct ModelMetrics {
  std::array<std::atomic<uint64_t>, 4> requests{};  // by Outcome
  std::atomic<uint64_t> prompt_tokens{0}, prompt_tokens_cached{0}, completion_tokens{0}, steps{0};
  std::atomic<int> queue_depth{0}, active{0}, kv_blocks{0}, batch{0}, batch_max{0};
  std::atomic<int> kv_blocks_cached{0}, prefix_cache_sequences{0};  // prefix reuse (scheduler.h)
  Histogram batch_size{{1, 2, 4, 8, 16, 32, 64, 128}};
  Histogram ttft{{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}};
  Histogram tpot{{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}};
  void count(Outcome o) { ++requests[static_cast<int>(o)]; }
};

// The exposition text of every model's metrics (`names[i]` labels `models[i]`).
std::string render_metrics(const std::vector<std::string>& names,
                           const std::vector<const ModelMetrics*>& models);

}  // namespace flashnorm::serve
