#include "platform/cpu_topology.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "util/error.h"

namespace spindle {

namespace {
int parse_int(std::string_view text, std::string_view whole) {
  int v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  SPINDLE_CHECK(!text.empty() && ec == std::errc() && end == text.data() + text.size() && v >= 0,
                "'{}' in the CPU list '{}' is not a CPU number", text, whole);
  return v;
}
std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\n' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}
}  // namespace

std::vector<int> parse_cpu_list(std::string_view text) {
  const std::string_view whole = trim(text);
  std::set<int> cpus;
  std::string_view rest = whole;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view item = trim(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    const size_t dash = item.find('-');
    if (dash == std::string_view::npos) {
      cpus.insert(parse_int(item, whole));
      continue;
    }
    const int lo = parse_int(item.substr(0, dash), whole), hi = parse_int(item.substr(dash + 1), whole);
    SPINDLE_CHECK(hi >= lo, "'{}' in the CPU list '{}' ends below its start", item, whole);
    for (int c = lo; c <= hi; ++c) cpus.insert(c);
  }
  return {cpus.begin(), cpus.end()};
}

std::map<int, int> read_cpu_numa_nodes(const std::filesystem::path& node_dir) {
  std::map<int, int> out;
  std::error_code ec;
  if (!std::filesystem::is_directory(node_dir, ec)) return out;
  for (const auto& entry : std::filesystem::directory_iterator(node_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with("node") || name.size() == 4 ||
        !std::all_of(name.begin() + 4, name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      continue;
    }
    std::ifstream in(entry.path() / "cpulist");
    if (!in) continue;
    std::stringstream text;
    text << in.rdbuf();
    const int node = std::stoi(name.substr(4));
    for (int cpu : parse_cpu_list(text.str())) out[cpu] = node;
  }
  return out;
}

std::vector<CpuShare> split_cpu_shares(const std::vector<int>& cpus, const std::map<int, int>& numa_node_of, int n) {
  SPINDLE_CHECK(n >= 1, "cannot split CPUs into {} shares", n);
  SPINDLE_CHECK(static_cast<size_t>(n) <= cpus.size(), "{} ranks need a CPU each, and there are {} usable CPUs", n,
                cpus.size());
  auto node = [&](int cpu) {
    const auto it = numa_node_of.find(cpu);
    return it == numa_node_of.end() ? -1 : it->second;
  };
  std::vector<int> ordered = cpus;
  std::sort(ordered.begin(), ordered.end(), [&](int a, int b) { return std::pair(node(a), a) < std::pair(node(b), b); });
  std::vector<CpuShare> shares(static_cast<size_t>(n));
  const size_t total = ordered.size();
  for (int r = 0; r < n; ++r) {
    const size_t begin = total * static_cast<size_t>(r) / static_cast<size_t>(n);
    const size_t end = total * static_cast<size_t>(r + 1) / static_cast<size_t>(n);
    CpuShare& s = shares[static_cast<size_t>(r)];
    s.cpus.assign(ordered.begin() + static_cast<std::ptrdiff_t>(begin), ordered.begin() + static_cast<std::ptrdiff_t>(end));
    std::sort(s.cpus.begin(), s.cpus.end());
    s.numa_node = node(s.cpus.front());
    for (int c : s.cpus) {
      if (node(c) != s.numa_node) s.numa_node = -1;
    }
  }
  return shares;
}

}  // namespace spindle
