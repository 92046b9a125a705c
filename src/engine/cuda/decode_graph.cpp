// The CUDA engine's decode-step graph (internal.h): capture on first use after an eager warm-up
// step, replay afterwards, recapture when what the graph baked in changes.
#include <algorithm>

#include "internal.h"

namespace flashnorm::cuda_engine {

void DecodeGraph::step(Forward& f, int pos, float temperature, uint64_t seed) {
  if (f.opt.launch.decode == DecodeLaunch::kEager || !warmed_) {
    f.run(1, 1, true, temperature, seed, pos + 1);
    warmed_ = true;
    return;
  }
  const int bound = std::min(f.d.max_ctx, (pos / kKeyBucket + 1) * kKeyBucket);
  if (graph_.empty() || temp_ != temperature || seed_ != seed ||
      generation_ != f.ctx.workspace_generation() || key_bound_ != bound) {
    cudaGraph_t g = nullptr;
    FN_CUDA_CHECK(cudaStreamBeginCapture(f.s, cudaStreamCaptureModeThreadLocal));
    try {
      f.run(1, 1, true, temperature, seed, bound);
    } catch (...) {
      cudaStreamEndCapture(f.s, &g);
      if (g) cudaGraphDestroy(g);
      throw;
    }
    FN_CUDA_CHECK(cudaStreamEndCapture(f.s, &g));
    graph_.set(g);
    temp_ = temperature, seed_ = seed, key_bound_ = bound;
    generation_ = f.ctx.workspace_generation();
  }
  graph_.launch(f.s);
}

}  // namespace flashnorm::cuda_engine
