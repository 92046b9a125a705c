// Long-generation race test (issue 4): the CUDA engine generates `--steps` tokens greedily with its
// decode loop captured in a CUDA graph (buffers reused every step), and every step's logits are
// compared with an independent eager engine (fresh buffers, no graph, no debug hooks) fed the same
// token history; every `--check-every` steps a third engine recomputes the whole history from an
// empty KV cache. A step fails when its logits differ beyond rounding (relative to the logit scale)
// or its top-1 differs where the reference's top-2 gap is clear; the first failing step is
// reported. With --no-join the two-stream variant skips its event join and its rstd producer is
// delayed: the post-scale then reads a stale rstd ("outputs from the past") and the test must fail.
// Exit code: 0 all configurations passed, 1 a step failed, 2 usage or setup error.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "flashnorm/engine/cuda_engine.h"
#include "flashnorm/engine/evaluate.h"
#include "flashnorm/engine/sampler.h"
#include "flashnorm/error.h"
#include "flashnorm/io/gguf.h"
#include "flashnorm/tokenizer/tokenizer.h"

namespace {
using namespace flashnorm;

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
  std::string name;
  NormMode mode;
  Deferred deferred;
  bool fused_add = false;
  bool fold_tied_head = false;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Long-generation race test of the CUDA engine (graph replay vs eager recompute)"};
  std::string model, prompt = "The history of the printing press begins";
  int steps = 2048, check_every = 256;
  long long delay = 50000;
  double tol = 1e-2, fresh_tol = 5e-2;
  bool no_join = false, no_tune = false;
  std::vector<std::string> only;
  app.add_option("--model", model, "GGUF model")->required()->check(CLI::ExistingFile);
  app.add_option("--steps", steps, "decode steps per configuration")->capture_default_str();
  app.add_option("--check-every", check_every, "full recompute every N steps")
      ->capture_default_str();
  app.add_option("--prompt", prompt, "prompt text")->capture_default_str();
  app.add_option("--delay-cycles", delay, "two-stream: spin cycles before the rstd kernel")
      ->capture_default_str();
  app.add_option("--tol", tol, "per-step relative logit tolerance")->capture_default_str();
  app.add_option("--only", only,
                 "configurations: standard, standard-fused-add, flashnorm, two-stream, "
                 "flashnorm-head-folded");
  app.add_flag("--no-join", no_join, "remove the two-stream join (the test must then FAIL)");
  app.add_flag("--no-tune", no_tune,
               "heuristic decode GEMV configurations instead of tuning at load (quick under "
               "compute-sanitizer)");
  CLI11_PARSE(app, argc, argv);
  try {
    std::string why;
    if (!cuda_device_available(&why)) {
      std::fprintf(stderr, "no usable NVIDIA GPU (%s): run on the device machine\n", why.c_str());
      return 2;
    }
    const Model m = load_model(model);
    io::GgufFile vocab = io::GgufFile::open(model);
    Tokenizer tok = Tokenizer::from_gguf(vocab);
    std::vector<int32_t> ids = tok.encode(prompt, false);
    if (tok.add_bos() && tok.bos()) ids.insert(ids.begin(), *tok.bos());
    std::vector<Config> cfgs = {
        {"standard", NormMode::Standard, Deferred::kFused},
        {"standard-fused-add", NormMode::Standard, Deferred::kFused, true},
        {"flashnorm", NormMode::FlashNorm, Deferred::kFused},
        {"two-stream", NormMode::FlashNorm, Deferred::kTwoStream},
        {"flashnorm-head-folded", NormMode::FlashNorm, Deferred::kFused, false, true}};
    if (no_join) cfgs = {cfgs[3]};
    int failed = 0;
    for (const Config& c : cfgs) {
      if (!only.empty() && std::find(only.begin(), only.end(), c.name) == only.end()) continue;
      CudaEngineOptions o;
      o.max_context = static_cast<int>(ids.size()) + steps + 8;
      o.deferred = c.deferred;
      o.fused_add_norm = c.fused_add;
      o.fold_tied_head = c.fold_tied_head;
      o.tune = !no_tune;  // off: the reference engines take the same heuristic configurations
      CudaEngineOptions ro = o;
      ro.graph = false;
      if (c.deferred == Deferred::kTwoStream) {
        o.debug.delay_rstd_cycles = delay;  // the join must hold despite a slow rstd producer
        o.debug.no_join = no_join;
      }
      CudaEngine test(m, c.mode, o);
      ro.gemv_configs = test.gemv_tuning();  // identical kernels: only the graph differs
      CudaEngine ref(m, c.mode, ro), fresh(m, c.mode, ro);
      std::printf("[%s] %s%s | reference: %s | %d steps\n", c.name.c_str(), test.describe().c_str(),
                  no_join ? " | JOIN REMOVED" : "", ref.describe().c_str(), steps);
      std::vector<int32_t> hist = ids;
      std::vector<float> lt = test.forward(ids), lr = ref.forward(ids);
      double worst = 0, worst_fresh = 0;
      int first_fail = -1, recomputes = 0;
      for (int s = 0; s < steps && first_fail < 0; ++s) {
        const int32_t next = argmax(lt);
        hist.push_back(next);
        lt = test.forward(std::span<const int32_t>(&next, 1));
        lr = ref.forward(std::span<const int32_t>(&next, 1));
        const Diff d = compare(lr, lt, tol);
        worst = std::max(worst, d.rel);
        if (d.rel > tol || !d.top1) {
          first_fail = s;
          std::printf(
              "  FAILED at step %d (position %zu): relative logit difference %.3e, top-1 "
              "%d (graph) vs %d (eager reference)\n",
              s, hist.size() - 1, d.rel, d.b, d.a);
          break;
        }
        if ((s + 1) % check_every == 0 || s + 1 == steps) {
          fresh.reset();
          const std::vector<float> lf = fresh.forward(hist);
          const Diff f = compare(lf, lt, fresh_tol);
          worst_fresh = std::max(worst_fresh, f.rel);
          ++recomputes;
          if (f.rel > fresh_tol || !f.top1) {
            first_fail = s;
            std::printf(
                "  FAILED at step %d against a full recompute of %zu tokens: relative "
                "logit difference %.3e, top-1 %d vs %d\n",
                s, hist.size(), f.rel, f.b, f.a);
          }
        }
      }
      const std::string text = tok.decode(std::span<const int32_t>(hist).subspan(ids.size()));
      std::printf("  text: %s%s\n", prompt.c_str(), text.substr(0, 300).c_str());
      if (first_fail < 0) {
        std::printf(
            "  PASSED: %d steps, largest relative logit difference vs eager %.3e, %d full "
            "recomputes (largest %.3e)\n",
            steps, worst, recomputes, worst_fresh);
      } else {
        ++failed;
      }
    }
    std::printf("%s\n", failed ? "FAILED" : "PASSED");
    return failed ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
