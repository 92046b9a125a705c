// The CUDA engine's non-GEMM kernels (sm_90a): token embedding, residual add (with Gemma's optional
// post-norm), RoPE + per-head QK-norm + KV-cache write, causal GQA attention over the KV cache,
// SwiGLU/GeGLU, a projection's bias, Gemma's final logit soft-capping, and token sampling (greedy
// argmax or Gumbel-max at a temperature). Source: HF LlamaForCausalLM / Gemma3ForCausalLM forward
// passes (modeling_llama.py, modeling_gemma3.py); the CPU engine (engine/cpu_engine.h) computes the
// same functions in fp32.
//
// Conventions: row-major; `dt` is the dtype (bf16 or fp16) of every tensor typed "dt"; the residual
// stream, queries and the KV cache are fp32. Positions are read from device memory (`pos`, one
// int32: the position of the first of the T tokens) so that a decode step captured in a CUDA graph
// replays at the current position. Every function validates its arguments and returns a Status
// (kInvalidArgument naming the field, or kCudaError naming the failing launch); none throws.
// `pdl` (a trailing argument or a field): launch with programmatic dependent launch (sm_90); the
// kernel may start before the preceding kernel on the stream ends and waits for it before its first
// memory access (RmsNormArgs::pdl in rms_norm.h says the same) — except decode_attention, which
// reads *pos and the KV-cache rows below it first (see there).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "flashnorm/kernels/cuda/linear.h"
#include "flashnorm/kernels/cuda/status.h"

