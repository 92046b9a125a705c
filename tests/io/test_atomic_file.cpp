// Crash-safe outputs (include/flashnorm/io/atomic_file.h): AtomicFile and StagingDir leave either
// the complete output or nothing, never replace an input or an existing directory's files, and
// clean up after SIGINT/SIGTERM/SIGHUP/SIGPIPE (checked in forked children that signal themselves
// in the middle of a write).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "flashnorm/error.h"
#include "flashnorm/io/atomic_file.h"
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

// A signal in the middle of a write removes the staging directory with the files already in it,
// its folders of files (sentence-transformers' modules) and an AtomicFile's temporary in one of
// them, then ends the process with that signal.
TEST(StagingDir, SignalsRemoveTheStagingDirectory) {
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) {
    TempDir t;
    const fs::path out = t.path / "out";
    const int got = signal_of_child([&] {
      StagingDir d(out);
      write_file(d.path() / "model-00001-of-00002.safetensors", "done shard");
      fs::create_directory(d.path() / "1_Pooling");
      fs::create_directory(d.path() / "2_Dense");
      write_file(d.path() / "1_Pooling" / "config.json", "{}");
      AtomicFile f(d.path() / "2_Dense" / "model.safetensors");
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

namespace {

// sha256 of a file through coreutils' sha256sum (an outside reference, not our code).
std::string sha256(const fs::path& p) {
  std::string cmd = "sha256sum '" + p.string() + "'";
  std::FILE* f = ::popen(cmd.c_str(), "r");
  char buf[65] = {};
  const size_t n = f ? std::fread(buf, 1, 64, f) : 0;
  if (f) ::pclose(f);
  return std::string(buf, n);
}

// The name the old writer used for its temporary ("<path>.tmp-<pid>"): a link planted there was
// written through. The temporary is now created exclusively under a random name, so neither a
// symbolic nor a hard link at any name beside the output is ever opened.
fs::path old_temporary_name(const fs::path& out) {
  return fs::path(out.string() + ".tmp-" + std::to_string(::getpid()));
}

}  // namespace

TEST(AtomicFile, PlantedSymlinkAtATemporaryNameIsNotWrittenThrough) {
  TempDir t;
  write_file(t.path / "victim", std::string(10000, 'v'));
  const std::string before = sha256(t.path / "victim");
  ASSERT_EQ(before.size(), 64u);
  const fs::path out = t.path / "out.gguf";
  fs::create_symlink(t.path / "victim", old_temporary_name(out));
  {
    AtomicFile f(out);
    f.write("new contents", 12);
    f.commit();
  }
  EXPECT_EQ(sha256(t.path / "victim"), before);
  EXPECT_FALSE(fs::is_symlink(out));
  EXPECT_EQ(read_file(out), "new contents");
}

TEST(AtomicFile, PlantedHardLinkAtATemporaryNameIsNotWrittenThrough) {
  TempDir t;
  write_file(t.path / "input.gguf", std::string(10000, 'i'));
  const std::string before = sha256(t.path / "input.gguf");
  const fs::path out = t.path / "out.gguf";
  fs::create_hard_link(t.path / "input.gguf", old_temporary_name(out));
  {
    const fs::path inputs[] = {t.path / "input.gguf"};
    AtomicFile f(out, inputs);
    f.write("new contents", 12);
    f.commit();
  }
  EXPECT_EQ(sha256(t.path / "input.gguf"), before);
  EXPECT_EQ(fs::hard_link_count(t.path / "input.gguf"), 2u);  // the planted link, untouched
  EXPECT_EQ(read_file(out), "new contents");
}

TEST(AtomicFile, TemporaryIsPrivateUntilCommitAndTheResultTakesTheUmask) {
  TempDir t;
  const mode_t old = ::umask(022);
  {
    AtomicFile f(t.path / "r.json");
    f.write("x", 1);
    // the one entry in the directory is the temporary, readable by its owner only
    const auto names = entries(t.path);
    ASSERT_EQ(names.size(), 1u);
    EXPECT_EQ(fs::status(t.path / names[0]).permissions() & fs::perms::all,
              fs::perms::owner_read | fs::perms::owner_write);
    f.commit();
  }
  ::umask(old);
  EXPECT_EQ(fs::status(t.path / "r.json").permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                fs::perms::others_read);
}

// The longest valid name (NAME_MAX = 255) still works: the temporary's name does not grow with it.
TEST(AtomicFile, LongestValidOutputNameWorks) {
  TempDir t;
  const fs::path out = t.path / std::string(255, 'n');
  AtomicFile f(out);
  f.write("x", 1);
  f.commit();
  EXPECT_EQ(read_file(out), "x");
}

TEST(StagingDir, LongestValidOutputNameWorks) {
  TempDir t;
  const fs::path out = t.path / std::string(255, 'd');
  StagingDir d(out);
  write_file(d.path() / "a", "A");
  d.commit();
  EXPECT_EQ(read_file(out / "a"), "A");
}

// The old staging name ("<path>.tmp-<pid>") was emptied with remove_all before use: a directory
// planted there lost its files. The staging directory is now new and random.
TEST(StagingDir, PlantedDirectoryAtATemporaryNameKeepsItsFiles) {
  TempDir t;
  const fs::path out = t.path / "out";
  fs::create_directory(old_temporary_name(out));
  write_file(old_temporary_name(out) / "precious", "p");
  {
    StagingDir d(out);
    write_file(d.path() / "a", "A");
    d.commit();
  }
  EXPECT_EQ(read_file(old_temporary_name(out) / "precious"), "p");
  EXPECT_EQ(read_file(out / "a"), "A");
}

TEST(CheckOutput, RefusesDirectoriesDevicesMissingParentsAndInputsBeforeAnyWork) {
  TempDir t;
  using flashnorm::io::check_output_dir;
  using flashnorm::io::check_output_file;
  write_file(t.path / "in.gguf", "in");
  const fs::path inputs[] = {t.path / "in.gguf"};
  EXPECT_THROW(check_output_file(t.path, inputs), Error);                    // a directory
  EXPECT_THROW(check_output_file("/dev/null", inputs), Error);               // a device
  EXPECT_THROW(check_output_file(t.path / "no" / "x.gguf", inputs), Error);  // no parent
  EXPECT_THROW(check_output_file(t.path / "in.gguf", inputs), Error);        // the input
  EXPECT_THROW(check_output_file("/proc/x.gguf", inputs), Error);            // cannot be created
  EXPECT_THROW(check_output_dir("/proc/out", inputs), Error);
  EXPECT_NO_THROW(check_output_file(t.path / "ok.gguf", inputs));
  EXPECT_NO_THROW(check_output_dir(t.path / "ok", inputs));
  // the checks leave nothing behind
  EXPECT_EQ(entries(t.path), std::vector<std::string>{"in.gguf"});
}
