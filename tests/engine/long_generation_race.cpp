// Long-generation race test (issue 4): the CUDA engine generates `--steps` tokens greedily with its
// decode loop captured in a CUDA graph (buffers reused every step), and every step's logits are
// compared with an independent eager engine (fresh buffers, no graph, no debug hooks) fed the same
// token history; every `--check-every` steps a third engine recomputes the whole history from an
// empty KV cache. A step fails when its logits differ beyond rounding (relative to the logit scale)
// or its top-1 differs where the reference's top-2 gap is clear; the first failing step is
// reported.
// Negative control (LongGeneration.NoJoinProducesWrongSteps): the two-stream variant with its event
// join removed and its rstd producer delayed reads a stale rstd ("outputs from the past"); the test
// asserts that this run fails at some step, so the comparison is known to catch the race.
// ctest label `gpu` (skipped without a GPU: engine_gpu_main.cpp; skipped without the model).
// Batched form (BatchedGraphReplayMatchesEagerEveryStep, NoJoinProducesWrongBatchedSteps): --batch
// sequences decode together through forward_batch, every row of every step against an eager engine.
// Options after GoogleTest's: --model GGUF or HF directory with tokenizer.json (default: the
// SmolLM2 GGUF of scripts/fetch_models.sh), --steps, --check-every, --prompt, --delay-cycles,
// --tol,
// --batch, --decode-rows (CudaLaunch::decode_max_rows), --native (the GGUF's blocks: quant_gemv),
// --only NAME..., --no-tune.
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "flashnorm/engine/cuda_engine.h"
#include "flashnorm/engine/evaluate.h"
#include "flashnorm/engine/sampler.h"
#include "flashnorm/error.h"
#include "flashnorm/io/gguf.h"
#include "flashnorm/tokenizer/model_tokenizer.h"
#include "flashnorm/tokenizer/tokenizer.h"
#include "support/random_llama.h"

