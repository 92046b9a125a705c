// Attention of one decode step (one query row per head) over an fp32 KV cache, for the CPU
// engine's native path: head h reads KV head h / group (GQA), scores s_j = (q_h . k_j) * scale
// for the visible keys j in [first, end) (causal, or a sliding window), p = softmax(s), and
// out_h = sum_j p_j v_j. Heads run in parallel on the pool; each head is computed by one thread,
// so the result does not depend on the pool's size. The dot products and the weighted sum
// accumulate in fp32 (8 partial sums per vector of 8 floats); the softmax is softmax_range's.
// Source: the attention of "Attention Is All You Need" (Vaswani et al., 2017) with grouped KV
// heads (Ainslie et al., 2023), as transformers' eager attention computes it for one query.
#pragma once

#include <cstddef>

#include "flashnorm/kernels/cpu/quant_matmul.h"
#include "flashnorm/kernels/cpu/thread_pool.h"

namespace flashnorm::kernels::cpu {

// One decode step's attention inputs; every pointer is fp32 and borrowed for the call.
struct DecodeAttention {
  const float* q = nullptr;  // [n_head * head_dim], head h at q + h * head_dim
  const float* k = nullptr;  // keys: position j, KV head g at k + j * kv_stride + g * head_dim
  const float* v = nullptr;  // values, the keys' layout
  size_t kv_stride = 0;      // floats from one position to the next (n_head_kv * head_dim)
  int n_head = 0;
  int group = 1;  // query heads per KV head (n_head / n_head_kv)
  int head_dim = 0;
  int first = 0, end = 0;  // the visible keys [first, end), first < end
  float scale = 1;         // the score scale (1 / sqrt(head_dim) unless the model says otherwise)
  float* out = nullptr;    // [n_head * head_dim], head h at out + h * head_dim
};

// Computes a.out. isa: kAvx2 or kAvx512 (both the AVX2 loops; head_dim a multiple of 8, otherwise
// the portable loops) or kScalar; pool: nullptr runs every head on the caller. Errors: Error when
// the CPU or build lacks `isa`, or the sizes are not positive / first >= end.
void decode_attention(const DecodeAttention& a, QuantIsa isa, ThreadPool* pool);

// Softmax of s[first, end) in place: the maximum subtracted, std::exp, the exponentials summed in
// fp64, then multiplied by one fp32 reciprocal of the sum; entries outside the range untouched.
void softmax_range(float* s, int first, int end);

}  // namespace flashnorm::kernels::cpu
