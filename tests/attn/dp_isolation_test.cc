// With data parallelism the pool holds every rank's pages; a backend created for rank r must read
// and write only its own range. The other ranks' pages are filled with a sentinel that would wreck
// the output if read, and are compared byte for byte afterwards.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>

#include "support/fake_machines.h"
#include "util/error.h"

#include "attn/random_batch.h"
#include "platform/cpu_info.h"

namespace spindle::attn {
namespace {

constexpr double kMaxAbsError = 2e-4;  // f32 KV: f32 kernels against the float64 reference

struct DpCase {
  std::string backend;
  int dp_size;
  int dp_rank;
};

class DpIsolationTest : public ::testing::TestWithParam<DpCase> {};

TEST_P(DpIsolationTest, BackendTouchesOnlyItsRanksPages) {
  const DpCase c = GetParam();
  const auto reasons = attention_registry().get(c.backend).unsupported_reasons(
      testing::this_cpu(), {8, 2, 64, 0.125f, DType::kF32, 4});
  if (!reasons.empty()) GTEST_SKIP() << c.backend << ": " << reasons.front();

  const AttentionShape shape{8, 2, 64, 0.125f, DType::kF32, 4};
  RandomBatch local = make_random_batch(shape, {{5, 6}, {1, 13}}, 42, true, 1);
  const int pages_per_rank = local.num_pages;
  const size_t rank_bytes = local.k_pages.size();

  // The whole pool: every rank's pages, sentinel everywhere, this rank's pages copied in.
  std::vector<std::byte> k_pool(rank_bytes * c.dp_size), v_pool(rank_bytes * c.dp_size);
  const float sentinel = 1e30f;
  for (size_t i = 0; i < k_pool.size(); i += sizeof(float)) {
    std::memcpy(&k_pool[i], &sentinel, sizeof(float));
    std::memcpy(&v_pool[i], &sentinel, sizeof(float));
  }
  std::memcpy(k_pool.data() + rank_bytes * c.dp_rank, local.k_pages.data(), rank_bytes);
  std::memcpy(v_pool.data() + rank_bytes * c.dp_rank, local.v_pages.data(), rank_bytes);
  const auto k_before = k_pool;
  const auto v_before = v_pool;

  auto backend = create_attention_backend(c.backend, shape, {c.dp_size, c.dp_rank});
  LayerKvCache pool{k_pool.data(), v_pool.data(), shape.kv_geometry(1, pages_per_rank * c.dp_size)};
  std::vector<float> out(local.num_tokens() * local.q_cols(), std::numeric_limits<float>::quiet_NaN());
  backend->prepare(local.step);
  backend->bind_kv_caches({&pool, 1});
  backend->forward(0, {local.q.data(), local.num_tokens(), local.q_cols()},
                   {local.k.data(), local.num_tokens(), local.kv_cols()},
                   {local.v.data(), local.num_tokens(), local.kv_cols()},
                   {out.data(), local.num_tokens(), local.q_cols()});

  // The same batch on a private single-rank pool, through the reference.
  auto reference = create_attention_backend("reference", shape, {});
  const auto want = run_backend_once(*reference, local);
  for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], want[i], kMaxAbsError) << i;

  for (int r = 0; r < c.dp_size; ++r) {
    const size_t begin = rank_bytes * r;
    if (r == c.dp_rank) {
      // This rank's pages now hold exactly what the reference wrote.
      EXPECT_EQ(0, std::memcmp(k_pool.data() + begin, local.k_pages.data(), rank_bytes));
      continue;
    }
    EXPECT_EQ(0, std::memcmp(k_pool.data() + begin, k_before.data() + begin, rank_bytes)) << "rank " << r;
    EXPECT_EQ(0, std::memcmp(v_pool.data() + begin, v_before.data() + begin, rank_bytes)) << "rank " << r;
  }
}

TEST(DpIsolationTest, PageOutsideTheRankIsRejected) {
  const AttentionShape shape{4, 1, 64, 0.125f, DType::kF32, 4};
  RandomBatch local = make_random_batch(shape, {{3, 2}}, 7, true, 0);
  std::vector<std::byte> k_pool(local.k_pages.size() * 2), v_pool(k_pool.size());
  auto backend = create_attention_backend("reference", shape, {2, 0});
  LayerKvCache pool{k_pool.data(), v_pool.data(), shape.kv_geometry(1, local.num_pages * 2)};
  local.step.page_tables[local.step.sequences[0].page_table_offset] = local.num_pages;  // first page of rank 1
  std::vector<float> out(local.num_tokens() * local.q_cols());
  backend->prepare(local.step);
  backend->bind_kv_caches({&pool, 1});
  EXPECT_THROW(backend->forward(0, {local.q.data(), local.num_tokens(), local.q_cols()},
                                {local.k.data(), local.num_tokens(), local.kv_cols()},
                                {local.v.data(), local.num_tokens(), local.kv_cols()},
                                {out.data(), local.num_tokens(), local.q_cols()}),
               Error);
}

// The batch is checked once per step, not per layer: a later step's bad page is caught by prepare
// (with caches bound: a step whose layers replay a CUDA graph runs no forward), and still on the
// first layer and on every layer after it (nothing is run with it).
TEST(DpIsolationTest, EachStepIsCheckedAgain) {
  const AttentionShape shape{4, 1, 64, 0.125f, DType::kF32, 4};
  RandomBatch local = make_random_batch(shape, {{3, 2}}, 7, true, 0);
  std::vector<std::byte> k_pool(local.k_pages.size() * 2), v_pool(k_pool.size());
  auto backend = create_attention_backend("reference", shape, {2, 0});
  const LayerKvCache pool{k_pool.data(), v_pool.data(), shape.kv_geometry(2, local.num_pages * 2)};
  const std::vector<LayerKvCache> layers(2, pool);
  std::vector<float> out(local.num_tokens() * local.q_cols());
  auto forward = [&](int layer) {
    backend->forward(layer, {local.q.data(), local.num_tokens(), local.q_cols()},
                     {local.k.data(), local.num_tokens(), local.kv_cols()},
                     {local.v.data(), local.num_tokens(), local.kv_cols()},
                     {out.data(), local.num_tokens(), local.q_cols()});
  };
  backend->bind_kv_caches(layers);
  backend->prepare(local.step);
  EXPECT_NO_THROW(forward(0));
  EXPECT_NO_THROW(forward(1));
  local.step.page_tables[local.step.sequences[0].page_table_offset] = local.num_pages;  // first page of rank 1
  EXPECT_THROW(backend->prepare(local.step), Error);
  EXPECT_THROW(forward(0), Error);
  EXPECT_THROW(forward(1), Error);
}

INSTANTIATE_TEST_SUITE_P(Ranks, DpIsolationTest,
                         ::testing::Values(DpCase{"reference", 2, 0}, DpCase{"reference", 3, 2},
                                           DpCase{"cpu_avx2", 2, 1}, DpCase{"cpu_avx2", 4, 2},
                                           DpCase{"cpu_avx512", 2, 1}, DpCase{"cpu_amx", 2, 1}),
                         [](const auto& info) {
                           return info.param.backend + "_dp" + std::to_string(info.param.dp_size) + "_rank" +
                                  std::to_string(info.param.dp_rank);
                         });

}  // namespace
}  // namespace spindle::attn
