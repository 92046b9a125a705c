// Helpers shared by the GGUF reader and writer (not part of the public API).
// Source: GGUF specification, ggml/docs/gguf.md, "gguf_metadata_value_type".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>

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

// The C++ type each value type is stored as on disk, indexed by the on-disk id (GgufType):
// integers and floats as themselves, BOOL as one byte; STRING and ARRAY have none (monostate).
using ScalarTypes = std::tuple<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float,
                               uint8_t, std::monostate, std::monostate, uint64_t, int64_t, double>;

template <class T, class Fn>
bool call_with_type(Fn& fn) {
  if constexpr (std::is_same_v<T, std::monostate>) {
    return false;
  } else {
    fn(T{});
    return true;
  }
}

template <class Fn, size_t... I>
bool visit_scalar_type(uint32_t id, Fn& fn, std::index_sequence<I...>) {
  return ((id == I && call_with_type<std::tuple_element_t<I, ScalarTypes>>(fn)) || ...);
}

// Calls fn(T{}) with the C++ type T that stores a scalar value type on disk (see ScalarTypes).
// Returns false without calling fn for STRING, ARRAY and unknown ids. The reader and the writer
// both dispatch on value types through this one table.
template <class Fn>
bool visit_scalar_type(GgufType t, Fn&& fn) {
  return visit_scalar_type(static_cast<uint32_t>(t), fn,
                           std::make_index_sequence<std::tuple_size_v<ScalarTypes>>{});
}

// Size in bytes of a scalar value type; 0 for STRING and ARRAY (variable-length).
inline uint32_t scalar_size(GgufType t) {
  uint32_t n = 0;
  visit_scalar_type(t, [&](auto tag) { n = sizeof(tag); });
  return n;
}

// Which GgufValue members hold values of C++ type T: 0 floats (f, f_arr), 1 signed integers (i,
// i_arr), 2 unsigned integers and booleans (u, u_arr).
template <class T>
constexpr size_t kSlot = std::is_floating_point_v<T> ? 0
                         : std::is_signed_v<T>       ? 1
                                                     : 2;

// The scalar member of `v` a value of C++ type T is held in.
template <class T>
auto& scalar_slot(GgufValue& v) {
  return std::get<kSlot<T>>(std::tie(v.f, v.i, v.u));
}
// The array member of `v` elements of C++ type T are held in.
template <class T>
auto& array_slot(GgufValue& v) {
  return std::get<kSlot<T>>(std::tie(v.f_arr, v.i_arr, v.u_arr));
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

// One entry of a conversion table: a tensor type and the function converting its blocks.
template <class Fn>
struct Converter {
  GgmlType type;
  Fn fn;
};

// The function `table` (an array of Converter) has for `type`; nullptr when it has none.
template <class Table>
auto find_converter(const Table& table, GgmlType type) {
  for (const auto& c : table) {
    if (c.type == type) return c.fn;
  }
  return decltype(table[0].fn){};
}

// The traits of `type` for a block conversion named `who` ("quantize", "dequantize") of `n`
// elements; `supported` says whether that conversion handles the type. Errors: throws Error
// "WHO: type T is not supported" for an unknown or unsupported type and "WHO: N elements is not a
// multiple of the T block size B" when n does not fill whole blocks.
GgmlTypeTraits conversion_traits(GgmlType type, size_t n, bool supported, std::string_view who);

const char* value_type_name(GgufType t);
const char* value_type_name(uint32_t t);

}  // namespace flashnorm::io::gguf_detail
