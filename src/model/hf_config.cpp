// Hugging Face config.json -> ModelConfig, an allow-list per architecture:
// src/model/config_readers.h.
#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "config_readers.h"
#include "flashnorm/error.h"

namespace flashnorm {
namespace {

using json = nlohmann::json;

// PretrainedConfig attributes and training metadata that do not change an inference forward pass
// (token ids, labels, dtype of the stored weights, dropout, initialization, caching, the
// tensor-parallel slicing of `pretraining_tp` which computes the same products).
const std::set<std::string, std::less<>> kMetadataKeys = {"_name_or_path",
                                                          "architectures",
                                                          "attention_dropout",
                                                          "bos_token_id",
                                                          "eos_token_id",
                                                          "pad_token_id",
                                                          "sep_token_id",
                                                          "decoder_start_token_id",
                                                          "chunk_size_feed_forward",
                                                          "dtype",
                                                          "torch_dtype",
                                                          "id2label",
                                                          "label2id",
                                                          "initializer_range",
                                                          "is_encoder_decoder",
                                                          "model_type",
                                                          "output_attentions",
                                                          "output_hidden_states",
                                                          "problem_type",
                                                          "return_dict",
                                                          "transformers_version",
                                                          "use_cache",
                                                          "tokenizer_class",
                                                          "pretraining_tp",
                                                          "finetuning_task",
                                                          "task_specific_params",
                                                          "torchscript",
                                                          "tie_encoder_decoder",
                                                          "max_length",
                                                          "min_length",
                                                          "do_sample",
                                                          "num_beams"};

// How one architecture's config.json spells what the engines implement.
struct Schema {
  double default_theta = 10000.0;  // rope_theta when the config has none
  double default_local_theta = 0;  // sliding layers' rope_theta default (0: no separate one)
  const char* act_key = "hidden_act";
  const char* act_value = "silu";
  enum class Sliding { kNone, kGemma3, kAllLayers, kQwen } sliding = Sliding::kNone;
  bool query_pre_attn_scalar = false;
  bool final_softcap = false;          // final_logit_softcapping is read (null: none)
  int default_head_dim = 0;            // head_dim when the config has none (0: hidden / heads)
  bool default_tied = false;           // tie_word_embeddings when the config has none
  int default_window = 4096;           // sliding_window when the key is absent (null: no window)
  int default_max_window_layers = 28;  // Qwen
  // keys accepted only with this value (the neutral one); any other value is refused by name
  std::map<std::string, json, std::less<>> neutral;
};

Schema schema_for(const ArchDescription& a) {
  Schema s;
  s.neutral = {{"attention_bias", false}, {"mlp_bias", false}, {"partial_rotary_factor", 1.0}};
  if (a.name == "llama") {
    // SmolLM2's config carries these two; transformers' LlamaConfig does not read them
    s.neutral["rope_interleaved"] = false;
    s.neutral["is_llama_config"] = true;
  } else if (a.name == "gemma3") {
    s.default_theta = 1e6, s.default_local_theta = 1e4;
    s.act_key = "hidden_activation", s.act_value = "gelu_pytorch_tanh";
    s.sliding = Schema::Sliding::kGemma3;
    s.query_pre_attn_scalar = true;
    s.default_head_dim = 256, s.default_tied = true;

    s.final_softcap = true;
    // attention-score soft-capping (Gemma 2's) is not implemented: only null
    s.neutral["attn_logit_softcapping"] = nullptr;
    // Gemma3TextConfig keeps hidden_activation; a legacy hidden_act beside it is not read
    s.neutral["hidden_act"] = "gelu_pytorch_tanh";
  } else if (a.name == "qwen3") {
    s.sliding = Schema::Sliding::kQwen;
    s.default_head_dim = 128;
  } else if (a.name == "qwen2") {
    s.sliding = Schema::Sliding::kQwen;  // Qwen2Config: head_dim = hidden / heads
  } else if (a.name == "mistral") {
    s.sliding = Schema::Sliding::kAllLayers;
  }
  return s;
}

// Reads config.json fields, remembering which keys it read (for the allow-list check).
class Reader {
 public:
  Reader(const json& c, const std::string& where) : c_(c), where_(where) {}

