// safetensors reader and writer, and Hugging Face model directories (config.json plus one file
// or several shards with model.safetensors.index.json).
// Source: safetensors format spec (huggingface/safetensors README, "Format"): 8-byte
// little-endian header length N, N bytes of UTF-8 JSON {name: {dtype, shape, data_offsets:[b,e]},
// "__metadata__": {str: str}}, then the byte buffer; offsets are relative to the buffer, must
// tile it exactly without overlap. The reader treats the file as hostile and throws FormatError
// (file, field, byte offset) for any violation. JSON is parsed with nlohmann::json.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace flashnorm::io {

// safetensors dtypes. Only F32, F16 and BF16 can be converted to fp32 by this library; the others
// are parsed (so a checkpoint that has them still opens) and refused by to_fp32.
enum class StDtype { F32, F16, BF16, F64, I64, I32, I16, I8, U8, BOOL, F8_E4M3, F8_E5M2 };

std::string_view st_dtype_name(StDtype d);
size_t st_dtype_size(StDtype d);

struct StTensorInfo {
  std::string name;
  StDtype dtype = StDtype::F32;
  std::vector<uint64_t> shape;  // row-major, slowest first (PyTorch order: W is [out, in])
  uint64_t begin = 0, end = 0;  // byte offsets inside the data buffer
  uint64_t n_elements() const;
};

// A parsed, memory-mapped .safetensors file.
class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::filesystem::path& path);
  static SafetensorsFile parse(std::span<const uint8_t> bytes, std::string name);
  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  ~SafetensorsFile();

  const std::string& name() const;
  const std::vector<StTensorInfo>& tensors() const;  // in header order
  const StTensorInfo* find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const;  // "__metadata__"
  std::span<const uint8_t> data(const StTensorInfo& t) const;

 private:
  struct Impl;
  explicit SafetensorsFile(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Converts a tensor's bytes to fp32. Errors: throws Error for dtypes other than F32/F16/BF16.
std::vector<float> st_to_fp32(StDtype dtype, std::span<const uint8_t> bytes);

// One tensor to write: fp32 values converted once (round to nearest even) to `dtype`.
struct StTensorOut {
  std::string name;
  StDtype dtype = StDtype::F32;  // F32, F16 or BF16
  std::vector<uint64_t> shape;
  std::vector<float> values;
};

// Writes a .safetensors file via AtomicFile (temporary + rename), never over any of `inputs`.
// Tensors are written in the given order, header padded with spaces to 8 bytes.
void write_safetensors(const std::filesystem::path& path, const std::vector<StTensorOut>& tensors,
                       const std::map<std::string, std::string>& metadata,
                       std::span<const std::filesystem::path> inputs = {});

// A Hugging Face model directory: config.json, and model.safetensors or
// model.safetensors.index.json with its shards (every shard named by the index must exist and
// hold exactly the tensors the index assigns to it).
class HfModelDir {
 public:
  static HfModelDir open(const std::filesystem::path& dir);
  HfModelDir(HfModelDir&&) noexcept;
  HfModelDir& operator=(HfModelDir&&) noexcept;
  ~HfModelDir();

  const std::filesystem::path& dir() const;
  const nlohmann::json& config() const;
  std::vector<std::string> tensor_names() const;  // sorted
  // The file holding `name` and its info; nullptr if absent.
  const StTensorInfo* find(std::string_view name, const SafetensorsFile** file = nullptr) const;
  std::vector<float> load_fp32(std::string_view name) const;  // throws Error if absent
  const std::vector<SafetensorsFile>& shards() const;
  // Metadata of the first shard (where folding records "flashnorm.folded").
  const std::map<std::string, std::string>& metadata() const;

 private:
  struct Impl;
  explicit HfModelDir(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Writes a Hugging Face directory: config.json (given), and the tensors split into `n_shards`
// files model-0000i-of-0000n.safetensors with model.safetensors.index.json when n_shards > 1
// (model.safetensors otherwise). Every file goes through AtomicFile; the directory is created if
// missing; `inputs` are never overwritten. Other files of `copy_from` (tokenizer.json,
// generation_config.json, ...), except safetensors files and the index, are copied unchanged.
void write_hf_dir(const std::filesystem::path& dir, const nlohmann::json& config,
                  const std::vector<StTensorOut>& tensors,
                  const std::map<std::string, std::string>& metadata, int n_shards,
                  const std::filesystem::path& copy_from = {});

}  // namespace flashnorm::io
