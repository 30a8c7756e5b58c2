// CPU linear layers (kernels/cpu/linear.h) on Llama-3.2-1B shapes (bf16 weights), as ratios
// measured in one run:
//   decode (m = 1, 16): GB/s of weights read per product vs this machine's streaming read
//       bandwidth (best of two measurements). Each shape gets enough copies of its weight
//       (>= 512 MiB together) that a sweep over them reads from memory, not from cache, as a real
//       forward over all layers does.
//   rows sweep: every kernel over m = 1 .. 256 on one shape, weights from memory, as GB/s of W and
//       % of the read bandwidth, with the fastest per m (a server measures this per shape at start:
//       kernels/cpu/select; "auto" here is make_linear_kernel's unmeasured priority choice).
//   shapes sweep (--shapes-only runs it alone): every 1B shape at m = 1, 2, 4, 8, 16, 32, 64 for
//       the direct kernels and "auto" (exact, and with bf16 activations): GB/s of W, % of the read
//       bandwidth, GFLOP/s, and which kernel "auto" ran at that m.
//   prefill (m = 512): GFLOP/s of each kernel vs oneDNN's matmul of the same shape measured in
//       the same run: f32 (on an f32 copy of the weight: the yardstick of our f32 path) and bf16
//       (bf16 x bf16 -> f32, where the CPU has a real implementation).
//   --small-m: the decode/verify rows m = 1..8 and 16 of "auto" over whole models' linear layers
//       (all layers' products in forward order, bf16): kjv-tiny (8 layers + LM head, 28 MB: the
//       set a real forward cycles through, L3-sized), the Llama-3.2-1B layer shapes (5 layers,
//       608 MB: from memory) and one kjv-tiny o_proj (288 KiB, cache-hot: the arithmetic rate
//       alone). Per m: time per forward (best and median of the reps), ratio to m = 1, GB/s of W,
//       % of the read bandwidth, GFLOP/s. --small-m-cpu: the same timed by the calling thread's
//       CPU time (with SPINDLE_NUM_THREADS=1 the whole product: robust to other processes' turns
//       on a shared machine, not to their use of the memory bus). A second argument names the
//       kernel instead of "auto" (e.g. `--small-m-cpu avx512_bf16`).
// Direct kernels and "auto" use ThreadPool::global(); oneDNN uses its own OpenMP threads.
#include <dnnl.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench_cli.h"
#include "bench_util.h"
#include "kernels/cpu/linear.h"
#include "platform/cpu_info.h"
#include "util/half.h"
#include "util/thread_pool.h"

using namespace spindle;
using namespace spindle::kernels::cpu;
using spindle::bench::best_time;
using spindle::bench::memory_read_gbps;

namespace {

// "auto": the registry's priority choice (make_linear_kernel); else the named kernel.
std::unique_ptr<spindle::kernels::cpu::LinearKernel> make_bench_kernel(const std::string& name,
                                                                       const spindle::kernels::cpu::LinearWeight& w,
                                                                       const spindle::kernels::cpu::LinearOptions& o = {}) {
  if (name == "auto") return spindle::kernels::cpu::make_linear_kernel(w, o);
  return spindle::kernels::cpu::make_named_linear_kernel(name, w, o);
}

}  // namespace

