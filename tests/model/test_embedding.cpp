// read_sentence_transformers (model/embedding.h): the modules sentence-transformers saves, its
// legacy pooling keys, and one-line refusals naming the file and the field; audit_pooled_norm's
// decisions from the modules after the final norm.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "flashnorm/io/safetensors.h"
#include "flashnorm/model/embedding.h"
#include "support/error_of.h"
#include "support/random_llama.h"

namespace flashnorm {
namespace {
namespace fs = std::filesystem;
using json = nlohmann::json;

void write_json(const fs::path& p, const json& j) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << j.dump(2);
}

// A sentence-transformers directory (modules only) for a model of hidden size 8: Transformer,
// Pooling (lasttoken), Dense 8 -> 4 (no bias, Identity), Normalize.
fs::path st_dir(const std::string& name) {
  const fs::path d = testing::fresh_dir(name);
  write_json(d / "modules.json",
             json::array({{{"idx", 0},
                           {"name", "0"},
                           {"path", ""},
                           {"type", "sentence_transformers.base.modules.transformer.Transformer"}},
                          {{"idx", 1},
                           {"name", "1"},
                           {"path", "1_Pooling"},
                           {"type",
                            "sentence_transformers.sentence_transformer.modules.pooling."
                            "Pooling"}},
                          {{"idx", 2},
                           {"name", "2"},
                           {"path", "2_Dense"},
                           {"type", "sentence_transformers.base.modules.dense.Dense"}},
                          {{"idx", 3},
                           {"name", "3"},
                           {"path", "3_Normalize"},
                           {"type", "sentence_transformers.base.modules.normalize.Normalize"}}}));
  write_json(d / "1_Pooling/config.json",
             {{"embedding_dimension", 8}, {"pooling_mode", "lasttoken"}, {"include_prompt", true}});
  write_json(d / "2_Dense/config.json",
             {{"in_features", 8},
              {"out_features", 4},
              {"bias", false},
              {"activation_function", "torch.nn.modules.linear.Identity"}});
  std::vector<float> w(32);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.1f * float(i) - 1.0f;
  io::write_safetensors(d / "2_Dense/model.safetensors",
                        {{.name = "linear.weight", .shape = {4, 8}, .values = w}}, {});
  fs::create_directories(d / "3_Normalize");
  return d;
}

void edit_json(const fs::path& p, const std::function<void(json&)>& fn) {
  std::ifstream in(p);
  json j = json::parse(in);
  fn(j);
  write_json(p, j);
}

TEST(SentenceTransformers, ReadsTheModules) {
  const fs::path d = st_dir("st_reads");
  const std::optional<EmbeddingSpec> s = read_sentence_transformers(d, 8);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->pooling, Pooling::kLastToken);
  ASSERT_EQ(s->dense.size(), 1u);
  EXPECT_EQ(s->dense[0].out, 4);
  EXPECT_EQ(s->dense[0].weight[9], 0.1f * 9 - 1.0f);
  EXPECT_TRUE(s->dense[0].bias.empty());
  EXPECT_TRUE(s->normalize);
  EXPECT_EQ(s->dimensions(8), 4);
  EXPECT_FALSE(read_sentence_transformers(testing::fresh_dir("st_none"), 8));
}

TEST(SentenceTransformers, LegacyPoolingKeysAndDefaults) {
  const fs::path d = st_dir("st_legacy");
  write_json(d / "1_Pooling/config.json", {{"word_embedding_dimension", 8},
                                           {"pooling_mode_cls_token", false},
                                           {"pooling_mode_mean_tokens", false},
                                           {"pooling_mode_max_tokens", true}});
  // no activation_function: sentence-transformers' default Tanh
  edit_json(d / "2_Dense/config.json", [](json& j) { j.erase("activation_function"); });
  EXPECT_EQ(read_sentence_transformers(d, 8)->pooling, Pooling::kMax);
  EXPECT_EQ(read_sentence_transformers(d, 8)->dense[0].act, DenseLayer::Activation::kTanh);
  write_json(d / "1_Pooling/config.json", {{"word_embedding_dimension", 8}});
  EXPECT_EQ(read_sentence_transformers(d, 8)->pooling, Pooling::kMean);  // none set: mean
}

