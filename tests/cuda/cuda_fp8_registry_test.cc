// The CUDA FP8 prefill registry (kernels/cuda/fp8_linear_registry.h): names, reasons, and each
// entry's check against the float64 product on the 8B model's shapes at 512 rows (sampled
// columns), within its stated tolerance; the chooser returns a passing entry per shape. (That a
// wrong product fails such a comparison is shown by cuda_fp8_lt_test's negative control.)
// The device cases skip without a CUDA device (the cuBLASLt entries report their reasons on
// devices other than SM 9.0 and are then not run).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cuda/cuda_skip.h"
#include "kernels/cuda/fp8_linear_registry.h"
#include "platform/cuda_info.h"
#include "util/error.h"

namespace spindle {
namespace {

namespace kcu = kernels::cuda;

TEST(CudaFp8Registry, UnknownNameListsTheRegisteredOnes) {
  try {
    kcu::fp8_prefill_kernel("nope");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    for (const char* n : {"fp8_w8a16", "cublaslt_fp8", "cublaslt_fp8_fast_accum"}) {
      EXPECT_NE(what.find(n), std::string::npos) << what;
    }
  }
  EXPECT_EQ(kcu::fp8_prefill_kernels().front().name, kcu::kFp8PrefillDefault);
}

TEST(CudaFp8Registry, TensorCoreEntriesNameTheDeviceOffHopper) {
  const kcu::Fp8LinearShape s{4096, 4096, kcu::Fp8Scale::kPerChannel};
  EXPECT_TRUE(kcu::fp8_prefill_kernel("fp8_w8a16").unsupported_reasons(8, 0, s).empty());
  const auto reasons = kcu::fp8_prefill_kernel("cublaslt_fp8").unsupported_reasons(8, 9, s);
  ASSERT_FALSE(reasons.empty());
  EXPECT_NE(reasons.front().find("8.9"), std::string::npos) << reasons.front();
}

class CudaFp8RegistryDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_CUDA_DEVICE();
    const auto& d = probe_cuda_devices().devices.front();
    cc_major_ = d.cc_major;
    cc_minor_ = d.cc_minor;
  }
  int cc_major_ = 0, cc_minor_ = 0;
};

// The 8B shapes (qkv, o, gate_up, down) in the three scale modes.
std::vector<kcu::Fp8LinearShape> shapes_8b() {
  std::vector<kcu::Fp8LinearShape> out;
  for (auto mode : {kcu::Fp8Scale::kPerTensor, kcu::Fp8Scale::kPerChannel, kcu::Fp8Scale::kBlock128}) {
    for (auto [o, i] : {std::pair<int64_t, int64_t>{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}}) {
      out.push_back({o, i, mode});
    }
  }
  return out;
}

TEST_F(CudaFp8RegistryDevice, EveryAvailableEntryPassesItsCheckOnThe8bShapes) {
  int run = 0;
  for (const auto& s : shapes_8b()) {
    for (const auto& d : kcu::fp8_prefill_kernels()) {
      const kcu::Fp8PrefillCheck c = kcu::check_fp8_prefill_kernel(d.name, s, 512, 3, cc_major_, cc_minor_);
      if (!c.unsupported_reasons.empty()) {
        std::printf("%s %s: unavailable: %s\n", d.name.c_str(), s.to_string().c_str(), c.unsupported_reasons.front().c_str());
        continue;
      }
      ++run;
      EXPECT_TRUE(c.error.empty()) << d.name << " " << s.to_string() << ": " << c.error;
      EXPECT_TRUE(c.passed) << d.name << " " << s.to_string() << ": error " << c.max_error << " > " << c.tolerance;
      std::printf("%s %s: max |y - ref| / S %.3g (tolerance %.3g), %.1f us at 512 rows\n", d.name.c_str(),
                  s.to_string().c_str(), c.max_error, c.tolerance, c.seconds * 1e6);
    }
  }
  EXPECT_GE(run, 12);  // fp8_w8a16 runs everywhere
}

