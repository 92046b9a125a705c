// Strict JSON parsing (include/flashnorm/io/json_strict.h): nlohmann::json with a parser callback
// that rejects duplicate object keys and deep nesting, errors mapped to FormatError; and the
// safetensors reader's JSON helpers (internal.h).
#include <fmt/format.h>

#include <set>

#include "flashnorm/error.h"
#include "internal.h"

namespace flashnorm::io::st_detail {
namespace {

struct DuplicateKey {
  std::vector<std::string> path;  // keys of the enclosing objects, outermost first
  std::string key;
};

// Strips nlohmann's "[json.exception.parse_error.101] " prefix from a message.
std::string_view strip_prefix(std::string_view what) {
  if (!what.empty() && what.front() == '[') {
    size_t close = what.find("] ");
    if (close != std::string_view::npos) what.remove_prefix(close + 2);
  }
  return what;
}

// Position of the `"key"` token followed by optional whitespace and ':' at or after `from`.
size_t find_key(std::string_view text, std::string_view key, size_t from) {
  const std::string needle = quote(key);
  while (from <= text.size()) {
    size_t p = text.find(needle, from);
    if (p == std::string_view::npos) return p;
    size_t q = p + needle.size();
    while (q < text.size() &&
           (text[q] == ' ' || text[q] == '\t' || text[q] == '\n' || text[q] == '\r')) {
      ++q;
    }
    if (q < text.size() && text[q] == ':') return p;
    from = p + 1;
  }
  return std::string_view::npos;
}

}  // namespace

std::string quote(std::string_view s) {
  return nlohmann::json(std::string(s))
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

uint64_t key_offset(std::string_view text, std::string_view key, uint64_t base, size_t from) {
  size_t p = find_key(text, key, from);
  return p == std::string_view::npos ? base : base + p;
}

}  // namespace flashnorm::io::st_detail

namespace flashnorm::io {

using st_detail::DuplicateKey;
using st_detail::find_key;
using st_detail::quote;
using st_detail::strip_prefix;

constexpr int kMaxJsonDepth = 64;

nlohmann::ordered_json parse_json_strict(std::string_view text, std::string_view file,
                                         uint64_t base) {
  struct Level {
    std::set<std::string> keys;
    std::string name;  // the key this object is the value of ("" at top level)
    std::string last_key;
  };
  std::vector<Level> stack;
  struct TooDeep {};
  auto callback = [&stack](int depth, nlohmann::ordered_json::parse_event_t event,
                           nlohmann::ordered_json& parsed) {
    using E = nlohmann::ordered_json::parse_event_t;
    // Deep nesting is refused: copying a deeply nested value recurses once per level.
    if (depth > kMaxJsonDepth) throw TooDeep{};
    switch (event) {
      case E::object_start:
        stack.push_back({{}, stack.empty() ? std::string() : stack.back().last_key, {}});
        break;
      case E::object_end:
        if (!stack.empty()) stack.pop_back();
        break;
      case E::key: {
        if (stack.empty()) break;
        std::string k = parsed.get<std::string>();
        if (!stack.back().keys.insert(k).second) {
          DuplicateKey dup;
          for (size_t i = 1; i < stack.size(); ++i) dup.path.push_back(stack[i].name);
          dup.key = k;
          throw dup;
        }
        stack.back().last_key = std::move(k);
        break;
      }
      default:
        break;
    }
    return true;
  };
  try {
    return nlohmann::ordered_json::parse(text.begin(), text.end(), callback);
  } catch (const TooDeep&) {
    throw FormatError(file, "json", base,
                      "nesting deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  } catch (const nlohmann::json::parse_error& e) {
    throw FormatError(file, "json", base + e.byte, strip_prefix(e.what()));
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(file, "json", base, strip_prefix(e.what()));
  } catch (const DuplicateKey& dup) {
    size_t pos = 0;
    std::string where;
    for (const auto& p : dup.path) {
      size_t q = find_key(text, p, pos);
      if (q != std::string_view::npos) pos = q + 1;
      where += fmt::format("{}{}", where.empty() ? " in " : ".", quote(p));
    }
    uint64_t off = base;
    size_t first = find_key(text, dup.key, pos);
    if (first != std::string_view::npos) {
      size_t second = find_key(text, dup.key, first + 1);
      off = base + (second != std::string_view::npos ? second : first);
    }
    throw FormatError(file, "json", off, fmt::format("duplicate key {}{}", quote(dup.key), where));
  }
}

}  // namespace flashnorm::io
