// Race tests (issue 3, flashnorm.md section 2 "The join"): a decode loop that reuses x, y and the
// context's rstd buffer across many steps, with fresh inputs each step whose row norms differ by up
// to 2^6, one producer delayed on purpose by a spin kernel, and every step compared with the fp64
// CPU reference. With --no-join the two-stream implementation skips its event join, and the
// DelayRstd test must FAIL (the post-scale then reads the previous step's rstd: "outputs from the
// past"); scripts/gpu_kernels.sh runs it that way once and records the failure.
#include "flashnorm/kernels/cuda/device.h"
#include "gpu_util.h"

namespace {

constexpr float kEps = 1e-6f;
constexpr long long kDelay = 400000;  // ~0.2 ms at 1.98 GHz

struct Loop {
  fk::DType dt = fk::DType::kBF16;
  int M, N, K, steps;
  fk::LinearImpl impl;
  fk::DebugHooks hooks;
  bool pdl = false;
};

// Returns the number of steps whose output was wrong; prints the first few.
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
  ctx.debug = L.hooks;
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
    fk::Status st = ctx.run(a, L.impl, s);
    EXPECT_TRUE(st.ok()) << st.message;
    EXPECT_EQ(cudaMemcpyAsync(hy, y.p, yn * 2, cudaMemcpyDeviceToHost, s), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    for (size_t i = 0; i < yn; ++i) yf[i] = from_half_bits(L.dt, hy[i]);
    fc::flashnorm_linear(xf.data(), wf.data(), nullptr, nullptr, L.M, L.N, L.K, kEps, ref.data());
    const double e = fc::rel_error(yf.data(), ref.data(), static_cast<int64_t>(yn));
    if (!(e < 1e-2)) {
      if (bad < 5)
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

TEST(RaceTwoStream, DelayRstd) {
  fk::DebugHooks h;
  h.no_join = g_no_join;
  h.delay_rstd_cycles = kDelay;
  EXPECT_EQ(run_loop({fk::DType::kBF16, 8, 512, 1024, 100, fk::LinearImpl::kTwoStream, h}), 0);
}
TEST(RaceTwoStream, DelayGemm) {
  fk::DebugHooks h;
  h.no_join = g_no_join;
  h.delay_gemm_cycles = kDelay;
  EXPECT_EQ(run_loop({fk::DType::kBF16, 8, 512, 1024, 100, fk::LinearImpl::kTwoStream, h}), 0);
}
// The prescale path (norm kernel, then the GEMM on its output; stream order is the join).
TEST(RacePrefill, DelayRstd) {
  fk::DebugHooks h;
  h.delay_rstd_cycles = kDelay;
  h.prefill_prescale = true;
  EXPECT_EQ(run_loop({fk::DType::kBF16, 96, 512, 1024, 50, fk::LinearImpl::kPrefill, h}), 0);
}
// The fused kernel (sum of squares inside the GEMM), shared-memory and register-A tiles, behind a
// delayed kernel, outputs reused across steps.
TEST(RacePrefill, FusedAfterDelayedKernel) {
  if (!fk::LinearContext::has_fused_prefill()) GTEST_SKIP() << "no fused prefill in this build";
  for (int tile : {3, 7}) {
    fk::DebugHooks h;
    h.delay_gemm_cycles = kDelay;
    h.prefill_tile = tile;
    EXPECT_EQ(run_loop({fk::DType::kBF16, 96, 512, 1024, 50, fk::LinearImpl::kPrefill, h}), 0);
  }
}
// The PDL prefill: the rstd kernel lets the GEMM launch at once, then every warp spins before
// writing rstd; the GEMM's mainloop runs meanwhile and its epilogue must wait (griddepcontrol.wait)
// for the rstd grid. With --no-join the wait is skipped: the epilogue then reads the previous
// step's rstd (or, at step 0, whatever the buffer held), and this test must FAIL. Shared-memory and
// register-A tiles; rstd on the SMs the GEMM leaves idle.
int pdl_rstd_delayed(int tile) {
  fk::DebugHooks h;
  h.no_join = g_no_join;
  h.delay_rstd_cycles = kDelay;
  h.prefill_tile = tile + fk::LinearContext::kPrefillPdlFirst;
  return run_loop({fk::DType::kBF16, 96, 512, 1024, 50, fk::LinearImpl::kPrefill, h});
}
TEST(RacePrefill, PdlRstdDelayed) {  // shared-memory tile (64x64 ping-pong)
  if (!fk::LinearContext::has_fused_prefill()) GTEST_SKIP() << "no fused prefill in this build";
  EXPECT_EQ(pdl_rstd_delayed(3), 0);
}
TEST(RacePrefill, PdlRstdDelayedRegisterA) {  // register-A tile (RS 64x64 ping-pong)
  if (!fk::LinearContext::has_fused_prefill()) GTEST_SKIP() << "no fused prefill in this build";
  EXPECT_EQ(pdl_rstd_delayed(7), 0);
}
// The same with more GEMM tiles than SMs (the rstd kernel then spans the SMs the GEMM needs) and a
// delayed GEMM predecessor: the rstd kernel and the GEMM both start after it.
TEST(RacePrefill, PdlRstdDelayedManyTiles) {
  if (!fk::LinearContext::has_fused_prefill()) GTEST_SKIP() << "no fused prefill in this build";
  fk::DebugHooks h;
  h.no_join = g_no_join;
  h.delay_rstd_cycles = kDelay / 4;
  h.delay_gemm_cycles = kDelay / 4;
  h.prefill_tile = 3 + fk::LinearContext::kPrefillPdlFirst;
  EXPECT_EQ(run_loop({fk::DType::kBF16, 1100, 600, 512, 12, fk::LinearImpl::kPrefill, h}), 0);
}
// The PDL prefill behind a kernel that lets its successors launch early and writes their input
// late: the decode kernel triggers launch_dependents right after requesting its W, then computes
// and writes y1, which is the prefill's x. The prefill's rstd kernel (launched with PDL) must wait
// for it before reading x and before letting the GEMM (which reads x in its mainloop) launch; with
// --no-join neither the rstd kernel nor the GEMM waits, and this test must FAIL (y1 is poisoned
// before every step, so an early read gives NaN).
// The two calls are captured in one CUDA graph and replayed per step, so the rstd kernel is
// launched on the device right behind the decode kernel. Launched from the host one after the
// other (an earlier version of this test), the host's time between the two launches (argument
// checks, CUTLASS's initialize) could exceed the decode kernel's run time: the rstd kernel then
// started after its producer had finished, and the --no-join run passed in 1 of 4 runs on the H200.
// The producer is also made long (M = 64, K = 8192: ~16 MB of W streamed by 64 CTAs).
TEST(RacePrefill, PdlAfterEarlyTriggeringProducer) {
  if (!fk::LinearContext::has_fused_prefill()) GTEST_SKIP() << "no fused prefill in this build";
  const fk::DType dt = fk::DType::kBF16;
  const int M = 64, K1 = 8192, N1 = 1024, N2 = 384, steps = 30;
  std::vector<uint16_t> w1b, w2b, xb;
  std::vector<float> w1f, w2f, xf;
  random_half(dt, static_cast<size_t>(N1) * K1, 0, 0.05f, 0.f, 11, w1b, w1f);
  random_half(dt, static_cast<size_t>(N2) * N1, 0, 0.05f, 0.f, 12, w2b, w2f);
  DevMem x(static_cast<size_t>(M) * K1 * 2), w1(w1b.size() * 2), w2(w2b.size() * 2),
      y1(static_cast<size_t>(M) * N1 * 2), y2(static_cast<size_t>(M) * N2 * 2);
  CUDA_OK(cudaMemcpy(w1.p, w1b.data(), w1b.size() * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(w2.p, w2b.data(), w2b.size() * 2, cudaMemcpyHostToDevice));
  fk::Stream stream;
  fk::LinearContext ctx;
  fk::LinearArgs a1, a2;
  a1.dtype = dt, a1.M = M, a1.N = N1, a1.K = K1, a1.x = x.p, a1.ldx = K1, a1.w = w1.p, a1.ldw = K1,
  a1.y = y1.p, a1.ldy = N1, a1.eps = kEps;
  a2.dtype = dt, a2.M = M, a2.N = N2, a2.K = N1, a2.x = y1.p, a2.ldx = N1, a2.w = w2.p, a2.ldw = N1,
  a2.y = y2.p, a2.ldy = N2, a2.eps = kEps;
  auto enqueue = [&] {
    ctx.debug = {};
    // 64 CTAs, no split-K: all resident at once, so all trigger early (a grid larger than one wave
    // triggers only when its last CTAs start, i.e. near its end: the window closes)
    ctx.debug.decode_ksplit = 1, ctx.debug.decode_rw = 1, ctx.debug.decode_kw = 4;
    FN_OK(ctx.run(a1, fk::LinearImpl::kDecode, stream.get()));
    ctx.debug.prefill_tile = 3 + fk::LinearContext::kPrefillPdlFirst;
    ctx.debug.no_join = g_no_join;
    FN_OK(ctx.run(a2, fk::LinearImpl::kPrefill, stream.get()));
    ctx.debug = {};
  };
  enqueue();  // grows the context's workspaces before the capture
  CUDA_OK(cudaStreamSynchronize(stream.get()));
  EXPECT_EQ(ctx.last_prefill_path(), "rstd_pdl");
  cudaGraph_t g = nullptr;
  CUDA_OK(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal));
  enqueue();
  CUDA_OK(cudaStreamEndCapture(stream.get(), &g));
  fk::GraphExec graph;
  graph.set(g);
  int bad = 0;
  std::vector<double> ref(static_cast<size_t>(M) * N2);
  for (int step = 0; step < steps; ++step) {
    random_half(dt, static_cast<size_t>(M) * K1, K1, 3.f, 3.f, 500 + step, xb, xf);
    CUDA_OK(cudaMemcpyAsync(x.p, xb.data(), xb.size() * 2, cudaMemcpyHostToDevice, stream.get()));
    CUDA_OK(cudaMemsetAsync(y1.p, 0xff, y1.bytes, stream.get()));  // poison (NaN)
    CUDA_OK(cudaMemsetAsync(y2.p, 0xff, y2.bytes, stream.get()));
    graph.launch(stream.get());
    CUDA_OK(cudaStreamSynchronize(stream.get()));
    // the reference starts from the y1 the decode kernel wrote (complete after the synchronize)
    const std::vector<float> y1f = download_half(dt, y1.p, static_cast<size_t>(M) * N1);
    const std::vector<float> y2f = download_half(dt, y2.p, static_cast<size_t>(M) * N2);
    ASSERT_EQ(y2f.size(), ref.size());
    fc::flashnorm_linear(y1f.data(), w2f.data(), nullptr, nullptr, M, N2, N1, kEps, ref.data());
    const double e = fc::rel_error(y2f.data(), ref.data(), static_cast<int64_t>(ref.size()));
    if (!(e < 1e-2)) {
      if (bad < 5) ADD_FAILURE() << "step " << step << ": relative error " << e;
      ++bad;
    }
  }
  std::printf("prefill (PDL) after decode, graph-replayed: %d of %d steps wrong\n", bad, steps);
  EXPECT_EQ(bad, 0);
}
TEST(RaceDecode, SplitKReuse) {
  fk::DebugHooks h;
  h.decode_ksplit = 8;
  h.delay_gemm_cycles = kDelay / 4;
  EXPECT_EQ(run_loop({fk::DType::kBF16, 8, 512, 2048, 200, fk::LinearImpl::kDecode, h}), 0);
  h.decode_ksplit = 0;
  EXPECT_EQ(run_loop({fk::DType::kBF16, 64, 320, 1024, 100, fk::LinearImpl::kDecode, h}), 0);
}
// PDL launch: the decode kernel starts streaming W while the (delayed) preceding kernel still runs;
// it must read x and write y only after that kernel completed. Also with split-K (counters).
TEST(RaceDecode, PdlAfterDelayedKernel) {
  fk::DebugHooks h;
  h.delay_gemm_cycles = kDelay / 4;
  EXPECT_EQ(run_loop({fk::DType::kBF16, 8, 512, 2048, 100, fk::LinearImpl::kDecode, h, true}), 0);
  h.decode_ksplit = 4;
  EXPECT_EQ(run_loop({fk::DType::kBF16, 3, 200, 1000, 100, fk::LinearImpl::kDecode, h, true}), 0);
}

}  // namespace
