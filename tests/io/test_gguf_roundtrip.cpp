// GGUF writer: (1) reading a real model and writing it back unchanged (tensor bytes as views into
// the mapping) reproduces the input byte for byte, which shows the writer keeps the layout,
// metadata types and padding of gguf-py/llama.cpp files; (2) a synthetic file with every value
// type, a 64-byte alignment and quantized tensors is read back by the `gguf` Python package
// (tests/io/gguf_dump_reference.py) with the same contents; (3) refusals.
#include <gtest/gtest.h>

#include "flashnorm/error.h"
#include "flashnorm/io/dequant.h"
#include "flashnorm/io/gguf.h"
#include "test_gguf_util.h"

namespace flashnorm::io {
namespace {

std::vector<GgufTensorOut> views_of(const GgufFile& f) {
  std::vector<GgufTensorOut> out;
  for (const auto& t : f.tensors()) {
    GgufTensorOut o;
    o.name = t.name;
    o.dims = t.dims;
    o.type = t.type;
    o.view = f.tensor_data(t);
    out.push_back(std::move(o));
  }
  return out;
}

void roundtrip(const std::filesystem::path& model, const std::string& tag) {
  ASSERT_TRUE(std::filesystem::exists(model)) << "model missing: " << model;
  const auto out = test::scratch_dir() / (tag + "_roundtrip.gguf");
  {
    const auto f = GgufFile::open(model);
    const std::filesystem::path inputs[] = {model};
    write_gguf(out, f.kvs(), views_of(f), inputs);
  }
  const auto a = test::read_all(model);
  const auto b = test::read_all(out);
  ASSERT_EQ(a.size(), b.size());
  size_t first = a.size();
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) {
      first = i;
      break;
    }
  }
  EXPECT_EQ(first, a.size()) << "first differing byte at " << first;
  std::filesystem::remove(out);
}

TEST(GgufRoundTrip, SmolLM2ByteIdentical) { roundtrip(test::smollm2_gguf(), "smollm2"); }
TEST(GgufRoundTrip, Gemma3ByteIdentical) { roundtrip(test::gemma3_gguf(), "gemma3"); }

// Small files written by gguf-py's GGUFWriter (every value type, F32/F16/Q8_0/Q4_0/Q5_0/Q4_K
// tensors, alignment 32 and 64, metadata only): our reader matches gguf-py's reader on them and
// our writer reproduces them byte for byte.
// Reference: python3 tests/io/gguf_fuzz_seeds.py <dir>, python3 tests/io/gguf_dump_reference.py
TEST(GgufRoundTrip, FilesWrittenByGgufPy) {
  const auto dir = test::scratch_dir() / "gguf_py_files";
  bool ok = false;
  test::run_reference_script("gguf_fuzz_seeds.py", {dir.string()}, &ok);
  ASSERT_TRUE(ok);
  for (const char* name : {"seed_full.gguf", "seed_align64.gguf", "seed_meta_only.gguf"}) {
    SCOPED_TRACE(name);
    const auto in = dir / name;
    const auto json = dir / (std::string(name) + ".json");
    const auto cmd =
        test::run_reference_script("gguf_dump_reference.py", {in.string(), json.string()}, &ok);
    ASSERT_TRUE(ok);
    const auto f = GgufFile::open(in);
    std::ifstream js(json);
    test::compare_with_dump(f, nlohmann::json::parse(js), cmd);
    const auto out = dir / (std::string(name) + ".out");
    write_gguf(out, f.kvs(), views_of(f));
    EXPECT_EQ(test::read_all(out), test::read_all(in));
  }
}

GgufKv kv(std::string key, GgufValue v) {
  GgufKv k;
  k.key = std::move(key);
  k.value = std::move(v);
  return k;
}

GgufValue scalar(GgufType t, uint64_t u, int64_t i, double f) {
  GgufValue v;
  v.type = t;
  v.u = u;
  v.i = i;
  v.f = f;
  return v;
}

// Every value type, scalar and array, in one file.
std::vector<GgufKv> all_value_kvs() {
  std::vector<GgufKv> kvs;
  kvs.push_back(kv("general.architecture", GgufValue::make_string("test")));
  kvs.push_back(kv("general.alignment", GgufValue::make_u32(64)));
  kvs.push_back(kv("t.u8", scalar(GgufType::UINT8, 255, 0, 0)));
  kvs.push_back(kv("t.i8", scalar(GgufType::INT8, 0, -128, 0)));
  kvs.push_back(kv("t.u16", scalar(GgufType::UINT16, 65535, 0, 0)));
  kvs.push_back(kv("t.i16", scalar(GgufType::INT16, 0, -32768, 0)));
  kvs.push_back(kv("t.u32", scalar(GgufType::UINT32, 4000000000u, 0, 0)));
  kvs.push_back(kv("t.i32", scalar(GgufType::INT32, 0, -2000000000, 0)));
  kvs.push_back(kv("t.f32", GgufValue::make_f32(1.5e-5f)));
  kvs.push_back(kv("t.bool", GgufValue::make_bool(true)));
  kvs.push_back(kv("t.str", GgufValue::make_string(std::string("a\0b\xff", 4))));
  kvs.push_back(kv("t.u64", scalar(GgufType::UINT64, 18446744073709551615ull, 0, 0)));
  kvs.push_back(kv("t.i64", scalar(GgufType::INT64, 0, INT64_MIN, 0)));
  kvs.push_back(kv("t.f64", scalar(GgufType::FLOAT64, 0, 0, 0.1)));
  kvs.push_back(kv("a.u8", GgufValue::make_uint_array(GgufType::UINT8, {0, 1, 255})));
  kvs.push_back(kv("a.i16", GgufValue::make_int_array(GgufType::INT16, {-1, 2, -32768})));
  kvs.push_back(kv("a.i32", GgufValue::make_int_array(GgufType::INT32, {1, -2, 3})));
  kvs.push_back(kv("a.u64", GgufValue::make_uint_array(GgufType::UINT64, {1ull << 40})));
  kvs.push_back(kv("a.f32", GgufValue::make_float_array(GgufType::FLOAT32, {0.5, -2.25})));
  kvs.push_back(kv("a.f64", GgufValue::make_float_array(GgufType::FLOAT64, {1e300})));
  kvs.push_back(kv("a.bool", GgufValue::make_uint_array(GgufType::BOOL, {1, 0})));
  kvs.push_back(kv("a.str", GgufValue::make_string_array({"", "x", "hello"})));
  kvs.push_back(kv("a.empty", GgufValue::make_array(GgufType::INT32)));
  return kvs;
}

