// The CUDA engine's bias add after a GEMM without one (add_bias). API:
// include/flashnorm/kernels/cuda/engine_ops.h.
#include <algorithm>

#include "engine_op.cuh"

namespace flashnorm::kernels::cuda {
namespace {

template <class E>
__global__ void add_bias_kernel(int M, int N, float* y, int64_t ldy, const typename E::T* bias) {
  pdl_begin();
  const int64_t n = static_cast<int64_t>(M) * N;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t m = e / N, j = e % N;
    y[m * ldy + j] += E::to_f(bias[j]);
  }
}

}  // namespace

Status add_bias(DType dt, int M, int N, float* y, int64_t ldy, const void* bias, cudaStream_t s,
                bool pdl) {
  if (M < 1 || N < 1 || ldy < N || !y || !bias)
    return invalid("add_bias: M, N >= 1, ldy >= N and non-null pointers");
  const int64_t n = static_cast<int64_t>(M) * N;
  const int blocks = static_cast<int>(std::min<int64_t>((n + 255) / 256, 4096));
  return by_dtype(dt, [&](auto e) {
    using E = decltype(e);
    const cudaError_t le = launch_ex(add_bias_kernel<E>, blocks, 256, 0, s, pdl, M, N, y, ldy,
                                     static_cast<const typename E::T*>(bias));
    return launched("add_bias_kernel", le);
  });
}

}  // namespace flashnorm::kernels::cuda
