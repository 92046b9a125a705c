// Folding the real SmolLM2-135M GGUF: what changes, what must not, and refusals.
#include <gtest/gtest.h>

#include <cstring>

#include "flashnorm/error.h"
#include "flashnorm/fold/fold.h"
#include "flashnorm/io/dequant.h"
#include "flashnorm/io/gguf.h"
#include "support/random_llama.h"

namespace flashnorm {
namespace {
namespace fs = std::filesystem;

std::vector<float> deq(const io::GgufFile& f, const std::string& name) {
  const io::GgufTensorInfo* t = f.find_tensor(name);
  EXPECT_NE(t, nullptr) << name;
  std::vector<float> v(t->n_elements);
  io::dequantize(t->type, f.tensor_data(*t), v);
  return v;
}

// The fold runs once per process, in SetUp (not SetUpTestSuite, whose failures googletest
// reports as skipped tests), and is removed when the suite ends.
class FoldSmolLM2 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!dir_.empty()) return;
    src_ = testing::smollm2_path();
    ASSERT_TRUE(fs::exists(src_)) << src_ << " missing: run scripts/fetch_models.sh";
    before_ = testing::fingerprint(src_);
    fs::path d = testing::fresh_dir("fold_gguf");
    fold_gguf(src_, d / "f32.gguf");
    dir_ = d;
  }
  static void TearDownTestSuite() {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  static inline std::string src_;
  static inline fs::path dir_;
  static inline uint64_t before_ = 0;
};

TEST_F(FoldSmolLM2, InputUntouched) { EXPECT_EQ(testing::fingerprint(src_), before_); }

TEST_F(FoldSmolLM2, ConsumersAreFoldedColumnByColumn) {
  io::GgufFile a = io::GgufFile::open(src_), b = io::GgufFile::open(dir_ / "f32.gguf");
  for (int l : {0, 17, 29}) {
    const std::string p = "blk." + std::to_string(l) + ".";
    for (auto [norm, cons] :
         {std::pair{"attn_norm", "attn_q"}, {"attn_norm", "attn_v"}, {"ffn_norm", "ffn_up"}}) {
      auto g = deq(a, p + norm + ".weight");
      auto w = deq(a, p + cons + ".weight");
      auto wf = deq(b, p + cons + ".weight");
      ASSERT_EQ(w.size(), wf.size());
      EXPECT_EQ(b.find_tensor(p + cons + ".weight")->type, io::GgmlType::F32);
      for (size_t i = 0; i < w.size(); ++i) {
        ASSERT_EQ(wf[i], static_cast<float>(double(w[i]) * g[i % g.size()])) << p << cons << i;
      }
      for (float v : deq(b, p + norm + ".weight")) ASSERT_EQ(v, 1.0f);
    }
  }
}

TEST_F(FoldSmolLM2, TiedHeadUntiedEmbeddingBytesUnchanged) {
  io::GgufFile a = io::GgufFile::open(src_), b = io::GgufFile::open(dir_ / "f32.gguf");
  EXPECT_EQ(a.find_tensor("output.weight"), nullptr);
  ASSERT_NE(b.find_tensor("output.weight"), nullptr);
  auto ea = a.tensor_data(*a.find_tensor("token_embd.weight"));
  auto eb = b.tensor_data(*b.find_tensor("token_embd.weight"));
  ASSERT_EQ(ea.size(), eb.size());
  EXPECT_EQ(std::memcmp(ea.data(), eb.data(), ea.size()), 0);
  auto emb = deq(a, "token_embd.weight");
  auto g = deq(a, "output_norm.weight");
  auto head = deq(b, "output.weight");
  for (size_t i = 0; i < head.size(); i += 997) {
    ASSERT_EQ(head[i], static_cast<float>(double(emb[i]) * g[i % g.size()]));
  }
}

TEST_F(FoldSmolLM2, UnfoldedTensorsAndMetadataKept) {
  io::GgufFile a = io::GgufFile::open(src_), b = io::GgufFile::open(dir_ / "f32.gguf");
  for (const auto& t : a.tensors()) {
    if (t.name.find("attn_output") == std::string::npos &&
        t.name.find("ffn_down") == std::string::npos)
      continue;
    const io::GgufTensorInfo* u = b.find_tensor(t.name);
    ASSERT_NE(u, nullptr);
    EXPECT_EQ(u->type, t.type);
    auto x = a.tensor_data(t), y = b.tensor_data(*u);
    ASSERT_EQ(x.size(), y.size());
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size()), 0) << t.name;
  }
  ASSERT_EQ(b.kvs().size(), a.kvs().size() + 2);
  for (size_t i = 0; i < a.kvs().size(); ++i) EXPECT_EQ(a.kvs()[i].key, b.kvs()[i].key);
  EXPECT_TRUE(b.get_bool_or("flashnorm.folded", false));
  EXPECT_EQ(b.string_array("tokenizer.ggml.tokens"), a.string_array("tokenizer.ggml.tokens"));
}

