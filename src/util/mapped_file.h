// A read-only view of a whole file (RAII): its pages mapped, or a copy in transparent huge pages.
// Empty files give an empty span.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>

namespace spindle {

// Where a MappedFile's bytes live.
enum class FileMemory {
  kMapped,        // the file's pages, mapped read-only: shared with the page cache, no copy, 4 KiB pages
  kHugePageCopy,  // a private copy in anonymous memory advised for transparent huge pages
                  // (MADV_HUGEPAGE, 2 MiB aligned), read-only once filled. The CPU's decode streams
                  // its weights faster from 2 MiB pages (bench/results/2026-12-04-zen3-hugepage-weights)
                  // at the price of a read at start and memory of its own (the page cache's copy
                  // stays reclaimable). Where that memory cannot be had (mmap fails, e.g. under
                  // strict overcommit) the file is mapped instead, with a warning; memory() says which.
};

class MappedFile {
 public:
  MappedFile() = default;
  // Throws spindle::Error naming the path and the OS error when the file cannot be opened, mapped
  // or read.
  explicit MappedFile(const std::filesystem::path& path, FileMemory memory = FileMemory::kMapped);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<const std::byte> bytes() const { return {data_, size_}; }
  const std::filesystem::path& path() const { return path_; }
  FileMemory memory() const { return memory_; }

 private:
  void map_file(int fd);
  void copy_to_huge_pages(int fd);
  void read_range(int fd, std::byte* dest, size_t begin, size_t end) const;  // [begin, end) of the file
  void release();

  std::filesystem::path path_;
  FileMemory memory_ = FileMemory::kMapped;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
  void* region_ = nullptr;  // what munmap releases: the mapping (data_ lies inside it)
  size_t region_size_ = 0;
};

// Reads a whole (small) file into a string; throws naming the path on failure.
std::string read_text_file(const std::filesystem::path& path);

}  // namespace spindle
