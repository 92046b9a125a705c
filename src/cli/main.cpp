// flashnorm: fold, inspect, verify, generate, bench. See README.md.
#include <cstdio>
#include <exception>

#include "commands.h"
#include "flashnorm/io/error.h"

int main(int argc, char** argv) {
  CLI::App app{"flashnorm: RMSNorm folding and deferred normalization for LLM inference"};
  app.require_subcommand(1);
  // Usage errors, like every other error, are one line on stderr.
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return std::string("error: ") + e.what() + " (run with --help for usage)\n";
  });
  flashnorm::cli::register_fold(app);
  flashnorm::cli::register_inspect(app);
  flashnorm::cli::register_verify(app);
  flashnorm::cli::register_generate(app);
  flashnorm::cli::register_bench(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
