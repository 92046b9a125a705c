// Standalone `flashnorm_kbench bench ...`: the same subcommand as `flashnorm bench`, linked only
// against the kernel libraries so that the GPU script can run it while the rest of the CLI is
// built.
#include <cstdio>
#include <exception>

#include "../../cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"flashnorm kernel benchmark"};
  app.require_subcommand(1);
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
