// The cost of a speculative verify step against a plain decode step, on the same model and
// device, measured in one run (bench/spec/README.md). One sequence (or --batch of them) with
// --context tokens already in its KV pages; then, alternating, --steps times each:
//   decode:  1 new token per sequence, 1 logit row (on CUDA replayed from a step graph, as the
//            server runs it, unless --eager), sampled where the model samples;
//   verify:  1 + k new tokens per sequence (the last token and k drafts), 1 + k logit rows, as the
//            engine's verify step runs it (prefill backend; on CUDA replayed from a graph of its
//            shape as the server does, unless --eager or --eager-verify), sampled the same way.
// Nothing advances: each step rewrites the same positions. Prints the median wall time of each
// and verify / decode; also the minimum wall times and the median CPU time of the calling thread
// (the whole step with SPINDLE_NUM_THREADS=1: robust on a machine shared with other work).
//
// usage: bench_spec_verify --model DIR [--device cpu|cuda] [--backend NAME] [--decode-backend NAME]
//                          [--context 512] [--k 4] [--batch 1] [--steps 50] [--eager] [--eager-verify]
//                          [--max-model-len N]  (the length graphs are planned for, as the server's
//                          --max-model-len; default context + k + 16)
//                          [--logit-ids N] [--matmul-precision auto|exact]
// --matmul-precision (CPU): auto (default, as `spindle serve`): bf16 activations for a checkpoint
// stored in bf16 (kernels/cpu/linear.h: amx_bf16 / onednn_bf16 where the CPU has them); exact: f32.
// --logit-ids N: the LM head over the first N token ids only (Transformer::limit_logit_ids, as a
// draft model with --speculative-draft-vocab-size N runs), to time a draft model's rounds.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "attn/attention_backend.h"
#include "bench_cli.h"
#include "engine/runner.h"
#include "engine/sampler.h"
#include "kernels/cpu/linear.h"
#include "kv/kv_layout.h"
#include "kv/page_pool.h"
#include "model/model_config.h"
#include "model/model_loader.h"
#include "platform/cuda_info.h"
#include "util/error.h"

using namespace spindle;

