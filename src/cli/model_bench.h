// `flashnorm bench --model FILE`: the CUDA engine's end-to-end decode benchmark (model_bench.cpp).
#pragma once

#include <string>

namespace flashnorm::cli {

struct ModelBenchArgs {
  std::string model, out, commit, driver;
  int prompt_tokens = 512, decode_tokens = 256, runs = 5;
  bool dirty = false;
};
// Errors: flashnorm::Error (no GPU, built without CUDA, bad model, CUDA failures).
void run_model_bench(const ModelBenchArgs& a);

}  // namespace flashnorm::cli
