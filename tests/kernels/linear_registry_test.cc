// The CPU linear-kernel registry (kernels/cpu/linear_registry.h) and the validation child's check
// (kernels/cpu/select/linear_check.h), in this process.
//
// Availability reasons are checked on made-up CPUs (no features; AVX2 only), so they are tested on
// every machine. Each registered kernel is then checked on this CPU by run_linear_check: against a
// float64 product on odd shapes with the check's tolerance (kLinearCheckTolerance = 1e-5 of
// sum |x w|); a kernel this CPU cannot run is SKIPPED with its reason, never passed.
#include "kernels/cpu/linear_registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "kernels/cpu/select/linear_check.h"
#include "platform/cpu_info.h"
#include "util/error.h"
#include "util/switches.h"

namespace spindle::kernels::cpu {
namespace {

using ::testing::HasSubstr;

CpuInfo made_up_cpu(std::initializer_list<std::string_view> usable) {
  CpuInfo cpu;
  for (std::string_view name : kCpuFeatureNames) {
    const bool has = std::find(usable.begin(), usable.end(), name) != usable.end();
    cpu.features.push_back({std::string(name), has, has, ""});
  }
  return cpu;
}

std::string reasons_of(const std::string& kernel, const CpuInfo& cpu, const LinearShape& shape, bool bf16_activations) {
  LinearOptions o;
  o.allow_bf16_activations = bf16_activations;
  std::string all;
  for (const auto& r : linear_registry().get(kernel).unsupported_reasons(cpu, shape, o)) all += r + "; ";
  return all;
}

TEST(LinearRegistryTest, RegistersEveryCpuKernelButReference) {
  EXPECT_EQ(linear_registry().names(),
            (std::vector<std::string>{"avx2", "avx512", "avx512_bf16", "amx", "amx_bf16", "onednn_f32", "onednn_bf16",
                                      "int8_avx2", "int8_avx_vnni", "int8_avx512_vnni", "amx_int8"}));
  EXPECT_FALSE(linear_registry().contains("reference"));
}

TEST(LinearRegistryTest, UnknownNameListsTheRegisteredOnes) {
  try {
    linear_registry().get("avx1024");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("unknown linear kernel 'avx1024'"));
    EXPECT_THAT(e.what(), HasSubstr("avx2, avx512, avx512_bf16, amx, amx_bf16, onednn_f32, onednn_bf16"));
  }
}

TEST(LinearRegistryTest, ReasonsNameTheMissingFeatureTheWeightTypeAndThePrecision) {
  const CpuInfo bare = made_up_cpu({});
  const CpuInfo avx2 = made_up_cpu({"avx2", "fma", "f16c"});
  const LinearShape bf16{64, 64, DType::kBF16}, f32{64, 64, DType::kF32};
  EXPECT_THAT(reasons_of("avx2", bare, bf16, false), HasSubstr("CPU lacks avx2"));
  EXPECT_EQ(reasons_of("avx2", avx2, f32, false), "");
  EXPECT_THAT(reasons_of("avx512", avx2, bf16, false), HasSubstr("CPU lacks avx512f"));
  EXPECT_THAT(reasons_of("amx", avx2, bf16, false), HasSubstr("CPU lacks amx_tile"));
  EXPECT_THAT(reasons_of("amx", avx2, f32, false), HasSubstr("serves bf16 weights only (weight is F32)"));
  EXPECT_THAT(reasons_of("avx512_bf16", avx2, bf16, false), HasSubstr("rounds activations to bf16"));
  EXPECT_THAT(reasons_of("onednn_bf16", avx2, bf16, true), HasSubstr("neither AMX-BF16 nor AVX512-BF16"));
  EXPECT_EQ(reasons_of("onednn_f32", bare, f32, false), "");
  CpuInfo unusable = made_up_cpu({"avx2", "fma"});
  for (auto& f : unusable.features) {
    if (f.name == "avx512f") {
      f.present = true;
      f.reason = "XCR0 lacks the ZMM state";
    }
  }
  EXPECT_THAT(reasons_of("avx512", unusable, f32, false), HasSubstr("avx512f present but unusable: XCR0 lacks the ZMM state"));
  // Quantized weights run on the int8 kernels only, and those on nothing else.
  const LinearShape q4k{64, 256, DType::kF32, QuantType::kQ4_K};
  EXPECT_THAT(reasons_of("avx2", avx2, q4k, false), HasSubstr("serves F32 / BF16 weights only (weight is Q4_K)"));
  EXPECT_THAT(reasons_of("onednn_f32", bare, q4k, false), HasSubstr("weight is Q4_K"));
  EXPECT_THAT(reasons_of("amx_bf16", bare, q4k, true), HasSubstr("serves bf16 weights only (weight is Q4_K)"));
  EXPECT_THAT(reasons_of("int8_avx2", avx2, bf16, false), HasSubstr("serves quantized weights only (weight is BF16)"));
  EXPECT_EQ(reasons_of("int8_avx2", made_up_cpu({"avx2", "fma", "f16c"}), q4k, false), "");
  EXPECT_NE(reasons_of("int8_avx512_vnni", avx2, q4k, false), "");
  EXPECT_NE(reasons_of("amx_int8", avx2, q4k, false), "");
}

TEST(LinearRegistryTest, OnlyRowIndependentKernelsMayServeDecodeRows) {
  for (const auto& d : linear_registry().list()) EXPECT_EQ(d.row_independent, d.name.rfind("onednn", 0) != 0) << d.name;
}

TEST(LinearRegistryTest, ShapesRoundTripAndBadOnesAreErrors) {
  EXPECT_EQ(parse_linear_shape("2048x8192:BF16"), (LinearShape{2048, 8192, DType::kBF16}));
  EXPECT_EQ(parse_linear_shape("5x7:F32").to_string(), "5x7:F32");
  EXPECT_EQ(parse_linear_shape("2048x8192:Q4_K"), (LinearShape{2048, 8192, DType::kF32, QuantType::kQ4_K}));
  for (const char* bad : {"2048x8192", "x8:BF16", "0x8:BF16", "8x8:F16", "8y8:BF16", "8x8q:BF16"}) {
    EXPECT_THROW(parse_linear_shape(bad), Error) << bad;
  }
}

// Every registered kernel on this CPU, through the validation child's own check.
class EveryKernel : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryKernel, PassesTheCheckOnOddShapesOrSaysWhyNot) {
  LinearCheckRequest request;
  request.kernel = GetParam();
  request.allow_bf16_activations = true;
  const bool int8 = request.kernel.find("int8") != std::string::npos;
  const LinearShape probe = int8 ? LinearShape{97, 256, DType::kF32, QuantType::kQ8_0} : LinearShape{97, 136, DType::kBF16};
  const auto reasons = linear_registry().get(request.kernel).unsupported_reasons(detect_cpu_info(), probe, {true});
  if (!reasons.empty()) GTEST_SKIP() << request.kernel << ": " << reasons.front();
  request.shapes = {probe, {257, 80, DType::kBF16}, {15, 13, DType::kF32}};
  if (int8) {  // every type the kernels compute, odd row counts (not multiples of the 16-row groups)
    request.shapes.clear();
    for (QuantType t : quant_types()) request.shapes.push_back({33, 512, DType::kF32, t});
    request.shapes.push_back(probe);
  }
  request.timing_rows = {1, 3};
  const LinearCheckReport report = run_linear_check(request);
  ASSERT_EQ(report.shapes.size(), request.shapes.size());
  for (const auto& s : report.shapes) {
    if (s.shape == "15x13:F32" && !s.error.empty()) {
      EXPECT_THAT(s.error, HasSubstr("bf16 weights only"));  // bf16-only kernels say so
      continue;
    }
    EXPECT_TRUE(s.passed) << s.shape << ": max error " << s.max_error << " " << s.error;
    EXPECT_LE(s.max_error, int8 ? quant_check_tolerance(parse_linear_shape(s.shape).in_features) : kLinearCheckTolerance);
    EXPECT_GT(s.seconds_at(1), 0) << s.shape;
    EXPECT_GT(s.seconds_at(3), 0) << s.shape;
  }
}

