// GunzippedFile: decompresses a .gz written by the gzip tool itself (independent of zlib's gz*
// reading here) back to the original bytes, deletes its temporary file, and names the file on a
// truncated, corrupt, missing or wrongly named input.
#include "support/gunzipped_file.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "util/error.h"

namespace spindle::testing {
namespace {

std::string read_all(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_all(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

class GunzippedFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("gunzipped_file_test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    // ~330 kB of varied text: several deflate blocks.
    for (int i = 0; i < 30000; ++i) original_ += "line " + std::to_string(i * 7919 % 100003) + "\n";
    write_all(dir_ / "data.gguf", original_);
    const std::string cmd = "gzip -9n -k '" + (dir_ / "data.gguf").string() + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string error_of(const std::filesystem::path& path) {
    try {
      GunzippedFile f(path);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }

  std::filesystem::path dir_;
  std::string original_;
};

TEST_F(GunzippedFileTest, RestoresTheBytesAndRemovesTheTemporaryFile) {
  std::filesystem::path temp;
  {
    const GunzippedFile f(dir_ / "data.gguf.gz");
    temp = f.path();
    EXPECT_EQ(temp.extension(), ".gguf");
    EXPECT_NE(temp.filename().string().find("data.gguf"), std::string::npos) << temp;
    EXPECT_EQ(read_all(temp), original_);
  }
  EXPECT_FALSE(std::filesystem::exists(temp)) << temp;
}

TEST_F(GunzippedFileTest, BadInputsNameTheFile) {
  const std::string gz = read_all(dir_ / "data.gguf.gz");
  write_all(dir_ / "cut.gguf.gz", gz.substr(0, gz.size() / 2));
  EXPECT_NE(error_of(dir_ / "cut.gguf.gz").find("cut.gguf.gz: gzip data is truncated"), std::string::npos)
      << error_of(dir_ / "cut.gguf.gz");
  std::string bad = gz;
  for (size_t i = 20; i < 200; ++i) bad[i] = static_cast<char>(bad[i] ^ 0x5a);
  write_all(dir_ / "bad.gguf.gz", bad);
  EXPECT_NE(error_of(dir_ / "bad.gguf.gz").find("bad.gguf.gz: gzip data is corrupt"), std::string::npos)
      << error_of(dir_ / "bad.gguf.gz");
  EXPECT_NE(error_of(dir_ / "none.gguf.gz").find("none.gguf.gz: no such file"), std::string::npos);
  EXPECT_NE(error_of(dir_ / "data.gguf").find("data.gguf: expected a file name ending in .gz"),
            std::string::npos);
}

}  // namespace
}  // namespace spindle::testing