namespace {
using namespace flashnorm;

struct RaceArgs {
  std::string model, prompt = "The history of the printing press begins";
  int steps = 2048, check_every = 256, batch = 8;
  int decode_rows = CudaLaunch{}.decode_max_rows;
  long long delay = 50000;
  double tol = 1e-2, fresh_tol = 5e-2;
  bool no_tune = false;
  bool native = false;  // the GGUF's own blocks (WeightStorage::kNative: quant_gemv in decode)
  std::vector<std::string> only;
} g_args;

struct Diff {
  double rel = 0;    // max |a - b| / max |ref|
  bool top1 = true;  // same argmax, or a near tie in the reference
  int32_t a = 0, b = 0;
};
Diff compare(std::span<const float> ref, std::span<const float> got, double tie_tol) {
  Diff d;
  double s = 0;
  for (float v : ref) s = std::max(s, std::fabs(double(v)));
  d.rel = max_rel_diff(ref, got);
  d.a = argmax(ref), d.b = argmax(got);
  if (d.a != d.b) d.top1 = ref[d.a] - ref[d.b] <= tie_tol * s;  // near tie: rounding may flip it
  return d;
}

struct Config {
  const char* name;
  NormMode mode;
  Deferred deferred;
  StandardNorm standard = StandardNorm::kSeparate;
  TiedHead tied_head = TiedHead::kKeepGain;
};

// The model and the prompt's ids, loaded once.
struct Loaded {
  Model m;
  std::vector<int32_t> ids;
  std::unique_ptr<Tokenizer> tok;
};
const Loaded& loaded() {
  static Loaded l = [] {
    Loaded r;
    r.m = load_model(g_args.model, /*with_data=*/true,
                     g_args.native ? WeightStorage::kNative : WeightStorage::kF32);
    // A GGUF's own vocabulary, or a Hugging Face directory's tokenizer.json.
    r.tok = std::make_unique<Tokenizer>(
        load_model_tokenizer(g_args.model, "", static_cast<size_t>(r.m.cfg.vocab)).tok);
    r.ids = r.tok->encode(g_args.prompt, false);
    if (r.tok->add_bos() && r.tok->bos()) r.ids.insert(r.ids.begin(), *r.tok->bos());
    return r;
  }();
  return l;
}

// Configuration c's options for the tested engine (graph replay; for two-stream, a slow rstd
// producer and, with no_join, the join removed) and for the eager reference, with a cache for the
// prompt and g_args.steps steps and `sequences` batched sequences.
std::pair<CudaEngineOptions, CudaEngineOptions> race_options(const Config& c, bool no_join,
                                                             int sequences) {
  CudaEngineOptions o;
  o.capacity.max_context = static_cast<int>(loaded().ids.size()) + g_args.steps + 8;
  o.capacity.max_sequences = sequences;
  o.flashnorm.deferred = c.deferred, o.flashnorm.tied_head = c.tied_head;
  o.standard = c.standard;
  o.launch.decode_max_rows = g_args.decode_rows;
  // heuristic: the reference engines take the same heuristic configurations
  if (g_args.no_tune) o.gemv.choice = GemvChoice::kHeuristic;
  CudaEngineOptions ro = o;
  ro.launch.decode = DecodeLaunch::kEager;
  if (c.deferred == Deferred::kTwoStream) {
    o.debug.delay_rstd_cycles = g_args.delay;  // the join must hold despite a slow rstd producer
    o.debug.no_join = no_join;
  }
  return {o, ro};
}

// Runs configuration c (with the two-stream join removed when no_join); returns the first failing
// step, or -1 when all g_args.steps steps pass.
int first_failing_step(const Config& c, bool no_join) {
  const Loaded& l = loaded();
  const int steps = g_args.steps;
  auto [o, ro] = race_options(c, no_join, 0);
  CudaEngine test(l.m, c.mode, o);
  ro.gemv_configs = test.gemv_tuning();  // identical kernels: only the graph differs
  CudaEngine ref(l.m, c.mode, ro), fresh(l.m, c.mode, ro);
  std::printf("[%s] %s%s | reference: %s | %d steps\n", c.name, test.describe().c_str(),
              no_join ? " | JOIN REMOVED" : "", ref.describe().c_str(), steps);
  std::vector<int32_t> hist = l.ids;
  std::vector<float> lt = test.forward(l.ids), lr = ref.forward(l.ids);
  double worst = 0, worst_fresh = 0;
  int first_fail = -1, recomputes = 0;
  for (int s = 0; s < steps && first_fail < 0; ++s) {
    const int32_t next = argmax(lt);
    hist.push_back(next);
    lt = test.forward(std::span<const int32_t>(&next, 1));
    lr = ref.forward(std::span<const int32_t>(&next, 1));
    const Diff d = compare(lr, lt, g_args.tol);
    worst = std::max(worst, d.rel);
    if (d.rel > g_args.tol || !d.top1) {
      first_fail = s;
      std::printf(
          "  step %d (position %zu) differs: relative logit difference %.3e, top-1 %d (graph) vs "
          "%d (eager reference)\n",
          s, hist.size() - 1, d.rel, d.b, d.a);
      break;
    }
    if ((s + 1) % g_args.check_every == 0 || s + 1 == steps) {
      fresh.reset();
      const std::vector<float> lf = fresh.forward(hist);
      const Diff f = compare(lf, lt, g_args.fresh_tol);
      worst_fresh = std::max(worst_fresh, f.rel);
      ++recomputes;
      if (f.rel > g_args.fresh_tol || !f.top1) {
        first_fail = s;
        std::printf(
            "  step %d differs from a full recompute of %zu tokens: relative logit difference "
            "%.3e, top-1 %d vs %d\n",
            s, hist.size(), f.rel, f.b, f.a);
      }
    }
  }
  const std::string text = l.tok->decode(std::span<const int32_t>(hist).subspan(l.ids.size()));
  std::printf("  text: %s%s\n", g_args.prompt.c_str(), text.substr(0, 300).c_str());
  if (first_fail < 0) {
    std::printf(
        "  all %d steps match: largest relative logit difference vs eager %.3e, %d full "
        "recomputes (largest %.3e)\n",
        steps, worst, recomputes, worst_fresh);
  }
  return first_fail;
}

// The batched form (CudaEngine::forward_batch, issue 24): g_args.batch sequences (the prompt, its
// last token varied per sequence) decode greedily together for g_args.steps steps on an engine
// whose batched passes replay CUDA graphs, and every row of every step is compared with an eager
// engine fed the same tokens. Returns the first failing step, or -1.
int first_failing_batched_step(const Config& c, bool no_join) {
  const Loaded& l = loaded();
  const int steps = g_args.steps, B = g_args.batch, V = l.m.cfg.vocab;
  auto [o, ro] = race_options(c, no_join, B);
  CudaEngine test(l.m, c.mode, o);
  ro.gemv_configs = test.gemv_tuning();
  CudaEngine ref(l.m, c.mode, ro);
  std::printf("[%s, batch %d] %s%s | %d steps\n", c.name, B, test.describe().c_str(),
              no_join ? " | JOIN REMOVED" : "", steps);
  std::vector<std::vector<int32_t>> prompts(B, l.ids), next(B, std::vector<int32_t>(1));
  std::vector<SequenceChunk> ct(B), cr(B);
  for (int k = 0; k < B; ++k) {
    prompts[k].back() = int32_t((prompts[k].back() + 97 * k) % V);
    ct[k] = {test.open_sequence(), prompts[k]}, cr[k] = {ref.open_sequence(), prompts[k]};
  }
  std::vector<float> lt = test.forward_batch(ct), lr = ref.forward_batch(cr);
  double worst = 0;
  for (int s = 0; s < steps; ++s) {
    for (int k = 0; k < B; ++k) {
      next[k][0] = argmax(std::span<const float>(lt).subspan(size_t(k) * V, V));
      ct[k].tokens = next[k], cr[k].tokens = next[k];
    }
    lt = test.forward_batch(ct), lr = ref.forward_batch(cr);
    for (int k = 0; k < B; ++k) {
      const Diff d = compare(std::span<const float>(lr).subspan(size_t(k) * V, V),
                             std::span<const float>(lt).subspan(size_t(k) * V, V), g_args.tol);
      worst = std::max(worst, d.rel);
      if (d.rel > g_args.tol || !d.top1) {
        std::printf(
            "  step %d, sequence %d differs: relative logit difference %.3e, top-1 %d (graph) vs "
            "%d (eager reference)\n",
            s, k, d.rel, d.b, d.a);
        return s;
      }
    }
  }
  std::printf("  all %d steps of %d sequences match: largest relative logit difference %.3e\n",
              steps, B, worst);
  return -1;
}

// Skips unless the model exists and `name` is selected by --only (all when empty).
bool selected(const std::string& name) {
  return g_args.only.empty() ||
         std::find(g_args.only.begin(), g_args.only.end(), name) != g_args.only.end();
}
#define SKIP_UNLESS_RUNNABLE(name)                                                      \
  if (!std::filesystem::exists(g_args.model))                                           \
    GTEST_SKIP() << "needs the model " << g_args.model << " (scripts/fetch_models.sh)"; \
  if (!selected(name)) GTEST_SKIP() << name << " not in --only"

class LongGeneration : public ::testing::TestWithParam<Config> {};

TEST_P(LongGeneration, GraphReplayMatchesEagerEveryStep) {
  SKIP_UNLESS_RUNNABLE(GetParam().name);
  EXPECT_EQ(first_failing_step(GetParam(), false), -1);
}

const Config kConfigs[] = {
    {"standard", NormMode::Standard, Deferred::kFused},
    {"standard-fused-add", NormMode::Standard, Deferred::kFused, StandardNorm::kFusedAdd},
    {"flashnorm", NormMode::FlashNorm, Deferred::kFused},
    {"two-stream", NormMode::FlashNorm, Deferred::kTwoStream},
    {"flashnorm-head-folded", NormMode::FlashNorm, Deferred::kFused, StandardNorm::kSeparate,
     TiedHead::kFoldCopy}};
INSTANTIATE_TEST_SUITE_P(Configs, LongGeneration, ::testing::ValuesIn(kConfigs),
                         [](const auto& info) {
                           std::string n = info.param.name;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// The negative control: without the two-stream join the graph-replayed engine must go wrong.
TEST(LongGeneration, NoJoinProducesWrongSteps) {
  SKIP_UNLESS_RUNNABLE("two-stream");
  const int fail = first_failing_step(kConfigs[3], /*no_join=*/true);
  EXPECT_GE(fail, 0) << "with the two-stream join removed, all " << g_args.steps
                     << " steps still matched: the race test cannot catch the race it is for";
}

TEST_P(LongGeneration, BatchedGraphReplayMatchesEagerEveryStep) {
  SKIP_UNLESS_RUNNABLE(GetParam().name);
  EXPECT_EQ(first_failing_batched_step(GetParam(), false), -1);
}

// The batched negative control: the same race, batched.
TEST(LongGeneration, NoJoinProducesWrongBatchedSteps) {
  SKIP_UNLESS_RUNNABLE("two-stream");
  const int fail = first_failing_batched_step(kConfigs[3], /*no_join=*/true);
  EXPECT_GE(fail, 0) << "with the two-stream join removed, all batched steps still matched";
}

}  // namespace

// The race test's own options (engine_gpu_main.cpp).
bool engine_gpu_test_args(int argc, char** argv) {
  CLI::App app{"Long-generation race test of the CUDA engine (graph replay vs eager recompute)"};
  g_args.model = flashnorm::testing::smollm2_path();
  app.add_option("--model", g_args.model, "GGUF model")->capture_default_str();
  app.add_option("--steps", g_args.steps, "decode steps per configuration")->capture_default_str();
  app.add_option("--batch", g_args.batch, "sequences of the batched tests (1..64)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--decode-rows", g_args.decode_rows,
                 "CudaLaunch::decode_max_rows: batched passes up to this many rows take the decode "
                 "GEMV")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--check-every", g_args.check_every, "full recompute every N steps")
      ->capture_default_str();
  app.add_option("--prompt", g_args.prompt, "prompt text")->capture_default_str();
  app.add_option("--delay-cycles", g_args.delay, "two-stream: spin cycles before the rstd kernel")
      ->capture_default_str();
  app.add_option("--tol", g_args.tol, "per-step relative logit tolerance")->capture_default_str();
  // an unknown name is refused: it would skip every case and pass
  std::vector<std::string> names;
  for (const Config& c : kConfigs) names.emplace_back(c.name);
  app.add_option("--only", g_args.only,
                 "configurations: standard, standard-fused-add, flashnorm, two-stream, "
                 "flashnorm-head-folded")
      ->check(CLI::IsMember(names));
  app.add_flag("--native", g_args.native,
               "keep the GGUF's quantized blocks (the decode steps read them with quant_gemv)");
  app.add_flag("--no-tune", g_args.no_tune,
               "heuristic decode GEMV configurations instead of tuning at load (quick under "
               "compute-sanitizer)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return false;
  }
  return true;
}
