// The CUDA engine's parts (internal to src/engine/cuda): its shapes, the weights on the device, the
// workspace, the step profiler, the forward pass and the decode graph. CudaEngine
// (cuda_engine.cpp) owns one of each; see engine/cuda_engine.h for what the engine computes.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "flashnorm/engine/cuda_engine.h"
#include "flashnorm/kernels/cuda/device.h"
#include "flashnorm/kernels/cuda/engine_ops.h"
#include "flashnorm/kernels/cuda/quant_dequant.h"
#include "flashnorm/kernels/cuda/quant_gemv.h"

namespace flashnorm::cuda_engine {
namespace fk = kernels::cuda;
using fk::DeviceBuffer;

// Throws the Status's error (kernels' Status -> flashnorm::Error).
inline void ok(const fk::Status& s) { fk::throw_if_error(s); }

// The kernels' dtype of a HalfType.
inline fk::DType to_dtype(HalfType t) {
  return t == HalfType::kBF16 ? fk::DType::kBF16 : fk::DType::kFP16;
}

// Decode attention splits the keys in chunks of split_keys(D) over CTAs (forward passes of at most
// kSplitMaxT tokens); longer passes (prefill) have enough (head, query) CTAs without.
constexpr int kSplitMaxT = fk::kDecodeAttentionMaxT;
// Passes of at most this many tokens read quantized projections with quant_gemv; longer ones expand
// them into a dt tile for the GEMM (quant_gemv takes M <= 8).
constexpr int kQuantGemvMaxM = 8;
// FlashNorm mode defers rstd to the projections' outputs in passes of at most this many tokens
// (decode, batched decode: flashnorm_linear's decode kernel, or its GEMM with rstd in the epilogue
// where tuning found that faster up to 64 rows); longer passes (prompts) apply it in the residual
// add (PrefillNorm::kInAdd).
constexpr int kDeferredMaxT = 64;
// The largest row tile the engine runs the decode GEMV with: a pass of more rows (decode_max_rows
// above 32) takes 32-row slices, W read again from the L2 (on Hopper, at 64 rows, the kernel's
// 64-row tile measured 0.93-0.94x of cuBLASLt and two 32-row slices 0.88-0.92x; at 32 rows the
// 32-row tile 1.01-1.07x).
constexpr int kDecodeSliceRows = 32;
// A decode graph covers the keys of one bucket of this many positions (its attention launches
// the key chunks up to the bucket's end): recaptured when the position enters the next bucket,
// instead of launching the whole cache's chunks, mostly empty, at every step (a 4160-position
// cache cost Llama-3-8B shapes 1040 us of attention per eager step against 620 us at 704).
constexpr int kKeyBucket = 512;
// Batched decode passes are captured for these batch sizes (the next one up, padding rows reading
// and writing the padding slot at position 0): one graph per size in use, not one per batch size.
inline int batch_bucket(int B) {
  int b = 1;
  while (b < B) b *= 2;
  return std::min(b, fk::kDecodeAttentionMaxBatch);
}
// Keys per chunk: 128 for head_dim 64, fewer for wider heads (decode_attention keeps a chunk's keys
// and values in shared memory: split * D <= 8192 floats each).
inline int split_keys(int D) { return std::clamp(8192 / D, 16, 128); }

// Widths and capacities (workspace.cpp).
struct Dims {
  int H, F, nq, nkv, nqkv, V, D, L;  // hidden, ffn, q / kv / q|k|v widths, vocab, head_dim, layers
  int max_ctx;                       // KV cache positions
  int tmax;                          // largest forward pass (tokens)
  int ldv;  // logits row stride: V rounded up to a multiple of 8 (the kernels' 16-byte rows)
  // KV cache slots of max_ctx positions each: slot 0 is forward()'s sequence; with
  // CudaCapacity::max_sequences = S > 0, slots 1 .. S hold the open sequences and slot S + 1 the
  // padding rows of a batched decode graph (kSlotsExtra).
  int slots = 1;
  float emb_scale = 1.0f;  // sqrt(hidden) for Gemma, else 1
};
// Errors: Error when the cache exceeds the model's context or 32768, the widths are not ones the
// kernels take (multiples of 8, head_dim <= 256), or decode_max_rows is outside 1 .. 64.
Dims make_dims(const ModelConfig& c, const ArchDescription& a, const CudaEngineOptions& opt);

// A projection kept in the file's GGML blocks (a model loaded with WeightStorage::kNative): rows
// n0 .. n0 + N - 1 of the output per part, each part one type, read by quant_gemv in decode (the
// gain applied to x as it is staged, rstd to the rows unless the part's rstd cancels) and expanded
// into a dt tile by quant_dequantize for longer passes. Empty: the projection is in dt.
struct QuantPart {
  fk::QuantType type = fk::QuantType::kQ4_K;
  DeviceBuffer w;  // N rows of K / block elements blocks, in quant_gemv's device layout
  int n0 = 0, N = 0;
  bool scaled = true;  // FlashNorm mode: rows scaled by rstd (false: QK-norm cancels it)
};
struct QuantProj {
  std::vector<QuantPart> parts;
  int N = 0, K = 0;
  bool empty() const { return parts.empty(); }
};

// The model on the device in the engine dtype (weights.cpp): dequantized, and in FlashNorm mode
// folded at load (fold/fold_gain.h: fp64 products rounded once); or, for a model loaded with
// native weights, each projection whose every part is a type quant_gemv reads kept in its blocks
// (QuantProj; the gains applied to x, never folded), the rest dequantized as above.
struct DeviceWeights {
  struct Layer {
    DeviceBuffer wqkv, wo, wgu, wdown;  // dt; wqkv/wgu folded in FlashNorm mode (empty: quantized)
    QuantProj qqkv, qo, qgu, qdown;     // the same projections in GGML blocks, or empty
    DeviceBuffer attn_gain, ffn_gain;   // dt multipliers (Standard mode)
    DeviceBuffer attn_gain32, ffn_gain32;  // fp32 multipliers (quantized projections)
    DeviceBuffer q_norm, k_norm;           // fp32 multipliers, or empty
    DeviceBuffer post_attn, post_ffn;      // fp32 multipliers, or empty
    // dt biases (q|k|v and gate|up fused, zeros where a part has none), or empty (null): added
    // after the row scale
    DeviceBuffer bqkv, bgu, bo, bdown;
    bool has_q_norm = false, has_k_norm = false, v_renorm = false, has_post = false;
    std::array<bool, 3> cancels{};  // q, k, v: rstd cancels (LayerPlan::qkv_cancels)
    bool local = false;
  };
  std::vector<Layer> layers;
  DeviceBuffer emb, head, out_gain;
  QuantProj qhead;           // the LM head in GGML blocks (native weights), or empty
  DeviceBuffer out_gain32;   // fp32 final gain (a quantized head)
  bool head_is_emb = false;  // the LM head reads emb (tied, its gain not folded)
  bool any_quant = false, quant_down = false;  // some projection / some down projection quantized
  size_t tile_elems = 0;      // largest quantized projection (N x K): the prompt passes' dt tile
  std::string quant_summary;  // "N of M projections in their blocks" (native weights)
  DeviceBuffer qkv_mask, zero_mask;  // uint8 scale masks
  bool qkv_masked = false, qkv_all_unscaled = false;
  DeviceBuffer cos_g, sin_g, cos_l, sin_l;  // RoPE tables: global and local bases
};
DeviceWeights upload_weights(const Model& m, NormMode mode, const CudaEngineOptions& opt,
                             const Dims& d);

// Activation buffers, KV cache and the host staging buffers (workspace.cpp), sized for passes of
// up to d.tmax tokens and d.slots caches of d.max_ctx positions; KV cache and kernel counters
// zeroed.
struct Workspace {
  // tile_elems: dt elements of the tile quantized projections expand into (0: none).
  Workspace(const Dims& d, const ModelConfig& c, size_t tile_elems = 0);
  DeviceBuffer kc, vc;  // fp32 KV cache [layer][slot][pos][n_kv * D]
  // batched decode: each row's position and slot ([kDecodeAttentionMaxBatch] int32), from h_seq
  DeviceBuffer d_seq_pos, d_seq_slot;
  fk::PinnedBuffer h_seq;  // [2][kDecodeAttentionMaxBatch] int32: positions, then slots
  DeviceBuffer d_tokens, d_pos, d_history;  // token ids, first position, sampled history
  DeviceBuffer x32, xb, xn, qkv, q, att, proj, gu, act, logits;
  fk::PinnedBuffer h_tokens, h_pos, h_logits;  // host staging
  DeviceBuffer partials;                       // split-key attention (decode)
  DeviceBuffer attn_counters;  // decode_attention's per-(token, head) arrival counters
  DeviceBuffer sample_ws;      // sample_tokens' per-CTA winners and arrival counter
  DeviceBuffer wtile;          // a quantized projection expanded to dt for a prompt pass
};

// Kernel classes of the step profile (StepProfile's fields).
enum Cls { kNorm, kNormedProj, kOtherProj, kAttn, kOther, kClasses };

// CUDA events around each kernel of an eager pass while active (profiler.cpp).
class StepProfiler {
 public:
  // Runs f; while active, between two events recorded on `s` and counted under class c.
  template <class F>
  void op(Cls c, cudaStream_t s, F&& f) {
    if (!active_) return f();
    const size_t i = cls_.size();
    while (events_.size() < 2 * (i + 1)) events_.push_back(std::make_unique<fk::Event>());
    FN_CUDA_CHECK(cudaEventRecord(events_[2 * i]->get(), s));
    f();
    FN_CUDA_CHECK(cudaEventRecord(events_[2 * i + 1]->get(), s));
    cls_.push_back(c);
  }
  void start() { active_ = true, cls_.clear(); }
  void stop() { active_ = false; }
  // Microseconds per class of the pass recorded since start() (its events complete).
  std::vector<double> class_us() const;

