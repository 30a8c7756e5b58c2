// Human-readable numbers for command output.
#pragma once

#include <cstdint>
#include <string>

namespace spindle::cli {

// 1536 -> "1.50 KiB"; 3 * 2^30 -> "3.00 GiB".
std::string format_bytes(uint64_t bytes);
// 1234567 -> "1.23M"; 999 -> "999".
std::string format_count(uint64_t count);

}  // namespace spindle::cli
