// quant_matmul (kernels/cpu/quant_matmul.h) against fp64 references built from io::dequantize
// (itself bit-identical to the gguf package's dequantizers, tests/io/test_dequant*), on random
// but valid blocks of every supported type and odd shapes, for the portable, AVX2 and AVX-512
// paths (each skipped, with the missing features named, where the CPU or build lacks it):
//  (a) exact check: the reference uses x quantized per block by the header's rule, re-derived
//      here; the kernel's block sums are exact integers, so only fp32 rounding of the scales and
//      the running sum remains: |y - ref| <= gamma(K + 8) * sum |w| |xq|, gamma(n) = n u / (1 - n
//      u), u = 2^-24 (Higham's bound for a recursive sum of K + a few rounded terms).
//  (b) accuracy against the unquantized x: each element of x is off by at most d_b / 2 (d_b the
//      block's scale), so |y - ref| <= sum_b (d_b / 2) sum_{k in b} |w_k| + the bound of (a);
//      1% is added to d_b / 2 for the rounding of x * (1 / d).
// From kQuantGemmRows rows of x on, W is dequantized in tiles and x stays fp32: check (a) then
// uses the unquantized x (M = 33 covers it).
// Row counts 1, 7, 13, 37 (tasks of 16 rows: 16 + 16 + 5) put whole row groups of the multi-row
// kernels (4 rows on AVX2, 8 on AVX-512) and remainders in one call; K spans 1, 2, 3 (and 17)
// blocks or super-blocks.
// Negative control: one flipped weight byte must break check (a) for its row.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "flashnorm/error.h"
#include "flashnorm/half.h"
#include "flashnorm/io/dequant.h"
#include "flashnorm/kernels/cpu/quant_matmul.h"

namespace fc = flashnorm::kernels::cpu;
namespace io = flashnorm::io;
using io::GgmlType;

namespace {

// The f16 scale fields of a block (byte offsets) and the byte a negative control flips.
struct Layout {
  std::vector<int> f16_scales;
  int code_byte;
  uint8_t flip;
};

Layout layout(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0:
      return {{0}, 2, 0x88};
    case GgmlType::Q4_1:
      return {{0, 2}, 4, 0x88};
    case GgmlType::Q5_0:
      return {{0}, 6, 0x88};
    case GgmlType::Q5_1:
      return {{0, 2}, 8, 0x88};
    case GgmlType::Q8_0:
      return {{0}, 2, 0x80};
    case GgmlType::Q4_K:
      return {{0, 2}, 16, 0x88};
    case GgmlType::Q5_K:
      return {{0, 2}, 48, 0x88};
    case GgmlType::Q6_K:
      return {{208}, 0, 0x88};
    case GgmlType::F32:
      return {{}, 3, 0x80};  // sign bit of element 0
    default:
      return {{}, 1, 0x80};  // F16 / BF16: sign bit of element 0
  }
}

// Random rows of `type`: random code bytes (every pattern is a valid code), scales set to finite
// f16 values of a plausible size, plain types filled with random values.
std::vector<uint8_t> random_weights(GgmlType t, int N, int K, std::mt19937& rng) {
  const auto tr = *io::ggml_type_traits(uint32_t(t));
  std::normal_distribution<float> nd(0.0f, 0.05f);
  std::uniform_real_distribution<float> ud(0.002f, 0.02f);
  const size_t blocks = size_t(N) * K / tr.block_elems;
  std::vector<uint8_t> w(blocks * tr.block_bytes);
  if (t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16) {
    std::vector<float> v(size_t(N) * K);
    for (float& x : v) x = nd(rng);
    return io::quantize(t, v);
  }
  for (auto& b : w) b = static_cast<uint8_t>(rng());
  for (size_t b = 0; b < blocks; ++b) {
    for (int off : layout(t).f16_scales) {
      const uint16_t h = flashnorm::half::f32_to_f16(ud(rng));
      std::memcpy(&w[b * tr.block_bytes + off], &h, 2);
    }
  }
  return w;
}

