// C ABI of the FlashNorm CUDA linear layer: y[M, N] = rstd(x) * (x[M, K] W*[N, K]^T), the deferred
// normalization of shared/design/flashnorm.md section 2 (W* = folded weights, rstd =
// 1 / sqrt(mean(x^2) + eps) per row of x, fp32 accumulation), for callers that cannot use the C++
// API: Python through ctypes (bench/torch_peers.py times it beside PyTorch in one process), and
// later a PyTorch extension. Built as the shared library libflashnorm_capi.so wherever nvcc exists.
//
// Every function returns FN_OK (0) or an error code; the calling thread's last error message (one
// line naming the argument or the failing CUDA/cuBLASLt call) is then fn_last_error(). Nothing
// throws across this boundary. Pointers are device pointers (16-byte aligned); dtypes and strides
// (elements, row-major) are validated as by the C++ API (flashnorm/kernels/cuda/kernels.h).
#pragma once

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fn_context fn_context;  // a LinearContext: cuBLASLt handle, workspaces, tuning cache

enum {
  FN_OK = 0,
  FN_INVALID_ARGUMENT = 1,
  FN_UNSUPPORTED = 2,
  FN_CUDA_ERROR = 3,
  FN_CUBLAS_ERROR = 4,
  FN_INTERNAL_ERROR = 5
};
enum { FN_BF16 = 0, FN_FP16 = 1 };                                // dtype of x, W and y
enum { FN_AUTO = 0, FN_DECODE = 1, FN_PREFILL = 2, FN_TWO_STREAM = 3 };  // LinearImpl

// Creates a context on the current CUDA device. *out is NULL on error (FN_CUDA_ERROR without a
// device or when cuBLASLt cannot start).
int fn_context_create(fn_context** out);
// Destroys a context (NULL is ignored); synchronize its streams' work first.
void fn_context_destroy(fn_context* ctx);

// y = rstd(x) * (x W^T) on `stream` (a cudaStream_t; NULL = the legacy default stream), with the
// implementation `impl` (FN_AUTO: the context's choice for the shape). Capturable into a CUDA
// graph once the shape ran eagerly (workspaces do not grow during capture).
int fn_linear(fn_context* ctx, int dtype, int64_t M, int64_t N, int64_t K, const void* x,
              int64_t ldx, const void* w, int64_t ldw, void* y, int64_t ldy, float eps, int impl,
              void* stream);

// Tunes the shape (contiguous x [M, K], W [N, K], y [M, N]) on n argument sets, as the benchmark
// does: cuBLASLt's candidate algorithms, the decode kernel's configuration (M <= 64) and the fused
// prefill tile (when built with CUTLASS). Times graph replays on `stream`, which must be capturable
// (not the legacy default stream); overwrites the y buffers; synchronizes. The optional outputs
// receive each tuned time in microseconds per call, or -1 where that implementation was not tuned.
int fn_tune_linear(fn_context* ctx, int dtype, int64_t M, int64_t N, int64_t K,
                   const void* const* x, const void* const* w, void* const* y, int n, float eps,
                   void* stream, double* gemm_us, double* decode_us, double* prefill_us);

// The implementation FN_AUTO runs for this shape (no bias, no mask) in *impl.
int fn_choose(fn_context* ctx, int64_t M, int64_t N, int64_t K, int* impl);

// The calling thread's last error message ("" when none); valid until its next call here.
const char* fn_last_error(void);

#ifdef __cplusplus
}
#endif
