// Element types and the error reporting of the FlashNorm CUDA kernels: every entry point returns a
// Status (never throws, never aborts); throw_if_error() turns a failed Status into flashnorm::Error
// for callers that prefer exceptions. Every CUDA/cuBLAS call and every launch inside an entry point
// is checked and reported in the Status message.
#pragma once

#include <string>

namespace flashnorm::kernels::cuda {

// Element type of x, W, y, gain, residual and bias.
enum class DType { kBF16, kFP16 };

// Outcome of a kernel call. code == kOk means every launch was issued without error.
enum class Code { kOk, kInvalidArgument, kUnsupported, kCudaError, kCublasError };
struct Status {
  Code code = Code::kOk;
  std::string message;  // one line naming the argument or the failing call
  bool ok() const { return code == Code::kOk; }
};

// Throws flashnorm::Error(status.message) when !status.ok().
void throw_if_error(const Status& status);

}  // namespace flashnorm::kernels::cuda
