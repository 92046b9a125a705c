// serve::Scheduler on a scripted engine (greedy next token = last token + 1 mod 9; any chunk
// holding token 9 makes forward_batch throw): a request the engine fails on fails alone while the
// others finish; a cancelled request ends with its sequence closed; a full queue answers 429;
// every finished request's sequence is closed. Prefix reuse (an engine that rewinds): a shared
// prefix is reused in whole prefill chunks and the rest fed in the chunks a fresh sequence gets;
// an equal prompt is answered from the kept row without a pass (a sampled one only from kept
// logits); the least recently used cached sequence gives its slot up; with prefix_cache off
// nothing is kept; a request the engine has no sequence for fails alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <set>
#include <thread>

#include "flashnorm/error.h"
#include "serve/api_error.h"
#include "serve/scheduler.h"

namespace flashnorm::serve {
namespace {

constexpr int kVocab = 11;  // "t0".."t9", eos 10

class ScriptedEngine final : public Engine {
 public:
  explicit ScriptedEngine(int step_ms, bool rewinds = false)
      : step_ms_(step_ms), rewinds_(rewinds) {
    cfg_.vocab = kVocab;
  }
  bool rewinds() const override { return rewinds_; }
  void rewind_sequence(int seq, int length) override {
    if (!rewinds_ || !open_.count(seq) || length < 0 || length > pos_.at(seq)) {
      throw Error("bad rewind");
    }
    pos_[seq] = length;
    rewound.push_back({seq, length});
  }
  int sequence_kv_blocks(int seq) const override { return open_.count(seq) ? 1 : 0; }
  std::atomic<bool> fail_open{false};        // open_sequence throws
  std::vector<std::vector<int32_t>> fed;     // every chunk, in order
  std::vector<std::pair<int, int>> rewound;  // (sequence, length) of every rewind
  void reset() override {}
  int position() const override { return 0; }
  int max_context() const override { return 4096; }
  const ModelConfig& config() const override { return cfg_; }
  NormMode mode() const override { return NormMode::FlashNorm; }
  std::vector<float> forward(std::span<const int32_t>, bool) override { return {}; }
  const char* device() const override { return "cpu"; }
  std::string describe() const override { return "scripted"; }
  bool batches() const override { return true; }
  int open_sequence() override {
    if (fail_open) throw Error("no sequence slot");
    open_.insert(next_);
    pos_[next_] = 0;
    return next_++;
  }
  void close_sequence(int seq) override {
    if (!open_.erase(seq)) throw Error("not open");
  }
  int sequence_position(int seq) const override { return pos_.at(seq); }
  int kv_blocks_in_use() const override { return static_cast<int>(open_.size()); }
  std::vector<float> forward_batch(std::span<const SequenceChunk> chunks) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(step_ms_));
    for (const auto& c : chunks) {
      if (!open_.count(c.seq)) throw Error("sequence not open");
      for (int32_t t : c.tokens) {
        if (t == 9) throw Error("poisoned token");
      }
    }
    std::vector<float> logits(chunks.size() * kVocab, 0.0f);
    for (const auto& c : chunks) fed.emplace_back(c.tokens.begin(), c.tokens.end());
    for (size_t i = 0; i < chunks.size(); ++i) {
      pos_[chunks[i].seq] += static_cast<int>(chunks[i].tokens.size());
      logits[i * kVocab + (chunks[i].tokens.back() + 1) % 9] = 1.0f;
    }
    return logits;
  }
  size_t open() const { return open_.size(); }

 private:
  int step_ms_, next_ = 1;
  bool rewinds_ = false;
  ModelConfig cfg_;
  std::set<int> open_;
  std::map<int, int> pos_;
};

Tokenizer tiny_tokenizer() {
  TokenizerVocab v;
  for (int i = 0; i < 10; ++i) v.tokens.push_back("t" + std::to_string(i));
  v.tokens.push_back("<eos>");
  v.types.assign(10, 1);
  v.types.push_back(3);  // control
  v.eos = 10;
  return Tokenizer::from_vocab(std::move(v));
}

std::shared_ptr<Generation> request(std::vector<int32_t> prompt, int max_tokens) {
  auto g = std::make_shared<Generation>();
  g->prompt = std::move(prompt);
  g->max_tokens = max_tokens;
  return g;
}

// The status submit() refuses g with, or 0 when it accepts it.
int submit_status(Scheduler& s, const std::shared_ptr<Generation>& g) {
  try {
    s.submit(g);
  } catch (const ApiError& err) {
    return err.status;
  }
  return 0;
}

