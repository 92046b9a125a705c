// Race tests (issue 3, docs/design.md section 2 "The join"): a decode loop that reuses x, y and the
// context's rstd buffer across many steps, with fresh inputs each step whose row norms differ by up
// to 2^6, one producer delayed on purpose by a spin kernel, and every step compared with the fp64
// CPU reference. The negative controls (NoJoin*) remove the join (RaceHooks::no_join: the
// two-stream event wait, the PDL prefill's griddepcontrol.wait) and assert that steps then go wrong
// (the post-scale or epilogue reads the previous step's rstd: "outputs from the past"): the
// positive tests are shown to be able to fail.
#include <optional>

#include "flashnorm/kernels/cuda/device.h"
#include "gpu_util.h"

namespace {

constexpr float kEps = 1e-6f;
constexpr long long kDelay = 400000;  // ~0.2 ms at 1.98 GHz

struct Loop {
  fk::DType dt = fk::DType::kBF16;
  int M, N, K, steps;
  fk::LinearImpl impl;
  fk::RaceHooks hooks;
  bool pdl = false;
  std::optional<fk::PrefillConfig> prefill;  // kPrefill with this configuration
  int decode_ks = 0;                         // kDecode: > 0 forces the split-K factor
  bool expect_wrong = false;                 // a negative control: wrong steps are not failures
};

// Returns the number of steps whose output was wrong; reports the first few as failures (unless
// L.expect_wrong).
int run_loop(const Loop& L) {
  const size_t xn = static_cast<size_t>(L.M) * L.K, wn = static_cast<size_t>(L.N) * L.K,
               yn = static_cast<size_t>(L.M) * L.N;
  std::vector<uint16_t> wb;
  std::vector<float> wf;
  random_half(L.dt, wn, 0, 0.05f, 0.f, 99, wb, wf);
  DevMem x(xn * 2), w(wn * 2), y(yn * 2);
  uint16_t *hx = nullptr, *hy = nullptr;
  EXPECT_EQ(cudaMallocHost(&hx, xn * 2), cudaSuccess);
  EXPECT_EQ(cudaMallocHost(&hy, yn * 2), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(w.p, wb.data(), wn * 2, cudaMemcpyHostToDevice), cudaSuccess);
  cudaStream_t s;
  EXPECT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  fk::LinearContext ctx;
  ctx.set_race_hooks(L.hooks);
  fk::LinearArgs a;
  a.dtype = L.dt, a.M = L.M, a.N = L.N, a.K = L.K, a.x = x.p, a.ldx = L.K, a.w = w.p, a.ldw = L.K;
  a.y = y.p, a.ldy = L.N, a.eps = kEps;
  a.pdl = L.pdl;
  int bad = 0;
  std::vector<uint16_t> xb;
  std::vector<float> xf, yf(yn);
  std::vector<double> ref(yn);
  for (int step = 0; step < L.steps; ++step) {
    random_half(L.dt, xn, L.K, 3.f, 3.f, 1000 + step, xb, xf);
    std::copy(xb.begin(), xb.end(), hx);
    EXPECT_EQ(cudaMemcpyAsync(x.p, hx, xn * 2, cudaMemcpyHostToDevice, s), cudaSuccess);
    EXPECT_EQ(cudaMemsetAsync(y.p, 0xff, yn * 2, s), cudaSuccess);  // poison the reused output
    fk::Status st;
    if (L.prefill) {
      st = ctx.run(a, *L.prefill, s);
    } else if (L.decode_ks > 0) {
      fk::DecodeConfig c = ctx.decode_config(a.M, a.N, a.K);
      c.ks = L.decode_ks;
      st = ctx.run(a, c, s);
    } else {
      st = ctx.run(a, L.impl, s);
    }
    EXPECT_TRUE(st.ok()) << st.message;
    EXPECT_EQ(cudaMemcpyAsync(hy, y.p, yn * 2, cudaMemcpyDeviceToHost, s), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    for (size_t i = 0; i < yn; ++i) yf[i] = from_half_bits(L.dt, hy[i]);
    fc::flashnorm_linear(xf.data(), wf.data(), nullptr, nullptr, L.M, L.N, L.K, kEps, ref.data());
    const double e = fc::rel_error(yf.data(), ref.data(), static_cast<int64_t>(yn));
    if (!(e < 1e-2)) {
      if (bad < 5 && !L.expect_wrong)
        ADD_FAILURE() << fk::impl_name(L.impl) << " step " << step << ": relative error " << e;
      ++bad;
    }
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaStreamDestroy(s);
  cudaFreeHost(hx);
  cudaFreeHost(hy);
  std::printf("%s: %d of %d steps wrong\n", fk::impl_name(L.impl), bad, L.steps);
  return bad;
}

// The two-stream implementation with its rstd producer delayed; join = false: the negative control.
int two_stream_delayed_rstd(bool join) {
  fk::RaceHooks h;
  h.no_join = !join;
  h.delay_rstd_cycles = kDelay;
  Loop L{fk::DType::kBF16, 8, 512, 1024, 100, fk::LinearImpl::kTwoStream, h};
  L.expect_wrong = !join;
  return run_loop(L);
}
TEST(RaceTwoStream, DelayRstd) { EXPECT_EQ(two_stream_delayed_rstd(true), 0); }
TEST(RaceTwoStream, NoJoinDelayRstdGoesWrong) { EXPECT_GT(two_stream_delayed_rstd(false), 0); }
TEST(RaceTwoStream, DelayGemm) {
  fk::RaceHooks h;
  h.delay_gemm_cycles = kDelay;
  EXPECT_EQ(run_loop({fk::DType::kBF16, 8, 512, 1024, 100, fk::LinearImpl::kTwoStream, h}), 0);
}
// The prescale path (norm kernel, then the GEMM on its output; stream order is the join).
TEST(RacePrefill, DelayRstd) {
  fk::RaceHooks h;
  h.delay_rstd_cycles = kDelay;
  Loop L{fk::DType::kBF16, 96, 512, 1024, 50, fk::LinearImpl::kPrefill, h};
  L.prefill = fk::PrefillConfig::prescale();
  EXPECT_EQ(run_loop(L), 0);
}
// The fused kernel (sum of squares inside the GEMM), shared-memory and register-A tiles, behind a
// delayed kernel, outputs reused across steps.
TEST(RacePrefill, FusedAfterDelayedKernel) {
  if (!fk::LinearContext::has_fused_prefill()) GTEST_SKIP() << "no fused prefill in this build";
  for (int tile : {3, 7}) {
    fk::RaceHooks h;
    h.delay_gemm_cycles = kDelay;
    Loop L{fk::DType::kBF16, 96, 512, 1024, 50, fk::LinearImpl::kPrefill, h};
    L.prefill = fk::PrefillConfig::fused(tile);
    EXPECT_EQ(run_loop(L), 0);
  }
}
// The PDL prefill: the rstd kernel lets the GEMM launch at once, then every warp spins before
// writing rstd; the GEMM's mainloop runs meanwhile and its epilogue must wait (griddepcontrol.wait)
// for the rstd grid. Without the join the wait is skipped: the epilogue then reads the previous
// step's rstd (or, at step 0, whatever the buffer held), and steps must go wrong. Shared-memory and
// register-A tiles; rstd on the SMs the GEMM leaves idle.
int pdl_rstd_delayed(int tile, bool join) {
  fk::RaceHooks h;
  h.no_join = !join;
  h.delay_rstd_cycles = kDelay;
  Loop L{fk::DType::kBF16, 96, 512, 1024, 50, fk::LinearImpl::kPrefill, h};
  L.prefill = fk::PrefillConfig::fused(tile, 0, fk::PrefillConfig::Rstd::kKernelPdl);
  L.expect_wrong = !join;
  return run_loop(L);
}
TEST(RacePrefill, PdlRstdDelayed) {  // shared-memory tile (64x64 ping-pong)
  if (!fk::LinearContext::has_fused_prefill()) GTEST_SKIP() << "no fused prefill in this build";
  EXPECT_EQ(pdl_rstd_delayed(3, true), 0);
}
TEST(RacePrefill, PdlRstdDelayedRegisterA) {  // register-A tile (RS 64x64 ping-pong)
  if (!fk::LinearContext::has_fused_prefill()) GTEST_SKIP() << "no fused prefill in this build";
  EXPECT_EQ(pdl_rstd_delayed(7, true), 0);
}
TEST(RacePrefill, NoJoinPdlRstdDelayedGoesWrong) {  // the negative control of the two above
  if (!fk::LinearContext::has_fused_prefill()) GTEST_SKIP() << "no fused prefill in this build";
  EXPECT_GT(pdl_rstd_delayed(3, false), 0);
  EXPECT_GT(pdl_rstd_delayed(7, false), 0);
}
// The same with more GEMM tiles than SMs (the rstd kernel then spans the SMs the GEMM needs) and a
// delayed GEMM predecessor: the rstd kernel and the GEMM both start after it.
TEST(RacePrefill, PdlRstdDelayedManyTiles) {
  if (!fk::LinearContext::has_fused_prefill()) GTEST_SKIP() << "no fused prefill in this build";
  fk::RaceHooks h;
  h.delay_rstd_cycles = kDelay / 4;
  h.delay_gemm_cycles = kDelay / 4;
  Loop L{fk::DType::kBF16, 1100, 600, 512, 12, fk::LinearImpl::kPrefill, h};
  L.prefill = fk::PrefillConfig::fused(3, 0, fk::PrefillConfig::Rstd::kKernelPdl);
  EXPECT_EQ(run_loop(L), 0);
}
// The PDL prefill behind a kernel that lets its successors launch early and writes their input
// late: the decode kernel triggers launch_dependents right after requesting its W, then computes
// and writes y1, which is the prefill's x. The prefill's rstd kernel (launched with PDL) must wait
// for it before reading x and before letting the GEMM (which reads x in its mainloop) launch; with
// no join neither the rstd kernel nor the GEMM waits, and steps must go wrong (y1 is poisoned
// before every step, so an early read gives NaN).
// The two calls are captured in one CUDA graph and replayed per step, so the rstd kernel is
// launched on the device right behind the decode kernel. Launched from the host one after the
// other (an earlier version of this test), the host's time between the two launches (argument
// checks, CUTLASS's initialize) could exceed the decode kernel's run time: the rstd kernel then
// started after its producer had finished, and the no-join run passed in 1 of 4 runs on the H200.
// The producer is also made long (M = 64, K = 8192: ~16 MB of W streamed by 64 CTAs).
// Returns the number of wrong steps (-1 when the setup failed; failures reported).
int pdl_after_early_producer(bool join) {
  const fk::DType dt = fk::DType::kBF16;
  const int M = 64, K1 = 8192, N1 = 1024, N2 = 384, steps = 30;
  std::vector<uint16_t> w1b, w2b, xb;
  std::vector<float> w1f, w2f, xf;
  random_half(dt, static_cast<size_t>(N1) * K1, 0, 0.05f, 0.f, 11, w1b, w1f);
  random_half(dt, static_cast<size_t>(N2) * N1, 0, 0.05f, 0.f, 12, w2b, w2f);
  DevMem x(static_cast<size_t>(M) * K1 * 2), w1(w1b.size() * 2), w2(w2b.size() * 2),
      y1(static_cast<size_t>(M) * N1 * 2), y2(static_cast<size_t>(M) * N2 * 2);
  EXPECT_EQ(cudaMemcpy(w1.p, w1b.data(), w1b.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(w2.p, w2b.data(), w2b.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  fk::Stream stream;
  fk::LinearContext ctx;
  fk::LinearArgs a1, a2;
  a1.dtype = dt, a1.M = M, a1.N = N1, a1.K = K1, a1.x = x.p, a1.ldx = K1, a1.w = w1.p, a1.ldw = K1,
  a1.y = y1.p, a1.ldy = N1, a1.eps = kEps;
  a2.dtype = dt, a2.M = M, a2.N = N2, a2.K = N1, a2.x = y1.p, a2.ldx = N1, a2.w = w2.p, a2.ldw = N1,
  a2.y = y2.p, a2.ldy = N2, a2.eps = kEps;
  fk::RaceHooks hooks;
  hooks.no_join = !join;
  ctx.set_race_hooks(hooks);
  // 64 CTAs, no split-K: all resident at once, so all trigger early (a grid larger than one wave
  // triggers only when its last CTAs start, i.e. near its end: the window closes)
  const fk::DecodeConfig producer{1, 4, 1, 0};
  const fk::PrefillConfig consumer =
      fk::PrefillConfig::fused(3, 0, fk::PrefillConfig::Rstd::kKernelPdl);
  auto enqueue = [&] {
    fk::Status st = ctx.run(a1, producer, stream.get());
    if (st.ok()) st = ctx.run(a2, consumer, stream.get());
    EXPECT_TRUE(st.ok()) << st.message;
    return st.ok();
  };
  if (!enqueue()) return -1;  // grows the context's workspaces before the capture
  EXPECT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
  EXPECT_EQ(ctx.last_prefill_path(), "rstd_pdl");
  cudaGraph_t g = nullptr;
  EXPECT_EQ(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal), cudaSuccess);
  const bool captured = enqueue();
  EXPECT_EQ(cudaStreamEndCapture(stream.get(), &g), cudaSuccess);
  if (!captured || !g) return -1;
  fk::GraphExec graph;
  graph.set(g);
  int bad = 0;
  std::vector<double> ref(static_cast<size_t>(M) * N2);
  for (int step = 0; step < steps; ++step) {
    random_half(dt, static_cast<size_t>(M) * K1, K1, 3.f, 3.f, 500 + step, xb, xf);
    EXPECT_EQ(cudaMemcpyAsync(x.p, xb.data(), xb.size() * 2, cudaMemcpyHostToDevice, stream.get()),
              cudaSuccess);
    EXPECT_EQ(cudaMemsetAsync(y1.p, 0xff, y1.bytes, stream.get()), cudaSuccess);  // poison (NaN)
    EXPECT_EQ(cudaMemsetAsync(y2.p, 0xff, y2.bytes, stream.get()), cudaSuccess);
    graph.launch(stream.get());
    EXPECT_EQ(cudaStreamSynchronize(stream.get()), cudaSuccess);
    // the reference starts from the y1 the decode kernel wrote (complete after the synchronize)
    const std::vector<float> y1f = download_half(dt, y1.p, static_cast<size_t>(M) * N1);
    const std::vector<float> y2f = download_half(dt, y2.p, static_cast<size_t>(M) * N2);
    if (y2f.size() != ref.size()) return -1;
    fc::flashnorm_linear(y1f.data(), w2f.data(), nullptr, nullptr, M, N2, N1, kEps, ref.data());
    const double e = fc::rel_error(y2f.data(), ref.data(), static_cast<int64_t>(ref.size()));
    if (!(e < 1e-2)) {
      if (bad < 5 && join) ADD_FAILURE() << "step " << step << ": relative error " << e;
      ++bad;
    }
  }
  std::printf("prefill (PDL) after decode, graph-replayed%s: %d of %d steps wrong\n",
              join ? "" : " (no join)", bad, steps);
  return bad;
}
TEST(RacePrefill, PdlAfterEarlyTriggeringProducer) {
  if (!fk::LinearContext::has_fused_prefill()) GTEST_SKIP() << "no fused prefill in this build";
  EXPECT_EQ(pdl_after_early_producer(true), 0);
}
TEST(RacePrefill, NoJoinPdlAfterEarlyTriggeringProducerGoesWrong) {
  if (!fk::LinearContext::has_fused_prefill()) GTEST_SKIP() << "no fused prefill in this build";
  EXPECT_GT(pdl_after_early_producer(false), 0);
}
TEST(RaceDecode, SplitKReuse) {
  fk::RaceHooks h;
  h.delay_gemm_cycles = kDelay / 4;
  Loop L{fk::DType::kBF16, 8, 512, 2048, 200, fk::LinearImpl::kDecode, h};
  L.decode_ks = 8;
  EXPECT_EQ(run_loop(L), 0);
  EXPECT_EQ(run_loop({fk::DType::kBF16, 64, 320, 1024, 100, fk::LinearImpl::kDecode, h}), 0);
}
// PDL launch: the decode kernel starts streaming W while the (delayed) preceding kernel still runs;
// it must read x and write y only after that kernel completed. Also with split-K (counters).
TEST(RaceDecode, PdlAfterDelayedKernel) {
  fk::RaceHooks h;
  h.delay_gemm_cycles = kDelay / 4;
  EXPECT_EQ(run_loop({fk::DType::kBF16, 8, 512, 2048, 100, fk::LinearImpl::kDecode, h, true}), 0);
  Loop L{fk::DType::kBF16, 3, 200, 1000, 100, fk::LinearImpl::kDecode, h, true};
  L.decode_ks = 4;
  EXPECT_EQ(run_loop(L), 0);
}

}  // namespace
