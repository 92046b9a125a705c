// The CUDA engine's token embedding lookup (embed_tokens). API:
// include/flashnorm/kernels/cuda/engine_ops.h.
#include <algorithm>
#include <cmath>

#include "engine_op.cuh"

namespace flashnorm::kernels::cuda {
namespace {

// ---- embedding ------------------------------------------------------------------------------
template <class E>
__global__ void embed_kernel(const int32_t* tokens, const typename E::T* emb, int H, int vocab,
                             float scale, float* x32, typename E::T* xb) {
  pdl_begin();
  const int t = blockIdx.x;
  const int id = tokens[t];
  const bool ok = id >= 0 && id < vocab;
  const typename E::T* row = emb + static_cast<int64_t>(ok ? id : 0) * H;
  for (int v = threadIdx.x; v < H / 8; v += blockDim.x) {
    float f[8];
    detail::unpack8<E>(reinterpret_cast<const uint4*>(row)[v], f);
#pragma unroll
    for (int i = 0; i < 8; ++i) f[i] = ok ? f[i] * scale : NAN;
    float4* o = reinterpret_cast<float4*>(x32 + static_cast<int64_t>(t) * H + v * 8);
    o[0] = make_float4(f[0], f[1], f[2], f[3]);
    o[1] = make_float4(f[4], f[5], f[6], f[7]);
    reinterpret_cast<uint4*>(xb + static_cast<int64_t>(t) * H)[v] = detail::pack8<E>(f);
  }
}

}  // namespace

Status embed_tokens(DType dt, int T, int H, int vocab, const int32_t* tokens, const void* emb,
                    float scale, float* x32, void* xb, cudaStream_t s, bool pdl) {
  if (T < 1 || H < 8 || H % 8 || vocab < 1) return invalid("embed_tokens: T >= 1, H % 8 == 0");
  if (!tokens || !emb || !x32 || !xb || !aligned16(emb) || !aligned16(x32) || !aligned16(xb))
    return invalid("embed_tokens: null or misaligned pointer");
  return by_dtype(dt, [&](auto e) {
    using E = decltype(e);
    const cudaError_t le = launch_ex(embed_kernel<E>, T, 128, 0, s, pdl, tokens,
                                     static_cast<const typename E::T*>(emb), H, vocab, scale, x32,
                                     static_cast<typename E::T*>(xb));
    return launched("embed_kernel", le);
  });
}

}  // namespace flashnorm::kernels::cuda
