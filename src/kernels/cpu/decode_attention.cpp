#include "flashnorm/kernels/cpu/decode_attention.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "decode_attention_detail.h"
#include "flashnorm/error.h"

namespace flashnorm::kernels::cpu {
namespace detail {

void attend_head_scalar(const float* q, const float* k, const float* v, size_t stride, int D,
                        int first, int end, float scale, float* scores, float* out) {
  for (int j = first; j < end; ++j) {
    const float* kj = k + size_t(j) * stride;
    // 8 independent partial sums (the compiler's vectors), then their sum
    float part[8] = {};
    int i = 0;
    for (; i + 8 <= D; i += 8) {
      for (int l = 0; l < 8; ++l) part[l] += q[i + l] * kj[i + l];
    }
    for (; i < D; ++i) part[0] += q[i] * kj[i];
    const float d =
        ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7]));
    scores[j] = d * scale;
  }
  softmax_range(scores, first, end);
  std::fill(out, out + D, 0.0f);
  for (int j = first; j < end; ++j) {
    const float p = scores[j];
    const float* vj = v + size_t(j) * stride;
    for (int i = 0; i < D; ++i) out[i] += p * vj[i];
  }
}

}  // namespace detail

void softmax_range(float* s, int first, int end) {
  const float mx = *std::max_element(s + first, s + end);
  double sum = 0;
  for (int j = first; j < end; ++j) sum += (s[j] = std::exp(s[j] - mx));
  const float inv = static_cast<float>(1.0 / sum);
  for (int j = first; j < end; ++j) s[j] *= inv;
}

void decode_attention(const DecodeAttention& a, QuantIsa isa, ThreadPool* pool) {
  if (!quant_isa_available(isa)) {
    throw Error(fmt::format("decode_attention: this CPU or build lacks {}", quant_isa_name(isa)));
  }
  if (a.n_head <= 0 || a.group <= 0 || a.n_head % a.group != 0 || a.head_dim <= 0 || a.first < 0 ||
      a.first >= a.end) {
    throw Error(fmt::format(
        "decode_attention: {} heads in groups of {}, head_dim {}, keys [{}, {}): not a valid shape",
        a.n_head, a.group, a.head_dim, a.first, a.end));
  }
  using HeadFn = void (*)(const float*, const float*, const float*, size_t, int, int, int, float,
                          float*, float*);
  HeadFn fn = detail::attend_head_scalar;
#if defined(FLASHNORM_HAVE_AVX2_KERNELS)
  // kAvx512 implies AVX2 + FMA (quant_isa_available) and takes the AVX2 loops
  if ((isa == QuantIsa::kAvx2 || isa == QuantIsa::kAvx512) && a.head_dim % 8 == 0) {
    fn = detail::attend_head_avx2;
  }
#endif
  const int D = a.head_dim;
  auto head = [&](int h) {
    thread_local std::vector<float> scores;
    if (scores.size() < size_t(a.end)) scores.resize(a.end);
    const size_t kv = size_t(h / a.group) * D;
    fn(a.q + size_t(h) * D, a.k + kv, a.v + kv, a.kv_stride, D, a.first, a.end, a.scale,
       scores.data(), a.out + size_t(h) * D);
  };
  if (pool) {
    pool->run(a.n_head, head);
  } else {
    for (int h = 0; h < a.n_head; ++h) head(h);
  }
}

}  // namespace flashnorm::kernels::cpu
