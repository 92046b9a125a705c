// `flashnorm embed -m MODEL [-i FILE] [-o FILE]`: one embedding per input line, as JSON lines
// {"index": i, "embedding": [...], "tokens": n}, from a Hugging Face directory with
// sentence-transformers' modules or a GGUF file with <arch>.pooling_type (model/embedding.h,
// engine/embedder.h).
#include <fmt/format.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "flashnorm/engine/embedder.h"
#include "flashnorm/error.h"
#include "flashnorm/io/atomic_file.h"
#include "flashnorm/io/json_strict.h"
#include "flashnorm/tokenizer/model_tokenizer.h"
#include "flashnorm/tokenizer/utf8_text.h"
#include "model_args.h"

namespace flashnorm::cli {
namespace {

// The inputs of `text`: one per line (a final newline ends the last line, "\r\n" is a newline);
// with jsonl, each line a JSON string (text) or an array of token ids. Errors: Error naming the
// line.
std::vector<EmbedInput> parse_inputs(const std::string& text, bool jsonl, const std::string& what) {
  std::vector<EmbedInput> out;
  size_t start = 0;
  for (size_t line = 1; start < text.size(); ++line) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string_view s(text.data() + start, end - start);
    if (s.ends_with('\r')) s.remove_suffix(1);
    start = end + 1;
    EmbedInput in;
    if (!jsonl) {
      in.text = s;
    } else {
      const std::string where = fmt::format("{} line {}", what, line);
      const nlohmann::ordered_json j = io::parse_json_strict(s, where, 0);
      if (j.is_string()) {
        in.text = j.get<std::string>();
      } else if (j.is_array()) {
        in.is_tokens = true;
        for (const auto& t : j) {
          if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX) {
            throw Error(fmt::format("{}: a token id is not an integer in 0..2^31-1", where));
          }
          in.tokens.push_back(static_cast<int32_t>(t.get<int64_t>()));
        }
      } else {
        throw Error(fmt::format("{}: expected a JSON string or an array of token ids", where));
      }
    }
    if (!in.is_tokens) require_utf8(in.text, fmt::format("{} line {}", what, line));
    if (in.text.empty() && !in.is_tokens) throw Error(fmt::format("{} line {}: empty", what, line));
    out.push_back(std::move(in));
  }
  return out;
}

}  // namespace

void register_embed(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "embed", "Embed texts with a sentence-transformers model (JSON lines out; CPU engine)");
  struct Args {
    std::string model, input = "-", output, norm = "flashnorm", prompt_name;
    int dimensions = 0, batch_tokens = 2048;
    bool jsonl = false;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("-m,--model", a->model,
                  "Hugging Face directory with sentence-transformers' modules.json, or GGUF "
                  "file with <arch>.pooling_type")
      ->required()
      ->check(CLI::ExistingPath);
  cmd->add_option("-i,--input", a->input, "inputs, one per line (- : standard input, the default)");
  cmd->add_flag("--jsonl", a->jsonl,
                "each input line is a JSON string or a JSON array of token ids");
  auto* output =
      cmd->add_option("-o,--output", a->output, "write the JSON lines to FILE (default: stdout)");
  cmd->add_option("--norm", a->norm, "normalization mode: standard or flashnorm")
      ->check(CLI::IsMember({"standard", "flashnorm"}));
  cmd->add_option("--dimensions", a->dimensions,
                  "keep the first N values (Matryoshka), L2-normalized again when the model "
                  "normalizes (0: all)")
      ->check(CLI::Range(0, 1 << 24));
  auto* prompt_name = cmd->add_option(
      "--prompt-name", a->prompt_name,
      "put the model's prompt of this name (config_sentence_transformers.json) before "
      "each text (default: its default_prompt_name, if any)");
  cmd->add_option("--batch-tokens", a->batch_tokens, "rows of one encode pass at most")
      ->check(CLI::Range(1, 1 << 20));
  cmd->callback([a, output, prompt_name] {
    const std::string what = a->input == "-" ? "--input - (standard input)" : "--input " + a->input;
    const std::vector<EmbedInput> inputs =
        parse_inputs(read_prompt_file(a->input, "--input"), a->jsonl, what);
    if (inputs.empty()) throw Error(fmt::format("{}: no inputs", what));
    if (prompt_name->count() && a->prompt_name.empty()) {
      throw Error("--prompt-name is empty (name one of the model's prompts)");
    }
    if (output->count() && a->output.empty()) throw Error("--output is empty");
    std::optional<io::AtomicFile> out;
    if (!a->output.empty()) {
      const std::filesystem::path ins[] = {a->model, a->input};
      out.emplace(a->output, std::span(ins, a->input == "-" ? 1 : 2));
    }
    // a quantized GGUF runs from its own blocks, as `generate` runs it by default
    Model model = load_model(a->model, /*with_data=*/true, cpu_default_storage(a->model));
    std::optional<EmbeddingSpec> spec = embedding_spec(model);
    if (!spec) {
      throw Error(fmt::format(
          "{}: not an embedding model (a Hugging Face directory needs sentence-transformers' "
          "modules.json, a GGUF file {}.pooling_type)",
          a->model, model.cfg.arch));
    }
    // a module file reached through a link lies outside the directory the first check covered
    if (!a->output.empty()) io::refuse_overwrite(a->output, spec->files);
    ModelTokenizer vocab = load_model_tokenizer(a->model, "", model.cfg.vocab);
    Embedder emb(std::move(model), std::move(vocab.tok), std::move(*spec), parse_norm_mode(a->norm),
                 EngineOptions{.device = Device::kCpu},
                 EmbedderOptions{.max_batch_tokens = a->batch_tokens});
    if (a->dimensions > emb.dimensions()) {
      throw Error(fmt::format("--dimensions {} is more than the model's embedding size {}",
                              a->dimensions, emb.dimensions()));
    }
    std::fprintf(stderr, "device: %s | %zu inputs\n", emb.describe().c_str(), inputs.size());
    std::vector<Embedding> result;
    try {
      result = emb.embed(inputs, a->dimensions, a->prompt_name);
    } catch (const Error& e) {  // "input i": line i + 1 of the input
      throw Error(fmt::format("{} (inputs counted from 0, one per line): {}", what, e.what()));
    }
    std::string text;
    for (size_t i = 0; i < result.size(); ++i) {
      const nlohmann::json line = {
          {"index", i}, {"embedding", result[i].values}, {"tokens", result[i].tokens}};
      text += line.dump() + "\n";
    }
    if (out) {
      out->write(text.data(), text.size());
      out->commit();
    } else {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    }
  });
}

}  // namespace flashnorm::cli
