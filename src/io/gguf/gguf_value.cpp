// GgufValue constructors and value-type names. Source: GGUF specification (value types).
#include "flashnorm/io/gguf.h"
#include "gguf_internal.h"

namespace flashnorm::io {

// Designated initializers name the fields each maker sets; the other members keep their default
// member initializers on purpose, which GCC's -Wmissing-field-initializers would flag.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
GgufValue GgufValue::make_u32(uint32_t v) { return {.type = GgufType::UINT32, .u = v}; }
GgufValue GgufValue::make_u64(uint64_t v) { return {.type = GgufType::UINT64, .u = v}; }
GgufValue GgufValue::make_i32(int32_t v) { return {.type = GgufType::INT32, .i = v}; }
GgufValue GgufValue::make_f32(float v) { return {.type = GgufType::FLOAT32, .f = v}; }
GgufValue GgufValue::make_bool(bool v) { return {.type = GgufType::BOOL, .b = v}; }
GgufValue GgufValue::make_string(std::string v) {
  return {.type = GgufType::STRING, .str = std::move(v)};
}

GgufValue GgufValue::make_array(GgufType elem) {
  return {.type = GgufType::ARRAY, .elem_type = elem};
}
GgufValue GgufValue::make_uint_array(GgufType elem, std::vector<uint64_t> v) {
  return {.type = GgufType::ARRAY, .elem_type = elem, .u_arr = std::move(v)};
}
GgufValue GgufValue::make_int_array(GgufType elem, std::vector<int64_t> v) {
  return {.type = GgufType::ARRAY, .elem_type = elem, .i_arr = std::move(v)};
}
GgufValue GgufValue::make_float_array(GgufType elem, std::vector<double> v) {
  return {.type = GgufType::ARRAY, .elem_type = elem, .f_arr = std::move(v)};
}
GgufValue GgufValue::make_string_array(std::vector<std::string> v) {
  return {.type = GgufType::ARRAY, .elem_type = GgufType::STRING, .strs = std::move(v)};
}

#pragma GCC diagnostic pop

size_t GgufValue::array_size() const {
  using gguf_detail::is_float;
  using gguf_detail::is_signed_int;
  if (type != GgufType::ARRAY) return 0;
  if (elem_type == GgufType::STRING) return strs.size();
  if (elem_type == GgufType::ARRAY) return arrs.size();
  if (is_signed_int(elem_type)) return i_arr.size();
  if (is_float(elem_type)) return f_arr.size();
  return u_arr.size();  // unsigned integers and BOOL
}

namespace gguf_detail {

const char* value_type_name(GgufType t) { return value_type_name(static_cast<uint32_t>(t)); }

const char* value_type_name(uint32_t t) {
  static const char* const kNames[] = {"UINT8",  "INT8",    "UINT16", "INT16",  "UINT32",
                                       "INT32",  "FLOAT32", "BOOL",   "STRING", "ARRAY",
                                       "UINT64", "INT64",   "FLOAT64"};
  return t < sizeof(kNames) / sizeof(kNames[0]) ? kNames[t] : "unknown";
}

}  // namespace gguf_detail
}  // namespace flashnorm::io
