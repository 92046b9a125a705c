#include "flashnorm/model/model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "config_readers.h"
#include "flashnorm/error.h"
#include "flashnorm/io/dequant.h"
#include "flashnorm/io/gguf.h"
#include "flashnorm/io/safetensors.h"
#include "flashnorm/kernels/cpu/quant_matmul.h"

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

namespace {

// The layer index of a name "<prefix><digits>.<rest>" ("blk.", "model.layers."), if it is one.
std::optional<int> layer_index(std::string_view name, std::string_view prefix) {
  if (!name.starts_with(prefix)) return std::nullopt;
  name.remove_prefix(prefix.size());
  const size_t dot = name.find('.');
  if (dot == 0 || dot == std::string_view::npos || dot > 6) return std::nullopt;
  int v = 0;
  for (char c : name.substr(0, dot)) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

// Refuses a tensor the forward pass does not use (`name` as the file spells it): computing
// without it would silently be a different model than the file describes.
[[noreturn]] void refuse_unused(const std::string& src, const std::string& name,
                                std::string_view arch, std::optional<int> layer, int n_layer,
                                std::string_view layers_key) {
  if (name.ends_with(".bias")) {
    throw Error(fmt::format(
        "{}: tensor '{}' is a bias that the {} model does not declare (config.json: "
        "attention_bias / mlp_bias; GGUF: the biases layer 0 has); refusing to compute without it",
        src, name, arch));
  }
  if (layer && *layer >= n_layer) {
    throw Error(fmt::format(
        "{}: tensor '{}' belongs to layer {}, but {} = {}: no layer owns it (refusing to compute "
        "without it)",
        src, name, *layer, layers_key, n_layer));
  }
  throw Error(fmt::format(
      "{}: tensor '{}' is not used by the {} forward pass (refusing to compute without it)", src,
      name, arch));
}

// The name a canonical tensor has in the model's file (the HF name for a directory).
std::string file_name_of(const Model& m, bool hf, const std::string& canonical) {
  if (!hf) return canonical;
  std::string name = to_hf_name(*m.arch, canonical).value_or(canonical);
  if (m.cfg.headless && name.starts_with(kHfModelPrefix)) name.erase(0, kHfModelPrefix.size());
  return name;
}

// Throws the error for a non-finite element `v` at flat index `i` of a tensor.
[[noreturn]] void refuse_non_finite(const Model& m, bool hf, const std::string& canonical,
                                    uint64_t i, float v) {
  throw Error(fmt::format("{}: {} '{}' element {} is {}; every weight must be finite",
                          m.source.string(),
                          canonical.ends_with("_norm.weight") ? "norm gain" : "tensor",
                          file_name_of(m, hf, canonical), i, v));
}

// Checks `v`, the elements [base, base + v.size()) of a tensor.
void check_finite_span(const Model& m, bool hf, const std::string& canonical, uint64_t base,
                       std::span<const float> v) {
  const auto bad = std::find_if(v.begin(), v.end(), [](float x) { return !std::isfinite(x); });
  if (bad != v.end()) refuse_non_finite(m, hf, canonical, base + (bad - v.begin()), *bad);
}

Model load_gguf(const fs::path& path, bool with_data, WeightStorage storage) {
  auto file = std::make_shared<io::GgufFile>(io::GgufFile::open(path));
  const io::GgufFile& f = *file;
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
  read_gguf_config(f, *m.arch, m.cfg);
  m.cfg.rope = m.arch->gguf_rope;
  m.cfg.gains = m.arch->gguf_gains;
  m.cfg.folded = f.get_bool_or(std::string(kFoldedKey), false);
  m.cfg.final_norm_kept = f.get_bool_or(std::string(kFinalNormKeptKey), false);
  for (const auto& t : f.tensors()) {
    if (!io::dequant_supported(t.type)) {
      throw Error(fmt::format("{}: tensor '{}' has type {}, which flashnorm cannot dequantize",
                              path.string(), t.name, io::ggml_type_name(uint32_t(t.type))));
    }
    Tensor x;
    x.shape.assign(t.dims.rbegin(), t.dims.rend());
    x.type = t.type;
    if (storage == WeightStorage::kNative && t.dims.size() == 2) {
      if (!kernels::cpu::quant_matmul_supported(t.type)) {
        throw Error(fmt::format(
            "{}: tensor '{}' has type {}, which --weights native cannot compute from (use "
            "--weights f32)",
            path.string(), t.name, io::ggml_type_name(uint32_t(t.type))));
      }
      x.raw = f.tensor_data(t);
      m.file = file;
    } else if (with_data) {
      x.data.resize(t.n_elements);
      io::dequantize(t.type, f.tensor_data(t), x.data);
    }
    m.tensors.emplace(t.name, std::move(x));
  }
  // The vocabulary size the header states must be the embedding's rows.
  const std::string vk = m.cfg.arch + ".vocab_size";
  if (auto v = f.get_uint_opt(vk); v && m.has(m.arch->tied_source) &&
                                   !m.get(m.arch->tied_source).shape.empty() &&
                                   m.get(m.arch->tied_source).shape[0] != *v) {
    const io::GgufKv* kv = f.find(vk);
    throw FormatError(f.name(), vk, kv ? kv->offset : 0,
                      fmt::format("{} but '{}' has {} rows", *v, m.arch->tied_source,
                                  m.get(m.arch->tied_source).shape[0]));
  }
  return m;
}

// A decoder layer's projection (q, k, v, o, gate, up, down weights): what compressed-tensors' FP8
// scheme quantizes.
bool is_layer_projection(const std::string& canonical) {
  if (!canonical.starts_with("blk.") || !canonical.ends_with(".weight")) return false;
  for (const char* k : {".attn_q.", ".attn_k.", ".attn_v.", ".attn_output.", ".ffn_gate.",
                        ".ffn_up.", ".ffn_down."}) {
    if (canonical.find(k) != std::string::npos) return true;
  }
  return false;
}

// W[n, :] = fp8 values * weight_scale[n] (fp32 products, as transformers decompresses them), the
// scale read from `hf`'s sibling "<name>.weight_scale" ([N, 1] or [N], any float dtype).
void scale_fp8_rows(const io::HfModelDir& d, const std::string& hf, Tensor& x, bool with_data) {
  const std::string name = hf.substr(0, hf.size() - 6) + "weight_scale";
  const io::SafetensorsFile* file = nullptr;
  const io::StTensorInfo* s = d.find(name, &file);
  if (!s) throw Error(fmt::format("its scale '{}' is missing", name));
  const uint64_t rows = x.shape.empty() ? 0 : x.shape[0];
  if (x.shape.size() != 2 ||
      !(s->shape == std::vector<uint64_t>{rows, 1} || s->shape == std::vector<uint64_t>{rows})) {
    throw Error(fmt::format("its scale '{}' has shape [{}], expected [{}, 1] (one per row)", name,
                            fmt::join(s->shape, ", "), rows));
  }
  const std::vector<float> scale =
      io::st_to_fp32(s->dtype, with_data ? file->data(*s) : std::span<const uint8_t>());
  if (!with_data) return;
  const size_t cols = x.shape[1];
  for (size_t r = 0; r < rows; ++r) {
    if (!std::isfinite(scale[r]) || scale[r] < 0)
      throw Error(fmt::format("its scale '{}' row {} is {}", name, r, scale[r]));
    for (size_t c = 0; c < cols; ++c) x.data[r * cols + c] *= scale[r];
  }
}

Model load_hf(const fs::path& dir, bool with_data) {
  io::HfModelDir d = io::HfModelDir::open(dir);
  const auto& c = d.config();
  Model m;
  m.source = dir;
  auto cls = c.value("architectures", nlohmann::json::array());
  std::string hf_class = cls.is_array() && !cls.empty() && cls[0].is_string() ? cls[0] : "";
  m.arch = arch_by_hf_class(hf_class);
  if (!m.arch && (m.arch = arch_by_hf_base_class(hf_class))) m.cfg.headless = true;
  if (!m.arch) {
    throw Error(
        fmt::format("{}/config.json: architectures '{}' is not supported", dir.string(), hf_class));
  }
  m.cfg.arch = m.arch->name;
  read_hf_config(c, *m.arch, dir.string() + "/config.json", m.cfg);
  m.cfg.rope = m.arch->hf_rope;
  m.cfg.gains = m.arch->hf_gains;
  std::optional<int> vocab_size;
  if (c.contains("vocab_size") && !c["vocab_size"].is_null()) {
    if (!c["vocab_size"].is_number_unsigned())
      throw Error(fmt::format("{}/config.json: field 'vocab_size' is not a positive integer",
                              dir.string()));
    vocab_size =
        positive_int(c["vocab_size"].get<uint64_t>(), "vocab_size", dir.string() + "/config.json");
  }
  // tie_word_embeddings true: transformers uses the embedding as the head and ignores an lm_head
  // tensor, so this engine does too when it holds the same values, and refuses the file when not
  // (compared even without with_data: fold relies on this check).
  const auto tw = c.find("tie_word_embeddings");
  if (tw != c.end() && !tw->is_boolean() && !tw->is_null()) {
    // e.g. the string "true" (truthy in Python): guessing could pick a different LM head
    throw Error(fmt::format("{}/config.json: field 'tie_word_embeddings' is not a boolean ({})",
                            dir.string(), tw->type_name()));
  }
  const bool tied_cfg =
      tw != c.end() && tw->is_boolean() ? tw->get<bool>() : hf_default_tied(*m.arch);
  // a base-model class: no LM head, names without "model."
  auto file_name = [&](const std::string& canonical) -> std::optional<std::string> {
    if (!m.cfg.headless) return to_hf_name(*m.arch, canonical);
    return std::optional<std::string>(file_name_of(m, true, canonical));
  };
  std::optional<std::string> head_hf =
      m.cfg.headless ? std::nullopt : to_hf_name(*m.arch, m.arch->head);
  std::optional<std::string> emb_hf = file_name(m.arch->tied_source);
  const bool drop_head = tied_cfg && head_hf && emb_hf && d.find(*head_hf) && d.find(*emb_hf);
  if (!tied_cfg && head_hf && !d.find(*head_hf)) {
    // transformers would build the head it lacks from random numbers
    throw Error(fmt::format("{}/config.json: tie_word_embeddings is {} but there is no {}",
                            dir.string(), tw != c.end() ? "false" : "false (the default)",
                            *head_hf));
  }
  if (drop_head && d.load_fp32(*head_hf) != d.load_fp32(*emb_hf)) {
    throw Error(
        fmt::format("{}/config.json: tie_word_embeddings is true but {} differs from {}; "
                    "refusing an ambiguous LM head",
                    dir.string(), *head_hf, *emb_hf));
  }
  // The vocabulary size the config states must be the embedding's (transformers would refuse
  // to load the weights otherwise).
  if (const io::StTensorInfo* e = emb_hf ? d.find(*emb_hf) : nullptr;
      vocab_size && e && e->shape.size() == 2 && e->shape[0] != uint64_t(*vocab_size)) {
    throw Error(fmt::format("{}/config.json: vocab_size = {} but {} has {} rows", dir.string(),
                            *vocab_size, *emb_hf, e->shape[0]));
  }
  m.cfg.folded = hf_folded_marker(d);
  for (const auto& hf : d.tensor_names()) {
    // compressed-tensors FP8: a projection's per-row scale, read with its weight below
    if (m.cfg.fp8 && hf.ends_with(".weight_scale")) {
      const std::string weight = hf.substr(0, hf.size() - 6);
      const io::StTensorInfo* w = d.find(weight);
      if (!w || w->dtype != io::StDtype::F8_E4M3) {
        throw Error(
            fmt::format("{}: tensor '{}' scales no float8 weight '{}'", dir.string(), hf, weight));
      }
      continue;
    }
    auto canon = from_hf_name(*m.arch, m.cfg.headless ? std::string(kHfModelPrefix) + hf : hf);
    if (!canon) {
      // Rotary inv_freq buffers some exporters keep are recomputed from rope_theta; any other
      // tensor the architecture does not know would be silently left out of the computation.
      if (hf.ends_with("rotary_emb.inv_freq")) continue;
      const io::SafetensorsFile* file = nullptr;
      d.find(hf, &file);
      refuse_unused(
          file->name(), hf, m.arch->name,
          layer_index(m.cfg.headless ? std::string(kHfModelPrefix) + hf : hf, "model.layers."),
          m.cfg.n_layer, "num_hidden_layers");
    }
    if (drop_head && hf == *head_hf) continue;  // tied: the embedding is the head
    const io::SafetensorsFile* file = nullptr;
    const io::StTensorInfo* info = d.find(hf, &file);
    Tensor x;
    x.shape = info->shape;
    const bool fp8 = info->dtype == io::StDtype::F8_E4M3;
    if (m.cfg.fp8 != fp8 && is_layer_projection(*canon)) {
      throw Error(fmt::format("{}: tensor '{}' is {}, but {}", file->name(), hf,
                              io::st_dtype_name(info->dtype),
                              m.cfg.fp8 ? "quantization_config makes every layer projection float8"
                                        : "config.json has no quantization_config"));
    }
    if (fp8 && !is_layer_projection(*canon)) {
      throw Error(fmt::format("{}: tensor '{}' is F8_E4M3; only the layers' projections may be",
                              file->name(), hf));
    }
    try {
      // without data, converting no bytes still refuses a dtype that has no fp32 conversion
      x.data =
          io::st_to_fp32(info->dtype, with_data ? file->data(*info) : std::span<const uint8_t>());
      if (fp8) scale_fp8_rows(d, hf, x, with_data);
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
  const bool hf = fs::is_directory(m.source);
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
  if (c.final_norm_kept && (!c.tied_head || !c.folded)) {
    throw Error(fmt::format("{}: {} = true, but the file {}", m.source.string(), kFinalNormKeptKey,
                            c.folded ? fmt::format("has an untied LM head '{}'", m.arch->head)
                                     : fmt::format("is not folded ({} is not true)", kFoldedKey)));
  }
  const uint64_t H = c.hidden, F = c.ffn, D = c.head_dim;
  const uint64_t q = uint64_t(c.n_head) * D, kv = uint64_t(c.n_head_kv) * D;
  const ArchHooks& hk = m.arch->hooks;
  // Every tensor the forward pass uses is shape-checked below; these are all it may contain.
  std::set<std::string, std::less<>> used = {m.arch->tied_source, "output_norm.weight",
                                             m.arch->head};
  for (int l = 0; l < c.n_layer; ++l) {
    auto n = [&](std::string_view pat) { return *used.insert(expand_layer(pat, l)).first; };
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
    for (const std::string& b : c.biases) {  // [rows of the weight it belongs to]
      const std::string& name = n(b);
      if (!m.has(name)) {
        throw Error(
            fmt::format("{}: missing tensor '{}': the {} model has this bias in every layer",
                        m.source.string(), file_name_of(m, hf, name), m.arch->name));
      }
      const std::string weight = name.substr(0, name.size() - 5) + ".weight";  // ".bias"
      expect_shape(m, name, {m.get(weight).rows()});
    }
  }
  expect_shape(m, "output_norm.weight", {H});
  if (!c.tied_head) expect_shape(m, m.arch->head, {uint64_t(c.vocab), H});
  for (const auto& [name, t] : m.tensors) {
    if (used.count(name)) continue;
    refuse_unused(m.source.string(), file_name_of(m, hf, name), m.arch->name,
                  layer_index(name, "blk."), c.n_layer, hf ? "num_hidden_layers" : "block_count");
  }
}

}  // namespace

WeightStorage cpu_default_storage(const fs::path& path) {
  if (fs::is_directory(path)) return WeightStorage::kF32;
  const io::GgufFile f = io::GgufFile::open(path);
  bool quantized = false;
  for (const auto& t : f.tensors()) {
    if (t.dims.size() != 2) continue;
    if (!kernels::cpu::quant_matmul_supported(t.type)) return WeightStorage::kF32;
    quantized |=
        t.type != io::GgmlType::F32 && t.type != io::GgmlType::F16 && t.type != io::GgmlType::BF16;
  }
  return quantized ? WeightStorage::kNative : WeightStorage::kF32;
}

Model load_model(const fs::path& path, bool with_data, WeightStorage storage) {
  Model m;
  const bool dir = fs::is_directory(path);
  if (dir && storage == WeightStorage::kNative) {
    throw Error(
        fmt::format("{}: --weights native needs a GGUF file (a Hugging Face directory "
                    "runs with --weights f32)",
                    path.string()));
  }
  try {
    m = dir ? load_hf(path, with_data) : load_gguf(path, with_data, storage);
  } catch (const nlohmann::json::exception& e) {
    // A config.json field of the wrong type (nlohmann's message names the expected type).
    throw Error(fmt::format("{}/config.json: {}", path.string(), e.what()));
  }
  validate(m);
  // Norm gains are what folding multiplies into the weights, and every weight feeds the engine:
  // a NaN or infinite one would produce NaN (or no output) without any error.
  if (with_data) check_finite_weights(m);
  return m;
}

void check_finite_weights(const Model& m) {
  const bool hf = fs::is_directory(m.source);
  std::optional<io::GgufFile> gguf;
  std::optional<io::HfModelDir> dir;
  std::vector<float> scratch;
  constexpr uint64_t kChunk = 1 << 20;  // elements dequantized at a time
  for (const auto& [name, t] : m.tensors) {
    uint64_t n = 1;
    for (uint64_t d : t.shape) n *= d;
    if (n == 0) continue;
    if (t.data.size() == n) {
      check_finite_span(m, hf, name, 0, t.data);
      continue;
    }
    if (hf) {
      if (!dir) dir = io::HfModelDir::open(m.source);
      const std::string file_name = file_name_of(m, true, name);
      const io::SafetensorsFile* file = nullptr;
      const io::StTensorInfo* info = dir->find(file_name, &file);
      if (!info) throw Error(fmt::format("{}: missing tensor '{}'", m.source.string(), file_name));
      const std::span<const uint8_t> bytes = file->data(*info);
      const size_t es = io::st_dtype_size(info->dtype);
      for (uint64_t i = 0; i < n; i += kChunk) {
        const uint64_t k = std::min(kChunk, n - i);
        std::vector<float> v;
        try {
          v = io::st_to_fp32(info->dtype, bytes.subspan(i * es, k * es));
        } catch (const Error& e) {
          throw Error(fmt::format("{}: tensor '{}': {}", file->name(), file_name, e.what()));
        }
        check_finite_span(m, hf, name, i, v);
      }
      continue;
    }
    if (!m.file && !gguf) gguf = io::GgufFile::open(m.source);
    const io::GgufFile& gf = m.file ? *m.file : *gguf;  // the model's own mapping when it has one
    const io::GgufTensorInfo* info = gf.find_tensor(name);
    if (!info) throw Error(fmt::format("{}: missing tensor '{}'", m.source.string(), name));
    const auto traits = io::ggml_type_traits(uint32_t(info->type));
    const std::span<const uint8_t> bytes = gf.tensor_data(*info);
    const uint64_t row = info->dims.empty() ? n : info->dims[0];
    if (!traits || row == 0 || row % traits->block_elems != 0 || n % row != 0) {
      scratch.resize(n);  // not in whole rows of blocks: at once (dequantize names the fault)
      io::dequantize(info->type, bytes, scratch);
      check_finite_span(m, hf, name, 0, scratch);
      continue;
    }
    const uint64_t row_bytes = row / traits->block_elems * traits->block_bytes;
    const uint64_t rows_per_chunk = std::max<uint64_t>(1, kChunk / row);
    for (uint64_t r = 0; r < n / row; r += rows_per_chunk) {
      const uint64_t k = std::min(rows_per_chunk, n / row - r);
      scratch.resize(k * row);
      io::dequantize(info->type, bytes.subspan(r * row_bytes, k * row_bytes), scratch);
      check_finite_span(m, hf, name, r * row, scratch);
    }
  }
}

bool hf_folded_marker(const io::HfModelDir& d) {
  std::optional<bool> folded;
  std::string first;  // the shard that set `folded`
  for (const auto& shard : d.shards()) {
    const auto& md = shard.metadata();
    const auto it = md.find(std::string(kFoldedKey));
    bool v = false;
    if (it != md.end()) {
      if (it->second == "true") {
        v = true;
      } else if (it->second != "false") {
        // quoted as a JSON string: control bytes from the file reach the terminal escaped
        throw Error(fmt::format(
            "{}: __metadata__ {} = {} is neither \"true\" nor \"false\"; refusing to guess "
            "whether the model is folded",
            shard.name(), kFoldedKey,
            nlohmann::json(it->second)
                .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)));
      }
    }
    if (folded && *folded != v) {
      throw Error(fmt::format("{}: __metadata__ {} is {} here but {} in {}", shard.name(),
                              kFoldedKey, v, *folded, first));
    }
    if (!folded) first = shard.name();
    folded = v;
  }
  return folded.value_or(false);
}

}  // namespace flashnorm
