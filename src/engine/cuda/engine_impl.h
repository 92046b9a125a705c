// CudaEngine's state (engine/cuda_engine.h), shared by its source files: cuda_engine.cpp (one
// sequence: prefill, the decode loop, generation, timings) and sequences.cpp (batched sequences).
#pragma once

#include <fmt/format.h>

#include <map>
#include <memory>
#include <span>
#include <vector>

#include "flashnorm/engine/cuda_engine.h"
#include "flashnorm/error.h"
#include "internal.h"

namespace flashnorm {
using namespace cuda_engine;  // internal to src/engine/cuda

// The parts of internal.h, the position of forward()'s sequence (slot 0) and the open batched
// sequences.
struct CudaEngine::Impl {
  Impl(const Model& m, NormMode mode, const CudaEngineOptions& opt)
      : cfg(m.cfg),
        hooks(m.arch->hooks),
        mode(mode),
        opt(opt),
        d(make_dims(m.cfg, *m.arch, opt)),
        w(upload_weights(m, mode, opt, d)),
        ws(d, m.cfg, w.tile_elems),
        ctx(std::make_unique<fk::LinearContext>()),
        f{cfg, hooks, mode, this->opt, to_dtype(opt.dtype), d, w, ws, *ctx, prof, stream.get()} {
    ctx->set_race_hooks(opt.debug);
    // the uploads and memsets above (the legacy stream: the KV cache, the split-K counters) done
    // before anything runs on `stream`, which does not wait for the legacy stream
    FN_CUDA_CHECK(cudaStreamSynchronize(nullptr));
    f.gemv_rows = f.head_gemv_rows = opt.launch.decode_max_rows;
    if (!opt.gemv_configs.empty()) {
      use_gemv_configs(f, opt.gemv_configs);
      tuning = opt.gemv_configs;
    } else if (opt.gemv.choice == GemvChoice::kTune) {
      tuning = tune_gemvs(f);
    }
    slot_pos.assign(d.slots, 0);
    for (int sl = d.slots - 2; sl >= 1; --sl) free_slots.push_back(sl);  // 1 first
    // this engine's stream only (the legacy stream's uploads were waited for above; side-stream
    // work is joined back into `stream`): cudaDeviceSynchronize would also wait on, and so
    // invalidate, a graph another engine's thread is capturing
    FN_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
  }

  ModelConfig cfg;
  ArchHooks hooks;
  NormMode mode;
  CudaEngineOptions opt;
  fk::Stream stream;
  Dims d;
  DeviceWeights w;
  Workspace ws;
  std::unique_ptr<fk::LinearContext> ctx;
  StepProfiler prof;
  Forward f;
  DecodeGraph graph;
  std::vector<GemvTuning> tuning;
  int pos = 0;
  bool pos_stale = true;  // d_pos does not hold pos
  // Batched sequences: id -> KV cache slot, each slot's position, the free slots (popped from the
  // back), the next id, the batched decode graphs.
  std::map<int, int> seqs;
  std::vector<int> slot_pos;
  std::vector<int> free_slots;
  int next_seq = 1;
  BatchGraphs batch_graphs;

  int pad_slot() const { return d.slots - 1; }
  int slot_of(int seq) const {
    const auto it = seqs.find(seq);
    if (it == seqs.end()) throw Error(fmt::format("sequence {} is not open", seq));
    return it->second;
  }

  cudaStream_t s() const { return stream.get(); }

  void set_pos_device(int p) {
    *ws.h_pos.as<int32_t>() = p;
    FN_CUDA_CHECK(
        cudaMemcpyAsync(ws.d_pos.get(), ws.h_pos.as<int32_t>(), 4, cudaMemcpyHostToDevice, s()));
    FN_CUDA_CHECK(cudaStreamSynchronize(s()));  // h_pos is reused by the next call
    pos_stale = false;
  }

  // One decode step of the token already in d_tokens[0] at position pos (DecodeGraph::step).
  void decode_step(float temperature, uint64_t seed) {
    check_capacity(1);
    if (pos_stale) set_pos_device(pos);
    graph.step(f, pos, temperature, seed);
    ++pos;
  }

