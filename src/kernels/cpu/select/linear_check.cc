#include "kernels/cpu/select/linear_check.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <limits>
#include <random>

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
  return {{"shape", r.shape},       {"passed", r.passed},   {"max_error", r.max_error},
          {"tolerance", r.tolerance}, {"seconds", seconds}, {"error", r.error}};
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

// Random weights of one shape in its dtype (bf16 bits or f32), and a bias.
struct RandomWeight {
  std::vector<uint16_t> w16;
  std::vector<float> w32, bias;
  LinearWeight weight;
  double at(int64_t index) const {
    return weight.dtype == DType::kF32 ? double{w32[index]} : double{bf16_bits_to_float(w16[index])};
  }
};

RandomWeight make_weight(const LinearShape& s, std::mt19937& rng) {
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  RandomWeight r;
  const int64_t n = s.out_features * s.in_features;
  if (s.dtype == DType::kF32) {
    r.w32.resize(size_t(n));
    for (auto& v : r.w32) v = uni(rng);
  } else {
    r.w16.resize(size_t(n));
    for (auto& v : r.w16) v = float_to_bf16_bits(uni(rng));
  }
  r.bias.resize(size_t(s.out_features));
  for (auto& v : r.bias) v = uni(rng);
  r.weight = {s.dtype == DType::kF32 ? static_cast<const void*>(r.w32.data()) : r.w16.data(), s.dtype, s.out_features,
              s.in_features};
  return r;
}

// max |y - ref| / S over the checked columns of every row (see the header).
double max_error(const RandomWeight& w, const std::vector<float>& x_ref, int64_t m, const std::vector<float>& y) {
  const int64_t n = w.weight.out_features, k = w.weight.in_features;
  const int64_t stride = std::max<int64_t>(1, n * k * m / kCheckFullMacs);
  double worst = 0;
  for (int64_t j = 0; j < n; ++j) {
    if (j % stride != 0 && j < n - 64) continue;
    for (int64_t i = 0; i < m; ++i) {
      double acc = w.bias[j], mag = std::fabs(double{w.bias[j]});
      for (int64_t t = 0; t < k; ++t) {
        const double term = double{x_ref[i * k + t]} * w.at(j * k + t);
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

double check_shape(LinearKernel& kernel, const RandomWeight& w, bool rounds_x, std::mt19937& rng) {
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  double worst = 0;
  for (const int64_t m : kCheckRows) {
    std::vector<float> x(size_t(m * w.weight.in_features));
    for (auto& v : x) v = uni(rng);
    std::vector<float> x_ref = x;
    if (rounds_x) {
      for (auto& v : x_ref) v = bf16_bits_to_float(float_to_bf16_bits(v));
    }
    std::vector<float> y(size_t(m * w.weight.out_features), std::numeric_limits<float>::quiet_NaN());
    kernel.forward(x.data(), m, y.data(), &ThreadPool::global(), w.bias.data());
    worst = std::max(worst, max_error(w, x_ref, m, y));
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
  if (rows <= kLinearDecodeMaxRows || part >= out) return time_rows(kernel, w.weight, w.bias.data(), rows);
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
    report.max_error = check_shape(*kernel, w, d.rounds_activations_to_bf16, rng);
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
