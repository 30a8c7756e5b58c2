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
//   fp8_e4m3 KV: both read the same scaled FP8 pages (written bit-identically by the CPU and CUDA
//     writers, checked), cuda_reference in f32 (2e-3, as 16-bit KV), cuda_flash converting E4M3 to
//     f16 exactly and applying the scales in f32, so as f16 KV (4e-3). The FP8 quantization error
//     itself is bounded against unquantized values by tests/kernels/paged_attention_test.cc.
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
  return dtype == DType::kF16 || dtype == DType::kF8E4M3 ? 4e-3 : 1.5e-2;
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
  return dtype == DType::kF32 ? "f32" : dtype == DType::kF16 ? "f16" : dtype == DType::kF8E4M3 ? "fp8" : "bf16";
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
  // cuda_reference and cuda_flash read FP8 pages; cudnn_sdpa says it does not, naming fp8_e4m3.
  for (const char* name : {"cuda_reference", "cuda_flash"}) {
    EXPECT_TRUE(attention_registry().get(name).unsupported_reasons(hopper, {32, 8, 128, 0.088f, DType::kF8E4M3, 16}).empty())
        << name;
  }
  EXPECT_THAT(reference.unsupported_reasons(hopper, {32, 8, 128, 0.088f, DType::kI8, 16}),
              ::testing::Contains(HasSubstr("KV dtype I8 not supported")));
  EXPECT_THAT(attention_registry().get("cudnn_sdpa").unsupported_reasons(hopper, {32, 8, 128, 0.088f, DType::kF8E4M3, 16}),
              ::testing::Contains(HasSubstr("KV dtype fp8_e4m3 not supported")));
  const auto& flash = attention_registry().get("cuda_flash");
  EXPECT_TRUE(flash.unsupported_reasons(hopper, shape).empty());
  EXPECT_THAT(flash.unsupported_reasons(hopper, {32, 8, 128, 0.088f, DType::kF32, 16}),
              ::testing::Contains(HasSubstr("KV dtype f32 not supported")));
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
                       ::testing::Values(DType::kBF16, DType::kF16, DType::kF32, DType::kF8E4M3),
                       ::testing::Values(64, 80, 128, 256),
                       ::testing::Values(1, 16)),
    [](const auto& info) {
      return std::get<0>(info.param) + "_" + dtype_label(std::get<1>(info.param)) + "_d" +
             std::to_string(std::get<2>(info.param)) + "_page" + std::to_string(std::get<3>(info.param));
    });

class CudaBackendTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaBackendTest, NonCausalOddLengthsAndPageSize) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const std::string backend = GetParam();
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF8E4M3}) {
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

// Steps of 2-8 query rows, not all decode rows (a batch-1 speculative verify: K + 1), long enough
// to be split: cuda_flash runs them row by row on its decode kernel (DeviceBatch's row_sequences),
// each row attending to its causal prefix; past 8 rows (the last case) they take the prefill kernel.
TEST_P(CudaBackendTest, VerifyShapedStepsOfDifferentLengths) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const std::string backend = GetParam();
  const AttentionShape shape{32, 8, 128, 0.088f, DType::kBF16, 16};
  SKIP_UNLESS_SUPPORTED(backend, shape);
  const std::vector<std::vector<SequenceSpec>> steps = {
      {{5, 20000}}, {{5, 0}}, {{2, 4095}, {3, 16}, {1, 3}, {2, 0}}, {{8, 700}}, {{5, 700}, {5, 40}}};
  uint64_t seed = 10;
  for (const auto& specs : steps) {
    EXPECT_LE(max_error(backend, shape, specs, seed++), tolerance(backend, shape.kv_dtype))
        << specs.size() << " sequences, the first of " << specs[0].num_new_tokens << " new tokens";
  }
}

TEST_P(CudaBackendTest, DataParallelRankUsesItsOwnPages) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const std::string backend = GetParam();
  // Rank 1 of 2 over a pool twice the batch's size: the rank-local batch lives in the upper half.
  const AttentionShape shape{8, 2, 64, 0.125f, DType::kBF16, 16};
  SKIP_UNLESS_SUPPORTED(backend, shape);
  RandomBatch local = make_random_batch(shape, {{3, 20}, {1, 40}}, 9);
  RandomBatch reference_batch = local;
  const size_t half = local.k_pages.size();
  std::vector<std::byte> k_pool(2 * half, std::byte{0x7f}), v_pool(2 * half, std::byte{0x7f});
  std::copy(local.k_pages.begin(), local.k_pages.end(), k_pool.begin() + half);
  std::copy(local.v_pages.begin(), local.v_pages.end(), v_pool.begin() + half);

  StagedBatch staged(local, Device::kCuda);  // q, k, v, out on the device
  kcu::DeviceBuffer k_device(k_pool.size()), v_device(v_pool.size());
  kcu::copy_to_device(k_device.data(), k_pool.data(), k_pool.size());
  kcu::copy_to_device(v_device.data(), v_pool.data(), v_pool.size());
  LayerKvCache pool = staged.layer_cache();
  pool.k_pages = k_device.data();
  pool.v_pages = v_device.data();
  pool.kv.num_pages = 2 * local.num_pages;

  auto cuda = create_attention_backend(backend, shape, {2, 1});
  cuda->prepare(local.step);
  cuda->bind_kv_caches({&pool, 1});
  cuda->forward(0, staged.q(), staged.k(), staged.v(), staged.out());
  staged.synchronize();
  const std::vector<float> out = staged.read_out();
  kcu::copy_to_host(k_pool.data(), k_device.data(), k_pool.size());

  auto reference = create_attention_backend("reference", shape, {});
  const auto want = run_backend_once(*reference, reference_batch);
  double worst = 0;
  for (size_t i = 0; i < out.size(); ++i) worst = std::max(worst, std::fabs(double{out[i]} - want[i]));
  EXPECT_LE(worst, tolerance(backend, shape.kv_dtype));
  EXPECT_TRUE(std::equal(reference_batch.k_pages.begin(), reference_batch.k_pages.end(), k_pool.begin() + half));
  EXPECT_TRUE(std::all_of(k_pool.begin(), k_pool.begin() + half, [](std::byte b) { return b == std::byte{0x7f}; }))
      << "rank 1 wrote into rank 0's pages";
}

