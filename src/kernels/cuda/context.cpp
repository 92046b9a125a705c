// LinearContext: validation, dispatch and the three flashnorm_linear implementations; cuBLASLt
// plans. Source: shared/design/flashnorm.md section 2; issue 3.
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "flashnorm/error.h"
#include "flashnorm/kernels/cuda/kernels.h"
#include "launch.h"
#include "prefill_sm90.h"

namespace flashnorm::kernels::cuda {

namespace {
Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return {};
  return {Code::kCudaError,
          fmt::format("{}: {} ({})", what, cudaGetErrorName(e), cudaGetErrorString(e))};
}
Status lt_status(cublasStatus_t e, const char* what) {
  if (e == CUBLAS_STATUS_SUCCESS) return {};
  return {Code::kCublasError, fmt::format("{}: cuBLASLt status {}", what, static_cast<int>(e))};
}
#define FN_CUDA(call)                        \
  do {                                       \
    Status st_ = cuda_status((call), #call); \
    if (!st_.ok()) return st_;               \
  } while (0)
#define FN_LT(call)                        \
  do {                                     \
    Status st_ = lt_status((call), #call); \
    if (!st_.ok()) return st_;             \
  } while (0)

Status invalid(std::string msg) { return {Code::kInvalidArgument, std::move(msg)}; }
bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }
cudaDataType_t cuda_type(DType d) { return d == DType::kBF16 ? CUDA_R_16BF : CUDA_R_16F; }

// cuBLASLt's heuristic candidates for a matmul (D and C share layout c) within ws_bytes of
// workspace: up to `count` results in *out, resized to the number found; *heuristic_status is
// the heuristic call's status. The returned Status is an error only when the preference object
// could not be created.
Status lt_heuristics(cublasLtHandle_t lt, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a,
                     cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, uint64_t ws_bytes,
                     int count, std::vector<cublasLtMatmulHeuristicResult_t>* out,
                     cublasStatus_t* heuristic_status) {
  cublasLtMatmulPreference_t pref;
  FN_LT(cublasLtMatmulPreferenceCreate(&pref));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                       sizeof(ws_bytes));
  out->assign(count, cublasLtMatmulHeuristicResult_t{});
  int found = 0;
  *heuristic_status =
      cublasLtMatmulAlgoGetHeuristic(lt, op, a, b, c, c, pref, count, out->data(), &found);
  cublasLtMatmulPreferenceDestroy(pref);
  out->resize(*heuristic_status == CUBLAS_STATUS_SUCCESS ? found : 0);
  return {};
}
}  // namespace

void throw_if_error(const Status& s) {
  if (!s.ok()) throw flashnorm::Error(s.message);
}

const char* impl_name(LinearImpl impl) {
  switch (impl) {
    case LinearImpl::kAuto:
      return "auto";
    case LinearImpl::kDecode:
      return "decode";
    case LinearImpl::kPrefill:
      return "prefill";
    case LinearImpl::kTwoStream:
      return "two_stream";
  }
  return "?";
}

Status validate_linear(const LinearArgs& a, LinearImpl impl) {
  if (a.dtype != DType::kBF16 && a.dtype != DType::kFP16)
    return invalid("flashnorm_linear: dtype must be bf16 or fp16");
  if (a.M < 1 || a.N < 1 || a.K < 1)
    return invalid(
        fmt::format("flashnorm_linear: M={}, N={}, K={} must all be >= 1", a.M, a.N, a.K));
  if (a.M > INT32_MAX || a.N > INT32_MAX || a.K > INT32_MAX)
    return invalid("flashnorm_linear: M, N, K must fit in int32");
  if (a.K % 8 != 0)
    return invalid(fmt::format("flashnorm_linear: K={} must be a multiple of 8", a.K));
  if (!a.x || !a.w || !a.y) return invalid("flashnorm_linear: x, w and y must be non-null");
  if (a.ldx < a.K || a.ldx % 8)
    return invalid(
        fmt::format("flashnorm_linear: ldx={} must be >= K={} and a multiple of 8", a.ldx, a.K));
  if (a.ldw < a.K || a.ldw % 8)
    return invalid(
        fmt::format("flashnorm_linear: ldw={} must be >= K={} and a multiple of 8", a.ldw, a.K));
  if (a.ldy < a.N || a.ldy % 8)
    return invalid(
        fmt::format("flashnorm_linear: ldy={} must be >= N={} and a multiple of 8", a.ldy, a.N));
  if (!aligned16(a.x) || !aligned16(a.w) || !aligned16(a.y) || !aligned16(a.bias))
    return invalid("flashnorm_linear: x, w, y and bias must be 16-byte aligned");
  if (!(a.eps >= 0.f)) return invalid("flashnorm_linear: eps must be >= 0");
  if ((a.accumulate || a.x_glu) && impl != LinearImpl::kDecode)
    return {Code::kUnsupported,
            "flashnorm_linear: accumulate and x_glu exist in the decode implementation only"};
  if (a.x_glu && (a.M > 16 || a.ldx < 2 * a.K))
    return invalid(fmt::format(
        "flashnorm_linear: x_glu needs M <= 16 and ldx >= 2K (fp32 gate|up rows), got M={} ldx={}",
        a.M, a.ldx));
  if (a.accumulate && !a.y_f32) return invalid("flashnorm_linear: accumulate needs y_f32");
  if (a.y_rounded && (!a.accumulate || !aligned16(a.y_rounded)))
    return invalid("flashnorm_linear: y_rounded needs accumulate and 16-byte alignment");
  if (impl == LinearImpl::kDecode && a.M > detail::kMaxDecodeM)
    return {Code::kUnsupported,
            fmt::format("flashnorm_linear: decode implementation needs M <= {}, got M={}",
                        detail::kMaxDecodeM, a.M)};
  for (auto [p, name] : {std::pair{(const void*)a.x, "x"}, {a.w, "w"}, {(const void*)a.y, "y"}}) {
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, p) != cudaSuccess ||
        (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged)) {
      cudaGetLastError();
      return invalid(fmt::format("flashnorm_linear: {} is not a device pointer", name));
    }
  }
  return {};
}

