// Small text files that sit beside a model (config.json, tokenizer.json, tokenizer_config.json,
// chat_template.jinja, safetensors indexes): read whole, after checking that they are regular
// files of a sane size, so that a directory, a FIFO or a device named like one is refused rather
// than read forever or mapped.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace flashnorm::io {

// Largest side file read: 256 MiB (a 262k-token tokenizer.json is about 33 MB).
inline constexpr uint64_t kMaxSideFileBytes = 256ull << 20;

// The bytes of `path`; std::nullopt when nothing exists there. Errors: throws flashnorm::Error
// (one line naming the path) for something that is not a regular file, a file over
// kMaxSideFileBytes, or a failed open/read.
std::optional<std::string> read_side_file(const std::filesystem::path& path);

}  // namespace flashnorm::io
