// Shared pieces of the model-running subcommands: loading an engine and its tokenizer.
#pragma once

#include <CLI/CLI.hpp>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "flashnorm/engine/cpu_engine.h"
#include "flashnorm/engine/make_engine.h"
#include "flashnorm/io/gguf.h"
#include "flashnorm/tokenizer/chat.h"
#include "flashnorm/tokenizer/tokenizer.h"

namespace flashnorm::cli {

// Where and how a model runs: --device auto|cpu|cuda, --weights, and for cuda --dtype, --deferred,
// --prefill-norm, --eager, --fold-tied-head.
struct DeviceArgs {
  std::string device = "auto";       // auto: cuda when a usable GPU is present, else cpu
  std::string dtype = "bf16";        // cuda weights/activations: bf16 or fp16
  std::string deferred = "fused";    // cuda flashnorm mode: fused or two-stream
  std::string prefill_norm = "add";  // cuda flashnorm mode, prompts: add or deferred (PrefillNorm)
  bool eager = false;                // cuda: no CUDA graph for decode steps
  bool fold_tied_head = false;       // cuda flashnorm mode: CudaEngineOptions::fold_tied_head
  std::string weights = "auto";      // auto, f32 (dequantized at load) or native (GGUF blocks)
};
void add_device_options(CLI::App* cmd, DeviceArgs& d);
// "auto" -> "cuda" or "cpu"; "cuda" without a usable GPU (or a build without CUDA) throws Error.
std::string resolve_device(const std::string& device);
// WeightStorage for --weights and --device on the model at `path` (engine/make_engine.h's
// weight_storage: auto is native on the CPU for a quantized GGUF, f32 otherwise).
WeightStorage weight_storage(const DeviceArgs& d, const std::string& path);
// load_model(path, true, weight_storage(d, path)).
Model load_model_for(const std::string& path, const DeviceArgs& d);
// An engine on the resolved device (flashnorm::make_engine, engine/make_engine.h). ctx: KV cache
// length (0: default); cancel / track as in CpuEngine (track: CPU only). Options that do not apply
// (CUDA-only flags on the CPU, --deferred in standard mode) get a one-line note on stderr.
std::unique_ptr<Engine> make_engine(Model model, NormMode mode, const DeviceArgs& d, int ctx,
                                    bool cancel, bool track = false);
// The bytes of a prompt file; "-" reads standard input. Throws Error (one line naming `option`
// and the file) for a missing, unreadable or directory path.
std::string read_prompt_file(const std::string& path, std::string_view option = "--file");

// The conversation of `generate --messages FILE` ("-": standard input): a JSON array of
// {"role": string, "content": string} objects (OpenAI's chat messages; no other field). Throws
// Error (one line naming --messages, the file and the byte offset or messages[i].field) for
// malformed JSON or UTF-8 (duplicate keys and nesting past 64 levels included:
// io::parse_json_strict), another shape, a field of the wrong type, turns out of chat.h's order
// (chat_order_problem) or an empty last user message (as serve refuses them).
std::vector<ChatMessage> read_chat_messages(const std::string& path);

// The provenance every GPU result JSON carries: {"gpu": the current CUDA device's name (or "none"
// without CUDA), "date": `when` in UTC, ISO 8601, "commit", "driver": as given (the scripts pass
// the git hash and nvidia-smi's driver version)}.
nlohmann::json gpu_run_stamp(std::time_t when, const std::string& commit,
                             const std::string& driver);

}  // namespace flashnorm::cli
