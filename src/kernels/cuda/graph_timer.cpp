// The CUDA-graph timing harness (include/flashnorm/kernels/cuda/graph_timer.h).
#include "flashnorm/kernels/cuda/graph_timer.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "check.h"

namespace flashnorm::kernels::cuda {

using detail::cuda_status;

namespace {
// Captures steps 0 .. steps - 1 of `variant` into *exec.
Status capture(int variant, int steps, const GraphStep& step, cudaStream_t s,
               cudaGraphExec_t* exec) {
  Status st = cuda_status(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal),
                          "cudaStreamBeginCapture");
  if (!st.ok()) return st;
  for (int r = 0; r < steps && st.ok(); ++r) st = step(variant, r, s);
  cudaGraph_t g = nullptr;
  const Status end = cuda_status(cudaStreamEndCapture(s, &g), "cudaStreamEndCapture");
  if (st.ok()) st = end;
  if (st.ok()) st = cuda_status(cudaGraphInstantiate(exec, g, 0), "cudaGraphInstantiate");
  if (g) cudaGraphDestroy(g);
  return st;
}
}  // namespace

Status time_graphs_interleaved(int variants, int steps, const GraphStep& step, cudaStream_t stream,
                               const GraphTimerOptions& options,
                               std::vector<std::vector<float>>* ms_per_graph) {
  ms_per_graph->assign(variants, {});
  std::vector<cudaGraphExec_t> graphs(variants, nullptr);
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  Status st = cuda_status(cudaEventCreate(&e0), "cudaEventCreate");
  if (st.ok()) st = cuda_status(cudaEventCreate(&e1), "cudaEventCreate");
  for (int i = 0; i < variants && st.ok(); ++i)  // warm-up: plans, workspaces
    for (int r = 0; r < std::min(options.warmup_steps, steps) && st.ok(); ++r)
      st = step(i, r, stream);
  if (st.ok()) st = cuda_status(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  for (int i = 0; i < variants && st.ok(); ++i) st = capture(i, steps, step, stream, &graphs[i]);
  for (int i = 0; i < variants && st.ok(); ++i)
    for (int r = 0; r < options.warm_replays && st.ok(); ++r)
      st = cuda_status(cudaGraphLaunch(graphs[i], stream), "cudaGraphLaunch");
  for (int r = 0; r < options.rounds && st.ok(); ++r)
    for (int j = 0; j < variants && st.ok(); ++j) {
      const int i = (j + r) % variants;
      float t = 0;
      st = cuda_status(cudaEventRecord(e0, stream), "cudaEventRecord");
      if (st.ok()) st = cuda_status(cudaGraphLaunch(graphs[i], stream), "cudaGraphLaunch");
      if (st.ok()) st = cuda_status(cudaEventRecord(e1, stream), "cudaEventRecord");
      if (st.ok()) st = cuda_status(cudaEventSynchronize(e1), "cudaEventSynchronize");
      if (st.ok()) st = cuda_status(cudaEventElapsedTime(&t, e0, e1), "cudaEventElapsedTime");
      if (st.ok()) (*ms_per_graph)[i].push_back(t);
    }
  for (cudaGraphExec_t ge : graphs)
    if (ge) cudaGraphExecDestroy(ge);
  if (e0) cudaEventDestroy(e0);
  if (e1) cudaEventDestroy(e1);
  return st;
}

}  // namespace flashnorm::kernels::cuda
