// Embeddings from a decoder model and its sentence-transformers modules (model/embedding.h): the
// engine's encode pass (no LM head, engine/engine.h), then pooling, the Dense layers, L2
// normalization and Matryoshka truncation, as SentenceTransformer.encode computes them.
// Standard mode: the final RMSNorm with its gain on every row, then the modules. FlashNorm mode:
// the final norm's rstd dropped where audit_pooled_norm proves that it cancels, its gain folded
// into the first Dense layer's columns where it folds (fp64 product, one rounding:
// fold/fold_gain.h), otherwise applied as Standard applies them. Pooling, Dense and norms in fp32
// with fp64 sums.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "flashnorm/engine/engine.h"
#include "flashnorm/engine/make_engine.h"
#include "flashnorm/model/embedding.h"
#include "flashnorm/model/model.h"
#include "flashnorm/tokenizer/tokenizer.h"

namespace flashnorm {

struct EmbedderOptions {
  // Rows of one encode pass at most (inputs are grouped up to it; a longer input runs alone).
  int max_batch_tokens = 2048;
};

// One input to embed: text (tokenized with the model's tokenizer, a prompt put before it) or
// token ids (used as given: no BOS added, no prompt).
struct EmbedInput {
  std::string text;
  std::vector<int32_t> tokens;
  bool is_tokens = false;
  static EmbedInput of_text(std::string t) { return {.text = std::move(t), .tokens = {}}; }
  static EmbedInput of_tokens(std::vector<int32_t> ids) {
    return {.text = {}, .tokens = std::move(ids), .is_tokens = true};
  }
};

struct Embedding {
  std::vector<float> values;  // [dimensions]
  int tokens = 0;             // tokens the model read
};

class Embedder {
 public:
  // Takes the model (a Hugging Face directory whose modules `spec` describes) and its tokenizer.
  // Errors: as make_engine, and Error when `spec`'s first module does not take the model's
  // hidden size.
  Embedder(Model model, Tokenizer tokenizer, EmbeddingSpec spec, NormMode mode,
           const EngineOptions& engine, const EmbedderOptions& o = {});

  // The size of an embedding before truncation.
  int dimensions() const { return dims_; }
  const EmbeddingSpec& spec() const { return spec_; }
  const Engine& engine() const { return *engine_; }
  const Tokenizer& tokenizer() const { return tok_; }
  // What FlashNorm mode does with the final norm (Standard: nothing dropped or folded).
  const PooledNormAudit& audit() const { return audit_; }
  // "cpu, fp32, norm flashnorm; lasttoken pooling, 1 Dense, normalize; final rstd dropped (...)".
  std::string describe() const;

  // The token ids of a text input as sentence-transformers makes them: `prompt_name`'s prompt
  // (spec().prompts; "" picks the default prompt, if any) before the text, the tokenizer's BOS
  // first and its appended token last where it adds them (Tokenizer::add_bos, appended); not cut
  // (embed() cuts texts to spec().max_tokens, the appended token kept last). Errors: Error naming
  // an unknown prompt.
  std::vector<int32_t> tokenize(std::string_view text, std::string_view prompt_name = "") const;
  // Why `ids` cannot be embedded, or std::nullopt: "is empty", "has N tokens, more than the limit
  // of L" (L: `limit` when it is smaller than the engine's context, else that context) or "token
  // id T is outside the vocabulary of V". The one check of embed() and the server's requests.
  std::optional<std::string> input_problem(std::span<const int32_t> ids, int limit = 0) const;

  // One embedding per input, in order; texts tokenized by tokenize() and cut to
  // spec().max_tokens, token inputs used as given. `dimensions`: 0 for dimensions(), else the first
  // that many values (Matryoshka), L2-normalized again when the model normalizes. Errors (nothing
  // is computed): Error naming the input index for an empty input, a token outside the vocabulary
  // or an input longer than the engine's context; for dimensions outside [0, dimensions()].
  std::vector<Embedding> embed(std::span<const EmbedInput> inputs, int dimensions = 0,
                               std::string_view prompt_name = "");

 private:
  std::unique_ptr<Engine> engine_;
  Tokenizer tok_;
  EmbeddingSpec spec_;
  PooledNormAudit audit_;
  FinalNorm final_norm_;
  EncodeRows rows_ = EncodeRows::kAll;
  int dims_ = 0;
  EmbedderOptions opt_;
};

}  // namespace flashnorm
