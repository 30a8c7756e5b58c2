// The thread pool's hand-off on decode-sized products (m = 1, bf16, the direct kernel): one
// thread, two threads with sleeping workers (spin 0, the default) and two threads whose workers
// poll for SPIN microseconds (ThreadPool::set_spin_us), alternated round by round in one run so
// that a shared machine's load hits every configuration alike. Shapes: Llama-3.2-1B's q/o and
// down (weights streamed from memory: copies >= 512 MiB) and the 6.8M bench models' gate/up,
// down and LM head (copies ~12 MiB in all: they stay in L3, as that model's forward does).
// Prints the median and best of ROUNDS per configuration: microseconds per product and GB/s of W.
// usage: bench_pool_ab [ROUNDS=15] [SPIN=200]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <vector>

#include "bench_cli.h"
#include "bench_util.h"
#include "kernels/cpu/linear.h"
#include "util/half.h"
#include "util/thread_pool.h"

using namespace spindle;
using namespace spindle::kernels::cpu;

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  int rounds = 15, spin = 200;
  CLI::App app{"The thread pool's hand-off on m = 1 products: 1 thread, 2 sleeping, 2 polling", "bench_pool_ab"};
  app.add_option("rounds", rounds, "Alternated rounds (15)")->check(CLI::Range(1, 100000));
  app.add_option("spin", spin, "Microseconds the polling workers spin (200)")->check(CLI::Range(1, 1000000));
  bench::parse_or_exit(app, argc, argv);
  struct Shape {
    const char* name;
    int64_t out, in;
    bool cached;
  };
  const Shape shapes[] = {{"1B q/o", 2048, 2048, false},   {"1B down", 2048, 8192, false},
                          {"6.8M gate/up", 1536, 256, true}, {"6.8M down", 256, 768, true},
                          {"6.8M lm_head", 8192, 256, true}};
  ThreadPool one(1), two_sleep(2), two_spin(2);
  two_sleep.set_spin_us(0);
  two_spin.set_spin_us(spin);
  struct Config {
    const char* name;
    ThreadPool* pool;
  };
  char spin_name[32];
  std::snprintf(spin_name, sizeof spin_name, "2 threads, spin %d", spin);
  const Config configs[] = {{"1 thread", &one}, {"2 threads, spin 0", &two_sleep}, {spin_name, &two_spin}};
  std::printf("read bandwidth (2 threads): %.1f GB/s; %d rounds\n", bench::memory_read_gbps(two_sleep), rounds);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uni(-0.05f, 0.05f);
  for (const Shape& s : shapes) {
    const size_t elems = size_t(s.out) * s.in, bytes = elems * 2;
    const size_t copies = std::max<size_t>(2, (s.cached ? size_t(12) << 20 : size_t(512) << 20) / bytes);
    std::vector<std::vector<uint16_t>> w(copies, std::vector<uint16_t>(elems));
    for (auto& c : w)
      for (auto& e : c) e = float_to_bf16_bits(uni(rng));
    std::vector<std::unique_ptr<LinearKernel>> kernels;
    for (auto& c : w) kernels.push_back(make_linear_kernel({c.data(), DType::kBF16, s.out, s.in}));
    std::vector<float> x(s.in), y(s.out);
    for (auto& v : x) v = uni(rng);
    const int reps = s.cached ? 20 : 1;  // sweeps per timing
    std::vector<std::vector<double>> t(std::size(configs));
    for (int r = 0; r < rounds; ++r) {
      for (size_t c = 0; c < std::size(configs); ++c) {
        for (auto& k : kernels) k->forward(x.data(), 1, y.data(), configs[c].pool);  // warm
        const double t0 = bench::now_s();
        for (int q = 0; q < reps; ++q)
          for (auto& k : kernels) k->forward(x.data(), 1, y.data(), configs[c].pool);
        t[c].push_back((bench::now_s() - t0) / (reps * double(copies)));
      }
    }
    std::printf("%-13s [%lld x %lld], %zu copies:\n", s.name, (long long)s.out, (long long)s.in, copies);
    for (size_t c = 0; c < std::size(configs); ++c) {
      std::sort(t[c].begin(), t[c].end());
      const double med = t[c][t[c].size() / 2], best = t[c][0];
      std::printf("  %-20s median %8.1f us (%5.1f GB/s), best %8.1f us (%5.1f GB/s)\n", configs[c].name, 1e6 * med,
                  bytes / med / 1e9, 1e6 * best, bytes / best / 1e9);
    }
  }
  std::printf("load at end: see /proc/loadavg\n");
}
