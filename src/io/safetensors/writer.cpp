// safetensors writer (huggingface/safetensors README "Format"): 8-byte little-endian header length,
// JSON header padded with spaces so the data buffer starts at a multiple of 8, tensors packed in
// order without gaps. Written through AtomicFile.
#include <fmt/format.h>

#include <set>

#include "flashnorm/error.h"
#include "flashnorm/io/atomic_file.h"
#include "flashnorm/io/safetensors.h"
#include "internal.h"

namespace flashnorm::io {

void write_safetensors(const std::filesystem::path& path, const std::vector<StTensorOut>& tensors,
                       const std::map<std::string, std::string>& metadata,
                       std::span<const std::filesystem::path> inputs) {
  using st_detail::quote;
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = std::move(m);
  }
  std::set<std::string_view> names;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    if (!t.bytes && t.dtype != StDtype::F32 && t.dtype != StDtype::F16 &&
        t.dtype != StDtype::BF16) {
      throw Error(fmt::format("{}: tensor {}: cannot write dtype {} (only F32, F16, BF16)",
                              path.string(), quote(t.name), st_dtype_name(t.dtype)));
    }
    if (t.name == "__metadata__" || !names.insert(t.name).second) {
      throw Error(
          fmt::format("{}: tensor name {} is reserved or repeated", path.string(), quote(t.name)));
    }
    uint64_t n = 1;
    for (uint64_t d : t.shape) {
      if (__builtin_mul_overflow(n, d, &n)) {
        throw Error(
            fmt::format("{}: tensor {}: shape product overflows", path.string(), quote(t.name)));
      }
    }
    uint64_t bytes = 0;
    if (__builtin_mul_overflow(n, st_dtype_size(t.dtype), &bytes)) {
      throw Error(fmt::format("{}: tensor {}: byte size overflows", path.string(), quote(t.name)));
    }
    if (t.bytes ? t.bytes->size() != bytes : n != t.values.size()) {
      throw Error(fmt::format(
          "{}: tensor {}: shape has {} elements but {} {} are given", path.string(), quote(t.name),
          n, t.bytes ? t.bytes->size() : t.values.size(), t.bytes ? "bytes" : "values"));
    }
    header[t.name] = {{"dtype", st_dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: a tensor name or metadata string is not valid UTF-8 ({})",
                            path.string(), e.what()));
  }
  text.append((8 - text.size() % 8) % 8, ' ');

  AtomicFile out(path, inputs);
  uint8_t len[8];
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(n >> (8 * i));
  out.write(len, 8);
  out.write(text.data(), text.size());
  for (const auto& t : tensors) {
    if (t.bytes) {
      out.write(t.bytes->data(), t.bytes->size());
      continue;
    }
    std::vector<uint8_t> bytes = st_detail::from_fp32(t.dtype, t.values);
    out.write(bytes.data(), bytes.size());
  }
  out.commit();
}

}  // namespace flashnorm::io
