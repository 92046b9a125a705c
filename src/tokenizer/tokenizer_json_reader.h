// Internal: typed access to a parsed tokenizer.json or tokenizer_config.json (Reader).
// Every error names the file and the field's path; with the message helpers the section readers
// share.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>

#include "flashnorm/error.h"

namespace flashnorm::tokenizer_detail {

using json = nlohmann::json;

// Values are read through references and pointers only: copying a json value recurses once per
// nesting level, and a hostile file may nest deeply (parsing and destruction do not recurse).
inline const json kNull;

inline constexpr uint64_t kMaxId = std::numeric_limits<int32_t>::max();  // ids are below this

// A JSON value for a message: strings quoted (control bytes escaped, invalid UTF-8 replaced), cut
// at 60 characters; other values by their type name.
inline std::string show(const json& v) {
  if (!v.is_string() && !v.is_number() && !v.is_boolean() && !v.is_null()) return v.type_name();
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() > 60 ? s.substr(0, 60) + "..." : s;
}

// Typed access to one parsed file; every error names the file and the field's path.
class Reader {
 public:
  explicit Reader(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void fail(std::string_view path, std::string_view what) const {
    throw Error(fmt::format("{}: {}: {}", source_, path, what));
  }
  [[noreturn]] void unsupported(std::string_view path, const json& v) const {
    throw Error(fmt::format("{}: {} {} is not supported", source_, path, show(v)));
  }

  json parse(std::string_view text) const {
    try {
      return json::parse(text.begin(), text.end());
    } catch (const json::parse_error& e) {
      std::string_view what = e.what();
      if (size_t p = what.find("] "); p != std::string_view::npos) what.remove_prefix(p + 2);
      throw Error(fmt::format("{}: invalid JSON at byte {}: {}", source_, e.byte, what));
    }
  }

  const json& object(const json& v, std::string_view path) const {
    if (!v.is_object()) fail(path, fmt::format("expected an object, found {}", show(v)));
    return v;
  }
  const json& array(const json& v, std::string_view path) const {
    if (!v.is_array()) fail(path, fmt::format("expected an array, found {}", show(v)));
    return v;
  }
  std::string string(const json& v, std::string_view path) const {
    if (!v.is_string()) fail(path, fmt::format("expected a string, found {}", show(v)));
    return v.get<std::string>();
  }
  bool boolean(const json& v, std::string_view path) const {
    if (!v.is_boolean()) fail(path, fmt::format("expected true or false, found {}", show(v)));
    return v.get<bool>();
  }
  int64_t id(const json& v, std::string_view path) const {
    if (!v.is_number_unsigned() || v.get<uint64_t>() >= kMaxId) {
      fail(path, fmt::format("expected a token id (an integer 0..2^31-2), found {}", show(v)));
    }
    return v.get<int64_t>();
  }
  // Member `key` of object `o` (at `path`), or nullptr when absent.
  const json* find(const json& o, const char* key) const {
    auto it = o.find(key);
    return it == o.end() ? nullptr : &*it;
  }
  const json& member(const json& o, const char* key, std::string_view path) const {
    const json* v = find(o, key);
    if (v == nullptr) fail(path, fmt::format("missing key \"{}\"", key));
    return *v;
  }
  // Refuses keys of `o` outside `known`.
  void only(const json& o, std::initializer_list<std::string_view> known,
            std::string_view path) const {
    for (auto it = o.begin(); it != o.end(); ++it) {
      bool ok = false;
      for (std::string_view k : known) ok = ok || it.key() == k;
      if (!ok) {
        fail(fmt::format("{}{}{}", path, path.empty() ? "" : ".", it.key()),
             "unknown key (not supported)");
      }
    }
  }
  // `o`'s member "type" as a string.
  std::string type(const json& o, std::string_view path) const {
    object(o, path);
    return string(member(o, "type", path), fmt::format("{}.type", path));
  }

 private:
  std::string source_;
};

// Field paths for messages: PATH.KEY and PATH[I].
inline std::string join(std::string_view path, std::string_view key) {
  return fmt::format("{}.{}", path, key);
}
inline std::string index(std::string_view path, size_t i) { return fmt::format("{}[{}]", path, i); }

}  // namespace flashnorm::tokenizer_detail
