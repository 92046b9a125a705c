#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "flashnorm/error.h"
#include "flashnorm/fold/fold.h"
#include "flashnorm/io/atomic_file.h"
#include "flashnorm/io/safetensors.h"
#include "flashnorm/model/check.h"
#include "flashnorm/model/model.h"
#include "plan.h"

namespace flashnorm {

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
  // The checkpoint must be one `generate` runs: the same checks, before computing anything.
  check_model_file(in_dir);
  nlohmann::json config = d.config();
  auto cls = config.value("architectures", nlohmann::json::array());
  const std::string hf_class = cls.is_array() && !cls.empty() && cls[0].is_string() ? cls[0] : "";
  const ArchDescription* arch = arch_by_hf_class(hf_class);
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
    return *n;
  };
  std::map<std::string, std::vector<double>> gains;  // canonical norm -> multipliers
  for (const auto& norm : plan.norms) {
    gains.emplace(
        norm, gain_multipliers(d.load_fp32(hf(norm)), opt.assume_gains.value_or(arch->hf_gains)));
  }
  const std::string head_hf = hf(arch->head);
  std::vector<std::string> names = d.tensor_names();
  if (!d.find(head_hf)) {
    names.push_back(head_hf);
    rep.untied_head = true;
  }  // (a tied config with a different lm_head tensor was refused by load_model above)
  auto out_dtype = [&](io::StDtype own) {
    if (opt.dtype == io::GgmlType::F16) return io::StDtype::F16;
    if (opt.dtype == io::GgmlType::BF16) return io::StDtype::BF16;
    return own;
  };
  const size_t total = plan.consumer_to_norm.size();
  size_t done = 0;
  std::vector<io::StTensorOut> outs;
  for (const auto& name : names) {
    const bool is_new_head = rep.untied_head && name == head_hf;
    const io::StTensorInfo* info = d.find(is_new_head ? hf(arch->tied_source) : name);
    if (!info) throw Error(fmt::format("{}: missing tensor '{}'", in_dir.string(), name));
    io::StTensorOut o{name, out_dtype(info->dtype), info->shape, d.load_fp32(info->name)};
    auto canon = from_hf_name(*arch, name);
    auto cit = canon ? plan.consumer_to_norm.find(*canon) : plan.consumer_to_norm.end();
    if (cit != plan.consumer_to_norm.end()) {
      const auto& g = gains.at(cit->second);
      if (o.shape.size() != 2 || o.shape[1] != g.size()) {
        throw Error(fmt::format("{}: tensor '{}' has rows of {} elements but its norm has {}",
                                in_dir.string(), name, o.shape.empty() ? 0 : o.shape.back(),
                                g.size()));
      }
      std::vector<double> folded = fold_matrix(o.values, o.shape[0], o.shape[1], g);
      const FoldTarget target = o.dtype == io::StDtype::F16    ? FoldTarget::kF16
                                : o.dtype == io::StDtype::BF16 ? FoldTarget::kBF16
                                                               : FoldTarget::kF32;
      check_folded_range(folded, target, name);
      // Values are handed to the writer as fp32: for F16/BF16 targets the round-to-odd carrier, so
      // that the writer's final rounding equals one rounding of the fp64 product.
      round_folded(folded, target, o.values);
      rep.tensors.push_back(
          {name, detail::tensor_kind(*canon), std::string(st_dtype_name(o.dtype))});
      if (opt.progress) opt.progress(++done, total);
    } else if (canon && gains.count(*canon)) {
      std::fill(o.values.begin(), o.values.end(),
                identity_gain(opt.assume_gains.value_or(arch->hf_gains)));
      rep.folded_norms.push_back(name);
    }
    outs.push_back(std::move(o));
  }
  // The output always has its own (folded) head: tied to the embedding it would lose the gain.
  config["tie_word_embeddings"] = false;
  std::map<std::string, std::string> meta = d.metadata();
  meta["format"] = "pt";
  meta[std::string(kFoldedKey)] = "true";
  io::write_hf_dir(out_dir, config, outs, meta, static_cast<int>(d.shards().size()), in_dir);
  return rep;
}

}  // namespace flashnorm
