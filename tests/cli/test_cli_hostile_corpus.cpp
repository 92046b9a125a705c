// A corpus of hand-broken model inputs run through the CLI: each case is a small valid model (a
// random 2-layer Llama with its own 300-token GPT-2 style vocabulary, as a GGUF file or a Hugging
// Face directory of two shards) broken in one way: header fields, counts, lengths, types, dims,
// offsets and alignment of the GGUF layout; missing or mistyped hyperparameters; absurd eps and
// RoPE bases; wrong shapes; tensors no layer owns, bias tensors, non-finite weights; bad tokenizer
// metadata; a folded marker of the wrong type; broken config.json, index and shard headers.
// `inspect`, `fold` and `generate` must each exit exactly 1 with one "error: " line on stderr and
// leave no output. scripts/test.sh runs this binary again against the ASan+UBSan build of the CLI
// (label "hostile"), so a crash or an undefined operation in any path fails it too.
// Controls: the unbroken models pass all three subcommands, and every case differs from its base.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "cli_run.h"
#include "flashnorm/io/gguf.h"
#include "flashnorm/io/safetensors.h"
#include "support/gguf_rewrite.h"
#include "support/random_llama.h"

namespace flashnorm {
namespace {
namespace fs = std::filesystem;
using io::GgufKv;
using io::GgufTensorOut;
using io::GgufType;
using io::GgufValue;
using nlohmann::json;
using Bytes = std::vector<uint8_t>;
using Kvs = std::vector<GgufKv>;
using Tensors = std::vector<GgufTensorOut>;
using HfTensors = std::vector<io::StTensorOut>;
using Meta = std::map<std::string, std::string>;
using testing::kv_value;
using testing::set_kv;

constexpr int kVocab = 300;  // 256 byte tokens, 43 merged pairs, one control token

// One byte's character in GPT-2's byte-level alphabet (encoder.py bytes_to_unicode), as UTF-8.
std::string byte_char(int b) {
  int n = 0, cp = -1;
  for (int x = 0; x < 256; ++x) {
    const bool printable =
        (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF);
    const int c = printable ? x : 256 + n++;
    if (x == b) cp = c;
  }
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// tokenizer.ggml.* of a 300-token gpt2 vocabulary: the 256 byte characters, the merged pairs
// "aa".."az", "ba".."bq" (43 merges), and "<|endoftext|>" (control, bos and eos).
Kvs tokenizer_kvs() {
  std::vector<std::string> tokens, merges;
  for (int b = 0; b < 256; ++b) tokens.push_back(byte_char(b));
  for (int i = 0; i < 43; ++i) {
    const std::string l(1, static_cast<char>('a' + i / 26)), r(1, static_cast<char>('a' + i % 26));
    merges.push_back(l + " " + r);
    tokens.push_back(l + r);
  }
  tokens.push_back("<|endoftext|>");
  std::vector<int64_t> types(tokens.size(), 1);
  types.back() = 3;
  return {{"tokenizer.ggml.model", GgufValue::make_string("gpt2"), 0},
          {"tokenizer.ggml.pre", GgufValue::make_string("gpt2"), 0},
          {"tokenizer.ggml.tokens", GgufValue::make_string_array(tokens), 0},
          {"tokenizer.ggml.token_type", GgufValue::make_int_array(GgufType::INT32, types), 0},
          {"tokenizer.ggml.merges", GgufValue::make_string_array(merges), 0},
          {"tokenizer.ggml.bos_token_id", GgufValue::make_u32(kVocab - 1), 0},
          {"tokenizer.ggml.eos_token_id", GgufValue::make_u32(kVocab - 1), 0},
          {"tokenizer.ggml.add_bos_token", GgufValue::make_bool(false), 0}};
}

Bytes read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(f), {});
}
void write_bytes(const fs::path& p, const Bytes& b) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

// ---- the valid bases (built once per process)

struct GgufBase {
  fs::path path;
  Kvs kvs;
  Tensors tensors;
  Bytes bytes;
};

const GgufBase& gguf_base() {
  static const GgufBase base = [] {
    GgufBase b;
    const fs::path d = testing::fresh_dir("hostile_base_gguf");
    testing::RandomLlamaOptions o;
    o.vocab = kVocab;
    testing::write_random_gguf(d / "raw.gguf", o);
    io::GgufFile f = io::GgufFile::open(d / "raw.gguf");
    b.kvs = f.kvs();
    b.kvs.insert(b.kvs.begin() + 1, {"general.alignment", GgufValue::make_u32(32), 0});
    for (auto& kv : tokenizer_kvs()) b.kvs.push_back(std::move(kv));
    for (const auto& t : f.tensors()) {
      auto data = f.tensor_data(t);
      b.tensors.push_back({t.name, t.dims, t.type, Bytes(data.begin(), data.end()), {}});
    }
    b.path = d / "base.gguf";
    io::write_gguf(b.path, b.kvs, b.tensors);
    b.bytes = read_bytes(b.path);
    return b;
  }();
  return base;
}

struct HfBase {
  fs::path dir;
  json config;
  HfTensors tensors;
};

const HfBase& hf_base() {
  static const HfBase base = [] {
    HfBase b;
    b.dir = testing::fresh_dir("hostile_base_hf") / "hf";
    testing::RandomLlamaOptions o;
    o.vocab = kVocab;
    o.n_shards = 2;
    testing::write_random_llama(b.dir, o);
    io::HfModelDir d = io::HfModelDir::open(b.dir);
    b.config = d.config();
    for (const auto& n : d.tensor_names()) {
      b.tensors.push_back({n, io::StDtype::F32, d.find(n)->shape, d.load_fp32(n)});
    }
    return b;
  }();
  return base;
}

// ---- GGUF edits

const GgufKv& kv_of(const io::GgufFile& f, const std::string& key) {
  const GgufKv* kv = f.find(key);
  if (!kv) throw std::runtime_error("corpus: no key " + key);
  return *kv;
}
size_t kv_at(const io::GgufFile& f, const std::string& key) { return kv_of(f, key).offset; }
size_t kv_type_at(const io::GgufFile& f, const std::string& key) {
  return kv_at(f, key) + 8 + key.size();
}
size_t kv_value_at(const io::GgufFile& f, const std::string& key) { return kv_type_at(f, key) + 4; }
const io::GgufTensorInfo& info_of(const io::GgufFile& f, const std::string& name) {
  const io::GgufTensorInfo* t = f.find_tensor(name);
  if (!t) throw std::runtime_error("corpus: no tensor " + name);
  return *t;
}
size_t ndims_at(const io::GgufFile& f, const std::string& name) {
  return info_of(f, name).info_offset + 8 + name.size();
}
size_t dim_at(const io::GgufFile& f, const std::string& name, int d) {
  return ndims_at(f, name) + 4 + 8 * d;
}
size_t type_at(const io::GgufFile& f, const std::string& name) {
  return dim_at(f, name, static_cast<int>(info_of(f, name).dims.size()));
}
size_t offset_at(const io::GgufFile& f, const std::string& name) { return type_at(f, name) + 4; }
void put32(Bytes& b, size_t at, uint32_t v) { std::memcpy(&b.at(at + 3) - 3, &v, 4); }
void put64(Bytes& b, size_t at, uint64_t v) { std::memcpy(&b.at(at + 7) - 7, &v, 8); }
uint64_t get64(const Bytes& b, size_t at) {
  uint64_t v = 0;
  std::memcpy(&v, &b.at(at + 7) - 7, 8);
  return v;
}

void drop_kv(Kvs& kvs, const std::string& key) {
  const auto n = kvs.size();
  std::erase_if(kvs, [&](const GgufKv& kv) { return kv.key == key; });
  if (kvs.size() == n) throw std::runtime_error("corpus: no key " + key);
}
GgufTensorOut& tensor(Tensors& ts, const std::string& name) {
  for (auto& t : ts) {
    if (t.name == name) return t;
  }
  throw std::runtime_error("corpus: no tensor " + name);
}
void drop_tensor(Tensors& ts, const std::string& name) {
  tensor(ts, name);
  std::erase_if(ts, [&](const GgufTensorOut& t) { return t.name == name; });
}
// An F32 tensor of `dims` (GGUF order) filled with 0.01.
void add_tensor(Tensors& ts, const std::string& name, std::vector<uint64_t> dims) {
  ts.push_back(testing::f32_tensor(name, std::move(dims), 0.01f));
}
void set_f32(Tensors& ts, const std::string& name, size_t i, float v) {
  std::memcpy(&tensor(ts, name).bytes.at(i * 4 + 3) - 3, &v, 4);
}
// Changes a tensor's dims, keeping the first elements (or zero-padding) to the new size.
void reshape(Tensors& ts, const std::string& name, std::vector<uint64_t> dims) {
  GgufTensorOut& t = tensor(ts, name);
  uint64_t n = 1;
  for (uint64_t d : dims) n *= d;
  t.dims = std::move(dims);
  t.bytes.resize(n * 4);
}

// An F32 Hugging Face tensor of `shape` filled with `value`.
io::StTensorOut hf_f32(std::string name, std::vector<uint64_t> shape, float value) {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return {std::move(name), io::StDtype::F32, std::move(shape), std::vector<float>(n, value)};
}

// "blk.L.NAME.weight".
std::string fmt_name(int layer, const char* name) {
  return "blk." + std::to_string(layer) + "." + name + ".weight";
}

// ---- HF edits

// Rewrites the header JSON of a safetensors file, keeping its data buffer.
void edit_header(const fs::path& p, const std::function<void(json&)>& fn) {
  Bytes b = read_bytes(p);
  const uint64_t n = get64(b, 0);
  json h = json::parse(b.begin() + 8, b.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  fn(h);
  std::string s = h.dump();
  s.append((8 - s.size() % 8) % 8, ' ');
  Bytes out(8);
  put64(out, 0, s.size());
  out.insert(out.end(), s.begin(), s.end());
  out.insert(out.end(), b.begin() + 8 + static_cast<std::ptrdiff_t>(n), b.end());
  write_bytes(p, out);
}
// The first tensor entry of a safetensors header whose shape has `rank` dimensions.
std::string first_entry(const json& h, size_t rank) {
  for (auto it = h.begin(); it != h.end(); ++it) {
    if (it.key() != "__metadata__" && it.value().at("shape").size() == rank) return it.key();
  }
  throw std::runtime_error("corpus: no tensor of that rank");
}
void edit_json(const fs::path& p, const std::function<void(json&)>& fn) {
  std::ifstream in(p);
  json j = json::parse(in);
  in.close();
  fn(j);
  std::ofstream(p, std::ios::trunc) << j.dump(2);
}
void write_text(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::trunc) << s; }
constexpr const char* kShard1 = "model-00001-of-00002.safetensors";
constexpr const char* kShard2 = "model-00002-of-00002.safetensors";
constexpr const char* kIndex = "model.safetensors.index.json";
io::StTensorOut& hf_tensor(HfTensors& ts, const std::string& name) {
  for (auto& t : ts) {
    if (t.name == name) return t;
  }
  throw std::runtime_error("corpus: no tensor " + name);
}

// ---- the corpus

struct Case {
  std::string name;
  bool hf = false;
  std::function<void(const fs::path&)> make;  // writes the broken input at the path
};

std::vector<Case> build_cases() {
  std::vector<Case> c;
  // Byte edits of the base GGUF file.
  auto patch = [&](std::string name, std::function<void(Bytes&, const io::GgufFile&)> fn) {
    c.push_back({std::move(name), false, [fn](const fs::path& out) {
                   Bytes b = gguf_base().bytes;
                   io::GgufFile f = io::GgufFile::open(gguf_base().path);
                   fn(b, f);
                   write_bytes(out, b);
                 }});
  };
  // Rewrites of the base GGUF's metadata and tensors.
  auto rewrite = [&](std::string name, std::function<void(Kvs&, Tensors&)> fn) {
    c.push_back({std::move(name), false, [fn](const fs::path& out) {
                   Kvs kvs = gguf_base().kvs;
                   Tensors ts = gguf_base().tensors;
                   fn(kvs, ts);
                   io::write_gguf(out, kvs, ts);
                 }});
  };
  auto set = [&](std::string name, std::string key, GgufValue v) {
    rewrite(std::move(name), [key, v](Kvs& kvs, Tensors&) { set_kv(kvs, key, v); });
  };
  auto drop = [&](std::string name, std::string key) {
    rewrite(std::move(name), [key](Kvs& kvs, Tensors&) { drop_kv(kvs, key); });
  };
  // A HF directory written from the base's config, tensors and metadata after `fn`.
  auto hf = [&](std::string name, std::function<void(json&, HfTensors&, Meta&)> fn) {
    c.push_back({std::move(name), true, [fn](const fs::path& out) {
                   json cfg = hf_base().config;
                   HfTensors ts = hf_base().tensors;
                   Meta meta = {{"format", "pt"}};
                   fn(cfg, ts, meta);
                   io::write_hf_dir(out, cfg, ts, meta, 2);
                 }});
  };
  auto cfg = [&](std::string name, std::string key, json v) {
    hf(std::move(name), [key, v](json& j, HfTensors&, Meta&) {
      if (v.is_discarded()) {
        j.erase(key);
      } else {
        j[key] = v;
      }
    });
  };
  const json kErase = json(json::value_t::discarded);
  // A copy of the base HF directory with its files edited by `fn`.
  auto hf_files = [&](std::string name, std::function<void(const fs::path&)> fn) {
    c.push_back({std::move(name), true, [fn](const fs::path& out) {
                   fs::copy(hf_base().dir, out, fs::copy_options::recursive);
                   fn(out);
                 }});
  };

  const std::string A = "llama.";
  const uint64_t big = uint64_t{1} << 62;

  // -- GGUF layout (byte edits)
  patch("gguf_empty_file", [](Bytes& b, auto&) { b.clear(); });
  patch("gguf_bad_magic", [](Bytes& b, auto&) { b[0] = 'X'; });
  patch("gguf_version_0", [](Bytes& b, auto&) { put32(b, 4, 0); });
  patch("gguf_version_1", [](Bytes& b, auto&) { put32(b, 4, 1); });
  patch("gguf_version_4", [](Bytes& b, auto&) { put32(b, 4, 4); });
  patch("gguf_version_big_endian", [](Bytes& b, auto&) { put32(b, 4, 0x03000000u); });
  patch("gguf_tensor_count_huge", [](Bytes& b, auto&) { put64(b, 8, uint64_t{1} << 63); });
  patch("gguf_tensor_count_plus_one", [](Bytes& b, auto&) { put64(b, 8, get64(b, 8) + 1); });
  patch("gguf_tensor_count_minus_one", [](Bytes& b, auto&) { put64(b, 8, get64(b, 8) - 1); });
  patch("gguf_tensor_count_zero", [](Bytes& b, auto&) { put64(b, 8, 0); });
  patch("gguf_kv_count_huge", [big](Bytes& b, auto&) { put64(b, 16, big); });
  patch("gguf_kv_count_plus_one", [](Bytes& b, auto&) { put64(b, 16, get64(b, 16) + 1); });
  patch("gguf_kv_count_zero", [](Bytes& b, auto&) { put64(b, 16, 0); });
  patch("gguf_truncated_header", [](Bytes& b, auto&) { b.resize(12); });
  patch("gguf_truncated_in_kvs",
        [](Bytes& b, auto& f) { b.resize(kv_at(f, "tokenizer.ggml.tokens") + 100); });
  patch("gguf_truncated_in_tensor_infos",
        [](Bytes& b, auto& f) { b.resize(info_of(f, "blk.1.ffn_up.weight").info_offset + 10); });
  patch("gguf_truncated_in_data",
        [](Bytes& b, auto& f) { b.resize(f.data_offset() + (b.size() - f.data_offset()) / 2); });
  patch("gguf_truncated_last_tensor", [](Bytes& b, auto& f) {
    const auto& t = f.tensors().back();
    b.resize(f.data_offset() + t.offset + t.n_bytes - 1);
  });
  patch("gguf_key_length_huge",
        [big](Bytes& b, auto& f) { put64(b, kv_at(f, "general.architecture"), big); });
  patch("gguf_key_length_zero",
        [](Bytes& b, auto& f) { put64(b, kv_at(f, "general.architecture"), 0); });
  patch("gguf_string_length_huge", [](Bytes& b, auto& f) {
    put64(b, kv_value_at(f, "general.architecture"), uint64_t{1} << 60);
  });
  patch("gguf_string_length_short",
        [](Bytes& b, auto& f) { put64(b, kv_value_at(f, "general.architecture"), 3); });
  patch("gguf_array_length_huge",
        [big](Bytes& b, auto& f) { put64(b, kv_value_at(f, "tokenizer.ggml.tokens") + 4, big); });
  patch("gguf_array_length_short",
        [](Bytes& b, auto& f) { put64(b, kv_value_at(f, "tokenizer.ggml.tokens") + 4, 10); });
  patch("gguf_array_string_length_huge", [](Bytes& b, auto& f) {
    put64(b, kv_value_at(f, "tokenizer.ggml.tokens") + 12, uint64_t{1} << 50);
  });
  patch("gguf_unknown_value_type",
        [A](Bytes& b, auto& f) { put32(b, kv_type_at(f, A + "block_count"), 13); });
  patch("gguf_value_type_shifted",  // UINT32 read as UINT64 shifts every later field
        [A](Bytes& b, auto& f) { put32(b, kv_type_at(f, A + "block_count"), 10); });
  patch("gguf_unknown_array_element_type",
        [](Bytes& b, auto& f) { put32(b, kv_value_at(f, "tokenizer.ggml.tokens"), 77); });
  patch("gguf_bool_value_2",
        [](Bytes& b, auto& f) { b.at(kv_value_at(f, "tokenizer.ggml.add_bos_token")) = 2; });
  patch("gguf_tensor_name_length_huge",
        [big](Bytes& b, auto& f) { put64(b, f.tensors()[0].info_offset, big); });
  patch("gguf_n_dims_0",
        [](Bytes& b, auto& f) { put32(b, ndims_at(f, "blk.0.attn_q.weight"), 0); });
  patch("gguf_n_dims_5",
        [](Bytes& b, auto& f) { put32(b, ndims_at(f, "blk.0.attn_q.weight"), 5); });
  patch("gguf_dim_zero",
        [](Bytes& b, auto& f) { put64(b, dim_at(f, "blk.0.attn_k.weight", 1), 0); });
  patch("gguf_dim_negative",
        [](Bytes& b, auto& f) { put64(b, dim_at(f, "blk.0.attn_k.weight", 1), ~uint64_t{0}); });
  patch("gguf_dims_product_overflows", [](Bytes& b, auto& f) {
    put64(b, dim_at(f, "blk.0.attn_k.weight", 0), uint64_t{1} << 32);
    put64(b, dim_at(f, "blk.0.attn_k.weight", 1), uint64_t{1} << 32);
  });
  patch("gguf_dim_past_data", [](Bytes& b, auto& f) {
    put64(b, dim_at(f, "blk.1.ffn_down.weight", 1), uint64_t{1} << 40);
  });
  patch("gguf_unknown_tensor_type",
        [](Bytes& b, auto& f) { put32(b, type_at(f, "blk.0.ffn_up.weight"), 99); });
  patch("gguf_tensor_type_i32",  // same size as F32, but not a weight type
        [](Bytes& b, auto& f) { put32(b, type_at(f, "blk.0.ffn_up.weight"), 26); });
  patch("gguf_tensor_type_f64_size", [](Bytes& b, auto& f) {  // F64 needs twice the bytes
    put32(b, type_at(f, "output_norm.weight"), 28);
  });
  patch("gguf_offset_misaligned", [](Bytes& b, auto& f) {
    const size_t at = offset_at(f, "blk.1.attn_q.weight");
    put64(b, at, get64(b, at) + 4);
  });
  patch("gguf_offset_past_end",
        [](Bytes& b, auto& f) { put64(b, offset_at(f, "output_norm.weight"), uint64_t{1} << 40); });
  patch("gguf_offset_wraps",
        [](Bytes& b, auto& f) { put64(b, offset_at(f, "output_norm.weight"), ~uint64_t{31}); });
  patch("gguf_tensors_overlap", [](Bytes& b, auto& f) {
    put64(b, offset_at(f, "blk.0.attn_k.weight"), f.find_tensor("blk.0.attn_q.weight")->offset);
  });
  patch("gguf_alignment_0",
        [](Bytes& b, auto& f) { put32(b, kv_value_at(f, "general.alignment"), 0); });
  patch("gguf_alignment_3",
        [](Bytes& b, auto& f) { put32(b, kv_value_at(f, "general.alignment"), 3); });
  patch("gguf_alignment_huge",
        [](Bytes& b, auto& f) { put32(b, kv_value_at(f, "general.alignment"), 1u << 21); });
  patch("gguf_duplicate_tensor_name", [](Bytes& b, auto& f) {
    b.at(info_of(f, "blk.1.ffn_up.weight").info_offset + 8 + 4) = '0';
  });
  patch("gguf_duplicate_key", [](Bytes& b, auto& f) {  // eos_token_id -> bos_token_id
    b.at(kv_at(f, "tokenizer.ggml.eos_token_id") + 8 + 15) = 'b';
  });

  // -- GGUF hyperparameters
  drop("gguf_architecture_missing", "general.architecture");
  set("gguf_architecture_unknown", "general.architecture", GgufValue::make_string("mamba"));
  set("gguf_architecture_empty", "general.architecture", GgufValue::make_string(""));
  set("gguf_architecture_u32", "general.architecture", GgufValue::make_u32(7));
  drop("gguf_block_count_missing", A + "block_count");
  set("gguf_block_count_0", A + "block_count", GgufValue::make_u32(0));
  set("gguf_block_count_huge", A + "block_count", GgufValue::make_u32(1000000000));
  set("gguf_block_count_string", A + "block_count", GgufValue::make_string("2"));
  set("gguf_block_count_f32", A + "block_count", GgufValue::make_f32(2));
  set("gguf_block_count_negative", A + "block_count", GgufValue::make_i32(-1));
  set("gguf_block_count_fewer_than_tensors", A + "block_count", GgufValue::make_u32(1));
  set("gguf_block_count_more_than_tensors", A + "block_count", GgufValue::make_u32(3));
  drop("gguf_embedding_length_missing", A + "embedding_length");
  set("gguf_embedding_length_wrong", A + "embedding_length", GgufValue::make_u32(32));
  set("gguf_embedding_length_0", A + "embedding_length", GgufValue::make_u32(0));
  drop("gguf_ffn_length_missing", A + "feed_forward_length");
  set("gguf_ffn_length_wrong", A + "feed_forward_length", GgufValue::make_u32(64));
  set("gguf_head_count_0", A + "attention.head_count", GgufValue::make_u32(0));
  set("gguf_head_count_not_dividing", A + "attention.head_count", GgufValue::make_u32(3));
  set("gguf_head_count_kv_0", A + "attention.head_count_kv", GgufValue::make_u32(0));
  set("gguf_head_count_kv_not_dividing", A + "attention.head_count_kv", GgufValue::make_u32(3));
  set("gguf_head_count_kv_above_heads", A + "attention.head_count_kv", GgufValue::make_u32(8));
  set("gguf_key_length_wrong", A + "attention.key_length", GgufValue::make_u32(8));
  set("gguf_key_length_0", A + "attention.key_length", GgufValue::make_u32(0));
  set("gguf_context_length_0", A + "context_length", GgufValue::make_u32(0));
  set("gguf_context_length_string", A + "context_length", GgufValue::make_string("512"));
  const std::string eps = A + "attention.layer_norm_rms_epsilon";
  set("gguf_eps_nan", eps, GgufValue::make_f32(std::nanf("")));
  set("gguf_eps_inf", eps, GgufValue::make_f32(INFINITY));
  set("gguf_eps_negative", eps, GgufValue::make_f32(-1e-5f));
  set("gguf_eps_absurd", eps, GgufValue::make_f32(1e30f));
  set("gguf_eps_string", eps, GgufValue::make_string("1e-5"));
  drop("gguf_eps_missing", eps);
  set("gguf_rope_base_negative", A + "rope.freq_base", GgufValue::make_f32(-1e4f));
  set("gguf_rope_base_0", A + "rope.freq_base", GgufValue::make_f32(0));
  set("gguf_rope_base_nan", A + "rope.freq_base", GgufValue::make_f32(std::nanf("")));
  set("gguf_rope_base_inf", A + "rope.freq_base", GgufValue::make_f32(INFINITY));
  set("gguf_rope_base_string", A + "rope.freq_base", GgufValue::make_string("10000"));
  set("gguf_folded_marker_string", "flashnorm.folded", GgufValue::make_string("true"));
  set("gguf_folded_marker_u32", "flashnorm.folded", GgufValue::make_u32(1));

  // -- GGUF tensors
  rewrite("gguf_token_embd_missing", [](Kvs&, Tensors& t) { drop_tensor(t, "token_embd.weight"); });
  rewrite("gguf_attn_norm_missing",
          [](Kvs&, Tensors& t) { drop_tensor(t, "blk.0.attn_norm.weight"); });
  rewrite("gguf_ffn_down_missing",
          [](Kvs&, Tensors& t) { drop_tensor(t, "blk.1.ffn_down.weight"); });
  rewrite("gguf_output_norm_missing",
          [](Kvs&, Tensors& t) { drop_tensor(t, "output_norm.weight"); });
  rewrite("gguf_attn_k_transposed", [](Kvs&, Tensors& t) {
    tensor(t, "blk.0.attn_k.weight").dims = {32, 64};
  });
  rewrite("gguf_ffn_up_rows_wrong", [](Kvs&, Tensors& t) {
    reshape(t, "blk.1.ffn_up.weight", {64, 95});
  });
  rewrite("gguf_gain_short", [](Kvs&, Tensors& t) { reshape(t, "blk.1.ffn_norm.weight", {63}); });
  rewrite("gguf_gain_2d", [](Kvs&, Tensors& t) {
    tensor(t, "blk.0.attn_norm.weight").dims = {32, 2};
  });
  rewrite("gguf_token_embd_width_wrong", [](Kvs&, Tensors& t) {
    tensor(t, "token_embd.weight").dims = {32, 600};
  });
  rewrite("gguf_output_head_wrong_vocab", [](Kvs&, Tensors& t) {
    add_tensor(t, "output.weight", {64, 299});
  });
  rewrite("gguf_extra_layer", [](Kvs&, Tensors& t) {
    for (const char* n : {"attn_norm", "ffn_norm"}) add_tensor(t, fmt_name(2, n), {64});
    for (const char* n : {"attn_q", "attn_output"}) add_tensor(t, fmt_name(2, n), {64, 64});
    for (const char* n : {"attn_k", "attn_v"}) add_tensor(t, fmt_name(2, n), {64, 32});
    for (const char* n : {"ffn_gate", "ffn_up"}) add_tensor(t, fmt_name(2, n), {64, 96});
    add_tensor(t, fmt_name(2, "ffn_down"), {96, 64});
  });
  rewrite("gguf_extra_layer_one_tensor",
          [](Kvs&, Tensors& t) { add_tensor(t, "blk.2.attn_norm.weight", {64}); });
  rewrite("gguf_far_layer_tensor", [](Kvs&, Tensors& t) {
    add_tensor(t, "blk.4000000000.ffn_up.weight", {64, 96});
  });
  rewrite("gguf_stray_tensor", [](Kvs&, Tensors& t) { add_tensor(t, "junk.weight", {64}); });
  rewrite("gguf_unknown_layer_tensor", [](Kvs&, Tensors& t) {
    add_tensor(t, "blk.0.attn_gate.weight", {64, 64});
  });
  rewrite("gguf_bias_attn_q", [](Kvs&, Tensors& t) { add_tensor(t, "blk.0.attn_q.bias", {64}); });
  rewrite("gguf_bias_attn_v", [](Kvs&, Tensors& t) { add_tensor(t, "blk.1.attn_v.bias", {32}); });
  rewrite("gguf_bias_ffn_down",
          [](Kvs&, Tensors& t) { add_tensor(t, "blk.1.ffn_down.bias", {64}); });
  rewrite("gguf_bias_output", [](Kvs&, Tensors& t) { add_tensor(t, "output.bias", {300}); });
  rewrite("gguf_nan_weight",
          [](Kvs&, Tensors& t) { set_f32(t, "blk.1.ffn_up.weight", 5, std::nanf("")); });
  rewrite("gguf_inf_weight",
          [](Kvs&, Tensors& t) { set_f32(t, "blk.0.attn_v.weight", 0, INFINITY); });
  rewrite("gguf_neg_inf_embedding",
          [](Kvs&, Tensors& t) { set_f32(t, "token_embd.weight", 1234, -INFINITY); });
  rewrite("gguf_nan_gain",
          [](Kvs&, Tensors& t) { set_f32(t, "output_norm.weight", 3, std::nanf("")); });
  rewrite("gguf_inf_gain",
          [](Kvs&, Tensors& t) { set_f32(t, "blk.0.attn_norm.weight", 0, INFINITY); });

  // -- GGUF tokenizer metadata
  const std::string T = "tokenizer.ggml.";
  drop("tok_model_missing", T + "model");
  set("tok_model_unknown", T + "model", GgufValue::make_string("bert"));
  set("tok_model_u32", T + "model", GgufValue::make_u32(2));
  set("tok_pre_unknown", T + "pre", GgufValue::make_string("frobnicate"));
  drop("tok_pre_missing", T + "pre");
  drop("tok_tokens_missing", T + "tokens");
  set("tok_tokens_int_array", T + "tokens",
      GgufValue::make_int_array(GgufType::INT32, std::vector<int64_t>(kVocab, 1)));
  set("tok_tokens_string", T + "tokens", GgufValue::make_string("a"));
  rewrite("tok_tokens_empty", [T](Kvs& k, Tensors&) {
    kv_value(k, T + "tokens").strs.clear();
    kv_value(k, T + "token_type").i_arr.clear();
    drop_kv(k, T + "merges");
    set_kv(k, T + "merges", GgufValue::make_string_array({}));
    drop_kv(k, T + "bos_token_id");
    drop_kv(k, T + "eos_token_id");
  });
  rewrite("tok_vocab_smaller_than_model", [T](Kvs& k, Tensors&) {
    kv_value(k, T + "tokens").strs.pop_back();
    kv_value(k, T + "token_type").i_arr.pop_back();
    set_kv(k, T + "bos_token_id", GgufValue::make_u32(0));
    set_kv(k, T + "eos_token_id", GgufValue::make_u32(0));
  });
  rewrite("tok_vocab_larger_than_model", [T](Kvs& k, Tensors&) {
    kv_value(k, T + "tokens").strs.push_back("<|extra|>");
    kv_value(k, T + "token_type").i_arr.push_back(1);
  });
  rewrite("tok_tokens_duplicate",
          [T](Kvs& k, Tensors&) { kv_value(k, T + "tokens").strs[5] = byte_char(6); });
  rewrite("tok_token_type_short",
          [T](Kvs& k, Tensors&) { kv_value(k, T + "token_type").i_arr.pop_back(); });
  rewrite("tok_token_type_7",
          [T](Kvs& k, Tensors&) { kv_value(k, T + "token_type").i_arr[7] = 7; });
  rewrite("tok_token_type_negative",
          [T](Kvs& k, Tensors&) { kv_value(k, T + "token_type").i_arr[8] = -1; });
  set("tok_token_type_strings", T + "token_type",
      GgufValue::make_string_array(std::vector<std::string>(kVocab, "1")));
  drop("tok_merges_missing", T + "merges");
  set("tok_merges_int_array", T + "merges", GgufValue::make_int_array(GgufType::INT32, {1, 2}));
  rewrite("tok_merge_without_space",
          [T](Kvs& k, Tensors&) { kv_value(k, T + "merges").strs[0] = "aa"; });
  rewrite("tok_merge_unknown_token",
          [T](Kvs& k, Tensors&) { kv_value(k, T + "merges").strs[1] = "a <nope>"; });
  rewrite("tok_merge_result_not_a_token",
          [T](Kvs& k, Tensors&) { kv_value(k, T + "merges").strs[2] = "z z"; });
  set("tok_bos_out_of_range", T + "bos_token_id", GgufValue::make_u32(kVocab));
  set("tok_eos_huge", T + "eos_token_id", GgufValue::make_u64(uint64_t{1} << 40));
  set("tok_eos_negative", T + "eos_token_id", GgufValue::make_i32(-1));
  set("tok_bos_string", T + "bos_token_id", GgufValue::make_string("0"));
  set("tok_unknown_id_out_of_range", T + "unknown_token_id", GgufValue::make_u32(5000));
  set("tok_padding_id_out_of_range", T + "padding_token_id", GgufValue::make_u32(kVocab));
  set("tok_add_bos_string", T + "add_bos_token", GgufValue::make_string("yes"));

  // -- HF config.json
  hf_files("hf_config_missing", [](const fs::path& d) { fs::remove(d / "config.json"); });
  hf_files("hf_config_not_json", [](const fs::path& d) { write_text(d / "config.json", "{nope"); });
  hf_files("hf_config_array", [](const fs::path& d) { write_text(d / "config.json", "[]"); });
  hf_files("hf_config_deep_nesting", [](const fs::path& d) {
    write_text(d / "config.json",
               "{\"x\":" + std::string(100000, '[') + std::string(100000, ']') + "}");
  });
  hf_files("hf_config_duplicate_key", [](const fs::path& d) {
    std::ifstream in(d / "config.json");
    std::string s((std::istreambuf_iterator<char>(in)), {});
    in.close();
    s.insert(1, "\"num_hidden_layers\": 2, ");
    write_text(d / "config.json", s);
  });
  cfg("hf_architectures_unknown", "architectures", json::array({"MambaForCausalLM"}));
  cfg("hf_architectures_string", "architectures", "LlamaForCausalLM");
  cfg("hf_architectures_empty", "architectures", json::array());
  cfg("hf_layers_missing", "num_hidden_layers", kErase);
  cfg("hf_layers_string", "num_hidden_layers", "2");
  cfg("hf_layers_0", "num_hidden_layers", 0);
  cfg("hf_layers_negative", "num_hidden_layers", -1);
  cfg("hf_layers_float", "num_hidden_layers", 2.5);
  cfg("hf_layers_fewer_than_tensors", "num_hidden_layers", 1);
  cfg("hf_layers_more_than_tensors", "num_hidden_layers", 3);
  cfg("hf_hidden_missing", "hidden_size", kErase);
  cfg("hf_hidden_wrong", "hidden_size", 32);
  cfg("hf_intermediate_wrong", "intermediate_size", 64);
  cfg("hf_heads_0", "num_attention_heads", 0);
  cfg("hf_kv_heads_not_dividing", "num_key_value_heads", 3);
  cfg("hf_head_dim_wrong", "head_dim", 8);
  cfg("hf_eps_negative", "rms_norm_eps", -1e-5);
  cfg("hf_eps_string", "rms_norm_eps", "1e-5");
  cfg("hf_eps_null", "rms_norm_eps", nullptr);
  cfg("hf_rope_negative", "rope_theta", -1e4);
  cfg("hf_rope_0", "rope_theta", 0);
  cfg("hf_vocab_size_mismatch", "vocab_size", kVocab + 1);
  cfg("hf_vocab_size_string", "vocab_size", "300");
  cfg("hf_tie_string", "tie_word_embeddings", "true");
  hf("hf_folded_marker_TRUE", [](json&, HfTensors&, Meta& m) { m["flashnorm.folded"] = "TRUE"; });
  hf("hf_folded_marker_1", [](json&, HfTensors&, Meta& m) { m["flashnorm.folded"] = "1"; });

  // -- HF index and shards
  hf_files("hf_index_missing", [](const fs::path& d) { fs::remove(d / kIndex); });
  hf_files("hf_index_not_json",
           [](const fs::path& d) { write_text(d / kIndex, "{\"weight_map\""); });
  hf_files("hf_index_no_weight_map", [](const fs::path& d) {
    edit_json(d / kIndex, [](json& j) { j.erase("weight_map"); });
  });
  hf_files("hf_index_weight_map_array", [](const fs::path& d) {
    edit_json(d / kIndex, [](json& j) { j["weight_map"] = json::array(); });
  });
  hf_files("hf_index_names_missing_shard", [](const fs::path& d) {
    edit_json(d / kIndex, [](json& j) {
      j["weight_map"]["model.norm.weight"] = "model-00003-of-00002.safetensors";
    });
  });
  hf_files("hf_index_wrong_shard", [](const fs::path& d) {
    edit_json(d / kIndex, [](json& j) {
      for (auto& [k, v] : j["weight_map"].items()) {
        v = v == kShard1 ? kShard2 : kShard1;
        break;
      }
    });
  });
  hf_files("hf_index_path_traversal", [](const fs::path& d) {
    edit_json(d / kIndex,
              [](json& j) { j["weight_map"]["model.norm.weight"] = "../x.safetensors"; });
  });
  hf_files("hf_index_absolute_path", [](const fs::path& d) {
    edit_json(d / kIndex, [](json& j) { j["weight_map"]["model.norm.weight"] = "/etc/passwd"; });
  });
  hf_files("hf_index_missing_tensor", [](const fs::path& d) {
    edit_json(d / kIndex, [](json& j) { j["weight_map"].erase("model.norm.weight"); });
  });
  hf_files("hf_shard_missing", [](const fs::path& d) { fs::remove(d / kShard2); });
  hf_files("hf_shard_empty", [](const fs::path& d) { write_bytes(d / kShard1, {}); });
  hf_files("hf_shard_truncated", [](const fs::path& d) {
    Bytes b = read_bytes(d / kShard2);
    b.resize(b.size() / 2);
    write_bytes(d / kShard2, b);
  });
  hf_files("hf_shard_header_length_huge", [](const fs::path& d) {
    Bytes b = read_bytes(d / kShard1);
    put64(b, 0, uint64_t{1} << 40);
    write_bytes(d / kShard1, b);
  });
  hf_files("hf_shard_header_not_json", [](const fs::path& d) {
    Bytes b = read_bytes(d / kShard1);
    b.at(8) = '[';
    write_bytes(d / kShard1, b);
  });
  hf_files("hf_shard_shape_lies", [](const fs::path& d) {
    edit_header(d / kShard1, [](json& h) { h[first_entry(h, 1)]["shape"][0] = 65; });
  });
  hf_files("hf_shard_offsets_past_end", [](const fs::path& d) {
    edit_header(d / kShard2, [](json& h) {
      auto& e = h[first_entry(h, 2)]["data_offsets"];
      e[1] = e[1].get<uint64_t>() + (uint64_t{1} << 30);
    });
  });
  hf_files("hf_shard_dtype_unknown", [](const fs::path& d) {
    edit_header(d / kShard1, [](json& h) { h[first_entry(h, 2)]["dtype"] = "F33"; });
  });
  hf_files("hf_shard_dtype_i32", [](const fs::path& d) {
    edit_header(d / kShard1, [](json& h) { h[first_entry(h, 2)]["dtype"] = "I32"; });
  });
  hf_files("hf_shard_tensors_overlap", [](const fs::path& d) {
    edit_header(d / kShard1, [](json& h) {  // two [64] gains on the same bytes
      const std::string a = first_entry(h, 1);
      for (auto it = h.begin(); it != h.end(); ++it) {
        if (it.key() != a && it.key() != "__metadata__" && it.value()["shape"] == h[a]["shape"]) {
          it.value()["data_offsets"] = h[a]["data_offsets"];
          return;
        }
      }
      throw std::runtime_error("corpus: no two tensors of one shape");
    });
  });
  hf_files("hf_shard_metadata_not_strings", [](const fs::path& d) {
    edit_header(d / kShard1, [](json& h) { h["__metadata__"] = {{"format", 1}}; });
  });

  // -- HF tensors
  hf("hf_tensor_missing", [](json&, HfTensors& t, Meta&) {
    std::erase_if(t, [](auto& x) { return x.name == "model.layers.0.self_attn.q_proj.weight"; });
  });
  hf("hf_embedding_missing", [](json&, HfTensors& t, Meta&) {
    std::erase_if(t, [](auto& x) { return x.name == "model.embed_tokens.weight"; });
  });
  hf("hf_k_proj_transposed", [](json&, HfTensors& t, Meta&) {
    hf_tensor(t, "model.layers.1.self_attn.k_proj.weight").shape = {64, 32};
  });
  hf("hf_lm_head_wrong_vocab", [](json& c, HfTensors& t, Meta&) {
    c["tie_word_embeddings"] = false;
    t.push_back(hf_f32("lm_head.weight", {kVocab - 1, 64}, 0.01f));
  });
  hf("hf_bias_q_proj", [](json&, HfTensors& t, Meta&) {
    t.push_back(hf_f32("model.layers.0.self_attn.q_proj.bias", {64}, 0.01f));
  });
  hf("hf_bias_down_proj", [](json&, HfTensors& t, Meta&) {
    t.push_back(hf_f32("model.layers.1.mlp.down_proj.bias", {64}, 0.01f));
  });
  hf("hf_extra_layer_tensor", [](json&, HfTensors& t, Meta&) {
    t.push_back(hf_f32("model.layers.2.input_layernorm.weight", {64}, 1.0f));
  });
  hf("hf_unknown_tensor",
     [](json&, HfTensors& t, Meta&) { t.push_back(hf_f32("model.foo.weight", {64}, 1.0f)); });
  hf("hf_nan_weight", [](json&, HfTensors& t, Meta&) {
    hf_tensor(t, "model.layers.1.mlp.up_proj.weight").values[7] = std::nanf("");
  });
  hf("hf_inf_embedding", [](json&, HfTensors& t, Meta&) {
    hf_tensor(t, "model.embed_tokens.weight").values[100] = INFINITY;
  });
  hf("hf_inf_gain",
     [](json&, HfTensors& t, Meta&) { hf_tensor(t, "model.norm.weight").values[0] = INFINITY; });
  return c;
}

const std::vector<Case>& cases() {
  static const std::vector<Case> c = build_cases();
  return c;
}

std::vector<std::string> case_names() {
  std::vector<std::string> n;
  for (const auto& c : cases()) n.push_back(c.name);
  return n;
}

std::string q(const fs::path& p) { return "'" + p.string() + "'"; }

std::string generate_args(const fs::path& in, bool hf) {
  return "generate -m " + q(in) + (hf ? " --tokenizer " + q(gguf_base().path) : "") +
         " -p hi -n 2 --device cpu";
}

void expect_refused(const testing::CliResult& r, const std::string& what) {
  SCOPED_TRACE(what + "\nstderr: " + r.err);
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err.rfind("error: ", 0), 0u);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1);
  EXPECT_TRUE(!r.err.empty() && r.err.back() == '\n');
}

