// Test tool: the CPU engine's fp32 logits for a token sequence and its greedy continuation, as
// JSON on stdout, so that tests/engine/hf_transformers_test.py can compare the engine with
// `transformers` on the same checkpoint.
//   engine_logits MODEL standard|flashnorm TOKENS N_GREEDY
// MODEL: GGUF file or HF directory; TOKENS: comma-separated ids. Output:
//   {"logits": [[vocab floats] per token], "greedy": [N_GREEDY ids]}
// Exit 1 with one line on stderr for any error (the test asserts refusals through it too).
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "flashnorm/engine/cpu_engine.h"
#include "flashnorm/error.h"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: engine_logits MODEL standard|flashnorm TOKENS N_GREEDY\n");
    return 2;
  }
  try {
    const std::string mode_name = argv[2];
    if (mode_name != "standard" && mode_name != "flashnorm")
      throw flashnorm::Error("mode must be standard or flashnorm");
    const auto mode =
        mode_name == "standard" ? flashnorm::NormMode::Standard : flashnorm::NormMode::FlashNorm;
    std::vector<int32_t> tokens;
    std::stringstream ss(argv[3]);
    for (std::string t; std::getline(ss, t, ',');) tokens.push_back(std::stoi(t));
    const int n_greedy = std::stoi(argv[4]);
    flashnorm::CpuEngine engine(flashnorm::load_model(argv[1]), mode);
    const int vocab = engine.config().vocab;
    const std::vector<float> logits = engine.forward(tokens, /*all_logits=*/true);
    nlohmann::json out;
    out["logits"] = nlohmann::json::array();
    for (size_t i = 0; i < tokens.size(); ++i) {
      out["logits"].push_back(
          std::vector<float>(logits.begin() + i * vocab, logits.begin() + (i + 1) * vocab));
    }
    std::vector<float> last(logits.end() - vocab, logits.end());
    std::vector<int32_t> greedy;
    for (int s = 0; s < n_greedy; ++s) {
      int32_t best = 0;
      for (int v = 1; v < vocab; ++v) {
        if (last[size_t(v)] > last[size_t(best)]) best = v;
      }
      greedy.push_back(best);
      if (s + 1 < n_greedy) last = engine.forward(std::span<const int32_t>(&best, 1));
    }
    out["greedy"] = greedy;
    std::cout << out.dump() << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
