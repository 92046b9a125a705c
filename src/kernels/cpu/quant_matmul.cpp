#include "flashnorm/kernels/cpu/quant_matmul.h"

#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>

#include "flashnorm/error.h"
#include "flashnorm/io/dequant.h"
#include "flashnorm/kernels/cpu/blas_threads.h"
#include "quant_dot.h"

#if defined(FLASHNORM_HAVE_AVX2_KERNELS)
#include <cpuid.h>
#endif

namespace flashnorm::kernels::cpu {
namespace {

bool f32_acts(io::GgmlType t) {
  return t == io::GgmlType::F32 || t == io::GgmlType::F16 || t == io::GgmlType::BF16;
}

// Output rows per task: enough work per task to amortize scheduling, enough tasks to balance.
constexpr int kRowsPerTask = 16;
// Elements of W dequantized per tile in the prefill path (kQuantGemmRows): 16 MiB of fp32, so a
// small model's matrices are one tile each and one sgemm as large as the fp32 path's (256-row
// tiles made SmolLM2's 131-token prompt 20% slower).
constexpr size_t kTileElems = size_t(1) << 22;

// Rows [r0, r1) of w (row bytes rb) as fp32 at out: AVX2 where the type has it, else
// io::dequantize (the same floats either way).
void dequantize_rows(const QuantMatrix& w, size_t rb, int r0, int r1, float* out, bool avx2) {
  const uint8_t* src = w.data + size_t(r0) * rb;
#if defined(FLASHNORM_HAVE_AVX2_KERNELS)
  const size_t blocks =
      size_t(r1 - r0) * w.cols / io::ggml_type_traits(static_cast<uint32_t>(w.type))->block_elems;
  if (avx2 && detail::dequantize_avx2(w.type, src, blocks, out)) return;
#else
  (void)avx2;
#endif
  io::dequantize(w.type, std::span<const uint8_t>(src, size_t(r1 - r0) * rb),
                 std::span<float>(out, size_t(r1 - r0) * w.cols));
}

// The prefill path: y = x' W^T, W the parts stacked (part i's rows are columns c_i.. of y),
// dequantized a tile of rows at a time (spread over the pool, chunks of kRowsPerTask rows within
// one part; the AVX2 dequantizers when `isa` is kAvx2 or kAvx512) and each tile multiplied by
// sgemm: with OpenBLAS and a pool of several threads, each thread's share of the tile by its own
// single-threaded sgemm; otherwise one sgemm while the pool rests (q|k|v and gate|up one sgemm
// each, as in the fp32 path).
void tiled_gemm(std::span<const QuantMatrix> parts, const PreparedActs& a, float* y, int ldy,
                QuantIsa isa, ThreadPool* pool) {
  const int M = a.rows(), K = a.cols();
  int N = 0;
  for (const QuantMatrix& w : parts) N += w.rows;
  // checked available by quant_matmul_parts; kAvx512 implies AVX2 (quant_isa_available)
  const bool avx2 = isa == QuantIsa::kAvx2 || isa == QuantIsa::kAvx512;
  const int tile_rows =
      std::min(N, std::max(kRowsPerTask, static_cast<int>(kTileElems / size_t(K))));
  // With OpenBLAS and a pool of several threads, each pool thread dequantizes its share of a tile
  // and multiplies it by a single-threaded sgemm (BlasThreads), instead of the pool dequantizing
  // the tile and OpenBLAS's own threads multiplying it.
  const bool fused = pool && pool->size() > 1 && BlasThreads::available();
  std::optional<BlasThreads> one_blas_thread;
  if (fused) one_blas_thread.emplace(1);
  // kept between calls (at most kTileElems floats per calling thread): a fresh 10-16 MB vector
  // per call cost its page faults and zeroing every time
  thread_local std::vector<float> tile;
  if (tile.size() < size_t(tile_rows) * K) tile.resize(size_t(tile_rows) * K);
  float* const tile_data = tile.data();  // the caller's (a task names `tile`: its own thread's)
  struct Chunk {
    const QuantMatrix* w;
    size_t rb;
    int r0, r1, at;  // rows [r0, r1) of *w into tile row `at`
  };
  std::vector<Chunk> chunks;
  for (int n0 = 0; n0 < N; n0 += tile_rows) {
    const int nt = std::min(tile_rows, N - n0);
    chunks.clear();
    int first = 0;  // the virtual row (column of y) of the current part's row 0
    for (const QuantMatrix& w : parts) {
      const int lo = std::max(n0, first), hi = std::min(n0 + nt, first + w.rows);
      for (int r = lo; r < hi; r += kRowsPerTask) {
        chunks.push_back(
            {&w, w.row_bytes(), r - first, std::min(hi, r + kRowsPerTask) - first, r - n0});
      }
      first += w.rows;
    }
    auto task = [&](int t) {
      const Chunk& c = chunks[t];
      dequantize_rows(*c.w, c.rb, c.r0, c.r1, tile_data + size_t(c.at) * K, avx2);
    };
    const int tasks = static_cast<int>(chunks.size());
    if (fused) {
      // thread t: the chunks of its share of the tile's rows, then their sgemm (BLAS on one
      // thread): no hand-off between the pool and the BLAS library's threads
      const int T = pool->size();
      pool->run(T, [&](int t) {
        const int lo = tasks * t / T, hi = tasks * (t + 1) / T;
        if (lo == hi) return;
        for (int i = lo; i < hi; ++i) task(i);
        const Chunk& last = chunks[hi - 1];
        const int r0 = chunks[lo].at, r1 = last.at + (last.r1 - last.r0);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, r1 - r0, K, 1.0f, a.f32(), K,
                    tile_data + size_t(r0) * K, K, 0.0f, y + n0 + r0, ldy);
      });
      continue;
    }
    if (pool) {
      pool->run(tasks, task);
      pool->rest();  // the BLAS library's threads take the cores
    } else {
      for (int t = 0; t < tasks; ++t) task(t);
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, nt, K, 1.0f, a.f32(), K, tile_data, K,
                0.0f, y + n0, ldy);
  }
}

}  // namespace

