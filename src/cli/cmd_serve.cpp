// `flashnorm serve --model NAME=PATH ...`: an OpenAI-compatible HTTP server (cpp-httplib) with
// continuous batching on the CPU engine, several models in one process (src/serve/). SIGTERM or
// SIGINT: stop accepting, refuse queued requests (503), let running ones finish, exit 0.
#include "commands.h"
#include "flashnorm/error.h"

#if defined(FLASHNORM_HAVE_SERVE)
#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <thread>

#include "../serve/connection_pool.h"
#include "../serve/routes.h"
#include "../serve/served_model.h"

namespace flashnorm::cli {
namespace {

int g_signal_pipe = -1;

// Async-signal-safe: one byte, the signal number, to the pipe serve's signal thread reads.
void on_signal(int sig) {
  const int saved = errno;
  const unsigned char b = static_cast<unsigned char>(sig);
  (void)!::write(g_signal_pipe, &b, 1);
  errno = saved;
}

}  // namespace

void register_serve(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "OpenAI-compatible server with continuous batching");
  struct Args {
    std::vector<std::string> models;
    std::string host = "127.0.0.1", api_key;
    int port = 8080, max_concurrent = 8, max_queued = 64, ctx = 0;
    std::string prefix_cache = "on";
  };
  auto a = std::make_shared<Args>();
  cmd->add_option(
         "-m,--model", a->models,
         "NAME=PATH[,norm=flashnorm|standard][,weights=auto|f32|native][,device=cpu|cuda]"
         "[,ctx=N][,max-concurrent=N][,max-queued=N][,prefix-cache=on|off][,chat-format=F] "
         "(repeat for several "
         "models, which may share a GPU; PATH: GGUF file or Hugging Face directory; "
         "device: cpu by default, cuda for the CUDA engine with one KV cache slot of ctx "
         "positions per max-concurrent sequence)")
      ->required();
  cmd->add_option("--host", a->host, "address to listen on");
  cmd->add_option("--port", a->port, "port (0: any free port, printed at start)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--api-key", a->api_key,
                  "require 'Authorization: Bearer KEY' on /v1/* (default: none)");
  cmd->add_option("--max-concurrent", a->max_concurrent, "sequences batched per model")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--max-queued", a->max_queued,
                  "requests waiting per model beyond those (more: HTTP 429)")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--prefix-cache", a->prefix_cache,
                  "keep finished prompts' KV caches in idle sequence slots and reuse a shared "
                  "prefix (CPU engine; docs/serve.md)")
      ->check(CLI::IsMember({"on", "off"}));
  cmd->add_option("--ctx", a->ctx,
                  "KV cache positions per sequence (0: model context, at most 8192)")
      ->check(CLI::Range(0, 1 << 20));
  cmd->callback([a] {
    // SIGTERM/SIGINT: the handler writes the signal number to a pipe a thread waits on (BLAS
    // threads exist before this point, so blocking the signals in new threads would not do).
    int fds[2];
    if (::pipe(fds) != 0) throw Error("serve: cannot create a pipe for signal handling");
    g_signal_pipe = fds[1];
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGTERM, &sa, nullptr);
    ::sigaction(SIGINT, &sa, nullptr);
    serve::ModelSpec defaults;
    defaults.ctx = a->ctx;
    defaults.limits.max_concurrent = a->max_concurrent;
    defaults.limits.max_queued = a->max_queued;
    defaults.limits.prefix_cache = a->prefix_cache == "on";
    serve::ModelMap models;
    int64_t threads = 8;  // summed in 64 bits: models may be many
    for (const std::string& v : a->models) {
      serve::ModelSpec spec = serve::parse_model_spec(v, defaults);
      if (models.count(spec.name))
        throw Error("--model: the name '" + spec.name + "' is given twice");
      std::fprintf(stderr, "loading %s from %s (norm %s)\n", spec.name.c_str(), spec.path.c_str(),
                   spec.norm.c_str());
      threads += 2 * (int64_t{spec.limits.max_concurrent} + spec.limits.max_queued);
      try {
        auto served = serve::load_served_model(spec);
        std::fprintf(stderr, "%s: %s%s\n", spec.name.c_str(), served->engine.c_str(),
                     spec.weights == "auto" ? " (weights=auto)" : "");
        models.emplace(spec.name, std::move(served));
      } catch (const Error& e) {  // which of the models failed to load
        throw Error("--model " + spec.name + ": " + e.what());
      }
    }
    std::atomic<bool> draining{false};
    httplib::Server svr;
    // A thread per connection: streaming clients hold theirs for the whole generation. Started as
    // connections arrive, up to `threads` but never more than kMaxConnectionThreads (connections
    // beyond wait for a free one), each exiting after 30 s idle (serve/connection_pool.h).
    constexpr int64_t kMaxConnectionThreads = 16384;
    threads = std::clamp<int64_t>(threads, 1, kMaxConnectionThreads);
    svr.new_task_queue = [threads] {
      return new serve::ConnectionPool(size_t(threads), [](size_t running) {
        std::fprintf(stderr,
                     "serve: the system refused a connection thread (%zu running): connections "
                     "wait for a running thread, or with none run one at a time on the listening "
                     "thread\n",
                     running);
      });
    };
    svr.set_keep_alive_timeout(2);  // idle keep-alive connections delay a shutdown this long
    serve::install_routes(svr, models, a->api_key, draining);
    const int port = a->port == 0 ? svr.bind_to_any_port(a->host)
                                  : (svr.bind_to_port(a->host, a->port) ? a->port : -1);
    if (port < 0) {
      throw Error("cannot listen on " + a->host + ":" + std::to_string(a->port));
    }
    std::atomic<bool> listening_ended{false}, got_signal{false};
    std::thread signals([&] {
      unsigned char sig = 0;
      while (::read(fds[0], &sig, 1) < 0 && errno == EINTR) {
      }
      got_signal = true;
      if (listening_ended) return;
      std::fprintf(stderr, "signal %d: finishing running requests, then exiting\n", sig);
      draining = true;
      // stop() before listen has started would be lost
      while (!svr.is_running() && !listening_ended) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      svr.stop();
    });
    std::fprintf(stderr, "listening on http://%s:%d\n", a->host.c_str(), port);
    std::fflush(stderr);
    svr.listen_after_bind();
    listening_ended = true;
    draining = true;
    for (auto& [name, m] : models) m->shutdown();
    // Wakes the signal thread if the server stopped for another reason.
    if (!got_signal) {
      const unsigned char zero = 0;
      (void)!::write(fds[1], &zero, 1);
    }
    signals.join();
  });
}

}  // namespace flashnorm::cli
#else
namespace flashnorm::cli {

// A build without cpp-httplib: the subcommand exists and says why it cannot run.
void register_serve(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "OpenAI-compatible server (not in this build)");
  cmd->allow_extras();
  cmd->callback([] {
    throw Error(
        "this flashnorm was built without cpp-httplib (apt install libcpp-httplib-dev, then "
        "rebuild): `serve` is unavailable");
  });
}

}  // namespace flashnorm::cli
#endif
