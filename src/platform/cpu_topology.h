// Which logical CPUs belong to which NUMA node, and the disjoint core shares of data-parallel CPU
// ranks (cli/serving_stack.cc pins each rank's threads to its share).
#pragma once

#include <filesystem>
#include <map>
#include <string_view>
#include <vector>

namespace spindle {

// A Linux CPU list ("0-3,8,10-11"), ascending and without duplicates. Throws spindle::Error on
// anything else (a bad number, a range whose end is below its start).
std::vector<int> parse_cpu_list(std::string_view text);

// CPU -> NUMA node from <node_dir>/node<N>/cpulist (Linux: /sys/devices/system/node). Empty
// when the folder is missing (no NUMA information: treat as one node).
std::map<int, int> read_cpu_numa_nodes(const std::filesystem::path& node_dir = "/sys/devices/system/node");

struct CpuShare {
  std::vector<int> cpus;  // ascending, not empty
  int numa_node = -1;     // the node every CPU of the share is on; -1 when mixed or unknown
};

// Splits `cpus` (this process's usable CPUs) into `n` disjoint shares of sizes differing by at
// most one: the CPUs are ordered by NUMA node (then id) and cut into contiguous runs, so with n a
// multiple of the node count and equal nodes every share lies on one node. Throws spindle::Error
// when n < 1 or n > cpus.size().
std::vector<CpuShare> split_cpu_shares(const std::vector<int>& cpus, const std::map<int, int>& numa_node_of, int n);

}  // namespace spindle
