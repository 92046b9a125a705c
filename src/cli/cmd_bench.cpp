// `flashnorm bench`: the FlashNorm kernel benchmark over bench/shapes.json. Runs only in
// a build with CUDA; otherwise it fails with the one-line error "flashnorm was built without CUDA".
// Both benchmarks live in the CUDA module (engine/cuda_module.h), loaded here on demand.
#include <fmt/format.h>

#include <ctime>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "flashnorm/engine/cuda_module.h"
#include "flashnorm/error.h"
#include "flashnorm/io/atomic_file.h"
#include "kernel_bench.h"  // bench/kernel_bench: its options (the benchmark is in the CUDA module)
#include "list_option.h"
#include "model_bench.h"

namespace flashnorm::cli {

namespace {
// The CUDA module, or Error "bench: ..." naming why it is not there.
const CudaModule& bench_module() {
  try {
    return cuda_module();
  } catch (const Error& e) {
    throw Error(std::string("bench: ") + e.what());
  }
}

struct BenchCli {
  std::string shapes = "bench/shapes.json";
  std::string out;  // JSON path; default bench/results/kernels_<UTC date>.json
  std::vector<int> Ms;
  std::vector<std::string> only;
  int graph_reps = 30, eager_reps = 10;
  bool no_check = false, decode_sweep = false, dirty = false;
  std::string commit, driver;
  ModelBenchArgs model;
};
}  // namespace

void register_bench(CLI::App& app) {
  auto o = std::make_shared<BenchCli>();
  CLI::App* sub =
      app.add_subcommand("bench",
                         "GPU benchmarks. Kernels: rms_norm, unfused (rms_norm + cuBLAS GEMM), "
                         "bare cuBLAS GEMM and every flashnorm_linear implementation over each "
                         "shape and M of a shapes file; CUDA-graph and eager medians, W rotated "
                         "past the L2. With --model GGUF: the CUDA engine's prompt and batch-1 "
                         "decode speed, standard vs flashnorm. Prints a table and writes JSON.");
  std::vector<CLI::Option*> kernel_only;  // refused with --model (they would be ignored)
  kernel_only.push_back(
      sub->add_option("--shapes", o->shapes,
                      "shapes file (format of bench/shapes.json: M list and {name, K, N} shapes)")
          ->capture_default_str());
  sub->add_option("--out", o->out,
                  "JSON output path (default bench/results/kernels_<date>.json, with --model "
                  "bench/results/model_<date>.json)");
  kernel_only.push_back(sub->add_option("--M", o->Ms, "override the M list"));
  kernel_only.push_back(sub->add_option("--only", o->only, "only these shape names"));
  kernel_only.push_back(sub->add_option("--graph-reps", o->graph_reps, "graph replays per variant")
                            ->check(CLI::Range(1, 1000000))
                            ->capture_default_str());
  kernel_only.push_back(sub->add_option("--eager-reps", o->eager_reps, "eager passes per variant")
                            ->check(CLI::Range(1, 1000000))
                            ->capture_default_str());
  kernel_only.push_back(
      sub->add_flag("--no-check", o->no_check, "skip the comparison with the fp64 CPU reference"));
  kernel_only.push_back(sub->add_flag("--decode-sweep", o->decode_sweep,
                                      "also time the decode kernel at split-K 1..32"));
  sub->add_option("--commit", o->commit, "commit id to record");
  sub->add_flag("--dirty", o->dirty, "record that the working tree had uncommitted changes");
  sub->add_option("--driver", o->driver, "driver version to record (nvidia-smi)");
  CLI::Option* model =
      sub->add_option("--model", o->model.model,
                      "instead of the kernels: decode benchmark of this model on the CUDA engine "
                      "(standard vs flashnorm, batch 1)")
          ->check(CLI::ExistingFile);
  for (CLI::Option* k : kernel_only) k->excludes(model);
  // the --model benchmark's options: refused without --model (the kernel benchmark has no use
  // for them)
  add_int_list(sub, "--prompt-tokens", o->model.prompt_tokens,
               "--model: prompt lengths, comma-separated, each >= 2 (each timed; decode follows a "
               "prompt of the first)")
      ->default_str("512")
      ->needs(model);
  sub->add_option("--decode-tokens", o->model.decode_tokens, "--model: decode steps per run (>= 8)")
      ->capture_default_str()
      ->needs(model);
  sub->add_option("--ctx", o->model.ctx,
                  "--model: KV cache positions, at most 32768 (default: what the prompts and "
                  "decode steps need)")
      ->check(CLI::Range(0, 32768))
      ->needs(model);
  sub->add_option("--runs", o->model.runs, "--model: rounds (medians)")
      ->capture_default_str()
      ->needs(model);
  sub->add_option("--weights", o->model.weights,
                  "--model: native also runs standard, flashnorm and standard fused add+norm on "
                  "the GGUF file's own quantized blocks, beside the bf16 engines")
      ->check(CLI::IsMember({"f32", "native"}))
      ->capture_default_str()
      ->needs(model);
  add_int_list(
      sub, "--batch", o->model.batches,
      "--model: also batched decode at these batch sizes (1..64, comma-separated): "
      "standard, flashnorm, standard fused add+norm and flashnorm with its batched passes "
      "deferred, with a size above 16 the first three again with the decode GEMV to 16 rows, "
      "output tokens/s, and flashnorm's batch invariance (one sequence's greedy top-1 alone vs "
      "batched)")
      ->needs(model);
  sub->add_flag("--quick", o->model.quick,
                "--model: only standard, flashnorm, flashnorm two-stream, standard fused "
                "add+norm and flashnorm with deferred prompts, without the ablations "
                "(recommended for large models: each configuration holds its own weights)")
      ->needs(model);
  add_name_list(sub, "--configs", o->model.configs,
                "--model: only these configurations, by their names in the table, separated by "
                "commas (a comma and a space belong to a name: 'standard,flashnorm, deferred "
                "prompts'); with --weights native each keeps its native twins (standard, "
                "flashnorm and the launch ablations have two, the second with the GLU in the "
                "gate|up epilogue). Launch ablations run only when named here: 'standard, no PDL' "
                "and 'standard, attention at 3 CTAs per SM' with nothing, ', late trigger' or ', "
                "no PDL' after it, and the same for flashnorm. Large models: each configuration "
                "holds its own weights and tunes at load")
      ->needs(model);
  sub->callback([o]() {
    if (!o->model.model.empty()) {
      o->model.out = o->out;
      o->model.commit = o->commit;
      o->model.driver = o->driver;
      o->model.dirty = o->dirty;
      return bench_module().run_model_bench(o->model);
    }
    const CudaModule& m = bench_module();
    bench::KernelBenchOptions opt;
    opt.shapes_path = o->shapes;
    opt.Ms = o->Ms;
    opt.only = o->only;
    opt.graph_reps = o->graph_reps;
    opt.eager_reps = o->eager_reps;
    opt.check = !o->no_check;
    opt.decode_sweep = o->decode_sweep;
    opt.commit = o->commit;
    opt.dirty = o->dirty;
    opt.driver = o->driver;
    nlohmann::json j = m.run_kernel_bench(opt);
    std::string out = o->out;
    if (out.empty()) {
      char d[32];
      const std::time_t now = std::time(nullptr);
      std::strftime(d, sizeof d, "%Y%m%dT%H%M%SZ", std::gmtime(&now));
      out = fmt::format("bench/results/kernels_{}.json", d);
    }
    const std::filesystem::path p(out);
    if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
    const std::string text = j.dump(1) + "\n";
    const std::vector<std::filesystem::path> inputs = {o->shapes};
    io::AtomicFile f(p, inputs);  // temporary file + rename; never over the shapes file
    f.write(text.data(), text.size());
    f.commit();
    std::printf("wrote %s\n", out.c_str());
  });
}

}  // namespace flashnorm::cli
