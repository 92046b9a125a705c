// The linear layer's plain cuBLASLt GEMMs: plans (layouts, heuristic algorithm) cached per shape,
// and the candidate algorithms the GEMM tuner times (cublaslt_plan.h).
#include "cublaslt_plan.h"

#include <cublasLt.h>
#include <fmt/format.h>

#include <vector>

#include "check.h"
#include "flashnorm/error.h"

namespace flashnorm::kernels::cuda::detail {

namespace {
Status lt_status(cublasStatus_t e, const char* what) {
  if (e == CUBLAS_STATUS_SUCCESS) return {};
  return {Code::kCublasError, fmt::format("{}: cuBLASLt status {}", what, static_cast<int>(e))};
}
#define FN_LT(call)                        \
  do {                                     \
    Status st_ = lt_status((call), #call); \
    if (!st_.ok()) return st_;             \
  } while (0)

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

struct LtGemm::Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool ok = false;
  int kind = -1;                                 // row-alpha layout combination (get_plan)
  cublasLtMatmulAlgo_t first{};                  // the algorithm before find_algorithms
  std::vector<cublasLtMatmulAlgo_t> candidates;  // find_algorithms
  ~Plan() {
    if (op) cublasLtMatmulDescDestroy(op);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
  }
};

LtGemm::LtGemm() {
  cublasLtHandle_t h;
  if (cublasLtCreate(&h) != CUBLAS_STATUS_SUCCESS)
    throw flashnorm::Error("LinearContext: cublasLtCreate failed");
  lt_ = h;
  const cudaError_t e = cudaMalloc(&ws_, ws_bytes_);
  if (e != cudaSuccess) {
    cublasLtDestroy(h);
    throw flashnorm::Error(
        fmt::format("LinearContext: cudaMalloc(workspace): {}", cudaGetErrorString(e)));
  }
}

LtGemm::~LtGemm() {
  plans_.clear();
  if (lt_) cublasLtDestroy(static_cast<cublasLtHandle_t>(lt_));
  cudaFree(ws_);
}

Status LtGemm::get_plan(DType dt, int64_t M, int64_t N, int64_t K, int64_t ldx, int64_t ldw,
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

Status LtGemm::gemm(DType dtype, int64_t M, int64_t N, int64_t K, const void* x, int64_t ldx,
                    const void* w, int64_t ldw, void* y, int64_t ldy, const float* alpha_rows,
                    cudaStream_t stream, bool y_f32) {
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

Status LtGemm::find_algorithms(const LinearArgs& a, int max_algos, int* count) {
  *count = 0;
  Plan* p = nullptr;
  Status st = get_plan(a.dtype, a.M, a.N, a.K, a.ldx, a.ldw, a.ldy, false, a.y_f32, &p);
  if (!st.ok()) return st;
  std::vector<cublasLtMatmulHeuristicResult_t> res;
  cublasStatus_t hs;
  st = lt_heuristics(static_cast<cublasLtHandle_t>(lt_), p->op, p->a, p->b, p->c, ws_bytes_,
                     max_algos, &res, &hs);
  if (!st.ok()) return st;
  if (res.empty())
    return {Code::kUnsupported, "tune_gemm: cuBLASLt's heuristic returned no algorithm"};
  p->first = p->algo;
  p->candidates.clear();
  for (const auto& r : res)
    if (r.state == CUBLAS_STATUS_SUCCESS && r.workspaceSize <= ws_bytes_)
      p->candidates.push_back(r.algo);
  *count = static_cast<int>(p->candidates.size());
  return {};
}

void LtGemm::use_algorithm(const LinearArgs& a, int i) {
  Plan* p = nullptr;
  if (!get_plan(a.dtype, a.M, a.N, a.K, a.ldx, a.ldw, a.ldy, false, a.y_f32, &p).ok()) return;
  p->algo = i < 0 ? p->first : p->candidates.at(i);
}

}  // namespace flashnorm::kernels::cuda::detail