namespace {

struct Args {
  std::string model_dir;
  std::string device = "cpu";
  std::string backend;         // prefill (verify) backend; default cpu_avx2 / cuda_flash
  std::string decode_backend;  // default: backend
  int context = 512;
  int k = 4;
  int batch = 1;
  int steps = 50;
  bool eager = false;         // no graphs at all
  bool eager_verify = false;  // graphs for the decode steps only
  int max_model_len = 0;      // 0: context + k + 16
  int logit_ids = 0;          // 0: the whole vocabulary
  std::string matmul_precision = "auto";
};

Args parse(int argc, char** argv) {
  Args a;
  CLI::App app{"Speculative decoding: a verify step (1 + k tokens per sequence) against a plain decode step",
               "bench_spec_verify"};
  app.add_option("--model", a.model_dir, "Hugging Face model folder")->required()->check(CLI::ExistingDirectory);
  app.add_option("--device", a.device, "cpu or cuda (cpu)")->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--backend", a.backend, "Prefill (verify) attention backend (cpu_avx2 / cuda_flash)");
  app.add_option("--decode-backend", a.decode_backend, "Decode attention backend (--backend)");
  app.add_option("--context", a.context, "Cached tokens per sequence (512)")->check(CLI::Range(1, 1 << 20));
  app.add_option("--k", a.k, "Draft tokens per sequence (4)")->check(CLI::Range(1, 64));
  app.add_option("--batch", a.batch, "Sequences (1)")->check(CLI::Range(1, 4096));
  app.add_option("--steps", a.steps, "Timed steps (50)")->check(CLI::Range(1, 1000000));
  app.add_flag("--eager", a.eager, "No CUDA graphs at all");
  app.add_flag("--eager-verify", a.eager_verify, "CUDA graphs for the decode steps only");
  app.add_option("--max-model-len", a.max_model_len, "0: context + k + 16 (0)")->check(CLI::Range(0, 1 << 22));
  app.add_option("--logit-ids", a.logit_ids, "Logit columns sampled, 0: the whole vocabulary (0)")
      ->check(CLI::Range(0, 1 << 24));
  app.add_option("--matmul-precision", a.matmul_precision, "auto or exact (auto)")
      ->check(CLI::IsMember({"auto", "exact"}));
  bench::parse_or_exit(app, argc, argv);
  return a;
}

// CPU seconds of the calling thread (the whole step's work with SPINDLE_NUM_THREADS=1, where
// the wall time of a shared machine is mostly other processes' turns).
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) try {
  const Args a = parse(argc, argv);
  const bool cuda = a.device == "cuda";
  if (cuda) bind_cuda_device(0);
  LoadOptions load;
  load.device = cuda ? attn::Device::kCuda : attn::Device::kCpu;
  load.cuda_device = 0;
  load.cuda_16bit_activations = true;  // --matmul-precision auto on a bf16 checkpoint
  SPINDLE_CHECK(a.matmul_precision == "auto" || a.matmul_precision == "exact", "--matmul-precision {}: auto or exact",
                a.matmul_precision);
  if (!cuda && a.matmul_precision == "auto" && load_model_config(a.model_dir).torch_dtype == DType::kBF16) {
    load.cpu.make_linear = [](const kernels::cpu::LinearWeight& w) {  // as the server's cpu_model_options
      kernels::cpu::LinearOptions o;
      o.allow_bf16_activations = true;
      return kernels::cpu::make_linear_kernel(w, o);
    };
  }
  auto model = load_model(a.model_dir, load);
  const ModelConfig& c = model->config();
  if (a.logit_ids > 0) model->limit_logit_ids(a.logit_ids);
  const int page_size = 16;
  const attn::AttentionShape shape = model->attention_shape(DType::kBF16, page_size);
  const std::string prefill_name = !a.backend.empty() ? a.backend : (cuda ? "cuda_flash" : "cpu_avx2");
  const std::string decode_name = !a.decode_backend.empty() ? a.decode_backend : prefill_name;
  auto prefill = attn::create_attention_backend(prefill_name, shape, {});
  auto decode = attn::create_attention_backend(decode_name, shape, {});
  const int max_len = std::max(a.max_model_len, a.context + a.k + 16);
  engine::RunnerOptions options;
  options.max_graph_batch = cuda && !a.eager ? std::max(8, a.batch) : 0;
  options.max_model_len = max_len;
  options.verify_graphs = !a.eager_verify;
  engine::Runner runner(*model, *prefill, *decode, options);
  const int pages_per_seq = (max_len + page_size - 1) / page_size;
  const kv::KvLayout layout{c.num_hidden_layers, c.num_key_value_heads, c.head_dim, DType::kBF16, page_size};
  kv::PagePool pool(layout, pages_per_seq * a.batch + 8, 1, load.device);
  runner.bind_kv_caches(pool.layer_caches());
  if (runner.graphs_enabled()) runner.capture_graphs();

  // The sequences: random prompt ids, prefilled once.
  std::vector<std::unique_ptr<engine::Request>> requests;
  uint32_t x = 12345;
  for (int b = 0; b < a.batch; ++b) {
    std::vector<TokenId> prompt(static_cast<size_t>(a.context));
    for (auto& t : prompt) t = static_cast<TokenId>((x = x * 1664525u + 1013904223u) % static_cast<uint32_t>(c.vocab_size));
    auto r = std::make_unique<engine::Request>(b + 1, std::move(prompt), pool.allocator(0));
    SPINDLE_CHECK(r->table.extend(max_len), "the pool is too small");
    requests.push_back(std::move(r));
  }
  for (auto& r : requests) {
    engine::StepPlan plan;
    plan.sequences.push_back({r.get(), a.context, 0, 0, 0});
    plan.num_tokens = a.context;
    plan.num_logit_rows = 1;
    (void)runner.run(runner.build(plan));
    r->num_computed_tokens = a.context - 1;  // the last prompt token plays the decode token
    r->draft.assign(static_cast<size_t>(a.k), 7);
  }
  engine::SamplingParams greedy;
  greedy.temperature = 0.0f;
  SamplingBatch sampling;
  auto step = [&](bool verify) {
    engine::StepPlan plan;
    for (auto& r : requests) {
      engine::ScheduledSequence s;
      s.request = r.get();
      s.num_cached_tokens = r->num_computed_tokens;
      s.num_draft_tokens = verify ? a.k : 0;
      s.num_new_tokens = 1 + s.num_draft_tokens;
      s.logits_row = plan.num_logit_rows;
      plan.num_logit_rows += s.num_logit_rows();
      plan.num_tokens += s.num_new_tokens;
      plan.sequences.push_back(s);
    }
    const auto t0 = std::chrono::steady_clock::now();
    const double cpu0 = thread_cpu_seconds();
    const StepBatch& batch = runner.build(plan);
    if (runner.samples_on_device()) {
      sampling.clear();
      sampling.rows.resize(static_cast<size_t>(batch.num_logit_rows()));
      for (int i = 0; i < batch.num_logit_rows(); ++i) {
        engine::add_sampling_row(greedy, 1, 0, {}, {}, static_cast<size_t>(i), sampling);
      }
      (void)runner.run_and_sample(sampling);
    } else {
      (void)runner.run(batch);
    }
    return std::pair{std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                     thread_cpu_seconds() - cpu0};
  };
  for (int i = 0; i < 5; ++i) {
    step(false);
    step(true);
  }
  std::vector<double> decode_s, verify_s, decode_cpu, verify_cpu;
  for (int i = 0; i < a.steps; ++i) {
    const auto [dw, dc] = step(false);
    const auto [vw, vc] = step(true);
    decode_s.push_back(dw);
    decode_cpu.push_back(dc);
    verify_s.push_back(vw);
    verify_cpu.push_back(vc);
  }
  const double d = median(decode_s), v = median(verify_s);
  const double dmin = *std::min_element(decode_s.begin(), decode_s.end());
  const double vmin = *std::min_element(verify_s.begin(), verify_s.end());
  const double dc = median(decode_cpu), vc = median(verify_cpu);
  std::printf(
      "{\"model\": \"%s\", \"device\": \"%s\", \"prefill_backend\": \"%s\", \"decode_backend\": \"%s\", "
      "\"graphs\": %s, \"verify_graphs\": %s, \"graph_replays\": %lld, \"linear\": \"%s\", \"context\": %d, "
      "\"logit_ids\": %d, \"k\": %d, \"batch\": %d, \"steps\": %d, \"decode_ms\": %.4f, \"verify_ms\": %.4f, "
      "\"verify_over_decode\": %.4f, \"decode_min_ms\": %.4f, \"verify_min_ms\": %.4f, \"min_ratio\": %.4f, "
      "\"decode_thread_cpu_ms\": %.4f, \"verify_thread_cpu_ms\": %.4f, \"thread_cpu_ratio\": %.4f}\n",
      a.model_dir.c_str(), a.device.c_str(), prefill_name.c_str(), decode_name.c_str(),
      runner.graphs_enabled() ? "true" : "false", runner.graphs_enabled() && !a.eager_verify ? "true" : "false",
      static_cast<long long>(model->graph_stats().replays), model->linear_kernel_name(), a.context,
      model->num_logit_ids(), a.k, a.batch, a.steps, d * 1e3, v * 1e3, v / d, dmin * 1e3, vmin * 1e3, vmin / dmin,
      dc * 1e3, vc * 1e3, vc / dc);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_spec_verify: %s\n", e.what());
  return 1;
}
