// `flashnorm bench`: kernel benchmark (issue 3). See kernel_bench.h.
#include "kernel_bench.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fill_random.h"
#include "flashnorm/error.h"
#include "flashnorm/kernels/cpu/reference.h"
#include "flashnorm/kernels/cuda/device.h"
#include "flashnorm/kernels/cuda/graph_timer.h"
#include "flashnorm/kernels/cuda/linear.h"
#include "flashnorm/kernels/cuda/rms_norm.h"

namespace flashnorm::bench {

using namespace kernels::cuda;  // NOLINT: the benchmark drives the kernel library's whole API
namespace cpu = kernels::cpu;

namespace {

void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(fmt::format("bench: {}: {}", what, cudaGetErrorString(e)));
}
#define CK(call) ck((call), #call)

using DevBuf = DeviceBuffer;  // device.h

using Step = std::function<void(int, cudaStream_t)>;

// Graph medians of every variant, interleaved replay by replay (graph_timer.h): every variant's n
// steps are run once eagerly (plans, workspaces: LinearContext refuses to grow one while the stream
// captures; a workspace that would grow during a capture is refused), all graphs captured, each
// replayed 3 times, then `reps` sweeps. Returns the per-replay times of each variant (microseconds
// per step); reps >= 1.
std::vector<std::vector<double>> time_graphs(
    const std::vector<std::pair<std::string, Step>>& variants, int n, int reps, cudaStream_t s) {
  if (reps < 1) throw flashnorm::Error("bench: --graph-reps must be >= 1");
  GraphTimerOptions o;
  o.warmup_steps = n, o.warm_replays = 3, o.rounds = reps;
  std::vector<std::vector<float>> ms;
  throw_if_error(time_graphs_interleaved(
      static_cast<int>(variants.size()), n,
      [&](int v, int i, cudaStream_t st) -> Status {
        variants[v].second(i, st);
        return {};
      },
      s, o, &ms));
  std::vector<std::vector<double>> times(variants.size());
  for (size_t v = 0; v < ms.size(); ++v)
    for (float t : ms[v]) times[v].push_back(t * 1e3 / n);
  return times;
}

double time_eager(const Step& step, int n, int reps, cudaStream_t s) {
  for (int i = 0; i < n; ++i) step(i, s);
  CK(cudaStreamSynchronize(s));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<double> ts;
  for (int r = 0; r < reps; ++r) {
    CK(cudaEventRecord(a, s));
    for (int i = 0; i < n; ++i) step(i, s);
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    ts.push_back(ms * 1e3 / n);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return median(ts);
}

std::vector<float> to_host_float(const void* d, size_t n) {
  std::vector<uint16_t> h(n);
  CK(cudaMemcpy(h.data(), d, n * 2, cudaMemcpyDeviceToHost));
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) f[i] = cpu::bf16_to_float(h[i]);
  return f;
}

}  // namespace

