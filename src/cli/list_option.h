// Comma-separated list options (`--batch 1,8,32`), split here rather than by CLI11: CLI11 2.1
// drops empty items silently (`--batch 1,,8` ran 1 and 8) and lets a vector option read tokens
// past its list. Each option takes exactly one token; a bad item is a usage error naming the
// option, in CLI11's one-line form.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace flashnorm::cli {

// `name`: "a,b,c" of decimal integers (an optional sign, no leading zero, as every integer option
// of the CLI), stored in `out` when given. Refused: an empty list or item, a non-decimal item, one
// outside int.
CLI::Option* add_int_list(CLI::App* cmd, const std::string& name, std::vector<int>& out,
                          const std::string& description);

// `name`: names separated by commas; a comma followed by a space belongs to the name (the
// configuration names of `bench --model` read "flashnorm, deferred prompts"), so
// "standard,flashnorm, deferred prompts" is two names. Refused: an empty list or item.
CLI::Option* add_name_list(CLI::App* cmd, const std::string& name, std::vector<std::string>& out,
                           const std::string& description);

// "" when v is a decimal integer (an optional sign, digits, no leading zero), else the usage
// error's text naming v. The rule of every integer option of the CLI: CLI11 2.1 reads integers
// with base 0, so "010" would be 8 and "0x10" 16 (main.cpp applies it to the single ones).
std::string not_decimal(const std::string& v);

}  // namespace flashnorm::cli
