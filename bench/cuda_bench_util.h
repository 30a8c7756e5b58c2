// Helpers of the CUDA product benches (bench_gemv16, bench_gemv_fp8, bench_fp8_lt): a model's
// layer projection shapes from the command line; random weights in bf16 and FP8 E4M3; the median
// of timed repetitions with L2 flushed before each (as in a decode step, where the other layers'
// weights have evicted this one), and the device copy bandwidth (bytes read + written per second,
// the best of 5 copies of 2 GiB) that the benches' "% of bandwidth" columns divide by.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "bench_cli.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/gemv_fp8.h"
#include "util/fp8.h"
#include "util/half.h"

namespace spindle::bench {

namespace kcu = spindle::kernels::cuda;

// A projection y[rows, out] = x[rows, in] W^T of one layer.
struct ProjectionShape {
  std::string name;
  int64_t out, in;
};

// The layer dimensions the product benches take from the command line (defaults: Llama-3.1-8B).
struct LayerDims {
  int64_t hidden = 4096, intermediate = 14336, heads = 32, kv_heads = 8, head_dim = 128;
};

// --hidden, --intermediate, --heads, --kv-heads, --head-dim; sizes (not head counts) from min_size.
inline void add_layer_dim_options(CLI::App& app, LayerDims& d, int64_t min_size) {
  app.add_option("--hidden", d.hidden, "Hidden size (4096)")->check(CLI::Range(min_size, int64_t{1} << 16));
  app.add_option("--intermediate", d.intermediate, "MLP intermediate size (14336)")
      ->check(CLI::Range(min_size, int64_t{1} << 18));
  app.add_option("--heads", d.heads, "Attention heads (32)")->check(CLI::Range(int64_t{1}, int64_t{1024}));
  app.add_option("--kv-heads", d.kv_heads, "KV heads (8)")->check(CLI::Range(int64_t{1}, int64_t{1024}));
  app.add_option("--head-dim", d.head_dim, "Head dimension (128)")->check(CLI::Range(min_size, int64_t{1024}));
}

// qkv (fused), o, gate_up (fused), down.
inline std::vector<ProjectionShape> layer_projections(const LayerDims& d) {
  return {{"qkv", (d.heads + 2 * d.kv_heads) * d.head_dim, d.hidden},
          {"o", d.hidden, d.heads * d.head_dim},
          {"gate_up", 2 * d.intermediate, d.hidden},
          {"down", d.hidden, d.intermediate}};
}

// A random weight [out, in] ~ N(0, 0.02): its bf16 values, and its e4m3 codes at scale 1e-3 with
// that scale as a per-tensor [1], per-channel [out] and 128x128-block scale table (the scale values
// do not change a product's speed).
struct Fp8BenchWeight {
  kcu::DeviceBuffer bf16, fp8, tensor_scale, channel_scale, block_scale;
};

inline Fp8BenchWeight make_fp8_bench_weight(const ProjectionShape& s, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<uint16_t> w16(static_cast<size_t>(s.out * s.in));
  std::vector<uint8_t> w8(w16.size());
  for (size_t i = 0; i < w16.size(); ++i) {
    const float v = normal(rng);
    w16[i] = float_to_bf16_bits(v);
    w8[i] = float_to_fp8_e4m3(v / 1e-3f);
  }
  std::vector<float> tensor(1, 1e-3f), channel(static_cast<size_t>(s.out), 1e-3f);
  std::vector<float> block(static_cast<size_t>(kcu::fp8_scale_count(kcu::Fp8Scale::kBlock128, s.out, s.in)), 1e-3f);
  Fp8BenchWeight w{kcu::DeviceBuffer(w16.size() * 2), kcu::DeviceBuffer(w8.size()), kcu::DeviceBuffer(4),
                   kcu::DeviceBuffer(channel.size() * 4), kcu::DeviceBuffer(block.size() * 4)};
  kcu::copy_to_device(w.bf16.data(), w16.data(), w16.size() * 2);
  kcu::copy_to_device(w.fp8.data(), w8.data(), w8.size());
  kcu::copy_to_device(w.tensor_scale.data(), tensor.data(), 4);
  kcu::copy_to_device(w.channel_scale.data(), channel.data(), channel.size() * 4);
  kcu::copy_to_device(w.block_scale.data(), block.data(), block.size() * 4);
  return w;
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Seconds of `run` with L2 flushed before each repetition.
template <typename Run>
inline double timed(Run run, kcu::DeviceBuffer& flush, int reps, cudaStream_t stream) {
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  std::vector<double> t;
  for (int i = 0; i < reps + 2; ++i) {
    CUDA_CHECK(cudaMemsetAsync(flush.data(), i & 0xff, flush.size(), stream));
    CUDA_CHECK(cudaEventRecord(a, stream));
    run();
    CUDA_CHECK(cudaEventRecord(b, stream));
    CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    if (i >= 2) t.push_back(ms * 1e-3);  // two warm-ups
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return median(t);
}

inline double copy_bandwidth(cudaStream_t stream) {
  const size_t bytes = size_t{2} << 30;
  kcu::DeviceBuffer src(bytes), dst(bytes);
  CUDA_CHECK(cudaMemsetAsync(src.data(), 1, bytes, stream));
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  double best = 0;
  for (int i = 0; i < 6; ++i) {
    CUDA_CHECK(cudaEventRecord(a, stream));
    CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice, stream));
    CUDA_CHECK(cudaEventRecord(b, stream));
    CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    if (i > 0) best = std::max(best, 2.0 * bytes / (ms * 1e-3));  // read + write
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return best;
}

}  // namespace spindle::bench
