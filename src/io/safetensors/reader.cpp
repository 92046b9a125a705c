// safetensors reader: memory-maps a file and validates its header against the format spec
// (huggingface/safetensors README "Format"), treating every byte as hostile.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <unordered_map>

#include "flashnorm/error.h"
#include "flashnorm/io/mapped_file.h"
#include "flashnorm/io/safetensors.h"
#include "internal.h"

namespace flashnorm::io {
namespace {

using st_detail::quote;

// Largest header accepted, as in the reference implementation (MAX_HEADER_SIZE = 100 MB).
constexpr uint64_t kMaxHeader = 100'000'000;

// The validated header of a file.
struct Parsed {
  std::string name;
  const uint8_t* buffer = nullptr;  // start of the data buffer
  uint64_t buffer_size = 0;
  std::vector<StTensorInfo> tensors;
  std::unordered_map<std::string, size_t> by_name;
  std::map<std::string, std::string> metadata;
};

// Reads one non-negative integer of a header array; `what` names it in errors.
template <class Off>
uint64_t get_uint(const nlohmann::ordered_json& v, const std::string& file,
                  const std::string& field, Off off, std::string_view what) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer()) {
    throw FormatError(file, field, off(), fmt::format("{} is negative ({})", what, v.dump()));
  }
  throw FormatError(
      file, field, off(),
      fmt::format("{} is not a non-negative integer: {}", what,
                  v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).substr(0, 64)));
}

// Validates the header and fills impl->tensors / metadata. `bytes` is the whole file.
void parse_into(Parsed& impl, std::span<const uint8_t> bytes) {
  const std::string& file = impl.name;
  if (bytes.size() < 8) {
    throw FormatError(
        file, "header_length", 0,
        fmt::format("file is {} bytes, shorter than the 8-byte header length", bytes.size()));
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];
  if (n == 0) throw FormatError(file, "header_length", 0, "header length is 0");
  if (n > kMaxHeader) {
    throw FormatError(file, "header_length", 0,
                      fmt::format("header length {} exceeds the limit of {} bytes", n, kMaxHeader));
  }
  if (n > bytes.size() - 8) {
    throw FormatError(file, "header_length", 0,
                      fmt::format("header length {} exceeds the {} bytes after the length field", n,
                                  bytes.size() - 8));
  }
  const std::string_view text(reinterpret_cast<const char*>(bytes.data() + 8), n);
  if (text.front() != '{') {
    throw FormatError(file, "header", 8,
                      "header is not a JSON object (it does not start with '{')");
  }
  const nlohmann::ordered_json header = st_detail::parse_json_strict(text, file, 8);
  if (!header.is_object()) throw FormatError(file, "header", 8, "header is not a JSON object");

  impl.buffer = bytes.data() + 8 + n;
  impl.buffer_size = bytes.size() - 8 - n;
  const uint64_t buffer_base = 8 + n;  // file offset of the data buffer

  for (const auto& item : header.items()) {
    // (no structured binding: clang 14 cannot capture one in the lambda below)
    const std::string& key = item.key();
    const auto& entry = item.value();
    // The entry's offset in the file, searched for only when an error is reported (a search per
    // entry would make a header with many tensors quadratic).
    auto off = [&] { return st_detail::key_offset(text, key, 8); };
    if (key == "__metadata__") {
      if (!entry.is_object()) {
        throw FormatError(file, "__metadata__", off(), "__metadata__ is not an object");
      }
      for (const auto& [mk, mv] : entry.items()) {
        if (!mv.is_string()) {
          throw FormatError(file, fmt::format("__metadata__[{}]", quote(mk)), off(),
                            fmt::format("metadata value is not a string but {}", mv.type_name()));
        }
        impl.metadata.emplace(mk, mv.get<std::string>());
      }
      continue;
    }
    const std::string qname = quote(key);
    if (!entry.is_object()) {
      throw FormatError(file, qname, off(),
                        fmt::format("tensor entry is not an object but {}", entry.type_name()));
    }
    StTensorInfo info;
    info.name = key;

    // dtype
    const std::string f_dtype = qname + ".dtype";
    auto it = entry.find("dtype");
    if (it == entry.end()) throw FormatError(file, f_dtype, off(), "missing dtype");
    if (!it->is_string()) throw FormatError(file, f_dtype, off(), "dtype is not a string");
    auto dt = st_detail::parse_dtype(it->get<std::string>());
    if (!dt) {
      throw FormatError(file, f_dtype, off(),
                        fmt::format("unknown dtype {}", quote(it->get<std::string>())));
    }
    info.dtype = *dt;

    // shape
    const std::string f_shape = qname + ".shape";
    it = entry.find("shape");
    if (it == entry.end()) throw FormatError(file, f_shape, off(), "missing shape");
    if (!it->is_array()) throw FormatError(file, f_shape, off(), "shape is not an array");
    uint64_t n_el = 1;
    for (const auto& d : *it) {
      uint64_t dim = get_uint(d, file, f_shape, off, "shape dimension");
      info.shape.push_back(dim);
      if (__builtin_mul_overflow(n_el, dim, &n_el)) {
        throw FormatError(file, f_shape, off(), "product of the shape overflows 64 bits");
      }
    }
    uint64_t n_bytes;
    if (__builtin_mul_overflow(n_el, static_cast<uint64_t>(st_dtype_size(info.dtype)), &n_bytes)) {
      throw FormatError(file, f_shape, off(), "tensor byte size overflows 64 bits");
    }

    // data_offsets
    const std::string f_off = qname + ".data_offsets";
    it = entry.find("data_offsets");
    if (it == entry.end()) throw FormatError(file, f_off, off(), "missing data_offsets");
    if (!it->is_array() || it->size() != 2) {
      throw FormatError(file, f_off, off(), "data_offsets is not an array [begin, end]");
    }
    info.begin = get_uint((*it)[0], file, f_off, off, "begin");
    info.end = get_uint((*it)[1], file, f_off, off, "end");
    if (info.begin > info.end) {
      throw FormatError(file, f_off, off(),
                        fmt::format("begin {} is after end {}", info.begin, info.end));
    }
    if (info.end > impl.buffer_size) {
      throw FormatError(file, f_off, off(),
                        fmt::format("end {} is past the end of the {}-byte data buffer", info.end,
                                    impl.buffer_size));
    }
    if (info.end - info.begin != n_bytes) {
      throw FormatError(file, f_off, off(),
                        fmt::format("size mismatch: {} bytes, but shape and dtype {} need {} bytes",
                                    info.end - info.begin, st_dtype_name(info.dtype), n_bytes));
    }
    impl.by_name.emplace(key, impl.tensors.size());
    impl.tensors.push_back(std::move(info));
  }

  // The offsets must tile the buffer: sorted by begin, each starts where the previous ended,
  // and the last ends at the end of the buffer.
  std::vector<const StTensorInfo*> order;
  order.reserve(impl.tensors.size());
  for (const auto& t : impl.tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const StTensorInfo* a, const StTensorInfo* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t pos = 0;
  for (const StTensorInfo* t : order) {
    const std::string field = quote(t->name) + ".data_offsets";
    if (t->begin > pos) {
      throw FormatError(
          file, field, buffer_base + pos,
          fmt::format("hole: data buffer bytes [{}, {}) belong to no tensor", pos, t->begin));
    }
    if (t->begin < pos) {
      throw FormatError(file, field, buffer_base + t->begin,
                        fmt::format("overlap: [{}, {}) overlaps the previous tensor ending at {}",
                                    t->begin, t->end, pos));
    }
    pos = t->end;
  }
  if (pos != impl.buffer_size) {
    throw FormatError(
        file, "data_offsets", buffer_base + pos,
        fmt::format("hole: data buffer bytes [{}, {}) belong to no tensor", pos, impl.buffer_size));
  }
}

}  // namespace

