// The Engine interface's optional parts (engine/engine.h): backends without them refuse.
#include "flashnorm/engine/engine.h"

#include <fmt/format.h>

#include "flashnorm/error.h"

namespace flashnorm {

std::vector<int32_t> Engine::generate(std::span<const int32_t>, int, float, uint64_t,
                                      const std::function<bool(int32_t)>&) {
  throw Error(fmt::format("the {} engine does not sample on the device", device()));
}

double Engine::time_decode_steps(int) {
  throw Error(fmt::format("the {} engine has no timed decode step", device()));
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

}  // namespace flashnorm
