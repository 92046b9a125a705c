// Dropped redundant normalization (docs/design.md section 3): the graph audit, the eps bound, and
// the engine on synthetic models for the cases no real file here has.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "flashnorm/engine/cpu_engine.h"
#include "flashnorm/engine/evaluate.h"
#include "flashnorm/io/gguf.h"
#include "flashnorm/model/audit.h"
#include "flashnorm/model/model.h"
#include "support/random_llama.h"

namespace flashnorm {
namespace {
namespace fs = std::filesystem;

const NormAudit& find(const std::vector<NormAudit>& v, const std::string& norm) {
  for (const auto& a : v) {
    if (a.norm == norm) return a;
  }
  throw std::runtime_error("no audit for " + norm);
}

// Gemma-4 style: q, k and v all renormalized (v's norm has no gain).
ArchDescription gemma4_style() {
  ArchDescription a = arch_by_name("gemma3");
  a.name = "gemma4-style";
  a.layer_norms[0].consumers[2].renorm = "";
  return a;
}

// A Gemma-3n-like layer: a branch (LAuReL) reads the normed value directly.
ArchDescription extra_branch() {
  ArchDescription a = arch_by_name("gemma3");
  a.name = "extra-branch";
  a.layer_norms[0].direct_uses = {"blk.{L}.laurel_l.weight"};
  return a;
}

TEST(Audit, Gemma3RealFileQAndKCancelVDoesNot) {
  const std::string path = testing::gemma3_path();
  ASSERT_TRUE(fs::exists(path)) << path << " missing: run scripts/fetch_models.sh gemma3";
  io::GgufFile f = io::GgufFile::open(path);
  const ArchDescription& a = arch_by_name(f.get_string("general.architecture"));
  auto has = [&](const std::string& t) { return f.find_tensor(t) != nullptr; };
  const int n_layer = static_cast<int>(f.get_uint("gemma3.block_count"));
  for (int l = 0; l < n_layer; ++l) {
    auto audit = audit_layer(a, l, has);
    const std::string p = "blk." + std::to_string(l) + ".";
    const NormAudit& attn = find(audit, p + "attn_norm.weight");
    ASSERT_EQ(attn.consumers.size(), 3u);
    EXPECT_TRUE(attn.consumers[0].cancellable) << attn.consumers[0].reason;
    EXPECT_TRUE(attn.consumers[1].cancellable) << attn.consumers[1].reason;
    EXPECT_FALSE(attn.consumers[2].cancellable);
    EXPECT_FALSE(attn.skip_reduction);
    EXPECT_FALSE(find(audit, p + "post_attention_norm.weight").foldable);
    EXPECT_FALSE(find(audit, p + "post_ffw_norm.weight").foldable);
    const NormAudit& ffn = find(audit, p + "ffn_norm.weight");
    EXPECT_TRUE(ffn.foldable);
    for (const auto& c : ffn.consumers) EXPECT_FALSE(c.cancellable);
  }
}

TEST(Audit, MissingRenormTensorIsNotCancellable) {
  // The graph, not the name: a gemma3 file whose layer lacks its q_norm gets no cancellation.
  const ArchDescription& a = arch_by_name("gemma3");
  auto audit = audit_layer(a, 0, [](const std::string& t) {
    return t != "blk.0.attn_q_norm.weight" && !t.ends_with(".bias");
  });
  const NormAudit& attn = find(audit, "blk.0.attn_norm.weight");
  EXPECT_FALSE(attn.consumers[0].cancellable);
  EXPECT_NE(attn.consumers[0].reason.find("missing"), std::string::npos);
  EXPECT_TRUE(attn.consumers[1].cancellable);
}

TEST(Audit, BiasedConsumersAreNotCancellable) {
  // Qwen 3 with attention_bias: q and k are renormalized, but the bias the file holds is added
  // after the projection, so RMSNorm((s x) W^T + b) != RMSNorm(x W^T + b): nothing cancels.
  auto with_bias = [](const std::string& t) { return t != "blk.0.attn_v.bias"; };
  const auto a3 = audit_layer(arch_by_name("qwen3"), 0, with_bias);
  const NormAudit& q3 = find(a3, "blk.0.attn_norm.weight");
  for (int i : {0, 1}) {
    EXPECT_TRUE(q3.consumers[i].biased) << q3.consumers[i].tensor;
    EXPECT_FALSE(q3.consumers[i].cancellable) << q3.consumers[i].tensor;
    EXPECT_NE(q3.consumers[i].reason.find("bias"), std::string::npos) << q3.consumers[i].reason;
  }
  EXPECT_FALSE(q3.consumers[2].biased);
  // The same graph without bias tensors cancels for q and k.
  auto no_bias = [](const std::string& t) { return !t.ends_with(".bias"); };
  const auto a3_plain = audit_layer(arch_by_name("qwen3"), 0, no_bias);
  const NormAudit& plain = find(a3_plain, "blk.0.attn_norm.weight");
  EXPECT_TRUE(plain.consumers[0].cancellable && plain.consumers[1].cancellable);
  // Qwen 2: q, k and v are biased by the description itself (and not renormalized).
  const auto a2 = audit_layer(arch_by_name("qwen2"), 0, no_bias);
  const NormAudit& q2 = find(a2, "blk.0.attn_norm.weight");
  for (const auto& c : q2.consumers) {
    EXPECT_TRUE(c.biased) << c.tensor;
    EXPECT_FALSE(c.cancellable) << c.tensor;
  }
}

TEST(Audit, Gemma4StyleFullyCancellableExtraBranchIneligible) {
  // every tensor of the graph but biases
  auto all = [](const std::string& t) { return !t.ends_with(".bias"); };
  const auto a4 = audit_layer(gemma4_style(), 3, all);
  const NormAudit& g4 = find(a4, "blk.3.attn_norm.weight");
  EXPECT_TRUE(g4.skip_reduction);
  for (const auto& c : g4.consumers) EXPECT_TRUE(c.cancellable) << c.tensor;
  const auto axb = audit_layer(extra_branch(), 3, all);
  const NormAudit& xb = find(axb, "blk.3.attn_norm.weight");
  EXPECT_FALSE(xb.foldable);
  EXPECT_FALSE(xb.skip_reduction);
  for (const auto& c : xb.consumers) {
    EXPECT_FALSE(c.cancellable);
    EXPECT_NE(c.reason.find("laurel"), std::string::npos) << c.reason;
  }
  // The llama graph has no renormalization at all.
  for (const auto& na : audit_layer(arch_by_name("llama"), 0, all)) {
    for (const auto& c : na.consumers) EXPECT_FALSE(c.cancellable);
  }
}

// The stated bound, checked on random rows against a direct fp64 computation:
// |RMSNorm(x W^T) - RMSNorm((rstd(x) x) W^T)| / |RMSNorm((rstd(x) x) W^T)| <= |u|, and ~ |u|/2
// for small u, with u = (1 - c^2) * eps / (c^2 * (ms + eps)), c = rstd(x), ms = mean((x W^T)^2).
TEST(EpsBound, FirstOrderBoundMatchesDirectComputation) {
  std::mt19937_64 rng(3);
  std::normal_distribution<double> nd;
  const int K = 64, N = 32;
  for (double eps : {1e-6, 1e-3, 1e-1}) {
    for (double xs : {0.01, 1.0, 30.0}) {
      std::vector<double> x(K), q(N, 0.0);
      for (auto& v : x) v = nd(rng) * xs;
      double msx = 0;
      for (double v : x) msx += v * v / K;
      const double c = 1.0 / std::sqrt(msx + eps);
      for (int n = 0; n < N; ++n) {
        for (int k = 0; k < K; ++k) q[n] += x[k] * nd(rng) / std::sqrt(double(K));
      }
      double ms = 0;
      for (double v : q) ms += v * v / N;
      // exact: renorm(c q) ; cancelled: renorm(q).
      const double exact_scale = c / std::sqrt(c * c * ms + eps);
      const double cancel_scale = 1.0 / std::sqrt(ms + eps);
      const double rel = std::fabs(cancel_scale - exact_scale) / exact_scale;
      const double u = std::fabs(1 - c * c) * eps / (c * c * (ms + eps));
      EXPECT_NEAR(rel, std::fabs(cancellation_rel_error(ms, c, eps)), 1e-12 + 1e-9 * rel);
      EXPECT_LE(rel, u * (1 + 1e-9) + 1e-15) << "eps " << eps << " scale " << xs;
      if (c <= 1) EXPECT_LE(rel, 0.5 * u * (1 + 1e-9) + 1e-15);
      if (u < 1e-2) EXPECT_NEAR(rel, 0.5 * u, 0.01 * 0.5 * u) << "first order is not tight";
    }
  }
  EXPECT_EQ(cancellation_rel_error(2.0, 0.3, 0.0), 0.0);  // exact when eps = 0
}

class SyntheticGemma : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::fresh_dir("synthetic_gemma");
    opt_ = testing::small_gemma3_options(9);
    testing::write_random_gguf(dir_ / "g.gguf", opt_);
    for (int i = 0; i < 40; ++i) seq_.push_back((i * 37 + 11) % opt_.vocab);
  }
  Model load(const ArchDescription* arch) {
    Model m = load_model(dir_ / "g.gguf");
    if (arch) m.arch = arch;
    return m;
  }
  fs::path dir_;
  testing::RandomLlamaOptions opt_;
  std::vector<int32_t> seq_;
};

