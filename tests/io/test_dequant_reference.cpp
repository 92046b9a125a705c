// Dequantization and quantization against the `gguf` Python package (gguf.quants), on real
// tensors of SmolLM2-135M (Q8_0, Q4_1, F32) and Gemma 3 270M (Q4_K, Q6_K, Q5_0, Q8_0, F32), on
// real weights re-quantized by gguf.quants (F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1), on synthetic
// edge blocks, on random blocks of every type gguf.quants dequantizes (adds Q5_1, Q5_K), and on
// every binary16 code. Not covered: Q8_K (gguf.quants has no Q8_K dequantizer).
// Reference: tests/io/gguf_dequant_reference.py, run by this test as
//   python3 tests/io/gguf_dequant_reference.py <model.gguf> <out.bin>
// Comparison: bit-exact (NaN matches NaN); quantized bytes must be identical.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "flashnorm/io/dequant.h"
#include "flashnorm/io/gguf.h"
#include "test_gguf_util.h"

namespace flashnorm::io {
namespace {

struct Record {
  std::string name;
  uint32_t type = 0;
  std::vector<uint8_t> raw;
  std::vector<float> deq;
  std::vector<float> source;  // empty when the record has none
};

std::vector<Record> load_records(const std::filesystem::path& p) {
  const auto b = test::read_all(p);
  size_t pos = 0;
  auto take = [&](void* dst, size_t n) {
    if (pos + n > b.size()) throw std::runtime_error("reference file truncated");
    std::memcpy(dst, b.data() + pos, n);
    pos += n;
  };
  char magic[8];
  take(magic, 8);
  if (std::memcmp(magic, "FNDQREF1", 8) != 0) throw std::runtime_error("bad reference magic");
  uint32_t count;
  take(&count, 4);
  std::vector<Record> out(count);
  for (auto& r : out) {
    uint32_t len;
    take(&len, 4);
    r.name.resize(len);
    take(r.name.data(), len);
    uint64_t n, raw_len;
    take(&r.type, 4);
    take(&n, 8);
    take(&raw_len, 8);
    r.raw.resize(raw_len);
    take(r.raw.data(), raw_len);
    r.deq.resize(n);
    take(r.deq.data(), n * 4);
    uint8_t has_src;
    take(&has_src, 1);
    if (has_src) {
      r.source.resize(n);
      take(r.source.data(), n * 4);
    }
  }
  EXPECT_EQ(pos, b.size());
  return out;
}

bool same_float(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  uint32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y;
}

// Runs the reference script on `model` and checks every record; returns the set of type names
// seen in "real:" records.
std::set<std::string> check_model(const std::filesystem::path& model, const std::string& tag) {
  std::set<std::string> real_types;
  if (!std::filesystem::exists(model)) {
    ADD_FAILURE() << "model missing: " << model << " (run the model fetch script)";
    return real_types;
  }
  const auto out = test::scratch_dir() / (tag + "_dequant_ref.bin");
  bool ok = false;
  const std::string cmd =
      test::run_reference_script("gguf_dequant_reference.py", {model.string(), out.string()}, &ok);
  if (!ok) return real_types;
  const auto records = load_records(out);
  EXPECT_GT(records.size(), 10u);
  size_t quant_checked = 0;
  for (const auto& r : records) {
    SCOPED_TRACE(
        fmt::format("{} record {} ({}); reference: {}", tag, r.name, ggml_type_name(r.type), cmd));
    const auto type = static_cast<GgmlType>(r.type);
    if (r.name.rfind("real:", 0) == 0) real_types.insert(ggml_type_name(r.type));
    if (!dequant_supported(type)) {
      ADD_FAILURE() << "dequantization not supported";
      continue;
    }
    std::vector<float> ours(r.deq.size());
    dequantize(type, r.raw, ours);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < ours.size(); ++i) {
      if (!same_float(ours[i], r.deq[i]) && bad++ == 0) first = i;
    }
    EXPECT_EQ(bad, 0u) << "first mismatch at element " << first << ": ours " << ours[first]
                       << " vs gguf " << r.deq[first];
    if (!r.source.empty() && quant_supported(type)) {
      ++quant_checked;
      const auto q = quantize(type, r.source);
      EXPECT_EQ(q.size(), r.raw.size());
      if (q.size() != r.raw.size()) continue;
      size_t qbad = 0, qfirst = 0;
      for (size_t i = 0; i < q.size(); ++i) {
        if (q[i] != r.raw[i] && qbad++ == 0) qfirst = i;
      }
      EXPECT_EQ(qbad, 0u) << "quantized bytes differ, first at byte " << qfirst << ": ours "
                          << int(q[qfirst]) << " vs gguf " << int(r.raw[qfirst]);
    }
  }
  std::set<std::string> names;
  for (const auto& r : records) names.insert(r.name);
  for (const char* t : {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K"}) {
    EXPECT_TRUE(names.count(std::string("random:") + t)) << "no random record for " << t;
  }
  // F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 on two sources, plus f16:edge and bf16:edge.
  EXPECT_GE(quant_checked, 2u * 8u + 2u);
  return real_types;
}

TEST(DequantReference, SmolLM2RealTensorsAndRequantized) {
  const auto types = check_model(test::smollm2_gguf(), "smollm2");
  EXPECT_EQ(types, (std::set<std::string>{"F32", "Q4_1", "Q8_0"}));
}

TEST(DequantReference, Gemma3RealKQuants) {
  const auto types = check_model(test::gemma3_gguf(), "gemma3");
  EXPECT_EQ(types, (std::set<std::string>{"F32", "Q4_K", "Q5_0", "Q6_K", "Q8_0"}));
}

// Every tensor of SmolLM2 (about 135M weights, Q8_0 + Q4_1 + F32) dequantizes; the time is
// recorded (gtest property dequant_seconds, and printed), not asserted: unit tests do not assert
// timings (a pathological slowdown meets the test's ctest TIMEOUT).
TEST(DequantWhole, SmolLM2) {
  const auto path = test::smollm2_gguf();
  ASSERT_TRUE(std::filesystem::exists(path)) << "model missing: " << path;
  const auto f = GgufFile::open(path);
  std::vector<float> buf;
  uint64_t total = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (const auto& t : f.tensors()) {
    buf.resize(t.n_elements);
    dequantize(t.type, f.tensor_data(t), buf);
    total += t.n_elements;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  RecordProperty("dequant_seconds", std::to_string(s));
  std::printf("dequantized %llu elements in %.3f s\n", static_cast<unsigned long long>(total), s);
  EXPECT_GT(total, 130'000'000u);
}

}  // namespace
}  // namespace flashnorm::io
