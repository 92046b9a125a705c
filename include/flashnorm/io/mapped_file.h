// A read-only memory mapping of an input file, guarded against the file shrinking under it.
//
// Reading a page of a mapping whose file was truncated (or whose device failed) raises SIGBUS,
// which by default kills the process with no message. Every MappedFile registers its address
// range with one process-wide SIGBUS handler; a fault inside a registered range prints one line
//   "error: <file>: the file shrank or became unreadable while being read (byte <offset>)"
// to stderr, removes the temporaries and staging directories of io::AtomicFile / StagingDir
// (nothing partial is left), and exits with status 1. A SIGBUS anywhere else keeps the default
// action. Source: mmap(2) ("SIGBUS: attempted access to a page of the buffer that lies beyond
// the end of the mapped file"), sigaction(2) SA_SIGINFO si_addr.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>

namespace flashnorm::io {

class MappedFile {
 public:
  // Opens `path` read-only (O_NONBLOCK, so a FIFO cannot block) and maps it whole. Errors: throws
  // flashnorm::Error naming the file when it cannot be opened, is not a regular file, or cannot
  // be mapped. An empty file gives an empty bytes().
  static MappedFile open(const std::filesystem::path& path);

  MappedFile() = default;
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  // The file's bytes, valid while this object lives.
  std::span<const uint8_t> bytes() const { return {static_cast<const uint8_t*>(addr_), size_}; }
  const std::string& name() const { return name_; }

 private:
  void release();
  void* addr_ = nullptr;
  size_t size_ = 0;
  int slot_ = -1;  // registration with the SIGBUS handler
  std::string name_;
};

}  // namespace flashnorm::io