bool quant_isa_available(QuantIsa isa) {
  switch (isa) {
    case QuantIsa::kScalar:
      return true;
    case QuantIsa::kAvx2: {
#if defined(FLASHNORM_HAVE_AVX2_KERNELS)
      // F16C from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports does not know "f16c"
      static const bool avx2 = [] {
        unsigned a = 0, b = 0, c = 0, d = 0;
        const bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
      }();
      return avx2;
#else
      return false;
#endif
    }
    case QuantIsa::kAvx512: {
#if defined(FLASHNORM_HAVE_AVX512_KERNELS)
      // the AVX2 functions too (its table's F32/F16/BF16, the tile dequantizers, the activation
      // quantizer); __builtin_cpu_supports reports AVX-512 only where the OS saves the ZMM state
      static const bool avx512 =
          quant_isa_available(QuantIsa::kAvx2) && __builtin_cpu_supports("avx512f") &&
          __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
          __builtin_cpu_supports("avx512dq");
      return avx512;
#else
      return false;
#endif
    }
  }
  return false;
}

QuantIsa best_quant_isa() {
  for (QuantIsa isa : {QuantIsa::kAvx512, QuantIsa::kAvx2}) {
    if (quant_isa_available(isa)) return isa;
  }
  return QuantIsa::kScalar;
}

QuantIsa chosen_quant_isa() {
  const char* env = std::getenv("FLASHNORM_CPU_ISA");
  if (env == nullptr || *env == '\0') {
    return quant_isa_available(QuantIsa::kAvx2) ? QuantIsa::kAvx2 : QuantIsa::kScalar;
  }
  for (QuantIsa isa : {QuantIsa::kScalar, QuantIsa::kAvx2, QuantIsa::kAvx512}) {
    if (std::strcmp(env, quant_isa_name(isa)) != 0) continue;
    if (!quant_isa_available(isa)) {
      throw Error(fmt::format("FLASHNORM_CPU_ISA={}: this build or CPU cannot run it", env));
    }
    return isa;
  }
  throw Error(fmt::format("FLASHNORM_CPU_ISA={} is not one of scalar, avx2, avx512", env));
}

