// A fold never loses data silently (issue 17, items 6 and 9): rounding that flushes more than
// kMaxFlushedFraction of a tensor's non-zero values to zero is refused, requantized blocks are
// checked on the values actually written (no inf/NaN, no zeroed blocks), an overflow of f32/bf16
// says what is true, and a HF folded marker other than "true"/"false" is never folded again.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>

#include "flashnorm/error.h"
#include "flashnorm/fold/fold.h"
#include "flashnorm/io/dequant.h"
#include "flashnorm/io/safetensors.h"
#include "support/error_of.h"
#include "support/gguf_rewrite.h"
#include "support/random_llama.h"

namespace flashnorm {
namespace {
namespace fs = std::filesystem;

using testing::error_of;

// A random llama GGUF (F32) whose every norm multiplier is scaled by `gain_scale`, and whose
// blk.0.attn_q.weight is stored as Q8_0 when `q8` (so --requantize has a block type to write).
fs::path model(const fs::path& dir, const std::string& name, float gain_scale, bool q8 = false) {
  testing::RandomLlamaOptions o;
  o.gain_scale = gain_scale;
  testing::write_random_gguf(dir / ("f32_" + name), o);
  testing::rewrite_gguf(dir / ("f32_" + name), dir / name, [&](auto&, auto& ts) {
    if (!q8) return;
    io::GgufTensorOut* t = testing::find_f32(ts, "blk.0.attn_q.weight");
    ASSERT_NE(t, nullptr);
    std::vector<float> v(t->bytes.size() / 4);
    std::memcpy(v.data(), t->bytes.data(), t->bytes.size());
    t->bytes = io::quantize(io::GgmlType::Q8_0, v);
    t->type = io::GgmlType::Q8_0;
  });
  return dir / name;
}

FoldOptions with_dtype(io::GgmlType t) {
  FoldOptions o;
  o.dtype = t;
  return o;
}

TEST(FoldLosses, TinyGainsFlushedToZeroInF16AreRefused) {
  const fs::path d = testing::fresh_dir("fold_flush");
  const fs::path in = model(d, "tiny.gguf", 1e-30f);
  // folded values near 1e-31: every one is 0 in f16 (smallest subnormal 6e-8)
  const std::string e =
      error_of([&] { fold_gguf(in, d / "f16.gguf", with_dtype(io::GgmlType::F16)); });
  EXPECT_NE(e.find("fold: tensor 'blk.0.attn_q.weight': "), std::string::npos) << e;
  EXPECT_NE(e.find("(100%) would be stored as 0 in f16"), std::string::npos) << e;
  EXPECT_NE(e.find("at most 0.1% may be"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(d / "f16.gguf"));
  // f32 and bf16 hold 1e-31 as normal numbers: those folds succeed.
  EXPECT_EQ(error_of([&] { fold_gguf(in, d / "f32.gguf", with_dtype(io::GgmlType::F32)); }), "");
  EXPECT_EQ(error_of([&] { fold_gguf(in, d / "bf16.gguf", with_dtype(io::GgmlType::BF16)); }), "");
}

TEST(FoldLosses, FlushThresholdIsAFractionOfTheNonZeroValues) {
  // 10000 non-zero values, of which 10 (0.1%) or 11 flush to zero in f16; zeros do not count.
  std::vector<double> v(20000, 0.0);
  for (size_t i = 0; i < 10000; ++i) v[2 * i] = 0.5;
  for (size_t i = 0; i < 10; ++i) v[2 * i] = 1e-12;
  EXPECT_NO_THROW(check_folded_range(v, FoldTarget::kF16, "t"));
  v[20] = 1e-12;
  const std::string e = error_of([&] { check_folded_range(v, FoldTarget::kF16, "t"); });
  EXPECT_NE(e.find("11 of its 10000 non-zero values"), std::string::npos) << e;
  EXPECT_NE(e.find("element 0 = 1e-12"), std::string::npos) << e;
  EXPECT_NO_THROW(check_folded_range(v, FoldTarget::kBF16, "t"));
  // f32: below its smallest subnormal (1.4e-45) nothing is left, and no type is wider
  std::vector<double> w(100, 1e-50);
  const std::string f = error_of([&] { check_folded_range(w, FoldTarget::kF32, "t"); });
  EXPECT_NE(f.find("no --dtype reaches smaller values"), std::string::npos) << f;
}

TEST(FoldLosses, RequantizedBlocksAreCheckedAsWritten) {
  const fs::path d = testing::fresh_dir("fold_requant");
  FoldOptions rq;
  rq.requantize = true;
  // Folded values near 3e7 are fine in fp32, but a Q8_0 block scale (max / 127) above f16's
  // 65504 is inf: the block would read back as inf and NaN.
  const fs::path huge = model(d, "huge.gguf", 1e8f, /*q8=*/true);
  const std::string e = error_of([&] { fold_gguf(huge, d / "huge_out.gguf", rq); });
  EXPECT_NE(e.find("fold: tensor 'blk.0.attn_q.weight' element "), std::string::npos) << e;
  EXPECT_NE(e.find("once requantized to Q8_0 (its block's scale overflows)"), std::string::npos)
      << e;
  EXPECT_FALSE(fs::exists(d / "huge_out.gguf"));
  // Folded values near 1e-31: a Q8_0 scale near 1e-33 is 0 in f16, every block reads back 0.
  const fs::path tiny = model(d, "tiny.gguf", 1e-30f, /*q8=*/true);
  const std::string t = error_of([&] { fold_gguf(tiny, d / "tiny_out.gguf", rq); });
  EXPECT_NE(t.find("fold: tensor 'blk.0.attn_q.weight': "), std::string::npos) << t;
  EXPECT_NE(t.find("(100%) would be stored as 0 in Q8_0"), std::string::npos) << t;
  EXPECT_NE(t.find("instead of --requantize"), std::string::npos) << t;
  EXPECT_FALSE(fs::exists(d / "tiny_out.gguf"));
  // Ordinary gains requantize fine.
  const fs::path ok = model(d, "ok.gguf", 1.0f, /*q8=*/true);
  EXPECT_EQ(error_of([&] { fold_gguf(ok, d / "ok_out.gguf", rq); }), "");
}

TEST(FoldLosses, F32AndBf16OverflowAdviceIsTrue) {
  const fs::path d = testing::fresh_dir("fold_overflow");
  testing::write_random_gguf(d / "base.gguf");
  testing::rewrite_gguf(d / "base.gguf", d / "big.gguf", [](auto&, auto& ts) {
    io::GgufTensorOut* g = testing::find_f32(ts, "blk.0.attn_norm.weight");
    io::GgufTensorOut* q = testing::find_f32(ts, "blk.0.attn_q.weight");
    ASSERT_TRUE(g && q);
    for (size_t i = 0; i < g->bytes.size() / 4; ++i) testing::set_f32(*g, i, 3e38f);
    testing::set_f32(*q, 5, 4.0f);  // 1.2e39 once folded: beyond every --dtype
  });
  for (auto t : {io::GgmlType::F32, io::GgmlType::BF16}) {
    const std::string e = error_of([&] { fold_gguf(d / "big.gguf", d / "o.gguf", with_dtype(t)); });
    SCOPED_TRACE(e);
    EXPECT_NE(e.find("'blk.0.attn_q.weight' element 5 = 1.2e+39 after folding overflows"),
              std::string::npos);
    EXPECT_EQ(e.find("wider type"), std::string::npos);
    EXPECT_NE(e.find("no --dtype has a wider range than f32 and bf16"), std::string::npos);
  }
  // f16 overflows first, and there a wider type is the right advice.
  const std::string h =
      error_of([&] { fold_gguf(d / "big.gguf", d / "o.gguf", with_dtype(io::GgmlType::F16)); });
  EXPECT_NE(h.find("fold to a wider type (--dtype bf16 or f32"), std::string::npos) << h;
  EXPECT_FALSE(fs::exists(d / "o.gguf"));
}

TEST(FoldLosses, HfFoldedMarkerOtherThanTrueOrFalseIsNotFoldedAgain) {
  const fs::path d = testing::fresh_dir("fold_marker");
  testing::write_random_llama(d / "m");
  ASSERT_NO_THROW(fold_hf(d / "m", d / "folded"));
  // The folded output with its marker respelled "TRUE": folded twice before.
  io::HfModelDir f = io::HfModelDir::open(d / "folded");
  std::vector<io::StTensorOut> ts;
  for (const auto& n : f.tensor_names()) {
    ts.push_back({n, io::StDtype::F32, f.find(n)->shape, f.load_fp32(n)});
  }
  std::map<std::string, std::string> meta = f.metadata();
  meta["flashnorm.folded"] = "TRUE";
  io::write_hf_dir(d / "shouting", f.config(), ts, meta, static_cast<int>(f.shards().size()));
  const std::string e = error_of([&] { fold_hf(d / "shouting", d / "twice"); });
  EXPECT_NE(e.find("__metadata__ flashnorm.folded = \"TRUE\" is neither"), std::string::npos) << e;
  EXPECT_NE(e.find("model-00001-of-00002.safetensors"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(d / "twice"));
}

}  // namespace
}  // namespace flashnorm
