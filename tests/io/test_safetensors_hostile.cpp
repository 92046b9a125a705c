// Hand-broken safetensors files and Hugging Face index files: each must be refused with a
// FormatError (or Error) naming the problem, never a crash. Rules from the safetensors README
// "Format" section: 8-byte LE header size, JSON object header, dtype/shape/data_offsets per
// tensor, offsets tiling the byte buffer, "__metadata__" a string->string map.
// Run under ASan+UBSan too (preset asan).
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <optional>
#include <string>

#include "flashnorm/error.h"
#include "flashnorm/io/safetensors.h"

namespace fs = std::filesystem;
using flashnorm::Error;
using flashnorm::FormatError;
using namespace flashnorm::io;

namespace {

// A safetensors file: length prefix (N = header size unless overridden), header, `buffer` bytes.
std::vector<uint8_t> file_of(const std::string& header, size_t buffer,
                             std::optional<uint64_t> length = std::nullopt) {
  const uint64_t n = length.value_or(header.size());
  std::vector<uint8_t> out;
  out.reserve(8 + header.size() + buffer);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(n >> (8 * i)));
  for (const char c : header) out.push_back(static_cast<uint8_t>(c));
  for (size_t i = 0; i < buffer; ++i) out.push_back(static_cast<uint8_t>(i));
  return out;
}

// Parses `bytes`; expects a FormatError whose message contains `needle` (and `field` in the
// field name when given). Returns the error's byte offset.
uint64_t expect_format_error(const std::vector<uint8_t>& bytes, const std::string& needle,
                             const std::string& field = "") {
  try {
    SafetensorsFile::parse(bytes, "hostile.safetensors");
  } catch (const FormatError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(needle), std::string::npos) << what;
    EXPECT_NE(what.find("hostile.safetensors"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << "message is not one line: " << what;
    if (!field.empty()) EXPECT_EQ(e.field(), field) << what;
    return e.offset();
  }
  ADD_FAILURE() << "no FormatError; expected: " << needle;
  return 0;
}

const std::string kF32x1 = R"("dtype":"F32","shape":[1],"data_offsets":[0,4])";

TEST(SafetensorsHostile, HeaderLength) {
  expect_format_error({1, 2, 3}, "shorter than the 8-byte header length", "header_length");
  expect_format_error(file_of("{}", 0, 1000), "header length 1000 exceeds the 2 bytes",
                      "header_length");
  expect_format_error(file_of("{}", 0, 1ull << 63), "exceeds the limit", "header_length");
  expect_format_error(file_of("{}", 0, ~0ull), "exceeds the limit", "header_length");
  expect_format_error(file_of("{}", 0, 0), "header length is 0", "header_length");
  expect_format_error(file_of("{}", 0, 100'000'001), "exceeds the limit");
}

TEST(SafetensorsHostile, HeaderNotJson) {
  const uint64_t off = expect_format_error(file_of("{\"a\": nope}", 0), "parse error", "json");
  EXPECT_GT(off, 8u);   // points inside the header,
  EXPECT_LE(off, 19u);  // not past its end
  expect_format_error(file_of("[1, 2]", 0), "not a JSON object", "header");
  expect_format_error(file_of("\"str\"", 0), "not a JSON object", "header");
  expect_format_error(file_of("{\"a\":{}} x", 0), "parse error", "json");
  expect_format_error(file_of("{\"\xff\": 1}", 0), "parse error", "json");  // invalid UTF-8
  expect_format_error(file_of(std::string("{\"a\"\0:1}", 8), 0), "parse error", "json");
  // The header is the whole N bytes: JSON cut short by a smaller N is invalid.
  expect_format_error(file_of("{\"a\":{" + kF32x1 + "}}", 4, 10), "parse error", "json");
}

TEST(SafetensorsHostile, EntryFields) {
  expect_format_error(file_of(R"({"a": 5})", 0), "tensor entry is not an object", "\"a\"");
  uint64_t off = expect_format_error(file_of(R"({"a":{"shape":[1],"data_offsets":[0,4]}})", 4),
                                     "missing dtype", "\"a\".dtype");
  EXPECT_EQ(off, 9u);  // the entry's key, right after the length field and '{'
  expect_format_error(file_of(R"({"a":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", 4),
                      "unknown dtype \"F33\"", "\"a\".dtype");
  expect_format_error(file_of(R"({"a":{"dtype":7,"shape":[1],"data_offsets":[0,4]}})", 4),
                      "dtype is not a string", "\"a\".dtype");
  expect_format_error(file_of(R"({"a":{"dtype":"F32","data_offsets":[0,4]}})", 4), "missing shape",
                      "\"a\".shape");
  expect_format_error(file_of(R"({"a":{"dtype":"F32","shape":1,"data_offsets":[0,4]}})", 4),
                      "shape is not an array", "\"a\".shape");
  expect_format_error(file_of(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4),
                      "negative", "\"a\".shape");
  expect_format_error(file_of(R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4),
                      "not a non-negative integer", "\"a\".shape");
  expect_format_error(file_of(R"({"a":{"dtype":"F32","shape":["1"],"data_offsets":[0,4]}})", 4),
                      "not a non-negative integer", "\"a\".shape");
  expect_format_error(file_of(R"({"a":{"dtype":"F32","shape":[1e30],"data_offsets":[0,4]}})", 4),
                      "not a non-negative integer", "\"a\".shape");
  expect_format_error(
      file_of(R"({"a":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", 0),
      "product of the shape overflows", "\"a\".shape");
  expect_format_error(
      file_of(R"({"a":{"dtype":"F32","shape":[4611686018427387905],"data_offsets":[0,4]}})", 4),
      "byte size overflows", "\"a\".shape");
  expect_format_error(file_of(R"({"a":{"dtype":"F32","shape":[1]}})", 4), "missing data_offsets",
                      "\"a\".data_offsets");
  expect_format_error(file_of(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4),
                      "not an array [begin, end]", "\"a\".data_offsets");
  expect_format_error(file_of(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})", 8),
                      "not an array [begin, end]", "\"a\".data_offsets");
  expect_format_error(file_of(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,-4]}})", 4),
                      "end is negative", "\"a\".data_offsets");
}

