// The k-quant quantizers (Q4_K, Q5_K, Q6_K; io::quantize) and Q5_1:
//  * round trips: dequantize(quantize(x)) within a bound derived from round-to-nearest: on every
//    data set the relative RMS error is no larger than that of a round-to-nearest quantizer with
//    the same codes and sub-blocks, computed here in fp64 with exact (unquantized) min/max or
//    absmax scales, which is what the format would give with no scale search and free scales;
//  * the block layout as the `gguf` Python package reads it (tests/io/gguf_readback_reference.py,
//    gguf.quants.dequantize): bit-identical to io::dequantize of the same bytes;
//  * zeros, constants and non-finite inputs (no crash; finite inputs give finite outputs).
// The comparison with llama.cpp's quantizer on real tensors is scripts/quant_compare.sh (a
// benchmark record; it needs the llama.cpp build in the cache).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>

#include "flashnorm/error.h"
#include "flashnorm/io/dequant.h"
#include "test_gguf_util.h"

namespace flashnorm::io {
namespace {

struct KType {
  GgmlType type;
  int sub;      // values per sub-block
  int lo, hi;   // code range
  bool affine;  // x = s q + b (b <= 0) rather than x = s q
};
constexpr KType kTypes[] = {{GgmlType::Q4_K, 32, 0, 15, true},
                            {GgmlType::Q5_K, 32, 0, 31, true},
                            {GgmlType::Q6_K, 16, -32, 31, false}};

std::vector<float> round_trip(GgmlType t, const std::vector<float>& x) {
  const std::vector<uint8_t> q = quantize(t, x);
  EXPECT_EQ(q.size(), x.size() / ggml_type_traits(uint32_t(t))->block_elems *
                          ggml_type_traits(uint32_t(t))->block_bytes);
  std::vector<float> back(x.size());
  dequantize(t, q, back);
  return back;
}

double rel_rms(const std::vector<float>& x, const std::vector<float>& y) {
  double e = 0, r = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    e += (double(y[i]) - x[i]) * (double(y[i]) - x[i]);
    r += double(x[i]) * x[i];
  }
  return r > 0 ? std::sqrt(e / r) : std::sqrt(e);
}

// Round to nearest per sub-block with exact fp64 scales: affine s = (max - min0) / hi with
// min0 = min(min, 0) (the formats store b <= 0); symmetric s = absmax / 31 (codes -31..31).
double rtn_rel_rms(const KType& k, const std::vector<float>& x) {
  double e = 0, r = 0;
  for (size_t s = 0; s < x.size(); s += k.sub) {
    double lo = 0, hi = -INFINITY, amax = 0;
    for (int i = 0; i < k.sub; ++i) {
      lo = std::min(lo, double(x[s + i]));
      hi = std::max(hi, double(x[s + i]));
      amax = std::max(amax, std::fabs(double(x[s + i])));
    }
    const double d = k.affine ? (hi - lo) / k.hi : amax / 31.0;
    for (int i = 0; i < k.sub; ++i) {
      const double v = x[s + i];
      double y = k.affine ? lo : 0.0;
      if (d > 0) {
        const double q = k.affine ? std::clamp(std::round((v - lo) / d), 0.0, double(k.hi))
                                  : std::clamp(std::round(v / d), -31.0, 31.0);
        y = k.affine ? lo + d * q : d * q;
      }
      e += (y - v) * (y - v);
      r += v * v;
    }
  }
  return std::sqrt(e / r);
}

// Data sets: normal, heavy-tailed (Student t, 3 dof), one large channel per row (folded gains),
// all-positive, uniform; 64 super-blocks each.
std::vector<std::pair<std::string, std::vector<float>>> data_sets() {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  std::student_t_distribution<float> td(3.0f);
  std::uniform_real_distribution<float> ud(-1.0f, 1.0f);
  const size_t n = 256 * 64;
  std::vector<std::pair<std::string, std::vector<float>>> out;
  auto make = [&](const std::string& name, auto gen) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = gen(i);
    out.emplace_back(name, std::move(v));
  };
  make("normal", [&](size_t) { return 0.02f * nd(rng); });
  make("student_t3", [&](size_t) { return 0.01f * td(rng); });
  make("large_channel", [&](size_t i) { return 0.02f * nd(rng) * (i % 576 == 5 ? 40.0f : 1.0f); });
  make("positive", [&](size_t) { return std::fabs(nd(rng)) + 0.5f; });
  make("uniform", [&](size_t) { return ud(rng); });
  return out;
}

