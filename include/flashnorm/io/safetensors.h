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
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace flashnorm::io {

// safetensors dtypes. Only F32, F16 and BF16 can be converted to fp32 by this library; the others
// are parsed (so a checkpoint that has them still opens) and refused by to_fp32. Sub-byte dtypes
// (F4, F6_*), F8_E8M0 and C64 are not supported: a header naming them is a FormatError.
enum class StDtype {
  F32,
  F16,
  BF16,
  F64,
  I64,
  I32,
  I16,
  I8,
  U8,
  BOOL,
  F8_E4M3,
  F8_E5M2,
  U16,
  U32,
  U64
};

// The dtype's name as written in a safetensors header ("F32", "BF16", ...).
std::string_view st_dtype_name(StDtype d);
// Bytes per element (F32: 4, BF16: 2, BOOL: 1, ...).
size_t st_dtype_size(StDtype d);

struct StTensorInfo {
  std::string name;
  StDtype dtype = StDtype::F32;
  std::vector<uint64_t> shape;  // row-major, slowest first (PyTorch order: W is [out, in])
  uint64_t begin = 0, end = 0;  // byte offsets inside the data buffer
  uint64_t n_elements() const;
};

// A parsed, memory-mapped .safetensors file.
// Validation (every failure a FormatError naming the file, the field and a byte offset):
//  - header length: file >= 8 bytes, 0 < N <= 100'000'000 (the reference's MAX_HEADER_SIZE),
//    N <= file size - 8; the header must be a JSON object (nlohmann; syntax errors report
//    8 + the position nlohmann gives); duplicate keys at any depth are refused;
//  - each tensor "name": an object with dtype (a known name), shape (array of integers >= 0,
//    element count and byte size without 64-bit overflow), data_offsets [begin, end] with
//    begin <= end <= buffer size and end - begin = elements x dtype size; fields are named
//    "\"name\".dtype", "\"name\".shape", "\"name\".data_offsets" and the offset is that of the
//    entry's key in the file;
//  - the offsets tile the buffer: no overlap, no hole, nothing after the last tensor (offset: the
//    file position of the first byte in question);
//  - "__metadata__": an object of string -> string.
// Unknown keys inside a tensor entry are ignored (as the reference does).
class SafetensorsFile {
 public:
  // Maps the file read-only (MAP_PRIVATE). Errors: Error if it cannot be opened or is not a
  // regular file; FormatError as above. (A file truncated by another process while mapped would
  // raise SIGBUS on access: do not modify inputs while reading them.)
  static SafetensorsFile open(const std::filesystem::path& path);
  // Parses an in-memory file; the bytes are copied, so `bytes` may be freed afterwards.
  // `name` is used in error messages.
  static SafetensorsFile parse(std::span<const uint8_t> bytes, std::string name);
  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  ~SafetensorsFile();

  const std::string& name() const;
  const std::vector<StTensorInfo>& tensors() const;  // in header order
  const StTensorInfo* find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const;  // "__metadata__"
  // The tensor's bytes (little-endian, row-major). Errors: Error if `t` lies outside the buffer.
  std::span<const uint8_t> data(const StTensorInfo& t) const;

 private:
  struct Impl;
  explicit SafetensorsFile(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Converts a tensor's bytes to fp32 (exactly: every F16, BF16 and F8_E4M3 value is an fp32 value).
// Errors: throws Error for dtypes other than F32/F16/BF16/F8_E4M3.
std::vector<float> st_to_fp32(StDtype dtype, std::span<const uint8_t> bytes);

// One float8_e4m3fn value (OCP FP8 E4M3 as PyTorch's torch.float8_e4m3fn: 4 exponent bits, bias 7,
// 3 mantissa bits, no infinities, 0x7F / 0xFF NaN; largest finite 448) as fp32.
float fp8_e4m3_to_fp32(uint8_t b);

// One tensor to write: fp32 values converted once (round to nearest even) to `dtype`, or, when
// `bytes` is set, those bytes written unchanged (any dtype; e.g. a view into a mapped input, which
// must outlive the write).
struct StTensorOut {
  std::string name;
  StDtype dtype = StDtype::F32;  // F32, F16 or BF16 for values; any dtype for bytes
  std::vector<uint64_t> shape;
  std::vector<float> values;
  std::optional<std::span<const uint8_t>> bytes;  // elements x st_dtype_size(dtype) bytes
  // The tensor's size in the file: bytes->size(), or values.size() x st_dtype_size(dtype).
  uint64_t byte_size() const;
};

// Writes a .safetensors file via AtomicFile (temporary + rename), never over any of `inputs`.
// Tensors are written in the given order, header padded with spaces to 8 bytes; "__metadata__"
// comes first when `metadata` is not empty. Errors: Error for values of a dtype other than
// F32/F16/BF16, a shape whose element count differs from values.size() (or, for bytes, whose byte
// size differs from bytes->size()), a repeated or "__metadata__" name, a name or metadata string
// that is not UTF-8, or an I/O failure (the target is then untouched).
void write_safetensors(const std::filesystem::path& path, const std::vector<StTensorOut>& tensors,
                       const std::map<std::string, std::string>& metadata,
                       std::span<const std::filesystem::path> inputs = {});

// A Hugging Face model directory: config.json, and model.safetensors or
// model.safetensors.index.json with its shards (every shard named by the index must exist and
// hold exactly the tensors the index assigns to it). The index wins when both exist.
// Errors of open(): Error if the directory, config.json or both weight files are missing;
// FormatError (file = config.json or the index) for JSON that is not an object or has duplicate
// keys, a missing/non-object weight_map, a shard path that is absolute, empty or has a ".."
// component (checked lexically: symbolic links, as in the Hugging Face cache, are followed), a
// shard that does not exist, a tensor absent from the shard the index names, or a shard tensor
// the index does not assign to that shard; FormatError from each shard's own validation.
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
  // Metadata of the first shard (where folding records "flashnorm.folded"); empty if no shard.
  const std::map<std::string, std::string>& metadata() const;

 private:
  struct Impl;
  explicit HfModelDir(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Writes a Hugging Face directory: config.json (given), and the tensors split into `n_shards`
// files model-0000i-of-0000n.safetensors with model.safetensors.index.json when n_shards > 1
// (model.safetensors otherwise; shard s gets the tensors [T*s/n, T*(s+1)/n) in order). The index
// is {"metadata": {"total_size": bytes}, "weight_map": {name: shard}}. Every file goes through
// AtomicFile; the directory is built in a StagingDir beside it and renamed into place when complete
// (StagingDir: `dir` must not exist or be empty, its parent must exist); `copy_from` is never
// written to (writing into it is an Error). Other regular files of `copy_from` (tokenizer.json,
// generation_config.json, ...) are copied unchanged, except config.json, *.index.json and weight
// files (.safetensors, .bin, .pt, .pth, .ckpt, .h5, .msgpack, .gguf, .onnx).
// Errors: Error for n_shards < 1 or more shards than tensors, a config that is not an object, an
// existing non-empty `dir`, or any error of write_safetensors.
// `folders`: sentence-transformers' module folders of `copy_from` (one path component each, e.g.
// "2_Dense"), created in `dir` with their regular files copied, except the files of `rewritten`
// (a path relative to the directory, e.g. "2_Dense/model.safetensors" -> its tensors, written
// with no metadata instead of the copy). Errors: also Error for a folder that is not one path
// component or not a directory of copy_from, and a rewritten file outside those folders.
struct HfModuleFolders {
  std::vector<std::string> folders;
  std::map<std::string, std::vector<StTensorOut>> rewritten;
};
void write_hf_dir(const std::filesystem::path& dir, const nlohmann::json& config,
                  const std::vector<StTensorOut>& tensors,
                  const std::map<std::string, std::string>& metadata, int n_shards,
                  const std::filesystem::path& copy_from = {}, const HfModuleFolders& modules = {});

}  // namespace flashnorm::io