// Deep nesting must not exhaust the stack (nlohmann's parser and destructor are iterative).
TEST(SafetensorsHostile, DeepNesting) {
  const std::string deep = "{\"a\":" + std::string(200'000, '[') + std::string(200'000, ']') + "}";
  expect_format_error(file_of(deep, 0), "nesting deeper than 64 levels", "json");
  std::string open = "{";
  for (int i = 0; i < 100'000; ++i) open += "\"b\":{";
  expect_format_error(file_of(open, 0), "nesting deeper than 64 levels", "json");
}

TEST(SafetensorsHostile, DataOffsets) {
  expect_format_error(file_of(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}})", 4),
                      "begin 4 is after end 0", "\"a\".data_offsets");
  expect_format_error(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4),
                      "end 8 is past the end of the 4-byte data buffer", "\"a\".data_offsets");
  expect_format_error(
      file_of(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,18446744073709551615]}})", 4),
      "past the end", "\"a\".data_offsets");
  expect_format_error(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4),
                      "size mismatch: 4 bytes, but shape and dtype F32 need 8 bytes",
                      "\"a\".data_offsets");
  // Overlap: b starts inside a.
  const std::string overlap = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                              R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  expect_format_error(file_of(overlap, 12), "overlap", "\"b\".data_offsets");
  // Two tensors on the same bytes.
  const std::string alias = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                            R"("b":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})";
  expect_format_error(file_of(alias, 4), "overlap");
  // Hole between tensors; the offset points at the first unclaimed byte of the file.
  const std::string hole = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                           R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})";
  const uint64_t off = expect_format_error(file_of(hole, 12), "hole: data buffer bytes [4, 8)",
                                           "\"b\".data_offsets");
  EXPECT_EQ(off, 8 + hole.size() + 4);
  // Bytes after the last tensor, and a hole before the first.
  expect_format_error(file_of("{\"a\":{" + kF32x1 + "}}", 8), "hole: data buffer bytes [4, 8)",
                      "data_offsets");
  expect_format_error(file_of(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8),
                      "hole: data buffer bytes [0, 4)");
  expect_format_error(file_of("{}", 4), "hole");
}

