#include "flashnorm/io/atomic_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <vector>

#include "flashnorm/io/error.h"

namespace flashnorm::io {
namespace fs = std::filesystem;
namespace {

// Temporary files and staging directories in flight, removed by a SIGINT/SIGTERM/SIGHUP/SIGPIPE
// handler so that an interrupted run leaves nothing behind (a SIGKILL cannot be caught). Fixed
// slots: the handler may only call async-signal-safe functions (unlink, open, close, the raw
// getdents64 system call, unlinkat, rmdir).
constexpr int kSlots = 16;
char g_tmp_paths[kSlots][4096];
volatile std::sig_atomic_t g_tmp_used[kSlots];  // 1: a file, 2: a directory of files

// Linux's getdents64 record (man 2 getdents).
struct Dirent64 {
  uint64_t d_ino;
  int64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[1];
};

// Unlinks the files directly inside `dir`, then the directory (staging directories hold files
// only). Async-signal-safe.
void remove_flat_dir(const char* dir) {
  const int fd = ::open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    alignas(8) char buf[4096];
    for (;;) {
      const long n = ::syscall(SYS_getdents64, fd, buf, sizeof buf);
      if (n <= 0) break;
      for (long off = 0; off < n;) {
        const auto* d = reinterpret_cast<const Dirent64*>(buf + off);
        const char* name = d->d_name;
        const bool dot = name[0] == '.' && (name[1] == 0 || (name[1] == '.' && name[2] == 0));
        if (!dot) ::unlinkat(fd, name, 0);
        off += d->d_reclen;
      }
    }
    ::close(fd);
  }
  ::rmdir(dir);
}

extern "C" void remove_temporaries(int sig) {
  for (int i = 0; i < kSlots; ++i) {
    if (g_tmp_used[i] == 1) ::unlink(g_tmp_paths[i]);
  }
  for (int i = 0; i < kSlots; ++i) {  // after the files, which may lie inside the directories
    if (g_tmp_used[i] == 2) remove_flat_dir(g_tmp_paths[i]);
  }
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

int register_slot(const std::string& path, int kind) {
  static const bool installed = [] {
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) {
      struct sigaction old {};
      if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) {
        std::signal(sig, remove_temporaries);
      }
    }
    return true;
  }();
  (void)installed;
  if (path.size() >= sizeof(g_tmp_paths[0])) return -1;
  for (int i = 0; i < kSlots; ++i) {
    if (!g_tmp_used[i]) {
      std::memcpy(g_tmp_paths[i], path.c_str(), path.size() + 1);
      g_tmp_used[i] = kind;
      return i;
    }
  }
  return -1;
}

int register_temporary(const std::string& path) { return register_slot(path, 1); }

void unregister_temporary(int slot) {
  if (slot >= 0) g_tmp_used[slot] = 0;
}

// "<path>.tmp-<pid>": where AtomicFile and StagingDir write before the rename.
fs::path temporary_sibling(const fs::path& path) {
  fs::path t = path;
  t += fmt::format(".tmp-{}", static_cast<long>(::getpid()));
  return t;
}

}  // namespace

StagingDir::StagingDir(const fs::path& final_path) : final_(final_path) {
  // trailing separators dropped: "out/" names the directory "out"
  fs::path p = final_path.lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  if (p.empty() || p.filename() == "." || p.filename() == "..")
    throw Error(
        fmt::format("refusing to write the directory {}: give it a name", final_path.string()));
  final_ = p;
  std::error_code ec;
  if (fs::exists(final_, ec) || fs::is_symlink(final_, ec)) {
    if (!fs::is_directory(final_, ec) || fs::is_symlink(final_, ec))
      throw Error(
          fmt::format("refusing to write {}: it exists and is not a directory", final_.string()));
    if (!fs::is_empty(final_, ec))
      throw Error(
          fmt::format("refusing to write into {}: the directory exists and is not empty "
                      "(remove it or choose another path; nothing is replaced)",
                      final_.string()));
  }
  const fs::path parent = final_.has_parent_path() ? final_.parent_path() : fs::path(".");
  if (!fs::is_directory(parent, ec))
    throw Error(fmt::format("cannot write {}: the directory {} does not exist", final_.string(),
                            parent.string()));
  work_ = temporary_sibling(final_);
  fs::remove_all(work_, ec);
  if (!fs::create_directory(work_, ec) || ec)
    throw Error(fmt::format("cannot create {}: {}", work_.string(),
                            ec ? ec.message() : std::string("it exists")));
  slot_ = register_slot(work_.string(), 2);
}

