// GGML tensor element types and their block layouts.
// Source: GGUF specification (ggml/docs/gguf.md, "GGML tensor types") and ggml-common.h block
// definitions; the `gguf` Python package's constants.py (GGML_QUANT_SIZES) lists the same sizes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace flashnorm::io {

// Numeric values are the on-disk type ids of GGUF v3.
enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  BF16 = 30,
};

// Elements per block and bytes per block of a type (1 and sizeof(elem) for plain types).
struct GgmlTypeTraits {
  std::string_view name;  // "Q4_K", as the gguf package spells it
  uint32_t block_elems;   // elements per block along the row (dims[0])
  uint32_t block_bytes;   // bytes per block
};

// Traits of a known type id; std::nullopt for ids this library does not know (including the
// removed Q4_2/Q4_3 ids 4 and 5).
std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t type_id);

// Name of a type for messages ("type 99" for unknown ids).
std::string ggml_type_name(uint32_t type_id);

// Parses "F32", "bf16", "Q4_1"... (case-insensitive). std::nullopt if unknown.
std::optional<GgmlType> ggml_type_from_name(std::string_view name);

}  // namespace flashnorm::io