TEST(SafetensorsHostile, MetadataAndDuplicates) {
  expect_format_error(file_of(R"({"__metadata__":[1]})", 0), "__metadata__ is not an object",
                      "__metadata__");
  expect_format_error(file_of(R"({"__metadata__":"x"})", 0), "__metadata__ is not an object");
  expect_format_error(file_of(R"({"__metadata__":{"k":1}})", 0),
                      "metadata value is not a string but number", "__metadata__[\"k\"]");
  expect_format_error(file_of(R"({"__metadata__":{"k":{"n":"v"}}})", 0),
                      "metadata value is not a string but object");
  const std::string dup = "{\"a\":{" + kF32x1 + "},\"a\":{" + kF32x1 + "}}";
  const uint64_t off = expect_format_error(file_of(dup, 4), "duplicate key \"a\"", "json");
  EXPECT_EQ(off, 8 + dup.rfind("\"a\""));
  expect_format_error(
      file_of(R"({"a":{"dtype":"F32","dtype":"F16","shape":[1],"data_offsets":[0,4]}})", 4),
      "duplicate key \"dtype\" in \"a\"", "json");
  expect_format_error(file_of(R"({"__metadata__":{"k":"1","k":"2"}})", 0),
                      "duplicate key \"k\" in \"__metadata__\"");
}

// A small valid file, then every strict prefix of it: each must be a FormatError.
TEST(SafetensorsHostile, TruncatedAtEveryByte) {
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F16","shape":[2,3],"data_offsets":[0,12]},)"
      R"("b":{"dtype":"BF16","shape":[2],"data_offsets":[12,16]}})";
  const std::vector<uint8_t> good = file_of(header + "   ", 16);
  SafetensorsFile f = SafetensorsFile::parse(good, "good.safetensors");
  ASSERT_EQ(f.tensors().size(), 2u);
  ASSERT_EQ(f.data(*f.find("b")).size(), 4u);

  for (size_t k = 0; k < good.size(); ++k) {
    std::vector<uint8_t> cut(good.begin(), good.begin() + k);
    EXPECT_THROW(SafetensorsFile::parse(cut, "cut.safetensors"), FormatError) << "prefix " << k;
  }
  // The same through open() (mmap of a file truncated on disk), including the empty file.
  const fs::path dir =
      fs::temp_directory_path() / ("flashnorm_st_trunc_" + std::to_string(getpid()));
  fs::create_directories(dir);
  for (size_t k = 0; k < good.size(); ++k) {
    const fs::path p = dir / "t.safetensors";
    std::ofstream(p, std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char*>(good.data()), static_cast<std::streamsize>(k));
    EXPECT_THROW(SafetensorsFile::open(p), FormatError) << "prefix " << k;
  }
  EXPECT_THROW(SafetensorsFile::open(dir / "absent.safetensors"), Error);
  EXPECT_THROW(SafetensorsFile::open(dir), Error);  // a directory
  fs::remove_all(dir);
}

// --- Hugging Face directories with a bad index ---------------------------------------------

