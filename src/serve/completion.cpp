#include "completion.h"

#include <fmt/format.h>

#include <atomic>

#include "api_error.h"
#include "flashnorm/error.h"
#include "request.h"
#include "response.h"

namespace flashnorm::serve {
namespace {

std::atomic<uint64_t> g_next_id{1};

// The prompt's token ids, as `flashnorm generate` builds them.
std::vector<int32_t> prompt_ids(const ServedModel& m, const CompletionRequest& r) {
  const Tokenizer& tok = m.vocab->tok;
  std::string text = r.prompt;
  if (r.chat) {
    try {
      text = model_chat_prompt(*m.vocab, m.spec.chat_format, r.messages);
    } catch (const Error& e) {
      throw ApiError(400, fmt::format("model {}: {}", m.spec.name, e.what()), "messages");
    }
  }
  std::vector<int32_t> ids = tok.encode(text, /*parse_special=*/r.chat);
  if (tok.add_bos() && tok.bos()) ids.insert(ids.begin(), *tok.bos());
  if (ids.empty()) throw ApiError(400, "the prompt encodes to no tokens", "prompt");
  return ids;
}

}  // namespace

ServedModel& find_model(const ModelMap& models, const std::string& name) {
  auto it = models.find(name);
  if (it == models.end()) {
    throw ApiError(404, fmt::format("model '{}' is not served (GET /v1/models lists them)", name),
                   "model", "not_found_error");
  }
  return *it->second;
}

void answer_completion(const ModelMap& models, const httplib::Request& req, httplib::Response& res,
                       bool chat) {
  const CompletionRequest r = parse_request(req.body, chat);
  ServedModel& m = find_model(models, r.model);
  if (!m.scheduler) {
    throw ApiError(
        400, fmt::format("model: model '{}' serves embeddings only (POST /v1/embeddings)", r.model),
        "model");
  }
  auto g = std::make_shared<Generation>();
  g->prompt = prompt_ids(m, r);
  const int ctx = m.scheduler->max_context(), n = static_cast<int>(g->prompt.size());
  if (n >= ctx) {
    throw ApiError(400,
                   fmt::format("the prompt ({} tokens) does not fit the context of {}", n, ctx),
                   chat ? "messages" : "prompt");
  }
  g->max_tokens = r.max_tokens.value_or(chat ? ctx - n : 16);
  if (n + g->max_tokens > ctx) {
    throw ApiError(400,
                   fmt::format("prompt ({} tokens) + max_tokens {} exceeds the context of {}", n,
                               g->max_tokens, ctx),
                   "max_tokens");
  }
  g->sampling = r.sampling;
  g->stop = r.stop;
  m.scheduler->submit(g);
  ResponseHeader h{fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", g_next_id++), r.model,
                   std::time(nullptr), chat};
  if (!r.stream) {
    std::string text;
    bool done = false;
    while (!done) text += g->take(done, std::chrono::milliseconds(1000));
    if (!g->error.empty()) {
      res.status = g->error_status;
      res.set_content(dump(error_body(g->error, "server_error")), "application/json");
      return;
    }
    res.set_content(dump(full_response(h, text, g->finish_reason, n, g->completion_tokens)),
                    "application/json");
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  auto first = std::make_shared<bool>(chat);  // chat streams open with the role
  res.set_chunked_content_provider(
      "text/event-stream",
      [g, h, first](size_t, httplib::DataSink& sink) {
        bool done = false;
        const std::string t = g->take(done, std::chrono::milliseconds(200));
        std::string out;
        if (*first) out += sse_event(chunk(h, "", "", /*role=*/true));
        *first = false;
        if (!t.empty()) out += sse_event(chunk(h, t, ""));
        if (done) {
          out += g->error.empty() ? sse_event(chunk(h, "", g->finish_reason))
                                  : sse_event(error_body(g->error, "server_error"));
          out += kSseDone;
        }
        if (!out.empty() && !sink.write(out.data(), out.size())) {
          g->cancel = true;  // the client went away
          return false;
        }
        if (done) sink.done();
        return true;
      },
      [g](bool) { g->cancel = true; });  // a no-op once done; a cancel if the stream broke
}

}  // namespace flashnorm::serve
