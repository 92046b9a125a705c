// GGUF "<arch>.*" keys -> ModelConfig, an allow-list: src/model/config_readers.h.
#include <fmt/format.h>

#include <cmath>
#include <set>

#include "config_readers.h"
#include "flashnorm/error.h"
#include "flashnorm/io/gguf.h"

namespace flashnorm {
namespace {

// The FormatError for `key` (its byte offset from the file).
[[noreturn]] void refuse_key(const io::GgufFile& f, const std::string& key,
                             const std::string& why) {
  const io::GgufKv* kv = f.find(key);
  throw FormatError(f.name(), key, kv ? kv->offset : 0, why);
}

// The float at `key` in range, else a FormatError at the key's offset.
void check_float(const io::GgufFile& f, const std::string& key, double v, double lo, double hi,
                 bool open_lo) {
  if (auto msg = out_of_range(v, lo, hi, open_lo, key)) refuse_key(f, key, *msg);
}

}  // namespace

std::optional<std::string> out_of_range(double v, double lo, double hi, bool open_lo,
                                        std::string_view what) {
  if (std::isfinite(v) && v >= lo && !(open_lo && v == lo) && v <= hi) return std::nullopt;
  return fmt::format("{} = {} is not a finite value in {}{}, {}]", what, v, open_lo ? "(" : "[", lo,
                     hi);
}

int positive_int(uint64_t v, std::string_view key, std::string_view src) {
  if (v == 0 || v > (1u << 24))
    throw Error(fmt::format("{}: {} = {} is out of range", src, key, v));
  return static_cast<int>(v);
}

void read_gguf_config(const io::GgufFile& f, const ArchDescription& a, ModelConfig& cfg) {
  const std::string p = cfg.arch + ".";
  std::set<std::string, std::less<>> used;
  const auto key = [&](const char* k) { return *used.insert(p + k).first; };
  const auto req = [&](const char* k) {
    const std::string& name = key(k);
    return positive_int(f.get_uint(name), name, f.name());
  };
  const auto opt = [&](const char* k) -> std::optional<int> {
    const std::string& name = key(k);
    if (!f.get_uint_opt(name)) return std::nullopt;
    return positive_int(*f.get_uint_opt(name), name, f.name());
  };
  cfg.n_layer = req("block_count");
  cfg.hidden = req("embedding_length");
  cfg.ffn = req("feed_forward_length");
  cfg.n_head = req("attention.head_count");
  cfg.n_head_kv = opt("attention.head_count_kv").value_or(cfg.n_head);
  cfg.head_dim = opt("attention.key_length").value_or(cfg.hidden / cfg.n_head);
  // values that must agree with the engines' single head size (no partial rotary, v heads as k)
  for (const char* k : {"attention.value_length", "rope.dimension_count"}) {
    if (auto v = opt(k); v && *v != cfg.head_dim) {
      refuse_key(f, p + k,
                 fmt::format("{} differs from the head size {}: not supported", *v, cfg.head_dim));
    }
  }
  cfg.context = opt("context_length").value_or(2048);
  cfg.eps = static_cast<float>(f.get_float(key("attention.layer_norm_rms_epsilon")));
  // eps inside the square root: 0 is exact RMSNorm; a negative, huge or non-finite eps is not one
  check_float(f, p + "attention.layer_norm_rms_epsilon", cfg.eps, 0.0, 1.0, false);
  cfg.rope_global.base = f.get_float_opt(key("rope.freq_base")).value_or(10000.0);
  check_float(f, p + "rope.freq_base", cfg.rope_global.base, 1.0, 1e12, true);
  // RoPE scaling: "none" or "linear" (rope.scaling.factor); llama.cpp writes Llama 3's scaling as
  // a rope_freqs tensor, which the tensor check refuses by name.
  if (auto type = f.get_string_opt(key("rope.scaling.type")); type && *type != "none") {
    if (*type != "linear") {
      refuse_key(f, p + "rope.scaling.type",
                 fmt::format("'{}' is not supported (supported: none, linear)", *type));
    }
    cfg.rope_global.scaling.kind = RopeScaling::Kind::kLinear;
    cfg.rope_global.scaling.factor = f.get_float(key("rope.scaling.factor"));
    check_float(f, p + "rope.scaling.factor", cfg.rope_global.scaling.factor, 0.0, 1e6, true);
  } else if (auto factor = f.get_float_opt(key("rope.scaling.factor")); factor && *factor != 1.0) {
    refuse_key(f, p + "rope.scaling.factor", "set without rope.scaling.type linear");
  }
  // metadata of the scaling that does not change the frequencies
  key("rope.scaling.original_context_length"), key("rope.scaling.finetuned");
  cfg.rope_local = cfg.rope_global;
  if (a.hooks.sliding_window_pattern > 0) {
    cfg.sliding_window = req("attention.sliding_window");
    cfg.rope_local = {};
    cfg.rope_local.base = f.get_float_opt(key("rope.local_freq_base")).value_or(10000.0);
    check_float(f, p + "rope.local_freq_base", cfg.rope_local.base, 1.0, 1e12, true);
    const int pattern =
        opt("attention.sliding_window_pattern").value_or(a.hooks.sliding_window_pattern);
    cfg.layer_local.resize(size_t(cfg.n_layer));
    for (int l = 0; l < cfg.n_layer; ++l) cfg.layer_local[size_t(l)] = (l + 1) % pattern != 0;
  }
  // Gemma 3 27B (62 layers) scales attention by 1/sqrt(hidden / heads) = 1/sqrt(168), not by
  // 1/sqrt(head_dim): its query_pre_attn_scalar, which llama.cpp's gemma3 loader hard-codes by
  // model size since GGUF has no key for it.
  if (a.hooks.uses_query_pre_attn_scalar && cfg.n_layer == 62) {
    cfg.attn_scale = static_cast<float>(1.0 / std::sqrt(double(cfg.hidden / cfg.n_head)));
  }
  key("vocab_size");  // checked against the embedding by the loader
  // embedding models (llama.cpp's LLM_KV_POOLING_TYPE, LLM_KV_ATTENTION_CAUSAL)
  if (auto pt = f.get_uint_opt(key("pooling_type"))) {
    if (*pt > 4) refuse_key(f, p + "pooling_type", fmt::format("{} is not a pooling type", *pt));
    cfg.gguf_pooling = static_cast<int>(*pt);
  }
  cfg.causal = f.get_bool_or(key("attention.causal"), true);
  // llama.cpp loads these biases when present: each one layer 0 has is then needed in every layer
  cfg.biases = a.biases;
  for (const auto* group : {&a.attn_biases, &a.mlp_biases}) {
    for (const std::string& b : *group) {
      if (f.find_tensor(expand_layer(b, 0))) cfg.biases.push_back(b);
    }
  }
  // Every other "<arch>." key changes the computation somewhere in llama.cpp (expert counts,
  // soft-capping, attention or logit scales, partial rotary sections, ...): refused by name.
  for (const auto& kv : f.kvs()) {
    if (kv.key.starts_with(p) && !used.count(kv.key)) {
      throw FormatError(f.name(), kv.key, kv.offset,
                        fmt::format("not a key the {} forward pass implements; computing without "
                                    "it could be a different model, so the file is refused",
                                    a.name));
    }
  }
}

}  // namespace flashnorm
