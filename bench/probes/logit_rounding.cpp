// How much rounding logits to bf16 / fp16 alone changes the top-1 token: the CPU fp32 engine's
// teacher-forced logits over the first 1026 tokens of a text (two chunks of 513, standard mode),
// each row rounded to bf16 and to fp16 (round to nearest even), argmax compared with the fp32 row.
// Why the CUDA engine writes fp32 logits (docs/results_h200.md).
// Usage: build/release/bench/probes/logit_rounding MODEL.gguf [TEXT]   (TEXT: GPL-3 by default)
#include <cstdio>
#include <fstream>
#include <sstream>

#include "flashnorm/engine/cpu_engine.h"
#include "flashnorm/engine/sampler.h"
#include "flashnorm/error.h"
#include "flashnorm/io/dequant.h"
#include "flashnorm/io/gguf.h"
#include "flashnorm/tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  using namespace flashnorm;
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.gguf [TEXT]\n", argv[0]);
    return 2;
  }
  try {
    io::GgufFile vocab = io::GgufFile::open(argv[1]);
    Tokenizer tok = Tokenizer::from_gguf(vocab);
    std::ifstream f(argc > 2 ? argv[2] : "/usr/share/common-licenses/GPL-3");
    std::stringstream ss;
    ss << f.rdbuf();
    std::vector<int32_t> ids = tok.encode(ss.str(), false);
    if (ids.size() < 1026) throw Error("the text has fewer than 1026 tokens");
    CpuEngine e(load_model(argv[1]), NormMode::Standard, {.max_context = 513});
    const size_t V = e.config().vocab;
    size_t agree_bf16 = 0, agree_fp16 = 0, n = 0;
    std::vector<float> b(V), h(V);
    for (int c = 0; c < 2; ++c) {
      e.reset();
      const std::vector<float> l =
          e.forward(std::span<const int32_t>(ids.data() + c * 513, 513), true);
      for (size_t t = 0; t + 1 < 513; ++t, ++n) {
        std::span<const float> r(&l[t * V], V);
        for (size_t j = 0; j < V; ++j) {
          b[j] = io::bf16_to_fp32(io::fp32_to_bf16(r[j]));
          h[j] = io::fp16_to_fp32(io::fp32_to_fp16(r[j]));
        }
        agree_bf16 += argmax(r) == argmax(b);
        agree_fp16 += argmax(r) == argmax(h);
      }
    }
    std::printf("top-1 unchanged after rounding the fp32 logits: bf16 %.4f, fp16 %.4f (%zu rows)\n",
                double(agree_bf16) / n, double(agree_fp16) / n, n);
    return 0;
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "error: %s\n", ex.what());
    return 1;
  }
}
