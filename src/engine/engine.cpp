// The Engine interface's optional parts (engine/engine.h): backends without them refuse.
#include "flashnorm/engine/engine.h"

#include <fmt/format.h>

#include "flashnorm/engine/sampler.h"
#include "flashnorm/error.h"

namespace flashnorm {

NormMode parse_norm_mode(std::string_view s) {
  if (s == "standard") return NormMode::Standard;
  if (s == "flashnorm") return NormMode::FlashNorm;
  throw Error(fmt::format("--norm must be standard or flashnorm, not '{}'", s));
}

std::vector<int32_t> Engine::generate(std::span<const int32_t>, int, float, uint64_t,
                                      const std::function<bool(int32_t)>&) {
  throw Error(fmt::format("the {} engine does not sample on the device", device()));
}

double Engine::time_decode_steps(int) {
  throw Error(fmt::format("the {} engine has no timed decode step", device()));
}

std::vector<float> Engine::encode(std::span<const std::span<const int32_t>>, const EncodeOptions&) {
  throw Error(fmt::format("the {} engine does not compute embeddings", device()));
}

StepProfile Engine::profile_decode_step(int) {
  throw Error(fmt::format("the {} engine has no decode step profile", device()));
}

namespace {
[[noreturn]] void no_batching(const char* device) {
  throw Error(
      fmt::format("this {} engine was made without batched sequences (the CUDA engine: "
                  "CudaCapacity::max_sequences, EngineOptions::max_sequences)",
                  device));
}
}  // namespace

int Engine::open_sequence() { no_batching(device()); }
void Engine::close_sequence(int) { no_batching(device()); }
int Engine::sequence_position(int) const { no_batching(device()); }
std::vector<float> Engine::forward_batch(std::span<const SequenceChunk>) { no_batching(device()); }
void Engine::rewind_sequence(int, int) {
  throw Error(fmt::format("the {} engine does not rewind sequences", device()));
}
int Engine::sequence_kv_blocks(int seq) const {
  sequence_position(seq);  // Error for an id that is not open
  return 0;
}
void Engine::forward_batch_into(std::span<const SequenceChunk> chunks, std::vector<float>& logits) {
  logits = forward_batch(chunks);
}
void Engine::forward_batch_top1(std::span<const SequenceChunk> chunks,
                                std::span<const uint8_t> greedy, std::vector<float>& logits,
                                std::vector<int32_t>& top1) {
  if (greedy.size() != chunks.size()) throw Error("forward_batch_top1: one greedy flag per chunk");
  forward_batch_into(chunks, logits);
  const size_t V = size_t(config().vocab);
  top1.assign(chunks.size(), 0);
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (greedy[i]) top1[i] = argmax(std::span<const float>(logits).subspan(i * V, V));
  }
}

}  // namespace flashnorm
