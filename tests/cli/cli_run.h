// Test support: run the flashnorm CLI and capture its exit code, stdout and stderr.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

namespace flashnorm::testing {

struct CliResult {
  int code = -1;
  std::string out, err;
};

// Runs `FLASHNORM_CLI args` through /bin/sh (args are shell words, quoted by the caller).
CliResult run_cli(const std::string& args);

// Runs `verify ARGS --tokens 256 --json DIR/verify.json`, prints its stdout and returns the parsed
// JSON report, keeping a pretty-printed copy at `keep` (beside the build, for the docs). On a
// non-zero exit: fails the test with stderr and returns a null JSON.
nlohmann::json run_verify(const std::string& args, const std::filesystem::path& dir,
                          const std::filesystem::path& keep);

}  // namespace flashnorm::testing
