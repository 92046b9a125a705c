#include "model_args.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "flashnorm/engine/make_engine.h"
#include "flashnorm/error.h"
#include "flashnorm/io/json_strict.h"
#include "flashnorm/tokenizer/utf8_text.h"

namespace flashnorm::cli {

void add_device_options(CLI::App* cmd, DeviceArgs& d) {
  cmd->add_option("--device", d.device, "cpu, cuda, or auto (cuda when a usable GPU is present)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--dtype", d.dtype, "cuda: weight and activation type")
      ->check(CLI::IsMember({"bf16", "fp16"}))
      ->transform(CLI::Transformer(std::map<std::string, std::string>{{"f16", "fp16"}}))  // fold's
      ->capture_default_str();
  cmd->add_option("--deferred", d.deferred,
                  "cuda, flashnorm mode: fused (one kernel in decode) or two-stream (GEMM and "
                  "rstd on two streams joined by events)")
      ->check(CLI::IsMember({"fused", "two-stream"}))
      ->capture_default_str();
  cmd->add_option("--prefill-norm", d.prefill_norm,
                  "cuda, flashnorm mode, passes of more than 64 tokens (prompts): add (the "
                  "residual add that produces x also writes x * rstd, and the GEMM runs on it with "
                  "the folded weights: every column normalized, the rstd QK-norm cancels "
                  "included) or deferred (the GEMM on raw x, rstd applied to its output rows, "
                  "cancelled columns unscaled); shorter passes always defer")
      ->check(CLI::IsMember({"add", "deferred"}))
      ->capture_default_str();
  cmd->add_flag("--eager", d.eager, "cuda: launch decode steps eagerly instead of a CUDA graph");
  cmd->add_flag("--fold-tied-head", d.fold_tied_head,
                "cuda, flashnorm mode, LM head tied to the embedding: fold the final norm's gain "
                "into an untied copy of the head (vocab x hidden more weights) instead of running "
                "that one RMSNorm with its gain");
  cmd->add_option("--weights", d.weights,
                  "auto: native on the CPU for a quantized GGUF file, f32 otherwise; "
                  "f32 dequantizes every weight at load (cpu: fp32 BLAS, the exact reference; "
                  "cuda: rounded to --dtype); native computes from the GGUF file's quantized "
                  "blocks (the file's bytes unchanged; decode quantizes activations to 16 bits "
                  "per block of 32, prefill dequantizes tiles of rows for the GEMM; cuda keeps "
                  "Q4_0/Q4_1/Q5_0/Q8_0/Q4_K/Q6_K projections in their blocks, other types in "
                  "--dtype)")
      ->check(CLI::IsMember({"auto", "f32", "native"}))
      ->capture_default_str();
}

WeightStorage weight_storage(const DeviceArgs& d, const std::string& path) {
  return flashnorm::weight_storage(parse_weights(d.weights), parse_device(d.device), path);
}

Model load_model_for(const std::string& path, const DeviceArgs& d) {
  return load_model(path, /*with_data=*/true, weight_storage(d, path));
}

std::string resolve_device(const std::string& device) {
  return flashnorm::resolve_device(parse_device(device)) == Device::kCuda ? "cuda" : "cpu";
}

std::unique_ptr<Engine> make_engine(Model model, NormMode mode, const DeviceArgs& d, int ctx,
                                    bool cancel, bool track) {
  const std::string dev = resolve_device(d.device);
  const bool flashnorm_opts = d.deferred != "fused" || d.fold_tied_head || d.prefill_norm != "add";
  if (dev == "cpu" && (d.dtype != "bf16" || d.eager || flashnorm_opts)) {
    std::fprintf(stderr,
                 "note: --dtype, --deferred, --prefill-norm, --eager and --fold-tied-head apply to "
                 "the CUDA engine only; the CPU engine runs fp32 or native weights (--weights)\n");
  } else if (mode == NormMode::Standard && flashnorm_opts) {
    std::fprintf(stderr,
                 "note: --deferred, --prefill-norm and --fold-tied-head apply to --norm flashnorm "
                 "only\n");
  } else if (d.fold_tied_head && !model.cfg.tied_head) {
    std::fprintf(stderr,
                 "note: --fold-tied-head: this model's LM head is not tied to the embedding (a "
                 "folded file's never is); nothing to fold\n");
  }
  EngineOptions o;
  o.device = dev == "cuda" ? Device::kCuda : Device::kCpu;
  o.max_context = ctx;
  o.cancel = cancel;
  o.track_cancellation = track;
  o.dtype = d.dtype == "fp16" ? HalfType::kFP16 : HalfType::kBF16;
  o.deferred = d.deferred == "two-stream" ? Deferred::kTwoStream : Deferred::kFused;
  o.prefill = d.prefill_norm == "deferred" ? PrefillNorm::kDeferred : PrefillNorm::kInAdd;
  o.decode = d.eager ? DecodeLaunch::kEager : DecodeLaunch::kGraph;
  o.tied_head = d.fold_tied_head ? TiedHead::kFoldCopy : TiedHead::kKeepGain;
  require_lm_head(model);
  return flashnorm::make_engine(std::move(model), mode, o);
}

std::string read_prompt_file(const std::string& path, std::string_view option) {
  constexpr size_t kMaxPrompt = size_t(256) << 20;  // as verify's --text
  const bool is_stdin = path == "-";
  const std::string what =
      is_stdin ? fmt::format("{} - (standard input)", option) : fmt::format("{} {}", option, path);
  int fd = STDIN_FILENO;
  if (!is_stdin) {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) throw Error(fmt::format("{}: cannot open: {}", what, std::strerror(errno)));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      throw Error(
          fmt::format("{}: not a regular file (give a file, or - for standard input)", what));
    }
  }
  std::string text;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      if (!is_stdin) ::close(fd);
      throw Error(fmt::format("{}: read error: {}", what, std::strerror(err)));
    }
    if (n == 0) break;
    if (text.size() + size_t(n) > kMaxPrompt) {
      if (!is_stdin) ::close(fd);
      throw Error(
          fmt::format("{}: longer than {} MiB; refusing to read it whole", what, kMaxPrompt >> 20));
    }
    text.append(buf, size_t(n));
  }
  if (!is_stdin) ::close(fd);
  return text;
}

