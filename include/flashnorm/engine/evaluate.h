// Model-level measurements used by `flashnorm verify` and the equivalence tests: perplexity,
// greedy generation, and teacher-forced logit comparison of two engines.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "flashnorm/engine/engine.h"

namespace flashnorm {

// Teacher-forced pass of `tokens` through engines in chunks of `ctx` positions, each chunk from
// an empty KV cache. Without `bos` every position but each chunk's first is scored; with `bos`
// (models that expect a BOS token, e.g. Gemma) each chunk is [bos] + ctx-1 tokens and every token
// is scored. `a` is the reference, `b` the engine compared with it.
struct ComparisonStats {
  size_t positions = 0;         // scored positions
  double nll_a = 0, nll_b = 0;  // summed negative log-likelihood (nats) of the next token
  double ppl_a() const;         // exp(nll / positions)
  double ppl_b() const;
  // max over positions of max_j |a_j - b_j| / max_j |a_j|  (relative to the logit scale)
  double max_rel_logit_diff = 0;
  size_t top1_agree = 0;  // positions where argmax(a) == argmax(b)
};

// How a text is cut into chunks, each run from an empty KV cache, and which predictions count.
enum class ChunkLayout {
  // chunks of ctx positions ([bos] + ctx-1 text tokens with bos, ctx text tokens without), the
  // last one possibly shorter; every prediction scored (ctx - 1 per whole chunk)
  kEveryPosition,
  // llama.cpp's llama-perplexity: s = [bos] + tokens (tokens alone without bos) cut into
  // floor(|s| / ctx) whole chunks, each chunk's first token replaced by bos; the predictions from
  // chunk position ctx / 2 on scored (ctx - 1 - ctx / 2 per chunk)
  kLlamaPerplexity,
};
struct TextChunks {
  int ctx = 512;               // positions per chunk (>= 2)
  std::optional<int32_t> bos;  // models that expect a BOS token, e.g. Gemma
  ChunkLayout layout = ChunkLayout::kEveryPosition;
};

// Runs `a` against every engine of `bs` (the reference runs once) over `tokens` cut as `chunks`
// says; one result per engine in `bs` (one with a's perplexity alone when `bs` is empty), each
// with the reference's figures in its `a` fields. progress(done, total) is called per chunk.
// Errors: Error if ctx < 2 (kLlamaPerplexity: < 3), fewer than 2 tokens, no whole chunk
// (kLlamaPerplexity) or vocabularies that differ.
std::vector<ComparisonStats> compare_teacher_forced(
    Engine& a, std::span<Engine* const> bs, std::span<const int32_t> tokens,
    const TextChunks& chunks, const std::function<void(size_t, size_t)>& progress = {});

// Runs `a` and `b` side by side (b may be null: only a's perplexity). progress(done, total)
// is called per chunk. Errors: Error if ctx < 2 or fewer than 2 tokens.
ComparisonStats compare_teacher_forced(Engine& a, Engine* b, std::span<const int32_t> tokens,
                                       int ctx,
                                       const std::function<void(size_t, size_t)>& progress = {},
                                       std::optional<int32_t> bos = std::nullopt);

// The same against several engines at once (the reference runs once); one result per engine in
// `bs`, each with the reference's figures in its `a` fields.
std::vector<ComparisonStats> compare_teacher_forced(
    Engine& a, std::span<Engine* const> bs, std::span<const int32_t> tokens, int ctx,
    const std::function<void(size_t, size_t)>& progress = {},
    std::optional<int32_t> bos = std::nullopt);

// Greedy decoding of exactly n tokens after `prompt` (stop tokens are not honoured, so two
// models are compared over the full length). Resets the engine first.
std::vector<int32_t> greedy_tokens(Engine& e, std::span<const int32_t> prompt, int n);

// Largest absolute difference relative to the logit scale: max_j |ref_j - got_j| / max_j |ref_j|
// (fp64; spans of equal length); +infinity when a value on either side is NaN or infinite.
double max_rel_diff(std::span<const float> ref, std::span<const float> got);

// log-softmax of logits[target] in fp64.
double log_prob(std::span<const float> logits, int32_t target);

}  // namespace flashnorm
