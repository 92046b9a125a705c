// `flashnorm generate -m MODEL -p PROMPT`: streams generated text, then prompt and decode tokens/s.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>

#include "commands.h"
#include "flashnorm/engine/sampler.h"
#include "flashnorm/io/error.h"
#include "flashnorm/model/model.h"
#include "flashnorm/tokenizer/chat.h"
#include "model_args.h"

namespace flashnorm::cli {

void register_generate(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "Generate text with the CPU engine");
  struct Args {
    std::string model, prompt, norm = "flashnorm", tokenizer, system;
    int n = 128, ctx = 0;
    SamplerOptions s;
    bool chat = false, no_cancel = false;
  };
  auto a = std::make_shared<Args>();
  a->s.temperature = 0.0f;
  cmd->add_option("-m,--model", a->model, "GGUF file or Hugging Face directory")
      ->required()
      ->check(CLI::ExistingPath);
  cmd->add_option("-p,--prompt", a->prompt, "prompt text")->required();
  cmd->add_option("-n,--n-predict", a->n, "tokens to generate")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--norm", a->norm, "normalization mode: standard or flashnorm")
      ->check(CLI::IsMember({"standard", "flashnorm"}));
  cmd->add_option("--seed", a->s.seed, "sampling seed");
  cmd->add_option("--temperature", a->s.temperature, "0 = greedy decoding")
      ->check(CLI::Range(0.0f, 100.0f));
  cmd->add_option("--top-k", a->s.top_k, "keep the k most likely tokens (0 = all)");
  cmd->add_option("--top-p", a->s.top_p, "nucleus sampling threshold in (0, 1]");
  cmd->add_flag("--chat", a->chat, "wrap the prompt in the model's chat template");
  cmd->add_option("--system", a->system, "system message for --chat");
  cmd->add_flag("--no-cancel", a->no_cancel,
                "flashnorm mode: keep the rstd that QK-norm cancels (see `inspect`)");
  cmd->add_option("--ctx", a->ctx, "KV cache length (default: model context, at most 8192)");
  cmd->add_option("--tokenizer", a->tokenizer, "GGUF file with the vocabulary (HF directories)");
  cmd->callback([a] {
    using clk = std::chrono::steady_clock;
    io::GgufFile vocab = open_vocab(a->model, a->tokenizer);
    Tokenizer tok = Tokenizer::from_gguf(vocab);
    std::string text = a->prompt;
    if (a->chat) {
      text = apply_chat_template(
          vocab, a->prompt,
          a->system.empty() ? std::nullopt : std::optional<std::string_view>(a->system));
    }
    std::vector<int32_t> ids = tok.encode(text, /*parse_special=*/a->chat);
    if (tok.add_bos() && tok.bos()) ids.insert(ids.begin(), *tok.bos());
    if (ids.empty()) throw Error("the prompt encodes to no tokens");
    Sampler sampler(a->s);
    CpuEngine eng(load_model(a->model), parse_norm_mode(a->norm), a->ctx, !a->no_cancel);
    std::fprintf(stderr, "device: cpu | norm: %s | prompt: %zu tokens\n", a->norm.c_str(),
                 ids.size());
    if (ids.size() + size_t(a->n) > size_t(eng.max_context())) {
      throw Error(fmt::format("prompt ({} tokens) + -n {} exceeds the context of {}", ids.size(),
                              a->n, eng.max_context()));
    }
    if (!a->chat) std::fputs(a->prompt.c_str(), stdout);
    auto t0 = clk::now();
    std::vector<float> logits = eng.forward(ids);
    auto t1 = clk::now();
    std::string pending;
    int produced = 0;
    for (; produced < a->n; ++produced) {
      int32_t next = sampler.sample(logits);
      if (tok.is_eog(next)) break;
      pending += tok.piece(next);
      size_t k = complete_utf8_prefix(pending);
      std::fwrite(pending.data(), 1, k, stdout);
      std::fflush(stdout);
      pending.erase(0, k);
      if (produced + 1 < a->n) logits = eng.forward(std::span<const int32_t>(&next, 1));
    }
    std::fwrite(pending.data(), 1, pending.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
    auto t2 = clk::now();
    const double tp = std::chrono::duration<double>(t1 - t0).count();
    const double td = std::chrono::duration<double>(t2 - t1).count();
    std::fprintf(stderr, "prompt: %zu tokens, %.1f tokens/s | decode: %d tokens, %.1f tokens/s\n",
                 ids.size(), ids.size() / tp, produced, produced > 0 ? produced / td : 0.0);
  });
}

}  // namespace flashnorm::cli
