// PagePool: the memory layout, the allocator's accounting, and data-parallel isolation: a rank's
// allocator hands out only its own range, and an attention backend created for that rank over
// the pool's layer_caches() leaves every other rank's pages byte for byte unchanged.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <ostream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "attn/attention_backend.h"
#include "kv/block_table.h"
#include "kv/page_pool.h"
#include "support/fake_machines.h"
#include "util/error.h"

namespace spindle::kv {
namespace {

TEST(PagePoolTest, LayerArraysArePageAlignedDisjointAndZeroed) {
  const KvLayout layout{3, 2, 80, DType::kBF16, 16};
  PagePool pool(layout, 7);
  EXPECT_EQ(layout.bytes_per_layer_page(), 16u * 2 * 80 * 2);
  EXPECT_EQ(layout.bytes_per_token(), 3u * 2 * 2 * 80 * 2);
  EXPECT_EQ(pool.num_bytes(), 2u * 3 * 7 * layout.bytes_per_layer_page());
  const auto caches = pool.layer_caches();
  ASSERT_EQ(caches.size(), 3u);
  std::set<const void*> starts;
  const uint64_t array_bytes = 7 * layout.bytes_per_layer_page();
  for (const auto& c : caches) {
    EXPECT_EQ(c.kv.num_layers, 3);
    EXPECT_EQ(c.kv.num_pages, 7);
    EXPECT_EQ(c.kv.first_page, 0);
    EXPECT_EQ(c.kv.page_size, 16);
    EXPECT_EQ(c.kv.num_kv_heads, 2);
    EXPECT_EQ(c.kv.head_dim, 80);
    EXPECT_EQ(c.kv.dtype, DType::kBF16);
    for (const void* p : {c.k_pages, c.v_pages}) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 4096, 0u);
      starts.insert(p);
      const auto* bytes = static_cast<const unsigned char*>(p);
      for (uint64_t i = 0; i < array_bytes; i += 97) ASSERT_EQ(bytes[i], 0);
    }
  }
  EXPECT_EQ(starts.size(), 6u);
  // Arrays do not overlap: consecutive starts are at least one array apart.
  const void* prev = nullptr;
  for (const void* p : starts) {
    if (prev) {
      EXPECT_GE(static_cast<const std::byte*>(p) - static_cast<const std::byte*>(prev), int64_t(array_bytes));
    }
    prev = p;
  }
  EXPECT_EQ(pool.k_page(1, 3), static_cast<std::byte*>(caches[1].k_pages) + 3 * layout.bytes_per_layer_page());
  EXPECT_EQ(pool.v_page(2, 6), static_cast<std::byte*>(caches[2].v_pages) + 6 * layout.bytes_per_layer_page());
  EXPECT_THROW(pool.k_page(3, 0), Error);
  EXPECT_THROW(pool.k_page(0, 7), Error);
}

// An fp8_e4m3 pool: one byte per element, and its K/V scales (1.0 until set) where each layer's
// cache points; set_kv_scales checks shape and values.
TEST(PagePoolTest, Fp8PoolHoldsItsScales) {
  const KvLayout layout{2, 3, 64, DType::kF8E4M3, 16};
  EXPECT_EQ(layout.bytes_per_token(), 2u * 2 * 3 * 64);
  PagePool pool(layout, 4);
  EXPECT_EQ(pool.num_bytes(), 2u * 2 * 4 * 16 * 3 * 64);
  auto caches = pool.layer_caches();
  for (const auto& c : caches) {
    ASSERT_NE(c.k_scales, nullptr);
    for (int h = 0; h < 3; ++h) EXPECT_EQ(c.k_scales[h], 1.0f);
  }
  KvScales s = KvScales::uniform(2, 3, 1.0f, "test");
  s.k = {1, 2, 3, 4, 5, 6};
  s.v = {0.5f, 0.25f, 0.125f, 8, 16, 32};
  pool.set_kv_scales(s);
  caches = pool.layer_caches();
  EXPECT_EQ(caches[1].k_scales[2], 6.0f);
  EXPECT_EQ(caches[0].v_scales[1], 0.25f);
  EXPECT_EQ(caches[1].v_scales[0], 8.0f);
  EXPECT_THROW(pool.set_kv_scales(KvScales::uniform(3, 3, 1.0f, "test")), Error);  // 3 layers
  s.k[4] = 0.0f;
  EXPECT_THROW(pool.set_kv_scales(s), Error);
  s.k[4] = std::nanf("");
  EXPECT_THROW(pool.set_kv_scales(s), Error);
  PagePool bf16({2, 3, 64, DType::kBF16, 16}, 4);
  EXPECT_EQ(bf16.layer_caches()[0].k_scales, nullptr);
  EXPECT_THROW(bf16.set_kv_scales(KvScales::uniform(2, 3, 1.0f, "test")), Error);
}

