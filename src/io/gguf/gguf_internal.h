// Helpers shared by the GGUF reader and writer (not part of the public API).
// Source: GGUF specification, ggml/docs/gguf.md, "gguf_metadata_value_type".
#pragma once

#include <cstdint>

#include "flashnorm/io/gguf.h"

namespace flashnorm::io::gguf_detail {

inline constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as a little-endian u32
inline constexpr uint32_t kDefaultAlignment = 32;
inline constexpr uint32_t kMaxAlignment = 1u << 20;  // 1 MiB; larger values are refused
inline constexpr uint32_t kMaxDims = 4;
inline constexpr uint64_t kMaxKeyLength = 65535;  // spec: keys are at most 2^16 - 1 bytes

inline bool is_known_value_type(uint32_t t) {
  return t <= static_cast<uint32_t>(GgufType::FLOAT64);
}

// Size in bytes of a scalar value type; 0 for STRING and ARRAY (variable-length).
inline uint32_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::UINT8:
    case GgufType::INT8:
    case GgufType::BOOL:
      return 1;
    case GgufType::UINT16:
    case GgufType::INT16:
      return 2;
    case GgufType::UINT32:
    case GgufType::INT32:
    case GgufType::FLOAT32:
      return 4;
    case GgufType::UINT64:
    case GgufType::INT64:
    case GgufType::FLOAT64:
      return 8;
    case GgufType::STRING:
    case GgufType::ARRAY:
      return 0;
  }
  return 0;
}

// Smallest number of bytes one value of type t can occupy in a file: the scalar size, 8 for a
// string (its length field) and 12 for an array (element type + length).
inline uint64_t min_encoded_size(GgufType t) {
  if (t == GgufType::STRING) return 8;
  if (t == GgufType::ARRAY) return 12;
  return scalar_size(t);
}

inline bool is_unsigned_int(GgufType t) {
  return t == GgufType::UINT8 || t == GgufType::UINT16 || t == GgufType::UINT32 ||
         t == GgufType::UINT64;
}
inline bool is_signed_int(GgufType t) {
  return t == GgufType::INT8 || t == GgufType::INT16 || t == GgufType::INT32 ||
         t == GgufType::INT64;
}
inline bool is_float(GgufType t) { return t == GgufType::FLOAT32 || t == GgufType::FLOAT64; }

const char* value_type_name(GgufType t);
const char* value_type_name(uint32_t t);

}  // namespace flashnorm::io::gguf_detail
