// Embedder (engine/embedder.h) on a random Llama checkpoint: FlashNorm mode gives Standard's
// embeddings where the audit drops the final rstd (last-token pooling, L2) and where it keeps it
// (mean pooling); batching inputs into one encode pass changes nothing; and the negative control:
// dropping the rstd under mean pooling (what the audit refuses) changes the embeddings.
// sentence-transformers itself is the reference in tests/cli/embed_st_test.py.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "flashnorm/engine/cpu_engine.h"
#include "flashnorm/engine/embedder.h"
#include "flashnorm/error.h"
#include "flashnorm/fold/fold.h"
#include "flashnorm/io/gguf.h"
#include "support/gguf_rewrite.h"
#include "support/random_llama.h"

namespace flashnorm {
namespace {

std::vector<EmbedInput> random_inputs(int n, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<EmbedInput> out(n);
  for (auto& in : out) {
    in.is_tokens = true;
    in.tokens.resize(1 + rng() % 23);
    for (auto& t : in.tokens) t = static_cast<int32_t>(rng() % vocab);
  }
  return out;
}

double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i)
    ab += double(a[i]) * b[i], aa += double(a[i]) * a[i], bb += double(b[i]) * b[i];
  return ab / std::sqrt(aa * bb);
}

struct Fixture {
  testing::RandomLlamaOptions opt;
  std::filesystem::path dir = testing::fresh_dir("embedder_" + opt.arch);
  explicit Fixture(testing::RandomLlamaOptions o = {.seed = 17}) : opt(std::move(o)) {
    testing::write_random_llama(dir, opt);
  }
  Embedder make(Pooling p, NormMode mode, int batch_tokens = 2048) const {
    EmbeddingSpec s{.pooling = p, .normalize = true};
    return Embedder(
        load_model(dir), Tokenizer::from_gguf(io::GgufFile::open(testing::smollm2_path())), s, mode,
        EngineOptions{.device = Device::kCpu}, EmbedderOptions{.max_batch_tokens = batch_tokens});
  }
};

TEST(Embedder, FlashNormMatchesStandardWhetherTheRstdDropsOrNot) {
  const Fixture f;
  const auto inputs = random_inputs(12, 300, 3);
  for (Pooling p : {Pooling::kLastToken, Pooling::kMean, Pooling::kCls, Pooling::kMax}) {
    Embedder std_e = f.make(p, NormMode::Standard);
    Embedder fn_e = f.make(p, NormMode::FlashNorm);
    EXPECT_EQ(fn_e.audit().rstd_cancels, p == Pooling::kLastToken || p == Pooling::kCls);
    const auto a = std_e.embed(inputs), b = fn_e.embed(inputs);
    for (size_t i = 0; i < inputs.size(); ++i) {
      EXPECT_GT(cosine(a[i].values, b[i].values), 1 - 1e-6) << pooling_name(p) << " input " << i;
    }
  }
}

TEST(Embedder, OneInputPerPassGivesTheSameEmbeddings) {
  const Fixture f;
  const auto inputs = random_inputs(9, 300, 4);
  Embedder batched = f.make(Pooling::kMean, NormMode::FlashNorm);
  Embedder alone = f.make(Pooling::kMean, NormMode::FlashNorm, /*batch_tokens=*/1);
  const auto a = batched.embed(inputs), b = alone.embed(inputs);
  for (size_t i = 0; i < inputs.size(); ++i) {
    EXPECT_GT(cosine(a[i].values, b[i].values), 1 - 1e-6) << "input " << i;
  }
}

TEST(Embedder, DroppingTheRstdUnderMeanPoolingIsWrong) {
  const Fixture f;
  const auto inputs = random_inputs(12, 300, 5);
  const auto want = f.make(Pooling::kMean, NormMode::Standard).embed(inputs);
  // The same pipeline by hand from the engine's rows: with the rstd it matches, without it (the
  // negative control) it must not.
  CpuEngine engine(load_model(f.dir), NormMode::Standard);
  std::vector<std::span<const int32_t>> ids;
  for (const auto& in : inputs) ids.emplace_back(in.tokens);
  const int H = engine.config().hidden;
  for (bool rstd : {true, false}) {
    const std::vector<float> rows =
        engine.encode(ids, {.final_norm = {.rstd = rstd, .gain = true}, .rows = EncodeRows::kAll});
    double worst = 1;
    size_t r = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      std::vector<float> mean(H);
      const size_t n = inputs[i].tokens.size();
      for (size_t t = 0; t < n; ++t, ++r) {
        for (int k = 0; k < H; ++k) mean[k] += rows[r * H + k] / float(n);
      }
      worst = std::min(worst, cosine(mean, want[i].values));
    }
    if (rstd) {
      EXPECT_GT(worst, 1 - 1e-6);
    } else {
      EXPECT_LT(worst, 1 - 1e-5) << "dropping the rstd under mean pooling changed nothing";
    }
  }
}

