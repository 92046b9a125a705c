// An error answered to an HTTP client in OpenAI's shape:
// {"error": {"message", "type", "param", "code"}} with an HTTP status (400, 401, 404, 413, 429,
// 500, 503). Thrown by request parsing and the scheduler, caught by the routes.
#pragma once

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace flashnorm::serve {

class ApiError : public std::runtime_error {
 public:
  // status: the HTTP status; param: the request field at fault ("" for none); type: OpenAI's
  // error type (invalid_request_error, authentication_error, ...).
  ApiError(int status, const std::string& message, std::string param = "",
           std::string type = "invalid_request_error")
      : std::runtime_error(message),
        status(status),
        param(std::move(param)),
        type(std::move(type)) {}
  int status;
  std::string param, type;
};

// The OpenAI error body for `message`.
inline nlohmann::json error_body(const std::string& message, const std::string& type,
                                 const std::string& param = "") {
  return {{"error",
           {{"message", message},
            {"type", type},
            {"param", param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param)},
            {"code", nullptr}}}};
}

}  // namespace flashnorm::serve
