// Prefill products with FP8 E4M3 weights on the FP8 tensor cores (cuBLASLt, kernels/cuda/
// fp8_lt_linear.h: per-tensor, per-channel x per-token and 128x128-block x 1x128 scales, fast
// accumulation off and on) against cuBLAS bf16 (CublasLinear, activations rounded to bf16: one
// GEMM, the fastest bf16 product Spindle has) and against the W8A16 path that serves FP8 weights
// today above 8 rows (fp8_linear.h: the weight converted to bf16, then the split bf16 product), on
// the 8B model's projection shapes at 512..8192 rows. FP8 times include the on-device activation
// quantization ("+q"); the product alone is printed too. TFLOP/s = 2 rows out in / time. The
// issue 47 question: is 8000-token prefill >= 1.5x bf16 reachable with these products?
// Median of --reps, L2 flushed before each (bench/cuda_bench_util.h).
//
// usage: bench_fp8_lt [--hidden 4096] [--intermediate 14336] [--heads 32] [--kv-heads 8]
//                     [--head-dim 128] [--rows 512,1024,2048,4096,8192] [--reps 10]
#include <cuda_runtime.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench_cli.h"
#include "cuda_bench_util.h"
#include "kernels/cuda/cublas_linear.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/fp8_activation.h"
#include "kernels/cuda/fp8_linear.h"
#include "kernels/cuda/fp8_lt_linear.h"
#include "platform/cuda_info.h"

using namespace spindle;
namespace kcu = spindle::kernels::cuda;

