// The decode GEMV's launch configurations of the CUDA engine (internal.h): autotuned at load for
// each one-token projection shape over the layers' own weights, or another engine's applied.
#include <fmt/format.h>

#include <algorithm>

#include "flashnorm/error.h"
#include "flashnorm/kernels/cuda/graph_timer.h"
#include "internal.h"

namespace flashnorm::cuda_engine {

namespace {

// A one-token projection shape of the decode GEMV and the dt weights of each layer's projection of
// that shape.
struct Shape {
  const char* name;
  int N, K, ldy;
  const void* x;
  std::vector<const void*> w;
};

// The decode GEMV's shapes for passes of M tokens: those with dt weights (a quantized projection
// takes quant_gemv, which has nothing to tune).
std::vector<Shape> gemv_shapes(const Forward& f, int M) {
  const Dims& d = f.d;
  const DeviceWeights& w = f.w;
  const Workspace& ws = f.ws;
  std::vector<Shape> shapes = {
      {"q|k|v", d.nqkv, d.H, d.nqkv, ws.xb.get(), {}},
      {"o", d.H, d.nq, d.H, ws.att.get(), {}},
      {"gate|up", 2 * d.F, d.H, 2 * d.F, ws.xb.get(), {}},
      {"down", d.H, d.F, d.H, f.glu_in_down(M) ? ws.gu.get() : ws.act.get(), {}},
      {"lm_head", d.V, d.H, d.ldv, ws.xb.get(), {}}};
  for (const DeviceWeights::Layer& l : w.layers) {
    const void* p[4] = {l.wqkv.get(), l.wo.get(), l.wgu.get(), l.wdown.get()};
    for (int i = 0; i < 4; ++i)
      if (p[i]) shapes[i].w.push_back(p[i]);
  }
  if (w.qhead.empty()) shapes[4].w.push_back(w.head_is_emb ? w.emb.get() : w.head.get());
  std::erase_if(shapes, [](const Shape& s) { return s.w.empty(); });
  return shapes;
}

// The padded row counts tuned: 1 (the decode kernel's 8-row tile), and for batched decode
// (max_sequences > 0) with decode_max_rows above 16 the 16- and 32-row tiles (kDecodeSliceRows is
// the largest the engine runs; those the workspace holds); other engines take the heuristic
// configuration there (prompt chunks of 9 to 16 tokens).
std::vector<int> tuned_rows(const Forward& f) {
  std::vector<int> rows = {1};
  if (f.opt.launch.decode_max_rows > 16 && f.d.slots > 1)  // batched decode
    for (int m : {16, kDecodeSliceRows})
      if (m <= f.d.tmax) rows.push_back(m);
  return rows;
}

// The LM head's GEMV against cuBLASLt at a row tile above 8, paired (one interleaved graph timing,
// medians of 7 rounds of 4 calls): sets t.us and t.gemm_us (microseconds per call).
void time_head_against_gemm(Forward& f, const fk::LinearArgs& a, GemvTuning& t) {
  fk::GraphTimerOptions o;
  o.rounds = 7;
  constexpr int kCalls = 4;
  std::vector<std::vector<float>> ms;
  ok(fk::time_graphs_interleaved(
      2, kCalls,
      [&](int variant, int, cudaStream_t st) {
        return variant == 0 ? f.ctx.run(a, t.config, st)
                            : f.ctx.gemm(a.dtype, a.M, a.N, a.K, a.x, a.ldx, a.w, a.ldw, a.y, a.ldy,
                                         nullptr, st, /*y_f32=*/true);
      },
      f.s, o, &ms));
  t.us = 1e3 * fk::median(ms[0]) / kCalls, t.gemm_us = 1e3 * fk::median(ms[1]) / kCalls;
}

}  // namespace

void set_head_gemv_rows(Forward& f, const std::vector<GemvTuning>& tuning) {
  f.head_gemv_rows = f.opt.launch.decode_max_rows;
  for (int tile : {16, 32}) {
    for (const GemvTuning& t : tuning) {
      if (t.name == "lm_head" && t.M == tile && t.gemm_us > 0 && t.us > t.gemm_us) {
        f.head_gemv_rows = std::min(f.head_gemv_rows, tile / 2);
        return;
      }
    }
  }
}

std::vector<GemvTuning> tune_gemvs(Forward& f) {
  const DeviceWeights& w = f.w;
  Workspace& ws = f.ws;
  const cudaStream_t s = f.s;
  FN_CUDA_CHECK(cudaMemsetAsync(ws.xb.get(), 0, ws.xb.bytes(), s));
  FN_CUDA_CHECK(cudaMemsetAsync(ws.att.get(), 0, ws.att.bytes(), s));
  FN_CUDA_CHECK(cudaMemsetAsync(ws.act.get(), 0, ws.act.bytes(), s));
  FN_CUDA_CHECK(cudaMemsetAsync(ws.gu.get(), 0, ws.gu.bytes(), s));
  std::vector<GemvTuning> tuning;
  for (const int M : tuned_rows(f)) {
    for (const Shape& sh : gemv_shapes(f, M)) {
      if (size_t(M) * sh.ldy * 4 > ws.logits.bytes()) continue;  // the scratch output's rows
      std::vector<fk::LinearArgs> sets;
      for (const void* wt : sh.w) {
        fk::LinearArgs a;
        const bool glu = sh.x == ws.gu.get();
        a.dtype = f.dt, a.M = M, a.N = sh.N, a.K = sh.K, a.x = sh.x, a.ldx = glu ? 2 * sh.K : sh.K;
        a.w = wt, a.x_glu = glu, a.glu_kind = f.glu_kind();
        a.ldw = sh.K, a.y = ws.logits.get(), a.ldy = sh.ldy, a.eps = f.cfg.eps, a.y_f32 = true;
        a.scale_mask = w.zero_mask.as<uint8_t>(), a.pdl = f.opt.launch.pdl;
        sets.push_back(a);
      }
      fk::Status st;
      double us = 0;
      const fk::DecodeConfig c = f.ctx.tune_decode(sets.data(), static_cast<int>(sets.size()), s,
                                                   &st, &us, nullptr, f.opt.gemv.allow_ring);
      ok(st);
      tuning.push_back({sh.name, M, sh.N, sh.K, c, us});
      if (M > 1 && std::string_view(sh.name) == "lm_head")
        time_head_against_gemm(f, sets[0], tuning.back());
    }
  }
  set_head_gemv_rows(f, tuning);
  return tuning;
}

void use_gemv_configs(Forward& f, const std::vector<GemvTuning>& cfgs) {
  std::vector<std::pair<int, int>> shapes;
  for (const Shape& sh : gemv_shapes(f, 1)) shapes.emplace_back(sh.N, sh.K);
  for (const GemvTuning& t : cfgs) {
    if (std::find(shapes.begin(), shapes.end(), std::pair{t.N, t.K}) == shapes.end())
      throw Error(fmt::format("gemv_configs: {} N={} K={} is not a projection of this model",
                              t.name, t.N, t.K));
    if (t.M < 1 || t.M > 64)
      throw Error(fmt::format("gemv_configs: {} M={} is outside 1 .. 64", t.name, t.M));
    ok(f.ctx.set_decode_config(t.M, t.N, t.K, t.config));
  }
  for (const auto& [n, k] : shapes)  // a one-token shape left out would run the heuristic instead
    if (std::none_of(cfgs.begin(), cfgs.end(),
                     [&](const GemvTuning& t) { return t.M <= 8 && t.N == n && t.K == k; }))
      throw Error(fmt::format("gemv_configs: no configuration for the N={} K={} projection", n, k));
  set_head_gemv_rows(f, cfgs);
}

}  // namespace flashnorm::cuda_engine
