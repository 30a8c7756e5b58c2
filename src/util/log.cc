#include "util/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <string>

#include "util/switches.h"

namespace spindle {

void init_logging(std::string_view level) {
  std::string name(level);
  if (name.empty()) name = switches().log_level;
  auto logger = spdlog::stderr_color_mt("spindle");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v");
  spdlog::set_level(spdlog::level::from_str(name));
}

}  // namespace spindle
