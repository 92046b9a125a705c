// Test support: hand-edited copies of GGUF files (hostile and careless inputs built from a
// valid one).
#pragma once

#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
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

// Appends every "tokenizer.*" KV of the GGUF file `vocab` (e.g. SmolLM2's) to `kvs`.
inline void add_vocabulary(std::vector<io::GgufKv>& kvs, const std::filesystem::path& vocab) {
  io::GgufFile v = io::GgufFile::open(vocab);
  for (const auto& kv : v.kvs()) {
    if (kv.key.starts_with("tokenizer.")) kvs.push_back(kv);
  }
}

}  // namespace flashnorm::testing
