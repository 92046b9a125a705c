// The CUDA engine's decode-step graphs (internal.h), one sequence's and the batched ones: capture
// on first use after an eager warm-up step, replay afterwards, recapture when what the graph baked
// in changes.
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

void BatchGraphs::step(Forward& f, int B, int max_pos, bool sample) {
  const Pass pass{0, true};
  int k = 0;
  while ((1 << k) < B) ++k;
  Entry& e = entries_[sample ? 1 : 0][k];
  if (f.opt.launch.decode == DecodeLaunch::kEager || !e.warmed) {
    f.run(B, B, sample, 0.0f, 0, max_pos + 1, pass);
    e.warmed = true;
    return;
  }
  const int bound = std::min(f.d.max_ctx, (max_pos / kKeyBucket + 1) * kKeyBucket);
  if (e.graph.empty() || e.generation != f.ctx.workspace_generation() || e.key_bound != bound) {
    cudaGraph_t g = nullptr;
    FN_CUDA_CHECK(cudaStreamBeginCapture(f.s, cudaStreamCaptureModeThreadLocal));
    try {
      f.run(B, B, sample, 0.0f, 0, bound, pass);
    } catch (...) {
      cudaStreamEndCapture(f.s, &g);
      if (g) cudaGraphDestroy(g);
      throw;
    }
    FN_CUDA_CHECK(cudaStreamEndCapture(f.s, &g));
    e.graph.set(g);
    e.key_bound = bound, e.generation = f.ctx.workspace_generation();
  }
  e.graph.launch(f.s);
}

}  // namespace flashnorm::cuda_engine