namespace flashnorm::kernels::cuda {

// x32[t, :] = scale * emb[tokens[t], :] (fp32) and xb[t, :] = round_dt(x32[t, :]).
// emb: [vocab, H] dt. Token ids outside [0, vocab) give a row of NaN (callers check ids on the
// host; ids produced by sample_tokens are always in range). H % 8 == 0.
Status embed_tokens(DType dt, int T, int H, int vocab, const int32_t* tokens, const void* emb,
                    float scale, float* x32, void* xb, cudaStream_t s, bool pdl = false);

// Residual add of a sublayer output: x32[t, :] += post_gain ? RMSNorm(p[t, :]) * post_gain
// : p[t, :], then xb[t, :] = round_dt(x32[t, :]). p: [T, H] fp32; post_gain: [H] fp32 multiplier
// (Gemma's post-attention / post-FFN norm; eps inside the square root) or null. With xn ([T, H] dt)
// set, also xn[t, :] = round_dt(x32 * rstd(x32) * next_gain): the next RMSNorm fused into the add
// (vLLM's fused_add_rms_norm; fp32 sum of squares); next_gain [H] dt, or null for a gain of 1 (one
// folded into the consumer's weights: FlashNorm's PrefillNorm::kInAdd). H % 8 == 0.
Status residual_add(DType dt, int T, int H, const float* p, const float* post_gain, float eps,
                    float* x32, void* xb, cudaStream_t s, const void* next_gain = nullptr,
                    void* xn = nullptr, bool pdl = false);

// Queries, keys and values of T tokens from the fused projection qkv [T, ldqkv] fp32 (q heads, then
// k heads, then v heads, each head_dim wide): per-head RMSNorm with gain for q / k where q_norm /
// k_norm is set (QK-norm; fp32 [D]), unit RMSNorm of v heads where v_renorm, RoPE on q and k with
// the tables cos/sin [max_ctx][D/2] fp32 (pairs (2i, 2i+1) or, neox, (i, i + D/2)); writes
// q [T, n_head * D] fp32 and k/v into k_cache/v_cache [max_ctx][n_head_kv * D] fp32 at rows
// *pos + t. Errors: D even and <= 512; the caller keeps *pos + T <= max_ctx.
struct RopeKvArgs {
  DType dt = DType::kBF16;
  int T = 0, n_head = 0, n_head_kv = 0, D = 0, max_ctx = 0;
  const float* qkv = nullptr;
  int64_t ldqkv = 0;
  const int32_t* pos = nullptr;
  const float* cos = nullptr;
  const float* sin = nullptr;
  bool neox = false;
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  bool v_renorm = false;
  float eps = 1e-6f;
  float* q = nullptr;
  float* k_cache = nullptr;
  float* v_cache = nullptr;
  bool pdl = false;
  // Batched decode (decode_attention only; null otherwise): token t is the one new token of its own
  // sequence, at position seq_pos[t], whose cache rows are rows seq_slot[t] * max_ctx ..
  // (seq_slot[t] + 1) * max_ctx - 1 of k_cache / v_cache (a slot of max_ctx rows per sequence);
  // *pos is unused. Both [T] int32 in device memory, set together.
  const int32_t* seq_pos = nullptr;
  const int32_t* seq_slot = nullptr;
};
Status rope_kv(const RopeKvArgs& a, cudaStream_t s);

// Causal GQA attention of T queries at positions *pos .. *pos + T - 1 over the KV cache:
// out[t, h*D:(h+1)*D] = softmax_j(scale * q_t,h . k_j,h/g) v_j,h/g for keys j in
// [max(0, p_t + 1 - window), p_t] (window = 0: all earlier keys), g = n_head / n_head_kv; out
// rounded to dt. Prompt passes (T >= kAttentionTiledMinT, no splits, D 64 / 128 / 256, q and the
// caches 16-byte aligned) run attention_tiled (fp16 operands, below); otherwise fp32 arithmetic,
// one CTA per (head, query) — or, with split_keys > 0 (decode), per (head, query, chunk of
// split_keys keys) over ceil(min(key_bound, max_ctx) / split_keys) chunks (empty ones exit at
// once), merged by a second kernel from `partials` (flash-decoding), scores through shared memory.
// Errors: D % 4 == 0, D <= 256, max_ctx <= 32768, partials set when split_keys > 0.
struct AttentionArgs {
  DType dt = DType::kBF16;
  int T = 0, n_head = 0, n_head_kv = 0, D = 0, max_ctx = 0, window = 0;
  float scale = 1.0f;
  const int32_t* pos = nullptr;
  const float* q = nullptr;
  const float* k_cache = nullptr;
  const float* v_cache = nullptr;
  void* out = nullptr;  // [T, n_head * D] dt
  int split_keys = 0;   // 0: one CTA per (head, query)
  // With split_keys: 0 (max_ctx), or a bound on *pos + T, the keys any query of the launch can
  // see: only the chunks below it are launched (a decode graph captured for a bucket of
  // positions launches the chunks up to the bucket's end instead of the whole cache's). A bound
  // below *pos + T would drop keys: those queries' outputs are NaN instead.
  int key_bound = 0;
  float* partials = nullptr;  // [T][n_head][attention_splits()][D + 2] fp32 when split_keys > 0
  bool pdl = false;           // both kernels
  // decode_attention only. ctas_per_sm: 1 or 3, the CTAs per SM its registers are allocated for
  // (__launch_bounds__; 3 holds it to 80 registers). late_trigger: with pdl, each CTA lets the
  // next kernel launch after its chunk is published instead of right after its wait. The same
  // results either way; launch ablations of the engine's decode step (CudaLaunch).
  int ctas_per_sm = 1;
  bool late_trigger = false;
};
// Key chunks per (head, query): ceil(max_ctx / split_keys), or 1.
int attention_splits(const AttentionArgs& a);
// attention() runs attention_tiled when it supports the arguments and T >= kAttentionTiledMinT
// (prompt passes), else one CTA per (head, query[, key split]) in fp32.
Status attention(const AttentionArgs& a, cudaStream_t s);
// Prompt attention on tensor cores (prompt_attention.cu): what attention() computes, with the
// scaled queries and the cache's keys and values rounded to fp16 and P to fp16 before P V (fp32
// accumulation and softmax); one CTA per (head, 64 queries). Supports D 64, 128 or 256 without key
// splits; q and the caches 16-byte aligned. A key or value beyond fp16's range (65504) becomes inf
// and the row's output NaN. Errors: kInvalidArgument otherwise.
constexpr int kAttentionTiledMinT = 32;
bool attention_tiled_supports(const AttentionArgs& a);
Status attention_tiled(const AttentionArgs& a, cudaStream_t s);

// Decode attention with the RoPE / QK-norm / KV-cache write fused in (one launch instead of
// rope_kv + attention + combine): for T <= 16 tokens at positions *pos .. *pos + T - 1 (or, with
// rope.seq_pos / seq_slot, T <= 64 tokens of T sequences, each at its own position in its own cache
// slot: batched decode; the launch's key_bound then bounds every seq_pos[t] + 1), computes
// what rope_kv followed by attention with split_keys would (same functions; `rope` supplies qkv,
// pos, the RoPE tables, the norms and the caches, `attn` the window, scale, out, split_keys and
// partials; rope.q and attn.q are unused). One CTA per (head, token, key chunk); each prepares the
// rows it needs from qkv in shared memory (its query; the keys and values of this pass's tokens in
// its chunk, which it never reads from the cache), and the CTA of chunk 0 and the first head of
// each KV group writes its token's key and value rows to the cache, so no CTA reads a cache row
// this launch writes. The chunks of a (head, token) are merged by the last CTA to arrive (a counter
// per (token, head) in `counters`, [64 * n_head] uint32, zero before the first launch, reset by
// that CTA; release/acquire by __threadfence), not by a second kernel (flash-decoding). With pdl,
// each CTA copies its chunk's cached key/value rows (below *pos) into shared memory before it waits
// for the preceding kernel, which therefore must not write *pos or those cache rows (in the engine
// it is the q|k|v projection) — nor any other kernel that may still be running: with PDL the
// launches before it can be in flight too, back to the most recent kernel that waits before it
// lets its successor launch (LinearArgs::pdl in linear.h). In the CUDA engine *pos is written only
// by the sampler and this layer's cache only by this kernel, with waiting kernels (embedding, the
// previous layer's decode_attention) in between. Shared memory per CTA, with c = min(split_keys,
// max_ctx): 4 * (D * (1 + 2T) + 1024 + round4(c) + c * (2D + 4)) bytes plus 132 static, at most
// 227 KiB (split_keys * D <= 16384 keeps it there; T is 1 there in batched decode). Errors:
// T <= 16 (batched: 64), D % 4 == 0, D <= 256,
// split_keys > 0, ldqkv >= (n_head + 2 n_head_kv) D, 16-byte aligned caches, partials and
// counters set, shared memory, ctas_per_sm 1 or 3.
Status decode_attention(const RopeKvArgs& rope, const AttentionArgs& attn, unsigned* counters,
                        cudaStream_t s);
constexpr int kDecodeAttentionMaxT = 16;
constexpr int kDecodeAttentionMaxBatch = 64;  // sequences of one batched decode launch

// Greedy sampling of a batched decode step: for each row b < B of logits [B, ldl] fp32, tokens[b] =
// argmax_j logits[b, j] over j < vocab (lowest id on ties; NaN never chosen; 0 when all are NaN)
// and, where pos is set, pos[b] += 1. One CTA per row. Errors: B >= 1, vocab >= 1, ldl >= vocab,
// logits and tokens set.
Status argmax_rows(int B, int vocab, const float* logits, int64_t ldl, int32_t* tokens,
                   int32_t* pos, cudaStream_t s, bool pdl = false);

// Gated linear unit: act[t, i] = f(gu[t, i]) * gu[t, F + i], f = SiLU (SwiGLU, Llama) or the tanh
// approximation of GELU (GeGLU, Gemma; HF gelu_pytorch_tanh) (GluKind, linear.h). gu: [T, 2F] fp32
// (gate columns, then up); act: [T, F] dt.
Status glu(DType dt, GluKind kind, int T, int F, const float* gu, void* act, cudaStream_t s,
           bool pdl = false);

// Bias of a projection whose GEMM has none (cuBLASLt): y[m, n] += bias[n] for m < M, n < N.
// y: [M, ldy] fp32 (ldy >= N); bias: [N] dt (as LinearArgs::bias, which the decode and two-stream
// paths add themselves).
Status add_bias(DType dt, int M, int N, float* y, int64_t ldy, const void* bias, cudaStream_t s,
                bool pdl = false);

// Final logit soft-capping in place (Gemma 3 final_logit_softcapping; transformers
// Gemma3ForCausalLM.forward): y[m, n] = cap * tanh(y[m, n] / cap) for m < M, n < N, in fp32 with
// IEEE division and tanhf. y: [M, ldy] fp32 (ldy >= N). Errors: M, N >= 1, ldy >= N, y set, cap
// positive and finite.
Status softcap_logits(int M, int N, float* y, int64_t ldy, float cap, cudaStream_t s,
                      bool pdl = false);

// Samples one token from logits [vocab] fp32, as the decode loop's last step: with p = *pos +
// advance (the position of the sampled token), temperature == 0 gives argmax (lowest id on ties;
// NaN never chosen) and temperature > 0 gives argmax_j(logit_j / temperature + G_j) with G_j
// Gumbel(0, 1) noise from a counter-based hash of (seed, p, j) — an exact draw from
// softmax(logit / T) (Gumbel-max trick). Writes the id to *token and to history[p] (when history
// is set and p < history_len), then sets *pos = p. advance: the tokens of the forward pass (1 in
// decode). Up to kSampleBlocks CTAs each take a slice of the vocabulary; the last to finish (an
// arrival counter in `workspace`, release/acquire by __threadfence) merges their winners in CTA
// order, so the result equals a sequential argmax. workspace: sample_workspace_bytes() bytes of
// device memory, zero before the first call (each call leaves its counter at zero); calls sharing
// one workspace must be stream-ordered.
constexpr int kSampleBlocks = 32;
size_t sample_workspace_bytes();
Status sample_tokens(int vocab, const float* logits, float temperature, uint64_t seed, int32_t* pos,
                     int advance, int32_t* token, int32_t* history, int history_len,
                     void* workspace, cudaStream_t s, bool pdl = false);

}  // namespace flashnorm::kernels::cuda