struct SafetensorsFile::Impl : Parsed {
  MappedFile mapping;          // set by open()
  std::vector<uint8_t> owned;  // set by parse()
};

SafetensorsFile::SafetensorsFile(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SafetensorsFile::SafetensorsFile(SafetensorsFile&&) noexcept = default;
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&&) noexcept = default;
SafetensorsFile::~SafetensorsFile() = default;

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  auto impl = std::make_unique<Impl>();
  impl->name = path.string();
  impl->mapping = MappedFile::open(path);
  const std::span<const uint8_t> bytes = impl->mapping.bytes();
  parse_into(*impl, bytes);
  return SafetensorsFile(std::move(impl));
}

SafetensorsFile SafetensorsFile::parse(std::span<const uint8_t> bytes, std::string name) {
  auto impl = std::make_unique<Impl>();
  impl->name = std::move(name);
  impl->owned.assign(bytes.begin(), bytes.end());
  parse_into(*impl, impl->owned);
  return SafetensorsFile(std::move(impl));
}

const std::string& SafetensorsFile::name() const { return impl_->name; }
const std::vector<StTensorInfo>& SafetensorsFile::tensors() const { return impl_->tensors; }
const std::map<std::string, std::string>& SafetensorsFile::metadata() const {
  return impl_->metadata;
}

const StTensorInfo* SafetensorsFile::find(std::string_view name) const {
  auto it = impl_->by_name.find(std::string(name));
  return it == impl_->by_name.end() ? nullptr : &impl_->tensors[it->second];
}

std::span<const uint8_t> SafetensorsFile::data(const StTensorInfo& t) const {
  if (t.begin > t.end || t.end > impl_->buffer_size) {
    throw Error(
        fmt::format("{}: tensor {} is not in this file's data buffer", impl_->name, quote(t.name)));
  }
  return {impl_->buffer + t.begin, static_cast<size_t>(t.end - t.begin)};
}

}  // namespace flashnorm::io
