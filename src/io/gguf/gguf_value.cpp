// GgufValue constructors and value-type names. Source: GGUF specification (value types).
#include "flashnorm/io/gguf.h"
#include "gguf_internal.h"

namespace flashnorm::io {

GgufValue GgufValue::make_u32(uint32_t v) {
  GgufValue r;
  r.type = GgufType::UINT32;
  r.u = v;
  return r;
}

GgufValue GgufValue::make_f32(float v) {
  GgufValue r;
  r.type = GgufType::FLOAT32;
  r.f = v;
  return r;
}

GgufValue GgufValue::make_bool(bool v) {
  GgufValue r;
  r.type = GgufType::BOOL;
  r.b = v;
  return r;
}

GgufValue GgufValue::make_string(std::string v) {
  GgufValue r;
  r.type = GgufType::STRING;
  r.str = std::move(v);
  return r;
}

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
