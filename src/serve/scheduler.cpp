#include "scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <exception>

#include "api_error.h"
#include "flashnorm/error.h"
#include "text_stream.h"

namespace flashnorm::serve {

using clk = std::chrono::steady_clock;

std::string Generation::take(bool& done, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return done_ || !text_.empty(); });
  std::string out = std::move(text_);
  text_.clear();
  done = done_;
  return out;
}

struct Scheduler::Active {
  std::shared_ptr<Generation> g;
  int seq = 0;
  size_t fed = 0;  // prompt tokens in the cache
  int32_t last = -1;
  int produced = 0;
  Sampler sampler;
  TextStream text;
  clk::time_point last_token{};
  // The prompt's last row, kept for prefix reuse: its logits (a sampled request) or top-1 (a
  // greedy one; -1 when not known).
  std::vector<float> prompt_logits;
  int32_t prompt_top1 = -1;
  bool whole_prompt_cached = false;  // admitted with its whole prompt in the cache
};

Scheduler::Scheduler(std::unique_ptr<Engine> engine, const Tokenizer& tok, Limits limits,
                     ModelMetrics& metrics)
    : engine_(std::move(engine)), tok_(tok), limits_(limits), metrics_(metrics) {
  if (!engine_->batches()) {
    throw Error(
        fmt::format("this {} engine was made without batched sequences", engine_->device()));
  }
  max_ctx_ = engine_->max_context();
  reuse_ = limits_.prefix_cache && engine_->rewinds();
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() {
  shutdown();
  if (thread_.joinable()) thread_.join();
}

void Scheduler::submit(const std::shared_ptr<Generation>& g) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) throw ApiError(503, "the server is shutting down", "", "server_error");
    if (running_ + int(waiting_.size()) >= limits_.max_concurrent + limits_.max_queued) {
      throw ApiError(
          429,
          fmt::format("too many requests: {} running and {} queued (--max-concurrent "
                      "{}, --max-queued {})",
                      running_, waiting_.size(), limits_.max_concurrent, limits_.max_queued),
          "", "rate_limit_exceeded");
    }
    waiting_.push_back(g);
    metrics_.queue_depth = int(waiting_.size());
  }
  cv_.notify_one();
}

void Scheduler::shutdown() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable() && std::this_thread::get_id() != thread_.get_id()) thread_.join();
}

// Ends a generation: its last text, reason ("" = cancelled; error set = failed), its cache freed
// or, with prefix reuse, its prompt's cache kept.
void Scheduler::finish(Active& a, const std::string& reason) {
  const bool keep = reuse_ && !reason.empty() && a.g->error.empty() &&
                    a.fed == a.g->prompt.size() && (a.prompt_top1 >= 0 || !a.prompt_logits.empty());
  bool kept = false;
  if (keep) {
    try {
      engine_->rewind_sequence(a.seq, int(a.g->prompt.size()));
      cache_.push_back(
          Cached{a.seq, a.g->prompt, std::move(a.prompt_logits), a.prompt_top1, ++cache_clock_});
      kept = true;
    } catch (const std::exception&) {  // then freed as without reuse
    }
  }
  if (!kept) engine_->close_sequence(a.seq);
  {
    // Before the client hears of the end: its next request must find the slot free.
    std::lock_guard lock(mu_);
    --running_;
  }
  Generation& g = *a.g;
  {
    std::lock_guard lock(g.mu_);
    if (!reason.empty()) g.text_ += a.text.flush();
    g.finish_reason = reason;
    g.completion_tokens = a.produced;
    g.done_ = true;
  }
  g.cv_.notify_all();
  metrics_.count(!g.error.empty() ? Outcome::kError
                 : reason.empty() ? Outcome::kCancelled
                                  : Outcome::kOk);
}

