// GGML type table. Source: GGUF specification ("GGML tensor types") and ggml-common.h block
// layouts; the sizes equal GGML_QUANT_SIZES in the `gguf` Python package's constants.py.
#include "flashnorm/io/ggml_types.h"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <string>

#include "flashnorm/error.h"
#include "gguf_internal.h"

namespace flashnorm::io {
namespace {

struct Entry {
  GgmlType type;
  GgmlTypeTraits traits;
};

// QK_K = 256 super-blocks for the k-quants.
constexpr std::array<Entry, 20> kTypes = {{
    {GgmlType::F32, {"F32", 1, 4}},
    {GgmlType::F16, {"F16", 1, 2}},
    {GgmlType::Q4_0, {"Q4_0", 32, 2 + 16}},
    {GgmlType::Q4_1, {"Q4_1", 32, 2 + 2 + 16}},
    {GgmlType::Q5_0, {"Q5_0", 32, 2 + 4 + 16}},
    {GgmlType::Q5_1, {"Q5_1", 32, 2 + 2 + 4 + 16}},
    {GgmlType::Q8_0, {"Q8_0", 32, 2 + 32}},
    {GgmlType::Q8_1, {"Q8_1", 32, 4 + 4 + 32}},
    {GgmlType::Q2_K, {"Q2_K", 256, 2 + 2 + 256 / 16 + 256 / 4}},
    {GgmlType::Q3_K, {"Q3_K", 256, 2 + 256 / 4 + 256 / 8 + 12}},
    {GgmlType::Q4_K, {"Q4_K", 256, 2 + 2 + 256 / 2 + 12}},
    {GgmlType::Q5_K, {"Q5_K", 256, 2 + 2 + 256 / 2 + 256 / 8 + 12}},
    {GgmlType::Q6_K, {"Q6_K", 256, 2 + 256 / 2 + 256 / 4 + 256 / 16}},
    {GgmlType::Q8_K, {"Q8_K", 256, 4 + 256 + 256 / 8}},
    {GgmlType::I8, {"I8", 1, 1}},
    {GgmlType::I16, {"I16", 1, 2}},
    {GgmlType::I32, {"I32", 1, 4}},
    {GgmlType::I64, {"I64", 1, 8}},
    {GgmlType::F64, {"F64", 1, 8}},
    {GgmlType::BF16, {"BF16", 1, 2}},
}};

}  // namespace

std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t type_id) {
  for (const auto& e : kTypes) {
    if (static_cast<uint32_t>(e.type) == type_id) return e.traits;
  }
  return std::nullopt;
}

std::string ggml_type_name(uint32_t type_id) {
  if (auto t = ggml_type_traits(type_id)) return std::string(t->name);
  return fmt::format("type {}", type_id);
}

std::optional<GgmlType> ggml_type_from_name(std::string_view name) {
  for (const auto& e : kTypes) {
    if (e.traits.name.size() != name.size()) continue;
    bool eq = true;
    for (size_t i = 0; i < name.size() && eq; ++i) {
      eq = std::toupper(static_cast<unsigned char>(name[i])) ==
           static_cast<unsigned char>(e.traits.name[i]);
    }
    if (eq) return e.type;
  }
  return std::nullopt;
}

namespace gguf_detail {

GgmlTypeTraits conversion_traits(GgmlType type, size_t n, bool supported, std::string_view who) {
  const uint32_t id = static_cast<uint32_t>(type);
  const auto traits = ggml_type_traits(id);
  if (!traits || !supported) {
    throw Error(fmt::format("{}: type {} is not supported", who, ggml_type_name(id)));
  }
  if (n % traits->block_elems != 0) {
    throw Error(fmt::format("{}: {} elements is not a multiple of the {} block size {}", who, n,
                            traits->name, traits->block_elems));
  }
  return *traits;
}

}  // namespace gguf_detail
}  // namespace flashnorm::io
