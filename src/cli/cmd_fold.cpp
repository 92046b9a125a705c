// `flashnorm fold IN -o OUT`: weight folding of a GGUF file or a HF safetensors directory.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <map>
#include <set>

#include "commands.h"
#include "flashnorm/error.h"
#include "flashnorm/fold/fold.h"
#include "flashnorm/io/dequant.h"
#include "progress.h"

namespace flashnorm::cli {
namespace {

// The --requantize values: a type io::quantize writes, or "same" (each tensor's original type).
constexpr const char* kRequantizeTypes[] = {"same", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0",
                                            "q4_k", "q5_k", "q6_k", "f16",  "bf16", "f32"};

// Printed when a folded tensor is stored in a type of fewer than 8 bits: what that cost when
// measured (llama-perplexity on the GPL-3 text; docs/quantized.md, "Requantizing a fold").
constexpr const char* kLowBitWarning =
    "warning: folded gains in 4- and 5-bit blocks cost perplexity (llama.cpp, docs/quantized.md): "
    "SmolLM2-135M +43% as Q4_1, +12% as Q5_0, +1.4% as Q8_0; Gemma 3 270M (gains 0 to 301 within "
    "one norm) 13.9 -> 525 as Q5_0, 35 as Q8_0; prefer --dtype bf16 or f32, or the unfolded file "
    "with --weights native";

// 4- and 5-bit block types (Q4_K and Q5_K included).
bool low_bit(const std::string& type) {
  return type == "Q4_0" || type == "Q4_1" || type == "Q4_K" || type == "Q5_0" || type == "Q5_1" ||
         type == "Q5_K";
}

}  // namespace

void register_fold(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "fold", "Fold every foldable RMSNorm gain into the projections it feeds (weight folding)");
  struct Args {
    std::string in, out, dtype = "f32", requantize;
    bool keep_tied_head = false;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("input", a->in, "GGUF file or Hugging Face safetensors directory")
      ->required()
      ->check(CLI::ExistingPath);
  cmd->add_option("-o,--output", a->out, "output GGUF file or directory (never the input)")
      ->required();
  auto* dtype = cmd->add_option("--dtype", a->dtype,
                                "stored type of the rewritten (folded) tensors, whatever the "
                                "input's type (every other tensor keeps its bytes)")
                    ->check(CLI::IsMember({"f32", "f16", "bf16"}, CLI::ignore_case))
                    // generate's and verify's spellings (--dtype fp16) too
                    ->transform(CLI::Transformer(
                        std::map<std::string, std::string>{{"fp16", "f16"}, {"fp32", "f32"}},
                        CLI::ignore_case));
  auto* requant =
      cmd->add_option("--requantize", a->requantize,
                      "GGUF: store folded tensors as TYPE (q4_0 q4_1 q5_0 q5_1 q8_0 q4_k q5_k "
                      "q6_k f16 bf16 f32), or `same` (alone: the default) for each tensor's "
                      "original type; k-quants fall back to q5_0/q5_1/q8_0 for rows not a "
                      "multiple of 256, as llama.cpp does; prints the added error per kind")
          ->expected(0, 1)
          ->type_name("[TYPE]")
          // transform: any case is accepted and stored as the member's spelling ("SAME" -> same)
          ->transform(CLI::IsMember(
              std::vector<std::string>(std::begin(kRequantizeTypes), std::end(kRequantizeTypes)),
              CLI::ignore_case))
          ->excludes(dtype);  // the stored type is the requantized one: --dtype would do nothing
  cmd->add_flag("--keep-tied-head", a->keep_tied_head,
                "GGUF, tied LM head: keep the final norm's gain and the head tied (no untied "
                "vocab x hidden copy); marks the file flashnorm.final_norm_kept");
  cmd->callback([a, requant] {
    FoldOptions opt;
    opt.dtype = *io::ggml_type_from_name(a->dtype);
    opt.requantize = requant->count() > 0;
    if (opt.requantize && !a->requantize.empty() && a->requantize != "same") {
      opt.requantize_type = io::ggml_type_from_name(a->requantize);
      if (!opt.requantize_type) throw Error("fold: --requantize: unknown type " + a->requantize);
    }
    opt.keep_tied_head = a->keep_tied_head;
    Progress progress("folding");
    opt.progress = std::ref(progress);
    const bool dir = std::filesystem::is_directory(a->in);
    FoldReport r = dir ? fold_hf(a->in, a->out, opt) : fold_gguf(a->in, a->out, opt);
    fmt::print("folded {} ({}): {} norms set to identity, {} projections rewritten{}\n", a->in,
               r.arch, r.folded_norms.size(), r.tensors.size(),
               r.untied_head      ? ", LM head untied from the embedding"
               : r.kept_tied_head ? ", LM head kept tied (final norm keeps its gain)"
                                  : "");
    if (!opt.requantize) {
      fmt::print(
          "projections stored as {}; tensors neither folded nor set to identity keep "
          "their bytes and type\n",
          io::ggml_type_name(uint32_t(opt.dtype)));
    } else {
      // per kind: the stored types (one, unless `same` met several) and any fallback
      std::map<std::string, std::set<std::string>> types;
      std::map<std::string, std::pair<std::string, size_t>> fallback;
      bool warn = false;
      for (const auto& t : r.tensors) {
        types[t.kind].insert(t.out_type);
        warn |= low_bit(t.out_type);
        if (!t.requested_type.empty()) {
          fallback[t.out_type].first = t.requested_type;
          ++fallback[t.out_type].second;
        }
      }
      fmt::print("{:<12} {:<10} {}\n", "tensor kind", "type", "relative RMS error added");
      for (const auto& [kind, err] : r.requant_rel_rms_by_kind()) {
        fmt::print("{:<12} {:<10} {:.3e}\n", kind, fmt::format("{}", fmt::join(types[kind], ",")),
                   err);
      }
      for (const auto& [type, f] : fallback) {
        fmt::print("{} tensors stored as {}: their rows are not a multiple of {}'s 256\n", f.second,
                   type, f.first);
      }
      if (warn) fmt::print(stderr, "{}\n", kLowBitWarning);
    }
    fmt::print("wrote {}\n", a->out);
  });
}

}  // namespace flashnorm::cli
