// Small-batch products with FP8 E4M3 weights against the same shapes in bf16, at 1..--max-rows
// rows (default 32, every count), on a model's layer projections (issue 47: decode at C = 1..32):
//   bf16 cuBLAS     CublasLinear's bf16 product (rounding mode, cuBLAS alone), what bf16 serves above
//                   kGemv16UseMaxRows rows
//   bf16 gemv16     launch_gemv16 (rows <= 8), what bf16 serves up to kGemv16UseMaxRows rows
//   fp8 gemv        launch_gemv_fp8, per-channel scales (rows <= 8)
//   fp8 mma ch/blk  launch_gemv_fp8_mma, per-channel and 128x128-block scales (automatic splits, or
//                   --splits), with each weight load (Fp8MmaLoad: lane pieces, row spans, block
//                   stages, block pairs)
// each as time and % of the device copy bandwidth measured in the same run (bytes read: the weight
// and its scales; x and y are not counted), and the ratio of the faster bf16 time (gemv16 or cuBLAS:
// what bf16 serves is gemv16 up to kGemv16UseMaxRows rows, cuBLAS above) to the faster FP8
// per-channel kernel. Last, per row count,
// the four products of one layer summed: the decode step's product time, bf16 vs FP8 (the question
// of issue 47's C = 32 target: >= 1.5x needs these >= 1.5x and more), FP8 with q, k, v and gate, up
// as separate products (those shapes are timed too), and FP8 as CudaOps runs it (the kernel
// Fp8Linear picks per row count) apart and joined (q|k|v, gate|up: model/fp8_join.h), their ratio
// also as one JSON line per row count (before that table, which ends the output).
// Every timed product starts with L2 cold (bench/cuda_bench_util.h). Median of --reps.
//
// usage: bench_gemv_fp8 [--hidden 4096] [--intermediate 14336] [--heads 32] [--kv-heads 8]
//                       [--head-dim 128] [--reps 20] [--max-rows 32] [--splits 0]
//        (defaults: Llama-3.1-8B)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "bench_cli.h"
#include "cuda_bench_util.h"
#include "kernels/cuda/cublas_linear.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/gemv16.h"
#include "kernels/cuda/fp8_linear.h"
#include "kernels/cuda/gemv_fp8.h"
#include "util/half.h"

using namespace spindle;
namespace kcu = spindle::kernels::cuda;

