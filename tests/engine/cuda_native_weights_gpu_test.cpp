// The CUDA engine on native GGUF weights (a model loaded with WeightStorage::kNative: projections
// kept in their GGML blocks, quant_gemv for passes of up to 8 tokens, quant_dequantize tiles for
// longer ones; issue "On the H200 (2)", item 2) against the CPU engine on the same file's weights
// dequantized to fp32 (the exact reference: io::dequantize, bit-identical to gguf-py's). Random
// Llama (tied head) and Gemma 3 (QK-norm: the q and k rows' rstd cancels, post norms) checkpoints
// whose matrices are quantized by io::quantize into every type quant_gemv reads, one type per
// projection kind, so that q|k|v runs as three parts of three types; in both files layer 1's q is
// Q5_K, which quant_gemv does not read, so that layer's q|k|v is uploaded in bf16 (the mixed case).
// Both modes; prompt passes (tiles) teacher-forced, then decode steps (quant_gemv, graph replay)
// one by one. The bars are the bf16 engine's against fp32 (cuda_engine_gpu_test.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <span>

#include "flashnorm/engine/cpu_engine.h"
#include "flashnorm/engine/cuda_engine.h"
#include "flashnorm/engine/evaluate.h"
#include "flashnorm/io/dequant.h"
#include "flashnorm/io/gguf.h"
#include "flashnorm/model/model.h"
#include "support/gguf_rewrite.h"
#include "support/random_llama.h"

