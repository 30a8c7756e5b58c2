#include "util/error.h"

#include <string_view>

namespace spindle {
namespace {

// "src/model/safetensors.cc" rather than the absolute build path.
std::string_view short_path(std::string_view path) {
  const auto pos = path.rfind("/src/");
  if (pos != std::string_view::npos) return path.substr(pos + 1);
  return path;
}

std::string with_location(const std::string& message, const SourceLocation& where) {
  return fmt::format("{} [{}:{}]", message, short_path(where.file_name()), where.line());
}

}  // namespace

Error::Error(std::string message, SourceLocation where)
    : std::runtime_error(with_location(message, where)), message_(std::move(message)), where_(where) {}

namespace detail {
void throw_error(std::string message, SourceLocation where) {
  throw Error(std::move(message), where);
}
}  // namespace detail

}  // namespace spindle
