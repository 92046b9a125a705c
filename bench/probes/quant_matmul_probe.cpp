// Where the CPU engine's native decode time goes in its matmuls: every 2-D tensor of a GGUF file
// (loaded with WeightStorage::kNative) multiplied by one random row of x through quant_matmul, as
// decode does (M = 1, the integer path), in the file's tensor order so that the weights stream
// from memory as they do in a decode step. Prints, per tensor kind (name without "blk.N."), its
// type, shape and the time it took summed over the layers, then the total per "token" (one pass
// over every tensor), for a pool of 1 and of `threads` threads. Medians over `reps` passes.
// Usage: quant_matmul_probe MODEL.gguf [reps=20] [threads=2] [isa: avx512|avx2|scalar, default
// best_quant_isa()]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "flashnorm/error.h"
#include "flashnorm/io/ggml_types.h"
#include "flashnorm/kernels/cpu/quant_matmul.h"
#include "flashnorm/median.h"
#include "flashnorm/model/model.h"

namespace {
// Seconds of this thread's CPU time with a pool of 1 (what a shared machine's load does not
// change), else wall-clock seconds.
bool g_cpu_time = false;
double now() {
  if (g_cpu_time) {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

int main(int argc, char** argv) {
  using namespace flashnorm;
  namespace kc = kernels::cpu;
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.gguf [reps] [threads] [avx512|avx2|scalar]\n", argv[0]);
    return 2;
  }
  try {
    const int reps = argc > 2 ? std::atoi(argv[2]) : 20;
    const int threads = argc > 3 ? std::atoi(argv[3]) : 2;
    kc::QuantIsa isa = kc::best_quant_isa();
    if (argc > 4) {
      bool known = false;
      for (kc::QuantIsa i : {kc::QuantIsa::kScalar, kc::QuantIsa::kAvx2, kc::QuantIsa::kAvx512}) {
        if (std::strcmp(argv[4], kc::quant_isa_name(i)) == 0) isa = i, known = true;
      }
      if (!known) {
        std::fprintf(stderr, "unknown isa %s (avx512|avx2|scalar)\n", argv[4]);
        return 2;
      }
    }
    Model m = load_model(argv[1], true, WeightStorage::kNative);
    struct Item {
      std::string kind;
      kc::QuantMatrix w;
    };
    std::vector<Item> items;
    for (const auto& [name, t] : m.tensors) {
      if (t.raw.empty()) continue;
      std::string kind = name;
      if (kind.rfind("blk.", 0) == 0) kind = kind.substr(kind.find('.', 4) + 1);
      items.push_back({kind, {t.type, t.raw.data(), int(t.rows()), int(t.cols())}});
    }
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::map<int, std::vector<float>> xs;
    std::vector<float> y;
    for (const Item& it : items) {
      auto& x = xs[it.w.cols];
      if (x.empty()) {
        x.resize(it.w.cols);
        for (float& v : x) v = nd(rng);
      }
      y.resize(std::max<size_t>(y.size(), it.w.rows));
    }
    for (int th : {1, threads}) {
      kc::ThreadPool pool(th);
      g_cpu_time = th == 1;
      std::map<std::string, std::vector<double>> per_kind;
      std::vector<double> total;
      kc::PreparedActs a;
      for (int r = 0; r < reps + 1; ++r) {
        std::map<std::string, double> t_kind;
        const auto t0 = now();
        for (const Item& it : items) {
          const auto s = now();
          a.prepare(xs[it.w.cols].data(), 1, it.w.cols);
          kc::quant_matmul(it.w, a, y.data(), it.w.rows, isa, &pool);
          t_kind[it.kind] += now() - s;
        }
        const double tt = now() - t0;
        if (r == 0) continue;  // warm-up
        total.push_back(tt);
        for (const auto& [k, v] : t_kind) per_kind[k].push_back(v);
      }
      std::printf("%s, %d thread(s) (%s): per token %.3f ms (median of %d)\n",
                  kc::quant_isa_name(isa), th, th == 1 ? "CPU time" : "wall clock",
                  1e3 * median(total), reps);
      for (const auto& [k, v] : per_kind) {
        const Item& it =
            *std::find_if(items.begin(), items.end(), [&](const Item& i) { return i.kind == k; });
        size_t bytes = 0;
        int count = 0;
        for (const Item& i : items) {
          if (i.kind == k) bytes += i.w.row_bytes() * i.w.rows, ++count;
        }
        const double s = median(v);
        // the first such tensor again and again (cache-warm when it fits): compute, not memory
        std::vector<double> hot;
        a.prepare(xs[it.w.cols].data(), 1, it.w.cols);
        for (int r = 0; r < 5 * reps + 1; ++r) {
          const auto s0 = now();
          kc::quant_matmul(it.w, a, y.data(), it.w.rows, isa, &pool);
          if (r) hot.push_back(now() - s0);
        }
        const double h = median(hot);
        std::printf(
            "  %-24s %-5s %6d x %5d x%3d  %8.3f ms  %6.2f GB/s | warm %7.1f us %6.2f GB/s\n",
            k.c_str(), io::ggml_type_name(uint32_t(it.w.type)).c_str(), it.w.rows, it.w.cols, count,
            1e3 * s, bytes / s / 1e9, 1e6 * h, it.w.row_bytes() * it.w.rows / h / 1e9);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
