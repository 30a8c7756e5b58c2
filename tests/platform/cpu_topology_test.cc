// CPU lists, NUMA nodes from a sysfs-shaped folder, and the disjoint core shares of DP ranks.
#include "platform/cpu_topology.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "util/error.h"

namespace spindle {
namespace {

namespace fs = std::filesystem;

TEST(CpuTopologyTest, ParsesCpuLists) {
  EXPECT_EQ(parse_cpu_list("0-3,8,10-11\n"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(parse_cpu_list("5"), (std::vector<int>{5}));
  EXPECT_EQ(parse_cpu_list("3,1,1"), (std::vector<int>{1, 3}));
  EXPECT_EQ(parse_cpu_list(""), std::vector<int>{});
  EXPECT_THROW(parse_cpu_list("3-1"), Error);
  EXPECT_THROW(parse_cpu_list("a"), Error);
  EXPECT_THROW(parse_cpu_list("1,-2"), Error);
}

TEST(CpuTopologyTest, ReadsNodesFromSysfs) {
  const fs::path dir = fs::path(::testing::TempDir()) / "cpu_topology_nodes";
  fs::remove_all(dir);
  fs::create_directories(dir / "node0");
  fs::create_directories(dir / "node1");
  fs::create_directories(dir / "power");  // not a node
  std::ofstream(dir / "node0" / "cpulist") << "0-1,4-5\n";
  std::ofstream(dir / "node1" / "cpulist") << "2-3,6-7\n";
  const auto nodes = read_cpu_numa_nodes(dir);
  ASSERT_EQ(nodes.size(), 8u);
  EXPECT_EQ(nodes.at(0), 0);
  EXPECT_EQ(nodes.at(5), 0);
  EXPECT_EQ(nodes.at(2), 1);
  EXPECT_EQ(nodes.at(7), 1);
  EXPECT_TRUE(read_cpu_numa_nodes(dir / "missing").empty());
}

TEST(CpuTopologyTest, SharesAreDisjointCoverEveryCpuAndFollowNodes) {
  const std::vector<int> cpus = {0, 1, 2, 3, 4, 5, 6, 7};
  const std::map<int, int> nodes = {{0, 0}, {1, 0}, {4, 0}, {5, 0}, {2, 1}, {3, 1}, {6, 1}, {7, 1}};
  const auto two = split_cpu_shares(cpus, nodes, 2);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].cpus, (std::vector<int>{0, 1, 4, 5}));
  EXPECT_EQ(two[0].numa_node, 0);
  EXPECT_EQ(two[1].cpus, (std::vector<int>{2, 3, 6, 7}));
  EXPECT_EQ(two[1].numa_node, 1);
  // Uneven: sizes differ by at most one; every CPU exactly once.
  const auto three = split_cpu_shares(cpus, {}, 3);
  std::set<int> seen;
  size_t lo = 99, hi = 0;
  for (const auto& s : three) {
    lo = std::min(lo, s.cpus.size());
    hi = std::max(hi, s.cpus.size());
    for (int c : s.cpus) EXPECT_TRUE(seen.insert(c).second) << "CPU " << c << " in two shares";
    EXPECT_EQ(s.numa_node, -1);
  }
  EXPECT_EQ(seen.size(), cpus.size());
  EXPECT_LE(hi - lo, 1u);
  // One share spanning both nodes has no single node.
  EXPECT_EQ(split_cpu_shares(cpus, nodes, 1)[0].numa_node, -1);
  EXPECT_THROW(split_cpu_shares({0, 1}, {}, 3), Error);
  EXPECT_THROW(split_cpu_shares({0, 1}, {}, 0), Error);
}

}  // namespace
}  // namespace spindle
