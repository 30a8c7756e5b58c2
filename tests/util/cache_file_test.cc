// util/cache_file: FNV-1a against the published 64-bit test vectors (the FNV authors' table:
// "" -> cbf29ce484222325, "a" -> af63dc4c8601ec8c, "foobar" -> 85944171f73967e8), and the atomic
// write replacing a file whole, creating its folder, leaving no temporary behind; the selection
// caches' keyed-outcomes file (expected text written by hand from its definition in cache_file.h)
// read back, and refused when it names another key or is corrupt.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "util/cache_file.h"

namespace spindle {
namespace {

std::string read(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(CacheFileTest, Fnv1aMatchesThePublishedVectors) {
  EXPECT_EQ(fnv1a_64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a_64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a_64("foobar"), 0x85944171f73967e8ull);
}

TEST(CacheFileTest, AtomicWriteReplacesTheFileAndCreatesTheFolder) {
  const auto dir = std::filesystem::temp_directory_path() / ("spindle_cache_file_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const auto path = dir / "sub" / "x.json";
  write_file_atomically(path, "first, longer text\n");
  EXPECT_EQ(read(path), "first, longer text\n");
  write_file_atomically(path, "second\n");
  EXPECT_EQ(read(path), "second\n");
  int entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(path.parent_path())) ++entries;
  EXPECT_EQ(entries, 1) << "a temporary file was left behind";
  std::filesystem::remove_all(dir);
}

// The outcomes read_keyed_outcomes hands over, as "name=outcome" in call order.
struct Received {
  std::vector<std::string> calls;
  bool ok = false;
};
Received read_outcomes(const std::filesystem::path& path, std::string_view key) {
  Received r;
  r.ok = read_keyed_outcomes(path, key, "test cache", [&](const std::string& name, const nlohmann::json& o) {
    if (o.is_string() && o == "throw") throw std::runtime_error("bad outcome");
    r.calls.push_back(name + "=" + o.dump());
  });
  return r;
}

TEST(CacheFileTest, KeyedOutcomesAreWrittenAndReadBack) {
  const auto dir = std::filesystem::temp_directory_path() / ("spindle_keyed_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const auto path = dir / "c.json";
  const Received absent = read_outcomes(path, "k1");
  EXPECT_TRUE(absent.ok) << "no file is an empty cache, not a bad one";
  EXPECT_TRUE(absent.calls.empty());

  write_keyed_outcomes(path, "k1", nlohmann::json{{"zeta", 2}, {"alpha", {{"passed", true}}}}, "test cache");
  EXPECT_EQ(read(path), "{\n  \"key\": \"k1\",\n  \"outcomes\": {\n    \"alpha\": {\n      \"passed\": true\n    },\n"
                        "    \"zeta\": 2\n  }\n}\n");
  const Received back = read_outcomes(path, "k1");
  EXPECT_TRUE(back.ok);
  EXPECT_EQ(back.calls, (std::vector<std::string>{"alpha={\"passed\":true}", "zeta=2"}));
  std::filesystem::remove_all(dir);
}

TEST(CacheFileTest, KeyedOutcomesOfAnotherKeyOrCorruptAreRefused) {
  const auto dir = std::filesystem::temp_directory_path() / ("spindle_keyed_bad_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const auto path = dir / "c.json";
  write_keyed_outcomes(path, "k1", nlohmann::json{{"a", 1}}, "test cache");
  const Received other = read_outcomes(path, "k2");
  EXPECT_FALSE(other.ok);
  EXPECT_TRUE(other.calls.empty());

  // A bad outcome after a good one: false, and the caller drops what it received.
  write_keyed_outcomes(path, "k1", nlohmann::json{{"a", 1}, {"b", "throw"}}, "test cache");
  const Received thrown = read_outcomes(path, "k1");
  EXPECT_FALSE(thrown.ok);
  EXPECT_EQ(thrown.calls, std::vector<std::string>{"a=1"});

  for (const char* text : {"{ not json", "{\"outcomes\": {}}", "{\"key\": 3, \"outcomes\": {}}", "{\"key\": \"k1\"}"}) {
    std::ofstream(path, std::ios::trunc) << text;
    const Received corrupt = read_outcomes(path, "k1");
    EXPECT_FALSE(corrupt.ok) << text;
    EXPECT_TRUE(corrupt.calls.empty()) << text;
  }
  std::filesystem::remove_all(dir);
}

TEST(CacheFileTest, AKeyedOutcomesWriteThatFailsOnlyWarns) {
  // A folder where the file should be: the rename fails; the write must not throw.
  const auto dir = std::filesystem::temp_directory_path() / ("spindle_keyed_fail_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "c.json" / "inside");
  EXPECT_NO_THROW(write_keyed_outcomes(dir / "c.json", "k1", nlohmann::json::object(), "test cache"));
  EXPECT_TRUE(std::filesystem::is_directory(dir / "c.json"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace spindle
