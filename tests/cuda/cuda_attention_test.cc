// The CUDA attention backends (cuda_reference, cuda_flash, cudnn_sdpa) against the CPU `reference`
// backend (float64 accumulation) over the CPU kernel grid's shapes, plus long contexts, DP ranks,
// device placement errors, and validation in a child. Skips when no CUDA device is usable here;
// each backend's case skips with its unsupported reasons on this device.
//
// Tolerances (max abs error per output element; inputs uniform in [-1, 1], outputs O(1)):
//   cuda_reference: float accumulation over the same K/V values the reference reads (bf16/f16 pages
//     are read exactly by both), so only f32 rounding differs: f32 KV 1e-4, bf16/f16 KV 2e-3.
//   cuda_flash, cudnn_sdpa: tensor cores take q and the probabilities P rounded to the KV type
//     (relative 2^-9 for bf16, 2^-12 for f16 per element), accumulate in f32: bf16 1.5e-2 (the
//     validation tolerance, attn/validation.h), f16 4e-3.
// cuda_flash's 16-bit output copy (decode): bit for bit the rounding of its own f32 output.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "attn/attention_backend.h"
#include "attn/random_batch.h"
#include "attn/select/validation.h"
#include "attn/staged_batch.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/split_policy.h"
#include "platform/cuda_info.h"
#include "platform/device_info.h"
#include "support/spindle_binary.h"
#include "util/build_info.h"
#include "util/error.h"
#include "util/half.h"
#include "util/switches.h"

namespace spindle::attn {
namespace {

using ::testing::HasSubstr;
namespace kcu = kernels::cuda;

// The device as the selection sees it ("" reason when usable): probed once per process.
const DeviceInfo& cuda_device_info() {
  static const DeviceInfo info = [] {
    DeviceInfo d;
    const CudaProbe probe = probe_cuda_devices();
    d.cuda_devices = probe.devices;
    d.cuda_status = probe.devices.empty() ? probe.unavailable_reason : "probed";
    return d;
  }();
  return info;
}

std::string no_device_reason() {
  const DeviceInfo& d = cuda_device_info();
  if (d.cuda_devices.empty()) return d.cuda_status.empty() ? "no devices" : d.cuda_status;
  const auto& gpu = d.cuda_devices.front();
  if (gpu.cc_major < 8) {
    return "device 0 (" + gpu.name + ") has compute capability " + std::to_string(gpu.cc_major) + "." +
           std::to_string(gpu.cc_minor) + ", needs 8.0";
  }
  return "";
}

#define SKIP_WITHOUT_CUDA_DEVICE()                                                              \
  do {                                                                                          \
    if (const std::string why = no_device_reason(); !why.empty()) GTEST_SKIP() << "no CUDA device: " << why; \
  } while (0)

#define SKIP_UNLESS_SUPPORTED(backend, shape)                                                        \
  do {                                                                                               \
    const auto reasons = attention_registry().get(backend).unsupported_reasons(cuda_device_info(), shape); \
    if (!reasons.empty()) GTEST_SKIP() << backend << " unsupported here: " << reasons.front();      \
  } while (0)

double tolerance(const std::string& backend, DType dtype) {
  if (backend == "cuda_reference") return dtype == DType::kF32 ? 1e-4 : 2e-3;
  return dtype == DType::kF16 ? 4e-3 : 1.5e-2;
}

// Runs `backend` and reference on identical copies; returns the max abs error and checks that the
// new K/V landed in the pages identically.
double max_error(const std::string& backend, const AttentionShape& shape, const std::vector<SequenceSpec>& specs,
                 uint64_t seed, bool causal = true) {
  RandomBatch for_cuda = make_random_batch(shape, specs, seed, causal);
  RandomBatch for_reference = for_cuda;
  auto cuda = create_attention_backend(backend, shape, {});
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

const char* dtype_label(DType dtype) {
  return dtype == DType::kF32 ? "f32" : dtype == DType::kF16 ? "f16" : "bf16";
}

TEST(CudaAttentionRegistryTest, RegisteredAsCudaBackendsWithReasons) {
  ASSERT_TRUE(built_with_cuda());
  const AttentionShape shape{32, 8, 128, 0.088f, DType::kBF16, 16};
  DeviceInfo none;
  none.cuda_status = "no devices";
  DeviceInfo turing;
  turing.cuda_devices.push_back({0, "Tesla T4", 7, 5, 40, 16ull << 30, 15ull << 30});
  for (const char* name : {"cuda_reference", "cuda_flash", "cudnn_sdpa"}) {
    SCOPED_TRACE(name);
    const auto& d = attention_registry().get(name);
    EXPECT_EQ(d.device, Device::kCuda);
    EXPECT_THAT(d.unsupported_reasons(none, shape), ::testing::Contains(HasSubstr("no CUDA device")));
    EXPECT_THAT(d.unsupported_reasons(turing, shape),
                ::testing::Contains(HasSubstr("compute capability 7.5, needs 8.0")));
  }
  DeviceInfo hopper;
  hopper.cuda_devices.push_back({0, "NVIDIA H200", 9, 0, 132, 141ull << 30, 140ull << 30});
  const auto& reference = attention_registry().get("cuda_reference");
  EXPECT_TRUE(reference.unsupported_reasons(hopper, shape).empty());
  EXPECT_THAT(reference.unsupported_reasons(hopper, {32, 8, 512, 0.04f, DType::kBF16, 16}),
              ::testing::Contains("head_dim 512 not supported (up to 256)"));
  EXPECT_THAT(reference.unsupported_reasons(hopper, {32, 8, 128, 0.088f, DType::kF8E4M3, 16}),
              ::testing::Contains(HasSubstr("KV dtype F8_E4M3 not supported")));
  const auto& flash = attention_registry().get("cuda_flash");
  EXPECT_TRUE(flash.unsupported_reasons(hopper, shape).empty());
  EXPECT_THAT(flash.unsupported_reasons(hopper, {32, 8, 128, 0.088f, DType::kF32, 16}),
              ::testing::Contains(HasSubstr("KV dtype F32 not supported")));
  EXPECT_THAT(flash.unsupported_reasons(hopper, {32, 8, 72, 0.1f, DType::kBF16, 16}),
              ::testing::Contains(HasSubstr("head_dim 72 not supported by the prefill kernel")));
}

// (backend, KV dtype, head_dim, page size); inside: batch 1 and 5, new 1/3/17, cached 0/5/130, GQA 1/4/7.
using GridParam = std::tuple<std::string, DType, int, int>;
class CudaAttentionGridTest : public ::testing::TestWithParam<GridParam> {};

TEST_P(CudaAttentionGridTest, MatchesReference) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const auto [backend, dtype, head_dim, page_size] = GetParam();
  SKIP_UNLESS_SUPPORTED(backend, (AttentionShape{8, 2, head_dim, 0.1f, dtype, page_size}));
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
          const double e = max_error(backend, shape, specs, seed++);
          EXPECT_LE(e, tolerance(backend, dtype));
          worst = std::max(worst, e);
        }
      }
    }
  }
  RecordProperty("max_abs_error", std::to_string(worst));
  std::printf("%s: max abs error %.3g (tolerance %.1e)\n", backend.c_str(), worst, tolerance(backend, dtype));
}