nlohmann::json run_kernel_bench(const KernelBenchOptions& opt) {
  std::string why;  // the GPU first: without one, nothing else here matters
  if (!hopper_device_available(&why))
    throw Error(fmt::format("bench: no usable NVIDIA GPU ({})", why));
  int dev = 0;
  std::error_code fec;
  if (!std::filesystem::is_regular_file(opt.shapes_path, fec))  // not a FIFO to block on
    throw Error(
        fmt::format("bench: shapes file {} is missing or not a regular file", opt.shapes_path));
  std::ifstream in(opt.shapes_path);
  if (!in) throw Error(fmt::format("bench: cannot open shapes file {}", opt.shapes_path));
  struct ShapeSpec {
    std::string name;
    int64_t K, N;
  };
  std::vector<ShapeSpec> shapes;
  std::vector<int> Ms = opt.Ms;
  try {
    const nlohmann::json spec = nlohmann::json::parse(in);
    if (Ms.empty())
      for (auto& m : spec.at("M")) Ms.push_back(m.get<int>());
    for (auto& sh : spec.at("shapes"))
      shapes.push_back(
          {sh.at("name").get<std::string>(), sh.at("K").get<int64_t>(), sh.at("N").get<int64_t>()});
  } catch (const std::exception& e) {
    throw Error(fmt::format("bench: {}: {}", opt.shapes_path, e.what()));
  }
  for (int m : Ms)
    if (m < 1 || m > 65536)
      throw Error(fmt::format("bench: {}: M = {} is outside 1 .. 65536", opt.shapes_path, m));
  for (const auto& sh : shapes)
    if (sh.K < 8 || sh.K > 65536 || sh.K % 8 || sh.N < 1 || sh.N > (1 << 20))
      throw Error(
          fmt::format("bench: {}: shape '{}': K = {} (a multiple of 8 in 8 .. 65536) or "
                      "N = {} (1 .. 2^20) out of range",
                      opt.shapes_path, sh.name, sh.K, sh.N));

  CK(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, dev));
  int drv = 0, rt = 0;
  cudaDriverGetVersion(&drv);
  cudaRuntimeGetVersion(&rt);
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  LinearContext ctx;
  const DType dt = DType::kBF16;
  const float eps = 1e-6f;

  // ---- ceilings measured in this run ----
  double copy_bw = 0, gemm_rate = 0;
  {
    const size_t bytes = 1ull << 30;
    DevBuf a(bytes), b(bytes);
    CK(cudaMemset(a.get(), 1, bytes));
    std::vector<double> ts;
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int r = 0; r < 12; ++r) {
      CK(cudaEventRecord(e0, s));
      CK(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, s));
      CK(cudaEventRecord(e1, s));
      CK(cudaEventSynchronize(e1));
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      if (r >= 2) ts.push_back(ms);
    }
    copy_bw = 2.0 * bytes / (median(ts) * 1e-3);  // bytes read + written per second
    const int64_t G = 8192;
    DevBuf x(G * G * 2), w(G * G * 2), y(G * G * 2);
    CK(fill_random(dt, x.get(), G * G, 11, 1.f, 0, 0, s));
    CK(fill_random(dt, w.get(), G * G, 12, 1.f, 0, 0, s));
    ts.clear();
    for (int r = 0; r < 12; ++r) {
      CK(cudaEventRecord(e0, s));
      throw_if_error(ctx.gemm(dt, G, G, G, x.get(), G, w.get(), G, y.get(), G, nullptr, s));
      CK(cudaEventRecord(e1, s));
      CK(cudaEventSynchronize(e1));
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      if (r >= 2) ts.push_back(ms);
    }
    gemm_rate = 2.0 * G * G * G / (median(ts) * 1e-3);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
  }
  std::printf("device %s, %d SMs, L2 %d MB; copy %.0f GB/s, bf16 GEMM %.0f TFLOP/s\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize >> 20, copy_bw / 1e9, gemm_rate / 1e12);

  nlohmann::json rows = nlohmann::json::array();
  for (const auto& sh : shapes) {
    const std::string& name = sh.name;
    if (!opt.only.empty() && std::find(opt.only.begin(), opt.only.end(), name) == opt.only.end())
      continue;
    const int64_t K = sh.K, N = sh.N;
    const size_t wbytes = static_cast<size_t>(N) * K * 2;
    const int nrot =
        static_cast<int>(std::clamp<size_t>((opt.rotate_bytes + wbytes - 1) / wbytes, 2, 64));
    std::vector<std::unique_ptr<DevBuf>> W;
    for (int i = 0; i < nrot; ++i) {
      W.push_back(std::make_unique<DevBuf>(wbytes));
      CK(fill_random(dt, W.back()->get(), N * K, 1000 + i, 0.05f, 0, 0, s));
    }
    DevBuf gain(K * 2);
    CK(fill_random(dt, gain.get(), K, 7, 0.1f, 0, 0, s));
    {  // gain = 1 + 0.1 u : use the (1 + w) form of rms_norm instead of rewriting the buffer
    }
    std::vector<float> w0;
    if (opt.check) w0 = to_host_float(W[0]->get(), static_cast<size_t>(N) * K);

    for (int M : Ms) {
      const size_t xb = static_cast<size_t>(M) * K * 2, yb = static_cast<size_t>(M) * N * 2;
      std::vector<std::unique_ptr<DevBuf>> X, Y, XN;
      for (int i = 0; i < nrot; ++i) {
        X.push_back(std::make_unique<DevBuf>(xb));
        Y.push_back(std::make_unique<DevBuf>(yb));
        XN.push_back(std::make_unique<DevBuf>(xb));
        CK(fill_random(dt, X.back()->get(), static_cast<size_t>(M) * K, 5000 + i * 131 + M, 3.f, K,
                       2.f, s));
      }
      CK(cudaStreamSynchronize(s));
      auto largs = [&](int i) {
        LinearArgs a;
        a.dtype = dt, a.M = M, a.N = N, a.K = K, a.x = X[i]->get(), a.ldx = K, a.w = W[i]->get(),
        a.ldw = K;
        a.y = Y[i]->get(), a.ldy = N, a.eps = eps;
        return a;
      };
      auto rms_args = [&](int i) {
        RmsNormArgs r;
        r.dtype = dt, r.M = M, r.K = K, r.x = X[i]->get(), r.ldx = K, r.gain = gain.get(),
        r.gain_one_plus = true;
        r.y = XN[i]->get(), r.ldy = K, r.eps = eps;
        return r;
      };
      std::vector<std::pair<std::string, Step>> variants;
      variants.push_back(
          {"rms_norm", [&](int i, cudaStream_t st) { throw_if_error(rms_norm(rms_args(i), st)); }});
      variants.push_back({"unfused", [&](int i, cudaStream_t st) {
                            throw_if_error(rms_norm(rms_args(i), st));
                            throw_if_error(ctx.gemm(dt, M, N, K, XN[i]->get(), K, W[i]->get(), K,
                                                    Y[i]->get(), N, nullptr, st));
                          }});
      variants.push_back({"bare", [&](int i, cudaStream_t st) {
                            throw_if_error(ctx.gemm(dt, M, N, K, X[i]->get(), K, W[i]->get(), K,
                                                    Y[i]->get(), N, nullptr, st));
                          }});
      // the same GEMM as `bare`, timed as a separate variant: the spread between the two is the
      // run's noise (an A/A control for every ratio in the row)
      variants.push_back({"bare_repeat", [&](int i, cudaStream_t st) {
                            throw_if_error(ctx.gemm(dt, M, N, K, X[i]->get(), K, W[i]->get(), K,
                                                    Y[i]->get(), N, nullptr, st));
                          }});
      std::vector<LinearImpl> impls = {LinearImpl::kPrefill, LinearImpl::kTwoStream};
      if (M <= 64) impls.insert(impls.begin(), LinearImpl::kDecode);
      for (LinearImpl im : impls)
        variants.push_back({std::string("fn_") + impl_name(im), [&, im](int i, cudaStream_t st) {
                              throw_if_error(ctx.run(largs(i), im, st));
                            }});
      // the fastest fused tile for this shape (tuned below, before any timing), and the same
      // kernel without its reduction and scale (a plain CUTLASS GEMM, not a flashnorm result)
      std::optional<PrefillConfig> fused_tile, pdl_tile;
      if (M >= 64 && LinearContext::has_fused_prefill()) {
        // the fastest configuration with the rstd kernel + PDL (tuned below)
        variants.push_back({"fn_prefill_pdl", [&](int i, cudaStream_t st) {
                              throw_if_error(ctx.run(largs(i), *pdl_tile, st));
                            }});
        variants.push_back({"fn_prefill_fused", [&](int i, cudaStream_t st) {
                              throw_if_error(ctx.run(largs(i), *fused_tile, st));
                            }});
        if (dt == DType::kBF16)
          variants.push_back({"cutlass_plain", [&](int i, cudaStream_t st) {
                                PrefillConfig plain = *fused_tile;
                                plain.plain_gemm = true;
                                throw_if_error(ctx.run(largs(i), plain, st));
                              }});
      }
      if (M >= 64)  // the prefill path before the fused kernel: rms_norm-style prescale + cuBLASLt
        variants.push_back({"fn_prefill_prescale", [&](int i, cudaStream_t st) {
                              throw_if_error(ctx.run(largs(i), PrefillConfig::prescale(), st));
                            }});
      if (M <=
          64)  // decode in a chain of PDL launches (each call overlaps the previous one's tail)
        variants.push_back({"fn_decode_pdl", [&](int i, cudaStream_t st) {
                              LinearArgs a = largs(i);
                              a.pdl = true;
                              throw_if_error(ctx.run(a, LinearImpl::kDecode, st));
                            }});
      if (opt.decode_sweep && M <= 64)
        for (int ks : {1, 2, 4, 8, 16, 32})
          if (ks == 1 || K / ks >= 64)
            variants.push_back({fmt::format("decode_ks{}", ks), [&, ks](int i, cudaStream_t st) {
                                  DecodeConfig c = ctx.decode_config(M, N, K);
                                  c.ks = ks;
                                  throw_if_error(ctx.run(largs(i), c, st));
                                }});

      nlohmann::json row = {{"name", name}, {"M", M},           {"K", K},
                            {"N", N},       {"rotating", nrot}, {"w_bytes", wbytes}};
      const double bytes = static_cast<double>(wbytes + xb + yb);
      row["hbm_floor_us"] = bytes / copy_bw * 1e6;
      row["tc_floor_us"] = 2.0 * M * N * K / gemm_rate * 1e6;
      row["floor_us"] =
          std::max(row["hbm_floor_us"].get<double>(), row["tc_floor_us"].get<double>());
      {  // tune on the rotating copies (graph-timed): the cuBLASLt GEMM's algorithm (bare,
         // unfused, prescale, two-stream), the decode configuration, the fused prefill tile
        std::vector<LinearArgs> sets;
        for (int i = 0; i < nrot; ++i) sets.push_back(largs(i));
        LinearContext::ShapeTuning t;
        throw_if_error(ctx.tune_shape(sets.data(), nrot, s, &t));
        row["gemm_tuned_us"] = t.gemm_us;
        row["gemm_algos_timed"] = t.gemm_algos;
        if (M <= 64) {
          row["decode_tuned_us"] = t.decode_us;
          nlohmann::json cj = nlohmann::json::array();  // every candidate: rw, kw, ks, stages, us
          for (const auto& [c, us] : t.decode_candidates)
            cj.push_back({c.rw, c.kw, c.ks, c.stages, us});
          row["decode_candidates"] = cj;
        }
        fused_tile = t.prefill_fused;
        pdl_tile = t.prefill_pdl;
        // no PDL configuration ran for this shape: nothing to time under its name
        if (!pdl_tile)
          std::erase_if(variants, [](const auto& v) { return v.first == "fn_prefill_pdl"; });
        if (t.prefill_config) {
          row["prefill_tile"] = t.prefill_config->name();
          row["prefill_tuned_us"] = t.prefill_us;
        }
      }
      const DecodeConfig dc = ctx.decode_config(M, N, K);
      row["decode_ksplit"] = dc.ks;
      row["decode_rw"] = dc.rw;
      row["decode_kw"] = dc.kw;
      row["decode_stages"] = dc.stages;
      row["auto_impl"] = std::string("fn_") + impl_name(ctx.choose(largs(0)));
      nlohmann::json vj;
      const std::vector<std::vector<double>> times = time_graphs(variants, nrot, opt.graph_reps, s);
      for (size_t vi = 0; vi < variants.size(); ++vi) {
        const std::string& vname = variants[vi].first;
        const Step& step = variants[vi].second;
        nlohmann::json v;
        std::vector<double> sorted = times[vi];
        std::sort(sorted.begin(), sorted.end());
        v["graph_us"] = median(times[vi]);
        v["graph_us_p10_p90"] = {sorted[sorted.size() / 10], sorted[sorted.size() * 9 / 10]};
        v["eager_us"] = time_eager(step, nrot, opt.eager_reps, s);
        if (vname == "fn_prefill") v["path"] = ctx.last_prefill_path();
        if (opt.check && vname.rfind("fn_", 0) == 0) {
          CK(cudaMemsetAsync(Y[0]->get(), 0xff, yb, s));  // poison (NaN in bf16)
          step(0, s);
          CK(cudaStreamSynchronize(s));
          const int rows_to_check = std::min(M, 8);
          std::vector<float> x0 = to_host_float(X[0]->get(), static_cast<size_t>(M) * K);
          std::vector<float> y0 = to_host_float(Y[0]->get(), static_cast<size_t>(M) * N);
          double worst = 0;
          for (int c = 0; c < rows_to_check; ++c) {
            const int64_t m =
                rows_to_check == 1 ? 0 : static_cast<int64_t>(c) * (M - 1) / (rows_to_check - 1);
            std::vector<double> ref(N);
            cpu::flashnorm_linear(x0.data() + m * K, w0.data(), nullptr, nullptr, 1, N, K, eps,
                                  ref.data());
            worst = std::max(worst, cpu::rel_error(y0.data() + m * N, ref.data(), N));
          }
          size_t unwritten = 0;
          for (float f : y0) unwritten += !std::isfinite(f);
          v["rel_err"] = worst;
          v["nonfinite"] = unwritten;
        }
        vj[vname] = v;
      }
      row["variants"] = vj;
      const std::string best = row["auto_impl"];
      row["flashnorm_graph_us"] = vj[best]["graph_us"];
      row["flashnorm_eager_us"] = vj[best]["eager_us"];
      std::printf(
          "%-20s M=%-5d unfused %8.2f bare %8.2f fn %8.2f (%s) 2stream %8.2f floor %7.2f | unf/fn "
          "%.2fx bare/fn %.2fx fn/floor %.2fx\n",
          name.c_str(), M, vj["unfused"]["graph_us"].get<double>(),
          vj["bare"]["graph_us"].get<double>(), row["flashnorm_graph_us"].get<double>(),
          best.c_str(), vj["fn_two_stream"]["graph_us"].get<double>(),
          row["floor_us"].get<double>(),
          vj["unfused"]["graph_us"].get<double>() / row["flashnorm_graph_us"].get<double>(),
          vj["bare"]["graph_us"].get<double>() / row["flashnorm_graph_us"].get<double>(),
          row["flashnorm_graph_us"].get<double>() / row["floor_us"].get<double>());
      if (fused_tile) row["fused_tile"] = fused_tile->name();
      if (pdl_tile) row["pdl_tile"] = pdl_tile->name();
      if (vj.contains("cutlass_plain"))
        std::printf(
            "%-20s M=%-5d   prefill choice %s; fused (%s) %8.2f pdl (%s) %8.2f cutlass_plain "
            "%8.2f prescale %8.2f\n",
            name.c_str(), M, row.value("prefill_tile", std::string("-")).c_str(),
            row.value("fused_tile", std::string("-")).c_str(),
            vj["fn_prefill_fused"]["graph_us"].get<double>(),
            row.value("pdl_tile", std::string("-")).c_str(),
            vj.contains("fn_prefill_pdl") ? vj["fn_prefill_pdl"]["graph_us"].get<double>() : NAN,
            vj["cutlass_plain"]["graph_us"].get<double>(),
            vj["fn_prefill_prescale"]["graph_us"].get<double>());
      std::fflush(stdout);
      rows.push_back(row);
    }
  }
  cudaStreamDestroy(s);
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return {{"gpu", prop.name},
          {"sms", prop.multiProcessorCount},
          {"l2_bytes", prop.l2CacheSize},
          {"driver", opt.driver},
          {"cuda_driver_api", drv},
          {"cuda_runtime", rt},
          {"commit", opt.commit},
          {"dirty", opt.dirty},
          {"date", date},
          {"dtype", "bf16"},
          {"eps", eps},
          {"copy_bw_GBs", copy_bw / 1e9},
          {"gemm_tflops", gemm_rate / 1e12},
          {"graph_reps", opt.graph_reps},
          {"eager_reps", opt.eager_reps},
          {"rows", rows}};
}

}  // namespace flashnorm::bench
