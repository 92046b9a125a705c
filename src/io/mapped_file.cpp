#include "flashnorm/io/mapped_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <mutex>

#include "cleanup.h"
#include "flashnorm/error.h"

namespace flashnorm::io {
namespace {

// Mapped ranges the SIGBUS handler knows. Fixed slots, written before `begin` is published, so
// the handler (which may only read them and call async-signal-safe functions) sees whole entries.
constexpr int kSlots = 64;
struct Slot {
  std::atomic<uintptr_t> begin{0};  // 0: free
  size_t size = 0;
  char name[1024] = {};
};
Slot g_slots[kSlots];
std::mutex g_register_mutex;
struct sigaction g_previous {};

// Writes a NUL-terminated string or a decimal number to stderr (async-signal-safe).
void put(const char* s) {
  size_t n = std::strlen(s);
  while (n) {
    const ssize_t w = ::write(STDERR_FILENO, s, n);
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}
void put(uint64_t v) {
  char buf[24];
  int i = sizeof buf - 1;
  buf[i] = 0;
  do {
    buf[--i] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v && i > 0);
  put(buf + i);
}

extern "C" void on_sigbus(int sig, siginfo_t* info, void* ctx) {
  const auto addr = reinterpret_cast<uintptr_t>(info ? info->si_addr : nullptr);
  for (const Slot& s : g_slots) {
    const uintptr_t b = s.begin.load(std::memory_order_acquire);
    if (b && addr >= b && addr - b < s.size) {
      put("error: ");
      put(s.name);
      put(": the file shrank or became unreadable while being read (byte ");
      put(static_cast<uint64_t>(addr - b));
      put("); nothing was written\n");
      detail::remove_registered_outputs();
      ::_exit(1);
    }
  }
  // Not one of our inputs: the fault is someone else's; take the previous action.
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction) return g_previous.sa_sigaction(sig, info, ctx);
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    return g_previous.sa_handler(sig);
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

int register_range(const void* addr, size_t size, const std::string& name) {
  std::lock_guard lock(g_register_mutex);
  static const bool installed = [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    return ::sigaction(SIGBUS, &sa, &g_previous) == 0;
  }();
  if (!installed) return -1;
  for (int i = 0; i < kSlots; ++i) {
    Slot& s = g_slots[i];
    if (s.begin.load(std::memory_order_relaxed) == 0) {
      s.size = size;
      const size_t n = std::min(name.size(), sizeof s.name - 1);
      std::memcpy(s.name, name.data(), n);
      s.name[n] = 0;
      s.begin.store(reinterpret_cast<uintptr_t>(addr), std::memory_order_release);
      return i;
    }
  }
  return -1;  // more than kSlots inputs mapped at once: this one keeps the default action
}

void unregister_range(int slot) {
  if (slot >= 0) g_slots[slot].begin.store(0, std::memory_order_release);
}

}  // namespace

MappedFile MappedFile::open(const std::filesystem::path& path) {
  MappedFile m;
  m.name_ = path.string();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw Error(fmt::format("cannot open {}: {}", m.name_, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw Error(fmt::format("cannot read {}: {}", m.name_, std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(fmt::format("cannot read {}: not a regular file", m.name_));
  }
  const auto size = static_cast<size_t>(st.st_size);
  if (size > 0) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      throw Error(fmt::format("cannot map {}: {}", m.name_, std::strerror(err)));
    }
    m.addr_ = p;
    m.size_ = size;
    m.slot_ = register_range(p, size, m.name_);
  }
  ::close(fd);
  return m;
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : addr_(o.addr_), size_(o.size_), slot_(o.slot_), name_(std::move(o.name_)) {
  o.addr_ = nullptr;
  o.size_ = 0;
  o.slot_ = -1;
}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    release();
    addr_ = o.addr_;
    size_ = o.size_;
    slot_ = o.slot_;
    name_ = std::move(o.name_);
    o.addr_ = nullptr;
    o.size_ = 0;
    o.slot_ = -1;
  }
  return *this;
}

MappedFile::~MappedFile() { release(); }

void MappedFile::release() {
  unregister_range(slot_);
  slot_ = -1;
  if (addr_) ::munmap(addr_, size_);
  addr_ = nullptr;
  size_ = 0;
}

}  // namespace flashnorm::io
