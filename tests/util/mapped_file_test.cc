#include <gtest/gtest.h>
#include <sys/resource.h>

#include <filesystem>
#include <fstream>
#include <optional>
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

// A copy in huge pages holds the file's bytes exactly, starts on a 2 MiB boundary (so the kernel
// can back it with huge pages), reports its memory, moves like a mapping, and is empty for an
// empty file. The content is a pattern no run of the same bytes can fake: byte i = (i * 131 +
// i / 4099) mod 251, over 3 MiB and 123 bytes (a partial last page).
TEST(MappedFileTest, HugePageCopyHoldsTheFile) {
  std::string contents((size_t{3} << 20) + 123, '\0');
  for (size_t i = 0; i < contents.size(); ++i) contents[i] = static_cast<char>((i * 131 + i / 4099) % 251);
  const auto path = temp_file("huge", contents);
  MappedFile file(path, FileMemory::kHugePageCopy);
  EXPECT_EQ(file.memory(), FileMemory::kHugePageCopy);
  ASSERT_EQ(file.size(), contents.size());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(file.data()) % (uintptr_t{2} << 20), 0u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(file.data()), file.size()), contents);
  MappedFile moved = std::move(file);
  EXPECT_EQ(moved.size(), contents.size());
  EXPECT_EQ(moved.memory(), FileMemory::kHugePageCopy);
  EXPECT_EQ(static_cast<char>(moved.bytes()[contents.size() - 1]), contents.back());
  EXPECT_EQ(file.size(), 0u);
  EXPECT_EQ(MappedFile(path).memory(), FileMemory::kMapped);
  fs::remove(path);

  const auto empty = temp_file("huge_empty", "");
  EXPECT_TRUE(MappedFile(empty, FileMemory::kHugePageCopy).bytes().empty());
  fs::remove(empty);
  EXPECT_THROW(MappedFile("/nonexistent/spindle/model.safetensors", FileMemory::kHugePageCopy), Error);
}

// Where the copy's memory cannot be had, the file is mapped instead (and says so). Forced here with an
// address-space limit that leaves room for the 64 MiB file mapping but not for the copy's 66 MiB
// (the file rounded to 2 MiB pages plus one page of alignment slack); the limit is restored after.
TEST(MappedFileTest, HugePageCopyFallsBackToMappingWhenMemoryIsRefused) {
  std::string contents(size_t{64} << 20, '\0');
  for (size_t i = 0; i < contents.size(); i += 4096) contents[i] = static_cast<char>(i / 4096 % 251);
  const auto path = temp_file("huge_refused", contents);
  std::ifstream status("/proc/self/status");
  uint64_t vm_kib = 0;
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmSize:", 0) == 0) vm_kib = std::stoull(line.substr(7));
  }
  ASSERT_GT(vm_kib, 0u);
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_AS, &old), 0);
  rlimit tight = old;
  tight.rlim_cur = vm_kib * 1024 + (size_t{65} << 20);
  if (old.rlim_cur != RLIM_INFINITY && old.rlim_cur < tight.rlim_cur) GTEST_SKIP() << "address space already limited";
  ASSERT_EQ(setrlimit(RLIMIT_AS, &tight), 0);
  std::optional<MappedFile> file;
  std::string error;
  try {
    file.emplace(path, FileMemory::kHugePageCopy);
  } catch (const std::exception& e) {
    error = e.what();
  }
  ASSERT_EQ(setrlimit(RLIMIT_AS, &old), 0);
  ASSERT_TRUE(error.empty()) << error;
  EXPECT_EQ(file->memory(), FileMemory::kMapped);
  ASSERT_EQ(file->size(), contents.size());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(file->data()), file->size()), contents);
  file.reset();
  fs::remove(path);
}

TEST(MappedFileTest, ReadTextFile) {
  const auto path = temp_file("text", "{\"a\": 1}");
  EXPECT_EQ(read_text_file(path), "{\"a\": 1}");
  EXPECT_THROW(read_text_file("/nonexistent/x.json"), Error);
  fs::remove(path);
}

}  // namespace
}  // namespace spindle
