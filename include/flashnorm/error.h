// Error types shared by every part of flashnorm: readers, writers, the model, the engines, the CLI.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace flashnorm {

// Thrown for any input the library refuses: a malformed or hostile file, a shape that does not
// match, a model already folded. what() is one line, fit to print after "error: " on stderr.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

// Thrown for malformed files. The message names the file, the field and the byte offset:
//   "model.gguf: tensor_info[3].n_dims at byte 1234: 7 exceeds the GGUF maximum of 4"
class FormatError : public Error {
 public:
  FormatError(std::string_view file, std::string_view field, uint64_t offset,
              std::string_view what);
  const std::string& field() const { return field_; }
  uint64_t offset() const { return offset_; }

 private:
  std::string field_;
  uint64_t offset_;
};

}  // namespace flashnorm
