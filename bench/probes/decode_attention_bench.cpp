// Kernel lab (host code: the kernel is in the library) for decode_attention
// (kernels/cuda/engine_ops.h): one token's attention with RoPE and the KV-cache write fused in,
// launched as the CUDA engine does in a decode step (bf16 output, split_keys = clamp(8192 / D, 16,
// 128), key_bound at the end of the position's 512-key bucket; one RoPE base for every shape, no
// sliding window; each call follows another call here, a GEMV in the engine), at the head shapes of
// Llama-3-8B, SmolLM2-135M and Gemma 3 270M and several positions. Four launches of the same
// kernel, timed interleaved: the default (ctas_per_sm 1, PDL trigger right after the wait),
// ctas_per_sm 3, ctas 3 with the late trigger, ctas 1 with the late trigger (AttentionArgs;
// CudaLaunch's ablations). Self-verifying (or the program fails): the four give the same bits,
// eagerly and after the timed graphs; the default matches rope_kv + attention (the separate
// kernels, which share the chunk and merge code) within 8e-3 of each head's largest output (about
// one bf16 ulp), both outputs finite, and the key/value row it writes matches rope_kv's within
// 1e-5. Timing: CUDA graphs of `steps` calls, each on the next of enough KV-cache copies (layers,
// each the rows 0 .. pos) that the rows read exceed four times the L2 (read off the device) and 240
// MB, replayed interleaved (time_graphs_interleaved), medians of 7 rounds. Random data (never
// zeros).
//   decode_attention_bench [PDL]   one JSON line per shape and position on stdout (PDL default 1,
//                                   as the engine launches it)
// Environment: ATTN_SHAPES, only the shapes whose name contains it; ATTN_POSITIONS, a comma list
// of positions (default 128,512,640,2048). Exit status 1 when they select nothing.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "device_buffer.h"
#include "flashnorm/kernels/cpu/reference.h"
#include "flashnorm/kernels/cuda/engine_ops.h"
#include "flashnorm/kernels/cuda/graph_timer.h"

namespace fk = flashnorm::kernels::cuda;
namespace fc = flashnorm::kernels::cpu;

