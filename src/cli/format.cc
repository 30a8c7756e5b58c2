#include "cli/format.h"

#include <fmt/format.h>

#include <array>

namespace spindle::cli {

std::string format_bytes(uint64_t bytes) {
  static constexpr std::array<const char*, 6> kUnits = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < kUnits.size()) {
    value /= 1024.0;
    ++unit;
  }
  return fmt::format("{:.2f} {}", value, kUnits[unit]);
}

std::string format_count(uint64_t count) {
  if (count < 1000) return fmt::format("{}", count);
  if (count < 1000000) return fmt::format("{:.2f}K", count / 1e3);
  if (count < 1000000000) return fmt::format("{:.2f}M", count / 1e6);
  return fmt::format("{:.2f}B", count / 1e9);
}

}  // namespace spindle::cli
