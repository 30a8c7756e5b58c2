// A batch-1 mixture-of-experts step's expert products on the CPU (Qwen3-30B-A3B's shape: 128
// experts, top 8, hidden 2048, width 768; gate/up joined as one [2F, H] Q4_K weight, down [H, F]
// Q4_K or Q6_K), the variants alternated step by step in one run, so that the machine's load
// falls on each alike:
//   arena    every expert's weights repacked into a HugePageArena (2 MiB pages; what CpuOps
//            does for weights below 2 MiB), each expert's products on one thread, experts side by
//            side (cpu_moe.cc's batch-1 path)
//   own      the same weights each in their own allocation (operator new below 2 MiB: 4 KiB pages)
//   arena2, own2  the two again: the first variant of a step ran slower in an earlier order
//            (own first: +17% for the arena, vs +5.5% in this order), so each is measured twice
// Each step picks top_k distinct experts at random (a set of --sets layers' experts, so that a
// step's experts are rarely still in the L3 from an earlier step); the x row is random. Prints per
// variant the median step time and the GB/s of the repacked bytes read, next to the streaming read
// bandwidth of bench_util.h (measured before and after). Threads: ThreadPool::global().
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench_cli.h"
#include "bench_util.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant_linear.h"
#include "util/huge_page_allocator.h"
#include "util/thread_pool.h"

namespace spindle {
namespace {

namespace kc = kernels::cpu;

struct Args {
  int experts = 128, top_k = 8, hidden = 2048, width = 768, steps = 400, sets = 4;
  std::string down_type = "Q4_K";
};

// Random valid GGUF blocks of `type` for [n, k]: random quants, d (and dmin) set to small fp16s.
std::vector<uint8_t> random_file(kc::QuantType type, int64_t n, int64_t k, std::mt19937& rng) {
  const int64_t blocks = n * k / kc::quant_file_block_elements(type), bb = kc::quant_file_block_bytes(type);
  std::vector<uint8_t> f(static_cast<size_t>(blocks * bb));
  for (auto& b : f) b = static_cast<uint8_t>(rng());
  const uint16_t small = 0x1400;  // fp16 2^-10
  for (int64_t b = 0; b < blocks; ++b) {
    uint8_t* p = f.data() + b * bb;
    if (type == kc::QuantType::kQ6_K) {
      std::memcpy(p + 208, &small, 2);
    } else {
      std::memcpy(p, &small, 2);
      std::memcpy(p + 2, &small, 2);
    }
  }
  return f;
}

struct Expert {
  kc::PackedQuantWeight gate_up, down;
};

// The current path of cpu_moe.cc at batch 1: experts side by side, each product on one thread.
void run_side_by_side(const std::vector<const Expert*>& chosen, const float* x, int64_t h, int64_t f,
                      std::vector<float>& gu, std::vector<float>& act, std::vector<float>& out, ThreadPool& pool) {
  pool.parallel_for(static_cast<int64_t>(chosen.size()), [&](int64_t i) {
    const Expert& e = *chosen[static_cast<size_t>(i)];
    float* g = gu.data() + i * 2 * f;
    kc::quant_linear_forward(kc::QuantKernelIsa::kAvx512Vnni, e.gate_up, x, 1, g, nullptr);
    kc::silu_mul(g, g + f, 2 * f, act.data() + i * f, 1, f);
    kc::quant_linear_forward(kc::QuantKernelIsa::kAvx512Vnni, e.down, act.data() + i * f, 1, out.data() + i * h,
                             nullptr);
  });
}

int run(const Args& a) {
  ThreadPool& pool = ThreadPool::global();
  const auto down_type = a.down_type == "Q6_K" ? kc::QuantType::kQ6_K : kc::QuantType::kQ4_K;
  const int64_t h = a.hidden, f = a.width, n_exp = int64_t{a.experts} * a.sets;
  std::mt19937 rng(1);
  // One set of files per expert slot reused (random bytes; repacking is what the variants differ in).
  const std::vector<uint8_t> gu_file = random_file(kc::QuantType::kQ4_K, 2 * f, h, rng);
  const std::vector<uint8_t> down_file = random_file(down_type, h, f, rng);
  HugePageArena arena;
  std::vector<Expert> own(static_cast<size_t>(n_exp)), in_arena(static_cast<size_t>(n_exp));
  for (int64_t e = 0; e < n_exp; ++e) {
    const auto repack = [&](HugePageArena* ar, Expert& x) {
      x.gate_up = kc::repack_quant_weight(kc::QuantType::kQ4_K, gu_file.data(), int64_t(gu_file.size()), 2 * f, h,
                                          nullptr, ar);
      x.down = kc::repack_quant_weight(down_type, down_file.data(), int64_t(down_file.size()), h, f, nullptr, ar);
    };
    repack(nullptr, own[static_cast<size_t>(e)]);
    repack(&arena, in_arena[static_cast<size_t>(e)]);
  }
  const double step_bytes =
      double(a.top_k) * double(own[0].gate_up.num_bytes() + own[0].down.num_bytes());
  std::printf("experts %lld (%d sets of %d), top %d, hidden %lld, width %lld, down %s: %.2f MB of repacked bytes a step\n",
              static_cast<long long>(n_exp), a.sets, a.experts, a.top_k, static_cast<long long>(h),
              static_cast<long long>(f), a.down_type.c_str(), step_bytes / 1e6);
  std::printf("threads %d; read bandwidth before: %.1f GB/s\n", pool.num_threads(), bench::memory_read_gbps(pool));

  std::vector<float> x(static_cast<size_t>(h)), gu(static_cast<size_t>(a.top_k * 2 * f)),
      act(static_cast<size_t>(a.top_k * f)), out(static_cast<size_t>(a.top_k * h));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : x) v = normal(rng);
  struct Variant {
    const char* name;
    std::function<void(const std::vector<int64_t>&)> fn;
    std::vector<double> times, cpu;  // wall and the calling thread's CPU time per step
  };
  const auto pick = [&](const std::vector<Expert>& set, const std::vector<int64_t>& ids) {
    std::vector<const Expert*> chosen;
    for (int64_t id : ids) chosen.push_back(&set[static_cast<size_t>(id)]);
    return chosen;
  };
  std::vector<Variant> variants = {
      {"arena", [&](const std::vector<int64_t>& ids) { run_side_by_side(pick(in_arena, ids), x.data(), h, f, gu, act, out, pool); }, {}},
      {"own", [&](const std::vector<int64_t>& ids) { run_side_by_side(pick(own, ids), x.data(), h, f, gu, act, out, pool); }, {}},
      {"arena2", [&](const std::vector<int64_t>& ids) { run_side_by_side(pick(in_arena, ids), x.data(), h, f, gu, act, out, pool); }, {}},
      {"own2", [&](const std::vector<int64_t>& ids) { run_side_by_side(pick(own, ids), x.data(), h, f, gu, act, out, pool); }, {}},
  };