// The header's activation rule, re-derived: d = amax / 32767, q = nearbyint(x * (1 / d)) (0 when d
// is below FLT_MIN; the random x here never needs the clamp); returns
// xq = d q and the per-element scale d.
void quantize_reference(const std::vector<float>& x, int M, int K, int block,
                        std::vector<double>& xq, std::vector<double>& dscale) {
  xq.assign(x.size(), 0);
  dscale.assign(x.size(), 0);
  for (int m = 0; m < M; ++m) {
    for (int b = 0; b < K; b += block) {
      const float* xb = &x[size_t(m) * K + b];
      float amax = 0;
      for (int i = 0; i < block; ++i) amax = std::max(amax, std::fabs(xb[i]));
      const float d = amax / 32767.0f;
      const float id = d >= std::numeric_limits<float>::min() ? 1.0f / d : 0.0f;
      for (int i = 0; i < block; ++i) {
        xq[size_t(m) * K + b + i] = double(d) * std::nearbyint(xb[i] * id);
        dscale[size_t(m) * K + b + i] = d;
      }
    }
  }
}

int act_block(GgmlType t) {
  if (t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16) return 0;
  return 32;
}

double gamma(int n) {
  const double u = std::ldexp(1.0, -24);
  return n * u / (1 - n * u);
}

struct Case {
  GgmlType type;
  fc::QuantIsa isa;
};

// Every instruction set, and what each needs of the CPU (the skip messages).
constexpr fc::QuantIsa kIsas[] = {fc::QuantIsa::kScalar, fc::QuantIsa::kAvx2,
                                  fc::QuantIsa::kAvx512};

std::string isa_needs(fc::QuantIsa isa) {
  switch (isa) {
    case fc::QuantIsa::kAvx2:
      return "AVX2 + FMA + F16C";
    case fc::QuantIsa::kAvx512:
      return "AVX-512 F + BW + VL + DQ and AVX2 + FMA + F16C";
    default:
      return "nothing";
  }
}

std::string case_name(const testing::TestParamInfo<Case>& p) {
  return io::ggml_type_name(uint32_t(p.param.type)) + "_" + fc::quant_isa_name(p.param.isa);
}

