// A joined FP8 weight (q | k | v, gate | up as CudaOps places them: the parts' codes back to back,
// scales from join_fp8_scales, model/fp8_join.h) through every product that runs it, against the
// float64 product over each PART's own dequantized weights (e4m3 from its definition,
// tests/support/fp8_reference.h, times the part's own scale in the part's own mode): so a join
// that gave a row another part's scale, or cut block rows wrongly, misses by the ratio of the scales.
//
// Parts: per-tensor with a DIFFERENT scalar per part (joined as per-channel), per-channel, and
// 128x128 blocks (q 384, k 128, v 128 rows; gate 256, up 256 rows), 512 inputs (4 block columns:
// cuBLASLt's block layout), a bias on q | k | v. Products (CudaOps::linear's):
//   rows 1, 3 (gemv_fp8), 4, 8, 17, 32 (gemv_fp8_mma): Fp8Linear on split bf16 activations;
//   rows 40, 64: Fp8Linear's W8A16 path (fp8_w8a16), and each cuBLASLt entry where the device has it.
// Tolerance per output: |y - ref| <= tol * (sum_i |x_i w_i| + |bias|), tol = the entry's stated one
// (fp8_linear_registry.h: kW8a16Tolerance 1e-4 for the streaming and W8A16 products, whose split
// activations carry ~2^-17; cuBLASLt's W8A8 bound from fp8_prefill_tolerance). Skips without a
// CUDA device (cc >= 8.0); the cuBLASLt entries skip with their reasons off SM 9.0.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "cuda/cuda_skip.h"
#include "kernels/cuda/cublas_linear.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/fp8_linear.h"
#include "kernels/cuda/fp8_linear_registry.h"
#include "model/fp8_join.h"
#include "platform/cuda_info.h"
#include "support/fp8_reference.h"

