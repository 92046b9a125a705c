// safetensors dtypes: names, sizes, and conversion of F32/F16/BF16 bytes to and from fp32.
// Source: safetensors README "Format" (dtype list) and the Rust crate's Dtype enum; IEEE 754
// binary16; bfloat16 = the upper 16 bits of an IEEE binary32.
#include <fmt/format.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "flashnorm/error.h"
#include "flashnorm/io/dequant.h"
#include "flashnorm/io/safetensors.h"
#include "internal.h"

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; big-endian hosts are not supported");

namespace flashnorm::io {
namespace {

struct DtypeRow {
  StDtype dtype;
  std::string_view name;
  size_t size;
};

constexpr std::array<DtypeRow, 15> kDtypes{{
    {StDtype::F32, "F32", 4},
    {StDtype::F16, "F16", 2},
    {StDtype::BF16, "BF16", 2},
    {StDtype::F64, "F64", 8},
    {StDtype::I64, "I64", 8},
    {StDtype::I32, "I32", 4},
    {StDtype::I16, "I16", 2},
    {StDtype::I8, "I8", 1},
    {StDtype::U8, "U8", 1},
    {StDtype::BOOL, "BOOL", 1},
    {StDtype::F8_E4M3, "F8_E4M3", 1},
    {StDtype::F8_E5M2, "F8_E5M2", 1},
    {StDtype::U16, "U16", 2},
    {StDtype::U32, "U32", 4},
    {StDtype::U64, "U64", 8},
}};

const DtypeRow& row(StDtype d) {
  for (const auto& r : kDtypes) {
    if (r.dtype == d) return r;
  }
  throw Error(fmt::format("invalid safetensors dtype value {}", static_cast<int>(d)));
}

}  // namespace

std::string_view st_dtype_name(StDtype d) { return row(d).name; }
size_t st_dtype_size(StDtype d) { return row(d).size; }

uint64_t StTensorInfo::n_elements() const {
  uint64_t n = 1;
  for (uint64_t d : shape) {
    if (__builtin_mul_overflow(n, d, &n)) {
      throw Error(fmt::format("tensor {}: element count overflows 64 bits", name));
    }
  }
  return n;
}

uint64_t StTensorOut::byte_size() const {
  return bytes ? bytes->size() : values.size() * st_dtype_size(dtype);
}

float fp8_e4m3_to_fp32(uint8_t b) {
  const int exp = (b >> 3) & 0xF, mant = b & 7;
  if (exp == 15 && mant == 7) return std::numeric_limits<float>::quiet_NaN();
  const float mag = exp == 0 ? std::ldexp(float(mant), -9) : std::ldexp(float(8 + mant), exp - 10);
  return (b & 0x80) ? -mag : mag;
}

std::vector<float> st_to_fp32(StDtype dtype, std::span<const uint8_t> bytes) {
  if (dtype == StDtype::F8_E4M3) {
    std::vector<float> out(bytes.size());
    for (size_t i = 0; i < out.size(); ++i) out[i] = fp8_e4m3_to_fp32(bytes[i]);
    return out;
  }
  if (dtype != StDtype::F32 && dtype != StDtype::F16 && dtype != StDtype::BF16) {
    throw Error(
        fmt::format("cannot convert safetensors dtype {} to fp32 (only F32, F16, BF16, F8_E4M3)",
                    st_dtype_name(dtype)));
  }
  const size_t esize = st_dtype_size(dtype);
  if (bytes.size() % esize != 0) {
    throw Error(fmt::format("{} bytes is not a whole number of {} elements", bytes.size(),
                            st_dtype_name(dtype)));
  }
  std::vector<float> out(bytes.size() / esize);
  if (dtype == StDtype::F32) {
    if (!out.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
    return out;
  }
  for (size_t i = 0; i < out.size(); ++i) {
    uint16_t h;
    std::memcpy(&h, bytes.data() + 2 * i, 2);
    out[i] = dtype == StDtype::F16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
  }
  return out;
}

namespace st_detail {

std::optional<StDtype> parse_dtype(std::string_view name) {
  for (const auto& r : kDtypes) {
    if (r.name == name) return r.dtype;
  }
  return std::nullopt;
}

std::vector<uint8_t> from_fp32(StDtype dtype, std::span<const float> values) {
  std::vector<uint8_t> out;
  if (dtype == StDtype::F32) {
    out.resize(values.size() * 4);
    if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
    return out;
  }
  if (dtype != StDtype::F16 && dtype != StDtype::BF16) {
    throw Error(fmt::format("cannot write safetensors dtype {} (only F32, F16, BF16)",
                            st_dtype_name(dtype)));
  }
  out.resize(values.size() * 2);
  for (size_t i = 0; i < values.size(); ++i) {
    uint16_t h = dtype == StDtype::F16 ? fp32_to_fp16(values[i]) : fp32_to_bf16(values[i]);
    std::memcpy(out.data() + 2 * i, &h, 2);
  }
  return out;
}

}  // namespace st_detail
}  // namespace flashnorm::io