 private:
  bool active_ = false;
  std::vector<std::unique_ptr<fk::Event>> events_;
  std::vector<int> cls_;
};

// The step profile of per-class times over several passes ([class][pass], StepProfiler::class_us
// of each): the median of each class.
StepProfile median_profile(const std::vector<std::vector<double>>& per_class);

// Which KV cache a forward pass reads and writes.
struct Pass {
  int slot = 0;  // one sequence: its KV cache slot (positions from d_pos)
  // Batched decode: T tokens, one per sequence, at positions d_seq_pos[t] in slots d_seq_slot[t]
  // (decode_attention's batched form; T <= kDecodeAttentionMaxBatch).
  bool batched = false;
};

// One projection's weights for a call of the forward pass: W [N, K] in dt (its norm's gain folded
// in FlashNorm mode where the consumer folds it), or the file's blocks (q with parts: W unused),
// and its bias.
struct ProjWeights {
  const void* w = nullptr;
  int N = 0, K = 0;
  const void* bias = nullptr;    // [N] dt, or null
  const QuantProj* q = nullptr;  // native blocks, or null / empty
  bool quantized() const { return q && !q->empty(); }
};

// Where a projection's result goes: y [M, ldy] (ldy 0: N), fp32 (y_f32) or dt. add_residual
// (decode path): x32 += the result and xb = round(x32) instead of y (the residual add in the
// GEMV's epilogue). glu (decode path): x is the fp32 gate|up output [M, 2K] and the GLU is
// applied as the kernel stages it.
struct ProjOut {
  void* y = nullptr;
  int ldy = 0;
  bool y_f32 = false;
  bool add_residual = false;
  bool glu = false;
};

// The RMSNorm that feeds a normed projection: rows row0 .. row0 + M - 1 of xb, the norm's gain
// in dt (gain) and fp32 (gain32, native weights); mask: the output columns whose rstd is kept
// (null: all), all_unscaled: every column's rstd cancels; keep_gain: FlashNorm mode's tied LM head
// (TiedHead::kKeepGain), normalized as in Standard mode since its gain is not folded.
struct NormIn {
  int row0 = 0, M = 0;
  const void* gain = nullptr;
  const DeviceBuffer* gain32 = nullptr;
  const uint8_t* mask = nullptr;
  bool all_unscaled = false;
  bool keep_gain = false;
};

// The forward pass (forward.cpp) over the weights and the workspace, on one stream.
struct Forward {
  const ModelConfig& cfg;
  const ArchHooks& hooks;
  NormMode mode;
  const CudaEngineOptions& opt;
  fk::DType dt;
  const Dims& d;
  const DeviceWeights& w;
  Workspace& ws;
  fk::LinearContext& ctx;
  StepProfiler& prof;
  cudaStream_t s;
  bool xn_ready = false;  // xn holds the next normed projection's input (written by the add)
  // This pass normalizes in the residual adds (FlashNorm mode, PrefillNorm::kInAdd, a pass of
  // more than kDeferredMaxT tokens): xn = x * rstd, the gain folded into the weights; for a
  // quantized projection (its blocks keep no gain) and a tied head that keeps its gain, xn = x *
  // rstd * g, the gain (rounded to dt, as in Standard mode) applied by the add.
  bool norm_in_add = false;
  // The most rows a projection takes the decode GEMV for, set by run(): CudaLaunch::decode_max_rows
  // in batched decode passes, at most 16 in others; head_gemv_rows (same caps) during the LM
  // head's call (head_call).
  int gemv_rows = 16;
  // The LM head's limit (<= decode_max_rows): set at load to half the smallest tuned tile above 8
  // at which cuBLASLt was faster than the decode GEMV (tune_gemvs / use_gemv_configs); past it the
  // head normalizes x first and runs cuBLASLt, in both modes.
  int head_gemv_rows = 16;
  bool head_call = false;  // run() is in the LM head's normed projection
  // Set around the gate|up projection of a pass that takes CudaLaunch::quant_glu_out (layer()):
  // quant() then writes the GLU here (QuantGemvArgs::glu_out) instead of y; null otherwise.
  void* quant_glu_out = nullptr;
  int key_bound = 0;   // set by run() (its argument), for this pass's attention launches
  Pass pass = Pass{};  // set by run() (its argument)