INSTANTIATE_TEST_SUITE_P(
    Grid, CudaAttentionGridTest,
    ::testing::Combine(::testing::Values("cuda_reference", "cuda_flash", "cudnn_sdpa"),
                       ::testing::Values(DType::kBF16, DType::kF16, DType::kF32), ::testing::Values(64, 80, 128, 256),
                       ::testing::Values(1, 16)),
    [](const auto& info) {
      return std::get<0>(info.param) + "_" + dtype_label(std::get<1>(info.param)) + "_d" +
             std::to_string(std::get<2>(info.param)) + "_page" + std::to_string(std::get<3>(info.param));
    });

class CudaBackendTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaBackendTest, NonCausalOddLengthsAndPageSize) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const std::string backend = GetParam();
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    const AttentionShape shape{6, 3, 64, 0.12f, dtype, 5};
    SKIP_UNLESS_SUPPORTED(backend, shape);
    EXPECT_LE(max_error(backend, shape, {{5, 20}, {1, 0}, {33, 0}, {70, 11}}, 7, /*causal=*/false),
              tolerance(backend, dtype))
        << dtype_label(dtype);
  }
}

TEST_P(CudaBackendTest, LongPrefillWithCachedPrefix) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const std::string backend = GetParam();
  const AttentionShape shape{16, 4, 128, 0.088f, DType::kBF16, 16};
  SKIP_UNLESS_SUPPORTED(backend, shape);
  // Many query and key tiles, a diagonal that does not start at a tile boundary, mixed decode rows.
  EXPECT_LE(max_error(backend, shape, {{600, 300}, {1, 1500}, {129, 0}, {2, 77}}, 8), tolerance(backend, shape.kv_dtype));
}

TEST_P(CudaBackendTest, LongDecodeSplitsOfDifferentLengths) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const std::string backend = GetParam();
  const AttentionShape shape{32, 8, 128, 0.088f, DType::kBF16, 16};
  SKIP_UNLESS_SUPPORTED(backend, shape);
  // One sequence long enough to be split many ways next to tiny ones.
  EXPECT_LE(max_error(backend, shape, {{1, 0}, {1, 20000}, {1, 4095}, {1, 16}, {1, 3}}, 9),
            tolerance(backend, shape.kv_dtype));
}

