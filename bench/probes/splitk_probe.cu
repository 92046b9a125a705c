// Probe (not a test, not part of the library): does a split-K CUTLASS sm90 GEMM close the gap to
// cuBLAS at M = 64 and M = 512, where flashnorm's data-parallel prefill tiles leave most SMs idle
// (docs/kernels.md, round 12: M = 64 1.07-1.34x, M = 512 +5..+40 % over bare cuBLAS)?
//
// Plain y = x W^T (bf16 in, bf16 out, fp32 accumulation), no rstd: the question is only whether
// the GEMM's decomposition can match cuBLAS before any FlashNorm work is built on it. Variants:
// CUTLASS's cooperative TMA warp-specialized kernel with the stream-K tile scheduler in split-K
// mode (deterministic, in-kernel fixup; its barrier workspace zeroed by a cudaMemsetAsync inside
// the same CUDA graph, as CUTLASS's initialize() does) for tiles 128x128 and 128x64 and 1-8 splits,
// and cublasGemmEx with its default algorithm, all timed the way `flashnorm bench` times: one CUDA
// graph per variant with one call per W copy (copies rotated past the 60 MB L2), every variant's
// graph replayed in turn, 30 sweeps, each replay timed with CUDA events, the median per variant
// (microseconds per call).
// Random inputs; every CUTLASS result compared with cuBLAS's (largest relative difference).
//
// Build (not by default; CUTLASS headers from scripts/fetch_cutlass.sh):
//   cmake --build build/release --target splitk_probe
// Run: build/release/bench/probes/splitk_probe   (one line per shape, M and variant: us per call, the
// largest difference from cuBLAS's result relative to its largest |y|). A failed CUDA call throws
// (FN_CUDA_CHECK) and ends the program with its message.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cutlass/bfloat16.h>
#include <cutlass/cutlass.h>
#include <cutlass/gemm/device/gemm_universal_adapter.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cute/tensor.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/gemm/kernel/tile_scheduler.hpp>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "flashnorm/kernels/cuda/device.h"

using namespace cute;
using T = cutlass::bfloat16_t;

// Zeroes the last `words` of the split-K workspace (where CUTLASS keeps the tile barriers, after
// the partial-sum area). A FlashNorm split-K prefill would do this in its rstd kernel, which runs
// anyway; here it is a kernel node of its own, and the variant "sk1 + zero-kernel" (the same node
// in front of the data-parallel GEMM, which needs no workspace) measures what that node costs, so
// that (zero-kernel variant) - (that cost) estimates the split-K GEMM alone. (CUTLASS 4.2's
// stream-K scheduler does not compile with CUTLASS_ENABLE_GDC_FOR_SM90, so no PDL here.)
__global__ void zero_tail(uint32_t* p, int words) {
  for (int i = threadIdx.x; i < words; i += blockDim.x) p[i] = 0;
}

template <class Tile>
struct SplitKGemm {
  using RowMajor = cutlass::layout::RowMajor;
  using ColumnMajor = cutlass::layout::ColumnMajor;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Shape<_1, _1, _1>,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, RowMajor, 8, T, RowMajor,
      8, cutlass::epilogue::TmaWarpSpecializedCooperative,
      cutlass::epilogue::fusion::LinearCombination<T, float, void, float>>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, T, RowMajor, 8, T, ColumnMajor, 8, float,
      Tile, Shape<_1, _1, _1>,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename Epilogue::SharedStorage))>,
      cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue,
                                                      cutlass::gemm::StreamKScheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  static typename Gemm::Arguments args(int M, int N, int K, const T* x, const T* w, T* y,
                                       int splits, int sms) {
    typename Gemm::Arguments a{};
    a.mode = cutlass::gemm::GemmUniversalMode::kGemm;
    a.problem_shape = {M, N, K, 1};
    a.mainloop = {x, make_stride(int64_t(K), Int<1>{}, int64_t(K) * M), w,
                  make_stride(int64_t(K), Int<1>{}, int64_t(K) * N)};
    a.epilogue.thread.alpha = 1.f;
    a.epilogue.thread.beta = 0.f;
    a.epilogue.ptr_C = nullptr;
    a.epilogue.dC = make_stride(int64_t(N), Int<1>{}, int64_t(N) * M);
    a.epilogue.ptr_D = y;
    a.epilogue.dD = a.epilogue.dC;
    int dev = 0;
    cudaGetDevice(&dev);
    a.hw_info.device_id = dev;
    a.hw_info.sm_count = sms;
    using Mode =
        cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90StreamKParams::DecompositionMode;
    a.scheduler.splits = splits;
    a.scheduler.decomposition_mode = splits > 1 ? Mode::SplitK : Mode::DataParallel;
    return a;
  }
};

struct Variant {
  std::string name;
  std::vector<cudaGraph_t> graphs;
  std::vector<cudaGraphExec_t> execs;
  std::vector<float> us;
  double rel = 0;
};

