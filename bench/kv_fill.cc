// KV fill: start with auto capacity, fill the whole pool with long sequences through the model
// forward, and report the peak RSS against the usable memory. Targets (DESIGN.md section 3):
// the peak never goes over usable memory, and the KV pool is at least 85% of what would fit.
//
// The stack is built as serve builds it (cli/serving_stack.cc): machine facts (usable memory read
// first) -> resolved flags -> load_cpu_model (mmap) -> attention backends -> KV plan with the
// profiling forward (startup::measure_workspace_bytes) -> PagePool with auto capacity. Attention
// backends are the highest-priority ones available here, without serve's child-process validation
// (this binary is not `spindle`, and the KV contents of random tokens do not matter here).
// Tokenizer and engine are left out: they hold a few MiB.
//
// Fill: sequences of --max-model-len random token ids (the last one shorter, so that the pool
// ends with no free page), each with a real BlockTable from the pool's allocator, prefilled in
// steps of at most --max-num-batched-tokens tokens over as many sequences as fit (chunked prefill,
// one logit row per finished sequence), as the scheduler forms them. Every page is written by
// every layer, so the whole pool becomes resident.
//
// Reported: usable memory and its bound, the plan, the pool, tokens stored, peak RSS (getrusage
// ru_maxrss and VmHWM from /proc/self/status), the memory cgroup's own peak when there is one,
// peak RSS / usable, and two "what would fit" ratios:
//   planned:   KV pool bytes / (usable - weights - workspace - reserve)   (the planner's budget)
//   empirical: KV pool bytes / (usable - (peak RSS - KV pool bytes))      (everything but the KV
//              measured, so the denominator is the KV that would really have fit)
//
// On a machine with much free memory the auto pool is tens of GiB; bench/kv_fill.sh runs this in a
// memory cgroup with a small limit so the planner sees a small budget.
//
// usage: bench_kv_fill [MODEL_DIR (models/kjv-tiny)] [serve's KV and attention flags] [--seed N]
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <sys/resource.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "config/kv_config.h"
#include "startup/kv_planning.h"
#include "config/server_config.h"
#include "engine/runner.h"
#include "startup/workspace_probe.h"
#include "kv/block_table.h"
#include "kv/page_pool.h"
#include "model/model.h"
#include "platform/device_info.h"
#include "platform/memory_info.h"
#include "util/error.h"
#include "util/thread_pool.h"

using namespace spindle;

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

double mib(uint64_t bytes) { return static_cast<double>(bytes) / kMiB; }

// A "Key:   N kB" line of /proc/self/status, in bytes (0 when absent).
uint64_t proc_status_bytes(const std::string& key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) {
      std::istringstream fields(line.substr(key.size() + 1));
      uint64_t kb = 0;
      fields >> kb;
      return kb * 1024;
    }
  }
  return 0;
}

uint64_t max_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<uint64_t>(usage.ru_maxrss) * 1024;  // KiB on Linux
}

// The memory cgroup's own peak (v1 memory.max_usage_in_bytes, v2 memory.peak), when readable.
std::optional<uint64_t> cgroup_peak_bytes(const MemoryInfo& m) {
  std::string file;
  if (m.cgroup_version == "v1") file = "/sys/fs/cgroup/memory" + m.cgroup_path + "/memory.max_usage_in_bytes";
  if (m.cgroup_version == "v2") file = "/sys/fs/cgroup" + m.cgroup_path + "/memory.peak";
  if (file.empty()) return std::nullopt;
  std::ifstream in(file);
  uint64_t value = 0;
  if (!(in >> value)) return std::nullopt;
  return value;
}

std::string cgroup_text(const MemoryInfo& m) {
  if (m.cgroup_version == "none") return "no memory cgroup";
  return fmt::format("cgroup {} {}: limit {}, usage {}", m.cgroup_version, m.cgroup_path,
                     m.cgroup_limit_bytes ? fmt::format("{:.1f} MiB", mib(*m.cgroup_limit_bytes)) : "none",
                     m.cgroup_usage_bytes ? fmt::format("{:.1f} MiB", mib(*m.cgroup_usage_bytes)) : "?");
}

