// One validation for every subcommand (issue 17, items 4, 5 and 9): check_model_file runs what
// `generate` checks at load; tensors no layer owns, biases and non-finite weights are refused
// naming the tensor; a HF folded marker other than "true"/"false" and a config vocab_size that
// contradicts the embedding are refused; the real models still load.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "flashnorm/error.h"
#include "flashnorm/io/dequant.h"
#include "flashnorm/io/gguf.h"
#include "flashnorm/io/safetensors.h"
#include "flashnorm/model/check.h"
#include "flashnorm/model/model.h"
#include "flashnorm/tokenizer/tokenizer.h"
#include "support/error_of.h"
#include "support/gguf_rewrite.h"
#include "support/random_llama.h"

namespace flashnorm {
namespace {
namespace fs = std::filesystem;

using testing::f32_tensor;
using testing::rewrite_gguf;

// Sets element `i` of the F32 tensor `name` to `v`.
void poke(std::vector<io::GgufTensorOut>& ts, const std::string& name, size_t i, float v) {
  io::GgufTensorOut* t = testing::find_f32(ts, name);
  ASSERT_NE(t, nullptr) << name;
  testing::set_f32(*t, i, v);
}

using testing::error_of;

class ModelValidation : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::fresh_dir("model_validation");
    base_ = dir_ / "base.gguf";
    testing::write_random_gguf(base_);  // 2 layers, no vocabulary
  }
  fs::path dir_, base_;
};

TEST_F(ModelValidation, TensorsOfALayerPastBlockCountAreRefused) {
  // block_count 2 with a third layer's tensors: that layer would be silently skipped.
  rewrite_gguf(base_, dir_ / "extra.gguf", [](auto&, auto& ts) {
    std::vector<io::GgufTensorOut> more;
    for (const auto& t : ts) {
      if (t.name.starts_with("blk.1.")) {
        more.push_back(t);
        more.back().name.replace(0, 6, "blk.2.");
      }
    }
    ts.insert(ts.end(), more.begin(), more.end());
  });
  for (bool with_data : {true, false}) {
    const std::string e = error_of([&] { load_model(dir_ / "extra.gguf", with_data); });
    EXPECT_NE(e.find("'blk.2."), std::string::npos) << e;
    EXPECT_NE(e.find("block_count = 2"), std::string::npos) << e;
  }
  // A tensor no architecture uses at all.
  rewrite_gguf(base_, dir_ / "unknown.gguf",
               [](auto&, auto& ts) { ts.push_back(f32_tensor("rope_freqs.weight", {8}, 1)); });
  const std::string e = error_of([&] { load_model(dir_ / "unknown.gguf"); });
  EXPECT_NE(e.find("'rope_freqs.weight' is not used by the llama forward pass"), std::string::npos)
      << e;
}

