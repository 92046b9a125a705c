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

// The suite's verify runs: 64 greedy tokens per prompt and the text's first 1536 tokens (3 chunks
// of 512), to keep the suite's time on 2 cores; docs/results.md records the full-text, 256-token
// runs of the same commands.
inline constexpr int kVerifyGreedyTokens = 64;
inline constexpr int kVerifyTextTokens = 1536;

// Runs `verify ARGS --tokens kVerifyGreedyTokens --max-text-tokens kVerifyTextTokens --json
// DIR/verify.json`, prints its stdout and returns the parsed JSON report, keeping a pretty-printed
// copy at `keep` (beside the build). On a non-zero exit: fails the test with stderr and returns a
// null JSON.
nlohmann::json run_verify(const std::string& args, const std::filesystem::path& dir,
                          const std::filesystem::path& keep);

}  // namespace flashnorm::testing
