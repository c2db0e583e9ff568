#pragma once
// Errors of the OpenAI-compatible API and the JSON body they are sent as.
//
// The body follows recent vLLM (itself a superset of OpenAI's):
//   {"error": {"message": "...", "type": "BadRequestError", "param": "top_p" | null, "code": 400}}
// `type` is the Python SDK's exception class for the status (BadRequestError, AuthenticationError,
// NotFoundError, ...) and `code` is the HTTP status as an integer, exactly as vLLM sends them.
#include <exception>
#include <string>

#include <nlohmann/json.hpp>

namespace pagoda::openai {

/// One API error: the HTTP status, the OpenAI error type, a message and the offending field.
struct ApiError {
  int status = 400;
  std::string type;     // empty: derived from status by error_type()
  std::string message;  // shown to the client: never echoes whole prompts
  std::string param;    // the field at fault ("messages[1].content"), empty when none
};

/// The exception the parsers throw; the HTTP layer catches it and sends error_body(error()).
class ApiException : public std::exception {
 public:
  explicit ApiException(ApiError error) : error_(std::move(error)) {}
  [[nodiscard]] const ApiError& error() const { return error_; }
  [[nodiscard]] const char* what() const noexcept override { return error_.message.c_str(); }

 private:
  ApiError error_;
};

/// The SDK class name for an HTTP status ("BadRequestError" for 400, "InternalServerError" else).
[[nodiscard]] const char* error_type(int status);

/// Convenience constructors for the common regimes.
[[nodiscard]] ApiException bad_request(std::string message, std::string param = {});
[[nodiscard]] ApiException not_found(std::string message, std::string param = {});
[[nodiscard]] ApiException unauthorized(std::string message = "Invalid or missing API key");
[[nodiscard]] ApiException payload_too_large(size_t limit_bytes);

/// {"error": {...}} as a JSON value (for an SSE error event) and as a body string.
[[nodiscard]] nlohmann::ordered_json error_json(const ApiError& error);
[[nodiscard]] std::string error_body(const ApiError& error);

/// Maps any exception to an ApiError, for the HTTP layer's catch-all around the parsers and
/// EngineCore::submit: ApiException as is, InvalidArgument (including template errors) -> 400
/// (param taken from a leading field name when the message starts with one), NotFound -> 404,
/// Unavailable -> 503, anything else -> 500 with a generic message.
[[nodiscard]] ApiError api_error_from(const std::exception& e);

}  // namespace pagoda::openai
