// Logging goes through spdlog (SPINDLE_LOG_LEVEL=trace|debug|info|warn|error|off, default info).
// Use spdlog::info(...) etc. directly; init_logging() sets the pattern and level once (the level:
// the argument, else switches().log_level, so call it after config::resolve_process_switches()).
#pragma once

#include <spdlog/spdlog.h>

#include <string_view>

namespace spindle {

// Logs go to stderr so that stdout stays clean for command output (JSON, generated text).
void init_logging(std::string_view level = {});

}  // namespace spindle