class QuantMatmul : public testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (!fc::quant_isa_available(GetParam().isa)) {
      GTEST_SKIP() << "this CPU (or build) lacks " << fc::quant_isa_name(GetParam().isa) << " ("
                   << isa_needs(GetParam().isa) << ")";
    }
  }

  // Runs one shape; returns the number of rows that break check (a) (0 expected) after checking
  // (b) too. `corrupt` flips the negative control's byte in row 0 after the reference is built.
  int run_shape(int M, int N, int K, bool corrupt, bool with_gain) {
    const GgmlType t = GetParam().type;
    std::mt19937 rng(1234 + M * 7 + K);
    std::vector<uint8_t> w = random_weights(t, N, K, rng);
    std::vector<float> wf(size_t(N) * K);
    io::dequantize(t, w, wf);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(size_t(M) * K), gain(K), rs(M);
    for (float& v : x) v = nd(rng);
    for (float& v : gain) v = 0.5f + std::fabs(nd(rng));
    for (float& v : rs) v = 0.25f + std::fabs(nd(rng));
    // x' = x * row_scale * gain in fp32, as PreparedActs forms it
    std::vector<float> xs(x);
    if (with_gain) {
      for (int m = 0; m < M; ++m)
        for (int k = 0; k < K; ++k) xs[size_t(m) * K + k] = x[size_t(m) * K + k] * rs[m] * gain[k];
    }
    // from kQuantGemmRows rows on, x is not quantized (dequantized tiles and sgemm)
    const int blk = M >= fc::kQuantGemmRows ? 0 : act_block(t);
    std::vector<double> xq, dsc;
    if (blk) {
      quantize_reference(xs, M, K, blk, xq, dsc);
    } else {
      xq.assign(xs.begin(), xs.end());
      dsc.assign(xs.size(), 0);
    }
    if (corrupt) w[layout(t).code_byte] ^= layout(t).flip;
    fc::QuantMatrix qm{t, w.data(), N, K};
    fc::PreparedActs a;
    a.prepare(x.data(), M, K, with_gain ? gain.data() : nullptr, with_gain ? rs.data() : nullptr);
    const int ldy = N + 3;  // a row stride wider than N
    std::vector<float> y(size_t(M) * ldy, -1.0f);
    fc::ThreadPool pool(2);
    fc::quant_matmul(qm, a, y.data(), ldy, GetParam().isa, &pool);
    int bad = 0;
    for (int m = 0; m < M; ++m) {
      for (int n = 0; n < N; ++n) {
        double ref_a = 0, abs_a = 0, ref_b = 0, act_err = 0;
        for (int k = 0; k < K; ++k) {
          const double wv = wf[size_t(n) * K + k];
          const size_t i = size_t(m) * K + k;
          ref_a += wv * xq[i];
          abs_a += std::fabs(wv * xq[i]);
          ref_b += wv * double(xs[i]);
          act_err += 0.51 * dsc[i] * std::fabs(wv);
        }
        const double got = y[size_t(m) * ldy + n];
        const double tol_a = gamma(K + 8) * abs_a + 1e-30;
        if (std::fabs(got - ref_a) > tol_a) {
          ++bad;
          if (!corrupt) {
            ADD_FAILURE() << "(a) m " << m << " n " << n << ": " << got << " vs " << ref_a
                          << " (tolerance " << tol_a << ")";
          }
        }
        if (!corrupt) {
          EXPECT_LE(std::fabs(got - ref_b), act_err + 2 * tol_a)
              << "(b) m " << m << " n " << n << ": " << got << " vs " << ref_b;
        }
      }
      // the padding between rows is never written
      for (int n = N; n < ldy; ++n) EXPECT_EQ(y[size_t(m) * ldy + n], -1.0f);
    }
    return bad;
  }

  bool k_quant() const {
    const GgmlType t = GetParam().type;
    return t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K;
  }
  int k_one() const { return k_quant() ? 256 : 32; }  // one block / super-block
  int k_two() const { return k_quant() ? 512 : 64; }
  int k_small() const { return k_quant() ? 256 : 96; }
  int k_large() const { return k_quant() ? 768 : 544; }
};

TEST_P(QuantMatmul, MatchesFp64ReferenceOnOddShapes) {
  for (int M : {1, 3, 33}) {
    EXPECT_EQ(run_shape(M, 37, k_small(), false, false), 0) << "M " << M;
    EXPECT_EQ(run_shape(M, 37, k_large(), false, M == 3), 0) << "M " << M;
  }
  EXPECT_EQ(run_shape(2, 1, k_small(), false, true), 0);  // one output row
  // fewer rows than a group; one group of 8 (three of 4) and a remainder in one task
  EXPECT_EQ(run_shape(1, 7, k_one(), false, false), 0);
  EXPECT_EQ(run_shape(2, 13, k_two(), false, true), 0);
  EXPECT_EQ(run_shape(1, 13, k_one(), false, false), 0);
  EXPECT_EQ(run_shape(3, 29, k_large(), false, false), 0);  // tasks of 16 and 13 rows
}

TEST_P(QuantMatmul, FlippedWeightByteIsCaught) {
  EXPECT_GE(run_shape(3, 37, k_small(), true, false), 1);
  EXPECT_GE(run_shape(fc::kQuantGemmRows, 37, k_small(), true, false), 1);
}

std::vector<Case> all_cases() {
  std::vector<Case> v;
  for (fc::QuantIsa isa : kIsas) {
    for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1,
                       GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q4_K,
                       GgmlType::Q5_K, GgmlType::Q6_K}) {
      v.push_back({t, isa});
    }
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(AllTypes, QuantMatmul, testing::ValuesIn(all_cases()), case_name);