TEST(SentenceTransformers, RefusesWhatItDoesNotCompute) {
  struct Case {
    const char* what;
    std::function<void(const fs::path&)> edit;
    const char* field;
  };
  const std::vector<Case> cases = {
      {"combined modes",
       [](const fs::path& d) {
         edit_json(d / "1_Pooling/config.json", [](json& j) {
           j["pooling_mode"] = json::array({"mean", "cls"});
         });
       },
       "pooling_mode"},
      {"include_prompt false",
       [](const fs::path& d) {
         edit_json(d / "1_Pooling/config.json", [](json& j) { j["include_prompt"] = false; });
       },
       "include_prompt"},
      {"an unknown pooling key",
       [](const fs::path& d) {
         edit_json(d / "1_Pooling/config.json", [](json& j) { j["pooling_scale"] = 2; });
       },
       "'pooling_scale'"},
      {"a pooling size that is not the model's",
       [](const fs::path& d) {
         edit_json(d / "1_Pooling/config.json", [](json& j) { j["embedding_dimension"] = 9; });
       },
       "embedding_dimension"},
      {"GELU",
       [](const fs::path& d) {
         edit_json(d / "2_Dense/config.json",
                   [](json& j) { j["activation_function"] = "torch.nn.modules.activation.GELU"; });
       },
       "activation_function"},
      {"a Dense with a bias it lacks",
       [](const fs::path& d) {
         edit_json(d / "2_Dense/config.json", [](json& j) { j["bias"] = true; });
       },
       "linear.bias"},
      {"a Dense of the wrong width",
       [](const fs::path& d) {
         edit_json(d / "2_Dense/config.json", [](json& j) { j["in_features"] = 7; });
       },
       "in_features"},
      {"Dense weights as pytorch_model.bin",
       [](const fs::path& d) { fs::remove(d / "2_Dense/model.safetensors"); }, "model.safetensors"},
      {"a module path outside the directory",
       [](const fs::path& d) {
         edit_json(d / "modules.json", [](json& j) { j[1]["path"] = "../elsewhere"; });
       },
       "modules[1].path"},
      {"another module",
       [](const fs::path& d) {
         edit_json(d / "modules.json", [](json& j) {
           j[2]["type"] = "sentence_transformers.sentence_transformer.modules.lstm.LSTM";
         });
       },
       "modules[2].type"},
      {"Normalize before Dense",
       [](const fs::path& d) {
         edit_json(d / "modules.json", [](json& j) { std::swap(j[2], j[3]); });
       },
       "modules[3].type"},
      {"do_lower_case",
       [](const fs::path& d) {
         write_json(d / "sentence_bert_config.json",
                    {{"max_seq_length", 16}, {"do_lower_case", true}});
       },
       "do_lower_case"},
      {"an unknown default prompt",
       [](const fs::path& d) {
         write_json(d / "config_sentence_transformers.json",
                    {{"prompts", {{"query", "q: "}}}, {"default_prompt_name", "passage"}});
       },
       "default_prompt_name"},
  };
  for (const Case& c : cases) {
    const fs::path d = st_dir(std::string("st_refuse_") + std::to_string(&c - cases.data()));
    c.edit(d);
    const std::string e = testing::error_of([&] { read_sentence_transformers(d, 8); });
    EXPECT_NE(e.find(c.field), std::string::npos) << c.what << ": " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << c.what << ": " << e;
  }
}

TEST(SentenceTransformers, PromptsAndMaxTokens) {
  const fs::path d = st_dir("st_prompts");
  write_json(d / "sentence_bert_config.json", {{"max_seq_length", 16}, {"do_lower_case", false}});
  write_json(d / "config_sentence_transformers.json",
             {{"prompts", {{"query", "q: "}, {"document", ""}}},
              {"default_prompt_name", "query"},
              {"similarity_fn_name", "cosine"}});
  const EmbeddingSpec s = *read_sentence_transformers(d, 8);
  EXPECT_EQ(s.max_tokens, 16);
  EXPECT_EQ(s.prompts.at("query"), "q: ");
  EXPECT_EQ(s.default_prompt, "query");
}

TEST(PooledNormAudit, RstdCancelsOnlyForOneRowThroughHomogeneousModulesToL2) {
  EmbeddingSpec s;
  s.pooling = Pooling::kLastToken;
  s.normalize = true;
  EXPECT_TRUE(audit_pooled_norm(s).rstd_cancels);
  EXPECT_FALSE(audit_pooled_norm(s).gain_folds);  // no Dense to fold it into
  s.pooling = Pooling::kCls;
  EXPECT_TRUE(audit_pooled_norm(s).rstd_cancels);
  DenseLayer d{.in = 8, .out = 4, .weight = std::vector<float>(32, 1.0f)};
  s.dense.push_back(d);
  EXPECT_TRUE(audit_pooled_norm(s).rstd_cancels);
  EXPECT_TRUE(audit_pooled_norm(s).gain_folds);
  // negative controls: each breaks the cancellation
  for (Pooling p : {Pooling::kMean, Pooling::kMeanSqrtLen, Pooling::kWeightedMean, Pooling::kMax}) {
    EmbeddingSpec m = s;
    m.pooling = p;
    EXPECT_FALSE(audit_pooled_norm(m).rstd_cancels) << pooling_name(p);
    EXPECT_EQ(audit_pooled_norm(m).gain_folds, p != Pooling::kMax) << pooling_name(p);
  }
  EmbeddingSpec biased = s;
  biased.dense[0].bias.assign(4, 0.5f);
  EXPECT_FALSE(audit_pooled_norm(biased).rstd_cancels);
  EmbeddingSpec tanh = s;
  tanh.dense[0].act = DenseLayer::Activation::kTanh;
  EXPECT_FALSE(audit_pooled_norm(tanh).rstd_cancels);
  EmbeddingSpec unnormalized = s;
  unnormalized.normalize = false;
  EXPECT_FALSE(audit_pooled_norm(unnormalized).rstd_cancels);
}

}  // namespace
}  // namespace flashnorm
