// GGUF v3 reader. Every number taken from the file is checked against the bytes that exist,
// with overflow-checked arithmetic, before it is used to allocate or index; see the "GGUF
// reading rules" in docs/design.md section 5.
// Source: GGUF specification, ggml/docs/gguf.md (file structure, version 3).
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <map>
#include <numeric>

#include "flashnorm/error.h"
#include "flashnorm/io/gguf.h"
#include "flashnorm/io/mapped_file.h"
#include "gguf_file_impl.h"
#include "gguf_internal.h"

namespace flashnorm::io {

using namespace gguf_detail;

namespace {

// Minimum bytes of one tensor info: name length (8) + n_dims (4) + one dim (8) + type (4) +
// offset (8).
constexpr uint64_t kMinTensorInfoBytes = 32;
// Minimum bytes of one KV: key length (8) + value type (4) + a one-byte value.
constexpr uint64_t kMinKvBytes = 13;
// Nested arrays (arrays whose elements are arrays) may go one level deep, and the whole file may
// hold at most this many inner arrays: each costs far more memory than its 12 bytes on disk.
constexpr uint64_t kMaxNestedArrays = 1u << 16;

std::string hex_bytes(const uint8_t* p, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += fmt::format("{:02x}", p[i]);
  return s;
}

// Bounds-checked little-endian reader over the file image. Field names are produced lazily by a
// callable so the hot paths (vocabulary strings) build no strings unless they fail.
class Cursor {
 public:
  Cursor(std::span<const uint8_t> bytes, const std::string& file) : b_(bytes), file_(file) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return b_.size() - pos_; }
  const uint8_t* here() const { return b_.data() + pos_; }

  [[noreturn]] void fail(std::string_view field, uint64_t offset, std::string_view what) const {
    throw FormatError(file_, field, offset, what);
  }

  template <class F>
  void need(uint64_t n, const F& field) const {
    if (n > remaining()) {
      fail(field(), pos_,
           fmt::format("needs {} bytes but only {} remain (file truncated)", n, remaining()));
    }
  }