  // One forward pass of T tokens (ids in d_tokens, first position in d_pos): logits of the last
  // `rows` tokens into `logits` (rows = 0: none); with `sample`, then samples the next token
  // (decode-loop step: d_tokens[0] and d_pos advance). key_bound: at least the pass's last
  // position + 1, the keys its attention launches chunks for (AttentionArgs::key_bound): that
  // position + 1 for an eager pass, the end of the position bucket for a captured decode step.
  // pass: the cache slot, or a batched decode pass (rows = T; `sample`: greedy argmax_rows,
  // d_tokens[t] and d_seq_pos[t] advance; temperature must be 0).
  void run(int T, int rows, bool sample, float temperature, uint64_t seed, int key_bound,
           Pass pass = {});

  fk::GluKind glu_kind() const;
  // Plain projections of M tokens go through the decode kernel (M <= gemv_rows, PlainGemm::kAuto).
  bool decode_path(int M) const;
  // The GLU runs inside the down projection for passes of T tokens (decode path, T <= 16; its
  // staged input, T x F elements, well inside the decode kernel's shared memory).
  bool glu_in_down(int T) const;
  // CudaLaunch::quant_glu_out taken by layer ly in passes of T tokens: T = 1 with the GLU fused
  // (glu_in_down), gate|up quantized in one part without a bias, and its quant_gemv not split
  // (the launch it replaces would sum K slices in another order: not the same bits).
  bool glu_in_gate_up(int T, const DeviceWeights::Layer& ly) const;

