// `flashnorm inspect MODEL`: architecture, every normalization and the projections it feeds,
// the gain convention, whether the model is folded. Then the checks `generate` runs at load
// (check_model_file): a file it would refuse gets the same one-line error and exit 1, after what
// inspect could read was printed.
#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "flashnorm/error.h"
#include "flashnorm/io/gguf.h"
#include "flashnorm/io/safetensors.h"
#include "flashnorm/model/arch.h"
#include "flashnorm/model/audit.h"
#include "flashnorm/model/check.h"
#include "flashnorm/model/model.h"

namespace flashnorm::cli {
namespace {

struct View {
  std::string arch;
  int n_layer = 0;
  GainConvention gains = GainConvention::Plain;
  bool folded = false;
  bool final_norm_kept = false;  // flashnorm.final_norm_kept (GGUF)
  // name -> "type [dims]" for tensors present (canonical names)
  std::map<std::string, std::string> tensors;
  std::vector<std::pair<std::string, std::string>> facts;
};

View from_gguf(const std::string& path) {
  io::GgufFile f = io::GgufFile::open(path);
  View v;
  v.arch = f.get_string("general.architecture");
  const ArchDescription& a = arch_by_name(v.arch);
  const uint64_t n_layer = f.get_uint(v.arch + ".block_count");
  if (n_layer == 0 || n_layer > 4096) {
    throw Error(fmt::format("{}: {}.block_count = {} is out of range", path, v.arch, n_layer));
  }
  v.n_layer = static_cast<int>(n_layer);
  v.gains = a.gguf_gains;
  v.folded = f.get_bool_or(std::string(kFoldedKey), false);
  v.final_norm_kept = f.get_bool_or(std::string(kFinalNormKeptKey), false);
  for (const auto& t : f.tensors()) {
    std::vector<uint64_t> shape(t.dims.rbegin(), t.dims.rend());
    v.tensors[t.name] =
        fmt::format("{} [{}]", io::ggml_type_name(uint32_t(t.type)), fmt::join(shape, ", "));
  }
  v.facts.push_back({"format", fmt::format("GGUF v{}", f.version())});
  if (auto n = f.get_string_opt("general.name")) v.facts.push_back({"name", *n});
  for (const char* k : {"embedding_length", "feed_forward_length", "attention.head_count",
                        "attention.head_count_kv", "context_length"}) {
    if (auto x = f.get_uint_opt(v.arch + "." + k)) v.facts.push_back({k, std::to_string(*x)});
  }
  if (auto e = f.get_float_opt(v.arch + ".attention.layer_norm_rms_epsilon")) {
    v.facts.push_back({"rms_norm_eps", fmt::format("{:g}", *e)});
  }
  return v;
}

View from_hf(const std::string& dir) {
  io::HfModelDir d = io::HfModelDir::open(dir);
  View v;
  auto cls = d.config().value("architectures", nlohmann::json::array());
  std::string hf_class = cls.is_array() && !cls.empty() && cls[0].is_string() ? cls[0] : "";
  const ArchDescription* a = arch_by_hf_class(hf_class);
  if (!a) throw Error(fmt::format("{}: architectures '{}' is not supported", dir, hf_class));
  v.arch = a->name;
  const auto& nl =
      d.config().contains("num_hidden_layers") ? d.config()["num_hidden_layers"] : nlohmann::json();
  if (!nl.is_number_unsigned() || nl.get<uint64_t>() == 0 || nl.get<uint64_t>() > 4096) {
    throw Error(fmt::format("{}/config.json: num_hidden_layers missing or out of range", dir));
  }
  v.n_layer = nl.get<int>();
  v.gains = a->hf_gains;
  v.folded = hf_folded_marker(d);
  for (const auto& n : d.tensor_names()) {
    auto canon = from_hf_name(*a, n);
    const io::StTensorInfo* t = d.find(n);
    v.tensors[canon ? *canon : n] =
        fmt::format("{} [{}] ({})", io::st_dtype_name(t->dtype), fmt::join(t->shape, ", "), n);
  }
  v.facts.push_back(
      {"format", fmt::format("Hugging Face safetensors, {} shard(s)", d.shards().size())});
  const auto& tie = d.config().contains("tie_word_embeddings") ? d.config()["tie_word_embeddings"]
                                                               : nlohmann::json(false);
  v.facts.push_back({"tie_word_embeddings", tie.dump()});
  return v;
}

// Prints what inspect reads of the model at `path` (throws where it cannot read it).
void print_view(const std::string& path) {
  View v = std::filesystem::is_directory(path) ? from_hf(path) : from_gguf(path);
  const ArchDescription& a = arch_by_name(v.arch);
  fmt::print("model:        {}\narchitecture: {} ({} layers)\n", path, v.arch, v.n_layer);
  for (const auto& [k, val] : v.facts) fmt::print("  {:<24} {}\n", k, val);
  fmt::print("gain convention: {}\n", v.gains == GainConvention::Plain
                                          ? "plain: y = x * rstd * w (identity w = 1)"
                                          : "one-plus: y = x * rstd * (1 + w) (identity w = 0)");
  fmt::print("folded:       {}\n",
             !v.folded           ? "no"
             : v.final_norm_kept ? "yes (flashnorm.folded); the final norm keeps its gain and the "
                                   "LM head its tie (flashnorm.final_norm_kept)"
                                 : "yes (flashnorm.folded)");
  const bool tied = !v.tensors.count(a.head);
  fmt::print("LM head:      {}\n", tied ? fmt::format("tied to {}", a.tied_source)
                                        : std::string("separate (") + a.head + ")");
  auto has = [&](const std::string& t) { return v.tensors.count(t) > 0; };
  auto show = [&](int layer) {
    for (const NormAudit& na : audit_layer(a, layer, has)) {
      fmt::print("{} {}\n", na.norm, v.tensors.at(na.norm));
      if (!na.foldable) {
        fmt::print("    not foldable: {}\n", na.fold_reason);
        continue;
      }
      for (const ConsumerAudit& c : na.consumers) {
        auto ct = v.tensors.find(c.tensor);
        std::string desc = ct != v.tensors.end() ? ct->second
                           : c.tensor == a.head  ? "tied: " + a.tied_source
                                                 : "MISSING";
        fmt::print("    -> {} {}\n       rstd {}: {}\n", c.tensor, desc,
                   c.cancellable ? "cancels" : "needed", c.reason);
        if (c.biased) {
          fmt::print("       bias {}: added after the rstd row scale, y = rstd * (x W*^T) + b\n",
                     bias_name(c.tensor));
        }
      }
      if (na.skip_reduction) {
        fmt::print("    every consumer renormalizes: the whole rstd reduction can be dropped\n");
      }
    }
  };
  fmt::print(
      "normalizations (RMSNorm), the projections each one feeds, and the cancellation "
      "audit:\n");
  for (int l = 0; l < v.n_layer; ++l) show(l);
  show(-1);
}

}  // namespace

void register_inspect(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "inspect", "Print the architecture, every normalization and what it feeds, folded or not");
  auto path = std::make_shared<std::string>();
  cmd->add_option("model", *path, "GGUF file or Hugging Face directory")
      ->required()
      ->check(CLI::ExistingPath);
  cmd->callback([path] {
    try {
      print_view(*path);
    } catch (const std::exception&) {
      check_model_file(*path);  // the error `generate` would print, when it refuses the file too
      throw;
    }
    check_model_file(*path);
  });
}

}  // namespace flashnorm::cli