TEST_F(FoldSmolLM2, FoldingTwiceRefusedAndInputNeverOverwritten) {
  const fs::path once = dir_ / "f32.gguf";
  const uint64_t fp = testing::fingerprint(once);
  EXPECT_THROW(
      {
        try {
          fold_gguf(once, dir_ / "twice.gguf");
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("already folded"), std::string::npos);
          throw;
        }
      },
      Error);
  EXPECT_FALSE(fs::exists(dir_ / "twice.gguf"));
  EXPECT_THROW(fold_gguf(src_, src_), Error);
  EXPECT_EQ(testing::fingerprint(src_), before_);
  EXPECT_EQ(testing::fingerprint(once), fp);
}

TEST_F(FoldSmolLM2, RequantizeKeepsTypesAndReportsError) {
  FoldOptions opt;
  opt.requantize = true;
  FoldReport r = fold_gguf(src_, dir_ / "q.gguf", opt);
  io::GgufFile a = io::GgufFile::open(src_), b = io::GgufFile::open(dir_ / "q.gguf");
  EXPECT_EQ(b.find_tensor("blk.3.attn_k.weight")->type, a.find_tensor("blk.3.attn_k.weight")->type);
  EXPECT_EQ(b.find_tensor("output.weight")->type, io::GgmlType::Q8_0);
  auto by_kind = r.requant_rel_rms_by_kind();
  ASSERT_TRUE(by_kind.count("attn_q"));
  // Q4_1 re-rounding of folded weights: a few percent, never zero.
  EXPECT_GT(by_kind["attn_q"], 1e-3);
  EXPECT_LT(by_kind["attn_q"], 0.2);
  EXPECT_GT(by_kind["output"], 1e-4);
  EXPECT_LT(by_kind["output"], 0.05);
}

TEST_F(FoldSmolLM2, RequantizeToATypeWithKQuantFallback) {
  // Q8_0: every folded tensor, each within Q8_0's rounding of the folded values.
  FoldOptions opt;
  opt.requantize = true;
  opt.requantize_type = io::GgmlType::Q8_0;
  FoldReport r = fold_gguf(src_, dir_ / "q8.gguf", opt);
  io::GgufFile b = io::GgufFile::open(dir_ / "q8.gguf");
  for (const auto& t : r.tensors) {
    EXPECT_EQ(b.find_tensor(t.name)->type, io::GgmlType::Q8_0) << t.name;
    EXPECT_TRUE(t.requested_type.empty());
    EXPECT_LT(t.requant_rel_rms, 0.02) << t.name;
  }
  EXPECT_EQ(b.get_string("flashnorm.fold_type"), "requantized:Q8_0");
  // Q6_K: SmolLM2's rows of 576 are not whole super-blocks of 256, so Q8_0 (llama.cpp's
  // fallback), recorded per tensor.
  opt.requantize_type = io::GgmlType::Q6_K;
  r = fold_gguf(src_, dir_ / "q6k.gguf", opt);
  ASSERT_FALSE(r.tensors.empty());
  for (const auto& t : r.tensors) {
    EXPECT_EQ(t.out_type, "Q8_0") << t.name;
    EXPECT_EQ(t.requested_type, "Q6_K") << t.name;
  }
  EXPECT_EQ(requantize_fallback(io::GgmlType::Q4_K), io::GgmlType::Q5_0);
  EXPECT_EQ(requantize_fallback(io::GgmlType::Q5_K), io::GgmlType::Q5_1);
  EXPECT_EQ(requantize_fallback(io::GgmlType::Q4_1), io::GgmlType::Q4_1);
  // A type flashnorm cannot write is refused by name, before any output exists.
  opt.requantize_type = io::GgmlType::Q8_K;
  try {
    fold_gguf(src_, dir_ / "q8k.gguf", opt);
    ADD_FAILURE() << "Q8_K accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--requantize Q8_K"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir_ / "q8k.gguf"));
  fs::remove(dir_ / "q8.gguf");
  fs::remove(dir_ / "q6k.gguf");
}

}  // namespace
}  // namespace flashnorm
