#include "flashnorm/model/embedding.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "flashnorm/error.h"
#include "flashnorm/io/json_strict.h"
#include "flashnorm/io/safetensors.h"
#include "flashnorm/io/side_file.h"
#include "flashnorm/model/model.h"

namespace flashnorm {
namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

constexpr std::array<std::pair<std::string_view, Pooling>, 6> kPoolingNames = {{
    {"cls", Pooling::kCls},
    {"lasttoken", Pooling::kLastToken},
    {"mean", Pooling::kMean},
    {"mean_sqrt_len_tokens", Pooling::kMeanSqrtLen},
    {"weightedmean", Pooling::kWeightedMean},
    {"max", Pooling::kMax},
}};

// One JSON file of the directory, read strictly; std::nullopt when absent.
std::optional<json> read_json(const fs::path& path) {
  const std::optional<std::string> text = io::read_side_file(path);
  if (!text) return std::nullopt;
  json j = io::parse_json_strict(*text, path.string(), 0);
  if (!j.is_object() && !j.is_array()) {
    throw Error(fmt::format("{}: not a JSON object or list", path.string()));
  }
  return j;
}

[[noreturn]] void refuse(const fs::path& file, std::string_view field, std::string_view why) {
  throw Error(fmt::format("{}: {} {}", file.string(), field, why));
}

// The value of `key` when it is a string, else Error naming it.
std::string string_field(const json& j, const fs::path& file, std::string_view key) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_string()) refuse(file, key, "is not a string");
  return it->get<std::string>();
}

bool bool_field(const json& j, const fs::path& file, std::string_view key, bool fallback) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) refuse(file, key, "is not a boolean");
  return it->get<bool>();
}

int int_field(const json& j, const fs::path& file, std::string_view key) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number_unsigned() || it->get<uint64_t>() == 0 ||
      it->get<uint64_t>() > (1u << 24)) {
    refuse(file, key, "is not a positive integer");
  }
  return static_cast<int>(it->get<uint64_t>());
}

// Keys a module's config may hold at one value only (their meaning is the computation's).
void expect_value(const json& j, const fs::path& file, std::string_view key, const json& v) {
  const auto it = j.find(key);
  if (it != j.end() && !it->is_null() && *it != v) {
    refuse(file, key, fmt::format("= {} is not supported (only {})", it->dump(), v.dump()));
  }
}

// Refuses any key outside `known`.
void known_keys(const json& j, const fs::path& file,
                std::initializer_list<std::string_view> known) {
  for (const auto& [k, v] : j.items()) {
    if (std::find(known.begin(), known.end(), k) == known.end()) {
      refuse(file, fmt::format("'{}'", k), "is not a key flashnorm reads; refusing to ignore it");
    }
  }
}

Pooling read_pooling(const fs::path& dir, int hidden) {
  const fs::path file = dir / "config.json";
  const std::optional<json> j = read_json(file);
  if (!j || !j->is_object()) refuse(file, "config.json", "is missing or not a JSON object");
  known_keys(*j, file,
             {"embedding_dimension", "word_embedding_dimension", "pooling_mode", "include_prompt",
              "pooling_mode_cls_token", "pooling_mode_max_tokens", "pooling_mode_mean_tokens",
              "pooling_mode_mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens",
              "pooling_mode_lasttoken"});
  const std::string_view dim_key =
      j->contains("embedding_dimension") ? "embedding_dimension" : "word_embedding_dimension";
  if (int_field(*j, file, dim_key) != hidden) {
    refuse(file, dim_key, fmt::format("is not the model's hidden size {}", hidden));
  }
  if (!bool_field(*j, file, "include_prompt", true)) {
    refuse(file, "include_prompt",
           "false (prompt tokens left out of the pooling) is not supported");
  }
  std::vector<std::string> modes;
  if (const auto it = j->find("pooling_mode"); it != j->end()) {
    if (it->is_string()) {
      modes.push_back(it->get<std::string>());
    } else if (it->is_array()) {
      for (const auto& m : *it) {
        if (!m.is_string()) refuse(file, "pooling_mode", "holds a value that is not a string");
        modes.push_back(m.get<std::string>());
      }
    } else {
      refuse(file, "pooling_mode", "is neither a string nor a list");
    }
  } else {
    // sentence-transformers' legacy keys, in its order (pooling.py _LEGACY_POOLING_MODE_KWARGS);
    // none set means mean
    constexpr std::array<std::pair<std::string_view, std::string_view>, 6> legacy = {{
        {"pooling_mode_cls_token", "cls"},
        {"pooling_mode_max_tokens", "max"},
        {"pooling_mode_mean_tokens", "mean"},
        {"pooling_mode_mean_sqrt_len_tokens", "mean_sqrt_len_tokens"},
        {"pooling_mode_weightedmean_tokens", "weightedmean"},
        {"pooling_mode_lasttoken", "lasttoken"},
    }};
    for (const auto& [key, mode] : legacy) {
      if (bool_field(*j, file, key, false)) modes.emplace_back(mode);
    }
    if (modes.empty()) modes.emplace_back("mean");
  }
  if (modes.size() != 1) {
    refuse(file, "pooling_mode",
           fmt::format("combines {} modes; only one mode is supported", modes.size()));
  }
  for (const auto& [name, p] : kPoolingNames) {
    if (modes[0] == name) return p;
  }
  refuse(file, "pooling_mode", fmt::format("'{}' is not a pooling mode", modes[0]));
}