TEST_F(CudaFp8RegistryDevice, TheChooserKeepsAPassingEntryPerShape) {
  const std::vector<kcu::Fp8LinearShape> shapes = {{4096, 4096, kcu::Fp8Scale::kPerChannel},
                                                   {4096, 4096, kcu::Fp8Scale::kBlock128}};
  std::vector<kcu::Fp8PrefillCheck> checks;
  const auto choices = kcu::choose_fp8_prefill_kernels(shapes, 512, 3, cc_major_, cc_minor_, &checks);
  ASSERT_EQ(choices.size(), shapes.size());
  for (const auto& c : choices) {
    bool passed = false;
    for (const auto& k : checks) passed = passed || (k.kernel == c.kernel && k.shape == c.shape && k.passed);
    EXPECT_TRUE(passed) << c.shape.to_string() << " chose " << c.kernel << " without a passing check";
    std::printf("%s: %s\n", c.shape.to_string().c_str(), c.kernel.c_str());
  }
}

// The on-disk cache in front of the checks (no device needed: the inner checker is a table). A
// second chooser over a fresh cache object (a second start) checks nothing, makes the same choices
// and returns every check's fields as the first got them; the fastest passing entry wins, a failed
// or unavailable one never does.
TEST(CudaFp8Registry, CachedChecksChooseWithoutCheckingAgain) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("spindle_fp8_registry_cache_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const std::vector<kcu::Fp8LinearShape> shapes = {{4096, 4096, kcu::Fp8Scale::kPerChannel},
                                                   {4096, 14336, kcu::Fp8Scale::kBlock128}};
  int num_checked = 0;
  const kcu::Fp8PrefillChecker table = [&](std::string_view kernel, const kcu::Fp8LinearShape& s) {
    ++num_checked;
    kcu::Fp8PrefillCheck c;
    c.kernel = std::string(kernel);
    c.shape = s;
    c.tolerance = 1e-4;
    if (kernel == "cublaslt_fp8_fast_accum" && s.mode == kcu::Fp8Scale::kBlock128) {
      c.unsupported_reasons = {"fast accumulation with 128-element block scales is NOT_SUPPORTED"};
    } else if (kernel == "cublaslt_fp8_fast_accum") {
      c.max_error = 0.5;  // fastest, but outside its tolerance
      c.seconds = 1e-5;
    } else {
      c.passed = true;
      c.max_error = 2e-5;
      c.seconds = kernel == "cublaslt_fp8" ? 2e-4 : 9e-4;
    }
    return c;
  };
  const std::string key = kcu::Fp8PrefillCache::make_key("build-1", "cpu-x-H100-sm90", "NVIDIA H100 sm90",
                                                         "cublaslt=130100", 512, 5);
  std::vector<kcu::Fp8PrefillCheck> first_checks, second_checks;
  std::vector<kcu::Fp8PrefillChoice> first, second;
  {
    kcu::Fp8PrefillCache cache(dir, key);
    first = kcu::choose_fp8_prefill_kernels(shapes, kcu::cached_fp8_prefill_checker(cache, table), &first_checks);
    EXPECT_EQ(cache.num_misses(), 6);
  }
  EXPECT_EQ(num_checked, 6);
  {
    kcu::Fp8PrefillCache cache(dir, key);
    second = kcu::choose_fp8_prefill_kernels(shapes, kcu::cached_fp8_prefill_checker(cache, table), &second_checks);
    EXPECT_EQ(cache.num_hits(), 6);
  }
  EXPECT_EQ(num_checked, 6) << "the second start checked again";
  ASSERT_EQ(first.size(), 2u);
  ASSERT_EQ(second.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(first[i].kernel, "cublaslt_fp8") << shapes[i].to_string();
    EXPECT_EQ(second[i].kernel, first[i].kernel);
    EXPECT_EQ(second[i].shape, shapes[i]);
  }
  ASSERT_EQ(second_checks.size(), first_checks.size());
  for (size_t i = 0; i < first_checks.size(); ++i) {
    const auto& a = first_checks[i];
    const auto& b = second_checks[i];
    EXPECT_EQ(b.kernel, a.kernel);
    EXPECT_EQ(b.shape, a.shape);
    EXPECT_EQ(b.unsupported_reasons, a.unsupported_reasons);
    EXPECT_EQ(b.passed, a.passed);
    EXPECT_EQ(b.max_error, a.max_error);
    EXPECT_EQ(b.tolerance, a.tolerance);
    EXPECT_EQ(b.seconds, a.seconds) << a.kernel << " " << a.shape.to_string();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace spindle
