// A model `flashnorm serve` holds: what `--model NAME=PATH[,key=value...]` names, loaded with its
// tokenizer, engine and scheduler. Keys (each optional): norm=flashnorm|standard (default
// flashnorm), ctx=N (KV cache positions per sequence; default --ctx), max-concurrent=N and
// max-queued=N (default the flags of the same name), chat-format=chatml|gemma|llama3 (default:
// recognised from the model's template), device=cpu|cuda (cuda: the CUDA engine, one KV cache slot
// of ctx positions per max-concurrent sequence allocated at load; several models may share a GPU),
// weights=auto|f32|native, prefix-cache=on|off (default --prefix-cache: Scheduler::Limits).
// A Hugging Face directory with sentence-transformers' modules.json is an embedding model: it
// serves POST /v1/embeddings only, through an EmbedQueue on the CPU engine (norm, ctx and
// max-queued apply; chat-format, prefix-cache and max-concurrent are refused by name).
#pragma once

#include <ctime>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "embed_queue.h"
#include "flashnorm/tokenizer/model_tokenizer.h"
#include "metrics.h"
#include "scheduler.h"

namespace flashnorm::serve {

struct ModelSpec {
  std::string name, path, norm = "flashnorm", chat_format, device = "cpu";
  // auto (native on the CPU for a quantized GGUF, else f32), f32 (dequantized at load) or native
  // (the GGUF's blocks)
  std::string weights = "auto";
  int ctx = 0;
  Scheduler::Limits limits;
  std::set<std::string> given;  // the keys the --model value sets
};

// Parses one --model value; `defaults` gives ctx and limits not set in it.
// Errors: Error (one line naming the key) for a missing NAME or PATH, an unknown key, or a bad
// value.
ModelSpec parse_model_spec(const std::string& value, const ModelSpec& defaults);

struct ServedModel {
  ModelSpec spec;
  std::time_t created = 0;
  std::optional<ModelTokenizer> vocab;  // set by load_served_model
  std::string engine;                   // the engine that runs it: "cpu, native weights (...), ..."
  ModelMetrics metrics;
  std::unique_ptr<Scheduler> scheduler;    // a completion model
  std::unique_ptr<EmbedQueue> embeddings;  // an embedding model (scheduler unset)
  void shutdown() {
    if (scheduler) scheduler->shutdown();
    if (embeddings) embeddings->shutdown();
  }
};

// Loads the model file or directory, its tokenizer and its engine (CPU or CUDA, spec.device), and
// starts its scheduler. Errors: the loaders' and engine's Error (device=cuda without a usable GPU).
std::unique_ptr<ServedModel> load_served_model(const ModelSpec& spec);

}  // namespace flashnorm::serve
