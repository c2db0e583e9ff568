#pragma once
// Errors, in the three regimes of docs/architecture.md: kernels return status codes, host code
// throws the typed exceptions below (caught at the engine-thread and HTTP boundaries), and
// invariants are checked by PAGODA_CHECK, which is always on.
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace pagoda {

/// Base of every exception pagoda throws on purpose.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A bad request, flag, file or config: the caller's fault (HTTP 400, CLI exit 2).
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

/// Something named does not exist: a file, a model, a request id (HTTP 404).
class NotFound : public Error {
 public:
  using Error::Error;
};

/// The engine cannot take more work right now (HTTP 503).
class Unavailable : public Error {
 public:
  using Error::Error;
};

/// A broken invariant: a bug in pagoda, never the user's input (HTTP 500).
class Internal : public Error {
 public:
  using Error::Error;
};

namespace detail {
[[noreturn]] void check_failed(const char* file, int line, const char* func, const char* cond,
                               const std::string& message);
}  // namespace detail

}  // namespace pagoda

/// PAGODA_CHECK(cond, "fmt {}", args...): throws pagoda::Internal naming file, line and function.
#define PAGODA_CHECK(cond, ...)                                           \
  do {                                                                    \
    if (!(cond)) [[unlikely]] {                                           \
      ::pagoda::detail::check_failed(__FILE__, __LINE__, __func__, #cond, \
                                     ::fmt::format("" __VA_ARGS__));      \
    }                                                                     \
  } while (0)

#ifdef NDEBUG
#define PAGODA_DCHECK(cond, ...) \
  do {                           \
  } while (0)
#else
#define PAGODA_DCHECK(cond, ...) PAGODA_CHECK(cond, __VA_ARGS__)
#endif
