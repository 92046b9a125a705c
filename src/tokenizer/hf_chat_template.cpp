// The chat template of a Hugging Face directory; see include/flashnorm/tokenizer/chat.h.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "flashnorm/error.h"
#include "flashnorm/io/side_file.h"
#include "flashnorm/tokenizer/chat.h"

namespace flashnorm {

std::optional<std::string> read_hf_chat_template(const std::filesystem::path& dir) {
  if (std::optional<std::string> jinja = io::read_side_file(dir / "chat_template.jinja")) {
    return jinja;
  }
  const std::filesystem::path cfg_path = dir / "tokenizer_config.json";
  const std::optional<std::string> text = io::read_side_file(cfg_path);
  if (!text) return std::nullopt;
  const std::string file = cfg_path.string();
  nlohmann::json cfg;
  try {
    cfg = nlohmann::json::parse(*text);
  } catch (const nlohmann::json::parse_error& e) {
    throw FormatError(file, "json", e.byte, "not valid JSON");
  }
  if (!cfg.is_object()) throw FormatError(file, "json", 0, "not a JSON object");
  const auto it = cfg.find("chat_template");
  if (it == cfg.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {
    for (const auto& entry : *it) {
      if (entry.is_object() && entry.value("name", nlohmann::json()) == "default") {
        const auto t = entry.find("template");
        if (t != entry.end() && t->is_string()) return t->get<std::string>();
      }
    }
    throw Error(fmt::format("{}: chat_template is a list without a \"default\" template", file));
  }
  throw Error(fmt::format("{}: chat_template is a JSON {}, not a string or a list of templates",
                          file, it->type_name()));
}

}  // namespace flashnorm
