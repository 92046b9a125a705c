// quant_gemv (kernels/cuda/quant_gemv.h) against an fp64 reference: random GGML blocks (random
// bytes with finite scales: every byte pattern is a valid block) dequantized by io::dequantize
// (bit-identical to gguf-py's dequantizer, tests/io), x random in bf16 / fp16, a random gain with
// negative entries, y = rstd(x) * (x * gain) W^T in fp64. Odd N, K of several blocks, M = 1..8,
// both row-scale settings. The bound allows fp32 rounding and the kernel's int16 rounding of
// x * gain per block of 32; a second, tight bound (fp32 rounding only) compares with the x * gain
// quantized on the host by the CPU rule. Negative control: the gain left out fails the first
// bound 100-fold.
#include <cmath>
#include <cstring>
#include <span>
#include <utility>

#include "flashnorm/io/dequant.h"
#include "flashnorm/io/ggml_types.h"
#include "flashnorm/kernels/cpu/quant_matmul.h"
#include "flashnorm/kernels/cuda/engine_ops.h"
#include "flashnorm/kernels/cuda/quant_dequant.h"
#include "flashnorm/kernels/cuda/quant_gemv.h"
#include "flashnorm/kernels/cuda/quant_layout.h"
#include "gpu_util.h"
#include "random_quant_blocks.h"

