// GPU tests of attention_tiled (src/kernels/cuda/prompt_attention.cu), the prompt passes'
// attention on tensor cores, against an fp64 CPU reference of causal (and sliding-window) softmax
// attention over an fp32 KV cache: head_dim 64 / 128 / 256, T not a multiple of the 64-query tile,
// a cache already holding rows below the first position, GQA and MHA, windows shorter than T.
// Outputs fp16, compared to 6e-3 of each row's largest reference value (fp16 operands: about
// 2^-11 relative each). Negative control: the same comparison against the reference without the
// window must fail. attention() must dispatch to it for T >= kAttentionTiledMinT (same bits).
// Cache rows past the last visible key and below the first query's window hold NaN.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "flashnorm/kernels/cuda/engine_ops.h"
#include "gpu_util.h"

namespace {

struct Case {
  int D, T, p0, window, n_head = 8, n_head_kv = 2;
};

// out[t][h][d] in fp64 (rows of q: [T][n_head * D]; caches: [max_ctx][n_head_kv * D])
std::vector<double> reference(const Case& c, const std::vector<float>& q,
                              const std::vector<float>& kc, const std::vector<float>& vc,
                              float scale, int window) {
  const int D = c.D, nq = c.n_head * D, nkv = c.n_head_kv * D, group = c.n_head / c.n_head_kv;
  std::vector<double> out(static_cast<size_t>(c.T) * nq);
  for (int t = 0; t < c.T; ++t)
    for (int h = 0; h < c.n_head; ++h) {
      const int visible = c.p0 + t + 1, first = window > 0 ? std::max(0, visible - window) : 0;
      const int kh = h / group;
      std::vector<double> s(visible - first);
      double mx = -INFINITY;
      for (int j = first; j < visible; ++j) {
        double dot = 0;
        for (int d = 0; d < D; ++d)
          dot += double(q[size_t(t) * nq + h * D + d]) * kc[size_t(j) * nkv + kh * D + d];
        s[j - first] = dot * scale;
        mx = std::max(mx, s[j - first]);
      }
      double sum = 0;
      for (double& v : s) sum += (v = std::exp(v - mx));
      for (int d = 0; d < D; ++d) {
        double acc = 0;
        for (int j = first; j < visible; ++j)
          acc += s[j - first] * vc[size_t(j) * nkv + kh * D + d];
        out[size_t(t) * nq + h * D + d] = acc / sum;
      }
    }
  return out;
}

// The largest |got - ref| over each (token, head) row relative to that row's largest |ref|.
double worst_rel(const Case& c, const std::vector<float>& got, const std::vector<double>& ref) {
  double worst = 0;
  for (size_t row = 0; row < got.size() / c.D; ++row) {
    double mx = 1e-6, diff = 0;
    for (int d = 0; d < c.D; ++d) {
      const size_t i = row * c.D + d;
      if (!std::isfinite(got[i])) return INFINITY;
      mx = std::max(mx, std::fabs(ref[i]));
      diff = std::max(diff, std::fabs(got[i] - ref[i]));
    }
    worst = std::max(worst, diff / mx);
  }
  return worst;
}

struct Outputs {
  std::vector<float> q, kc, vc, tiled, dispatched;
  float scale;
};

// The tiled kernel's and attention()'s outputs on random inputs for `c` (fp16 values as floats).
void run(const Case& c, Outputs& r) {
  const int nq = c.n_head * c.D, nkv = c.n_head_kv * c.D, max_ctx = c.p0 + c.T + 5;
  std::mt19937 rng(c.D * 1009 + c.T * 31 + c.p0 * 7 + c.window);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  auto fill = [&](std::vector<float>& v, size_t n, float s) {
    v.resize(n);
    for (float& x : v) x = s * u(rng);
  };
  fill(r.q, size_t(c.T) * nq, 2.f);
  fill(r.kc, size_t(max_ctx) * nkv, 2.f);
  fill(r.vc, size_t(max_ctx) * nkv, 1.f);
  // rows past the last visible key, and below the first query's window, hold NaN: a read of
  // them would show
  for (size_t i = size_t(c.p0 + c.T) * nkv; i < r.kc.size(); ++i) r.kc[i] = r.vc[i] = NAN;
  const int below = c.window > 0 ? std::max(0, c.p0 + 1 - c.window) : 0;
  for (size_t i = 0; i < size_t(below) * nkv; ++i) r.kc[i] = r.vc[i] = NAN;
  r.scale = 1.f / std::sqrt(float(c.D));
  const int32_t pos = c.p0;
  DevMem dq(r.q.size() * 4), dk(r.kc.size() * 4), dv(r.vc.size() * 4), dpos(4),
      o1(size_t(c.T) * nq * 2), o2(size_t(c.T) * nq * 2);
  CUDA_OK(cudaMemcpy(dq.p, r.q.data(), dq.bytes, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dk.p, r.kc.data(), dk.bytes, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dv.p, r.vc.data(), dv.bytes, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dpos.p, &pos, 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(o1.p, 0xff, o1.bytes));  // poison: NaN until written
  CUDA_OK(cudaMemset(o2.p, 0xff, o2.bytes));
  fk::AttentionArgs a;
  a.dt = fk::DType::kFP16, a.T = c.T, a.n_head = c.n_head, a.n_head_kv = c.n_head_kv, a.D = c.D;
  a.max_ctx = max_ctx, a.window = c.window, a.scale = r.scale;
  a.pos = static_cast<int32_t*>(dpos.p), a.q = static_cast<float*>(dq.p);
  a.k_cache = static_cast<float*>(dk.p), a.v_cache = static_cast<float*>(dv.p);
  a.out = o1.p;
  EXPECT_TRUE(fk::attention_tiled(a, nullptr).ok());
  a.out = o2.p;
  EXPECT_TRUE(fk::attention(a, nullptr).ok());
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  r.tiled = download_half(fk::DType::kFP16, o1.p, size_t(c.T) * nq);
  r.dispatched = download_half(fk::DType::kFP16, o2.p, size_t(c.T) * nq);
}

TEST(PromptAttention, MatchesFp64Reference) {
  const Case cases[] = {
      {64, 32, 0, 0},
      {64, 100, 37, 0},
      {128, 257, 0, 0},
      {128, 130, 300, 0},
      {128, 200, 5, 50},
      {256, 65, 19, 0},
      {256, 140, 0, 40},
      {64, 33, 0, 0, 4, 4},
      {128, 96, 64, 0, 4, 4},
      {64, 500, 0, 128},
      {128, 64, 1000, 0},
      {256, 31, 3, 0},
      // the first key above 0 (pos0 past the window), windows under a warp's 16 rows, with MHA
      // and T under one tile
      {128, 100, 300, 64},
      {64, 80, 20, 7},
      {128, 40, 10, 12, 4, 4},
      {256, 70, 90, 33},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << "D=" << c.D << " T=" << c.T << " p0=" << c.p0 << " window="
                                    << c.window << " heads=" << c.n_head << "/" << c.n_head_kv);
    Outputs r;
    run(c, r);
    ASSERT_FALSE(r.tiled.empty());
    const std::vector<double> ref = reference(c, r.q, r.kc, r.vc, r.scale, c.window);
    EXPECT_LE(worst_rel(c, r.tiled, ref), 6e-3);
    if (c.T >= fk::kAttentionTiledMinT) {
      EXPECT_EQ(0, std::memcmp(r.tiled.data(), r.dispatched.data(), r.tiled.size() * 4))
          << "attention() did not run attention_tiled";
    } else {  // the fp32 kernel: closer to the reference
      EXPECT_LE(worst_rel(c, r.dispatched, ref), 2e-3);
    }
    // negative control: the mask is checked (where no cache row is poisoned below the window,
    // which the reference without it would read)
    if (c.window > 0 && c.window < c.p0 + c.T && c.p0 + 1 <= c.window) {
      const std::vector<double> unwindowed = reference(c, r.q, r.kc, r.vc, r.scale, 0);
      EXPECT_GT(worst_rel(c, r.tiled, unwindowed), 0.05) << "the check missed the window";
    }
  }
}

TEST(PromptAttention, RefusesWhatItDoesNotSupport) {
  fk::AttentionArgs a;
  a.T = 64, a.n_head = 2, a.n_head_kv = 1, a.D = 96, a.max_ctx = 64;
  alignas(16) float dummy[4];
  int32_t pos = 0;
  a.pos = &pos, a.q = a.k_cache = a.v_cache = dummy, a.out = dummy;
  EXPECT_EQ(fk::attention_tiled(a, nullptr).code, fk::Code::kInvalidArgument);  // D 96
  a.D = 64, a.split_keys = 64;
  EXPECT_EQ(fk::attention_tiled(a, nullptr).code, fk::Code::kInvalidArgument);  // key splits
  a.split_keys = 0, a.n_head_kv = 3;
  EXPECT_EQ(fk::attention_tiled(a, nullptr).code, fk::Code::kInvalidArgument);  // heads
}

}  // namespace
