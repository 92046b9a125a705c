// Nothing lost (issue "Nothing lost, nothing silently wrong", items 1-3 and 8), through the CLI
// itself: links planted where the old writer put its temporary are never written through (the
// victim and the input keep their sha256), an input truncated while a fold or a generation reads
// it ends in one line and exit 1 with nothing left behind, and output paths are refused before
// any work is done.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "cli_run.h"
#include "support/random_llama.h"

namespace flashnorm {
namespace {
namespace fs = std::filesystem;
using testing::run_cli;

// sha256 of a file through coreutils' sha256sum (an outside reference).
std::string sha256(const fs::path& p) {
  std::FILE* f = ::popen(("sha256sum '" + p.string() + "'").c_str(), "r");
  char buf[65] = {};
  const size_t n = f ? std::fread(buf, 1, 64, f) : 0;
  if (f) ::pclose(f);
  return std::string(buf, n);
}

// Exit status, stderr of `flashnorm args...` run in a child that first calls `before_exec` (in
// the child, so it can use the child's pid, which exec keeps).
struct ForkedRun {
  int code = -1;  // exit code, or 128 + signal
  std::string err;
};
template <class F>
ForkedRun run_forked(const std::vector<std::string>& args, F before_exec) {
  int pipefd[2];
  if (::pipe(pipefd) != 0) return {};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(pipefd[1], 2);
    ::close(pipefd[0]);
    const int devnull = ::open("/dev/null", O_WRONLY);
    ::dup2(devnull, 1);
    before_exec();
    std::vector<char*> argv{const_cast<char*>(FLASHNORM_CLI)};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(FLASHNORM_CLI, argv.data());
    ::_exit(127);
  }
  ::close(pipefd[1]);
  ForkedRun r;
  char buf[4096];
  for (ssize_t n; (n = ::read(pipefd[0], buf, sizeof buf)) > 0;) r.err.append(buf, size_t(n));
  ::close(pipefd[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> v;
  for (const auto& e : fs::directory_iterator(dir)) v.push_back(e.path().filename().string());
  std::sort(v.begin(), v.end());
  return v;
}

std::string old_temporary(const fs::path& out) {
  return out.string() + ".tmp-" + std::to_string(::getpid());
}

TEST(CliOutputSafety, FoldNeverWritesThroughALinkPlantedAtTheTemporaryName) {
  const fs::path d = testing::fresh_dir("cli_safety_links");
  testing::write_random_gguf(d / "in.gguf");
  std::ofstream(d / "victim") << std::string(5000, 'v');
  const std::string victim_sum = sha256(d / "victim"), input_sum = sha256(d / "in.gguf");
  ASSERT_EQ(victim_sum.size(), 64u);
  // a symbolic link to a victim file
  ForkedRun r = run_forked({"fold", (d / "in.gguf").string(), "-o", (d / "a.gguf").string()}, [&] {
    (void)::symlink((d / "victim").c_str(), old_temporary(d / "a.gguf").c_str());
  });
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(sha256(d / "victim"), victim_sum);
  EXPECT_FALSE(fs::is_symlink(d / "a.gguf"));
  EXPECT_TRUE(fs::is_regular_file(d / "a.gguf"));
  // a hard link to the fold's own input
  r = run_forked({"fold", (d / "in.gguf").string(), "-o", (d / "b.gguf").string()}, [&] {
    (void)::link((d / "in.gguf").c_str(), old_temporary(d / "b.gguf").c_str());
  });
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(sha256(d / "in.gguf"), input_sum);
  EXPECT_EQ(fs::file_size(d / "a.gguf"), fs::file_size(d / "b.gguf"));
  EXPECT_EQ(sha256(d / "a.gguf"), sha256(d / "b.gguf"));
}

// Runs `args` (reading `in`, a copy of `model`) and truncates `in` to 1 MiB after `delay_ms`.
// Whenever the truncation lands, the run ends in one of two ways: exit 1 with one line naming the
// file and nothing left in `dir` but the input (the header check refuses the short file, or the
// SIGBUS guard reports it shrinking), or exit 0 when it had finished reading first. Returns true
// when the run saw the file shrink under its mapping.
bool truncated_run_is_clean(const std::vector<std::string>& args, const std::string& model,
                            const fs::path& in, const fs::path& dir, int delay_ms) {
  for (const auto& e : fs::directory_iterator(dir)) fs::remove_all(e.path());
  fs::copy_file(model, in);
  std::thread truncator([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    fs::resize_file(in, 1 << 20);
  });
  const ForkedRun r = run_forked(args, [] {});
  truncator.join();
  if (r.code == 0) return false;  // done before the truncation
  EXPECT_EQ(r.code, 1) << delay_ms << " ms: " << r.err;
  const auto last = r.err.rfind("error: ");
  EXPECT_NE(last, std::string::npos) << r.err;
  if (last == std::string::npos) return false;
  const std::string line = r.err.substr(last);  // generate may print its device line first
  EXPECT_EQ(std::count(line.begin(), line.end(), '\n'), 1) << r.err;
  EXPECT_NE(line.find(in.filename().string()), std::string::npos) << r.err;
  EXPECT_EQ(entries(dir), std::vector<std::string>{in.filename().string()});
  return line.find("shrank") != std::string::npos;
}

// Delays from 50 ms to 1.6 s until one truncation lands while the file is mapped (the old code
// died of SIGBUS there, rc 135 and an empty stderr).
TEST(CliOutputSafety, InputTruncatedDuringFoldOrGenerateIsOneLineAndLeavesNothing) {
  const std::string model = testing::smollm2_path();
  if (!fs::exists(model)) GTEST_SKIP() << "SmolLM2 GGUF not fetched (scripts/fetch_models.sh)";
  const fs::path d = testing::fresh_dir("cli_safety_trunc");
  const fs::path in = d / "in.gguf";
  const std::vector<std::vector<std::string>> runs = {
      {"fold", in.string(), "-o", (d / "out.gguf").string()},
      {"generate", "-m", in.string(), "-p", "Hello", "-n", "8", "--device", "cpu"}};
  for (const auto& args : runs) {
    bool shrank = false;
    for (int delay = 50; delay <= 1600 && !shrank && !HasFailure(); delay *= 2) {
      shrank = truncated_run_is_clean(args, model, in, d, delay);
    }
    EXPECT_TRUE(shrank) << args[0] << ": no truncation landed while the file was mapped";
  }
}

// Output refusals come before the model is read: with an unreadable model and an unwritable
// output, the output is what the one error line names.
TEST(CliOutputSafety, OutputPathIsCheckedBeforeTheInputIsRead) {
  const fs::path d = testing::fresh_dir("cli_safety_order");
  std::ofstream(d / "junk.gguf") << "not a model";
  fs::create_directory(d / "outdir");
  for (const std::string& out :
       {(d / "outdir").string(), std::string("/dev/null"), (d / "no" / "x.gguf").string(),
        (d / "junk.gguf").string(), std::string("/proc/x.gguf")}) {
    const auto r = run_cli("fold " + (d / "junk.gguf").string() + " -o " + out);
    EXPECT_EQ(r.code, 1) << out;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(r.err.find("magic"), std::string::npos) << out << ": " << r.err;
  }
  EXPECT_EQ(entries(d), (std::vector<std::string>{"junk.gguf", "outdir"}));
}

TEST(CliOutputSafety, TheLongestValidOutputNameWorks) {
  const fs::path d = testing::fresh_dir("cli_safety_name");
  testing::write_random_gguf(d / "in.gguf");
  const std::string name(251, 'n');
  const auto r = run_cli("fold " + (d / "in.gguf").string() + " -o " + (d / name).string());
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::is_regular_file(d / name));
}

// A file-size limit (ulimit -f) makes the write fail: one line, exit 1, no temporary left.
// (SIGXFSZ used to end the process and leave a partial temporary behind.)
TEST(CliOutputSafety, FileSizeLimitIsOneLineAndLeavesNothing) {
  const fs::path d = testing::fresh_dir("cli_safety_fsize");
  testing::write_random_gguf(d / "in.gguf");
  fs::create_directory(d / "out");
  const std::string cmd = "ulimit -f 8; " FLASHNORM_CLI " fold " + (d / "in.gguf").string() +
                          " -o " + (d / "out" / "o.gguf").string() + " 2>" +
                          (d / "err.txt").string();
  const int status = std::system(("sh -c '" + cmd + "'").c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
  std::ifstream ef(d / "err.txt");
  const std::string err((std::istreambuf_iterator<char>(ef)), {});
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_NE(err.find("File too large"), std::string::npos) << err;
  EXPECT_TRUE(entries(d / "out").empty());
}

// Terminating signals beyond SIGINT/TERM/HUP/PIPE remove the temporary too.
TEST(CliOutputSafety, OtherTerminatingSignalsLeaveNothing) {
  const std::string model = testing::smollm2_path();
  if (!fs::exists(model)) GTEST_SKIP() << "SmolLM2 GGUF not fetched (scripts/fetch_models.sh)";
  const fs::path d = testing::fresh_dir("cli_safety_signals");
  fs::create_directory(d / "out");
  for (int sig : {SIGUSR1, SIGQUIT, SIGALRM}) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      const int devnull = ::open("/dev/null", O_WRONLY);
      ::dup2(devnull, 1);
      ::dup2(devnull, 2);
      ::execl(FLASHNORM_CLI, FLASHNORM_CLI, "fold", model.c_str(), "-o",
              (d / "out" / "o.gguf").c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    // late enough for the temporary to exist (the fold writes it after its checks)
    for (int i = 0; i < 400 && entries(d / "out").empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ::kill(pid, sig);
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(entries(d / "out").empty()) << strsignal(sig);
    fs::remove_all(d / "out");
    fs::create_directory(d / "out");
  }
}

// What the CLI prints must arrive: a full or closed standard output is an error, not exit 0.
TEST(CliOutputSafety, StandardOutputThatCannotBeWrittenIsAnError) {
  const fs::path d = testing::fresh_dir("cli_safety_stdout");
  testing::write_random_gguf(d / "in.gguf");
  for (const std::string redirect : {" > /dev/full", " >&-"}) {
    const std::string cmd = std::string(FLASHNORM_CLI) + " inspect " + (d / "in.gguf").string() +
                            redirect + " 2>" + (d / "err.txt").string();
    const int status = std::system(cmd.c_str());
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 1) << redirect;
    std::ifstream ef(d / "err.txt");
    const std::string err((std::istreambuf_iterator<char>(ef)), {});
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << redirect << ": " << err;
  }
}

}  // namespace
}  // namespace flashnorm
