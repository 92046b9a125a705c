// Internal helpers shared by the safetensors reader, writer and Hugging Face directory code.
// Not part of the public API (include/flashnorm/io/safetensors.h).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "flashnorm/io/json_strict.h"
#include "flashnorm/io/safetensors.h"

namespace flashnorm::io::st_detail {

// The dtype named `name` in a safetensors header ("F32", "BF16", ...), or nullopt if unknown.
std::optional<StDtype> parse_dtype(std::string_view name);

// Converts fp32 values to the bytes of `dtype` (F32, F16 or BF16; little-endian; fp16/bf16 round
// to nearest even once). Errors: throws Error for other dtypes.
std::vector<uint8_t> from_fp32(StDtype dtype, std::span<const float> values);

// flashnorm/io/json_strict.h
using io::parse_json_strict;

// `s` as a JSON string literal, for error messages (invalid UTF-8 replaced; never throws).
std::string quote(std::string_view s);

// Byte offset (base + position) of the first occurrence of the JSON string `"key"` (encoded as
// nlohmann dumps it) at or after `from` in `text`; `base` if absent. Used to point error messages
// at the header entry of a tensor; the position is exact for keys written without escapes.
uint64_t key_offset(std::string_view text, std::string_view key, uint64_t base, size_t from = 0);

}  // namespace flashnorm::io::st_detail
