// How much host memory this process may really use: MemAvailable, bounded by the memory
// cgroup's limit minus its current usage.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace spindle {

struct MemoryInfo {
  uint64_t total_bytes = 0;          // /proc/meminfo MemTotal
  uint64_t mem_available_bytes = 0;  // /proc/meminfo MemAvailable
  // The binding cgroup's limit and usage; the limit is unset when there is none
  // (v2 "max", v1 values >= 2^62), the usage is unset when no cgroup files were found.
  std::optional<uint64_t> cgroup_limit_bytes;
  std::optional<uint64_t> cgroup_usage_bytes;
  std::string cgroup_version = "none";  // "v1", "v2" or "none" (no memory cgroup files found)
  std::string cgroup_path;              // the cgroup directory read, relative to the mount
  // min(MemAvailable, limit - usage) when a limit is set (limit - usage clamps at 0).
  uint64_t usable_bytes = 0;
  // What sets usable_bytes: "MemAvailable", "cgroup v1 limit minus usage" or
  // "cgroup v2 limit minus usage".
  std::string bound;
  // The kernel's transparent huge page mode (root/sys/kernel/mm/transparent_hugepage/enabled, the
  // bracketed word): "always", "madvise" or "never"; "unavailable" when the file is absent.
  std::string transparent_hugepage = "unavailable";
  // Whether memory advised with MADV_HUGEPAGE gets huge pages: mode "always" or "madvise".
  bool huge_pages_on_advice() const { return transparent_hugepage == "always" || transparent_hugepage == "madvise"; }
};

// Reads root/proc/meminfo, root/sys/kernel/mm/transparent_hugepage/enabled, root/proc/self/cgroup and
// the memory controller files under
// root/sys/fs/cgroup: v2 <path>/memory.max and memory.current (every ancestor of <path> with a
// limit is considered, the smallest headroom binds); v1 memory/<path>/memory.limit_in_bytes and
// memory.usage_in_bytes. When the process's own cgroup directory is missing (a container with a
// namespaced cgroup mount) the mount's root directory is read instead. A v1 "memory" line wins
// over the v2 "0::" line (hybrid hierarchies keep the memory controller on v1).
// Throws spindle::Error naming the file when a file that exists is malformed, or when
// root/proc/meminfo is missing or lacks MemTotal/MemAvailable.
MemoryInfo read_memory_info(const std::filesystem::path& root = "/");

}  // namespace spindle
