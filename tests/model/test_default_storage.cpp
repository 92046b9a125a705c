// cpu_default_storage (flashnorm/model/model.h): the weights `--weights auto` runs on the CPU.
// Native for a GGUF with a block-quantized matrix the native path reads (a random F32 file with
// one matrix rewritten as Q8_0; the real SmolLM2 Q4_1 and Gemma 3 Q4_K_M files); fp32 for an
// F32 GGUF, a Hugging Face directory, and a GGUF holding a matrix type only dequantization reads
// (Q8_K).
#include <gtest/gtest.h>

#include "flashnorm/io/gguf.h"
#include "flashnorm/model/model.h"
#include "support/gguf_rewrite.h"
#include "support/random_llama.h"

namespace flashnorm {
namespace {
namespace fs = std::filesystem;

// `in` with its 2-D tensor `name` rewritten as `type` (zero blocks: scale 0, valid bytes).
fs::path with_type(const fs::path& in, const fs::path& out, const std::string& name,
                   io::GgmlType type, size_t block_elems, size_t block_bytes) {
  testing::rewrite_gguf(in, out, [&](auto&, std::vector<io::GgufTensorOut>& ts) {
    for (auto& t : ts) {
      if (t.name != name) continue;
      t.type = type;
      t.bytes.assign(t.dims[0] * t.dims[1] / block_elems * block_bytes, 0);
    }
  });
  return out;
}

TEST(CpuDefaultStorage, QuantizedGgufRunsNativeOthersF32) {
  const fs::path dir = testing::fresh_dir("default_storage");
  testing::RandomLlamaOptions o;
  o.hidden = 256, o.n_head = 4, o.n_head_kv = 2, o.ffn = 256;
  const fs::path f32 = dir / "f32.gguf";
  testing::write_random_gguf(f32, o);
  testing::write_random_llama(dir / "hf", o);
  EXPECT_EQ(cpu_default_storage(f32), WeightStorage::kF32);
  EXPECT_EQ(cpu_default_storage(dir / "hf"), WeightStorage::kF32);
  const fs::path q8 =
      with_type(f32, dir / "q8_0.gguf", "blk.0.attn_q.weight", io::GgmlType::Q8_0, 32, 34);
  EXPECT_EQ(cpu_default_storage(q8), WeightStorage::kNative);
  // the file loads as chosen
  EXPECT_NE(load_model(q8, true, cpu_default_storage(q8)).file, nullptr);
  // one matrix the native path cannot read: the whole model stays on the fp32 path
  const fs::path q8k =
      with_type(q8, dir / "q8_k.gguf", "blk.1.attn_q.weight", io::GgmlType::Q8_K, 256, 292);
  EXPECT_EQ(cpu_default_storage(q8k), WeightStorage::kF32);
}

TEST(CpuDefaultStorage, RealQuantizedModelsRunNative) {
  for (const std::string& p : {testing::smollm2_path(), testing::gemma3_path()}) {
    if (!fs::exists(p)) GTEST_SKIP() << "needs " << p << " (scripts/fetch_models.sh)";
    EXPECT_EQ(cpu_default_storage(p), WeightStorage::kNative) << p;
  }
}

}  // namespace
}  // namespace flashnorm
