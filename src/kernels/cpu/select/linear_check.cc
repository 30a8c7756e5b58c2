#include "kernels/cpu/select/linear_check.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <limits>
#include <cstring>
#include <random>
#include <span>

#include "gguf/dequantize.h"
#include "util/error.h"
#include "util/half.h"
#include "util/thread_pool.h"

namespace spindle::kernels::cpu {

double LinearShapeReport::seconds_at(int64_t rows) const {
  for (const auto& [r, s] : seconds) {
    if (r == rows) return s;
  }
  return 0;
}

nlohmann::json to_json(const LinearShapeReport& r) {
  nlohmann::json seconds = nlohmann::json::array();
  for (const auto& [rows, s] : r.seconds) seconds.push_back({rows, s});
  return {{"shape", r.shape},         {"passed", r.passed},   {"max_error", r.max_error},
          {"tolerance", r.tolerance},   {"seconds", seconds}, {"error", r.error},
          {"end_to_end_error", r.end_to_end_error}};
}

LinearShapeReport linear_shape_report_from_json(const nlohmann::json& j) {
  LinearShapeReport r;
  r.shape = j.at("shape").get<std::string>();
  r.passed = j.at("passed").get<bool>();
  // JSON has no infinity: nlohmann writes it as null, read back as infinity (fails any tolerance).
  r.max_error = j.at("max_error").is_null() ? std::numeric_limits<double>::infinity() : j.at("max_error").get<double>();
  r.tolerance = j.at("tolerance").get<double>();
  for (const auto& p : j.at("seconds")) r.seconds.emplace_back(p.at(0).get<int64_t>(), p.at(1).get<double>());
  r.error = j.at("error").get<std::string>();
  r.end_to_end_error = j.value("end_to_end_error", 0.0);
  return r;
}

nlohmann::json to_json(const LinearCheckReport& r) {
  nlohmann::json shapes = nlohmann::json::array();
  for (const auto& s : r.shapes) shapes.push_back(to_json(s));
  return {{"kernel", r.kernel}, {"shapes", shapes}};
}

LinearCheckReport linear_check_report_from_json(const nlohmann::json& j) {
  LinearCheckReport r;
  r.kernel = j.at("kernel").get<std::string>();
  for (const auto& s : j.at("shapes")) r.shapes.push_back(linear_shape_report_from_json(s));
  return r;
}

namespace {

gguf::GgmlType ggml_type_of(QuantType type) {
  switch (type) {
    case QuantType::kQ8_0: return gguf::GgmlType::kQ8_0;
    case QuantType::kQ4_0: return gguf::GgmlType::kQ4_0;
    case QuantType::kQ5_0: return gguf::GgmlType::kQ5_0;
    case QuantType::kQ5_1: return gguf::GgmlType::kQ5_1;
    case QuantType::kQ4_K: return gguf::GgmlType::kQ4_K;
    case QuantType::kQ5_K: return gguf::GgmlType::kQ5_K;
    case QuantType::kQ6_K: return gguf::GgmlType::kQ6_K;
    default: break;
  }
  SPINDLE_FAIL("linear check: no GGUF type for {}", quant_type_name(type));
}

// Byte offsets of the fp16 scales (d, and dmin / m) in one GGUF block of the type (ggml_blocks.h).
std::vector<int64_t> fp16_offsets(QuantType type) {
  switch (type) {
    case QuantType::kQ8_0:
    case QuantType::kQ4_0:
    case QuantType::kQ5_0: return {0};
    case QuantType::kQ5_1:
    case QuantType::kQ4_K:
    case QuantType::kQ5_K: return {0, 2};
    case QuantType::kQ6_K: return {208};
    default: break;
  }
  SPINDLE_FAIL("linear check: no random block recipe for {}", quant_type_name(type));
}

// Random weights of one shape: plain (bf16 bits or f32 uniform in [-1, 1]) or GGUF blocks of
// random bytes with fp16 scales in [2^-7, 2^-1) (repacked as the loader repacks), and a bias.
struct RandomWeight {
  std::vector<uint16_t> w16;
  std::vector<float> w32, bias;
  std::vector<uint8_t> file;  // quantized: the GGUF rows
  PackedQuantWeight packed;
  LinearWeight weight;

