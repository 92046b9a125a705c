// Comma-separated list options: list_option.h.
#include "list_option.h"

#include <charconv>
#include <climits>

namespace flashnorm::cli {
namespace {

// Items of v split at every comma (int lists) or at commas not followed by a space (name lists).
std::vector<std::string> split(const std::string& v, bool keep_comma_space) {
  std::vector<std::string> items(1);
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] == ',' && !(keep_comma_space && i + 1 < v.size() && v[i + 1] == ' '))
      items.emplace_back();
    else
      items.back() += v[i];
  }
  return items;
}

// "" when every item is non-empty, else the usage error's text.
std::string empty_item(const std::string& v, const std::vector<std::string>& items) {
  for (const std::string& it : items)
    if (it.empty()) return "'" + v + "' has an empty item (items are separated by ',')";
  return {};
}

}  // namespace

std::string not_decimal(const std::string& v) {
  const size_t d = !v.empty() && (v[0] == '+' || v[0] == '-') ? 1 : 0;
  const bool digits = v.size() > d && v.find_first_not_of("0123456789", d) == std::string::npos;
  if (!digits || (v[d] == '0' && v.size() > d + 1))
    return "'" + v + "' is not a decimal integer (digits, no leading zero)";
  return {};
}

CLI::Option* add_int_list(CLI::App* cmd, const std::string& name, std::vector<int>& out,
                          const std::string& description) {
  const CLI::Validator items(
      [](std::string& v) -> std::string {
        const std::vector<std::string> parts = split(v, false);
        if (std::string e = empty_item(v, parts); !e.empty()) return e;
        for (const std::string& p : parts) {
          if (std::string e = not_decimal(p); !e.empty()) return e;
          long long x = 0;
          const auto r = std::from_chars(p.data() + (p[0] == '+'), p.data() + p.size(), x);
          if (r.ec != std::errc() || x < INT_MIN || x > INT_MAX)
            return "'" + p + "' is outside the range of an int";
        }
        return {};
      },
      "");
  return cmd
      ->add_option_function<std::string>(
          name,
          [&out](const std::string& v) {
            out.clear();
            for (const std::string& p : split(v, false))
              out.push_back(std::stoi(p[0] == '+' ? p.substr(1) : p));
          },
          description)
      ->check(items)
      ->type_name("INT,...");
}

CLI::Option* add_name_list(CLI::App* cmd, const std::string& name, std::vector<std::string>& out,
                           const std::string& description) {
  const CLI::Validator items(
      [](std::string& v) -> std::string { return empty_item(v, split(v, true)); }, "");
  return cmd
      ->add_option_function<std::string>(
          name, [&out](const std::string& v) { out = split(v, true); }, description)
      ->check(items)
      ->type_name("NAME,...");
}

}  // namespace flashnorm::cli