std::string wait_text(Generation& g) {
  std::string text;
  bool done = false;
  while (!done) text += g.take(done, std::chrono::milliseconds(100));
  return text;
}

// A scheduler on a ScriptedEngine (e) with metrics m; the tokenizer and metrics outlive it.
class SchedulerTest : public ::testing::Test {
 protected:
  Scheduler& start(int step_ms, Scheduler::Limits limits, bool rewinds = false) {
    auto engine = std::make_unique<ScriptedEngine>(step_ms, rewinds);
    e = engine.get();
    sched = std::make_unique<Scheduler>(std::move(engine), tok, limits, m);
    return *sched;
  }
  const Tokenizer tok = tiny_tokenizer();
  ModelMetrics m;
  ScriptedEngine* e = nullptr;
  std::unique_ptr<Scheduler> sched;
};

TEST_F(SchedulerTest, EngineFailureFailsOnlyThatRequest) {
  Scheduler& s = start(0, {4, 8, 64});
  auto a = request({1, 2}, 4), bad = request({9}, 4), c = request({5}, 3);
  s.submit(a);
  s.submit(bad);
  s.submit(c);
  EXPECT_EQ(wait_text(*a), "t3t4t5t6");
  EXPECT_EQ(a->finish_reason, "length");
  EXPECT_EQ(a->completion_tokens, 4);
  EXPECT_EQ(wait_text(*bad), "");
  EXPECT_EQ(bad->error, "poisoned token");
  EXPECT_EQ(bad->error_status, 500);
  EXPECT_EQ(wait_text(*c), "t6t7t8");
  s.shutdown();
  EXPECT_EQ(e->open(), 0u) << "every sequence closed";
  EXPECT_EQ(m.requests[int(Outcome::kOk)], 2u);
  EXPECT_EQ(m.requests[int(Outcome::kError)], 1u);
  EXPECT_EQ(m.completion_tokens, 7u);
}

TEST_F(SchedulerTest, CancelClosesTheSequenceAndFullQueueAnswers429) {
  Scheduler& s = start(2, {1, 1, 64});
  auto running = request({1}, 4000), queued = request({2}, 2), extra = request({3}, 2);
  s.submit(running);
  bool done = false;
  while (running->take(done, std::chrono::milliseconds(100)).empty()) {
  }
  s.submit(queued);  // one running + one queued: the limit
  EXPECT_EQ(submit_status(s, extra), 429) << "a full queue accepted a request";
  running->cancel = true;
  wait_text(*running);
  EXPECT_EQ(running->finish_reason, "");
  EXPECT_LT(running->completion_tokens, 4000);
  EXPECT_EQ(wait_text(*queued), "t3t4");
  s.shutdown();
  EXPECT_EQ(e->open(), 0u);
  EXPECT_EQ(m.requests[int(Outcome::kCancelled)], 1u);
  EXPECT_EQ(submit_status(s, extra), 503) << "accepted after shutdown";
}

TEST_F(SchedulerTest, PrefixReuseTakesWholeChunksOfTheSharedPrefix) {
  Scheduler& s = start(0, {.max_concurrent = 2, .max_queued = 8, .prefill_chunk = 4}, true);
  auto a = request({1, 2, 3, 4, 5, 6, 7}, 2);
  s.submit(a);
  EXPECT_EQ(wait_text(*a), "t8t0");
  EXPECT_EQ(e->open(), 1u) << "the finished prompt's sequence is kept";
  // 5 tokens shared: one whole chunk of 4 reused, the rest fed from position 4 as fresh.
  auto b = request({1, 2, 3, 4, 5, 8, 8}, 2);
  s.submit(b);
  EXPECT_EQ(wait_text(*b), "t0t1");
  s.shutdown();
  // a kept at its prompt's end, a's sequence rewound for b, b kept at its prompt's end
  const std::vector<std::pair<int, int>> rewinds = {{1, 7}, {1, 4}, {1, 7}};
  EXPECT_EQ(e->rewound, rewinds);
  const std::vector<std::vector<int32_t>> want = {{1, 2, 3, 4}, {5, 6, 7}, {8}, {5, 8, 8}, {0}};
  EXPECT_EQ(e->fed, want) << "b's rest is not fed in a fresh sequence's chunks";
  EXPECT_EQ(m.prompt_tokens, 7u + 3u);
  EXPECT_EQ(m.prompt_tokens_cached, 4u);
  EXPECT_EQ(e->open(), 0u) << "shutdown closes the cached sequences";
}

