// A random Llama checkpoint as GGUF with every matrix quantized by flashnorm's own quantizer
// (io::quantize; Q4_K / Q5_K / Q6_K: its least-squares scale search), for the CUDA engine's
// quantized-weights benchmark at real shapes (a Llama-3-8B-shaped model in Q4_K against the same
// model in bf16, and against llama.cpp: scripts/gpu_peers.sh). Default shape: Llama 3 8B (32
// layers, hidden 4096, 32 / 8 heads of 128, FFN 14336, vocabulary 128256, untied head, RoPE base
// 500000, eps 1e-5). Values: matrices uniform with the variance of N(0, 1/K) (embedding and head:
// N(0, 1) variance), gains U(0.5, 1.5); a splitmix64 stream per row chunk, so the file does not
// depend on the thread count. Rows are generated and quantized on all cores, one chunk of rows at a
// time.
//   random_quant_gguf OUT.gguf [TYPE=q4_k] [--layers L] [--hidden H] [--ffn F] [--heads N]
//                     [--kv-heads N] [--head-dim D] [--vocab V] [--distinct N]
//                     [--vocab-from FILE.gguf] [--arch llama|qwen3] [--pooling mean|cls|last]
// --arch qwen3: Qwen 3's graph (QK-norm gains, RoPE base 1e6, eps 1e-6). --pooling: an embedding
// model (<arch>.pooling_type; no output.weight, the head tied as Qwen3-Embedding's is).
// --vocab-from: every tokenizer.* key of FILE copied, and the vocabulary its token list's length
// (--vocab refused beside it), so that llama.cpp loads the file (it needs a tokenizer).
// --distinct N: layers l >= N repeat the bytes of layer l % N (each layer still has its own copy
// in the file and on the device, so a decode step streams all of them; it saves the generation
// and quantization time of the rest, about 330 ns per element per core).
// Exit 1 with one line on stderr for any error.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "flashnorm/error.h"
#include "flashnorm/io/dequant.h"
#include "flashnorm/io/ggml_types.h"
#include "flashnorm/io/gguf.h"