TEST(PagePoolTest, RejectsBadShapes) {
  EXPECT_THROW(PagePool({2, 2, 64, DType::kI8, 16}, 4), Error);  // KV dtype bf16, f16, f32 or f8_e4m3 only
  EXPECT_THROW(PagePool({0, 2, 64, DType::kF32, 16}, 4), Error);
  EXPECT_THROW(PagePool({2, 2, 64, DType::kF32, 16}, 0), Error);
  EXPECT_THROW(PagePool({2, 2, 64, DType::kF32, 16}, 5, 2), Error);  // not a multiple of dp
}

TEST(PageAllocatorTest, StatesAndMisuse) {
  PageAllocator a(4, 16);
  std::vector<int32_t> pages;
  ASSERT_TRUE(a.allocate(3, pages));
  EXPECT_EQ(pages, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_FALSE(a.allocate(2, pages));  // all or nothing
  EXPECT_EQ(pages.size(), 3u);
  a.check_integrity();
  EXPECT_THROW(a.retain(3), Error);           // free page
  EXPECT_THROW(a.set_cached(3, true), Error);  // only in-use pages enter the cache
  EXPECT_THROW(a.release(4), Error);           // out of range
  a.set_cached(0, true);
  a.retain(0);
  EXPECT_EQ(a.ref_count(0), 2);
  a.release(0);
  a.release(0);
  EXPECT_EQ(a.num_cached_pages(), 1);
  EXPECT_THROW(a.release(0), Error);  // unreferenced
  a.set_cached(0, false);             // evicted: free again
  a.release(1);
  a.release(2);
  EXPECT_EQ(a.num_free_pages(), 4);
  a.check_integrity();
}

// Whether the OS holds the memory at p (mincore over its OS page).
bool resident(const std::byte* p) {
  const uintptr_t os_page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  unsigned char vec = 0;
  void* start = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) / os_page * os_page);
  EXPECT_EQ(mincore(start, os_page, &vec), 0);
  return (vec & 1) != 0;
}

