#pragma once
// Errors raised while parsing or rendering a template. They derive from InvalidArgument because a
// bad template or a conversation the template refuses is the caller's fault (HTTP 400).
#include <string>

#include "core/status.h"

namespace pagoda::tmpl {

/// A syntax error or a runtime error in a template, with the template line it happened on.
class TemplateError : public InvalidArgument {
 public:
  TemplateError(const std::string& message, int line)
      : InvalidArgument(line > 0 ? message + " (template line " + std::to_string(line) + ")"
                                 : message),
        message_(message),
        line_(line) {}

  /// The message without the line suffix.
  [[nodiscard]] const std::string& message() const { return message_; }
  /// 1-based template line, or 0 where unknown.
  [[nodiscard]] int line() const { return line_; }

 protected:
  TemplateError(const std::string& what, const std::string& message, int line)
      : InvalidArgument(what), message_(message), line_(line) {}

 private:
  std::string message_;
  int line_;
};

/// The template itself called raise_exception(msg): what() is exactly msg, for the client to see.
class TemplateRaised : public TemplateError {
 public:
  TemplateRaised(const std::string& message, int line) : TemplateError(message, message, line) {}
};

}  // namespace pagoda::tmpl