const char* quant_isa_name(QuantIsa isa) {
  switch (isa) {
    case QuantIsa::kAvx2:
      return "avx2";
    case QuantIsa::kAvx512:
      return "avx512";
    default:
      return "scalar";
  }
}

bool quant_matmul_supported(io::GgmlType type) {
  return detail::dot_for(detail::scalar_dots(), type) != nullptr;
}

void quantize_act_row(const float* x, int k, ActBlock* out) {
  for (int b = 0; b < k / 32; ++b, x += 32, ++out) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / 32767.0f;
    // 1 / d overflows below FLT_MIN (a zero times the infinity would be NaN): such a block (amax
    // under 4e-34) quantizes to zeros
    const float id = d >= std::numeric_limits<float>::min() ? 1.0f / d : 0.0f;
    int sum = 0;
    for (int i = 0; i < 32; ++i) {
      // clamped first (fmax/fmin: a NaN becomes -32767, as AVX2 max/min and CUDA fmaxf/fminf
      // give), then rounded to nearest even; the clamp bounds are integers, so this is the rounding
      // clamped
      const float v = std::nearbyint(std::fmin(std::fmax(x[i] * id, -32767.0f), 32767.0f));
      out->qs[i] = static_cast<int16_t>(v);
      sum += out->qs[i];
    }
    out->d = d;
    out->s = d * static_cast<float>(sum);
  }
}

size_t QuantMatrix::row_bytes() const {
  const auto tr = io::ggml_type_traits(static_cast<uint32_t>(type));
  if (!tr) throw Error(fmt::format("quant_matmul: unknown weight type id {}", uint32_t(type)));
  if (cols <= 0 || cols % tr->block_elems != 0) {
    throw Error(fmt::format("quant_matmul: {} rows of {} elements are not whole blocks of {}",
                            tr->name, cols, tr->block_elems));
  }
  return size_t(cols) / tr->block_elems * tr->block_bytes;
}

void PreparedActs::prepare(const float* x, int M, int K, const float* gain,
                           const float* row_scale) {
  m_ = M;
  k_ = K;
  x_.resize(size_t(M) * K);
  for (int m = 0; m < M; ++m) {
    const float r = row_scale ? row_scale[m] : 1.0f;
    const float* xr = x + size_t(m) * K;
    float* o = &x_[size_t(m) * K];
    if (gain) {
      for (int i = 0; i < K; ++i) o[i] = xr[i] * r * gain[i];
    } else {
      for (int i = 0; i < K; ++i) o[i] = xr[i] * r;
    }
  }
  have_q_ = false;
}

const ActBlock* PreparedActs::q(int m) {
  if (!have_q_) {
    const int nb = k_ / 32;
    q_.resize(size_t(m_) * nb);
#if defined(FLASHNORM_HAVE_AVX2_KERNELS)
    if (quant_isa_available(QuantIsa::kAvx2)) {
      for (int r = 0; r < m_; ++r) {
        detail::quantize_act_row_avx2(&x_[size_t(r) * k_], k_, &q_[size_t(r) * nb]);
      }
      have_q_ = true;
      return &q_[size_t(m) * nb];
    }
#endif
    for (int r = 0; r < m_; ++r) quantize_act_row(&x_[size_t(r) * k_], k_, &q_[size_t(r) * nb]);
    have_q_ = true;
  }
  return &q_[size_t(m) * (k_ / 32)];
}

const ActBlock* PreparedActs::q_ready(int m) const { return &q_[size_t(m) * (k_ / 32)]; }

void quant_matmul(const QuantMatrix& w, PreparedActs& a, float* y, int ldy, QuantIsa isa,
                  ThreadPool* pool, int gemm_rows) {
  quant_matmul_parts(std::span<const QuantMatrix>(&w, 1), a, y, ldy, isa, pool, gemm_rows);
}