TEST(PagePoolTest, TrimGivesTheLeastRecentlyFreedPagesBackToTheOs) {
  // One layer page = 16 tokens x 2 KV heads x 64 x 2 B = 4096 B: one OS page per K or V chunk.
  const KvLayout layout{2, 2, 64, DType::kBF16, 16};
  ASSERT_EQ(layout.bytes_per_layer_page(), 4096u);
  if (sysconf(_SC_PAGESIZE) != 4096) GTEST_SKIP() << "the OS page is not 4 KiB";
  PagePool pool(layout, 8);
  PageAllocator& a = pool.allocator();
  std::vector<int32_t> pages;
  ASSERT_TRUE(a.allocate(4, pages));
  ASSERT_EQ(pages, (std::vector<int32_t>{0, 1, 2, 3}));
  for (const int32_t p : pages) {
    for (int layer = 0; layer < 2; ++layer) {
      std::memset(pool.k_page(layer, p), 0x5a, 4096);
      std::memset(pool.v_page(layer, p), 0x5a, 4096);
    }
  }
  for (const int32_t p : pages) EXPECT_TRUE(resident(pool.v_page(1, p))) << p;
  for (const int32_t p : pages) a.release(p);  // freed in order 0, 1, 2, 3
  a.trim();                                   // no limits: nothing happens
  EXPECT_EQ(a.num_resident_free_pages(), 4);
  a.set_residency_limits(kNoPageLimit, 1);
  a.trim();
  EXPECT_EQ(a.num_released_total(), 3u);
  EXPECT_EQ(a.num_resident_free_pages(), 1);
  EXPECT_EQ(a.num_free_pages(), 8);
  EXPECT_EQ(pool.num_released_bytes(), 3u * 2 * 2 * 4096);
  EXPECT_EQ(pool.num_release_failures(), 0u);
  for (const int32_t p : {0, 1, 2}) {
    for (int layer = 0; layer < 2; ++layer) {
      EXPECT_FALSE(resident(pool.k_page(layer, p))) << layer << " " << p;
      EXPECT_FALSE(resident(pool.v_page(layer, p))) << layer << " " << p;
    }
  }
  EXPECT_TRUE(resident(pool.k_page(0, 3)));  // the most recently freed stays
  EXPECT_EQ(static_cast<int>(pool.k_page(0, 3)[17]), 0x5a);
  a.check_integrity();
  // Resident pages first, then released ones in increasing id order; released memory reads as zeros.
  pages.clear();
  ASSERT_TRUE(a.allocate(3, pages));
  EXPECT_EQ(pages, (std::vector<int32_t>{3, 0, 1}));
  EXPECT_EQ(static_cast<int>(pool.k_page(0, 0)[17]), 0);
  a.check_integrity();
  EXPECT_THROW(a.set_residency_limits(-2, 0), Error);
}

TEST(PagePoolTest, ReleaseFreesOnlyWholeOsPagesOfAChunk) {
  // One layer page = 8 tokens x 2 x 64 x 2 B = 2048 B: two KV pages share an OS page.
  const KvLayout layout{1, 2, 64, DType::kBF16, 8};
  if (sysconf(_SC_PAGESIZE) != 4096) GTEST_SKIP() << "the OS page is not 4 KiB";
  PagePool pool(layout, 8);
  const int32_t one[] = {1};
  pool.release_page_memory(0, one);  // half an OS page: kept
  EXPECT_EQ(pool.num_released_bytes(), 0u);
  const int32_t pair[] = {2, 3, 5};  // 2 and 3 cover bytes [4096, 8192); 5 alone shares its page
  pool.release_page_memory(0, pair);
  EXPECT_EQ(pool.num_released_bytes(), 2u * 4096);  // K and V of the one whole OS page
}

TEST(PagePoolTest, EachRankAllocatesOnlyItsOwnRange) {
  const int dp = 3, per_rank = 5;
  PagePool pool({1, 1, 8, DType::kF32, 4}, dp * per_rank, dp);
  EXPECT_EQ(pool.num_pages_per_rank(), per_rank);
  std::set<int> global_pages;
  for (int r = 0; r < dp; ++r) {
    EXPECT_EQ(pool.first_page(r), r * per_rank);  // [r * n / dp, (r + 1) * n / dp)
    PageAllocator& a = pool.allocator(r);
    EXPECT_EQ(a.num_pages(), per_rank);
    std::vector<int32_t> pages;
    ASSERT_TRUE(a.allocate(per_rank, pages));
    EXPECT_FALSE(a.allocate(1, pages));  // exhausting one rank does not borrow from another
    for (const int32_t p : pages) {
      EXPECT_GE(p, 0);
      EXPECT_LT(p, per_rank);
      EXPECT_TRUE(global_pages.insert(pool.first_page(r) + p).second);
    }
    a.check_integrity();
  }
  EXPECT_EQ(global_pages.size(), size_t(dp * per_rank));
  EXPECT_EQ(*global_pages.rbegin(), dp * per_rank - 1);
  EXPECT_THROW(pool.allocator(dp), Error);
}

