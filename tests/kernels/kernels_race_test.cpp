// Race tests (issue 3, flashnorm.md section 2 "The join"): a decode loop that reuses x, y and the
// context's rstd buffer across many steps, with fresh inputs each step whose row norms differ by up
// to 2^6, one producer delayed on purpose by a spin kernel, and every step compared with the fp64
// CPU reference. With --no-join the two-stream implementation skips its event join, and the
// DelayRstd test must FAIL (the post-scale then reads the previous step's rstd: "outputs from the
// past"); scripts/gpu_kernels.sh runs it that way once and records the failure.
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
TEST(RacePrefill, PdlRstdDelayed) {
  if (!fk::LinearContext::has_fused_prefill()) GTEST_SKIP() << "no fused prefill in this build";
  constexpr int kPdl = fk::LinearContext::kPrefillTiles * fk::LinearContext::kPrefillOrders;
  for (int tile : {3, 7}) {
    fk::DebugHooks h;
    h.no_join = g_no_join;
    h.delay_rstd_cycles = kDelay;
    h.prefill_tile = tile + kPdl;
    EXPECT_EQ(run_loop({fk::DType::kBF16, 96, 512, 1024, 50, fk::LinearImpl::kPrefill, h}), 0);
  }
}
// The same with more GEMM tiles than SMs (the rstd kernel then spans the SMs the GEMM needs) and a
// delayed GEMM predecessor: the rstd kernel and the GEMM both start after it.
TEST(RacePrefill, PdlRstdDelayedManyTiles) {
  if (!fk::LinearContext::has_fused_prefill()) GTEST_SKIP() << "no fused prefill in this build";
  constexpr int kPdl = fk::LinearContext::kPrefillTiles * fk::LinearContext::kPrefillOrders;
  fk::DebugHooks h;
  h.no_join = g_no_join;
  h.delay_rstd_cycles = kDelay / 4;
  h.delay_gemm_cycles = kDelay / 4;
  h.prefill_tile = 3 + kPdl;
  EXPECT_EQ(run_loop({fk::DType::kBF16, 1100, 600, 512, 12, fk::LinearImpl::kPrefill, h}), 0);
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
