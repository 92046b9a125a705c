// Kernel lab (host code: the kernels are in the library) for quant_gemv
// (kernels/cuda/quant_gemv.h), issue "On the H200 (2)" item 2: decode (M = 1 by default) from Q4_K
// / Q6_K / Q8_0 / Q4_1 / Q5_0 blocks against the bf16 fused decode kernel (LinearContext, kDecode,
// flashnorm order) on the same weights, at the shapes of Llama-3-8B and SmolLM2-135M.
// Self-verifying: the bf16 weights are the quantized ones dequantized and rounded to bf16, and each
// quantized result must agree with the bf16 kernel's within 2e-2 of the largest output (the bf16
// rounding of the weights), or the program fails. Timing: CUDA graphs of `steps` calls, each on the
// next of enough weight copies to exceed 240 MB (past the L2: 50 MB on the H200), replayed
// interleaved (time_graphs_interleaved), medians of 7 rounds. Random data (never zeros).
// PDL 1: both kernels launched with programmatic dependent launch, as the CUDA engine launches
// them (each call's prologue then overlaps the previous call).
// Split-K: where quant_gemv splits K across a cluster (`split` > 1, quant_gemv_split), the same
// GEMV with whole rows per CTA (QuantGemvArgs::split_k = false) is verified and timed as a third
// interleaved variant: `whole_rows_us`, and `split_speedup` = whole_rows_us / quant_us (1 and
// quant_us where K is not split).
//   quant_gemv_bench [M] [PDL]   one JSON line per shape on stdout
// Environment (for profilers): QGEMV_SHAPES, only the shapes whose name contains it (e.g.
// "8b down"); QGEMV_TYPES, only these formats (e.g. "q4_k,q6_k"); empty: unset. Exit status 1
// when they select nothing.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "device_buffer.h"
#include "flashnorm/io/dequant.h"
#include "flashnorm/kernels/cpu/reference.h"
#include "flashnorm/kernels/cuda/graph_timer.h"
#include "flashnorm/kernels/cuda/linear.h"
#include "flashnorm/kernels/cuda/quant_gemv.h"
#include "flashnorm/kernels/cuda/quant_layout.h"
#include "random_quant_blocks.h"

namespace fk = flashnorm::kernels::cuda;
namespace fc = flashnorm::kernels::cpu;
namespace io = flashnorm::io;

namespace {

io::GgmlType ggml(fk::QuantType t) { return fk::ggml_type(t); }
const char* name(fk::QuantType t) {
  const char* names[] = {"q4_0", "q4_1", "q5_0", "q8_0", "q4_k", "q6_k"};
  return names[static_cast<int>(t)];
}

}  // namespace

