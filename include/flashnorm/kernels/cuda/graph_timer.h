// One CUDA-graph timing harness for the tuners (LinearContext), the kernel benchmark and the CUDA
// engine's step profiler: each variant's steps are captured into one graph, and the graphs are
// replayed interleaved, timed with CUDA events.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <vector>

#include "flashnorm/kernels/cuda/status.h"
#include "flashnorm/median.h"

namespace flashnorm::kernels::cuda {

// Issues step `step` (0 .. steps - 1) of variant `variant` on `stream` (e.g. one kernel call on the
// step-th of a set of rotating buffers). It may be called eagerly (warm-up) or during capture.
using GraphStep = std::function<Status(int variant, int step, cudaStream_t stream)>;

struct GraphTimerOptions {
  int warmup_steps = 1;  // eager calls of steps 0 .. warmup_steps - 1 of every variant, first
  int warm_replays = 1;  // untimed replays of every graph after all are captured
  int rounds = 5;        // timed sweeps (>= 1)
};

// Graph times of `variants` variants of `steps` steps each: every variant is warmed up (so that no
// workspace grows during a capture), then all graphs are captured, then each of `rounds` sweeps
// replays every graph once, starting at the next variant each sweep (each variant keeps the same
// predecessor), so that the variants share the card's clock and temperature history (long
// compute-bound GEMMs lower the clocks within tens of milliseconds) instead of each meeting it at a
// different point. *ms_per_graph[i]: variant i's time of one replay of its graph (all steps) in
// milliseconds, one entry per round. Synchronizes the stream; must not be called during capture.
// Errors: the first failing step or CUDA call (kCudaError); every graph and event is released.
Status time_graphs_interleaved(int variants, int steps, const GraphStep& step, cudaStream_t stream,
                               const GraphTimerOptions& options,
                               std::vector<std::vector<float>>* ms_per_graph);

// Medians of these times: flashnorm::median (flashnorm/median.h).
using flashnorm::median;

}  // namespace flashnorm::kernels::cuda