DenseLayer read_dense(const fs::path& dir, int in) {
  const fs::path file = dir / "config.json";
  const std::optional<json> j = read_json(file);
  if (!j || !j->is_object()) refuse(file, "config.json", "is missing or not a JSON object");
  known_keys(*j, file,
             {"in_features", "out_features", "bias", "activation_function", "module_input_name",
              "module_output_name", "use_residual"});
  DenseLayer d;
  d.in = int_field(*j, file, "in_features");
  d.out = int_field(*j, file, "out_features");
  if (d.in != in) refuse(file, "in_features", fmt::format("is not {}, the size it receives", in));
  const bool has_bias = bool_field(*j, file, "bias", true);
  if (bool_field(*j, file, "use_residual", false)) {
    refuse(file, "use_residual", "true is not supported");
  }
  expect_value(*j, file, "module_input_name", "sentence_embedding");
  expect_value(*j, file, "module_output_name", "sentence_embedding");
  // sentence-transformers' default activation is Tanh
  const std::string act = j->contains("activation_function")
                              ? string_field(*j, file, "activation_function")
                              : "torch.nn.modules.activation.Tanh";
  if (act == "torch.nn.modules.linear.Identity") {
    d.act = DenseLayer::Activation::kIdentity;
  } else if (act == "torch.nn.modules.activation.Tanh") {
    d.act = DenseLayer::Activation::kTanh;
  } else {
    refuse(file, "activation_function", fmt::format("'{}' is not supported (Identity, Tanh)", act));
  }
  const fs::path weights = dir / "model.safetensors";
  if (!fs::exists(weights)) {
    refuse(dir / "model.safetensors", "file", "is missing (pytorch_model.bin is not read)");
  }
  const io::SafetensorsFile st = io::SafetensorsFile::open(weights);
  for (const auto& t : st.tensors()) {
    if (t.name != "linear.weight" && !(has_bias && t.name == "linear.bias")) {
      refuse(weights, fmt::format("tensor '{}'", t.name), "is not used by the Dense module");
    }
  }
  auto load = [&](std::string_view name, std::vector<uint64_t> shape) {
    const io::StTensorInfo* t = st.find(name);
    if (!t) refuse(weights, fmt::format("tensor '{}'", name), "is missing");
    if (t->shape != shape) {
      refuse(weights, fmt::format("tensor '{}'", name),
             fmt::format("has shape [{}], expected [{}]", fmt::join(t->shape, ", "),
                         fmt::join(shape, ", ")));
    }
    std::vector<float> v;
    try {
      v = io::st_to_fp32(t->dtype, st.data(*t));
    } catch (const Error& e) {
      refuse(weights, fmt::format("tensor '{}'", name), e.what());
    }
    for (float x : v) {
      if (!std::isfinite(x)) refuse(weights, fmt::format("tensor '{}'", name), "is not finite");
    }
    return v;
  };
  d.weight = load("linear.weight", {uint64_t(d.out), uint64_t(d.in)});
  if (has_bias) d.bias = load("linear.bias", {uint64_t(d.out)});
  return d;
}

