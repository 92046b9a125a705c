// config.json's quantization_config as compressed-tensors writes it (transformers'
// CompressedTensorsConfig; compressed_tensors/quantization/quant_config.py, quant_scheme.py,
// quant_args.py): only the FP8 dynamic scheme (llm-compressor's FP8_DYNAMIC preset) is read, every
// other setting refused by name.
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "config_readers.h"
#include "flashnorm/error.h"

namespace flashnorm {
namespace {

using json = nlohmann::json;

[[noreturn]] void refuse(const std::string& where, const std::string& path,
                         const std::string& what) {
  throw Error(
      fmt::format("{}: quantization_config{}: {} (flashnorm reads compressed-tensors' FP8 "
                  "dynamic scheme only)",
                  where, path, what));
}

std::string show(const json& v) { return v.dump(); }

// Every key of `o` must be in `known`.
void only(const json& o, const std::string& where, const std::string& path,
          std::initializer_list<const char*> known) {
  for (const auto& [k, v] : o.items()) {
    bool ok = false;
    for (const char* n : known) ok = ok || k == n;
    if (!ok)
      refuse(where, path + "." + k, fmt::format("= {} is not a setting flashnorm knows", show(v)));
  }
}

// `o[key]` must equal `want` (absent counts as `absent_ok`).
void expect(const json& o, const std::string& where, const std::string& path, const char* key,
            const json& want, bool absent_ok = false) {
  const auto it = o.find(key);
  if (it == o.end()) {
    if (absent_ok) return;
    refuse(where, path + "." + key, fmt::format("is missing (expected {})", show(want)));
  }
  if (*it != want) {
    refuse(where, path + "." + key,
           fmt::format("= {} is not supported (only {})", show(*it), show(want)));
  }
}

// QuantizationArgs of 8-bit floats: symmetric, no groups or blocks; `strategy` and `dynamic` as
// given. observer and observer_kwargs are calibration settings (no effect on inference).
void float8_args(const json& a, const std::string& where, const std::string& path,
                 const char* strategy, bool dynamic) {
  if (!a.is_object()) refuse(where, path, fmt::format("= {} is not an object", show(a)));
  only(a, where, path,
       {"num_bits", "type", "symmetric", "group_size", "strategy", "dynamic", "actorder",
        "block_structure", "observer", "observer_kwargs", "scale_dtype", "zp_dtype"});
  expect(a, where, path, "num_bits", 8);
  expect(a, where, path, "type", "float");
  expect(a, where, path, "symmetric", true);
  expect(a, where, path, "strategy", strategy);
  expect(a, where, path, "dynamic", dynamic);
  for (const char* k : {"group_size", "actorder", "block_structure", "scale_dtype", "zp_dtype"})
    expect(a, where, path, k, nullptr, /*absent_ok=*/true);
}

}  // namespace

void read_compressed_tensors(const json& q, const std::string& where, ModelConfig& cfg) {
  if (!q.is_object()) refuse(where, "", fmt::format("= {} is not an object", show(q)));
  only(q, where, "",
       {"quant_method", "format", "quantization_status", "config_groups", "ignore",
        "kv_cache_scheme", "global_compression_ratio", "sparsity_config", "transform_config",
        "version", "moe_sparsity_config"});
  expect(q, where, "", "quant_method", "compressed-tensors");
  expect(q, where, "", "format", "float-quantized");
  expect(q, where, "", "quantization_status", "compressed");
  expect(q, where, "", "kv_cache_scheme", nullptr, /*absent_ok=*/true);
  expect(q, where, "", "transform_config", nullptr, /*absent_ok=*/true);
  expect(q, where, "", "moe_sparsity_config", nullptr, /*absent_ok=*/true);
  if (const auto sp = q.find("sparsity_config");
      sp != q.end() && !sp->is_null() && !(sp->is_object() && sp->empty())) {
    refuse(where, ".sparsity_config", fmt::format("= {} is not supported", show(*sp)));
  }
  // the LM head stays in its dtype (the scheme's targets are the decoder layers' Linear modules)
  expect(q, where, "", "ignore", json::array({"lm_head"}));
  const auto groups = q.find("config_groups");
  if (groups == q.end() || !groups->is_object() || groups->size() != 1) {
    refuse(where, ".config_groups", "must hold exactly one group");
  }
  const std::string gp = ".config_groups." + groups->begin().key();
  const json& g = groups->begin().value();
  if (!g.is_object()) refuse(where, gp, "is not an object");
  only(g, where, gp, {"targets", "weights", "input_activations", "output_activations", "format"});
  expect(g, where, gp, "targets", json::array({"Linear"}));
  expect(g, where, gp, "output_activations", nullptr, /*absent_ok=*/true);
  if (const auto f = g.find("format"); f != g.end() && !f->is_null() && *f != "float-quantized") {
    refuse(where, gp + ".format", fmt::format("= {} is not supported", show(*f)));
  }
  const auto w = g.find("weights");
  if (w == g.end()) refuse(where, gp + ".weights", "is missing");
  float8_args(*w, where, gp + ".weights", "channel", /*dynamic=*/false);
  const auto in = g.find("input_activations");
  if (in == g.end() || in->is_null()) {
    refuse(where, gp + ".input_activations",
           "is null (weight-only FP8 is not read: only dynamic per-token FP8 activations)");
  }
  float8_args(*in, where, gp + ".input_activations", "token", /*dynamic=*/true);
  cfg.fp8 = true;
}

}  // namespace flashnorm
