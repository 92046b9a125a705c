// GGUF v3 writer. Layout as the GGUF specification and gguf-py's GGUFWriter produce it:
// header, KVs, tensor infos, zero padding to the alignment, then each tensor's bytes followed by
// zero padding to the alignment. A file written by gguf-py (llama.cpp's converter) therefore comes
// back byte for byte when its contents are written again in the same order.
// Source: GGUF specification, ggml/docs/gguf.md (version 3).
#include <fmt/format.h>

#include <cstring>
#include <limits>
#include <set>

#include "flashnorm/error.h"
#include "flashnorm/io/atomic_file.h"
#include "flashnorm/io/gguf.h"
#include "gguf_internal.h"

namespace flashnorm::io {

using namespace gguf_detail;

namespace {

// Little-endian serializer into a growing buffer (the metadata part of the file).
class Buffer {
 public:
  template <class T>
  void put(T v) {
    const size_t n = out_.size();
    out_.resize(n + sizeof(T));
    std::memcpy(out_.data() + n, &v, sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    out_.insert(out_.end(), s.begin(), s.end());
  }
  const std::vector<uint8_t>& bytes() const { return out_; }

 private:
  std::vector<uint8_t> out_;
};

[[noreturn]] void fail_value(const std::string& key, std::string_view what) {
  throw Error(fmt::format("write_gguf: kv \"{}\": {}", key, what));
}

// Narrows an unsigned value to T, refusing values that do not fit.
template <class T>
T narrow_u(uint64_t v, const std::string& key) {
  if (v > static_cast<uint64_t>(std::numeric_limits<T>::max())) {
    fail_value(key, fmt::format("value {} does not fit its type", v));
  }
  return static_cast<T>(v);
}
template <class T>
T narrow_i(int64_t v, const std::string& key) {
  if (v < std::numeric_limits<T>::min() || v > std::numeric_limits<T>::max()) {
    fail_value(key, fmt::format("value {} does not fit its type", v));
  }
  return static_cast<T>(v);
}

// Writes one scalar of type t (not STRING or ARRAY) from u (unsigned types and BOOL), i (signed
// types) or f (floats), refusing values its type cannot hold.
void put_scalar(Buffer& b, GgufType t, uint64_t u, int64_t i, double f, const std::string& key) {
  if (t == GgufType::BOOL && u > 1)
    fail_value(key, fmt::format("bool value {} is neither 0 nor 1", u));
  visit_scalar_type(t, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>) {
      b.put(static_cast<T>(f));
    } else if constexpr (std::is_signed_v<T>) {
      b.put(narrow_i<T>(i, key));
    } else {
      b.put(narrow_u<T>(u, key));
    }
  });
}

void put_value(Buffer& b, const GgufValue& v, const std::string& key, int depth);

void put_array_body(Buffer& b, const GgufValue& v, const std::string& key, int depth) {
  const GgufType et = v.elem_type;
  if (!is_known_value_type(static_cast<uint32_t>(et))) fail_value(key, "unknown element type");
  if (et == GgufType::ARRAY && depth >= 1) fail_value(key, "arrays nested too deeply");
  b.put<uint32_t>(static_cast<uint32_t>(et));
  b.put<uint64_t>(v.array_size());
  if (et == GgufType::STRING) {
    for (const auto& s : v.strs) b.put_string(s);
  } else if (et == GgufType::ARRAY) {
    for (const auto& a : v.arrs) {
      if (a.type != GgufType::ARRAY) fail_value(key, "element of a nested array is not an array");
      put_array_body(b, a, key, depth + 1);
    }
  } else if (is_signed_int(et)) {
    for (int64_t x : v.i_arr) put_scalar(b, et, 0, x, 0, key);
  } else if (is_float(et)) {
    for (double x : v.f_arr) put_scalar(b, et, 0, 0, x, key);
  } else {
    for (uint64_t x : v.u_arr) put_scalar(b, et, x, 0, 0, key);
  }
}

void put_value(Buffer& b, const GgufValue& v, const std::string& key, int depth) {
  if (!is_known_value_type(static_cast<uint32_t>(v.type))) fail_value(key, "unknown value type");
  b.put<uint32_t>(static_cast<uint32_t>(v.type));
  if (v.type == GgufType::STRING) {
    b.put_string(v.str);
  } else if (v.type == GgufType::ARRAY) {
    put_array_body(b, v, key, depth);
  } else if (v.type == GgufType::BOOL) {
    b.put<uint8_t>(v.b ? 1 : 0);
  } else {
    put_scalar(b, v.type, v.u, v.i, v.f, key);
  }
}

uint64_t align_up(uint64_t x, uint64_t a) {
  uint64_t r = 0;
  if (__builtin_add_overflow(x, a - 1, &r)) throw Error("write_gguf: file size overflows");
  return r / a * a;
}

}  // namespace