TEST(QuantMatmulArgs, RefusesUnsupportedTypeAndShapes) {
  std::vector<uint8_t> w(1024);
  fc::PreparedActs a;
  std::vector<float> x(64, 1.0f);
  a.prepare(x.data(), 1, 64);
  std::vector<float> y(4);
  fc::QuantMatrix q2k{GgmlType::Q2_K, w.data(), 1, 256};
  EXPECT_FALSE(fc::quant_matmul_supported(GgmlType::Q2_K));
  EXPECT_THROW(fc::quant_matmul(q2k, a, y.data(), 1, fc::QuantIsa::kScalar), flashnorm::Error);
  fc::QuantMatrix cols{GgmlType::Q8_0, w.data(), 1, 96};  // 96 != 64 columns of x
  EXPECT_THROW(fc::quant_matmul(cols, a, y.data(), 1, fc::QuantIsa::kScalar), flashnorm::Error);
  fc::QuantMatrix part{GgmlType::Q8_0, w.data(), 1, 48};  // not whole blocks
  EXPECT_THROW((void)part.row_bytes(), flashnorm::Error);
}

// PreparedActs::q quantizes with AVX2 where the CPU has it: the blocks must be quantize_act_row's
// (the header's rule) bit for bit, ties (x / d exactly k + 0.5: round to even), blocks of zeros,
// subnormal and huge magnitudes included.
TEST(PreparedActsQuantize, Avx2BlocksEqualTheRule) {
  if (!fc::quant_isa_available(fc::QuantIsa::kAvx2)) {
    GTEST_SKIP() << "this CPU or build lacks AVX2 + FMA + F16C";
  }
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int K = 32 * 7;
  std::vector<float> x(size_t(3) * K);
  for (float& v : x) v = nd(rng);
  for (int i = 0; i < 32; ++i) x[i] = i == 0 ? 32767.0f : 0.5f + float(i - 16);  // d = 1: ties
  for (int i = 32; i < 64; ++i) x[i] = 0.0f;
  for (int i = 64; i < 96; ++i) x[i] *= 1e-40f;  // subnormal
  for (int i = 96; i < 128; ++i) x[i] *= 3e37f;
  // amax 1e-36 beside exact zeros: d under FLT_MIN, where 1 / d overflows (0 * inf would be NaN)
  for (int i = 128; i < 160; ++i) x[i] = i == 128 ? 1e-36f : 0.0f;
  // a NaN and an infinity (a row gone bad upstream): defined, and the same on both paths
  x[160] = std::numeric_limits<float>::quiet_NaN();
  x[193] = std::numeric_limits<float>::infinity();
  fc::PreparedActs a;
  a.prepare(x.data(), 3, K);
  std::vector<fc::ActBlock> want(K / 32);
  int ties = 0;
  for (int m = 0; m < 3; ++m) {
    fc::quantize_act_row(&x[size_t(m) * K], K, want.data());
    const fc::ActBlock* got = a.q(m);
    for (int b = 0; b < K / 32; ++b) {
      // bit patterns: a NaN scale (the infinity's block) must match too
      EXPECT_EQ(std::memcmp(&got[b].d, &want[b].d, 4), 0) << "row " << m << " block " << b;
      EXPECT_EQ(std::memcmp(&got[b].s, &want[b].s, 4), 0) << "row " << m << " block " << b;
      for (int i = 0; i < 32; ++i) {
        EXPECT_EQ(got[b].qs[i], want[b].qs[i]) << "row " << m << " block " << b << " elem " << i;
      }
    }
  }
  // the rule itself on the ties: 0.5 + j rounds to the even neighbour
  fc::quantize_act_row(x.data(), 32, want.data());
  for (int i = 1; i < 32; ++i) {
    const int j = i - 16;  // x = j + 0.5
    const int even = (j % 2 == 0) ? j : j + 1;
    ties += want[0].qs[i] == even;
  }
  EXPECT_EQ(ties, 31);
  // the rule on the tiny block: all zeros, no NaN reached the codes
  fc::quantize_act_row(&x[128], 32, want.data());
  for (int i = 0; i < 32; ++i) EXPECT_EQ(want[0].qs[i], 0) << i;
}