namespace spindle {
namespace {

namespace kcu = kernels::cuda;
using testing::e4m3_definition;

constexpr int64_t kIn = 512;

struct Part {
  std::string name;
  int64_t rows = 0;
  std::vector<uint8_t> codes;  // [rows, kIn], no NaN codes
  std::vector<float> scales;   // the part's own, in the case's mode
};

struct Case {
  Fp8ScaleMode mode;
  const char* label;
};

int64_t scale_count(Fp8ScaleMode mode, int64_t rows) {
  switch (mode) {
    case Fp8ScaleMode::kPerTensor: return 1;
    case Fp8ScaleMode::kPerChannel: return rows;
    case Fp8ScaleMode::kBlock128: return (rows + 127) / 128 * ((kIn + 127) / 128);
  }
  return 0;
}

// The part's own scale of element (o, i) (fp8_config.h's definition of each mode).
double part_scale(Fp8ScaleMode mode, const Part& p, int64_t o, int64_t i) {
  switch (mode) {
    case Fp8ScaleMode::kPerTensor: return p.scales[0];
    case Fp8ScaleMode::kPerChannel: return p.scales[static_cast<size_t>(o)];
    case Fp8ScaleMode::kBlock128: return p.scales[static_cast<size_t>((o / 128) * ((kIn + 127) / 128) + i / 128)];
  }
  return 0;
}

std::vector<Part> make_parts(Fp8ScaleMode mode, const std::vector<std::pair<std::string, int64_t>>& shapes,
                             uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> code(0, 255);
  std::vector<Part> parts;
  float base = 1e-3f;
  for (const auto& [name, rows] : shapes) {
    Part p{name, rows, std::vector<uint8_t>(static_cast<size_t>(rows * kIn)), {}};
    for (auto& c : p.codes) {
      int v = code(rng);
      while ((v & 0x7F) == 0x7F) v = code(rng);
      c = static_cast<uint8_t>(v);
    }
    // Distinct per part (per-tensor: 1e-3, 2.5e-3, 4e-3, ...), varying within a part otherwise.
    std::uniform_real_distribution<float> u(base, 2 * base);
    p.scales.resize(static_cast<size_t>(scale_count(mode, rows)));
    for (float& s : p.scales) s = mode == Fp8ScaleMode::kPerTensor ? base : u(rng);
    base *= 2.5f;
    parts.push_back(std::move(p));
  }
  return parts;
}

kcu::Fp8Scale device_mode(Fp8ScaleMode m) {
  return m == Fp8ScaleMode::kPerTensor   ? kcu::Fp8Scale::kPerTensor
         : m == Fp8ScaleMode::kPerChannel ? kcu::Fp8Scale::kPerChannel
                                          : kcu::Fp8Scale::kBlock128;
}

template <typename T>
kcu::DeviceBuffer to_device(const std::vector<T>& host) {
  kcu::DeviceBuffer b(std::max<size_t>(host.size() * sizeof(T), 1));
  if (!host.empty()) kcu::copy_to_device(b.data(), host.data(), host.size() * sizeof(T));
  return b;
}

// The joined weight on the device: codes back to back, join_fp8_scales' scales.
struct Joined {
  Fp8JoinedScales scales;
  kcu::DeviceBuffer codes, dscales;
  kcu::DeviceFp8Weight weight;
};

Joined join_on_device(Fp8ScaleMode mode, const std::vector<Part>& parts) {
  std::vector<Fp8JoinPart> in;
  std::vector<uint8_t> codes;
  for (const Part& p : parts) {
    in.push_back({p.name, p.rows, kIn, mode, p.scales, {}});
    codes.insert(codes.end(), p.codes.begin(), p.codes.end());
  }
  Joined j{join_fp8_scales(in), to_device(codes), {}, {}};
  j.dscales = to_device(j.scales.scales);
  j.weight = {j.codes.as<uint8_t>(), j.dscales.as<float>(), device_mode(j.scales.mode), j.scales.rows, kIn};
  return j;
}

// ref [rows, out] and S per output (sum |x w| + |bias|), from each part's own scales.
void reference(Fp8ScaleMode mode, const std::vector<Part>& parts, const std::vector<float>& x, int64_t rows,
               const std::vector<float>& bias, std::vector<double>& ref, std::vector<double>& mag) {
  int64_t out = 0;
  for (const Part& p : parts) out += p.rows;
  ref.assign(static_cast<size_t>(rows * out), 0.0);
  mag.assign(ref.size(), 0.0);
  std::vector<double> w(static_cast<size_t>(kIn));
  int64_t offset = 0;
  for (const Part& p : parts) {
    for (int64_t o = 0; o < p.rows; ++o) {
      for (int64_t i = 0; i < kIn; ++i) {
        w[static_cast<size_t>(i)] = e4m3_definition(p.codes[static_cast<size_t>(o * kIn + i)]) * part_scale(mode, p, o, i);
      }
      const double b = bias.empty() ? 0.0 : bias[static_cast<size_t>(offset + o)];
      for (int64_t r = 0; r < rows; ++r) {
        double sum = b, m = std::fabs(b);
        for (int64_t i = 0; i < kIn; ++i) {
          const double xw = double{x[static_cast<size_t>(r * kIn + i)]} * w[static_cast<size_t>(i)];
          sum += xw;
          m += std::fabs(xw);
        }
        ref[static_cast<size_t>(r * out + offset + o)] = sum;
        mag[static_cast<size_t>(r * out + offset + o)] = m;
      }
    }
    offset += p.rows;
  }
}

double worst(const std::vector<float>& y, const std::vector<double>& ref, const std::vector<double>& mag) {
  double e = 0;
  for (size_t k = 0; k < y.size(); ++k) e = std::max(e, std::fabs(y[k] - ref[k]) / std::max(mag[k], 1e-30));
  return e;
}

class CudaFp8Join : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override { SKIP_WITHOUT_CUDA_DEVICE(); }
};

TEST_P(CudaFp8Join, JoinedProductsMatchThePartsFloat64Product) {
  const Fp8ScaleMode mode = GetParam().mode;
  const auto& device = probe_cuda_devices().devices.front();
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreate(&stream));
  const std::vector<std::vector<std::pair<std::string, int64_t>>> groups = {
      {{"q", 384}, {"k", 128}, {"v", 128}}, {{"gate", 256}, {"up", 256}}};
  constexpr int64_t kMaxRows = 64;
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(kMaxRows * kIn));
  for (size_t k = 0; k < x.size(); ++k) x[k] = normal(rng) * std::ldexp(1.0f, static_cast<int>(k / kIn % 9) - 4);
  const kcu::DeviceBuffer dx = to_device(x);
  {
    kcu::CublasLinear linear(stream);  // split bf16 activations (CudaOps' default)
    for (size_t g = 0; g < groups.size(); ++g) {
      const std::vector<Part> parts = make_parts(mode, groups[g], 100 + g);
      Joined j = join_on_device(mode, parts);
      ASSERT_TRUE(j.scales.joined()) << j.scales.why_not;
      if (mode == Fp8ScaleMode::kPerTensor) {
        EXPECT_EQ(j.scales.mode, Fp8ScaleMode::kPerChannel);  // the scalars differ
      }
      const int64_t out = j.weight.out_features;
      std::vector<float> bias;
      if (g == 0) {
        bias.resize(static_cast<size_t>(out));
        for (float& b : bias) b = 0.1f * normal(rng);
      }
      const kcu::DeviceBuffer dbias = to_device(bias);
      const float* db = bias.empty() ? nullptr : dbias.as<float>();
      kcu::DeviceBuffer dy(static_cast<size_t>(kMaxRows * out) * sizeof(float));
      linear.reserve(kMaxRows, kIn, out);
      kcu::Fp8Linear fp8(linear, stream);
      fp8.reserve(out, out * kIn, mode == Fp8ScaleMode::kBlock128);
      std::vector<double> ref, mag;
      const auto check = [&](const std::string& what, int64_t rows, double tolerance) {
        std::vector<float> y(static_cast<size_t>(rows * out));
        CUDA_CHECK(cudaStreamSynchronize(stream));
        kcu::copy_to_host(y.data(), dy.data(), y.size() * sizeof(float));
        reference(mode, parts, x, rows, bias, ref, mag);
        const double e = worst(y, ref, mag);
        EXPECT_LE(e, tolerance) << what << " at " << rows << " rows, group " << g;
        std::printf("%s %s group %zu [%lld x %lld] %s at %lld rows: %.3g of tolerance %.3g\n", GetParam().label,
                    kcu::Fp8LinearShape{out, kIn, j.weight.mode}.to_string().c_str(), g,
                    static_cast<long long>(out), static_cast<long long>(kIn), what.c_str(),
                    static_cast<long long>(rows), e, tolerance);
      };
      for (int64_t rows : {1, 3, 4, 8, 17, 32, 40, 64}) {  // streaming up to 32, then fp8_linear_'s W8A16
        fp8.forward(j.weight, linear.prepare(dx.as<float>(), rows, kIn, DType::kBF16), dy.as<float>(), db);
        check(rows <= kcu::kFp8StreamMaxRows ? "stream" : "w8a16", rows, kcu::kW8a16Tolerance);
      }
      for (const char* name : {"cublaslt_fp8", "cublaslt_fp8_fast_accum"}) {
        const kcu::Fp8PrefillDescriptor& d = kcu::fp8_prefill_kernel(name);
        const auto reasons = d.unsupported_reasons(device.cc_major, device.cc_minor, {out, kIn, j.weight.mode});
        if (!reasons.empty()) {
          std::printf("%s: %s\n", name, reasons.front().c_str());
          continue;
        }
        auto product = d.factory(linear, stream);
        product->reserve(kMaxRows, kIn, out, out * kIn, mode == Fp8ScaleMode::kBlock128);
        for (int64_t rows : {40, 64}) {
          if (const std::string why = product->why_unsupported(j.weight, rows); !why.empty()) {
            std::printf("%s at %lld rows: %s\n", name, static_cast<long long>(rows), why.c_str());
            continue;
          }
          product->forward(j.weight, dx.as<float>(), rows, dy.as<float>(), db);
          check(name, rows, kcu::fp8_prefill_tolerance(d, kIn));
        }
      }
    }
  }
  CUDA_CHECK(cudaStreamDestroy(stream));
}

INSTANTIATE_TEST_SUITE_P(Modes, CudaFp8Join,
                         ::testing::Values(Case{Fp8ScaleMode::kPerTensor, "per_tensor"},
                                           Case{Fp8ScaleMode::kPerChannel, "per_channel"},
                                           Case{Fp8ScaleMode::kBlock128, "block128"}),
                         [](const auto& info) { return std::string(info.param.label); });

}  // namespace
}  // namespace spindle