namespace {

struct Shape {
  const char* name;
  int64_t out, in;
};
constexpr Shape kShapes[] = {
    {"q/o_proj", 2048, 2048}, {"k/v_proj", 512, 2048},    {"gate/up", 8192, 2048},
    {"down", 2048, 8192},     {"lm_head", 128256, 2048},
};
constexpr size_t kMinSweepBytes = size_t{512} << 20;

std::vector<float> random_floats(size_t n, float lo, float hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uni(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = uni(rng);
  return v;
}

// A bf16 buffer filled by repeating a random 64 Ki-element block (fast to make; the values do
// not matter to the speed, only that they are finite and not all equal).
std::vector<uint16_t> bf16_weights(size_t n, unsigned seed) {
  const std::vector<float> block = random_floats(65536, -0.05f, 0.05f, seed);
  std::vector<uint16_t> w(n);
  for (size_t i = 0; i < n; ++i) w[i] = float_to_bf16_bits(block[i & 65535]);
  return w;
}

// oneDNN matmul rate for y[m, out] = x . W^T with W [out, in] of `dt` (strides {1, in}): GFLOP/s,
// or 0 when oneDNN has no non-reference implementation.
double onednn_rate(dnnl::memory::data_type dt, int64_t m, int64_t out, int64_t in, std::string* impl) {
  using namespace dnnl;
  engine eng(engine::kind::cpu, 0);
  stream st(eng);
  memory::desc a_md({m, in}, dt, {in, 1});
  memory::desc b_md({in, out}, dt, {1, in});
  memory::desc c_md({m, out}, memory::data_type::f32, {out, 1});
  try {
    matmul::primitive_desc pd(matmul::desc(a_md, b_md, c_md), eng);
    *impl = pd.impl_info_str();
    if (impl->find("ref") != std::string::npos) return 0;
    memory a(a_md, eng), b(b_md, eng), c(c_md, eng);
    std::memset(a.get_data_handle(), 0x3c, a_md.get_size());  // 0x3c3c: finite in bf16 and f32
    std::memset(b.get_data_handle(), 0x3c, b_md.get_size());
    matmul prim(pd);
    const double t = best_time(2, [&] {
      prim.execute(st, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
      st.wait();
    });
    return 2.0 * m * out * double(in) / t / 1e9;
  } catch (const dnnl::error& e) {
    *impl = e.what();
    return 0;
  }
}

// One model's linear layers: `layers` copies of the per-layer shapes, then `tail` (the LM head).
struct ModelSet {
  const char* name;
  std::vector<Shape> layer;
  int layers;
  std::vector<Shape> tail;
};

void small_m_sweep(ThreadPool& pool, double mem_gbps, bool cpu_time, const std::string& kernel) {
  const auto clock = [cpu_time] { return cpu_time ? spindle::bench::thread_cpu_s() : spindle::bench::now_s(); };
  const ModelSet sets[] = {
      {"kjv-tiny (8 layers + head, L3-sized)",
       {{"qkv", 640, 384}, {"o", 384, 384}, {"gate_up", 2048, 384}, {"down", 384, 1024}},
       8,
       {{"lm_head", 4096, 384}}},
      {"1B layers x5 (from memory)",
       {{"qkv", 3072, 2048}, {"o", 2048, 2048}, {"gate_up", 16384, 2048}, {"down", 2048, 8192}},
       5,
       {}},
      {"kjv-tiny o_proj (cache-hot)", {{"o", 384, 384}}, 1, {}},
  };
  const int64_t ms[] = {1, 2, 3, 4, 5, 6, 7, 8, 16};
  const std::vector<float> x = random_floats(16 * 16384, -1, 1, 7);
  std::vector<float> y(16 * 16384);
  for (const ModelSet& set : sets) {
    std::vector<Shape> shapes;
    for (int l = 0; l < set.layers; ++l) shapes.insert(shapes.end(), set.layer.begin(), set.layer.end());
    shapes.insert(shapes.end(), set.tail.begin(), set.tail.end());
    std::vector<std::vector<uint16_t>> weights;
    std::vector<std::unique_ptr<LinearKernel>> kernels;
    size_t bytes = 0;
    double macs_per_row = 0;
    for (size_t i = 0; i < shapes.size(); ++i) {
      const Shape& s = shapes[i];
      weights.push_back(bf16_weights(size_t(s.out) * s.in, unsigned(i + 1)));
      kernels.push_back(make_bench_kernel(kernel, {weights.back().data(), DType::kBF16, s.out, s.in}));
      bytes += size_t(s.out) * s.in * 2;
      macs_per_row += double(s.out) * s.in;
    }
    std::printf("\nsmall m: %s, %zu products, %.1f MB of bf16 W, kernel %s, %s\n", set.name, shapes.size(),
                bytes / 1e6, kernels[0]->name(), cpu_time ? "calling thread's CPU time" : "wall time");
    std::printf("  %-4s %10s %10s %8s %8s %8s %9s\n", "m", "best ms", "median ms", "x m=1", "GB/s W", "%BW", "GFLOP/s");
    const auto forward = [&](int64_t m) {
      for (size_t i = 0; i < shapes.size(); ++i) kernels[i]->forward(x.data(), m, y.data(), &pool);
    };
    // Enough reps for ~0.3 s per m at m = 1; interleaved so that load changes hit every m alike.
    const double t1 = best_time(1, [&] { forward(1); });
    const int reps = std::clamp(int(0.3 / t1), 5, 200);
    std::vector<std::vector<double>> times(std::size(ms));
    for (int r = 0; r < reps; ++r) {
      for (size_t i = 0; i < std::size(ms); ++i) {
        forward(ms[i]);  // warm
        const double t0 = clock();
        forward(ms[i]);
        times[i].push_back(clock() - t0);
      }
    }
    double base = 0;
    for (size_t i = 0; i < std::size(ms); ++i) {
      std::vector<double>& t = times[i];
      std::sort(t.begin(), t.end());
      const double best = t.front(), median = t[t.size() / 2];
      if (i == 0) base = median;
      std::printf("  %-4lld %10.4f %10.4f %7.2fx %8.1f %7.0f%% %9.1f\n", (long long)ms[i], best * 1e3, median * 1e3,
                  median / base, bytes / median / 1e9, 100 * bytes / median / 1e9 / mem_gbps,
                  2.0 * macs_per_row * ms[i] / median / 1e9);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  // usage: bench_linear [--sweep-only | --shapes-only | --prefill-only | --small-m [KERNEL] | --small-m-cpu [KERNEL]]
  //   (--sweep-only: the rows sweep alone; --shapes-only: the shapes sweep alone; --prefill-only:
  //   the m = 512 table alone; KERNEL: a linear_kernel_names() entry instead of "auto")
  bool sweep_only = false, shapes_only = false, prefill_only = false, small_m_wall = false, small_m_cpu = false;
  std::string small_m_kernel = "auto";
  CLI::App app{"CPU linear layers: decode bandwidth, rows and shapes sweeps, prefill rate", "bench_linear"};
  CLI::Option* modes[] = {
      app.add_flag("--sweep-only", sweep_only, "The rows sweep alone"),
      app.add_flag("--shapes-only", shapes_only, "The shapes sweep alone"),
      app.add_flag("--prefill-only", prefill_only, "The m = 512 table alone"),
      app.add_flag("--small-m", small_m_wall, "Rows 1..8 and 16 over whole models' layers, wall time"),
      app.add_flag("--small-m-cpu", small_m_cpu, "As --small-m, timed by the calling thread's CPU time"),
  };
  for (CLI::Option* a : modes)
    for (CLI::Option* b : modes)
      if (a != b) a->excludes(b);
  app.add_option("kernel", small_m_kernel, "With --small-m(-cpu): the kernel instead of auto")
      ->check(CLI::IsMember([] {
        auto names = linear_kernel_names();
        names.push_back("auto");
        return names;
      }()));
  bench::parse_or_exit(app, argc, argv);
  const bool small_m = small_m_cpu || small_m_wall;
  if (small_m_kernel != "auto" && !small_m) {
    std::fprintf(stderr, "bench_linear: a KERNEL argument ('%s') needs --small-m or --small-m-cpu\n",
                 small_m_kernel.c_str());
    return 2;
  }
  const CpuInfo cpu = detect_cpu_info();
  ThreadPool& pool = ThreadPool::global();
  std::printf("cpu: %s, %d threads in ThreadPool::global()\n", cpu.model_name.c_str(), pool.num_threads());
  // Measured twice, back to back, and the larger one is the yardstick: on a shared VM a
  // neighbour's burst can halve one measurement.
  const double mem_gbps = std::max(memory_read_gbps(pool), memory_read_gbps(pool));
  std::printf("memory read bandwidth (1 GiB streaming sum, all threads, best of 2x5): %.1f GB/s\n", mem_gbps);
  if (small_m) {
    small_m_sweep(pool, mem_gbps, small_m_cpu, small_m_kernel);
    return 0;
  }

  std::vector<std::string> direct;
  for (const char* name : {"avx2", "avx512", "avx512_bf16", "amx", "amx_bf16"}) {
    std::vector<uint16_t> probe(64);
    if (linear_kernel_unsupported_reason(name, {probe.data(), DType::kBF16, 8, 8}).empty()) direct.push_back(name);
  }
  direct.push_back("auto");

  // The shapes sweep: each 1B shape, m = 1 .. 64, direct kernels and auto (both precisions).
  if (!sweep_only && !prefill_only) {
    const int64_t ms[] = {1, 2, 4, 8, 16, 32, 64};
    LinearOptions bf16_ok;
    bf16_ok.allow_bf16_activations = true;
    std::printf(
        "\nshapes sweep: bf16 weights streamed from memory; per m: GB/s of W (%% of the read bandwidth), "
        "GFLOP/s; 'auto' runs the kernel named in [] at that m\n");
    for (const Shape& s : kShapes) {
      const size_t elems = size_t(s.out) * s.in, bytes = elems * 2;
      const size_t copies = std::max<size_t>(2, (kMinSweepBytes + bytes - 1) / bytes);
      std::vector<std::vector<uint16_t>> weights;
      for (size_t c = 0; c < copies; ++c) weights.push_back(bf16_weights(elems, unsigned(c + 1)));
      const std::vector<float> x = random_floats(64 * s.in, -1, 1, 7);
      std::vector<float> y(64 * s.out);
      std::printf("  %s [%lld x %lld], %zu copies\n", s.name, (long long)s.out, (long long)s.in, copies);
      struct Row {
        std::string name, label;
        LinearOptions options;
      };
      std::vector<Row> rows;
      for (const std::string& name : direct)
        if (name != "auto") rows.push_back({name, name, {}});
      rows.push_back({"auto", "auto (exact)", {}});
      rows.push_back({"auto", "auto (bf16 act.)", bf16_ok});
      for (const Row& row : rows) {
        std::vector<std::unique_ptr<LinearKernel>> kernels;
        for (auto& w : weights)
          kernels.push_back(make_bench_kernel(row.name, {w.data(), DType::kBF16, s.out, s.in}, row.options));
        std::printf("    %-18s", row.label.c_str());
        for (int64_t m : ms) {
          const double t = best_time(2, [&] {
            for (auto& k : kernels) k->forward(x.data(), m, y.data(), &pool);
          });
          const double gbps = double(bytes) * copies / t / 1e9;
          const double gflops = 2.0 * m * double(elems) * copies / t / 1e9;
          std::string ran;
          if (row.name == "auto") ran = kernels[0]->name();  // the row table "kernel:min_rows,..."
          std::printf(" m=%-2lld %6.1f GB/s (%3.0f%%) %7.1f GF%s", (long long)m, gbps, 100 * gbps / mem_gbps, gflops,
                      ran.empty() ? "" : (" [" + ran + "]").c_str());
        }
        std::printf("\n");
      }
    }
  }
  if (shapes_only) return 0;

  for (DType dtype : {DType::kBF16, DType::kF32}) {
    if (sweep_only || prefill_only) break;
    const size_t esize = dtype_size(dtype);
    std::printf("\ndecode: %s weights, GB/s of weights read per product and %% of the read bandwidth\n",
                std::string(dtype_name(dtype)).c_str());
    std::printf("  %-10s %-8s %-6s %-22s %10s %8s %10s %8s\n", "shape", "out", "in", "kernel", "m=1 GB/s", "m=1 %BW",
                "m=16 GB/s", "m=16 %BW");
    for (const Shape& s : kShapes) {
      const size_t elems = size_t(s.out) * s.in, bytes = elems * esize;
      const size_t copies = std::max<size_t>(2, (kMinSweepBytes + bytes - 1) / bytes);
      std::vector<std::vector<uint16_t>> weights;  // f32 weights: two bf16 halves per element
      for (size_t c = 0; c < copies; ++c) weights.push_back(bf16_weights(elems * esize / 2, unsigned(c + 1)));
      const std::vector<float> x = random_floats(16 * s.in, -1, 1, 7);
      std::vector<float> y(16 * s.out);
      for (const std::string& name : direct) {
        if (!linear_kernel_unsupported_reason(name, {weights[0].data(), dtype, s.out, s.in}).empty()) continue;
        std::vector<std::unique_ptr<LinearKernel>> kernels;
        for (auto& w : weights) kernels.push_back(make_named_linear_kernel(name, {w.data(), dtype, s.out, s.in}));
        double gbps[2];
        const int64_t ms[2] = {1, 16};
        for (int i = 0; i < 2; ++i) {
          const double t = best_time(3, [&] {
            for (auto& k : kernels) k->forward(x.data(), ms[i], y.data(), &pool);
          });
          gbps[i] = double(bytes) * copies / t / 1e9;
        }
        std::printf("  %-10s %-8lld %-6lld %-22s %10.1f %7.1f%% %10.1f %7.1f%%\n", s.name, (long long)s.out,
                    (long long)s.in, kernels[0]->name(), gbps[0], 100 * gbps[0] / mem_gbps, gbps[1],
                    100 * gbps[1] / mem_gbps);
      }
    }
  }

  // The policy's evidence: every kernel over m (gate/up shape, bf16, weights streamed from memory),
  // as GB/s of W read per product and % of the read bandwidth (a product at the bandwidth bound
  // reads W once at the memory's rate, whatever m). "fastest" names the best named kernel at each m
  // (what kernels/cpu/select measures per shape at a server's start).
  if (!prefill_only) {
    const Shape s = kShapes[2];
    const size_t elems = size_t(s.out) * s.in;
    std::vector<std::vector<uint16_t>> weights;
    for (size_t c = 0; c < 8; ++c) weights.push_back(bf16_weights(elems, unsigned(c + 1)));
    const int64_t ms[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 128, 256};
    const std::vector<float> x = random_floats(256 * s.in, -1, 1, 7);
    std::vector<float> y(256 * s.out);
    std::printf("\nrows sweep (%s [%lld x %lld] bf16, %zu copies = %.0f MiB): GB/s of W, %% of read bandwidth\n",
                s.name, (long long)s.out, (long long)s.in, weights.size(), elems * 2.0 * weights.size() / (1 << 20));
    std::printf("  %-28s", "kernel");
    for (int64_t m : ms) std::printf(" %5s%-3lld", "m=", (long long)m);
    std::printf("\n");
    std::vector<std::string> names;
    for (const char* name : {"avx2", "avx512", "avx512_bf16", "amx", "amx_bf16", "onednn_f32"}) {
      if (linear_kernel_unsupported_reason(name, {weights[0].data(), DType::kBF16, s.out, s.in}).empty())
        names.push_back(name);
      else
        std::printf("  %-28s unavailable: %s\n", name,
                    linear_kernel_unsupported_reason(name, {weights[0].data(), DType::kBF16, s.out, s.in}).c_str());
    }
    names.push_back("auto");
    std::vector<double> best(std::size(ms), 0.0);
    std::vector<std::string> best_name(std::size(ms));
    for (const std::string& name : names) {
      std::vector<std::unique_ptr<LinearKernel>> kernels;
      for (auto& w : weights)
        kernels.push_back(make_named_linear_kernel(name, {w.data(), DType::kBF16, s.out, s.in}));
      std::vector<double> gbps;
      for (int64_t m : ms) {
        const double t = best_time(2, [&] {
          for (auto& k : kernels) k->forward(x.data(), m, y.data(), &pool);
        });
        gbps.push_back(2.0 * elems * weights.size() / t / 1e9);
      }
      std::printf("  %-28s", kernels[0]->name());
      for (double g : gbps) std::printf(" %8.1f", g);
      std::printf("  GB/s\n  %-28s", "");
      for (double g : gbps) std::printf(" %7.0f%%", 100 * g / mem_gbps);
      std::printf("  of BW\n");
      if (name == "auto") continue;
      for (size_t i = 0; i < gbps.size(); ++i) {
        if (gbps[i] > best[i]) best[i] = gbps[i], best_name[i] = name;
      }
    }
    std::printf("  %-28s", "fastest");
    for (const auto& n : best_name) std::printf(" %8s", n.c_str());
    std::printf("\n");
  }

  if (sweep_only) return 0;
  const int64_t m = 512;
  std::printf("\nprefill: m = %lld, GFLOP/s (bf16 weights unless noted)\n", (long long)m);
  for (const Shape& s : kShapes) {
    if (prefill_only && s.out > 100000) continue;  // the LM head: one row in a prefill
    const size_t elems = size_t(s.out) * s.in;
    const std::vector<uint16_t> w = bf16_weights(elems, 1);
    const std::vector<float> x = random_floats(m * s.in, -1, 1, 7);
    std::vector<float> y(m * s.out);
    const double flops = 2.0 * m * s.out * double(s.in);
    std::string impl32, impl16;
    const double ref32 = onednn_rate(dnnl::memory::data_type::f32, m, s.out, s.in, &impl32);
    const double ref16 = onednn_rate(dnnl::memory::data_type::bf16, m, s.out, s.in, &impl16);
    std::printf("  %s [%lld x %lld]: oneDNN f32 matmul (f32 weights) %.1f GFLOP/s (%s); oneDNN bf16 matmul ",
                s.name, (long long)s.out, (long long)s.in, ref32, impl32.c_str());
    if (ref16 > 0) {
      std::printf("%.1f GFLOP/s (%s)\n", ref16, impl16.c_str());
    } else {
      std::printf("unavailable (%s)\n", impl16.c_str());
    }
    LinearOptions bf16_ok;
    bf16_ok.allow_bf16_activations = true;
    struct Row {
      const char* name;
      LinearOptions options;
    };
    for (const Row& row : {Row{"onednn_f32", {}}, Row{"onednn_bf16", bf16_ok}, Row{"amx_bf16", bf16_ok},
                           Row{"auto", {}}, Row{"auto", bf16_ok}}) {
      const LinearWeight weight{w.data(), DType::kBF16, s.out, s.in};
      const std::string reason = linear_kernel_unsupported_reason(row.name, weight, row.options);
      if (!reason.empty()) {
        std::printf("    %-28s unavailable: %s\n", row.name, reason.c_str());
        continue;
      }
      auto kernel = make_bench_kernel(row.name, weight, row.options);
      const double t = best_time(2, [&] { kernel->forward(x.data(), m, y.data(), &pool); });
      const double gflops = flops / t / 1e9;
      std::printf("    %-28s %8.1f GFLOP/s  %5.1f%% of oneDNN f32", kernel->name(), gflops, 100 * gflops / ref32);
      if (ref16 > 0) std::printf("  %5.1f%% of oneDNN bf16", 100 * gflops / ref16);
      std::printf("\n");
    }
  }
  return 0;
}
