#include "metrics.h"

#include <fmt/format.h>

#include <algorithm>

namespace flashnorm::serve {

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  std::lock_guard lock(mu_);
  ++counts_[i];
  sum_ += v;
  ++n_;
}

std::string Histogram::render(const std::string& name, const std::string& labels) const {
  std::lock_guard lock(mu_);
  std::string out;
  uint64_t cum = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cum += counts_[i];
    const std::string le = i < bounds_.size() ? fmt::format("{}", bounds_[i]) : "+Inf";
    out += fmt::format("{}_bucket{{{},le=\"{}\"}} {}\n", name, labels, le, cum);
  }
  out += fmt::format("{}_sum{{{}}} {}\n{}_count{{{}}} {}\n", name, labels, sum_, name, labels, n_);
  return out;
}

std::string render_metrics(const std::vector<std::string>& names,
                           const std::vector<const ModelMetrics*>& models) {
  std::string out;
  auto family = [&](const char* name, const char* type, const char* help, auto&& each) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
    for (size_t i = 0; i < models.size(); ++i) {
      each(fmt::format("model=\"{}\"", names[i]), *models[i]);
    }
  };
  auto scalar = [&](const char* name, const char* type, const char* help, auto get) {
    family(name, type, help, [&](const std::string& l, const ModelMetrics& m) {
      out += fmt::format("{}{{{}}} {}\n", name, l, get(m));
    });
  };
  static const char* kOutcome[] = {"ok", "cancelled", "rejected", "error"};
  family("flashnorm_requests_total", "counter", "Requests by outcome.",
         [&](const std::string& l, const ModelMetrics& m) {
           for (int o = 0; o < 4; ++o) {
             out += fmt::format("flashnorm_requests_total{{{},outcome=\"{}\"}} {}\n", l,
                                kOutcome[o], m.requests[o].load());
           }
         });
  scalar("flashnorm_prompt_tokens_total", "counter", "Prompt tokens prefilled.",
         [](const ModelMetrics& m) { return m.prompt_tokens.load(); });
  scalar("flashnorm_prompt_tokens_cached_total", "counter",
         "Prompt tokens taken from a cached prefix instead of prefilled.",
         [](const ModelMetrics& m) { return m.prompt_tokens_cached.load(); });
  scalar("flashnorm_completion_tokens_total", "counter", "Tokens generated.",
         [](const ModelMetrics& m) { return m.completion_tokens.load(); });
  scalar("flashnorm_steps_total", "counter", "Batched forward passes.",
         [](const ModelMetrics& m) { return m.steps.load(); });
  scalar("flashnorm_queue_depth", "gauge", "Requests waiting for a sequence slot.",
         [](const ModelMetrics& m) { return m.queue_depth.load(); });
  scalar("flashnorm_active_sequences", "gauge", "Sequences in the running batch.",
         [](const ModelMetrics& m) { return m.active.load(); });
  scalar("flashnorm_kv_blocks_in_use", "gauge",
         "KV cache blocks (16 positions) held by running sequences.",
         [](const ModelMetrics& m) { return m.kv_blocks.load(); });
  scalar("flashnorm_kv_blocks_cached", "gauge",
         "KV cache blocks (16 positions) held by cached prompts (prefix reuse).",
         [](const ModelMetrics& m) { return m.kv_blocks_cached.load(); });
  scalar("flashnorm_prefix_cache_sequences", "gauge",
         "Finished requests' prompts kept for prefix reuse.",
         [](const ModelMetrics& m) { return m.prefix_cache_sequences.load(); });
  scalar("flashnorm_batch_size", "gauge", "Sequences in the last forward pass.",
         [](const ModelMetrics& m) { return m.batch.load(); });
  scalar("flashnorm_batch_size_max", "gauge", "Most sequences in one forward pass so far.",
         [](const ModelMetrics& m) { return m.batch_max.load(); });
  struct Hist {
    const char* name;
    const char* help;
    Histogram ModelMetrics::*h;
  };
  for (const Hist& h :
       {Hist{"flashnorm_step_batch_size", "Sequences per forward pass.", &ModelMetrics::batch_size},
        Hist{"flashnorm_time_to_first_token_seconds", "From arrival to the first generated token.",
             &ModelMetrics::ttft},
        Hist{"flashnorm_time_per_output_token_seconds",
             "Between consecutive generated tokens of a request.", &ModelMetrics::tpot}}) {
    family(h.name, "histogram", h.help,
           [&](const std::string& l, const ModelMetrics& m) { out += (m.*h.h).render(h.name, l); });
  }
  return out;
}

}  // namespace flashnorm::serve