  void check_capacity(size_t n) const {
    if (size_t(pos) + n > size_t(d.max_ctx)) {
      throw Error(
          fmt::format("context full: {} + {} tokens exceed the KV cache of {}", pos, n, d.max_ctx));
    }
  }

  void check_ids(std::span<const int32_t> tokens) const {
    for (int32_t t : tokens) {
      if (t < 0 || t >= d.V) {
        throw Error(fmt::format("token id {} is outside the vocabulary of {}", t, d.V));
      }
    }
  }

  // Eager forward of tokens in chunks of tmax; logits (rows of the last chunk, or all) to host.
  std::vector<float> prefill(std::span<const int32_t> tokens, bool all_logits) {
    return prompt_passes(0, pos, tokens, all_logits);
  }

  // prefill() on cache slot `slot` at position p (advanced by the tokens).
  std::vector<float> prompt_passes(int slot, int& pos, std::span<const int32_t> tokens,
                                   bool all_logits) {
    std::vector<float> out;
    if (all_logits) out.reserve(tokens.size() * size_t(d.V));
    for (size_t start = 0; start < tokens.size(); start += d.tmax) {
      const int n = static_cast<int>(std::min<size_t>(d.tmax, tokens.size() - start));
      const bool last = start + n == tokens.size();
      const int rows = all_logits ? n : (last ? 1 : 0);
      std::copy(tokens.begin() + start, tokens.begin() + start + n, ws.h_tokens.as<int32_t>());
      *ws.h_pos.as<int32_t>() = pos;
      FN_CUDA_CHECK(cudaMemcpyAsync(ws.d_tokens.get(), ws.h_tokens.as<int32_t>(), n * 4,
                                    cudaMemcpyHostToDevice, s()));
      FN_CUDA_CHECK(
          cudaMemcpyAsync(ws.d_pos.get(), ws.h_pos.as<int32_t>(), 4, cudaMemcpyHostToDevice, s()));
      f.run(n, rows, false, 0, 0, pos + n, Pass{slot, false});
      if (rows > 0) {
        FN_CUDA_CHECK(cudaMemcpyAsync(ws.h_logits.as<float>(), ws.logits.get(),
                                      size_t(rows) * d.ldv * 4, cudaMemcpyDeviceToHost, s()));
      }
      FN_CUDA_CHECK(cudaStreamSynchronize(s()));
      const float* hl = ws.h_logits.as<float>();
      for (size_t r = 0; r < size_t(rows); ++r) {
        out.insert(out.end(), hl + r * d.ldv, hl + r * d.ldv + d.V);
      }
      pos += n;
      pos_stale = true;
    }
    return out;
  }

  // Stages B one-token rows (token, sequence slot, position each) padded to batch_bucket(B) in
  // d_tokens, d_seq_slot, d_seq_pos; returns the bucket. The pinned buffers are free on return.
  int stage_batch(std::span<const int32_t> tokens, std::span<const int> slots) {
    constexpr int kMaxB = fk::kDecodeAttentionMaxBatch;
    const int B = int(tokens.size()), Bb = batch_bucket(B);
    int32_t* ht = ws.h_tokens.as<int32_t>();
    int32_t* hp = ws.h_seq.as<int32_t>();
    int32_t* hs = hp + kMaxB;
    for (int b = 0; b < Bb; ++b) {
      const bool real = b < B;
      ht[b] = real ? tokens[b] : 0;
      hs[b] = real ? slots[b] : pad_slot();
      hp[b] = real ? slot_pos[slots[b]] : 0;
    }
    FN_CUDA_CHECK(cudaMemcpyAsync(ws.d_tokens.get(), ht, Bb * 4, cudaMemcpyHostToDevice, s()));
    FN_CUDA_CHECK(cudaMemcpyAsync(ws.d_seq_pos.get(), hp, Bb * 4, cudaMemcpyHostToDevice, s()));
    FN_CUDA_CHECK(cudaMemcpyAsync(ws.d_seq_slot.get(), hs, Bb * 4, cudaMemcpyHostToDevice, s()));
    FN_CUDA_CHECK(cudaStreamSynchronize(s()));
    return Bb;
  }
};

}  // namespace flashnorm
