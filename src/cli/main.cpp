// flashnorm: fold, inspect, verify, generate, bench. See README.md.
#include <cstdio>
#include <exception>
#include <new>
#include <string>

#include "commands.h"
#include "flashnorm/io/error.h"

int main(int argc, char** argv) {
  CLI::App app{"flashnorm: RMSNorm folding and deferred normalization for LLM inference"};
  app.require_subcommand(1);
  app.option_defaults()->always_capture_default();  // --help shows every default
  // Usage errors, like every other error, are one line on stderr.
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    std::string msg = e.what();
    for (char& c : msg) {
      if (c == '\n' || c == '\r') c = ' ';
    }
    return "error: " + msg + " (run with --help for usage)\n";
  });
  flashnorm::cli::register_fold(app);
  flashnorm::cli::register_inspect(app);
  flashnorm::cli::register_verify(app);
  flashnorm::cli::register_generate(app);
  flashnorm::cli::register_bench(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 1;  // --help is a ParseError that exits 0
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr,
                 "error: out of memory: the model's tensors or buffers do not fit in this "
                 "machine's memory (a smaller --ctx may help)\n");
    return 1;
  } catch (const std::exception& e) {
    // One line, whatever the message quotes from a file.
    std::string msg = e.what();
    for (char& c : msg) {
      if (c == '\n' || c == '\r') c = ' ';
    }
    std::fprintf(stderr, "error: %s\n", msg.c_str());
    return 1;
  }
  return 0;
}
