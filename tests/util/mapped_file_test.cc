#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "util/error.h"
#include "util/mapped_file.h"

namespace spindle {
namespace {

namespace fs = std::filesystem;

fs::path temp_file(const std::string& name, const std::string& contents) {
  const fs::path path = fs::temp_directory_path() / ("spindle_mapped_file_test_" + name);
  std::ofstream(path, std::ios::binary) << contents;
  return path;
}

TEST(MappedFileTest, MapsWholeFile) {
  const auto path = temp_file("a", "hello spindle");
  MappedFile file(path);
  ASSERT_EQ(file.size(), 13u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(file.data()), file.size()), "hello spindle");
  MappedFile moved = std::move(file);
  EXPECT_EQ(moved.size(), 13u);
  EXPECT_EQ(file.size(), 0u);
  fs::remove(path);
}

TEST(MappedFileTest, EmptyFileIsEmptySpan) {
  const auto path = temp_file("empty", "");
  MappedFile file(path);
  EXPECT_EQ(file.size(), 0u);
  EXPECT_TRUE(file.bytes().empty());
  fs::remove(path);
}

TEST(MappedFileTest, MissingFileNamesThePath) {
  try {
    MappedFile file("/nonexistent/spindle/model.safetensors");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/spindle/model.safetensors"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("No such file"), std::string::npos);
  }
}

TEST(MappedFileTest, DirectoryIsRejected) {
  EXPECT_THROW(MappedFile(fs::temp_directory_path()), Error);
}

TEST(MappedFileTest, ReadTextFile) {
  const auto path = temp_file("text", "{\"a\": 1}");
  EXPECT_EQ(read_text_file(path), "{\"a\": 1}");
  EXPECT_THROW(read_text_file("/nonexistent/x.json"), Error);
  fs::remove(path);
}

}  // namespace
}  // namespace spindle
