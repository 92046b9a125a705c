// C ABI of the FlashNorm CUDA linear layer: y[M, N] = rstd(x) * (x[M, K] W*[N, K]^T), the deferred
// normalization of docs/design.md section 2 (W* = folded weights, rstd =
// 1 / sqrt(mean(x^2) + eps) per row of x, fp32 accumulation), for callers that cannot use the C++
// API: Python through ctypes (bench/torch_peers.py times it beside PyTorch in one process), and
// later a PyTorch extension. Built as the shared library libflashnorm_capi.so wherever nvcc exists.
//
// Every function returns FN_OK (0) or an error code; the calling thread's last error message (one
// line naming the argument or the failing CUDA/cuBLASLt call) is then fn_last_error(). Nothing
// throws across this boundary. Pointers are device pointers (16-byte aligned); dtypes and strides
// (elements, row-major) are validated as by the C++ API (flashnorm/kernels/cuda/linear.h).
//
// A context is not thread-safe, and its workspaces (prescaled x, rstd, split-K partials, cuBLASLt
// workspace) are shared by every call made with it: calls with one context must not overlap in
// time on the device, i.e. use one context per stream (and per host thread).
// CUDA graphs: a call captured into a graph keeps pointers into the context's workspaces. A later
// call that needs a larger workspace (a larger shape, fn_tune_linear) replaces it and leaves such
// graphs pointing at freed memory: compare fn_workspace_generation() before replaying.
#pragma once

#include <stdint.h>

#ifdef __cplusplus
#define FN_NOEXCEPT noexcept
extern "C" {
#else
#define FN_NOEXCEPT
#endif
#define FN_API __attribute__((visibility("default")))

typedef struct fn_context fn_context;  // a LinearContext: cuBLASLt handle, workspaces, tuning cache

enum {
  FN_OK = 0,
  FN_INVALID_ARGUMENT = 1,
  FN_UNSUPPORTED = 2,
  FN_CUDA_ERROR = 3,
  FN_CUBLAS_ERROR = 4,
  FN_INTERNAL_ERROR = 5
};
enum { FN_BF16 = 0, FN_FP16 = 1 };                                       // dtype of x, W and y
enum { FN_AUTO = 0, FN_DECODE = 1, FN_PREFILL = 2, FN_TWO_STREAM = 3 };  // LinearImpl

// Creates a context on the current CUDA device. *out is NULL on error (FN_CUDA_ERROR without a
// device or when cuBLASLt cannot start).
FN_API int fn_context_create(fn_context** out) FN_NOEXCEPT;
// Destroys a context (NULL is ignored); synchronize its streams' work first.
FN_API void fn_context_destroy(fn_context* ctx) FN_NOEXCEPT;

// y = rstd(x) * (x W^T) on `stream` (a cudaStream_t; NULL = the legacy default stream), with the
// implementation `impl` (FN_AUTO: the context's choice for the shape). Capturable into a CUDA
// graph once the shape ran eagerly: a workspace that would have to grow during capture gives
// FN_UNSUPPORTED, as does FN_DECODE with M > 64. Asynchronous: returns once the kernels are queued.
FN_API int fn_linear(fn_context* ctx, int dtype, int64_t M, int64_t N, int64_t K, const void* x,
                     int64_t ldx, const void* w, int64_t ldw, void* y, int64_t ldy, float eps,
                     int impl, void* stream) FN_NOEXCEPT;

// Tunes the shape (contiguous x [M, K], W [N, K], y [M, N]) on n argument sets, as the benchmark
// does: cuBLASLt's candidate algorithms, the decode kernel's configuration (M <= 64) and the fused
// prefill tile (when built with CUTLASS). Times graph replays on `stream`, which must be capturable
// (a created stream; NULL is refused with FN_INVALID_ARGUMENT); overwrites the y buffers; may grow
// workspaces (see CUDA graphs above); synchronizes. The results stay in the context and change what
// later calls run for this shape: the GEMM algorithm of the unfused, prescale and two-stream paths,
// the decode configuration, the fused prefill tile, and FN_AUTO's choice for 16 < M <= 64. The
// optional outputs receive each tuned time in microseconds per call, or -1 where that
// implementation was not tuned (decode for M > 64; prefill without CUTLASS).
FN_API int fn_tune_linear(fn_context* ctx, int dtype, int64_t M, int64_t N, int64_t K,
                          const void* const* x, const void* const* w, void* const* y, int n,
                          float eps, void* stream, double* gemm_us, double* decode_us,
                          double* prefill_us) FN_NOEXCEPT;

// The implementation FN_AUTO runs for this shape (no bias, no mask) in *impl. M, N, K >= 1.
FN_API int fn_choose(fn_context* ctx, int64_t M, int64_t N, int64_t K, int* impl) FN_NOEXCEPT;

// In *generation: a counter that changes whenever one of the context's workspaces was replaced;
// graphs captured before the change must be captured again.
FN_API int fn_workspace_generation(fn_context* ctx, uint64_t* generation) FN_NOEXCEPT;

// The calling thread's last error message ("" when none); valid until its next call here.
FN_API const char* fn_last_error(void) FN_NOEXCEPT;

#ifdef __cplusplus
}
#endif