namespace {

using fk::QuantType;
namespace io = flashnorm::io;

io::GgmlType ggml(QuantType t) { return fk::ggml_type(t); }

// The kernels read the blocks in their device layout (kernels/cuda/quant_layout.h); the
// references use the file's blocks.
void upload_planar(QuantType t, const std::vector<uint8_t>& blocks, void* dst) {
  const std::vector<uint8_t> planes = fk::to_device_layout(t, blocks);
  ASSERT_EQ(cudaMemcpy(dst, planes.data(), planes.size(), cudaMemcpyHostToDevice), cudaSuccess);
}

std::vector<uint8_t> random_blocks(QuantType t, int N, int K, uint32_t seed) {
  std::mt19937 rng(seed);
  return flashnorm::testing::random_quant_blocks(t, N, K, rng);
}

struct Case {
  QuantType type;
  fk::DType dt;
  int M, N, K;
  bool scale_rows;
};

void run(const Case& c) {
  SCOPED_TRACE(testing::Message() << "type " << int(c.type) << " M " << c.M << " N " << c.N << " K "
                                  << c.K << " scale " << c.scale_rows);
  const std::vector<uint8_t> w = random_blocks(c.type, c.N, c.K, 11 + c.M + c.N);
  std::vector<float> wf(static_cast<size_t>(c.N) * c.K);
  io::dequantize(ggml(c.type), w, wf);
  std::vector<uint16_t> xbits;
  std::vector<float> xv;
  random_half(c.dt, static_cast<size_t>(c.M) * c.K, c.K, 1.f, 2.f, 5 + c.K, xbits, xv);
  std::vector<float> gain(c.K);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(0.5f, 1.5f);
  for (int k = 0; k < c.K; ++k) gain[k] = (k % 7 == 3 ? -1.f : 1.f) * u(rng);

  DevMem dw(w.size()), dx(xbits.size() * 2), dg(gain.size() * 4), dy(size_t(c.M) * c.N * 4);
  ASSERT_TRUE(dw.p && dx.p && dg.p && dy.p);
  upload_planar(c.type, w, dw.p);
  CUDA_OK(cudaMemcpy(dx.p, xbits.data(), xbits.size() * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dg.p, gain.data(), gain.size() * 4, cudaMemcpyHostToDevice));
  auto compute = [&](bool with_gain, bool pdl = false) {
    fk::QuantGemvArgs a;
    a.type = c.type, a.dt = c.dt, a.M = c.M, a.N = c.N, a.K = c.K;
    a.x = dx.p, a.ldx = c.K, a.gain = with_gain ? static_cast<const float*>(dg.p) : nullptr;
    a.w = dw.p, a.y = static_cast<float*>(dy.p), a.ldy = c.N, a.scale_rows = c.scale_rows;
    a.eps = 1e-6f, a.pdl = pdl;
    std::vector<float> y(size_t(c.M) * c.N);
    EXPECT_EQ(cudaMemset(dy.p, 0xff, y.size() * 4), cudaSuccess);  // NaN until the kernel writes it
    cudaStream_t st = nullptr;  // PDL launches on a stream of their own, as the engine's
    if (pdl) EXPECT_EQ(cudaStreamCreate(&st), cudaSuccess);
    EXPECT_TRUE(fk::quant_gemv(a, st).ok());
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    if (st) EXPECT_EQ(cudaStreamDestroy(st), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(y.data(), dy.p, y.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    return y;
  };
  // the bound, as a fraction of the allowance: fp32 scales and sums, 2e-6 of the sum of |terms|
  // (K up to a few thousand), plus the int16 rounding of x * gain per block of 32 (each element
  // off by at most d_b / 2, d_b = amax_b / 32767, 1% added for the rounding of v * (1 / d_b)):
  // sum_b 0.505 d_b sum_{k in b} |w_nk|
  auto worst = [&](const std::vector<float>& y) {
    double worst_ratio = 0;
    for (int m = 0; m < c.M; ++m) {
      double ss = 0;
      for (int k = 0; k < c.K; ++k) ss += double(xv[m * c.K + k]) * xv[m * c.K + k];
      const double s = c.scale_rows ? 1.0 / std::sqrt(ss / c.K + 1e-6) : 1.0;
      std::vector<double> db(c.K / 32, 0.0);
      for (int k = 0; k < c.K; ++k) {
        const double v = std::fabs(double(float(xv[m * c.K + k] * gain[k])));
        db[k / 32] = std::max(db[k / 32], v / 32767);
      }
      for (int n = 0; n < c.N; ++n) {
        double ref = 0, mag = 0, qerr = 0;
        for (int k = 0; k < c.K; ++k) {
          const double wk = wf[size_t(n) * c.K + k];
          const double t = double(xv[m * c.K + k]) * gain[k] * wk;
          ref += t, mag += std::fabs(t);
          qerr += 0.505 * db[k / 32] * std::fabs(wk);
        }
        worst_ratio =
            std::max(worst_ratio, std::fabs(y[m * c.N + n] - s * ref) / (s * (2e-6 * mag + qerr)));
      }
    }
    return worst_ratio;
  };
  // Tight: against the x * gain the kernel should have staged (the CPU rule applied on the host
  // to fp32 x * gain, kernels/cpu/quant_matmul.h), only fp32 rounding is left: 2e-6 of the sum of
  // |terms|. A wrong rounding mode, a truncation or a block amax over 16 elements fails it.
  auto worst_tight = [&](const std::vector<float>& yy) {
    double worst_q = 0;
    std::vector<float> xg(c.K);
    std::vector<flashnorm::kernels::cpu::ActBlock> qb(c.K / 32);
    for (int m = 0; m < c.M; ++m) {
      double ss = 0;
      for (int k = 0; k < c.K; ++k) {
        ss += double(xv[m * c.K + k]) * xv[m * c.K + k];
        xg[k] = xv[m * c.K + k] * gain[k];
      }
      const double s = c.scale_rows ? 1.0 / std::sqrt(ss / c.K + 1e-6) : 1.0;
      flashnorm::kernels::cpu::quantize_act_row(xg.data(), c.K, qb.data());
      for (int n = 0; n < c.N; ++n) {
        double ref = 0, mag = 0;
        for (int k = 0; k < c.K; ++k) {
          const double t = double(qb[k / 32].d) * qb[k / 32].qs[k % 32] * wf[size_t(n) * c.K + k];
          ref += t, mag += std::fabs(t);
        }
        worst_q =
            std::max(worst_q, std::fabs(yy[m * c.N + n] - s * ref) / (s * 2e-6 * mag + 1e-30));
      }
    }
    return worst_q;
  };
  const std::vector<float> y = compute(true);
  EXPECT_LE(worst(y), 1.0);
  EXPECT_LE(worst_tight(y), 1.0) << "against the host-quantized x * gain";
  // launched with PDL (the one-row instances then load their first steps of W before the wait):
  // the same products in the same order, so the same bits, where K is split alike
  const std::vector<float> y_pdl = compute(true, true);
  if (fk::quant_gemv_split(c.type, c.M, c.N, c.K, false) ==
      fk::quant_gemv_split(c.type, c.M, c.N, c.K, true)) {
    EXPECT_EQ(0, std::memcmp(y.data(), y_pdl.data(), y.size() * sizeof(float))) << "with PDL";
  } else {  // K split in other slices with PDL (quant_gemv_split): the same bounds
    EXPECT_LE(worst(y_pdl), 1.0) << "with PDL";
    EXPECT_LE(worst_tight(y_pdl), 1.0) << "with PDL, against the host-quantized x * gain";
  }
  // the same launch again: the same bits (split K sums its slices in rank order, whatever the
  // timing of the cluster's CTAs)
  const std::vector<float> y_pdl2 = compute(true, true);
  EXPECT_EQ(0, std::memcmp(y_pdl.data(), y_pdl2.data(), y.size() * sizeof(float))) << "repeated";
  EXPECT_GT(worst(compute(false)), 100.0);  // negative control: the gain matters
}

const fk::DType kBF = fk::DType::kBF16, kFP = fk::DType::kFP16;

TEST(QuantGemv, Q8_0) {
  for (int M : {1, 3, 8}) run({QuantType::kQ8_0, kBF, M, 37, 1056, true});
  run({QuantType::kQ8_0, kFP, 2, 5, 32, false});
  run({QuantType::kQ8_0, kBF, 1, 1000, 4096, true});
  // 2 x 9824: 49136 bytes of staged x, under 48 KiB alone but over it with the kernel's static
  // red[] (the opt-in must count both); 8 x 4096: 80 KiB, well over
  run({QuantType::kQ8_0, kBF, 2, 64, 9824, true});
  run({QuantType::kQ8_0, kBF, 8, 64, 4096, true});
}
// The 32-element formats of SmolLM2 Q4_1 and Gemma 3 Q4_K_M (Q5_0), and Q4_0.
TEST(QuantGemv, Q4_0Q4_1Q5_0) {
  for (QuantType t : {QuantType::kQ4_0, QuantType::kQ4_1, QuantType::kQ5_0}) {
    for (int M : {1, 3, 8}) run({t, kBF, M, 37, 1056, true});
    run({t, kFP, 2, 5, 32, false});
    run({t, kBF, 1, 1000, 4096, true});
  }
}
// 12000 x 2304 and 9001 x 5120: 750 and 563 row groups, more than the CTAs resident at once (at
// most 4 per SM on 132 SMs), so a CTA takes several (the one-row Q4_K instance carries its next
// step's loads across them) with whole rows, with and without PDL (run()); rows of 9 and 20
// super-blocks end in a partial step, and the staging of x in a partial pass.
TEST(QuantGemv, Q4_K) {
  for (int M : {1, 3, 8}) run({QuantType::kQ4_K, kBF, M, 37, 1280, true});
  run({QuantType::kQ4_K, kFP, 2, 5, 256, false});
  run({QuantType::kQ4_K, kBF, 1, 1000, 4096, true});
  run({QuantType::kQ4_K, kBF, 1, 12000, 2304, true});
  run({QuantType::kQ4_K, kBF, 1, 9001, 5120, true});
  run({QuantType::kQ4_K, kBF, 3, 600, 4096, true});
}
TEST(QuantGemv, Q6_K) {
  for (int M : {1, 3, 8}) run({QuantType::kQ6_K, kBF, M, 37, 1280, true});
  run({QuantType::kQ6_K, kFP, 2, 5, 256, false});
  run({QuantType::kQ6_K, kBF, 1, 1000, 4096, true});
  run({QuantType::kQ6_K, kBF, 8, 64, 4096, true});
  run({QuantType::kQ6_K, kBF, 1, 12000, 2304, true});
}

// K split across a cluster (quant_gemv_split): at Llama-3-8B's down width with few rows 7 CTAs per
// cluster with PDL, 3 without (at most K / 2048 and K / 4096 slices; run() launches both); 2 at
// 4096 with 63 row groups with PDL only (the cases of 1000 rows above too); 2 with a shorter last
// slice; N not a multiple of the 16-row group. (The H200 has 132 SMs; the asserted splits hold
// from 126 SMs up.)
TEST(QuantGemv, SplitK) {
  for (QuantType t :
       {QuantType::kQ4_K, QuantType::kQ6_K, QuantType::kQ8_0, QuantType::kQ4_1, QuantType::kQ5_0}) {
    ASSERT_EQ(fk::quant_gemv_split(t, 1, 67, 14336, true), 7) << int(t);
    ASSERT_EQ(fk::quant_gemv_split(t, 1, 67, 14336, false), 3) << int(t);  // slices >= 4096
    ASSERT_EQ(fk::quant_gemv_split(t, 1, 1000, 4096, true), 2) << int(t);
    ASSERT_EQ(fk::quant_gemv_split(t, 1, 1000, 4096, false), 1) << int(t);
    ASSERT_EQ(fk::quant_gemv_split(t, 2, 67, 14336, true), 1) << int(t);
    ASSERT_EQ(fk::quant_gemv_split(t, 1, 67, 1536, true), 1) << int(t);
    ASSERT_EQ(fk::quant_gemv_split(t, 1, 28672, 4096, true), 1) << int(t);  // groups fill it
    run({t, kBF, 1, 67, 14336, true});
  }
  run({QuantType::kQ6_K, kFP, 1, 1000, 4096, false});
  // slices of unequal length: Q4_K 16 + 4 super-blocks, Q6_K 12 + 8, Q4_1 88 + 80 blocks
  for (auto [t, K] : {std::pair{QuantType::kQ4_K, 5120}, std::pair{QuantType::kQ6_K, 5120},
                      std::pair{QuantType::kQ4_1, 5376}}) {
    ASSERT_EQ(fk::quant_gemv_split(t, 1, 67, K, true), 2) << int(t);
    run({t, kBF, 1, 67, K, true});
  }
  // More row groups than resident clusters: a 24576-element slice of staged x (about 61 KiB) fits
  // 3 CTAs per SM, so 250 groups in clusters of 2 take two rounds (a cluster's second group,
  // prefetched while its first is computed, and its partial sums at offset 16)
  ASSERT_EQ(fk::quant_gemv_split(QuantType::kQ8_0, 1, 4000, 49152, true), 2);
  ASSERT_EQ(fk::quant_gemv_split(QuantType::kQ8_0, 1, 4000, 49152, false), 2);
  run({QuantType::kQ8_0, kBF, 1, 4000, 49152, true});
}

// The GLU in the epilogue (QuantGemvArgs::glu_out): a gate|up projection of 2F rows writes
// round_dt(act(y_i) y_{F+i}). Against the unfused path on the same GPU, bit for bit: (1) the
// standalone GLU kernel (engine_ops.h glu) over the fp32 gate|up rows the same projection writes
// without glu_out; (2) a second projection fed glu_out equals the same projection fed the fp32
// rows with x_glu (the engine's down). F = 37 (one partial row group; no consumer) and 8192 (1024
// pair groups: several per CTA at up to 4 CTAs per SM on 132 SMs), K = 1280 and 4096; with and
// without PDL. Negative control: the
// other GLU kind changes glu_out.
TEST(QuantGemv, GluEpilogue) {
  for (QuantType t : {QuantType::kQ4_K, QuantType::kQ6_K, QuantType::kQ4_1, QuantType::kQ8_0}) {
    for (fk::GluKind kind : {fk::GluKind::kSwiGLU, fk::GluKind::kGeGLU}) {
      for (const std::pair<int, int>& fk_shape : {std::pair{37, 1280}, std::pair{8192, 4096}}) {
        const int F = fk_shape.first, K = fk_shape.second, N = 2 * F, N2 = 96;
        SCOPED_TRACE(testing::Message()
                     << "type " << int(t) << " glu " << int(kind) << " F " << F << " K " << K);
        const std::vector<uint8_t> w = random_blocks(t, N, K, 31 + F);
        const std::vector<uint8_t> w2 = random_blocks(t, N2, F, 41 + F);
        std::vector<uint16_t> xbits;
        std::vector<float> xv;
        random_half(kBF, K, K, 1.f, 2.f, 7 + K, xbits, xv);
        std::vector<float> gain(K);
        std::mt19937 rng(5);
        std::uniform_real_distribution<float> u(0.5f, 1.5f);
        for (float& g : gain) g = u(rng);
        DevMem dw(w.size()), dw2(w2.size()), dx(xbits.size() * 2), dg(gain.size() * 4);
        DevMem dgu(size_t(N) * 4), dh(size_t(F) * 2), dact(size_t(F) * 2), dy(size_t(N2) * 4),
            dy2(size_t(N2) * 4);
        ASSERT_TRUE(dw.p && dw2.p && dx.p && dg.p && dgu.p && dh.p && dact.p && dy.p && dy2.p);
        upload_planar(t, w, dw.p);
        upload_planar(t, w2, dw2.p);
        CUDA_OK(cudaMemcpy(dx.p, xbits.data(), xbits.size() * 2, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(dg.p, gain.data(), gain.size() * 4, cudaMemcpyHostToDevice));
        auto gate_up = [&](void* glu_out, fk::GluKind k, bool pdl) {
          fk::QuantGemvArgs a;
          a.type = t, a.dt = kBF, a.M = 1, a.N = N, a.K = K, a.x = dx.p, a.ldx = K;
          a.gain = static_cast<const float*>(dg.p), a.w = dw.p, a.scale_rows = true, a.pdl = pdl;
          a.y = glu_out ? nullptr : static_cast<float*>(dgu.p), a.ldy = N;
          a.glu_out = glu_out, a.glu_kind = k;
          ASSERT_TRUE(fk::quant_gemv(a, nullptr).ok());
          CUDA_OK(cudaDeviceSynchronize());
        };
        auto down = [&](const void* x, bool x_glu, void* y) {
          fk::QuantGemvArgs a;
          a.type = t, a.dt = kBF, a.M = 1, a.N = N2, a.K = F, a.x = x, a.ldx = x_glu ? 2 * F : F;
          a.x_glu = x_glu, a.glu_kind = kind, a.w = dw2.p, a.y = static_cast<float*>(y);
          a.ldy = N2, a.scale_rows = false;
          ASSERT_TRUE(fk::quant_gemv(a, nullptr).ok());
          CUDA_OK(cudaDeviceSynchronize());
        };
        auto get16 = [&](const DevMem& d) {
          std::vector<uint16_t> v(F);
          EXPECT_EQ(cudaMemcpy(v.data(), d.p, F * 2, cudaMemcpyDeviceToHost), cudaSuccess);
          return v;
        };
        gate_up(nullptr, kind, false);  // the fp32 gate|up rows
        ASSERT_TRUE(
            fk::glu(kBF, kind, 1, F, static_cast<const float*>(dgu.p), dact.p, nullptr).ok());
        CUDA_OK(cudaDeviceSynchronize());
        const std::vector<uint16_t> act = get16(dact);
        for (bool pdl : {false, true}) {
          CUDA_OK(cudaMemset(dh.p, 0xff, F * 2));
          gate_up(dh.p, kind, pdl);
          EXPECT_EQ(act, get16(dh)) << "glu_out against the GLU kernel, pdl " << pdl;
        }
        // the consumer: fed glu_out, or the fp32 rows with x_glu
        if (F % fk::quant_block_elems(t) == 0) {  // a width the consumer's blocks divide
          down(dh.p, false, dy.p);
          down(dgu.p, true, dy2.p);
          std::vector<float> y(N2), y2(N2);
          CUDA_OK(cudaMemcpy(y.data(), dy.p, N2 * 4, cudaMemcpyDeviceToHost));
          CUDA_OK(cudaMemcpy(y2.data(), dy2.p, N2 * 4, cudaMemcpyDeviceToHost));
          EXPECT_EQ(0, std::memcmp(y.data(), y2.data(), N2 * 4)) << "the consumer's bits";
        }
        const fk::GluKind other =
            kind == fk::GluKind::kSwiGLU ? fk::GluKind::kGeGLU : fk::GluKind::kSwiGLU;
        gate_up(dh.p, other, false);
        EXPECT_NE(act, get16(dh)) << "negative control: the other GLU kind";
      }
    }
  }
}

TEST(QuantGemv, RejectsBadArguments) {
  DevMem buf(1 << 20), out(64);
  ASSERT_TRUE(buf.p && out.p);
  CUDA_OK(cudaMemset(buf.p, 0, 1 << 20));
  fk::QuantGemvArgs a;  // valid (all-zero blocks and x): y = 0
  a.type = QuantType::kQ4_K, a.M = 1, a.N = 4, a.K = 256, a.x = buf.p, a.ldx = 256, a.w = buf.p;
  a.y = static_cast<float*>(out.p), a.ldy = 4;
  EXPECT_TRUE(fk::quant_gemv(a, nullptr).ok());
  auto bad = [&](auto change, const char* what) {
    fk::QuantGemvArgs b = a;
    change(b);
    const fk::Status s = fk::quant_gemv(b, nullptr);
    EXPECT_FALSE(s.ok()) << what;
    EXPECT_NE(s.message.find(what), std::string::npos) << s.message;
  };
  bad([](auto& b) { b.M = 9; }, "M");
  bad([](auto& b) { b.K = 100; }, "K");
  bad(
      [](auto& b) {
        b.K = 256 * 512;  // 2.5 bytes of staged x per element: 320 KiB
        b.ldx = b.K;
      },
      "200 KiB");
  bad([](auto& b) { b.ldx = 255; }, "ldx");
  bad([](auto& b) { b.w = static_cast<const char*>(b.w) + 2; }, "16-byte");
  bad([](auto& b) { b.gain = reinterpret_cast<const float*>(static_cast<const char*>(b.w) + 4); },
      "gain must be 16-byte");
  bad([](auto& b) { b.ldy = 3; }, "ldy");
  bad([](auto& b) { b.y = nullptr; }, "non-null");
  void* h = static_cast<char*>(out.p) + 32;            // glu_out: 2 values of N = 4
  auto bad_glu = [&](auto change, const char* what) {  // with glu_out set and y null
    bad(
        [&](auto& b) {
          b.glu_out = h, b.y = nullptr;
          change(b);
        },
        what);
  };
  bad_glu([](auto& b) { b.M = 2; }, "glu_out needs M == 1");
  bad_glu([](auto& b) { b.N = 3; }, "glu_out needs M == 1, N even");
  bad_glu([](auto& b) { b.accumulate = true; }, "no x_glu, accumulate");
  bad_glu([&](auto& b) { b.glu_out = static_cast<char*>(h) + 1; }, "2-byte aligned");
  bad_glu(
      [](auto& b) {
        b.x_glu = true;
        b.ldx = 512;
      },
      "no x_glu");
  bad_glu([&](auto& b) { b.y_rounded = h; }, "y_rounded");
  bad_glu([&](auto& b) { b.y = static_cast<float*>(out.p); }, "or y (it is not written)");
  fk::QuantGemvArgs g = a;  // valid: y unused, glu_out = act(0) * 0 = 0
  g.glu_out = h, g.y = nullptr;
  EXPECT_TRUE(fk::quant_gemv(g, nullptr).ok());
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace

// quant_dequantize (kernels/cuda/quant_dequant.h) against io::dequantize: every element of the tile
// is round_dt(w * gain) of the fp32 reference value (identical fp32 operations, one rounding), so
// equal bit for bit, with and without a gain, into a row stride wider than K; bad arguments named.
TEST(QuantDequantize, EqualsIoDequantizeRoundedOnce) {
  for (QuantType t : {QuantType::kQ4_0, QuantType::kQ4_1, QuantType::kQ5_0, QuantType::kQ8_0,
                      QuantType::kQ4_K, QuantType::kQ6_K}) {
    for (fk::DType dt : {kBF, kFP}) {
      SCOPED_TRACE(testing::Message() << "type " << int(t) << " dt " << int(dt));
      const int N = 19, K = 512, ldy = K + 8;
      const std::vector<uint8_t> w = random_blocks(t, N, K, 7 + int(t));
      std::vector<float> wf(size_t(N) * K);
      io::dequantize(ggml(t), w, wf);
      std::vector<float> gain(K);
      std::mt19937 rng(5);
      std::uniform_real_distribution<float> u(0.5f, 1.5f);
      for (int k = 0; k < K; ++k) gain[k] = (k % 5 == 2 ? -1.f : 1.f) * u(rng);
      DevMem dw(w.size()), dg(K * 4), dy(size_t(N) * ldy * 2);
      ASSERT_TRUE(dw.p && dg.p && dy.p);
      upload_planar(t, w, dw.p);
      CUDA_OK(cudaMemcpy(dg.p, gain.data(), K * 4, cudaMemcpyHostToDevice));
      for (bool with_gain : {false, true}) {
        fk::QuantDequantArgs a;
        a.type = t, a.dt = dt, a.N = N, a.K = K, a.w = dw.p, a.y = dy.p, a.ldy = ldy;
        a.gain = with_gain ? static_cast<const float*>(dg.p) : nullptr;
        ASSERT_TRUE(fk::quant_dequantize(a, nullptr).ok());
        std::vector<uint16_t> y(size_t(N) * ldy);
        CUDA_OK(cudaMemcpy(y.data(), dy.p, y.size() * 2, cudaMemcpyDeviceToHost));
        int wrong = 0;
        for (int n = 0; n < N; ++n)
          for (int k = 0; k < K; ++k) {
            const float v = wf[size_t(n) * K + k] * (with_gain ? gain[k] : 1.f);
            wrong += y[size_t(n) * ldy + k] != to_half_bits(dt, v);
          }
        EXPECT_EQ(wrong, 0) << "with gain " << with_gain;
      }
      fk::QuantDequantArgs b;
      b.type = t, b.dt = dt, b.N = N, b.K = K + 1, b.w = dw.p, b.y = dy.p, b.ldy = ldy + 8;
      const fk::Status s = fk::quant_dequantize(b, nullptr);
      EXPECT_FALSE(s.ok());
      EXPECT_NE(s.message.find("K must"), std::string::npos) << s.message;
    }
  }
}

// The fused decode ops: x_glu (x the fp32 gate|up rows [M, 2K], staged as round(silu(g) * u) /
// round(gelu_tanh(g) * u)) and accumulate (y += result; y_rounded = round(y)), against the fp64
// reference of the same formula: y0 + (round(act(g) u)) W^T, within the loose bound above (fp32
// sums and the int16 staging, plus one dt ulp of the staged input for the GLU's fast exp).
TEST(QuantGemv, FusedGluAndResidualAdd) {
  for (QuantType t : {QuantType::kQ4_1, QuantType::kQ4_K, QuantType::kQ6_K}) {
    for (fk::GluKind kind : {fk::GluKind::kSwiGLU, fk::GluKind::kGeGLU}) {
      SCOPED_TRACE(testing::Message() << "type " << int(t) << " glu " << int(kind));
      // 14336 with 37 rows: K split 3 ways, 7 with PDL (quant_gemv_split); with 2200 rows (138
      // row groups) Q4_K and Q6_K take whole rows staged in seven passes, as in the engine's down
      // projection (Q4_1 splits 3 ways)
      for (const std::pair<int, int>& kn :
           {std::pair{1280, 37}, std::pair{14336, 37}, std::pair{14336, 2200}}) {
        const int K = kn.first, N = kn.second, M = 1;
        SCOPED_TRACE(testing::Message() << "K " << K << " N " << N);
        const std::vector<uint8_t> w = random_blocks(t, N, K, 21);
        std::vector<float> wf(size_t(N) * K);
        io::dequantize(ggml(t), w, wf);
        std::mt19937 rng(9);
        std::normal_distribution<float> nd(0.f, 1.5f);
        std::vector<float> gu(size_t(M) * 2 * K), y0(size_t(M) * N);
        for (float& v : gu) v = nd(rng);
        for (float& v : y0) v = nd(rng);
        DevMem dw(w.size()), dx(gu.size() * 4), dy(y0.size() * 4), dr(y0.size() * 2);
        ASSERT_TRUE(dw.p && dx.p && dy.p && dr.p);
        upload_planar(t, w, dw.p);
        CUDA_OK(cudaMemcpy(dx.p, gu.data(), gu.size() * 4, cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(dy.p, y0.data(), y0.size() * 4, cudaMemcpyHostToDevice));
        fk::QuantGemvArgs a;
        a.type = t, a.dt = kBF, a.M = M, a.N = N, a.K = K, a.x = dx.p, a.ldx = 2 * K;
        a.x_glu = true, a.glu_kind = kind, a.w = dw.p, a.y = static_cast<float*>(dy.p), a.ldy = N;
        a.scale_rows = false, a.accumulate = true, a.y_rounded = dr.p;
        ASSERT_TRUE(fk::quant_gemv(a, nullptr).ok());
        std::vector<float> y(y0.size());
        std::vector<uint16_t> yr(y0.size());
        CUDA_OK(cudaMemcpy(y.data(), dy.p, y.size() * 4, cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(yr.data(), dr.p, yr.size() * 2, cudaMemcpyDeviceToHost));
        // the largest error over its allowance, and the rounded outputs that are not round(y)
        auto check = [&](const std::vector<float>& yy, const std::vector<uint16_t>& yyr) {
          double worst = 0;
          int rounded_wrong = 0;
          for (int m = 0; m < M; ++m) {
            std::vector<double> xg(K);
            std::vector<double> db(K / 32, 0.0);
            for (int k = 0; k < K; ++k) {
              const double g = gu[size_t(m) * 2 * K + k], u = gu[size_t(m) * 2 * K + K + k];
              const double act =
                  kind == fk::GluKind::kSwiGLU
                      ? g / (1 + std::exp(-g))
                      : 0.5 * g * (1 + std::tanh(0.7978845608028654 * (g + 0.044715 * g * g * g)));
              xg[k] = from_half_bits(kBF, to_half_bits(kBF, float(act * u)));
              db[k / 32] = std::max(db[k / 32], std::fabs(xg[k]) / 32767);
            }
            for (int n = 0; n < N; ++n) {
              double ref = y0[size_t(m) * N + n], mag = std::fabs(ref), allow = 0;
              for (int k = 0; k < K; ++k) {
                const double wk = wf[size_t(n) * K + k];
                ref += xg[k] * wk, mag += std::fabs(xg[k] * wk);
                // int16 staging, and one bf16 ulp (2^-8 relative) of the staged value
                allow += (0.505 * db[k / 32] + std::fabs(xg[k]) / 256) * std::fabs(wk);
              }
              const float got = yy[size_t(m) * N + n];
              worst = std::max(worst, std::fabs(got - ref) / (2e-6 * mag + allow));
              rounded_wrong += yyr[size_t(m) * N + n] != to_half_bits(kBF, got);
            }
          }
          return std::pair{worst, rounded_wrong};
        };
        const auto [worst, rounded_wrong] = check(y, yr);
        EXPECT_LE(worst, 1.0);
        EXPECT_EQ(rounded_wrong, 0);
        // launched with PDL (Q4_K's GLU instances then load their first steps early): the same bits
        {
          cudaStream_t st = nullptr;
          ASSERT_EQ(cudaStreamCreate(&st), cudaSuccess);
          CUDA_OK(cudaMemcpy(dy.p, y0.data(), y0.size() * 4, cudaMemcpyHostToDevice));
          fk::QuantGemvArgs b = a;
          b.pdl = true;
          ASSERT_TRUE(fk::quant_gemv(b, st).ok());
          CUDA_OK(cudaStreamSynchronize(st));
          CUDA_OK(cudaStreamDestroy(st));
          std::vector<float> yp(y0.size());
          std::vector<uint16_t> yrp(y0.size());
          CUDA_OK(cudaMemcpy(yp.data(), dy.p, yp.size() * 4, cudaMemcpyDeviceToHost));
          CUDA_OK(cudaMemcpy(yrp.data(), dr.p, yrp.size() * 2, cudaMemcpyDeviceToHost));
          if (fk::quant_gemv_split(t, M, N, K, false) == fk::quant_gemv_split(t, M, N, K, true)) {
            EXPECT_EQ(0, std::memcmp(y.data(), yp.data(), y.size() * 4)) << "with PDL";
            EXPECT_EQ(yr, yrp) << "with PDL";
          } else {  // K split in other slices with PDL: the same bound
            const auto [worst_p, wrong_p] = check(yp, yrp);
            EXPECT_LE(worst_p, 1.0) << "with PDL";
            EXPECT_EQ(wrong_p, 0) << "with PDL";
          }
        }
        // negative control: without the residual add the result is off by y0
        a.accumulate = false, a.y_rounded = nullptr;
        ASSERT_TRUE(fk::quant_gemv(a, nullptr).ok());
        std::vector<float> y2(y0.size());
        CUDA_OK(cudaMemcpy(y2.data(), dy.p, y2.size() * 4, cudaMemcpyDeviceToHost));
        double diff = 0;
        for (size_t i = 0; i < y.size(); ++i)
          diff = std::max(diff, double(std::fabs(y[i] - y2[i])));
        EXPECT_GT(diff, 0.5);
      }
    }
  }
}