StagingDir::~StagingDir() {
  unregister_temporary(slot_);
  if (!committed_) {
    std::error_code ec;
    fs::remove_all(work_, ec);
  }
}

void StagingDir::commit() {
  std::error_code ec;
  // an empty directory at the final path (checked in the constructor) is replaced by rename(2)
  fs::rename(work_, final_, ec);
  if (ec) throw Error(fmt::format("rename to {} failed: {}", final_.string(), ec.message()));
  committed_ = true;
}

// True if `p` equals `dir` or lies anywhere below it (both made canonical, links resolved).
static bool inside(const fs::path& p, const fs::path& dir) {
  std::error_code ec;
  const fs::path cp = fs::weakly_canonical(p, ec), cd = fs::weakly_canonical(dir, ec);
  auto [d, _] = std::mismatch(cd.begin(), cd.end(), cp.begin(), cp.end());
  return d == cd.end();
}

void refuse_overwrite(const fs::path& out, std::span<const fs::path> inputs) {
  std::error_code ec;
  if (out.empty()) throw Error("refusing to write: the output path is empty");
  for (const auto& in : inputs) {
    if (fs::exists(out, ec) && fs::exists(in, ec) && fs::equivalent(out, in, ec)) {
      throw Error(
          fmt::format("refusing to write {}: it is the input {}", out.string(), in.string()));
    }
    if (!fs::is_directory(in, ec)) continue;
    // Writing anywhere inside an input directory could overwrite part of the input.
    if (inside(out, in)) {
      throw Error(fmt::format("refusing to write {}: it is inside the input directory {}",
                              out.string(), in.string()));
    }
    // Files of the input directory may be links into the output's directory (as in a Hugging
    // Face cache); writing there would replace them.
    const fs::path out_dir = fs::is_directory(out, ec) ? out : out.parent_path();
    if (out_dir.empty() || !fs::exists(out_dir, ec)) continue;
    const fs::path canon_out_dir = fs::weakly_canonical(out_dir, ec);
    for (const auto& e : fs::directory_iterator(in, ec)) {
      const fs::path target = fs::weakly_canonical(e.path(), ec);
      if (target.parent_path() == canon_out_dir) {
        throw Error(fmt::format("refusing to write into {}: the input file {} lives there",
                                out_dir.string(), e.path().string()));
      }
    }
  }
}

AtomicFile::AtomicFile(const fs::path& path, std::span<const fs::path> inputs) : path_(path) {
  refuse_overwrite(path, inputs);
  std::error_code ec;
  if (fs::exists(path, ec) && !fs::is_regular_file(path, ec)) {
    throw Error(
        fmt::format("refusing to write {}: it exists and is not a regular file", path.string()));
  }
  tmp_ = temporary_sibling(path);
  f_ = std::fopen(tmp_.c_str(), "wb");
  if (!f_) {
    throw Error(fmt::format("cannot create {}: {}", tmp_.string(), std::strerror(errno)));
  }
  slot_ = register_temporary(tmp_.string());
}

AtomicFile::~AtomicFile() {
  unregister_temporary(slot_);
  if (f_) {
    std::fclose(f_);
    std::error_code ec;
    fs::remove(tmp_, ec);
  }
}

void AtomicFile::write(const void* data, size_t n) {
  if (n && std::fwrite(data, 1, n, f_) != n) {
    throw Error(fmt::format("write to {} failed: {}", tmp_.string(), std::strerror(errno)));
  }
  pos_ += n;
}

void AtomicFile::write_zeros(size_t n) {
  static const std::vector<char> zeros(4096, 0);
  while (n) {
    size_t k = std::min(n, zeros.size());
    write(zeros.data(), k);
    n -= k;
  }
}

void AtomicFile::commit() {
  if (std::fflush(f_) != 0 || ::fsync(::fileno(f_)) != 0) {
    throw Error(fmt::format("flush of {} failed: {}", tmp_.string(), std::strerror(errno)));
  }
  if (std::fclose(f_) != 0) {
    f_ = nullptr;
    throw Error(fmt::format("close of {} failed: {}", tmp_.string(), std::strerror(errno)));
  }
  f_ = nullptr;
  std::error_code ec, ignored;
  fs::rename(tmp_, path_, ec);
  unregister_temporary(slot_);
  slot_ = -1;
  if (ec) {
    fs::remove(tmp_, ignored);
    throw Error(fmt::format("rename to {} failed: {}", path_.string(), ec.message()));
  }
}

}  // namespace flashnorm::io