static void bf16_fill(std::vector<T>& v, std::mt19937& rng, float scale) {
  std::uniform_real_distribution<float> d(-scale, scale);
  for (auto& e : v) e = T(d(rng));
}

static int probe() {
  int sms = 0;
  FN_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop{};
  FN_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s, %d SMs\n", prop.name, sms);
  struct Shape3 {
    const char* name;
    int K, N;
  };
  const Shape3 shapes[] = {{"llama32_1b_qkv", 2048, 3072}, {"llama32_1b_gateup", 2048, 16384},
                           {"llama3_8b_qkv", 4096, 6144},  {"gemma3_270m_qkv", 640, 1536},
                           {"qwen3_0p6b_qkv", 1024, 4096}, {"smollm2_135m_qkv", 576, 960}};
  const int Ms[] = {64, 512};
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("cublasCreate failed");
  cudaStream_t s;
  FN_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cublasSetStream(h, s);
  std::mt19937 rng(7);
  for (int M : Ms) {
    for (const auto& sh : shapes) {
      const int K = sh.K, N = sh.N;
      const size_t wbytes = size_t(N) * K * sizeof(T);
      const int copies = int(std::max<size_t>(2, (200u << 20) / wbytes + 1));
      std::vector<T> hx(size_t(M) * K), hw(size_t(N) * K);
      bf16_fill(hx, rng, 1.f);
      bf16_fill(hw, rng, 0.05f);
      T *x, *w, *y_ref, *y;
      FN_CUDA_CHECK(cudaMalloc(&x, hx.size() * sizeof(T)));
      FN_CUDA_CHECK(cudaMalloc(&w, wbytes * copies));
      FN_CUDA_CHECK(cudaMalloc(&y_ref, size_t(M) * N * sizeof(T)));
      FN_CUDA_CHECK(cudaMalloc(&y, size_t(M) * N * sizeof(T)));
      FN_CUDA_CHECK(cudaMemcpy(x, hx.data(), hx.size() * sizeof(T), cudaMemcpyHostToDevice));
      for (int c = 0; c < copies; ++c)
        FN_CUDA_CHECK(cudaMemcpy(reinterpret_cast<char*>(w) + c * wbytes, hw.data(), wbytes,
                                 cudaMemcpyHostToDevice));
      auto wc = [&](int c) {
        return reinterpret_cast<const T*>(reinterpret_cast<const char*>(w) + c * wbytes);
      };
      const float one = 1.f, zero = 0.f;
      auto cublas_call = [&](int c, T* out) {
        // y[M, N] row-major = (W x^T)^T: column-major D = W^T(op T of [K, N] col-major) x
        cublasStatus_t st = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one, wc(c),
                                         CUDA_R_16BF, K, x, CUDA_R_16BF, K, &zero, out, CUDA_R_16BF,
                                         N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        if (st != CUBLAS_STATUS_SUCCESS) {
          throw std::runtime_error("cublasGemmEx failed: status " + std::to_string(int(st)));
        }
      };
      cublas_call(0, y_ref);
      FN_CUDA_CHECK(cudaStreamSynchronize(s));
      std::vector<T> ref(size_t(M) * N), got(ref.size());
      FN_CUDA_CHECK(cudaMemcpy(ref.data(), y_ref, ref.size() * sizeof(T), cudaMemcpyDeviceToHost));
      double refmax = 0;
      for (auto v : ref) refmax = std::max(refmax, std::fabs(double(float(v))));

      std::vector<Variant> vars;
      std::vector<void*> workspaces;
      // one graph per variant holding one call per W copy, back to back (as `flashnorm bench`)
      auto capture = [&](Variant& v, auto&& call) {
        cudaGraph_t g;
        FN_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        for (int c = 0; c < copies; ++c) call(c);
        FN_CUDA_CHECK(cudaStreamEndCapture(s, &g));
        cudaGraphExec_t e;
        FN_CUDA_CHECK(cudaGraphInstantiate(&e, g, 0));
        v.graphs.push_back(g);
        v.execs.push_back(e);
      };
      {
        Variant v;
        v.name = "cublas";
        capture(v, [&](int c) { cublas_call(c, y); });
        vars.push_back(std::move(v));
      }
      // correctness of a variant's replayed graph (three times: the barriers are reused; the last
      // call of the graph, on copy `copies - 1`, which holds the same W)
      auto check = [&](Variant& v, size_t ws) {
        for (int r = 0; r < 3; ++r) {
          FN_CUDA_CHECK(cudaMemsetAsync(y, 0xff, size_t(M) * N * sizeof(T), s));
          FN_CUDA_CHECK(cudaGraphLaunch(v.execs[0], s));
        }
        FN_CUDA_CHECK(cudaStreamSynchronize(s));
        FN_CUDA_CHECK(cudaMemcpy(got.data(), y, got.size() * sizeof(T), cudaMemcpyDeviceToHost));
        double d = 0;
        for (size_t i = 0; i < got.size(); ++i)
          d = std::max(d, std::fabs(double(float(got[i])) - double(float(ref[i]))));
        v.rel = d / refmax;
        v.name += " ws" + std::to_string(ws >> 10) + "K";
      };
      auto add_cutlass = [&](auto tag, const char* tname, int splits) {
        using G = decltype(tag);
        typename G::Gemm gemm;
        auto a = G::args(M, N, K, x, wc(0), y, splits, sms);
        if (gemm.can_implement(a) != cutlass::Status::kSuccess) return;
        size_t ws = G::Gemm::get_workspace_size(a);
        void* wsp = nullptr;
        if (ws) FN_CUDA_CHECK(cudaMalloc(&wsp, ws));
        workspaces.push_back(wsp);
        Variant v;
        v.name = std::string(tname) + " sk" + std::to_string(splits);
        bool ok = true;
        capture(v, [&](int c) {
          auto ac = G::args(M, N, K, x, wc(c), y, splits, sms);
          if (gemm.initialize(ac, wsp, s) != cutlass::Status::kSuccess ||
              gemm.run(s) != cutlass::Status::kSuccess)
            ok = false;
        });
        if (!ok) {
          std::printf("  %s: CUTLASS refused\n", v.name.c_str());
          return;
        }
        check(v, ws);
        vars.push_back(std::move(v));
        // the same GEMM, its barriers zeroed by a kernel node instead of a memset node
        Variant z;
        z.name = std::string(tname) + " sk" + std::to_string(splits) + " zero-kernel";
        const size_t tail = std::min<size_t>(ws, 16384);
        uint32_t* tp = reinterpret_cast<uint32_t*>(static_cast<char*>(wsp) + ws - tail);
        if (!ws) {
          FN_CUDA_CHECK(cudaMalloc(&tp, 64));
          workspaces.push_back(tp);
        }
        capture(z, [&](int c) {
          auto ac = G::args(M, N, K, x, wc(c), y, splits, sms);
          auto params = G::Kernel::to_underlying_arguments(ac, wsp);
          zero_tail<<<1, 256, 0, s>>>(tp, int((ws ? tail : 64) / 4));
          FN_CUDA_CHECK(cudaGetLastError());
          if (G::Gemm::run(params, s, nullptr, false) != cutlass::Status::kSuccess) ok = false;
        });
        if (!ok) {
          std::printf("  %s: CUTLASS refused\n", z.name.c_str());
          return;
        }
        check(z, ws);
        vars.push_back(std::move(z));
      };
      for (int sp : {1, 2, 3, 4, 6, 8})
        add_cutlass(SplitKGemm<Shape<_128, _128, _64>>{}, "128x128", sp);
      for (int sp : {1, 2, 3, 4, 6, 8})
        add_cutlass(SplitKGemm<Shape<_128, _64, _64>>{}, "128x64", sp);

      cudaEvent_t e0, e1;
      FN_CUDA_CHECK(cudaEventCreate(&e0));
      FN_CUDA_CHECK(cudaEventCreate(&e1));
      // warm-up: every graph in turn for at least a second (the card's clock ramps up from idle)
      const auto t0 = std::chrono::steady_clock::now();
      while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(1000)) {
        for (auto& v : vars)
          for (auto& e : v.execs) FN_CUDA_CHECK(cudaGraphLaunch(e, s));
        FN_CUDA_CHECK(cudaStreamSynchronize(s));
      }
      const int sweeps = 30;
      for (int sw = 0; sw < sweeps; ++sw) {
        for (size_t i = 0; i < vars.size(); ++i) {
          auto& v = vars[(i + sw) % vars.size()];
          FN_CUDA_CHECK(cudaEventRecord(e0, s));
          FN_CUDA_CHECK(cudaGraphLaunch(v.execs[0], s));
          FN_CUDA_CHECK(cudaEventRecord(e1, s));
          FN_CUDA_CHECK(cudaEventSynchronize(e1));
          float ms = 0;
          FN_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
          v.us.push_back(ms * 1000.f / copies);
        }
      }
      auto median = [](std::vector<float> u) {
        std::sort(u.begin(), u.end());
        return u[u.size() / 2];
      };
      const float base = median(vars[0].us);
      std::printf("%s M=%d K=%d N=%d W %.1f MB, %d copies\n", sh.name, M, K, N, wbytes / 1e6,
                  copies);
      for (auto& v : vars) {
        const float m = median(v.us);
        std::printf("  %-24s %8.2f us  %5.2fx cublas  rel %.1e\n", v.name.c_str(), m, m / base,
                    v.rel);
      }
      std::fflush(stdout);
      for (auto& v : vars) {
        for (auto e : v.execs) cudaGraphExecDestroy(e);
        for (auto g : v.graphs) cudaGraphDestroy(g);
      }
      for (void* p : workspaces) cudaFree(p);
      cudaEventDestroy(e0);
      cudaEventDestroy(e1);
      cudaFree(x), cudaFree(w), cudaFree(y_ref), cudaFree(y);
    }
  }
  cublasDestroy(h);
  return 0;
}

int main() {
  try {
    return probe();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "splitk_probe: %s\n", e.what());
    return 1;
  }
}