TEST_F(SchedulerTest, AnEqualPromptIsAnsweredFromTheKeptRow) {
  Scheduler& s = start(0, {.max_concurrent = 2, .max_queued = 8, .prefill_chunk = 4}, true);
  auto a = request({1, 2, 3}, 3), again = request({1, 2, 3}, 3);
  s.submit(a);
  EXPECT_EQ(wait_text(*a), "t4t5t6");
  s.submit(again);
  EXPECT_EQ(wait_text(*again), "t4t5t6");
  s.shutdown();
  // a: its prompt and two decode tokens; again: no prompt pass, its first token from the kept row
  const std::vector<std::vector<int32_t>> want = {{1, 2, 3}, {4}, {5}, {4}, {5}};
  EXPECT_EQ(e->fed, want);
  EXPECT_EQ(m.prompt_tokens_cached, 3u);
}

TEST_F(SchedulerTest, TheLeastRecentlyUsedCachedSequenceGivesItsSlotUp) {
  Scheduler& s = start(0, {.max_concurrent = 2, .max_queued = 8, .prefill_chunk = 4}, true);
  for (int32_t first : {1, 3, 5}) {
    auto g = request({first, 2}, 1);
    s.submit(g);
    wait_text(*g);
    EXPECT_LE(e->open(), 2u) << "running and cached sequences past max_concurrent";
  }
  auto again = request({1, 2}, 1);  // evicted: fed again
  s.submit(again);
  wait_text(*again);
  auto last = request({5, 2}, 1);  // still cached
  s.submit(last);
  wait_text(*last);
  s.shutdown();
  EXPECT_EQ(m.prompt_tokens, 8u);
  EXPECT_EQ(m.prompt_tokens_cached, 2u);
}

// A sampled request takes only kept logits: after a greedy run (top-1 kept) its prompt is fed
// again; after a sampled run with the same seed it gets the same text without a prompt pass.
TEST_F(SchedulerTest, ASampledRequestReusesKeptLogitsOnly) {
  Scheduler& s = start(0, {.max_concurrent = 2, .max_queued = 8, .prefill_chunk = 4}, true);
  auto sampled = [] {
    auto g = request({1, 2, 3}, 4);
    g->sampling = {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .seed = 7};
    return g;
  };
  auto greedy = request({1, 2, 3}, 2), first = sampled(), again = sampled();
  s.submit(greedy);
  EXPECT_EQ(wait_text(*greedy), "t4t5");
  s.submit(first);
  const std::string text = wait_text(*first);
  s.submit(again);
  EXPECT_EQ(wait_text(*again), text) << "the same seed on the kept logits";
  s.shutdown();
  const std::vector<int32_t> prompt = {1, 2, 3};
  EXPECT_EQ(std::count(e->fed.begin(), e->fed.end(), prompt), 2)
      << "the greedy run's top-1 answered a sampled request, or the last one was fed again";
  EXPECT_EQ(m.prompt_tokens_cached, 3u);
}

// An engine that has no sequence for a request fails that request alone (500), and the next one
// is served.
TEST_F(SchedulerTest, AdmissionFailureFailsOnlyThatRequest) {
  Scheduler& s = start(0, {.max_concurrent = 2, .max_queued = 8, .prefill_chunk = 4}, true);
  e->fail_open = true;
  auto a = request({1, 2}, 2);
  s.submit(a);
  EXPECT_EQ(wait_text(*a), "");
  EXPECT_EQ(a->error, "no sequence slot");
  EXPECT_EQ(a->error_status, 500);
  e->fail_open = false;
  auto b = request({5}, 2);
  s.submit(b);
  EXPECT_EQ(wait_text(*b), "t6t7");
  s.shutdown();
  EXPECT_EQ(m.requests[int(Outcome::kError)], 1u);
  EXPECT_EQ(m.requests[int(Outcome::kOk)], 1u);
}

TEST_F(SchedulerTest, PrefixCacheOffKeepsNothing) {
  Scheduler& s = start(
      0, {.max_concurrent = 2, .max_queued = 8, .prefill_chunk = 4, .prefix_cache = false}, true);
  auto a = request({1, 2, 3}, 2), again = request({1, 2, 3}, 2);
  s.submit(a);
  wait_text(*a);
  EXPECT_EQ(e->open(), 0u);
  s.submit(again);
  EXPECT_EQ(wait_text(*again), "t4t5");
  s.shutdown();
  EXPECT_TRUE(e->rewound.empty());
  EXPECT_EQ(m.prompt_tokens_cached, 0u);
}

}  // namespace
}  // namespace flashnorm::serve