TEST_F(ModelValidation, BiasesMustBeDeclaredAndInEveryLayer) {
  // GGUF: a bias layer 0 has is one the model has (llama.cpp's optional tensors), so every layer
  // needs it with the weight's rows; one that layer 0 lacks is not declared.
  auto with_biases = [&](const std::string& file,
                         std::vector<std::pair<std::string, uint64_t>> bs) {
    rewrite_gguf(base_, dir_ / file, [&](auto&, auto& ts) {
      for (const auto& [name, rows] : bs) ts.push_back(f32_tensor(name, {rows}, 0.5f));
    });
    return error_of([&] { check_model_file(dir_ / file); });
  };
  std::string e = with_biases("bias0.gguf", {{"blk.0.attn_q.bias", 64}});
  EXPECT_NE(e.find("missing tensor 'blk.1.attn_q.bias': the llama model has this bias in every "
                   "layer"),
            std::string::npos)
      << e;
  e = with_biases("bias1.gguf", {{"blk.1.attn_q.bias", 64}});
  EXPECT_NE(e.find("'blk.1.attn_q.bias' is a bias that the llama model does not declare"),
            std::string::npos)
      << e;
  e = with_biases("bias_shape.gguf", {{"blk.0.attn_q.bias", 64}, {"blk.1.attn_q.bias", 32}});
  EXPECT_NE(e.find("'blk.1.attn_q.bias' has shape [32], expected [64]"), std::string::npos) << e;
  EXPECT_EQ(with_biases("bias_ok.gguf", {{"blk.0.attn_q.bias", 64}, {"blk.1.attn_q.bias", 64}}),
            "");
  // Hugging Face: q_proj.bias (attention_bias true) is not skipped as an unknown name.
  testing::write_random_llama(dir_ / "hf");
  io::HfModelDir d = io::HfModelDir::open(dir_ / "hf");
  std::vector<io::StTensorOut> ts;
  for (const auto& n : d.tensor_names()) {
    const io::StTensorInfo* t = d.find(n);
    ts.push_back({n, io::StDtype::F32, t->shape, d.load_fp32(n)});
  }
  auto with = [&](const std::string& name, std::vector<uint64_t> shape, const fs::path& out) {
    auto all = ts;
    all.push_back({name, io::StDtype::F32, shape, std::vector<float>(shape[0], 0.25f)});
    io::write_hf_dir(out, d.config(), all, {{"format", "pt"}}, 1);
  };
  with("model.layers.0.self_attn.q_proj.bias", {64}, dir_ / "hf_bias");
  const std::string h = error_of([&] { load_model(dir_ / "hf_bias", false); });
  EXPECT_NE(h.find("'model.layers.0.self_attn.q_proj.bias' is a bias"), std::string::npos) << h;
  // An unknown HF name is refused too; rotary inv_freq buffers stay harmless.
  with("model.layers.0.mlp.extra_proj.weight", {64}, dir_ / "hf_unknown");
  EXPECT_NE(error_of([&] {
              load_model(dir_ / "hf_unknown");
            }).find("'model.layers.0.mlp.extra_proj.weight' is not used"),
            std::string::npos);
  with("model.layers.0.self_attn.rotary_emb.inv_freq", {8}, dir_ / "hf_inv_freq");
  EXPECT_EQ(error_of([&] { load_model(dir_ / "hf_inv_freq"); }), "");
  // HF layers past num_hidden_layers are named by their HF name.
  with("model.layers.2.input_layernorm.weight", {64}, dir_ / "hf_layer2");
  const std::string l = error_of([&] { load_model(dir_ / "hf_layer2", false); });
  EXPECT_NE(l.find("'model.layers.2.input_layernorm.weight' belongs to layer 2, but "
                   "num_hidden_layers = 2"),
            std::string::npos)
      << l;
}

TEST_F(ModelValidation, NonFiniteWeightsAreRefusedNamingTensorAndIndex) {
  const std::pair<const char*, float> cases[] = {{"blk.1.ffn_down.weight", NAN},
                                                 {"token_embd.weight", INFINITY},
                                                 {"output_norm.weight", -INFINITY}};
  for (const auto& [name, bad] : cases) {
    SCOPED_TRACE(name);
    const fs::path p = dir_ / "nonfinite.gguf";
    fs::remove(p);
    rewrite_gguf(base_, p, [&](auto&, auto& ts) { poke(ts, name, 37, bad); });
    const std::string loaded = error_of([&] { load_model(p); });
    EXPECT_NE(loaded.find(std::string("'") + name + "' element 37 is"), std::string::npos)
        << loaded;
    // Without data (fold, inspect) the shapes load; the shared check finds the same element
    // with the same message.
    EXPECT_EQ(error_of([&] { load_model(p, false); }), "");
    EXPECT_EQ(error_of([&] { check_model_file(p); }), loaded);
  }
  // A Q8_0 tensor whose block scale is NaN: found through dequantization.
  rewrite_gguf(base_, dir_ / "q8.gguf", [](auto&, auto& ts) {
    for (auto& t : ts) {
      if (t.name != "blk.0.ffn_up.weight") continue;
      std::vector<float> v(t.bytes.size() / 4);
      std::memcpy(v.data(), t.bytes.data(), t.bytes.size());
      t.bytes = io::quantize(io::GgmlType::Q8_0, v);
      t.type = io::GgmlType::Q8_0;
      const uint16_t nan16 = 0x7e00;
      std::memcpy(t.bytes.data() + 34 * 3, &nan16, 2);  // block 3's scale
    }
  });
  const std::string q = error_of([&] { check_model_file(dir_ / "q8.gguf"); });
  EXPECT_NE(q.find("'blk.0.ffn_up.weight' element 96 is nan"), std::string::npos) << q;
  EXPECT_EQ(error_of([&] { load_model(dir_ / "q8.gguf"); }), q);
}