// Every split size the start-time measurement may choose (kernels/cuda/split_policy.h) computes
// the attention within the tolerance: a long sequence split many ways next to tiny ones.
TEST(CudaFlashDecodeTest, EverySplitCandidateComputesTheAttention) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const AttentionShape shape{32, 8, 128, 0.088f, DType::kBF16, 16};
  SKIP_UNLESS_SUPPORTED("cuda_flash", shape);
  for (const kernels::cuda::SplitSizes& c : kernels::cuda::kSplitCandidates) {
    Switches values = switches();
    values.flash_decode_min_chunk = c.min_chunk_keys;
    values.flash_decode_blocks_per_sm = c.blocks_per_sm;
    const ScopedSwitches scoped(values);
    EXPECT_LE(max_error("cuda_flash", shape, {{1, 0}, {1, 20000}, {1, 4095}, {1, 16}, {1, 3}}, 9),
              tolerance("cuda_flash", shape.kv_dtype))
        << c.min_chunk_keys << " keys, " << c.blocks_per_sm << " blocks per SM";
  }
}

// cuda_flash's 16-bit copy of a decode step's output (request_output_copy, read by the output
// projection in place of its own conversion): bit for bit util/half.h's rounding of out, for
// sequences of one split and of many (the merge kernel writes those), bf16 and f16; refused in a
// prefill step (nothing written), and not written by a forward it was not requested for.
TEST(CudaAttentionTest, FlashDecodeWritesTheRequestedOutputCopy) {
  SKIP_WITHOUT_CUDA_DEVICE();
  for (const DType copy_dtype : {DType::kBF16, DType::kF16}) {
    const AttentionShape shape{8, 2, 128, 0.088f, DType::kBF16, 16};
    SKIP_UNLESS_SUPPORTED("cuda_flash", shape);
    // A decode step, and a verify-shaped one (served row by row by the decode kernel).
    for (const std::vector<SequenceSpec>& specs : {std::vector<SequenceSpec>{{1, 0}, {1, 3000}, {1, 40}, {1, 700}},
                                                   std::vector<SequenceSpec>{{4, 3000}, {4, 40}}}) {
      RandomBatch batch = make_random_batch(shape, specs, 21, true);
      StagedBatch staged(batch, Device::kCuda);
      LayerKvCache cache = staged.layer_cache();
      auto step_backend = create_attention_backend("cuda_flash", shape, {});
      const int64_t n = batch.step.num_tokens() * shape.num_heads * shape.head_dim;
      const std::vector<uint16_t> sentinel(static_cast<size_t>(n), 0xabcd);
      kcu::DeviceBuffer copy(sentinel.size() * sizeof(uint16_t));
      kcu::copy_to_device(copy.data(), sentinel.data(), sentinel.size() * sizeof(uint16_t));
      step_backend->prepare(batch.step);
      step_backend->bind_kv_caches({&cache, 1});
      // A forward without a request writes nothing there.
      step_backend->forward(0, staged.q(), staged.k(), staged.v(), staged.out());
      staged.synchronize();
      std::vector<uint16_t> got(sentinel.size());
      kcu::copy_to_host(got.data(), copy.data(), got.size() * sizeof(uint16_t));
      ASSERT_EQ(got, sentinel);
      ASSERT_TRUE(step_backend->request_output_copy({copy.data(), copy_dtype}))
          << specs.size() << " sequences of " << specs[0].num_new_tokens << " new tokens";
      step_backend->forward(0, staged.q(), staged.k(), staged.v(), staged.out(), /*kv_written=*/true);
      staged.synchronize();
      const std::vector<float> out = staged.read_out();
      kcu::copy_to_host(got.data(), copy.data(), got.size() * sizeof(uint16_t));
      for (size_t i = 0; i < out.size(); ++i) {
        const uint16_t want = copy_dtype == DType::kBF16 ? float_to_bf16_bits(out[i]) : float_to_fp16_bits(out[i]);
        ASSERT_EQ(got[i], want) << dtype_name(copy_dtype) << " element " << i << " of out " << out[i] << ", "
                                << specs[0].num_new_tokens << " new tokens per sequence";
      }
    }
    auto backend = create_attention_backend("cuda_flash", shape, {});
    kcu::DeviceBuffer copy(64);
    // A prefill step (past kRowSequencesMaxRows rows): refused.
    RandomBatch prefill = make_random_batch(shape, {{5, 0}, {5, 10}}, 22, true);
    backend->prepare(prefill.step);
    EXPECT_FALSE(backend->request_output_copy({copy.data(), copy_dtype}));
  }
}

TEST(CudaAttentionTest, WrongFaultIsCaughtOnTheDevice) {
  SKIP_WITHOUT_CUDA_DEVICE();
  ChildOptions options;
  options.executable = testing::spindle_binary();
  options.timeout_s = 120;
  options.timing = false;
  options.cuda_device = cuda_device_info().cuda_devices.front().index;
  Switches values = switches();
  values.attn_fault = "cuda_reference=wrong";  // reaches the child on its command line
  const ScopedSwitches scoped(values);
  const auto outcome = validate_in_child("cuda_reference", {8, 2, 64, 0.125f, DType::kBF16, 16}, options);
  EXPECT_EQ(outcome.status, ValidationStatus::kMismatch) << outcome.detail;
}

}  // namespace
}  // namespace spindle::attn
