// CudaEngine's batched sequences (engine/cuda_engine.h): open / close, forward_batch (prompt
// chunks as passes on their slots, one-token chunks as batched decode passes) and the batched
// decode timing.
#include <fmt/format.h>

#include <algorithm>

#include "engine_impl.h"
#include "flashnorm/engine/sampler.h"

namespace flashnorm {
using namespace cuda_engine;

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
  std::vector<float> out;
  forward_batch_into(chunks, out);
  return out;
}

void CudaEngine::forward_batch_into(std::span<const SequenceChunk> chunks,
                                    std::vector<float>& out) {
  std::vector<int32_t> unused;
  const std::vector<uint8_t> none(chunks.size(), 0);
  forward_batch_top1(chunks, none, out, unused);
}

void CudaEngine::forward_batch_top1(std::span<const SequenceChunk> chunks,
                                    std::span<const uint8_t> greedy, std::vector<float>& out,
                                    std::vector<int32_t>& top1) {
  Impl& e = *p_;
  if (greedy.size() != chunks.size()) throw Error("forward_batch_top1: one greedy flag per chunk");
  auto is_greedy = [&](size_t i) { return greedy[i] != 0; };
  if (!batches()) Engine::forward_batch(chunks);  // refuses
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
  out.resize(chunks.size() * V);
  top1.assign(chunks.size(), 0);
  std::vector<size_t> singles;
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (chunks[i].tokens.size() == 1) {
      singles.push_back(i);
      continue;
    }
    const std::vector<float> l =
        e.prompt_passes(slots[i], e.slot_pos[slots[i]], chunks[i].tokens, false);
    std::copy(l.begin(), l.end(), out.begin() + i * V);
    if (is_greedy(i)) top1[i] = argmax(l);
  }
  constexpr size_t kMaxB = fk::kDecodeAttentionMaxBatch;
  for (size_t g0 = 0; g0 < singles.size(); g0 += kMaxB) {
    const size_t B = std::min(kMaxB, singles.size() - g0);
    std::vector<int32_t> toks(B);
    std::vector<int> sl(B);
    int max_pos = 0;
    bool any_greedy = false, all_greedy = true;
    for (size_t b = 0; b < B; ++b) {
      const size_t i = singles[g0 + b];
      toks[b] = chunks[i].tokens[0], sl[b] = slots[i];
      max_pos = std::max(max_pos, e.slot_pos[sl[b]]);
      any_greedy |= is_greedy(i), all_greedy &= is_greedy(i);
    }
    const int Bb = e.stage_batch(toks, sl);
    e.batch_graphs.step(e.f, Bb, max_pos, false);
    int32_t* h_top1 = e.ws.h_tokens.as<int32_t>();  // free once staged
    if (any_greedy) {  // top-1 on the device, into d_tokens (restaged by the next pass)
      ok(fk::argmax_rows(int(B), e.d.V, e.ws.logits.as<float>(), e.d.ldv,
                         e.ws.d_tokens.as<int32_t>(), nullptr, e.s()));
      FN_CUDA_CHECK(
          cudaMemcpyAsync(h_top1, e.ws.d_tokens.get(), B * 4, cudaMemcpyDeviceToHost, e.s()));
    }
    if (!all_greedy) {
      FN_CUDA_CHECK(cudaMemcpyAsync(e.ws.h_logits.as<float>(), e.ws.logits.get(),
                                    B * size_t(e.d.ldv) * 4, cudaMemcpyDeviceToHost, e.s()));
    }
    FN_CUDA_CHECK(cudaStreamSynchronize(e.s()));
    for (size_t b = 0; b < B; ++b) {
      const size_t i = singles[g0 + b];
      if (is_greedy(i)) top1[i] = h_top1[b];
      if (!all_greedy) {
        const float* row = e.ws.h_logits.as<float>() + b * e.d.ldv;
        std::copy(row, row + V, out.begin() + i * V);
      }
      ++e.slot_pos[sl[b]];
    }
  }
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
      first[b] = argmax(std::span<const float>(row, V));  // sampler.h
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
