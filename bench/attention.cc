// CPU paged-attention throughput, as ratios measured in one run:
//   decode:  GB/s of KV read by each kernel vs this machine's streaming read bandwidth
//            (batch 16, 2048 cached tokens + 1 new, 32 query heads over 8 KV heads, head_dim 128,
//            bf16 KV, page size 16)
//   prefill: GFLOP/s of one causal 2048-token sequence (same heads) vs oneDNN bf16 matmul
//            (2048^3, bf16 x bf16 -> f32); causal FLOPs = 4 * S * S / 2 * head_dim * heads
//   each kernel vs the float64 reference (run on a reduced size, rate-normalized)
//   head_dim sweep: every head_dim of --head-dims (default 32, 48, ..., 256) at one model width
//            (KV heads x head_dim ~= 1024), decode GB/s and prefill GFLOP/s with the same yardsticks
//   --prefill-shapes H/KV/D,...: only one causal prefill of --prefill-tokens (981) per shape and
//            kernel (--kernels NAME,... filters them), best of --reps (20), ms and the ratio to the
//            first shape: the head_dim-32 vs head_dim-64 comparison of issue 15 without the model;
//            with --decode-batch B: B decode rows after --prefill-tokens cached keys instead, over
//            --copies N separate KV pools in turn (N x the KV bytes: from memory, as a model's layers);
//            --cpu-time: those runs on the calling thread alone, timed by its CPU time (a loaded
//            machine's preemption does not count); --kv-dtype fp8_e4m3: FP8 pages (values x / (1/448), every head scale 1/448) instead of bf16
// Every kernel the CPU supports runs on ThreadPool::global() (all usable cores).
#include <dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench_cli.h"
#include "bench_util.h"
#include "kernels/cpu/paged_attention.h"
#include "platform/cpu_info.h"
#include "util/fp8.h"
#include "util/half.h"
#include "util/thread_pool.h"

using namespace spindle;
using namespace spindle::kernels::cpu;
using spindle::bench::best_time;
using spindle::bench::memory_read_gbps;

