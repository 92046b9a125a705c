// The CUDA engine's gated linear unit of the fp32 gate|up rows (glu). API:
// include/flashnorm/kernels/cuda/engine_ops.h.
#include <algorithm>
#include <cmath>

#include "engine_op.cuh"

namespace flashnorm::kernels::cuda {
namespace {

// ---- gated linear unit ------------------------------------------------------------------------
template <class E>
__global__ void glu_kernel(GluKind kind, int T, int F, const float* gu, typename E::T* act) {
  pdl_begin();
  const int64_t n = static_cast<int64_t>(T) * F;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = e / F, i = e % F;
    const float g = gu[t * 2 * F + i], u = gu[t * 2 * F + F + i];
    act[e] = E::from_f(kind == GluKind::kSwiGLU ? detail::glu_value<false>(g, u)
                                                : detail::glu_value<true>(g, u));
  }
}

}  // namespace

Status glu(DType dt, GluKind kind, int T, int F, const float* gu, void* act, cudaStream_t s,
           bool pdl) {
  if (T < 1 || F < 1 || !gu || !act) return invalid("glu: T, F >= 1 and non-null pointers");
  const int64_t n = static_cast<int64_t>(T) * F;
  const int blocks = static_cast<int>(std::min<int64_t>((n + 255) / 256, 4096));
  return by_dtype(dt, [&](auto e) {
    using E = decltype(e);
    const cudaError_t le = launch_ex(glu_kernel<E>, blocks, 256, 0, s, pdl, kind, T, F, gu,
                                     static_cast<typename E::T*>(act));
    return launched("glu_kernel", le);
  });
}

size_t sample_workspace_bytes() { return 16 + 2 * sizeof(float) * kSampleBlocks; }

}  // namespace flashnorm::kernels::cuda
