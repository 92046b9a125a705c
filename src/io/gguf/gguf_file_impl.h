// GgufFile's state, shared by the reader (gguf_reader.cpp: open, parse, tensor data) and the
// lookups and typed accessors (gguf_accessors.cpp). Not part of the public API.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "flashnorm/error.h"
#include "flashnorm/io/gguf.h"
#include "flashnorm/io/mapped_file.h"
#include "gguf_internal.h"

namespace flashnorm::io {

struct GgufFile::Impl {
  std::string name;
  std::vector<uint8_t> owned;  // the image, for parse()
  MappedFile mapping;          // the file, for open()
  std::span<const uint8_t> bytes;

  uint32_t version = 0;
  uint32_t alignment = gguf_detail::kDefaultAlignment;
  uint64_t data_offset = 0;
  std::vector<GgufKv> kvs;
  std::map<std::string, size_t, std::less<>> kv_index;
  std::vector<GgufTensorInfo> tensors;
  std::map<std::string, size_t, std::less<>> tensor_index;

  void parse();
  const GgufKv& require(std::string_view key) const;
  [[noreturn]] void bad_kv(const GgufKv& kv, std::string_view what) const {
    throw FormatError(name, fmt::format("kv \"{}\"", kv.key), kv.offset, what);
  }
};

}  // namespace flashnorm::io
