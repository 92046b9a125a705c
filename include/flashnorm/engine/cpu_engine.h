// CPU inference engine in fp32 for the llama and gemma3 architectures: embedding (scaled by
// sqrt(hidden) for Gemma), RMSNorm, fused q|k|v and gate|up projections (BLAS sgemm/sgemv),
// per-head q/k norms (QK-norm), RoPE (adjacent or NEOX pairs; local/global bases), GQA attention
// over a KV cache (sliding window on local layers), SwiGLU or GeGLU, post-attention/post-FFN
// norms, residual adds, final norm and LM head, and Gemma 3's final logit soft-capping
// (ModelConfig::final_softcap). What differs between architectures comes from
// the ArchDescription (consumers, renorms, hooks), not from per-architecture code paths.
// Batched sequences (continuous batching, engine/engine.h): each open sequence has its own KV
// cache; forward_batch stacks the new rows of every sequence into each projection GEMM and runs
// attention per sequence; forward() is the batch of one chunk of the engine's own sequence.
// Two normalization modes over one code path (docs/design.md sections 1-2):
//   Standard:  z = (x * rstd(x) * g) W^T         — RMSNorm with gain, then the projection.
//   FlashNorm: z = rstd(x) * (x W*^T), W* = W diag(g) — folded weights (folded at load when the
//              file is not folded already), the projection on raw x, rstd computed beside it
//              and applied to the output rows. Columns whose output is renormalized
//              (QK-norm; audit in model/audit.h) get no scale when `cancel` is set, and the
//              reduction is skipped when no column needs it (dropped redundant normalization).
// Linear biases (Qwen2's q/k/v, attention_bias, mlp_bias) are added after the row scale:
// y = rstd * (x W*^T) + b (paper Proposition 2), and a biased output never has its rstd dropped.
// Native weights (a model loaded with WeightStorage::kNative): every projection, the LM head
// included, computes from the file's GGML blocks (kernels/cpu/quant_matmul.h, rows spread over a
// thread pool) and nothing is folded: the gain multiplies x as x is quantized for the dot
// products (both modes), the rstd either joins it (Standard) or scales the output rows after the
// matmul (FlashNorm, with the same cancelled columns left unscaled), so the weights stay
// bit-identical to the file and a tied head stays tied. Embedding rows are dequantized per token.
// Source: HF LlamaForCausalLM (modeling_llama.py) for the forward pass.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "flashnorm/engine/engine.h"
#include "flashnorm/kernels/cpu/quant_matmul.h"
#include "flashnorm/model/model.h"

namespace flashnorm {

// How a CpuEngine runs its model (designated initialisers at call sites).
struct CpuEngineOptions {
  // Caps each sequence's KV cache, allocated as it fills (0: the model's context length, at most
  // 8192).
  int max_context = 0;
  // FlashNorm mode only: drop the rstd that renormalization cancels.
  bool cancel = true;
  // Also compute, for every cancelled row, the eps bound of model/audit.h (costs the reduction the
  // cancellation saves; for measurements only).
  bool track_cancellation = false;
};

class CpuEngine final : public Engine {
 public:
  // Takes the model's weights. Errors: throws Error if the model lacks a tensor its architecture
  // needs, or max_context exceeds the model's context length.
  CpuEngine(Model model, NormMode mode, const CpuEngineOptions& options = {});

  // Clears the KV cache (position back to 0).
  void reset() override;
  int position() const override { return single_.pos; }
  int max_context() const override { return max_ctx_; }
  const ModelConfig& config() const override { return m_.cfg; }
  NormMode mode() const override { return mode_; }
  const char* device() const override { return "cpu"; }
  // "fp32, norm standard", "fp32, norm flashnorm", or with native weights
  // "native weights (avx2), norm ..." (the instruction set's quant_isa_name).
  std::string describe() const override;
  // Largest relative change a cancelled rstd made to any renormalized row so far (the exact
  // factor of model/audit.h's bound); 0 unless track_cancellation.
  double max_cancellation_error() const { return max_cancel_err_; }
  // Native weights: passes of this many tokens or more that hold a prompt chunk take
  // quant_matmul's tiled sgemm path (kernels::cpu::kQuantGemmRows by default); a pass of decode
  // rows only (one token per sequence, any number of sequences) always takes the integer path;
  // INT_MAX: every pass the integer path (verify uses it to measure that path teacher-forced).
  // No effect on fp32 weights.
  void set_quant_gemm_rows(int rows) { gemm_rows_ = rows; }
  // True when the attention norm's whole rstd reduction is skipped (every consumer cancels).
  bool skips_attn_reduction() const { return skip_attn_rstd_; }

  // Appends `tokens` at positions position()..position()+n-1 and returns fp32 logits, row-major
  // [n, vocab] when all_logits, else [1, vocab] for the last token.
  // Errors: Error if a token id is outside [0, vocab) or the KV cache would overflow.
  std::vector<float> forward(std::span<const int32_t> tokens, bool all_logits = false) override;
  // Embeddings (engine/engine.h): every input's rows stacked into each projection as
  // forward_batch stacks sequences, the cache of one layer per input reused by every layer.
  std::vector<float> encode(std::span<const std::span<const int32_t>> inputs,
                            const EncodeOptions& o) override;

  // Batched sequences (engine/engine.h): forward() is the batch of one chunk of its own sequence.
  bool batches() const override { return true; }
  int open_sequence() override;
  void close_sequence(int seq) override;
  int sequence_position(int seq) const override;
  std::vector<float> forward_batch(std::span<const SequenceChunk> chunks) override;
  int kv_blocks_in_use() const override;
  bool rewinds() const override { return true; }
  void rewind_sequence(int seq, int length) override;
  int sequence_kv_blocks(int seq) const override;