struct LinearContext::Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool ok = false;
  int kind = -1;  // row-alpha layout combination (get_plan)
  ~Plan() {
    if (op) cublasLtMatmulDescDestroy(op);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
  }
};

LinearContext::LinearContext() {
  // The destructor does not run for a constructor that throws: release what was created first.
  try {
    init();
  } catch (...) {
    release();
    throw;
  }
}

void LinearContext::init() {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) throw flashnorm::Error("LinearContext: no CUDA device");
  cudaDeviceGetAttribute(&num_sms_, cudaDevAttrMultiProcessorCount, dev);
  cublasLtHandle_t h;
  if (cublasLtCreate(&h) != CUBLAS_STATUS_SUCCESS)
    throw flashnorm::Error("LinearContext: cublasLtCreate failed");
  lt_ = h;
  ws_bytes_ = 32u << 20;
  auto chk = [](cudaError_t e, const char* what) {
    if (e != cudaSuccess)
      throw flashnorm::Error(fmt::format("LinearContext: {}: {}", what, cudaGetErrorString(e)));
  };
  chk(cudaMalloc(&ws_, ws_bytes_), "cudaMalloc(workspace)");
  chk(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking), "cudaStreamCreate");
  chk(cudaEventCreateWithFlags(&ev_fork_, cudaEventDisableTiming), "cudaEventCreate");
  chk(cudaEventCreateWithFlags(&ev_gemm_, cudaEventDisableTiming), "cudaEventCreate");
  chk(cudaEventCreateWithFlags(&ev_rstd_, cudaEventDisableTiming), "cudaEventCreate");
  constexpr size_t kCounters = 1 << 16;
  chk(cudaMalloc(&counters_, kCounters * sizeof(unsigned)), "cudaMalloc(counters)");
  chk(cudaMemset(counters_, 0, kCounters * sizeof(unsigned)), "cudaMemset(counters)");
}

LinearContext::~LinearContext() { release(); }

void LinearContext::release() noexcept {
  plans_.clear();
  if (lt_) cublasLtDestroy(static_cast<cublasLtHandle_t>(lt_));
  cudaFree(ws_);
  cudaFree(rstd_);
  cudaFree(xs_);
  cudaFree(part_);
  cudaFree(prefill_ws_);
  cudaFree(counters_);
  if (side_) cudaStreamDestroy(side_);
  for (auto e : {ev_fork_, ev_gemm_, ev_rstd_})
    if (e) cudaEventDestroy(e);
  lt_ = nullptr, ws_ = rstd_ = xs_ = part_ = prefill_ws_ = nullptr, counters_ = nullptr;
  side_ = nullptr, ev_fork_ = ev_gemm_ = ev_rstd_ = nullptr;
}

Status LinearContext::ensure(void** buf, size_t* cap, size_t bytes, cudaStream_t s,
                             const char* what) {
  if (bytes <= *cap) return {};
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  FN_CUDA(cudaStreamIsCapturing(s, &cs));
  if (cs != cudaStreamCaptureStatusNone)
    return {Code::kUnsupported,
            fmt::format(
                "{} must grow to {} bytes during stream capture: run the shape once eagerly first",
                what, bytes)};
  FN_CUDA(cudaStreamSynchronize(s));
  FN_CUDA(cudaStreamSynchronize(side_));
  ++workspace_generation_;  // graphs captured before now point at the buffer freed here
  cudaFree(*buf);
  *buf = nullptr;
  *cap = 0;
  FN_CUDA(cudaMalloc(buf, bytes));
  *cap = bytes;
  return {};
}

