// `flashnorm bench --model FILE`: the CUDA engine's end-to-end decode benchmark (model_bench.cpp).
#pragma once

#include <string>
#include <vector>

namespace flashnorm::cli {

struct ModelBenchArgs {
  std::string model, out, commit, driver;
  // prompt lengths, each timed as one prompt pass; decode follows a prompt of the first
  std::vector<int> prompt_tokens = {512};
  int decode_tokens = 256, runs = 5;
  int ctx = 0;  // KV cache positions; 0: what the prompts and the decode steps need (+ 64)
  bool dirty = false;
  // "native": also the three main configurations on the file's own blocks (WeightStorage::kNative)
  // beside the bf16 ones, interleaved in the same rounds
  std::string weights = "f32";
  // only standard, flashnorm, flashnorm two-stream, standard fused add+norm and flashnorm with
  // deferred prompts: no ablations (large models)
  bool quick = false;
  // batched decode (CudaEngine::time_batch_decode_steps): standard, flashnorm, standard fused
  // add+norm and flashnorm with its batched passes deferred (CudaFlashNorm::batched_in_add off; an
  // extra configuration) at each of these batch sizes (1 .. 64), each sequence after a prompt of
  // the first length, and flashnorm's batch invariance (greedy top-1 of one sequence alone vs in
  // the batch)
  std::vector<int> batches;
  // only the configurations of these names (empty: all that the other options select); a native
  // configuration goes with its bf16 one. Errors: a name that is not one of the run's.
  std::vector<std::string> configs;
};
// Part of the CUDA module (libflashnorm_cuda.so, engine/cuda_module.h): callers in the executable
// reach it through cuda_module().run_model_bench.
// Errors: flashnorm::Error (no GPU, bad model, CUDA failures).
void run_model_bench(const ModelBenchArgs& a);

}  // namespace flashnorm::cli