namespace {

struct MatmulRate {
  double gflops = 0;
  std::string impl;
  int size = 0;
};

// oneDNN matmul n^3, bf16 x bf16 -> f32 (or f32 when bf16 is not available): best of several.
MatmulRate onednn_matmul(dnnl::memory::data_type dt, int n) {
  using namespace dnnl;
  engine eng(engine::kind::cpu, 0);
  stream st(eng);
  const memory::dims a_dims = {n, n}, b_dims = {n, n}, c_dims = {n, n};
  memory::desc a_md(a_dims, dt, memory::format_tag::ab);
  memory::desc b_md(b_dims, dt, memory::format_tag::ab);
  memory::desc c_md(c_dims, memory::data_type::f32, memory::format_tag::ab);
  matmul::primitive_desc pd(matmul::desc(a_md, b_md, c_md), eng);
  MatmulRate rate;
  rate.impl = pd.impl_info_str();
  rate.size = n;
  if (rate.impl.find("ref") != std::string::npos && n > 512) return onednn_matmul(dt, 512);
  memory a(a_md, eng), b(b_md, eng), c(c_md, eng);
  std::memset(a.get_data_handle(), 0x3f, a_md.get_size());  // 0x3f3f: finite in bf16 and f32
  std::memset(b.get_data_handle(), 0x3f, b_md.get_size());
  matmul prim(pd);
  const double t = best_time(5, [&] {
    prim.execute(st, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    st.wait();
  });
  rate.gflops = 2.0 * n * n * double(n) / t / 1e9;
  return rate;
}

struct Batch {
  int num_heads = 32, num_kv_heads = 8, head_dim = 128, page_size = 16;
  DType kv_dtype = DType::kBF16;  // kBF16, or kF8E4M3 (scale 1/448 for every head)
  int num_pages = 0;
  std::vector<uint8_t> k_pages, v_pages;  // [pages][page_size][kv heads][head_dim] elements of kv_dtype
  std::vector<float> k_scales, v_scales;  // FP8 only: per KV head
  std::vector<int32_t> table;
  std::vector<StepSequence> seqs;
  std::vector<float> q, out;
  int64_t kv_bytes_read = 0;  // K and V of every visible position, once
  double causal_flops = 0;

  Batch(int batch, int num_new, int num_cached, int heads = 32, int kv_heads = 8, int dim = 128,
        DType dtype = DType::kBF16)
      : num_heads(heads), num_kv_heads(kv_heads), head_dim(dim), kv_dtype(dtype) {
    const int per_seq = (num_new + num_cached + page_size - 1) / page_size;
    num_pages = batch * per_seq;
    const int64_t row = int64_t{num_kv_heads} * head_dim;
    const int64_t elems = int64_t{num_pages} * page_size * row;
    const int64_t elem_bytes = dtype_size(kv_dtype);
    k_pages.resize(size_t(elems * elem_bytes));
    v_pages.resize(k_pages.size());
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
    if (kv_dtype == DType::kF8E4M3) {
      k_scales.assign(size_t(num_kv_heads), 1.0f / 448.0f);
      v_scales.assign(size_t(num_kv_heads), 1.0f / 448.0f);
      for (int64_t i = 0; i < elems; ++i) {
        k_pages[size_t(i)] = float_to_fp8_e4m3(uni(rng) * 448.0f);
        v_pages[size_t(i)] = float_to_fp8_e4m3(uni(rng) * 448.0f);
      }
    } else {
      for (int64_t i = 0; i < elems; ++i) {
        const uint16_t k = float_to_bf16_bits(uni(rng)), v = float_to_bf16_bits(uni(rng));
        std::memcpy(k_pages.data() + 2 * i, &k, 2);
        std::memcpy(v_pages.data() + 2 * i, &v, 2);
      }
    }
    table.resize(num_pages);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    for (int b = 0; b < batch; ++b) {
      StepSequence s;
      s.query_offset = b * num_new;
      s.num_new_tokens = num_new;
      s.num_cached_tokens = num_cached;
      s.page_table_offset = b * per_seq;
      s.num_pages = per_seq;
      seqs.push_back(s);
    }
    q.resize(size_t(batch) * num_new * num_heads * head_dim);
    for (auto& x : q) x = uni(rng);
    out.resize(q.size());
    kv_bytes_read = int64_t{batch} * (num_new + num_cached) * row * elem_bytes * 2;
    causal_flops = 4.0 * num_new * double(num_new) / 2 * head_dim * num_heads * batch;
  }

  PagedAttentionParams params(ThreadPool* pool) {
    PagedAttentionParams p;
    p.q = q.data();
    p.out = out.data();
    p.k_pages = k_pages.data();
    p.v_pages = v_pages.data();
    p.kv.dtype = kv_dtype;
    p.kv.num_pages = num_pages;
    p.kv.page_size = page_size;
    p.num_heads = num_heads;
    p.kv.num_kv_heads = num_kv_heads;
    p.kv.head_dim = head_dim;
    p.scale = 1.0f / std::sqrt(float(head_dim));
    p.causal = true;
    p.k_scales = k_scales.empty() ? nullptr : k_scales.data();
    p.v_scales = v_scales.empty() ? nullptr : v_scales.data();
    p.sequences = seqs;
    p.page_tables = table.data();
    p.pool = pool;
    return p;
  }
};

struct KernelEntry {
  std::string name;
  std::function<void(const PagedAttentionParams&)> run;
};

void run_headline(const std::vector<KernelEntry>& kernels, ThreadPool& pool, double mem_gbps, const MatmulRate& mm,
                  const std::string& mm_label) {
  // Decode.
  Batch decode(16, 1, 2048);

  Batch decode_ref(1, 1, 2048);
  const double ref_decode_gbps =
      decode_ref.kv_bytes_read / best_time(1, [&] { paged_attention_reference(decode_ref.params(nullptr)); }) / 1e9;
  std::printf("\ndecode: batch 16 x (2048 cached + 1 new), 32/8 heads, head_dim 128, bf16 KV, page 16: "
              "%.1f MB of KV per step\n", decode.kv_bytes_read / 1e6);
  std::printf("  %-16s %10s %12s %14s %12s\n", "kernel", "ms/step", "KV GB/s", "% of mem BW", "x reference");
  std::printf("  %-16s %10s %12.2f %13.1f%% %12s   (batch 1, 1 thread, float64)\n", "reference", "-",
              ref_decode_gbps, 100 * ref_decode_gbps / mem_gbps, "1.0");
  for (const auto& k : kernels) {
    const double t = best_time(10, [&] { k.run(decode.params(&pool)); });
    const double gbps = decode.kv_bytes_read / t / 1e9;
    std::printf("  %-16s %10.3f %12.1f %13.1f%% %12.1f\n", k.name.c_str(), t * 1e3, gbps, 100 * gbps / mem_gbps,
                gbps / ref_decode_gbps);
  }

  // Prefill.
  Batch prefill(1, 2048, 0);
  Batch prefill_ref(1, 256, 0);
  const double ref_gflops =
      prefill_ref.causal_flops / best_time(1, [&] { paged_attention_reference(prefill_ref.params(nullptr)); }) / 1e9;
  std::printf("\nprefill: 1 x 2048 causal tokens, 32/8 heads, head_dim 128, bf16 KV, page 16: %.1f GFLOP\n",
              prefill.causal_flops / 1e9);
  std::printf("  %-16s %10s %12s %14s %12s\n", "kernel", "ms", "GFLOP/s", ("% of oneDNN " + mm_label).c_str(),
              "x reference");
  std::printf("  %-16s %10s %12.2f %13.1f%% %12s   (256 tokens, 1 thread, float64)\n", "reference", "-", ref_gflops,
              100 * ref_gflops / mm.gflops, "1.0");
  for (const auto& k : kernels) {
    const double t = best_time(3, [&] { k.run(prefill.params(&pool)); });
    const double gflops = prefill.causal_flops / t / 1e9;
    std::printf("  %-16s %10.1f %12.1f %13.1f%% %12.1f\n", k.name.c_str(), t * 1e3, gflops,
                100 * gflops / mm.gflops, gflops / ref_gflops);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  // usage (--help lists every flag): bench_attention [--head-dims 32,48,...] [--sweep-context 2048] [--sweep-prompt 1024] [--headline 0|1]
  //        bench_attention --prefill-shapes 8/4/32,4/2/64 [--prefill-tokens 981] [--reps 20] [--kernels amx,...]
  std::vector<int> head_dims;
  std::vector<std::string> prefill_shapes, kernel_filter;
  int prefill_tokens = 981, reps = 20, decode_batch = 0, copies = 1;
  for (int d = 32; d <= 256; d += 16) head_dims.push_back(d);
  int sweep_context = 2048, sweep_prompt = 1024;
  bool headline = true;
  std::string kv_dtype_name = "bf16";
  bool cpu_time = false;
  // The kernels read head_dim in steps of 16 from 32 to 256 (the registry's grid).
  const auto check_head_dim = [](int dim) {
    return dim >= 32 && dim <= 256 && dim % 16 == 0 ? std::string()
                                                     : "head_dim " + std::to_string(dim) +
                                                           " is not a multiple of 16 in [32, 256]";
  };
  CLI::App app{"CPU paged attention: decode bandwidth and prefill rate per kernel", "bench_attention"};
  app.add_option("--head-dims", head_dims, "Sweep's head_dims, comma-separated (32,48,...,256)")
      ->delimiter(',')
      ->check(CLI::Validator(
          [&](const std::string& text) -> std::string {
            char* end = nullptr;
            const long dim = std::strtol(text.c_str(), &end, 10);
            if (end == text.c_str() || *end != '\0') return "'" + text + "' is not an integer";
            if (dim < 32 || dim > 256) return "head_dim " + text + " is not a multiple of 16 in [32, 256]";
            return check_head_dim(static_cast<int>(dim));
          },
          "HEAD_DIM"));
  app.add_option("--sweep-context", sweep_context, "Cached tokens of the sweep's decode (2048)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--sweep-prompt", sweep_prompt, "Tokens of the sweep's prefill (1024)")->check(CLI::Range(1, 1 << 20));
  app.add_option("--headline", headline, "0: skip the headline tables (1)");
  app.add_option("--prefill-shapes", prefill_shapes, "HEADS/KV_HEADS/HEAD_DIM,... (instead of the sweep)")
      ->delimiter(',')
      ->check(CLI::Validator(
          [&](const std::string& shape) -> std::string {
            int heads = 0, kv_heads = 0, dim = 0;
            char tail = 0;
            if (std::sscanf(shape.c_str(), "%d/%d/%d%c", &heads, &kv_heads, &dim, &tail) != 3)
              return "'" + shape + "' is not HEADS/KV_HEADS/HEAD_DIM";
            if (heads < 1 || kv_heads < 1 || heads % kv_heads != 0)
              return "'" + shape + "': HEADS must be a positive multiple of KV_HEADS";
            return check_head_dim(dim);
          },
          "SHAPE"));
  app.add_option("--prefill-tokens", prefill_tokens, "Prefill tokens (decode: cached tokens) of --prefill-shapes (981)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--copies", copies, "KV pools cycled through in --decode-batch runs (1)")->check(CLI::Range(1, 64));
  app.add_option("--decode-batch", decode_batch, "With --prefill-shapes: decode this many sequences instead (0)")
      ->check(CLI::Range(0, 4096));
  app.add_option("--kv-dtype", kv_dtype_name, "With --prefill-shapes: the KV pages' dtype, bf16 or fp8_e4m3 (bf16)")
      ->check(CLI::IsMember({"bf16", "fp8_e4m3"}));
  app.add_flag("--cpu-time", cpu_time, "With --prefill-shapes: one thread, timed by its CPU time");
  app.add_option("--reps", reps, "Timed repetitions, best reported (20)")->check(CLI::Range(1, 100000));
  app.add_option("--kernels", kernel_filter, "Only these kernels: avx2, avx512, avx512+bf16dot, amx")
      ->delimiter(',')
      ->check(CLI::IsMember({"avx2", "avx512", "avx512+bf16dot", "amx"}));
  bench::parse_or_exit(app, argc, argv);
  const CpuInfo cpu = detect_cpu_info();
  ThreadPool& pool = ThreadPool::global();
  std::printf("cpu: %s, %d threads in ThreadPool::global()\n", cpu.model_name.c_str(), pool.num_threads());

  std::vector<KernelEntry> kernels;
  if (cpu.has("avx2") && cpu.has("fma") && cpu.has("f16c"))
    kernels.push_back({"avx2", [](const PagedAttentionParams& p) { paged_attention_avx2(p); }});
  const bool avx512 = cpu.has("avx512f") && cpu.has("avx512bw") && cpu.has("avx512vl");
  if (avx512) kernels.push_back({"avx512", [](const PagedAttentionParams& p) { paged_attention_avx512(p, false); }});
  if (avx512 && cpu.has("avx512_bf16"))
    kernels.push_back({"avx512+bf16dot", [](const PagedAttentionParams& p) { paged_attention_avx512(p, true); }});
  if (avx512 && cpu.has("avx512_bf16") && cpu.has("amx_tile") && cpu.has("amx_bf16"))
    kernels.push_back({"amx", [](const PagedAttentionParams& p) { paged_attention_amx(p); }});

  if (!kernel_filter.empty()) {
    std::erase_if(kernels, [&](const KernelEntry& k) {
      return std::find(kernel_filter.begin(), kernel_filter.end(), k.name) == kernel_filter.end();
    });
  }
  if (!prefill_shapes.empty()) {
    const DType kv_dtype = kv_dtype_name == "fp8_e4m3" ? DType::kF8E4M3 : DType::kBF16;
    if (decode_batch > 0) {
      std::printf("decode %d x (%d cached + 1 new), %s KV, page 16, best of %d%s:\n", decode_batch, prefill_tokens,
                  kv_dtype_name.c_str(), reps, cpu_time ? " (one thread, its CPU time)" : "");
    } else {
      std::printf("prefill 1 x %d causal tokens, %s KV, page 16, best of %d%s:\n", prefill_tokens,
                  kv_dtype_name.c_str(), reps, cpu_time ? " (one thread, its CPU time)" : "");
    }
    for (const auto& k : kernels) {
      double first = 0;
      for (const std::string& shape : prefill_shapes) {
        int heads = 0, kv_heads = 0, dim = 0;
        std::sscanf(shape.c_str(), "%d/%d/%d", &heads, &kv_heads, &dim);  // checked by the parser
        std::vector<Batch> pools;
        for (int c = 0; c < (decode_batch > 0 ? copies : 1); ++c) {
          pools.push_back(decode_batch > 0 ? Batch(decode_batch, 1, prefill_tokens, heads, kv_heads, dim, kv_dtype)
                                           : Batch(1, prefill_tokens, 0, heads, kv_heads, dim, kv_dtype));
        }
        const Batch& pf = pools.front();
        ThreadPool* run_pool = cpu_time ? nullptr : &pool;
        const auto run_all = [&] {
          for (Batch& b : pools) k.run(b.params(run_pool));
        };
        const double t = (cpu_time ? bench::best_cpu_time(reps, run_all) : best_time(reps, run_all)) / double(pools.size());
        if (first == 0) first = t;
        if (decode_batch > 0) {
          std::printf("  %-16s %10s %9.3f ms %9.0f tok/s %8.1f GB/s of KV %6.2fx the first shape\n",
                      k.name.c_str(), shape.c_str(), t * 1e3, decode_batch / t, pf.kv_bytes_read / t / 1e9, t / first);
        } else {
          std::printf("  %-16s %10s %9.3f ms %8.1f GFLOP/s %6.2fx the first shape\n", k.name.c_str(), shape.c_str(),
                      t * 1e3, pf.causal_flops / t / 1e9, t / first);
        }
      }
    }
    return 0;
  }
  const double mem_gbps = memory_read_gbps(pool);
  std::printf("memory read bandwidth (1 GiB streaming sum, all threads): %.1f GB/s\n", mem_gbps);
  // The prefill yardstick: bf16 matmul; oneDNN has none on CPUs without AVX-512 (it then says
  // "could not create a primitive descriptor"), and the f32 matmul stands in, labelled.
  MatmulRate mm;
  std::string mm_label = "bf16";
  try {
    mm = onednn_matmul(dnnl::memory::data_type::bf16, 2048);
    std::printf("oneDNN matmul bf16xbf16->f32 %d^3: %.1f GFLOP/s (impl %s)\n", mm.size, mm.gflops, mm.impl.c_str());
  } catch (const dnnl::error& e) {
    std::printf("oneDNN matmul bf16xbf16->f32: unavailable on this CPU (%s)\n", e.what());
  }
  const MatmulRate mm32 = onednn_matmul(dnnl::memory::data_type::f32, 2048);
  std::printf("oneDNN matmul f32 %d^3: %.1f GFLOP/s (impl %s)\n", mm32.size, mm32.gflops, mm32.impl.c_str());
  if (mm.gflops == 0) {
    mm = mm32;
    mm_label = "f32";
  }

  if (headline) run_headline(kernels, pool, mem_gbps, mm, mm_label);

  // Every head_dim at one model width: num_kv_heads * head_dim ~= 1024 (GQA 4), so each row reads
  // about the same KV bytes and does about the same FLOPs; a smaller head_dim means more heads.
  std::printf("\nhead_dim sweep (kv heads x head_dim ~= 1024, 4 query heads per KV head, bf16 KV, page 16):\n"
              "  decode batch 16 x (%d cached + 1 new); prefill 1 x %d causal tokens\n",
              sweep_context, sweep_prompt);
  std::printf("  (x ref: decode KV GB/s over the float64 reference's, which runs batch 1 on 1 thread, as the\n"
              "   fallback does when no optimized backend serves a head_dim)\n");
  std::printf("  %-16s %5s %9s %10s %10s %9s %8s %12s %9s\n", "kernel", "dim", "heads", "dec ms", "KV GB/s", "% mem BW",
              "x ref", "pre GFLOP/s", ("% " + mm_label).c_str());
  std::vector<double> ref_gbps;
  for (int dim : head_dims) {
    const int kv_heads = std::max(1, (1024 + dim / 2) / dim);
    Batch r(1, 1, sweep_context, 4 * kv_heads, kv_heads, dim);
    ref_gbps.push_back(r.kv_bytes_read / best_time(1, [&] { paged_attention_reference(r.params(nullptr)); }) / 1e9);
  }
  for (const auto& k : kernels) {
    for (size_t i = 0; i < head_dims.size(); ++i) {
      const int dim = head_dims[i];
      const int kv_heads = std::max(1, (1024 + dim / 2) / dim);
      Batch d(16, 1, sweep_context, 4 * kv_heads, kv_heads, dim);
      const double td = best_time(10, [&] { k.run(d.params(&pool)); });
      Batch pf(1, sweep_prompt, 0, 4 * kv_heads, kv_heads, dim);
      const double tp = best_time(3, [&] { k.run(pf.params(&pool)); });
      const double gbps = d.kv_bytes_read / td / 1e9, gflops = pf.causal_flops / tp / 1e9;
      std::printf("  %-16s %5d %4d/%-4d %10.3f %10.1f %8.1f%% %8.1f %12.1f %8.1f%%\n", k.name.c_str(), dim,
                  4 * kv_heads, kv_heads, td * 1e3, gbps, 100 * gbps / mem_gbps, gbps / ref_gbps[i], gflops,
                  100 * gflops / mm.gflops);
    }
  }
  return 0;
}
