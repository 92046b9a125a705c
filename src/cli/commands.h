// Subcommands of the `flashnorm` CLI. Each register_* adds one subcommand (with --help text) to
// the app and sets its callback; a callback reports failures by throwing flashnorm::Error, which
// main() prints as one line on stderr with exit code 1.
#pragma once

#include <CLI/CLI.hpp>

namespace flashnorm::cli {

void register_fold(CLI::App& app);
void register_inspect(CLI::App& app);
void register_verify(CLI::App& app);
void register_generate(CLI::App& app);
void register_embed(CLI::App& app);
void register_bench(CLI::App& app);
void register_serve(CLI::App& app);

}  // namespace flashnorm::cli
