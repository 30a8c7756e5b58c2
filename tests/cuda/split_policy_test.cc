// Flash decode's start-time split measurement (kernels/cuda/split_policy.h) on the GPU: it times
// every candidate on both steps (finite, positive, under 0.1 s per launch), returns one of them,
// restores the registry's values, and names what it cannot measure. (That every split size
// computes the same attention is cuda_attention_test's LongDecodeSplitsOfDifferentLengths.)
#include <gtest/gtest.h>

#include <cmath>
#include <iterator>
#include <tuple>

#include "cuda/cuda_skip.h"
#include "kernels/cuda/split_policy.h"
#include "util/error.h"
#include "util/switches.h"

namespace spindle::kernels::cuda {
namespace {

TEST(SplitPolicyTest, TheRegistrysValuesAreWhatThePlanReads) {
  Switches values = switches();
  values.flash_decode_min_chunk = 256;
  values.flash_decode_blocks_per_sm = 3;
  const ScopedSwitches scoped(values);
  EXPECT_EQ(flash_decode_min_chunk_keys(), 256);
  EXPECT_EQ(flash_decode_blocks_per_sm(), 3);
}

TEST(SplitPolicyTest, MeasurementTimesEveryCandidateAndPicksOne) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const Switches before = switches();
  // The 8B shape: 32 query heads over 8 KV heads of 128, bf16 KV; then a small f16 one.
  for (const auto& [heads, kv_heads, dim, kv] : {std::tuple{32, 8, 128, detail::KvType::kBF16},
                                                 std::tuple{8, 2, 64, detail::KvType::kF16}}) {
    const SplitMeasurement m = measure_flash_decode_splits(heads, kv_heads, dim, kv, /*rounds=*/3, /*launches=*/10);
    ASSERT_EQ(m.us.size(), std::size(kSplitCandidates));
    for (const auto& per_step : m.us) {
      ASSERT_EQ(per_step.size(), std::size(kSplitSteps));
      for (const double us : per_step) EXPECT_TRUE(std::isfinite(us) && us > 0 && us < 1e5) << us;
    }
    bool known = false;
    for (const SplitSizes& c : kSplitCandidates) {
      known = known || (c.min_chunk_keys == m.best.min_chunk_keys && c.blocks_per_sm == m.best.blocks_per_sm);
    }
    EXPECT_TRUE(known) << m.best.min_chunk_keys << " / " << m.best.blocks_per_sm;
    EXPECT_EQ(switches().flash_decode_min_chunk, before.flash_decode_min_chunk) << "restored after";
    EXPECT_EQ(switches().flash_decode_blocks_per_sm, before.flash_decode_blocks_per_sm);
  }
}

TEST(SplitPolicyTest, AnUnsupportedShapeIsANamedError) {
  SKIP_WITHOUT_CUDA_DEVICE();
  EXPECT_THROW(measure_flash_decode_splits(8, 3, 64, detail::KvType::kBF16), Error);   // 8 % 3 != 0
  EXPECT_THROW(measure_flash_decode_splits(8, 2, 64, detail::KvType::kF32), Error);    // f32 KV
}

}  // namespace
}  // namespace spindle::kernels::cuda
