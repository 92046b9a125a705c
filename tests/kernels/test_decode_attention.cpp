// decode_attention (kernels/cpu/decode_attention.h) against an fp64 reference of one query's
// attention per head, for the portable and the AVX2 loops, on odd shapes: head_dim not a multiple
// of 8 (the AVX2 request then runs the portable loops) or of 64, GQA groups, a sliding window
// (first > 0) and a single visible key.
// Tolerance, per output element i of head h (Higham's bounds, u = 2^-24, gamma(n) = n u /
// (1 - n u)): each fp32 score is off by at most e_j = gamma(D + 1) sum_l |q_l k_jl| * scale; the
// softmax then moves each p_j by at most p_j (exp(2 max e) - 1) plus a few ulp for std::exp and
// the fp32 reciprocal; the weighted sum adds gamma(n_keys + 1) sum_j p_j |v_ji|. So
// |out - ref| <= (2.2 max_j e_j + gamma(n_keys + 8)) sum_j p_j |v_ji|.
// Negative control: the same check against a reference that maps query head h to KV head
// h % n_kv instead of h / group must fail.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "flashnorm/error.h"
#include "flashnorm/kernels/cpu/decode_attention.h"

namespace fc = flashnorm::kernels::cpu;

namespace {

double gamma(int n) {
  const double u = std::ldexp(1.0, -24);
  return n * u / (1 - n * u);
}

struct Case {
  int n_head, n_kv, D, first, end;
};

struct Data {
  std::vector<float> q, k, v;
  float scale;
};

Data make(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Data d;
  d.q.resize(size_t(c.n_head) * c.D);
  d.k.resize(size_t(c.end) * c.n_kv * c.D);
  d.v.resize(d.k.size());
  for (float& x : d.q) x = 2 * nd(rng);
  for (float& x : d.k) x = nd(rng);
  for (float& x : d.v) x = nd(rng);
  d.scale = 1.0f / std::sqrt(float(c.D));
  return d;
}

// Reference output and tolerance of every element; kv_of(h) is the KV head query head h reads.
template <class KvOf>
void reference(const Case& c, const Data& d, KvOf kv_of, std::vector<double>& ref,
               std::vector<double>& tol) {
  const size_t stride = size_t(c.n_kv) * c.D;
  ref.assign(size_t(c.n_head) * c.D, 0);
  tol.assign(ref.size(), 0);
  for (int h = 0; h < c.n_head; ++h) {
    const float* q = &d.q[size_t(h) * c.D];
    const size_t kv = size_t(kv_of(h)) * c.D;
    std::vector<double> s(c.end), p(c.end);
    double mx = -INFINITY, max_e = 0;
    for (int j = c.first; j < c.end; ++j) {
      double dot = 0, mag = 0;
      for (int l = 0; l < c.D; ++l) {
        const double t = double(q[l]) * d.k[j * stride + kv + l];
        dot += t;
        mag += std::fabs(t);
      }
      s[j] = dot * d.scale;
      max_e = std::max(max_e, gamma(c.D + 1) * mag * d.scale);
      mx = std::max(mx, s[j]);
    }
    double sum = 0;
    for (int j = c.first; j < c.end; ++j) sum += (p[j] = std::exp(s[j] - mx));
    for (int j = c.first; j < c.end; ++j) p[j] /= sum;
    const double rel = 2.2 * max_e + gamma(c.end - c.first + 8);
    for (int i = 0; i < c.D; ++i) {
      double o = 0, mag = 0;
      for (int j = c.first; j < c.end; ++j) {
        o += p[j] * d.v[j * stride + kv + i];
        mag += p[j] * std::fabs(d.v[j * stride + kv + i]);
      }
      ref[size_t(h) * c.D + i] = o;
      tol[size_t(h) * c.D + i] = rel * mag;
    }
  }
}

std::vector<float> run(const Case& c, const Data& d, fc::QuantIsa isa, fc::ThreadPool* pool) {
  std::vector<float> out(size_t(c.n_head) * c.D, NAN);
  fc::DecodeAttention a;
  a.q = d.q.data();
  a.k = d.k.data();
  a.v = d.v.data();
  a.kv_stride = size_t(c.n_kv) * c.D;
  a.n_head = c.n_head;
  a.group = c.n_head / c.n_kv;
  a.head_dim = c.D;
  a.first = c.first;
  a.end = c.end;
  a.scale = d.scale;
  a.out = out.data();
  fc::decode_attention(a, isa, pool);
  return out;
}

// Elements outside their tolerance.
int violations(const std::vector<float>& out, const std::vector<double>& ref,
               const std::vector<double>& tol) {
  int bad = 0;
  for (size_t i = 0; i < out.size(); ++i) bad += !(std::fabs(out[i] - ref[i]) <= tol[i]);
  return bad;
}

const Case kCases[] = {
    {9, 3, 64, 0, 131},    // SmolLM2's heads, GQA 3
    {4, 1, 256, 0, 300},   // Gemma 3 270M's heads, one KV head
    {4, 1, 256, 45, 557},  // a sliding window
    {8, 8, 72, 0, 17},     // no GQA; 72 = 64 + 8
    {6, 2, 6, 0, 40},      // head_dim not a multiple of 8
    {3, 3, 8, 0, 1},       // one visible key
    {2, 1, 128, 999, 1000},
};

void check_isa(fc::QuantIsa isa) {
  fc::ThreadPool pool(3);
  uint32_t seed = 1;
  for (const Case& c : kCases) {
    const Data d = make(c, seed++);
    std::vector<double> ref, tol;
    const int group = c.n_head / c.n_kv;
    reference(
        c, d, [&](int h) { return h / group; }, ref, tol);
    const std::vector<float> alone = run(c, d, isa, nullptr);
    const std::string what = std::string(fc::quant_isa_name(isa)) + " heads " +
                             std::to_string(c.n_head) + "/" + std::to_string(c.n_kv) + " D " +
                             std::to_string(c.D) + " keys [" + std::to_string(c.first) + ", " +
                             std::to_string(c.end) + ")";
    EXPECT_EQ(violations(alone, ref, tol), 0) << what;
    // each head on one thread: the pool's result is the caller's, bit for bit
    EXPECT_EQ(run(c, d, isa, &pool), alone) << what;
    if (c.n_kv > 1 && group > 1) {
      std::vector<double> wrong, wtol;
      reference(
          c, d, [&](int h) { return h % c.n_kv; }, wrong, wtol);
      EXPECT_GT(violations(alone, wrong, wtol), 0) << what << ": negative control";
    }
  }
}

}  // namespace

