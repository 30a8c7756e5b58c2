// Quantized CPU linear kernels (kernels/cpu/quant_linear.h) on Llama-3.2-1B shapes, as ratios
// measured in one run:
//   read bandwidth: every reader of bench_util.h's probe (the bound is the fastest).
//   decode (m = --rows, default 1, 4, 16): per type, kernel and shape, GB/s of repacked weight bytes
//       read per product (x quantized inside the timed call) and % of the read bound; each shape
//       gets enough copies of its weight (>= --min-mib together) that a sweep over them reads from
//       memory, as a forward over all layers does. The bf16 "auto" kernel of kernels/cpu/linear.h
//       on the same shapes is the yardstick (Spindle's bf16 decode).
//   prefill (m = --prefill-rows, default 512): GFLOP/s-equivalent (2 m n k / time), next to the
//       bf16 "auto" kernel with bf16 activations allowed (Spindle's bf16 prefill).
// Built with -DSPINDLE_BENCH_QUANT_NO_ONEDNN it needs no oneDNN (for machines without libdnnl):
// the bf16 yardstick is then the direct kernel "auto" takes for a 1-row bf16 decode on a CPU without
// AVX512-BF16 dots (linear_slice_avx512, else linear_slice_avx2: f32 activations) at the decode
// rows only. Kernels this CPU cannot run are listed with the reason. Threads: ThreadPool::global()
// (SPINDLE_NUM_THREADS).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bench_cli.h"
#include "bench_util.h"
#if defined(SPINDLE_BENCH_QUANT_NO_ONEDNN)
#include "kernels/cpu/linear_isa.h"
#else
#include "kernels/cpu/linear.h"
#endif
#include "kernels/cpu/quant_linear.h"
#include "platform/cpu_info.h"
#include "util/thread_pool.h"

using namespace spindle;
using namespace spindle::kernels::cpu;

namespace {

struct Shape {
  const char* name;
  int64_t n, k;
};
constexpr Shape kShapes[] = {
    {"q/o_proj", 2048, 2048}, {"k/v_proj", 512, 2048}, {"gate/up", 8192, 2048}, {"down", 2048, 8192}};
constexpr Shape kLmHead{"lm_head", 128256, 2048};
// Qwen3-30B-A3B's expert products (hidden 2048, expert width 768): gate or up, and down.
constexpr Shape kExpertShapes[] = {{"expert gate/up", 768, 2048}, {"expert down", 2048, 768}};

// Random GGUF blocks: uniform bytes, fp16 scale fields finite (exponent 8..14).
std::vector<uint8_t> random_file(QuantType type, int64_t n, int64_t k, std::mt19937& rng) {
  const int64_t bb = quant_file_block_bytes(type), blocks = n * k / quant_file_block_elements(type);
  std::vector<uint8_t> data(static_cast<size_t>(blocks * bb));
  for (size_t i = 0; i < data.size(); i += 4) {
    const uint32_t r = rng();
    std::memcpy(data.data() + i, &r, std::min<size_t>(4, data.size() - i));
  }
  std::vector<int> fp16_at;
  switch (type) {
    case QuantType::kQ8_0:
    case QuantType::kQ4_0:
    case QuantType::kQ5_0: fp16_at = {0}; break;
    case QuantType::kQ5_1:
    case QuantType::kQ4_K:
    case QuantType::kQ5_K: fp16_at = {0, 2}; break;
    case QuantType::kQ6_K: fp16_at = {208}; break;
  }
  for (int64_t b = 0; b < blocks; ++b)
    for (int at : fp16_at) data[b * bb + at + 1] = static_cast<uint8_t>((8 + rng() % 7) << 2);
  return data;
}

std::vector<float> random_x(int64_t m, int64_t k, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(m * k));
  for (auto& v : x) v = normal(rng);
  return x;
}

