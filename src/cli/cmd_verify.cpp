// `flashnorm verify ORIGINAL FOLDED...`: does the folded, deferred-normalization model compute the
// same function as the original? Original runs with --norm standard, each folded model with
// --norm flashnorm; reports perplexity of each on a text, greedy agreement over N generated tokens
// on several prompts, and the largest relative logit difference (teacher-forced).
// With --device cuda: the CUDA engine (bf16) in standard mode, flashnorm mode (fused and
// two-stream; folded at load, and each given folded file; fused with the other --prefill-norm
// choice; for a tied LM head also fused with the other --fold-tied-head choice) against the CPU
// fp32 engine on the original, and flashnorm against standard on the GPU (the equivalence
// table).
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "commands.h"
#include "flashnorm/engine/evaluate.h"
#include "flashnorm/error.h"
#include "flashnorm/io/atomic_file.h"
#include "flashnorm/model/check.h"
#include "flashnorm/model/model.h"
#include "flashnorm/tokenizer/model_tokenizer.h"
#include "flashnorm/tokenizer/tokenizer.h"
#include "model_args.h"
#include "progress.h"

namespace flashnorm::cli {
namespace {

const char* const kDefaultPrompts[] = {
    "The capital of France is",
    "Once upon a time, in a small village by the sea,",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
};

std::string read_text(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec) ||
      std::filesystem::file_size(path, ec) > (256u << 20)) {
    throw Error(fmt::format("--text {}: not a regular file of at most 256 MiB", path));
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(fmt::format("cannot read text file {}", path));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Writes j (generated text may end inside a UTF-8 sequence: invalid bytes become U+FFFD) to the
// output opened before the run, if any.
void write_json(std::optional<io::AtomicFile>& f, const nlohmann::json& j) {
  if (!f) return;
  const std::string s = j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  f->write(s.data(), s.size());
  f->commit();
}

const char* chunks_name(ChunkLayout l) {
  return l == ChunkLayout::kLlamaPerplexity ? "llama-perplexity" : "every";
}

// The CUDA engine's equivalence run: GPU engines (standard; flashnorm fused and two-stream on the
// original, folded at load; flashnorm fused with the other --prefill-norm; for a tied head,
// flashnorm fused with the other fold_tied_head choice; flashnorm fused on each folded file)
// against the CPU fp32 engine on the original in standard mode, then flashnorm against standard on
// the GPU; greedy tokens of each GPU engine against the GPU standard engine. With --weights native
// (dev.weights): every engine, the CPU reference included, on the file's own blocks
// (WeightStorage::kNative): the CUDA engine's quantized projections against the CPU engine's native
// path; no folded files, no head-fold variant (a native head is applied in its blocks).
nlohmann::json verify_on_gpu(const std::string& original, const std::vector<std::string>& folded,
                             const DeviceArgs& dev, const std::vector<int32_t>& text,
                             const TextChunks& chunks,
                             const std::vector<std::vector<int32_t>>& prompts, int n_greedy,
                             bool cancel, const Tokenizer& tok) {
  const int ctx = chunks.ctx;
  const std::optional<int32_t> bos = chunks.bos;
  int max_ctx = ctx;
  for (const auto& p : prompts) max_ctx = std::max<int>(max_ctx, p.size() + n_greedy);
  struct Named {
    std::string name;
    std::unique_ptr<Engine> e;
  };
  std::vector<Named> gpu;
  DeviceArgs d = dev;
  d.device = "cuda";
  // flashnorm-only options: no note for the standard engine
  d.fold_tied_head = false, d.prefill_norm = "add", d.deferred = "fused";
  const WeightStorage storage = weight_storage(dev, original);
  const bool native = storage == WeightStorage::kNative;
  auto load = [&] { return load_model(original, /*with_data=*/true, storage); };
  gpu.push_back({"standard", make_engine(load(), NormMode::Standard, d, max_ctx, cancel)});
  d.fold_tied_head = dev.fold_tied_head, d.prefill_norm = dev.prefill_norm;
  d.deferred = "fused";
  gpu.push_back(
      {"flashnorm (fused)", make_engine(load(), NormMode::FlashNorm, d, max_ctx, cancel)});
  // the two-stream scheme throughout: prompts' rstd deferred too, on the second stream
  d.deferred = "two-stream", d.prefill_norm = "deferred";
  gpu.push_back(
      {"flashnorm (two-stream)", make_engine(load(), NormMode::FlashNorm, d, max_ctx, cancel)});
  d.deferred = "fused";
  // both ways of applying rstd in prompt passes (teacher forcing runs prompt passes only)
  d.prefill_norm = dev.prefill_norm == "add" ? "deferred" : "add";
  gpu.push_back({d.prefill_norm == "add" ? "flashnorm (fused, prompts: rstd in the add)"
                                         : "flashnorm (fused, prompts: rstd deferred)",
                 make_engine(load(), NormMode::FlashNorm, d, max_ctx, cancel)});
  d.prefill_norm = dev.prefill_norm;
  if (gpu[0].e->config().tied_head && !native) {  // both ways of a tied head
    d.fold_tied_head = !dev.fold_tied_head;
    gpu.push_back(
        {d.fold_tied_head ? "flashnorm (fused, head folded)" : "flashnorm (fused, head tied)",
         make_engine(load_model(original), NormMode::FlashNorm, d, max_ctx, cancel)});
    d.fold_tied_head = dev.fold_tied_head;
  }
  for (const auto& f : folded) {
    gpu.push_back({"flashnorm (fused), " + f,
                   make_engine(load_model(f), NormMode::FlashNorm, d, max_ctx, cancel)});
  }
  CpuEngine cpu(load(), NormMode::Standard, {.max_context = max_ctx});
  std::vector<Engine*> ptrs;
  for (auto& g : gpu) ptrs.push_back(g.e.get());
  std::vector<ComparisonStats> vs_cpu, vs_std;
  {
    Progress pr("teacher-forced vs CPU fp32 (chunks)");
    vs_cpu = compare_teacher_forced(cpu, ptrs, text, chunks, std::ref(pr));
  }
  std::vector<Engine*> rest(ptrs.begin() + 1, ptrs.end());
  {
    Progress pr("teacher-forced vs GPU standard (chunks)");
    vs_std = compare_teacher_forced(*ptrs[0], rest, text, chunks, std::ref(pr));
  }
  nlohmann::json out = {{"original", original},
                        {"weights", native ? "native" : "f32"},
                        {"reference", cpu.describe()},
                        {"device", describe_engine(*ptrs[0])},
                        {"text_tokens", text.size()},
                        {"ctx", ctx},
                        {"chunks", chunks_name(chunks.layout)},
                        {"greedy_tokens", n_greedy},
                        {"results", nlohmann::json::array()}};
  fmt::print("text: {} tokens (chunks of {}); reference: CPU engine ({}), standard mode, {}\n",
             text.size(), ctx, native ? "native weights" : "fp32", original);
  fmt::print("{:<44} {:>10} {:>10} {:>11} | {:>10} {:>11} | {:>8}\n", "GPU engine", "ppl",
             "top-1/CPU", "rel.logit", "top-1/std", "rel.logit", "greedy");
  std::vector<std::vector<int32_t>> ref;
  for (const auto& p : prompts) ref.push_back(greedy_tokens(*ptrs[0], p, n_greedy));
  for (size_t k = 0; k < gpu.size(); ++k) {
    const ComparisonStats& c = vs_cpu[k];
    const double t1 = double(c.top1_agree) / c.positions;
    nlohmann::json r = {{"engine", gpu[k].name},
                        {"describe", describe_engine(*ptrs[k])},
                        {"positions", c.positions},
                        {"ppl_cpu_fp32", c.ppl_a()},
                        {"ppl", c.ppl_b()},
                        {"top1_vs_cpu", t1},
                        {"max_rel_logit_diff_vs_cpu", c.max_rel_logit_diff}};
    std::string vs = "-", vsd = "-", gr = "-";
    if (k > 0) {
      const ComparisonStats& s = vs_std[k - 1];
      r["top1_vs_gpu_standard"] = double(s.top1_agree) / s.positions;
      r["max_rel_logit_diff_vs_gpu_standard"] = s.max_rel_logit_diff;
      vs = fmt::format("{:.4f}", double(s.top1_agree) / s.positions);
      vsd = fmt::format("{:.3e}", s.max_rel_logit_diff);
      size_t same = 0, total = 0;
      nlohmann::json g = nlohmann::json::array();
      for (size_t i = 0; i < prompts.size(); ++i) {
        std::vector<int32_t> t = greedy_tokens(*ptrs[k], prompts[i], n_greedy);
        size_t agree = 0;
        while (agree < t.size() && t[agree] == ref[i][agree]) ++agree;
        same += agree, total += t.size();
        g.push_back({{"agree_prefix", agree}, {"text", tok.decode(t)}});
      }
      r["greedy_vs_gpu_standard"] = g;
      gr = fmt::format("{}/{}", same, total);
    } else {
      nlohmann::json g = nlohmann::json::array();
      for (const auto& t : ref) g.push_back({{"text", tok.decode(t)}});
      r["greedy"] = g;
    }
    fmt::print("{:<44} {:>10.4f} {:>10.4f} {:>11.3e} | {:>10} {:>11} | {:>8}\n", gpu[k].name,
               c.ppl_b(), t1, c.max_rel_logit_diff, vs, vsd, gr);
    out["results"].push_back(r);
  }
  fmt::print(
      "CPU reference perplexity: {:.4f}; greedy column: tokens before the first difference from "
      "GPU standard, summed over {} prompts\n",
      vs_cpu[0].ppl_a(), prompts.size());
  return out;
}

// --weights native on the CPU: the native engines (standard, flashnorm) against the fp32 engine
// in standard mode (`ref`, the exact reference), and native flashnorm against native standard,
// teacher-forced over `text`. The native engines run every chunk through the integer path that
// decode takes (16-bit activations; CpuEngine::set_quant_gemm_rows): prefill's tiled sgemm path
// computes in fp32 and would only measure itself. Prints a table; returns the JSON results.
nlohmann::json verify_native(const std::string& original, CpuEngine& ref,
                             const std::vector<int32_t>& text, const TextChunks& chunks,
                             int max_ctx, bool cancel) {
  DeviceArgs d;
  d.device = "cpu";
  d.weights = "native";
  CpuEngine nstd(load_model_for(original, d), NormMode::Standard, {.max_context = max_ctx});
  CpuEngine nfn(load_model_for(original, d), NormMode::FlashNorm,
                {.max_context = max_ctx, .cancel = cancel});
  CpuEngine ffn(load_model(original), NormMode::FlashNorm,
                {.max_context = max_ctx, .cancel = cancel});
  nstd.set_quant_gemm_rows(std::numeric_limits<int>::max());
  nfn.set_quant_gemm_rows(std::numeric_limits<int>::max());
  std::vector<Engine*> engines = {&nstd, &nfn, &ffn};
  const std::vector<std::string> names = {"native (int), standard", "native (int), flashnorm",
                                          "fp32, flashnorm"};
  std::vector<ComparisonStats> vs_ref;
  {
    Progress pr("teacher-forced vs fp32 standard (chunks)");
    vs_ref = compare_teacher_forced(ref, engines, text, chunks, std::ref(pr));
  }
  ComparisonStats modes;
  {
    Progress pr("teacher-forced native flashnorm vs native standard (chunks)");
    Engine* const fn_native[] = {&nfn};
    modes = compare_teacher_forced(nstd, fn_native, text, chunks, std::ref(pr))[0];
  }
  fmt::print("\nreference: {} ({}), {} positions\n", original, ref.describe(), vs_ref[0].positions);
  fmt::print("{:<24} {:>10} {:>10} {:>10} {:>12}\n", "engine", "ppl", "ppl/ref-1", "top-1/ref",
             "rel.logit");
  fmt::print("{:<24} {:>10.4f}\n", "fp32, standard", vs_ref[0].ppl_a());
  nlohmann::json out = {{"reference", ref.describe()},
                        {"positions", vs_ref[0].positions},
                        {"ppl_reference", vs_ref[0].ppl_a()},
                        {"engines", nlohmann::json::array()}};
  for (size_t k = 0; k < engines.size(); ++k) {
    const ComparisonStats& c = vs_ref[k];
    const double t1 = double(c.top1_agree) / c.positions;
    const double rel = c.ppl_b() / c.ppl_a() - 1;
    fmt::print("{:<24} {:>10.4f} {:>+10.3e} {:>10.4f} {:>12.3e}\n", names[k], c.ppl_b(), rel, t1,
               c.max_rel_logit_diff);
    out["engines"].push_back({{"engine", names[k]},
                              {"describe", engines[k]->describe()},
                              {"ppl", c.ppl_b()},
                              {"ppl_rel_to_reference", rel},
                              {"top1_vs_reference", t1},
                              {"max_rel_logit_diff_vs_reference", c.max_rel_logit_diff}});
  }
  const double t1m = double(modes.top1_agree) / modes.positions;
  fmt::print(
      "native flashnorm vs native standard: top-1 {:.4f}, largest relative logit "
      "difference {:.3e}\n",
      t1m, modes.max_rel_logit_diff);
  out["native_flashnorm_vs_native_standard"] = {{"top1", t1m},
                                                {"max_rel_logit_diff", modes.max_rel_logit_diff}};
  return out;
}

}  // namespace

void register_verify(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "verify", "Compare a folded model (flashnorm mode) against its original (standard mode)");
  struct Args {
    std::string original, text = "/usr/share/common-licenses/GPL-3", json, tokenizer, commit,
                          driver;
    std::vector<std::string> folded, prompts;
    int tokens = 256, ctx = 512, max_text_tokens = 0;
    ChunkLayout layout = ChunkLayout::kEveryPosition;
    bool no_cancel = false;
    DeviceArgs dev;
  };
  auto a = std::make_shared<Args>();
  a->dev.device = "cpu";
  // verify's purpose is the comparison with the exact fp32 reference: f32 unless --weights native
  // (or auto) asks for the native engines, which are then compared with it
  a->dev.weights = "f32";
  cmd->add_option("original", a->original, "original model (GGUF or HF directory)")
      ->required()
      ->check(CLI::ExistingPath);
  cmd->add_option("folded", a->folded, "folded models (at least one unless --device cuda)")
      ->check(CLI::ExistingPath);
  cmd->add_option("--text", a->text, "text for perplexity and logit comparison")
      ->check(CLI::ExistingFile);
  cmd->add_option("--tokens", a->tokens, "greedy tokens generated per prompt")
      ->check(CLI::Range(0, 1 << 16));
  cmd->add_option("--prompt", a->prompts, "prompt for the greedy comparison (repeatable)");
  cmd->add_option("--ctx", a->ctx, "chunk length for perplexity")->check(CLI::Range(2, 8192));
  cmd->add_option("--chunks", a->layout,
                  "every: score every prediction of chunks of --ctx; llama-perplexity: "
                  "llama.cpp's chunks and positions (BOS in place of each chunk's first token, "
                  "the second half of each scored)")
      ->transform(CLI::CheckedTransformer(
          std::map<std::string, ChunkLayout>{{"every", ChunkLayout::kEveryPosition},
                                             {"llama-perplexity", ChunkLayout::kLlamaPerplexity}},
          CLI::ignore_case));
  cmd->add_option("--max-text-tokens", a->max_text_tokens,
                  "use only the first N tokens of text (0: all)")
      ->check(CLI::Range(0, INT32_MAX));
  cmd->add_flag("--no-cancel", a->no_cancel,
                "keep the rstd that QK-norm cancels (default: drop it and report its effect; the "
                "CUDA engine's prompt passes of more than 64 tokens keep it anyway, see "
                "--prefill-norm)");
  cmd->add_option("--json", a->json, "also write the results as JSON to this file")
      ->check(CLI::Validator(
          [](std::string& v) { return v.empty() ? std::string("--json: empty path") : ""; },
          "PATH"));
  cmd->add_option("--tokenizer", a->tokenizer,
                  "GGUF file or directory with tokenizer.json (default: the model's own)")
      ->check(CLI::ExistingPath);
  cmd->add_option("--commit", a->commit, "--device cuda: commit id to record in the JSON");
  cmd->add_option("--driver", a->driver, "--device cuda: driver version to record (nvidia-smi)");
  add_device_options(cmd, a->dev);
  cmd->callback([a] {
    const std::string device = resolve_device(a->dev.device);
    const bool native = weight_storage(a->dev, a->original) == WeightStorage::kNative;
    if (device == "cpu" && a->folded.empty() && !native) {
      throw Error(
          "verify: give at least one folded model (or --device cuda to compare the CUDA "
          "engine's modes with the CPU engine, or --weights native to compare the native "
          "engine with the fp32 one)");
    }
    if (native && !a->folded.empty()) {
      throw Error(a->dev.weights == "native"
                      ? "verify --weights native compares the original's engines: give no "
                        "folded model"
                      : "verify --weights auto picks native for this quantized file, which "
                        "compares the original's engines: give no folded model, or --weights f32");
    }
    // Inputs are never overwritten: refuse a --json path that names one, before any work.
    std::vector<std::filesystem::path> inputs = {a->original, a->text};
    for (const auto& f : a->folded) inputs.push_back(f);
    if (!a->tokenizer.empty()) inputs.push_back(a->tokenizer);
    if (!a->json.empty()) io::refuse_overwrite(a->json, inputs);
    // The output is opened (as its temporary) before any work, so a path that cannot be written
    // fails at once rather than after a run of minutes.
    std::optional<io::AtomicFile> json_out;
    if (!a->json.empty()) json_out.emplace(a->json, inputs);
    // a --tokenizer whose vocabulary does not fit the model is refused before any run
    const Tokenizer tok =
        load_model_tokenizer(a->original, a->tokenizer,
                             load_model(a->original, /*with_data=*/false).cfg.vocab)
            .tok;
    refuse_appended_token(tok, "verify");
    std::vector<int32_t> text = tok.encode(read_text(a->text), /*parse_special=*/false);
    if (a->max_text_tokens > 0 && text.size() > size_t(a->max_text_tokens)) {
      text.resize(a->max_text_tokens);
    }
    if (text.size() < 2) {
      throw Error(fmt::format("--text {}: {} token(s); the comparison needs at least 2", a->text,
                              text.size()));
    }
    std::vector<std::string> prompts = a->prompts;
    if (prompts.empty()) prompts.assign(std::begin(kDefaultPrompts), std::end(kDefaultPrompts));
    const int ctx_needed = std::max<int>(a->ctx, 0);
    int max_ctx = ctx_needed;
    std::vector<std::vector<int32_t>> prompt_ids;
    // Models that expect BOS (Gemma) get it before every prompt and every text chunk.
    const std::optional<int32_t> bos = tok.add_bos() ? tok.bos() : std::nullopt;
    const TextChunks chunks{.ctx = a->ctx, .bos = bos, .layout = a->layout};
    for (const auto& p : prompts) {
      prompt_ids.push_back(tok.encode(p, false));
      if (bos) prompt_ids.back().insert(prompt_ids.back().begin(), *bos);
      if (prompt_ids.back().empty()) throw Error("a prompt encodes to no tokens");
      max_ctx = std::max<int>(max_ctx, prompt_ids.back().size() + a->tokens);
    }
    if (device == "cuda") {
      nlohmann::json out = verify_on_gpu(a->original, a->folded, a->dev, text, chunks, prompt_ids,
                                         a->tokens, !a->no_cancel, tok);
      out["text"] = a->text;
      out.update(gpu_run_stamp(std::time(nullptr), a->commit, a->driver));
      write_json(json_out, out);
      return;
    }
    CpuEngine orig(load_model(a->original), NormMode::Standard, {.max_context = max_ctx});
    if (native) {
      nlohmann::json out = verify_native(a->original, orig, text, chunks, max_ctx, !a->no_cancel);
      out["text"] = a->text;
      out["original"] = a->original;
      out["ctx"] = a->ctx;
      out["chunks"] = chunks_name(a->layout);
      write_json(json_out, out);
      return;
    }
    std::vector<std::unique_ptr<CpuEngine>> engines;
    std::vector<Engine*> ptrs;
    for (const auto& folded : a->folded) {
      Model fm = load_model(folded);
      const ModelConfig &oc = orig.config(), &fc = fm.cfg;
      if (oc.folded && fc.folded) {
        std::fprintf(stderr, "note: %s and %s are both folded: this compares folded with folded\n",
                     a->original.c_str(), folded.c_str());
      } else if (oc.folded) {
        std::fprintf(stderr,
                     "note: %s is folded and %s is not: are the arguments swapped? (verify takes "
                     "the original first)\n",
                     a->original.c_str(), folded.c_str());
      }
      if (fc.arch != oc.arch || fc.vocab != oc.vocab || fc.hidden != oc.hidden ||
          fc.n_layer != oc.n_layer) {
        throw Error(
            fmt::format("{} ({}, vocab {}, hidden {}, {} layers) is not a fold of {} ({}, "
                        "vocab {}, hidden {}, {} layers)",
                        folded, fc.arch, fc.vocab, fc.hidden, fc.n_layer, a->original, oc.arch,
                        oc.vocab, oc.hidden, oc.n_layer));
      }
      engines.push_back(
          std::make_unique<CpuEngine>(std::move(fm), NormMode::FlashNorm,
                                      CpuEngineOptions{.max_context = max_ctx,
                                                       .cancel = !a->no_cancel,
                                                       .track_cancellation = !a->no_cancel}));
      ptrs.push_back(engines.back().get());
    }
    std::vector<std::vector<int32_t>> ref;
    {
      Progress pr("greedy (original)");
      for (size_t i = 0; i < prompt_ids.size(); ++i) {
        ref.push_back(greedy_tokens(orig, prompt_ids[i], a->tokens));
        pr(i + 1, prompt_ids.size());
      }
    }
    nlohmann::json out = {
        {"original", a->original},         {"text", a->text}, {"text_tokens", text.size()},
        {"greedy_tokens", a->tokens},      {"ctx", a->ctx},   {"results", nlohmann::json::array()},
        {"chunks", chunks_name(a->layout)}};
    fmt::print("text: {} ({} tokens, chunks of {}), greedy: {} tokens x {} prompts\n", a->text,
               text.size(), a->ctx, a->tokens, prompts.size());
    std::vector<ComparisonStats> stats;
    {
      Progress pr("perplexity (chunks)");
      stats = compare_teacher_forced(orig, ptrs, text, chunks, std::ref(pr));
    }
    for (size_t k = 0; k < a->folded.size(); ++k) {
      const std::string& folded = a->folded[k];
      CpuEngine& fe = *engines[k];
      const ComparisonStats& st = stats[k];
      nlohmann::json greedy = nlohmann::json::array();
      int identical_prompts = 0;
      for (size_t i = 0; i < prompt_ids.size(); ++i) {
        std::vector<int32_t> g = greedy_tokens(fe, prompt_ids[i], a->tokens);
        size_t same = 0;
        while (same < g.size() && g[same] == ref[i][same]) ++same;
        identical_prompts += same == g.size();
        greedy.push_back({{"prompt", prompts[i]},
                          {"agree_prefix", same},
                          {"identical", same == g.size()},
                          {"original_text", tok.decode(ref[i])},
                          {"folded_text", tok.decode(g)}});
      }
      const double rel_ppl = std::fabs(st.ppl_b() - st.ppl_a()) / st.ppl_a();
      fmt::print("\n{} (flashnorm mode) vs {} (standard mode)\n", folded, a->original);
      fmt::print("  perplexity: original {:.6f}  folded {:.6f}  relative difference {:.3e}\n",
                 st.ppl_a(), st.ppl_b(), rel_ppl);
      fmt::print("  top-1 agreement (teacher-forced): {}/{} = {:.4f}\n", st.top1_agree,
                 st.positions, double(st.top1_agree) / st.positions);
      fmt::print("  largest relative logit difference: {:.3e}\n", st.max_rel_logit_diff);
      double cancel_logit_diff = 0;
      if (fe.max_cancellation_error() > 0) {
        // What dropping the cancelled rstd alone changes: the same folded model with and without
        // cancellation, teacher-forced over the first 1024 tokens of the text.
        CpuEngine exact(load_model(folded), NormMode::FlashNorm,
                        {.max_context = max_ctx, .cancel = false});
        const size_t n = std::min<size_t>(text.size(), 1024);
        cancel_logit_diff =
            compare_teacher_forced(exact, &fe, std::span<const int32_t>(text.data(), n), a->ctx,
                                   std::function<void(size_t, size_t)>(), bos)
                .max_rel_logit_diff;
        fmt::print(
            "  dropped rstd (QK-norm cancellation): largest relative change of a "
            "renormalized row {:.3e} (eps bound, measured); largest relative logit "
            "difference it causes (first {} tokens): {:.3e}\n",
            fe.max_cancellation_error(), n, cancel_logit_diff);
      }
      for (const auto& g : greedy) {  // --tokens 0: no greedy run to report
        if (a->tokens == 0) break;
        if (g["identical"].get<bool>())
          fmt::print("  greedy: all {} tokens identical\n", a->tokens);
        else
          fmt::print("  greedy: {}/{} tokens identical before the first difference\n",
                     g["agree_prefix"].get<size_t>(), a->tokens);
      }
      out["results"].push_back({{"folded", folded},
                                {"positions", st.positions},
                                {"ppl_original", st.ppl_a()},
                                {"ppl_folded", st.ppl_b()},
                                {"ppl_rel_diff", rel_ppl},
                                {"top1_agreement", double(st.top1_agree) / st.positions},
                                {"max_rel_logit_diff", st.max_rel_logit_diff},
                                {"cancellation", !a->no_cancel},
                                {"max_cancellation_row_error", fe.max_cancellation_error()},
                                {"cancellation_rel_logit_diff", cancel_logit_diff},
                                {"greedy_identical_prompts", identical_prompts},
                                {"greedy", greedy}});
    }
    write_json(json_out, out);
  });
}

}  // namespace flashnorm::cli
