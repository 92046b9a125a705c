// The dynamic shared memory opt-in (shared_memory.h).
#include "shared_memory.h"

#include <map>
#include <mutex>

namespace flashnorm::kernels::cuda::detail {

cudaError_t opt_in_shared_memory(const void* kernel, size_t bytes) {
  static std::mutex mu;
  static std::map<const void*, size_t> set;  // the opt-in each kernel has
  std::lock_guard<std::mutex> lock(mu);
  size_t& have = set[kernel];
  if (bytes <= have) return cudaSuccess;
  const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(bytes));
  if (e == cudaSuccess) have = bytes;
  return e;
}

}  // namespace flashnorm::kernels::cuda::detail
