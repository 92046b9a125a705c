// What turns a decoder model's last hidden states into one embedding per input: the modules that
// sentence-transformers saves after its Transformer (modules.json; the Pooling module's
// config.json; each Dense module's config.json and model.safetensors; Normalize), read as
// sentence-transformers 6.2 computes them (sentence_transformer/modules/pooling.py,
// base/modules/dense.py, base/modules/normalize.py), and the Transformer module's own settings
// (sentence_bert_config.json) and the prompts (config_sentence_transformers.json).
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace flashnorm {

// How the rows of one input become one vector (Pooling's pooling_mode).
enum class Pooling {
  kCls,           // the first row
  kLastToken,     // the last row
  kMean,          // the mean of the rows
  kMeanSqrtLen,   // the sum of the rows / sqrt(rows)
  kWeightedMean,  // rows weighted 1, 2, ..., n, divided by the weights' sum
  kMax,           // the largest value of each column
};
// "cls", "lasttoken", "mean", "mean_sqrt_len_tokens", "weightedmean", "max".
std::string_view pooling_name(Pooling p);

// One Dense module: y = act(x W^T + b), fp32.
struct DenseLayer {
  enum class Activation { kIdentity, kTanh };
  int in = 0, out = 0;
  std::vector<float> weight;  // [out, in]
  std::vector<float> bias;    // [out], or empty
  Activation act = Activation::kIdentity;
};

struct EmbeddingSpec {
  Pooling pooling = Pooling::kMean;
  std::vector<DenseLayer> dense;  // after the pooling, in order
  bool normalize = false;         // L2 normalization last (x / max(|x|, 1e-12))
  // Inputs cut to this many tokens: sentence_bert_config.json's max_seq_length, else
  // tokenizer_config.json's model_max_length (0: none).
  int max_tokens = 0;
  std::map<std::string, std::string, std::less<>> prompts;  // name -> text put before the input
  std::string default_prompt;  // default_prompt_name (applied when none is asked for), or ""
  // Every file read beside the transformer's (module configs and weights, through any link), so
  // that an output can be refused when it is one of them.
  std::vector<std::filesystem::path> files;
  // The folders of the modules after the transformer (modules.json's paths, relative to the model
  // directory, in order; Dense i's weights are dense_paths[i]/model.safetensors). Empty for a GGUF.
  std::vector<std::string> module_paths;
  std::vector<std::string> dense_paths;
  // Size of an embedding: the last Dense's out, else `hidden`.
  int dimensions(int hidden) const { return dense.empty() ? hidden : dense.back().out; }
};

// What FlashNorm may do with the final norm y = x * rstd(x) * g that feeds the pooling, decided
// from the modules after it (docs/design.md section 3):
//   rstd_cancels: the pooling picks one row (cls, lasttoken) and everything up to an L2
//     normalization is positively homogeneous (Dense layers without bias, Identity activation):
//     L2(s v W^T) = L2(v W^T) for s > 0, so that row's rstd cancels exactly. Not under mean-like
//     or max pooling (rows of different rstd mixed), a bias, Tanh, or without Normalize.
//   gain_folds: the pooling is linear in the rows (every mode but max) and a Dense layer follows:
//     pool(x * g) W^T = pool(x) (W diag(g))^T, so the gain folds into its columns.
struct PooledNormAudit {
  bool rstd_cancels = false;
  bool gain_folds = false;
  std::string reason;  // why the rstd does or does not cancel, one phrase
};
PooledNormAudit audit_pooled_norm(const EmbeddingSpec& s);

// The embedding pipeline of a loaded model: a Hugging Face directory's sentence-transformers
// modules (read_sentence_transformers), or a GGUF file's <arch>.pooling_type (1 mean, 2 cls,
// 3 last) with L2 normalization, as llama.cpp's embeddings default to (embd_normalize 2);
// std::nullopt when the files do not make it an embedding model. Errors: as
// read_sentence_transformers; for pooling_type 0 (none: token embeddings) and 4 (rank: a
// reranker), Error naming the key.
struct Model;
std::optional<EmbeddingSpec> embedding_spec(const Model& m);

// The embedding modules of a sentence-transformers directory, or std::nullopt when `dir` has no
// modules.json (not a sentence-transformers model). `hidden`: the transformer's hidden size, which
// the first module after pooling must take. Accepted: a Transformer at path "" first, then one
// Pooling, any number of Dense, an optional Normalize last. Errors: Error naming the file and the
// field for anything else, so nothing is computed differently from sentence-transformers: another
// module type, combined pooling modes, include_prompt false, a Dense with use_residual, another
// activation than Identity or Tanh, other input/output names, a shape that does not chain,
// do_lower_case true, an unknown default_prompt_name; sentence-transformers' legacy
// pooling_mode_* keys are read as it reads them.
std::optional<EmbeddingSpec> read_sentence_transformers(const std::filesystem::path& dir,
                                                        int hidden);

}  // namespace flashnorm
