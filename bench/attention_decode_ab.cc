// Single-thread AVX2 decode attention, the generic tiled path against the small-head_dim decode path
// (paged_attention_avx2_path with Avx2DecodePath::kGeneric / kSmallHeadDim), alternated round by round in
// one process. One sequence of --cached + 1 keys, bf16 (or f32) KV in page-size-16 pages, the KV of
// --layers layers (so, as in a model's forward, it comes from L3 rather than L1/L2), calling thread's
// CPU time (preemption by neighbours does not count). Shapes: head_dim 32 with 8 q / 4 KV heads and
// head_dim 64 with 4 / 2 (the 6.8M models of bench/cpu_peer), or --shapes "D:H:KV,...".
//
//   bench_attention_decode_ab [--rounds 15] [--calls 200] [--cached 981] [--layers 6] [--f32]
//                             [--shapes 32:8:4,64:4:2]
// Prints per round and shape the microseconds per layer call of each path, then medians and the
// hd-first / hd-second ratios per path (the first shape over the second).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench_cli.h"
#include "bench_util.h"
#include "kernels/cpu/paged_attention.h"
#include "platform/cpu_info.h"

using namespace spindle;
using namespace spindle::kernels::cpu;

namespace {

struct Shape {
  int head_dim, heads, kv_heads;
};

struct Layer {
  std::vector<uint8_t> k, v;
};

struct Setup {
  Shape shape;
  DType dtype;
  int num_pages = 0;
  std::vector<Layer> layers;
  std::vector<int32_t> table;
  std::vector<float> q, out;
  StepSequence seq;

  Setup(Shape sh, DType dt, int cached, int num_layers, uint32_t seed) : shape(sh), dtype(dt) {
    const int page = 16, total = cached + 1;
    num_pages = (total + page - 1) / page;
    for (int i = 0; i < num_pages; ++i) table.push_back(i);  // a fresh pool hands pages out in order
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
    const int64_t row = int64_t{sh.kv_heads} * sh.head_dim;
    for (int li = 0; li < num_layers; ++li) {
      Layer layer;
      const size_t bytes = size_t(num_pages) * page * row * dtype_size(dt);
      layer.k.assign(bytes, 0);
      layer.v.assign(bytes, 0);
      std::vector<float> k(total * row), v(total * row);
      for (auto& x : k) x = uni(rng);
      for (auto& x : v) x = uni(rng);
      StepSequence all;
      all.num_new_tokens = total;
      all.num_pages = num_pages;
      KvGeometry kv;
      kv.num_kv_heads = sh.kv_heads;
      kv.head_dim = sh.head_dim;
      kv.page_size = page;
      kv.dtype = dt;
      kv.num_pages = num_pages;
      KvWriteParams w{k.data(), v.data(), layer.k.data(), layer.v.data(), kv, nullptr, nullptr, std::span(&all, 1),
                      table.data()};
      write_kv_pages(w);
      layers.push_back(std::move(layer));
    }
    seq.query_offset = 0;
    seq.num_new_tokens = 1;
    seq.num_cached_tokens = cached;
    seq.page_table_offset = 0;
    seq.num_pages = num_pages;
    q.resize(int64_t{sh.heads} * sh.head_dim);
    for (auto& x : q) x = uni(rng);
    out.assign(q.size(), 0.0f);
  }

  PagedAttentionParams params(int layer) {
    PagedAttentionParams p;
    p.q = q.data();
    p.out = out.data();
    p.k_pages = layers[layer].k.data();
    p.v_pages = layers[layer].v.data();
    p.kv.dtype = dtype;
    p.kv.num_pages = num_pages;
    p.kv.page_size = 16;
    p.num_heads = shape.heads;
    p.kv.num_kv_heads = shape.kv_heads;
    p.kv.head_dim = shape.head_dim;
    p.scale = 1.0f / std::sqrt(float(shape.head_dim));
    p.sequences = std::span(&seq, 1);
    p.page_tables = table.data();
    p.pool = nullptr;
    return p;
  }

