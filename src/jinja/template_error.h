// The one error type of the Jinja engine. Its kind tells the caller what happened:
//   kSyntax  the template text is not a template (message names the template and line)
//   kRender  rendering failed (an undefined value used, a type error, a bad filter argument...)
//   kRaised  the template called raise_exception(message); message() is the template's text
//   kLimit   a bound on untrusted input was exceeded (loop iterations, call depth, output size)
// A server turns every kind met while rendering a request into a 400.
#pragma once

#include "util/error.h"

#include <string>

namespace spindle::jinja {

enum class ErrorKind { kSyntax, kRender, kRaised, kLimit };

class TemplateError : public Error {
 public:
  TemplateError(ErrorKind kind, std::string message, SourceLocation where)
      : Error(std::move(message), where), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

namespace detail {
[[noreturn]] void throw_template_error(ErrorKind kind, std::string message, SourceLocation where);
}  // namespace detail

}  // namespace spindle::jinja

// Rendering errors (kind kRender) with a formatted message.
#define JINJA_FAIL(...)                                                                                \
  ::spindle::jinja::detail::throw_template_error(::spindle::jinja::ErrorKind::kRender,                  \
                                                 ::fmt::format(__VA_ARGS__), SPINDLE_CURRENT_LOCATION())
#define JINJA_CHECK(cond, ...)     \
  do {                             \
    if (!(cond)) [[unlikely]] {    \
      JINJA_FAIL(__VA_ARGS__);     \
    }                              \
  } while (0)
#define JINJA_FAIL_KIND(kind, ...)                                                       \
  ::spindle::jinja::detail::throw_template_error(kind, ::fmt::format(__VA_ARGS__), \
                                                 SPINDLE_CURRENT_LOCATION())