TEST(PagePoolTest, EachRanksGeometryIsItsPageRangeOfTheLayout) {
  const KvLayout layout{2, 3, 16, DType::kBF16, 4};
  const int dp = 4, per_rank = 6;
  PagePool pool(layout, dp * per_rank, dp);
  const std::vector<attn::LayerKvCache> caches = pool.layer_caches();
  for (int r = 0; r < dp; ++r) {
    const KvGeometry g = pool.geometry(r);
    EXPECT_EQ(g.num_layers, 2);
    EXPECT_EQ(g.num_kv_heads, 3);
    EXPECT_EQ(g.head_dim, 16);
    EXPECT_EQ(g.page_size, 4);
    EXPECT_EQ(g.dtype, DType::kBF16);
    EXPECT_EQ(g.first_page, r * per_rank);
    EXPECT_EQ(g.num_pages, per_rank);
    EXPECT_EQ(g.layer_page_bytes(), layout.bytes_per_layer_page());
    for (int layer = 0; layer < 2; ++layer) {  // where a backend bound to rank r finds its first page
      EXPECT_EQ(static_cast<std::byte*>(caches[layer].k_pages) + g.first_page * g.layer_page_bytes(),
                pool.k_page(layer, pool.first_page(r)));
    }
  }
  EXPECT_THROW(pool.geometry(dp), Error);
}

TEST(RankPageRangeTest, RanksTileThePoolInOrderEvenWhenPagesDoNotDivide) {
  for (const int num_pages : {1, 7, 12, 13}) {
    for (const int ranks : {1, 2, 3, 5}) {
      int next = 0;
      for (int r = 0; r < ranks; ++r) {
        const PageRange range = rank_page_range(num_pages, ranks, r);
        EXPECT_EQ(range.first, next) << num_pages << " pages, rank " << r << " of " << ranks;
        EXPECT_GE(range.count, num_pages / ranks);
        EXPECT_LE(range.count, num_pages / ranks + 1);
        next = range.first + range.count;
      }
      EXPECT_EQ(next, num_pages) << num_pages << " pages over " << ranks << " ranks";
    }
  }
  EXPECT_EQ(rank_page_range(12, 3, 1).first, 4);  // r * n / dp
  EXPECT_EQ(rank_page_range(12, 3, 1).count, 4);
}

// --- DP isolation through the attention backends ---------------------------------------------

constexpr float kSentinel = 1e30f;

struct IsolationCase {
  std::string backend;
  int dp_size;
  int dp_rank;
};
void PrintTo(const IsolationCase& c, std::ostream* os) {
  *os << c.backend << " dp " << c.dp_size << " rank " << c.dp_rank;
}

class DpPoolIsolationTest : public ::testing::TestWithParam<IsolationCase> {};

