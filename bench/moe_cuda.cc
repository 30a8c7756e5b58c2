// One mixture-of-experts block on CUDA (kernels/cuda/moe_kernels.h: router product + top-k,
// grouping, grouped gate/up + SiLU-mul, grouped down, combine) at decode and prefill row counts,
// against the bytes the step must read: the router and the distinct experts its routing selected
// (counted on the device by the grouping, read back after the timed runs), as % of the device copy
// bandwidth measured in the same run, then the phases alone (route + group, gate/up, down, each
// from a cold L2, the products against their share of the bound); for prefill rows also the rate of the expert products
// (2 * rows * top_k * 3 * F * H flops; bf16 experts run on tensor cores with the rows split into
// hi + lo bf16 parts, moe_mma.cu, so the tensor cores do twice these flops). Every timed block
// starts with L2 cold (bench/cuda_bench_util.h); median of --reps. Random bf16 weights and f32 rows: the router's
// product picks the experts, as in a served step.
//
// usage: bench_moe_cuda [--hidden 2048] [--width 768] [--experts 128] [--top-k 8] [--reps 20]
//                       [--rows 1,2,4,8,16,32,64,128,512,1024]   (defaults: one Qwen3-30B-A3B layer)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_cli.h"
#include "cuda_bench_util.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/moe_kernels.h"
#include "util/half.h"

using namespace spindle;
namespace kcu = spindle::kernels::cuda;

namespace {

struct Shape {
  int64_t hidden = 2048, width = 768;
  int experts = 128, top_k = 8;
};

kcu::DeviceBuffer random_bf16(int64_t n, float scale, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = float_to_bf16_bits(normal(rng));
  kcu::DeviceBuffer d(v.size() * 2);
  kcu::copy_to_device(d.data(), v.data(), v.size() * 2);
  return d;
}

// The layer's weights: router [E, H], gate/up [E, 2F, H] (joined per expert), down [E, H, F].
struct Layer {
  kcu::DeviceBuffer router, gate_up, down, table;
  Layer(const Shape& s, std::mt19937& rng)
      : router(random_bf16(s.experts * s.hidden, 0.05f, rng)),
        gate_up(random_bf16(s.experts * 2 * s.width * s.hidden, 0.02f, rng)),
        down(random_bf16(s.experts * s.hidden * s.width, 0.02f, rng)) {
    const int64_t e = s.experts, f = s.width, h = s.hidden;
    std::vector<const void*> ptrs(static_cast<size_t>(3 * e));
    for (int64_t i = 0; i < e; ++i) {
      ptrs[i] = gate_up.as<std::byte>() + i * 2 * f * h * 2;
      ptrs[e + i] = gate_up.as<std::byte>() + (i * 2 * f + f) * h * 2;
      ptrs[2 * e + i] = down.as<std::byte>() + i * h * f * 2;
    }
    table.reserve(ptrs.size() * sizeof(void*));
    kcu::copy_to_device(table.data(), ptrs.data(), ptrs.size() * sizeof(void*));
  }
};

// One step's rows and scratch.
struct Step {
  int64_t rows;
  kcu::DeviceBuffer x, logits, ids, weights, offsets, order, active, act, out, y, counters;
  Step(const Shape& s, int64_t r, std::mt19937& rng) : rows(r) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> host(static_cast<size_t>(r * s.hidden));
    for (auto& v : host) v = normal(rng);
    x.reserve(host.size() * 4);
    kcu::copy_to_device(x.data(), host.data(), host.size() * 4);
    const size_t n = static_cast<size_t>(r * s.top_k);
    logits.reserve(static_cast<size_t>(r * s.experts) * 4);
    ids.reserve(n * 4), weights.reserve(n * 4), order.reserve(n * 4);
    offsets.reserve((s.experts + 1) * 4), active.reserve((s.experts + 1) * 4);
    act.reserve(n * s.width * 4), out.reserve(n * s.hidden * 4), y.reserve(host.size() * 4);
    counters.reserve((1 + (s.hidden + kcu::kMoeDownCombineTile - 1) / kcu::kMoeDownCombineTile) * 4);
    kcu::fill_zero(counters.data(), counters.size());
  }
};

kcu::MoeRouteParams route_params(const Shape& s, const Layer& l, Step& st) {
  kcu::MoeRouteParams route;
  route.x = st.x.as<float>(), route.router = l.router.data(), route.hidden = s.hidden;
  route.rows = st.rows, route.num_experts = s.experts, route.top_k = s.top_k, route.norm_topk_prob = true;
  route.experts = st.ids.as<int32_t>(), route.weights = st.weights.as<float>();
  route.logits_scratch = st.logits.as<float>();
  return route;
}

void run_route(const Shape& s, const Layer& l, Step& st, cudaStream_t stream) {
  kcu::launch_moe_route(route_params(s, l, st), stream);
  kcu::launch_moe_group({st.ids.as<int32_t>(), st.rows * s.top_k, s.experts, st.offsets.as<int32_t>(),
                         st.order.as<int32_t>(), st.active.as<int32_t>()},
                        stream);
}