void Scheduler::loop() {
  std::vector<Active> active;
  auto fail_waiting = [&](std::shared_ptr<Generation> g, int status, const std::string& msg) {
    {
      std::lock_guard lock(g->mu_);
      g->error = msg;
      g->error_status = status;
      g->done_ = true;
    }
    g->cv_.notify_all();
    metrics_.count(status == 503   ? Outcome::kRejected
                   : status == 500 ? Outcome::kError
                                   : Outcome::kCancelled);
  };
  for (;;) {
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !waiting_.empty() || !active.empty(); });
      if (stopping_) {
        for (auto& g : waiting_) fail_waiting(g, 503, "the server is shutting down");
        waiting_.clear();
        if (active.empty()) {
          metrics_.queue_depth = 0;
          break;
        }
      }
      // Admission at the step boundary.
      while (int(active.size()) < limits_.max_concurrent && !waiting_.empty()) {
        std::shared_ptr<Generation> g = std::move(waiting_.front());
        waiting_.pop_front();
        if (g->cancel) {
          fail_waiting(g, 499, "cancelled");
          continue;
        }
        try {
          active.push_back(admit(g, active.size()));
          ++running_;
        } catch (const std::exception& e) {  // no sequence for it: it fails alone
          fail_waiting(g, 500, e.what());
        }
      }
      metrics_.queue_depth = int(waiting_.size());
    }
    // Cancelled sequences leave before the step (their cache freed now).
    for (size_t i = 0; i < active.size();) {
      if (active[i].g->cancel) {
        finish(active[i], "");
        active.erase(active.begin() + i);
      } else {
        ++i;
      }
    }
    // Requests whose whole prompt was cached: their first token from the kept row, no pass.
    for (size_t i = 0; i < active.size();) {
      Active& a = active[i];
      if (a.whole_prompt_cached) {
        a.whole_prompt_cached = false;
        const int32_t next = a.g->sampling.temperature == 0.0f
                                 ? (a.prompt_top1 >= 0 ? a.prompt_top1 : argmax(a.prompt_logits))
                                 : a.sampler.sample(a.prompt_logits);
        if (emit(a, next, clk::now())) {
          active.erase(active.begin() + i);
          continue;
        }
      }
      ++i;
    }
    metrics_.active = int(active.size());
    publish_kv();
    if (active.empty()) {
      metrics_.batch = 0;
      continue;
    }
    // One pass over every running sequence: a prefill chunk or the last sampled token.
    std::vector<std::vector<int32_t>> toks(active.size());
    std::vector<SequenceChunk> chunks;
    for (size_t i = 0; i < active.size(); ++i) {
      Active& a = active[i];
      const auto& p = a.g->prompt;
      if (a.fed < p.size()) {
        const size_t k = std::min<size_t>(limits_.prefill_chunk, p.size() - a.fed);
        toks[i].assign(p.begin() + a.fed, p.begin() + a.fed + k);
      } else {
        toks[i] = {a.last};
      }
      chunks.push_back({a.seq, toks[i]});
    }
    std::vector<float>& logits = logits_;  // reused: no allocation per step
    std::vector<uint8_t> greedy(active.size());
    for (size_t i = 0; i < active.size(); ++i) {
      greedy[i] = active[i].g->sampling.temperature == 0.0f;  // top-1 from the engine
    }
    std::vector<bool> failed(active.size(), false);
    try {
      engine_->forward_batch_top1(chunks, greedy, logits, top1_);
    } catch (const std::exception&) {
      // Find the request(s) at fault: each alone; the others' logits from their own pass.
      const size_t V = engine_->config().vocab;
      logits.assign(active.size() * V, 0.0f);
      std::fill(greedy.begin(), greedy.end(), 0);  // sampled from these logits instead
      for (size_t i = 0; i < active.size(); ++i) {
        try {
          std::vector<float> one = engine_->forward_batch(std::span(&chunks[i], 1));
          std::copy(one.begin(), one.end(), logits.begin() + i * V);
        } catch (const std::exception& e) {
          failed[i] = true;
          active[i].g->error = e.what();
          active[i].g->error_status = 500;
        }
      }
    }
    ++metrics_.steps;
    metrics_.batch = int(active.size());
    metrics_.batch_max = std::max(metrics_.batch_max.load(), int(active.size()));
    metrics_.batch_size.observe(double(active.size()));
    const size_t V = engine_->config().vocab;
    const clk::time_point now = clk::now();
    std::vector<bool> ended(active.size(), false);
    const bool keep_rows = reuse_;
    for (size_t i = 0; i < active.size(); ++i) {
      Active& a = active[i];
      if (failed[i]) {
        finish(a, "");
        ended[i] = true;
        continue;
      }
      if (a.fed < a.g->prompt.size()) {
        a.fed += toks[i].size();
        metrics_.prompt_tokens += toks[i].size();
        if (a.fed < a.g->prompt.size()) continue;  // mid-prompt
        if (keep_rows && greedy[i]) a.prompt_top1 = top1_[i];
        if (keep_rows && !greedy[i]) a.prompt_logits.assign(&logits[i * V], &logits[i * V] + V);
      }
      const int32_t next = greedy[i] ? top1_[i] : a.sampler.sample(std::span(&logits[i * V], V));
      ended[i] = emit(a, next, now);
    }
    for (size_t i = active.size(); i-- > 0;) {
      if (ended[i]) active.erase(active.begin() + i);
    }
    metrics_.active = int(active.size());
    publish_kv();
  }
  for (const Cached& c : cache_) engine_->close_sequence(c.seq);
  cache_.clear();
  metrics_.active = 0;
  metrics_.batch = 0;
  publish_kv();
}

