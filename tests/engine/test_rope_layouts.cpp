// GGUF and Hugging Face files store q/k rows in different RoPE layouts: HF pairs (i, i + d/2)
// (rotate_half), while llama.cpp's converter permutes the rows so that llama GGUF files pair
// (2i, 2i+1). The same random model written both ways must give the same logits in the engine,
// and a GGUF written without the converter's permutation must not.
#include <gtest/gtest.h>

#include <cstring>

#include "flashnorm/engine/cpu_engine.h"
#include "flashnorm/engine/evaluate.h"
#include "flashnorm/io/gguf.h"
#include "flashnorm/model/model.h"
#include "support/random_llama.h"

namespace flashnorm {
namespace {
namespace fs = std::filesystem;

// convert_hf_to_gguf.py's LlamaModel.permute: reshape(n_head, 2, d/2, K).swapaxes(1, 2).
std::vector<float> permute_rows(const Tensor& t, int n_head) {
  const size_t K = t.cols(), rows = t.rows(), D = rows / n_head, half = D / 2;
  std::vector<float> out(t.data.size());
  for (size_t h = 0; h < size_t(n_head); ++h)
    for (size_t i = 0; i < half; ++i)
      for (size_t j = 0; j < 2; ++j)
        std::memcpy(&out[(h * D + 2 * i + j) * K], &t.data[(h * D + j * half + i) * K],
                    K * sizeof(float));
  return out;
}

void write_gguf_copy(const Model& m, const fs::path& path, bool permute) {
  using io::GgufValue;
  const ModelConfig& c = m.cfg;
  std::vector<io::GgufKv> kvs = {
      {"general.architecture", GgufValue::make_string("llama"), 0},
      {"llama.block_count", GgufValue::make_u32(c.n_layer), 0},
      {"llama.context_length", GgufValue::make_u32(c.context), 0},
      {"llama.embedding_length", GgufValue::make_u32(c.hidden), 0},
      {"llama.feed_forward_length", GgufValue::make_u32(c.ffn), 0},
      {"llama.attention.head_count", GgufValue::make_u32(c.n_head), 0},
      {"llama.attention.head_count_kv", GgufValue::make_u32(c.n_head_kv), 0},
      {"llama.rope.freq_base", GgufValue::make_f32(float(c.rope_global.base)), 0},
      {"llama.attention.layer_norm_rms_epsilon", GgufValue::make_f32(c.eps), 0},
  };
  std::vector<io::GgufTensorOut> ts;
  for (const auto& [name, t] : m.tensors) {
    std::vector<float> v = t.data;
    if (permute && name.ends_with("attn_q.weight")) v = permute_rows(t, c.n_head);
    if (permute && name.ends_with("attn_k.weight")) v = permute_rows(t, c.n_head_kv);
    io::GgufTensorOut o{
        name, std::vector<uint64_t>(t.shape.rbegin(), t.shape.rend()), io::GgmlType::F32, {}, {}};
    o.bytes.resize(v.size() * 4);
    std::memcpy(o.bytes.data(), v.data(), o.bytes.size());
    ts.push_back(std::move(o));
  }
  io::write_gguf(path, kvs, ts);
}

TEST(RopeLayouts, HfAndConvertedGgufAgree) {
  const fs::path dir = testing::fresh_dir("rope");
  testing::RandomLlamaOptions opt;
  opt.n_shards = 1;
  opt.seed = 5;
  testing::write_random_llama(dir / "hf", opt);
  Model hf = load_model(dir / "hf");
  ASSERT_EQ(hf.cfg.rope, RopeLayout::Neox);
  write_gguf_copy(hf, dir / "converted.gguf", true);
  write_gguf_copy(hf, dir / "unpermuted.gguf", false);
  Model gg = load_model(dir / "converted.gguf");
  ASSERT_EQ(gg.cfg.rope, RopeLayout::Adjacent);

  std::vector<int32_t> seq;
  for (int i = 0; i < 96; ++i) seq.push_back((i * 31 + 7) % opt.vocab);
  for (NormMode mode : {NormMode::Standard, NormMode::FlashNorm}) {
    CpuEngine a(load_model(dir / "hf"), mode, {.max_context = 128});
    CpuEngine b(load_model(dir / "converted.gguf"), mode, {.max_context = 128});
    CpuEngine c(load_model(dir / "unpermuted.gguf"), mode, {.max_context = 128});
    ComparisonStats same = compare_teacher_forced(a, &b, seq, 96);
    EXPECT_LE(same.max_rel_logit_diff, 1e-5);
    ComparisonStats wrong = compare_teacher_forced(a, &c, seq, 96);
    EXPECT_GT(wrong.max_rel_logit_diff, 1e-3) << "RoPE layout has no effect: test is blind";
  }
}

}  // namespace
}  // namespace flashnorm
