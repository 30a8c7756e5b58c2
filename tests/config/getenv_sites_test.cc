// The environment is read in one file of src/: util/switches.cc (the registry). Any other call of
// getenv / secure_getenv or use of environ fails this test, which names the file and line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

namespace {

TEST(GetenvSitesTest, OnlyTheRegistryReadsTheEnvironment) {
  const std::filesystem::path src = std::filesystem::path(SPINDLE_SOURCE_DIR) / "src";
  ASSERT_TRUE(std::filesystem::is_directory(src)) << src;
  const std::filesystem::path registry = src / "util" / "switches.cc";
  // A call or a use as a word: getenv(, secure_getenv(, ::getenv, environ (not "environment").
  const std::regex site(R"((\bgetenv\s*\()|(\bsecure_getenv\b)|(\benviron\b))");
  int num_files = 0;
  std::vector<std::string> found;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(src)) {
    if (!entry.is_regular_file()) continue;
    const std::string ext = entry.path().extension().string();
    if (ext != ".cc" && ext != ".h" && ext != ".cu" && ext != ".cuh" && ext != ".in") continue;
    ++num_files;
    if (entry.path() == registry) continue;
    std::ifstream in(entry.path());
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
      const std::string code = line.substr(0, line.find("//"));  // comments may name them
      if (std::regex_search(code, site)) found.push_back(entry.path().string() + ":" + std::to_string(n) + ": " + line);
    }
  }
  EXPECT_GT(num_files, 100) << "src/ not where expected";
  for (const std::string& f : found) ADD_FAILURE() << "environment read outside util/switches.cc: " << f;
}

// The test can fail: the registry itself reads the environment, and the pattern sees it.
TEST(GetenvSitesTest, ThePatternFindsTheRegistrysOwnRead) {
  std::ifstream in(std::filesystem::path(SPINDLE_SOURCE_DIR) / "src" / "util" / "switches.cc");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(std::regex_search(text, std::regex(R"(\benviron\b)")));
}

}  // namespace
