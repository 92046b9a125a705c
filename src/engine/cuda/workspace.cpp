// The CUDA engine's shapes and workspace (internal.h): activation buffers for passes of up to tmax
// tokens, the fp32 KV cache, host staging buffers and the kernels' scratch.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "flashnorm/error.h"
#include "internal.h"

namespace flashnorm::cuda_engine {

Dims make_dims(const ModelConfig& c, const ArchDescription& a, const CudaEngineOptions& opt) {
  const CudaCapacity& cap = opt.capacity;
  if (opt.launch.decode_max_rows < 1 || opt.launch.decode_max_rows > fk::kDecodeAttentionMaxBatch) {
    throw Error(fmt::format("decode_max_rows {} is outside 1 .. {}", opt.launch.decode_max_rows,
                            fk::kDecodeAttentionMaxBatch));
  }
  if (opt.launch.attention_ctas_per_sm != 1 && opt.launch.attention_ctas_per_sm != 3)
    throw Error(fmt::format("attention_ctas_per_sm {} is neither 1 nor 3",
                            opt.launch.attention_ctas_per_sm));
  Dims e;
  e.H = c.hidden, e.F = c.ffn, e.D = c.head_dim, e.L = c.n_layer, e.V = c.vocab;
  e.ldv = (e.V + 7) / 8 * 8;
  e.nq = c.n_head * c.head_dim, e.nkv = c.n_head_kv * c.head_dim, e.nqkv = e.nq + 2 * e.nkv;
  e.max_ctx = cap.max_context > 0 ? cap.max_context : std::min(c.context, 8192);
  if (e.max_ctx > c.context || e.max_ctx > 32768) {
    throw Error(
        fmt::format("a KV cache of {} positions exceeds the model's context length {} "
                    "(or the CUDA engine's 32768)",
                    e.max_ctx, c.context));
  }
  e.tmax = std::clamp(cap.max_batch, 1, e.max_ctx);
  if (cap.max_sequences < 0 || cap.max_sequences > 4096) {
    throw Error(fmt::format("max_sequences {} is outside 0 .. 4096", cap.max_sequences));
  }
  e.slots = cap.max_sequences > 0 ? cap.max_sequences + 2 : 1;
  if (cap.max_sequences > 0) e.tmax = std::max(e.tmax, fk::kDecodeAttentionMaxBatch);
  if (e.H % 8 || e.F % 8 || e.nq % 8 || e.nkv % 8 || e.D % 4 || e.D > 256) {
    throw Error(
        fmt::format("the CUDA engine needs hidden, ffn and head widths that are multiples "
                    "of 8 and head_dim <= 256 (hidden {}, ffn {}, head_dim {})",
                    e.H, e.F, e.D));
  }
  e.emb_scale = a.hooks.embed_scale_sqrt_hidden ? std::sqrt(float(e.H)) : 1.0f;
  return e;
}

Workspace::Workspace(const Dims& e, const ModelConfig& c, size_t tile_elems) {
  const size_t kv = size_t(e.L) * e.slots * e.max_ctx * e.nkv * sizeof(float);
  kc = DeviceBuffer(kv), vc = DeviceBuffer(kv);
  constexpr int kMaxB = fk::kDecodeAttentionMaxBatch;
  d_seq_pos = DeviceBuffer(kMaxB * 4), d_seq_slot = DeviceBuffer(kMaxB * 4);
  h_seq = fk::PinnedBuffer(2 * kMaxB * 4);
  const size_t T = e.tmax;
  d_tokens = DeviceBuffer(T * 4), d_pos = DeviceBuffer(4);
  d_history = DeviceBuffer((size_t(e.max_ctx) + 1) * 4);
  x32 = DeviceBuffer(T * e.H * 4), xb = DeviceBuffer(T * e.H * 2);
  xn = DeviceBuffer(T * e.H * 2), qkv = DeviceBuffer(T * e.nqkv * 4);
  q = DeviceBuffer(T * e.nq * 4), att = DeviceBuffer(T * e.nq * 2);
  proj = DeviceBuffer(T * e.H * 4), gu = DeviceBuffer(T * 2 * e.F * 4);
  act = DeviceBuffer(T * e.F * 2);
  logits = DeviceBuffer(  // also the scratch output of tune_gemvs
      std::max(T * e.ldv, size_t(std::max({e.nqkv, 2 * e.F, e.H}))) * 4);
  h_tokens = fk::PinnedBuffer(T * 4), h_pos = fk::PinnedBuffer(4);
  h_logits = fk::PinnedBuffer(T * e.ldv * 4);
  fk::AttentionArgs aa;
  aa.max_ctx = e.max_ctx, aa.split_keys = split_keys(e.D);
  // decode_attention's rows: up to kSplitMaxT tokens of one sequence, or a batched pass's
  const size_t split_rows = e.slots > 1 ? size_t(kMaxB) : std::min<size_t>(T, kSplitMaxT);
  partials =
      DeviceBuffer(split_rows * c.n_head * fk::attention_splits(aa) * (e.D + 2) * sizeof(float));
  attn_counters = DeviceBuffer(size_t(kMaxB) * c.n_head * sizeof(unsigned));
  FN_CUDA_CHECK(cudaMemset(attn_counters.get(), 0, attn_counters.bytes()));
  sample_ws = DeviceBuffer(fk::sample_workspace_bytes());
  FN_CUDA_CHECK(cudaMemset(sample_ws.get(), 0, sample_ws.bytes()));
  if (tile_elems > 0) wtile = DeviceBuffer(tile_elems * 2);
  FN_CUDA_CHECK(cudaMemset(kc.get(), 0, kv));
  FN_CUDA_CHECK(cudaMemset(vc.get(), 0, kv));
}

}  // namespace flashnorm::cuda_engine
