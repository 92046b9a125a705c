// Internal: the linear layer's plain GEMMs on cuBLASLt (y = x W^T, optional per-row alpha): the
// handle, a 32 MiB workspace and the cached matmul plans, one per (dtype, M, N, K, strides, row
// alpha, fp32 output). Used by LinearContext (linear_context.cpp) and its GEMM tuner
// (autotune.cpp).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "flashnorm/kernels/cuda/linear.h"

namespace flashnorm::kernels::cuda::detail {

class LtGemm {
 public:
  LtGemm();  // throws flashnorm::Error when cuBLASLt or the workspace cannot be created
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // LinearContext::gemm (linear.h): y = x W^T, or with alpha_rows (fp32 [M]) y = diag(alpha) x W^T.
  Status gemm(DType dtype, int64_t M, int64_t N, int64_t K, const void* x, int64_t ldx,
              const void* w, int64_t ldw, void* y, int64_t ldy, const float* alpha_rows,
              cudaStream_t stream, bool y_f32);
  // The plain plan (no alpha) of the GEMM that `a` describes (dtype, M, N, K, ldx, ldw, ldy,
  // y_f32): asks cuBLASLt's heuristic for up to max_algos algorithms and keeps those that succeed
  // and fit the workspace as the plan's candidates; *count receives how many.
  Status find_algorithms(const LinearArgs& a, int max_algos, int* count);
  // Makes candidate i (0 .. count - 1 of find_algorithms) the plan's algorithm; -1: the algorithm
  // the plan had before find_algorithms.
  void use_algorithm(const LinearArgs& a, int i);

 private:
  struct Plan;
  using Key = std::tuple<int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool>;
  Status get_plan(DType dt, int64_t M, int64_t N, int64_t K, int64_t ldx, int64_t ldw, int64_t ldy,
                  bool row_alpha, bool y_f32, Plan** out);
  void* lt_ = nullptr;  // cublasLtHandle_t
  void* ws_ = nullptr;  // workspace
  uint64_t ws_bytes_ = 32u << 20;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace flashnorm::kernels::cuda::detail
