#include "cli_run.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

namespace flashnorm::testing {

CliResult run_cli(const std::string& args) {
  namespace fs = std::filesystem;
  static int n = 0;
  const fs::path dir = fs::path(::testing::TempDir());
  const fs::path o = dir / ("cli_out_" + std::to_string(::getpid()) + "_" + std::to_string(n));
  const fs::path e = dir / ("cli_err_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
  const std::string cmd = std::string(FLASHNORM_CLI) + " " + args + " >" + o.string() + " 2>" +
                          e.string() + " </dev/null";
  const int status = std::system(cmd.c_str());
  CliResult r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  auto slurp = [](const fs::path& p) {
    std::ifstream f(p);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  r.out = slurp(o);
  r.err = slurp(e);
  fs::remove(o);
  fs::remove(e);
  return r;
}

nlohmann::json run_verify(const std::string& args, const std::filesystem::path& dir,
                          const std::filesystem::path& keep) {
  const std::filesystem::path json = dir / "verify.json";
  const CliResult r = run_cli("verify " + args + " --tokens " +
                              std::to_string(kVerifyGreedyTokens) + " --max-text-tokens " +
                              std::to_string(kVerifyTextTokens) + " --json " + json.string());
  if (r.code != 0) {
    ADD_FAILURE() << "verify exited " << r.code << ": " << r.err;
    return nullptr;
  }
  std::cout << r.out;
  std::ifstream jf(json);
  nlohmann::json v = nlohmann::json::parse(jf);
  std::ofstream(keep) << v.dump(2);
  return v;
}

}  // namespace flashnorm::testing