int main(int argc, char** argv) {
  const int M = argc > 1 ? std::atoi(argv[1]) : 1;
  const bool pdl = argc > 2 && std::atoi(argv[2]) != 0;
  CHECK(M >= 1 && M <= 8);
  struct Shape {
    const char* what;
    int N, K;
  };
  const Shape shapes[] = {{"llama3-8b q|k|v", 6144, 4096},    {"llama3-8b o", 4096, 4096},
                          {"llama3-8b gate|up", 28672, 4096}, {"llama3-8b down", 4096, 14336},
                          {"smollm2 q|k|v", 960, 576},        {"smollm2 gate|up", 3072, 576},
                          {"smollm2 down", 576, 1536}};
  const fk::QuantType types[] = {fk::QuantType::kQ4_K, fk::QuantType::kQ6_K, fk::QuantType::kQ8_0,
                                 fk::QuantType::kQ4_1, fk::QuantType::kQ5_0};
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s) == cudaSuccess);
  fk::LinearContext ctx;
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0) == cudaSuccess);
  std::mt19937 rng(1234);
  auto env = [](const char* n) -> const char* {
    const char* v = std::getenv(n);
    return v && *v ? v : nullptr;
  };
  const char* only_shapes = env("QGEMV_SHAPES");
  const char* only_types = env("QGEMV_TYPES");
  int ran = 0;
  for (const Shape& sh : shapes) {
    if (only_shapes && !std::strstr(sh.what, only_shapes)) continue;
    for (fk::QuantType t : types) {
      if (sh.K % fk::quant_block_elems(t)) continue;
      if (only_types && std::string(only_types).find(name(t)) == std::string::npos) continue;
      ++ran;
      if (fk::quant_gemv_shared_bytes(M, sh.K) > fk::kQuantGemvMaxSharedBytes) {
        // a shape quant_gemv refuses (its staged x over the shared-memory limit) is reported
        std::printf(
            "{\"gpu\": \"%s\", \"shape\": \"%s\", \"M\": %d, \"N\": %d, \"K\": %d, "
            "\"type\": \"%s\", \"skipped\": \"%zu bytes of staged x exceed %zu\"}\n",
            prop.name, sh.what, M, sh.N, sh.K, name(t), fk::quant_gemv_shared_bytes(M, sh.K),
            fk::kQuantGemvMaxSharedBytes);
        continue;
      }
      const std::vector<uint8_t> wq = flashnorm::testing::random_quant_blocks(t, sh.N, sh.K, rng);
      std::vector<float> wf(static_cast<size_t>(sh.N) * sh.K);
      io::dequantize(ggml(t), wq, wf);
      std::vector<uint16_t> wb(wf.size()), xb(static_cast<size_t>(M) * sh.K);
      for (size_t i = 0; i < wf.size(); ++i) wb[i] = fc::float_to_bf16(wf[i]);
      std::uniform_real_distribution<float> u(-1.f, 1.f);
      for (auto& v : xb) v = fc::float_to_bf16(u(rng));
      // the device layout (kernels/cuda/quant_layout.h); copies 256-byte aligned
      const std::vector<uint8_t> wp = fk::to_device_layout(t, wq);
      const size_t qbytes = (wp.size() + 255) / 256 * 256, bbytes = wb.size() * 2;
      const int copies_b = static_cast<int>(std::min<size_t>(512, (240u << 20) / bbytes + 2));
      const int copies_q = static_cast<int>(std::min<size_t>(512, (240u << 20) / qbytes + 2));
      const int steps = std::max(copies_b, copies_q);
      Dev dqw(qbytes * copies_q), dbw(bbytes * copies_b), dx(xb.size() * 2),
          dy(static_cast<size_t>(M) * sh.N * 4 * 3);
      for (int c = 0; c < copies_q; ++c)
        CHECK(cudaMemcpy(static_cast<char*>(dqw.p) + c * qbytes, wp.data(), wp.size(),
                         cudaMemcpyHostToDevice) == cudaSuccess);
      for (int c = 0; c < copies_b; ++c)
        CHECK(cudaMemcpy(static_cast<char*>(dbw.p) + c * bbytes, wb.data(), bbytes,
                         cudaMemcpyHostToDevice) == cudaSuccess);
      CHECK(cudaMemcpy(dx.p, xb.data(), xb.size() * 2, cudaMemcpyHostToDevice) == cudaSuccess);
      float* yq = static_cast<float*>(dy.p);
      float* yb = yq + static_cast<size_t>(M) * sh.N;
      float* yw = yb + static_cast<size_t>(M) * sh.N;
      // where quant_gemv splits K (quant_gemv_split > 1), the same GEMV with whole rows per CTA
      // (QuantGemvArgs::split_k = false) is timed beside it as a third variant
      const int split = fk::quant_gemv_split(t, M, sh.N, sh.K, pdl);
      auto call = [&](int variant, int step, cudaStream_t st) -> fk::Status {
        if (variant == 0) {
          fk::LinearArgs a;
          a.M = M, a.N = sh.N, a.K = sh.K, a.x = dx.p, a.ldx = sh.K;
          a.w = static_cast<char*>(dbw.p) + (step % copies_b) * bbytes, a.ldw = sh.K;
          a.y = yb, a.ldy = sh.N, a.y_f32 = true, a.pdl = pdl;
          return ctx.run(a, fk::LinearImpl::kDecode, st);
        }
        fk::QuantGemvArgs a;
        a.type = t, a.M = M, a.N = sh.N, a.K = sh.K, a.x = dx.p, a.ldx = sh.K;
        a.w = static_cast<char*>(dqw.p) + (step % copies_q) * qbytes;
        a.y = variant == 1 ? yq : yw, a.ldy = sh.N, a.pdl = pdl;
        a.split_k = variant == 1;  // variant 2: whole rows where quant_gemv splits K
        return fk::quant_gemv(a, st);
      };
      {  // tune the bf16 kernel for the shape on rotating weight copies, then verify once
        std::vector<fk::LinearArgs> sets(std::min(copies_b, 8));
        for (size_t c = 0; c < sets.size(); ++c) {
          fk::LinearArgs& a = sets[c];
          a.M = M, a.N = sh.N, a.K = sh.K, a.x = dx.p, a.ldx = sh.K, a.ldw = sh.K;
          a.w = static_cast<char*>(dbw.p) + c * bbytes;
          a.y = yb, a.ldy = sh.N, a.y_f32 = true;
        }
        fk::Status st;
        ctx.tune_decode(sets.data(), static_cast<int>(sets.size()), s, &st);
        CHECK(st.ok());
      }
      CHECK(call(0, 0, s).ok() && call(1, 0, s).ok() && (split == 1 || call(2, 0, s).ok()));
      CHECK(cudaStreamSynchronize(s) == cudaSuccess);
      std::vector<float> hq(static_cast<size_t>(M) * sh.N), hb(hq.size()), hw(hq.size());
      CHECK(cudaMemcpy(hq.data(), yq, hq.size() * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
      CHECK(cudaMemcpy(hb.data(), yb, hb.size() * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
      CHECK(cudaMemcpy(hw.data(), yw, hw.size() * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
      double worst = 0, mx = 0, worst_w = 0;
      for (size_t i = 0; i < hq.size(); ++i) {
        worst = std::max(worst, double(std::fabs(hq[i] - hb[i])));
        mx = std::max(mx, double(std::fabs(hb[i])));
        if (split > 1) worst_w = std::max(worst_w, double(std::fabs(hw[i] - hb[i])));
      }
      const double rel = mx > 0 ? worst / mx : 1, rel_w = mx > 0 ? worst_w / mx : 1;
      if (!(rel <= 2e-2) || !(rel_w <= 2e-2)) {
        std::fprintf(stderr,
                     "%s %s: quant_gemv (split %d: %.3g; whole rows: %.3g of the largest output) "
                     "and bf16 disagree\n",
                     sh.what, name(t), split, rel, rel_w);
        return 1;
      }
      std::vector<std::vector<float>> ms;
      fk::GraphTimerOptions opt;
      opt.rounds = 7;
      CHECK(fk::time_graphs_interleaved(split > 1 ? 3 : 2, steps, call, s, opt, &ms).ok());
      const double us_b = fk::median(ms[0]) * 1e3 / steps, us_q = fk::median(ms[1]) * 1e3 / steps;
      const double us_w = split > 1 ? fk::median(ms[2]) * 1e3 / steps : us_q;
      std::printf(
          "{\"gpu\": \"%s\", \"shape\": \"%s\", \"M\": %d, \"N\": %d, \"K\": %d, \"type\": \"%s\", "
          "\"bf16_us\": %.3f, \"quant_us\": %.3f, \"speedup\": %.3f, \"bf16_GBps\": %.0f, "
          "\"quant_GBps\": %.0f, \"max_rel_diff\": %.2e, \"steps\": %d, \"pdl\": %s, "
          "\"split\": %d, \"whole_rows_us\": %.3f, \"split_speedup\": %.3f}\n",
          prop.name, sh.what, M, sh.N, sh.K, name(t), us_b, us_q, us_b / us_q, bbytes / us_b / 1e3,
          qbytes / us_q / 1e3, rel, steps, pdl ? "true" : "false", split, us_w, us_w / us_q);
      std::fflush(stdout);
    }
  }
  cudaStreamDestroy(s);
  if (ran == 0) std::fprintf(stderr, "QGEMV_SHAPES / QGEMV_TYPES select no shape and format\n");
  return ran > 0 ? 0 : 1;
}