namespace {

// seconds; 0: not run at this row count. mma: kLanePieces; spans: kRowSpans; stages: kBlockStages;
// pairs: kBlockPairs
struct Times {
  double cublas = 0, gemv16 = 0, gemv_fp8 = 0, mma_channel = 0, mma_block = 0, spans_channel = 0, spans_block = 0;
  double stages_channel = 0, stages_block = 0, pairs_channel = 0, pairs_block = 0;
  double bf16_best() const { return gemv16 > 0 && gemv16 < cublas ? gemv16 : cublas; }
  double mma_best() const { return std::min({mma_channel, spans_channel, stages_channel, pairs_channel}); }
  double fp8_best() const { return gemv_fp8 > 0 ? std::min(gemv_fp8, mma_best()) : mma_best(); }
  // The product CudaOps runs at `rows` (per channel; Fp8Linear: gemv_fp8 up to kFp8GemvUseMaxRows,
  // then gemv_fp8_mma with the load gemv_fp8_mma_load_for(rows) names; SPINDLE_FP8_MMA_LOAD is not
  // read here).
  double served(int64_t rows) const {
    if (rows <= kcu::kFp8GemvUseMaxRows && gemv_fp8 > 0) return gemv_fp8;
    switch (kcu::gemv_fp8_mma_load_for(rows)) {
      case kcu::Fp8MmaLoad::kLanePieces: return mma_channel;
      case kcu::Fp8MmaLoad::kRowSpans: return spans_channel;
      case kcu::Fp8MmaLoad::kBlockStages: return stages_channel;
      case kcu::Fp8MmaLoad::kBlockPairs: return pairs_channel;
    }
    return mma_channel;
  }
};

// One layer's FP8 products at one row count: q, k, v and gate, up apart (before issue 47's join)
// or joined into qkv and gate_up (CudaOps now: model/fp8_join.h), o and down either way.
struct LayerFp8 {
  double apart_best = 0;     // the fastest kernel of each product
  double apart_served = 0;   // the kernel CudaOps runs (Times::served)
  double joined_served = 0;  // the same, q|k|v and gate|up joined
};

// What every timed product shares: the stream, the L2 flush, the repetitions, the mma workspace
// and forced splits, cuBLAS.
struct Bench {
  cudaStream_t stream;
  kcu::DeviceBuffer& flush;
  int reps;
  const kcu::Fp8MmaWorkspace& ws;
  int64_t splits;
  kcu::CublasLinear& cublas;
};

// One projection shape: its weights (bf16 and FP8) and x [max_rows, in] (f32 and bf16).
struct ShapeData {
  const bench::ProjectionShape& s;
  const bench::Fp8BenchWeight& w;
  const kcu::DeviceBuffer& xf;  // f32, cuBLAS's input (rounded to bf16 by prepare)
  const kcu::DeviceBuffer& x;   // bf16
  kcu::DeviceBuffer& y;
};

Times time_products(Bench& b, const ShapeData& d, int64_t rows) {
  const bench::ProjectionShape& s = d.s;
  Times t;
  const kcu::DeviceWeight weight16{d.w.bf16.data(), DType::kBF16, s.out, s.in};
  const kcu::CublasLinear::Input in = b.cublas.prepare(d.xf.as<float>(), rows, s.in, DType::kBF16);
  float* y = d.y.as<float>();
  t.cublas = bench::timed([&] { b.cublas.forward(weight16, in, y); }, b.flush, b.reps, b.stream);
  if (rows <= kcu::kGemv16MaxRows) {
    t.gemv16 = bench::timed(
        [&] { kcu::launch_gemv16(d.w.bf16.data(), d.x.data(), rows, s.in, s.out, true, nullptr, y, b.stream); },
        b.flush, b.reps, b.stream);
  }
  if (rows <= kcu::kGemvFp8MaxRows) {
    t.gemv_fp8 = bench::timed(
        [&] {
          kcu::launch_gemv_fp8(d.w.fp8.as<uint8_t>(), d.w.channel_scale.as<float>(), kcu::Fp8Scale::kPerChannel,
                               d.x.as<uint16_t>(), rows, s.in, s.out, nullptr, y, b.stream);
        },
        b.flush, b.reps, b.stream);
  }
  const auto mma = [&](kcu::Fp8Scale mode, const kcu::DeviceBuffer& scale, kcu::Fp8MmaLoad load) {
    return bench::timed(
        [&] {
          kcu::launch_gemv_fp8_mma(d.w.fp8.as<uint8_t>(), scale.as<float>(), mode, d.x.as<uint16_t>(), rows, s.in,
                                   s.out, nullptr, y, b.ws, b.stream, b.splits, load);
        },
        b.flush, b.reps, b.stream);
  };
  t.mma_channel = mma(kcu::Fp8Scale::kPerChannel, d.w.channel_scale, kcu::Fp8MmaLoad::kLanePieces);
  t.mma_block = mma(kcu::Fp8Scale::kBlock128, d.w.block_scale, kcu::Fp8MmaLoad::kLanePieces);
  t.spans_channel = mma(kcu::Fp8Scale::kPerChannel, d.w.channel_scale, kcu::Fp8MmaLoad::kRowSpans);
  t.spans_block = mma(kcu::Fp8Scale::kBlock128, d.w.block_scale, kcu::Fp8MmaLoad::kRowSpans);
  t.stages_channel = mma(kcu::Fp8Scale::kPerChannel, d.w.channel_scale, kcu::Fp8MmaLoad::kBlockStages);
  t.stages_block = mma(kcu::Fp8Scale::kBlock128, d.w.block_scale, kcu::Fp8MmaLoad::kBlockStages);
  t.pairs_channel = mma(kcu::Fp8Scale::kPerChannel, d.w.channel_scale, kcu::Fp8MmaLoad::kBlockPairs);
  t.pairs_block = mma(kcu::Fp8Scale::kBlock128, d.w.block_scale, kcu::Fp8MmaLoad::kBlockPairs);
  return t;
}

// One JSON line and one table row of a shape at `rows`.
void report(const bench::ProjectionShape& s, int64_t rows, int64_t splits, const Times& t, double bandwidth,
            std::string& table) {
  const double bytes16 = 2.0 * s.out * s.in;
  const double bytes_channel = 1.0 * s.out * s.in + 4.0 * s.out;
  const double bytes_block = 1.0 * s.out * s.in + 4.0 * kcu::fp8_scale_count(kcu::Fp8Scale::kBlock128, s.out, s.in);
  const auto pct = [&](double bytes, double sec) { return sec > 0 ? bytes / sec / bandwidth * 100 : 0.0; };
  std::printf(
      "{\"shape\": \"%s\", \"out\": %lld, \"in\": %lld, \"rows\": %lld, \"splits\": %lld, \"cublas_bf16_us\": %.2f, "
      "\"gemv16_us\": %.2f, \"gemv_fp8_us\": %.2f, \"mma_channel_us\": %.2f, \"mma_block_us\": %.2f, "
      "\"cublas_pct_bw\": %.1f, \"gemv16_pct_bw\": %.1f, \"gemv_fp8_pct_bw\": %.1f, \"mma_channel_pct_bw\": %.1f, "
      "\"mma_block_pct_bw\": %.1f, \"spans_channel_us\": %.2f, \"spans_block_us\": %.2f, "
      "\"spans_channel_pct_bw\": %.1f, \"spans_block_pct_bw\": %.1f, \"stages_channel_us\": %.2f, "
      "\"stages_block_us\": %.2f, \"stages_channel_pct_bw\": %.1f, \"stages_block_pct_bw\": %.1f, "
      "\"pairs_channel_us\": %.2f, \"pairs_block_us\": %.2f, \"pairs_channel_pct_bw\": %.1f, "
      "\"pairs_block_pct_bw\": %.1f, "
      "\"bf16_best_over_fp8_best\": %.3f}\n",
      s.name.c_str(), static_cast<long long>(s.out), static_cast<long long>(s.in), static_cast<long long>(rows),
      static_cast<long long>(splits), t.cublas * 1e6, t.gemv16 * 1e6, t.gemv_fp8 * 1e6, t.mma_channel * 1e6,
      t.mma_block * 1e6, pct(bytes16, t.cublas), pct(bytes16, t.gemv16), pct(bytes_channel, t.gemv_fp8),
      pct(bytes_channel, t.mma_channel), pct(bytes_block, t.mma_block), t.spans_channel * 1e6, t.spans_block * 1e6,
      pct(bytes_channel, t.spans_channel), pct(bytes_block, t.spans_block), t.stages_channel * 1e6,
      t.stages_block * 1e6, pct(bytes_channel, t.stages_channel), pct(bytes_block, t.stages_block),
      t.pairs_channel * 1e6, t.pairs_block * 1e6, pct(bytes_channel, t.pairs_channel), pct(bytes_block, t.pairs_block),
      t.bf16_best() / t.fp8_best());
  const auto cell = [&](double sec, double bytes) {
    if (sec <= 0) return std::string("-");
    char c[64];
    std::snprintf(c, sizeof c, "%.1f (%.0f%%)", sec * 1e6, pct(bytes, sec));
    return std::string(c);
  };
  char line[512];
  std::snprintf(line, sizeof line,
                "| %s | %lld x %lld | %lld | %lld | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.2f |\n",
                s.name.c_str(), static_cast<long long>(s.out), static_cast<long long>(s.in),
                static_cast<long long>(rows), static_cast<long long>(splits), cell(t.cublas, bytes16).c_str(),
                cell(t.gemv16, bytes16).c_str(), cell(t.gemv_fp8, bytes_channel).c_str(),
                cell(t.mma_channel, bytes_channel).c_str(), cell(t.mma_block, bytes_block).c_str(),
                cell(t.spans_channel, bytes_channel).c_str(), cell(t.spans_block, bytes_block).c_str(),
                cell(t.stages_channel, bytes_channel).c_str(), cell(t.stages_block, bytes_block).c_str(),
                cell(t.pairs_channel, bytes_channel).c_str(), cell(t.pairs_block, bytes_block).c_str(),
                t.bf16_best() / t.fp8_best());
  table += line;
}

// Per row count, one layer's products summed; fp8 apart: q, k, v and gate, up as separate products
// (CudaOps before the join, and what it still does where the parts' scales cannot join); "as
// CudaOps runs it": the kernel Fp8Linear picks per row count, apart and joined (what it runs now).
void print_layer_sums(const std::map<int64_t, std::vector<Times>>& by_rows, const std::map<int64_t, LayerFp8>& fp8) {
  std::string table =
      "\n| rows | one layer's products: bf16 best us | bf16 cuBLAS us | fp8 gemv us | fp8 mma lane pieces channel us "
      "| block128 | fp8 mma row spans channel us | block128 | fp8 mma block stages channel us | block128 "
      "| fp8 mma block pairs channel us | block128 | bf16 best / fp8 best | fp8 best, q k v gate up apart, us "
      "| bf16 best / that | as CudaOps runs it: apart us | joined us | apart / joined | bf16 best / joined |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  std::string json;  // one line per row count, printed before the table (the table ends the output)
  for (const auto& [rows, ts] : by_rows) {
    Times sum;
    double bf16 = 0, best = 0;
    for (const Times& t : ts) {
      sum.cublas += t.cublas, sum.gemv16 += t.gemv16, sum.gemv_fp8 += t.gemv_fp8;
      sum.mma_channel += t.mma_channel, sum.mma_block += t.mma_block;
      sum.spans_channel += t.spans_channel, sum.spans_block += t.spans_block;
      sum.stages_channel += t.stages_channel, sum.stages_block += t.stages_block;
      sum.pairs_channel += t.pairs_channel, sum.pairs_block += t.pairs_block;
      bf16 += t.bf16_best(), best += t.fp8_best();
    }
    const std::string gemv = sum.gemv_fp8 > 0 ? std::to_string(sum.gemv_fp8 * 1e6) : std::string("-");
    const auto a = fp8.find(rows);
    const LayerFp8 l = a != fp8.end() ? a->second : LayerFp8{};
    const auto ratio = [](double n, double d) { return d > 0 ? n / d : 0.0; };
    char row[640];
    std::snprintf(row, sizeof row,
                  "| %lld | %.1f | %.1f | %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.2f | %.1f | %.2f "
                  "| %.1f | %.1f | %.2f | %.2f |\n",
                  static_cast<long long>(rows), bf16 * 1e6, sum.cublas * 1e6, gemv.c_str(), sum.mma_channel * 1e6,
                  sum.mma_block * 1e6, sum.spans_channel * 1e6, sum.spans_block * 1e6, sum.stages_channel * 1e6,
                  sum.stages_block * 1e6, sum.pairs_channel * 1e6, sum.pairs_block * 1e6, bf16 / best,
                  l.apart_best * 1e6, ratio(bf16, l.apart_best), l.apart_served * 1e6, l.joined_served * 1e6,
                  ratio(l.apart_served, l.joined_served), ratio(bf16, l.joined_served));
    table += row;
    char line[256];
    std::snprintf(line, sizeof line,
                  "{\"layer_rows\": %lld, \"bf16_best_us\": %.2f, \"fp8_apart_served_us\": %.2f, "
                  "\"fp8_joined_served_us\": %.2f, \"apart_over_joined\": %.3f, \"bf16_over_joined\": %.3f}\n",
                  static_cast<long long>(rows), bf16 * 1e6, l.apart_served * 1e6, l.joined_served * 1e6,
                  ratio(l.apart_served, l.joined_served), ratio(bf16, l.joined_served));
    json += line;
  }
  std::printf("\n%s%s", json.c_str(), table.c_str());
}

}  // namespace

