// Tests of the fp64 CPU references (src/kernels/cpu) that the GPU kernel tests compare against.
// Expected values come from numpy or from the definitions, never from the code under test:
//   numpy 1.x/2.x, the command that produced kNumpyY below:
//   python3 -c "import numpy as np; x=np.array([[1,2,3,4],[0.5,-1,2,-3]],dtype=np.float64);
//     W=np.array([[1,0,-1,2],[0.5,0.25,0,1],[-2,1,1,0]],dtype=np.float64);
//     b=np.array([0.5,-1,2.0]); r=1/np.sqrt((x**2).mean(1,keepdims=True)+1e-6);
//     print(repr(r*(x@W.T)+b))"
//   fp16 bit patterns: np.array([1.0,65504.0,2**-24,1/3,-2.5],dtype=np.float16).view(np.uint16)
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "flashnorm/error.h"
#include "flashnorm/kernels/cpu/reference.h"

namespace fc = flashnorm::kernels::cpu;

TEST(KernelsCpuReference, Bf16RoundTripAndRoundToNearestEven) {
  EXPECT_EQ(fc::float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(fc::bf16_to_float(0x3f80), 1.0f);
  EXPECT_EQ(fc::float_to_bf16(1.00390625f), 0x3f80);  // halfway, ties to even (down)
  EXPECT_EQ(fc::float_to_bf16(1.01171875f), 0x3f82);  // halfway, ties to even (up)
  EXPECT_EQ(fc::float_to_bf16(-2.0f), 0xc000);
  EXPECT_TRUE(std::isnan(fc::bf16_to_float(fc::float_to_bf16(NAN))));
}

TEST(KernelsCpuReference, Fp16MatchesNumpy) {
  const float v[] = {1.0f, 65504.0f, std::ldexp(1.0f, -24), 1.0f / 3.0f, -2.5f};
  const uint16_t np_bits[] = {0x3c00, 0x7bff, 0x0001, 0x3555, 0xc100};
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(fc::float_to_fp16(v[i]), np_bits[i]) << v[i];
    EXPECT_EQ(fc::float_to_fp16(fc::fp16_to_float(np_bits[i])), np_bits[i]);
  }
  EXPECT_EQ(fc::fp16_to_float(0x3555), 0.333251953125f);
  EXPECT_EQ(fc::float_to_fp16(70000.f), 0x7c00);  // overflow to +inf
}

TEST(KernelsCpuReference, RmsNormByHand) {
  const float x[] = {3, 4};  // mean square 12.5
  const float g[] = {1, -0.5};
  double y[2];
  fc::rms_norm(x, nullptr, false, 1, 2, 0.0, y);
  EXPECT_NEAR(y[0], 3 / std::sqrt(12.5), 1e-15);
  EXPECT_NEAR(y[1], 4 / std::sqrt(12.5), 1e-15);
  fc::rms_norm(x, g, true, 1, 2, 0.0, y);  // (1 + g) = {2, 0.5}
  EXPECT_NEAR(y[0], 6 / std::sqrt(12.5), 1e-15);
  EXPECT_NEAR(y[1], 2 / std::sqrt(12.5), 1e-15);
  const float z[] = {0, 0};
  fc::rms_norm(z, nullptr, false, 1, 2, 1e-6, y);
  EXPECT_EQ(y[0], 0.0);  // all-zero row: 0, never NaN
  EXPECT_THROW(fc::rms_norm(x, nullptr, false, 0, 2, 0.0, y), flashnorm::Error);
}

TEST(KernelsCpuReference, LinearMatchesNumpy) {
  const float x[] = {1, 2, 3, 4, 0.5f, -1, 2, -3};
  const float w[] = {1, 0, -1, 2, 0.5f, 0.25f, 0, 1, -2, 1, 1, 0};
  const float b[] = {0.5f, -1, 2};
  const double kNumpyY[] = {2.6908900839613303,  0.825741736634442,  3.095445041980665,
                            -3.4735965134974145, -2.589438605398966, 2.0};
  double y[6];
  fc::flashnorm_linear(x, w, b, nullptr, 2, 3, 4, 1e-6, y);
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(y[i], kNumpyY[i], 1e-12) << i;
  EXPECT_THROW(fc::flashnorm_linear(x, w, b, nullptr, 2, 0, 4, 1e-6, y), flashnorm::Error);
}

TEST(KernelsCpuReference, MaskLeavesColumnsUnscaled) {
  const float x[] = {3, 4};
  const float w[] = {1, 1, 2, 0};
  const uint8_t mask[] = {0, 1};
  double y[2];
  fc::flashnorm_linear(x, w, nullptr, mask, 1, 2, 2, 0.0, y);
  EXPECT_NEAR(y[0], 7.0, 1e-15);                    // unscaled
  EXPECT_NEAR(y[1], 6.0 / std::sqrt(12.5), 1e-15);  // scaled
}

// The folding identity of docs/design.md sections 1-2: RMSNorm(x; g) W^T == rstd(x) (x (W diag
// g)^T).
TEST(KernelsCpuReference, DeferredEqualsNormThenLinear) {
  const int M = 3, N = 5, K = 24;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-2, 2);
  std::vector<float> x(M * K), w(N * K), g(K), wf(N * K);
  for (auto& v : x) v = u(rng);
  for (auto& v : w) v = u(rng);
  for (auto& v : g) v = 1 + 0.25f * u(rng);
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k)
      wf[n * K + k] = w[n * K + k] * g[k];  // exact enough in fp32 for 1e-6
  std::vector<double> yn(M * K), y1(M * N), y2(M * N);
  fc::rms_norm(x.data(), g.data(), false, M, K, 1e-6, yn.data());
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double a = 0;
      for (int k = 0; k < K; ++k) a += yn[m * K + k] * w[n * K + k];
      y1[m * N + n] = a;
    }
  fc::flashnorm_linear(x.data(), wf.data(), nullptr, nullptr, M, N, K, 1e-6, y2.data());
  for (int i = 0; i < M * N; ++i) EXPECT_NEAR(y2[i], y1[i], 1e-5 * (1 + std::fabs(y1[i]))) << i;
}

TEST(KernelsCpuReference, RelErrorFlagsNonFinite) {
  const float a[] = {1, NAN};
  const double b[] = {1, 1};
  EXPECT_TRUE(std::isinf(fc::rel_error(a, b, 2)));
  const float c[] = {1, 1};
  EXPECT_EQ(fc::rel_error(c, b, 2), 0.0);
}