 private:
  // One sequence's KV cache, grown in whole kKvBlock blocks up to max_ctx_ positions.
  struct Sequence {
    int pos = 0;                           // tokens in the cache
    int cap = 0;                           // positions allocated
    std::vector<std::vector<float>> k, v;  // [layer][pos][n_kv * D]
    // An encode() input: one layer's cache, which every layer overwrites (k, v: [1][pos][...]),
    // and attention causal or not as the model's config says.
    bool scratch = false;
  };
  using QuantMatrix = kernels::cpu::QuantMatrix;
  struct Layer {
    const float* attn_gain;         // [H] (Standard mode)
    std::vector<float> wqkv;        // [q + 2 kv, H], rows of q, then k, then v
    const float* q_norm = nullptr;  // [D] per-head renorm gains (QK-norm), or null
    const float* k_norm = nullptr;
    bool v_renorm = false;             // v renormalized without a gain (Gemma-4 style)
    std::array<bool, 3> cancels{};     // q, k, v: rstd cancels (LayerPlan::qkv_cancels)
    std::vector<float> bqkv, bgu;      // fused biases [q + 2 kv], [2F], or empty
    const float* wo;                   // [H, q]
    const float* bo = nullptr;         // [H] o bias, or null
    const float* bdown = nullptr;      // [H] down bias, or null
    const float* post_attn = nullptr;  // [H] Gemma post-attention norm, or null
    const float* ffn_gain;             // [H]
    std::vector<float> wgu;            // [2F, H], gate rows then up rows
    const float* wdown;                // [H, F]
    const float* post_ffn = nullptr;   // [H]
    bool local = false;                // sliding-window layer
    // native weights: q, k, v parts / gate, up parts in row order, o and down (fp32 fields unused)
    std::vector<QuantMatrix> qkv_q, gu_q;
    QuantMatrix wo_q, wdown_q;
  };
  // y[T, n] = normed(x) W^T + bias (bias [n] or null, added after the FlashNorm row scale).
  // `unscaled` marks column ranges [begin, end) that get no rstd in FlashNorm mode.
  // With native weights `w` is unused and `q` holds the matrix's row blocks in order.
  // Whether the projection with weights `w` quantizes its inputs per token (ModelConfig::fp8: the
  // layers' projections; the LM head, compressed-tensors' ignored module, does not).
  bool fp8_inputs(const float* w) const { return m_.cfg.fp8 && w != head_.data(); }
  void normed_projection(const float* x, int T, const float* gain, const float* w, int n, float* y,
                         const float* bias = nullptr,
                         std::span<const std::pair<int, int>> unscaled = {},
                         std::span<const QuantMatrix> q = {});
  // y[T, w.rows] = x[T, w.cols] W^T from native weights.
  void native_matmul(const float* x, int T, const QuantMatrix& w, float* y);
  // Attention of T new rows (qkv [T, q + 2 kv], out [T, q]) of sequence s at positions s.pos...
  void attention(int layer, Sequence& s, float* qkv, const float* rstd_x, int T, float* out);
  // Grows s's cache to hold `need` positions.
  void reserve(Sequence& s, int need) const;
  // The decoder layers over chunks (tokens of seqs[i] in chunks[i], appended to their caches):
  // the residual stream after the last layer, [rows of all chunks, hidden], before the final
  // norm. Callers hold the BLAS-threads scope (one_blas_thread_).
  std::vector<float> layers_pass(std::span<const SequenceChunk> chunks,
                                 std::span<Sequence* const> seqs);
  // The forward pass of chunks (tokens of seqs[i] in chunks[i]); logits of every token when
  // all_logits, else of each chunk's last token.
  std::vector<float> run(std::span<const SequenceChunk> chunks, std::span<Sequence* const> seqs,
                         bool all_logits);

  Model m_;
  NormMode mode_;
  bool cancel_ = true, track_ = false, skip_attn_rstd_ = false;
  double max_cancel_err_ = 0;
  int max_ctx_ = 0, next_seq_ = 1;
  std::vector<Layer> layers_;
  std::vector<float> head_;  // [vocab, H]: the LM head (folded in FlashNorm mode)
  const float* out_gain_ = nullptr;
  Sequence single_;               // forward()'s sequence
  std::map<int, Sequence> seqs_;  // open sequences by id
  bool native_ = false;           // the model's matrices are native (Tensor::raw)
  // native weights, a pool of several threads and OpenBLAS: passes run OpenBLAS on one thread
  // (kernels/cpu/blas_threads.h), the pool spreading the prefill tiles' sgemm and attention's heads
  bool one_blas_thread_ = false;
  kernels::cpu::QuantIsa isa_ = kernels::cpu::QuantIsa::kScalar;
  std::unique_ptr<kernels::cpu::ThreadPool> pool_;
  kernels::cpu::PreparedActs acts_;
  QuantMatrix head_q_;
  int gemm_rows_ = kernels::cpu::kQuantGemmRows;
  int pass_gemm_rows_ = kernels::cpu::kQuantGemmRows;   // this pass's (run())
  std::vector<float> rope_cos_, rope_sin_;              // [pos][D/2], global base
  std::vector<float> rope_cos_local_, rope_sin_local_;  // local base (sliding-window layers)
};

}  // namespace flashnorm
