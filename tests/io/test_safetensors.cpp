// Tests of the safetensors writer/reader and Hugging Face directories: round trips with
// hand-derived IEEE rounding cases, 1- and 2-shard directories, and a cross-check against the
// reference implementation (pip package `safetensors`, numpy float16, ml_dtypes bfloat16) run by
// tests/io/safetensors_reference.py.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <span>

#include "flashnorm/error.h"
#include "flashnorm/io/safetensors.h"

namespace fs = std::filesystem;
using flashnorm::Error;
using namespace flashnorm::io;

namespace {

// A fresh directory for one test, removed at the end.
struct TempDir {
  fs::path path;
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path = fs::temp_directory_path() /
           fmt_name(std::string("flashnorm_st_") + info->test_suite_name() + "_" + info->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  static std::string fmt_name(std::string s) { return s + "_" + std::to_string(::getpid()); }
};

// Deterministic values, exact in fp32 (24-bit integers times 2^(scale_exp-19)); the same formula
// as formula() in safetensors_reference.py.
std::vector<float> values_for(size_t n, int scale_exp) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    uint64_t u = (static_cast<uint64_t>(i) * 2654435761ull) % (1ull << 32);
    double m = static_cast<double>(u >> 8);
    v[i] = static_cast<float>(std::ldexp(m - 8388608.0, scale_exp - 19));
  }
  return v;
}

// The SPECIALS list of safetensors_reference.py.
std::vector<float> specials() {
  const float inf = std::numeric_limits<float>::infinity();
  return {0.0f,
          -0.0f,
          inf,
          -inf,
          std::nanf(""),
          0x1.fffffep127f,
          -0x1.fffffep127f,
          65504.0f,
          65519.0f,
          65520.0f,
          0x1p-24f,
          0x1p-25f,
          0x3p-25f,
          1 + 0x1p-11f,
          1 + 0x3p-11f,
          1 + 0x1p-8f,
          1 + 0x3p-8f,
          0x1p-149f,
          -1.5f,
          6.0e-5f};
}

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }

std::vector<uint16_t> as_u16(std::span<const uint8_t> b) {
  std::vector<uint16_t> out(b.size() / 2);
  std::memcpy(out.data(), b.data(), out.size() * 2);
  return out;
}

void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << "element " << i;
    } else {
      EXPECT_EQ(bits(got[i]), bits(want[i]))
          << "element " << i << ": " << got[i] << " vs " << want[i];
    }
  }
}

TEST(Safetensors, RoundTripF32IsExact) {
  TempDir tmp;
  const fs::path p = tmp.path / "a.safetensors";
  std::vector<float> sp = specials();
  std::vector<float> x = values_for(24, 0);
  write_safetensors(p,
                    {{"b.weight", StDtype::F32, {2, 3, 4}, x},
                     {"a.special", StDtype::F32, {sp.size()}, sp},
                     {"scalar", StDtype::F32, {}, {2.5f}},
                     {"empty", StDtype::F32, {0, 3}, {}}},
                    {{"format", "pt"}});
  // Layout required by the spec's writer: the header length is such that data starts at a
  // multiple of 8.
  std::ifstream in(p, std::ios::binary);
  uint8_t len[8];
  in.read(reinterpret_cast<char*>(len), 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  EXPECT_EQ((8 + n) % 8, 0u);

  SafetensorsFile f = SafetensorsFile::open(p);
  ASSERT_EQ(f.tensors().size(), 4u);
  EXPECT_EQ(f.tensors()[0].name, "b.weight");  // header order = write order
  EXPECT_EQ(f.tensors()[1].name, "a.special");
  const StTensorInfo* w = f.find("b.weight");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, StDtype::F32);
  EXPECT_EQ(w->shape, (std::vector<uint64_t>{2, 3, 4}));
  EXPECT_EQ(w->n_elements(), 24u);
  expect_same_bits(st_to_fp32(w->dtype, f.data(*w)), x);
  const StTensorInfo* s = f.find("a.special");
  expect_same_bits(st_to_fp32(s->dtype, f.data(*s)), sp);
  const StTensorInfo* sc = f.find("scalar");
  EXPECT_TRUE(sc->shape.empty());
  EXPECT_EQ(st_to_fp32(sc->dtype, f.data(*sc)), std::vector<float>{2.5f});
  const StTensorInfo* e = f.find("empty");
  EXPECT_EQ(e->n_elements(), 0u);
  EXPECT_EQ(f.data(*e).size(), 0u);
  EXPECT_EQ(f.find("missing"), nullptr);
  EXPECT_EQ(f.metadata().at("format"), "pt");
}