 private:
  // The decode GEMV (LinearImpl::kDecode) on a's rows in slices of at most kDecodeSliceRows (each
  // row's rstd, residual add and output are its own, so slices compute what one launch would).
  void decode_gemv(const fk::LinearArgs& a);
  void plain(const void* x, int M, const ProjWeights& pw, const ProjOut& out);
  void normed(const NormIn& in, const ProjWeights& pw, const ProjOut& out);
  // pw.q's parts by quant_gemv: y[:, n0 ..] = s * ((x * gain) W^T) (+ bias), s = rstd where
  // `rstd` and the part is scaled, else 1; gain fp32 or null. M <= kQuantGemvMaxM. out.glu and
  // out.add_residual as ProjOut says (no bias with the residual add).
  void quant(const void* x, int M, const ProjWeights& pw, const ProjOut& out, const float* gain,
             bool rstd);
  // q expanded into ws.wtile ([N, K] dt, times gain when set); returns the tile.
  const void* expand(const QuantProj& q, const float* gain);
  // x32 += ws.proj (post-normed where has_post); xb = round(x32); with Standard's kFusedAdd or
  // norm_in_add, also xn = the next normed projection's input. next_gain: that norm's dt gain;
  // next_folded: its consumer folds it into W (FlashNorm, bf16 weights: xn = x * rstd only; native
  // weights keep it: xn = x * rstd * g).
  void residual(int T, const DeviceBuffer& post, bool has_post, const void* next_gain,
                bool next_folded);
  void layer(int l, int T);
};

// Decode GEMV launch configurations (gemv_tuning.cpp): tuned over the layers' own weights for each
// projection shape and tuned row tile, or another engine's applied as given; the results stay in
// f.ctx, and the LM head's tiles set f.head_gemv_rows.
std::vector<GemvTuning> tune_gemvs(Forward& f);
void use_gemv_configs(Forward& f, const std::vector<GemvTuning>& cfgs);
// f.head_gemv_rows from the LM head's entries: decode_max_rows, or half the smallest tile above 8
// at which cuBLASLt was faster (GemvTuning::gemm_us).
void set_head_gemv_rows(Forward& f, const std::vector<GemvTuning>& tuning);

// The decode step's CUDA graph (decode_graph.cpp): captured on the second step (the first runs
// eagerly and warms up LinearContext's buffers and cuBLASLt plans so that capture allocates
// nothing), recaptured when the temperature, seed, LinearContext's workspaces or the position's
// bucket of kKeyBucket positions change.
class DecodeGraph {
 public:
  // One decode step of f at position pos (the token in d_tokens[0], d_pos current): replayed from
  // the graph with DecodeLaunch::kGraph after the warm-up step, else launched eagerly.
  void step(Forward& f, int pos, float temperature, uint64_t seed);

 private:
  fk::GraphExec graph_;
  float temp_ = -1;
  uint64_t seed_ = 0;
  uint64_t generation_ = 0;  // LinearContext workspaces the graph was captured with
  int key_bound_ = 0;        // the bucket end the graph was captured for (run()'s key_bound)
  bool warmed_ = false;      // one eager decode step has run
};

// Batched decode graphs (decode_graph.cpp), one per (batch bucket, sampling): a bucket's first pass
// runs eagerly (warming LinearContext's plans for its M), the next is captured; recaptured when the
// key bucket or LinearContext's workspaces change.
class BatchGraphs {
 public:
  // One batched decode pass of f over B = batch_bucket(rows) rows (tokens, positions and slots
  // already in d_tokens, d_seq_pos, d_seq_slot, padded to B), the highest position max_pos.
  // sample: argmax_rows feeds each row's token back (Forward::run).
  void step(Forward& f, int B, int max_pos, bool sample);

 private:
  struct Entry {
    fk::GraphExec graph;
    uint64_t generation = 0;
    int key_bound = 0;
    bool warmed = false;
  };
  Entry entries_[2][8];  // [sample][log2 bucket]
};

}  // namespace flashnorm::cuda_engine
