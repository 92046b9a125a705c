// Prefix reuse on the CPU engine (Engine::rewind_sequence, serve's prompt cache in
// src/serve/scheduler.h): a sequence that holds prompt A, rewound to a whole number of prefill
// chunks inside the prefix A shares with prompt B and fed the rest of B in the chunks a fresh
// sequence would be fed, gives logits bit for bit those of B run fresh; a sequence rewound to the
// end of its prompt and fed its first generated token gives the logits a fresh run decodes. fp32
// weights (random Llama and Gemma 3) and native weights (SmolLM2 Q4_1), both norm modes. Negative
// control: rewound past the shared prefix (positions that hold A's tokens, not B's), the logits
// must differ. Refusals: an id not open, a length past the position.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "flashnorm/engine/cpu_engine.h"
#include "flashnorm/error.h"
#include "flashnorm/model/model.h"
#include "support/random_llama.h"

namespace flashnorm {
namespace {
namespace fs = std::filesystem;

constexpr int kChunk = 16;  // the prefill chunk of these tests

// Feeds `tokens` to `seq` from its position on in chunks ending at multiples of kChunk (as serve's
// scheduler feeds a prompt) and returns the last chunk's logits.
std::vector<float> feed(Engine& e, int seq, std::span<const int32_t> tokens) {
  std::vector<float> logits;
  size_t i = 0;
  while (i < tokens.size()) {
    const int pos = e.sequence_position(seq);
    const size_t n = std::min<size_t>(tokens.size() - i, kChunk - pos % kChunk);
    const SequenceChunk c{seq, tokens.subspan(i, n)};
    logits = e.forward_batch(std::span(&c, 1));
    i += n;
  }
  return logits;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void expect_exact_reuse(const Model& model, NormMode mode, const char* what) {
  SCOPED_TRACE(std::string(what) + (mode == NormMode::Standard ? " standard" : " flashnorm"));
  CpuEngine e(model, mode, {.max_context = 128});
  std::mt19937 rng(3);
  const int V = e.config().vocab;
  // A and B share their first 37 tokens; reuse takes floor(37 / 16) * 16 = 32 of them.
  std::vector<int32_t> a(53), b(61);
  for (auto& t : a) t = int32_t(rng() % V);
  for (auto& t : b) t = int32_t(rng() % V);
  std::copy(a.begin(), a.begin() + 37, b.begin());
  b[37] = (a[37] + 1) % V;
  const int32_t next = int32_t(rng() % V);

  const int fresh = e.open_sequence();
  const std::vector<float> want_b = feed(e, fresh, b);
  e.close_sequence(fresh);
  // A fresh, then its first generated token decoded alone (as serve decodes it)
  const int fresh_a = e.open_sequence();
  feed(e, fresh_a, a);
  const std::vector<float> want_a_next = feed(e, fresh_a, std::span(&next, 1));
  e.close_sequence(fresh_a);

  // A, then four decode tokens (as a finished request leaves its sequence), rewound.
  auto run_a = [&] {
    const int s = e.open_sequence();
    feed(e, s, a);
    for (int i = 0; i < 4; ++i) {
      const int32_t t = int32_t(rng() % V);
      const SequenceChunk c{s, std::span(&t, 1)};
      e.forward_batch(std::span(&c, 1));
    }
    return s;
  };
  int s = run_a();
  const int blocks = e.sequence_kv_blocks(s);
  e.rewind_sequence(s, 32);
  EXPECT_EQ(e.sequence_position(s), 32);
  EXPECT_EQ(e.sequence_kv_blocks(s), blocks) << "the allocation is kept";
  EXPECT_TRUE(same_bits(feed(e, s, std::span(b).subspan(32)), want_b))
      << "B after A's first 32 positions differs from B fresh";
  e.close_sequence(s);

  // The whole prompt kept: the next token's logits as after A fresh.
  s = run_a();
  e.rewind_sequence(s, int(a.size()));
  EXPECT_TRUE(same_bits(feed(e, s, std::span(&next, 1)), want_a_next))
      << "A's next token after a rewind to A differs from fresh";
  e.close_sequence(s);

  // Negative control: rewound to 48, past the 37 shared tokens.
  s = run_a();
  e.rewind_sequence(s, 48);
  EXPECT_FALSE(same_bits(feed(e, s, std::span(b).subspan(48)), want_b))
      << "a rewind past the shared prefix went unnoticed";
  e.close_sequence(s);
  EXPECT_EQ(e.kv_blocks_in_use(), 0);
}

fs::path write(const testing::RandomLlamaOptions& o, const char* name) {
  const fs::path p = testing::fresh_dir("prefix_reuse") / name;
  testing::write_random_gguf(p, o);
  return p;
}

TEST(PrefixReuse, RandomLlamaBitExact) {
  const Model m = load_model(write({}, "llama.gguf"));
  for (NormMode mode : {NormMode::Standard, NormMode::FlashNorm}) {
    expect_exact_reuse(m, mode, "random llama");
  }
}

TEST(PrefixReuse, RandomGemma3BitExact) {
  const Model m = load_model(write(testing::small_gemma3_options(5), "gemma3.gguf"));
  for (NormMode mode : {NormMode::Standard, NormMode::FlashNorm}) {
    expect_exact_reuse(m, mode, "random gemma3");
  }
}

TEST(PrefixReuse, SmolLM2NativeBitExact) {
  const std::string src = testing::smollm2_path();
  ASSERT_TRUE(fs::exists(src)) << src << " missing: run scripts/fetch_models.sh";
  for (NormMode mode : {NormMode::Standard, NormMode::FlashNorm}) {
    expect_exact_reuse(load_model(src, true, WeightStorage::kNative), mode, "smollm2 native");
  }
}

TEST(PrefixReuse, Refusals) {
  CpuEngine e(load_model(write({}, "llama_refusals.gguf")), NormMode::FlashNorm,
              {.max_context = 64});
  const int s = e.open_sequence();
  const std::vector<int32_t> t = {1, 2, 3};
  feed(e, s, t);
  EXPECT_THROW(e.rewind_sequence(s, 4), Error);
  EXPECT_THROW(e.rewind_sequence(s, -1), Error);
  EXPECT_THROW(e.rewind_sequence(s + 1, 0), Error);
  EXPECT_EQ(e.sequence_position(s), 3) << "a refused rewind changes nothing";
  e.rewind_sequence(s, 0);
  EXPECT_EQ(e.sequence_position(s), 0);
}

}  // namespace
}  // namespace flashnorm