// sentence_bert_config.json: max_seq_length and do_lower_case (older files), or the Transformer
// module's settings as sentence-transformers 6 writes them (only the text feature extraction).
void read_transformer_settings(const fs::path& dir, EmbeddingSpec& s) {
  // without max_seq_length: the tokenizer's model_max_length, as sentence-transformers reads it
  // (transformers writes a huge float, int(1e30), for "no limit")
  if (const std::optional<json> t = read_json(dir / "tokenizer_config.json"); t && t->is_object()) {
    const auto it = t->find("model_max_length");
    if (it != t->end() && it->is_number_unsigned() && it->get<uint64_t>() > 0 &&
        it->get<uint64_t>() <= (1u << 24)) {
      s.max_tokens = static_cast<int>(it->get<uint64_t>());
    }
  }
  const fs::path file = dir / "sentence_bert_config.json";
  const std::optional<json> j = read_json(file);
  if (!j) return;
  if (!j->is_object()) refuse(file, "sentence_bert_config.json", "is not an object");
  known_keys(*j, file,
             {"max_seq_length", "do_lower_case", "transformer_task", "modality_config",
              "module_output_name"});
  if (const auto it = j->find("max_seq_length"); it != j->end() && !it->is_null()) {
    s.max_tokens = int_field(*j, file, "max_seq_length");
  }
  if (bool_field(*j, file, "do_lower_case", false)) {
    refuse(file, "do_lower_case", "true is not supported");
  }
  expect_value(*j, file, "transformer_task", "feature-extraction");
  expect_value(*j, file, "module_output_name", "token_embeddings");
  expect_value(
      *j, file, "modality_config",
      json{{"text", {{"method", "forward"}, {"method_output_name", "last_hidden_state"}}}});
}

// config_sentence_transformers.json: prompts and default_prompt_name (similarity_fn_name and the
// versions do not change an embedding).
void read_prompts(const fs::path& dir, EmbeddingSpec& s) {
  const fs::path file = dir / "config_sentence_transformers.json";
  const std::optional<json> j = read_json(file);
  if (!j) return;
  if (!j->is_object()) refuse(file, "config_sentence_transformers.json", "is not an object");
  known_keys(*j, file,
             {"__version__", "prompts", "default_prompt_name", "similarity_fn_name", "model_type"});
  expect_value(*j, file, "model_type", "SentenceTransformer");
  if (const auto it = j->find("prompts"); it != j->end() && !it->is_null()) {
    if (!it->is_object()) refuse(file, "prompts", "is not an object");
    for (const auto& [name, text] : it->items()) {
      if (!text.is_string()) refuse(file, fmt::format("prompts.{}", name), "is not a string");
      s.prompts.emplace(name, text.get<std::string>());
    }
  }
  if (const auto it = j->find("default_prompt_name"); it != j->end() && !it->is_null()) {
    s.default_prompt = string_field(*j, file, "default_prompt_name");
    if (!s.prompts.contains(s.default_prompt)) {
      refuse(file, "default_prompt_name", fmt::format("'{}' is not in prompts", s.default_prompt));
    }
  }
}

// The class name a modules.json type ends with, for sentence-transformers' own modules only.
std::string module_class(const json& m, const fs::path& file, size_t i) {
  const std::string field = fmt::format("modules[{}].type", i);
  const auto it = m.find("type");
  if (it == m.end() || !it->is_string()) refuse(file, field, "is not a string");
  const std::string type = it->get<std::string>();
  const size_t dot = type.rfind('.');
  if (!type.starts_with("sentence_transformers.") || dot == std::string::npos) {
    refuse(file, field, fmt::format("'{}' is not a sentence-transformers module", type));
  }
  return type.substr(dot + 1);
}

}  // namespace

std::string_view pooling_name(Pooling p) {
  for (const auto& [name, q] : kPoolingNames) {
    if (q == p) return name;
  }
  return "?";
}

std::optional<EmbeddingSpec> embedding_spec(const Model& m) {
  if (fs::is_directory(m.source)) return read_sentence_transformers(m.source, m.cfg.hidden);
  if (m.cfg.gguf_pooling < 0) return std::nullopt;
  EmbeddingSpec s;
  switch (m.cfg.gguf_pooling) {
    case 1:
      s.pooling = Pooling::kMean;
      break;
    case 2:
      s.pooling = Pooling::kCls;
      break;
    case 3:
      s.pooling = Pooling::kLastToken;
      break;
    default:
      throw Error(fmt::format("{}: {}.pooling_type = {} ({}) is not served (mean, cls, last)",
                              m.source.string(), m.cfg.arch, m.cfg.gguf_pooling,
                              m.cfg.gguf_pooling == 0 ? "none: token embeddings" : "rank"));
  }
  s.normalize = true;
  return s;
}

