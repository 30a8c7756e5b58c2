// GunzippedFile: a gzip-compressed test input (e.g. tests/golden/gguf/*.gguf.gz, stored compressed to
// keep the tracked tree small) decompressed into a fresh temporary file for the test's lifetime.
//
// Contract: the constructor reads `gz_path` with zlib's gzopen/gzread and writes every decompressed
// byte to a new file in std::filesystem::temp_directory_path(), named
// "spindle-test-XXXXXX-<name of gz_path without .gz>" (so "ggml-vocab-gpt-2.gguf.gz" becomes
// "...-ggml-vocab-gpt-2.gguf", keeping the extension readers look at). path() names it until the
// object is destroyed, which deletes it. A missing, unreadable or corrupt/truncated .gz, or a name
// not ending in ".gz", throws spindle::Error naming the file. Not copyable; movable.
#pragma once

#include <filesystem>

namespace spindle::testing {

class GunzippedFile {
 public:
  explicit GunzippedFile(const std::filesystem::path& gz_path);
  ~GunzippedFile();
  GunzippedFile(GunzippedFile&& other) noexcept;
  GunzippedFile& operator=(GunzippedFile&& other) noexcept;
  GunzippedFile(const GunzippedFile&) = delete;
  GunzippedFile& operator=(const GunzippedFile&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;  // empty after a move
};

}  // namespace spindle::testing