std::vector<GgufTensorOut> small_tensors() {
  std::vector<GgufTensorOut> ts;
  std::vector<float> w(64 * 3);
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(0.1f * static_cast<float>(i));
  for (auto type : {GgmlType::F32, GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_1}) {
    GgufTensorOut t;
    t.name = std::string("w.") + std::string(ggml_type_traits(uint32_t(type))->name);
    t.dims = {64, 3};
    t.type = type;
    t.bytes = quantize(type, w);
    ts.push_back(std::move(t));
  }
  return ts;
}

TEST(GgufWriter, SyntheticFileReadByGgufPy) {
  const auto dir = test::scratch_dir();
  const auto path = dir / "synthetic.gguf";
  write_gguf(path, all_value_kvs(), small_tensors());
  const auto f = GgufFile::open(path);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  for (const auto& t : f.tensors()) EXPECT_EQ(t.offset % 64, 0u) << t.name;
  // gguf-py reads the same contents as our reader.
  const auto json = dir / "synthetic.json";
  bool ok = false;
  const auto cmd =
      test::run_reference_script("gguf_dump_reference.py", {path.string(), json.string()}, &ok);
  ASSERT_TRUE(ok);
  std::ifstream in(json);
  test::compare_with_dump(f, nlohmann::json::parse(in), cmd);
  // And what we read is what we wrote.
  const auto kvs = all_value_kvs();
  ASSERT_EQ(f.kvs().size(), kvs.size());
  for (size_t i = 0; i < kvs.size(); ++i) {
    EXPECT_EQ(f.kvs()[i].key, kvs[i].key);
    EXPECT_EQ(f.kvs()[i].value.type, kvs[i].value.type);
  }
  EXPECT_EQ(f.get_uint("t.u64"), 18446744073709551615ull);
  EXPECT_EQ(f.find("t.i64")->value.i, INT64_MIN);
  EXPECT_EQ(f.find("t.str")->value.str, std::string("a\0b\xff", 4));
  EXPECT_EQ(f.int_array("a.i16"), (std::vector<int64_t>{-1, 2, -32768}));
  const auto ts = small_tensors();
  for (const auto& t : ts) {
    const auto* info = f.find_tensor(t.name);
    ASSERT_TRUE(info);
    const auto data = f.tensor_data(*info);
    EXPECT_EQ(std::vector<uint8_t>(data.begin(), data.end()), t.bytes) << t.name;
  }
  // Writing what was read reproduces the file.
  const auto again = dir / "synthetic2.gguf";
  write_gguf(again, f.kvs(), views_of(f));
  EXPECT_EQ(test::read_all(again), test::read_all(path));
}

TEST(GgufWriter, Refusals) {
  const auto dir = test::scratch_dir();
  const auto path = dir / "refused.gguf";
  auto ts = small_tensors();
  ts[1].bytes.pop_back();
  EXPECT_THROW(write_gguf(path, {}, ts), Error);  // byte size does not match dims and type
  ts = small_tensors();
  ts[1].name = ts[0].name;
  EXPECT_THROW(write_gguf(path, {}, ts), Error);  // duplicate tensor name
  ts = small_tensors();
  ts[2].dims = {48, 4};  // 48 % 32 != 0 for Q8_0 (same element count)
  EXPECT_THROW(write_gguf(path, {}, ts), Error);
  auto kvs = all_value_kvs();
  kvs.push_back(kvs[0]);
  EXPECT_THROW(write_gguf(path, kvs, {}), Error);  // duplicate key
  kvs = all_value_kvs();
  kvs[1].value = GgufValue::make_u32(48);
  EXPECT_THROW(write_gguf(path, kvs, {}), Error);  // alignment not a power of two
  kvs = all_value_kvs();
  kvs[2].value.u = 256;
  EXPECT_THROW(write_gguf(path, kvs, {}), Error);  // 256 does not fit UINT8
  EXPECT_FALSE(std::filesystem::exists(path));
  // Never overwrite an input.
  write_gguf(path, {}, {});
  const std::filesystem::path inputs[] = {path};
  EXPECT_THROW(write_gguf(path, {}, {}, inputs), Error);
}

}  // namespace
}  // namespace flashnorm::io
