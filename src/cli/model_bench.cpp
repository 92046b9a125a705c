// `flashnorm bench --model FILE`: end-to-end decode benchmark of the CUDA engine.
// For each configuration (standard; flashnorm fused; flashnorm two-stream; as a stronger
// baseline, standard with the residual add and RMSNorm fused in one kernel; flashnorm with its
// prompt passes' rstd deferred to the GEMM output (PrefillNorm::kDeferred); and, as an ablation,
// both modes with the decode ops unfused: separate residual-add, RoPE/KV-write, attention and
// merge kernels, and both modes with the decode GEMV's cp.async ring allowed; for a tied LM head
// also flashnorm with the final gain folded into an untied copy of the head), interleaved over
// `runs` rounds: prompt tokens/s (one eager prefill of the prompt, host clock around forward(),
// logits of the last token copied back) and decode tokens/s at batch 1 (CUDA-graph replays timed
// with CUDA events over `decode` steps after the prompt, next token sampled on the GPU), medians
// over the rounds; then the decode step split by kernel class (eager, CUDA events around each
// kernel, median of 20 steps). Prompt ids are a fixed pseudo-random sequence (timing does not
// depend on the text). Prints a table and writes JSON (GPU, driver, commit, date, every figure,
// and each engine's tuned GEMV configurations with their times). Compiled into the CUDA module
// (engine/cuda_module.h), not into the executable: cmd_bench.cpp calls it through the module.
#include "model_bench.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <span>

#include "flashnorm/engine/cuda_engine.h"
#include "flashnorm/engine/sampler.h"
#include "flashnorm/error.h"
#include "flashnorm/io/atomic_file.h"
#include "flashnorm/median.h"
#include "flashnorm/model/model.h"
#include "model_args.h"