// The prefill tiles' AVX2 dequantizers (Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q6_K) must give
// io::dequantize's floats bit for bit (itself bit-identical to gguf-py, tests/io/test_dequant*):
// checked through quant_matmul's tiled path with x = one-hot rows, so y[m, n] = W[n, m] exactly
// (one product by 1, the rest by 0, sgemm adds zeros; equal as floats, a -0 comes back +0), against
// io::dequantize. Q5_K (no AVX2 dequantizer: io::dequantize itself) is the path's control. kAvx512
// takes the same AVX2 dequantizers.
void check_tiles_bit_for_bit(fc::QuantIsa isa) {
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q8_0, GgmlType::Q4_K,
                     GgmlType::Q6_K, GgmlType::Q5_K}) {
    const int K = 256, N = 37;
    std::mt19937 rng(11);
    const std::vector<uint8_t> w = random_weights(t, N, K, rng);
    std::vector<float> ref(size_t(N) * K);
    io::dequantize(t, w, ref);
    fc::PreparedActs a;
    std::vector<float> eye(size_t(K) * K, 0.0f);
    for (int i = 0; i < K; ++i) eye[size_t(i) * K + i] = 1.0f;
    a.prepare(eye.data(), K, K);
    std::vector<float> y(size_t(K) * N);
    fc::ThreadPool pool(2);
    fc::quant_matmul({t, w.data(), N, K}, a, y.data(), N, isa, &pool);
    int bad = 0;
    for (int n = 0; n < N; ++n) {
      for (int k = 0; k < K; ++k) {
        bad += y[size_t(k) * N + n] != ref[size_t(n) * K + k];  // (sgemm turns -0 into +0)
      }
    }
    EXPECT_EQ(bad, 0) << io::ggml_type_name(uint32_t(t)) << " " << fc::quant_isa_name(isa);
  }
}

TEST(QuantMatmulPrefill, TilesDequantizeBitForBit) {
  if (!fc::quant_isa_available(fc::QuantIsa::kAvx2)) {
    GTEST_SKIP() << "this CPU or build lacks avx2 (" << isa_needs(fc::QuantIsa::kAvx2) << ")";
  }
  check_tiles_bit_for_bit(fc::QuantIsa::kAvx2);
}

TEST(QuantMatmulPrefill, Avx512TilesDequantizeBitForBit) {
  if (!fc::quant_isa_available(fc::QuantIsa::kAvx512)) {
    GTEST_SKIP() << "this CPU or build lacks avx512 (" << isa_needs(fc::QuantIsa::kAvx512) << ")";
  }
  check_tiles_bit_for_bit(fc::QuantIsa::kAvx512);
}

// best_quant_isa is the widest available set (kAvx512 only where kAvx2 is available too), and the
// names are distinct.
TEST(QuantIsaTest, BestIsTheWidestAvailable) {
  const bool avx2 = fc::quant_isa_available(fc::QuantIsa::kAvx2);
  const bool avx512 = fc::quant_isa_available(fc::QuantIsa::kAvx512);
  EXPECT_TRUE(fc::quant_isa_available(fc::QuantIsa::kScalar));
  EXPECT_TRUE(avx2 || !avx512);
  const fc::QuantIsa want =
      avx512 ? fc::QuantIsa::kAvx512 : (avx2 ? fc::QuantIsa::kAvx2 : fc::QuantIsa::kScalar);
  EXPECT_EQ(fc::best_quant_isa(), want) << fc::quant_isa_name(fc::best_quant_isa());
  EXPECT_STREQ(fc::quant_isa_name(fc::QuantIsa::kScalar), "scalar");
  EXPECT_STREQ(fc::quant_isa_name(fc::QuantIsa::kAvx2), "avx2");
  EXPECT_STREQ(fc::quant_isa_name(fc::QuantIsa::kAvx512), "avx512");
  std::printf("best_quant_isa: %s (avx2 %s, avx512 %s)\n", fc::quant_isa_name(fc::best_quant_isa()),
              avx2 ? "yes" : "no", avx512 ? "yes" : "no");
}

