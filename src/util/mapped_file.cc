#include "util/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>

#include <spdlog/spdlog.h>

#include "util/error.h"

namespace spindle {

namespace {
constexpr size_t kHugePageBytes = size_t{2} << 20;
constexpr size_t kReadChunkBytes = size_t{64} << 20;
}  // namespace

MappedFile::MappedFile(const std::filesystem::path& path, FileMemory memory) : path_(path), memory_(memory) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  SPINDLE_CHECK(fd >= 0, "cannot open {}: {}", path.string(), std::strerror(errno));
  try {
    struct stat st{};
    SPINDLE_CHECK(::fstat(fd, &st) == 0, "cannot stat {}: {}", path.string(), std::strerror(errno));
    SPINDLE_CHECK(S_ISREG(st.st_mode), "{} is not a regular file", path.string());
    size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0) {
      if (memory == FileMemory::kMapped) {
        map_file(fd);
      } else {
        copy_to_huge_pages(fd);
      }
    }
  } catch (...) {
    ::close(fd);
    release();
    throw;
  }
  ::close(fd);
}

void MappedFile::map_file(int fd) {
  void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  SPINDLE_CHECK(p != MAP_FAILED, "cannot mmap {} ({} bytes): {}", path_.string(), size_, std::strerror(errno));
  region_ = p;
  region_size_ = size_;
  data_ = static_cast<const std::byte*>(p);
}

void MappedFile::read_range(int fd, std::byte* dest, size_t begin, size_t end) const {
  for (size_t done = begin; done < end;) {
    const size_t want = std::min(kReadChunkBytes, end - done);
    const ssize_t got = ::pread(fd, dest + done, want, static_cast<off_t>(done));
    if (got < 0 && errno == EINTR) continue;
    SPINDLE_CHECK(got > 0, "cannot read {} at byte {} of {}: {}", path_.string(), done, size_,
                  got == 0 ? "unexpected end of file" : std::strerror(errno));
    done += static_cast<size_t>(got);
  }
}

void MappedFile::copy_to_huge_pages(int fd) {
  // One huge page of slack, so the copy can start on a 2 MiB boundary.
  const size_t rounded = (size_ + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  region_size_ = rounded + kHugePageBytes;
  void* p = ::mmap(nullptr, region_size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    // Strict overcommit (vm.overcommit_memory = 2) charges a private writable copy but not a
    // read-only file mapping: serve from the file's pages rather than not at all.
    spdlog::warn("cannot allocate {} bytes to copy {} into huge pages ({}); mapping the file instead", region_size_,
                 path_.string(), std::strerror(errno));
    region_size_ = 0;
    memory_ = FileMemory::kMapped;
    map_file(fd);
    return;
  }
  region_ = p;
  const auto base = reinterpret_cast<uintptr_t>(p);
  auto* dest = reinterpret_cast<std::byte*>((base + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes);
  // Advice only: a kernel without transparent huge pages keeps 4 KiB pages (still correct).
  (void)::madvise(dest, rounded, MADV_HUGEPAGE);
  // Two readers, each on its half (whole huge pages): the page faults, which zero (and may first
  // compact) 2 MiB pages, then run on two cores. 1B shape, 2.47 GB, after a mapped run: 0.71-0.87 s
  // against 0.94-2.45 s with one reader (bench/results/2026-12-04-zen3-hugepage-weights).
  const size_t half = std::min(size_, (size_ / 2 + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes);
  std::string second_error;
  std::thread second([&] {
    try {
      read_range(fd, dest, half, size_);
    } catch (const std::exception& e) {
      second_error = e.what();
    }
  });
  try {
    read_range(fd, dest, 0, half);
  } catch (...) {
    second.join();
    throw;
  }
  second.join();
  SPINDLE_CHECK(second_error.empty(), "{}", second_error);
  SPINDLE_CHECK(::mprotect(dest, rounded, PROT_READ) == 0, "cannot protect the copy of {}: {}", path_.string(),
                std::strerror(errno));
  data_ = dest;
}

MappedFile::~MappedFile() { release(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      memory_(other.memory_),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      region_(std::exchange(other.region_, nullptr)),
      region_size_(std::exchange(other.region_size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    memory_ = other.memory_;
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    region_ = std::exchange(other.region_, nullptr);
    region_size_ = std::exchange(other.region_size_, 0);
  }
  return *this;
}

void MappedFile::release() {
  if (region_ != nullptr) ::munmap(region_, region_size_);
  region_ = nullptr;
  region_size_ = 0;
  data_ = nullptr;
  size_ = 0;
}

std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  SPINDLE_CHECK(in.good(), "cannot open {}: {}", path.string(), std::strerror(errno));
  std::ostringstream out;
  out << in.rdbuf();
  SPINDLE_CHECK(!in.bad(), "cannot read {}", path.string());
  return out.str();
}

}  // namespace spindle
