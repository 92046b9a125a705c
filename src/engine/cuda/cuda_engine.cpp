// CudaEngine (engine/cuda_engine.h): owns the parts of internal.h and runs prefill, the decode
// loop, generation on the device and the decode-step timings. Host code only; the kernels are in
// src/kernels/cuda (kernels.cu: RMSNorm and flashnorm_linear; engine_ops.cu: the rest).
#include "flashnorm/engine/cuda_engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "flashnorm/error.h"
#include "internal.h"

namespace flashnorm {
using namespace cuda_engine;

bool cuda_device_available(std::string* why) { return fk::hopper_device_available(why); }

namespace {
// Throws before any CUDA object is made when no usable GPU is present.
void require_gpu() {
  std::string why;
  if (!cuda_device_available(&why)) throw Error("no usable NVIDIA GPU: " + why);
}
}  // namespace

struct CudaEngine::Impl {
  Impl(const Model& m, NormMode mode, const CudaEngineOptions& opt)
      : cfg(m.cfg),
        hooks(m.arch->hooks),
        mode(mode),
        opt(opt),
        d(make_dims(m.cfg, *m.arch, opt.capacity)),
        w(upload_weights(m, mode, opt, d)),
        ws(d, m.cfg, w.tile_elems),
        ctx(std::make_unique<fk::LinearContext>()),
        f{cfg, hooks, mode, this->opt, to_dtype(opt.dtype), d, w, ws, *ctx, prof, stream.get()} {
    ctx->set_race_hooks(opt.debug);
    if (!opt.gemv_configs.empty()) {
      use_gemv_configs(f, opt.gemv_configs);
      tuning = opt.gemv_configs;
    } else if (opt.gemv.choice == GemvChoice::kTune) {
      tuning = tune_gemvs(f);
    }
    slot_pos.assign(d.slots, 0);
    for (int sl = d.slots - 2; sl >= 1; --sl) free_slots.push_back(sl);  // 1 first
    FN_CUDA_CHECK(cudaDeviceSynchronize());
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

CudaEngine::CudaEngine(const Model& m, NormMode mode, const CudaEngineOptions& opt)
    : p_((require_gpu(), std::make_unique<Impl>(m, mode, opt))) {}

const std::vector<GemvTuning>& CudaEngine::gemv_tuning() const { return p_->tuning; }

CudaEngine::~CudaEngine() {
  if (p_) cudaStreamSynchronize(p_->s());
}

void CudaEngine::reset() { p_->pos = 0, p_->pos_stale = true; }
int CudaEngine::position() const { return p_->pos; }
int CudaEngine::max_context() const { return p_->d.max_ctx; }
const ModelConfig& CudaEngine::config() const { return p_->cfg; }
NormMode CudaEngine::mode() const { return p_->mode; }

std::string CudaEngine::describe() const {
  const Impl& e = *p_;
  const CudaEngineOptions& o = e.opt;
  std::string variant;
  if (e.mode == NormMode::FlashNorm) {
    variant = o.flashnorm.deferred == Deferred::kTwoStream ? " (two-stream" : " (fused";
    variant += o.flashnorm.prefill == PrefillNorm::kInAdd ? "; prompts: rstd in the residual add"
                                                          : "; prompts: rstd deferred";
    if (e.w.head_is_emb) variant += "; tied LM head: final RMSNorm keeps its gain";
    if (e.cfg.tied_head && !e.w.head_is_emb) {
      variant += e.w.qhead.empty() ? "; tied LM head folded into an untied copy"
                                   : "; tied LM head in its blocks, the final gain applied to x";
    }
    variant += ")";
  } else if (o.standard == StandardNorm::kFusedAdd) {
    variant = " (residual add + RMSNorm fused)";
  }
  std::string weights = o.dtype == HalfType::kBF16 ? "bf16" : "fp16";
  if (e.w.any_quant) weights = "native GGML weights (" + e.w.quant_summary + "), " + weights;
  return fmt::format("{} weights, norm {}{}, decode {}{}{}", weights,
                     e.mode == NormMode::Standard ? "standard" : "flashnorm", variant,
                     o.launch.decode == DecodeLaunch::kGraph ? "CUDA graph" : "eager",
                     o.launch.pdl ? " + PDL" : "",
                     o.launch.fuse_decode_ops ? ", fused decode ops" : "");
}

std::vector<float> CudaEngine::forward(std::span<const int32_t> tokens, bool all_logits) {
  Impl& e = *p_;
  if (tokens.empty()) throw Error("forward: no tokens");
  e.check_ids(tokens);
  e.check_capacity(tokens.size());
  if (tokens.size() > 1) return e.prefill(tokens, all_logits);
  // One token: the decode step (graph replay), logits copied out.
  *e.ws.h_tokens.as<int32_t>() = tokens[0];
  FN_CUDA_CHECK(cudaMemcpyAsync(e.ws.d_tokens.get(), e.ws.h_tokens.as<int32_t>(), 4,
                                cudaMemcpyHostToDevice, e.s()));
  e.decode_step(0.0f, 0);
  FN_CUDA_CHECK(cudaMemcpyAsync(e.ws.h_logits.as<float>(), e.ws.logits.get(), size_t(e.d.V) * 4,
                                cudaMemcpyDeviceToHost, e.s()));
  FN_CUDA_CHECK(cudaStreamSynchronize(e.s()));
  return std::vector<float>(e.ws.h_logits.as<float>(), e.ws.h_logits.as<float>() + e.d.V);
}

std::vector<int32_t> CudaEngine::generate(std::span<const int32_t> prompt, int n, float temperature,
                                          uint64_t seed,
                                          const std::function<bool(int32_t)>& on_token) {
  Impl& e = *p_;
  Workspace& ws = e.ws;
  if (prompt.empty()) throw Error("generate: empty prompt");
  if (n < 1) return {};
  e.check_ids(prompt);
  e.check_capacity(prompt.size() + n - 1);
  e.prefill(prompt, false);
  // First token from the prompt's last logits (position pos - 1 advances to pos).
  e.set_pos_device(e.pos - 1);
  ok(fk::sample_tokens(e.d.V, ws.logits.as<float>(), temperature, seed, ws.d_pos.as<int32_t>(), 1,
                       ws.d_tokens.as<int32_t>(), ws.d_history.as<int32_t>(), e.d.max_ctx + 1,
                       ws.sample_ws.get(), e.s()));
  const int first = e.pos;  // position of the first generated token
  int produced = 1;
  auto read_token = [&]() {
    FN_CUDA_CHECK(cudaMemcpyAsync(ws.h_tokens.as<int32_t>(), ws.d_tokens.get(), 4,
                                  cudaMemcpyDeviceToHost, e.s()));
    FN_CUDA_CHECK(cudaStreamSynchronize(e.s()));
    return *ws.h_tokens.as<int32_t>();
  };
  bool go = on_token ? on_token(read_token()) : true;
  while (go && produced < n) {
    e.decode_step(temperature, seed);
    ++produced;
    if (on_token) go = on_token(read_token());
  }
  std::vector<int32_t> out(produced);
  FN_CUDA_CHECK(cudaMemcpyAsync(out.data(), ws.d_history.as<int32_t>() + first, produced * 4,
                                cudaMemcpyDeviceToHost, e.s()));
  FN_CUDA_CHECK(cudaStreamSynchronize(e.s()));
  return out;
}

double CudaEngine::time_decode_steps(int reps) {
  Impl& e = *p_;
  e.check_capacity(reps + 2);
  e.decode_step(0.0f, 0);  // warm-up (and graph capture)
  e.decode_step(0.0f, 0);
  FN_CUDA_CHECK(cudaStreamSynchronize(e.s()));
  fk::Event a, b;
  FN_CUDA_CHECK(cudaEventRecord(a.get(), e.s()));
  for (int i = 0; i < reps; ++i) e.decode_step(0.0f, 0);
  FN_CUDA_CHECK(cudaEventRecord(b.get(), e.s()));
  FN_CUDA_CHECK(cudaEventSynchronize(b.get()));
  float ms = 0;
  FN_CUDA_CHECK(cudaEventElapsedTime(&ms, a.get(), b.get()));
  return 1000.0 * ms / reps;
}

StepProfile CudaEngine::profile_decode_step(int reps) {
  Impl& e = *p_;
  e.check_capacity(reps + 1);
  e.decode_step(0.0f, 0);  // warm (eager when no step ran yet)
  std::vector<std::vector<double>> per(kClasses);
  for (int r = 0; r < reps; ++r) {
    if (e.pos_stale) e.set_pos_device(e.pos);
    FN_CUDA_CHECK(cudaStreamSynchronize(e.s()));
    e.prof.start();
    try {
      e.f.run(1, 1, true, 0.0f, 0, e.pos + 1);
    } catch (...) {
      e.prof.stop();
      throw;
    }
    e.prof.stop();
    ++e.pos;
    FN_CUDA_CHECK(cudaStreamSynchronize(e.s()));
    const std::vector<double> sum = e.prof.class_us();
    for (int c = 0; c < kClasses; ++c) per[c].push_back(sum[c]);
  }
  return median_profile(per);
}

bool CudaEngine::batches() const { return p_->d.slots > 1; }

int CudaEngine::open_sequence() {
  Impl& e = *p_;
  if (!batches()) Engine::open_sequence();  // refuses
  if (e.free_slots.empty()) {
    throw Error(fmt::format("open_sequence: all {} sequence slots are in use (max_sequences)",
                            e.d.slots - 2));
  }
  const int slot = e.free_slots.back();
  e.free_slots.pop_back();
  e.slot_pos[slot] = 0;
  e.seqs[e.next_seq] = slot;
  return e.next_seq++;
}

void CudaEngine::close_sequence(int seq) {
  Impl& e = *p_;
  const int slot = e.slot_of(seq);
  e.seqs.erase(seq);
  e.free_slots.push_back(slot);
}

int CudaEngine::sequence_position(int seq) const { return p_->slot_pos[p_->slot_of(seq)]; }

int CudaEngine::kv_blocks_in_use() const {
  int n = 0;
  for (const auto& [seq, slot] : p_->seqs) n += (p_->slot_pos[slot] + kKvBlock - 1) / kKvBlock;
  return n;
}

std::vector<float> CudaEngine::forward_batch(std::span<const SequenceChunk> chunks) {
  Impl& e = *p_;
  if (!batches()) return Engine::forward_batch(chunks);  // refuses
  if (chunks.empty()) throw Error("forward_batch: no chunks");
  std::vector<int> slots(chunks.size());
  for (size_t i = 0; i < chunks.size(); ++i) {
    const SequenceChunk& c = chunks[i];
    if (c.tokens.empty())
      throw Error(fmt::format("forward_batch: sequence {} has no tokens", c.seq));
    slots[i] = e.slot_of(c.seq);
    for (size_t j = 0; j < i; ++j) {
      if (chunks[j].seq == c.seq)
        throw Error(fmt::format("forward_batch: sequence {} is given twice", c.seq));
    }
    e.check_ids(c.tokens);
    if (size_t(e.slot_pos[slots[i]]) + c.tokens.size() > size_t(e.d.max_ctx)) {
      throw Error(fmt::format("sequence {}: {} + {} tokens exceed the KV cache of {}", c.seq,
                              e.slot_pos[slots[i]], c.tokens.size(), e.d.max_ctx));
    }
  }
  const size_t V = size_t(e.d.V);
  std::vector<float> out(chunks.size() * V);
  std::vector<size_t> singles;
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (chunks[i].tokens.size() == 1) {
      singles.push_back(i);
      continue;
    }
    const std::vector<float> l =
        e.prompt_passes(slots[i], e.slot_pos[slots[i]], chunks[i].tokens, false);
    std::copy(l.begin(), l.end(), out.begin() + i * V);
  }
  constexpr size_t kMaxB = fk::kDecodeAttentionMaxBatch;
  for (size_t g0 = 0; g0 < singles.size(); g0 += kMaxB) {
    const size_t B = std::min(kMaxB, singles.size() - g0);
    std::vector<int32_t> toks(B);
    std::vector<int> sl(B);
    int max_pos = 0;
    for (size_t b = 0; b < B; ++b) {
      const size_t i = singles[g0 + b];
      toks[b] = chunks[i].tokens[0], sl[b] = slots[i];
      max_pos = std::max(max_pos, e.slot_pos[sl[b]]);
    }
    const int Bb = e.stage_batch(toks, sl);
    e.batch_graphs.step(e.f, Bb, max_pos, false);
    FN_CUDA_CHECK(cudaMemcpyAsync(e.ws.h_logits.as<float>(), e.ws.logits.get(),
                                  B * size_t(e.d.ldv) * 4, cudaMemcpyDeviceToHost, e.s()));
    FN_CUDA_CHECK(cudaStreamSynchronize(e.s()));
    for (size_t b = 0; b < B; ++b) {
      const float* row = e.ws.h_logits.as<float>() + b * e.d.ldv;
      std::copy(row, row + V, out.begin() + singles[g0 + b] * V);
      ++e.slot_pos[sl[b]];
    }
  }
  return out;
}

double CudaEngine::time_batch_decode_steps(std::span<const int32_t> prompt, int batch, int reps) {
  Impl& e = *p_;
  const int cap = std::min(e.d.slots - 2, fk::kDecodeAttentionMaxBatch);
  if (!batches()) throw Error("time_batch_decode_steps: the engine was made without sequences");
  if (batch < 1 || batch > cap) {
    throw Error(fmt::format("time_batch_decode_steps: batch {} is outside 1 .. {}", batch, cap));
  }
  if (!e.seqs.empty()) throw Error("time_batch_decode_steps: sequences are open");
  if (prompt.empty() || reps < 1 || prompt.size() + reps + 2 > size_t(e.d.max_ctx)) {
    throw Error(
        fmt::format("time_batch_decode_steps: a prompt of {} and {} steps exceed the "
                    "KV cache of {}",
                    prompt.size(), reps + 2, e.d.max_ctx));
  }
  std::vector<int> ids(batch), sl(batch);
  std::vector<int32_t> first(batch);
  try {
    std::vector<SequenceChunk> chunks;
    for (int b = 0; b < batch; ++b) {
      ids[b] = open_sequence();
      chunks.push_back({ids[b], prompt});
    }
    const std::vector<float> l = forward_batch(chunks);
    const size_t V = size_t(e.d.V);
    for (int b = 0; b < batch; ++b) {
      sl[b] = e.slot_of(ids[b]);
      const float* row = l.data() + b * V;
      first[b] = int32_t(std::max_element(row, row + V) - row);
    }
    const int Bb = e.stage_batch(first, sl);
    int p = int(prompt.size());
    auto step = [&] { e.batch_graphs.step(e.f, Bb, p++, true); };
    step(), step();  // warm-up: eager, then capture
    FN_CUDA_CHECK(cudaStreamSynchronize(e.s()));
    fk::Event a, b;
    FN_CUDA_CHECK(cudaEventRecord(a.get(), e.s()));
    for (int i = 0; i < reps; ++i) step();
    FN_CUDA_CHECK(cudaEventRecord(b.get(), e.s()));
    FN_CUDA_CHECK(cudaEventSynchronize(b.get()));
    float ms = 0;
    FN_CUDA_CHECK(cudaEventElapsedTime(&ms, a.get(), b.get()));
    for (int id : ids) close_sequence(id);
    return 1000.0 * ms / reps;
  } catch (...) {
    for (int id : ids) {
      if (id > 0 && e.seqs.count(id)) close_sequence(id);
    }
    throw;
  }
}

}  // namespace flashnorm