TEST_F(SyntheticGemma, Gemma4StyleWholeRstdCancels) {
  static const ArchDescription g4 = gemma4_style();
  CpuEngine ref(load(&g4), NormMode::Standard, {.max_context = 64});
  CpuEngine exact(load(&g4), NormMode::FlashNorm, {.max_context = 64, .cancel = false});
  CpuEngine cancel(load(&g4), NormMode::FlashNorm,
                   {.max_context = 64, .cancel = true, .track_cancellation = true});
  EXPECT_TRUE(cancel.skips_attn_reduction());
  EXPECT_FALSE(exact.skips_attn_reduction());
  ComparisonStats e = compare_teacher_forced(ref, &exact, seq_, 40);
  EXPECT_LE(e.max_rel_logit_diff, 1e-5);
  ComparisonStats c = compare_teacher_forced(exact, &cancel, seq_, 40);
  // Cancellation changes each renormalized row by at most the eps bound (eps = 1e-6 here); the
  // logits move by rounding plus that bound.
  EXPECT_GT(cancel.max_cancellation_error(), 0.0);
  EXPECT_LE(cancel.max_cancellation_error(), 1e-3);
  EXPECT_LE(c.max_rel_logit_diff, 1e-5 + 10 * cancel.max_cancellation_error());
  EXPECT_EQ(c.top1_agree, c.positions);
}

TEST_F(SyntheticGemma, Gemma3QkCancellationMatchesStandard) {
  CpuEngine ref(load(nullptr), NormMode::Standard, {.max_context = 64});
  CpuEngine cancel(load(nullptr), NormMode::FlashNorm,
                   {.max_context = 64, .cancel = true, .track_cancellation = true});
  EXPECT_FALSE(cancel.skips_attn_reduction());
  ComparisonStats c = compare_teacher_forced(ref, &cancel, seq_, 40);
  EXPECT_LE(c.max_rel_logit_diff, 1e-5 + 10 * cancel.max_cancellation_error());
  EXPECT_EQ(c.top1_agree, c.positions);
  // Dropping the rstd of v (not renormalized in Gemma 3) would be wrong: the Gemma-4 graph on
  // Gemma-3 weights gives a different function, so the audit's answer matters.
  static const ArchDescription g4 = gemma4_style();
  CpuEngine wrong(load(&g4), NormMode::FlashNorm, {.max_context = 64, .cancel = true});
  ComparisonStats w = compare_teacher_forced(ref, &wrong, seq_, 40);
  EXPECT_GT(w.max_rel_logit_diff, 1e-2);
}

}  // namespace
}  // namespace flashnorm
