// fill_random (fill_random.h): splitmix64 hash of (seed, index), one thread per element.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "fill_random.h"

namespace flashnorm::bench {
namespace {
__device__ __forceinline__ float hash_uniform(uint64_t x) {  // splitmix64 -> [-1, 1)
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return static_cast<float>(x >> 40) * (2.f / 16777216.f) - 1.f;
}
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16(v); }
__device__ __forceinline__ void store(__half* p, float v) { *p = __float2half(v); }
template <class T>
__global__ void fill_kernel(T* p, size_t n, uint64_t seed, float scale, size_t row_len,
                            float row_spread) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    float v = hash_uniform(seed * 0x100000001b3ull + i) * scale;
    if (row_spread > 0.f) v *= exp2f(hash_uniform(~seed + i / row_len) * row_spread);
    store(p + i, v);
  }
}
}  // namespace

cudaError_t fill_random(kernels::cuda::DType dt, void* p, size_t n, uint64_t seed, float scale,
                        size_t row_len, float row_spread, cudaStream_t s) {
  const unsigned blocks = static_cast<unsigned>(std::min<size_t>((n + 255) / 256, 132 * 32));
  if (dt == kernels::cuda::DType::kBF16)
    fill_kernel<<<blocks, 256, 0, s>>>(static_cast<__nv_bfloat16*>(p), n, seed, scale,
                                       row_len ? row_len : 1, row_spread);
  else
    fill_kernel<<<blocks, 256, 0, s>>>(static_cast<__half*>(p), n, seed, scale,
                                       row_len ? row_len : 1, row_spread);
  return cudaGetLastError();
}

}  // namespace flashnorm::bench
