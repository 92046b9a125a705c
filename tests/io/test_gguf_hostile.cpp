// Hand-broken GGUF images: each must be refused with a FormatError whose message names the field
// (and the problem), never a crash, a huge allocation or another exception. The images are built
// in memory by a small builder following the GGUF v3 layout (ggml/docs/gguf.md); the kinds of
// breakage follow the "GGUF reading rules" of docs/design.md section 5 and the public advisories
// against GGUF parsers (count and length overflows, n_dims, dims products, offsets, alignment,
// element types). Run under ASan+UBSan too (cmake -DFLASHNORM_SANITIZE=ON).
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "flashnorm/error.h"
#include "flashnorm/io/gguf.h"

namespace flashnorm::io {
namespace {

// GGUF value type ids and GGML type ids used below (GGUF spec).
constexpr uint32_t kU32 = 4, kI32 = 5, kF32v = 6, kBool = 7, kStr = 8, kArr = 9, kU64 = 10;
constexpr uint32_t kF32 = 0, kQ8_0 = 8, kF64 = 28;

// Little-endian image builder that remembers the byte offset of labelled fields.
class Builder {
 public:
  std::vector<uint8_t> b;
  std::map<std::string, size_t> at;

  Builder& mark(const std::string& label) {
    at[label] = b.size();
    return *this;
  }
  template <class T>
  Builder& put(T v) {
    const size_t n = b.size();
    b.resize(n + sizeof(T));
    std::memcpy(b.data() + n, &v, sizeof(T));
    return *this;
  }
  Builder& u32(uint32_t v) { return put(v); }
  Builder& u64(uint64_t v) { return put(v); }
  Builder& str(const std::string& s) {
    u64(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Builder& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    mark("magic").u32(0x46554747).mark("version").u32(version);
    return mark("tensor_count").u64(n_tensors).mark("kv_count").u64(n_kv);
  }
  Builder& kv_str(const std::string& key, const std::string& v) {
    return str(key).u32(kStr).str(v);
  }
  Builder& kv_u32(const std::string& key, uint32_t v) { return str(key).u32(kU32).u32(v); }
  Builder& kv_str_array(const std::string& key, const std::vector<std::string>& v) {
    str(key).u32(kArr).u32(kStr).u64(v.size());
    for (const auto& s : v) str(s);
    return *this;
  }
  Builder& kv_i32_array(const std::string& key, const std::vector<int32_t>& v) {
    str(key).u32(kArr).u32(kI32).u64(v.size());
    for (int32_t x : v) put(x);
    return *this;
  }
  Builder& tensor(const std::string& label, const std::string& name,
                  const std::vector<uint64_t>& dims, uint32_t type, uint64_t offset) {
    mark(label).str(name).mark(label + ".n_dims").u32(static_cast<uint32_t>(dims.size()));
    for (size_t d = 0; d < dims.size(); ++d) mark(label + ".dims" + std::to_string(d)).u64(dims[d]);
    return mark(label + ".type").u32(type).mark(label + ".offset").u64(offset);
  }
  Builder& pad(size_t align) {
    while (b.size() % align) b.push_back(0);
    return *this;
  }
  Builder& data(size_t n) {
    for (size_t i = 0; i < n; ++i) b.push_back(static_cast<uint8_t>(i * 7));
    return *this;
  }
  void patch_u32(const std::string& label, uint32_t v) { std::memcpy(&b.at(at.at(label)), &v, 4); }
  void patch_u64(const std::string& label, uint64_t v) { std::memcpy(&b.at(at.at(label)), &v, 8); }
};

// A valid file: 4 KVs, 2 tensors (F32 [32, 2] at 0, Q8_0 [64] at 256), data padded to 32.
// Tensor bytes end at data + 324; the file ends at data + 352.
Builder valid() {
  Builder g;
  g.header(2, 4);
  g.mark("kv0").kv_str("general.architecture", "llama");
  g.mark("kv1").str("general.alignment").u32(kU32).mark("kv1.value").u32(32);
  g.mark("kv2").str("tokenizer.ggml.tokens").u32(kArr).u32(kStr).mark("kv2.len").u64(3);
  g.mark("kv2.s0").str("a").mark("kv2.s1").str("bb").str("ccc");
  g.mark("kv3").kv_i32_array("tokenizer.ggml.token_type", {1, 1, 1});
  g.tensor("t0", "a", {32, 2}, kF32, 0);
  g.tensor("t1", "b", {64}, kQ8_0, 256);
  g.mark("infos_end").pad(32).mark("data").data(256 + 68).mark("data_end").pad(32);
  return g;
}

GgufFile parse(const std::vector<uint8_t>& b) { return GgufFile::parse(b, "hostile.gguf"); }

// Requires a FormatError whose message contains every one of `needles`.
void expect_format_error(const std::vector<uint8_t>& b,
                         std::initializer_list<std::string> needles) {
  try {
    parse(b);
    ADD_FAILURE() << "accepted; expected an error naming " << *needles.begin();
  } catch (const FormatError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("hostile.gguf"), std::string::npos) << msg;
    EXPECT_NE(msg.find("at byte"), std::string::npos) << msg;
    for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

TEST(GgufHostile, ValidImageParses) {
  const auto g = valid();
  const auto f = parse(g.b);
  EXPECT_EQ(f.kvs().size(), 4u);
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.data_offset(), g.at.at("data"));
  EXPECT_EQ(f.tensors()[1].n_bytes, 68u);
  EXPECT_EQ(f.string_array("tokenizer.ggml.tokens"), (std::vector<std::string>{"a", "bb", "ccc"}));
  EXPECT_EQ(f.tensor_data(f.tensors()[1]).data() - f.tensor_data(f.tensors()[0]).data(), 256);
}

TEST(GgufHostile, BadMagic) {
  auto g = valid();
  g.b[0] = 'X';
  expect_format_error(g.b, {"header.magic", "GGUF"});
}

TEST(GgufHostile, BadVersion) {
  for (uint32_t v : {0u, 1u, 4u, 0x03000000u /* big-endian v3 */}) {
    auto g = valid();
    g.patch_u32("version", v);
    expect_format_error(g.b, {"header.version", std::to_string(v)});
  }
}

// Every proper prefix that cuts into the header, KVs, tensor infos, alignment padding or tensor
// data is refused with an error naming the section being read; prefixes that only lose trailing
// padding after the last tensor are valid files.
TEST(GgufHostile, TruncatedAtEveryByte) {
  const auto g = valid();
  const size_t data_end = g.at.at("data_end");
  for (size_t len = 0; len < g.b.size(); ++len) {
    std::vector<uint8_t> p(g.b.begin(), g.b.begin() + static_cast<std::ptrdiff_t>(len));
    SCOPED_TRACE("prefix of " + std::to_string(len) + " bytes");
    if (len >= data_end) {
      EXPECT_NO_THROW(parse(p));
      continue;
    }
    std::string section;
    if (len < 24) {
      section = "header.";
    } else if (len < g.at.at("t0")) {
      int k = 0;
      for (int i = 0; i < 4; ++i) {
        if (len >= g.at.at("kv" + std::to_string(i))) k = i;
      }
      section = "kv[" + std::to_string(k) + "]";
    } else if (len < g.at.at("infos_end")) {
      section = len < g.at.at("t1") ? "tensor_info[0]" : "tensor_info[1]";
    } else {
      section = "";  // padding or data: "data section" or "tensor_info[i].offset"
    }
    try {
      parse(p);
      ADD_FAILURE() << "truncated image accepted";
    } catch (const FormatError& e) {
      const std::string msg = e.what();
      EXPECT_LE(e.offset(), len) << msg;
      // Early in the KVs the header's count checks fire first (too few bytes for the counts).
      const bool counts = section.rfind("kv[", 0) == 0 && msg.find("header.") != std::string::npos;
      if (!section.empty() && !counts) EXPECT_NE(msg.find(section), std::string::npos) << msg;
      if (len >= g.at.at("infos_end")) {
        EXPECT_TRUE(msg.find("data section") != std::string::npos ||
                    msg.find(".offset") != std::string::npos)
            << msg;
      }
    }
  }
}

// The valid image with the u64 at `label` set to each of `values` in turn: each must be refused
// with a FormatError naming `needle`.
void expect_u64_refused(const std::string& label, std::initializer_list<uint64_t> values,
                        const std::string& needle) {
  for (uint64_t n : values) {
    auto g = valid();
    g.patch_u64(label, n);
    SCOPED_TRACE(label + " = " + std::to_string(n));
    expect_format_error(g.b, {needle});
  }
}

TEST(GgufHostile, HugeTensorCount) {
  expect_u64_refused("tensor_count",
                     {uint64_t{1} << 63, (uint64_t{1} << 59) + 1, uint64_t{1000}, ~uint64_t{0}},
                     "header.tensor_count");
}

TEST(GgufHostile, HugeKvCount) {
  expect_u64_refused("kv_count", {uint64_t{1} << 63, uint64_t{1} << 40, ~uint64_t{0}},
                     "header.kv_count");
}

TEST(GgufHostile, KeyLengthPastEnd) {
  auto g = valid();
  g.patch_u64("kv0", uint64_t{1} << 62);
  expect_format_error(g.b, {"kv[0].key length", "past the end"});
  g.patch_u64("kv0", ~uint64_t{0});
  expect_format_error(g.b, {"kv[0].key length"});
}

TEST(GgufHostile, EmptyKey) {
  Builder g;
  g.header(0, 1).str("").u32(kU32).u32(1);
  expect_format_error(g.b, {"kv[0].key", "length 0"});
}

TEST(GgufHostile, StringValueLengthPastEnd) {
  auto g = valid();
  // general.architecture's value length sits after key length (8), key (20) and type (4).
  const size_t at = g.at.at("kv0") + 8 + 20 + 4;
  const uint64_t huge = uint64_t{1} << 60;
  std::memcpy(&g.b[at], &huge, 8);
  expect_format_error(g.b, {"kv[0] \"general.architecture\" length", "past the end"});
}

TEST(GgufHostile, ArrayLengthPastEnd) {
  expect_u64_refused("kv2.len", {uint64_t{1} << 62, uint64_t{1000}, ~uint64_t{0}},
                     "kv[2] \"tokenizer.ggml.tokens\" array length");
}

TEST(GgufHostile, ArrayElementStringPastEnd) {
  auto g = valid();
  g.patch_u64("kv2.s1", uint64_t{1} << 50);
  expect_format_error(g.b, {"kv[2] \"tokenizer.ggml.tokens\"[1] length"});
}

TEST(GgufHostile, NDimsOutOfRange) {
  for (uint32_t n : {0u, 5u, 1000u, 0xffffffffu}) {
    auto g = valid();
    g.patch_u32("t1.n_dims", n);
    expect_format_error(g.b, {"tensor_info[1].n_dims", std::to_string(n)});
  }
}

TEST(GgufHostile, ZeroOrNegativeDim) {
  auto g = valid();
  g.patch_u64("t0.dims1", 0);
  expect_format_error(g.b, {"tensor_info[0].dims[1]", "dimension 0"});
  g = valid();
  g.patch_u64("t0.dims0", ~uint64_t{0});  // -1 as int64
  expect_format_error(g.b, {"tensor_info[0].dims[0]"});
}

TEST(GgufHostile, DimsProductOverflows) {
  // 2^32 * 2^32 wraps to 0; 2^62 * 4 wraps to 0; 2^40 * 2^30 exceeds 2^63.
  for (auto [a, b] : {std::pair<uint64_t, uint64_t>{1ull << 32, 1ull << 32},
                      {1ull << 62, 4},
                      {1ull << 40, 1ull << 30}}) {
    auto g = valid();
    g.patch_u64("t0.dims0", a);
    g.patch_u64("t0.dims1", b);
    expect_format_error(g.b, {"tensor_info[0].dims[1]", "overflows"});
  }
}

TEST(GgufHostile, ByteSizeOverflows) {
  auto g = valid();
  g.patch_u64("t0.dims0", 1ull << 31);
  g.patch_u64("t0.dims1", 1ull << 31);  // 2^62 elements fit int64, 2^62 * 8 bytes do not
  g.patch_u32("t0.type", kF64);
  expect_format_error(g.b, {"tensor_info[0].dims", "byte size overflows"});
}

TEST(GgufHostile, HugeTensorPastData) {
  auto g = valid();
  g.patch_u64("t0.dims1", 1ull << 40);  // fits 64 bits, far past the data
  expect_format_error(g.b, {"tensor_info[0].offset", "runs past the end"});
}

TEST(GgufHostile, UnknownTensorType) {
  for (uint32_t t : {4u, 5u, 99u, 0xffffffffu}) {
    auto g = valid();
    g.patch_u32("t1.type", t);
    expect_format_error(g.b, {"tensor_info[1].type", "unknown tensor type"});
  }
}

TEST(GgufHostile, UnknownValueType) {
  auto g = valid();
  g.patch_u32("kv1.value", 32);
  const size_t type_at = g.at.at("kv1.value") - 4;
  const uint32_t bad = 13;
  std::memcpy(&g.b[type_at], &bad, 4);
  expect_format_error(g.b, {"kv[1] \"general.alignment\" type", "unknown value type 13"});
}

TEST(GgufHostile, UnknownArrayElementType) {
  auto g = valid();
  const uint32_t bad = 77;
  std::memcpy(&g.b[g.at.at("kv2.len") - 4], &bad, 4);
  expect_format_error(g.b, {"\"tokenizer.ggml.tokens\" array type", "unknown element type"});
}

TEST(GgufHostile, RowNotMultipleOfBlock) {
  Builder g;
  g.header(1, 0).tensor("t0", "q", {33}, kQ8_0, 0).pad(32).data(64);
  expect_format_error(g.b, {"tensor_info[0].dims[0]", "not a multiple", "Q8_0"});
}

TEST(GgufHostile, MisalignedOffset) {
  auto g = valid();
  g.patch_u64("t1.offset", 260);
  expect_format_error(g.b, {"tensor_info[1].offset", "alignment 32"});
}

TEST(GgufHostile, OffsetPastData) {
  for (uint64_t off : {uint64_t{1} << 40, uint64_t{352}, ~uint64_t{31} /* offset + size wraps */}) {
    auto g = valid();
    g.patch_u64("t1.offset", off);
    expect_format_error(g.b, {"tensor_info[1].offset", "runs past the end"});
  }
}

TEST(GgufHostile, OverlappingTensors) {
  auto g = valid();
  g.patch_u64("t1.offset", 224);  // [224, 292) overlaps [0, 256)
  expect_format_error(g.b, {"tensor_info[1].offset", "overlaps"});
  g = valid();
  g.patch_u64("t1.offset", 0);
  g.patch_u64("t0.offset", 0);
  expect_format_error(g.b, {".offset", "overlaps"});
}

TEST(GgufHostile, BadAlignmentValue) {
  for (uint32_t a : {0u, 3u, 48u, 1u << 21, 0x80000000u}) {
    auto g = valid();
    g.patch_u32("kv1.value", a);
    expect_format_error(g.b, {"\"general.alignment\"", "power of two"});
  }
}

TEST(GgufHostile, AlignmentNotU32) {
  // general.alignment stored as UINT64, INT32, FLOAT32 and STRING.
  auto make = [](uint32_t type) {
    Builder g;
    g.header(0, 1).str("general.alignment").u32(type);
    if (type == kU64) g.u64(32);
    if (type == kI32 || type == kF32v) g.u32(32);
    if (type == kStr) g.str("32");
    return g.b;
  };
  for (uint32_t t : {kU64, kI32, kF32v, kStr}) {
    expect_format_error(make(t), {"\"general.alignment\"", "must be UINT32"});
  }
}

TEST(GgufHostile, DuplicateTensorNames) {
  Builder g;
  g.header(2, 0).tensor("t0", "same", {32}, kF32, 0).tensor("t1", "same", {32}, kF32, 128);
  g.pad(32).data(256);
  expect_format_error(g.b, {"tensor_info[1].name", "duplicate tensor name \"same\""});
}

TEST(GgufHostile, DuplicateKeys) {
  Builder g;
  g.header(0, 2).kv_u32("x.y", 1).kv_u32("x.y", 2);
  expect_format_error(g.b, {"kv[1] \"x.y\"", "duplicate key"});
}

TEST(GgufHostile, BoolNotZeroOrOne) {
  Builder g;
  g.header(0, 1).str("b").u32(kBool).put<uint8_t>(2);
  expect_format_error(g.b, {"kv[0] \"b\"", "bool value 2"});
  Builder h;
  h.header(0, 1).str("b").u32(kArr).u32(kBool).u64(3).put<uint8_t>(1).put<uint8_t>(0).put<uint8_t>(
      9);
  expect_format_error(h.b, {"kv[0] \"b\"[2]", "bool value 9"});
}

// A tokenizer array whose element type is not what the reader needs parses as metadata, but the
// typed accessor refuses it by name (a narrower type must never be read as strings).
TEST(GgufHostile, TokenizerArrayOfWrongType) {
  Builder g;
  g.header(0, 1).kv_i32_array("tokenizer.ggml.tokens", {1, 2, 3});
  const auto f = parse(g.b);
  try {
    f.string_array("tokenizer.ggml.tokens");
    ADD_FAILURE() << "INT32 array accepted as strings";
  } catch (const FormatError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("\"tokenizer.ggml.tokens\""), std::string::npos) << msg;
    EXPECT_NE(msg.find("INT32"), std::string::npos) << msg;
  }
  Builder h;
  h.header(0, 1).kv_str("tokenizer.ggml.tokens", "not an array");
  EXPECT_THROW(parse(h.b).string_array("tokenizer.ggml.tokens"), FormatError);
  Builder k;
  k.header(0, 1).str("tokenizer.ggml.scores").u32(kArr).u32(kU64).u64(1).u64(~uint64_t{0});
  EXPECT_THROW(parse(k.b).int_array("tokenizer.ggml.scores"), FormatError);  // > INT64_MAX
}

TEST(GgufHostile, NestedArrayBombs) {
  {  // three levels deep
    Builder g;
    g.header(0, 1).str("n").u32(kArr).u32(kArr).u64(1).u32(kArr).u64(1).u32(kU32).u64(0);
    expect_format_error(g.b, {"kv[0] \"n\"[0] array type", "nested"});
  }
  {  // an array of 2^40 empty arrays: 12 bytes each are not there
    Builder g;
    g.header(0, 1).str("n").u32(kArr).u32(kArr).u64(1ull << 40);
    for (int i = 0; i < 4; ++i) g.u32(kU32).u64(0);
    expect_format_error(g.b, {"kv[0] \"n\" array length", "12 bytes each"});
  }
  {  // 70000 real empty inner arrays: over the nesting budget
    Builder g;
    g.header(0, 1).str("n").u32(kArr).u32(kArr).u64(70000);
    for (int i = 0; i < 70000; ++i) g.u32(kU32).u64(0);
    expect_format_error(g.b, {"kv[0] \"n\" array length", "nested arrays"});
  }
  {  // a valid two-level array parses
    Builder g;
    g.header(0, 1).str("n").u32(kArr).u32(kArr).u64(2);
    g.u32(kU32).u64(1).u32(7).u32(kStr).u64(1).str("x");
    const auto f = parse(g.b);
    ASSERT_EQ(f.kvs()[0].value.arrs.size(), 2u);
    EXPECT_EQ(f.kvs()[0].value.arrs[0].u_arr, std::vector<uint64_t>{7});
    EXPECT_EQ(f.kvs()[0].value.arrs[1].strs, std::vector<std::string>{"x"});
  }
}

TEST(GgufHostile, PaddingPastEndWithTensors) {
  Builder g;
  g.header(1, 0).tensor("t0", "a", {8}, kF32, 0);  // infos end unaligned, no data at all
  expect_format_error(g.b, {"data section", "past the end"});
}

// Random corruption of the valid image: each result is parsed cleanly or refused with a
// FormatError (never a crash, sanitizer report or other exception).
TEST(GgufHostile, RandomCorruptionNeverCrashes) {
  const auto g = valid();
  std::mt19937 rng(42);
  int refused = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    auto b = g.b;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) {
      const size_t at = rng() % b.size();
      b[at] = (rng() % 3 == 0) ? static_cast<uint8_t>(rng()) : static_cast<uint8_t>(0xff);
    }
    try {
      const auto f = parse(b);
      for (const auto& t : f.tensors()) EXPECT_EQ(f.tensor_data(t).size(), t.n_bytes);
    } catch (const FormatError&) {
      ++refused;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "non-FormatError exception: " << e.what();
    }
  }
  EXPECT_GT(refused, 1000);
}

}  // namespace
}  // namespace flashnorm::io