struct Options {
  std::vector<std::string> types, isas;
  std::vector<int64_t> rows{1, 4, 16};
  int64_t prefill_rows = 512;
  int reps = 5;
  int64_t min_mib = 384;
  bool lm_head = false;
  bool experts = false;
  bool no_bf16 = false;
  bool cpu_time = false;
};

// Times one sweep of fn over `copies` weights: best of reps (after one warm-up sweep).
double sweep_time(int reps, int64_t copies, const std::function<void(int64_t)>& fn) {
  return bench::best_time(reps, [&] {
    for (int64_t c = 0; c < copies; ++c) fn(c);
  });
}

#if defined(SPINDLE_BENCH_QUANT_NO_ONEDNN)
// The direct bf16 kernel over column slices (multiples of kLinearSliceAlign, 4 per thread).
class DirectBf16 {
 public:
  DirectBf16(const uint16_t* w, int64_t n, int64_t k, bool avx512) : w_(w), n_(n), k_(k), avx512_(avx512) {}
  const char* name() const { return avx512_ ? "avx512 (direct)" : "avx2 (direct)"; }
  void forward(const float* x, int64_t m, float* y, ThreadPool* pool) const {
    const LinearSliceParams p{x, w_, DType::kBF16, nullptr, y, m, n_, k_};
    const int64_t tasks = pool->num_threads() * 4;
    int64_t cols = (n_ + tasks - 1) / tasks;
    cols = (cols + kLinearSliceAlign - 1) / kLinearSliceAlign * kLinearSliceAlign;
    pool->parallel_for((n_ + cols - 1) / cols, [&](int64_t t) {
      const int64_t c0 = t * cols, c1 = std::min(n_, c0 + cols);
      avx512_ ? linear_slice_avx512(p, c0, c1) : linear_slice_avx2(p, c0, c1);
    });
  }

 private:
  const uint16_t* w_;
  int64_t n_, k_;
  bool avx512_;
};
#endif

void bench_bf16(const Options& o, const std::vector<Shape>& shapes, double bound, ThreadPool& pool) {
  std::printf("\n## bf16 yardstick (kernels/cpu/linear.h \"auto\"; prefill with bf16 activations allowed)\n\n");
  std::printf("| shape | n | k | m | kernel | ms | GB/s of W | %% of bound | GFLOP/s |\n|---|---|---|---|---|---|---|---|---|\n");
  std::mt19937 rng(11);
  for (const Shape& s : shapes) {
    const int64_t bytes = s.n * s.k * 2;
    const int64_t copies = std::max<int64_t>(1, (o.min_mib << 20) / bytes);
    std::vector<uint16_t> w(static_cast<size_t>(copies * s.n * s.k));
    for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<uint16_t>(0x3c00 | (rng() & 0x81ff));  // bf16 in ~[-2, 2]
#if defined(SPINDLE_BENCH_QUANT_NO_ONEDNN)
    static const CpuInfo cpu = detect_cpu_info();
    const bool avx512 = cpu.has("avx512f") && cpu.has("avx512bw") && cpu.has("avx512vl");
    std::vector<std::unique_ptr<DirectBf16>> kernels;
    for (int64_t c = 0; c < copies; ++c) kernels.push_back(std::make_unique<DirectBf16>(w.data() + c * s.n * s.k, s.n, s.k, avx512));
#else
    std::vector<std::unique_ptr<LinearKernel>> kernels, prefill;
    for (int64_t c = 0; c < copies; ++c) {
      const LinearWeight lw{w.data() + c * s.n * s.k, DType::kBF16, s.n, s.k};
      kernels.push_back(make_linear_kernel(lw));
      if (c == 0) prefill.push_back(make_linear_kernel(lw, LinearOptions{true}));
    }
#endif
    for (int64_t m : o.rows) {
      const auto x = random_x(m, s.k, rng);
      std::vector<float> y(static_cast<size_t>(m * s.n));
      const double t = sweep_time(o.reps, copies, [&](int64_t c) { kernels[c]->forward(x.data(), m, y.data(), &pool); }) / copies;
      std::printf("| %s | %ld | %ld | %ld | %s | %.3f | %.1f | %.0f%% | %.1f |\n", s.name, long(s.n), long(s.k), long(m),
                  kernels[0]->name(), t * 1e3, bytes / t / 1e9, 100.0 * bytes / t / 1e9 / bound,
                  2.0 * m * s.n * s.k / t / 1e9);
    }
#if !defined(SPINDLE_BENCH_QUANT_NO_ONEDNN)
    if (o.prefill_rows > 0) {
      const int64_t m = o.prefill_rows;
      const auto x = random_x(m, s.k, rng);
      std::vector<float> y(static_cast<size_t>(m * s.n));
      const double t = bench::best_time(std::max(1, o.reps / 2), [&] { prefill[0]->forward(x.data(), m, y.data(), &pool); });
      std::printf("| %s | %ld | %ld | %ld | %s (bf16 x) | %.2f | | | %.1f |\n", s.name, long(s.n), long(s.k), long(m),
                  prefill[0]->name(), t * 1e3, 2.0 * m * s.n * s.k / t / 1e9);
    }
#endif
  }
}

