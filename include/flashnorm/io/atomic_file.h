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
// destroyed without commit(), or the process gets SIGINT/SIGTERM/SIGHUP/SIGPIPE, the temporary is
// removed and <path> is untouched. An existing <path> that is not a regular file (a device, a FIFO)
// is refused. Errors: throws flashnorm::Error when the temporary cannot be created or written, or
// when <path> is the same file as one given in `inputs` (an input is never overwritten).
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

// A new output directory built under "<path>.tmp-<pid>" (path() while writing) and renamed onto
// <path> by commit(); destroyed without commit(), or on SIGINT/SIGTERM/SIGHUP/SIGPIPE, the staging
// directory and the files in it are removed. <path> must not exist or be an empty directory (an
// existing one with files is refused, so a failed or partial write never mixes with older files
// and nothing is replaced); its parent must exist (nothing else is created). A trailing separator
// is ignored. Only files may be written inside (the signal handler removes a flat directory).
// Errors: throws flashnorm::Error naming the path.
class StagingDir {
 public:
  explicit StagingDir(const std::filesystem::path& path);
  StagingDir(const StagingDir&) = delete;
  StagingDir& operator=(const StagingDir&) = delete;
  ~StagingDir();
  const std::filesystem::path& path() const { return work_; }
  const std::filesystem::path& final_path() const { return final_; }
  void commit();

 private:
  std::filesystem::path final_, work_;
  int slot_ = -1;
  bool committed_ = false;
};

// Throws flashnorm::Error if `out` refers to the same file (or, for directories, the same
// directory) as any of `inputs`, including through links.
void refuse_overwrite(const std::filesystem::path& out,
                      std::span<const std::filesystem::path> inputs);

}  // namespace flashnorm::io
