#include "platform/memory_info.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>
#include <string_view>
#include <vector>

#include "util/error.h"

namespace spindle {
namespace {

namespace fs = std::filesystem;

// v1 reports "no limit" as a huge page-rounded value (9223372036854771712 on 64-bit kernels).
constexpr uint64_t kV1UnlimitedThreshold = uint64_t{1} << 62;

std::optional<std::string> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::string_view trim(std::string_view s) {
  constexpr std::string_view kSpace = " \t\r\n";
  const size_t begin = s.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return {};
  return s.substr(begin, s.find_last_not_of(kSpace) - begin + 1);
}

std::optional<uint64_t> parse_u64(std::string_view text) {
  uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

// A file holding one integer (or "max" when allow_max); nullopt result value means "max".
std::optional<uint64_t> read_limit_file(const fs::path& path, const std::string& text,
                                        bool allow_max) {
  const std::string_view value = trim(text);
  if (allow_max && value == "max") return std::nullopt;
  const std::optional<uint64_t> parsed = parse_u64(value);
  SPINDLE_CHECK(parsed.has_value(), "malformed {}: expected {}, got '{}'", path.string(),
                allow_max ? "an integer or 'max'" : "an integer", value);
  return parsed;
}

uint64_t read_integer_file(const fs::path& path) {
  const std::optional<std::string> text = read_file(path);
  SPINDLE_CHECK(text.has_value(), "cannot read {}", path.string());
  return *read_limit_file(path, *text, /*allow_max=*/false);
}

void read_meminfo(const fs::path& path, MemoryInfo& info) {
  const std::optional<std::string> text = read_file(path);
  SPINDLE_CHECK(text.has_value(), "cannot read {}", path.string());
  std::optional<uint64_t> total;
  std::optional<uint64_t> available;
  std::istringstream lines(*text);
  std::string line;
  while (std::getline(lines, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string_view key = trim(std::string_view(line).substr(0, colon));
    if (key != "MemTotal" && key != "MemAvailable") continue;
    std::string_view value = trim(std::string_view(line).substr(colon + 1));
    uint64_t scale = 1;
    if (value.ends_with("kB")) {
      value = trim(value.substr(0, value.size() - 2));
      scale = 1024;
    }
    const std::optional<uint64_t> parsed = parse_u64(value);
    SPINDLE_CHECK(parsed.has_value(), "malformed {}: cannot parse the {} line '{}'", path.string(),
                  key, line);
    (key == "MemTotal" ? total : available) = *parsed * scale;
  }
  SPINDLE_CHECK(total.has_value() && available.has_value(),
                "malformed {}: MemTotal and MemAvailable are required", path.string());
  info.total_bytes = *total;
  info.mem_available_bytes = *available;
}

// The process's cgroup paths from /proc/self/cgroup: the v2 "0::" path and the v1 path of the
// hierarchy carrying the "memory" controller (each nullopt when absent).
struct CgroupPaths {
  std::optional<std::string> v2;
  std::optional<std::string> v1_memory;
};

CgroupPaths read_cgroup_paths(const fs::path& path) {
  CgroupPaths paths;
  const std::optional<std::string> text = read_file(path);
  if (!text) return paths;
  std::istringstream lines(*text);
  std::string line;
  while (std::getline(lines, line)) {
    if (trim(line).empty()) continue;
    const size_t first = line.find(':');
    const size_t second = first == std::string::npos ? first : line.find(':', first + 1);
    SPINDLE_CHECK(second != std::string::npos,
                  "malformed {}: expected 'id:controllers:path', got '{}'", path.string(), line);
    const std::string_view id = std::string_view(line).substr(0, first);
    const std::string_view controllers =
        std::string_view(line).substr(first + 1, second - first - 1);
    const std::string cgroup_path(trim(std::string_view(line).substr(second + 1)));
    if (id == "0" && controllers.empty()) {
      paths.v2 = cgroup_path;
      continue;
    }
    std::string_view rest = controllers;
    while (!rest.empty()) {
      const size_t comma = rest.find(',');
      if (rest.substr(0, comma) == "memory") paths.v1_memory = cgroup_path;
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
  return paths;
}

// "/a/b" -> "a/b" so that it joins under a mount directory.
fs::path relative_cgroup_path(const std::string& cgroup_path) {
  const size_t begin = cgroup_path.find_first_not_of('/');
  return begin == std::string::npos ? fs::path() : fs::path(cgroup_path.substr(begin));
}

struct CgroupReading {
  std::optional<uint64_t> limit;
  uint64_t usage = 0;
  std::string path;  // relative to the mount, "/"-prefixed
};

// Directories to read: the process's cgroup and each ancestor up to the mount, or only the
// mount when the process's directory does not exist.
std::vector<std::pair<fs::path, std::string>> cgroup_dirs(const fs::path& mount,
                                                          const std::string& cgroup_path,
                                                          bool with_ancestors) {
  std::vector<std::pair<fs::path, std::string>> dirs;
  fs::path rel = relative_cgroup_path(cgroup_path);
  std::error_code ec;
  if (rel.empty() || !fs::is_directory(mount / rel, ec)) return {{mount, "/"}};
  while (!rel.empty()) {
    dirs.emplace_back(mount / rel, "/" + rel.generic_string());
    if (!with_ancestors) return dirs;
    rel = rel.parent_path();
  }
  dirs.emplace_back(mount, "/");
  return dirs;
}

// cgroup v2: the level with the smallest (limit - usage) binds; without any limit, the
// process's own level is reported. nullopt when no level has memory.max or memory.current.
std::optional<CgroupReading> read_cgroup_v2(const fs::path& mount, const std::string& path) {
  std::optional<CgroupReading> own;
  std::optional<CgroupReading> binding;
  for (const auto& [dir, name] : cgroup_dirs(mount, path, /*with_ancestors=*/true)) {
    const fs::path max_path = dir / "memory.max";
    const fs::path current_path = dir / "memory.current";
    const std::optional<std::string> max_text = read_file(max_path);
    std::error_code ec;
    const bool has_current = fs::exists(current_path, ec);
    if (!max_text && !has_current) continue;
    CgroupReading reading;
    reading.path = name;
    if (max_text) reading.limit = read_limit_file(max_path, *max_text, /*allow_max=*/true);
    if (has_current || reading.limit) reading.usage = read_integer_file(current_path);
    if (!own) own = reading;
    if (reading.limit) {
      const uint64_t headroom = *reading.limit - std::min(*reading.limit, reading.usage);
      if (!binding || headroom < *binding->limit - std::min(*binding->limit, binding->usage)) {
        binding = reading;
      }
    }
  }
  return binding ? binding : own;
}

std::optional<CgroupReading> read_cgroup_v1(const fs::path& mount, const std::string& path) {
  for (const auto& [dir, name] : cgroup_dirs(mount, path, /*with_ancestors=*/false)) {
    const fs::path limit_path = dir / "memory.limit_in_bytes";
    const std::optional<std::string> limit_text = read_file(limit_path);
    if (!limit_text) continue;
    CgroupReading reading;
    reading.path = name;
    reading.limit = read_limit_file(limit_path, *limit_text, /*allow_max=*/false);
    if (*reading.limit >= kV1UnlimitedThreshold) reading.limit.reset();
    reading.usage = read_integer_file(dir / "memory.usage_in_bytes");
    return reading;
  }
  return std::nullopt;
}

// "always [madvise] never" -> "madvise"; "unavailable" when the file is absent. Throws naming the
// file when it has no bracketed word.
std::string read_transparent_hugepage(const fs::path& path) {
  std::ifstream in(path);
  if (!in.good()) return "unavailable";
  std::string line;
  std::getline(in, line);
  const size_t open = line.find('[');
  const size_t close = line.find(']', open == std::string::npos ? 0 : open);
  SPINDLE_CHECK(open != std::string::npos && close != std::string::npos && close > open + 1,
                "{}: expected the mode in brackets (e.g. 'always [madvise] never'), got '{}'", path.string(), line);
  return line.substr(open + 1, close - open - 1);
}

}  // namespace

MemoryInfo read_memory_info(const fs::path& root) {
  MemoryInfo info;
  read_meminfo(root / "proc/meminfo", info);
  info.transparent_hugepage = read_transparent_hugepage(root / "sys/kernel/mm/transparent_hugepage/enabled");
  info.usable_bytes = info.mem_available_bytes;
  info.bound = "MemAvailable";

  const CgroupPaths paths = read_cgroup_paths(root / "proc/self/cgroup");
  const fs::path cgroup_mount = root / "sys/fs/cgroup";
  std::optional<CgroupReading> reading;
  if (paths.v1_memory) {
    reading = read_cgroup_v1(cgroup_mount / "memory", *paths.v1_memory);
    if (reading) info.cgroup_version = "v1";
  }
  if (!reading && paths.v2) {
    reading = read_cgroup_v2(cgroup_mount, *paths.v2);
    if (reading) info.cgroup_version = "v2";
  }
  if (!reading) return info;

  info.cgroup_path = reading->path;
  info.cgroup_limit_bytes = reading->limit;
  info.cgroup_usage_bytes = reading->usage;
  if (reading->limit) {
    const uint64_t headroom = *reading->limit - std::min(*reading->limit, reading->usage);
    if (headroom < info.usable_bytes) {
      info.usable_bytes = headroom;
      info.bound = fmt::format("cgroup {} limit minus usage", info.cgroup_version);
    }
  }
  return info;
}

}  // namespace spindle