void bench_type(QuantType type, const std::vector<QuantKernelIsa>& isas, const Options& o,
                const std::vector<Shape>& shapes, double bound, ThreadPool& pool) {
  std::printf("\n## %s\n\n", std::string(quant_type_name(type)).c_str());
  std::printf("| shape | n | k | m | kernel | ms | GB/s of W (repacked) | %% of bound | GB/s of file bytes | GFLOP/s |\n"
              "|---|---|---|---|---|---|---|---|---|---|\n");
  std::mt19937 rng(13);
  for (const Shape& s : shapes) {
    const auto file = random_file(type, s.n, s.k, rng);
    const PackedQuantWeight first = repack_quant_weight(type, file.data(), int64_t(file.size()), s.n, s.k, &pool);
    const int64_t bytes = first.num_bytes();
    const int64_t copies = o.cpu_time ? 1 : std::max<int64_t>(1, (o.min_mib << 20) / bytes);
    std::vector<PackedQuantWeight> ws(static_cast<size_t>(copies), first);
    ThreadPool* run_pool = o.cpu_time ? nullptr : &pool;
    for (QuantKernelIsa isa : isas) {
      const char* name = quant_kernel_isa_name(isa).data();
      for (int64_t m : o.rows) {
        const auto x = random_x(m, s.k, rng);
        std::vector<float> y(static_cast<size_t>(m * s.n));
        const auto run = [&](int64_t c) { quant_linear_forward(isa, ws[c], x.data(), m, y.data(), run_pool); };
        const double t = o.cpu_time ? bench::best_cpu_time(o.reps * (m <= 16 ? 20 : 1), [&] { run(0); })
                                    : sweep_time(o.reps, copies, run) / copies;
        std::printf("| %s | %ld | %ld | %ld | %s | %.3f | %.1f | %.0f%% | %.1f | %.1f |\n", s.name, long(s.n), long(s.k),
                    long(m), name, t * 1e3, bytes / t / 1e9, 100.0 * bytes / t / 1e9 / bound,
                    double(file.size()) / t / 1e9, 2.0 * m * s.n * s.k / t / 1e9);
      }
      if (o.prefill_rows > 0) {
        const int64_t m = o.prefill_rows;
        const auto x = random_x(m, s.k, rng);
        std::vector<float> y(static_cast<size_t>(m * s.n));
        const auto run = [&] { quant_linear_forward(isa, ws[0], x.data(), m, y.data(), run_pool); };
        const double t = o.cpu_time ? bench::best_cpu_time(std::max(1, o.reps / 2), run) : bench::best_time(std::max(1, o.reps / 2), run);
        std::printf("| %s | %ld | %ld | %ld | %s | %.2f | | | | %.1f |\n", s.name, long(s.n), long(s.k), long(m), name,
                    t * 1e3, 2.0 * m * s.n * s.k / t / 1e9);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Quantized CPU linear kernels: decode GB/s vs the read bound, prefill GFLOP/s", "bench_quant_linear"};
  app.add_option("--types", o.types, "Weight types (default all: Q8_0 Q4_0 Q5_0 Q5_1 Q4_K Q5_K Q6_K)");
  app.add_option("--isas", o.isas, "Kernels (default every one this CPU runs: avx2 avx_vnni avx512_vnni amx_int8)");
  app.add_option("--rows", o.rows, "Decode row counts")->check(CLI::Range(1, 64));
  app.add_option("--prefill-rows", o.prefill_rows, "Prefill rows (0: no prefill)")->check(CLI::Range(0, 4096));
  app.add_option("--reps", o.reps, "Timed repetitions (best is kept)")->check(CLI::Range(1, 1000));
  app.add_option("--min-mib", o.min_mib, "Weight copies per decode shape, MiB at least")->check(CLI::Range(1, 8192));
  app.add_flag("--lm-head", o.lm_head, "Also the LM head shape (n = 128256, k = 2048)");
  app.add_flag("--experts", o.experts, "Also the Qwen3-30B-A3B expert shapes (768x2048, 2048x768)");
  app.add_flag("--no-bf16", o.no_bf16, "Skip the bf16 yardstick");
  app.add_flag("--cpu-time", o.cpu_time, "One thread, cache-hot weights, timed by its CPU time (per-core rate)");
  bench::parse_or_exit(app, argc, argv);

  const CpuInfo cpu = detect_cpu_info();
  ThreadPool& pool = ThreadPool::global();
  std::printf("# bench_quant_linear: %s, %d threads\n\n", cpu.model_name.c_str(), pool.num_threads());
  std::vector<QuantType> types;
  for (QuantType t : quant_types())
    if (o.types.empty() || std::find(o.types.begin(), o.types.end(), quant_type_name(t)) != o.types.end())
      types.push_back(t);
  std::vector<QuantKernelIsa> isas;
  for (QuantKernelIsa isa : quant_kernel_isas()) {
    if (!o.isas.empty() && std::find(o.isas.begin(), o.isas.end(), quant_kernel_isa_name(isa)) == o.isas.end()) continue;
    const auto reasons = quant_linear_unsupported_reasons(isa, cpu);
    if (reasons.empty()) isas.push_back(isa);
    else std::printf("- %s unavailable: %s\n", quant_kernel_isa_name(isa).data(), fmt::format("{}", fmt::join(reasons, "; ")).c_str());
  }
  double bound = 0;
  if (!o.cpu_time) {
    std::printf("\n## Read bandwidth (1 GiB, %d threads)\n\n| reader | GB/s | GB/s over its CPU time |\n|---|---|---|\n",
                pool.num_threads());
    for (const auto& r : bench::memory_read_gbps_all(pool)) {
      std::printf("| %s | %.1f | %.1f |\n", r.reader, r.gbps, r.cpu_gbps);
      bound = std::max(bound, r.gbps);
    }
    std::printf("\nread bound (fastest reader): %.1f GB/s\n", bound);
  } else {
    std::printf("--cpu-time: 1 thread, cache-hot weights, thread CPU time; %% of bound is meaningless (bound 1 GB/s)\n");
    bound = 1.0;
  }
  std::vector<Shape> shapes(std::begin(kShapes), std::end(kShapes));
  if (o.lm_head) shapes.push_back(kLmHead);
  if (o.experts) shapes.insert(shapes.end(), std::begin(kExpertShapes), std::end(kExpertShapes));
  if (!o.no_bf16 && !o.cpu_time) bench_bf16(o, shapes, bound, pool);
  for (QuantType t : types) bench_type(t, isas, o, shapes, bound, pool);
  if (!o.cpu_time) {
    double again = 0;
    for (const auto& r : bench::memory_read_gbps_all(pool)) again = std::max(again, r.gbps);
    std::printf("\nread bound at the end of the run: %.1f GB/s (start %.1f)\n", again, bound);
  }
  return 0;
}