nlohmann::json gpu_run_stamp(std::time_t when, const std::string& commit,
                             const std::string& driver) {
  const std::string gpu = gpu_name();
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&when));
  return {{"gpu", gpu}, {"date", date}, {"commit", commit}, {"driver", driver}};
}

std::vector<ChatMessage> read_chat_messages(const std::string& path) {
  const std::string what = "--messages " + path;
  const std::string text = read_prompt_file(path, "--messages");
  require_utf8(text, what);
  // syntax errors (with their byte offset), numbers past double's range, duplicate keys and
  // nesting past 64 levels: FormatError naming --messages PATH
  const nlohmann::ordered_json j = io::parse_json_strict(text, what, 0);
  if (!j.is_array() || j.empty()) {
    throw Error(
        fmt::format("{}: expected a non-empty JSON array of {{\"role\", \"content\"}}", what));
  }
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < j.size(); ++i) {
    const nlohmann::ordered_json& m = j[i];
    if (!m.is_object()) throw Error(fmt::format("{}: messages[{}] is not an object", what, i));
    for (const auto& [key, v] : m.items()) {
      if (key != "role" && key != "content") {
        throw Error(fmt::format("{}: messages[{}].{}: unsupported field", what, i, key));
      }
    }
    for (const char* key : {"role", "content"}) {
      if (!m.contains(key) || !m[key].is_string()) {
        throw Error(fmt::format("{}: messages[{}].{} must be a string", what, i, key));
      }
    }
    out.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  }
  // the same order and final-message rules as serve's chat requests
  if (auto p = chat_order_problem(out)) {
    throw Error(fmt::format("{}: messages[{}].role: {}", what, p->index, p->message));
  }
  if (out.back().content.empty()) {
    throw Error(fmt::format("{}: messages[{}].content is empty", what, out.size() - 1));
  }
  return out;
}

}  // namespace flashnorm::cli
