// Test support: run the flashnorm CLI and capture its exit code, stdout and stderr.
#pragma once

#include <string>

namespace flashnorm::testing {

struct CliResult {
  int code = -1;
  std::string out, err;
};

// Runs `FLASHNORM_CLI args` through /bin/sh (args are shell words, quoted by the caller).
CliResult run_cli(const std::string& args);

}  // namespace flashnorm::testing
