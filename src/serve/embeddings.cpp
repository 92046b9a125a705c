#include "embeddings.h"

#include <fmt/format.h>
#include <openssl/evp.h>

#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "api_error.h"
#include "embed_queue.h"
#include "flashnorm/error.h"
#include "flashnorm/tokenizer/utf8_text.h"
#include "request.h"
#include "response.h"

namespace flashnorm::serve {
namespace {
using json = nlohmann::ordered_json;

constexpr size_t kMaxInputs = 2048;  // OpenAI's limit per request

[[noreturn]] void bad(const std::string& param, const std::string& msg) {
  throw ApiError(400, fmt::format("{}: {}", param, msg), param);
}

struct EmbeddingRequest {
  std::string model;
  std::vector<EmbedInput> inputs;
  bool base64 = false;
  int dimensions = 0;
};

std::vector<int32_t> token_array(const json& a, const std::string& at) {
  if (a.empty()) bad(at, "is empty");
  std::vector<int32_t> ids;
  for (size_t k = 0; k < a.size(); ++k) {
    const json& t = a[k];
    if (!t.is_number_integer() || t.get<int64_t>() < 0 ||
        t.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      bad(fmt::format("{}[{}]", at, k), "must be a token id (an integer >= 0)");
    }
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return ids;
}

EmbedInput text_input(const json& s, const std::string& at) {
  EmbedInput in = EmbedInput::of_text(s.get<std::string>());
  if (in.text.empty()) bad(at, "is empty");
  if (first_invalid_utf8(in.text)) bad(at, "is not valid UTF-8");
  return in;
}

EmbeddingRequest parse(std::string_view body) {
  const json j = parse_body(body);
  for (const auto& [key, v] : j.items()) {
    if (key != "model" && key != "input" && key != "encoding_format" && key != "dimensions" &&
        key != "user") {
      bad(key, "unsupported field");
    }
  }
  EmbeddingRequest r;
  if (!j.contains("model") || !j["model"].is_string()) bad("model", "is required (a string)");
  r.model = j["model"].get<std::string>();
  if (!j.contains("input")) bad("input", "is required");
  const json& in = j["input"];
  if (in.is_string()) {
    r.inputs.push_back(text_input(in, "input"));
  } else if (in.is_array()) {
    if (in.empty()) bad("input", "is an empty list");
    if (in.size() > kMaxInputs) bad("input", fmt::format("holds more than {} inputs", kMaxInputs));
    if (in[0].is_number()) {  // one array of token ids
      r.inputs.push_back(EmbedInput::of_tokens(token_array(in, "input")));
    } else {
      for (size_t k = 0; k < in.size(); ++k) {
        const std::string at = fmt::format("input[{}]", k);
        if (in[k].is_string()) {
          r.inputs.push_back(text_input(in[k], at));
        } else if (in[k].is_array()) {
          r.inputs.push_back(EmbedInput::of_tokens(token_array(in[k], at)));
        } else {
          bad(at, "must be a string or an array of token ids");
        }
      }
    }
  } else {
    bad("input", "must be a string, an array of strings or an array of token ids");
  }
  if (j.contains("encoding_format") && !j["encoding_format"].is_null()) {
    const json& f = j["encoding_format"];
    if (f != "float" && f != "base64") bad("encoding_format", "must be \"float\" or \"base64\"");
    r.base64 = f == "base64";
  }
  if (j.contains("dimensions") && !j["dimensions"].is_null()) {
    const json& d = j["dimensions"];
    if (!d.is_number_integer() || d.get<int64_t>() < 1 || d.get<int64_t>() > (1 << 24)) {
      bad("dimensions", "must be an integer >= 1");
    }
    r.dimensions = static_cast<int>(d.get<int64_t>());
  }
  if (j.contains("user") && !j["user"].is_null() && !j["user"].is_string()) {
    bad("user", "must be a string");
  }
  return r;
}

std::string base64_floats(const std::vector<float>& v) {
  static_assert(std::endian::native == std::endian::little);
  std::string out(4 * ((v.size() * sizeof(float) + 2) / 3), '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(v.data()),
                                static_cast<int>(v.size() * sizeof(float)));
  out.resize(size_t(n));
  return out;
}

}  // namespace

void answer_embeddings(const ModelMap& models, const httplib::Request& req,
                       httplib::Response& res) {
  const EmbeddingRequest r = parse(req.body);
  ServedModel& m = find_model(models, r.model);
  if (!m.embeddings) {
    bad("model", fmt::format("model '{}' does not serve embeddings (its files have no "
                             "sentence-transformers modules.json)",
                             r.model));
  }
  const Embedder& e = m.embeddings->embedder();
  if (r.dimensions > e.dimensions()) {
    bad("dimensions", fmt::format("{} is more than the model's {}", r.dimensions, e.dimensions()));
  }
  auto job = std::make_shared<EmbedJob>();
  job->dimensions = r.dimensions;
  int tokens = 0;
  for (size_t k = 0; k < r.inputs.size(); ++k) {
    const std::string at = r.inputs.size() == 1 ? "input" : fmt::format("input[{}]", k);
    const EmbedInput& in = r.inputs[k];
    // (the body's size, kMaxBody, bounds the tokenizer's work)
    std::vector<int32_t> ids = in.is_tokens ? in.tokens : e.tokenize(in.text);
    // past max_seq_length refused, not cut (as OpenAI's API refuses it); a text may also encode
    // to no tokens at all
    if (const auto problem = e.input_problem(ids, e.spec().max_tokens)) bad(at, *problem);
    tokens += static_cast<int>(ids.size());
    job->inputs.push_back(std::move(ids));
  }
  m.embeddings->submit(job);
  job->wait();
  if (!job->error.empty()) {
    res.status = job->error_status;
    res.set_content(dump(error_body(job->error, "server_error")), "application/json");
    return;
  }
  nlohmann::json data = nlohmann::json::array();
  for (size_t k = 0; k < job->result.size(); ++k) {
    const std::vector<float>& v = job->result[k].values;
    data.push_back(
        {{"object", "embedding"},
         {"index", k},
         {"embedding", r.base64 ? nlohmann::json(base64_floats(v)) : nlohmann::json(v)}});
  }
  res.set_content(dump({{"object", "list"},
                        {"data", data},
                        {"model", r.model},
                        {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}}),
                  "application/json");
}

}  // namespace flashnorm::serve