  // Row j of W as doubles (quantized: dequantized by gguf::dequantize_row, the format's definition,
  // each element exact or rounded once to f32).
  std::vector<double> row(int64_t j) const {
    const int64_t k = weight.in_features;
    std::vector<double> out(static_cast<size_t>(k));
    if (weight.quantized()) {
      const int64_t row_bytes = k / quant_file_block_elements(packed.type) * quant_file_block_bytes(packed.type);
      std::vector<float> f(static_cast<size_t>(k));
      gguf::dequantize_row(ggml_type_of(packed.type),
                           std::as_bytes(std::span(file.data() + j * row_bytes, size_t(row_bytes))), f);
      for (int64_t t = 0; t < k; ++t) out[t] = f[t];
    } else if (weight.dtype == DType::kF32) {
      for (int64_t t = 0; t < k; ++t) out[t] = w32[j * k + t];
    } else {
      for (int64_t t = 0; t < k; ++t) out[t] = bf16_bits_to_float(w16[j * k + t]);
    }
    return out;
  }
};

void fill_quantized(const LinearShape& s, std::mt19937& rng, RandomWeight& r) {
  const QuantType type = *s.quant;
  const int64_t block = quant_file_block_bytes(type), per_row = s.in_features / quant_file_block_elements(type);
  SPINDLE_CHECK(s.in_features % quant_file_block_elements(type) == 0, "linear check: {} rows of {} are not whole blocks",
                quant_type_name(type), s.in_features);
  r.file.resize(size_t(s.out_features * per_row * block));
  for (auto& b : r.file) b = static_cast<uint8_t>(rng());
  const auto offsets = fp16_offsets(type);
  for (size_t b0 = 0; b0 < r.file.size(); b0 += size_t(block)) {
    for (int64_t o : offsets) {
      const uint16_t bits = float_to_fp16_bits(std::ldexp(1.0f + float(rng() % 1024) / 1024, -7 + int(rng() % 6)));
      std::memcpy(&r.file[b0 + size_t(o)], &bits, 2);
    }
  }
  r.packed = repack_quant_weight(type, r.file.data(), int64_t(r.file.size()), s.out_features, s.in_features);
  r.weight = LinearWeight::from_quant(r.packed);
}

RandomWeight make_weight(const LinearShape& s, std::mt19937& rng) {
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  RandomWeight r;
  const int64_t n = s.out_features * s.in_features;
  if (s.quant) {
    fill_quantized(s, rng, r);
  } else if (s.dtype == DType::kF32) {
    r.w32.resize(size_t(n));
    for (auto& v : r.w32) v = uni(rng);
  } else {
    r.w16.resize(size_t(n));
    for (auto& v : r.w16) v = float_to_bf16_bits(uni(rng));
  }
  r.bias.resize(size_t(s.out_features));
  for (auto& v : r.bias) v = uni(rng);
  if (!s.quant) {
    r.weight = {s.dtype == DType::kF32 ? static_cast<const void*>(r.w32.data()) : r.w16.data(), s.dtype,
                s.out_features, s.in_features};
  }
  return r;
}

// max |y - ref| / S over the checked columns of every row (see the header).
double max_error(const RandomWeight& w, const std::vector<float>& x_ref, int64_t m, const std::vector<float>& y) {
  const int64_t n = w.weight.out_features, k = w.weight.in_features;
  const int64_t stride = std::max<int64_t>(1, n * k * m / kCheckFullMacs);
  double worst = 0;
  for (int64_t j = 0; j < n; ++j) {
    if (j % stride != 0 && j < n - 64) continue;
    const std::vector<double> wr = w.row(j);
    for (int64_t i = 0; i < m; ++i) {
      double acc = w.bias[j], mag = std::fabs(double{w.bias[j]});
      for (int64_t t = 0; t < k; ++t) {
        const double term = double{x_ref[i * k + t]} * wr[t];
        acc += term;
        mag += std::fabs(term);
      }
      const float got = y[i * n + j];
      if (!std::isfinite(got)) return std::numeric_limits<double>::infinity();
      worst = std::max(worst, std::fabs(double{got} - acc) / (mag + 1e-30));
    }
  }
  return worst;
}

// The activations the kernel multiplies: x itself, x rounded to bf16, or x quantized per block of
// 32 exactly as quantize_activations rounds it (q * dx).
std::vector<float> reference_activations(const std::vector<float>& x, int64_t m, int64_t k, bool rounds_x, bool quantized) {
  std::vector<float> r = x;
  if (quantized) {
    QuantizedActivations qa;
    quantize_activations(x.data(), m, k, qa);
    for (int64_t e = 0; e < m * k; ++e) r[e] = qa.scale[size_t(e / kQuantBlock)] * float(qa.q[size_t(e)]);
  } else if (rounds_x) {
    for (auto& v : r) v = bf16_bits_to_float(float_to_bf16_bits(v));
  }
  return r;
}

// Max error ratio of the kernel over kCheckRows rows; `end_to_end`: the int8 kernels' ratio against
// the unquantized activations.
double check_shape(LinearKernel& kernel, const RandomWeight& w, bool rounds_x, std::mt19937& rng, double& end_to_end) {
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  double worst = 0;
  for (const int64_t m : kCheckRows) {
    std::vector<float> x(size_t(m * w.weight.in_features));
    for (auto& v : x) v = uni(rng);
    const bool quantized = w.weight.quantized();
    const std::vector<float> x_ref = reference_activations(x, m, w.weight.in_features, rounds_x, quantized);
    std::vector<float> y(size_t(m * w.weight.out_features), std::numeric_limits<float>::quiet_NaN());
    kernel.forward(x.data(), m, y.data(), &ThreadPool::global(), w.bias.data());
    worst = std::max(worst, max_error(w, x_ref, m, y));
    if (quantized) end_to_end = std::max(end_to_end, max_error(w, x, m, y));
  }
  return worst;
}

// Seconds per forward of `rows` rows: one untimed warm-up (first touches of x and y), then the best
// of at least two runs and of repeats for ~30 ms (one run when a run takes more than a second).
double time_rows(LinearKernel& kernel, const LinearWeight& w, const float* bias, int64_t rows) {
  using Clock = std::chrono::steady_clock;
  std::vector<float> x(size_t(rows * w.in_features), 0.25f), y(size_t(rows * w.out_features));
  auto once = [&] {
    const auto t0 = Clock::now();
    kernel.forward(x.data(), rows, y.data(), &ThreadPool::global(), bias);
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  once();
  double best = once();
  if (best > 1.0) return best;
  double spent = best;
  for (int i = 0; i < 30 && (i == 0 || spent < 0.03); ++i) {
    const double t = once();
    best = std::min(best, t);
    spent += t;
  }
  return best;
}

// Prefill rows (more than kLinearDecodeMaxRows) of a product past kTimedMacs multiply-adds are
// timed on the weight's leading output rows (a row-major prefix of it, a multiple of 64 rows) and
// scaled by out / rows timed: there the product is bound by arithmetic, the same per output row.
// Decode rows are timed whole (they are bound by reading W, which a prefix would find in cache).
constexpr int64_t kTimedMacs = int64_t{1} << 32;

double time_shape_rows(const LinearCheckRequest& request, const RandomWeight& w, LinearKernel& kernel, int64_t rows) {
  const int64_t out = w.weight.out_features, in = w.weight.in_features;
  const int64_t part = std::max<int64_t>(64, kTimedMacs / (in * rows) / 64 * 64);
  if (rows <= kLinearDecodeMaxRows || part >= out || w.weight.quantized()) {
    return time_rows(kernel, w.weight, w.bias.data(), rows);
  }
  LinearWeight leading = w.weight;
  leading.out_features = part;
  LinearOptions options;
  options.allow_bf16_activations = request.allow_bf16_activations;
  auto partial = create_linear_kernel(request.kernel, leading, options);
  return time_rows(*partial, leading, w.bias.data(), rows) * double(out) / double(part);
}

LinearShapeReport check_one_shape(const LinearCheckRequest& request, const LinearShape& shape, std::mt19937& rng) {
  LinearShapeReport report;
  report.shape = shape.to_string();
  try {
    const LinearKernelDescriptor& d = linear_registry().get(request.kernel);
    const RandomWeight w = make_weight(shape, rng);
    LinearOptions options;
    options.allow_bf16_activations = request.allow_bf16_activations;
    auto kernel = create_linear_kernel(request.kernel, w.weight, options);
    if (shape.quant) report.tolerance = quant_check_tolerance(shape.in_features);
    report.max_error = check_shape(*kernel, w, d.rounds_activations_to_bf16, rng, report.end_to_end_error);
    report.passed = report.max_error <= report.tolerance;
    if (report.passed) {
      for (const int64_t rows : request.timing_rows) {
        report.seconds.emplace_back(rows, time_shape_rows(request, w, *kernel, rows));
      }
    }
  } catch (const std::exception& e) {
    report.passed = false;
    report.error = e.what();
  }
  return report;
}

}  // namespace

LinearCheckReport run_linear_check(const LinearCheckRequest& request) {
  LinearCheckReport report;
  report.kernel = request.kernel;
  std::mt19937 rng(2026);
  for (const LinearShape& shape : request.shapes) report.shapes.push_back(check_one_shape(request, shape, rng));
  return report;
}

int check_linear_child_main(const LinearCheckRequest& request) {
  const LinearCheckReport report = run_linear_check(request);
  std::cout << to_json(report).dump() << std::endl;
  int code = 0;
  for (const auto& s : report.shapes) {
    if (!s.error.empty()) return 2;
    if (!s.passed) code = 1;
  }
  return code;
}

}  // namespace spindle::kernels::cpu