  std::vector<int64_t> all(static_cast<size_t>(n_exp));
  for (int64_t i = 0; i < n_exp; ++i) all[static_cast<size_t>(i)] = i;
  for (int s = 0; s < a.steps; ++s) {
    for (Variant& v : variants) {
      std::shuffle(all.begin(), all.end(), rng);
      const std::vector<int64_t> ids(all.begin(), all.begin() + a.top_k);
      const double t0 = bench::now_s(), c0 = bench::thread_cpu_s();
      v.fn(ids);
      if (s > 0) v.times.push_back(bench::now_s() - t0), v.cpu.push_back(bench::thread_cpu_s() - c0);
    }
  }
  const double bw = bench::memory_read_gbps(pool);
  std::printf("read bandwidth after: %.1f GB/s\n", bw);
  for (const auto& r : bench::memory_read_gbps_all(pool)) std::printf("  %s %.1f (cpu %.1f)", r.reader, r.gbps, r.cpu_gbps);
  std::printf("\n");
  double base = 0, cbase = 0;
  for (Variant& v : variants) {
    std::sort(v.times.begin(), v.times.end());
    std::sort(v.cpu.begin(), v.cpu.end());
    const double med = v.times[v.times.size() / 2], cmed = v.cpu[v.cpu.size() / 2];
    if (base == 0) base = med, cbase = cmed;
    std::printf("%-11s wall median %.3f ms/step (p10 %.3f, p90 %.3f), %.1f GB/s, %.3fx of %s; calling thread CPU median "
                "%.3f ms (%.1f GB/s), %.3fx\n",
                v.name, med * 1e3, v.times[v.times.size() / 10] * 1e3, v.times[v.times.size() * 9 / 10] * 1e3,
                step_bytes / med / 1e9, base / med, variants[0].name, cmed * 1e3, step_bytes / cmed / 1e9, cbase / cmed);
  }
  return 0;
}

}  // namespace
}  // namespace spindle

int main(int argc, char** argv) {
  spindle::Args a;
  CLI::App app{"MoE batch-1 expert products: variants alternated"};
  app.add_option("--experts", a.experts);
  app.add_option("--top-k", a.top_k);
  app.add_option("--steps", a.steps);
  app.add_option("--sets", a.sets, "Layers' worth of experts to pick from (4)");
  app.add_option("--down-type", a.down_type, "Q4_K or Q6_K");
  CLI11_PARSE(app, argc, argv);
  return spindle::run(a);
}