TEST_F(ModelValidation, TokenizerIsCheckedAsGenerateChecksIt) {
  const fs::path smol = testing::smollm2_path();
  if (!fs::exists(smol)) GTEST_SKIP() << "needs the SmolLM2 GGUF (scripts/fetch_models.sh)";
  io::GgufFile vocab = io::GgufFile::open(smol);
  testing::RandomLlamaOptions o;
  o.vocab = 49152;  // SmolLM2's vocabulary
  testing::write_random_gguf(dir_ / "plain.gguf", o);
  // A model with SmolLM2's tokenizer keys, one of them broken by `change`.
  auto with_vocab = [&](const fs::path& out, const std::function<void(io::GgufKv&)>& change) {
    rewrite_gguf(dir_ / "plain.gguf", out, [&](auto& kvs, auto&) {
      for (const auto& kv : vocab.kvs()) {
        if (!kv.key.starts_with("tokenizer.")) continue;
        kvs.push_back(kv);
        change(kvs.back());
      }
    });
  };
  with_vocab(dir_ / "good.gguf", [](io::GgufKv&) {});
  EXPECT_EQ(error_of([&] { check_model_file(dir_ / "good.gguf"); }), "");
  with_vocab(dir_ / "bos.gguf", [](io::GgufKv& kv) {
    if (kv.key == "tokenizer.ggml.bos_token_id") kv.value = io::GgufValue::make_u32(999999);
  });
  const std::string tok_error =
      error_of([&] { Tokenizer::from_gguf(io::GgufFile::open(dir_ / "bos.gguf")); });
  ASSERT_NE(tok_error, "");
  EXPECT_EQ(error_of([&] { check_model_file(dir_ / "bos.gguf"); }), tok_error);
  // A vocabulary that does not fit the embedding (ids past its rows).
  testing::RandomLlamaOptions small;
  small.vocab = 300;
  testing::write_random_gguf(dir_ / "plain.gguf", small);
  with_vocab(dir_ / "misfit.gguf", [](io::GgufKv&) {});
  const std::string m = error_of([&] { check_model_file(dir_ / "misfit.gguf"); });
  EXPECT_NE(m.find("the vocabulary has 49152 tokens but"), std::string::npos) << m;
  EXPECT_NE(m.find("300 embedding rows"), std::string::npos) << m;
}

