// Mapped inputs (include/flashnorm/io/mapped_file.h): a file that shrinks while it is mapped ends
// the process with one line naming the file and exit status 1 (not a silent SIGBUS), removing
// the outputs in flight. Checked in forked children (GoogleTest death tests).
#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>

#include "flashnorm/error.h"
#include "flashnorm/io/atomic_file.h"
#include "flashnorm/io/gguf.h"
#include "flashnorm/io/mapped_file.h"
#include "support/random_llama.h"

namespace fs = std::filesystem;
using flashnorm::io::AtomicFile;
using flashnorm::io::GgufFile;
using flashnorm::io::MappedFile;

namespace {

// A fresh directory for one test, shared by the test and its death-test child: the "threadsafe"
// style re-executes the binary and runs the test body again in the child, which must use the
// parent's directory (keyed by the parent's pid, handed down in the environment) for the parent's
// checks to see what the child left there. Removed when the parent exits.
fs::path dir_for(const char* name) {
  const std::string own = std::to_string(static_cast<long>(::getpid()));
  const char* env = std::getenv("FLASHNORM_TEST_PARENT_PID");
  const std::string key = env ? env : own;
  if (!env) ::setenv("FLASHNORM_TEST_PARENT_PID", own.c_str(), 1);
  const fs::path d =
      fs::path(::testing::TempDir()) / ("flashnorm-mf_" + std::string(name) + "-" + key);
  fs::remove_all(d);
  fs::create_directories(d);
  if (key == own) flashnorm::testing::remove_at_exit(d);  // the parent's, not a child's
  return d;
}

void write_bytes(const fs::path& p, size_t n) {
  std::ofstream f(p, std::ios::binary);
  std::string s(n, 'a');
  f.write(s.data(), static_cast<std::streamsize>(s.size()));
}

// Reads every page of `bytes` (volatile: the reads cannot be optimized away).
int touch(std::span<const uint8_t> bytes) {
  volatile int sum = 0;
  for (size_t i = 0; i < bytes.size(); i += 4096) sum = sum + bytes[i];
  return sum;
}

}  // namespace

TEST(MappedFileDeathTest, ReadsTheWholeFileWhenNothingChanges) {
  const fs::path d = dir_for("ok");
  write_bytes(d / "in.bin", 1 << 16);
  MappedFile m = MappedFile::open(d / "in.bin");
  EXPECT_EQ(m.bytes().size(), 1u << 16);
  EXPECT_EQ(touch(m.bytes()), 16 * 'a');
}

TEST(MappedFileDeathTest, TruncatedWhileMappedIsOneLineAndExitOne) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const fs::path d = dir_for("trunc");
  write_bytes(d / "in.bin", 1 << 20);
  EXPECT_EXIT(
      {
        MappedFile m = MappedFile::open(d / "in.bin");
        fs::resize_file(d / "in.bin", 4096);
        touch(m.bytes());
        std::exit(0);  // not reached: the read past the new end faults
      },
      ::testing::ExitedWithCode(1),
      "^error: .*in\\.bin: the file shrank or became unreadable while being read \\(byte [0-9]+\\)"
      "; nothing was written\n$");
}

TEST(MappedFileDeathTest, TruncatedGgufRemovesTheOutputInFlight) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const fs::path d = dir_for("gguf");
  flashnorm::testing::write_random_gguf(d / "in.gguf");
  EXPECT_EXIT(
      {
        GgufFile f = GgufFile::open(d / "in.gguf");
        AtomicFile out(d / "out.gguf");
        out.write("partial", 7);
        fs::resize_file(d / "in.gguf", f.data_offset());  // the header stays, the data goes
        for (const auto& t : f.tensors()) touch(f.tensor_data(t));
        std::exit(0);
      },
      ::testing::ExitedWithCode(1), "in\\.gguf: the file shrank");
  // the child's temporary is gone, and no output appeared
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(d)) names.push_back(e.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"in.gguf"});
}

TEST(MappedFileDeathTest, ASigbusOutsideAnyInputKeepsTheDefaultAction) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "under ASan the previous action is ASan's own SIGBUS report";
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  GTEST_SKIP() << "under ASan the previous action is ASan's own SIGBUS report";
#endif
#endif
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const fs::path d = dir_for("other");
  write_bytes(d / "in.bin", 4096);
  EXPECT_EXIT(
      {
        MappedFile m = MappedFile::open(d / "in.bin");  // installs the handler
        std::raise(SIGBUS);
      },
      ::testing::KilledBySignal(SIGBUS), "");
}

TEST(MappedFileDeathTest, RefusesWhatIsNotARegularFile) {
  EXPECT_THROW(MappedFile::open("/dev/null"), flashnorm::Error);
  EXPECT_THROW(MappedFile::open("/nonexistent/x"), flashnorm::Error);
  EXPECT_THROW(MappedFile::open("/tmp"), flashnorm::Error);
}
