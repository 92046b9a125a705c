// GPU tests of RMSNorm (rms_norm.h) against the fp64 CPU reference (part of kernels_gpu_test).
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "flashnorm/kernels/cuda/device.h"
#include "gpu_util.h"

namespace {

constexpr float kEps = 1e-6f;

// ---------------------------------------------------------------------------------------------------
struct RmsCase {
  fk::DType dt;
  int M, K;
  int gain;  // 0 none, 1 plain, 2 one_plus
  bool residual;
};

void run_rms(const RmsCase& c) {
  const size_t n = static_cast<size_t>(c.M) * c.K;
  std::vector<uint16_t> xb, rb, gb;
  std::vector<float> xf, rf, gf;
  random_half(c.dt, n, c.K, 2.f, 3.f, 1 + c.M * 7 + c.K, xb, xf);
  random_half(c.dt, n, c.K, 1.f, 0.f, 2 + c.M, rb, rf);
  random_half(c.dt, c.K, 0, c.gain == 2 ? 0.3f : 1.5f, 0.f, 3 + c.K, gb, gf);
  DevMem x(n * 2), r(n * 2), ro(n * 2), y(n * 2), g(c.K * 2);
  CUDA_OK(cudaMemcpy(x.p, xb.data(), n * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(r.p, rb.data(), n * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(g.p, gb.data(), c.K * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(y.p, 0xff, n * 2));
  CUDA_OK(cudaMemset(ro.p, 0xff, n * 2));
  fk::RmsNormArgs a;
  a.dtype = c.dt, a.M = c.M, a.K = c.K, a.x = x.p, a.ldx = c.K, a.y = y.p, a.ldy = c.K,
  a.eps = kEps;
  if (c.gain) a.gain = g.p, a.gain_one_plus = c.gain == 2;
  if (c.residual) a.residual = r.p, a.ld_res = c.K, a.residual_out = ro.p, a.ld_res_out = c.K;
  FN_OK(fk::rms_norm(a, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  // expected h: x + residual rounded once to the storage type
  std::vector<float> h = xf;
  if (c.residual)
    for (size_t i = 0; i < n; ++i) h[i] = from_half_bits(c.dt, to_half_bits(c.dt, xf[i] + rf[i]));
  if (c.residual) {
    std::vector<float> got = download_half(c.dt, ro.p, n);
    ASSERT_EQ(got.size(), n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], h[i]) << "residual_out[" << i << "]";
  }
  std::vector<double> ref(n);
  fc::rms_norm(h.data(), c.gain ? gf.data() : nullptr, c.gain == 2, c.M, c.K, kEps, ref.data());
  std::vector<float> got = download_half(c.dt, y.p, n);
  ASSERT_EQ(got.size(), n);
  for (int m = 0; m < c.M; ++m) {
    const double e = fc::rel_error(got.data() + static_cast<size_t>(m) * c.K,
                                   ref.data() + static_cast<size_t>(m) * c.K, c.K);
    ASSERT_LT(e, 1e-2) << "row " << m;
  }
}

TEST(RmsNormSmall, PlainGainBf16) { run_rms({fk::DType::kBF16, 7, 640, 1, false}); }
TEST(RmsNormSmall, OnePlusGainFp16Residual) { run_rms({fk::DType::kFP16, 5, 1000, 2, true}); }
TEST(RmsNormSmall, NoGainBf16Residual) { run_rms({fk::DType::kBF16, 3, 576, 0, true}); }
TEST(RmsNormShapes, Wide) {
  for (int K : {2048, 4096, 8192, 16384}) run_rms({fk::DType::kBF16, 33, K, 1, K == 4096});
}
TEST(RmsNormShapes, ManyRows) { run_rms({fk::DType::kBF16, 1000, 2048, 2, false}); }

TEST(RmsNormSmall, AllZeroRowGivesZeroNotNaN) {
  const int K = 64;
  DevMem x(K * 2), y(K * 2);
  CUDA_OK(cudaMemset(x.p, 0, K * 2));
  CUDA_OK(cudaMemset(y.p, 0xff, K * 2));
  fk::RmsNormArgs a;
  a.M = 1, a.K = K, a.x = x.p, a.ldx = K, a.y = y.p, a.ldy = K;
  FN_OK(fk::rms_norm(a, nullptr));
  std::vector<float> got = download_half(fk::DType::kBF16, y.p, K);
  for (float f : got) ASSERT_EQ(f, 0.f);
}

TEST(RmsNormSmall, RejectsBadArguments) {
  DevMem x(4096), y(4096);
  fk::RmsNormArgs a;
  a.M = 1, a.K = 60, a.x = x.p, a.ldx = 64, a.y = y.p, a.ldy = 64;
  EXPECT_EQ(fk::rms_norm(a, nullptr).code, fk::Code::kInvalidArgument);  // K % 8
  a.K = 64, a.x = static_cast<char*>(x.p) + 2;
  fk::Status s = fk::rms_norm(a, nullptr);
  EXPECT_EQ(s.code, fk::Code::kInvalidArgument);
  EXPECT_NE(s.message.find("aligned"), std::string::npos) << s.message;
  EXPECT_THROW(fk::throw_if_error(s), std::exception);
}

}  // namespace