  template <class T, class F>
  T read(const F& field) {
    need(sizeof(T), field);
    T v;
    std::memcpy(&v, here(), sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  void skip(uint64_t n) { pos_ += n; }

  // A GGUF string: u64 length, then that many bytes (no terminator).
  template <class F>
  std::string read_string(const F& field) {
    const uint64_t at = pos_;
    const uint64_t len = read<uint64_t>([&] { return field() + " length"; });
    if (len > remaining()) {
      fail(field() + " length", at,
           fmt::format("string of {} bytes runs past the end of the file ({} bytes remain)", len,
                       remaining()));
    }
    std::string s(reinterpret_cast<const char*>(here()), len);
    pos_ += len;
    return s;
  }

 private:
  std::span<const uint8_t> b_;
  const std::string& file_;
  uint64_t pos_ = 0;
};

// Reads one value of type `t` at the cursor. `field` names the value for messages; `depth` is 0
// for a KV's own value and 1 for the elements of an array.
class ValueReader {
 public:
  explicit ValueReader(Cursor& c) : c_(c) {}

  // `field` is type-erased here: nested arrays recurse into read_value, and a template parameter
  // would instantiate without end.
  using Field = std::function<std::string()>;

  void read_value(GgufType t, GgufValue& out, const Field& field, int depth) {
    out.type = t;
    if (t == GgufType::BOOL) {
      const uint64_t at = c_.pos();
      const uint8_t v = c_.read<uint8_t>(field);
      if (v > 1) c_.fail(field(), at, fmt::format("bool value {} is neither 0 nor 1", v));
      out.b = v != 0;
    } else if (t == GgufType::STRING) {
      out.str = c_.read_string(field);
    } else if (t == GgufType::ARRAY) {
      read_array(out, field, depth);
    } else {
      visit_scalar_type(t, [&](auto tag) {
        using T = decltype(tag);
        scalar_slot<T>(out) = c_.read<T>(field);
      });
    }
  }

 private:
  void read_array(GgufValue& out, const Field& field, int depth) {
    const uint64_t type_at = c_.pos();
    const uint32_t et = c_.read<uint32_t>([&] { return field() + " array type"; });
    if (!is_known_value_type(et)) {
      c_.fail(field() + " array type", type_at, fmt::format("unknown element type {}", et));
    }
    const auto elem = static_cast<GgufType>(et);
    if (elem == GgufType::ARRAY) {
      if (depth >= 1) {
        c_.fail(field() + " array type", type_at, "arrays nested more than two levels deep");
      }
    }
    out.elem_type = elem;
    const uint64_t len_at = c_.pos();
    const uint64_t n = c_.read<uint64_t>([&] { return field() + " array length"; });
    const uint64_t min_size = min_encoded_size(elem);
    if (n > c_.remaining() / min_size) {
      c_.fail(field() + " array length", len_at,
              fmt::format("{} elements of {} need at least {} bytes each but only {} bytes remain",
                          n, value_type_name(elem), min_size, c_.remaining()));
    }
    if (elem == GgufType::ARRAY) {
      nested_ += n;
      if (nested_ > kMaxNestedArrays) {
        c_.fail(field() + " array length", len_at,
                fmt::format("more than {} nested arrays in the file", kMaxNestedArrays));
      }
    }
    auto bulk = [&](auto tag, auto& vec) {
      using T = decltype(tag);
      vec.resize(n);
      const uint8_t* p = c_.here();
      for (uint64_t j = 0; j < n; ++j) {
        T v;
        std::memcpy(&v, p + j * sizeof(T), sizeof(T));
        vec[j] = v;
      }
      c_.skip(n * sizeof(T));
    };
    if (elem == GgufType::STRING) {
      out.strs.reserve(n);
      for (uint64_t j = 0; j < n; ++j) {
        out.strs.push_back(c_.read_string([&] { return fmt::format("{}[{}]", field(), j); }));
      }
    } else if (elem == GgufType::ARRAY) {
      out.arrs.resize(n);
      for (uint64_t j = 0; j < n; ++j) {
        const Field elem_field = [&] { return fmt::format("{}[{}]", field(), j); };
        read_value(GgufType::ARRAY, out.arrs[j], elem_field, depth + 1);
      }
    } else {
      if (elem == GgufType::BOOL) {
        const uint8_t* p = c_.here();
        for (uint64_t j = 0; j < n; ++j) {
          if (p[j] > 1) {
            c_.fail(fmt::format("{}[{}]", field(), j), c_.pos() + j,
                    fmt::format("bool value {} is neither 0 nor 1", p[j]));
          }
        }
      }
      // Numbers and booleans (one byte each, into u_arr).
      visit_scalar_type(elem, [&](auto tag) { bulk(tag, array_slot<decltype(tag)>(out)); });
    }
  }

  Cursor& c_;
  uint64_t nested_ = 0;
};

}  // namespace

void GgufFile::Impl::parse() {
  Cursor c(bytes, name);

  // Header.
  const uint32_t magic = c.read<uint32_t>([] { return std::string("header.magic"); });
  if (magic != kGgufMagic) {
    c.fail("header.magic", 0,
           fmt::format("expected \"GGUF\" (47475546), found {}", hex_bytes(bytes.data(), 4)));
  }
  version = c.read<uint32_t>([] { return std::string("header.version"); });
  if (version != 3 && version != 2) {
    c.fail("header.version", 4,
           fmt::format("version {} is not supported (only GGUF v2/v3 little-endian)", version));
  }
  const uint64_t tensor_count = c.read<uint64_t>([] { return std::string("header.tensor_count"); });
  const uint64_t kv_count = c.read<uint64_t>([] { return std::string("header.kv_count"); });
  if (tensor_count > c.remaining() / kMinTensorInfoBytes) {
    c.fail("header.tensor_count", 8,
           fmt::format("{} tensor infos need at least {} bytes each but only {} bytes remain",
                       tensor_count, kMinTensorInfoBytes, c.remaining()));
  }
  if (kv_count > c.remaining() / kMinKvBytes) {
    c.fail("header.kv_count", 16,
           fmt::format("{} key-value pairs need at least {} bytes each but only {} bytes remain",
                       kv_count, kMinKvBytes, c.remaining()));
  }

  // Key-value pairs.
  ValueReader vr(c);
  kvs.reserve(kv_count);
  for (uint64_t i = 0; i < kv_count; ++i) {
    GgufKv kv;
    kv.offset = c.pos();
    kv.key = c.read_string([&] { return fmt::format("kv[{}].key", i); });
    if (kv.key.empty() || kv.key.size() > kMaxKeyLength) {
      c.fail(fmt::format("kv[{}].key", i), kv.offset,
             fmt::format("key length {} is outside 1..{}", kv.key.size(), kMaxKeyLength));
    }
    auto kv_field = [&] { return fmt::format("kv[{}] \"{}\"", i, kv.key); };
    if (kv_index.count(kv.key)) {
      c.fail(kv_field(), kv.offset,
             fmt::format("duplicate key (first at kv[{}])", kv_index.find(kv.key)->second));
    }
    const uint64_t type_at = c.pos();
    const uint32_t t = c.read<uint32_t>([&] { return kv_field() + " type"; });
    if (!is_known_value_type(t)) {
      c.fail(kv_field() + " type", type_at, fmt::format("unknown value type {}", t));
    }
    vr.read_value(static_cast<GgufType>(t), kv.value, ValueReader::Field(kv_field), 0);
    kv_index.emplace(kv.key, kvs.size());
    kvs.push_back(std::move(kv));
  }

  // Alignment.
  if (auto it = kv_index.find("general.alignment"); it != kv_index.end()) {
    const GgufKv& kv = kvs[it->second];
    if (kv.value.type != GgufType::UINT32) {
      bad_kv(kv,
             fmt::format("alignment has type {}, must be UINT32", value_type_name(kv.value.type)));
    }
    const uint64_t a = kv.value.u;
    if (a == 0 || (a & (a - 1)) != 0 || a > kMaxAlignment) {
      bad_kv(kv, fmt::format("alignment {} is not a power of two in [1, {}]", a, kMaxAlignment));
    }
    alignment = static_cast<uint32_t>(a);
  }

  // Tensor infos.
  tensors.reserve(tensor_count);
  std::vector<uint64_t> offset_field_at(tensor_count);
  for (uint64_t i = 0; i < tensor_count; ++i) {
    GgufTensorInfo t;
    t.info_offset = c.pos();
    auto fld = [&](std::string_view f) { return fmt::format("tensor_info[{}].{}", i, f); };
    t.name = c.read_string([&] { return fld("name"); });
    if (t.name.empty() || t.name.size() > kMaxKeyLength) {
      c.fail(fld("name"), t.info_offset,
             fmt::format("name length {} is outside 1..{}", t.name.size(), kMaxKeyLength));
    }
    if (auto it = tensor_index.find(t.name); it != tensor_index.end()) {
      c.fail(fld("name"), t.info_offset,
             fmt::format("duplicate tensor name \"{}\" (first at tensor_info[{}])", t.name,
                         it->second));
    }
    const uint64_t nd_at = c.pos();
    const uint32_t n_dims = c.read<uint32_t>([&] { return fld("n_dims"); });
    if (n_dims == 0 || n_dims > kMaxDims) {
      c.fail(fld("n_dims"), nd_at,
             fmt::format("n_dims {} is outside 1..{} (the GGUF maximum is {})", n_dims, kMaxDims,
                         kMaxDims));
    }
    uint64_t n_el = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t d_at = c.pos();
      const uint64_t v = c.read<uint64_t>([&] { return fld(fmt::format("dims[{}]", d)); });
      if (v == 0 || v > static_cast<uint64_t>(INT64_MAX)) {
        c.fail(fld(fmt::format("dims[{}]", d)), d_at,
               fmt::format("dimension {} is outside 1..2^63-1", v));
      }
      if (__builtin_mul_overflow(n_el, v, &n_el) || n_el > static_cast<uint64_t>(INT64_MAX)) {
        c.fail(fld(fmt::format("dims[{}]", d)), d_at,
               "product of dimensions overflows (more than 2^63-1 elements)");
      }
      t.dims.push_back(v);
    }
    t.n_elements = n_el;
    const uint64_t type_at = c.pos();
    const uint32_t type_id = c.read<uint32_t>([&] { return fld("type"); });
    const auto traits = ggml_type_traits(type_id);
    if (!traits) c.fail(fld("type"), type_at, fmt::format("unknown tensor type {}", type_id));
    t.type = static_cast<GgmlType>(type_id);
    if (t.dims[0] % traits->block_elems != 0) {
      c.fail(fld("dims[0]"), nd_at + 4,
             fmt::format("row length {} is not a multiple of the {} block size {}", t.dims[0],
                         traits->name, traits->block_elems));
    }
    if (__builtin_mul_overflow(n_el / traits->block_elems, uint64_t{traits->block_bytes},
                               &t.n_bytes)) {
      c.fail(fld("dims"), nd_at + 4, "tensor byte size overflows 64 bits");
    }
    offset_field_at[i] = c.pos();
    t.offset = c.read<uint64_t>([&] { return fld("offset"); });
    if (t.offset % alignment != 0) {
      c.fail(fld("offset"), offset_field_at[i],
             fmt::format("offset {} is not a multiple of the alignment {}", t.offset, alignment));
    }
    tensor_index.emplace(t.name, tensors.size());
    tensors.push_back(std::move(t));
  }

