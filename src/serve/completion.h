// Answers POST /v1/completions and /v1/chat/completions: parses the body (request.h), builds the
// prompt as `flashnorm generate` does (the chat exchange through the model's chat format and
// parse_special for chat; BOS when the tokenizer adds one), checks it against the context,
// queues the generation on the model's scheduler and answers it whole or as server-sent events
// (response.h). A streaming client that goes away cancels its generation at the next step.
#pragma once

#include <httplib.h>

#include <map>
#include <memory>
#include <string>

#include "served_model.h"

namespace flashnorm::serve {

using ModelMap = std::map<std::string, std::unique_ptr<ServedModel>, std::less<>>;

// The served model `name`. Errors: ApiError 404 naming `model` when none is served by that name.
ServedModel& find_model(const ModelMap& models, const std::string& name);

// Fills `res`. Errors: ApiError for a bad request (400), an unknown model (404), a full queue
// (429) or a server shutting down (503).
void answer_completion(const ModelMap& models, const httplib::Request& req, httplib::Response& res,
                       bool chat);

}  // namespace flashnorm::serve
