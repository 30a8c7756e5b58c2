// util/huge_page_allocator.h: blocks of 2 MiB or more start on a 2 MiB boundary and carry the
// MADV_HUGEPAGE advice (the "hg" VmFlag of their mapping in /proc/self/smaps, where the kernel has
// transparent huge pages); smaller ones come from operator new; both hold what is written; a vector
// over the allocator copies and frees like any other. HugePageArena carves small blocks out of such
// chunks.
#include "util/huge_page_allocator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace spindle {
namespace {

// The VmFlags line of the mapping of /proc/self/smaps that contains p ("" when none does).
std::string vm_flags_of(const void* p) {
  const auto at = reinterpret_cast<uintptr_t>(p);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t begin = 0, end = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> begin >> dash >> end && dash == '-' && line.find(':') > line.find(' ')) {
      inside = at >= begin && at < end;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line;
  }
  return "";
}

TEST(HugePageAllocatorTest, LargeBlocksAreAlignedAdvisedAndHoldTheirBytes) {
  for (size_t bytes : {kHugePageMinBytes, kHugePageMinBytes * 3 + 12345}) {
    void* p = huge_page_alloc(bytes);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kHugePageMinBytes, 0u) << bytes;
    auto* b = static_cast<uint8_t*>(p);
    for (size_t i = 0; i < bytes; i += 4093) b[i] = static_cast<uint8_t>(i * 7);
    b[bytes - 1] = 0xA5;
    for (size_t i = 0; i < bytes; i += 4093) ASSERT_EQ(b[i], static_cast<uint8_t>(i * 7)) << i;
    EXPECT_EQ(b[bytes - 1], 0xA5);
    if (std::filesystem::exists("/sys/kernel/mm/transparent_hugepage/enabled")) {
      EXPECT_NE(vm_flags_of(p).find(" hg"), std::string::npos) << vm_flags_of(p);
    }
    huge_page_free(p, bytes);
  }
}

TEST(HugePageAllocatorTest, SmallBlocksAndVectorsWork) {
  void* p = huge_page_alloc(100);
  ASSERT_NE(p, nullptr);
  static_cast<uint8_t*>(p)[99] = 1;
  huge_page_free(p, 100);

  std::vector<uint8_t, HugePageAllocator<uint8_t>> big(kHugePageMinBytes + 64, 3), small(10, 4);
  big.back() = 9;
  const auto copy = big;  // a copy gets its own block, equal bytes
  EXPECT_NE(copy.data(), big.data());
  EXPECT_EQ(copy.size(), big.size());
  EXPECT_EQ(copy.back(), 9);
  EXPECT_EQ(copy[kHugePageMinBytes / 2], 3);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(big.data()) % kHugePageMinBytes, 0u);
  EXPECT_EQ(small[9], 4);
}

// HugePageArena: blocks are 64-byte aligned, do not overlap, hold their bytes; a block goes to the
// oldest chunk whose tail it fits, else starts a new 2 MiB-aligned, advised chunk, and one above the
// chunk size gets a chunk of its own.
TEST(HugePageArenaTest, BlocksAreAlignedDisjointAndAdvised) {
  HugePageArena arena(kHugePageMinBytes * 2);
  std::vector<std::pair<uint8_t*, size_t>> blocks;
  for (size_t bytes : {size_t{1000}, size_t{1} << 20, size_t{3}, size_t{3200000}, size_t{900000},
                       kHugePageMinBytes * 3 + 5, size_t{77}}) {
    auto* p = static_cast<uint8_t*>(arena.allocate(bytes));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << bytes;
    std::memset(p, static_cast<int>(blocks.size() + 1), bytes);
    blocks.emplace_back(p, bytes);
  }
  for (size_t i = 0; i < blocks.size(); ++i) {
    const auto [p, bytes] = blocks[i];
    EXPECT_EQ(p[0], i + 1) << i;  // no later block overwrote this one
    EXPECT_EQ(p[bytes - 1], i + 1) << i;
    for (size_t j = 0; j < blocks.size(); ++j) {
      if (j != i) EXPECT_TRUE(p + bytes <= blocks[j].first || blocks[j].first + blocks[j].second <= p) << i << " " << j;
    }
  }
  // Chunks: 4 MiB (blocks 0-2, then 4 and 6 by first fit: they fit its tail), 4 MiB (block 3:
  // 3200000 did not fit the first's 3,144,701 free bytes), the 6 MiB block's own. Offsets in the
  // first chunk: 0, 1024, 1049600 (3 bytes), 1049664 (64-aligned; 900000 bytes), 1949696.
  EXPECT_EQ(blocks[0].first + 1024, blocks[1].first);
  EXPECT_EQ(blocks[0].first + 1049600, blocks[2].first);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(blocks[3].first) % kHugePageMinBytes, 0u);
  EXPECT_EQ(blocks[0].first + 1049664, blocks[4].first);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(blocks[5].first) % kHugePageMinBytes, 0u);
  EXPECT_EQ(blocks[0].first + 1949696, blocks[6].first);
  EXPECT_EQ(arena.bytes_mapped(), 2 * 2 * kHugePageMinBytes + (kHugePageMinBytes * 3 + 4096));
  if (std::filesystem::exists("/sys/kernel/mm/transparent_hugepage/enabled")) {
    EXPECT_NE(vm_flags_of(blocks[1].first).find(" hg"), std::string::npos) << vm_flags_of(blocks[1].first);
  }
}

}  // namespace
}  // namespace spindle