  // Data section: starts at the next multiple of the alignment.
  const uint64_t end_of_infos = c.pos();
  data_offset = (end_of_infos + alignment - 1) / alignment * alignment;  // cannot overflow:
  // end_of_infos <= file size, far below 2^64 - 2^20.
  if (data_offset > bytes.size()) {
    if (!tensors.empty()) {
      c.fail("data section", end_of_infos,
             fmt::format("padding to alignment {} runs past the end of the file", alignment));
    }
    data_offset = bytes.size();  // a file without tensors may end right after its infos
  }
  const uint64_t data_size = bytes.size() - data_offset;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    uint64_t end = 0;
    if (__builtin_add_overflow(t.offset, t.n_bytes, &end) || end > data_size) {
      c.fail(fmt::format("tensor_info[{}].offset", i), offset_field_at[i],
             fmt::format("tensor \"{}\" at data offset {} with {} bytes runs past the end of the "
                         "data section ({} bytes)",
                         t.name, t.offset, t.n_bytes, data_size));
    }
  }
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return tensors[a].offset != tensors[b].offset ? tensors[a].offset < tensors[b].offset : a < b;
  });
  for (size_t k = 1; k < order.size(); ++k) {
    const auto& prev = tensors[order[k - 1]];
    const auto& cur = tensors[order[k]];
    if (cur.offset < prev.offset + prev.n_bytes) {
      c.fail(fmt::format("tensor_info[{}].offset", order[k]), offset_field_at[order[k]],
             fmt::format("tensor \"{}\" at [{}, {}) overlaps tensor \"{}\" at [{}, {})", cur.name,
                         cur.offset, cur.offset + cur.n_bytes, prev.name, prev.offset,
                         prev.offset + prev.n_bytes));
    }
  }
}