// FLASHNORM_CPU_ISA picks an available set; unset or empty, AVX2 where available (else scalar);
// an unknown name is refused with one line naming the variable (and, where AVX-512 is absent, so
// is avx512).
TEST(QuantIsaTest, EnvironmentPicksTheSet) {
  struct Restore {
    ~Restore() { unsetenv("FLASHNORM_CPU_ISA"); }
  } restore;
  const fc::QuantIsa by_default =
      fc::quant_isa_available(fc::QuantIsa::kAvx2) ? fc::QuantIsa::kAvx2 : fc::QuantIsa::kScalar;
  unsetenv("FLASHNORM_CPU_ISA");
  EXPECT_EQ(fc::chosen_quant_isa(), by_default);
  setenv("FLASHNORM_CPU_ISA", "", 1);
  EXPECT_EQ(fc::chosen_quant_isa(), by_default);
  if (fc::quant_isa_available(fc::QuantIsa::kAvx512)) {
    setenv("FLASHNORM_CPU_ISA", "avx512", 1);
    EXPECT_EQ(fc::chosen_quant_isa(), fc::QuantIsa::kAvx512);
  }
  setenv("FLASHNORM_CPU_ISA", "scalar", 1);
  EXPECT_EQ(fc::chosen_quant_isa(), fc::QuantIsa::kScalar);
  if (fc::quant_isa_available(fc::QuantIsa::kAvx2)) {
    setenv("FLASHNORM_CPU_ISA", "avx2", 1);
    EXPECT_EQ(fc::chosen_quant_isa(), fc::QuantIsa::kAvx2);
  }
  std::vector<std::string> refused = {"sse4", "AVX2"};
  if (!fc::quant_isa_available(fc::QuantIsa::kAvx512)) refused.push_back("avx512");
  for (const std::string& v : refused) {
    setenv("FLASHNORM_CPU_ISA", v.c_str(), 1);
    try {
      fc::chosen_quant_isa();
      ADD_FAILURE() << v << ": accepted";
    } catch (const flashnorm::Error& e) {
      EXPECT_NE(std::string(e.what()).find("FLASHNORM_CPU_ISA=" + v), std::string::npos)
          << e.what();
    }
  }
}

