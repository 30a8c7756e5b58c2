#include "util/shared_library.h"

#include <fmt/format.h>

namespace spindle {

OpenedLibrary open_first_library(const std::vector<std::string>& names) {
  OpenedLibrary out;
  for (const std::string& name : names) {
    out.handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (out.handle != nullptr) {
      out.path = name;
      return out;
    }
    const char* why = dlerror();
    out.failures += fmt::format("{}{}: {}", out.failures.empty() ? "" : "; ", name, why != nullptr ? why : "not found");
  }
  return out;
}

std::string missing_symbol_text(const char* symbol) {
  const char* why = dlerror();
  return why != nullptr ? fmt::format("no symbol {} ({})", symbol, why) : fmt::format("no symbol {}", symbol);
}

}  // namespace spindle
