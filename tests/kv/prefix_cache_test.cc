// Prefix cache scenarios, table-driven: each step admits, finishes or aborts a request the way
// the engine will (match all but the last prompt token, assign the prefix, extend by the rest;
// on finish insert then free; on abort just free) and states the expected page counts. After
// every step check_integrity() runs over the cache, the allocator and the live block tables.
#include <gtest/gtest.h>

#include <map>
#include <ostream>
#include <memory>
#include <string>
#include <vector>

#include "kv/block_table.h"
#include "kv/page_allocator.h"
#include "kv/prefix_cache.h"
#include "util/error.h"

namespace spindle::kv {
namespace {

using Tokens = std::vector<int32_t>;

// [start, start + n)
Tokens run(int32_t start, int n) {
  Tokens t;
  for (int i = 0; i < n; ++i) t.push_back(start + i);
  return t;
}
Tokens cat(Tokens a, const Tokens& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

enum class Op { kAdmit, kFinish, kAbort, kTouch };

struct Step {
  Op op;
  int id;
  Tokens tokens = {};           // kAdmit: the prompt; kTouch: tokens to match (no request)
  int matched_tokens = -1;      // kAdmit/kTouch: expected prefix-cache hit, in tokens
  bool admitted = true;         // kAdmit: whether extend() found the pages
  int inserted_pages = -1;      // kFinish: pages newly cached
  // Expected allocator counts after the step; -1: not checked.
  int num_free = -1, num_cached = -1, num_in_use = -1;
};

struct Scenario {
  std::string name;
  int num_pages;
  int page_size;
  bool enabled;
  std::vector<Step> steps;
  // Expected stats at the end.
  uint64_t num_hits, num_misses, num_evicted_pages;
};
void PrintTo(const Scenario& s, std::ostream* os) { *os << s.name; }

class PrefixCacheScenarioTest : public ::testing::TestWithParam<Scenario> {};

TEST_P(PrefixCacheScenarioTest, Runs) {
  const Scenario& s = GetParam();
  PageAllocator allocator(s.num_pages, s.page_size);
  PrefixCache cache(allocator, s.enabled);
  std::map<int, std::unique_ptr<BlockTable>> tables;
  std::map<int, Tokens> prompts;

  auto live = [&] {
    std::vector<const BlockTable*> v;
    for (const auto& [id, t] : tables) v.push_back(t.get());
    return v;
  };
  for (size_t i = 0; i < s.steps.size(); ++i) {
    const Step& step = s.steps[i];
    SCOPED_TRACE("step " + std::to_string(i) + " request " + std::to_string(step.id));
    switch (step.op) {
      case Op::kAdmit: {
        ASSERT_FALSE(step.tokens.empty());
        const auto pages = cache.match(std::span(step.tokens).first(step.tokens.size() - 1));
        EXPECT_EQ(static_cast<int>(pages.size()) * s.page_size, step.matched_tokens);
        auto table = std::make_unique<BlockTable>(allocator);
        table->assign_prefix(pages);
        const bool ok = table->extend(static_cast<int>(step.tokens.size()) - table->num_tokens());
        EXPECT_EQ(ok, step.admitted);
        if (ok) {
          EXPECT_EQ(table->num_tokens(), static_cast<int>(step.tokens.size()));
          tables[step.id] = std::move(table);
          prompts[step.id] = step.tokens;
        }  // else: the table is dropped, releasing its prefix references (a request put back)
        break;
      }
      case Op::kFinish: {
        BlockTable& table = *tables.at(step.id);
        const int inserted = cache.insert(prompts.at(step.id), table);
        if (step.inserted_pages >= 0) {
          EXPECT_EQ(inserted, step.inserted_pages);
        }
        table.free();
        tables.erase(step.id);
        break;
      }
      case Op::kAbort:
        tables.at(step.id)->free();
        tables.erase(step.id);
        break;
      case Op::kTouch:
        EXPECT_EQ(static_cast<int>(cache.match(step.tokens).size()) * s.page_size, step.matched_tokens);
        break;
    }
    if (step.num_free >= 0) {
      EXPECT_EQ(allocator.num_free_pages(), step.num_free);
    }
    if (step.num_cached >= 0) {
      EXPECT_EQ(allocator.num_cached_pages(), step.num_cached);
    }
    if (step.num_in_use >= 0) {
      EXPECT_EQ(allocator.num_in_use_pages(), step.num_in_use);
    }
    const auto tables_now = live();
    ASSERT_NO_THROW(check_integrity(cache, tables_now));
  }
  EXPECT_EQ(cache.stats().num_hits, s.num_hits);
  EXPECT_EQ(cache.stats().num_misses(), s.num_misses);
  EXPECT_EQ(cache.stats().num_evicted_pages, s.num_evicted_pages);

  // Whatever is left: abort it; every page is then free or cached, none in use.
  for (auto& [id, t] : tables) t->free();
  tables.clear();
  ASSERT_NO_THROW(check_integrity(cache, {}));
  EXPECT_EQ(allocator.num_in_use_pages(), 0);
  EXPECT_EQ(allocator.num_free_pages() + allocator.num_cached_pages(), s.num_pages);
}

const Tokens kSystem = run(0, 12);  // three pages of 4

const Scenario kScenarios[] = {
    {"shared_prefix", 16, 4, true,
     {
         // A: 14 tokens = 4 pages; nothing cached yet.
         {Op::kAdmit, 1, cat(kSystem, {100, 101}), 0, true, -1, 12, 0, 4},
         // A finishes: its 3 full pages are cached, the partial 4th is freed.
         {Op::kFinish, 1, {}, -1, true, 3, 13, 3, 0},
         // B: 18 tokens; matches the 3 system pages, allocates 2 more.
         {Op::kAdmit, 2, cat(kSystem, run(200, 6)), 12, true, -1, 11, 0, 5},
         // C: 13 tokens; shares the same 3 pages (each now referenced twice), 1 page of its own.
         {Op::kAdmit, 3, cat(kSystem, {300}), 12, true, -1, 10, 0, 6},
         // B finishes: its 4th page (tokens 200..203) joins the tree; its 5th is freed.
         {Op::kFinish, 2, {}, -1, true, 1, 11, 1, 4},
         // C aborts: its own page is freed, the shared pages stay cached.
         {Op::kAbort, 3, {}, -1, true, -1, 12, 4, 0},
         // D repeats B's prompt: all 4 full pages match (17 of 18 tokens offered -> 16).
         {Op::kAdmit, 4, cat(kSystem, run(200, 6)), 16, true, -1, 11, 0, 5},
     },
     2 + 1, 1, 0},
    {"eviction_under_pressure", 8, 4, true,
     {
         {Op::kAdmit, 1, run(0, 16), 0, true, -1, 4, 0, 4},
         {Op::kFinish, 1, {}, -1, true, 4, 4, 4, 0},
         {Op::kAdmit, 2, run(100, 16), 0, true, -1, 0, 4, 4},
         {Op::kFinish, 2, {}, -1, true, 4, 0, 8, 0},
         // C needs 3 pages with none free: A's chain is least recently used, so its last three
         // pages go (a parent becomes a leaf once its child is evicted).
         {Op::kAdmit, 3, run(200, 12), 0, true, -1, 0, 5, 3},
         {Op::kAbort, 3, {}, -1, true, -1, 3, 5, 0},
         // A's prompt again: only its first page survived.
         {Op::kTouch, 0, run(0, 16), 4},
         // D repeats B: 3 pages match (15 tokens offered), 1 page allocated from the free list.
         {Op::kAdmit, 4, run(100, 16), 12, true, -1, 2, 2, 4},
         // E needs 5 pages: 2 free + 2 evictable (A's first page, B's last); D's references
         // protect the rest, so E is refused and nothing is allocated.
         {Op::kAdmit, 5, run(300, 20), 0, false, -1, 4, 0, 4},
         // D finishes: its 4th page replaces B's evicted one.
         {Op::kFinish, 4, {}, -1, true, 1, 4, 4, 0},
     },
     2, 4, 5},
    {"lru_follows_use", 8, 4, true,
     {
         {Op::kAdmit, 1, run(0, 16), 0, true, -1, 4, 0, 4},
         {Op::kFinish, 1, {}, -1, true, 4, 4, 4, 0},
         {Op::kAdmit, 2, run(100, 16), 0, true, -1, 0, 4, 4},
         {Op::kFinish, 2, {}, -1, true, 4, 0, 8, 0},
         // A is used again, so B is now the least recently used.
         {Op::kTouch, 0, run(0, 16), 16},
         {Op::kAdmit, 3, run(200, 8), 0, true, -1, 0, 6, 2},
         {Op::kAbort, 3, {}, -1, true, -1, 2, 6, 0},
         {Op::kTouch, 0, run(0, 16), 16},
         {Op::kTouch, 0, run(100, 16), 8},
     },
     3, 3, 2},
    {"free_after_abort", 6, 4, true,
     {
         // A is admitted, grows by decode steps, then aborts: nothing is cached.
         {Op::kAdmit, 1, run(0, 10), 0, true, -1, 3, 0, 3},
         {Op::kAbort, 1, {}, -1, true, -1, 6, 0, 0},
         {Op::kAdmit, 2, run(0, 10), 0, true, -1, 3, 0, 3},
         // B cannot fit 16 tokens (4 pages) next to A's 3: refused whole.
         {Op::kAdmit, 3, run(50, 16), 0, false, -1, 3, 0, 3},
         {Op::kAbort, 2, {}, -1, true, -1, 6, 0, 0},
         {Op::kAdmit, 3, run(50, 16), 0, true, -1, 2, 0, 4},
     },
     0, 4, 0},
    {"duplicate_prefix_computed_twice", 10, 4, true,
     {
         // A and B start together, both miss, and compute the same 3 pages independently.
         {Op::kAdmit, 1, run(0, 13), 0, true, -1, 6, 0, 4},
         {Op::kAdmit, 2, run(0, 13), 0, true, -1, 2, 0, 8},
         {Op::kFinish, 1, {}, -1, true, 3, 3, 3, 4},
         // B's copies are duplicates: none is cached, all are freed.
         {Op::kFinish, 2, {}, -1, true, 0, 7, 3, 0},
         {Op::kAdmit, 3, run(0, 13), 12, true, -1, 6, 0, 4},
     },
     1, 2, 0},
    {"disabled", 8, 4, false,
     {
         {Op::kAdmit, 1, run(0, 12), 0, true, -1, 5, 0, 3},
         {Op::kFinish, 1, {}, -1, true, 0, 8, 0, 0},
         {Op::kAdmit, 2, run(0, 12), 0, true, -1, 5, 0, 3},
     },
     0, 2, 0},
    {"page_size_one", 5, 1, true,
     {
         {Op::kAdmit, 1, run(0, 3), 0, true, -1, 2, 0, 3},
         {Op::kFinish, 1, {}, -1, true, 3, 2, 3, 0},
         // Offers 3 of 4 tokens: all three match.
         {Op::kAdmit, 2, cat(run(0, 3), {9}), 3, true, -1, 1, 0, 4},
         // 3 new tokens with 1 free page: evicts nothing in use, so refused.
         {Op::kAdmit, 3, run(20, 3), 0, false, -1, 1, 0, 4},
     },
     1, 2, 0},
};

INSTANTIATE_TEST_SUITE_P(Scenarios, PrefixCacheScenarioTest, ::testing::ValuesIn(kScenarios),
                         [](const auto& info) { return info.param.name; });

TEST(PrefixCacheTest, InsertNeedsKvForTheTokens) {
  PageAllocator allocator(4, 4);
  PrefixCache cache(allocator);
  BlockTable table(allocator);
  ASSERT_TRUE(table.extend(4));
  const Tokens t = run(0, 8);
  EXPECT_THROW(cache.insert(t, table), Error);  // 8 tokens, table holds 4
  EXPECT_EQ(cache.insert(std::span(t).first(4), table), 1);
  const BlockTable* live[] = {&table};
  check_integrity(cache, live);
}

TEST(PrefixCacheTest, OneEvictorPerAllocator) {
  PageAllocator allocator(4, 4);
  PrefixCache cache(allocator);
  EXPECT_THROW(PrefixCache second(allocator), Error);
}

TEST(PrefixCacheTest, BudgetEvictsTheLeastRecentlyUsedBeyondIt) {
  PageAllocator allocator(16, 4);
  PrefixCache cache(allocator);
  allocator.set_residency_limits(/*max_cached_pages=*/2, kNoPageLimit);
  auto finish = [&](const Tokens& t) {
    BlockTable table(allocator);
    ASSERT_TRUE(table.extend(static_cast<int>(t.size())));
    cache.insert(t, table);
    table.free();  // trims to the budget
  };
  finish(run(0, 8));  // 2 pages cached: within the budget
  EXPECT_EQ(allocator.num_cached_pages(), 2);
  EXPECT_EQ(cache.stats().num_evicted_pages, 0u);
  finish(run(100, 10));  // 2 more full pages (the partial third is freed): 4 > 2, A's go
  EXPECT_EQ(allocator.num_cached_pages(), 2);
  EXPECT_EQ(allocator.num_free_pages(), 14);
  EXPECT_EQ(cache.stats().num_evicted_pages, 2u);
  EXPECT_TRUE(cache.match(run(0, 8)).empty());
  EXPECT_EQ(cache.match(run(100, 9)).size(), 2u);
  // A page a running request references is not counted against the budget.
  BlockTable holder(allocator);
  holder.assign_prefix(cache.match(run(100, 9)));
  finish(run(200, 4));  // cached unreferenced: 200's page only (100's two are referenced)
  EXPECT_EQ(allocator.num_cached_pages(), 1);
  EXPECT_EQ(cache.num_nodes(), 3);
  const BlockTable* live[] = {&holder};
  check_integrity(cache, live);
}

// A live table publishes its full computed pages (a running request at prefill end): they are
// cached and still referenced (not evictable), a second table shares them, and num_cached_pages
// says what match would return without counting a lookup.
TEST(PrefixCacheTest, ALiveTablePublishesItsFullPages) {
  PageAllocator allocator(8, 4);
  PrefixCache cache(allocator);
  BlockTable first(allocator);
  const Tokens prompt = run(0, 10);
  ASSERT_TRUE(first.extend(10));
  EXPECT_EQ(cache.insert(prompt, first), 2);  // the partial third page stays private
  EXPECT_EQ(allocator.num_cached_pages(), 0) << "referenced pages are not evictable";
  EXPECT_EQ(cache.evict_pages(8), 0);
  ASSERT_TRUE(first.extend(3));  // the request decodes on
  EXPECT_EQ(cache.num_cached_pages(std::span(prompt).first(9)), 2);
  EXPECT_EQ(cache.num_cached_pages(run(1, 9)), 0);
  EXPECT_EQ(cache.stats().num_lookups, 0u);
  BlockTable second(allocator);
  second.assign_prefix(cache.match(std::span(prompt).first(9)));
  ASSERT_TRUE(second.extend(2));
  EXPECT_EQ(allocator.ref_count(first.pages()[0]), 2);
  const BlockTable* live[] = {&first, &second};
  check_integrity(cache, live);
  first.free();
  second.free();
  EXPECT_EQ(allocator.num_in_use_pages(), 0);
  EXPECT_EQ(allocator.num_cached_pages(), 2);
  check_integrity(cache, {});
}

TEST(PrefixCacheTest, DestructionGivesPagesBack) {
  PageAllocator allocator(4, 2);
  {
    PrefixCache cache(allocator);
    BlockTable table(allocator);
    ASSERT_TRUE(table.extend(4));
    EXPECT_EQ(cache.insert(run(0, 4), table), 2);
    table.free();
    EXPECT_EQ(allocator.num_cached_pages(), 2);
  }
  EXPECT_EQ(allocator.num_free_pages(), 4);
  EXPECT_EQ(allocator.evictor(), nullptr);
  allocator.check_integrity();
}

}  // namespace
}  // namespace spindle::kv
