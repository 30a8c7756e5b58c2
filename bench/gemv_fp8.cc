// Small-batch products with FP8 E4M3 weights (launch_gemv_fp8, per-channel and 128x128-block
// scales) against the same shapes in bf16 (launch_gemv16, the decode product Spindle serves bf16
// with), at 1, 2, 4 and 8 rows, as % of the device copy bandwidth measured in the same run (bytes:
// the weight, plus the fp8 scales). The issue 47 question: does a decode product that streams
// 1-byte weights read them as fast as the bf16 one reads 2-byte weights (then FP8 decode ~2x)?
// Every timed product starts with L2 cold (bench/cuda_bench_util.h). Median of --reps.
//
// usage: bench_gemv_fp8 [--hidden 4096] [--intermediate 14336] [--heads 32] [--kv-heads 8]
//                       [--head-dim 128] [--reps 20]        (defaults: Llama-3.1-8B)
#include <cuda_runtime.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench_cli.h"
#include "cuda_bench_util.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/gemv16.h"
#include "kernels/cuda/gemv_fp8.h"
#include "util/half.h"

using namespace spindle;
namespace kcu = spindle::kernels::cuda;

int main(int argc, char** argv) try {
  bench::LayerDims dims;
  int reps = 20;
  CLI::App app{"Small-batch FP8-weight products (gemv_fp8) against bf16 (gemv16)", "bench_gemv_fp8"};
  bench::add_layer_dim_options(app, dims, 16);
  app.add_option("--reps", reps, "Timed repetitions, median reported (20)")->check(CLI::Range(1, 100000));
  bench::parse_or_exit(app, argc, argv);
  const std::vector<bench::ProjectionShape> shapes = bench::layer_projections(dims);
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  const double bandwidth = bench::copy_bandwidth(stream);
  kcu::DeviceBuffer flush(size_t{256} << 20);
  std::mt19937 rng(1);
  std::printf("{\"copy_bandwidth_bytes_s\": %.4g}\n", bandwidth);
  std::string table =
      "| shape | out x in | rows | bf16 gemv16 us (% bw) | fp8 per-channel us (% bw) | fp8 block128 us (% bw) | "
      "bf16 / fp8 per-channel time |\n|---|---|---|---|---|---|---|\n";
  for (const bench::ProjectionShape& s : shapes) {
    const bench::Fp8BenchWeight w = bench::make_fp8_bench_weight(s, rng);
    const double bytes16 = 2.0 * s.out * s.in;
    const double bytes_channel = 1.0 * s.out * s.in + 4.0 * s.out;
    const double bytes_block = 1.0 * s.out * s.in + 4.0 * kcu::fp8_scale_count(kcu::Fp8Scale::kBlock128, s.out, s.in);
    for (const int64_t rows : {1, 2, 4, 8}) {
      std::vector<uint16_t> x(static_cast<size_t>(rows * s.in));
      std::normal_distribution<float> normal(0.0f, 1.0f);
      for (auto& v : x) v = float_to_bf16_bits(normal(rng));
      kcu::DeviceBuffer dx(x.size() * 2), dy(static_cast<size_t>(rows * s.out) * 4);
      kcu::copy_to_device(dx.data(), x.data(), x.size() * 2);
      const double t16 = bench::timed(
          [&] { kcu::launch_gemv16(w.bf16.data(), dx.data(), rows, s.in, s.out, true, nullptr, dy.as<float>(), stream); },
          flush, reps, stream);
      const auto fp8 = [&](kcu::Fp8Scale mode, const kcu::DeviceBuffer& scale) {
        return bench::timed(
            [&] {
              kcu::launch_gemv_fp8(w.fp8.as<uint8_t>(), scale.as<float>(), mode, dx.as<uint16_t>(), rows, s.in, s.out,
                                   nullptr, dy.as<float>(), stream);
            },
            flush, reps, stream);
      };
      const double tc = fp8(kcu::Fp8Scale::kPerChannel, w.channel_scale);
      const double tb = fp8(kcu::Fp8Scale::kBlock128, w.block_scale);
      const auto pct = [&](double bytes, double t) { return bytes / t / bandwidth * 100; };
      std::printf(
          "{\"shape\": \"%s\", \"out\": %lld, \"in\": %lld, \"rows\": %lld, \"bf16_us\": %.2f, \"fp8_channel_us\": "
          "%.2f, \"fp8_block_us\": %.2f, \"bf16_pct_bw\": %.1f, \"fp8_channel_pct_bw\": %.1f, \"fp8_block_pct_bw\": "
          "%.1f}\n",
          s.name.c_str(), static_cast<long long>(s.out), static_cast<long long>(s.in), static_cast<long long>(rows),
          t16 * 1e6, tc * 1e6, tb * 1e6, pct(bytes16, t16), pct(bytes_channel, tc), pct(bytes_block, tb));
      char line[300];
      std::snprintf(line, sizeof line, "| %s | %lld x %lld | %lld | %.1f (%.0f%%) | %.1f (%.0f%%) | %.1f (%.0f%%) | %.2f |\n",
                    s.name.c_str(), static_cast<long long>(s.out), static_cast<long long>(s.in),
                    static_cast<long long>(rows), t16 * 1e6, pct(bytes16, t16), tc * 1e6, pct(bytes_channel, tc),
                    tb * 1e6, pct(bytes_block, tb), t16 / tc);
      table += line;
    }
  }
  std::printf("\ncopy bandwidth %.2f TB/s\n\n%s", bandwidth / 1e12, table.c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_gemv_fp8: %s\n", e.what());
  return 1;
}
