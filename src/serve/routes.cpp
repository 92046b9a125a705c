#include "routes.h"

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <array>

#include "api_error.h"
#include "embeddings.h"
#include "response.h"

namespace flashnorm::serve {
namespace {
using nlohmann::json;

std::array<unsigned char, SHA256_DIGEST_LENGTH> sha256(const std::string& s) {
  std::array<unsigned char, SHA256_DIGEST_LENGTH> d{};
  SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), d.data());
  return d;
}

// Equal digests of the header and of "Bearer KEY", compared in constant time.
bool authorized(const httplib::Request& req, const std::string& api_key) {
  const auto want = sha256("Bearer " + api_key);
  const auto got = sha256(req.get_header_value("Authorization"));
  return CRYPTO_memcmp(want.data(), got.data(), want.size()) == 0;
}

void send_error(httplib::Response& res, int status, const std::string& message,
                const std::string& type, const std::string& param = "") {
  res.status = status;
  res.set_content(dump(error_body(message, type, param)), "application/json");
}

}  // namespace

void install_routes(httplib::Server& svr, const ModelMap& models, const std::string& api_key,
                    const std::atomic<bool>& draining) {
  svr.set_payload_max_length(kMaxBody);
  svr.set_pre_routing_handler(
      [&models, api_key](const httplib::Request& req, httplib::Response& res) {
        if (!api_key.empty() && req.path.rfind("/v1/", 0) == 0 && !authorized(req, api_key)) {
          send_error(res, 401, "missing or wrong API key (Authorization: Bearer KEY)",
                     "authentication_error");
          return httplib::Server::HandlerResponse::Handled;
        }
        return httplib::Server::HandlerResponse::Unhandled;
      });
  // httplib's own errors (no route, body too large) get an OpenAI body too.
  svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 413) {
      const bool embeddings = req.path == "/v1/embeddings";
      send_error(
          res, 413,
          fmt::format("{}the request body exceeds {} bytes", embeddings ? "input: " : "", kMaxBody),
          "invalid_request_error", embeddings ? "input" : "");
    } else if (res.status == 404) {
      send_error(res, 404, fmt::format("no route {} {}", req.method, req.path),
                 "invalid_request_error");
    } else {
      send_error(res, res.status, fmt::format("HTTP {}", res.status), "invalid_request_error");
    }
  });
  svr.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          send_error(res, 500, e.what(), "server_error");
        } catch (...) {
          send_error(res, 500, "unknown error", "server_error");
        }
      });
  for (bool chat : {false, true}) {
    svr.Post(chat ? "/v1/chat/completions" : "/v1/completions",
             [&models, &draining, chat](const httplib::Request& req, httplib::Response& res) {
               try {
                 if (draining)
                   throw ApiError(503, "the server is shutting down", "", "server_error");
                 answer_completion(models, req, res, chat);
               } catch (const ApiError& e) {
                 send_error(res, e.status, e.what(), e.type, e.param);
               } catch (const std::exception& e) {
                 send_error(res, 500, e.what(), "server_error");
               }
             });
  }
  svr.Post("/v1/embeddings",
           [&models, &draining](const httplib::Request& req, httplib::Response& res) {
             try {
               if (draining) throw ApiError(503, "the server is shutting down", "", "server_error");
               answer_embeddings(models, req, res);
             } catch (const ApiError& e) {
               send_error(res, e.status, e.what(), e.type, e.param);
             } catch (const std::exception& e) {
               send_error(res, 500, e.what(), "server_error");
             }
           });
  svr.Get("/v1/models", [&models](const httplib::Request&, httplib::Response& res) {
    json data = json::array();
    for (const auto& [name, m] : models) {
      data.push_back(
          {{"id", name}, {"object", "model"}, {"created", m->created}, {"owned_by", "flashnorm"}});
    }
    res.set_content(dump({{"object", "list"}, {"data", data}}), "application/json");
  });
  svr.Get("/health", [&draining](const httplib::Request&, httplib::Response& res) {
    res.status = draining ? 503 : 200;
    res.set_content(dump({{"status", draining ? "shutting down" : "ok"}}), "application/json");
  });
  svr.Get("/metrics", [&models](const httplib::Request&, httplib::Response& res) {
    std::vector<std::string> names;
    std::vector<const ModelMetrics*> ms;
    for (const auto& [name, m] : models) {
      names.push_back(name);
      ms.push_back(&m->metrics);
    }
    res.set_content(render_metrics(names, ms), "text/plain; version=0.0.4");
  });
}

}  // namespace flashnorm::serve
