// Random GGML weight blocks for the quant_gemv tests and kernel lab: every byte random, then each
// fp16 scale (Q4_0, Q5_0, Q8_0 d; Q4_1 d and m; Q4_K d and dmin; Q6_K d) replaced by a finite
// positive 2^-10 .. 2^-6, so that any block is valid and the values stay at weight scales. Layouts:
// kernels/cuda/quant_gemv.h.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "flashnorm/kernels/cpu/reference.h"
#include "flashnorm/kernels/cuda/quant_gemv.h"

namespace flashnorm::testing {

// N rows of K elements of type t (K a multiple of the block), row-major blocks.
inline std::vector<uint8_t> random_quant_blocks(kernels::cuda::QuantType t, int N, int K,
                                                std::mt19937& rng) {
  using kernels::cuda::QuantType;
  const int bb = kernels::cuda::quant_block_bytes(t);
  const int nb = N * (K / kernels::cuda::quant_block_elems(t));
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> e(-10.f, -6.f);
  std::vector<uint8_t> w(static_cast<size_t>(nb) * bb);
  for (auto& b : w) b = static_cast<uint8_t>(byte(rng));
  auto put = [&](uint8_t* p) {
    const uint16_t h = kernels::cpu::float_to_fp16(std::exp2(e(rng)));
    std::memcpy(p, &h, 2);
  };
  for (int i = 0; i < nb; ++i) {
    uint8_t* b = w.data() + static_cast<size_t>(i) * bb;
    if (t == QuantType::kQ4_0 || t == QuantType::kQ5_0 || t == QuantType::kQ8_0) put(b);
    if (t == QuantType::kQ4_1) put(b), put(b + 2);
    if (t == QuantType::kQ4_K) put(b), put(b + 2);
    if (t == QuantType::kQ6_K) put(b + 208);
  }
  return w;
}

}  // namespace flashnorm::testing
