// The HTTP endpoints of `flashnorm serve` on a cpp-httplib server: POST /v1/completions and
// /v1/chat/completions (completion.h), POST /v1/embeddings (embeddings.h), GET /v1/models, GET
// /health ({"status": "ok"}, 503 while shutting down), GET /metrics (Prometheus text, metrics.h).
// With an API key, /v1/* needs "Authorization: Bearer KEY" (compared in constant time: SHA-256 of
// both, CRYPTO_memcmp); /health and /metrics do not. Every error (a handler's, httplib's 404 / 413)
// answers an OpenAI error body.
#pragma once

#include <httplib.h>

#include <atomic>
#include <string>

#include "completion.h"

namespace flashnorm::serve {

// Largest request body accepted (bytes); larger bodies get 413.
inline constexpr size_t kMaxBody = 1 << 20;

// Registers the endpoints on `svr`. `models` and `draining` must outlive it; while `draining` is
// set, completions answer 503.
void install_routes(httplib::Server& svr, const ModelMap& models, const std::string& api_key,
                    const std::atomic<bool>& draining);

}  // namespace flashnorm::serve