// quant_matmul_parts: parts of different types and odd row counts (4-row groups and their
// remainders) in one pool loop land in their own columns, equal to each part multiplied alone.
// The prefill path (M >= kQuantGemmRows) on stacked parts of three types whose rows (1137 x 4096,
// more than one 16 MiB tile) put a tile boundary inside the second part: every output against
// fp64 from io::dequantize, within Higham's bound for sgemm's fp32 sums, gamma(K + 2) sum |x w|
// (a row of a wrong part or tile is off by the whole dot product).
TEST(QuantMatmulParts, PrefillTilesSplitPartsAndMatchFp64) {
  std::mt19937 rng(5);
  const int K = 4096, M = 17;
  const std::vector<std::pair<GgmlType, int>> spec = {
      {GgmlType::Q8_0, 600}, {GgmlType::Q4_K, 500}, {GgmlType::Q4_1, 37}};
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<std::vector<float>> deq;
  std::vector<fc::QuantMatrix> parts;
  int cols = 0;
  for (const auto& [t, n] : spec) {
    bytes.push_back(random_weights(t, n, K, rng));
    deq.emplace_back(size_t(n) * K);
    io::dequantize(t, bytes.back(), deq.back());
    cols += n;
  }
  for (size_t i = 0; i < spec.size(); ++i) {
    parts.push_back({spec[i].first, bytes[i].data(), spec[i].second, K});
  }
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(size_t(M) * K);
  for (float& v : x) v = nd(rng);
  fc::PreparedActs a;
  a.prepare(x.data(), M, K);
  std::vector<float> y(size_t(M) * cols);
  fc::ThreadPool pool(2);
  fc::quant_matmul_parts(parts, a, y.data(), cols, fc::best_quant_isa(), &pool);
  const double u = std::ldexp(1.0, -24), gk = (K + 2) * u / (1 - (K + 2) * u);
  int bad = 0, col = 0;
  for (size_t p = 0; p < spec.size(); ++p) {
    for (int n = 0; n < spec[p].second; ++n, ++col) {
      for (int m = 0; m < M; ++m) {
        double ref = 0, mag = 0;
        for (int k = 0; k < K; ++k) {
          const double t = double(x[size_t(m) * K + k]) * deq[p][size_t(n) * K + k];
          ref += t, mag += std::fabs(t);
        }
        bad += !(std::fabs(y[size_t(m) * cols + col] - ref) <= gk * mag);
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST(QuantMatmulParts, EqualsEachPartAloneInItsColumns) {
  for (fc::QuantIsa isa : kIsas) {
    if (!fc::quant_isa_available(isa)) {
      std::printf("[  SKIPPED ] %s: this CPU (or build) lacks it (%s)\n", fc::quant_isa_name(isa),
                  isa_needs(isa).c_str());
      continue;
    }
    std::mt19937 rng(7);
    const int K = 512;
    const std::vector<std::pair<GgmlType, int>> spec = {
        {GgmlType::Q4_1, 37}, {GgmlType::Q8_0, 6}, {GgmlType::Q5_0, 1}, {GgmlType::Q4_K, 67}};
    std::vector<std::vector<uint8_t>> bytes;
    std::vector<fc::QuantMatrix> parts;
    int cols = 0;
    for (const auto& [t, n] : spec) {
      bytes.push_back(random_weights(t, n, K, rng));
      cols += n;
    }
    for (size_t i = 0; i < spec.size(); ++i) {
      parts.push_back({spec[i].first, bytes[i].data(), spec[i].second, K});
    }
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (int M : {1, 2}) {
      std::vector<float> x(size_t(M) * K);
      for (float& v : x) v = nd(rng);
      fc::PreparedActs a;
      a.prepare(x.data(), M, K);
      const int ldy = cols + 2;
      std::vector<float> y(size_t(M) * ldy, -1.0f);
      fc::ThreadPool pool(2);
      fc::quant_matmul_parts(parts, a, y.data(), ldy, isa, &pool);
      int col = 0;
      for (const fc::QuantMatrix& p : parts) {
        std::vector<float> y1(size_t(M) * p.rows);
        fc::quant_matmul(p, a, y1.data(), p.rows, isa);
        for (int m = 0; m < M; ++m) {
          for (int n = 0; n < p.rows; ++n) {
            ASSERT_EQ(y[size_t(m) * ldy + col + n], y1[size_t(m) * p.rows + n])
                << fc::quant_isa_name(isa) << " part at column " << col << " m " << m << " n " << n;
          }
        }
        col += p.rows;
      }
      for (int m = 0; m < M; ++m) {
        for (int n = cols; n < ldy; ++n) EXPECT_EQ(y[size_t(m) * ldy + n], -1.0f);
      }
    }
  }
}

TEST(ThreadPoolTest, RunsEveryTaskOnceAndRethrows) {
  fc::ThreadPool pool(2);
  for (int rep = 0; rep < 50; ++rep) {
    std::vector<std::atomic<int>> hits(97);
    pool.run(97, [&](int i) { hits[i].fetch_add(1); });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  }
  EXPECT_THROW(pool.run(8,
                        [](int i) {
                          if (i == 5) throw std::runtime_error("x");
                        }),
               std::runtime_error);
}

}  // namespace
