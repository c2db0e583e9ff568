#include "server/openai/api_error.h"

#include <fmt/format.h>

#include "core/status.h"
#include "sampling/params_json.h"
#include "template/error.h"

namespace pagoda::openai {
namespace {

// Engine and sampling messages start with the parameter they reject ("top_p must be in (0, 1]",
// "prompt token id 9 is outside ..."): that word becomes `param` when it names a request field.
std::string leading_param(const std::string& message) {
  const size_t end = message.find_first_of(" :");
  if (end == std::string::npos) return {};
  std::string word = message.substr(0, end);
  if (word == "prompt" || word == "request_id" || sampling_json_fields().count(word)) return word;
  return {};
}

}  // namespace

const char* error_type(int status) {
  switch (status) {
    case 400:
      return "BadRequestError";
    case 401:
      return "AuthenticationError";
    case 403:
      return "PermissionDeniedError";
    case 404:
      return "NotFoundError";
    case 405:
      return "MethodNotAllowedError";
    case 413:
      return "RequestEntityTooLargeError";
    case 422:
      return "UnprocessableEntityError";
    case 429:
      return "RateLimitError";
    case 503:
      return "ServiceUnavailableError";
    default:
      return status >= 400 && status < 500 ? "BadRequestError" : "InternalServerError";
  }
}

ApiException bad_request(std::string message, std::string param) {
  return ApiException({400, "", std::move(message), std::move(param)});
}

ApiException not_found(std::string message, std::string param) {
  return ApiException({404, "", std::move(message), std::move(param)});
}

ApiException unauthorized(std::string message) {
  return ApiException({401, "", std::move(message), ""});
}

ApiException payload_too_large(size_t limit_bytes) {
  return ApiException(
      {413, "", fmt::format("Request body exceeds the limit of {} bytes", limit_bytes), ""});
}

nlohmann::ordered_json error_json(const ApiError& error) {
  nlohmann::ordered_json inner = nlohmann::ordered_json::object();
  inner["message"] = error.message;
  inner["type"] = error.type.empty() ? error_type(error.status) : error.type;
  inner["param"] =
      error.param.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(error.param);
  inner["code"] = error.status;
  nlohmann::ordered_json body = nlohmann::ordered_json::object();
  body["error"] = std::move(inner);
  return body;
}

std::string error_body(const ApiError& error) {
  // Messages may quote client input: replace invalid UTF-8 rather than throw while dumping.
  return error_json(error).dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

ApiError api_error_from(const std::exception& e) {
  if (const auto* api = dynamic_cast<const ApiException*>(&e)) return api->error();
  if (const auto* raised = dynamic_cast<const tmpl::TemplateRaised*>(&e)) {
    return {400, "", raised->what(), ""};  // the template's own words, as vLLM shows them
  }
  if (dynamic_cast<const tmpl::TemplateError*>(&e)) {
    return {400, "", fmt::format("Chat template error: {}", e.what()), ""};
  }
  if (dynamic_cast<const InvalidArgument*>(&e)) return {400, "", e.what(), leading_param(e.what())};
  if (dynamic_cast<const NotFound*>(&e)) return {404, "", e.what(), ""};
  if (dynamic_cast<const Unavailable*>(&e)) return {503, "", e.what(), ""};
  return {500, "", "Internal server error", ""};
}

}  // namespace pagoda::openai