  const json* find(const std::string& k) {
    used_.insert(k);
    const auto it = c_.find(k);
    return it == c_.end() || it->is_null() ? nullptr : &*it;
  }
  int get_int(const std::string& k, std::optional<int> fallback = std::nullopt) {
    const json* v = find(k);
    if (!v) {
      if (fallback) return *fallback;
      throw Error(fmt::format("{}: missing field '{}'", where_, k));
    }
    if (!v->is_number_unsigned())
      throw Error(fmt::format("{}: field '{}' is not a positive integer", where_, k));
    return positive_int(v->get<uint64_t>(), k, where_);
  }
  double get_number(const json& obj, const std::string& path, const std::string& k,
                    double fallback) {
    const auto it = obj.find(k);
    if (it == obj.end()) return fallback;
    if (!it->is_number())
      throw Error(
          fmt::format("{}: field '{}' is {}, not a number", where_, path + k, it->type_name()));
    return it->get<double>();
  }
  double get_float(const std::string& k, double fallback) {
    used_.insert(k);
    return get_number(c_, "", k, fallback);
  }
  void check_range(double v, double lo, double hi, bool open_lo, const std::string& key) {
    if (auto msg = out_of_range(v, lo, hi, open_lo, key))
      throw Error(fmt::format("{}: {}", where_, *msg));
  }
  [[noreturn]] void refuse(const std::string& what) {
    throw Error(fmt::format("{}: {}", where_, what));
  }
  // The key is not in the file at all (null counts as present: "no window" is not "the default").
  bool absent(const std::string& k) {
    used_.insert(k);
    return !c_.contains(k);
  }
  const std::set<std::string, std::less<>>& used() const { return used_; }
  const std::string& where() const { return where_; }