// One rounding case: an fp32 input and the 16-bit pattern it must be stored as.
struct RoundCase {
  float in;
  uint16_t bits;
};

// Writes the inputs of `cases`, then `extra`, as one `dtype` (F16 or BF16) tensor to `p`, expects
// the stored bit pattern of every case, and returns all stored values read back as fp32.
std::vector<float> write_and_expect_bits(const fs::path& p, StDtype dtype,
                                         std::span<const RoundCase> cases,
                                         std::vector<float> extra = {}) {
  std::vector<float> in;
  for (const auto& c : cases) in.push_back(c.in);
  in.insert(in.end(), extra.begin(), extra.end());
  write_safetensors(p, {{"x", dtype, {in.size()}, in}}, {});
  SafetensorsFile f = SafetensorsFile::open(p);
  const StTensorInfo* t = f.find("x");
  if (t == nullptr) {
    ADD_FAILURE() << "tensor missing";
    return {};
  }
  EXPECT_EQ(t->dtype, dtype);
  const std::vector<uint16_t> got = as_u16(f.data(*t));
  EXPECT_EQ(got.size(), in.size());
  for (size_t i = 0; i < cases.size() && i < got.size(); ++i) {
    EXPECT_EQ(got[i], cases[i].bits) << "case " << i << " input " << cases[i].in;
  }
  return st_to_fp32(dtype, f.data(*t));
}

// fp32 -> fp16 rounding, expected bit patterns derived by hand from IEEE 754 binary16
// (1 sign, 5 exponent bits with bias 15, 10 mantissa bits; round to nearest, ties to even).
TEST(Safetensors, F16RoundsToNearestEven) {
  TempDir tmp;
  const fs::path p = tmp.path / "h.safetensors";
  const RoundCase cases[] = {
      {1.0f, 0x3C00},
      {1 + 0x1p-11f, 0x3C00},             // tie between 1 and 1+2^-10: even mantissa 0
      {1 + 0x3p-11f, 0x3C02},             // tie between mantissas 1 and 2: goes to 2
      {1 + 0x1p-11f + 0x1p-20f, 0x3C01},  // just above the tie
      {-2.0f, 0xC000},
      {65504.0f, 0x7BFF},  // largest finite
      {65519.0f, 0x7BFF},  // below the midpoint 65520
      {65520.0f, 0x7C00},  // midpoint to 65536: ties to even = inf
      {0x1p-14f, 0x0400},  // smallest normal
      {0x1p-24f, 0x0001},  // smallest subnormal
      {0x1p-25f, 0x0000},  // tie between 0 and 2^-24: even = 0
      {0x3p-25f, 0x0002},  // tie between 1 and 2 ulps: even = 2
      {-0.0f, 0x8000},
      {std::numeric_limits<float>::infinity(), 0x7C00},
  };
  // Decoding: each stored half read back as the value it denotes.
  std::vector<float> back = write_and_expect_bits(p, StDtype::F16, cases);
  ASSERT_EQ(back.size(), std::size(cases));
  EXPECT_EQ(back[2], 1 + 0x1p-9f);
  EXPECT_EQ(back[3], 1 + 0x1p-10f);
  EXPECT_EQ(back[5], 65504.0f);
  EXPECT_EQ(back[9], 0x1p-24f);
  EXPECT_EQ(back[11], 0x1p-23f);
  EXPECT_TRUE(std::isinf(back[7]));
  EXPECT_TRUE(std::signbit(back[12]));
}

// fp32 -> bf16: keep the upper 16 bits of binary32 after rounding to nearest even.
TEST(Safetensors, Bf16RoundsToNearestEven) {
  TempDir tmp;
  const fs::path p = tmp.path / "b.safetensors";
  const RoundCase cases[] = {
      {1.0f, 0x3F80},
      {1 + 0x1p-8f, 0x3F80},             // tie between 1 and 1+2^-7: even
      {1 + 0x3p-8f, 0x3F82},             // tie between mantissas 1 and 2
      {1 + 0x1p-8f + 0x1p-20f, 0x3F81},  // above the tie
      {-2.0f, 0xC000},
      {0x1.fffffep127f, 0x7F80},  // FLT_MAX is past the last bf16 midpoint: inf
      {-0.0f, 0x8000},
      {0x1p-149f, 0x0000},  // smallest fp32 subnormal rounds to 0
  };
  std::vector<float> back = write_and_expect_bits(p, StDtype::BF16, cases, {std::nanf("")});
  ASSERT_EQ(back.size(), std::size(cases) + 1);
  EXPECT_EQ(back[2], 1 + 0x1p-6f);
  EXPECT_EQ(back[3], 1 + 0x1p-7f);
  EXPECT_TRUE(std::isnan(back.back()));
}

