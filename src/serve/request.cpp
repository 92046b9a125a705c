#include "request.h"

#include <fmt/format.h>

#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "api_error.h"
#include "flashnorm/error.h"
#include "flashnorm/io/json_strict.h"

namespace flashnorm::serve {
namespace {
using json = nlohmann::ordered_json;

[[noreturn]] void bad(const std::string& param, const std::string& msg) {
  throw ApiError(400, fmt::format("{}: {}", param, msg), param);
}

const std::string& string_field(const json& v, const std::string& name) {
  if (!v.is_string()) bad(name, "must be a string");
  return v.get_ref<const std::string&>();
}

double number_field(const json& v, const std::string& name, double lo, double hi, bool lo_open) {
  if (!v.is_number()) bad(name, "must be a number");
  const double x = v.get<double>();
  if (!(lo_open ? x > lo : x >= lo) || !(x <= hi)) {
    bad(name, fmt::format("must be in {}{}, {}]", lo_open ? "(" : "[", lo, hi));
  }
  return x;
}

int64_t integer_field(const json& v, const std::string& name, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) bad(name, "must be an integer");
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(hi)) {
    bad(name, fmt::format("must be an integer from {} to {}", lo, hi));
  }
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) bad(name, fmt::format("must be an integer from {} to {}", lo, hi));
  return x;
}

void parse_messages(const json& m, CompletionRequest& r) {
  if (!m.is_array() || m.empty()) bad("messages", "must be a non-empty array of messages");
  for (size_t k = 0; k < m.size(); ++k) {
    const std::string at = fmt::format("messages[{}]", k);
    if (!m[k].is_object()) bad(at, "must be an object with role and content");
    for (const auto& [key, v] : m[k].items()) {
      if (key != "role" && key != "content") bad(at + "." + key, "unsupported field");
    }
    if (!m[k].contains("role")) bad(at + ".role", "is required");
    if (!m[k].contains("content")) bad(at + ".content", "is required");
    r.messages.push_back(
        {string_field(m[k]["role"], at + ".role"), string_field(m[k]["content"], at + ".content")});
  }
  if (auto p = chat_order_problem(r.messages)) {
    bad(p->index < r.messages.size() ? fmt::format("messages[{}].role", p->index) : "messages",
        p->message);
  }
  if (r.messages.back().content.empty()) {
    bad(fmt::format("messages[{}].content", r.messages.size() - 1), "is empty");
  }
}

}  // namespace

json parse_body(std::string_view body) {
  json j;
  try {
    // syntax errors, numbers past double's range (1e400), duplicate keys, nesting past 64 levels
    j = io::parse_json_strict(body, "request body", 0);
  } catch (const FormatError& e) {
    throw ApiError(400, fmt::format("malformed JSON body: {}", e.what()));
  }
  if (!j.is_object()) throw ApiError(400, "the body must be a JSON object");
  return j;
}

CompletionRequest parse_request(std::string_view body, bool chat) {
  json j = parse_body(body);
  CompletionRequest r;
  r.chat = chat;
  r.sampling.temperature = 1.0f;  // OpenAI's defaults
  r.sampling.top_p = 1.0f;
  r.sampling.top_k = 0;
  r.sampling.seed = std::random_device{}() * 0x100000000ull + std::random_device{}();
  static const std::set<std::string> kCommon = {
      "model", "max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "n", "stream"};
  for (const auto& [key, v] : j.items()) {
    if (kCommon.count(key) || key == (chat ? "messages" : "prompt") ||
        (chat && key == "max_completion_tokens")) {
      continue;
    }
    // OpenAI fields that clients send at their defaults: accepted there only (any other value
    // would change the sampling or the response, which this server does not implement)
    if (key == "presence_penalty" || key == "frequency_penalty") {
      if (!v.is_number() || v.get<double>() != 0.0) bad(key, "unsupported value: only 0 is served");
      continue;
    }
    if (key == "logprobs") {
      if (!v.is_null() && !(v.is_boolean() && !v.get<bool>()))
        bad(key, "unsupported value: only null or false is served");
      continue;
    }
    bad(key, "unsupported field");
  }
  if (!j.contains("model")) bad("model", "is required");
  r.model = string_field(j["model"], "model");
  if (chat) {
    if (!j.contains("messages")) bad("messages", "is required");
    parse_messages(j["messages"], r);
  } else {
    if (!j.contains("prompt")) bad("prompt", "is required");
    r.prompt = string_field(j["prompt"], "prompt");
    if (r.prompt.empty()) bad("prompt", "is empty");
  }
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (!j.contains(key) || j[key].is_null()) continue;
    const int n = int(integer_field(j[key], key, 1, std::numeric_limits<int>::max()));
    if (r.max_tokens && *r.max_tokens != n) {
      bad(key, "differs from max_tokens (give one of them)");
    }
    r.max_tokens = n;
  }
  if (j.contains("temperature") && !j["temperature"].is_null()) {
    r.sampling.temperature = float(number_field(j["temperature"], "temperature", 0, 100, false));
  }
  if (j.contains("top_p") && !j["top_p"].is_null()) {
    r.sampling.top_p = float(number_field(j["top_p"], "top_p", 0, 1, true));
  }
  if (j.contains("top_k") && !j["top_k"].is_null()) {
    r.sampling.top_k = int(integer_field(j["top_k"], "top_k", 0, std::numeric_limits<int>::max()));
  }
  if (j.contains("seed") && !j["seed"].is_null()) {
    const json& s = j["seed"];
    if (!s.is_number_integer() || (!s.is_number_unsigned() && s.get<int64_t>() < 0)) {
      bad("seed", "must be an integer from 0 to 18446744073709551615");
    }
    r.sampling.seed = s.get<uint64_t>();
  }
  if (j.contains("stop") && !j["stop"].is_null()) {
    const json& s = j["stop"];
    if (s.is_string()) {
      r.stop.push_back(s.get<std::string>());
    } else if (s.is_array() && s.size() <= 4) {
      for (size_t i = 0; i < s.size(); ++i) {
        r.stop.push_back(string_field(s[i], fmt::format("stop[{}]", i)));
      }
    } else {
      bad("stop", "must be a string or an array of up to 4 strings");
    }
    for (const std::string& x : r.stop) {
      if (x.empty()) bad("stop", "stop strings must not be empty");
    }
  }
  if (j.contains("n") && !j["n"].is_null() && integer_field(j["n"], "n", 1, 1) != 1) {
    bad("n", "must be 1");
  }
  if (j.contains("stream") && !j["stream"].is_null()) {
    if (!j["stream"].is_boolean()) bad("stream", "must be a boolean");
    r.stream = j["stream"].get<bool>();
  }
  return r;
}

}  // namespace flashnorm::serve