TEST(QuantizeK, RoundTripNoWorseThanRoundToNearestWithExactScales) {
  for (const KType& k : kTypes) {
    for (const auto& [name, x] : data_sets()) {
      const double ours = rel_rms(x, round_trip(k.type, x));
      const double rtn = rtn_rel_rms(k, x);
      SCOPED_TRACE(fmt::format("{} on {}: ours {:.5f}, round-to-nearest {:.5f}",
                               ggml_type_name(uint32_t(k.type)), name, ours, rtn));
      EXPECT_LE(ours, rtn);
      EXPECT_GT(ours, 0.0);  // a lossy type on random data
      std::printf("%s %-14s ours %.5f  round-to-nearest %.5f\n",
                  std::string(ggml_type_name(uint32_t(k.type))).c_str(), name.c_str(), ours, rtn);
    }
  }
}

TEST(QuantizeK, ZerosConstantsAndNonFinite) {
  for (const KType& k : kTypes) {
    SCOPED_TRACE(ggml_type_name(uint32_t(k.type)));
    const std::vector<float> zeros(512, 0.0f);
    EXPECT_EQ(round_trip(k.type, zeros), zeros);
    // A negative constant is one min (affine) or one code times a scale: within fp16 rounding.
    for (float c : {-3.0f, 0.25f, -1e-3f}) {
      const std::vector<float> x(256, c);
      for (float y : round_trip(k.type, x)) EXPECT_NEAR(y, c, std::fabs(c) * 2e-3) << c;
    }
    std::vector<float> bad(512, 1.0f);
    bad[3] = NAN;
    bad[300] = INFINITY;
    EXPECT_NO_THROW(round_trip(k.type, bad));  // the fold checks values before and after
    EXPECT_THROW(quantize(k.type, std::vector<float>(100)), Error);  // not whole super-blocks
  }
}

TEST(QuantizeK, BlocksReadBackByGgufPy) {
  const auto dir = test::scratch_dir();
  const auto sets = data_sets();
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q5_1}) {
    const std::string name(ggml_type_name(uint32_t(t)));
    SCOPED_TRACE(name);
    std::vector<float> x;
    for (const auto& [n, v] : sets) x.insert(x.end(), v.begin(), v.end());
    const std::vector<uint8_t> q = quantize(t, x);
    const auto in = dir / (name + "_blocks.bin"), out = dir / (name + "_gguf_py.f32");
    std::ofstream(in, std::ios::binary)
        .write(reinterpret_cast<const char*>(q.data()), std::streamsize(q.size()));
    bool ok = false;
    const std::string cmd = test::run_reference_script("gguf_readback_reference.py",
                                                       {name, in.string(), out.string()}, &ok);
    if (!ok) continue;
    const auto b = test::read_all(out);
    ASSERT_EQ(b.size(), x.size() * 4) << cmd;
    std::vector<float> theirs(x.size()), ours(x.size());
    std::memcpy(theirs.data(), b.data(), b.size());
    dequantize(t, q, ours);
    size_t bad = 0;
    for (size_t i = 0; i < x.size(); ++i) bad += std::memcmp(&theirs[i], &ours[i], 4) != 0;
    EXPECT_EQ(bad, 0u) << cmd;
    EXPECT_LT(rel_rms(x, theirs), t == GgmlType::Q4_K ? 0.2 : 0.1) << cmd;
  }
}

}  // namespace
}  // namespace flashnorm::io
