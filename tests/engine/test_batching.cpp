// Batched sequences of the CPU engine (Engine::open_sequence / forward_batch): batch invariance in
// fp32 — a request's greedy tokens are the same run alone (plain forward(), the reference path of
// the equivalence tests) and beside other requests that start at other steps, with other prompt
// lengths and prefill chunk sizes — in both norm modes, on random Llama and Gemma 3 checkpoints
// and on SmolLM2. Negative control: the same schedule with two requests sharing one sequence's
// cache (a mis-indexed slot) must change some request's tokens. Refusals leave nothing appended.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <random>

#include "flashnorm/engine/cpu_engine.h"
#include "flashnorm/engine/evaluate.h"
#include "flashnorm/engine/sampler.h"
#include "flashnorm/error.h"
#include "flashnorm/model/model.h"
#include "support/random_llama.h"

namespace flashnorm {
namespace {
namespace fs = std::filesystem;

struct Request {
  std::vector<int32_t> prompt;
  int n = 0;      // tokens to generate
  int start = 0;  // step at which it joins
};

std::vector<Request> make_requests(int count, int vocab, uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::vector<Request> r(count);
  for (int i = 0; i < count; ++i) {
    r[i].prompt.resize(1 + (i * 7) % 19);
    for (auto& t : r[i].prompt) t = static_cast<int32_t>(rng() % vocab);
    r[i].n = 6 + (i * 5) % 11;
    r[i].start = (i * 3) % 7;
  }
  return r;
}

// Runs every request through forward_batch, continuous-batching style: request i joins at step
// r.start, its prompt prefilled `chunk` tokens per step, then one decode token per step; all
// active requests advance in the same pass. slot_of[i] names the cache request i writes to
// (distinct for a correct run); chunks of one slot in the same step go to separate passes.
// Returns each request's greedy tokens.
std::vector<std::vector<int32_t>> run_together(Engine& e, const std::vector<Request>& reqs,
                                               int chunk, const std::vector<int>& slot_of) {
  const int n = static_cast<int>(reqs.size());
  std::map<int, int> seq_of_slot;
  for (int s : slot_of) {
    if (!seq_of_slot.count(s)) seq_of_slot[s] = e.open_sequence();
  }
  std::vector<std::vector<int32_t>> out(n);
  std::vector<size_t> fed(n, 0);  // prompt tokens fed
  const int vocab = e.config().vocab;
  for (int step = 0;; ++step) {
    std::vector<std::vector<int>> passes;  // request indices per forward pass
    std::vector<std::vector<int32_t>> toks(n);
    bool pending = false;
    for (int i = 0; i < n; ++i) {
      if (int(out[i].size()) == reqs[i].n) continue;
      pending = true;
      if (step < reqs[i].start) continue;
      if (fed[i] < reqs[i].prompt.size()) {
        const size_t k = std::min<size_t>(chunk, reqs[i].prompt.size() - fed[i]);
        toks[i].assign(reqs[i].prompt.begin() + fed[i], reqs[i].prompt.begin() + fed[i] + k);
      } else {
        toks[i] = {out[i].back()};
      }
      size_t p = 0;  // first pass without this slot
      while (p < passes.size() && std::any_of(passes[p].begin(), passes[p].end(),
                                              [&](int j) { return slot_of[j] == slot_of[i]; })) {
        ++p;
      }
      if (p == passes.size()) passes.emplace_back();
      passes[p].push_back(i);
    }
    if (!pending) break;
    for (const auto& pass : passes) {
      std::vector<SequenceChunk> chunks;
      for (int i : pass) chunks.push_back({seq_of_slot.at(slot_of[i]), toks[i]});
      const std::vector<float> logits = e.forward_batch(chunks);
      for (size_t c = 0; c < pass.size(); ++c) {
        const int i = pass[c];
        if (fed[i] < reqs[i].prompt.size()) {
          fed[i] += toks[i].size();
          if (fed[i] < reqs[i].prompt.size()) continue;  // mid-prompt: logits unused
        }
        out[i].push_back(argmax(std::span(&logits[c * vocab], vocab)));
      }
    }
  }
  for (const auto& [slot, seq] : seq_of_slot) e.close_sequence(seq);
  return out;
}

// `chunks`: the prefill chunk sizes tried; `control`: also run the negative control.
void expect_batch_invariant(const Model& model, NormMode mode, int count, const char* what,
                            std::vector<int> chunks = {1, 4}, bool control = true) {
  SCOPED_TRACE(std::string(what) + (mode == NormMode::Standard ? " standard" : " flashnorm"));
  CpuEngine e(model, mode, {.max_context = 64});
  const std::vector<Request> reqs = make_requests(count, e.config().vocab, 7);
  // Alone: the single-sequence forward() path, whole prompt in one pass.
  std::vector<std::vector<int32_t>> alone;
  for (const Request& r : reqs) {
    e.reset();
    alone.push_back(greedy_tokens(e, r.prompt, r.n));
  }
  std::vector<int> slots(count);
  for (int i = 0; i < count; ++i) slots[i] = i;
  for (int chunk : chunks) {
    EXPECT_EQ(run_together(e, reqs, chunk, slots), alone) << "prefill chunk " << chunk;
    EXPECT_EQ(e.kv_blocks_in_use(), 0) << "closed sequences keep no cache";
  }
  if (!control) return;
  // Negative control: request 1 writes into request 0's cache.
  std::vector<int> shared = slots;
  shared[1] = 0;
  EXPECT_NE(run_together(e, reqs, 4, shared), alone) << "a shared cache slot went unnoticed";
}

class Batching : public ::testing::Test {
 protected:
  static fs::path write(const testing::RandomLlamaOptions& o, const char* name) {
    const fs::path p = testing::fresh_dir("batching") / name;
    testing::write_random_gguf(p, o);
    return p;
  }
};

TEST_F(Batching, RandomLlamaGreedyTokensAloneEqualBatched) {
  testing::RandomLlamaOptions o;
  o.seed = 11;
  const Model m = load_model(write(o, "llama.gguf"));
  for (NormMode mode : {NormMode::Standard, NormMode::FlashNorm}) {
    expect_batch_invariant(m, mode, 9, "random llama");
  }
}

TEST_F(Batching, RandomGemma3GreedyTokensAloneEqualBatched) {
  // QK-norm (cancelled rstd in FlashNorm mode), sliding-window layers, GeGLU, soft-capping.
  testing::RandomLlamaOptions o = testing::small_gemma3_options(5);
  o.final_softcap = 30;
  const Model m = load_model(write(o, "gemma3.gguf"));
  for (NormMode mode : {NormMode::Standard, NormMode::FlashNorm}) {
    expect_batch_invariant(m, mode, 7, "random gemma3");
  }
}

TEST_F(Batching, SmolLM2GreedyTokensAloneEqualBatched) {
  const std::string src = testing::smollm2_path();
  ASSERT_TRUE(fs::exists(src)) << src << " missing: run scripts/fetch_models.sh";
  const Model m = load_model(src);
  // One schedule (the random models try more, and the negative control).
  expect_batch_invariant(m, NormMode::FlashNorm, 4, "smollm2", {3}, false);
}

TEST_F(Batching, RefusalsAppendNothing) {
  const Model m = load_model(write({}, "refuse.gguf"));
  CpuEngine e(m, NormMode::FlashNorm, {.max_context = 32});
  const int a = e.open_sequence(), b = e.open_sequence();
  EXPECT_NE(a, b);
  const std::vector<int32_t> three{1, 2, 3}, bad{1, 300}, many(31, 5), none;
  auto refused = [&](std::vector<SequenceChunk> chunks, const char* what) {
    const int pa = e.sequence_position(a), pb = e.sequence_position(b);
    EXPECT_THROW(e.forward_batch(chunks), Error) << what;
    EXPECT_EQ(e.sequence_position(a), pa) << what;
    EXPECT_EQ(e.sequence_position(b), pb) << what;
  };
  refused({}, "no chunks");
  refused({{a, three}, {a, three}}, "one sequence twice");
  refused({{a, three}, {b + 100, three}}, "an id not open");
  refused({{a, three}, {b, bad}}, "a token past the vocabulary");
  refused({{a, three}, {b, none}}, "an empty chunk");
  refused({{a, many}, {b, many}, {a, three}}, "one sequence twice, later");
  e.forward_batch(std::vector<SequenceChunk>{{a, many}});
  refused({{b, three}, {a, three}}, "a sequence past the context");
  EXPECT_GT(e.kv_blocks_in_use(), 0);
  e.close_sequence(a);
  EXPECT_THROW(e.close_sequence(a), Error);
  EXPECT_THROW(e.sequence_position(a), Error);
  e.close_sequence(b);
  EXPECT_EQ(e.kv_blocks_in_use(), 0);
}

}  // namespace
}  // namespace flashnorm
