// GPU tests of the CUDA engine's batched sequences (CudaEngine::open_sequence / forward_batch;
// ctest label `gpu`, skipped without a GPU). Random Llama and Gemma 3 checkpoints, both norm modes:
// continuous-batching schedules (sequences joining at different steps, prompts of 1 to 90 tokens,
// batches of 1 to 40 rows, padded to the graph's batch bucket) against the CPU fp32 engine's
// forward_batch on the same schedule; graph replay against eager passes across a key bucket; one
// sequence's top-1 alone and among 31 others; top-1 on the device against the host's argmax;
// refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <thread>

#include "flashnorm/engine/cpu_engine.h"
#include "flashnorm/engine/cuda_engine.h"
#include "flashnorm/engine/evaluate.h"
#include "flashnorm/engine/sampler.h"
#include "flashnorm/error.h"
#include "support/random_llama.h"

namespace flashnorm {
namespace {

std::string batch_model(bool gemma, int context = 512) {
  const auto dir = testing::fresh_dir(gemma ? "cuda_batch_g3" : "cuda_batch_ll");
  testing::RandomLlamaOptions o =
      gemma ? testing::small_gemma3_options(11) : testing::RandomLlamaOptions{};
  if (!gemma) o.n_layer = 3, o.seed = 5;
  o.context = context;
  testing::write_random_llama(dir, o);
  return dir.string();
}

// A schedule: sequence i joins at step start[i] with a prompt of plen[i] tokens (one chunk) and
// then takes one teacher-forced random token per step until step `steps`.
struct Schedule {
  std::vector<int> start, plen;
  int steps = 0;
};

// Runs the schedule on each engine in lockstep (the same chunks) and returns every row's logits
// per engine: [engine][row] (rows in step order, chunk order within a step).
std::vector<std::vector<std::vector<float>>> run_schedule(std::vector<Engine*> engines,
                                                          const Schedule& s, uint32_t seed) {
  const int n = int(s.start.size()), V = engines[0]->config().vocab;
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> tok(0, V - 1);
  std::vector<std::vector<int>> ids(engines.size(), std::vector<int>(n, 0));
  std::vector<std::vector<std::vector<float>>> rows(engines.size());
  std::vector<bool> joined(n, false);
  for (int step = 0; step < s.steps; ++step) {
    std::vector<std::vector<int32_t>> toks(n);
    std::vector<int> who;
    for (int i = 0; i < n; ++i) {
      if (step < s.start[i]) continue;
      toks[i].resize(joined[i] ? 1 : s.plen[i]);
      for (auto& t : toks[i]) t = tok(rng);
      who.push_back(i);
    }
    if (who.empty()) continue;
    for (size_t e = 0; e < engines.size(); ++e) {
      std::vector<SequenceChunk> chunks;
      for (int i : who) {
        if (!joined[i]) ids[e][i] = engines[e]->open_sequence();
        chunks.push_back({ids[e][i], toks[i]});
      }
      const std::vector<float> l = engines[e]->forward_batch(chunks);
      for (size_t c = 0; c < chunks.size(); ++c) {
        rows[e].emplace_back(l.begin() + c * V, l.begin() + (c + 1) * V);
      }
    }
    for (int i : who) joined[i] = true;
  }
  for (size_t e = 0; e < engines.size(); ++e) {
    for (int i = 0; i < n; ++i) {
      if (joined[i]) {
        EXPECT_EQ(engines[e]->sequence_position(ids[e][i]), s.plen[i] + s.steps - s.start[i] - 1);
        engines[e]->close_sequence(ids[e][i]);
      }
    }
  }
  return rows;
}

struct Agreement {
  double max_rel = 0, top1 = 0;
};
Agreement agreement(const std::vector<std::vector<float>>& ref,
                    const std::vector<std::vector<float>>& got) {
  Agreement a;
  int same = 0;
  for (size_t r = 0; r < ref.size(); ++r) {
    const double d = max_rel_diff(ref[r], got[r]);
    a.max_rel = std::isnan(d) ? INFINITY : std::max(a.max_rel, d);
    same += std::max_element(ref[r].begin(), ref[r].end()) - ref[r].begin() ==
            std::max_element(got[r].begin(), got[r].end()) - got[r].begin();
  }
  a.top1 = double(same) / ref.size();
  return a;
}

// The CUDA engine's rows (bf16 weights) against the CPU fp32 engine's: at least 90% top-1 and
// a relative logit difference below `bar`; returns that difference.
double expect_bf16_agreement(const std::vector<std::vector<float>>& cpu,
                             const std::vector<std::vector<float>>& gpu, double bar) {
  const Agreement a = agreement(cpu, gpu);
  std::printf("rows %zu: max rel logit diff %.3e (bar %.3e), top-1 %.4f\n", cpu.size(), a.max_rel,
              bar, a.top1);
  EXPECT_LT(a.max_rel, bar);
  EXPECT_GE(a.top1, 0.9);
  return a.max_rel;
}
// Standard mode's bar: bf16 rounding over up to 114 positions (3.6e-2 measured on the H200; the
// one-sequence tests' 3e-2 holds to about 96). FlashNorm mode is held to Standard's own error on
// the same schedule: 1.25 x + 1e-3, as the long-prompt test does.
constexpr double kStandardBar = 5e-2;
double flashnorm_bar(double standard_err) { return 1.25 * standard_err + 1e-3; }

const char* mode_name(NormMode m) { return m == NormMode::Standard ? "standard" : "flashnorm"; }

TEST(CudaBatchedDecode, ContinuousBatchingMatchesCpuFp32) {
  for (bool gemma : {false, true}) {
    double std_err = 0;
    for (NormMode mode : {NormMode::Standard, NormMode::FlashNorm}) {  // Standard first
      SCOPED_TRACE(std::string(gemma ? "gemma3 " : "llama ") + mode_name(mode));
      const std::string dir = batch_model(gemma);
      CpuEngine cpu(load_model(dir), NormMode::Standard, {.max_context = 256});
      CudaEngineOptions o;
      o.capacity.max_context = 256, o.capacity.max_sequences = 8;
      CudaEngine gpu(load_model(dir), mode, o);
      // prompts of 1 (a batched row at position 0), 5 and 17 (fused decode ops), 40 and 90
      // (kInAdd in FlashNorm mode) tokens; 1 to 6 rows per step: buckets 1, 2, 4, 8
      Schedule s{{0, 0, 2, 3, 5, 9}, {5, 1, 17, 40, 90, 3}, 30};
      const auto rows = run_schedule({&cpu, &gpu}, s, 21);
      const double bar = mode == NormMode::Standard ? kStandardBar : flashnorm_bar(std_err);
      const double err = expect_bf16_agreement(rows[0], rows[1], bar);
      if (mode == NormMode::Standard) std_err = err;
    }
  }
}

TEST(CudaBatchedDecode, FortyRowsMatchCpuFp32) {
  // 40 one-token rows padded to the 64-row bucket: with decode_max_rows 16 the projections leave
  // the decode kernel (M > 16) for cuBLASLt and FlashNorm normalizes in the residual add; with 64
  // the decode GEMV (two 32-row slices, rstd in the kernel) and its fused residual add run them
  std::vector<std::vector<float>> at16[2];  // [mode] rows with decode_max_rows 16
  for (int rows : {16, 64}) {
    double std_err = 0;
    for (NormMode mode : {NormMode::Standard, NormMode::FlashNorm}) {  // Standard first
      SCOPED_TRACE(std::string(mode_name(mode)) + " decode_max_rows " + std::to_string(rows));
      const std::string dir = batch_model(false);
      CpuEngine cpu(load_model(dir), NormMode::Standard, {.max_context = 64});
      CudaEngineOptions o;
      o.capacity.max_context = 64, o.capacity.max_sequences = 40;
      o.launch.decode_max_rows = rows;
      CudaEngine gpu(load_model(dir), mode, o);
      if (rows == 64) {  // tuned at the padded row counts above 16 too
        int tuned32 = 0;
        for (const GemvTuning& t : gpu.gemv_tuning()) {
          tuned32 += t.M == 32;
          if (t.M > 1) EXPECT_EQ(t.gemm_us > 0, t.name == "lm_head") << t.name;  // paired timing
        }
        EXPECT_EQ(tuned32, 5);  // q|k|v, o, gate|up, down, lm_head
      }
      Schedule s;
      for (int i = 0; i < 40; ++i) s.start.push_back(0), s.plen.push_back(1 + i % 3);
      s.steps = 12;
      const auto rows_out = run_schedule({&cpu, &gpu}, s, 22);
      const double bar = mode == NormMode::Standard ? kStandardBar : flashnorm_bar(std_err);
      const double err = expect_bf16_agreement(rows_out[0], rows_out[1], bar);
      if (mode == NormMode::Standard) std_err = err;
      auto& prev = at16[mode == NormMode::FlashNorm];
      if (rows == 16) {
        prev = rows_out[1];
      } else {  // other kernels ran the 64-row passes: not bitwise the 16-row engine's logits
        const Agreement a = agreement(prev, rows_out[1]);
        std::printf("decode_max_rows 64 against 16: max rel logit diff %.3e\n", a.max_rel);
        EXPECT_GT(a.max_rel, 0.0);
      }
    }
  }
}

TEST(CudaBatchedDecode, GraphReplayMatchesEagerAcrossAKeyBucket) {
  for (NormMode mode : {NormMode::Standard, NormMode::FlashNorm}) {
    SCOPED_TRACE(mode_name(mode));
    const std::string dir = batch_model(true, 1024);
    CudaEngineOptions o;
    o.capacity.max_context = 600, o.capacity.max_sequences = 4;
    o.gemv.choice = GemvChoice::kHeuristic;
    CudaEngine g(load_model(dir), mode, o);
    o.launch.decode = DecodeLaunch::kEager;
    CudaEngine ref(load_model(dir), mode, o);
    // one sequence crosses position 512 (the graphs' key bucket) while the others stay below
    Schedule s{{0, 0, 4}, {500, 30, 7}, 40};
    const auto rows = run_schedule({&ref, &g}, s, 23);
    const Agreement a = agreement(rows[0], rows[1]);
    std::printf("graph vs eager, rows %zu: max rel logit diff %.3e\n", rows[0].size(), a.max_rel);
    EXPECT_LT(a.max_rel, 1e-6);
  }
}

TEST(CudaBatchedDecode, TopOneAloneAndAmongThirtyOne) {
  for (bool gemma : {false, true}) {
    SCOPED_TRACE(gemma ? "gemma3" : "llama");
    const std::string dir = batch_model(gemma);
    CudaEngineOptions o;
    o.capacity.max_context = 128, o.capacity.max_sequences = 32;
    CudaEngine gpu(load_model(dir), NormMode::FlashNorm, o);
    const int V = gpu.config().vocab, steps = 64;
    std::mt19937 rng(31);
    std::vector<std::vector<int32_t>> prompts(32, std::vector<int32_t>(8));
    for (auto& p : prompts)
      for (auto& t : p) t = int32_t(rng() % V);
    auto argmax = [&](const float* r) { return int32_t(std::max_element(r, r + V) - r); };
    // alone: greedy
    std::vector<int32_t> alone;
    {
      const int s = gpu.open_sequence();
      SequenceChunk c{s, prompts[0]};
      std::vector<float> l = gpu.forward_batch(std::span(&c, 1));
      for (int t = 0; t < steps; ++t) {
        alone.push_back(argmax(l.data()));
        c.tokens = std::span(&alone.back(), 1);
        l = gpu.forward_batch(std::span(&c, 1));
      }
      gpu.close_sequence(s);
    }
    // among 31 others, fed the same tokens
    std::vector<SequenceChunk> chunks(32);
    std::vector<int32_t> next(32);
    for (int k = 0; k < 32; ++k) chunks[k] = {gpu.open_sequence(), prompts[k]};
    std::vector<float> l = gpu.forward_batch(chunks);
    int same = 0;
    for (int t = 0; t < steps; ++t) {
      if (t > 0) same += argmax(l.data()) == alone[t];
      for (int k = 0; k < 32; ++k) {
        next[k] = k == 0 ? alone[t] : argmax(l.data() + size_t(k) * V);
        chunks[k].tokens = std::span(&next[k], 1);
      }
      l = gpu.forward_batch(chunks);
    }
    std::printf("top-1 identical alone and among 31 others: %d of %d steps\n", same, steps - 1);
    EXPECT_GE(double(same) / (steps - 1), 0.95);
  }
}

// forward_batch_top1: greedy rows' top-1 from the device equals the host argmax of the same rows'
// logits from forward_batch on a twin engine; the other rows' logits are bitwise those logits.
TEST(CudaBatchedDecode, DeviceTopOneMatchesHostArgmax) {
  const std::string dir = batch_model(true);
  CudaEngineOptions o;
  o.capacity.max_context = 64, o.capacity.max_sequences = 6;
  CudaEngine a(load_model(dir), NormMode::FlashNorm, o), b(load_model(dir), NormMode::FlashNorm, o);
  const int V = a.config().vocab;
  std::mt19937 rng(41);
  std::vector<std::vector<int32_t>> toks(6);
  std::vector<SequenceChunk> ca(6), cb(6);
  for (int k = 0; k < 6; ++k) {
    toks[k].resize(1 + k * 3);  // prompt chunks of 1 (batched) to 16 tokens
    for (auto& t : toks[k]) t = int32_t(rng() % V);
    ca[k] = {a.open_sequence(), toks[k]}, cb[k] = {b.open_sequence(), toks[k]};
  }
  std::vector<float> lb;
  std::vector<int32_t> top1;
  int greedy_rows = 0;
  for (int step = 0; step < 20; ++step) {
    std::vector<uint8_t> greedy(6);
    for (int k = 0; k < 6; ++k) greedy[k] = step % 4 == 3 ? (k % 2) : 1;  // all greedy, or mixed
    const std::vector<float> la = a.forward_batch(ca);
    b.forward_batch_top1(cb, greedy, lb, top1);
    ASSERT_EQ(top1.size(), 6u);
    for (int k = 0; k < 6; ++k) {
      const std::span<const float> row(la.data() + size_t(k) * V, V);
      if (greedy[k]) {
        EXPECT_EQ(top1[k], argmax(row)) << "step " << step << " row " << k;
        ++greedy_rows;
      } else {
        EXPECT_TRUE(std::equal(row.begin(), row.end(), lb.begin() + size_t(k) * V));
      }
      toks[k] = {int32_t(rng() % V)};
      ca[k].tokens = toks[k], cb[k].tokens = toks[k];
    }
  }
  EXPECT_GT(greedy_rows, 100);
  const std::vector<uint8_t> short_mask(5, 1);
  EXPECT_THROW(b.forward_batch_top1(cb, short_mask, lb, top1), Error);
}

// Two engines on one GPU driven from two threads at once (`serve` with two models): sequences join
// and leave so that both keep capturing graphs (batch buckets) while the other runs; no call may
// fail, and each engine's rows must equal a lone run of the same schedule. The heads are 256 and
// 128 wide, so that both engines' attention launches need a shared memory opt-in beyond 48 KiB,
// each of its own sizes (a per-launch setting raced between the threads: shared_memory.h).
TEST(CudaBatchedDecode, TwoEnginesOnTwoThreads) {
  struct Run {
    std::string dir;
    std::vector<std::vector<float>> rows;
    std::string error;
  };
  auto drive = [](Run& r, bool record) {
    try {
      CudaEngineOptions o;
      o.capacity.max_context = 700, o.capacity.max_sequences = 40;
      o.gemv.choice = GemvChoice::kHeuristic;
      CudaEngine e(load_model(r.dir), NormMode::FlashNorm, o);
      const int V = e.config().vocab;
      std::mt19937 rng(51);
      std::vector<std::pair<int, int>> live;  // (id, steps left)
      for (int step = 0; step < 300; ++step) {
        while (int(live.size()) < 1 + (step * 7) % 40) {
          live.push_back({e.open_sequence(), 20 + int(rng() % 600)});
        }
        std::vector<std::vector<int32_t>> toks(live.size());
        std::vector<SequenceChunk> chunks;
        for (size_t k = 0; k < live.size(); ++k) {
          toks[k].resize(e.sequence_position(live[k].first) == 0 ? 1 + rng() % 40 : 1);
          for (auto& t : toks[k]) t = int32_t(rng() % V);
          chunks.push_back({live[k].first, toks[k]});
        }
        const std::vector<float> l = e.forward_batch(chunks);
        if (record) {
          for (size_t k = 0; k < chunks.size(); ++k) {
            r.rows.emplace_back(l.begin() + k * V, l.begin() + (k + 1) * V);
          }
        }
        for (size_t k = live.size(); k-- > 0;) {
          if (--live[k].second == 0 || e.sequence_position(live[k].first) + 41 > 700) {
            e.close_sequence(live[k].first);
            live.erase(live.begin() + k);
          }
        }
      }
    } catch (const std::exception& ex) {
      r.error = ex.what();
    }
  };
  auto wide = [](const char* name, bool gemma, int head_dim) {
    const auto dir = testing::fresh_dir(name);
    testing::RandomLlamaOptions o =
        gemma ? testing::small_gemma3_options(13) : testing::RandomLlamaOptions{};
    o.head_dim = head_dim, o.context = 1024;
    testing::write_random_llama(dir, o);
    return dir.string();
  };
  Run a{wide("cuda_batch_threads_ll", false, 128)}, b{wide("cuda_batch_threads_g3", true, 256)};
  std::thread ta([&] { drive(a, true); }), tb([&] { drive(b, true); });
  ta.join(), tb.join();
  EXPECT_EQ(a.error, "");
  EXPECT_EQ(b.error, "");
  Run a1{a.dir};
  drive(a1, true);  // alone
  ASSERT_EQ(a1.error, "");
  ASSERT_EQ(a1.rows.size(), a.rows.size());
  double worst = 0;
  for (size_t i = 0; i < a.rows.size(); ++i)
    worst = std::max(worst, max_rel_diff(a1.rows[i], a.rows[i]));
  std::printf("two threads: %zu + %zu rows; engine A against a lone run: max rel diff %.3e\n",
              a.rows.size(), b.rows.size(), worst);
  EXPECT_EQ(worst, 0.0);
}

TEST(CudaBatchedDecode, RefusesBadCallsAndAppendsNothing) {
  const std::string dir = batch_model(false);
  CudaEngineOptions o;
  for (int bad : {0, 65}) {  // CudaLaunch::decode_max_rows out of 1 .. 64
    CudaEngineOptions b;
    b.launch.decode_max_rows = bad;
    try {
      CudaEngine e(load_model(dir), NormMode::FlashNorm, b);
      ADD_FAILURE() << "decode_max_rows " << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("decode_max_rows " + std::to_string(bad)),
                std::string::npos)
          << e.what();
    }
  }
  o.capacity.max_context = 16;
  {
    CudaEngine none(load_model(dir), NormMode::FlashNorm, o);
    EXPECT_FALSE(none.batches());
    EXPECT_THROW(none.open_sequence(), Error);
  }
  o.capacity.max_sequences = 2;
  CudaEngine gpu(load_model(dir), NormMode::FlashNorm, o);
  EXPECT_TRUE(gpu.batches());
  const int a = gpu.open_sequence(), b = gpu.open_sequence();
  EXPECT_THROW(gpu.open_sequence(), Error);
  const int32_t t3[] = {1, 2, 3}, bad[] = {gpu.config().vocab}, big[17] = {};
  const SequenceChunk twice[] = {{a, t3}, {a, t3}};
  EXPECT_THROW(gpu.forward_batch(twice), Error);
  const SequenceChunk badid[] = {{a, t3}, {b, bad}};
  EXPECT_THROW(gpu.forward_batch(badid), Error);
  const SequenceChunk over[] = {{a, t3}, {b, big}};
  EXPECT_THROW(gpu.forward_batch(over), Error);
  const SequenceChunk unknown[] = {{a + b + 1, t3}};
  EXPECT_THROW(gpu.forward_batch(unknown), Error);
  EXPECT_EQ(gpu.sequence_position(a), 0);
  EXPECT_EQ(gpu.sequence_position(b), 0);
  const SequenceChunk fine[] = {{a, t3}, {b, std::span(t3, 1)}};
  EXPECT_EQ(gpu.forward_batch(fine).size(), 2u * gpu.config().vocab);
  EXPECT_EQ(gpu.sequence_position(a), 3);
  EXPECT_EQ(gpu.sequence_position(b), 1);
  EXPECT_EQ(gpu.kv_blocks_in_use(), 2);
  gpu.close_sequence(a);
  EXPECT_THROW(gpu.close_sequence(a), Error);
  EXPECT_THROW(gpu.sequence_position(a), Error);
  const int c = gpu.open_sequence();  // the freed slot, empty again
  EXPECT_EQ(gpu.sequence_position(c), 0);
}

}  // namespace
}  // namespace flashnorm
