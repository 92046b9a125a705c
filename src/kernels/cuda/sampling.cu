// The CUDA engine's greedy / temperature sampling of the next token on the device
// (sample_tokens) and the batched greedy step (argmax_rows). API:
// include/flashnorm/kernels/cuda/engine_ops.h.
#include <algorithm>
#include <cmath>

#include "engine_op.cuh"

namespace flashnorm::kernels::cuda {
namespace {

// ---- sampling ---------------------------------------------------------------------------------
__device__ uint64_t mix64(uint64_t z) {  // splitmix64 finalizer
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Best (value, id) of two candidates: the larger value, the lower id on ties; NaN never wins.
__device__ __forceinline__ void better(float& bv, int& bi, float v, int i) {
  if (v > bv || (v == bv && i < bi)) bv = v, bi = i;
}

// The CTA's best of every thread's (best, idx), in thread 0's (the others' are left partial).
__device__ __forceinline__ void cta_best(float& best, int& idx) {
  __shared__ float bv[32];
  __shared__ int bi[32];
  for (int o = 16; o > 0; o >>= 1) {
    better(best, idx, __shfl_xor_sync(0xffffffffu, best, o), __shfl_xor_sync(0xffffffffu, idx, o));
  }
  if ((threadIdx.x & 31) == 0) bv[threadIdx.x / 32] = best, bi[threadIdx.x / 32] = idx;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) better(best, idx, bv[w], bi[w]);
  }
}

__global__ void sample_kernel(const float* logits, int vocab, float temperature, uint64_t seed,
                              int32_t* pos, int advance, int32_t* token, int32_t* history,
                              int history_len, float* part_v, int* part_i, unsigned* counter) {
  pdl_begin();
  __shared__ int s_last;
  const int p = *pos + advance;  // every CTA reads *pos before it arrives; the last one writes it
  float best = -INFINITY;
  int idx = INT32_MAX;
  for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < vocab; j += gridDim.x * blockDim.x) {
    float v = logits[j];
    if (temperature > 0.f) {
      const uint64_t h = mix64(seed ^ mix64(static_cast<uint64_t>(p) * 0x9e3779b97f4a7c15ull +
                                            static_cast<uint64_t>(j)));
      // 23 random bits: u in [2^-24, 1 - 2^-24], exact in fp32, so log(-log(u)) is finite
      const float u = (static_cast<float>(h >> 41) + 0.5f) * 0x1p-23f;
      v = v / temperature - logf(-logf(u));
    }
    better(best, idx, v, j);
  }
  cta_best(best, idx);
  if (threadIdx.x != 0) return;
  part_v[blockIdx.x] = best, part_i[blockIdx.x] = idx;
  __threadfence();  // release this CTA's winner before counting it
  s_last = atomicAdd(counter, 1u) == gridDim.x - 1;
  if (!s_last) return;
  __threadfence();  // acquire the others'
  best = -INFINITY, idx = INT32_MAX;
  for (int b = 0; b < static_cast<int>(gridDim.x); ++b) {
    better(best, idx, __ldcg(part_v + b), __ldcg(part_i + b));
  }
  if (idx == INT32_MAX) idx = 0;  // every logit NaN
  *token = idx;
  if (history && p < history_len) history[p] = idx;
  *pos = p;
  *counter = 0u;  // ready for the next stream-ordered call
}

// One CTA per row: tokens[b] = argmax of row b (the lower id on ties, NaN never chosen; 0 when
// every logit is NaN), pos[b] += 1.
__global__ void argmax_rows_kernel(const float* logits, int64_t ldl, int vocab, int32_t* tokens,
                                   int32_t* pos) {
  pdl_begin();
  const float* row = logits + blockIdx.x * ldl;
  float best = -INFINITY;
  int idx = INT32_MAX;
  for (int j = threadIdx.x; j < vocab; j += blockDim.x) better(best, idx, row[j], j);
  cta_best(best, idx);
  if (threadIdx.x != 0) return;
  tokens[blockIdx.x] = idx == INT32_MAX ? 0 : idx;
  if (pos) pos[blockIdx.x] += 1;
}

}  // namespace

Status argmax_rows(int B, int vocab, const float* logits, int64_t ldl, int32_t* tokens,
                   int32_t* pos, cudaStream_t s, bool pdl) {
  if (B < 1 || vocab < 1 || ldl < vocab || !logits || !tokens)
    return invalid("argmax_rows: B >= 1, vocab >= 1, ldl >= vocab, non-null logits and tokens");
  return launched("argmax_rows_kernel", launch_ex(argmax_rows_kernel, B, 1024, 0, s, pdl, logits,
                                                  ldl, vocab, tokens, pos));
}

Status sample_tokens(int vocab, const float* logits, float temperature, uint64_t seed, int32_t* pos,
                     int advance, int32_t* token, int32_t* history, int history_len,
                     void* workspace, cudaStream_t s, bool pdl) {
  if (vocab < 1 || !logits || !pos || !token || !(temperature >= 0.f) || advance < 0)
    return invalid("sample_tokens: vocab >= 1, temperature >= 0, non-null logits/pos/token");
  if (!workspace || !aligned16(workspace))
    return invalid("sample_tokens: workspace must be set and 16-byte aligned");
  constexpr int kThreads = 512;
  const int blocks = std::min(kSampleBlocks, (vocab + kThreads - 1) / kThreads);
  unsigned* counter = static_cast<unsigned*>(workspace);
  float* part_v = reinterpret_cast<float*>(static_cast<char*>(workspace) + 16);
  int* part_i = reinterpret_cast<int*>(part_v + kSampleBlocks);
  const cudaError_t le =
      launch_ex(sample_kernel, blocks, kThreads, 0, s, pdl, logits, vocab, temperature, seed, pos,
                advance, token, history, history_len, part_v, part_i, counter);
  return launched("sample_kernel", le);
}

}  // namespace flashnorm::kernels::cuda
