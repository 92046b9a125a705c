// Crash-safe output: every file flashnorm writes goes through a temporary sibling and a rename, and
// never replaces one of the tool's inputs.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <span>
#include <string>

namespace flashnorm::io {

// Checks that a file can be written at `path` before any work is done: not one of `inputs` (see
// refuse_overwrite), not a directory, device or FIFO, in an existing directory where a file can be
// created (a temporary is created and removed). Errors: throws flashnorm::Error naming the path.
// AtomicFile's constructor runs the same checks.
void check_output_file(const std::filesystem::path& path,
                       std::span<const std::filesystem::path> inputs = {});

// Checks that a new directory can be written at `path` (StagingDir's rules below; a temporary
// file is created and removed in its parent to prove it writable) and returns it normalized (no
// trailing separator). Errors: throws flashnorm::Error naming the path.
std::filesystem::path check_output_dir(const std::filesystem::path& path,
                                       std::span<const std::filesystem::path> inputs = {});

// A file written to a temporary "<dir>/.fn-XXXXXXXXXXXX" beside <path> and renamed onto <path> by
// commit(). The temporary is created exclusively (O_CREAT | O_EXCL | O_NOFOLLOW, 12 random
// characters, mode 0600 until commit), so a file or link planted in the directory is never
// written through, and its short name fits beside any valid output name. commit() gives it the
// umask's mode, fsyncs it, renames it and fsyncs the directory. If the object is destroyed without
// commit(), or the process gets SIGINT/SIGTERM/SIGHUP/SIGPIPE (or SIGBUS on a mapped input, see
// mapped_file.h), the temporary is removed and <path> is untouched. Errors: throws
// flashnorm::Error from check_output_file, or when the temporary cannot be created or written.
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

// A new output directory built in a staging directory "<parent>/.fn-XXXXXXXXXXXX" (path() while
// writing; created with mkdir, never reused) and renamed onto <path> by commit(); destroyed
// without commit(), or on SIGINT/SIGTERM/SIGHUP/SIGPIPE/SIGBUS, the staging directory and the
// files in it are removed. <path> must not exist or be an empty directory (an
// existing one with files is refused, so a failed or partial write never mixes with older files
// and nothing is replaced); its parent must exist (nothing else is created). A trailing separator
// is ignored. Files and folders of files may be written inside (what the signal handler removes).
// Errors: throws flashnorm::Error naming the path.
class StagingDir {
 public:
  explicit StagingDir(const std::filesystem::path& path,
                      std::span<const std::filesystem::path> inputs = {});
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
