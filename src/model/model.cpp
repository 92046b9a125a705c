#include "flashnorm/model/model.h"

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>

#include "flashnorm/io/dequant.h"
#include "flashnorm/io/error.h"
#include "flashnorm/io/gguf.h"
#include "flashnorm/io/safetensors.h"

namespace flashnorm {
namespace fs = std::filesystem;

const Tensor& Model::get(std::string_view name) const {
  auto it = tensors.find(name);
  if (it == tensors.end()) {
    throw Error(fmt::format("{}: missing tensor '{}'", source.string(), name));
  }
  return it->second;
}

Tensor& Model::get(std::string_view name) {
  return const_cast<Tensor&>(static_cast<const Model*>(this)->get(name));
}

const Tensor& Model::head() const {
  return has(arch->head) ? get(arch->head) : get(arch->tied_source);
}

std::vector<double> effective_gain(const Tensor& norm, GainConvention c) {
  std::vector<double> g(norm.data.begin(), norm.data.end());
  if (c == GainConvention::OnePlus) {
    for (auto& v : g) v += 1.0;
  }
  return g;
}

namespace {

int as_int(uint64_t v, std::string_view key, const fs::path& src) {
  if (v == 0 || v > (1u << 24)) {
    throw Error(fmt::format("{}: {} = {} is out of range", src.string(), key, v));
  }
  return static_cast<int>(v);
}

// A float hyperparameter must be finite and inside [lo, hi] (lo excluded when open_lo): the
// message saying it is not, or nothing.
std::optional<std::string> out_of_range(double v, double lo, double hi, bool open_lo,
                                        std::string_view what) {
  if (std::isfinite(v) && v >= lo && !(open_lo && v == lo) && v <= hi) return std::nullopt;
  return fmt::format("{} = {} is not a finite value in {}{}, {}]", what, v, open_lo ? "(" : "[", lo,
                     hi);
}

// GGUF: the float at `key` (read as `v`) in range, else a FormatError at the key's offset.
void check_gguf_float(const io::GgufFile& f, const std::string& key, double v, double lo, double hi,
                      bool open_lo) {
  if (auto msg = out_of_range(v, lo, hi, open_lo, key)) {
    const io::GgufKv* kv = f.find(key);
    throw FormatError(f.name(), key, kv ? kv->offset : 0, *msg);
  }
}

Model load_gguf(const fs::path& path, bool with_data) {
  io::GgufFile f = io::GgufFile::open(path);
  Model m;
  m.source = path;
  m.cfg.arch = f.get_string("general.architecture");
  try {
    m.arch = &arch_by_name(m.cfg.arch);
  } catch (const FormatError&) {
    throw;
  } catch (const Error& e) {
    const io::GgufKv* kv = f.find("general.architecture");
    throw FormatError(f.name(), "general.architecture", kv ? kv->offset : 0, e.what());
  }
  const std::string p = m.cfg.arch + ".";
  auto req = [&](const std::string& k) { return as_int(f.get_uint(p + k), p + k, path); };
  m.cfg.n_layer = req("block_count");
  m.cfg.hidden = req("embedding_length");
  m.cfg.ffn = req("feed_forward_length");
  m.cfg.n_head = req("attention.head_count");
  m.cfg.n_head_kv =
      f.get_uint_opt(p + "attention.head_count_kv") ? req("attention.head_count_kv") : m.cfg.n_head;
  if (auto kl = f.get_uint_opt(p + "attention.key_length")) {
    m.cfg.head_dim = as_int(*kl, p + "attention.key_length", path);
  } else {
    m.cfg.head_dim = m.cfg.hidden / m.cfg.n_head;
  }
  m.cfg.context = f.get_uint_opt(p + "context_length") ? req("context_length") : 2048;
  m.cfg.rope_base = static_cast<float>(f.get_float_opt(p + "rope.freq_base").value_or(10000.0));
  m.cfg.eps = static_cast<float>(f.get_float(p + "attention.layer_norm_rms_epsilon"));
  // eps inside the square root: 0 is exact RMSNorm; a negative, huge or non-finite eps is not one
  check_gguf_float(f, p + "attention.layer_norm_rms_epsilon", m.cfg.eps, 0.0, 1.0, false);
  check_gguf_float(f, p + "rope.freq_base", m.cfg.rope_base, 1.0, 1e12, true);
  m.cfg.rope = m.arch->gguf_rope;
  m.cfg.gains = m.arch->gguf_gains;
  if (m.arch->hooks.sliding_window_pattern > 0) {
    m.cfg.sliding_window = req("attention.sliding_window");
    m.cfg.rope_local_base =
        static_cast<float>(f.get_float_opt(p + "rope.local_freq_base").value_or(10000.0));
    check_gguf_float(f, p + "rope.local_freq_base", m.cfg.rope_local_base, 1.0, 1e12, true);
  }
  m.cfg.folded = f.get_bool_or(std::string(kFoldedKey), false);
  for (const auto& t : f.tensors()) {
    if (!io::dequant_supported(t.type)) {
      throw Error(fmt::format("{}: tensor '{}' has type {}, which flashnorm cannot dequantize",
                              path.string(), t.name, io::ggml_type_name(uint32_t(t.type))));
    }
    Tensor x;
    x.shape.assign(t.dims.rbegin(), t.dims.rend());
    if (with_data) {
      x.data.resize(t.n_elements);
      io::dequantize(t.type, f.tensor_data(t), x.data);
    }
    m.tensors.emplace(t.name, std::move(x));
  }
  return m;
}

Model load_hf(const fs::path& dir, bool with_data) {
  io::HfModelDir d = io::HfModelDir::open(dir);
  const auto& c = d.config();
  Model m;
  m.source = dir;
  auto cls = c.value("architectures", nlohmann::json::array());
  std::string hf_class = cls.is_array() && !cls.empty() && cls[0].is_string() ? cls[0] : "";
  m.arch = arch_by_hf_class(hf_class);
  if (!m.arch) {
    throw Error(
        fmt::format("{}/config.json: architectures '{}' is not supported", dir.string(), hf_class));
  }
  m.cfg.arch = m.arch->name;
  auto get_int = [&](const char* k, std::optional<int> fallback = std::nullopt) {
    if (!c.contains(k) || c[k].is_null()) {
      if (fallback) return *fallback;
      throw Error(fmt::format("{}/config.json: missing field '{}'", dir.string(), k));
    }
    if (!c[k].is_number_unsigned()) {
      throw Error(
          fmt::format("{}/config.json: field '{}' is not a positive integer", dir.string(), k));
    }
    return as_int(c[k].get<uint64_t>(), k, dir);
  };
  m.cfg.n_layer = get_int("num_hidden_layers");
  m.cfg.hidden = get_int("hidden_size");
  m.cfg.ffn = get_int("intermediate_size");
  m.cfg.n_head = get_int("num_attention_heads");
  m.cfg.n_head_kv = get_int("num_key_value_heads", m.cfg.n_head);
  m.cfg.head_dim = get_int("head_dim", m.cfg.hidden / m.cfg.n_head);
  m.cfg.context = get_int("max_position_embeddings", 2048);
  m.cfg.rope_base = c.value("rope_theta", 10000.0f);
  m.cfg.eps = c.value("rms_norm_eps", 1e-6f);
  // config.json: a float field in range, else an Error naming the file and the field
  const auto check_cfg_float = [&](double v, double lo, double hi, bool open_lo, const char* key) {
    if (auto msg = out_of_range(v, lo, hi, open_lo, key))
      throw Error(fmt::format("{}/config.json: {}", dir.string(), *msg));
  };
  check_cfg_float(m.cfg.eps, 0.0, 1.0, false, "rms_norm_eps");
  check_cfg_float(m.cfg.rope_base, 1.0, 1e12, true, "rope_theta");
  m.cfg.rope = m.arch->hf_rope;
  m.cfg.gains = m.arch->hf_gains;
  if (m.arch->hooks.sliding_window_pattern > 0) {
    m.cfg.sliding_window = get_int("sliding_window");
    m.cfg.rope_local_base = c.value("rope_local_base_freq", 10000.0f);
    check_cfg_float(m.cfg.rope_local_base, 1.0, 1e12, true, "rope_local_base_freq");
  }
  if (m.arch->hooks.uses_query_pre_attn_scalar) {
    m.cfg.attn_scale = 1.0f / std::sqrt(float(get_int("query_pre_attn_scalar", m.cfg.head_dim)));
  }
  // tie_word_embeddings true: transformers uses the embedding as the head and ignores an lm_head
  // tensor, so this engine does too when it holds the same values, and refuses the file when not
  // (compared even without with_data: fold relies on this check).
  const auto tw = c.find("tie_word_embeddings");
  const bool tied_cfg = tw != c.end() && tw->is_boolean() && tw->get<bool>();
  std::optional<std::string> head_hf = to_hf_name(*m.arch, m.arch->head);
  std::optional<std::string> emb_hf = to_hf_name(*m.arch, m.arch->tied_source);
  const bool drop_head = tied_cfg && head_hf && emb_hf && d.find(*head_hf) && d.find(*emb_hf);
  if (drop_head && d.load_fp32(*head_hf) != d.load_fp32(*emb_hf)) {
    throw Error(
        fmt::format("{}/config.json: tie_word_embeddings is true but {} differs from {}; "
                    "refusing an ambiguous LM head",
                    dir.string(), *head_hf, *emb_hf));
  }
  auto md = d.metadata();
  auto it = md.find(std::string(kFoldedKey));
  m.cfg.folded = it != md.end() && it->second == "true";
  for (const auto& hf : d.tensor_names()) {
    auto canon = from_hf_name(*m.arch, hf);
    if (!canon) continue;                       // e.g. rotary inv_freq buffers some exporters keep
    if (drop_head && hf == *head_hf) continue;  // tied: the embedding is the head
    const io::SafetensorsFile* file = nullptr;
    const io::StTensorInfo* info = d.find(hf, &file);
    Tensor x;
    x.shape = info->shape;
    try {
      if (with_data) x.data = io::st_to_fp32(info->dtype, file->data(*info));
    } catch (const Error& e) {
      throw Error(fmt::format("{}: tensor '{}': {}", file->name(), hf, e.what()));
    }
    m.tensors.emplace(*canon, std::move(x));
  }
  return m;
}

void expect_shape(const Model& m, const std::string& name, std::vector<uint64_t> shape) {
  const Tensor& t = m.get(name);
  if (t.shape != shape) {
    throw Error(fmt::format("{}: tensor '{}' has shape [{}], expected [{}]", m.source.string(),
                            name, fmt::join(t.shape, ", "), fmt::join(shape, ", ")));
  }
}

void validate(Model& m) {
  ModelConfig& c = m.cfg;
  if (c.n_head % c.n_head_kv != 0) {
    throw Error(fmt::format("{}: head_count {} is not a multiple of head_count_kv {}",
                            m.source.string(), c.n_head, c.n_head_kv));
  }
  if (c.head_dim % 2 != 0) {
    throw Error(
        fmt::format("{}: head_dim {} is odd; RoPE needs pairs", m.source.string(), c.head_dim));
  }
  if (c.attn_scale == 0) c.attn_scale = 1.0f / std::sqrt(float(c.head_dim));
  const Tensor& emb = m.get(m.arch->tied_source);
  if (emb.shape.size() != 2 || emb.shape[1] != uint64_t(c.hidden)) {
    throw Error(fmt::format("{}: '{}' is not [vocab, {}]", m.source.string(), m.arch->tied_source,
                            c.hidden));
  }
  if (emb.shape[0] == 0 || emb.shape[0] > (1u << 24)) {
    throw Error(fmt::format("{}: '{}' has {} rows (the vocabulary size must be in 1 .. 2^24)",
                            m.source.string(), m.arch->tied_source, emb.shape[0]));
  }
  c.vocab = static_cast<int>(emb.shape[0]);
  c.tied_head = !m.has(m.arch->head);
  const uint64_t H = c.hidden, F = c.ffn, D = c.head_dim;
  const uint64_t q = uint64_t(c.n_head) * D, kv = uint64_t(c.n_head_kv) * D;
  const ArchHooks& hk = m.arch->hooks;
  for (int l = 0; l < c.n_layer; ++l) {
    auto n = [&](std::string_view pat) { return expand_layer(pat, l); };
    expect_shape(m, n("blk.{L}.attn_norm.weight"), {H});
    expect_shape(m, n("blk.{L}.attn_q.weight"), {q, H});
    expect_shape(m, n("blk.{L}.attn_k.weight"), {kv, H});
    expect_shape(m, n("blk.{L}.attn_v.weight"), {kv, H});
    expect_shape(m, n("blk.{L}.attn_output.weight"), {H, q});
    expect_shape(m, n("blk.{L}.ffn_norm.weight"), {H});
    expect_shape(m, n("blk.{L}.ffn_gate.weight"), {F, H});
    expect_shape(m, n("blk.{L}.ffn_up.weight"), {F, H});
    expect_shape(m, n("blk.{L}.ffn_down.weight"), {H, F});
    for (const auto& site : m.arch->layer_norms) {
      for (const auto& cons : site.consumers) {
        if (cons.renorm && !cons.renorm->empty()) expect_shape(m, n(*cons.renorm), {D});
      }
    }
    if (!hk.post_attn_norm.empty()) expect_shape(m, n(hk.post_attn_norm), {H});
    if (!hk.post_ffn_norm.empty()) expect_shape(m, n(hk.post_ffn_norm), {H});
  }
  expect_shape(m, "output_norm.weight", {H});
  if (!c.tied_head) expect_shape(m, m.arch->head, {uint64_t(c.vocab), H});
  // Norm gains are what folding multiplies into the weights: a NaN or infinite one would make the
  // folded model (and the engine) produce NaN without any error.
  for (const auto& [name, t] : m.tensors) {
    if (!name.ends_with("_norm.weight")) continue;
    for (size_t i = 0; i < t.data.size(); ++i) {
      if (!std::isfinite(t.data[i]))
        throw Error(fmt::format("{}: norm gain '{}' element {} is {}", m.source.string(), name, i,
                                t.data[i]));
    }
  }
}

}  // namespace

Model load_model(const fs::path& path, bool with_data) {
  Model m;
  try {
    m = fs::is_directory(path) ? load_hf(path, with_data) : load_gguf(path, with_data);
  } catch (const nlohmann::json::exception& e) {
    // A config.json field of the wrong type (nlohmann's message names the expected type).
    throw Error(fmt::format("{}/config.json: {}", path.string(), e.what()));
  }
  validate(m);
  return m;
}

}  // namespace flashnorm