TEST(Safetensors, WriterRefusesBadInput) {
  TempDir tmp;
  const fs::path p = tmp.path / "w.safetensors";
  auto expect_error = [&](std::vector<StTensorOut> ts, const std::string& needle) {
    try {
      write_safetensors(p, ts, {});
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(p));
  };
  expect_error({{"a", StDtype::F32, {2, 3}, {1, 2, 3}}}, "6 elements but 3 values");
  expect_error({{"a", StDtype::I32, {1}, {1}}}, "cannot write dtype I32");
  expect_error({{"a", StDtype::F32, {1}, {1}}, {"a", StDtype::F32, {1}, {1}}}, "repeated");
  expect_error({{"__metadata__", StDtype::F32, {1}, {1}}}, "reserved");
  expect_error({{"bad\xff", StDtype::F32, {1}, {1}}}, "not valid UTF-8");

  // Never over an input.
  write_safetensors(p, {{"a", StDtype::F32, {1}, {1}}}, {});
  const auto size = fs::file_size(p);
  const fs::path inputs[] = {p};
  EXPECT_THROW(write_safetensors(p, {{"a", StDtype::F32, {2}, {1, 2}}}, {}, inputs), Error);
  EXPECT_EQ(fs::file_size(p), size);
}

TEST(Safetensors, WriterKeepsGivenBytesOfAnyDtype) {
  TempDir tmp;
  const fs::path p = tmp.path / "raw.safetensors";
  // an I64 tensor and a BF16 NaN with a payload no fp32 round trip would keep
  const uint8_t i64[16] = {1, 0, 0, 0, 0, 0, 0, 0x80, 2, 3, 4, 5, 6, 7, 8, 9};
  const uint8_t nan[2] = {0x81, 0x7f};
  write_safetensors(p,
                    {{"i", StDtype::I64, {2}, {}, std::span<const uint8_t>(i64)},
                     {"n", StDtype::BF16, {1}, {}, std::span<const uint8_t>(nan)},
                     {"f", StDtype::F32, {1}, {2.5f}, std::nullopt}},
                    {});
  auto f = SafetensorsFile::open(p);
  ASSERT_EQ(f.tensors().size(), 3u);
  EXPECT_EQ(f.find("i")->dtype, StDtype::I64);
  auto a = f.data(*f.find("i")), b = f.data(*f.find("n"));
  EXPECT_TRUE(std::equal(a.begin(), a.end(), std::begin(i64), std::end(i64)));
  EXPECT_TRUE(std::equal(b.begin(), b.end(), std::begin(nan), std::end(nan)));
  EXPECT_EQ(st_to_fp32(StDtype::F32, f.data(*f.find("f")))[0], 2.5f);

  const fs::path q = tmp.path / "short.safetensors";
  try {
    write_safetensors(q, {{"i", StDtype::I64, {3}, {}, std::span<const uint8_t>(i64)}}, {});
    ADD_FAILURE() << "no error for 16 bytes given to a [3] I64 tensor";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("3 elements but 16 bytes"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(q));
}

TEST(Safetensors, StToFp32RefusesOtherDtypes) {
  const uint8_t b[4] = {};
  EXPECT_THROW(st_to_fp32(StDtype::I32, b), Error);
  EXPECT_THROW(st_to_fp32(StDtype::F16, std::span<const uint8_t>(b, 3)), Error);
  EXPECT_EQ(st_dtype_name(StDtype::BF16), "BF16");
  EXPECT_EQ(st_dtype_size(StDtype::F64), 8u);
}

std::vector<StTensorOut> five_layers() {
  std::vector<StTensorOut> ts;
  for (int k = 0; k < 5; ++k) {
    std::vector<float> v = values_for(12, 0);
    for (float& x : v) x += static_cast<float>(k);
    ts.push_back({"layer." + std::to_string(k) + ".weight", StDtype::F32, {3, 4}, v});
  }
  ts[4].dtype = StDtype::BF16;  // mixed dtypes across shards
  return ts;
}

void write_text(const fs::path& p, const std::string& s) {
  std::ofstream(p, std::ios::binary) << s;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(HfDir, OneShardRoundTripAndCopiesSideFiles) {
  TempDir tmp;
  const fs::path src = tmp.path / "src", out = tmp.path / "out";
  fs::create_directories(src);
  write_text(src / "tokenizer.json", "{\"model\": {}}");
  write_text(src / "generation_config.json", "{\"eos\": 2}");
  write_text(src / "pytorch_model.bin", "weights");
  write_text(src / "model.safetensors", "old weights");
  write_text(src / "config.json", "{\"old\": true}");
  const nlohmann::json config = {{"architectures", {"LlamaForCausalLM"}}, {"hidden_size", 4}};
  auto ts = five_layers();
  write_hf_dir(out, config, ts, {{"flashnorm.folded", "1"}}, 1, src);

  EXPECT_TRUE(fs::exists(out / "model.safetensors"));
  EXPECT_FALSE(fs::exists(out / "model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(out / "pytorch_model.bin"));
  EXPECT_EQ(read_text(out / "tokenizer.json"), "{\"model\": {}}");
  EXPECT_EQ(read_text(out / "generation_config.json"), "{\"eos\": 2}");
  EXPECT_EQ(read_text(src / "model.safetensors"), "old weights");  // input untouched

  HfModelDir d = HfModelDir::open(out);
  EXPECT_EQ(d.config(), config);
  EXPECT_EQ(d.shards().size(), 1u);
  EXPECT_EQ(d.metadata().at("flashnorm.folded"), "1");
  std::vector<std::string> names = d.tensor_names();
  ASSERT_EQ(names.size(), 5u);
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  for (int k = 0; k < 4; ++k) {
    expect_same_bits(d.load_fp32(ts[k].name), ts[k].values);
  }
  EXPECT_THROW(d.load_fp32("nope"), Error);
  EXPECT_EQ(d.find("nope"), nullptr);
  // Writing into the source directory is refused.
  EXPECT_THROW(write_hf_dir(src, config, ts, {}, 1, src), Error);
}

TEST(HfDir, TwoShardsFollowTheIndex) {
  TempDir tmp;
  const fs::path out = tmp.path / "out";
  const nlohmann::json config = {{"model_type", "llama"}};
  auto ts = five_layers();
  write_hf_dir(out, config, ts, {{"k", "v"}}, 2, {});
  EXPECT_FALSE(fs::exists(out / "model.safetensors"));
  // Read the index independently of HfModelDir.
  const auto index = nlohmann::json::parse(read_text(out / "model.safetensors.index.json"));
  const auto& wm = index.at("weight_map");
  ASSERT_EQ(wm.size(), 5u);
  std::set<std::string> shard_files;
  for (const auto& [name, shard] : wm.items()) shard_files.insert(shard.get<std::string>());
  EXPECT_EQ(shard_files, (std::set<std::string>{"model-00001-of-00002.safetensors",
                                                "model-00002-of-00002.safetensors"}));
  HfModelDir d = HfModelDir::open(out);
  EXPECT_EQ(d.shards().size(), 2u);
  for (const auto& t : ts) {
    const SafetensorsFile* file = nullptr;
    const StTensorInfo* info = d.find(t.name, &file);
    ASSERT_NE(info, nullptr) << t.name;
    EXPECT_EQ(fs::path(file->name()).filename(), wm.at(t.name).get<std::string>());
    EXPECT_EQ(info->dtype, t.dtype);
  }
  expect_same_bits(d.load_fp32("layer.0.weight"), ts[0].values);
  expect_same_bits(d.load_fp32("layer.3.weight"), ts[3].values);
  EXPECT_EQ(d.metadata().at("k"), "v");

  // Writing again into the existing directory is refused and leaves it as it was (no mix of old
  // and new shards); a new directory takes the one-file layout.
  EXPECT_THROW(write_hf_dir(out, config, ts, {}, 1, {}), Error);
  EXPECT_TRUE(fs::exists(out / "model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(out / "model.safetensors"));
  EXPECT_EQ(HfModelDir::open(out).shards().size(), 2u);
  write_hf_dir(tmp.path / "one", config, ts, {}, 1, {});
  EXPECT_FALSE(fs::exists(tmp.path / "one" / "model.safetensors.index.json"));
  EXPECT_EQ(HfModelDir::open(tmp.path / "one").tensor_names().size(), 5u);
  EXPECT_THROW(write_hf_dir(tmp.path / "six", config, ts, {}, 6, {}), Error);
  EXPECT_THROW(write_hf_dir(tmp.path / "zero", config, ts, {}, 0, {}), Error);
  EXPECT_FALSE(fs::exists(tmp.path / "six"));
}

// Cross-check with the reference implementation. The Python side is
//   python3 tests/io/safetensors_reference.py check OURS_F OURS_BF16 HF_DIR
//   python3 tests/io/safetensors_reference.py write THEIRS
// (pip: safetensors, numpy, ml-dtypes). A missing package makes this test fail.
TEST(SafetensorsReference, CrossCheck) {
  TempDir tmp;
  const std::string script =
      std::string(FLASHNORM_SOURCE_DIR) + "/tests/io/safetensors_reference.py";
  const fs::path ours_f = tmp.path / "ours_f.safetensors";
  const fs::path ours_bf16 = tmp.path / "ours_bf16.safetensors";
  const fs::path hf = tmp.path / "hf";
  const fs::path theirs = tmp.path / "theirs.safetensors";

  std::vector<float> x = values_for(256, 0), small = values_for(256, -20),
                     big = values_for(256, 12), huge = values_for(256, 123), sp = specials();
  write_safetensors(ours_f,
                    {{"x_f32", StDtype::F32, {32, 8}, x},
                     {"x_f16", StDtype::F16, {32, 8}, x},
                     {"small_f16", StDtype::F16, {256}, small},
                     {"big_f16", StDtype::F16, {256}, big},
                     {"specials_f16", StDtype::F16, {sp.size()}, sp},
                     {"specials_f32", StDtype::F32, {sp.size()}, sp},
                     {"scalar", StDtype::F32, {}, {2.5f}},
                     {"empty", StDtype::F32, {0, 3}, {}}},
                    {{"format", "pt"},
                     {"note",
                      "gr\xc3\xbc\xc3\x9f"
                      "e \xe2\x9c\x93"}});
  write_safetensors(ours_bf16,
                    {{"x_bf16", StDtype::BF16, {32, 8}, x},
                     {"huge_bf16", StDtype::BF16, {256}, huge},
                     {"specials_bf16", StDtype::BF16, {sp.size()}, sp}},
                    {});
  auto layers = five_layers();
  for (auto& t : layers) t.dtype = StDtype::F32;
  write_hf_dir(hf, {{"model_type", "llama"}}, layers, {}, 2, {});

  const std::string check = "python3 " + script + " check " + ours_f.string() + " " +
                            ours_bf16.string() + " " + hf.string();
  ASSERT_EQ(std::system(check.c_str()), 0) << check;
  const std::string write = "python3 " + script + " write " + theirs.string();
  ASSERT_EQ(std::system(write.c_str()), 0) << write;

  SafetensorsFile f = SafetensorsFile::open(theirs);
  EXPECT_EQ(f.metadata().at("origin"), "numpy");
  EXPECT_EQ(f.tensors().size(), 7u);
  const StTensorInfo* t = f.find("f32");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->shape, (std::vector<uint64_t>{4, 16}));
  expect_same_bits(st_to_fp32(t->dtype, f.data(*t)), values_for(64, 0));
  // Ramps written by numpy: element i of n is i / step - 1.
  auto expect_ramp = [&](const char* name, StDtype dtype, size_t n, float step) {
    const StTensorInfo* r = f.find(name);
    ASSERT_NE(r, nullptr) << name;
    EXPECT_EQ(r->dtype, dtype) << name;
    std::vector<float> v = st_to_fp32(r->dtype, f.data(*r));
    ASSERT_EQ(v.size(), n) << name;
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(v[i], static_cast<float>(i) / step - 1) << name << i;
  };
  expect_ramp("f16", StDtype::F16, 128, 64.0f);
  expect_ramp("bf16", StDtype::BF16, 16, 8.0f);
  t = f.find("i32");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype, StDtype::I32);
  std::vector<int32_t> iv(10);
  ASSERT_EQ(f.data(*t).size(), 40u);
  std::memcpy(iv.data(), f.data(*t).data(), 40);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(iv[i], i - 5);
  t = f.find("u8");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype, StDtype::U8);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(f.data(*t)[i], i);
  t = f.find("scalar");
  ASSERT_NE(t, nullptr);
  EXPECT_TRUE(t->shape.empty());
  EXPECT_EQ(st_to_fp32(t->dtype, f.data(*t)), std::vector<float>{3.5f});
  t = f.find("empty");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->shape, (std::vector<uint64_t>{0, 4}));
}

}  // namespace