Scheduler::Active Scheduler::admit(std::shared_ptr<Generation> g, size_t running) {
  Active a{g, 0, 0, -1, 0, Sampler(g->sampling), TextStream(g->stop), {}, {}, -1, false};
  const std::vector<int32_t>& p = a.g->prompt;
  const bool greedy = a.g->sampling.temperature == 0.0f;
  const size_t chunk = size_t(std::max(1, limits_.prefill_chunk));
  // the cached sequence that saves the most prompt (the most recent on a tie)
  int best = -1;
  size_t best_len = 0;
  bool best_whole = false;
  for (size_t i = 0; i < cache_.size(); ++i) {
    const Cached& c = cache_[i];
    size_t lcp = 0;
    while (lcp < c.prompt.size() && lcp < p.size() && c.prompt[lcp] == p[lcp]) ++lcp;
    const bool whole =
        lcp == p.size() && lcp == c.prompt.size() && (!c.logits.empty() || (greedy && c.top1 >= 0));
    const size_t len = whole ? p.size() : std::min(lcp, p.size() - 1) / chunk * chunk;
    if (len > best_len || (len == best_len && len > 0 && c.used > cache_[best].used)) {
      best = int(i), best_len = len, best_whole = whole;
    }
  }
  if (best >= 0) {
    engine_->rewind_sequence(cache_[best].seq, int(best_len));  // an Error leaves the entry cached
    Cached c = std::move(cache_[best]);
    cache_.erase(cache_.begin() + best);
    a.seq = c.seq;
    a.fed = best_len;
    metrics_.prompt_tokens_cached += best_len;
    if (best_whole) {
      a.whole_prompt_cached = true;
      a.prompt_logits = std::move(c.logits);
      a.prompt_top1 = c.top1;
    }
    return a;
  }
  if (running + cache_.size() >= size_t(limits_.max_concurrent) && !cache_.empty()) {
    auto lru = std::min_element(cache_.begin(), cache_.end(),
                                [](const Cached& x, const Cached& y) { return x.used < y.used; });
    engine_->close_sequence(lru->seq);
    cache_.erase(lru);
  }
  a.seq = engine_->open_sequence();
  return a;
}

bool Scheduler::emit(Active& a, int32_t next, clk::time_point now) {
  if (a.produced == 0) {
    metrics_.ttft.observe(std::chrono::duration<double>(now - a.g->arrived).count());
  } else {
    metrics_.tpot.observe(std::chrono::duration<double>(now - a.last_token).count());
  }
  a.last_token = now;
  std::string reason;
  if (tok_.is_eog(next)) {
    reason = "stop";
  } else {
    ++a.produced;
    ++metrics_.completion_tokens;
    a.last = next;
    std::string t = a.text.push(tok_.piece(next));
    {
      std::lock_guard lock(a.g->mu_);
      a.g->text_ += t;
      a.g->completion_tokens = a.produced;
    }
    a.g->cv_.notify_all();
    if (a.text.stopped()) {
      reason = "stop";
    } else if (a.produced >= a.g->max_tokens || engine_->sequence_position(a.seq) >= max_ctx_) {
      reason = "length";
    }
  }
  if (reason.empty()) return false;
  finish(a, reason);
  return true;
}

void Scheduler::publish_kv() {
  int cached = 0;
  for (const Cached& c : cache_) cached += engine_->sequence_kv_blocks(c.seq);
  metrics_.kv_blocks = engine_->kv_blocks_in_use() - cached;
  metrics_.kv_blocks_cached = cached;
  metrics_.prefix_cache_sequences = int(cache_.size());
}

}  // namespace flashnorm::serve