kcu::MoeGroupedParams grouped(const Shape& s, const Layer& l, Step& st, bool gate_up) {
  kcu::MoeGroupedParams g;
  g.offsets = st.offsets.as<int32_t>(), g.order = st.order.as<int32_t>(), g.active = st.active.as<int32_t>();
  g.num_experts = s.experts, g.top_k = s.top_k, g.num_choices = st.rows * s.top_k, g.max_rows_per_expert = st.rows;
  g.aligned16 = true;
  const auto* t = l.table.as<const void*>();
  if (gate_up) {
    g.first = t, g.second = t + s.experts, g.in_features = s.hidden, g.out_features = s.width;
    g.x = st.x.as<float>(), g.y = st.act.as<float>();
  } else {
    g.first = t + 2 * s.experts, g.second = nullptr, g.in_features = s.width, g.out_features = s.hidden;
    g.x = st.act.as<float>(), g.y = st.out.as<float>();
  }
  return g;
}

void run_block(const Shape& s, const Layer& l, Step& st, cudaStream_t stream) {
  run_route(s, l, st, stream);
  kcu::launch_moe_gate_up(grouped(s, l, st, true), stream);
  kcu::launch_moe_down(grouped(s, l, st, false), stream);
  kcu::MoeCombineParams c;
  c.expert_out = st.out.as<float>(), c.weights = st.weights.as<float>();
  c.rows = st.rows, c.top_k = s.top_k, c.hidden = s.hidden, c.y = st.y.as<float>();
  kcu::launch_moe_combine(c, stream);
}

// The small-step path (moe_kernels.h, kMoeFusedMaxRows): route_group, gate_up_stream, down_combine.
void run_route_group(const Shape& s, const Layer& l, Step& st, cudaStream_t stream) {
  kcu::MoeFusedRouteParams p;
  p.route = route_params(s, l, st);
  p.offsets = st.offsets.as<int32_t>(), p.order = st.order.as<int32_t>(), p.active = st.active.as<int32_t>();
  p.counter = st.counters.as<int32_t>();
  kcu::launch_moe_route_group(p, stream);
}

void run_block_fused(const Shape& s, const Layer& l, Step& st, cudaStream_t stream) {
  run_route_group(s, l, st, stream);
  kcu::launch_moe_gate_up_stream(grouped(s, l, st, true), stream);
  kcu::MoeDownCombineParams d;
  d.down = grouped(s, l, st, false);
  d.combine.weights = st.weights.as<float>();
  d.combine.rows = st.rows, d.combine.top_k = s.top_k, d.combine.hidden = s.hidden, d.combine.y = st.y.as<float>();
  d.tile_counters = st.counters.as<int32_t>() + 1;
  kcu::launch_moe_down_combine(d, stream);
}

}  // namespace