TEST(DecodeAttention, ScalarMatchesFp64Reference) { check_isa(fc::QuantIsa::kScalar); }

TEST(DecodeAttention, Avx2MatchesFp64Reference) {
  if (!fc::quant_isa_available(fc::QuantIsa::kAvx2)) {
    GTEST_SKIP() << "this CPU or build lacks AVX2 + FMA + F16C";
  }
  check_isa(fc::QuantIsa::kAvx2);
}

// kAvx512 runs the AVX2 loops: the same checks, where the CPU has AVX-512.
TEST(DecodeAttention, Avx512MatchesFp64Reference) {
  if (!fc::quant_isa_available(fc::QuantIsa::kAvx512)) {
    GTEST_SKIP() << "this CPU or build lacks AVX-512 F + BW + VL + DQ (or AVX2 + FMA + F16C)";
  }
  check_isa(fc::QuantIsa::kAvx512);
}

TEST(DecodeAttention, RefusesBadShapes) {
  fc::DecodeAttention a;
  float x[8] = {};
  a.q = a.k = a.v = x;
  a.out = x;
  a.n_head = 3;
  a.group = 2;  // 3 heads are not groups of 2
  a.head_dim = 8;
  a.end = 1;
  EXPECT_THROW(fc::decode_attention(a, fc::QuantIsa::kScalar, nullptr), flashnorm::Error);
  a.group = 1;
  a.first = 1;  // no visible key
  EXPECT_THROW(fc::decode_attention(a, fc::QuantIsa::kScalar, nullptr), flashnorm::Error);
}
