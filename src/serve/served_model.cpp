#include "served_model.h"

#include <fmt/format.h>

#include <charconv>
#include <set>

#include "flashnorm/engine/make_engine.h"
#include "flashnorm/error.h"
#include "flashnorm/model/check.h"
#include "flashnorm/model/embedding.h"
#include "flashnorm/tokenizer/chat.h"

namespace flashnorm::serve {
namespace {

int positive(const std::string& key, const std::string& v, int lo) {
  int x = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || end != v.data() + v.size() || x < lo) {
    throw Error(fmt::format("--model: {}={} is not an integer >= {}", key, v, lo));
  }
  return x;
}

}  // namespace

ModelSpec parse_model_spec(const std::string& value, const ModelSpec& defaults) {
  ModelSpec s = defaults;
  const size_t eq = value.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw Error(fmt::format("--model {}: expected NAME=PATH[,key=value...]", value));
  }
  s.name = value.substr(0, eq);
  std::string rest = value.substr(eq + 1);
  size_t comma = rest.find(',');
  s.path = rest.substr(0, comma);
  std::set<std::string>& seen = s.given;
  seen.clear();
  if (s.path.empty()) throw Error(fmt::format("--model {}: no PATH after '='", value));
  while (comma != std::string::npos) {
    const size_t next = rest.find(',', comma + 1);
    const std::string kv = rest.substr(comma + 1, next - comma - 1);
    comma = next;
    const size_t e = kv.find('=');
    const std::string key = kv.substr(0, e), v = e == std::string::npos ? "" : kv.substr(e + 1);
    if (!seen.insert(key).second) {
      throw Error(fmt::format("--model {}: key '{}' given twice", s.name, key));
    }
    if (key == "norm" && (v == "flashnorm" || v == "standard")) {
      s.norm = v;
    } else if (key == "ctx") {
      s.ctx = positive(key, v, 0);
    } else if (key == "max-concurrent") {
      s.limits.max_concurrent = positive(key, v, 1);
      if (s.limits.max_concurrent > 4096)  // as --max-concurrent
        throw Error(fmt::format("--model {}: max-concurrent={} is above 4096", s.name, v));
    } else if (key == "max-queued") {
      s.limits.max_queued = positive(key, v, 0);
      if (s.limits.max_queued > (1 << 20))  // as --max-queued (and no int overflow beside it)
        throw Error(fmt::format("--model {}: max-queued={} is above 1048576", s.name, v));
    } else if (key == "prefix-cache" && (v == "on" || v == "off")) {
      s.limits.prefix_cache = v == "on";
    } else if (key == "chat-format") {
      chat_style_from_name(v);  // refuses an unknown family
      s.chat_format = v;
    } else if (key == "device" && (v == "cpu" || v == "cuda")) {
      s.device = v;
    } else if (key == "weights" && (v == "auto" || v == "f32" || v == "native")) {
      s.weights = v;
    } else if (key == "norm" || key == "device" || key == "weights" || key == "prefix-cache") {
      throw Error(fmt::format("--model {}: {}={} is not one of {}", s.name, key, v,
                              key == "norm"      ? "flashnorm, standard"
                              : key == "device"  ? "cpu, cuda"
                              : key == "weights" ? "auto, f32, native"
                                                 : "on, off"));
    } else {
      throw Error(
          fmt::format("--model {}: unknown key '{}' (norm, ctx, max-concurrent, "
                      "max-queued, prefix-cache, chat-format, device, weights)",
                      s.name, key));
    }
  }
  return s;
}

std::unique_ptr<ServedModel> load_served_model(const ModelSpec& spec) {
  auto m = std::make_unique<ServedModel>();
  m->spec = spec;
  m->created = std::time(nullptr);
  // the CLI's --weights rule (auto: native on the CPU for a quantized GGUF)
  Model model =
      load_model(spec.path, /*with_data=*/true,
                 weight_storage(parse_weights(spec.weights), parse_device(spec.device), spec.path));
  m->vocab.emplace(load_model_tokenizer(spec.path, "", model.cfg.vocab));
  if (std::optional<EmbeddingSpec> embedding = embedding_spec(model)) {
    for (const char* key : {"chat-format", "prefix-cache", "max-concurrent"}) {
      if (spec.given.count(key)) {
        throw Error(
            fmt::format("{} does not apply to an embedding model (its directory has "
                        "sentence-transformers' modules.json)",
                        key));
      }
    }
    auto e = std::make_unique<Embedder>(
        std::move(model), std::move(m->vocab->tok), std::move(*embedding),
        parse_norm_mode(spec.norm),
        EngineOptions{.device = spec.device == "cuda" ? Device::kCuda : Device::kCpu,
                      .max_context = spec.ctx});
    m->vocab.reset();
    m->engine = e->describe();
    m->embeddings = std::make_unique<EmbedQueue>(
        std::move(e), EmbedQueue::Limits{.max_queued = spec.limits.max_queued}, m->metrics);
    return m;
  }
  EngineOptions o;
  o.device = spec.device == "cuda" ? Device::kCuda : Device::kCpu;
  o.max_context = spec.ctx;
  o.max_sequences = spec.limits.max_concurrent;  // the CUDA engine's cache slots
  require_lm_head(model);
  refuse_appended_token(m->vocab->tok, "serve (completions)");
  std::unique_ptr<Engine> engine = make_engine(std::move(model), parse_norm_mode(spec.norm), o);
  m->engine = describe_engine(*engine);
  m->scheduler =
      std::make_unique<Scheduler>(std::move(engine), m->vocab->tok, spec.limits, m->metrics);
  return m;
}

}  // namespace flashnorm::serve
