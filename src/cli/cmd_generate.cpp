// `flashnorm generate -m MODEL -p PROMPT`: streams generated text, then prompt and decode tokens/s.
// On the CUDA engine, greedy decoding and plain temperature sampling run entirely on the GPU (a
// graph replay per token, the next id sampled on the device); top-k / top-p sample on the host.
#include <fmt/format.h>

#include <charconv>
#include <chrono>
#include <cstdio>
#include <limits>

#include "commands.h"
#include "flashnorm/engine/sampler.h"
#include "flashnorm/error.h"
#include "flashnorm/model/check.h"
#include "flashnorm/model/model.h"
#include "flashnorm/tokenizer/model_tokenizer.h"
#include "flashnorm/tokenizer/utf8_text.h"
#include "model_args.h"

namespace flashnorm::cli {

void register_generate(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "Generate text (CPU or CUDA engine)");
  struct Args {
    std::string model, prompt, file, messages, norm = "flashnorm", tokenizer, system, chat_format;
    int n = 128, ctx = 0;
    SamplerOptions s;
    bool chat = false, no_cancel = false;
    DeviceArgs dev;
  };
  auto a = std::make_shared<Args>();
  a->s.temperature = 0.0f;
  cmd->add_option("-m,--model", a->model, "GGUF file or Hugging Face directory")
      ->required()
      ->check(CLI::ExistingPath);
  auto* prompt = cmd->add_option("-p,--prompt", a->prompt, "prompt text (or -f FILE)");
  auto* file =
      cmd->add_option("-f,--file", a->file, "read the prompt from FILE (- : standard input)")
          ->excludes(prompt);
  cmd->add_option("-n,--n-predict", a->n, "tokens to generate")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--norm", a->norm, "normalization mode: standard or flashnorm")
      ->check(CLI::IsMember({"standard", "flashnorm"}));
  // Checked on the text: CLI11 would wrap -1 and clamp values past 2^64 - 1.
  cmd->add_option("--seed", a->s.seed, "sampling seed (0 to 2^64 - 1)")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            uint64_t x = 0;
            const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
            if (ec != std::errc() || end != v.data() + v.size() || v.empty()) {
              return v + " is not an integer from 0 to 18446744073709551615";
            }
            return "";
          },
          "UINT64"));
  cmd->add_option("--temperature", a->s.temperature, "0 = greedy decoding")
      ->check(CLI::Range(0.0f, 100.0f));
  cmd->add_option("--top-k", a->s.top_k, "keep the k most likely tokens (0 = all)")
      ->check(CLI::Range(0, std::numeric_limits<int>::max()));
  cmd->add_option("--top-p", a->s.top_p, "nucleus sampling threshold in (0, 1]");
  auto* chat = cmd->add_flag("--chat", a->chat, "wrap the prompt in the model's chat template");
  auto* system = cmd->add_option("--system", a->system, "system message for --chat")->needs(chat);
  auto* messages =
      cmd->add_option("--messages", a->messages,
                      "a conversation as an OpenAI-style JSON array of {\"role\", \"content\"} "
                      "(system, then user and assistant alternating, ending with user) in FILE "
                      "(- : standard input), formatted by the model's chat template")
          ->excludes(prompt)
          ->excludes(file)
          ->excludes(chat);
  auto* chat_format =
      cmd->add_option("--chat-format", a->chat_format,
                      "chat template family for --chat or --messages: chatml, gemma or llama3 "
                      "(default: recognised from the model's template, which is never executed)")
          ->check(CLI::IsMember({"chatml", "gemma", "llama3"}));
  cmd->add_flag(
      "--no-cancel", a->no_cancel,
      "flashnorm mode: keep the rstd that QK-norm cancels (see `inspect`; the CUDA "
      "engine's prompt passes of more than 64 tokens keep it anyway, see --prefill-norm)");
  cmd->add_option("--ctx", a->ctx, "KV cache length (0: the model's context, capped at 8192)")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--tokenizer", a->tokenizer,
                  "GGUF file or directory with tokenizer.json (default: the model's own)")
      ->check(CLI::ExistingPath);
  add_device_options(cmd, a->dev);
  cmd->callback([a, prompt, file, system, messages, chat_format] {
    using clk = std::chrono::steady_clock;
    const bool conversation = messages->count() > 0;
    if (prompt->count() == 0 && file->count() == 0 && !conversation) {
      throw Error(
          "give the prompt with -p TEXT or -f FILE (- : standard input), or a conversation with "
          "--messages FILE");
    }
    if (chat_format->count() && !a->chat && !conversation) {
      throw Error("--chat-format applies to --chat or --messages");
    }
    if (a->no_cancel && a->norm != "flashnorm") {
      throw Error("--no-cancel applies to --norm flashnorm only (standard mode cancels nothing)");
    }
    std::vector<ChatMessage> turns;
    if (conversation) turns = read_chat_messages(a->messages);
    const std::string text_in = conversation    ? std::string()
                                : file->count() ? read_prompt_file(a->file)
                                                : a->prompt;
    require_utf8(text_in, file->count() ? "--file " + a->file : "the prompt");
    require_utf8(a->system, "--system");
    Model model = load_model_for(a->model, a->dev);
    const bool model_native = model.file != nullptr;  // native tensors keep the mapped file
    const ModelTokenizer vocab = load_model_tokenizer(a->model, a->tokenizer, model.cfg.vocab);
    const Tokenizer& tok = vocab.tok;
    require_lm_head(model);  // (make_engine checks it too) before the tokenizer's own refusal
    refuse_appended_token(tok, "generate");
    std::string text = text_in;
    if (conversation) {
      text = model_chat_prompt(vocab, a->chat_format, turns);
    } else if (a->chat) {
      // --system '' is an empty system message (templates still write its turn), not none
      text = model_chat_prompt(
          vocab, a->chat_format, text_in,
          system->count() ? std::optional<std::string_view>(a->system) : std::nullopt);
    }
    const bool chat_prompt = a->chat || conversation;
    std::vector<int32_t> ids = tok.encode(text, /*parse_special=*/chat_prompt);
    if (tok.add_bos() && tok.bos()) ids.insert(ids.begin(), *tok.bos());
    if (ids.empty()) throw Error("the prompt encodes to no tokens");
    Sampler sampler(a->s);
    std::unique_ptr<Engine> eng =
        make_engine(std::move(model), parse_norm_mode(a->norm), a->dev, a->ctx, !a->no_cancel);
    if (ids.size() + size_t(a->n) > size_t(eng->max_context())) {
      throw Error(fmt::format("prompt ({} token{}) + -n {} exceeds the context of {}", ids.size(),
                              ids.size() == 1 ? "" : "s", a->n, eng->max_context()));
    }
    // which weights ran: a quantized GGUF takes its native blocks by default (--weights auto)
    const char* path_note = a->dev.weights == "auto" && model_native
                                ? " (--weights auto; --weights f32: the exact fp32 path)"
                                : "";
    std::fprintf(stderr, "device: %s%s | prompt: %zu tokens\n", describe_engine(*eng).c_str(),
                 path_note, ids.size());
    if (!chat_prompt) std::fwrite(text_in.data(), 1, text_in.size(), stdout);
    std::string pending;
    int produced = 0;
    // Streams one token; false at an end-of-generation token.
    auto emit = [&](int32_t next) {
      if (tok.is_eog(next)) return false;
      ++produced;
      pending += tok.piece(next);
      size_t k = complete_utf8_prefix(pending);
      std::fwrite(pending.data(), 1, k, stdout);
      std::fflush(stdout);
      pending.erase(0, k);
      return true;
    };
    auto t0 = clk::now(), t1 = t0;
    // Sampling on the device when the engine has it and the sampler needs nothing it lacks.
    const bool on_gpu = eng->samples_on_device() &&
                        (a->s.temperature == 0.0f || (a->s.top_k <= 0 && a->s.top_p >= 1.0f));
    if (on_gpu) {
      bool first = true;
      eng->generate(ids, a->n, a->s.temperature, a->s.seed, [&](int32_t t) {
        if (first) t1 = clk::now(), first = false;  // prompt done when the first token exists
        return emit(t);
      });
    }
    if (!on_gpu) {
      std::vector<float> logits = eng->forward(ids);
      t1 = clk::now();
      for (int i = 0; i < a->n; ++i) {
        int32_t next = sampler.sample(logits);
        if (!emit(next)) break;
        if (i + 1 < a->n) logits = eng->forward(std::span<const int32_t>(&next, 1));
      }
    }
    std::fwrite(pending.data(), 1, pending.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
    auto t2 = clk::now();
    const double tp = std::chrono::duration<double>(t1 - t0).count();
    const double td = std::chrono::duration<double>(t2 - t1).count();
    // On the GPU the first token is sampled with the prompt pass, so decode counts the rest.
    const int decoded = on_gpu ? std::max(produced - 1, 0) : produced;
    std::fprintf(stderr, "prompt: %zu tokens, %.1f tokens/s | decode: %d tokens, %.1f tokens/s\n",
                 ids.size(), ids.size() / tp, decoded, decoded > 0 ? decoded / td : 0.0);
  });
}

}  // namespace flashnorm::cli