TEST_P(CudaBackendTest, RefusesHostPages) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const std::string backend = GetParam();
  const AttentionShape shape{8, 2, 64, 0.125f, DType::kBF16, 16};
  SKIP_UNLESS_SUPPORTED(backend, shape);
  RandomBatch batch = make_random_batch(shape, {{3, 20}}, 10);
  LayerKvCache host = batch.layer_cache();
  auto cuda = create_attention_backend(backend, shape, {});
  try {
    cuda->bind_kv_caches({&host, 1});
    FAIL() << "bound host pages";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("needs its KV pages in cuda memory, they are in cpu memory"));
  }
}

// The batch is checked once per step (PagedBackend), never per layer and never on the device: a
// step whose page table points outside the rank's pages is refused at every layer, before a kernel runs.
TEST_P(CudaBackendTest, RejectsAPageOutsideTheRankEachStep) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const std::string backend = GetParam();
  const AttentionShape shape{8, 2, 64, 0.125f, DType::kBF16, 16};
  SKIP_UNLESS_SUPPORTED(backend, shape);
  RandomBatch batch = make_random_batch(shape, {{3, 20}, {1, 40}}, 11);
  StagedBatch staged(batch, Device::kCuda);
  const LayerKvCache cache = staged.layer_cache();
  const std::vector<LayerKvCache> layers(2, cache);
  auto cuda = create_attention_backend(backend, shape, {});
  cuda->bind_kv_caches(layers);
  cuda->prepare(batch.step);
  auto forward = [&](int layer) { cuda->forward(layer, staged.q(), staged.k(), staged.v(), staged.out()); };
  EXPECT_NO_THROW(forward(0));
  EXPECT_NO_THROW(forward(1));
  staged.synchronize();
  batch.step.page_tables[batch.step.sequences[1].page_table_offset] = batch.num_pages;  // one past the pool
  // The step's pages are checked once, in prepare (a step replayed from a CUDA graph calls no
  // forward), so the bad page is refused before any layer runs.
  try {
    cuda->prepare(batch.step);
    ADD_FAILURE() << "prepare accepted a page outside the pool";
    for (int layer : {0, 1}) EXPECT_ANY_THROW(forward(layer)) << "layer " << layer;
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("outside [0, " + std::to_string(batch.num_pages) + ")"));
  }
  staged.synchronize();  // nothing went wrong on the device
}

TEST_P(CudaBackendTest, PassesValidationInAChild) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const std::string backend = GetParam();
  ChildOptions options;
  options.executable = testing::spindle_binary();
  options.timeout_s = 180;
  options.timing = true;
  options.cuda_device = cuda_device_info().cuda_devices.front().index;
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    const AttentionShape shape{32, 8, 128, 0.08838834764831845f, dtype, 16};
    if (!attention_registry().get(backend).unsupported_reasons(cuda_device_info(), shape).empty()) continue;
    const auto outcome = validate_in_child(backend, shape, options);
    ASSERT_EQ(outcome.status, CheckStatus::kPass) << dtype_label(dtype) << ": " << outcome.detail;
    EXPECT_LE(outcome.report.prefill_max_abs_error, tolerance_for(dtype).max_abs_error);
    EXPECT_LE(outcome.report.decode_max_abs_error, tolerance_for(dtype).max_abs_error);
    std::printf("%s %s: prefill err %.3g, decode err %.3g, prefill %.0f tok/s (%.1f GFLOP/s), decode %.0f tok/s "
                "(%.1f GB/s KV)\n",
                backend.c_str(), shape.to_string().c_str(), outcome.report.prefill_max_abs_error,
                outcome.report.decode_max_abs_error, outcome.report.prefill_tokens_per_s,
                outcome.report.prefill_gflops, outcome.report.decode_tokens_per_s,
                outcome.report.decode_kv_gb_per_s);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, CudaBackendTest,
                         ::testing::Values("cuda_reference", "cuda_flash", "cudnn_sdpa"),
                         [](const auto& info) { return info.param; });

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
  EXPECT_EQ(outcome.status, CheckStatus::kMismatch) << outcome.detail;
}

}  // namespace
}  // namespace spindle::attn