namespace {
using namespace flashnorm;

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// rows x cols values uniform in [-a, a] with a = sqrt(3) * sd (variance sd^2), quantized to `type`
// (fp32 kept as is for F32), chunks of rows in parallel.
std::vector<uint8_t> random_matrix(io::GgmlType type, uint64_t rows, uint64_t cols, double sd,
                                   uint64_t seed) {
  const io::GgmlTypeTraits tr = *io::ggml_type_traits(static_cast<uint32_t>(type));
  const uint64_t row_bytes = cols / tr.block_elems * tr.block_bytes;
  std::vector<uint8_t> out(rows * row_bytes);
  const uint64_t chunk = std::max<uint64_t>(1, (1u << 20) / cols);
  const uint64_t nchunks = (rows + chunk - 1) / chunk;
  const unsigned nt = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> th;
  for (unsigned t = 0; t < nt; ++t) {
    th.emplace_back([&, t] {
      std::vector<float> v;
      for (uint64_t c = t; c < nchunks; c += nt) {
        const uint64_t r0 = c * chunk, r1 = std::min(rows, r0 + chunk);
        v.resize((r1 - r0) * cols);
        uint64_t s = seed * 0x100000001b3ull + c;
        const float a = static_cast<float>(std::sqrt(3.0) * sd);
        for (float& x : v) x = a * (static_cast<float>(splitmix(s) >> 40) / 8388608.f - 1.f);
        const std::vector<uint8_t> q = io::quantize(type, v);
        std::memcpy(out.data() + r0 * row_bytes, q.data(), q.size());
      }
    });
  }
  for (auto& x : th) x.join();
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc < 2) throw Error("usage: random_quant_gguf OUT.gguf [TYPE] [--layers L] ...");
    const std::string out = argv[1];
    std::string type_name = "q4_k";
    int L = 32, H = 4096, F = 14336, NH = 32, NKV = 8, V = 128256, distinct = 1 << 30, D = 0;
    bool vocab_given = false;
    std::string vocab_from, arch = "llama";
    int pooling = -1;
    for (int i = 2; i < argc; ++i) {
      const std::string k = argv[i];
      auto next = [&] {
        if (i + 1 >= argc) throw Error(k + ": missing value");
        return std::stoi(argv[++i]);
      };
      if (k == "--layers")
        L = next();
      else if (k == "--hidden")
        H = next();
      else if (k == "--ffn")
        F = next();
      else if (k == "--heads")
        NH = next();
      else if (k == "--kv-heads")
        NKV = next();
      else if (k == "--head-dim")
        D = next();
      else if (k == "--arch" && i + 1 < argc)
        arch = argv[++i];
      else if (k == "--pooling" && i + 1 < argc) {
        const std::string p = argv[++i];
        pooling = p == "mean" ? 1 : p == "cls" ? 2 : p == "last" ? 3 : -2;
        if (pooling == -2) throw Error("--pooling " + p + ": mean, cls or last");
      } else if (k == "--vocab")
        V = next(), vocab_given = true;
      else if (k == "--vocab-from") {
        if (i + 1 >= argc) throw Error(k + ": missing value");
        vocab_from = argv[++i];
      } else if (k == "--distinct")
        distinct = std::max(1, next());
      else
        type_name = k;
    }
    const auto type = io::ggml_type_from_name(type_name);
    if (!type) throw Error("unknown type " + type_name);
    if (arch != "llama" && arch != "qwen3") throw Error("--arch " + arch + ": llama or qwen3");
    const bool qwen3 = arch == "qwen3";
    if (D == 0) D = H / NH;
    using io::GgufValue;
    std::vector<io::GgufKv> tokenizer_kvs;
    if (!vocab_from.empty()) {
      if (vocab_given) throw Error("--vocab and --vocab-from: give one");
      const io::GgufFile src = io::GgufFile::open(vocab_from);
      for (const io::GgufKv& kv : src.kvs()) {
        if (kv.key.starts_with("tokenizer.")) tokenizer_kvs.push_back(kv);
      }
      const io::GgufKv* tokens = src.find("tokenizer.ggml.tokens");
      if (tokens == nullptr) throw Error(vocab_from + ": no tokenizer.ggml.tokens");
      V = static_cast<int>(tokens->value.array_size());
    }
    const std::string a = arch + ".";
    std::vector<io::GgufKv> kvs = {
        {"general.architecture", GgufValue::make_string(arch), 0},
        {a + "block_count", GgufValue::make_u32(L), 0},
        {a + "context_length", GgufValue::make_u32(8192), 0},
        {a + "embedding_length", GgufValue::make_u32(H), 0},
        {a + "feed_forward_length", GgufValue::make_u32(F), 0},
        {a + "attention.head_count", GgufValue::make_u32(NH), 0},
        {a + "attention.head_count_kv", GgufValue::make_u32(NKV), 0},
        {a + "attention.key_length", GgufValue::make_u32(D), 0},
        {a + "attention.value_length", GgufValue::make_u32(D), 0},
        {a + "rope.freq_base", GgufValue::make_f32(qwen3 ? 1e6f : 500000.f), 0},
        {a + "attention.layer_norm_rms_epsilon", GgufValue::make_f32(qwen3 ? 1e-6f : 1e-5f), 0},
        {a + "vocab_size", GgufValue::make_u32(V), 0},
    };
    if (pooling >= 0) kvs.push_back({a + "pooling_type", GgufValue::make_u32(pooling), 0});
    kvs.insert(kvs.end(), tokenizer_kvs.begin(), tokenizer_kvs.end());
    std::vector<io::GgufTensorOut> ts;
    uint64_t seed = 1;
    auto matrix = [&](const std::string& name, int rows, int cols, double sd) {
      ts.push_back({name,
                    {uint64_t(cols), uint64_t(rows)},
                    *type,
                    random_matrix(*type, rows, cols, sd, seed++),
                    {}});
    };
    auto gain = [&](const std::string& name, int n) {
      std::vector<float> g(n);
      uint64_t s = seed++ * 7919;
      for (float& x : g) x = 0.5f + static_cast<float>(splitmix(s) >> 40) / 16777216.f;
      io::GgufTensorOut t{name, {uint64_t(n)}, io::GgmlType::F32, {}, {}};
      t.bytes.resize(g.size() * 4);
      std::memcpy(t.bytes.data(), g.data(), t.bytes.size());
      ts.push_back(std::move(t));
    };
    matrix("token_embd.weight", V, H, 1.0);
    const size_t per_layer = qwen3 ? 11 : 9;
    for (int l = 0; l < L; ++l) {
      const std::string p = fmt::format("blk.{}.", l);
      if (l >= distinct) {  // a copy of layer l % distinct's tensors under this layer's names
        const size_t first = 1 + size_t(l % distinct) * per_layer;
        for (size_t i = 0; i < per_layer; ++i) {
          io::GgufTensorOut t = ts[first + i];
          t.name = p + t.name.substr(t.name.find('.', 4) + 1);
          ts.push_back(std::move(t));
        }
        continue;
      }
      gain(p + "attn_norm.weight", H);
      if (qwen3) {
        gain(p + "attn_q_norm.weight", D);
        gain(p + "attn_k_norm.weight", D);
      }
      matrix(p + "attn_q.weight", NH * D, H, 1 / std::sqrt(double(H)));
      matrix(p + "attn_k.weight", NKV * D, H, 1 / std::sqrt(double(H)));
      matrix(p + "attn_v.weight", NKV * D, H, 1 / std::sqrt(double(H)));
      matrix(p + "attn_output.weight", H, NH * D, 1 / std::sqrt(double(NH * D)));
      gain(p + "ffn_norm.weight", H);
      matrix(p + "ffn_gate.weight", F, H, 1 / std::sqrt(double(H)));
      matrix(p + "ffn_up.weight", F, H, 1 / std::sqrt(double(H)));
      matrix(p + "ffn_down.weight", H, F, 1 / std::sqrt(double(F)));
      fmt::print(stderr, "\rlayer {}/{}", l + 1, L);
    }
    gain("output_norm.weight", H);
    if (pooling < 0) matrix("output.weight", V, H, 1 / std::sqrt(double(H)));
    io::write_gguf(out, kvs, ts);
    fmt::print(stderr, "\n{}: {} layers, hidden {}, {}\n", out, L, H, type_name);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "random_quant_gguf: %s\n", e.what());
    return 1;
  }
}
