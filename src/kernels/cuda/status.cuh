// Internal: host-side helpers of the engine kernels' entry points (engine_ops.cu,
// decode_attention.cu): Status for bad arguments and for launches, pointer alignment, and the
// bf16/fp16 dispatch. Not part of the public API.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "check.h"
#include "elements.cuh"
#include "flashnorm/kernels/cuda/status.h"

namespace flashnorm::kernels::cuda::detail {

// Status of a launch: its returned error, else the last error (cleared).
inline Status launched(const char* what, cudaError_t launch_error = cudaSuccess) {
  cudaError_t e = cudaGetLastError();
  if (launch_error != cudaSuccess) e = launch_error;
  return cuda_status(e, what);
}

// f(BF16{}) or f(FP16{}) for the dtype; kInvalidArgument for any other.
template <class F>
Status by_dtype(DType dt, F&& f) {
  if (dt == DType::kBF16) return f(BF16{});
  if (dt == DType::kFP16) return f(FP16{});
  return invalid("dtype must be bf16 or fp16");
}

}  // namespace flashnorm::kernels::cuda::detail