namespace {

std::vector<float> random_floats(size_t n, float scale, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = scale * u(rng);
  return v;
}

void upload(const Dev& d, const std::vector<float>& h, size_t offset_floats = 0) {
  CHECK(cudaMemcpy(d.f() + offset_floats, h.data(), h.size() * 4, cudaMemcpyHostToDevice) ==
        cudaSuccess);
}

std::vector<uint16_t> download_bf16(const Dev& d, size_t n) {
  std::vector<uint16_t> h(n);
  CHECK(cudaMemcpy(h.data(), d.p, n * 2, cudaMemcpyDeviceToHost) == cudaSuccess);
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  const bool pdl = argc > 1 ? std::atoi(argv[1]) != 0 : true;
  struct Shape {
    const char* what;
    int n_head, n_head_kv, D;
    bool qk_norm;
  };
  const Shape shapes[] = {{"llama3-8b", 32, 8, 128, false},
                          {"smollm2", 9, 3, 64, false},
                          {"gemma3-270m", 4, 1, 256, true}};
  auto env = [](const char* n) -> const char* {
    const char* v = std::getenv(n);
    return v && *v ? v : nullptr;
  };
  const char* only_shapes = env("ATTN_SHAPES");
  std::vector<int> positions;
  {
    std::stringstream ss(env("ATTN_POSITIONS") ? env("ATTN_POSITIONS") : "128,512,640,2048");
    for (std::string item; std::getline(ss, item, ',');)
      positions.push_back(std::atoi(item.c_str()));
  }
  constexpr int kMaxCtx = 4096, kBucket = 512;
  for (int p : positions) CHECK(p >= 1 && p < kMaxCtx);
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s) == cudaSuccess);
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0) == cudaSuccess);
  std::mt19937 rng(1234);
  int ran = 0;
  for (const Shape& sh : shapes) {
    if (only_shapes && !std::strstr(sh.what, only_shapes)) continue;
    const int D = sh.D, half = D / 2, nq = sh.n_head * D, nkv = sh.n_head_kv * D;
    const int ldqkv = nq + 2 * nkv, split = std::clamp(8192 / D, 16, 128);
    // RoPE tables [max_ctx][D/2], the QK-norm gains, one token's q|k|v row
    std::vector<float> cs(size_t(kMaxCtx) * half), sn(cs.size());
    for (int p = 0; p < kMaxCtx; ++p)
      for (int i = 0; i < half; ++i) {
        const double a = p * std::pow(500000.0, -2.0 * i / D);
        cs[size_t(p) * half + i] = static_cast<float>(std::cos(a));
        sn[size_t(p) * half + i] = static_cast<float>(std::sin(a));
      }
    std::vector<float> gq = random_floats(D, 0.5f, rng), gk = random_floats(D, 0.5f, rng);
    for (float& g : gq) g += 1.f;
    for (float& g : gk) g += 1.f;
    Dev d_cos(cs.size() * 4), d_sin(sn.size() * 4), d_gq(D * 4), d_gk(D * 4), d_qkv(ldqkv * 4);
    upload(d_cos, cs), upload(d_sin, sn), upload(d_gq, gq), upload(d_gk, gk);
    upload(d_qkv, random_floats(ldqkv, 2.f, rng));
    for (int pos : positions) {
      ++ran;
      const size_t read_bytes = size_t(pos) * nkv * 4 * 2;  // k and v rows below pos
      // a copy (one layer's k or v cache) holds the rows 0 .. pos: those read and the one written
      const size_t layer_floats = size_t(pos + 1) * nkv;
      const size_t rotate = std::max<size_t>(240u << 20, 4 * size_t(prop.l2CacheSize));
      const int copies = static_cast<int>(std::clamp<size_t>(rotate / read_bytes + 2, 2, 8192));
      const int steps = std::max(copies, 32);
      Dev kc(layer_floats * 4 * copies), vc(layer_floats * 4 * copies);
      {
        std::vector<float> all(layer_floats * copies);
        for (Dev* c : {&kc, &vc}) {
          const std::vector<float> layer = random_floats(layer_floats, 1.f, rng);
          for (int i = 0; i < copies; ++i)
            std::copy(layer.begin(), layer.end(), all.begin() + i * layer_floats);
          upload(*c, all);
        }
      }
      Dev d_pos(4), d_q(nq * 4), out(size_t(nq) * 2 * 5), counters(size_t(64) * sh.n_head * 4);
      CHECK(cudaMemset(out.p, 0xff, out.bytes) == cudaSuccess);  // NaN until written
      CHECK(cudaMemcpy(d_pos.p, &pos, 4, cudaMemcpyHostToDevice) == cudaSuccess);
      CHECK(cudaMemset(counters.p, 0, counters.bytes) == cudaSuccess);
      fk::RopeKvArgs r;
      r.dt = fk::DType::kBF16, r.T = 1, r.n_head = sh.n_head, r.n_head_kv = sh.n_head_kv, r.D = D;
      r.max_ctx = kMaxCtx, r.qkv = d_qkv.f(), r.ldqkv = ldqkv,
      r.pos = static_cast<int32_t*>(d_pos.p);
      r.cos = d_cos.f(), r.sin = d_sin.f(), r.neox = true, r.eps = 1e-6f, r.q = d_q.f();
      r.q_norm = sh.qk_norm ? d_gq.f() : nullptr, r.k_norm = sh.qk_norm ? d_gk.f() : nullptr;
      r.pdl = pdl;
      fk::AttentionArgs a;
      a.dt = r.dt, a.T = 1, a.n_head = sh.n_head, a.n_head_kv = sh.n_head_kv, a.D = D;
      a.max_ctx = kMaxCtx, a.scale = 1.f / std::sqrt(float(D)), a.pos = r.pos, a.q = r.q;
      a.split_keys = split,
      a.key_bound = std::min(kMaxCtx, (pos + 1 + kBucket - 1) / kBucket * kBucket);
      a.pdl = pdl;
      Dev partials(size_t(sh.n_head) * fk::attention_splits(a) * (D + 2) * 4 * 2);
      struct Launch {
        int ctas;
        bool late;
      };
      const Launch launches[] = {{1, false}, {3, false}, {3, true}, {1, true}};
      constexpr int kVariants = 4;
      // variant v: output slot v (slot 4: the separate kernels); step: the cache copy
      auto call = [&](int v, int step, cudaStream_t st) -> fk::Status {
        fk::RopeKvArgs rr = r;
        fk::AttentionArgs aa = a;
        rr.k_cache = kc.f() + size_t(step % copies) * layer_floats, aa.k_cache = rr.k_cache;
        rr.v_cache = vc.f() + size_t(step % copies) * layer_floats, aa.v_cache = rr.v_cache;
        aa.out = static_cast<uint16_t*>(out.p) + size_t(v) * nq;
        aa.partials = partials.f();
        aa.ctas_per_sm = launches[v].ctas, aa.late_trigger = launches[v].late;
        return fk::decode_attention(rr, aa, static_cast<unsigned*>(counters.p), st);
      };
      // verification on copy 0: the four launches bit for bit, the default against the separate
      // kernels (on copy 1, whose rows below pos are the same values)
      for (int v = 0; v < kVariants; ++v) CHECK(call(v, 0, s).ok());
      {
        fk::RopeKvArgs rr = r;
        fk::AttentionArgs aa = a;
        rr.k_cache = kc.f() + layer_floats, aa.k_cache = rr.k_cache;  // copy 1 (copies >= 2)
        rr.v_cache = vc.f() + layer_floats, aa.v_cache = rr.v_cache;
        rr.pdl = aa.pdl = false;
        aa.out = static_cast<uint16_t*>(out.p) + size_t(4) * nq, aa.partials = partials.f();
        CHECK(fk::rope_kv(rr, s).ok());
        CHECK(fk::attention(aa, s).ok());
      }
      CHECK(cudaStreamSynchronize(s) == cudaSuccess);
      const std::vector<uint16_t> h = download_bf16(out, size_t(nq) * 5);
      // the key and value rows at pos: the fused kernel's (copy 0) against rope_kv's (copy 1)
      for (const Dev* c : {&kc, &vc}) {
        std::vector<float> rows(2 * size_t(nkv));
        for (int i = 0; i < 2; ++i)
          CHECK(cudaMemcpy(rows.data() + i * nkv, c->f() + i * layer_floats + size_t(pos) * nkv,
                           nkv * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
        for (int i = 0; i < nkv; ++i)
          if (!(std::fabs(rows[i] - rows[nkv + i]) <= 1e-5f * (1.f + std::fabs(rows[nkv + i])))) {
            std::fprintf(stderr, "%s pos %d: the %s row written differs from rope_kv's at %d\n",
                         sh.what, pos, c == &kc ? "key" : "value", i);
            return 1;
          }
      }
      for (int v = 1; v < kVariants; ++v)
        if (std::memcmp(h.data(), h.data() + size_t(v) * nq, size_t(nq) * 2) != 0) {
          std::fprintf(stderr, "%s pos %d: launch %d differs from the default\n", sh.what, pos, v);
          return 1;
        }
      double worst = 0;
      for (int hd = 0; hd < sh.n_head; ++hd) {
        double mx = 0, d = 0;
        for (int i = 0; i < D; ++i) {
          const float x = fc::bf16_to_float(h[size_t(hd) * D + i]);
          const float y = fc::bf16_to_float(h[size_t(4) * nq + size_t(hd) * D + i]);
          mx = std::max(mx, double(std::fabs(y)));
          d = std::max(d, double(std::fabs(x - y)));
          if (!std::isfinite(x) || !std::isfinite(y)) d = INFINITY;
        }
        worst = std::max(worst, mx > 0 ? d / mx : d);
      }
      if (!(worst <= 8e-3)) {
        std::fprintf(stderr, "%s pos %d: decode_attention vs the separate kernels: %.3g\n", sh.what,
                     pos, worst);
        return 1;
      }
      std::vector<std::vector<float>> ms;
      fk::GraphTimerOptions opt;
      opt.rounds = 7;
      CHECK(fk::time_graphs_interleaved(kVariants, steps, call, s, opt, &ms).ok());
      double us[kVariants];
      for (int v = 0; v < kVariants; ++v) us[v] = fk::median(ms[v]) * 1e3 / steps;
      // the timed graphs computed what was verified (every copy holds the same rows)
      const std::vector<uint16_t> after = download_bf16(out, size_t(nq) * kVariants);
      for (int v = 0; v < kVariants; ++v)
        if (std::memcmp(after.data() + size_t(v) * nq, h.data(), size_t(nq) * 2) != 0) {
          std::fprintf(stderr, "%s pos %d: launch %d's graph output differs\n", sh.what, pos, v);
          return 1;
        }
      std::printf(
          "{\"gpu\": \"%s\", \"shape\": \"%s\", \"n_head\": %d, \"n_head_kv\": %d, \"D\": %d, "
          "\"pos\": %d, \"split_keys\": %d, \"key_bound\": %d, \"kv_bytes_read\": %zu, "
          "\"us_default\": %.3f, \"us_ctas3\": %.3f, \"us_ctas3_late\": %.3f, \"us_late\": %.3f, "
          "\"GBps_default\": %.0f, \"max_rel_diff_separate\": %.2e, \"copies\": %d, \"steps\": %d, "
          "\"pdl\": %s}\n",
          prop.name, sh.what, sh.n_head, sh.n_head_kv, D, pos, split, a.key_bound, read_bytes,
          us[0], us[1], us[2], us[3], read_bytes / us[0] / 1e3, worst, copies, steps,
          pdl ? "true" : "false");
      std::fflush(stdout);
    }
  }
  cudaStreamDestroy(s);
  if (ran == 0) std::fprintf(stderr, "ATTN_SHAPES / ATTN_POSITIONS select nothing\n");
  return ran > 0 ? 0 : 1;
}
