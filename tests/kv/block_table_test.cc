// BlockTable: allocate, extend and free with reference counts; check_integrity after each case.
#include <gtest/gtest.h>

#include <ostream>
#include <utility>
#include <vector>

#include "kv/block_table.h"
#include "kv/page_allocator.h"
#include "util/error.h"

namespace spindle::kv {
namespace {

struct ExtendCase {
  int page_size;
  std::vector<int> extends;       // successive extend() sizes
  std::vector<int> num_pages;     // pages held after each
};
void PrintTo(const ExtendCase& c, std::ostream* os) {
  *os << "page " << c.page_size << ", " << c.extends.size() << " extends";
}

class BlockTableExtendTest : public ::testing::TestWithParam<ExtendCase> {};

TEST_P(BlockTableExtendTest, PagesCoverTheTokens) {
  const ExtendCase& c = GetParam();
  PageAllocator allocator(64, c.page_size);
  BlockTable table(allocator);
  int tokens = 0;
  for (size_t i = 0; i < c.extends.size(); ++i) {
    EXPECT_EQ(table.num_pages_to_extend(c.extends[i]), c.num_pages[i] - table.num_pages());
    ASSERT_TRUE(table.extend(c.extends[i]));
    tokens += c.extends[i];
    EXPECT_EQ(table.num_tokens(), tokens);
    EXPECT_EQ(table.num_pages(), c.num_pages[i]) << "after extend " << i;
    const BlockTable* live[] = {&table};
    check_integrity(allocator, live);
  }
  table.free();
  EXPECT_EQ(table.num_pages(), 0);
  EXPECT_EQ(allocator.num_free_pages(), 64);
  check_integrity(allocator, {});
}

INSTANTIATE_TEST_SUITE_P(Cases, BlockTableExtendTest,
                         ::testing::Values(ExtendCase{16, {17, 1, 1, 13, 1}, {2, 2, 2, 2, 3}},  // prefill + decode
                                           ExtendCase{16, {0, 16, 0, 1}, {0, 1, 1, 2}},
                                           ExtendCase{1, {3, 1, 1}, {3, 4, 5}},
                                           ExtendCase{4, {5, 3, 4, 1}, {2, 2, 3, 4}}));

TEST(BlockTableTest, PagesAreHandedOutInOrderAndExclusive) {
  PageAllocator allocator(8, 4);
  BlockTable a(allocator), b(allocator);
  ASSERT_TRUE(a.extend(8));
  ASSERT_TRUE(b.extend(9));
  EXPECT_EQ(a.pages(), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(b.pages(), (std::vector<int32_t>{2, 3, 4}));
  for (const int32_t p : a.pages()) EXPECT_EQ(allocator.ref_count(p), 1);
  const BlockTable* live[] = {&a, &b};
  check_integrity(allocator, live);
}

TEST(BlockTableTest, ExtendIsAllOrNothing) {
  PageAllocator allocator(4, 4);
  BlockTable a(allocator), b(allocator);
  ASSERT_TRUE(a.extend(10));  // 3 pages
  EXPECT_FALSE(b.extend(5));  // needs 2, 1 free
  EXPECT_EQ(b.num_pages(), 0);
  EXPECT_EQ(b.num_tokens(), 0);
  EXPECT_EQ(allocator.num_free_pages(), 1);
  ASSERT_TRUE(a.extend(2));  // 12 tokens still fit in 3 pages
  EXPECT_FALSE(a.extend(5));  // 17 tokens need 5 pages
  EXPECT_EQ(a.num_tokens(), 12);
  EXPECT_EQ(a.num_pages(), 3);
  const BlockTable* live[] = {&a, &b};
  check_integrity(allocator, live);
}

TEST(BlockTableTest, FreeAfterAbortAndDestructor) {
  PageAllocator allocator(6, 2);
  {
    BlockTable a(allocator);
    ASSERT_TRUE(a.extend(5));
    BlockTable b(allocator);
    ASSERT_TRUE(b.extend(2));
    EXPECT_EQ(allocator.num_in_use_pages(), 4);
    a.free();  // abort
    EXPECT_EQ(allocator.num_free_pages(), 5);
    const BlockTable* live[] = {&a, &b};
    check_integrity(allocator, live);
    ASSERT_TRUE(a.extend(1));  // a freed table is reusable
  }  // both destroyed: everything back
  EXPECT_EQ(allocator.num_free_pages(), 6);
  check_integrity(allocator, {});
}

TEST(BlockTableTest, MoveTransfersTheReferences) {
  PageAllocator allocator(4, 4);
  BlockTable a(allocator);
  ASSERT_TRUE(a.extend(6));
  BlockTable b = std::move(a);
  EXPECT_EQ(b.num_pages(), 2);
  EXPECT_EQ(a.num_pages(), 0);
  BlockTable c(allocator);
  ASSERT_TRUE(c.extend(1));
  c = std::move(b);  // c's own page is released first
  EXPECT_EQ(allocator.num_in_use_pages(), 2);
  const BlockTable* live[] = {&c};
  check_integrity(allocator, live);
}

TEST(BlockTableTest, SharedPrefixPagesCountEachHolder) {
  PageAllocator allocator(6, 2);
  BlockTable a(allocator);
  ASSERT_TRUE(a.extend(4));
  for (const int32_t p : a.pages()) allocator.set_cached(p, true);  // as the prefix cache does
  BlockTable b(allocator);
  b.assign_prefix(a.pages());
  EXPECT_EQ(b.num_prefix_tokens(), 4);
  ASSERT_TRUE(b.extend(1));
  EXPECT_EQ(allocator.ref_count(a.pages()[0]), 2);
  const BlockTable* live[] = {&a, &b};
  check_integrity(allocator, live);
  a.free();
  b.free();
  EXPECT_EQ(allocator.num_cached_pages(), 2);
  EXPECT_EQ(allocator.num_free_pages(), 4);
  check_integrity(allocator, {});
}

TEST(BlockTableTest, IntegrityCatchesAForgottenTable) {
  PageAllocator allocator(4, 2);
  BlockTable a(allocator), b(allocator);
  ASSERT_TRUE(a.extend(2));
  ASSERT_TRUE(b.extend(2));
  const BlockTable* only_a[] = {&a};
  EXPECT_THROW(check_integrity(allocator, only_a), Error);  // b's page looks leaked
}

}  // namespace
}  // namespace spindle::kv
