#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "flashnorm/error.h"
#include "flashnorm/fold/fold.h"
#include "flashnorm/io/atomic_file.h"
#include "flashnorm/io/safetensors.h"
#include "flashnorm/model/check.h"
#include "flashnorm/model/embedding.h"
#include "flashnorm/model/model.h"
#include "plan.h"

namespace flashnorm {
namespace {

// The safetensors dtype of --dtype (F32, F16 or BF16). Errors: Error for any other type.
io::StDtype folded_st_dtype(io::GgmlType t) {
  switch (t) {
    case io::GgmlType::F32:
      return io::StDtype::F32;
    case io::GgmlType::F16:
      return io::StDtype::F16;
    case io::GgmlType::BF16:
      return io::StDtype::BF16;
    default:
      throw Error("fold: --dtype must be f32, f16 or bf16");
  }
}

// transformers' name of a floating safetensors dtype ("float32", ...); empty for other dtypes.
std::string torch_dtype_name(std::string_view st) {
  if (st == "F32") return "float32";
  if (st == "BF16") return "bfloat16";
  if (st == "F16") return "float16";
  if (st == "F64") return "float64";
  return "";
}

// The dtype transformers loads a folded directory as (from_pretrained's default, dtype "auto") is
// the input's: its `dtype` / `torch_dtype` is kept as it is. A config with neither makes
// transformers take the first floating tensor's dtype, which in a mixed output could be a folded
// one; so when the folded tensors' dtype differs from the other tensors' single floating dtype,
// that dtype is written (`torch_dtype` for a transformers 4 config or one without a version,
// which every version reads; `dtype` otherwise). `other`: dtype name -> tensors not rewritten.
void set_config_dtype(nlohmann::json& config, io::StDtype folded,
                      const std::map<std::string, size_t>& other) {
  if (config.contains("dtype") || config.contains("torch_dtype")) return;
  std::string load_as;
  for (const auto& [st, n] : other) {
    const std::string t = torch_dtype_name(st);
    if (t.empty()) continue;
    if (!load_as.empty() && load_as != t) return;  // the input itself is mixed: nothing to keep
    load_as = t;
  }
  if (load_as.empty() || load_as == torch_dtype_name(st_dtype_name(folded))) return;
  const auto v = config.find("transformers_version");
  const bool v4 = v == config.end() || !v->is_string() || v->get<std::string>().starts_with("4.");
  config[v4 ? "torch_dtype" : "dtype"] = load_as;
}

// o.values (a [rows, cols] matrix) replaced by W*[:, i] = g_i W[:, i]: the fp64 product, checked
// (check_folded_range, naming `tensor`) and handed to the writer as fp32, for F16/BF16 targets the
// round-to-odd carrier, so that the writer's final rounding equals one rounding of the product.
void fold_into(io::StTensorOut& o, const std::vector<double>& gain, FoldTarget target,
               std::string_view tensor) {
  std::vector<double> folded = fold_matrix(o.values, o.shape[0], o.shape[1], gain);
  check_folded_range(folded, target, tensor);
  round_folded(folded, target, o.values);
}

// A sentence-transformers Dense module's tensors with the final norm's gain folded into its
// weight's columns (W*[:, i] = g_i W[:, i], fp64, rounded once to `dtype`); the bias keeps its
// bytes. `file`: its model.safetensors (read_sentence_transformers checked its tensors).
std::vector<io::StTensorOut> fold_dense(const io::SafetensorsFile& file,
                                        const std::vector<double>& gain, io::StDtype dtype,
                                        FoldTarget target) {
  std::vector<io::StTensorOut> out;
  for (const io::StTensorInfo& t : file.tensors()) {
    if (t.name != "linear.weight") {
      out.push_back({t.name, t.dtype, t.shape, {}, file.data(t)});
      continue;
    }
    io::StTensorOut o{t.name, dtype, t.shape, io::st_to_fp32(t.dtype, file.data(t)), std::nullopt};
    fold_into(o, gain, target, file.name() + ":linear.weight");
    out.push_back(std::move(o));
  }
  return out;
}

}  // namespace

FoldReport fold_hf(const std::filesystem::path& in_dir, const std::filesystem::path& out_dir,
                   const FoldOptions& opt) {
  const std::filesystem::path inputs[] = {in_dir};
  io::check_output_dir(out_dir, inputs);  // before any work: a refused output costs nothing
  io::HfModelDir d = io::HfModelDir::open(in_dir);
  if (hf_folded_marker(d)) {  // (a marker other than "true" / "false" is refused)
    throw Error(
        fmt::format("{}: already folded ({} = \"true\" in the safetensors metadata); "
                    "refusing to fold twice",
                    in_dir.string(), kFoldedKey));
  }
  if (opt.requantize) throw Error("fold: --requantize applies to GGUF files only");
  if (opt.keep_tied_head) throw Error("fold: --keep-tied-head applies to GGUF files only");
  const io::StDtype fold_dtype = folded_st_dtype(opt.dtype);
  // The checkpoint must be one `generate` runs: the same checks, before computing anything.
  check_model_file(in_dir);
  nlohmann::json config = d.config();
  if (config.contains("quantization_config")) {
    // a gain folded into float8 weights would need them requantized (their scales with them)
    throw Error(
        fmt::format("{}/config.json: quantization_config: folding an FP8 checkpoint is "
                    "not supported (run it unfolded: its gains ride on x)",
                    in_dir.string()));
  }
  auto cls = config.value("architectures", nlohmann::json::array());
  const std::string hf_class = cls.is_array() && !cls.empty() && cls[0].is_string() ? cls[0] : "";
  const ArchDescription* arch = arch_by_hf_class(hf_class);
  // a base-model class (an embedding model's transformer): no LM head, names without "model."
  const bool headless = !arch && (arch = arch_by_hf_base_class(hf_class));
  if (!arch) {
    throw Error(fmt::format("{}/config.json: architectures '{}' is not supported", in_dir.string(),
                            hf_class));
  }
  if (!config.contains("num_hidden_layers") || !config["num_hidden_layers"].is_number_unsigned()) {
    throw Error(fmt::format("{}/config.json: num_hidden_layers missing or not a positive integer",
                            in_dir.string()));
  }
  const auto n_layer = config["num_hidden_layers"].get<uint64_t>();
  if (n_layer == 0 || n_layer > 4096) {
    throw Error(fmt::format("{}/config.json: num_hidden_layers = {} is out of range",
                            in_dir.string(), n_layer));
  }
  detail::FoldPlan plan = detail::make_fold_plan(*arch, static_cast<int>(n_layer));
  FoldReport rep;
  rep.arch = arch->name;
  auto hf = [&](const std::string& canon) {
    auto n = to_hf_name(*arch, canon);
    if (!n) throw Error(fmt::format("no Hugging Face name for '{}'", canon));
    if (headless && n->starts_with(kHfModelPrefix)) n->erase(0, kHfModelPrefix.size());
    return *n;
  };
  // An embedding model's modules (sentence-transformers): its pooling reads the final norm's
  // output, so that norm's gain folds only into the first Dense, where audit_pooled_norm says it
  // does; otherwise it is kept. The module folders are copied beside the folded transformer.
  std::optional<EmbeddingSpec> modules;
  bool final_gain_folds = false;
  if (headless) {
    modules = read_sentence_transformers(in_dir, config["hidden_size"].get<int>());
    final_gain_folds = modules && audit_pooled_norm(*modules).gain_folds;
    for (const NormSite& site : arch->final_norms) {
      std::erase_if(plan.consumer_to_norm, [&](const auto& c) { return c.second == site.norm; });
      if (!final_gain_folds) std::erase(plan.norms, site.norm);
    }
    if (final_gain_folds && arch->final_norms.size() != 1)
      throw Error(fmt::format("{}: internal: {} final norms", in_dir.string(), arch->name));
    if (final_gain_folds) {
      // the first Dense's weights get the gain: a folder another module reads too would apply
      // it twice
      const std::string& first = modules->dense_paths.at(0);
      if (std::count(modules->module_paths.begin(), modules->module_paths.end(), first) > 1) {
        throw Error(fmt::format(
            "{}/modules.json: the first Dense module's folder '{}' is another module's too; "
            "folding the final gain into it would apply the gain twice",
            in_dir.string(), first));
      }
    }
    if (modules) {
      // a module without files (Normalize, as older sentence-transformers versions and the Hub
      // leave it) has no folder to copy
      std::erase_if(modules->module_paths, [&](const std::string& p) {
        return !std::filesystem::is_directory(in_dir / p);
      });
    }
  }
  std::map<std::string, std::vector<double>> gains;  // canonical norm -> multipliers
  for (const auto& norm : plan.norms) {
    gains.emplace(
        norm, gain_multipliers(d.load_fp32(hf(norm)), opt.assume_gains.value_or(arch->hf_gains)));
  }
  const std::string head_hf = headless ? std::string() : hf(arch->head);
  std::vector<std::string> names = d.tensor_names();
  if (!headless && !d.find(head_hf)) {
    names.push_back(head_hf);
    rep.untied_head = true;
  }  // (a tied config with a different lm_head tensor was refused by load_model above)
  const FoldTarget target = fold_dtype == io::StDtype::F16    ? FoldTarget::kF16
                            : fold_dtype == io::StDtype::BF16 ? FoldTarget::kBF16
                                                              : FoldTarget::kF32;
  const size_t total = plan.consumer_to_norm.size();
  size_t done = 0;
  std::vector<io::StTensorOut> outs;
  std::map<std::string, size_t> folded_types, other_types;  // dtype name -> tensors
  for (const auto& name : names) {
    const bool is_new_head = rep.untied_head && name == head_hf;
    const io::SafetensorsFile* file = nullptr;
    const io::StTensorInfo* info = d.find(is_new_head ? hf(arch->tied_source) : name, &file);
    if (!info) throw Error(fmt::format("{}: missing tensor '{}'", in_dir.string(), name));
    auto canon = from_hf_name(*arch, headless ? std::string(kHfModelPrefix) + name : name);
    auto cit = canon ? plan.consumer_to_norm.find(*canon) : plan.consumer_to_norm.end();
    if (cit != plan.consumer_to_norm.end()) {
      // A rewritten tensor: the fp64 fold of its original values, rounded once to --dtype.
      io::StTensorOut o{name, fold_dtype, info->shape, d.load_fp32(info->name), std::nullopt};
      const auto& g = gains.at(cit->second);
      if (o.shape.size() != 2 || o.shape[1] != g.size()) {
        throw Error(fmt::format("{}: tensor '{}' has rows of {} elements but its norm has {}",
                                in_dir.string(), name, o.shape.empty() ? 0 : o.shape.back(),
                                g.size()));
      }
      fold_into(o, g, target, name);
      rep.tensors.push_back(
          {name, detail::tensor_kind(*canon), std::string(st_dtype_name(o.dtype)), {}});
      ++folded_types[rep.tensors.back().out_type];
      outs.push_back(std::move(o));
      if (opt.progress) opt.progress(++done, total);
    } else if (canon && gains.count(*canon)) {
      // A folded norm: its identity gain, in its own dtype (1 and 0 are exact in each).
      std::vector<float> id(info->n_elements(),
                            identity_gain(opt.assume_gains.value_or(arch->hf_gains)));
      outs.push_back({name, info->dtype, info->shape, std::move(id), std::nullopt});
      ++other_types[std::string(st_dtype_name(info->dtype))];
      rep.folded_norms.push_back(name);
    } else {
      // Every other tensor keeps its bytes (and dtype), read from the mapped input.
      outs.push_back({name, info->dtype, info->shape, {}, file->data(*info)});
      ++other_types[std::string(st_dtype_name(info->dtype))];
    }
  }
  set_config_dtype(config, fold_dtype, other_types);
  // The output always has its own (folded) head: tied to the embedding it would lose the gain.
  if (!headless) config["tie_word_embeddings"] = false;
  io::HfModuleFolders folders;
  std::optional<io::SafetensorsFile> dense0;  // the bias's bytes are read from it
  if (modules) {
    folders.folders = modules->module_paths;
    if (final_gain_folds) {
      const std::string file = modules->dense_paths.at(0) + "/model.safetensors";
      dense0.emplace(io::SafetensorsFile::open(in_dir / file));
      folders.rewritten.emplace(
          file, fold_dense(*dense0, gains.at(arch->final_norms[0].norm), fold_dtype, target));
      rep.tensors.push_back(
          {file + ":linear.weight", "dense0", std::string(st_dtype_name(fold_dtype)), {}});
    }
  }
  std::map<std::string, std::string> meta = d.metadata();
  meta["format"] = "pt";
  meta[std::string(kFoldedKey)] = "true";
  meta[std::string(kDtypesKey)] =
      nlohmann::json{{"folded", folded_types}, {"other", other_types}}.dump();
  io::write_hf_dir(out_dir, config, outs, meta, static_cast<int>(d.shards().size()), in_dir,
                   folders);
  return rep;
}

}  // namespace flashnorm