INSTANTIATE_TEST_SUITE_P(Registered, EveryKernel, ::testing::ValuesIn(linear_registry().names()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// The check must be able to fail: an injected wrong answer (+0.5 per output) is a mismatch, for a
// plain and an int8 kernel.
TEST(LinearCheckTest, AWrongKernelFailsTheCheck) {
  Switches faulty = switches();
  faulty.linear_fault = "onednn_f32=wrong";
  const ScopedSwitches scoped(faulty);
  LinearCheckRequest request{"onednn_f32", {{33, 40, DType::kF32}}, {}, false};
  const LinearCheckReport report = run_linear_check(request);
  ASSERT_EQ(report.shapes.size(), 1u);
  EXPECT_FALSE(report.shapes[0].passed);
  EXPECT_GT(report.shapes[0].max_error, 1e-3);
  Switches int8_faulty = switches();
  int8_faulty.linear_fault = "int8_avx2=wrong";
  const ScopedSwitches scoped_int8(int8_faulty);
  if (!linear_registry().get("int8_avx2").unsupported_reasons(detect_cpu_info(), {16, 64, DType::kF32, QuantType::kQ4_0}, {}).empty())
    GTEST_SKIP() << "int8_avx2 cannot run here";
  const LinearCheckReport q = run_linear_check({"int8_avx2", {{16, 64, DType::kF32, QuantType::kQ4_0}}, {}, false});
  ASSERT_EQ(q.shapes.size(), 1u);
  EXPECT_FALSE(q.shapes[0].passed) << q.shapes[0].error;
  EXPECT_TRUE(q.shapes[0].error.empty()) << q.shapes[0].error;
}

TEST(LinearCheckTest, ReportsRoundTripThroughJson) {
  LinearCheckReport r{"avx2", {{"8x8:F32", true, 1e-8, 1e-5, 2e-3, {{1, 2e-6}, {512, 3e-4}}, ""}}};
  const LinearCheckReport back = linear_check_report_from_json(to_json(r));
  ASSERT_EQ(back.shapes.size(), 1u);
  EXPECT_EQ(back.kernel, "avx2");
  EXPECT_EQ(back.shapes[0].seconds_at(512), 3e-4);
  EXPECT_EQ(back.shapes[0].seconds_at(2), 0);
  EXPECT_EQ(back.shapes[0].end_to_end_error, 2e-3);
}

}  // namespace
}  // namespace spindle::kernels::cpu
