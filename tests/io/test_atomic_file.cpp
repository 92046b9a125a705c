// Crash-safe outputs (include/flashnorm/io/atomic_file.h): AtomicFile and StagingDir leave either
// the complete output or nothing, never replace an input or an existing directory's files, and
// clean up after SIGINT/SIGTERM/SIGHUP/SIGPIPE (checked in forked children that signal themselves
// in the middle of a write).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>

#include "flashnorm/io/atomic_file.h"
#include "flashnorm/io/error.h"
#include "support/random_llama.h"

namespace fs = std::filesystem;
using flashnorm::Error;
using flashnorm::io::AtomicFile;
using flashnorm::io::StagingDir;

namespace {

// A fresh empty directory for the running test (removed again by the next run of the test).
struct TempDir {
  fs::path path = flashnorm::testing::fresh_dir(
      std::string("af_") + ::testing::UnitTest::GetInstance()->current_test_info()->name());
};

void write_file(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Entries of `dir` (names), for "nothing was left behind".
std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> v;
  for (const auto& e : fs::directory_iterator(dir)) v.push_back(e.path().filename().string());
  std::sort(v.begin(), v.end());
  return v;
}

// Runs `body` in a forked child and returns the signal that ended it (0 if it exited).
template <class F>
int signal_of_child(F body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    body();
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFSIGNALED(status) ? WTERMSIG(status) : 0;
}

}  // namespace

TEST(StagingDir, CommitRenamesTheCompleteDirectory) {
  TempDir t;
  {
    StagingDir d(t.path / "out");
    EXPECT_NE(d.path(), t.path / "out");
    EXPECT_FALSE(fs::exists(t.path / "out"));
    write_file(d.path() / "a.txt", "A");
    d.commit();
  }
  EXPECT_EQ(read_file(t.path / "out" / "a.txt"), "A");
  EXPECT_EQ(entries(t.path), std::vector<std::string>{"out"});
}

TEST(StagingDir, DestroyedWithoutCommitLeavesNothing) {
  TempDir t;
  {
    StagingDir d(t.path / "out");
    write_file(d.path() / "a.txt", "A");
  }
  EXPECT_TRUE(entries(t.path).empty());
}

TEST(StagingDir, RefusesAnExistingDirectoryWithFilesAndLeavesItAlone) {
  TempDir t;
  fs::create_directories(t.path / "out");
  write_file(t.path / "out" / "model.safetensors", "old");
  EXPECT_THROW(StagingDir(t.path / "out"), Error);
  EXPECT_THROW(StagingDir(t.path / "out/"), Error);
  EXPECT_EQ(read_file(t.path / "out" / "model.safetensors"), "old");
  EXPECT_EQ(entries(t.path), std::vector<std::string>{"out"});
  // a file, or a link, where the directory should go
  write_file(t.path / "f", "x");
  EXPECT_THROW(StagingDir(t.path / "f"), Error);
  fs::create_directory_symlink(t.path / "out", t.path / "link");
  EXPECT_THROW(StagingDir(t.path / "link"), Error);
}

TEST(StagingDir, ReplacesAnEmptyDirectoryAndIgnoresATrailingSeparator) {
  TempDir t;
  fs::create_directories(t.path / "empty");
  {
    StagingDir d(t.path / "empty");
    write_file(d.path() / "a.txt", "A");
    d.commit();
  }
  EXPECT_EQ(read_file(t.path / "empty" / "a.txt"), "A");
  {
    StagingDir d((t.path / "new").string() + "/");
    EXPECT_EQ(d.final_path(), t.path / "new");
    write_file(d.path() / "b.txt", "B");
    d.commit();
  }
  EXPECT_EQ(read_file(t.path / "new" / "b.txt"), "B");
}

TEST(StagingDir, MissingParentIsRefusedWithoutCreatingIt) {
  TempDir t;
  EXPECT_THROW(StagingDir(t.path / "a" / "b" / "out"), Error);
  EXPECT_TRUE(entries(t.path).empty());
}

// A signal in the middle of a write removes the staging directory with the files already in it
// (and an AtomicFile's temporary), then ends the process with that signal.
TEST(StagingDir, SignalsRemoveTheStagingDirectory) {
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) {
    TempDir t;
    const fs::path out = t.path / "out";
    const int got = signal_of_child([&] {
      StagingDir d(out);
      write_file(d.path() / "model-00001-of-00002.safetensors", "done shard");
      AtomicFile f(d.path() / "model-00002-of-00002.safetensors");
      f.write("partial", 7);
      std::raise(sig);
    });
    EXPECT_EQ(got, sig) << strsignal(sig);
    EXPECT_TRUE(entries(t.path).empty()) << strsignal(sig) << ": " << entries(t.path).size();
  }
}

TEST(AtomicFile, SignalRemovesTheTemporaryAndKeepsTheOldFile) {
  for (int sig : {SIGTERM, SIGPIPE}) {
    TempDir t;
    write_file(t.path / "r.json", "old");
    const int got = signal_of_child([&] {
      AtomicFile f(t.path / "r.json");
      f.write("new", 3);
      std::raise(sig);
    });
    EXPECT_EQ(got, sig);
    EXPECT_EQ(entries(t.path), std::vector<std::string>{"r.json"});
    EXPECT_EQ(read_file(t.path / "r.json"), "old");
  }
}
