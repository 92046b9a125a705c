// Side files beside a model; see include/flashnorm/io/side_file.h.
#include "flashnorm/io/side_file.h"

#include <fmt/format.h>

#include <fstream>

#include "flashnorm/error.h"

namespace flashnorm::io {

std::optional<std::string> read_side_file(const std::filesystem::path& p) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(p, ec);
  if (!fs::exists(st)) return std::nullopt;
  if (!fs::is_regular_file(st)) throw Error(fmt::format("{}: not a regular file", p.string()));
  const uintmax_t size = fs::file_size(p, ec);
  if (ec) throw Error(fmt::format("{}: cannot read its size", p.string()));
  if (size > kMaxSideFileBytes) {
    throw Error(fmt::format("{}: {} bytes, more than the {} MiB a side file may have", p.string(),
                            size, kMaxSideFileBytes >> 20));
  }
  std::ifstream in(p, std::ios::binary);
  if (!in) throw Error(fmt::format("{}: cannot open", p.string()));
  std::string out(static_cast<size_t>(size), '\0');
  if (!in.read(out.data(), static_cast<std::streamsize>(size)) ||
      in.gcount() != std::streamsize(size)) {
    throw Error(fmt::format("{}: read error", p.string()));
  }
  return out;
}

}  // namespace flashnorm::io