namespace flashnorm {
namespace {

using io::GgmlType;

// The type each matrix is quantized to (K = its row length): every quant_gemv format appears.
GgmlType type_for(const std::string& name, uint64_t K) {
  const bool k256 = K % 256 == 0;
  if (name == "blk.1.attn_q.weight") return GgmlType::Q5_K;  // not read by quant_gemv: bf16
  if (name.find("attn_q.") != std::string::npos) return k256 ? GgmlType::Q4_K : GgmlType::Q4_0;
  if (name.find("attn_k.") != std::string::npos) return GgmlType::Q5_0;
  if (name.find("attn_v.") != std::string::npos) return GgmlType::Q8_0;
  if (name.find("attn_output.") != std::string::npos) return GgmlType::Q4_0;
  if (name.find("ffn_gate.") != std::string::npos) return GgmlType::Q4_1;
  if (name.find("ffn_up.") != std::string::npos) return GgmlType::Q4_1;
  if (name.find("ffn_down.") != std::string::npos) return k256 ? GgmlType::Q6_K : GgmlType::Q5_0;
  return k256 ? GgmlType::Q6_K : GgmlType::Q8_0;  // token_embd, output
}

// A random checkpoint (tests/support/random_llama.h) as GGUF with its matrices quantized.
std::string quantized_gguf(bool gemma, int ffn = 512) {
  static std::map<std::pair<bool, int>, std::string> made;
  if (made.count({gemma, ffn})) return made[{gemma, ffn}];
  const auto dir =
      testing::fresh_dir(std::string(gemma ? "native_g3_" : "native_ll_") + std::to_string(ffn));
  testing::RandomLlamaOptions o =
      gemma ? testing::small_gemma3_options(13) : testing::RandomLlamaOptions{};
  o.hidden = 256, o.ffn = ffn, o.n_head = 4, o.head_dim = 64, o.vocab = 320;
  o.n_head_kv = gemma ? 1 : 2;
  if (!gemma) o.n_layer = 3, o.seed = 9;
  testing::write_random_gguf(dir / "f32.gguf", o);
  const auto out = dir / "q.gguf";
  testing::rewrite_gguf(dir / "f32.gguf", out, [](auto&, std::vector<io::GgufTensorOut>& ts) {
    for (io::GgufTensorOut& t : ts) {
      if (t.dims.size() != 2) continue;
      std::vector<float> v(t.bytes.size() / 4);
      std::memcpy(v.data(), t.bytes.data(), t.bytes.size());
      t.type = type_for(t.name, t.dims[0]);
      t.bytes = io::quantize(t.type, v);
    }
  });
  return made[{gemma, ffn}] = out.string();
}

struct Case {
  const char* name;
  bool gemma;
  NormMode mode;
};

class CudaNativeWeights : public ::testing::TestWithParam<Case> {};

TEST_P(CudaNativeWeights, MatchCpuFp32OfTheSameBlocks) {
  const Case c = GetParam();
  const std::string path = quantized_gguf(c.gemma);
  CpuEngine cpu(load_model(path, true, WeightStorage::kF32), NormMode::Standard,
                {.max_context = 128});
  CudaEngine gpu(load_model(path, true, WeightStorage::kNative), c.mode);
  const std::string desc = gpu.describe();
  std::printf("[%s] %s\n", c.name, desc.c_str());
  // every projection in its blocks (layers x 4 + head) but layer 1's q|k|v (its q is Q5_K)
  EXPECT_NE(desc.find(c.gemma ? "24 of 25 projections in their blocks"
                              : "12 of 13 projections in their blocks"),
            std::string::npos)
      << desc;
  const int V = cpu.config().vocab;
  std::mt19937 rng(4);
  std::uniform_int_distribution<int32_t> tok(0, V - 1);
  std::vector<int32_t> seq(192);
  for (auto& t : seq) t = tok(rng);
  // prompt passes of 96 tokens: the expanded tiles (FlashNorm, PrefillNorm::kInAdd: the residual
  // adds write x * rstd * g, as Standard's fused add does); 48 tokens: rstd deferred to the GEMM
  // on a tile with the gain folded in
  const ComparisonStats st = compare_teacher_forced(cpu, &gpu, seq, 96);
  const double top1 = double(st.top1_agree) / st.positions;
  std::printf("[%s] prompt: top-1 %.4f max rel logit diff %.3e ppl cpu %.4f gpu %.4f\n", c.name,
              top1, st.max_rel_logit_diff, st.ppl_a(), st.ppl_b());
  EXPECT_LT(st.max_rel_logit_diff, 3e-2);
  EXPECT_GE(top1, 0.9);
  EXPECT_NEAR(st.ppl_b() / st.ppl_a(), 1.0, 0.01);
  const ComparisonStats s48 = compare_teacher_forced(cpu, &gpu, std::span(seq).first(96), 48);
  std::printf("[%s] 48-token prompts: top-1 %.4f max rel logit diff %.3e\n", c.name,
              double(s48.top1_agree) / s48.positions, s48.max_rel_logit_diff);
  EXPECT_LT(s48.max_rel_logit_diff, 3e-2);
  // a 96-token prompt with the last token's logits only (generate's prefill): the head's one row
  // through quant_gemv on the add's normalized x (the final gain in it)
  cpu.reset(), gpu.reset();
  const std::span<const int32_t> prompt(seq.data(), 96);
  const double dlast = max_rel_diff(cpu.forward(prompt), gpu.forward(prompt));
  std::printf("[%s] 96-token prompt, last logits: max rel logit diff %.3e\n", c.name, dlast);
  EXPECT_LT(dlast, 3e-2);
  // decode: 8 prompt tokens (quant_gemv at M = 8), then one token per step (M = 1, graph replay)
  cpu.reset(), gpu.reset();
  const std::span<const int32_t> head(seq.data(), 8);
  const std::vector<float> a0 = cpu.forward(head), b0 = gpu.forward(head);
  double worst = max_rel_diff(a0, b0);
  int same = 0, n = 0;
  for (size_t t = 8; t < 72; ++t, ++n) {
    const std::vector<float> a = cpu.forward(std::span<const int32_t>(&seq[t], 1));
    const std::vector<float> b = gpu.forward(std::span<const int32_t>(&seq[t], 1));
    worst = std::max(worst, max_rel_diff(a, b));
    same += std::max_element(a.begin(), a.end()) - a.begin() ==
            std::max_element(b.begin(), b.end()) - b.begin();
  }
  std::printf("[%s] decode: top-1 %.4f max rel logit diff %.3e\n", c.name, double(same) / n, worst);
  EXPECT_LT(worst, 3e-2);
  EXPECT_GE(double(same) / n, 0.9);
}

// An FFN of 14336 (Llama 3 8B's): the down projection's staged x for 8 rows exceeds quant_gemv's
// shared memory, so passes of 5-8 tokens run in slices of rows. Each pass length 1..8 against the
// CPU fp32 engine.
TEST(CudaNativeWeightsWide, ShortPassesOfAWideFfn) {
  const std::string path = quantized_gguf(false, 14336);
  for (NormMode mode : {NormMode::Standard, NormMode::FlashNorm}) {
    CpuEngine cpu(load_model(path, true, WeightStorage::kF32), NormMode::Standard,
                  {.max_context = 128});
    CudaEngine gpu(load_model(path, true, WeightStorage::kNative), mode);
    const int V = cpu.config().vocab;
    std::vector<int32_t> seq;
    for (int i = 0; i < 36; ++i) seq.push_back((i * 37 + 11) % V);
    double worst = 0;
    size_t at = 0;
    for (int n = 1; n <= 8; ++n) {  // passes of 1, 2, ..., 8 tokens
      const std::span<const int32_t> part(seq.data() + at, n);
      worst = std::max(worst, max_rel_diff(cpu.forward(part), gpu.forward(part)));
      at += n;
    }
    std::printf("[wide ffn, %s] passes of 1..8 tokens: max rel logit diff %.3e\n",
                mode == NormMode::Standard ? "standard" : "flashnorm", worst);
    EXPECT_LT(worst, 3e-2);
  }
}

// CudaLaunch::quant_glu_out: the gate|up quant_gemv writes the GLU and down reads it, in place of
// down staging the GLU of the fp32 gate|up rows (x_glu). The same values, so the same logits bit
// for bit at every one-token step, in both modes, SwiGLU (Llama) and GeGLU (Gemma 3; gate and up
// are both Q4_1 here: one part). describe() counts the layers that take it (the engine's own
// predicate, Forward::glu_in_gate_up) and names it only where the option is on.
TEST(CudaNativeWeightsGluEpilogue, SameLogitsBitForBit) {
  for (bool gemma : {false, true}) {
    const Model model = load_model(quantized_gguf(gemma), true, WeightStorage::kNative);
    for (NormMode mode : {NormMode::Standard, NormMode::FlashNorm}) {
      SCOPED_TRACE(::testing::Message() << (gemma ? "gemma3 " : "llama ")
                                        << (mode == NormMode::Standard ? "standard" : "flashnorm"));
      CudaEngineOptions on;
      on.launch.quant_glu_out = true;
      CudaEngine a(model, mode), b(model, mode, on);
      // every layer takes it (gate and up one Q4_1 part, no split at these widths)
      const int L = model.cfg.n_layer;
      EXPECT_EQ(a.describe().find("GLU in the gate|up epilogue"), std::string::npos);
      EXPECT_NE(b.describe().find(", GLU in the gate|up epilogue (" + std::to_string(L) + " of " +
                                  std::to_string(L) + " layers)"),
                std::string::npos)
          << b.describe();
      const int V = model.cfg.vocab;
      std::vector<int32_t> seq;
      for (int i = 0; i < 40; ++i) seq.push_back((i * 53 + 7) % V);
      const std::span<const int32_t> prompt(seq.data(), 8);
      EXPECT_EQ(a.forward(prompt), b.forward(prompt));  // 8 rows: x_glu in both
      int differ = 0;
      for (size_t t = 8; t < seq.size(); ++t) {
        const std::span<const int32_t> one(&seq[t], 1);
        differ += a.forward(one) != b.forward(one);
      }
      EXPECT_EQ(differ, 0) << "one-token steps whose logits differ";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, CudaNativeWeights,
                         ::testing::Values(Case{"llama_standard", false, NormMode::Standard},
                                           Case{"llama_flashnorm", false, NormMode::FlashNorm},
                                           Case{"gemma3_standard", true, NormMode::Standard},
                                           Case{"gemma3_flashnorm", true, NormMode::FlashNorm}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace flashnorm