namespace flashnorm::cli {

namespace {
nlohmann::json profile_json(const StepProfile& p) {
  return {{"norm_us", p.norm_us},
          {"normed_proj_us", p.normed_proj_us},
          {"other_proj_us", p.other_proj_us},
          {"attention_us", p.attention_us},
          {"other_us", p.other_us},
          {"total_us", p.total_us()}};
}
}  // namespace

void run_model_bench(const ModelBenchArgs& a) {
  const std::vector<int>& lens = a.prompt_tokens;
  // upper bounds: the CUDA engine's largest KV cache (so that the positions below fit an int)
  if (lens.empty() || *std::min_element(lens.begin(), lens.end()) < 2 ||
      *std::max_element(lens.begin(), lens.end()) > 32768 || a.decode_tokens < 8 ||
      a.decode_tokens > 32768 || a.runs < 1) {
    throw Error(
        "bench --model: need --prompt-tokens 2 .. 32768, --decode-tokens 8 .. 32768, --runs >= 1");
  }
  const int max_len = *std::max_element(lens.begin(), lens.end());
  // positions: the longest prompt; the first prompt then its decode steps (time_decode_steps:
  // 2 warm-up steps more; the profile: 21 steps)
  const int need = std::max(max_len, lens[0] + std::max(a.decode_tokens + 2, 21));
  for (int b : a.batches) {
    if (b < 1 || b > 64)
      throw Error(fmt::format("bench --model: --batch {} is outside 1 .. 64", b));
  }
  const int max_b = a.batches.empty() ? 0 : *std::max_element(a.batches.begin(), a.batches.end());
  if (a.ctx != 0 && a.ctx < need)
    throw Error(fmt::format("bench --model: --ctx {} is below the {} positions the run needs",
                            a.ctx, need));
  std::string why;
  if (!cuda_device_available(&why)) {
    throw Error("bench --model: no usable NVIDIA GPU (" + why + ")");
  }
  std::string out = a.out;
  const std::time_t now = std::time(nullptr);
  if (out.empty()) {
    char d[32];
    std::strftime(d, sizeof d, "%Y%m%dT%H%M%SZ", std::gmtime(&now));
    out = fmt::format("bench/results/model_{}.json", d);
  }
  // Opened (as its temporary) before the run so that an unwritable path fails at once.
  const std::filesystem::path outp(out);
  if (outp.has_parent_path()) std::filesystem::create_directories(outp.parent_path());
  const std::vector<std::filesystem::path> inputs = {a.model};
  io::AtomicFile f(outp, inputs);
  if (a.weights != "f32" && a.weights != "native")
    throw Error("bench --model: --weights must be f32 or native");
  const bool native = a.weights == "native";
  // the configuration (no tensor data) for the checks before the weights are read (Llama-3-8B
  // shapes: 35 s)
  const ModelConfig mcfg = load_model(a.model, /*with_data=*/false).cfg;
  struct Config {
    std::string name;
    NormMode mode;
    Deferred deferred;
    StandardNorm standard;
    bool fuse_decode_ops;
    bool allow_ring = false;
    TiedHead tied_head = TiedHead::kKeepGain;
    PrefillNorm prefill = PrefillNorm::kInAdd;
    bool batched_in_add = true;  // CudaFlashNorm::batched_in_add
    int decode_rows = CudaLaunch{}.decode_max_rows;
    bool batched = false;        // has batched decode rows (--batch)
    bool quant_glu_out = false;  // CudaLaunch::quant_glu_out
    bool pdl = true;             // CudaLaunch::pdl
    int attn_ctas = 1;           // CudaLaunch::attention_ctas_per_sm
    bool attn_late = false;      // CudaLaunch::attention_late_trigger
    // on the file's blocks (--weights native): the index of the same configuration on bf16
    // weights; -1: on bf16 weights
    int bf16_of = -1;
    bool native() const { return bf16_of >= 0; }
    std::unique_ptr<CudaEngine> e;
    std::vector<std::vector<double>> prompt_tps;  // [length][run]
    std::vector<double> decode_us;
    std::vector<std::vector<double>> batch_us;  // [batch size][run] (--batch)
    StepProfile prof;
  };
  const StandardNorm sep = StandardNorm::kSeparate, fused_add = StandardNorm::kFusedAdd;
  std::vector<Config> cfgs;
  cfgs.push_back({"standard", NormMode::Standard, Deferred::kFused, sep, true});
  cfgs.push_back({"flashnorm", NormMode::FlashNorm, Deferred::kFused, sep, true});
  // the two-stream scheme throughout: prompts' rstd deferred too, on the second stream
  cfgs.push_back({"flashnorm two-stream", NormMode::FlashNorm, Deferred::kTwoStream, sep, true,
                  false, TiedHead::kKeepGain, PrefillNorm::kDeferred});
  cfgs.push_back(
      {"standard fused add+norm", NormMode::Standard, Deferred::kFused, fused_add, true});
  // Prompt passes with rstd deferred to the GEMM's output (the default applies it in the add)
  cfgs.push_back({"flashnorm, deferred prompts", NormMode::FlashNorm, Deferred::kFused, sep, true,
                  false, TiedHead::kKeepGain, PrefillNorm::kDeferred});
  // the batched decode rows (--batch): the three main configurations on bf16 weights; flashnorm
  // with batched passes of more than 32 rows deferred to the GEMM; with a batch above 16, the
  // three with the decode GEMV and its fused ops up to 16 rows only (CudaLaunch::decode_max_rows;
  // the default is 32)
  if (!a.batches.empty()) {
    for (int i : {0, 1, 3}) cfgs[i].batched = true;
    Config c{"flashnorm, batched deferred", NormMode::FlashNorm, Deferred::kFused, sep, true};
    c.batched_in_add = false, c.batched = true;
    cfgs.push_back(std::move(c));
    if (max_b > 16) {
      for (int i : {0, 1, 3}) {
        Config g{cfgs[i].name + ", GEMV to 16", cfgs[i].mode, cfgs[i].deferred, cfgs[i].standard,
                 true};
        g.decode_rows = 16, g.batched = true;
        cfgs.push_back(std::move(g));
      }
    }
  }
  // the configuration cfgs[bf16] on the file's own blocks, with the GLU in the gate|up epilogue
  // (CudaLaunch::quant_glu_out, off by default until measured) when glu
  auto native_twin = [&](int bf16, bool glu) {
    const Config& b = cfgs[size_t(bf16)];
    Config t{b.name + ", native" + (glu ? ", GLU in gate|up" : ""), b.mode, b.deferred, b.standard,
             true};
    t.pdl = b.pdl, t.attn_ctas = b.attn_ctas, t.attn_late = b.attn_late;
    t.bf16_of = bf16, t.quant_glu_out = glu;
    return t;
  };
  if (native) {  // the main three again on the file's own blocks; standard and flashnorm with glu
    for (int i : {0, 1, 3}) cfgs.push_back(native_twin(i, false));
    for (int i : {0, 1}) cfgs.push_back(native_twin(i, true));
  }
  // Launch ablations of the decode step, only when --configs names them (each holds its own
  // weights): standard and flashnorm without PDL, with decode_attention at 3 CTAs per SM (early and
  // late PDL trigger, and without PDL); under --weights native each with two native twins, the
  // second with the GLU in the gate|up epilogue (CudaLaunch::quant_glu_out).
  auto named = [&](const std::string& n) {
    return std::find(a.configs.begin(), a.configs.end(), n) != a.configs.end();
  };
  struct LaunchAblation {
    const char* suffix;
    bool pdl;
    int ctas;
    bool late;
  };
  const LaunchAblation ablations[] = {{", no PDL", false, 1, false},
                                      {", attention at 3 CTAs per SM", true, 3, false},
                                      {", attention at 3 CTAs per SM, late trigger", true, 3, true},
                                      {", attention at 3 CTAs per SM, no PDL", false, 3, false}};
  std::vector<std::string> ablation_names;  // for the error message of an unknown name
  for (const LaunchAblation& ab : ablations) {
    for (int i : {0, 1}) {
      Config c{cfgs[i].name + ab.suffix, cfgs[i].mode, cfgs[i].deferred, cfgs[i].standard, true};
      ablation_names.push_back(c.name);
      if (!named(c.name)) continue;
      c.pdl = ab.pdl, c.attn_ctas = ab.ctas, c.attn_late = ab.late;
      c.batched = cfgs[i].batched;  // the same capacity and batched rows as the base
      const int bf16 = int(cfgs.size());
      cfgs.push_back(std::move(c));
      if (native)
        for (bool glu : {false, true}) cfgs.push_back(native_twin(bf16, glu));
    }
  }
  if (!a.quick) {
    // Ablation: CudaLaunch::fuse_decode_ops off.
    cfgs.push_back({"standard, unfused ops", NormMode::Standard, Deferred::kFused, sep, false});
    cfgs.push_back({"flashnorm, unfused ops", NormMode::FlashNorm, Deferred::kFused, sep, false});
    // Ablation: the decode GEMV's tuner may pick the cp.async ring (CudaGemv::allow_ring).
    cfgs.push_back({"standard, ring GEMVs", NormMode::Standard, Deferred::kFused, sep, true, true});
    cfgs.push_back(
        {"flashnorm, ring GEMVs", NormMode::FlashNorm, Deferred::kFused, sep, true, true});
    // A tied LM head with its final gain folded into an untied copy (TiedHead::kFoldCopy)
    if (mcfg.tied_head) {
      cfgs.push_back({"flashnorm, head folded", NormMode::FlashNorm, Deferred::kFused, sep, true,
                      false, TiedHead::kFoldCopy});
    }
  }
  if (!a.configs.empty()) {  // --configs: the named ones (a native one with its bf16 one)
    std::vector<std::string> names;
    for (const Config& c : cfgs)
      if (!c.native()) names.push_back(c.name);
    for (const std::string& n : a.configs) {
      if (std::find(names.begin(), names.end(), n) == names.end())
        throw Error(fmt::format(
            "bench --model: --configs \"{}\" is not one of this run's: {} (or a launch "
            "ablation: {})",
            n, fmt::join(names, "; "), fmt::join(ablation_names, "; ")));  // names hold ", "
    }
    auto wanted = [&](const Config& c) {
      const std::string& n = c.native() ? cfgs[size_t(c.bf16_of)].name : c.name;
      return std::find(a.configs.begin(), a.configs.end(), n) != a.configs.end();
    };
    std::vector<char> keep(cfgs.size());  // before any is moved (a native one reads its bf16 name)
    for (size_t k = 0; k < cfgs.size(); ++k) keep[k] = wanted(cfgs[k]);
    std::vector<int> index(cfgs.size(), -1);
    std::vector<Config> kept;
    for (size_t k = 0; k < cfgs.size(); ++k) {
      if (!keep[k]) continue;
      index[k] = int(kept.size());
      kept.push_back(std::move(cfgs[k]));
    }
    for (Config& c : kept)
      if (c.native()) c.bf16_of = index[size_t(c.bf16_of)];
    cfgs = std::move(kept);
  }
  const int ctx = a.ctx != 0 ? a.ctx : std::min(need + 64, std::max(need, mcfg.context));
  if (ctx > mcfg.context)
    throw Error(
        fmt::format("bench --model: a KV cache of {} positions{} exceeds the model's "
                    "context of {}",
                    ctx, a.ctx != 0 ? " (--ctx)" : " (what the run needs)", mcfg.context));
  const auto t_start = std::chrono::steady_clock::now();
  const Model model = load_model(a.model);
  std::optional<Model> native_model;
  if (native) native_model = load_model(a.model, /*with_data=*/true, WeightStorage::kNative);
  const auto t_load = std::chrono::steady_clock::now();
  fmt::print(stderr, "bench --model: weights read in {:.1f} s\n",
             std::chrono::duration<double>(t_load - t_start).count());
  auto since_load = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();
  };
  for (auto& c : cfgs) {
    c.prompt_tps.resize(lens.size());
    CudaEngineOptions o;
    o.capacity.max_context = ctx;
    o.capacity.max_batch = max_len;
    o.flashnorm.deferred = c.deferred;
    o.flashnorm.tied_head = c.tied_head;
    o.flashnorm.prefill = c.prefill;
    o.standard = c.standard;
    o.launch.fuse_decode_ops = c.fuse_decode_ops;
    o.launch.quant_glu_out = c.quant_glu_out;
    o.launch.pdl = c.pdl;
    o.launch.attention_ctas_per_sm = c.attn_ctas;
    o.launch.attention_late_trigger = c.attn_late;
    o.gemv.allow_ring = c.allow_ring;
    o.flashnorm.batched_in_add = c.batched_in_add;
    o.launch.decode_max_rows = c.decode_rows;
    if (c.batched) o.capacity.max_sequences = max_b;
    c.e = std::make_unique<CudaEngine>(c.native() ? *native_model : model, c.mode, o);
    fmt::print(stderr, "bench --model: engine \"{}\" ready at {:.1f} s\n", c.name, since_load());
  }
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> id(0, model.cfg.vocab - 1);
  std::vector<int32_t> ids(max_len);
  for (auto& t : ids) t = id(rng);
  auto prompt = [&](size_t i) { return std::span<const int32_t>(ids.data(), lens[i]); };
  using clk = std::chrono::steady_clock;
  for (auto& c : cfgs) {  // warm-up: plans, graph capture
    for (size_t i = lens.size(); i-- > 0;) {
      c.e->reset();
      c.e->forward(prompt(i));
    }
    c.e->time_decode_steps(8);
  }
  std::vector<int> batched_cfgs;
  for (size_t k = 0; k < cfgs.size(); ++k)
    if (cfgs[k].batched) batched_cfgs.push_back(int(k));
  for (int k : batched_cfgs) {
    cfgs[k].batch_us.resize(a.batches.size());
    for (int b : a.batches) cfgs[k].e->time_batch_decode_steps(prompt(0), b, 8);  // warm-up
  }
  fmt::print(stderr, "bench --model: warm-up done at {:.1f} s\n", since_load());
  for (int r = 0; r < a.runs; ++r) {
    for (auto& c : cfgs) {
      for (size_t i = lens.size(); i-- > 0;) {  // the first length last: decode follows it
        c.e->reset();
        cudaDeviceSynchronize();
        auto t0 = clk::now();
        c.e->forward(prompt(i));
        const double s = std::chrono::duration<double>(clk::now() - t0).count();
        c.prompt_tps[i].push_back(lens[i] / s);
      }
      c.decode_us.push_back(c.e->time_decode_steps(a.decode_tokens));
      for (size_t i = 0; i < c.batch_us.size(); ++i) {
        c.e->reset();
        c.batch_us[i].push_back(
            c.e->time_batch_decode_steps(prompt(0), a.batches[i], a.decode_tokens));
      }
    }
    fmt::print(stderr, "bench --model: round {} of {} done at {:.1f} s\n", r + 1, a.runs,
               since_load());
  }
  for (auto& c : cfgs) {
    c.e->reset();
    c.e->forward(prompt(0));
    c.prof = c.e->profile_decode_step(20);
  }
  nlohmann::json j = gpu_run_stamp(now, a.commit, a.driver);
  j.update({{"dirty", a.dirty},
            {"model", a.model},
            {"arch", model.cfg.arch},
            {"batch", 1},
            {"weights", a.weights},
            {"prompt_tokens", lens[0]},
            {"prompt_lengths", lens},
            {"decode_tokens", a.decode_tokens},
            {"kv_cache_positions", ctx},
            {"runs", a.runs},
            {"method",
             "prompt: host clock around one eager forward of the prompt; decode: CUDA "
             "events around decode_tokens CUDA-graph replays after the prompt (a replay that "
             "enters the next 512-position bucket of keys is recaptured first, inside the "
             "timed span); medians "
             "over runs (configurations interleaved); profile: eager step, CUDA events "
             "around each kernel, median of 20 steps"},
            {"configs", nlohmann::json::array()}});
  // the bf16 configurations the ratios are against (--configs may leave one out: its ratios are
  // then NaN, null in the JSON)
  auto find = [&](const std::string& n) {
    for (size_t k = 0; k < cfgs.size(); ++k)
      if (cfgs[k].name == n) return int(k);
    return -1;
  };
  const int i_std = find("standard"), i_fn = find("flashnorm"),
            i_fused = find("standard fused add+norm");
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto med = [&](int k, auto field) { return k < 0 ? nan : median(field(cfgs[size_t(k)])); };
  // a ratio as printed: "1.234x", or "n/a" where its baseline was not run
  auto times = [](double r) {
    return std::isnan(r) ? std::string("n/a") : fmt::format("{:.3f}x", r);
  };
  const double std_us = med(i_std, [](const Config& c) { return c.decode_us; });
  fmt::print("{} | {} | prompt {} tokens, decode {} tokens at batch 1, {} runs (medians)\n",
             j["gpu"].get<std::string>(), a.model, lens[0], a.decode_tokens, a.runs);
  fmt::print("{:<24} {:>12} {:>11} {:>9} {:>8} | {:>7} {:>9} {:>9} {:>9} {:>8} (us, eager)\n",
             "config", "prompt tok/s", "decode tok/s", "us/step", "speedup", "norm", "normedproj",
             "otherproj", "attention", "other");
  for (auto& c : cfgs) {
    const double us = median(c.decode_us);
    const double tps = median(c.prompt_tps[0]);
    fmt::print(
        "{:<24} {:>12.0f} {:>11.1f} {:>9.1f} {:>8} | {:>7.1f} {:>9.1f} {:>9.1f} {:>9.1f} "
        "{:>8.1f}\n",
        c.name, tps, 1e6 / us, us, times(std_us / us), c.prof.norm_us, c.prof.normed_proj_us,
        c.prof.other_proj_us, c.prof.attention_us, c.prof.other_us);
    j["configs"].push_back({{"name", c.name},
                            {"native_weights", c.native()},
                            {"engine", c.e->describe()},
                            {"prompt_tokens_per_s", tps},
                            {"prompt_tokens_per_s_runs", c.prompt_tps[0]},
                            {"prompts", nlohmann::json::array()},
                            {"decode_us_per_step", us},
                            {"decode_us_per_step_runs", c.decode_us},
                            {"decode_tokens_per_s", 1e6 / us},
                            {"decode_speedup_vs_standard", std_us / us},
                            {"profile", profile_json(c.prof)},
                            {"gemv_tuning", nlohmann::json::array()}});
    std::string tl;
    for (const GemvTuning& t : c.e->gemv_tuning()) {
      j["configs"].back()["gemv_tuning"].push_back({{"projection", t.name},
                                                    {"M", t.M},
                                                    {"N", t.N},
                                                    {"K", t.K},
                                                    {"row_warps", t.config.rw},
                                                    {"k_warps", t.config.kw},
                                                    {"split_k", t.config.ks},
                                                    {"stages", t.config.stages},
                                                    {"us_per_call", t.us},
                                                    {"cublaslt_us_per_call", t.gemm_us}});
      tl += fmt::format(
          " {}{} {:.1f}us{} ({}x{}x{}{})", t.name, t.M > 1 ? fmt::format(" M={}", t.M) : "", t.us,
          t.gemm_us > 0 ? fmt::format(" vs cuBLASLt {:.1f}us", t.gemm_us) : "", t.config.rw,
          t.config.kw, t.config.ks, t.config.stages ? fmt::format(" s{}", t.config.stages) : "");
    }
    fmt::print("{:<24}   GEMVs as tuned:{}\n", "", tl);
  }
  // Native weights against the same configuration in bf16 (decode, and prompt tokens/s).
  for (size_t k = 0; k < cfgs.size(); ++k) {
    if (!cfgs[k].native()) continue;
    const Config& b = cfgs[cfgs[k].bf16_of];
    const double dec = median(b.decode_us) / median(cfgs[k].decode_us);
    const double pr = median(cfgs[k].prompt_tps[0]) / median(b.prompt_tps[0]);
    j["configs"][k]["decode_speedup_vs_bf16"] = dec;
    j["configs"][k]["prompt_speed_vs_bf16"] = pr;
    fmt::print("{:<24} vs bf16: decode {:.3f}x, prompt {:.3f}x\n", cfgs[k].name, dec, pr);
  }
  // Prompt tokens/s at each length, against standard and standard fused add+norm.
  fmt::print("{:<28} {:>7} {:>12} {:>12} {:>14}\n", "prompt pass", "tokens", "tok/s", "vs standard",
             "vs fused add");
  for (size_t k = 0; k < cfgs.size(); ++k) {
    const Config& c = cfgs[k];
    for (size_t i = 0; i < lens.size(); ++i) {
      const double tps = median(c.prompt_tps[i]);
      // against the bf16 standard engines (native rows too: what the blocks cost against bf16)
      const double vs_std = tps / med(i_std, [&](const Config& r) { return r.prompt_tps[i]; });
      const double vs_fused = tps / med(i_fused, [&](const Config& r) { return r.prompt_tps[i]; });
      j["configs"][k]["prompts"].push_back({{"tokens", lens[i]},
                                            {"tokens_per_s", tps},
                                            {"tokens_per_s_runs", c.prompt_tps[i]},
                                            {"vs_standard", vs_std},
                                            {"vs_standard_fused_add_norm", vs_fused}});
      fmt::print("{:<28} {:>7} {:>12.0f} {:>12} {:>14}\n", c.name, lens[i], tps, times(vs_std),
                 times(vs_fused));
    }
  }
  // Batched decode: output tokens/s (batch / step time) per configuration and batch size.
  if (!a.batches.empty()) {
    j["batched_decode"] = nlohmann::json::array();
    fmt::print("{:<28} {:>6} {:>10} {:>14} {:>12} {:>14}\n", "batched decode", "batch", "us/step",
               "output tok/s", "vs standard", "vs fused add");
    for (int k : batched_cfgs) {
      for (size_t i = 0; i < a.batches.size(); ++i) {
        const double us = median(cfgs[k].batch_us[i]), b = a.batches[i];
        const double vs_std = med(i_std, [&](const Config& r) { return r.batch_us[i]; }) / us;
        const double vs_fused = med(i_fused, [&](const Config& r) { return r.batch_us[i]; }) / us;
        j["batched_decode"].push_back({{"config", cfgs[k].name},
                                       {"decode_max_rows", cfgs[k].decode_rows},
                                       {"batch", a.batches[i]},
                                       {"us_per_step", us},
                                       {"us_per_step_runs", cfgs[k].batch_us[i]},
                                       {"output_tokens_per_s", b * 1e6 / us},
                                       {"vs_standard", vs_std},
                                       {"vs_standard_fused_add_norm", vs_fused}});
        fmt::print("{:<28} {:>6} {:>10.1f} {:>14.0f} {:>12} {:>14}\n", cfgs[k].name, a.batches[i],
                   us, b * 1e6 / us, times(vs_std), times(vs_fused));
      }
    }
    // Batch invariance (flashnorm): one sequence's greedy decode alone, then the same sequence fed
    // the same tokens among batch - 1 others (their prompts differ in the first token); a step
    // agrees when its top-1 in the batch equals its top-1 alone.
    // Every flashnorm row but "batched deferred": the default and, when run, the GEMV to 16 rows.
    j["batch_invariance"] = nlohmann::json::array();
    const size_t V = size_t(model.cfg.vocab);
    auto top1 = [&](const float* row) { return argmax(std::span<const float>(row, V)); };
    for (int ci : batched_cfgs) {
      if (cfgs[ci].mode != NormMode::FlashNorm || !cfgs[ci].batched_in_add) continue;
      CudaEngine& e = *cfgs[ci].e;
      std::vector<int32_t> alone;
      {
        const int s = e.open_sequence();
        SequenceChunk c{s, prompt(0)};
        std::vector<float> l = e.forward_batch(std::span(&c, 1));
        for (int t = 0; t < a.decode_tokens; ++t) {
          alone.push_back(top1(l.data()));
          c.tokens = std::span(&alone.back(), 1);
          l = e.forward_batch(std::span(&c, 1));
        }
        e.close_sequence(s);
      }
      for (int b : a.batches) {
        if (b < 2) continue;
        std::vector<int> seqs(b);
        std::vector<std::vector<int32_t>> prompts(
            b, std::vector<int32_t>(prompt(0).begin(), prompt(0).end()));
        for (int k = 1; k < b; ++k) prompts[k][0] = int32_t((size_t(k) * 7919) % V);
        std::vector<SequenceChunk> chunks(b);
        for (int k = 0; k < b; ++k) seqs[k] = e.open_sequence(), chunks[k] = {seqs[k], prompts[k]};
        std::vector<float> l = e.forward_batch(chunks);
        std::vector<int32_t> next(b);
        int agree = 0, steps = 0;
        for (int t = 0; t < a.decode_tokens; ++t) {
          if (t > 0) agree += top1(l.data()) == alone[t], ++steps;
          for (int k = 0; k < b; ++k) {
            next[k] = k == 0 ? alone[t] : top1(l.data() + k * V);
            chunks[k].tokens = std::span(&next[k], 1);
          }
          l = e.forward_batch(chunks);
        }
        for (int s : seqs) e.close_sequence(s);
        j["batch_invariance"].push_back({{"config", cfgs[ci].name},
                                         {"batch", b},
                                         {"steps", steps},
                                         {"top1_identical", agree},
                                         {"share", double(agree) / steps}});
        fmt::print(
            "batch invariance ({}): batch {} top-1 identical to alone in {}/{} steps ({:.4f})\n",
            cfgs[ci].name, b, agree, steps, double(agree) / steps);
      }
    }
  }
  // What the norms cost: Standard's standalone norm kernels as a share of its eager step; after,
  // FlashNorm's standalone norm kernels (the final RMSNorm of a tied head that keeps its gain) plus
  // what its normed projections cost beyond Standard's plain ones (the sum can be negative).
  if (i_std >= 0 && i_fn >= 0) {
    const StepProfile &ps = cfgs[size_t(i_std)].prof, &pf = cfgs[size_t(i_fn)].prof;
    const double before = ps.norm_us / ps.total_us();
    const double after = (pf.norm_us + pf.normed_proj_us - ps.normed_proj_us) / pf.total_us();
    j["norm_share_standard"] = before;
    j["norm_share_flashnorm"] = after;
    fmt::print(
        "norm share of a decode step (eager profile): standard {:.1f}% (rms_norm kernels); "
        "flashnorm {:+.1f}% (its rms_norm kernels + its normed projections minus standard's "
        "plain ones)\n",
        100 * before, 100 * after);
  }
  const std::string s = j.dump(1) + "\n";
  f.write(s.data(), s.size());
  f.commit();
  fmt::print("wrote {}\n", out);
}

}  // namespace flashnorm::cli
