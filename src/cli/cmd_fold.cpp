// `flashnorm fold IN -o OUT`: weight folding of a GGUF file or a HF safetensors directory.
#include <fmt/format.h>

#include <filesystem>

#include "commands.h"
#include "flashnorm/fold/fold.h"
#include "flashnorm/error.h"
#include "progress.h"

namespace flashnorm::cli {

void register_fold(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "fold", "Fold every foldable RMSNorm gain into the projections it feeds (weight folding)");
  struct Args {
    std::string in, out, dtype = "f32";
    bool requantize = false;
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
                    ->check(CLI::IsMember({"f32", "f16", "bf16"}, CLI::ignore_case));
  cmd->add_flag("--requantize", a->requantize,
                "GGUF: requantize folded tensors to their original type (Q8_0, Q4_0, Q4_1, Q5_0)")
      ->excludes(dtype);  // the original types are the stored types: --dtype would do nothing
  cmd->callback([a] {
    FoldOptions opt;
    opt.dtype = *io::ggml_type_from_name(a->dtype);
    opt.requantize = a->requantize;
    Progress progress("folding");
    opt.progress = std::ref(progress);
    const bool dir = std::filesystem::is_directory(a->in);
    FoldReport r = dir ? fold_hf(a->in, a->out, opt) : fold_gguf(a->in, a->out, opt);
    fmt::print("folded {} ({}): {} norms set to identity, {} projections rewritten{}\n", a->in,
               r.arch, r.folded_norms.size(), r.tensors.size(),
               r.untied_head ? ", LM head untied from the embedding" : "");
    std::map<std::string, std::string> types;
    for (const auto& t : r.tensors) types[t.kind] = t.out_type;
    if (!opt.requantize) {
      fmt::print(
          "projections stored as {}; tensors neither folded nor set to identity keep "
          "their bytes and type\n",
          io::ggml_type_name(uint32_t(opt.dtype)));
    } else {
      fmt::print("{:<12} {:<6} {}\n", "tensor kind", "type", "relative RMS error added");
      for (const auto& [kind, err] : r.requant_rel_rms_by_kind()) {
        fmt::print("{:<12} {:<6} {:.3e}\n", kind, types[kind], err);
      }
    }
    fmt::print("wrote {}\n", a->out);
  });
}

}  // namespace flashnorm::cli
