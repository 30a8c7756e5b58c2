// read_memory_info() over fixture trees in tests/fixtures/cgroup/<case>/{proc,sys/fs/cgroup}.
// Expected numbers are worked out by hand from the fixture files:
//   every meminfo: MemTotal 16384000 kB = 16777216000 B, MemAvailable 12000000 kB = 12288000000 B.
#include "platform/memory_info.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "util/error.h"

namespace spindle {
namespace {

constexpr uint64_t kTotal = 16777216000ull;
constexpr uint64_t kAvailable = 12288000000ull;

std::filesystem::path fixture(const char* name) {
  return std::filesystem::path(SPINDLE_FIXTURES_DIR) / "cgroup" / name;
}

TEST(MemoryInfoTest, NoCgroup) {
  const MemoryInfo info = read_memory_info(fixture("none"));
  EXPECT_EQ(info.total_bytes, kTotal);
  EXPECT_EQ(info.mem_available_bytes, kAvailable);
  EXPECT_EQ(info.cgroup_version, "none");
  EXPECT_FALSE(info.cgroup_limit_bytes.has_value());
  EXPECT_FALSE(info.cgroup_usage_bytes.has_value());
  EXPECT_EQ(info.usable_bytes, kAvailable);
  EXPECT_EQ(info.bound, "MemAvailable");
}

TEST(MemoryInfoTest, V1Limit) {
  // limit 2 GiB, usage 512 MiB -> 1.5 GiB headroom, below MemAvailable.
  const MemoryInfo info = read_memory_info(fixture("v1"));
  EXPECT_EQ(info.cgroup_version, "v1");
  EXPECT_EQ(info.cgroup_path, "/docker/abc123");
  EXPECT_EQ(info.cgroup_limit_bytes, std::optional<uint64_t>(2147483648ull));
  EXPECT_EQ(info.cgroup_usage_bytes, std::optional<uint64_t>(536870912ull));
  EXPECT_EQ(info.usable_bytes, 1610612736ull);
  EXPECT_EQ(info.bound, "cgroup v1 limit minus usage");
}

TEST(MemoryInfoTest, V1HugeLimitMeansNone) {
  const MemoryInfo info = read_memory_info(fixture("v1_unlimited"));
  EXPECT_EQ(info.cgroup_version, "v1");
  EXPECT_FALSE(info.cgroup_limit_bytes.has_value());
  EXPECT_EQ(info.cgroup_usage_bytes, std::optional<uint64_t>(228372480ull));
  EXPECT_EQ(info.usable_bytes, kAvailable);
  EXPECT_EQ(info.bound, "MemAvailable");
}

TEST(MemoryInfoTest, V2Limit) {
  // limit 4 GiB, usage 1 GiB -> 3 GiB headroom.
  const MemoryInfo info = read_memory_info(fixture("v2"));
  EXPECT_EQ(info.cgroup_version, "v2");
  EXPECT_EQ(info.cgroup_path, "/user.slice/spindle.scope");
  EXPECT_EQ(info.cgroup_limit_bytes, std::optional<uint64_t>(4294967296ull));
  EXPECT_EQ(info.cgroup_usage_bytes, std::optional<uint64_t>(1073741824ull));
  EXPECT_EQ(info.usable_bytes, 3221225472ull);
  EXPECT_EQ(info.bound, "cgroup v2 limit minus usage");
}

TEST(MemoryInfoTest, V2MaxMeansNoLimit) {
  const MemoryInfo info = read_memory_info(fixture("v2_max"));
  EXPECT_EQ(info.cgroup_version, "v2");
  EXPECT_FALSE(info.cgroup_limit_bytes.has_value());
  EXPECT_EQ(info.cgroup_usage_bytes, std::optional<uint64_t>(524288000ull));
  EXPECT_EQ(info.usable_bytes, kAvailable);
  EXPECT_EQ(info.bound, "MemAvailable");
}

TEST(MemoryInfoTest, V2NamespacedFallsBackToMountRoot) {
  // /proc/self/cgroup names /kubepods/pod1234/abc, which is not under the mount; the mount's
  // own files say limit 8 GiB, usage 1 GiB -> 7 GiB headroom.
  const MemoryInfo info = read_memory_info(fixture("v2_namespaced"));
  EXPECT_EQ(info.cgroup_version, "v2");
  EXPECT_EQ(info.cgroup_path, "/");
  EXPECT_EQ(info.cgroup_limit_bytes, std::optional<uint64_t>(8589934592ull));
  EXPECT_EQ(info.usable_bytes, 7516192768ull);
  EXPECT_EQ(info.bound, "cgroup v2 limit minus usage");
}

TEST(MemoryInfoTest, V2ParentLimitBinds) {
  // Own cgroup: max (no limit). Parent system.slice: 2 GiB limit, 1.5 GiB used -> 512 MiB.
  const MemoryInfo info = read_memory_info(fixture("v2_nested"));
  EXPECT_EQ(info.cgroup_version, "v2");
  EXPECT_EQ(info.cgroup_path, "/system.slice");
  EXPECT_EQ(info.cgroup_limit_bytes, std::optional<uint64_t>(2147483648ull));
  EXPECT_EQ(info.cgroup_usage_bytes, std::optional<uint64_t>(1610612736ull));
  EXPECT_EQ(info.usable_bytes, 536870912ull);
  EXPECT_EQ(info.bound, "cgroup v2 limit minus usage");
}

void expect_error_naming(const std::filesystem::path& root, const std::string& file) {
  try {
    read_memory_info(root);
    FAIL() << "expected spindle::Error for " << file;
  } catch (const Error& e) {
    EXPECT_NE(e.message().find(file), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("malformed"), std::string::npos) << e.message();
  }
}

// The transparent huge page mode: the bracketed word of sys/kernel/mm/transparent_hugepage/enabled
// (v1: "always [madvise] never"; v2_nested: "[always] madvise never"; v2_max: "always madvise [never]";
// none and v2 have no such file; thp_malformed has no bracketed word).
TEST(MemoryInfoTest, TransparentHugePageMode) {
  EXPECT_EQ(read_memory_info(fixture("v1")).transparent_hugepage, "madvise");
  EXPECT_TRUE(read_memory_info(fixture("v1")).huge_pages_on_advice());
  EXPECT_EQ(read_memory_info(fixture("v2_nested")).transparent_hugepage, "always");
  EXPECT_EQ(read_memory_info(fixture("v2")).transparent_hugepage, "unavailable");
  EXPECT_EQ(read_memory_info(fixture("v2_max")).transparent_hugepage, "never");
  EXPECT_FALSE(read_memory_info(fixture("v2_max")).huge_pages_on_advice());
  EXPECT_EQ(read_memory_info(fixture("none")).transparent_hugepage, "unavailable");
  EXPECT_FALSE(read_memory_info(fixture("none")).huge_pages_on_advice());
  EXPECT_THAT([] { read_memory_info(fixture("thp_malformed")); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("transparent_hugepage/enabled: expected the mode")));
}

TEST(MemoryInfoTest, MalformedCgroupFileNamesTheFile) {
  expect_error_naming(fixture("v2_malformed"),
                      (fixture("v2_malformed") / "sys/fs/cgroup/app/memory.max").string());
}

TEST(MemoryInfoTest, MalformedMeminfoNamesTheFile) {
  expect_error_naming(fixture("meminfo_malformed"),
                      (fixture("meminfo_malformed") / "proc/meminfo").string());
}

TEST(MemoryInfoTest, MissingMeminfoIsAnError) {
  EXPECT_THROW(read_memory_info(fixture("does_not_exist")), Error);
}

TEST(MemoryInfoTest, ThisMachine) {
  const MemoryInfo info = read_memory_info();
  EXPECT_GT(info.total_bytes, 0u);
  EXPECT_GT(info.usable_bytes, 0u);
  EXPECT_LE(info.usable_bytes, info.mem_available_bytes);
  EXPECT_FALSE(info.bound.empty());
}

}  // namespace
}  // namespace spindle