GgufFile::GgufFile(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GgufFile::GgufFile(GgufFile&&) noexcept = default;
GgufFile& GgufFile::operator=(GgufFile&&) noexcept = default;
GgufFile::~GgufFile() = default;

GgufFile GgufFile::open(const std::filesystem::path& path) {
  auto impl = std::make_unique<Impl>();
  impl->name = path.string();
  impl->mapping = MappedFile::open(path);
  impl->bytes = impl->mapping.bytes();
  impl->parse();
  return GgufFile(std::move(impl));
}

GgufFile GgufFile::parse(std::span<const uint8_t> bytes, std::string name) {
  auto impl = std::make_unique<Impl>();
  impl->name = std::move(name);
  impl->owned.assign(bytes.begin(), bytes.end());
  impl->bytes = impl->owned;
  impl->parse();
  return GgufFile(std::move(impl));
}

const std::string& GgufFile::name() const { return impl_->name; }
uint32_t GgufFile::version() const { return impl_->version; }
uint32_t GgufFile::alignment() const { return impl_->alignment; }
uint64_t GgufFile::data_offset() const { return impl_->data_offset; }
uint64_t GgufFile::file_size() const { return impl_->bytes.size(); }
const std::vector<GgufKv>& GgufFile::kvs() const { return impl_->kvs; }
const std::vector<GgufTensorInfo>& GgufFile::tensors() const { return impl_->tensors; }

std::span<const uint8_t> GgufFile::tensor_data(const GgufTensorInfo& t) const {
  const uint64_t data_size = impl_->bytes.size() - impl_->data_offset;
  uint64_t end = 0;
  if (__builtin_add_overflow(t.offset, t.n_bytes, &end) || end > data_size) {
    throw Error(
        fmt::format("{}: tensor \"{}\" is not inside the data section", impl_->name, t.name));
  }
  return impl_->bytes.subspan(impl_->data_offset + t.offset, t.n_bytes);
}

}  // namespace flashnorm::io