// Control: the unbroken bases pass every subcommand (so a refusal below means the break).
TEST(HostileCorpusControl, ValidBasesPassEverySubcommand) {
  const fs::path d = testing::fresh_dir("hostile_control");
  for (const bool hf : {false, true}) {
    const fs::path in = hf ? hf_base().dir : gguf_base().path;
    SCOPED_TRACE(in.string());
    auto r = testing::run_cli("inspect " + q(in));
    EXPECT_EQ(r.code, 0) << r.err;
    const fs::path out = d / (hf ? "out_hf" : "out.gguf");
    r = testing::run_cli("fold " + q(in) + " -o " + q(out));
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(fs::exists(out));
    r = testing::run_cli(generate_args(in, hf));
    EXPECT_EQ(r.code, 0) << r.err;
  }
}

// At least 100 kinds, each a different input: no case leaves its base unchanged, no two agree.
TEST(HostileCorpusControl, AtLeast100DistinctCases) {
  const fs::path d = testing::fresh_dir("hostile_distinct");
  ASSERT_GE(cases().size(), 100u);
  std::map<uint64_t, std::string> seen = {{testing::fingerprint(gguf_base().path), "gguf base"},
                                          {testing::fingerprint(hf_base().dir), "hf base"}};
  for (const auto& c : cases()) {
    const fs::path in = d / (c.hf ? c.name : c.name + ".gguf");
    ASSERT_NO_THROW(c.make(in)) << c.name;
    const uint64_t h =
        fs::is_directory(in) || fs::is_regular_file(in) ? testing::fingerprint(in) : 0;
    auto [it, fresh] = seen.emplace(h, c.name);
    EXPECT_TRUE(fresh) << c.name << " is the same input as " << it->second;
  }
}

class HostileCorpus : public ::testing::TestWithParam<std::string> {};

TEST_P(HostileCorpus, EverySubcommandRefusesWithOneLine) {
  const Case& c = *std::find_if(cases().begin(), cases().end(),
                                [&](const Case& x) { return x.name == GetParam(); });
  const fs::path d = testing::fresh_dir("hostile_case");
  const fs::path in = d / (c.hf ? "model" : "model.gguf");
  c.make(in);
  const uint64_t before = testing::fingerprint(in);
  fs::create_directories(d / "out");
  const fs::path out = d / "out" / (c.hf ? "folded" : "folded.gguf");
  expect_refused(testing::run_cli("inspect " + q(in)), "inspect");
  expect_refused(testing::run_cli("fold " + q(in) + " -o " + q(out)), "fold");
  EXPECT_TRUE(fs::is_empty(d / "out")) << "fold left output behind";
  expect_refused(testing::run_cli(generate_args(in, c.hf)), "generate");
  EXPECT_EQ(testing::fingerprint(in), before) << "the input was modified";
}

INSTANTIATE_TEST_SUITE_P(Corpus, HostileCorpus, ::testing::ValuesIn(case_names()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace flashnorm
