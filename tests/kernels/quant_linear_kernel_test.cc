// make_quant_linear_kernel / make_linear_kernel on quantized weights (kernels/cpu/linear.h): the
// LinearKernel adapter over quant_linear_forward. Truth: quant_linear_forward itself (checked
// against float64 references in quant_linear_test.cc) plus the bias added in float64; the adapter
// must give exactly those floats (it only adds the bias, one f32 addition per output), on every
// supported ISA, with every row count choosing, and refuse what it cannot run.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "kernels/cpu/linear.h"
#include "kernels/cpu/quant_linear.h"
#include "platform/cpu_info.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace spindle::kernels::cpu {
namespace {

// Q8_0 blocks: fp16 scale 2^-6 (bits 0x2400), random int8 quants.
std::vector<uint8_t> q8_0_weight(int64_t n, int64_t k, std::mt19937& rng) {
  std::vector<uint8_t> data(static_cast<size_t>(n * k / 32 * 34));
  for (size_t b = 0; b < data.size(); b += 34) {
    data[b] = 0x00, data[b + 1] = 0x24;
    for (int e = 0; e < 32; ++e) data[b + 2 + e] = static_cast<uint8_t>(rng());
  }
  return data;
}

TEST(QuantLinearKernel, EqualsQuantLinearForwardPlusBias) {
  std::mt19937 rng(7);
  const int64_t n = 33, k = 256;
  const auto file = q8_0_weight(n, k, rng);
  const PackedQuantWeight packed = repack_quant_weight(QuantType::kQ8_0, file.data(), int64_t(file.size()), n, k);
  const LinearWeight weight = LinearWeight::from_quant(packed);
  std::normal_distribution<float> normal;
  std::vector<float> bias(n);
  for (auto& b : bias) b = normal(rng);
  const CpuInfo cpu = detect_cpu_info();
  int ran = 0;
  for (QuantKernelIsa isa : quant_kernel_isas()) {
    if (!quant_linear_unsupported_reasons(isa, cpu).empty()) continue;
    ++ran;
    auto kernel = make_quant_linear_kernel(weight, isa);
    for (int64_t m : {1, 5, 17}) {
      std::vector<float> x(size_t(m * k)), want(size_t(m * n)), got(size_t(m * n));
      for (auto& v : x) v = normal(rng);
      quant_linear_forward(isa, packed, x.data(), m, want.data(), nullptr);
      kernel->forward(x.data(), m, got.data(), &ThreadPool::global(), bias.data());
      for (int64_t i = 0; i < m * n; ++i) ASSERT_EQ(got[i], want[i] + bias[i % n]) << kernel->name() << " m " << m;
    }
  }
  ASSERT_GT(ran, 0) << "no int8 kernel runs on this CPU";
  auto automatic = make_linear_kernel(weight);
  EXPECT_NE(std::string(automatic->name()).find("q8_0/"), std::string::npos) << automatic->name();
}

TEST(QuantLinearKernel, RefusesWhatItCannotRun) {
  std::mt19937 rng(1);
  const auto file = q8_0_weight(16, 64, rng);
  const PackedQuantWeight packed = repack_quant_weight(QuantType::kQ8_0, file.data(), int64_t(file.size()), 16, 64);
  LinearWeight weight = LinearWeight::from_quant(packed);
  EXPECT_THROW(make_reference_linear_kernel(weight), Error);
  EXPECT_THROW(make_named_linear_kernel("avx2", weight), Error);
  weight.out_features = 15;
  EXPECT_THROW(make_quant_linear_kernel(weight, QuantKernelIsa::kAvx2), Error);
  const CpuInfo cpu = detect_cpu_info();
  for (QuantKernelIsa isa : quant_kernel_isas()) {
    if (quant_linear_unsupported_reasons(isa, cpu).empty()) continue;
    EXPECT_THROW(make_quant_linear_kernel(LinearWeight::from_quant(packed), isa), Error) << quant_kernel_isa_name(isa);
  }
}

}  // namespace
}  // namespace spindle::kernels::cpu
