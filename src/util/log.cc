#include "util/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>
#include <string>

namespace spindle {

void init_logging(std::string_view level) {
  std::string name(level);
  if (name.empty()) {
    const char* env = std::getenv("SPINDLE_LOG_LEVEL");
    name = env ? env : "info";
  }
  auto logger = spdlog::stderr_color_mt("spindle");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v");
  spdlog::set_level(spdlog::level::from_str(name));
}

}  // namespace spindle