void quant_matmul_parts(std::span<const QuantMatrix> parts, PreparedActs& a, float* y, int ldy,
                        QuantIsa isa, ThreadPool* pool, int gemm_rows) {
  if (!quant_isa_available(isa)) {
    throw Error(fmt::format("quant_matmul: this CPU or build lacks {}", quant_isa_name(isa)));
  }
  const detail::QuantDots* table = &detail::scalar_dots();
#if defined(FLASHNORM_HAVE_AVX2_KERNELS)
  if (isa == QuantIsa::kAvx2) table = &detail::avx2_dots();
#endif
#if defined(FLASHNORM_HAVE_AVX512_KERNELS)
  if (isa == QuantIsa::kAvx512) table = &detail::avx512_dots();
#endif
  // One entry per part: its kernels, row bytes and first output column; checked before any work.
  struct Part {
    const QuantMatrix* w;
    detail::QuantDotFn dot;
    detail::QuantRowsFn rows;
    size_t rb;
    int col, rows_per_task, first_task;
  };
  std::vector<Part> ps;
  const int M = a.rows();
  const int threads = pool ? pool->size() : 1;
  int col = 0, tasks = 0;
  for (const QuantMatrix& w : parts) {
    const detail::QuantDotFn dot = detail::dot_for(*table, w.type);
    if (!dot) {
      throw Error(fmt::format("quant_matmul: weight type {} is not supported",
                              io::ggml_type_name(uint32_t(w.type))));
    }
    if (a.cols() != w.cols) {
      throw Error(fmt::format("quant_matmul: x has {} columns, the weight {}", a.cols(), w.cols));
    }
    detail::QuantRowsFn rows = nullptr;
#if defined(FLASHNORM_HAVE_AVX2_KERNELS)
    if (isa == QuantIsa::kAvx2) rows = detail::avx2_rows(w.type);
#endif
#if defined(FLASHNORM_HAVE_AVX512_KERNELS)
    if (isa == QuantIsa::kAvx512) rows = detail::avx512_rows(w.type);
#endif
    const size_t rb = w.row_bytes();
    // tasks of contiguous rows, doubled while under 1 MiB and at least two per thread remain:
    // each thread streams long runs of the matrix (docs/quantized.md: threads interleaving
    // short tasks read an LM head at half the speed)
    int rpt = kRowsPerTask;
    while (size_t(rpt) * rb < (1u << 20) && w.rows / (2 * rpt) >= 2 * threads) rpt *= 2;
    ps.push_back({&w, dot, rows, rb, col, rpt, tasks});
    tasks += (w.rows + rpt - 1) / rpt;
    col += w.rows;
  }
  if (M >= gemm_rows) {
    tiled_gemm(parts, a, y, ldy, isa, pool);
    return;
  }
  // quantized rows once, before the loop, when any part takes them
  bool any_q = false;
  for (const Part& p : ps) any_q = any_q || !f32_acts(p.w->type);
  if (any_q && M > 0) (void)a.q(0);
  auto task = [&](int t) {
    size_t i = ps.size() - 1;
    while (ps[i].first_task > t) --i;
    const Part& p = ps[i];
    const QuantMatrix& w = *p.w;
    const int K = w.cols;
    const int n0 = (t - p.first_task) * p.rows_per_task;
    const int n1 = std::min(w.rows, n0 + p.rows_per_task);
    const uint8_t* base = w.data + size_t(n0) * p.rb;
    const bool f32 = f32_acts(w.type);
    for (int m = 0; m < M; ++m) {
      const void* act = f32 ? static_cast<const void*>(a.f32() + size_t(m) * K)
                            : static_cast<const void*>(a.q_ready(m));
      float* yr = y + size_t(m) * ldy + p.col + n0;
      if (p.rows) {
        p.rows(base, p.rb, n1 - n0, act, K, yr);
      } else {
        const uint8_t* row = base;
        for (int n = n0; n < n1; ++n, row += p.rb) yr[n - n0] = p.dot(row, act, K);
      }
    }
  };
  if (pool) {
    pool->run(tasks, task);
  } else {
    for (int t = 0; t < tasks; ++t) task(t);
  }
}

}  // namespace flashnorm::kernels::cpu