 private:
  const json& c_;
  const std::string& where_;
  std::set<std::string, std::less<>> used_;
};

// A value as JSON for a message: control bytes and invalid UTF-8 escaped, cut at 80 characters.
std::string show(const json& v) {
  std::string d = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (d.size() > 80) d = d.substr(0, 77) + "...";
  return d;
}

// One RoPE parameter set ({"rope_type", "rope_theta", "factor", ...}) named `path` in messages.
RopeFrequencies parse_rope(Reader& r, const json& p, const std::string& path, double theta,
                           int context) {
  if (!p.is_object()) r.refuse(fmt::format("{} is {}, not an object", path, p.type_name()));
  RopeFrequencies f;
  f.base = r.get_number(p, path + ".", "rope_theta", theta);
  r.check_range(f.base, 1.0, 1e12, true, path + ".rope_theta");
  // rope_type, or the legacy spelling "type"; both present and different is ambiguous
  std::optional<std::string> types[2];
  const char* keys[2] = {"rope_type", "type"};
  for (int i = 0; i < 2; ++i) {
    if (const auto it = p.find(keys[i]); it != p.end()) {
      if (!it->is_string()) r.refuse(fmt::format("{}.{} is not a string", path, keys[i]));
      types[i] = it->get<std::string>();
    }
  }
  if (types[0] && types[1] && *types[0] != *types[1])
    r.refuse(fmt::format("{}.rope_type '{}' and {}.type '{}' disagree", path, *types[0], path,
                         *types[1]));
  const std::string type = types[0] ? *types[0] : types[1].value_or("default");
  std::set<std::string> allowed = {"rope_type", "type", "rope_theta"};
  RopeScaling& s = f.scaling;
  if (type == "linear" || type == "llama3") {
    s.kind = type == "linear" ? RopeScaling::Kind::kLinear : RopeScaling::Kind::kLlama3;
    if (!p.contains("factor")) r.refuse(fmt::format("{}.factor is missing", path));
    s.factor = r.get_number(p, path + ".", "factor", 1.0);
    r.check_range(s.factor, 0.0, 1e6, true, path + ".factor");
    allowed.insert("factor");
  }
  if (type == "llama3") {
    for (const char* k : {"low_freq_factor", "high_freq_factor"})
      if (!p.contains(k)) r.refuse(fmt::format("{}.{} is missing (rope_type llama3)", path, k));
    s.low_freq_factor = r.get_number(p, path + ".", "low_freq_factor", 1.0);
    s.high_freq_factor = r.get_number(p, path + ".", "high_freq_factor", 4.0);
    // transformers falls back to max_position_embeddings
    s.original_context = r.get_number(p, path + ".", "original_max_position_embeddings", context);
    r.check_range(s.low_freq_factor, 0.0, 1e6, true, path + ".low_freq_factor");
    r.check_range(s.high_freq_factor, s.low_freq_factor, 1e6, true, path + ".high_freq_factor");
    r.check_range(s.original_context, 1.0, 1e9, false, path + ".original_max_position_embeddings");
    allowed.insert({"low_freq_factor", "high_freq_factor", "original_max_position_embeddings"});
  } else if (type != "default" && type != "linear") {
    r.refuse(fmt::format("{}.rope_type '{}' is not supported (supported: default, linear, llama3)",
                         path, type));
  }
  for (const auto& [k, v] : p.items()) {
    if (allowed.count(k)) continue;
    // partial rotation is not implemented (only 1 is neutral); attention_factor is not read by
    // the default, linear and llama3 computations
    if (k == "partial_rotary_factor" && v.is_number() && v.get<double>() == 1.0) continue;
    if (k == "attention_factor") continue;
    r.refuse(fmt::format("{}.{} = {} is not supported for rope_type '{}'", path, k, show(v), type));
  }
  return f;
}

// rope_parameters (transformers 5: flat, or one set per layer type) or the legacy rope_theta +
// rope_scaling (+ Gemma 3's rope_local_base_freq for sliding layers).
void read_rope(Reader& r, const Schema& s, ModelConfig& cfg) {
  const json* params = r.find("rope_parameters");
  const json* theta = r.find("rope_theta");
  const json* scaling = r.find("rope_scaling");
  const json* local_theta = r.find("rope_local_base_freq");
  double legacy_theta = s.default_theta;
  if (theta) legacy_theta = r.get_float("rope_theta", s.default_theta);
  r.check_range(legacy_theta, 1.0, 1e12, true, "rope_theta");
  json legacy = scaling ? *scaling : json::object();
  if (scaling && !scaling->is_object()) r.refuse("rope_scaling is not an object");
  const double local_default = local_theta
                                   ? r.get_float("rope_local_base_freq", s.default_local_theta)
                                   : s.default_local_theta;
  if (local_theta) r.check_range(local_default, 1.0, 1e12, true, "rope_local_base_freq");
  if (params && scaling) r.refuse("both rope_parameters and rope_scaling are set");
  // Gemma 3: one parameter set per layer type (transformers ignores a flat set there, and reads a
  // per-layer-type one as flat keys elsewhere: both are refused rather than guessed)
  const bool per_type = s.sliding == Schema::Sliding::kGemma3;
  if (params && per_type && params->is_object() && !params->empty() &&
      !params->contains("full_attention") && !params->contains("sliding_attention")) {
    r.refuse("rope_parameters must be one set per layer type (full_attention, sliding_attention)");
  }
  if (params && per_type && params->is_object() && !params->empty()) {
    for (const auto& [k, v] : params->items()) {
      if (k != "full_attention" && k != "sliding_attention")
        r.refuse(
            fmt::format("rope_parameters.{} is not a layer type (full_attention, "
                        "sliding_attention)",
                        k));
    }
    const json empty = json::object();
    const auto sub = [&](const char* k) {
      return params->contains(k) && !(*params)[k].is_null() ? (*params)[k] : empty;
    };
    cfg.rope_global = parse_rope(r, sub("full_attention"), "rope_parameters.full_attention",
                                 legacy_theta, cfg.context);
    cfg.rope_local = parse_rope(r, sub("sliding_attention"), "rope_parameters.sliding_attention",
                                local_default > 0 ? local_default : legacy_theta, cfg.context);
  } else {
    const json& p = params ? *params : legacy;
    cfg.rope_global =
        parse_rope(r, p, params ? "rope_parameters" : "rope_scaling", legacy_theta, cfg.context);
    cfg.rope_local.base = local_default > 0 ? local_default : cfg.rope_global.base;
    if (s.default_local_theta == 0) cfg.rope_local = cfg.rope_global;
  }
  if (params && theta && cfg.rope_global.base != legacy_theta)
    r.refuse(fmt::format("rope_theta = {} disagrees with rope_parameters' {}", legacy_theta,
                         cfg.rope_global.base));
  r.check_range(cfg.rope_local.base, 1.0, 1e12, true, "rope_local_base_freq");
}

// The bias tensors: the description's, plus the attention_bias / mlp_bias groups where the
// architecture's config has those keys (elsewhere they stay neutral keys of the Schema: only
// false).
void read_biases(Reader& r, const ArchDescription& a, ModelConfig& cfg) {
  cfg.biases = a.biases;
  const std::pair<const char*, const std::vector<std::string>*> groups[] = {
      {"attention_bias", &a.attn_biases}, {"mlp_bias", &a.mlp_biases}};
  for (const auto& [key, group] : groups) {
    if (group->empty()) continue;
    const json* v = r.find(key);
    if (v && !v->is_boolean()) r.refuse(fmt::format("{} is not a boolean ({})", key, show(*v)));
    if (v && v->get<bool>()) cfg.biases.insert(cfg.biases.end(), group->begin(), group->end());
  }
}

// Which layers attend through a sliding window, and its size (transformers 5: Gemma3TextConfig,
// Qwen2Config, Qwen3Config, MistralConfig; an absent sliding_window is their default 4096, a null
// one none).
void read_sliding(Reader& r, const Schema& s, ModelConfig& cfg) {
  const int n = cfg.n_layer;
  cfg.layer_local.assign(size_t(n), 0);
  const bool window_absent = r.absent("sliding_window");
  const json* window = r.find("sliding_window");
  const bool has_window = window_absent ? s.sliding != Schema::Sliding::kNone : window != nullptr;
  const int size = window_absent ? s.default_window : window ? r.get_int("sliding_window") : 0;
  const json* types = r.find("layer_types");
  if (s.sliding == Schema::Sliding::kNone && window)
    r.refuse(fmt::format("sliding_window = {} is not supported", show(*window)));
  if (s.sliding == Schema::Sliding::kQwen) {
    const json* use = r.find("use_sliding_window");
    if (use && !use->is_boolean()) r.refuse("use_sliding_window is not a boolean");
    const bool on = use && use->get<bool>();
    int max_window_layers = s.default_max_window_layers;
    if (const json* m = r.find("max_window_layers")) {
      if (!m->is_number_unsigned() || m->get<uint64_t>() > uint64_t(n) + (1u << 20))
        r.refuse("max_window_layers is not a non-negative integer");
      max_window_layers = static_cast<int>(m->get<uint64_t>());
    }
    if (on && !has_window) r.refuse("use_sliding_window is true but sliding_window is null");
    for (int l = max_window_layers; l < n && on; ++l) cfg.layer_local[size_t(l)] = 1;
    if (!on && types) {
      for (const json& t : *types) {
        // transformers fails on these layers (their window is None)
        if (t == "sliding_attention")
          r.refuse("layer_types has sliding_attention layers but use_sliding_window is false");
      }
    }
  } else if (s.sliding == Schema::Sliding::kAllLayers) {
    cfg.layer_local.assign(size_t(n), has_window ? 1 : 0);
  } else if (s.sliding == Schema::Sliding::kGemma3) {
    r.find("_sliding_window_pattern");  // written by transformers itself, never read back
    int pattern = 6;
    if (!types && r.find("sliding_window_pattern")) pattern = r.get_int("sliding_window_pattern");
    for (int l = 0; l < n; ++l) cfg.layer_local[size_t(l)] = (l + 1) % pattern != 0;
  }
  if (types) {
    if (!types->is_array() || types->size() != size_t(n))
      r.refuse(fmt::format("layer_types must be an array of num_hidden_layers = {} strings", n));
    for (int l = 0; l < n; ++l) {
      const json& t = (*types)[size_t(l)];
      if (t == "full_attention") {
        cfg.layer_local[size_t(l)] = 0;
      } else if (t == "sliding_attention" && s.sliding != Schema::Sliding::kNone) {
        cfg.layer_local[size_t(l)] = 1;
      } else {
        r.refuse(fmt::format("layer_types[{}] = {} is not supported", l, show(t)));
      }
    }
  }
  bool any_local = false;
  for (uint8_t v : cfg.layer_local) any_local = any_local || v;
  if (any_local && !has_window)
    r.refuse("layer_types has sliding_attention layers but sliding_window is null");
  if (any_local) {
    cfg.sliding_window = size;
  } else {
    cfg.layer_local.clear();
  }
}

}  // namespace

bool hf_default_tied(const ArchDescription& a) { return schema_for(a).default_tied; }

void read_hf_config(const json& c, const ArchDescription& a, const std::string& where,
                    ModelConfig& cfg) {
  if (!c.is_object()) throw Error(fmt::format("{}: not a JSON object", where));
  const Schema s = schema_for(a);
  Reader r(c, where);
  cfg.n_layer = r.get_int("num_hidden_layers");
  cfg.hidden = r.get_int("hidden_size");
  cfg.ffn = r.get_int("intermediate_size");
  cfg.n_head = r.get_int("num_attention_heads");
  cfg.n_head_kv = r.get_int("num_key_value_heads", cfg.n_head);
  cfg.head_dim =
      r.get_int("head_dim", s.default_head_dim ? s.default_head_dim : cfg.hidden / cfg.n_head);
  cfg.context = r.get_int("max_position_embeddings", 2048);
  cfg.eps = static_cast<float>(r.get_float("rms_norm_eps", 1e-6));
  r.check_range(cfg.eps, 0.0, 1.0, false, "rms_norm_eps");
  read_rope(r, s, cfg);
  read_sliding(r, s, cfg);
  read_biases(r, a, cfg);
  if (s.query_pre_attn_scalar) {
    const double q = r.get_float("query_pre_attn_scalar", 256);  // Gemma3TextConfig's default
    r.check_range(q, 0.0, 1e9, true, "query_pre_attn_scalar");
    cfg.attn_scale = static_cast<float>(1.0 / std::sqrt(q));
  }
  if (s.final_softcap) {
    // transformers applies it whenever it is not null; a cap of 0 gives NaN logits there, and one
    // outside fp32's normal range cannot be held: only null or a positive normal fp32 number
    if (const json* v = r.find("final_logit_softcapping")) {
      const double d = v->is_number() ? v->get<double>() : 0.0;
      // (the range check first: a double beyond fp32's range must not be cast)
      const float cap = d > 0 && d <= std::numeric_limits<float>::max() ? static_cast<float>(d) : 0;
      if (!std::isnormal(cap))
        r.refuse(
            fmt::format("final_logit_softcapping = {} is not supported (only null or a "
                        "positive number in fp32's normal range)",
                        show(*v)));
      cfg.final_softcap = cap;
    }
  }
  if (a.name != "gemma3") {
    // gte-Qwen2's spelling (vLLM's hf_overrides too): false makes the attention bidirectional
    if (const json* v = r.find("is_causal")) {
      if (!v->is_boolean()) r.refuse("is_causal is not a boolean");
      cfg.causal = v->get<bool>();
    }
  } else {
    if (const json* v = r.find("use_bidirectional_attention")) {
      if (!v->is_boolean()) r.refuse("use_bidirectional_attention is not a boolean");
      cfg.causal = !v->get<bool>();
      // Gemma3TextConfig.__post_init__: a bidirectional model's window is sliding_window // 2 + 1
      // (keys less than that away on either side)
      if (!cfg.causal && cfg.sliding_window > 0) cfg.sliding_window = cfg.sliding_window / 2 + 1;
    }
  }
  // "swish" is transformers' other name for SiLU (ACT2FN)
  if (const json* act = r.find(s.act_key);
      act && *act != s.act_value && !(std::string(s.act_value) == "silu" && *act == "swish")) {
    r.refuse(fmt::format("{} = {} is not supported (the {} forward pass uses \"{}\")", s.act_key,
                         show(*act), a.name, s.act_value));
  }
  // read by the loader (tensors decide vocab and tying), checked there
  r.find("vocab_size"), r.find("tie_word_embeddings");
  if (const json* q = r.find("quantization_config")) read_compressed_tensors(*q, where, cfg);
  for (const auto& [k, v] : c.items()) {
    if (r.used().count(k) || kMetadataKeys.count(k)) continue;
    if (const auto it = s.neutral.find(k); it != s.neutral.end()) {
      if (v == it->second || v.is_null()) continue;
      r.refuse(fmt::format("{} = {} is not supported (only {})", k, show(v), show(it->second)));
    }
    if (v.is_null()) continue;  // transformers reads null as absent
    r.refuse(
        fmt::format("key '{}' = {} is not one flashnorm's {} reader knows; it may change the "
                    "forward pass, so the model is refused",
                    k, show(v), a.name));
  }
}

}  // namespace flashnorm