TEST_F(ModelValidation, HfFoldedMarkerMustBeCanonical) {
  testing::write_random_llama(dir_ / "hf");
  io::HfModelDir d = io::HfModelDir::open(dir_ / "hf");
  std::vector<io::StTensorOut> ts;
  for (const auto& n : d.tensor_names())
    ts.push_back({n, io::StDtype::F32, d.find(n)->shape, d.load_fp32(n)});
  for (const char* v : {"TRUE", "True", "1", "yes", " true", ""}) {
    SCOPED_TRACE(v);
    const fs::path out = dir_ / "marker";
    fs::remove_all(out);
    io::write_hf_dir(out, d.config(), ts, {{"format", "pt"}, {"flashnorm.folded", v}}, 2);
    const std::string e = error_of([&] { load_model(out, false); });
    EXPECT_NE(e.find("flashnorm.folded"), std::string::npos) << e;
    EXPECT_NE(e.find("model-00001-of-00002.safetensors"), std::string::npos) << e;
    EXPECT_NE(e.find("neither \"true\" nor \"false\""), std::string::npos) << e;
  }
  for (const char* v : {"true", "false"}) {
    const fs::path out = dir_ / "marker";
    fs::remove_all(out);
    io::write_hf_dir(out, d.config(), ts, {{"format", "pt"}, {"flashnorm.folded", v}}, 2);
    EXPECT_EQ(load_model(out, false).cfg.folded, std::string(v) == "true");
  }
  // Shards that disagree.
  fs::remove_all(dir_ / "mixed");
  fs::copy(dir_ / "hf", dir_ / "mixed");
  {
    const fs::path shard = dir_ / "mixed" / "model-00002-of-00002.safetensors";
    io::SafetensorsFile f = io::SafetensorsFile::open(shard);
    std::vector<io::StTensorOut> part;
    for (const auto& t : f.tensors())
      part.push_back({t.name, t.dtype, t.shape, io::st_to_fp32(t.dtype, f.data(t))});
    fs::remove(shard);
    io::write_safetensors(shard, part, {{"format", "pt"}, {"flashnorm.folded", "true"}});
  }
  const std::string e = error_of([&] { load_model(dir_ / "mixed", false); });
  EXPECT_NE(e.find("model-00002-of-00002.safetensors: __metadata__ flashnorm.folded is true here"),
            std::string::npos)
      << e;
}

TEST_F(ModelValidation, HfVocabSizeMustMatchTheEmbedding) {
  testing::write_random_llama(dir_ / "hf");  // vocab 300
  auto with_config = [&](const nlohmann::json& vocab_size) {
    const fs::path out = dir_ / "vocab";
    fs::remove_all(out);
    fs::copy(dir_ / "hf", out);
    io::HfModelDir d = io::HfModelDir::open(dir_ / "hf");
    nlohmann::json c = d.config();
    c["vocab_size"] = vocab_size;
    std::ofstream(out / "config.json") << c.dump(2);
    return out;
  };
  const std::string e = error_of([&] { load_model(with_config(301), false); });
  EXPECT_NE(e.find("config.json: vocab_size = 301 but model.embed_tokens.weight has 300 rows"),
            std::string::npos)
      << e;
  EXPECT_NE(error_of([&] { load_model(with_config("300")); }).find("'vocab_size'"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { load_model(with_config(300)); }), "");
  EXPECT_EQ(error_of([&] { load_model(with_config(nullptr)); }), "");
}

TEST_F(ModelValidation, HfTieWordEmbeddingsMustBeABoolean) {
  testing::write_random_llama(dir_ / "hf");  // tied
  fs::copy(dir_ / "hf", dir_ / "string");
  nlohmann::json c = io::HfModelDir::open(dir_ / "hf").config();
  c["tie_word_embeddings"] = "true";  // truthy in Python, but was read here as false
  std::ofstream(dir_ / "string" / "config.json") << c.dump(2);
  const std::string e = error_of([&] { load_model(dir_ / "string", false); });
  EXPECT_NE(e.find("config.json: field 'tie_word_embeddings' is not a boolean (string)"),
            std::string::npos)
      << e;
}

// The real checkpoints own every tensor they hold and pass every check.
TEST(ModelValidationRealModels, SmolLM2AndGemma3PassTheSharedCheck) {
  for (const std::string& p : {testing::smollm2_path(), testing::gemma3_path()}) {
    if (!fs::exists(p)) GTEST_SKIP() << "needs " << p << " (scripts/fetch_models.sh)";
    SCOPED_TRACE(p);
    EXPECT_EQ(error_of([&] { check_model_file(p); }), "");
  }
}

}  // namespace
}  // namespace flashnorm
