// Device-side random fill of the kernel benchmark's inputs (bench/kernel_bench/fill_random.cu).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "flashnorm/kernels/cuda/status.h"

namespace flashnorm::bench {

// Fills n elements of dtype dt at p (device) with hash-based uniform values in [-scale, scale)
// (never all zero); row_spread > 0 multiplies row r (of length row_len) by 2^(u * row_spread),
// u in [-1, 1). Returns the launch's error.
cudaError_t fill_random(kernels::cuda::DType dt, void* p, size_t n, uint64_t seed, float scale,
                        size_t row_len, float row_spread, cudaStream_t s);

}  // namespace flashnorm::bench
