// Small-batch bf16 products on the GPU: launch_gemv16 (up to 8 rows; with 1, 2 and 4 output rows
// per warp, and the default it picks for the row count) against cuBLAS (CublasLinear's rounding
// mode, the path the server takes without it) on the projection shapes of a model, at 1-5, 8 and 16 rows, as ratios to the device copy
// bandwidth measured in the same run. Every timed product starts with L2 cold (a 256 MiB buffer is rewritten before it,
// untimed), as in a decode step where the other layers' weights have evicted this one. Median of --reps. The two
// results are compared with cuBLAS's (max |difference| / max |value|) so a fast wrong kernel shows.
//
// usage: bench_gemv16 [--hidden 4096] [--intermediate 14336] [--heads 32] [--kv-heads 8]
//                     [--head-dim 128] [--vocab 128256] [--reps 20]     (defaults: Llama-3.1-8B)
// Prints one JSON object per (shape, rows) and a markdown table.
#include "kernels/cuda/gemv16.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "bench_cli.h"
#include "cuda_bench_util.h"
#include "kernels/cuda/cublas_linear.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"
#include "util/error.h"
#include "util/half.h"

using namespace spindle;
using spindle::bench::copy_bandwidth;
using spindle::bench::timed;
namespace kcu = spindle::kernels::cuda;

int main(int argc, char** argv) try {
  bench::LayerDims dims;
  int64_t vocab = 128256;
  int reps = 20;
  CLI::App app{"Small-batch bf16 products: gemv16 against cuBLAS on a model's projection shapes", "bench_gemv16"};
  bench::add_layer_dim_options(app, dims, 8);
  app.add_option("--vocab", vocab, "Vocabulary size (128256)")->check(CLI::Range(int64_t{8}, int64_t{1} << 24));
  app.add_option("--reps", reps, "Timed repetitions, median reported (20)")->check(CLI::Range(1, 100000));
  bench::parse_or_exit(app, argc, argv);
  std::vector<bench::ProjectionShape> shapes = bench::layer_projections(dims);
  shapes.push_back({"lm_head", vocab, dims.hidden});
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  const double bandwidth = copy_bandwidth(stream);
  kcu::DeviceBuffer flush(size_t{256} << 20);
  kcu::CublasLinear cublas(stream, /*allow_16bit_activations=*/true, /*small_batch_kernel=*/false);  // cuBLAS alone
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::printf("{\"copy_bandwidth_bytes_s\": %.4g}\n", bandwidth);
  std::string table =
      "| shape | out x in | rows | cuBLAS us (% bw) | gemv16 1 / 2 / 4 outputs per warp us (% bw) | default | "
      "best gemv16 / cuBLAS time | max rel diff (gemv16) |\n"
      "|---|---|---|---|---|---|---|---|\n";
  // max |a - b| / max |a|
  const auto rel_diff = [](const std::vector<float>& a, const std::vector<float>& b) {
    double max_abs = 0, max_diff = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      max_abs = std::max(max_abs, std::fabs(static_cast<double>(a[i])));
      max_diff = std::max(max_diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    }
    return max_diff / max_abs;
  };
  const int outs_per_warp[3] = {1, 2, 4};
  for (const bench::ProjectionShape& s : shapes) {
    std::vector<uint16_t> host(static_cast<size_t>(s.out * s.in));
    for (auto& h : host) h = float_to_bf16_bits(normal(rng));
    kcu::DeviceBuffer w(host.size() * sizeof(uint16_t));
    kcu::copy_to_device(w.data(), host.data(), host.size() * sizeof(uint16_t));
    const kcu::DeviceWeight weight{w.data(), DType::kBF16, s.out, s.in};
    const double bytes = static_cast<double>(host.size()) * 2;
    const auto pct = [&](double t) { return t > 0 ? bytes / t / bandwidth * 100 : 0.0; };
    for (const int64_t rows : {1, 2, 3, 4, 5, 6, 8, 16}) {
      std::vector<float> x(static_cast<size_t>(rows * s.in));
      for (auto& v : x) v = normal(rng) * 50;
      const size_t y_bytes = static_cast<size_t>(rows * s.out) * sizeof(float);
      kcu::DeviceBuffer dx(x.size() * sizeof(float)), y1(y_bytes), y2(y_bytes);
      kcu::copy_to_device(dx.data(), x.data(), x.size() * sizeof(float));
      cublas.reserve(rows, s.in, s.out);
      const kcu::CublasLinear::Input in = cublas.prepare(dx.as<float>(), rows, s.in, DType::kBF16);
      const double t_cublas = timed([&] { cublas.forward(weight, in, y1.as<float>()); }, flush, reps, stream);
      const bool has_gemv16 = rows <= kcu::kGemv16MaxRows;
      double t_gemv[3] = {0, 0, 0}, best = 0;
      for (int k = 0; k < 3 && has_gemv16; ++k) {
        t_gemv[k] = timed(
            [&] {
              kcu::launch_gemv16(w.data(), in.converted, rows, s.in, s.out, true, nullptr, y2.as<float>(), stream,
                                 outs_per_warp[k]);
            },
            flush, reps, stream);
        best = best == 0 ? t_gemv[k] : std::min(best, t_gemv[k]);
      }
      const int chosen = has_gemv16 ? kcu::gemv16_outs_per_warp(rows, s.out, s.in) : 0;
      std::vector<float> a(static_cast<size_t>(rows * s.out)), b(a.size());
      kcu::copy_to_host(a.data(), y1.data(), a.size() * sizeof(float));
      kcu::copy_to_host(b.data(), y2.data(), b.size() * sizeof(float));  // the last gemv16 launch's (4 per warp)
      const double diff_g = has_gemv16 ? rel_diff(a, b) : 0.0;
      std::printf(
          "{\"shape\": \"%s\", \"out\": %lld, \"in\": %lld, \"rows\": %lld, \"cublas_us\": %.2f, "
          "\"gemv16_us\": [%.2f, %.2f, %.2f], \"gemv16_outs_per_warp\": [1, 2, 4], \"gemv16_default_outs\": %d, "
          "\"cublas_pct_bw\": %.1f, \"gemv16_pct_bw\": [%.1f, %.1f, %.1f], \"gemv16_max_rel_diff\": %.3g}\n",
          s.name.c_str(), static_cast<long long>(s.out), static_cast<long long>(s.in), static_cast<long long>(rows),
          t_cublas * 1e6, t_gemv[0] * 1e6, t_gemv[1] * 1e6, t_gemv[2] * 1e6, chosen, pct(t_cublas),
          pct(t_gemv[0]), pct(t_gemv[1]), pct(t_gemv[2]), diff_g);
      char line[400];
      std::snprintf(line, sizeof line,
                    "| %s | %lld x %lld | %lld | %.1f (%.0f%%) | %.1f (%.0f%%) / %.1f (%.0f%%) / %.1f (%.0f%%) | %d | "
                    "%.2f | %.1e |\n",
                    s.name.c_str(), static_cast<long long>(s.out), static_cast<long long>(s.in),
                    static_cast<long long>(rows), t_cublas * 1e6, pct(t_cublas), t_gemv[0] * 1e6, pct(t_gemv[0]),
                    t_gemv[1] * 1e6, pct(t_gemv[1]), t_gemv[2] * 1e6, pct(t_gemv[2]), chosen,
                    best / t_cublas, diff_g);
      table += line;
    }
  }
  std::printf("\ncopy bandwidth %.2f TB/s\n\n%s", bandwidth / 1e12, table.c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_gemv16: %s\n", e.what());
  return 1;
}
