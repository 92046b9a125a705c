// GgufFile's lookups and typed accessors: each checks the stored value's type (and, for integers,
// its sign and range) and throws FormatError naming the key and its byte offset.
// Source: GGUF specification, ggml/docs/gguf.md (metadata value types).
#include <fmt/format.h>

#include <optional>
#include <string>
#include <vector>

#include "flashnorm/error.h"
#include "flashnorm/io/gguf.h"
#include "gguf_file_impl.h"
#include "gguf_internal.h"

namespace flashnorm::io {

using namespace gguf_detail;

const GgufKv* GgufFile::find(std::string_view key) const {
  auto it = impl_->kv_index.find(key);
  return it == impl_->kv_index.end() ? nullptr : &impl_->kvs[it->second];
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = impl_->tensor_index.find(name);
  return it == impl_->tensor_index.end() ? nullptr : &impl_->tensors[it->second];
}

const GgufKv& GgufFile::Impl::require(std::string_view key) const {
  auto it = kv_index.find(key);
  if (it == kv_index.end()) {
    throw FormatError(name, fmt::format("kv \"{}\"", key), 0, "required key is missing");
  }
  return kvs[it->second];
}

namespace {

// The value of an integer scalar as uint64 if it is non-negative; nullopt for other types.
std::optional<uint64_t> as_uint(const GgufValue& v, bool* negative) {
  *negative = false;
  if (is_unsigned_int(v.type)) return v.u;
  if (is_signed_int(v.type)) {
    if (v.i < 0) {
      *negative = true;
      return std::nullopt;
    }
    return static_cast<uint64_t>(v.i);
  }
  return std::nullopt;
}

}  // namespace

std::optional<uint64_t> GgufFile::get_uint_opt(std::string_view key) const {
  const GgufKv* kv = find(key);
  if (!kv) return std::nullopt;
  bool neg = false;
  auto v = as_uint(kv->value, &neg);
  if (!v) {
    impl_->bad_kv(
        *kv,
        neg ? fmt::format("value {} is negative, expected an unsigned integer", kv->value.i)
            : fmt::format("has type {}, expected an integer", value_type_name(kv->value.type)));
  }
  return v;
}

uint64_t GgufFile::get_uint(std::string_view key) const {
  impl_->require(key);
  return *get_uint_opt(key);
}

std::optional<double> GgufFile::get_float_opt(std::string_view key) const {
  const GgufKv* kv = find(key);
  if (!kv) return std::nullopt;
  if (!is_float(kv->value.type)) {
    impl_->bad_kv(*kv, fmt::format("has type {}, expected FLOAT32 or FLOAT64",
                                   value_type_name(kv->value.type)));
  }
  return kv->value.f;
}

double GgufFile::get_float(std::string_view key) const {
  impl_->require(key);
  return *get_float_opt(key);
}

bool GgufFile::get_bool_or(std::string_view key, bool fallback) const {
  const GgufKv* kv = find(key);
  if (!kv) return fallback;
  if (kv->value.type != GgufType::BOOL) {
    impl_->bad_kv(*kv, fmt::format("has type {}, expected BOOL", value_type_name(kv->value.type)));
  }
  return kv->value.b;
}

std::optional<std::string> GgufFile::get_string_opt(std::string_view key) const {
  const GgufKv* kv = find(key);
  if (!kv) return std::nullopt;
  if (kv->value.type != GgufType::STRING) {
    impl_->bad_kv(*kv,
                  fmt::format("has type {}, expected STRING", value_type_name(kv->value.type)));
  }
  return kv->value.str;
}

std::string GgufFile::get_string(std::string_view key) const {
  impl_->require(key);
  return *get_string_opt(key);
}

const std::vector<std::string>& GgufFile::string_array(std::string_view key) const {
  const GgufKv& kv = impl_->require(key);
  if (kv.value.type != GgufType::ARRAY) {
    impl_->bad_kv(kv, fmt::format("has type {}, expected an array of STRING",
                                  value_type_name(kv.value.type)));
  }
  if (kv.value.elem_type != GgufType::STRING) {
    impl_->bad_kv(kv, fmt::format("array element type is {}, expected STRING",
                                  value_type_name(kv.value.elem_type)));
  }
  return kv.value.strs;
}

std::vector<int64_t> GgufFile::int_array(std::string_view key) const {
  const GgufKv& kv = impl_->require(key);
  const GgufValue& v = kv.value;
  if (v.type != GgufType::ARRAY) {
    impl_->bad_kv(
        kv, fmt::format("has type {}, expected an array of integers", value_type_name(v.type)));
  }
  if (is_signed_int(v.elem_type)) return v.i_arr;
  if (!is_unsigned_int(v.elem_type)) {
    impl_->bad_kv(kv, fmt::format("array element type is {}, expected an integer type",
                                  value_type_name(v.elem_type)));
  }
  std::vector<int64_t> out(v.u_arr.size());
  for (size_t j = 0; j < v.u_arr.size(); ++j) {
    if (v.u_arr[j] > static_cast<uint64_t>(INT64_MAX)) {
      impl_->bad_kv(kv, fmt::format("element {} = {} does not fit int64", j, v.u_arr[j]));
    }
    out[j] = static_cast<int64_t>(v.u_arr[j]);
  }
  return out;
}

std::vector<double> GgufFile::float_array(std::string_view key) const {
  const GgufKv& kv = impl_->require(key);
  const GgufValue& v = kv.value;
  if (v.type != GgufType::ARRAY) {
    impl_->bad_kv(kv,
                  fmt::format("has type {}, expected an array of floats", value_type_name(v.type)));
  }
  if (!is_float(v.elem_type)) {
    impl_->bad_kv(kv, fmt::format("array element type is {}, expected FLOAT32 or FLOAT64",
                                  value_type_name(v.elem_type)));
  }
  return v.f_arr;
}

}  // namespace flashnorm::io
