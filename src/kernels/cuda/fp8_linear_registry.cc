#include "kernels/cuda/fp8_linear_registry.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "kernels/cuda/cublas_api.h"
#include "kernels/cuda/cublaslt_api.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/fp8_lt_linear.h"
#include "util/error.h"
#include "util/fp8.h"

namespace spindle::kernels::cuda {
namespace {

class W8a16Product final : public Fp8PrefillProduct {
 public:
  W8a16Product(CublasLinear& linear, cudaStream_t stream) : linear_(linear), fp8_(linear, stream) {}
  void reserve(int64_t max_rows, int64_t max_in, int64_t max_out, int64_t max_elements, bool has_block) override {
    linear_.reserve(max_rows, max_in, max_out);
    fp8_.reserve(max_out, max_elements, has_block);
  }
  void forward(const DeviceFp8Weight& w, const float* x, int64_t rows, float* y, const float* bias) override {
    fp8_.forward(w, linear_.prepare(x, rows, w.in_features, DType::kBF16), y, bias);
  }
  uint64_t workspace_bytes() const override { return fp8_.workspace_bytes(); }

 private:
  CublasLinear& linear_;
  Fp8Linear fp8_;
};

class LtProduct final : public Fp8PrefillProduct {
 public:
  LtProduct(cudaStream_t stream, bool fast_accum) : lt_(stream, fast_accum) {}
  void reserve(int64_t max_rows, int64_t max_in, int64_t max_out, int64_t, bool) override {
    lt_.reserve(max_rows, max_in, max_out);
  }
  void forward(const DeviceFp8Weight& w, const float* x, int64_t rows, float* y, const float* bias) override {
    lt_.forward(w, x, rows, y, bias);
  }
  uint64_t workspace_bytes() const override { return lt_.workspace_bytes(); }
  std::string why_unsupported(const DeviceFp8Weight& w, int64_t rows) override {
    return lt_.why_unsupported(w.mode, w.out_features, w.in_features, rows);
  }