PooledNormAudit audit_pooled_norm(const EmbeddingSpec& s) {
  PooledNormAudit a;
  a.gain_folds = !s.dense.empty() && s.pooling != Pooling::kMax;
  if (s.pooling != Pooling::kCls && s.pooling != Pooling::kLastToken) {
    a.reason = fmt::format("{} pooling mixes rows of different rstd", pooling_name(s.pooling));
    return a;
  }
  for (size_t i = 0; i < s.dense.size(); ++i) {
    if (!s.dense[i].bias.empty() || s.dense[i].act != DenseLayer::Activation::kIdentity) {
      a.reason = fmt::format("Dense layer {} has a {}", i,
                             s.dense[i].bias.empty() ? "Tanh activation" : "bias");
      return a;
    }
  }
  if (!s.normalize) {
    a.reason = "no L2 normalization follows";
    return a;
  }
  a.rstd_cancels = true;
  a.reason = fmt::format("{} pooling, {} bias-free linear Dense layer(s), then L2 normalization",
                         pooling_name(s.pooling), s.dense.size());
  return a;
}

std::optional<EmbeddingSpec> read_sentence_transformers(const fs::path& dir, int hidden) {
  const fs::path file = dir / "modules.json";
  const std::optional<json> modules = read_json(file);
  if (!modules) return std::nullopt;
  if (!modules->is_array()) refuse(file, "modules.json", "is not a list");
  EmbeddingSpec s;
  enum class Stage { kTransformer, kPooling, kDense, kDone } stage = Stage::kTransformer;
  int width = hidden;
  std::set<std::string> names;
  for (size_t i = 0; i < modules->size(); ++i) {
    const json& m = (*modules)[i];
    if (!m.is_object()) refuse(file, fmt::format("modules[{}]", i), "is not an object");
    const std::string cls = module_class(m, file, i);
    // sentence-transformers keys its modules by name: a repeated one would drop a module there
    if (!names.insert(string_field(m, file, "name")).second) {
      refuse(file, fmt::format("modules[{}].name", i), "repeats another module's name");
    }
    const std::string path = string_field(m, file, "path");
    const fs::path sub = dir / path;
    if (path.find("..") != std::string::npos || fs::path(path).is_absolute()) {
      refuse(file, fmt::format("modules[{}].path", i), "leaves the model directory");
    }
    if (cls == "Transformer" && stage == Stage::kTransformer) {
      if (!path.empty()) {
        refuse(file, fmt::format("modules[{}].path", i),
               "is not \"\" (the transformer must be the directory's own model)");
      }
      stage = Stage::kPooling;
    } else if (cls == "Pooling" && stage == Stage::kPooling) {
      s.pooling = read_pooling(sub, hidden);
      if (!path.empty()) s.module_paths.push_back(path);
      stage = Stage::kDense;
    } else if (cls == "Dense" && stage == Stage::kDense) {
      s.dense.push_back(read_dense(sub, width));
      if (!path.empty()) s.module_paths.push_back(path);
      s.dense_paths.push_back(path);
      width = s.dense.back().out;
    } else if (cls == "Normalize" && stage == Stage::kDense) {
      if (const std::optional<json> j = read_json(sub / "config.json")) {
        if (!j->is_object()) refuse(sub / "config.json", "config.json", "is not an object");
        known_keys(*j, sub / "config.json", {"module_input_name", "module_output_name"});
        expect_value(*j, sub / "config.json", "module_input_name", "sentence_embedding");
        expect_value(*j, sub / "config.json", "module_output_name", "sentence_embedding");
      }
      s.normalize = true;
      if (!path.empty()) s.module_paths.push_back(path);
      stage = Stage::kDone;
    } else {
      refuse(
          file, fmt::format("modules[{}].type", i),
          fmt::format("{} is not supported here (Transformer, Pooling, Dense..., Normalize)", cls));
    }
  }
  if (stage == Stage::kTransformer || stage == Stage::kPooling) {
    refuse(file, "modules", "lack a Transformer followed by a Pooling module");
  }
  read_transformer_settings(dir, s);
  read_prompts(dir, s);
  for (const char* f : {"modules.json", "sentence_bert_config.json",
                        "config_sentence_transformers.json", "tokenizer_config.json"}) {
    s.files.push_back(dir / f);
  }
  for (const json& m : *modules) {
    const fs::path sub = dir / m["path"].get<std::string>();
    if (m["path"].get<std::string>().empty()) continue;
    for (const char* f : {"config.json", "model.safetensors"}) s.files.push_back(sub / f);
  }
  return s;
}

}  // namespace flashnorm
