// GGUF v3 reader and writer. The reader treats every file as hostile: each count, length,
// dimension product, offset, alignment and type is checked (with overflow-checked arithmetic)
// against the bytes that exist, and any violation throws FormatError naming the field and the
// byte offset. Tensor data is memory-mapped, never copied.
// Source: GGUF specification, ggml/docs/gguf.md (version 3): header, KV section, tensor infos,
// alignment padding ("general.alignment", default 32), data section.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "flashnorm/io/ggml_types.h"

namespace flashnorm::io {

// GGUF metadata value types (on-disk ids).
enum class GgufType : uint32_t {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
};

// One metadata value, keeping its on-disk type so a writer reproduces the file exactly.
// Scalars: integers are held in `u` (unsigned types) or `i` (signed types), floats in `f`,
// booleans in `b`. Arrays: `elem_type` and one of the vectors, by element type (integers
// widened to 64 bits; strings in `strs`; nested arrays in `arrs`).
struct GgufValue {
  GgufType type = GgufType::UINT32;
  GgufType elem_type = GgufType::UINT8;  // only for ARRAY
  uint64_t u = 0;
  int64_t i = 0;
  double f = 0;
  bool b = false;
  std::string str;
  std::vector<uint64_t> u_arr;
  std::vector<int64_t> i_arr;
  std::vector<double> f_arr;
  std::vector<std::string> strs;
  std::vector<GgufValue> arrs;

  // Scalars of the named on-disk type.
  static GgufValue make_u32(uint32_t v);
  static GgufValue make_u64(uint64_t v);
  static GgufValue make_i32(int32_t v);
  static GgufValue make_f32(float v);
  static GgufValue make_bool(bool v);
  static GgufValue make_string(std::string v);
  // Arrays with element type `elem`; the values go to the vector that type uses (see above), so
  // make_uint_array takes unsigned integer or BOOL element types, make_int_array signed integer
  // ones, make_float_array FLOAT32 or FLOAT64. make_array gives an empty array.
  static GgufValue make_array(GgufType elem);
  static GgufValue make_uint_array(GgufType elem, std::vector<uint64_t> v);
  static GgufValue make_int_array(GgufType elem, std::vector<int64_t> v);
  static GgufValue make_float_array(GgufType elem, std::vector<double> v);
  static GgufValue make_string_array(std::vector<std::string> v);
  // Number of array elements (0 for scalars).
  size_t array_size() const;
};

struct GgufKv {
  std::string key;
  GgufValue value;
  uint64_t offset = 0;  // byte offset of the key's length field in the file (for messages)
};

// One tensor info record. `dims` are as GGUF stores them: fastest-varying first, so a
// matrix W[N, K] (PyTorch [out, in]) has dims = {K, N} and rows of K elements.
struct GgufTensorInfo {
  std::string name;
  std::vector<uint64_t> dims;  // 1..4 entries, each >= 1
  GgmlType type = GgmlType::F32;
  uint64_t offset = 0;       // relative to the data section, a multiple of the alignment
  uint64_t n_elements = 0;   // product of dims (checked)
  uint64_t n_bytes = 0;      // n_elements / block_elems * block_bytes (checked)
  uint64_t info_offset = 0;  // byte offset of this record in the file (for messages)

  uint64_t row_elems() const { return dims.empty() ? 0 : dims[0]; }
  uint64_t n_rows() const { return dims.empty() ? 0 : n_elements / dims[0]; }
};

// A parsed, memory-mapped GGUF file. Opening validates everything listed in docs/design.md section
// 5, "GGUF reading rules": magic and version; KV and tensor counts against the remaining bytes;
// string and array lengths; value and array element types; n_dims <= 4; each dim >= 1 and the
// product without overflow; known tensor type; dims[0] a multiple of the type's block size;
// general.alignment a u32 power of two in [1, 1 MiB]; every offset aligned, inside the data
// section, and no two tensors overlapping; unique tensor names and keys.
// Tokenizer arrays are checked where a reader uses them (see string_array / int_array).
// Errors: throws FormatError (file, field, byte offset, what is wrong).
class GgufFile {
 public:
  static GgufFile open(const std::filesystem::path& path);
  // Parses an in-memory image (used by the fuzz target and tests). `name` appears in messages.
  // The bytes are copied, so `bytes` need not outlive the result.
  static GgufFile parse(std::span<const uint8_t> bytes, std::string name);

  GgufFile(GgufFile&&) noexcept;
  GgufFile& operator=(GgufFile&&) noexcept;
  ~GgufFile();

  const std::string& name() const;
  uint32_t version() const;
  uint32_t alignment() const;
  uint64_t data_offset() const;  // absolute byte offset of the data section
  uint64_t file_size() const;

  const std::vector<GgufKv>& kvs() const;
  const GgufKv* find(std::string_view key) const;  // nullptr if absent
  const std::vector<GgufTensorInfo>& tensors() const;
  const GgufTensorInfo* find_tensor(std::string_view name) const;  // nullptr if absent

  // Typed accessors. Each throws FormatError naming the key when it is absent (for the
  // non-optional forms) or has a type that does not convert without loss. Integer getters
  // accept any integer type whose value fits.
  uint64_t get_uint(std::string_view key) const;
  std::optional<uint64_t> get_uint_opt(std::string_view key) const;
  double get_float(std::string_view key) const;  // FLOAT32 or FLOAT64
  std::optional<double> get_float_opt(std::string_view key) const;
  bool get_bool_or(std::string_view key, bool fallback) const;
  std::string get_string(std::string_view key) const;
  std::optional<std::string> get_string_opt(std::string_view key) const;
  // Arrays: throws if the key is absent, not an array, or its element type is not STRING
  // (resp. an integer type that fits int64 / a float type).
  const std::vector<std::string>& string_array(std::string_view key) const;
  std::vector<int64_t> int_array(std::string_view key) const;
  std::vector<double> float_array(std::string_view key) const;

  // Raw bytes of a tensor inside the mapping (n_bytes long). Valid while this object lives.
  std::span<const uint8_t> tensor_data(const GgufTensorInfo& t) const;

 private:
  struct Impl;
  explicit GgufFile(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// One tensor to write: its info (name, dims, type; offset and sizes are computed by the
// writer) and its bytes (exactly the size the type and dims require).
struct GgufTensorOut {
  std::string name;
  std::vector<uint64_t> dims;  // fastest-first, as in GgufTensorInfo
  GgmlType type = GgmlType::F32;
  std::vector<uint8_t> bytes;     // owned bytes, or...
  std::span<const uint8_t> view;  // ...a view into a mapped input (used when bytes is empty)
};

// Writes a GGUF v3 file via AtomicFile (temporary + rename), refusing to overwrite any of
// `inputs`. KVs are written in the given order; "general.alignment" in `kvs` (if present, a u32
// power of two) sets the alignment, else 32. Tensors are laid out in the given order, each padded
// to the alignment. Errors: throws Error on a size mismatch or an I/O failure.
void write_gguf(const std::filesystem::path& path, const std::vector<GgufKv>& kvs,
                const std::vector<GgufTensorOut>& tensors,
                std::span<const std::filesystem::path> inputs = {});

}  // namespace flashnorm::io
