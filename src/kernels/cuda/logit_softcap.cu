// The CUDA engine's final logit soft-capping (softcap_logits). API:
// include/flashnorm/kernels/cuda/engine_ops.h.
#include <algorithm>
#include <cmath>

#include "engine_op.cuh"

namespace flashnorm::kernels::cuda {
namespace {

// y[m, j] = cap * tanh(y[m, j] / cap): IEEE division and tanhf (no fast-math intrinsics), in
// transformers' order (divide, tanh, multiply).
__global__ void softcap_logits_kernel(int M, int N, float* y, int64_t ldy, float cap) {
  pdl_begin();
  const int64_t n = static_cast<int64_t>(M) * N;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float& v = y[e / N * ldy + e % N];
    v = tanhf(v / cap) * cap;
  }
}

}  // namespace

Status softcap_logits(int M, int N, float* y, int64_t ldy, float cap, cudaStream_t s, bool pdl) {
  if (M < 1 || N < 1 || ldy < N || !y)
    return invalid("softcap_logits: M, N >= 1, ldy >= N and a non-null y");
  if (!(std::isfinite(cap) && cap > 0)) return invalid("softcap_logits: cap positive and finite");
  const int64_t n = static_cast<int64_t>(M) * N;
  const int blocks = static_cast<int>(std::min<int64_t>((n + 255) / 256, 4096));
  const cudaError_t le =
      launch_ex(softcap_logits_kernel, blocks, 256, 0, s, pdl, M, N, y, ldy, cap);
  return launched("softcap_logits_kernel", le);
}

}  // namespace flashnorm::kernels::cuda