int main(int argc, char** argv) try {
  bench::LayerDims dims;
  std::vector<int64_t> row_counts = {512, 1024, 2048, 4096, 8192};
  int reps = 10;
  CLI::App app{"Prefill FP8 products (cuBLASLt) against cuBLAS bf16 and the W8A16 path", "bench_fp8_lt"};
  bench::add_layer_dim_options(app, dims, 16);
  app.add_option("--rows", row_counts, "Row counts (512,1024,2048,4096,8192)")->delimiter(',');
  app.add_option("--reps", reps, "Timed repetitions, median reported (10)")->check(CLI::Range(1, 100000));
  bench::parse_or_exit(app, argc, argv);
  const std::vector<bench::ProjectionShape> shapes = bench::layer_projections(dims);
  const CudaProbe probe = probe_cuda_devices();
  if (probe.devices.empty()) throw std::runtime_error("no CUDA device: " + probe.unavailable_reason);
  const auto& dev = probe.devices.front();
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  kcu::DeviceBuffer flush(size_t{256} << 20);
  std::mt19937 rng(1);
  int64_t max_rows = 0, max_in = 0, max_out = 0, max_elements = 0;
  for (int64_t r : row_counts) max_rows = std::max(max_rows, r);
  for (const bench::ProjectionShape& s : shapes) {
    max_in = std::max(max_in, s.in);
    max_out = std::max(max_out, s.out);
    max_elements = std::max(max_elements, s.out * s.in);
  }
  kcu::CublasLinear round16(stream, /*allow_16bit_activations=*/true, /*small_batch_kernel=*/false);
  kcu::CublasLinear split(stream);
  round16.reserve(max_rows, max_in, max_out);
  split.reserve(max_rows, max_in, max_out);
  kcu::Fp8Linear w8a16(split, stream);
  w8a16.reserve(max_out, max_elements, true);
  kcu::Fp8LtLinear lt(stream, false), lt_fast(stream, true);
  lt.reserve(max_rows, max_in, max_out);
  lt_fast.reserve(max_rows, max_in, max_out);
  kcu::DeviceBuffer x(static_cast<size_t>(max_rows * max_in) * 4), y(static_cast<size_t>(max_rows * max_out) * 4);
  kcu::DeviceBuffer codes(static_cast<size_t>(max_rows * max_in));
  kcu::DeviceBuffer scales(static_cast<size_t>(
      kcu::fp8_activation_scale_count(kcu::Fp8ActScale::kPerToken128, max_rows, max_in) * 4 + 16));
  {
    std::vector<float> host(static_cast<size_t>(max_rows * max_in));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& v : host) v = normal(rng);
    kcu::copy_to_device(x.data(), host.data(), host.size() * 4);
  }
  std::printf("{\"device\": \"%s\", \"cc\": \"%d.%d\"}\n", dev.name.c_str(), dev.cc_major, dev.cc_minor);
  std::string table =
      "| shape | rows | bf16 us (TFLOP/s) | w8a16 channel us | w8a16 block us | fp8 tensor +q us | fp8 channel +q us "
      "(TFLOP/s) | fp8 channel fast +q us | fp8 block +q us (TFLOP/s) | fp8 block fast +q us | bf16 / best fp8 |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const bench::ProjectionShape& s : shapes) {
    const bench::Fp8BenchWeight w = bench::make_fp8_bench_weight(s, rng);
    const kcu::DeviceWeight w16{w.bf16.data(), DType::kBF16, s.out, s.in};
    const kcu::DeviceFp8Weight tensor{w.fp8.as<uint8_t>(), w.tensor_scale.as<float>(), kcu::Fp8Scale::kPerTensor, s.out, s.in};
    const kcu::DeviceFp8Weight channel{w.fp8.as<uint8_t>(), w.channel_scale.as<float>(), kcu::Fp8Scale::kPerChannel, s.out, s.in};
    const kcu::DeviceFp8Weight block{w.fp8.as<uint8_t>(), w.block_scale.as<float>(), kcu::Fp8Scale::kBlock128, s.out, s.in};
    for (const int64_t rows : row_counts) {
      const double flops = 2.0 * rows * s.out * s.in;
      const auto in16 = round16.prepare(x.as<float>(), rows, s.in, DType::kBF16);
      const double t16 = bench::timed([&] { round16.forward(w16, in16, y.as<float>()); }, flush, reps, stream);
      const auto in_split = split.prepare(x.as<float>(), rows, s.in, DType::kBF16);
      const double t_w8c = bench::timed([&] { w8a16.forward(channel, in_split, y.as<float>(), nullptr); }, flush, reps, stream);
      const double t_w8b = bench::timed([&] { w8a16.forward(block, in_split, y.as<float>(), nullptr); }, flush, reps, stream);
      const auto fp8 = [&](kcu::Fp8LtLinear& l, const kcu::DeviceFp8Weight& wt) {
        const std::vector<std::string> why = kcu::fp8_lt_unsupported_reasons(dev.cc_major, dev.cc_minor, wt.mode, s.out, s.in);
        if (!why.empty()) return -1.0;
        if (const std::string lt_why = l.why_unsupported(wt.mode, s.out, s.in, rows); !lt_why.empty()) {
          std::printf("{\"unsupported\": \"%s %s %lld rows: %s\"}\n", l.name(), s.name.c_str(),
                      static_cast<long long>(rows), lt_why.c_str());
          return -1.0;
        }
        return bench::timed([&] { l.forward(wt, x.as<float>(), rows, y.as<float>(), nullptr); }, flush, reps, stream);
      };
      const double tt = fp8(lt, tensor), tc = fp8(lt, channel), tcf = fp8(lt_fast, channel);
      const double tb = fp8(lt, block), tbf = fp8(lt_fast, block);
      // The product alone (activations quantized once, outside the timing).
      double tc_only = -1, tb_only = -1;
      if (tc > 0) {  // (tc > 0: lt has this plan)
        kcu::launch_quantize_fp8_activations(x.as<float>(), rows, s.in, kcu::Fp8ActScale::kPerToken, codes.as<uint8_t>(), scales.as<float>(), stream);
        tc_only = bench::timed([&] { lt.forward_quantized(channel, codes.as<uint8_t>(), scales.as<float>(), rows, y.as<float>(), nullptr); }, flush, reps, stream);
      }
      if (tb > 0) {
        kcu::launch_quantize_fp8_activations(x.as<float>(), rows, s.in, kcu::Fp8ActScale::kPerToken128, codes.as<uint8_t>(), scales.as<float>(), stream);
        tb_only = bench::timed([&] { lt.forward_quantized(block, codes.as<uint8_t>(), scales.as<float>(), rows, y.as<float>(), nullptr); }, flush, reps, stream);
      }
      double best = 0;
      for (double t : {tt, tc, tcf, tb, tbf}) if (t > 0 && (best == 0 || t < best)) best = t;
      const auto tf = [&](double t) { return t > 0 ? flops / t / 1e12 : 0.0; };
      std::printf(
          "{\"shape\": \"%s\", \"out\": %lld, \"in\": %lld, \"rows\": %lld, \"bf16_us\": %.1f, \"w8a16_channel_us\": %.1f, "
          "\"w8a16_block_us\": %.1f, \"fp8_tensor_q_us\": %.1f, \"fp8_channel_q_us\": %.1f, \"fp8_channel_fast_q_us\": %.1f, "
          "\"fp8_block_q_us\": %.1f, \"fp8_block_fast_q_us\": %.1f, \"fp8_channel_gemm_us\": %.1f, \"fp8_block_gemm_us\": %.1f, "
          "\"bf16_tflops\": %.0f, \"fp8_channel_q_tflops\": %.0f, \"fp8_block_q_tflops\": %.0f}\n",
          s.name.c_str(), static_cast<long long>(s.out), static_cast<long long>(s.in), static_cast<long long>(rows),
          t16 * 1e6, t_w8c * 1e6, t_w8b * 1e6, tt * 1e6, tc * 1e6, tcf * 1e6, tb * 1e6, tbf * 1e6, tc_only * 1e6,
          tb_only * 1e6, tf(t16), tf(tc), tf(tb));
      char line[400];
      std::snprintf(line, sizeof line,
                    "| %s | %lld | %.0f (%.0f) | %.0f | %.0f | %.0f | %.0f (%.0f) | %.0f | %.0f (%.0f) | %.0f | %.2f |\n",
                    s.name.c_str(), static_cast<long long>(rows), t16 * 1e6, tf(t16), t_w8c * 1e6, t_w8b * 1e6,
                    tt * 1e6, tc * 1e6, tf(tc), tcf * 1e6, tb * 1e6, tf(tb), tbf * 1e6, best > 0 ? t16 / best : 0.0);
      table += line;
    }
  }
  std::printf("\n(-1: the FP8 entry is unsupported here: fp8_lt_unsupported_reasons)\n\n%s", table.c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_fp8_lt: %s\n", e.what());
  return 1;
}
