// GPU tests of the one-pass FP8 quantizer (fp8_quant.h) against the CPU reference (part of
// kernels_gpu_test): the payload bit for bit kernels/cpu/fp8.h's (the same fp32 x * G, scale and
// IEEE division; the rounding of __nv_cvt_float_to_fp8 with saturation against ours), the row scale
// within fp32 rounding of s * rstd (fp64 sum of squares on the CPU, fp32 on the GPU); the checker
// must catch one flipped payload byte (negative control).
#include <cstring>
#include <string>
#include <vector>

#include "flashnorm/kernels/cpu/fp8.h"
#include "flashnorm/kernels/cuda/fp8_quant.h"
#include "gpu_util.h"

namespace {

constexpr float kEps = 1e-6f;

struct Fp8Case {
  fk::DType dt;
  int M, K;
  int gain;  // 0 none, 1 plain, 2 one_plus
  bool rstd_on_scale;
};

// Payload bytes that differ between got and want.
size_t mismatches(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want) {
  size_t n = 0;
  for (size_t i = 0; i < got.size(); ++i) n += got[i] != want[i];
  return n;
}

void run_fp8(const Fp8Case& c) {
  const size_t n = size_t(c.M) * c.K;
  std::vector<uint16_t> xb, gb;
  std::vector<float> xf, gf;
  random_half(c.dt, n, c.K, 3.f, 4.f, 11 + c.M * 5 + c.K, xb, xf);
  random_half(c.dt, c.K, 0, c.gain == 2 ? 0.3f : 1.5f, 0.f, 12 + c.K, gb, gf);
  if (c.M > 2) {  // row 1 all zeros: scale 0, payload zeros (no NaN)
    std::fill(xb.begin() + c.K, xb.begin() + 2 * c.K, uint16_t(0));
    std::fill(xf.begin() + c.K, xf.begin() + 2 * c.K, 0.f);
  }
  DevMem x(n * 2), g(c.K * 2), p(n), sc(c.M * 4);
  CUDA_OK(cudaMemcpy(x.p, xb.data(), n * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(g.p, gb.data(), c.K * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(p.p, 0xff, n));
  fk::Fp8QuantArgs a;
  a.dtype = c.dt, a.M = c.M, a.K = c.K, a.x = x.p, a.ldx = c.K, a.eps = kEps;
  a.gain = c.gain ? g.p : nullptr, a.gain_one_plus = c.gain == 2;
  a.rstd_on_scale = c.rstd_on_scale, a.payload = static_cast<uint8_t*>(p.p), a.ldp = c.K;
  a.scale = static_cast<float*>(sc.p);
  FN_OK(fk::fp8_quantize(a, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<uint8_t> got(n), want(n);
  std::vector<float> scale(c.M);
  CUDA_OK(cudaMemcpy(got.data(), p.p, n, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(scale.data(), sc.p, c.M * 4, cudaMemcpyDeviceToHost));
  std::vector<float> G(c.K);
  for (int k = 0; k < c.K; ++k) G[k] = c.gain == 2 ? 1.f + gf[k] : gf[k];
  for (int m = 0; m < c.M; ++m) {
    const float* row = xf.data() + size_t(m) * c.K;
    const float s = flashnorm::kernels::cpu::fp8_quantize_row(
        {row, size_t(c.K)}, c.gain ? G.data() : nullptr, want.data() + size_t(m) * c.K);
    const double r = c.rstd_on_scale ? fc::row_rstd(row, c.K, kEps) : 1.0;
    const double ws = s * r;
    EXPECT_LE(std::fabs(scale[m] - ws), 2e-6 * std::fabs(ws)) << "scale row " << m;
  }
  ASSERT_EQ(mismatches(got, want), 0u);
  got[n / 2] ^= 0x01;  // negative control: the checker sees one flipped byte
  ASSERT_EQ(mismatches(got, want), 1u);
}

TEST(Fp8QuantSmall, FlashNormBf16Gain) { run_fp8({fk::DType::kBF16, 5, 1000, 1, true}); }
TEST(Fp8QuantSmall, StandardFp16NoGain) { run_fp8({fk::DType::kFP16, 3, 576, 0, false}); }
TEST(Fp8QuantSmall, OnePlusGainBf16) { run_fp8({fk::DType::kBF16, 7, 640, 2, true}); }
TEST(Fp8QuantShapes, Wide) {
  for (int K : {2048, 4096, 14336}) run_fp8({fk::DType::kBF16, 33, K, 1, true});
}

TEST(Fp8QuantSmall, RejectsBadArguments) {
  DevMem x(4096), p(4096), sc(64);
  fk::Fp8QuantArgs a;
  a.M = 1, a.K = 60, a.x = x.p, a.ldx = 64, a.payload = static_cast<uint8_t*>(p.p), a.ldp = 64;
  a.scale = static_cast<float*>(sc.p);
  EXPECT_EQ(fk::fp8_quantize(a, nullptr).code, fk::Code::kInvalidArgument);  // K % 8
  a.K = 64, a.payload = static_cast<uint8_t*>(p.p) + 8;
  const fk::Status s = fk::fp8_quantize(a, nullptr);
  EXPECT_EQ(s.code, fk::Code::kInvalidArgument);
  EXPECT_NE(s.message.find("aligned"), std::string::npos) << s.message;
}

}  // namespace