 private:
  Fp8LtLinear lt_;
};

const char* mode_label(Fp8Scale mode) {
  switch (mode) {
    case Fp8Scale::kPerTensor: return "tensor";
    case Fp8Scale::kPerChannel: return "channel";
    case Fp8Scale::kBlock128: return "block128";
  }
  return "?";
}

std::vector<Fp8PrefillDescriptor> make_registry() {
  std::vector<Fp8PrefillDescriptor> r;
  r.push_back({"fp8_w8a16", "FP8 weights converted to bf16 exactly, split bf16 activations, cuBLAS (W8A16)",
               kW8a16Tolerance, 0, [](int, int, const Fp8LinearShape&) { return std::vector<std::string>{}; },
               [](CublasLinear& linear, cudaStream_t stream) -> std::unique_ptr<Fp8PrefillProduct> {
                 return std::make_unique<W8a16Product>(linear, stream);
               }});
  const auto lt_reasons = [](int major, int minor, const Fp8LinearShape& s) {
    return fp8_lt_unsupported_reasons(major, minor, s.mode, s.out_features, s.in_features);
  };
  r.push_back({"cublaslt_fp8", "cuBLASLt FP8 tensor cores, activations quantized per token (W8A8)",
               0x1p-4 + 0x1p-10 + 0x1p-9, 2, lt_reasons,
               [](CublasLinear&, cudaStream_t stream) -> std::unique_ptr<Fp8PrefillProduct> {
                 return std::make_unique<LtProduct>(stream, false);
               }});
  r.push_back({"cublaslt_fp8_fast_accum", "cublaslt_fp8 with cuBLASLt's fast accumulation (W8A8)",
               0x1p-4 + 2.0 * (4096 / 32) * 0x1p-13 + 0x1p-9, 1, lt_reasons,
               [](CublasLinear&, cudaStream_t stream) -> std::unique_ptr<Fp8PrefillProduct> {
                 return std::make_unique<LtProduct>(stream, true);
               }});
  return r;
}

struct Problem {
  std::vector<uint8_t> w;
  std::vector<float> scale, x, bias;
};

Problem make_problem(const Fp8LinearShape& s, int64_t rows) {
  std::mt19937_64 rng(7 + s.out_features * 31 + s.in_features);
  Problem p;
  std::uniform_int_distribution<int> code(0, 255);
  p.w.resize(static_cast<size_t>(s.out_features * s.in_features));
  for (auto& c : p.w) {
    int v = code(rng);
    while ((v & 0x7F) == 0x7F) v = code(rng);  // NaN codes are not weights
    c = static_cast<uint8_t>(v);
  }
  std::uniform_real_distribution<float> scale(1e-3f, 4e-3f);
  p.scale.resize(static_cast<size_t>(fp8_scale_count(s.mode, s.out_features, s.in_features)));
  for (float& v : p.scale) v = scale(rng);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> magnitude(-4, 4);
  p.x.resize(static_cast<size_t>(rows * s.in_features));
  for (int64_t r = 0; r < rows; ++r) {
    const float m = std::ldexp(1.0f, magnitude(rng));
    for (int64_t i = 0; i < s.in_features; ++i) p.x[static_cast<size_t>(r * s.in_features + i)] = m * normal(rng);
  }
  p.bias.resize(static_cast<size_t>(s.out_features));
  for (float& v : p.bias) v = 0.1f * normal(rng);
  return p;
}

double weight_scale(const Fp8LinearShape& s, const std::vector<float>& scale, int64_t o, int64_t i) {
  switch (s.mode) {
    case Fp8Scale::kPerTensor: return scale[0];
    case Fp8Scale::kPerChannel: return scale[static_cast<size_t>(o)];
    case Fp8Scale::kBlock128:
      return scale[static_cast<size_t>((o / kFp8ScaleBlock) * ((s.in_features + kFp8ScaleBlock - 1) / kFp8ScaleBlock) +
                                       i / kFp8ScaleBlock)];
  }
  return 0;
}

template <typename T>
DeviceBuffer upload(const std::vector<T>& host) {
  DeviceBuffer b(std::max<size_t>(host.size(), 1) * sizeof(T));
  copy_to_device(b.data(), host.data(), host.size() * sizeof(T));
  return b;
}

struct StreamAndEvents {
  cudaStream_t stream = nullptr;
  cudaEvent_t a = nullptr, b = nullptr;
  StreamAndEvents() = default;
  StreamAndEvents(const StreamAndEvents&) = delete;
  StreamAndEvents& operator=(const StreamAndEvents&) = delete;
  ~StreamAndEvents() {
    if (a != nullptr) cudaEventDestroy(a);
    if (b != nullptr) cudaEventDestroy(b);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

// max over every row and a strided sample of columns (and the last) of |y - ref| / S (module comment).
double max_relative_error(const Fp8LinearShape& s, const Problem& p, int64_t rows, const std::vector<float>& got) {
  double worst = 0;
  const int64_t stride = std::max<int64_t>(1, s.out_features / 48);
  std::vector<int64_t> columns;
  for (int64_t o = 0; o < s.out_features; o += stride) columns.push_back(o);
  if (columns.back() != s.out_features - 1) columns.push_back(s.out_features - 1);
  std::vector<double> wd(static_cast<size_t>(s.in_features));
  for (const int64_t o : columns) {
    for (int64_t i = 0; i < s.in_features; ++i) {
      wd[static_cast<size_t>(i)] = double(fp8_e4m3_to_float(p.w[static_cast<size_t>(o * s.in_features + i)])) *
                                   weight_scale(s, p.scale, o, i);
    }
    for (int64_t r = 0; r < rows; ++r) {
      double ref = p.bias[static_cast<size_t>(o)], mag = std::fabs(ref);
      const float* xr = p.x.data() + r * s.in_features;
      for (int64_t i = 0; i < s.in_features; ++i) {
        ref += double(xr[i]) * wd[static_cast<size_t>(i)];
        mag += std::fabs(double(xr[i]) * wd[static_cast<size_t>(i)]);
      }
      const double err = std::fabs(double(got[static_cast<size_t>(r * s.out_features + o)]) - ref) / mag;
      worst = std::max(worst, std::isnan(err) ? INFINITY : err);
    }
  }
  return worst;
}

// The median seconds of `run` over reps timed repetitions after two warm-ups, on o.stream.
template <typename Run>
double median_seconds(StreamAndEvents& o, int reps, Run run) {
  CUDA_CHECK(cudaEventCreate(&o.a));
  CUDA_CHECK(cudaEventCreate(&o.b));
  std::vector<double> t;
  for (int i = 0; i < reps + 2; ++i) {
    CUDA_CHECK(cudaEventRecord(o.a, o.stream));
    run();
    CUDA_CHECK(cudaEventRecord(o.b, o.stream));
    CUDA_CHECK(cudaEventSynchronize(o.b));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, o.a, o.b));
    if (i >= 2) t.push_back(ms * 1e-3);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void run_check(const Fp8PrefillDescriptor& d, Fp8PrefillCheck& c, int64_t rows, int reps) {
  const Fp8LinearShape& s = c.shape;
  const Problem p = make_problem(s, rows);
  DeviceBuffer w = upload(p.w), scale = upload(p.scale), x = upload(p.x), bias = upload(p.bias);
  DeviceBuffer y(static_cast<size_t>(rows * s.out_features) * sizeof(float));
  StreamAndEvents owned;  // destroyed after everything below that uses them
  CUDA_CHECK(cudaStreamCreate(&owned.stream));
  cudaStream_t stream = owned.stream;
  {
    CublasLinear linear(stream);
    auto product = d.factory(linear, stream);
    product->reserve(rows, s.in_features, s.out_features, s.out_features * s.in_features,
                     s.mode == Fp8Scale::kBlock128);
    const DeviceFp8Weight dw{w.as<uint8_t>(), scale.as<float>(), s.mode, s.out_features, s.in_features};
    if (std::string why = product->why_unsupported(dw, rows); !why.empty()) {
      c.unsupported_reasons.push_back(std::move(why));
      return;
    }
    product->forward(dw, x.as<float>(), rows, y.as<float>(), bias.as<float>());
    CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<float> got(static_cast<size_t>(rows * s.out_features));
    copy_to_host(got.data(), y.data(), got.size() * sizeof(float));
    c.max_error = max_relative_error(s, p, rows, got);
    c.passed = c.max_error <= c.tolerance;
    if (reps > 0 && c.passed) {
      c.seconds = median_seconds(owned, reps, [&] { product->forward(dw, x.as<float>(), rows, y.as<float>(), bias.as<float>()); });
    }
  }
}

}  // namespace

std::string Fp8LinearShape::to_string() const {
  return fmt::format("{}x{}:{}", out_features, in_features, mode_label(mode));
}

const std::vector<Fp8PrefillDescriptor>& fp8_prefill_kernels() {
  static const std::vector<Fp8PrefillDescriptor> registry = make_registry();
  return registry;
}

const Fp8PrefillDescriptor& fp8_prefill_kernel(std::string_view name) {
  std::string names;
  for (const auto& d : fp8_prefill_kernels()) {
    if (d.name == name) return d;
    names += (names.empty() ? "" : ", ") + d.name;
  }
  SPINDLE_FAIL("unknown FP8 prefill kernel '{}' (registered: {})", name, names);
}

double fp8_prefill_tolerance(const Fp8PrefillDescriptor& d, int64_t in_features) {
  if (d.name == "cublaslt_fp8_fast_accum") return 0x1p-4 + 2.0 * double((in_features + 31) / 32) * 0x1p-13 + 0x1p-9;
  return d.tolerance;
}

Fp8PrefillCheck check_fp8_prefill_kernel(std::string_view kernel, const Fp8LinearShape& shape, int64_t rows,
                                         int timing_reps, int cc_major, int cc_minor) {
  const Fp8PrefillDescriptor& d = fp8_prefill_kernel(kernel);
  Fp8PrefillCheck c;
  c.kernel = d.name;
  c.shape = shape;
  c.tolerance = fp8_prefill_tolerance(d, shape.in_features);
  c.unsupported_reasons = d.unsupported_reasons(cc_major, cc_minor, shape);
  if (!c.unsupported_reasons.empty()) return c;
  try {
    SPINDLE_CHECK(rows > 0 && shape.out_features > 0 && shape.in_features > 0, "FP8 check: empty shape {} x {} rows",
                  shape.to_string(), rows);
    run_check(d, c, rows, timing_reps);
  } catch (const std::exception& e) {
    c.passed = false;
    c.error = e.what();
  }
  return c;
}

std::vector<Fp8PrefillChoice> choose_fp8_prefill_kernels(const std::vector<Fp8LinearShape>& shapes, int64_t rows,
                                                         int timing_reps, int cc_major, int cc_minor,
                                                         std::vector<Fp8PrefillCheck>* checks) {
  return choose_fp8_prefill_kernels(shapes, direct_fp8_prefill_checker(rows, timing_reps, cc_major, cc_minor), checks);
}

std::vector<Fp8PrefillChoice> choose_fp8_prefill_kernels(const std::vector<Fp8LinearShape>& shapes,
                                                         const Fp8PrefillChecker& check,
                                                         std::vector<Fp8PrefillCheck>* checks) {
  std::vector<Fp8PrefillChoice> out;
  for (const Fp8LinearShape& s : shapes) {
    const Fp8PrefillDescriptor* best = nullptr;
    double best_seconds = 0;
    for (const auto& d : fp8_prefill_kernels()) {
      Fp8PrefillCheck c = check(d.name, s);
      if (c.passed && c.seconds > 0) {
        const bool tie = best != nullptr && std::fabs(c.seconds - best_seconds) <= 0.03 * best_seconds;
        if (best == nullptr || (tie ? d.priority > best->priority : c.seconds < best_seconds)) {
          best = &d;
          best_seconds = c.seconds;
        }
      }
      if (checks != nullptr) checks->push_back(std::move(c));
    }
    out.push_back({s, best != nullptr ? best->name : std::string(kFp8PrefillDefault)});
  }
  return out;
}

Fp8PrefillChecker direct_fp8_prefill_checker(int64_t rows, int timing_reps, int cc_major, int cc_minor) {
  return [=](std::string_view kernel, const Fp8LinearShape& shape) {
    return check_fp8_prefill_kernel(kernel, shape, rows, std::max(timing_reps, 1), cc_major, cc_minor);
  };
}

Fp8PrefillChecker cached_fp8_prefill_checker(Fp8PrefillCache& cache, Fp8PrefillChecker inner) {
  // The cache speaks in names and shape strings: each call's shape is passed to `inner` as it is.
  return [&cache, inner = std::move(inner)](std::string_view kernel, const Fp8LinearShape& shape) {
    // The cache keeps the outcome part of each check; the names come back from this call.
    const kernels::Fp8PrefillCheckFn through_cache =
        cache.wrap([&](const std::string& k, const std::string&) -> kernels::Fp8PrefillOutcome { return inner(k, shape); });
    return Fp8PrefillCheck{through_cache(std::string(kernel), shape.to_string()), std::string(kernel), shape};
  };
}

std::string fp8_prefill_library_versions() {
  std::string why_not;
  const CublasLtApi* lt = try_cublaslt_api(&why_not);
  std::string cublas;
  try {
    cublas = cublas_api().path;
  } catch (const std::exception& e) {
    cublas = fmt::format("none ({})", e.what());
  }
  int runtime = 0, driver = 0;
  if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) runtime = -1;
  if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = -1;
  return fmt::format("cublaslt={};cublas={};cudart={};driver={}",
                     lt != nullptr ? fmt::format("{} ({})", lt->version, lt->path) : "none (" + why_not + ")", cublas,
                     runtime, driver);
}

}  // namespace spindle::kernels::cuda