struct HfFixture : ::testing::Test {
  fs::path dir;
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir = fs::temp_directory_path() /
          (std::string("flashnorm_st_hf_") + info->name() + "_" + std::to_string(getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    write("config.json", R"({"model_type": "llama"})");
    write_safetensors(dir / "s1.safetensors", {{"a", StDtype::F32, {1}, {1}}}, {});
    write_safetensors(dir / "s2.safetensors", {{"b", StDtype::F32, {1}, {2}}}, {});
  }
  void TearDown() override { fs::remove_all(dir); }
  void write(const std::string& name, const std::string& text) {
    std::ofstream(dir / name, std::ios::binary) << text;
  }
  void index(const std::string& text) { write("model.safetensors.index.json", text); }
  // Expects HfModelDir::open to throw an Error (FormatError when `format`) containing `needle`.
  void expect_error(const std::string& needle, bool format = true) {
    try {
      HfModelDir::open(dir);
    } catch (const FormatError& e) {
      EXPECT_TRUE(format) << "unexpected FormatError: " << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      return;
    } catch (const Error& e) {
      EXPECT_FALSE(format) << "expected a FormatError: " << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      return;
    }
    ADD_FAILURE() << "no error; expected: " << needle;
  }
};

TEST_F(HfFixture, GoodIndexOpens) {
  index(R"({"metadata":{},"weight_map":{"a":"s1.safetensors","b":"s2.safetensors"}})");
  HfModelDir d = HfModelDir::open(dir);
  EXPECT_EQ(d.tensor_names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(d.load_fp32("b"), std::vector<float>{2});
}

// A single model.safetensors beside an index: transformers would load the single file, the index
// names other weights; refused rather than one of them guessed.
TEST_F(HfFixture, SingleFileAndIndexTogetherAreRefused) {
  index(R"({"metadata":{},"weight_map":{"a":"s1.safetensors","b":"s2.safetensors"}})");
  write_safetensors(dir / "model.safetensors", {{"a", StDtype::F32, {1}, {9}}}, {});
  expect_error("refusing to guess", /*format=*/false);
}

TEST_F(HfFixture, MissingWeightMap) {
  index(R"({"metadata":{}})");
  expect_error("missing weight_map");
  index(R"({"weight_map":["s1.safetensors"]})");
  expect_error("weight_map is not an object");
  index(R"([1])");
  expect_error("index is not a JSON object");
  index(R"({"weight_map":{"a":"s1.safetensors")");
  expect_error("parse error");
  index(R"({"weight_map":{"a":"s1.safetensors","a":"s2.safetensors"}})");
  expect_error("duplicate key \"a\"");
  index(R"({"weight_map":{"a":1}})");
  expect_error("shard name is not a string");
}

TEST_F(HfFixture, ShardMissing) {
  index(R"({"weight_map":{"a":"s1.safetensors","b":"s3.safetensors"}})");
  expect_error("shard \"s3.safetensors\" does not exist");
}

TEST_F(HfFixture, ShardPathEscapes) {
  fs::create_directories(dir / "sub");
  write_safetensors(dir / "sub" / "x.safetensors", {{"a", StDtype::F32, {1}, {1}}}, {});
  for (const std::string bad :
       {"../s1.safetensors", "/etc/passwd", "sub/../../s1.safetensors", "", "sub/"}) {
    index(R"({"weight_map":{"a":")" + bad + R"("}})");
    expect_error("escapes the model directory");
  }
  // A relative path inside the directory is fine.
  index(R"({"weight_map":{"a":"sub/x.safetensors"}})");
  EXPECT_EQ(HfModelDir::open(dir).tensor_names().size(), 1u);
}

TEST_F(HfFixture, TensorNotWhereTheIndexSays) {
  index(R"({"weight_map":{"a":"s1.safetensors","b":"s1.safetensors"}})");
  expect_error("weight_map[\"b\"] at byte");
  expect_error("tensor is absent from shard \"s1.safetensors\"");
  // A tensor of a shard that the index does not list.
  write_safetensors(dir / "s1.safetensors",
                    {{"a", StDtype::F32, {1}, {1}}, {"c", StDtype::F32, {1}, {3}}}, {});
  index(R"({"weight_map":{"a":"s1.safetensors","b":"s2.safetensors"}})");
  expect_error("tensor \"c\" of shard \"s1.safetensors\" is not in the weight_map");
  // The same tensor in two shards.
  write_safetensors(dir / "s1.safetensors",
                    {{"a", StDtype::F32, {1}, {1}}, {"b", StDtype::F32, {1}, {3}}}, {});
  expect_error("tensor is also in shard \"s1.safetensors\"");
}

TEST_F(HfFixture, BadShardOrConfig) {
  write("s2.safetensors", "garbage!");
  index(R"({"weight_map":{"a":"s1.safetensors","b":"s2.safetensors"}})");
  expect_error("s2.safetensors: header_length at byte 0");
  fs::remove(dir / "model.safetensors.index.json");
  expect_error("neither model.safetensors nor model.safetensors.index.json", false);
  write("config.json", "[]");
  expect_error("config.json is not a JSON object");
  write("config.json", "{");
  expect_error("parse error");
  fs::remove(dir / "config.json");
  expect_error("missing config.json", false);
}

}  // namespace
