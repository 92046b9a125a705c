#include "flashnorm/error.h"

#include <fmt/format.h>

namespace flashnorm {

FormatError::FormatError(std::string_view file, std::string_view field, uint64_t offset,
                         std::string_view what)
    : Error(fmt::format("{}: {} at byte {}: {}", file, field, offset, what)),
      field_(field),
      offset_(offset) {}

}  // namespace flashnorm
