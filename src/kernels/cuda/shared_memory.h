// Internal: the dynamic shared memory opt-in of kernels whose launches ask for sizes that vary
// (attention.cu, decode_attention.cu, quant_gemv.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace flashnorm::kernels::cuda::detail {

// Raises `kernel`'s cudaFuncAttributeMaxDynamicSharedMemorySize to at least `bytes`, never lowering
// it, under one process-wide lock. Setting it to each launch's own size raced between threads that
// launch the same kernel (two CUDA engines in one `flashnorm serve`, one per model): one thread's
// smaller setting could land between another's setting and its launch, which then failed for want
// of shared memory. Returns the runtime's error (cudaSuccess when nothing needed changing).
cudaError_t opt_in_shared_memory(const void* kernel, size_t bytes);

}  // namespace flashnorm::kernels::cuda::detail
