// The number of flashnorm_linear calls this process has executed (CPU and CUDA implementations),
// read by the op flashnorm::linear_calls() -> int. Host calls: a CUDA graph replay does not call
// the op again. Lets a test show that an integration (flashnorm.vllm) runs the op at all, also
// inside a compiled graph, where a Python-level counter would count only the trace.
#pragma once

#include <atomic>
#include <cstdint>

namespace flashnorm::torch_ops {

inline std::atomic<int64_t>& linear_call_count() {
  static std::atomic<int64_t> n{0};
  return n;
}

}  // namespace flashnorm::torch_ops