  // Microseconds of thread CPU time per layer call, `calls` calls cycling over the layers.
  double time_us(Avx2DecodePath path, int calls) {
    const int n = static_cast<int>(layers.size());
    for (int i = 0; i < n; ++i) paged_attention_avx2_path(params(i), path);  // warm
    const double t0 = bench::thread_cpu_s();
    for (int i = 0; i < calls; ++i) paged_attention_avx2_path(params(i % n), path);
    return (bench::thread_cpu_s() - t0) / calls * 1e6;
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 15, calls = 200, cached = 981, num_layers = 6;
  DType dtype = DType::kBF16;
  std::vector<Shape> shapes = {{32, 8, 4}, {64, 4, 2}};
  bool f32 = false;
  std::vector<std::string> shape_list;
  CLI::App app{"Single-thread AVX2 decode attention: the generic path against the small-head_dim path",
               "bench_attention_decode_ab"};
  app.add_option("--rounds", rounds, "Alternated rounds (15)")->check(CLI::Range(1, 100000));
  app.add_option("--calls", calls, "Layer calls timed per cell (200)")->check(CLI::Range(1, 1000000));
  app.add_option("--cached", cached, "Cached keys per sequence (981)")->check(CLI::Range(1, 1 << 20));
  app.add_option("--layers", num_layers, "Layers' KV cycled through (6)")->check(CLI::Range(1, 1024));
  app.add_flag("--f32", f32, "f32 KV instead of bf16");
  app.add_option("--shapes", shape_list, "HEAD_DIM:HEADS:KV_HEADS,... (32:8:4,64:4:2)")
      ->delimiter(',')
      ->check(CLI::Validator(
          [](const std::string& item) -> std::string {
            Shape sh{};
            char tail = 0;
            if (std::sscanf(item.c_str(), "%d:%d:%d%c", &sh.head_dim, &sh.heads, &sh.kv_heads, &tail) != 3)
              return "'" + item + "' is not HEAD_DIM:HEADS:KV_HEADS";
            if (sh.head_dim < 32 || sh.head_dim > 256 || sh.head_dim % 16 != 0)
              return "'" + item + "': HEAD_DIM must be a multiple of 16 in [32, 256]";
            if (sh.heads < 1 || sh.kv_heads < 1 || sh.heads % sh.kv_heads != 0)
              return "'" + item + "': HEADS must be a positive multiple of KV_HEADS";
            return {};
          },
          "SHAPE"));
  bench::parse_or_exit(app, argc, argv);
  if (f32) dtype = DType::kF32;
  if (!shape_list.empty()) {
    shapes.clear();
    for (const std::string& item : shape_list) {
      Shape sh{};
      std::sscanf(item.c_str(), "%d:%d:%d", &sh.head_dim, &sh.heads, &sh.kv_heads);  // checked by the parser
      shapes.push_back(sh);
    }
  }
  const CpuInfo cpu = detect_cpu_info();
  if (!cpu.has("avx2") || !cpu.has("fma") || !cpu.has("f16c")) {
    std::printf("skipped: cpu lacks avx2/fma/f16c\n");
    return 0;
  }
  std::vector<Setup> setups;
  for (size_t i = 0; i < shapes.size(); ++i) setups.emplace_back(shapes[i], dtype, cached, num_layers, 100 + i);

  // The two paths must agree before their times mean anything.
  for (auto& st : setups) {
    paged_attention_avx2_path(st.params(0), Avx2DecodePath::kGeneric);
    const std::vector<float> generic = st.out;
    paged_attention_avx2_path(st.params(0), Avx2DecodePath::kSmallHeadDim);
    double worst = 0;
    for (size_t i = 0; i < generic.size(); ++i) worst = std::max(worst, double(std::abs(generic[i] - st.out[i])));
    std::printf("hd%d %d/%d: max |generic - small| = %.2e\n", st.shape.head_dim, st.shape.heads, st.shape.kv_heads,
                worst);
    if (!(worst < 1e-4)) return 1;
  }

  const Avx2DecodePath paths[2] = {Avx2DecodePath::kGeneric, Avx2DecodePath::kSmallHeadDim};
  const char* names[2] = {"generic", "small"};
  std::vector<std::vector<std::vector<double>>> us(setups.size(), std::vector<std::vector<double>>(2));
  std::printf("%s KV, 1 x (%d + 1) keys, %d layers' KV, %d calls per cell, thread CPU us per layer call\n",
              dtype == DType::kBF16 ? "bf16" : "f32", cached, num_layers, calls);
  for (int round = 0; round < rounds; ++round) {
    std::printf("round %2d:", round);
    for (int k = 0; k < 2; ++k) {
      const int pi = (round + k) % 2;  // alternate which path goes first
      for (size_t si = 0; si < setups.size(); ++si) {
        const double t = setups[si].time_us(paths[pi], calls);
        us[si][pi].push_back(t);
        std::printf("  hd%d %s %.2f", setups[si].shape.head_dim, names[pi], t);
      }
    }
    std::printf("\n");
  }
  std::printf("medians (us per layer call):\n");
  for (size_t si = 0; si < setups.size(); ++si) {
    const double g = median(us[si][0]), sm = median(us[si][1]);
    std::vector<double> ratio;
    for (int r = 0; r < rounds; ++r) ratio.push_back(us[si][1][r] / us[si][0][r]);
    std::printf(
        "  hd%d %d/%d heads: generic %.2f  small %.2f  small/generic %.3f (per-round median %.3f, range %.3f-%.3f)\n",
        setups[si].shape.head_dim, setups[si].shape.heads, setups[si].shape.kv_heads, g, sm, sm / g, median(ratio),
        *std::min_element(ratio.begin(), ratio.end()), *std::max_element(ratio.begin(), ratio.end()));
  }
  if (setups.size() >= 2) {
    for (int pi = 0; pi < 2; ++pi) {
      std::vector<double> ratio;
      for (int r = 0; r < rounds; ++r) ratio.push_back(us[0][pi][r] / us[1][pi][r]);
      std::printf("  hd%d / hd%d, %s: %.3f (median of per-round ratios; range %.3f-%.3f)\n", setups[0].shape.head_dim,
                  setups[1].shape.head_dim, names[pi], median(ratio), *std::min_element(ratio.begin(), ratio.end()),
                  *std::max_element(ratio.begin(), ratio.end()));
    }
  }
  return 0;
}
