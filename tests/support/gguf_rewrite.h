// Test support: hand-edited copies of GGUF files (hostile and careless inputs built from a
// valid one).
#pragma once

#include <cstring>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "flashnorm/io/gguf.h"

namespace flashnorm::testing {

using GgufEdit = std::function<void(std::vector<io::GgufKv>&, std::vector<io::GgufTensorOut>&)>;

// Copies the GGUF file `in` to `out` with `edit` applied to its KVs and tensors (bytes owned).
inline void rewrite_gguf(const std::filesystem::path& in, const std::filesystem::path& out,
                         const GgufEdit& edit) {
  io::GgufFile f = io::GgufFile::open(in);
  std::vector<io::GgufKv> kvs = f.kvs();
  std::vector<io::GgufTensorOut> ts;
  for (const auto& t : f.tensors()) {
    const auto d = f.tensor_data(t);
    ts.push_back({t.name, t.dims, t.type, std::vector<uint8_t>(d.begin(), d.end()), {}});
  }
  edit(kvs, ts);
  io::write_gguf(out, kvs, ts);
}

// An F32 tensor with GGUF dims `dims` (fastest first) filled with `value`.
inline io::GgufTensorOut f32_tensor(const std::string& name, std::vector<uint64_t> dims,
                                    float value) {
  uint64_t n = 1;
  for (uint64_t d : dims) n *= d;
  std::vector<float> v(n, value);
  io::GgufTensorOut t{name, std::move(dims), io::GgmlType::F32, {}, {}};
  t.bytes.resize(n * 4);
  std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  return t;
}

// The F32 tensor `name` of `ts` (nullptr if absent or not F32), for editing its bytes.
inline io::GgufTensorOut* find_f32(std::vector<io::GgufTensorOut>& ts, const std::string& name) {
  for (auto& t : ts) {
    if (t.name == name && t.type == io::GgmlType::F32) return &t;
  }
  return nullptr;
}

// Sets element `i` of the F32 tensor `t` to `v`.
inline void set_f32(io::GgufTensorOut& t, size_t i, float v) {
  std::memcpy(t.bytes.data() + 4 * i, &v, 4);
}

// The "tokenizer.*" KVs of `f`, in file order (values only matter: the writer recomputes offsets).
inline std::vector<io::GgufKv> tokenizer_kvs(const io::GgufFile& f) {
  std::vector<io::GgufKv> out;
  for (const auto& kv : f.kvs()) {
    if (kv.key.starts_with("tokenizer.")) out.push_back(kv);
  }
  return out;
}

// Appends every "tokenizer.*" KV of the GGUF file `vocab` (e.g. SmolLM2's) to `kvs`.
inline void add_vocabulary(std::vector<io::GgufKv>& kvs, const std::filesystem::path& vocab) {
  for (auto& kv : tokenizer_kvs(io::GgufFile::open(vocab))) kvs.push_back(std::move(kv));
}

// The value of `key` in `kvs` (a std::vector<io::GgufKv>, const or not, for reading or editing);
// throws std::runtime_error when the key is absent.
template <class Kvs>
auto& kv_value(Kvs& kvs, std::string_view key) {
  for (auto& kv : kvs) {
    if (kv.key == key) return kv.value;
  }
  throw std::runtime_error("no KV " + std::string(key));
}

// Sets `key` to `v` in `kvs`, appending the KV when absent.
inline void set_kv(std::vector<io::GgufKv>& kvs, std::string_view key, io::GgufValue v) {
  for (io::GgufKv& kv : kvs) {
    if (kv.key == key) {
      kv.value = std::move(v);
      return;
    }
  }
  kvs.push_back(io::GgufKv{std::string(key), std::move(v), 0});
}

// Removes `key` from `kvs` (no-op when absent).
inline void erase_kv(std::vector<io::GgufKv>& kvs, std::string_view key) {
  std::erase_if(kvs, [&](const io::GgufKv& kv) { return kv.key == key; });
}

}  // namespace flashnorm::testing