struct Sequence {
  explicit Sequence(kv::PageAllocator& allocator, int length) : table(allocator), length(length) {}
  kv::BlockTable table;
  int length = 0;
  int done = 0;  // tokens prefilled
};

}  // namespace

int main(int argc, char** argv) {
  std::string model_dir = std::string(SPINDLE_SOURCE_DIR) + "/models/kjv-tiny";
  config::ServerConfig flags;
  uint64_t seed = 1;
  CLI::App app("Fill an auto-sized KV pool through the model forward; peak RSS against usable memory");
  app.add_option("model_dir", model_dir, "Hugging Face model folder (models/kjv-tiny)");
  app.add_option("--kv-cache-dtype", flags.kv_cache_dtype, "KV cache dtype: auto (bf16), bf16 or f32");
  app.add_option("--page-size", flags.page_size, "Tokens per KV page (16)");
  app.add_option("--threads", flags.num_threads, "Worker threads (one per usable core)");
  app.add_option("--attention-backend", flags.attention_backend, "Attention backend for both phases (auto)");
  app.add_option("--seed", seed, "Seed of the random token ids (1)");
  config::add_kv_flags(app, flags.kv);
  CLI11_PARSE(app, argc, argv);

  try {
    const double t_start = bench::now_s();
    const uint64_t rss_at_start = proc_status_bytes("VmRSS");
    // As serve: the machine first (usable memory before the weights are mapped).
    const DeviceInfo device = detect_device_info();
    const ModelConfig model_config = load_model_config(model_dir);
    const config::ResolvedConfig resolved = config::resolve(flags, device, model_config);
    SPINDLE_CHECK(resolved.kv.dp_size == 1, "bench_kv_fill fills one data-parallel rank (--dp-size 1)");
    ThreadPool pool(resolved.num_threads);
    ModelOptions model_options;
    model_options.pool = &pool;
    const std::unique_ptr<Transformer> model = load_cpu_model(model_dir, model_options);
    const startup::UnvalidatedBackends backends = startup::make_unvalidated_backends(resolved, device, &pool);
    engine::Runner runner(*model, *backends.prefill, *backends.decode);
    const kv::KvLayout layout = startup::kv_layout_for(model_config, resolved.kv_dtype, resolved.page_size);
    const double t_plan0 = bench::now_s();
    const kv::KvPlan plan = startup::plan_kv_cache(
        resolved.kv, layout, model_config, device.memory, model->weight_bytes(),
        startup::make_workspace_probe(runner, resolved.kv_dtype, resolved.page_size, resolved.kv.max_model_len));
    const double t_plan = bench::now_s() - t_plan0;
    kv::PagePool kv_pool(layout, plan.num_pages_per_rank);
    runner.bind_kv_caches(kv_pool.layer_caches());
    const uint64_t rss_before_fill = proc_status_bytes("VmRSS");

    const MemoryInfo& mem = device.memory;
    fmt::print("bench_kv_fill: {} ({} layers, hidden {}, {} KV heads x {}), {} threads, attention {} / {}\n",
               model_dir, model_config.num_hidden_layers, model_config.hidden_size, model_config.num_key_value_heads,
               model_config.head_dim, resolved.num_threads, backends.prefill_name, backends.decode_name);
    fmt::print("usable memory      {:10.1f} MiB  bound: {} (MemAvailable {:.1f} MiB; {})\n", mib(plan.usable_bytes),
               plan.usable_bound, mib(mem.mem_available_bytes), cgroup_text(mem));
    fmt::print("  - weights        {:10.1f} MiB  (loaded, mmap)\n", mib(plan.weight_bytes));
    fmt::print("  - workspace      {:10.1f} MiB  ({} at {} tokens, {:.2f} s)\n", mib(plan.workspace_bytes),
               plan.workspace_source, plan.max_num_batched_tokens, t_plan);
    fmt::print("  - reserve        {:10.1f} MiB\n", mib(plan.reserve_bytes));
    fmt::print("  = budget         {:10.1f} MiB; x mem fraction {} = {:.1f} MiB for KV\n", mib(plan.budget_bytes),
               plan.mem_fraction, mib(plan.kv_budget_bytes_per_rank));
    fmt::print("KV pool            {:10.1f} MiB  {} pages of {} tokens = {} tokens, {} B/token, {} KV, "
               "max model len {}\n",
               mib(kv_pool.num_bytes()), kv_pool.num_pages(), layout.page_size, plan.max_total_tokens,
               plan.kv_bytes_per_token, dtype_name(layout.dtype), plan.max_model_len);
    fmt::print("RSS at start {:.1f} MiB, before the fill {:.1f} MiB (pool mapped lazily)\n", mib(rss_at_start),
               mib(rss_before_fill));
    std::fflush(stdout);

    // Sequences of max_model_len; the last takes the pages that remain.
    kv::PageAllocator& allocator = kv_pool.allocator(0);
    const int page_size = layout.page_size;
    const int max_len = resolved.kv.max_model_len;
    const int pages_per_seq = (max_len + page_size - 1) / page_size;
    std::vector<std::unique_ptr<Sequence>> seqs;
    int64_t total_tokens = 0;
    for (int remaining = allocator.num_pages(); remaining > 0;) {
      const int pages = std::min(pages_per_seq, remaining);
      const int length = std::min(max_len, pages * page_size);
      seqs.push_back(std::make_unique<Sequence>(allocator, length));
      total_tokens += length;
      remaining -= pages;
    }

    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int32_t> token_dist(0, model_config.vocab_size - 1);
    const int step_tokens = resolved.kv.max_num_batched_tokens;
    std::vector<TokenId> chunk_ids;
    StepBatch batch;
    size_t next = 0;
    int64_t stored = 0;
    int64_t steps = 0;
    int64_t next_report = total_tokens / 10;
    const double t_fill0 = bench::now_s();
    while (next < seqs.size()) {
      batch.clear();
      int budget = step_tokens;
      for (size_t i = next; i < seqs.size() && budget > 0; ++i) {
        Sequence& s = *seqs[i];
        const int chunk = std::min(s.length - s.done, budget);
        SPINDLE_CHECK(s.table.extend(chunk), "the pool ran out of pages at {} of {} tokens", stored, total_tokens);
        chunk_ids.resize(static_cast<size_t>(chunk));
        for (auto& id : chunk_ids) id = token_dist(rng);
        const bool last = s.done + chunk == s.length;
        batch.add_sequence(chunk_ids.data(), chunk, s.done, s.table.pages().data(), s.table.num_pages(), last ? 1 : 0);
        s.done += chunk;
        budget -= chunk;
      }
      runner.run(batch);
      stored += batch.num_tokens();
      ++steps;
      while (next < seqs.size() && seqs[next]->done == seqs[next]->length) ++next;
      if (stored >= next_report || next == seqs.size()) {
        const double t = bench::now_s() - t_fill0;
        const MemoryInfo now = read_memory_info();
        fmt::print("  {:9} / {} tokens ({:5.1f}%), {:6.1f} s, {:7.0f} tok/s, VmRSS {:7.1f} MiB{}\n", stored,
                   total_tokens, 100.0 * stored / total_tokens, t, stored / t, mib(proc_status_bytes("VmRSS")),
                   now.cgroup_usage_bytes ? fmt::format(", cgroup usage {:.1f} MiB", mib(*now.cgroup_usage_bytes))
                                          : "");
        std::fflush(stdout);
        next_report += total_tokens / 10;
      }
    }
    const double t_fill = bench::now_s() - t_fill0;

    std::vector<const kv::BlockTable*> tables;
    for (const auto& s : seqs) tables.push_back(&s->table);
    kv::check_integrity(allocator, tables);
    SPINDLE_CHECK(allocator.num_free_pages() == 0, "{} pages left free after the fill", allocator.num_free_pages());

    const uint64_t peak_rusage = max_rss_bytes();
    const uint64_t peak_hwm = proc_status_bytes("VmHWM");
    const uint64_t peak = std::max(peak_rusage, peak_hwm);
    const uint64_t usable = plan.usable_bytes;
    const uint64_t kv_bytes = kv_pool.num_bytes();
    const uint64_t planned_fit = plan.budget_bytes;  // usable - weights - workspace - reserve
    const uint64_t non_kv = peak > kv_bytes ? peak - kv_bytes : 0;
    const double planned_ratio = static_cast<double>(kv_bytes) / static_cast<double>(planned_fit);
    const double empirical_ratio = static_cast<double>(kv_bytes) / static_cast<double>(usable - std::min(usable, non_kv));
    const MemoryInfo end = read_memory_info();
    const std::optional<uint64_t> cg_peak = cgroup_peak_bytes(end);

    fmt::print("fill: {} sequences, {} tokens stored in {} pages ({} free), {} steps of <= {} tokens, {:.1f} s "
               "({:.0f} tok/s); total {:.1f} s\n",
               seqs.size(), stored, allocator.num_in_use_pages(), allocator.num_free_pages(), steps, step_tokens,
               t_fill, stored / t_fill, bench::now_s() - t_start);
    fmt::print("peak RSS           {:10.1f} MiB  (ru_maxrss {:.1f} MiB, VmHWM {:.1f} MiB)\n", mib(peak),
               mib(peak_rusage), mib(peak_hwm));
    fmt::print("  of which KV pool {:10.1f} MiB; everything else {:.1f} MiB (planned: weights {:.1f} + workspace {:.1f}; "
               "reserve {:.1f})\n",
               mib(kv_bytes), mib(non_kv), mib(plan.weight_bytes), mib(plan.workspace_bytes), mib(plan.reserve_bytes));
    fmt::print("  RSS now: anonymous {:.1f} MiB (KV, activations, heap, kernel scratch), file {:.1f} MiB (weights, "
               "code)\n",
               mib(proc_status_bytes("RssAnon")), mib(proc_status_bytes("RssFile")));
    if (cg_peak) {
      fmt::print("cgroup peak        {:10.1f} MiB  ({} {}; limit {})\n", mib(*cg_peak), end.cgroup_version,
                 end.cgroup_path,
                 end.cgroup_limit_bytes ? fmt::format("{:.1f} MiB", mib(*end.cgroup_limit_bytes)) : "none");
    }
    fmt::print("peak RSS / usable  {:10.3f}  ({:.1f} / {:.1f} MiB)  target < 1: {}\n",
               static_cast<double>(peak) / static_cast<double>(usable), mib(peak), mib(usable),
               peak < usable ? "PASS" : "FAIL");
    fmt::print("KV / planned fit   {:10.3f}  ({:.1f} / {:.1f} MiB = usable - weights - workspace - reserve)  "
               "target >= 0.85: {}\n",
               planned_ratio, mib(kv_bytes), mib(planned_fit), planned_ratio >= 0.85 ? "PASS" : "FAIL");
    fmt::print("KV / measured fit  {:10.3f}  ({:.1f} / {:.1f} MiB = usable - measured non-KV peak)\n",
               empirical_ratio, mib(kv_bytes), mib(usable - std::min(usable, non_kv)));
    return peak < usable && planned_ratio >= 0.85 ? 0 : 2;
  } catch (const Error& e) {
    fmt::print(stderr, "bench_kv_fill: {}\n", e.message());
    return 1;
  }
}
