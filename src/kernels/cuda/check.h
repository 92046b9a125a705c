// Internal: host-side checks shared by the kernel library's entry points: Status for bad arguments
// and for failed CUDA calls, pointer alignment, and FN_CUDA (return the Status of a failed call).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "flashnorm/kernels/cuda/status.h"

namespace flashnorm::kernels::cuda::detail {

inline Status invalid(const std::string& what) { return {Code::kInvalidArgument, what}; }

// kCudaError naming the call for e != cudaSuccess, else ok.
inline Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return {};
  return {Code::kCudaError,
          std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")"};
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace flashnorm::kernels::cuda::detail

// Returns the Status of a failed CUDA runtime call from the enclosing function.
#define FN_CUDA(call)                                                   \
  do {                                                                  \
    ::flashnorm::kernels::cuda::Status st_ =                            \
        ::flashnorm::kernels::cuda::detail::cuda_status((call), #call); \
    if (!st_.ok()) return st_;                                          \
  } while (0)
