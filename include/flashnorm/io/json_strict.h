// Strict JSON parsing for every JSON flashnorm reads from outside (safetensors headers, Hugging
// Face config and index files, server request bodies, `generate --messages` files): nlohmann::json
// with a parser callback that refuses what the plain parser would accept silently or expensively.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

namespace flashnorm::io {

// Parses `text` as JSON into an ordered_json (object keys keep their order). Refused, each with a
// FormatError(file, "json", offset, reason): a syntax error (offset = base + the position
// nlohmann reports), a number out of double's range, a duplicate object key at any depth
// (nlohmann would keep the last value; offset = base + the key's second occurrence, found by
// searching the text, base if not found) and nesting deeper than 64 levels (refused as it is
// reached, before a deep value costs memory or recursion). `base` is the byte offset of text[0]
// in `file`.
nlohmann::ordered_json parse_json_strict(std::string_view text, std::string_view file,
                                         uint64_t base);

}  // namespace flashnorm::io