void write_gguf(const std::filesystem::path& path, const std::vector<GgufKv>& kvs,
                const std::vector<GgufTensorOut>& tensors,
                std::span<const std::filesystem::path> inputs) {
  // Alignment and unique keys.
  uint64_t alignment = kDefaultAlignment;
  std::set<std::string_view> keys;
  for (const auto& kv : kvs) {
    if (kv.key.empty() || kv.key.size() > kMaxKeyLength) {
      throw Error(
          fmt::format("write_gguf: key \"{}\" has a length outside 1..{}", kv.key, kMaxKeyLength));
    }
    if (!keys.insert(kv.key).second) {
      throw Error(fmt::format("write_gguf: duplicate key \"{}\"", kv.key));
    }
    if (kv.key == "general.alignment") {
      const uint64_t a = kv.value.u;
      if (kv.value.type != GgufType::UINT32 || a == 0 || (a & (a - 1)) != 0 || a > kMaxAlignment) {
        throw Error("write_gguf: general.alignment must be a UINT32 power of two <= 1 MiB");
      }
      alignment = a;
    }
  }

  // Tensor checks and layout.
  std::set<std::string_view> names;
  std::vector<uint64_t> offsets(tensors.size());
  uint64_t data_size = 0;
  for (size_t k = 0; k < tensors.size(); ++k) {
    const auto& t = tensors[k];
    if (t.name.empty() || t.name.size() > kMaxKeyLength) {
      throw Error(
          fmt::format("write_gguf: tensor {} has a name length outside 1..{}", k, kMaxKeyLength));
    }
    if (!names.insert(t.name).second) {
      throw Error(fmt::format("write_gguf: duplicate tensor name \"{}\"", t.name));
    }
    const auto traits = ggml_type_traits(static_cast<uint32_t>(t.type));
    if (!traits) throw Error(fmt::format("write_gguf: tensor \"{}\" has an unknown type", t.name));
    if (t.dims.empty() || t.dims.size() > kMaxDims) {
      throw Error(fmt::format("write_gguf: tensor \"{}\" has {} dims (1..4 allowed)", t.name,
                              t.dims.size()));
    }
    uint64_t n = 1;
    for (uint64_t d : t.dims) {
      if (d == 0 || __builtin_mul_overflow(n, d, &n) || n > static_cast<uint64_t>(INT64_MAX)) {
        throw Error(
            fmt::format("write_gguf: tensor \"{}\" has a zero or overflowing shape", t.name));
      }
    }
    if (t.dims[0] % traits->block_elems != 0) {
      throw Error(
          fmt::format("write_gguf: tensor \"{}\" row length {} is not a multiple of the {} "
                      "block size {}",
                      t.name, t.dims[0], traits->name, traits->block_elems));
    }
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(n / traits->block_elems, uint64_t{traits->block_bytes}, &nbytes)) {
      throw Error(fmt::format("write_gguf: tensor \"{}\" byte size overflows", t.name));
    }
    const size_t given = t.bytes.empty() ? t.view.size() : t.bytes.size();
    if (given != nbytes) {
      throw Error(fmt::format("write_gguf: tensor \"{}\" has {} bytes but its {} shape needs {}",
                              t.name, given, traits->name, nbytes));
    }
    offsets[k] = data_size;
    data_size = align_up(data_size + nbytes, alignment);
  }

  // Metadata.
  Buffer b;
  b.put<uint32_t>(kGgufMagic);
  b.put<uint32_t>(3);
  b.put<uint64_t>(tensors.size());
  b.put<uint64_t>(kvs.size());
  for (const auto& kv : kvs) {
    b.put_string(kv.key);
    put_value(b, kv.value, kv.key, 0);
  }
  for (size_t k = 0; k < tensors.size(); ++k) {
    const auto& t = tensors[k];
    b.put_string(t.name);
    b.put<uint32_t>(static_cast<uint32_t>(t.dims.size()));
    for (uint64_t d : t.dims) b.put<uint64_t>(d);
    b.put<uint32_t>(static_cast<uint32_t>(t.type));
    b.put<uint64_t>(offsets[k]);
  }

  AtomicFile f(path, inputs);
  f.write(b.bytes().data(), b.bytes().size());
  f.write_zeros(align_up(f.position(), alignment) - f.position());
  const uint64_t data_start = f.position();
  for (size_t k = 0; k < tensors.size(); ++k) {
    const auto& t = tensors[k];
    const std::span<const uint8_t> src = t.bytes.empty() ? t.view : std::span(t.bytes);
    f.write(src.data(), src.size());
    const uint64_t rel = f.position() - data_start;
    f.write_zeros(align_up(rel, alignment) - rel);
  }
  f.commit();
}

}  // namespace flashnorm::io
