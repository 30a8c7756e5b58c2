// cuda_reference against the CPU `reference` backend (float64 accumulation), over the CPU kernel
// grid's subset, and through the validation child. Skips when no CUDA device is usable here.
//
// Tolerances (max abs error per output element; inputs uniform in [-1, 1]): the device kernel
// accumulates in float, the reference in double, both over the same K/V values (bf16 pages are
// read exactly by both), so only f32 rounding over <= ~150 keys and head_dim <= 256 terms differs.
//   f32 KV 1e-4, bf16 KV 2e-3 (the validation tolerances' spirit; the bf16 bound is loose on purpose).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "attn/attention_backend.h"
#include "attn/random_batch.h"
#include "attn/validation.h"
#include "platform/cuda_info.h"
#include "platform/device_info.h"
#include "support/spindle_binary.h"
#include "util/build_info.h"

namespace spindle::attn {
namespace {

using ::testing::HasSubstr;

// Why CUDA attention cannot run here ("" when it can): probed once per process.
const std::string& no_device_reason() {
  static const std::string reason = [] {
    const CudaProbe probe = probe_cuda_devices();
    if (probe.devices.empty()) return probe.unavailable_reason.empty() ? std::string("no devices")
                                                                       : probe.unavailable_reason;
    const auto& d = probe.devices.front();
    if (d.cc_major < 8) {
      return "device 0 (" + d.name + ") has compute capability " + std::to_string(d.cc_major) + "." +
             std::to_string(d.cc_minor) + ", needs 8.0";
    }
    return std::string();
  }();
  return reason;
}

#define SKIP_WITHOUT_CUDA_DEVICE()                                                  \
  do {                                                                              \
    if (!no_device_reason().empty()) GTEST_SKIP() << "no CUDA device: " << no_device_reason(); \
  } while (0)

double tolerance(DType dtype) { return dtype == DType::kF32 ? 1e-4 : 2e-3; }

// Runs cuda_reference and reference on identical copies; returns the max abs error and checks
// that the new K/V landed in the host pages identically.
double max_error(const AttentionShape& shape, const std::vector<SequenceSpec>& specs, uint64_t seed,
                 bool causal = true) {
  RandomBatch for_cuda = make_random_batch(shape, specs, seed, causal);
  RandomBatch for_reference = for_cuda;
  auto cuda = create_attention_backend("cuda_reference", shape, {});
  auto reference = create_attention_backend("reference", shape, {});
  const auto got = run_backend_once(*cuda, for_cuda);
  const auto want = run_backend_once(*reference, for_reference);
  EXPECT_TRUE(for_cuda.k_pages == for_reference.k_pages && for_cuda.v_pages == for_reference.v_pages)
      << "new K/V pages differ";
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    worst = std::max(worst, std::fabs(double{got[i]} - double{want[i]}));
  }
  return worst;
}

TEST(CudaAttentionRegistryTest, RegisteredAsACudaBackendWithReasons) {
  ASSERT_TRUE(built_with_cuda());
  const auto& d = attention_registry().get("cuda_reference");
  EXPECT_EQ(d.device, Device::kCuda);
  EXPECT_EQ(d.priority, 0);
  const AttentionShape shape{32, 8, 128, 0.088f, DType::kBF16, 16};

  DeviceInfo none;
  none.cuda_status = "no devices";
  EXPECT_THAT(d.unsupported_reasons(none, shape), ::testing::ElementsAre(HasSubstr("no CUDA device")));

  DeviceInfo turing;
  turing.cuda_devices.push_back({0, "Tesla T4", 7, 5, 40, 16ull << 30, 15ull << 30});
  EXPECT_THAT(d.unsupported_reasons(turing, shape),
              ::testing::ElementsAre(HasSubstr("compute capability 7.5, needs 8.0")));

  DeviceInfo hopper;
  hopper.cuda_devices.push_back({0, "NVIDIA H200", 9, 0, 132, 141ull << 30, 140ull << 30});
  EXPECT_TRUE(d.unsupported_reasons(hopper, shape).empty());
  EXPECT_THAT(d.unsupported_reasons(hopper, {32, 8, 512, 0.04f, DType::kBF16, 16}),
              ::testing::Contains("head_dim 512 not supported (up to 256)"));
  EXPECT_THAT(d.unsupported_reasons(hopper, {32, 8, 128, 0.088f, DType::kF16, 16}),
              ::testing::Contains("KV dtype F16 not supported (bf16, f32)"));
}

// (KV dtype, head_dim, page size); inside: batch 1 and 5, new 1/3/17, cached 0/5/130, GQA 1/4/7.
class CudaAttentionGridTest : public ::testing::TestWithParam<std::tuple<DType, int, int>> {};

TEST_P(CudaAttentionGridTest, MatchesReference) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const auto [dtype, head_dim, page_size] = GetParam();
  double worst = 0;
  uint64_t seed = 1;
  for (int group : {1, 4, 7}) {
    const int kv_heads = 2;
    const AttentionShape shape{kv_heads * group, kv_heads, head_dim,
                               1.0f / std::sqrt(static_cast<float>(head_dim)), dtype, page_size};
    for (int batch : {1, 5}) {
      for (int new_tokens : {1, 3, 17}) {
        for (int cached : {0, 5, 130}) {
          std::vector<SequenceSpec> specs;
          for (int s = 0; s < batch; ++s) specs.push_back({new_tokens, cached + (s % 2) * s});
          SCOPED_TRACE(shape.to_string() + ", batch " + std::to_string(batch) + ", new " +
                       std::to_string(new_tokens) + ", cached " + std::to_string(cached));
          const double e = max_error(shape, specs, seed++);
          EXPECT_LE(e, tolerance(dtype));
          worst = std::max(worst, e);
        }
      }
    }
  }
  RecordProperty("max_abs_error", std::to_string(worst));
  std::printf("max abs error %.3g (tolerance %.0e)\n", worst, tolerance(dtype));
}