int main(int argc, char** argv) try {
  bench::LayerDims dims;
  int reps = 20;
  int64_t max_rows = kcu::kGemvFp8MmaMaxRows, splits = 0;
  CLI::App app{"Small-batch FP8-weight products (gemv_fp8, gemv_fp8_mma) against bf16 (gemv16, cuBLAS)",
               "bench_gemv_fp8"};
  bench::add_layer_dim_options(app, dims, 16);
  app.add_option("--reps", reps, "Timed repetitions, median reported (20)")->check(CLI::Range(1, 100000));
  app.add_option("--max-rows", max_rows, "Rows 1..this (32)")->check(CLI::Range(int64_t{1}, kcu::kGemvFp8MmaMaxRows));
  app.add_option("--splits", splits, "gemv_fp8_mma input splits (0: automatic)")->check(CLI::Range(0, 4096));
  bench::parse_or_exit(app, argc, argv);
  const std::vector<bench::ProjectionShape> shapes = bench::layer_projections(dims);
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  const double bandwidth = bench::copy_bandwidth(stream);
  kcu::DeviceBuffer flush(size_t{256} << 20);
  std::mt19937 rng(1);
  int64_t max_out = 0, max_in = 0;
  for (const auto& s : shapes) max_out = std::max(max_out, s.out), max_in = std::max(max_in, s.in);
  kcu::DeviceBuffer mma_buffer(static_cast<size_t>(kcu::fp8_mma_workspace_bytes(max_out)));
  const kcu::Fp8MmaWorkspace ws =
      kcu::fp8_mma_workspace_init(mma_buffer.data(), static_cast<int64_t>(mma_buffer.size()), max_out);
  kcu::CublasLinear cublas(stream, /*allow_16bit_activations=*/true, /*small_batch_kernel=*/false);  // cuBLAS alone
  cublas.reserve(max_rows, max_in, max_out);
  Bench b{stream, flush, reps, ws, splits, cublas};
  int sm_count = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, 0));
  std::printf("{\"copy_bandwidth_bytes_s\": %.4g, \"sm_count\": %d, \"mma_resident_blocks_32_rows\": %lld}\n",
              bandwidth, sm_count,
              static_cast<long long>(kcu::gemv_fp8_mma_resident_blocks(32, kcu::Fp8Scale::kPerChannel)));
  std::string table =
      "| shape | out x in | rows | splits | bf16 cuBLAS us (% bw) | bf16 gemv16 us (% bw) | fp8 gemv us (% bw) | "
      "fp8 mma lane pieces channel us (% bw) | block128 | fp8 mma row spans channel | block128 | "
      "fp8 mma block stages channel | block128 | fp8 mma block pairs channel | block128 | bf16 best / fp8 best |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  std::map<int64_t, std::vector<Times>> by_rows;
  std::map<int64_t, LayerFp8> fp8;  // rows -> seconds of the FP8 layer's products
  // The fused shapes (qkv, o, gate_up, down: bf16 and FP8), then q, k (= v) and gate (= up) alone
  // (FP8 only in the last table; each counted as often as the layer has it).
  std::vector<std::pair<bench::ProjectionShape, int>> runs;
  for (const auto& s : shapes) runs.push_back({s, 0});
  runs.push_back({{"q", dims.heads * dims.head_dim, dims.hidden}, 1});
  runs.push_back({{"k|v", dims.kv_heads * dims.head_dim, dims.hidden}, 2});
  runs.push_back({{"gate|up", dims.intermediate, dims.hidden}, 2});
  for (const auto& [s, apart_count] : runs) {
    const bench::Fp8BenchWeight w = bench::make_fp8_bench_weight(s, rng);
    std::vector<float> xf(static_cast<size_t>(max_rows * s.in));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (auto& v : xf) v = normal(rng);
    std::vector<uint16_t> x(xf.size());
    for (size_t i = 0; i < xf.size(); ++i) x[i] = float_to_bf16_bits(xf[i]);
    kcu::DeviceBuffer dxf(xf.size() * 4), dx(x.size() * 2), dy(static_cast<size_t>(max_rows * s.out) * 4);
    kcu::copy_to_device(dxf.data(), xf.data(), xf.size() * 4);
    kcu::copy_to_device(dx.data(), x.data(), x.size() * 2);
    const ShapeData d{s, w, dxf, dx, dy};
    for (int64_t rows = 1; rows <= max_rows; ++rows) {
      const Times t = time_products(b, d, rows);
      LayerFp8& l = fp8[rows];
      if (apart_count == 0) {
        by_rows[rows].push_back(t);
        l.joined_served += t.served(rows);
        if (s.name == "o" || s.name == "down") l.apart_best += t.fp8_best(), l.apart_served += t.served(rows);
      } else {
        l.apart_best += apart_count * t.fp8_best();
        l.apart_served += apart_count * t.served(rows);
      }
      const int64_t used_splits =  // (per channel; forced ones are capped at the 128-column units)
          splits > 0 ? std::min(splits, (s.in + 127) / 128)
                     : kcu::gemv_fp8_mma_splits(rows, s.out, s.in,
                                                kcu::gemv_fp8_mma_resident_blocks(rows, kcu::Fp8Scale::kPerChannel));
      report(s, rows, used_splits, t, bandwidth, table);
    }
  }
  std::printf("\ncopy bandwidth %.2f TB/s, %d SMs\n\n%s", bandwidth / 1e12, sm_count, table.c_str());
  print_layer_sums(by_rows, fp8);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_gemv_fp8: %s\n", e.what());
  return 1;
}