TEST_P(DpPoolIsolationTest, BackendTouchesOnlyItsRanksPages) {
  const IsolationCase c = GetParam();
  const attn::AttentionShape shape{4, 2, 64, 0.125f, DType::kF32, 4};
  const auto reasons = attn::attention_registry().get(c.backend).unsupported_reasons(testing::this_cpu(), shape);
  if (!reasons.empty()) GTEST_SKIP() << c.backend << ": " << reasons.front();

  const int per_rank = 8;
  const KvLayout layout{2, shape.num_kv_heads, shape.head_dim, DType::kF32, shape.page_size};
  PagePool pool(layout, c.dp_size * per_rank, c.dp_size);
  const uint64_t array_bytes = uint64_t(pool.num_pages()) * layout.bytes_per_layer_page();
  for (int layer = 0; layer < layout.num_layers; ++layer) {
    for (std::byte* base : {pool.k_page(layer, 0), pool.v_page(layer, 0)}) {
      for (uint64_t i = 0; i < array_bytes; i += sizeof(float)) std::memcpy(base + i, &kSentinel, sizeof(float));
    }
  }
  auto snapshot = [&] {
    std::vector<std::vector<std::byte>> s;
    for (int layer = 0; layer < layout.num_layers; ++layer) {
      s.emplace_back(pool.k_page(layer, 0), pool.k_page(layer, 0) + array_bytes);
      s.emplace_back(pool.v_page(layer, 0), pool.v_page(layer, 0) + array_bytes);
    }
    return s;
  };
  const auto before = snapshot();

  // Two requests on this rank: a prefill of 5 and 9 tokens, then one decode token each.
  PageAllocator& allocator = pool.allocator(c.dp_rank);
  std::vector<int32_t> unused;
  ASSERT_TRUE(allocator.allocate(1, unused));  // page 0: held, never in a table, never written
  std::vector<BlockTable> tables;
  tables.emplace_back(allocator);
  tables.emplace_back(allocator);
  auto backend = attn::create_attention_backend(c.backend, shape, {c.dp_size, c.dp_rank});
  const auto caches = pool.layer_caches();
  backend->bind_kv_caches(caches);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (const std::vector<int>& new_tokens : {std::vector<int>{5, 9}, std::vector<int>{1, 1}}) {
    StepBatch batch;
    for (size_t i = 0; i < tables.size(); ++i) {
      const int cached = tables[i].num_tokens();
      ASSERT_TRUE(tables[i].extend(new_tokens[i]));
      const std::vector<TokenId> ids(static_cast<size_t>(new_tokens[i]), 0);
      batch.add_sequence(ids.data(), new_tokens[i], cached, tables[i].pages().data(), tables[i].num_pages(), 1);
    }
    const int64_t rows = batch.num_tokens();
    const int64_t q_cols = shape.num_heads * shape.head_dim, kv_cols = shape.num_kv_heads * shape.head_dim;
    std::vector<float> q(rows * q_cols), k(rows * kv_cols), v(rows * kv_cols), out(rows * q_cols);
    for (auto* t : {&q, &k, &v}) {
      for (float& x : *t) x = uniform(rng);
    }
    backend->prepare(batch);
    for (int layer = 0; layer < layout.num_layers; ++layer) {
      backend->forward(layer, {q.data(), rows, q_cols}, {k.data(), rows, kv_cols}, {v.data(), rows, kv_cols},
                       {out.data(), rows, q_cols});
      // A convex combination of V rows in [-1, 1]: any sentinel read would show.
      for (const float x : out) ASSERT_TRUE(std::isfinite(x) && std::fabs(x) <= 1.0f + 1e-4f) << x;
    }
  }

  const auto after = snapshot();
  const uint64_t page_bytes = layout.bytes_per_layer_page();
  std::set<int> written;  // global pages of this rank's tables
  for (const auto& t : tables) {
    for (const int32_t p : t.pages()) written.insert(pool.first_page(c.dp_rank) + p);
  }
  for (size_t a = 0; a < after.size(); ++a) {
    for (int page = 0; page < pool.num_pages(); ++page) {
      const bool same = std::memcmp(after[a].data() + page * page_bytes, before[a].data() + page * page_bytes,
                                    page_bytes) == 0;
      if (written.count(page)) {
        EXPECT_FALSE(same) << "array " << a << " page " << page << " was not written";
      } else {
        EXPECT_TRUE(same) << "array " << a << " page " << page << " (rank " << page / per_rank << ") changed";
      }
    }
  }
  std::vector<const BlockTable*> live;
  for (const auto& t : tables) live.push_back(&t);
  EXPECT_THROW(check_integrity(allocator, live), Error);  // page 0 is held outside any table
  for (auto& t : tables) t.free();
  allocator.release(0);
  check_integrity(allocator, {});
}

INSTANTIATE_TEST_SUITE_P(Ranks, DpPoolIsolationTest,
                         ::testing::Values(IsolationCase{"reference", 1, 0}, IsolationCase{"reference", 2, 0},
                                           IsolationCase{"reference", 2, 1}, IsolationCase{"reference", 3, 1},
                                           IsolationCase{"reference", 4, 3}, IsolationCase{"cpu_avx2", 3, 2},
                                           IsolationCase{"cpu_avx512", 2, 1}, IsolationCase{"cpu_amx", 2, 1}),
                         [](const auto& info) {
                           return info.param.backend + "_dp" + std::to_string(info.param.dp_size) + "_rank" +
                                  std::to_string(info.param.dp_rank);
                         });

}  // namespace
}  // namespace spindle::kv