INSTANTIATE_TEST_SUITE_P(
    Grid, CudaAttentionGridTest,
    ::testing::Combine(::testing::Values(DType::kBF16, DType::kF32), ::testing::Values(64, 128, 256),
                       ::testing::Values(1, 16)),
    [](const auto& info) {
      return std::string(std::get<0>(info.param) == DType::kF32 ? "f32" : "bf16") + "_d" +
             std::to_string(std::get<1>(info.param)) + "_page" + std::to_string(std::get<2>(info.param));
    });

TEST(CudaAttentionTest, NonCausalAndOddHeadDim) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const AttentionShape shape{6, 3, 72, 0.12f, DType::kF32, 16};
  EXPECT_LE(max_error(shape, {{5, 20}, {1, 0}, {33, 0}}, 7, /*causal=*/false), 1e-4);
  // A long context: many key tiles (the kernel takes 128 keys per tile).
  const AttentionShape bf16{8, 2, 128, 0.088f, DType::kBF16, 16};
  EXPECT_LE(max_error(bf16, {{1, 1500}, {2, 300}}, 8), 2e-3);
}

TEST(CudaAttentionTest, DataParallelRankUsesItsOwnPages) {
  SKIP_WITHOUT_CUDA_DEVICE();
  // Rank 1 of 2 over a pool twice the batch's size: the rank-local batch lives in the upper half.
  const AttentionShape shape{8, 2, 64, 0.125f, DType::kBF16, 16};
  RandomBatch local = make_random_batch(shape, {{3, 20}, {1, 40}}, 9);
  RandomBatch reference_batch = local;
  const size_t half = local.k_pages.size();
  std::vector<std::byte> k_pool(2 * half, std::byte{0x7f}), v_pool(2 * half, std::byte{0x7f});
  std::copy(local.k_pages.begin(), local.k_pages.end(), k_pool.begin() + half);
  std::copy(local.v_pages.begin(), local.v_pages.end(), v_pool.begin() + half);
  LayerKvCache pool = local.layer_cache();
  pool.k_pages = k_pool.data();
  pool.v_pages = v_pool.data();
  pool.num_pages = 2 * local.num_pages;

  auto cuda = create_attention_backend("cuda_reference", shape, {2, 1});
  std::vector<float> out(local.num_tokens() * local.q_cols());
  cuda->prepare(local.metadata);
  cuda->bind_kv_caches({&pool, 1});
  cuda->forward(0, {local.q.data(), local.num_tokens(), local.q_cols()},
                {local.k.data(), local.num_tokens(), local.kv_cols()},
                {local.v.data(), local.num_tokens(), local.kv_cols()},
                {out.data(), local.num_tokens(), local.q_cols()});
  auto reference = create_attention_backend("reference", shape, {});
  const auto want = run_backend_once(*reference, reference_batch);
  double worst = 0;
  for (size_t i = 0; i < out.size(); ++i) worst = std::max(worst, std::fabs(double{out[i]} - want[i]));
  EXPECT_LE(worst, 2e-3);
  EXPECT_TRUE(std::equal(reference_batch.k_pages.begin(), reference_batch.k_pages.end(), k_pool.begin() + half));
  EXPECT_TRUE(std::all_of(k_pool.begin(), k_pool.begin() + half, [](std::byte b) { return b == std::byte{0x7f}; }))
      << "rank 1 wrote into rank 0's pages";
}

TEST(CudaAttentionTest, PassesValidationInAChild) {
  SKIP_WITHOUT_CUDA_DEVICE();
  ChildOptions options;
  options.executable = testing::spindle_binary();
  options.timeout_s = 120;
  options.timing = true;
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    const AttentionShape shape{32, 8, 128, 0.08838834764831845f, dtype, 16};
    const auto outcome = validate_in_child("cuda_reference", shape, options);
    ASSERT_EQ(outcome.status, ValidationStatus::kPass) << outcome.detail;
    EXPECT_LE(outcome.report.prefill_max_abs_error, tolerance_for(dtype).max_abs_error);
    EXPECT_LE(outcome.report.decode_max_abs_error, tolerance_for(dtype).max_abs_error);
    std::printf("%s: prefill err %.3g, decode err %.3g, prefill %.0f tok/s (%.1f GFLOP/s), decode %.0f tok/s "
                "(%.1f GB/s KV)\n",
                shape.to_string().c_str(), outcome.report.prefill_max_abs_error,
                outcome.report.decode_max_abs_error, outcome.report.prefill_tokens_per_s,
                outcome.report.prefill_gflops, outcome.report.decode_tokens_per_s,
                outcome.report.decode_kv_gb_per_s);
  }
}

}  // namespace
}  // namespace spindle::attn
