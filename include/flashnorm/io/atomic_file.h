// Crash-safe output: every file flashnorm writes goes through a temporary sibling and a rename, and
// never replaces one of the tool's inputs.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <span>
#include <string>

namespace flashnorm::io {

// A file written to "<path>.tmp-<pid>" and renamed onto <path> by commit(). If the object is
// destroyed without commit(), or the process gets SIGINT/SIGTERM/SIGHUP, the temporary is removed
// and <path> is untouched. An existing <path> that is not a regular file (a device, a FIFO) is
// refused.
// Errors: throws flashnorm::Error when the temporary cannot be created or written, or when <path>
// is the same file as one given in `inputs` (an input is never overwritten).
class AtomicFile {
 public:
  explicit AtomicFile(const std::filesystem::path& path,
                      std::span<const std::filesystem::path> inputs = {});
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();

  void write(const void* data, size_t n);
  void write_zeros(size_t n);
  uint64_t position() const { return pos_; }
  // fsyncs, closes and renames the temporary onto the final path.
  void commit();

 private:
  std::filesystem::path path_, tmp_;
  std::FILE* f_ = nullptr;
  uint64_t pos_ = 0;
  int slot_ = -1;  // registration for removal on a signal
};

// Throws flashnorm::Error if `out` refers to the same file (or, for directories, the same
// directory) as any of `inputs`, including through links.
void refuse_overwrite(const std::filesystem::path& out,
                      std::span<const std::filesystem::path> inputs);

}  // namespace flashnorm::io