Status LinearContext::get_plan(DType dt, int64_t M, int64_t N, int64_t K, int64_t ldx, int64_t ldw,
                               int64_t ldy, bool row_alpha, bool y_f32, Plan** out) {
  auto key = std::make_tuple(static_cast<int>(dt), M, N, K, ldx, ldw, ldy, row_alpha, y_f32);
  auto it = plans_.find(key);
  if (it != plans_.end()) {
    *out = it->second.get();
    return it->second->ok ? Status{}
                          : Status{Code::kUnsupported, "cuBLASLt has no algorithm for this GEMM"};
  }
  auto plan = std::make_unique<Plan>();
  Plan* p = plan.get();
  plans_[key] = std::move(plan);
  *out = p;
  const cudaDataType_t t = cuda_type(dt);
  FN_LT(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  if (!row_alpha) {
    // column-major view: D(N x M, ld ldy) = W^T(op T of K x N, ld ldw) * x(K x M, ld ldx)
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    FN_LT(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    FN_LT(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    FN_LT(cublasLtMatrixLayoutCreate(&p->a, t, K, N, ldw));
    FN_LT(cublasLtMatrixLayoutCreate(&p->b, t, K, M, ldx));
    FN_LT(cublasLtMatrixLayoutCreate(&p->c, y_f32 ? CUDA_R_32F : t, N, M, ldy));
  } else {
    // per-token alpha needs D with rows = tokens: D(M x N) in row order. Layout combinations tried
    // in turn (the first for which cuBLASLt's heuristic returns an algorithm is kept, see
    // plan_kind):
    //  0: A = x (M x K, row order), B = W (N x K, row order, op T), D row order
    //  1: A = x as column-major K x M (op T), B = W as column-major K x N (op N), D row order
    int32_t pm = CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_ZERO;
    cublasLtOrder_t row = CUBLASLT_ORDER_ROW;
    for (int kind = 0; kind < 2; ++kind) {
      if (p->op) cublasLtMatmulDescDestroy(p->op), p->op = nullptr;
      for (auto* l : {&p->a, &p->b, &p->c})
        if (*l) cublasLtMatrixLayoutDestroy(*l), *l = nullptr;
      FN_LT(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
      FN_LT(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_POINTER_MODE, &pm,
                                           sizeof(pm)));
      cublasOperation_t ta = kind == 0 ? CUBLAS_OP_N : CUBLAS_OP_T;
      cublasOperation_t tb = kind == 0 ? CUBLAS_OP_T : CUBLAS_OP_N;
      FN_LT(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
      FN_LT(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
      if (kind == 0) {
        FN_LT(cublasLtMatrixLayoutCreate(&p->a, t, M, K, ldx));
        FN_LT(cublasLtMatrixLayoutCreate(&p->b, t, N, K, ldw));
        FN_LT(cublasLtMatrixLayoutSetAttribute(p->a, CUBLASLT_MATRIX_LAYOUT_ORDER, &row,
                                               sizeof(row)));
        FN_LT(cublasLtMatrixLayoutSetAttribute(p->b, CUBLASLT_MATRIX_LAYOUT_ORDER, &row,
                                               sizeof(row)));
      } else {
        FN_LT(cublasLtMatrixLayoutCreate(&p->a, t, K, M, ldx));
        FN_LT(cublasLtMatrixLayoutCreate(&p->b, t, K, N, ldw));
      }
      FN_LT(cublasLtMatrixLayoutCreate(&p->c, t, M, N, ldy));
      FN_LT(
          cublasLtMatrixLayoutSetAttribute(p->c, CUBLASLT_MATRIX_LAYOUT_ORDER, &row, sizeof(row)));
      std::vector<cublasLtMatmulHeuristicResult_t> res;
      cublasStatus_t hs;
      Status st = lt_heuristics(static_cast<cublasLtHandle_t>(lt_), p->op, p->a, p->b, p->c,
                                ws_bytes_, 1, &res, &hs);
      if (!st.ok()) return st;
      if (!res.empty()) {
        p->algo = res[0].algo;
        p->ok = true;
        p->kind = kind;
        return {};
      }
    }
    return {Code::kUnsupported, "cuBLASLt has no per-row-alpha algorithm for this GEMM"};
  }
  std::vector<cublasLtMatmulHeuristicResult_t> res;
  cublasStatus_t hs;
  Status st = lt_heuristics(static_cast<cublasLtHandle_t>(lt_), p->op, p->a, p->b, p->c, ws_bytes_,
                            1, &res, &hs);
  if (!st.ok()) return st;
  if (res.empty())
    return {Code::kUnsupported,
            fmt::format("cuBLASLt has no algorithm for this GEMM (status {}, {} results)",
                        static_cast<int>(hs), res.size())};
  p->algo = res[0].algo;
  p->ok = true;
  return {};
}

Status LinearContext::gemm(DType dtype, int64_t M, int64_t N, int64_t K, const void* x, int64_t ldx,
                           const void* w, int64_t ldw, void* y, int64_t ldy,
                           const float* alpha_rows, cudaStream_t stream, bool y_f32) {
  if (y_f32 && alpha_rows) return invalid("gemm: fp32 output with per-row alpha is not supported");
  Plan* p = nullptr;
  Status st = get_plan(dtype, M, N, K, ldx, ldw, ldy, alpha_rows != nullptr, y_f32, &p);
  if (!st.ok()) return st;
  static const float one = 1.f, zero = 0.f;
  if (!alpha_rows) {
    FN_LT(cublasLtMatmul(static_cast<cublasLtHandle_t>(lt_), p->op, &one, w, p->a, x, p->b, &zero,
                         y, p->c, y, p->c, &p->algo, ws_, ws_bytes_, stream));
  } else {
    FN_LT(cublasLtMatmul(static_cast<cublasLtHandle_t>(lt_), p->op, alpha_rows, x, p->a, w, p->b,
                         &zero, y, p->c, y, p->c, &p->algo, ws_, ws_bytes_, stream));
  }
  return {};
}

namespace {
// K elements per CTA of the decode kernel for a split-K factor ks (whole 32-wide chunks).
int64_t decode_kchunk(int64_t K, int ks) { return ((K + ks - 1) / ks + 31) / 32 * 32; }

bool valid_decode_config(const DecodeConfig& c, int M, int K) {
  if (!(c.rw == 1 || c.rw == 2 || c.rw == 4) || c.kw < 1 || c.ks < 1) return false;
  if (c.rw * c.kw * 32 > detail::kDecodeMaxThreads) return false;
  if (detail::decode_smem_bytes(M, c.rw, c.kw) > static_cast<size_t>(detail::kDecodeMaxSmem))
    return false;
  if (!(c.stages == 0 || c.stages == 3 || c.stages == 4)) return false;
  if (c.stages > 0 && (M > 8 || detail::decode_smem_bytes(M, c.rw, c.kw, 0, c.stages) >
                                    static_cast<size_t>(detail::kDecodeMaxSmemRing)))
    return false;
  return c.ks == 1 || K / c.ks >= 32;
}
}  // namespace

Status LinearContext::set_decode_config(int64_t M, int64_t N, int64_t K, const DecodeConfig& c) {
  if (M < 1 || M > detail::kMaxDecodeM || N < 1 || K < 1 ||
      !valid_decode_config(c, static_cast<int>(M), static_cast<int>(K)))
    return invalid(
        fmt::format("set_decode_config: rw={} kw={} ks={} stages={} is not a decode "
                    "configuration for M={} N={} K={}",
                    c.rw, c.kw, c.ks, c.stages, M, N, K));
  tuned_[{detail::decode_mp(static_cast<int>(M)), N, K}] = {c, -1.0};  // not timed here
  return {};
}

DecodeConfig LinearContext::decode_config(int64_t M, int64_t N, int64_t K) const {
  DecodeConfig c;
  auto it = tuned_.find({detail::decode_mp(static_cast<int>(M)), N, K});
  if (it != tuned_.end()) {
    c = it->second.config;
  } else {
    c.rw = 1;  // the tuner picked rw = 1 on every benchmark shape (H200, 2026-11-29)
    c.kw = M <= 16 ? 8 : 4;
    const int64_t ctas = (N + 16 * c.rw - 1) / (16 * c.rw);
    const int64_t target = 2 * num_sms_;
    int64_t ks = (target + ctas - 1) / ctas;
    const int64_t max_ks = std::max<int64_t>(1, K / (32 * c.kw));  // >= 32 k per warp
    c.ks = static_cast<int>(std::clamp<int64_t>(ks, 1, std::min<int64_t>(max_ks, 8)));
  }
  if (debug.decode_ksplit > 0) c.ks = debug.decode_ksplit;
  if (debug.decode_rw > 0) c.rw = debug.decode_rw;
  if (debug.decode_kw > 0) c.kw = debug.decode_kw;
  if (debug.decode_stages >= 0) c.stages = debug.decode_stages;
  return c;
}

DecodeConfig LinearContext::tune_decode(const LinearArgs* sets, int n, cudaStream_t stream,
                                        Status* status, double* best_us,
                                        std::vector<std::pair<DecodeConfig, double>>* timings,
                                        bool ring) {
  if (n < 1) {
    if (status) *status = invalid("tune_decode: no argument sets");
    return {};
  }
  const LinearArgs& a = sets[0];
  Status st;
  for (int i = 0; i < n && st.ok(); ++i) {
    st = validate_linear(sets[i], LinearImpl::kDecode);
    if (st.ok() && (sets[i].M != a.M || sets[i].N != a.N || sets[i].K != a.K))
      st = invalid("tune_decode: argument sets differ in shape");
  }
  const DebugHooks saved = debug;
  debug.decode_ksplit = debug.decode_rw = debug.decode_kw = 0;
  debug.decode_stages = -1;
  DecodeConfig best{};
  float best_ms = 1e30f;
  const int reps = std::max(32, n);
  std::vector<DecodeConfig> cand;  // every configuration timed, and its time
  std::vector<float> cand_ms;
  for (int rw : {1, 2, 4})
    for (int kw : {2, 4, 8})
      for (int ks : {1, 2, 4, 8})
        for (int stages : {0, 3, 4}) {
          const DecodeConfig c{rw, kw, ks, stages};
          if (!st.ok() || !valid_decode_config(c, static_cast<int>(a.M), static_cast<int>(a.K)))
            continue;
          if (stages > 0 && (a.x_glu || !ring)) continue;  // GLU input: register path only
          if (ks > 1 && a.K / ks < 32 * kw) continue;      // at least one chunk per warp
          if (a.x_glu) {  // the staged GLU input must fit next to the partials
            if (detail::decode_smem_bytes(static_cast<int>(a.M), rw, kw,
                                          static_cast<int>(decode_kchunk(a.K, ks))) >
                static_cast<size_t>(detail::kDecodeMaxSmem))
              continue;
          }
          debug.decode_rw = rw, debug.decode_kw = kw, debug.decode_ksplit = ks;
          debug.decode_stages = stages;
          float ms = 1e30f;
          st = time_graph([&](const LinearArgs& x) { return run_decode(x, stream); }, sets, n, reps,
                          stream, &ms);
          if (st.ok() && timings) timings->push_back({c, ms * 1e3 / reps});
          if (st.ok()) cand.push_back(c), cand_ms.push_back(ms);
          if (st.ok() && ms < best_ms) best_ms = ms, best = c;
        }
  int w = -1;
  float w_ms = 0;
  if (st.ok())
    st = playoff(
        cand_ms, 4,
        [&](int i, const LinearArgs& x) {
          debug.decode_rw = cand[i].rw, debug.decode_kw = cand[i].kw,
          debug.decode_ksplit = cand[i].ks, debug.decode_stages = cand[i].stages;
          return run_decode(x, stream);
        },
        sets, n, reps, stream, &w, &w_ms);
  if (st.ok() && w >= 0) best_ms = w_ms, best = cand[w];
  debug = saved;
  if (status) *status = st;
  if (!st.ok()) return {};
  if (best.rw > 0) {
    tuned_[{detail::decode_mp(static_cast<int>(a.M)), a.N, a.K}] = {best, best_ms * 1e3 / reps};
  }
  if (best_us) *best_us = best_ms * 1e3 / reps;
  return best;
}

template <class Run>
Status LinearContext::time_graph(const Run& run, const LinearArgs* sets, int n, int reps,
                                 cudaStream_t stream, float* ms_out) {
  std::vector<float> med;  // one candidate, 5 replays
  const Status st = time_interleaved(
      1, [&](int, const LinearArgs& x) { return run(x); }, sets, n, reps, stream, 5, &med);
  *ms_out = med[0];
  return st;
}

Status LinearContext::time_interleaved(int count,
                                       const std::function<Status(int, const LinearArgs&)>& run,
                                       const LinearArgs* sets, int n, int reps, cudaStream_t stream,
                                       int rounds, std::vector<float>* median_ms) {
  median_ms->assign(count, 1e30f);
  std::vector<cudaGraphExec_t> graphs(count, nullptr);
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  Status st = cuda_status(cudaEventCreate(&e0), "cudaEventCreate");
  if (st.ok()) st = cuda_status(cudaEventCreate(&e1), "cudaEventCreate");
  for (int i = 0; i < count && st.ok(); ++i) {
    st = run(i, sets[0]);  // warm-up (grows workspaces if needed)
    if (st.ok()) st = cuda_status(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    if (!st.ok()) break;
    st = cuda_status(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
                     "cudaStreamBeginCapture");
    if (!st.ok()) break;
    for (int r = 0; r < reps && st.ok(); ++r) st = run(i, sets[r % n]);
    cudaGraph_t g = nullptr;
    const Status end = cuda_status(cudaStreamEndCapture(stream, &g), "cudaStreamEndCapture");
    if (st.ok()) st = end;
    if (st.ok()) st = cuda_status(cudaGraphInstantiate(&graphs[i], g, 0), "cudaGraphInstantiate");
    if (g) cudaGraphDestroy(g);
    if (st.ok()) st = cuda_status(cudaGraphLaunch(graphs[i], stream), "cudaGraphLaunch");
  }
  std::vector<std::vector<float>> times(count);
  for (int r = 0; r < rounds && st.ok(); ++r)
    for (int j = 0; j < count && st.ok(); ++j) {
      const int i = (j + r) % count;
      float t = 0;
      st = cuda_status(cudaEventRecord(e0, stream), "cudaEventRecord");
      if (st.ok()) st = cuda_status(cudaGraphLaunch(graphs[i], stream), "cudaGraphLaunch");
      if (st.ok()) st = cuda_status(cudaEventRecord(e1, stream), "cudaEventRecord");
      if (st.ok()) st = cuda_status(cudaEventSynchronize(e1), "cudaEventSynchronize");
      if (st.ok()) st = cuda_status(cudaEventElapsedTime(&t, e0, e1), "cudaEventElapsedTime");
      if (st.ok()) times[i].push_back(t);
    }
  for (int i = 0; i < count && st.ok(); ++i) {
    std::sort(times[i].begin(), times[i].end());
    (*median_ms)[i] = times[i][times[i].size() / 2];
  }
  for (cudaGraphExec_t ge : graphs)
    if (ge) cudaGraphExecDestroy(ge);
  if (e0) cudaEventDestroy(e0);
  if (e1) cudaEventDestroy(e1);
  return st;
}

Status LinearContext::playoff(const std::vector<float>& ms, int k,
                              const std::function<Status(int, const LinearArgs&)>& run,
                              const LinearArgs* sets, int n, int reps, cudaStream_t stream,
                              int* winner, float* winner_ms) {
  *winner = -1;
  std::vector<int> fin(ms.size());  // the k fastest, fastest first
  for (size_t i = 0; i < fin.size(); ++i) fin[i] = static_cast<int>(i);
  std::stable_sort(fin.begin(), fin.end(), [&](int a, int b) { return ms[a] < ms[b]; });
  if (static_cast<int>(fin.size()) > k) fin.resize(k);
  if (fin.size() < 2) return {};
  std::vector<float> med;
  const Status st = time_interleaved(
      static_cast<int>(fin.size()), [&](int i, const LinearArgs& x) { return run(fin[i], x); },
      sets, n, reps, stream, 5, &med);
  for (size_t i = 0; i < fin.size() && st.ok(); ++i)
    if (i == 0 || med[i] < *winner_ms) *winner_ms = med[i], *winner = fin[i];
  return st;
}

std::string LinearContext::prefill_tile_name(int config) {
  return detail::prefill_tile_name(config);
}
bool LinearContext::has_fused_prefill() { return detail::prefill_fused_available(); }

int LinearContext::prefill_tile(int64_t M, int64_t N, int64_t K) const {
  if (debug.prefill_tile >= kPrefillPrescale) return debug.prefill_tile;
  auto it = tuned_prefill_.find({M, N, K});
  if (it != tuned_prefill_.end()) return it->second.config;
  // Untuned: detail::prefill_default_tile (H200, 2026-11-30 measurements in docs/kernels.md).
  return detail::prefill_default_tile(static_cast<int>(M), static_cast<int>(N), static_cast<int>(K),
                                      num_sms_);
}

int LinearContext::tune_prefill(const LinearArgs* sets, int n, cudaStream_t stream, Status* status,
                                double* best_us, int* best_fused, int* best_pdl) {
  if (best_fused) *best_fused = -2;
  if (best_pdl) *best_pdl = -2;
  float fused_ms = 1e30f, inloop_ms = 1e30f, pdl_ms = 1e30f;
  Status st;
  if (n < 1) st = invalid("tune_prefill: no argument sets");
  if (st.ok() && !detail::prefill_fused_available())
    st = {Code::kUnsupported, "tune_prefill: this build has no fused prefill (CUTLASS)"};
  for (int i = 0; i < n && st.ok(); ++i) {
    st = validate_linear(sets[i], LinearImpl::kPrefill);
    if (st.ok() && (sets[i].M != sets[0].M || sets[i].N != sets[0].N || sets[i].K != sets[0].K))
      st = invalid("tune_prefill: argument sets differ in shape");
    if (st.ok() && (sets[i].bias || sets[i].scale_mask || sets[i].K > 32768))
      st = {Code::kUnsupported,
            "tune_prefill: bias, scale mask or K > 32768 take the two-stream path"};
  }
  const DebugHooks saved = debug;  // tune what production runs: no test hooks
  debug = {};
  int best = -2;
  float best_ms = 1e30f;
  const int reps = std::max(16, n);
  int fused = -2, inloop = -2, pdl = -2;
  std::vector<int> cand;  // every configuration timed, and its time
  std::vector<float> cand_ms;
  auto run_config = [&](int config, const LinearArgs& x, bool* refused) {
    return config == kPrefillPrescale ? run_prescale(x, stream)
                                      : run_prefill_fused(x, config, stream, refused);
  };
  auto try_config = [&](int config) {
    float ms = 1e30f;
    bool refused = false;
    st = time_graph([&](const LinearArgs& x) { return run_config(config, x, &refused); }, sets, n,
                    reps, stream, &ms);
    if (refused) {  // CUTLASS refuses this tile for the shape: skip it
      st = {};
      return;
    }
    if (!st.ok()) return;
    cand.push_back(config), cand_ms.push_back(ms);
    if (ms < best_ms) best_ms = ms, best = config;
    if (config >= 0 && ms < fused_ms) fused_ms = ms, fused = config;
    if (config >= kPrefillPdlFirst && ms < pdl_ms) pdl_ms = ms, pdl = config;
    if (config >= 0 && config < kPrefillPdlFirst && ms < inloop_ms) inloop_ms = ms, inloop = config;
  };
  // every tile in the default order, rstd in the mainloop and by PDL, then the other orders of
  // the fastest of those
  if (st.ok()) try_config(kPrefillPrescale);
  for (int pdl_mode = 0; pdl_mode < 2 && st.ok(); ++pdl_mode)
    for (int tile = 0; tile < detail::kPrefillTiles && st.ok(); ++tile)
      try_config(tile + pdl_mode * kPrefillPdlFirst);
  const int first = fused;
  for (int order = 1; first >= 0 && order < kPrefillOrders && st.ok(); ++order)
    try_config(first + kPrefillTiles * order);
  int w = -1;
  float w_ms = 0;
  if (st.ok())
    st = playoff(
        cand_ms, 4, [&](int i, const LinearArgs& x) { return run_config(cand[i], x, nullptr); },
        sets, n, reps, stream, &w, &w_ms);
  if (st.ok() && w >= 0) best_ms = w_ms, best = cand[w];
  if (best_fused) *best_fused = inloop;
  if (best_pdl) *best_pdl = pdl;
  debug = saved;
  if (status) *status = st;
  if (!st.ok() || best < kPrefillPrescale) return -2;
  tuned_prefill_[{sets[0].M, sets[0].N, sets[0].K}] = {best, best_ms * 1e3 / reps};
  if (best_us) *best_us = best_ms * 1e3 / reps;
  return best;
}

double LinearContext::tune_gemm(const LinearArgs* sets, int n, cudaStream_t stream, Status* status,
                                int* n_algos) {
  if (n_algos) *n_algos = 0;
  Status st;
  if (n < 1) st = invalid("tune_gemm: no argument sets");
  const LinearArgs& a = n >= 1 ? sets[0] : LinearArgs{};
  for (int i = 0; i < n && st.ok(); ++i) {
    st = validate_linear(sets[i], LinearImpl::kTwoStream);
    if (st.ok() && (sets[i].dtype != a.dtype || sets[i].M != a.M || sets[i].N != a.N ||
                    sets[i].K != a.K || sets[i].ldx != a.ldx || sets[i].ldw != a.ldw ||
                    sets[i].ldy != a.ldy || sets[i].y_f32 != a.y_f32))
      st = invalid("tune_gemm: argument sets differ in shape, strides or output type");
  }
  Plan* p = nullptr;
  if (st.ok()) st = get_plan(a.dtype, a.M, a.N, a.K, a.ldx, a.ldw, a.ldy, false, a.y_f32, &p);
  std::vector<cublasLtMatmulHeuristicResult_t> res;
  if (st.ok()) {
    cublasStatus_t hs;
    st = lt_heuristics(static_cast<cublasLtHandle_t>(lt_), p->op, p->a, p->b, p->c, ws_bytes_, 16,
                       &res, &hs);
    if (st.ok() && res.empty())
      st = {Code::kUnsupported, "tune_gemm: cuBLASLt's heuristic returned no algorithm"};
  }
  const int found = static_cast<int>(res.size());
  const cublasLtMatmulAlgo_t first = p ? p->algo : cublasLtMatmulAlgo_t{};
  cublasLtMatmulAlgo_t best = first;
  float best_ms = 1e30f;
  const int reps = std::max(16, n);
  int timed = 0;
  Status last_failure;
  std::vector<cublasLtMatmulAlgo_t> cand;  // every algorithm timed, and its time
  std::vector<float> cand_ms;
  for (int i = 0; i < found && st.ok(); ++i) {
    if (res[i].state != CUBLAS_STATUS_SUCCESS || res[i].workspaceSize > ws_bytes_) continue;
    p->algo = res[i].algo;
    float ms = 1e30f;
    const Status t = time_graph(
        [&](const LinearArgs& x) {
          return gemm(x.dtype, x.M, x.N, x.K, x.x, x.ldx, x.w, x.ldw, x.y, x.ldy, nullptr, stream,
                      x.y_f32);
        },
        sets, n, reps, stream, &ms);
    if (!t.ok()) {  // this candidate failed to run: skip it (a sticky CUDA error ends the loop)
      last_failure = t;
      if (cudaPeekAtLastError() != cudaSuccess) st = t;
      continue;
    }
    ++timed;
    cand.push_back(res[i].algo), cand_ms.push_back(ms);
    if (ms < best_ms) best_ms = ms, best = res[i].algo;
  }
  int w = -1;
  float w_ms = 0;
  if (st.ok())
    st = playoff(
        cand_ms, 3,
        [&](int i, const LinearArgs& x) {
          p->algo = cand[i];
          return gemm(x.dtype, x.M, x.N, x.K, x.x, x.ldx, x.w, x.ldw, x.y, x.ldy, nullptr, stream,
                      x.y_f32);
        },
        sets, n, reps, stream, &w, &w_ms);
  if (st.ok() && w >= 0) best_ms = w_ms, best = cand[w];
  if (st.ok() && timed == 0)
    st = last_failure.ok()
             ? Status{Code::kUnsupported, "tune_gemm: no candidate algorithm fits the workspace"}
             : last_failure;
  if (p) p->algo = st.ok() ? best : first;
  if (status) *status = st;
  if (n_algos) *n_algos = timed;
  if (!st.ok()) return -1;
  return best_ms * 1e3 / reps;
}

Status LinearContext::tune_shape(const LinearArgs* sets, int n, cudaStream_t stream,
                                 ShapeTuning* out) {
  ShapeTuning t;
  Status st;
  t.gemm_us = tune_gemm(sets, n, stream, &st, &t.gemm_algos);
  if (st.ok() && sets[0].M <= detail::kMaxDecodeM)
    tune_decode(sets, n, stream, &st, &t.decode_us, &t.decode_candidates);
  if (st.ok()) {
    double us = -1;
    t.prefill_config = tune_prefill(sets, n, stream, &st, &us, &t.prefill_fused, &t.prefill_pdl);
    if (st.ok()) t.prefill_us = us;
    if (st.code == Code::kUnsupported) st = {}, t.prefill_config = -2;
  }
  if (out) *out = std::move(t);
  return st;
}

Status LinearContext::run_prefill_fused(const LinearArgs& a, int tile, cudaStream_t s,
                                        bool* refused) {
  if (refused) *refused = false;
  if (a.bias || a.scale_mask || a.accumulate || a.x_glu) {
    if (refused) *refused = true;
    return {Code::kUnsupported,
            "flashnorm_linear: the fused prefill has no bias, scale mask or fused ops"};
  }
  const bool plain = debug.prefill_plain_gemm;
  Status st = ensure(&prefill_ws_, &prefill_ws_cap_,
                     detail::prefill_fused_workspace(a, tile, plain, num_sms_), s,
                     "fused prefill workspace");
  if (!st.ok()) return st;
  detail::PrefillRstd r;
  if (!plain && detail::prefill_mode(tile) == detail::PrefillMode::kRstdPdl) {
    // rounded up to whole 16-byte vectors: the epilogue's column broadcast may load rstd in
    // vectors of up to 4 floats, predicated on the first element's row
    st = ensure(&rstd_, &rstd_cap_, static_cast<size_t>((a.M + 3) / 4 * 4) * sizeof(float), s,
                "rstd buffer");
    if (!st.ok()) return st;
    r.rstd = static_cast<float*>(rstd_);
    r.ctas = rstd_ctas(a.M, a.N, tile);
    r.delay = debug.delay_rstd_cycles;
    r.join = !debug.no_join;
  }
  if (debug.delay_gemm_cycles > 0) FN_CUDA(detail::launch_spin(debug.delay_gemm_cycles, s));
  bool cutlass_refused = false;
  st = detail::launch_prefill_fused(a, tile, plain, num_sms_, prefill_ws_, s, &cutlass_refused, &r);
  if (refused) *refused = cutlass_refused;
  return st;
}

// CTAs of the rstd kernel behind a PDL prefill GEMM of configuration `config`: the persistent GEMM
// fills min(tiles, SMs) SMs with one CTA each, and a GEMM CTA does not fit beside an rstd CTA
// (registers), so the rstd kernel takes the SMs the GEMM leaves idle when there are at least 8
// (its GEMM CTAs then start at once); otherwise one CTA per SM at most, so that it finishes fast.
int LinearContext::rstd_ctas(int64_t M, int64_t N, int config) const {
  const detail::PrefillTileShape t = detail::prefill_tile_shape(config);
  const int64_t tiles = ((M + t.bm - 1) / t.bm) * ((N + t.bn - 1) / t.bn);
  const int64_t idle = num_sms_ - std::min<int64_t>(tiles, num_sms_);
  const int64_t warp_rows = (M + 7) / 8;  // CTAs of 8 warps, one row per warp
  if (idle >= 8) return static_cast<int>(std::min(idle, warp_rows));
  return static_cast<int>(std::min<int64_t>(num_sms_, warp_rows));
}

LinearImpl LinearContext::choose(const LinearArgs& a) {
  if (a.M <= kAutoDecodeMaxM) return LinearImpl::kDecode;
  if (!a.bias && !a.scale_mask) {
    if (a.M <= detail::kMaxDecodeM) {  // both tuned for this shape: the faster one
      const auto d = tuned_.find({detail::decode_mp(static_cast<int>(a.M)), a.N, a.K});
      const auto p = tuned_prefill_.find({a.M, a.N, a.K});
      if (d != tuned_.end() && p != tuned_prefill_.end() && d->second.us >= 0 &&
          p->second.us >= 0 && d->second.us < p->second.us)
        return LinearImpl::kDecode;
    }
    return LinearImpl::kPrefill;
  }
  return LinearImpl::kTwoStream;
}

Status LinearContext::run(const LinearArgs& a, LinearImpl impl, cudaStream_t stream) {
  if (impl == LinearImpl::kAuto) impl = choose(a);
  Status st = validate_linear(a, impl);
  if (!st.ok()) return st;
  switch (impl) {
    case LinearImpl::kDecode:
      return run_decode(a, stream);
    case LinearImpl::kPrefill:
      return run_prefill(a, stream);
    case LinearImpl::kTwoStream:
      return run_two_stream(a, stream);
    default:
      return invalid("flashnorm_linear: unknown implementation");
  }
}

Status LinearContext::run_decode(const LinearArgs& a, cudaStream_t s) {
  detail::DecodeParams p{};
  p.x = a.x, p.ldx = a.ldx, p.w = a.w, p.ldw = a.ldw, p.y = a.y, p.ldy = a.ldy;
  p.bias = a.bias, p.mask = a.scale_mask, p.y_f32 = a.y_f32 ? 1 : 0;
  p.accumulate = a.accumulate ? 1 : 0, p.y_rounded = a.y_rounded;
  p.x_glu = !a.x_glu ? 0 : (a.glu_kind == GluKind::kSwiGLU ? 1 : 2);
  p.M = static_cast<int>(a.M), p.N = static_cast<int>(a.N), p.K = static_cast<int>(a.K),
  p.eps = a.eps;
  DecodeConfig c = decode_config(a.M, a.N, a.K);
  if (a.x_glu) c.stages = 0;  // the ring path has no GLU input: same shape, register path
  if (!valid_decode_config(c, p.M, p.K))
    return invalid(
        fmt::format("flashnorm_linear: bad decode configuration rw={} kw={} ks={} "
                    "stages={}",
                    c.rw, c.kw, c.ks, c.stages));
  const int rows = 16 * c.rw;
  const int nrb = static_cast<int>((a.N + rows - 1) / rows);
  if (nrb > (1 << 16))
    return {Code::kUnsupported, "flashnorm_linear: N too large for the decode kernel"};
  int ks = c.ks;
  int kchunk = static_cast<int>(decode_kchunk(a.K, ks));
  ks = static_cast<int>((a.K + kchunk - 1) / kchunk);
  p.rw = c.rw, p.kw = c.kw, p.stages = c.stages;
  p.pdl = a.pdl ? 1 : 0;
  p.ksplit = ks, p.kchunk = kchunk, p.n_pad = nrb * rows;
  if (a.x_glu && detail::decode_smem_bytes(p.M, c.rw, c.kw, kchunk) >
                     static_cast<size_t>(detail::kDecodeMaxSmem))
    return {Code::kUnsupported,
            fmt::format("flashnorm_linear: x_glu stages M x {} elements, more than the decode "
                        "kernel's shared memory",
                        kchunk)};
  p.counters = counters_;
  if (ks > 1) {
    const int mp = detail::decode_mp(p.M);
    const size_t part_elems = static_cast<size_t>(ks) * mp * p.n_pad;
    const size_t ss_elems = static_cast<size_t>(ks) * nrb * mp;
    Status st = ensure(&part_, &part_cap_, (part_elems + ss_elems) * sizeof(float), s,
                       "decode split-K workspace");
    if (!st.ok()) return st;
    p.part = static_cast<float*>(part_);
    p.ss_part = p.part + part_elems;
  }
  if (debug.delay_gemm_cycles > 0) FN_CUDA(detail::launch_spin(debug.delay_gemm_cycles, s));
  FN_CUDA(detail::launch_decode(a.dtype, p, s));
  return {};
}

Status LinearContext::run_prefill(const LinearArgs& a, cudaStream_t s) {
  if (a.bias || a.scale_mask || a.K > 32768) {  // prescale: no per-column mask, K <= 32768
    last_prefill_path_ = "two_stream_fallback";
    return run_two_stream(a, s);
  }
  const int tile = prefill_tile(a.M, a.N, a.K);
  if (detail::prefill_fused_available() && !debug.prefill_prescale && tile >= 0) {
    bool refused = false;
    Status st = run_prefill_fused(a, tile, s, &refused);
    if (!refused) {
      if (st.ok())
        last_prefill_path_ =
            detail::prefill_mode(tile) == detail::PrefillMode::kRstdPdl ? "rstd_pdl" : "fused";
      return st;
    }  // CUTLASS refuses the shape: prescale below
  }
  return run_prescale(a, s);
}

Status LinearContext::run_prescale(const LinearArgs& a, cudaStream_t s) {
  const size_t esz = 2;
  Status st = ensure(&xs_, &xs_cap_, static_cast<size_t>(a.M) * a.K * esz, s, "prescale buffer");
  if (!st.ok()) return st;
  if (debug.delay_rstd_cycles > 0) FN_CUDA(detail::launch_spin(debug.delay_rstd_cycles, s));
  RmsNormArgs r;
  r.dtype = a.dtype, r.M = a.M, r.K = a.K, r.x = a.x, r.ldx = a.ldx, r.gain = nullptr;
  r.y = xs_, r.ldy = a.K, r.eps = a.eps;
  FN_CUDA(detail::launch_rms_norm(r, s));  // x_s = x * rstd(x), fp32 sum of squares
  if (debug.delay_gemm_cycles > 0) FN_CUDA(detail::launch_spin(debug.delay_gemm_cycles, s));
  // Join: the GEMM is stream-ordered after the prescale kernel that wrote x_s.
  st = gemm(a.dtype, a.M, a.N, a.K, xs_, a.K, a.w, a.ldw, a.y, a.ldy, nullptr, s, a.y_f32);
  if (st.ok()) last_prefill_path_ = "prescale";
  return st;
}

Status LinearContext::run_two_stream(const LinearArgs& a, cudaStream_t s) {
  Status st =
      ensure(&rstd_, &rstd_cap_, static_cast<size_t>(a.M) * sizeof(float), s, "rstd buffer");
  if (!st.ok()) return st;
  float* rstd = static_cast<float*>(rstd_);
  // fork: the side stream starts after everything already queued on s (x is ready, and the previous
  // step's post-scale has finished reading rstd)
  FN_CUDA(cudaEventRecord(ev_fork_, s));
  FN_CUDA(cudaStreamWaitEvent(side_, ev_fork_, 0));
  if (debug.delay_rstd_cycles > 0) FN_CUDA(detail::launch_spin(debug.delay_rstd_cycles, side_));
  FN_CUDA(detail::launch_rstd(a.dtype, a.M, a.K, a.x, a.ldx, a.eps, rstd, side_));
  FN_CUDA(cudaEventRecord(ev_rstd_, side_));
  if (debug.delay_gemm_cycles > 0) FN_CUDA(detail::launch_spin(debug.delay_gemm_cycles, s));
  st = gemm(a.dtype, a.M, a.N, a.K, a.x, a.ldx, a.w, a.ldw, a.y, a.ldy, nullptr, s, a.y_f32);
  if (!st.ok()) return st;
  FN_CUDA(cudaEventRecord(ev_gemm_, s));
  // the join: the post-scale waits on both producers' events
  if (!debug.no_join) {
    FN_CUDA(cudaStreamWaitEvent(s, ev_rstd_, 0));
    FN_CUDA(cudaStreamWaitEvent(s, ev_gemm_, 0));
  }
  FN_CUDA(detail::launch_postscale(a.dtype, a.M, a.N, a.y, a.ldy, rstd, a.bias, a.scale_mask, s,
                                   a.y_f32));
  return {};
}

Status rms_norm(const RmsNormArgs& a, cudaStream_t stream) {
  if (a.dtype != DType::kBF16 && a.dtype != DType::kFP16)
    return invalid("rms_norm: dtype must be bf16 or fp16");
  if (a.M < 1 || a.K < 1 || a.M > INT32_MAX)
    return invalid(fmt::format("rms_norm: M={}, K={} must be >= 1", a.M, a.K));
  if (a.K % 8 || a.K > 32768)
    return invalid(fmt::format("rms_norm: K={} must be a multiple of 8 and <= 32768", a.K));
  if (!a.x || !a.y) return invalid("rms_norm: x and y must be non-null");
  if (a.ldx < a.K || a.ldx % 8 || a.ldy < a.K || a.ldy % 8)
    return invalid(fmt::format("rms_norm: ldx={}, ldy={} must be >= K={} and multiples of 8", a.ldx,
                               a.ldy, a.K));
  if (a.residual &&
      (!a.residual_out || a.ld_res < a.K || a.ld_res % 8 || a.ld_res_out < a.K || a.ld_res_out % 8))
    return invalid("rms_norm: residual needs residual_out and strides >= K, multiples of 8");
  for (const void* p : {a.x, static_cast<const void*>(a.y), a.gain, a.residual,
                        static_cast<const void*>(a.residual_out)})
    if (!aligned16(p))
      return invalid("rms_norm: x, y, gain, residual, residual_out must be 16-byte aligned");
  if (!(a.eps >= 0.f)) return invalid("rms_norm: eps must be >= 0");
  return cuda_status(detail::launch_rms_norm(a, stream), "rms_norm launch");
}

Status row_rstd(DType dtype, int64_t M, int64_t K, const void* x, int64_t ldx, float eps,
                float* rstd, cudaStream_t stream) {
  if (M < 1 || K < 1 || K % 8 || ldx < K || ldx % 8 || !x || !rstd || !aligned16(x))
    return invalid(fmt::format("row_rstd: bad arguments M={} K={} ldx={}", M, K, ldx));
  return cuda_status(detail::launch_rstd(dtype, M, K, x, ldx, eps, rstd, stream),
                     "row_rstd launch");
}

}  // namespace flashnorm::kernels::cuda