// The same model (Gemma 3's layout: RoPE pairs and gains agree between its GGUF and HF files) as a
// GGUF file with gemma3.pooling_type (last, L2 as llama.cpp's default) and as the Hugging Face
// directory with sentence-transformers' last-token pooling and Normalize: the same embeddings;
// pooling_type none and rank are refused naming the key.
TEST(Embedder, GgufPoolingTypeGivesTheSameEmbeddingsAsTheModules) {
  const Fixture f(testing::small_gemma3_options(17));
  const auto plain = testing::fresh_dir("embedder_gguf") / "m.gguf";
  testing::write_random_gguf(plain, f.opt);
  auto with_pooling = [&](uint32_t type) {
    const auto out = plain.parent_path() / fmt::format("pool{}.gguf", type);
    testing::rewrite_gguf(plain, out, [&](auto& kvs, auto&) {
      kvs.push_back({"gemma3.pooling_type", io::GgufValue::make_u32(type), 0});
    });
    return out;
  };
  Model gm = load_model(with_pooling(3));
  const std::optional<EmbeddingSpec> spec = embedding_spec(gm);
  ASSERT_TRUE(spec);
  EXPECT_EQ(spec->pooling, Pooling::kLastToken);
  EXPECT_TRUE(spec->normalize);
  const auto tok = [] { return Tokenizer::from_gguf(io::GgufFile::open(testing::smollm2_path())); };
  Embedder from_gguf(std::move(gm), tok(), *spec, NormMode::FlashNorm,
                     EngineOptions{.device = Device::kCpu});
  const auto inputs = random_inputs(8, 300, 9);
  const auto a = from_gguf.embed(inputs);
  const auto b = f.make(Pooling::kLastToken, NormMode::Standard).embed(inputs);
  for (size_t i = 0; i < inputs.size(); ++i) {
    EXPECT_GT(cosine(a[i].values, b[i].values), 1 - 1e-6) << "input " << i;
  }
  for (uint32_t refused : {0u, 4u}) {
    Model m = load_model(with_pooling(refused), /*with_data=*/false);
    try {
      embedding_spec(m);
      ADD_FAILURE() << "pooling_type " << refused << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("pooling_type"), std::string::npos) << e.what();
    }
  }
  // a GGUF without the key is no embedding model
  EXPECT_FALSE(embedding_spec(load_model(plain, /*with_data=*/false)));
}

// `flashnorm fold` of a GGUF embedding file (pooling_type): the pooling reads the final norm, so
// the fold keeps that norm's gain and makes no head; the folded file gives the same embeddings.
// Negative control: the fold of a causal model (final gain moved into a new head) given the same
// pooling_type afterwards loses the gain and must miss.
TEST(Embedder, FoldOfAGgufEmbeddingKeepsTheFinalNorm) {
  const testing::RandomLlamaOptions opt = testing::small_gemma3_options(23);
  const auto dir = testing::fresh_dir("embedder_fold_gguf");
  const auto plain = dir / "m.gguf", pooled = dir / "pooled.gguf";
  testing::write_random_gguf(plain, opt);
  const auto add_pooling = [](const std::filesystem::path& in, const std::filesystem::path& out) {
    testing::rewrite_gguf(in, out, [&](auto& kvs, auto&) {
      kvs.push_back({"gemma3.pooling_type", io::GgufValue::make_u32(3), 0});
    });
  };
  add_pooling(plain, pooled);
  const FoldReport rep = fold_gguf(pooled, dir / "folded.gguf");
  EXPECT_FALSE(rep.untied_head);
  for (const std::string& n : rep.folded_norms) EXPECT_NE(n, "output_norm.weight");
  EXPECT_FALSE(io::GgufFile::open(dir / "folded.gguf").find_tensor("output.weight"));
  fold_gguf(plain, dir / "lm_folded.gguf");
  add_pooling(dir / "lm_folded.gguf", dir / "lm_folded_pooled.gguf");

  const auto tok = [] { return Tokenizer::from_gguf(io::GgufFile::open(testing::smollm2_path())); };
  const auto embed = [&](const std::filesystem::path& p) {
    Model m = load_model(p);
    const EmbeddingSpec spec = *embedding_spec(m);
    return Embedder(std::move(m), tok(), spec, NormMode::FlashNorm,
                    EngineOptions{.device = Device::kCpu})
        .embed(random_inputs(8, 300, 4));
  };
  const auto want = embed(pooled), got = embed(dir / "folded.gguf");
  const auto lost = embed(dir / "lm_folded_pooled.gguf");
  double worst = 1;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_GT(cosine(got[i].values, want[i].values), 1 - 1e-6) << "input " << i;
    worst = std::min(worst, cosine(lost[i].values, want[i].values));
  }
  EXPECT_LT(worst, 1 - 1e-5) << "the final gain moved into a head changed nothing";
}

TEST(Embedder, RefusesBadInputsNamingThem) {
  const Fixture f;
  Embedder e = f.make(Pooling::kMean, NormMode::FlashNorm);
  std::vector<EmbedInput> bad = random_inputs(3, 300, 6);
  bad[1].tokens.clear();
  EXPECT_THROW(e.embed(bad), Error);
  bad[1].tokens = {400};
  try {
    e.embed(bad);
    ADD_FAILURE() << "a token outside the vocabulary was accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("input 1"), std::string::npos) << err.what();
  }
  EXPECT_THROW(e.embed(random_inputs(1, 300, 7), e.dimensions() + 1), Error);
  // the one check the server's requests share (a text may encode to no tokens at all)
  const std::vector<int32_t> five = {1, 2, 3, 4, 5};
  EXPECT_FALSE(e.input_problem(five));
  EXPECT_EQ(e.input_problem({}).value_or(""), "is empty");
  EXPECT_NE(e.input_problem(five, 4).value_or("").find("limit of 4"), std::string::npos);
  EXPECT_NE(e.input_problem(std::vector<int32_t>{1, 300}).value_or("").find("token id 300"),
            std::string::npos);
}

}  // namespace
}  // namespace flashnorm
