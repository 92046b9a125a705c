// `fold --keep-tied-head` (FoldOptions::keep_tied_head) on the real SmolLM2-135M GGUF: the final
// norm keeps its gain and the LM head its tie (no output.weight), the file is marked
// flashnorm.final_norm_kept, is no larger than the input (but for its metadata keys) when
// requantized to the same types, and
// the CPU engine computes the unfolded model's function from it in both norm modes: teacher-forced
// perplexity and greedy tokens against the unfolded file in standard mode. Refusals: an untied
// head, a Hugging Face directory, a marker in a file that does not satisfy it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "flashnorm/engine/cpu_engine.h"
#include "flashnorm/engine/evaluate.h"
#include "flashnorm/error.h"
#include "flashnorm/fold/fold.h"
#include "flashnorm/io/gguf.h"
#include "flashnorm/model/model.h"
#include "flashnorm/tokenizer/model_tokenizer.h"
#include "support/random_llama.h"

namespace flashnorm {
namespace {
namespace fs = std::filesystem;

class KeepTiedHead : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!dir_.empty()) return;
    src_ = testing::smollm2_path();
    ASSERT_TRUE(fs::exists(src_)) << src_ << " missing: run scripts/fetch_models.sh";
    fs::path d = testing::fresh_dir("fold_keep_head");
    FoldOptions opt;
    opt.keep_tied_head = true;
    report_ = fold_gguf(src_, d / "kept_f32.gguf", opt);
    dir_ = d;
  }
  static void TearDownTestSuite() {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  static inline std::string src_;
  static inline fs::path dir_;
  static inline FoldReport report_;
};

TEST_F(KeepTiedHead, FinalGainAndTieKeptFileMarked) {
  EXPECT_TRUE(report_.kept_tied_head);
  EXPECT_FALSE(report_.untied_head);
  for (const auto& t : report_.tensors) EXPECT_NE(t.kind, "output") << t.name;
  io::GgufFile a = io::GgufFile::open(src_), b = io::GgufFile::open(dir_ / "kept_f32.gguf");
  EXPECT_EQ(b.find_tensor("output.weight"), nullptr);
  for (const char* name : {"output_norm.weight", "token_embd.weight"}) {
    auto x = a.tensor_data(*a.find_tensor(name)), y = b.tensor_data(*b.find_tensor(name));
    ASSERT_EQ(x.size(), y.size()) << name;
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size()), 0) << name;
  }
  EXPECT_TRUE(b.get_bool_or(std::string(kFinalNormKeptKey), false));
  EXPECT_TRUE(b.get_bool_or(std::string(kFoldedKey), false));
  EXPECT_TRUE(load_model(dir_ / "kept_f32.gguf", false).cfg.final_norm_kept);
}

TEST_F(KeepTiedHead, RequantizedToTheSameTypesIsNoLarger) {
  FoldOptions opt;
  opt.keep_tied_head = true;
  opt.requantize = true;
  fold_gguf(src_, dir_ / "kept_same.gguf", opt);
  // the same tensors and types; the three flashnorm.* keys add about 128 bytes of metadata
  EXPECT_LE(fs::file_size(dir_ / "kept_same.gguf"), fs::file_size(src_) + 256);
  // without the option the untied head adds vocab x hidden weights
  FoldOptions untie;
  untie.requantize = true;
  fold_gguf(src_, dir_ / "untied_same.gguf", untie);
  EXPECT_GT(fs::file_size(dir_ / "untied_same.gguf"), fs::file_size(src_));
  fs::remove(dir_ / "kept_same.gguf");
  fs::remove(dir_ / "untied_same.gguf");
}

TEST_F(KeepTiedHead, CpuEngineComputesTheUnfoldedFunctionInBothModes) {
  const ModelTokenizer tok = load_model_tokenizer(src_, {}, 49152);
  std::ifstream in("/usr/share/common-licenses/GPL-3");
  ASSERT_TRUE(in) << "GPL-3 text missing";
  std::string text((std::istreambuf_iterator<char>(in)), {});
  std::vector<int32_t> ids = tok.tok.encode(text.substr(0, 4000), false);
  ASSERT_GE(ids.size(), 256u);
  ids.resize(256);
  CpuEngine ref(load_model(src_), NormMode::Standard, {.max_context = 256});
  CpuEngine std_mode(load_model(dir_ / "kept_f32.gguf"), NormMode::Standard, {.max_context = 256});
  CpuEngine fn_mode(load_model(dir_ / "kept_f32.gguf"), NormMode::FlashNorm, {.max_context = 256});
  Engine* bs[] = {&std_mode, &fn_mode};
  const auto stats = compare_teacher_forced(ref, bs, ids, 128);
  const std::vector<int32_t> prompt(ids.begin(), ids.begin() + 16);
  const auto want = greedy_tokens(ref, prompt, 32);
  for (size_t i = 0; i < stats.size(); ++i) {
    SCOPED_TRACE(i == 0 ? "standard" : "flashnorm");
    const ComparisonStats& s = stats[i];
    EXPECT_EQ(s.positions, 254u);
    EXPECT_GT(s.ppl_a(), 1.5);
    EXPECT_LE(std::fabs(s.ppl_b() / s.ppl_a() - 1), 1e-5) << s.ppl_a() << " vs " << s.ppl_b();
    EXPECT_LE(s.max_rel_logit_diff, 1e-4);
    EXPECT_EQ(s.top1_agree, s.positions);
    EXPECT_EQ(greedy_tokens(*bs[i], prompt, 32), want);
  }
}

TEST(KeepTiedHeadRefused, UntiedHeadHfDirectoryAndFalseMarker) {
  const fs::path d = testing::fresh_dir("fold_keep_head_refused");
  testing::RandomLlamaOptions o;
  o.tied = false;
  testing::write_random_gguf(d / "untied.gguf", o);
  FoldOptions opt;
  opt.keep_tied_head = true;
  try {
    fold_gguf(d / "untied.gguf", d / "out.gguf", opt);
    ADD_FAILURE() << "untied head accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not tied"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(d / "out.gguf"));
  testing::write_random_llama(d / "hf", {});
  EXPECT_THROW(fold_hf(d / "hf", d / "hf_out", opt), Error);
  // A marker in a file that is not folded is refused at load, naming the key.
  testing::write_random_gguf(d / "tied.gguf", {});
  io::GgufFile f = io::GgufFile::open(d / "tied.gguf");
  std::vector<io::GgufKv> kvs = f.kvs();
  kvs.push_back({std::string(kFinalNormKeptKey), io::GgufValue::make_bool(true), 0});
  std::vector<io::GgufTensorOut> outs;
  for (const auto& t : f.tensors()) outs.push_back({t.name, t.dims, t.type, {}, f.tensor_data(t)});
  io::write_gguf(d / "marked.gguf", kvs, outs, {});
  try {
    load_model(d / "marked.gguf");
    ADD_FAILURE() << "marker without a fold accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(std::string(kFinalNormKeptKey)), std::string::npos)
        << e.what();
  }
  fs::remove_all(d);
}

}  // namespace
}  // namespace flashnorm