int main(int argc, char** argv) try {
  Shape s;
  int reps = 20;
  std::vector<int64_t> rows_list = {1, 2, 4, 8, 16, 32, 64, 128, 512, 1024};
  CLI::App app{"One mixture-of-experts block on CUDA vs the bytes of its selected experts", "bench_moe_cuda"};
  app.add_option("--hidden", s.hidden, "Hidden size (2048)")->check(CLI::Range(int64_t{8}, int64_t{1} << 16));
  app.add_option("--width", s.width, "Expert width (768)")->check(CLI::Range(int64_t{8}, int64_t{1} << 16));
  app.add_option("--experts", s.experts, "Experts (128)")->check(CLI::Range(1, kcu::kMoeMaxExperts));
  app.add_option("--top-k", s.top_k, "Experts per token (8)")->check(CLI::Range(1, kcu::kMoeMaxTopK));
  app.add_option("--rows", rows_list, "Step rows (1,2,4,8,16,32,64,128,512,1024)")->delimiter(',');
  app.add_option("--reps", reps, "Timed repetitions, median reported (20)")->check(CLI::Range(1, 100000));
  bench::parse_or_exit(app, argc, argv);
  if (s.top_k > s.experts) throw std::runtime_error("--top-k exceeds --experts");
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  const double bandwidth = bench::copy_bandwidth(stream);
  kcu::DeviceBuffer flush(size_t{256} << 20);
  std::mt19937 rng(1);
  const Layer layer(s, rng);
  const double expert_bytes = 3.0 * s.width * s.hidden * 2, router_bytes = 2.0 * s.experts * s.hidden;
  std::printf("{\"copy_bandwidth_bytes_s\": %.4g}\n", bandwidth);
  std::string table =
      "| rows | distinct experts | block us | bytes bound us | % of bound | route+group us | gate/up us (% of its "
      "bound) | down us (% of its bound) | expert TFLOP/s (x as hi + lo: 2x on the tensor cores) | small-step path "
      "block us (% of bound) | its route_group us |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const int64_t rows : rows_list) {
    Step step(s, rows, rng);
    const double t = bench::timed([&] { run_block(s, layer, step, stream); }, flush, reps, stream);
    // The phases alone, each from a cold L2 (the routing of the last block run stays in place).
    const double t_route = bench::timed([&] { run_route(s, layer, step, stream); }, flush, reps, stream);
    const double t_gate_up =
        bench::timed([&] { kcu::launch_moe_gate_up(grouped(s, layer, step, true), stream); }, flush, reps, stream);
    const double t_down =
        bench::timed([&] { kcu::launch_moe_down(grouped(s, layer, step, false), stream); }, flush, reps, stream);
    // The small-step path on the same step (its routing is the same bits), from a cold L2 too.
    double t_fused = 0, t_route_group = 0;
    if (rows <= kcu::kMoeFusedMaxRows && s.experts <= kcu::kMoeFusedMaxExperts) {
      t_fused = bench::timed([&] { run_block_fused(s, layer, step, stream); }, flush, reps, stream);
      t_route_group = bench::timed([&] { run_route_group(s, layer, step, stream); }, flush, reps, stream);
    }
    double fused_diff = -1;  // max |fused - general| / max |general| over the step's outputs (a sanity check)
    if (t_fused > 0) {
      const size_t n = static_cast<size_t>(rows * s.hidden);
      std::vector<float> general(n), fused(n);
      run_block(s, layer, step, stream);
      CUDA_CHECK(cudaStreamSynchronize(stream));
      kcu::copy_to_host(general.data(), step.y.data(), n * 4);
      run_block_fused(s, layer, step, stream);
      CUDA_CHECK(cudaStreamSynchronize(stream));
      kcu::copy_to_host(fused.data(), step.y.data(), n * 4);
      double scale = 0, diff = 0;
      for (size_t i = 0; i < n; ++i) {
        scale = std::max(scale, std::fabs(double(general[i])));
        diff = std::max(diff, std::fabs(double(fused[i]) - general[i]));
      }
      fused_diff = diff / std::max(scale, 1e-30);
      std::printf("{\"rows\": %lld, \"fused_vs_general_max_rel_diff\": %.3g}\n", static_cast<long long>(rows),
                  fused_diff);
    }
    int32_t distinct = 0;
    kcu::copy_to_host(&distinct, step.active.as<int32_t>() + s.experts, 4);
    const double bound = (router_bytes + distinct * expert_bytes) / bandwidth;
    const double gate_up_bound = distinct * expert_bytes * 2 / 3 / bandwidth;
    const double down_bound = distinct * expert_bytes / 3 / bandwidth;
    const double tflops = 2.0 * rows * s.top_k * 3.0 * s.width * s.hidden / t / 1e12;
    std::printf("{\"rows\": %lld, \"distinct_experts\": %d, \"block_us\": %.2f, \"bound_us\": %.2f, "
                "\"pct_of_bound\": %.1f, \"route_group_us\": %.2f, \"gate_up_us\": %.2f, \"gate_up_bound_us\": %.2f, "
                "\"down_us\": %.2f, \"down_bound_us\": %.2f, \"expert_tflops\": %.2f, \"fused_block_us\": %.2f, "
                "\"fused_pct_of_bound\": %.1f, \"route_group_us\": %.2f}\n",
                static_cast<long long>(rows), distinct, t * 1e6, bound * 1e6, bound / t * 100, t_route * 1e6,
                t_gate_up * 1e6, gate_up_bound * 1e6, t_down * 1e6, down_bound * 1e6, tflops, t_fused * 1e6,
                t_fused > 0 ? bound / t_fused * 100 : 0.0, t_route_group * 1e6);
    char line[400];
    std::snprintf(line, sizeof line,
                  "| %lld | %d | %.1f | %.1f | %.0f%% | %.1f | %.1f (%.0f%%) | %.1f (%.0f%%) | %.2f |",
                  static_cast<long long>(rows), distinct, t * 1e6, bound * 1e6, bound / t * 100, t_route * 1e6,
                  t_gate_up * 1e6, gate_up_bound / t_gate_up * 100, t_down * 1e6, down_bound / t_down * 100, tflops);
    table += line;
    if (t_fused > 0) {
      std::snprintf(line, sizeof line, " %.1f (%.0f%%) | %.1f |\n", t_fused * 1e6, bound / t_fused * 100,
                    t_route_group * 1e6);
    } else {
      std::snprintf(line, sizeof line, " - | - |\n");
    }
    table += line;
  }
  std::printf("\ncopy bandwidth %.2f TB/s; hidden %lld, width %lld, %d experts, top %d\n\n%s", bandwidth / 1e12,
              static_cast<long long>(s.hidden), static_cast<long long>(s.width), s.experts, s.top_k, table.c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_moe_cuda: %s\n", e.what());
  return 1;
}
