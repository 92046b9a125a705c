// GPU tests of decode_attention (src/kernels/cuda/decode_attention.cu): the fused RoPE / QK-norm /
// KV-write + split-key attention + last-CTA merge against the separate kernels it replaces
// (rope_kv, then attention with split_keys and its combine kernel; engine_ops.cu), which the CUDA
// engine tests check against the CPU fp32 engine. Random qkv, RoPE tables and a KV cache already
// holding rows below the first position; head_dim 32-256, 1-16 tokens, GQA, sliding window,
// QK-norm with gains, v renorm, both RoPE layouts. Outputs fp16 (finer than bf16), compared to
// 4e-3 of the row's largest value; the written cache rows to 1e-5; rows below the first position
// must be untouched and the arrival counters back at zero.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "flashnorm/kernels/cuda/engine_ops.h"
#include "gpu_util.h"

namespace {

struct AttnCase {
  int D, T, p0, window, split;
  bool qk_norm, v_renorm, neox;
  int max_ctx = 512;
  int n_head = 8, n_head_kv = 2;
  // qkv produced on the stream by a delayed decode GEMV (poisoned before), decode_attention
  // launched right behind it with PDL: its pre-wait copies must not see, and its post-wait reads
  // must see, the producer's output.
  bool pdl_producer = false;
  // AttentionArgs::key_bound of both kernels (0: max_ctx); uncovered: the bound leaves some of the
  // visible keys unlaunched, and every output must be NaN instead of a truncated softmax
  int key_bound = 0;
  bool uncovered = false;
  // AttentionArgs::ctas_per_sm and late_trigger of the fused kernel (launch ablations)
  int ctas_per_sm = 1;
  bool late_trigger = false;
};

fk::LinearContext& linear_ctx() {
  static fk::LinearContext c;
  return c;
}

std::vector<float> rand_vec(size_t n, float scale, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = scale * u(rng);
  return v;
}

template <class T>
void upload(DevMem& d, const std::vector<T>& h) {
  ASSERT_EQ(cudaMemcpy(d.p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
}
std::vector<float> download(const DevMem& d, size_t n) {
  std::vector<float> h(n);
  if (cudaMemcpy(h.data(), d.p, n * 4, cudaMemcpyDeviceToHost) != cudaSuccess) h.clear();
  return h;
}

// fused_out: the fused kernel's outputs (fp16 values as floats), for bit-for-bit comparisons.
void run_case(const AttnCase& c, std::vector<float>* fused_out = nullptr) {
  SCOPED_TRACE(testing::Message() << "D=" << c.D << " T=" << c.T << " p0=" << c.p0
                                  << " window=" << c.window << " split=" << c.split
                                  << " qk_norm=" << c.qk_norm << " v_renorm=" << c.v_renorm
                                  << " neox=" << c.neox << " heads=" << c.n_head << "/"
                                  << c.n_head_kv << " pdl_producer=" << c.pdl_producer
                                  << " max_ctx=" << c.max_ctx << " ctas_per_sm=" << c.ctas_per_sm
                                  << " late_trigger=" << c.late_trigger);
  const int n_head = c.n_head, n_head_kv = c.n_head_kv, max_ctx = c.max_ctx, D = c.D, T = c.T,
            half = D / 2;
  const int nq = n_head * D, nkv = n_head_kv * D, ldqkv = nq + 2 * nkv;
  std::mt19937 rng(D * 7 + T * 131 + c.p0 + c.window);
  const auto qkv = rand_vec(static_cast<size_t>(T) * ldqkv, 2.f, rng);
  const auto cache0 = rand_vec(static_cast<size_t>(max_ctx) * nkv, 1.f, rng);
  std::vector<float> cs(static_cast<size_t>(max_ctx) * half), sn(cs.size());
  for (int p = 0; p < max_ctx; ++p)
    for (int i = 0; i < half; ++i) {
      const double a = p * std::pow(10000.0, -2.0 * i / D);
      cs[p * half + i] = static_cast<float>(std::cos(a));
      sn[p * half + i] = static_cast<float>(std::sin(a));
    }
  auto gq = rand_vec(D, 1.f, rng), gk = rand_vec(D, 1.f, rng);
  for (float& g : gq) g += 1.5f;
  for (float& g : gk) g += 1.5f;
  const int32_t pos = c.p0;

  fk::RopeKvArgs r;
  r.dt = fk::DType::kFP16, r.T = T, r.n_head = n_head, r.n_head_kv = n_head_kv, r.D = D;
  r.max_ctx = max_ctx, r.ldqkv = ldqkv, r.neox = c.neox, r.v_renorm = c.v_renorm, r.eps = 1e-6f;
  fk::AttentionArgs a;
  a.dt = r.dt, a.T = T, a.n_head = n_head, a.n_head_kv = n_head_kv, a.D = D, a.max_ctx = max_ctx;
  a.window = c.window, a.scale = 1.f / std::sqrt(static_cast<float>(D)), a.split_keys = c.split;
  a.key_bound = c.key_bound;
  const size_t part_n = static_cast<size_t>(T) * n_head * fk::attention_splits(a) * (D + 2);

  DevMem d_qkv(qkv.size() * 4), d_pos(4), d_cos(cs.size() * 4), d_sin(sn.size() * 4), d_gq(D * 4),
      d_gk(D * 4), d_q(static_cast<size_t>(T) * nq * 4);
  DevMem kA(cache0.size() * 4), vA(cache0.size() * 4), kB(cache0.size() * 4), vB(cache0.size() * 4);
  DevMem outA(static_cast<size_t>(T) * nq * 2), outB(static_cast<size_t>(T) * nq * 2);
  DevMem partA(part_n * 4), partB(part_n * 4), counters(fk::kDecodeAttentionMaxT * n_head * 4);
  upload(d_qkv, qkv), upload(d_cos, cs), upload(d_sin, sn), upload(d_gq, gq), upload(d_gk, gk);
  ASSERT_EQ(cudaMemcpy(d_pos.p, &pos, 4, cudaMemcpyHostToDevice), cudaSuccess);
  for (DevMem* m : {&kA, &vA, &kB, &vB}) upload(*m, cache0);
  CUDA_OK(cudaMemset(counters.p, 0, counters.bytes));
  CUDA_OK(cudaMemset(outA.p, 0xff, outA.bytes));  // poison
  CUDA_OK(cudaMemset(outB.p, 0xff, outB.bytes));
  r.qkv = static_cast<float*>(d_qkv.p), r.pos = static_cast<int32_t*>(d_pos.p);
  r.cos = static_cast<float*>(d_cos.p), r.sin = static_cast<float*>(d_sin.p);
  r.q_norm = c.qk_norm ? static_cast<float*>(d_gq.p) : nullptr;
  r.k_norm = c.qk_norm ? static_cast<float*>(d_gk.p) : nullptr;
  r.q = static_cast<float*>(d_q.p);
  a.pos = r.pos, a.q = r.q;

  // A: the fused kernel (launched twice: the counters must have been reset by the first launch)
  fk::RopeKvArgs ra = r;
  ra.k_cache = static_cast<float*>(kA.p), ra.v_cache = static_cast<float*>(vA.p);
  fk::AttentionArgs aa = a;
  aa.k_cache = ra.k_cache, aa.v_cache = ra.v_cache, aa.out = outA.p;
  aa.partials = static_cast<float*>(partA.p);
  aa.ctas_per_sm = c.ctas_per_sm, aa.late_trigger = c.late_trigger;
  cudaStream_t st = nullptr;
  std::unique_ptr<DevMem> px, pw;
  if (c.pdl_producer) {
    const int K = 64;
    std::vector<uint16_t> xb, wb;
    std::vector<float> xf, wf;
    random_half(fk::DType::kFP16, static_cast<size_t>(T) * K, K, 1.f, 0.f, 5 + D, xb, xf);
    random_half(fk::DType::kFP16, static_cast<size_t>(ldqkv) * K, 0, 0.3f, 0.f, 6 + D, wb, wf);
    px = std::make_unique<DevMem>(xb.size() * 2), pw = std::make_unique<DevMem>(wb.size() * 2);
    upload(*px, xb), upload(*pw, wb);
    CUDA_OK(cudaMemset(d_qkv.p, 0xff, d_qkv.bytes));  // NaN until the producer writes it
    CUDA_OK(cudaStreamCreate(&st));
    fk::LinearArgs g;
    g.dtype = fk::DType::kFP16, g.M = T, g.N = ldqkv, g.K = K, g.x = px->p, g.ldx = K, g.w = pw->p;
    g.ldw = K, g.y = d_qkv.p, g.ldy = ldqkv, g.y_f32 = true, g.pdl = true;
    fk::RaceHooks delayed;
    delayed.delay_gemm_cycles = 2000000;  // ~1 ms spin before the GEMV
    linear_ctx().set_race_hooks(delayed);
    const fk::Status gs = linear_ctx().run(g, fk::LinearImpl::kDecode, st);
    linear_ctx().set_race_hooks({});
    FN_OK(gs);
    ra.pdl = aa.pdl = true;
  }
  for (int rep = 0; rep < 2; ++rep)
    FN_OK(fk::decode_attention(ra, aa, static_cast<unsigned*>(counters.p), st));
  if (st) {
    CUDA_OK(cudaStreamSynchronize(st));
    CUDA_OK(cudaStreamDestroy(st));
  }
  // B: the separate kernels
  fk::RopeKvArgs rb = r;
  rb.k_cache = static_cast<float*>(kB.p), rb.v_cache = static_cast<float*>(vB.p);
  fk::AttentionArgs ab = a;
  ab.k_cache = rb.k_cache, ab.v_cache = rb.v_cache, ab.out = outB.p;
  ab.partials = static_cast<float*>(partB.p);
  FN_OK(fk::rope_kv(rb, nullptr));
  FN_OK(fk::attention(ab, nullptr));
  CUDA_OK(cudaDeviceSynchronize());

  const std::vector<float> oa =
      download_half(fk::DType::kFP16, outA.p, static_cast<size_t>(T) * nq);
  const std::vector<float> ob =
      download_half(fk::DType::kFP16, outB.p, static_cast<size_t>(T) * nq);
  ASSERT_EQ(oa.size(), ob.size());
  if (fused_out) *fused_out = oa;
  if (c.uncovered) {
    for (size_t i = 0; i < oa.size(); ++i)
      ASSERT_TRUE(std::isnan(oa[i]) && std::isnan(ob[i])) << "output " << i << " not NaN";
  }
  for (int t = 0; c.uncovered ? false : t < T; ++t)
    for (int h = 0; h < n_head; ++h) {
      float mx = 0.f, worst = 0.f;
      for (int d = 0; d < D; ++d) {
        const size_t i = static_cast<size_t>(t) * nq + h * D + d;
        ASSERT_TRUE(std::isfinite(oa[i])) << "unwritten output t=" << t << " h=" << h << " d=" << d;
        mx = std::max(mx, std::fabs(ob[i]));
        worst = std::max(worst, std::fabs(oa[i] - ob[i]));
      }
      ASSERT_LE(worst, 4e-3f * mx + 1e-6f) << "t=" << t << " head=" << h;
    }
  for (auto [x, y, name] : {std::tuple{&kA, &kB, "k_cache"}, std::tuple{&vA, &vB, "v_cache"}}) {
    const std::vector<float> ca = download(*x, cache0.size()), cb = download(*y, cache0.size());
    ASSERT_EQ(ca.size(), cache0.size());
    for (size_t i = 0; i < cache0.size(); ++i) {
      const int row = static_cast<int>(i / nkv);
      if (row < c.p0 || row >= c.p0 + T) {
        ASSERT_EQ(ca[i], cache0[i]) << name << " row " << row << " changed";
      } else {
        ASSERT_NEAR(ca[i], cb[i], 1e-5f * (1.f + std::fabs(cb[i]))) << name << " row " << row;
      }
    }
  }
  std::vector<unsigned> cnt(fk::kDecodeAttentionMaxT * n_head);
  CUDA_OK(cudaMemcpy(cnt.data(), counters.p, cnt.size() * 4, cudaMemcpyDeviceToHost));
  for (unsigned v : cnt) ASSERT_EQ(v, 0u) << "arrival counter not reset";
}

TEST(DecodeAttentionSmall, MatchesSeparateKernels) {
  for (int D : {32, 64, 128, 256})
    for (int T : {1, 5, 16})
      for (int p0 : {0, 37, 300}) {
        const int split = std::clamp(8192 / D, 16, 128);
        run_case({D, T, p0, 0, split, false, false, false});
        run_case({D, T, p0, 20, split, true, false, true});
      }
}
TEST(DecodeAttentionSmall, ManyChunksRenormAndWindow) {
  for (int D : {64, 256})
    for (int T : {1, 16}) {
      run_case({D, T, 300, 0, 16, true, true, false});
      run_case({D, T, 490, 100, 32, false, true, true});
    }
}
// A KV cache shorter than one chunk (the engine's tiny contexts): shared memory is sized by
// min(split_keys, max_ctx), and the kernel must lay it out the same way.
TEST(DecodeAttentionSmall, CacheShorterThanAChunk) {
  for (int D : {64, 256})
    for (int T : {1, 4}) {
      run_case({D, T, 9, 0, 128, false, false, false, 16});
      run_case({D, T, 3, 4, 128, true, true, true, 12});
    }
}
// Uncommon head_dims (8, 80, 96), multi-head (no GQA) and multi-query attention, many chunks.
TEST(DecodeAttentionSmall, HeadDimsAndGrouping) {
  for (int D : {8, 80, 96}) run_case({D, 3, 200, 0, 32, true, false, false});
  for (auto [nh, nkv] : {std::pair{8, 8}, std::pair{8, 1}}) {
    AttnCase c{64, 5, 300, 40, 32, true, true, true};
    c.n_head = nh, c.n_head_kv = nkv;
    run_case(c);
  }
}
// AttentionArgs::key_bound (a decode graph's bucket end; eager passes' last position + 1): the
// chunks below the bound only. A bound at or above *pos + T, exactly or with room, and one below it
// that a sliding window still covers give the separate kernels' outputs; a bound that leaves keys
// unlaunched gives NaN in both kernels.
TEST(DecodeAttentionSmall, KeyBoundLaunchesTheChunksBelowIt) {
  for (int T : {1, 16}) {
    AttnCase c{64, T, 300, 0, 32, true, false, false};
    c.key_bound = 300 + T;  // exactly
    run_case(c);
    c.key_bound = 512 - 7;  // room beyond the position, not a multiple of the chunk
    run_case(c);
    c.key_bound = 130, c.window = 100;  // below the position; the window's 100 keys fit
    run_case(c);
    c.window = 0, c.uncovered = true;  // 160 of 301+ keys launched
    run_case(c);
  }
}
// decode_attention behind a slow producer of qkv on the same stream, with PDL (its cache copies run
// before the wait, its qkv reads after it).
TEST(DecodeAttentionSmall, PdlBehindDelayedProducer) {
  for (int T : {1, 16}) {
    AttnCase c{64, T, 300, 0, 32, false, false, false};
    c.pdl_producer = true;
    run_case(c);
  }
}
// The launch ablations (CudaLaunch::attention_ctas_per_sm, attention_late_trigger): registers held
// to 80 and the PDL trigger after the chunk's work change nothing in the arithmetic, so the fused
// kernel's outputs are the same bits as the default launch's (and match the separate kernels), with
// and without a delayed PDL producer: 16 chunks of 32 keys without a window, and 22 chunks of 24
// keys (not a multiple of merge_chunks' batch of 8) with a window of 100 keys.
TEST(DecodeAttentionSmall, LaunchAblationsGiveTheSameBits) {
  for (bool producer : {false, true})
    for (int T : {1, 16})
      for (auto [window, split] : {std::pair{0, 32}, std::pair{100, 24}}) {
        AttnCase base{128, T, 300, window, split, true, false, true};
        base.pdl_producer = producer;
        std::vector<float> ref;
        run_case(base, &ref);
        ASSERT_FALSE(ref.empty());
        for (auto [ctas, late] : {std::pair{3, false}, std::pair{3, true}, std::pair{1, true}}) {
          AttnCase c = base;
          c.ctas_per_sm = ctas, c.late_trigger = late;
          std::vector<float> out;
          run_case(c, &out);
          ASSERT_EQ(out.size(), ref.size());
          for (size_t i = 0; i < out.size(); ++i)
            ASSERT_EQ(std::memcmp(&out[i], &ref[i], sizeof(float)), 0)
                << "output " << i << " ctas_per_sm=" << ctas << " late=" << late
                << " producer=" << producer << " T=" << T << " window=" << window;
        }
      }
}
TEST(DecodeAttentionSmall, RejectsBadArguments) {
  DevMem buf(1 << 20), cnt(1024);
  float* f = static_cast<float*>(buf.p);
  fk::RopeKvArgs r;
  r.T = 17, r.n_head = 8, r.n_head_kv = 2, r.D = 64, r.max_ctx = 512, r.ldqkv = 12 * 64;
  r.qkv = f, r.pos = static_cast<int32_t*>(buf.p), r.cos = f, r.sin = f, r.k_cache = f;
  r.v_cache = f;
  fk::AttentionArgs a;
  a.T = 17, a.n_head = 8, a.n_head_kv = 2, a.D = 64, a.max_ctx = 512, a.split_keys = 128;
  a.out = buf.p, a.partials = f;
  unsigned* counters = static_cast<unsigned*>(cnt.p);
  EXPECT_EQ(fk::decode_attention(r, a, counters, nullptr).code, fk::Code::kInvalidArgument)
      << "T > 16";
  r.T = a.T = 1;
  EXPECT_EQ(fk::decode_attention(r, a, nullptr, nullptr).code, fk::Code::kInvalidArgument)
      << "null counters";
  a.D = 32;
  EXPECT_EQ(fk::decode_attention(r, a, counters, nullptr).code, fk::Code::kInvalidArgument)
      << "rope and attn disagree";
  a.D = 64, r.ldqkv = 11 * 64;
  EXPECT_EQ(fk::decode_attention(r, a, counters, nullptr).code, fk::Code::kInvalidArgument)
      << "ldqkv too small";
  r.ldqkv = 12 * 64, r.k_cache = f + 1;
  EXPECT_EQ(fk::decode_attention(r, a, counters, nullptr).code, fk::Code::kInvalidArgument)
      << "misaligned cache";
  r.k_cache = f, a.ctas_per_sm = 2;
  EXPECT_EQ(fk::decode_attention(r, a, counters, nullptr).code, fk::Code::kInvalidArgument)
      << "ctas_per_sm 2";
}

// ---- sample_tokens: the multi-CTA argmax and its last-CTA merge --------------------------------
// vocab 100 000 (32 CTAs); ties across CTAs (lowest id wins), NaN and -inf logits, all NaN (id 0),
// the position and history updates, the counter's reset (two calls), and temperature sampling
// against a host replica of the kernel's Gumbel noise (splitmix64 hash, 23-bit u) in double.
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

struct Sampled {
  int token, pos, history;
};

Sampled sample_once(const std::vector<float>& logits, float temperature, uint64_t seed, int p0,
                    DevMem& ws) {
  const int V = static_cast<int>(logits.size());
  DevMem d_l(logits.size() * 4), d_pos(4), d_tok(4), d_hist(64 * 4);
  Sampled r{-1, -1, -1};
  if (cudaMemcpy(d_l.p, logits.data(), logits.size() * 4, cudaMemcpyHostToDevice) != cudaSuccess ||
      cudaMemcpy(d_pos.p, &p0, 4, cudaMemcpyHostToDevice) != cudaSuccess ||
      cudaMemset(d_hist.p, 0xff, 64 * 4) != cudaSuccess)
    return r;
  const fk::Status s = fk::sample_tokens(
      V, static_cast<float*>(d_l.p), temperature, seed, static_cast<int32_t*>(d_pos.p), 1,
      static_cast<int32_t*>(d_tok.p), static_cast<int32_t*>(d_hist.p), 64, ws.p, nullptr);
  if (!s.ok() || cudaDeviceSynchronize() != cudaSuccess) return r;
  std::vector<int32_t> hist(64);
  cudaMemcpy(&r.token, d_tok.p, 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(&r.pos, d_pos.p, 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(hist.data(), d_hist.p, 64 * 4, cudaMemcpyDeviceToHost);
  r.history = p0 + 1 < 64 ? hist[p0 + 1] : -1;
  return r;
}

TEST(SampleTokensSmall, MultiCtaArgmax) {
  const int V = 100000;
  DevMem ws(fk::sample_workspace_bytes());
  CUDA_OK(cudaMemset(ws.p, 0, ws.bytes));
  std::mt19937 rng(3);
  std::vector<float> l = rand_vec(V, 5.f, rng);
  l[77777] = 9.f;
  for (int rep = 0; rep < 2; ++rep) {  // the second call needs the counter reset by the first
    const Sampled s = sample_once(l, 0.f, 0, 10 + rep, ws);
    EXPECT_EQ(s.token, 77777);
    EXPECT_EQ(s.pos, 11 + rep);
    EXPECT_EQ(s.history, 77777);
  }
  l[70001] = l[12345] = l[99999] = 9.f;  // ties in different CTAs' slices
  EXPECT_EQ(sample_once(l, 0.f, 0, 0, ws).token, 12345);
  l[500] = std::nanf(""), l[600] = INFINITY * 0.f;
  EXPECT_EQ(sample_once(l, 0.f, 0, 0, ws).token, 12345) << "NaN never wins";
  std::vector<float> ninf(V, -INFINITY);
  ninf[4242] = -1e30f;
  EXPECT_EQ(sample_once(ninf, 0.f, 0, 0, ws).token, 4242);
  std::vector<float> nan(V, std::nanf(""));
  EXPECT_EQ(sample_once(nan, 0.f, 0, 0, ws).token, 0) << "all NaN";
  unsigned counter = 1;
  CUDA_OK(cudaMemcpy(&counter, ws.p, 4, cudaMemcpyDeviceToHost));
  EXPECT_EQ(counter, 0u);
}

TEST(SampleTokensSmall, TemperatureMatchesHostGumbelMax) {
  const int V = 100000;
  DevMem ws(fk::sample_workspace_bytes());
  CUDA_OK(cudaMemset(ws.p, 0, ws.bytes));
  std::mt19937 rng(4);
  const std::vector<float> l = rand_vec(V, 2.f, rng);
  for (uint64_t seed : {1ull, 2ull, 99ull})
    for (int p0 : {0, 7, 40}) {
      const float temp = 0.8f;
      const int p = p0 + 1;
      int best = -1;
      double bv = -INFINITY;
      for (int j = 0; j < V; ++j) {
        const uint64_t h = mix64(seed ^ mix64(static_cast<uint64_t>(p) * 0x9e3779b97f4a7c15ull +
                                              static_cast<uint64_t>(j)));
        const double u = (static_cast<double>(h >> 41) + 0.5) * std::ldexp(1.0, -23);
        const double v = static_cast<double>(l[j] / temp) - std::log(-std::log(u));
        if (v > bv) bv = v, best = j;
      }
      EXPECT_EQ(sample_once(l, temp, seed, p0, ws).token, best) << "seed " << seed << " p0 " << p0;
    }
}

}  // namespace
