#include "flashnorm/io/atomic_file.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "flashnorm/io/error.h"

namespace flashnorm::io {
namespace fs = std::filesystem;

void refuse_overwrite(const fs::path& out, std::span<const fs::path> inputs) {
  std::error_code ec;
  for (const auto& in : inputs) {
    if (fs::exists(out, ec) && fs::exists(in, ec) && fs::equivalent(out, in, ec)) {
      throw Error(fmt::format("refusing to write {}: it is the input {}", out.string(), in.string()));
    }
    // Writing inside an input directory would also overwrite part of the input.
    if (fs::is_directory(in, ec)) {
      fs::path parent = fs::weakly_canonical(out, ec).parent_path();
      if (fs::exists(parent, ec) && fs::equivalent(parent, in, ec)) {
        throw Error(fmt::format("refusing to write {}: it is inside the input directory {}",
                                out.string(), in.string()));
      }
    }
  }
}

AtomicFile::AtomicFile(const fs::path& path, std::span<const fs::path> inputs) : path_(path) {
  refuse_overwrite(path, inputs);
  tmp_ = path;
  tmp_ += fmt::format(".tmp-{}", static_cast<long>(::getpid()));
  f_ = std::fopen(tmp_.c_str(), "wb");
  if (!f_) {
    throw Error(fmt::format("cannot create {}: {}", tmp_.string(), std::strerror(errno)));
  }
}

AtomicFile::~AtomicFile() {
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
  std::error_code ec;
  fs::rename(tmp_, path_, ec);
  if (ec) {
    fs::remove(tmp_, ec);
    throw Error(fmt::format("rename to {} failed: {}", path_.string(), ec.message()));
  }
}

}  // namespace flashnorm::io
