// util/cache_file: FNV-1a against the published 64-bit test vectors (the FNV authors' table:
// "" -> cbf29ce484222325, "a" -> af63dc4c8601ec8c, "foobar" -> 85944171f73967e8), and the atomic
// write replacing a file whole, creating its folder, leaving no temporary behind.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

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

}  // namespace
}  // namespace spindle
