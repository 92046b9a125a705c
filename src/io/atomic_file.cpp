#include "flashnorm/io/atomic_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cleanup.h"
#include "flashnorm/error.h"

namespace flashnorm::io {
namespace fs = std::filesystem;
namespace {

// Temporary files and staging directories in flight, removed by a handler of the terminating
// signals (SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGQUIT, SIGALRM, SIGUSR1/2, SIGXCPU, ...) so that an
// interrupted run leaves nothing behind (a SIGKILL cannot be caught). Fixed slots: the handler may
// only call async-signal-safe functions (unlink, open, close, the raw getdents64 system call,
// unlinkat, rmdir).
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
// Removes the directory open as `fd` (named `name` in `parent_fd`) with its files and, `depth`
// levels down, its folders. Async-signal-safe (system calls only).
void remove_dir_at(int parent_fd, const char* name, int depth) {
  const int fd = ::openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0) {
    alignas(8) char buf[4096];
    for (;;) {
      const long n = ::syscall(SYS_getdents64, fd, buf, sizeof buf);
      if (n <= 0) break;
      for (long off = 0; off < n;) {
        const auto* d = reinterpret_cast<const Dirent64*>(buf + off);
        const char* entry = d->d_name;
        const bool dot = entry[0] == '.' && (entry[1] == 0 || (entry[1] == '.' && entry[2] == 0));
        if (!dot && ::unlinkat(fd, entry, 0) != 0 && errno == EISDIR && depth > 0)
          remove_dir_at(fd, entry, depth - 1);
        off += d->d_reclen;
      }
    }
    ::close(fd);
  }
  ::unlinkat(parent_fd, name, AT_REMOVEDIR);
}

// A staging directory: its files and one level of folders (sentence-transformers' modules).
void remove_staging_dir(const char* dir) { remove_dir_at(AT_FDCWD, dir, 1); }

extern "C" void remove_temporaries(int sig) {
  detail::remove_registered_outputs();
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

int register_slot(const std::string& path, int kind) {
  static const bool installed = [] {
    // every catchable signal whose default action ends the process
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGQUIT, SIGALRM, SIGUSR1, SIGUSR2, SIGXCPU,
                    SIGVTALRM, SIGPROF}) {
      struct sigaction old {};
      if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) {
        std::signal(sig, remove_temporaries);
      }
    }
    // A file-size limit (ulimit -f): ignored, the write then fails with EFBIG and is reported as
    // one line, and the temporary is removed like after any other write error.
    struct sigaction old {};
    if (::sigaction(SIGXFSZ, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) {
      std::signal(SIGXFSZ, SIG_IGN);
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

// Holds back the terminating signals the cleanup handles (they stay pending, delivered when this
// ends), so that a file created under it is registered, or removed again, before any of them can
// end the process: without it a signal between creating a temporary (or the writability probe)
// and registering (or unlinking) it would leave the file behind.
class DeferSignals {
 public:
  DeferSignals() {
    sigset_t set;
    sigemptyset(&set);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGQUIT, SIGALRM, SIGUSR1, SIGUSR2, SIGXCPU,
                    SIGVTALRM, SIGPROF})
      sigaddset(&set, sig);
    ::pthread_sigmask(SIG_BLOCK, &set, &old_);
  }
  ~DeferSignals() { ::pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  DeferSignals(const DeferSignals&) = delete;
  DeferSignals& operator=(const DeferSignals&) = delete;

 private:
  sigset_t old_;
};

void unregister_temporary(int slot) {
  if (slot >= 0) g_tmp_used[slot] = 0;
}

// The directory an output path lives in ("." for a bare name).
fs::path directory_of(const fs::path& path) {
  return path.has_parent_path() ? path.parent_path() : fs::path(".");
}

// "<dir>/.fn-XXXXXXXXXXXX": a short (so any valid output name works) and unpredictable name
// (12 random characters from getrandom(2)) beside the output.
fs::path random_sibling(const fs::path& path) {
  static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  unsigned char r[12];
  if (::getrandom(r, sizeof r, 0) != static_cast<ssize_t>(sizeof r))
    throw Error(fmt::format("cannot create a temporary file for {}: getrandom failed: {}",
                            path.string(), std::strerror(errno)));
  std::string name = ".fn-";
  for (unsigned char c : r) name += kAlphabet[c % 36];
  return directory_of(path) / name;
}

// Creates a new temporary file beside `path` exclusively (O_CREAT | O_EXCL | O_NOFOLLOW: a file
// or link planted at the name is never opened or written through), mode 0600 until committed.
// Returns its descriptor and sets `tmp`. Errors: throws Error naming the output.
int create_temporary(const fs::path& path, fs::path& tmp) {
  for (int attempt = 0; attempt < 64; ++attempt) {
    tmp = random_sibling(path);
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0) return fd;
    if (errno != EEXIST)
      throw Error(fmt::format("cannot write {}: creating a temporary file in {} failed: {}",
                              path.string(), directory_of(path).string(), std::strerror(errno)));
  }
  throw Error(fmt::format("cannot write {}: no free temporary name in {}", path.string(),
                          directory_of(path).string()));
}

// The process's umask (read by setting it and setting it back).
mode_t current_umask() {
  const mode_t mask = ::umask(0);
  ::umask(mask);
  return mask;
}

// fsync of a directory, so that a rename inside it is durable.
void sync_directory(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

}  // namespace

namespace detail {

void remove_registered_outputs() noexcept {
  for (int i = 0; i < kSlots; ++i) {
    if (g_tmp_used[i] == 1) ::unlink(g_tmp_paths[i]);
  }
  for (int i = 0; i < kSlots; ++i) {  // after the files, which may lie inside the directories
    if (g_tmp_used[i] == 2) remove_staging_dir(g_tmp_paths[i]);
  }
}

}  // namespace detail

fs::path check_output_dir(const fs::path& path, std::span<const fs::path> inputs) {
  refuse_overwrite(path, inputs);
  // trailing separators dropped: "out/" names the directory "out"
  fs::path p = path.lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  if (p.empty() || p.filename() == "." || p.filename() == "..")
    throw Error(fmt::format("refusing to write the directory {}: give it a name", path.string()));
  std::error_code ec;
  if (fs::exists(p, ec) || fs::is_symlink(p, ec)) {
    if (!fs::is_directory(p, ec) || fs::is_symlink(p, ec))
      throw Error(
          fmt::format("refusing to write {}: it exists and is not a directory", p.string()));
    if (!fs::is_empty(p, ec))
      throw Error(
          fmt::format("refusing to write into {}: the directory exists and is not empty "
                      "(remove it or choose another path; nothing is replaced)",
                      p.string()));
  }
  const fs::path parent = directory_of(p);
  if (!fs::is_directory(parent, ec))
    throw Error(fmt::format("cannot write {}: the directory {} does not exist", p.string(),
                            parent.string()));
  // A temporary created and removed again proves the directory writable (read-only file
  // systems, permissions) before any work is done.
  fs::path probe;
  const DeferSignals defer;
  ::close(create_temporary(p, probe));
  ::unlink(probe.c_str());
  return p;
}

StagingDir::StagingDir(const fs::path& final_path, std::span<const fs::path> inputs)
    : final_(check_output_dir(final_path, inputs)) {
  const DeferSignals defer;  // created and registered before a signal can end the process
  for (int attempt = 0;; ++attempt) {
    work_ = random_sibling(final_);
    if (::mkdir(work_.c_str(), 0700) == 0) break;
    if (errno != EEXIST || attempt == 63)
      throw Error(fmt::format("cannot create {}: {}", work_.string(), std::strerror(errno)));
  }
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
  // the files inside are durable already (AtomicFile); the directory gets the umask's mode
  ::chmod(work_.c_str(), 0777 & ~current_umask());
  sync_directory(work_);
  // an empty directory at the final path (checked in the constructor) is replaced by rename(2)
  fs::rename(work_, final_, ec);
  if (ec) throw Error(fmt::format("rename to {} failed: {}", final_.string(), ec.message()));
  committed_ = true;
  sync_directory(directory_of(final_));
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

// check_output_file without the probe (AtomicFile creates its temporary right after).
static void check_output_file_path(const fs::path& path, std::span<const fs::path> inputs) {
  refuse_overwrite(path, inputs);
  std::error_code ec;
  if (fs::is_directory(path, ec))
    throw Error(fmt::format("refusing to write {}: it is a directory", path.string()));
  if (fs::exists(path, ec) && !fs::is_regular_file(path, ec))
    throw Error(
        fmt::format("refusing to write {}: it exists and is not a regular file", path.string()));
  if (!fs::is_directory(directory_of(path), ec))
    throw Error(fmt::format("cannot write {}: the directory {} does not exist", path.string(),
                            directory_of(path).string()));
}

void check_output_file(const fs::path& path, std::span<const fs::path> inputs) {
  check_output_file_path(path, inputs);
  fs::path probe;  // proves the directory writable (read-only file systems, permissions)
  const DeferSignals defer;
  ::close(create_temporary(path, probe));
  ::unlink(probe.c_str());
}

AtomicFile::AtomicFile(const fs::path& path, std::span<const fs::path> inputs) : path_(path) {
  check_output_file_path(path, inputs);
  const DeferSignals defer;  // created and registered before a signal can end the process
  const int fd = create_temporary(path, tmp_);
  f_ = ::fdopen(fd, "wb");
  if (!f_) {
    const int err = errno;
    ::close(fd);
    ::unlink(tmp_.c_str());
    throw Error(fmt::format("cannot write {}: {}", tmp_.string(), std::strerror(err)));
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
    throw Error(fmt::format("cannot write {}: {}", path_.string(), std::strerror(errno)));
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
  if (std::fflush(f_) != 0 || ::fchmod(::fileno(f_), 0666 & ~current_umask()) != 0 ||
      ::fsync(::fileno(f_)) != 0) {
    throw Error(fmt::format("cannot write {}: {}", path_.string(), std::strerror(errno)));
  }
  if (std::fclose(f_) != 0) {
    f_ = nullptr;
    throw Error(fmt::format("cannot write {}: {}", path_.string(), std::strerror(errno)));
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
  sync_directory(directory_of(path_));
}

}  // namespace flashnorm::io
