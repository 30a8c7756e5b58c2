#include "cli/serving_stack.h"

#include "model/model_loader.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <climits>

#include "cli/format.h"
#include "startup/backend_selection.h"
#include "startup/workspace_cache.h"
#include "startup/workspace_probe.h"
#include "util/build_info.h"
#include "util/error.h"

namespace spindle::cli {

std::filesystem::path default_model_dir() {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path source_tree = fs::path(SPINDLE_SOURCE_DIR) / "models" / "kjv-tiny";
  if (fs::exists(source_tree / "config.json", ec)) return source_tree;
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n > 0) {
    const fs::path exe(std::string(buf, static_cast<size_t>(n)));
    for (const fs::path& candidate : {exe.parent_path().parent_path() / "share" / "spindle" / "models" / "kjv-tiny",
                                      exe.parent_path().parent_path().parent_path() / "models" / "kjv-tiny"}) {
      if (fs::exists(candidate / "config.json", ec)) return candidate;
    }
  }
  SPINDLE_FAIL("no model folder given and the embedded model (models/kjv-tiny) was not found at {}",
               source_tree.string());
}

void add_serving_flags(CLI::App& app, ServingFlags& f) {
  app.add_option("model_dir", f.model_dir, "Hugging Face model folder (default: the embedded models/kjv-tiny)");
  app.add_option("--served-model-name", f.served_model_name, "Model name in the API (default: the folder name)");
  app.add_option("--chat-template", f.server.chat_template, "chatml, llama3 or llama2 (default: recognise the model's)");
  config::add_scheduler_flags(app, f.server);
  config::add_attention_flags(app, f.server);
  config::add_kv_flags(app, f.server.kv);
  config::add_spec_flags(app, f.server.spec);
}

ServingStack::~ServingStack() {
  if (engine) engine->stop();
}

std::unique_ptr<ServingStack> build_serving_stack(const ServingFlags& flags) {
  auto s = std::make_unique<ServingStack>();
  s->model_dir = flags.model_dir.empty() ? default_model_dir() : std::filesystem::path(flags.model_dir);
  s->model_name = flags.served_model_name.empty() ? s->model_dir.filename().string() : flags.served_model_name;
  if (s->model_name.empty()) s->model_name = s->model_dir.parent_path().filename().string();
  const DeviceInfo detected = detect_device_info();
  s->model_config = load_model_config(s->model_dir);
  s->resolved = config::resolve(flags.server, detected, s->model_config);
  // The worker binds its device before validating backends and planning memory.
  s->device = config::bind_worker_device(s->resolved, detected);
  s->pool = std::make_unique<ThreadPool>(s->resolved.num_threads);

  s->tokenizer = std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::load(s->model_dir));
  if (!flags.server.chat_template.empty()) {
    s->chat_template = tokenizer::ChatTemplate::for_tokenizer(*s->tokenizer,
                                                              tokenizer::parse_chat_format(flags.server.chat_template));
  } else if (!s->tokenizer->chat_template().empty()) {
    try {
      s->chat_template = tokenizer::ChatTemplate::for_tokenizer(*s->tokenizer);
    } catch (const Error& e) {
      spdlog::warn("chat completions disabled: {} (choose one with --chat-template)", e.message());
    }
  }

  s->selection = startup::select_attention(s->resolved, s->device);
  ModelOptions model_options;
  model_options.pool = s->pool.get();
  if (s->resolved.bf16_activations) {
    model_options.make_linear = [](const kernels::cpu::LinearWeight& w) {
      kernels::cpu::LinearOptions o;
      o.allow_bf16_activations = true;
      return kernels::cpu::make_linear_kernel(w, o);
    };
  }
  LoadOptions load_options;
  load_options.device = s->resolved.device;
  load_options.cuda_device = s->resolved.cuda_device;
  load_options.cuda_16bit_activations = s->resolved.bf16_activations;
  load_options.cpu = model_options;
  s->model = load_model(s->model_dir, load_options);
  const attn::AttentionShape shape = s->model->attention_shape(s->resolved.kv_dtype, s->resolved.page_size);
  attn::BackendOptions backend_options;
  backend_options.pool = s->pool.get();
  s->prefill_backend = attn::create_attention_backend(s->selection.prefill_backend, shape, {}, backend_options);
  s->decode_backend = attn::create_attention_backend(s->selection.decode_backend, shape, {}, backend_options);
  engine::RunnerOptions runner_options;
  runner_options.max_graph_batch = s->resolved.cuda_graph_max_bs;
  runner_options.max_model_len = s->resolved.kv.max_model_len;
  s->runner = std::make_unique<engine::Runner>(*s->model, *s->prefill_backend, *s->decode_backend, runner_options);
  const config::ResolvedSpecConfig& spec = s->resolved.spec;
  if (spec.algorithm == config::SpecAlgorithm::kDraft) {
    s->draft = startup::load_draft_model(spec.draft_model_path, flags.server, s->resolved, s->device, *s->tokenizer,
                                         s->model_config, load_options, backend_options);
  } else if (spec.algorithm == config::SpecAlgorithm::kNgram) {
    s->ngram = std::make_unique<engine::spec::NgramProposer>(spec.ngram_min_window, spec.ngram_max_window);
  }

  SPINDLE_CHECK(s->resolved.kv.dp_size == 1,
                "--dp-size {}: the engine serves one data-parallel rank for now (spindle plan shows the per-rank split)",
                s->resolved.kv.dp_size);
  const auto layout = startup::kv_layout_for(s->model_config, s->resolved.kv_dtype, s->resolved.page_size);
  const bool on_cuda = s->resolved.device == attn::Device::kCuda;
  // CUDA: the device's free memory now, with the weights already resident.
  const MemoryInfo usable = on_cuda ? startup::cuda_usable_memory(s->resolved.cuda_device) : s->device.memory;
  // The measured workspace comes from the on-disk cache next to the selection cache when an
  // earlier start measured it for this key (--no-backend-cache: measure every time).
  startup::WorkspaceProbe probe =
      startup::make_workspace_probe(*s->runner, s->resolved.kv_dtype, s->resolved.page_size, s->resolved.kv.max_model_len);
  std::optional<startup::WorkspaceCache> workspace_cache;
  bool workspace_from_cache = false;
  if (s->resolved.use_backend_cache) {
    workspace_cache.emplace(s->resolved.backend_cache_dir,
                            startup::workspace_cache_key(build_id(), startup::cache_fingerprint(s->resolved, s->device),
                                                         s->model_config, s->resolved));
    probe = workspace_cache->wrap(std::move(probe), &workspace_from_cache);
  }
  uint64_t weight_bytes = s->model->weight_bytes();
  uint64_t draft_kv_bytes_per_token = 0;
  if (s->draft) {
    // The draft's weights, its KV per token (its pool gets as many pages) and its workspace (estimated).
    weight_bytes += s->draft->model->weight_bytes();
    draft_kv_bytes_per_token = s->draft->layout.bytes_per_token();
    const uint64_t draft_workspace =
        startup::estimate_workspace_bytes(s->draft->config, s->resolved.kv.max_num_batched_tokens);
    probe = [inner = std::move(probe), draft_workspace, &s](int tokens) {
      return (inner ? inner(tokens) : startup::estimate_workspace_bytes(s->model_config, tokens)) + draft_workspace;
    };
  }
  s->kv_plan = startup::plan_kv_cache(
      s->resolved.kv, layout, s->model_config, usable, weight_bytes, probe,
      /*usable_after_weights=*/on_cuda, /*max_running_requests=*/on_cuda ? 0 : s->resolved.max_running_requests,
      draft_kv_bytes_per_token);
  if (workspace_from_cache) s->kv_plan.workspace_source = "cached: measured by an earlier start, " +
                                                           workspace_cache->path().string();
  s->kv_pool = std::make_unique<kv::PagePool>(layout, s->kv_plan.num_pages_per_rank, s->resolved.kv.dp_size,
                                              s->resolved.device);
  // CPU: cached pages beyond the prefix cache's budget are evicted, free pages beyond one step's
  // worth go back to the OS. GPU: the budget only when one was given (the device is the server's).
  s->kv_pool->allocator(0).set_residency_limits(
      s->kv_plan.prefix_cache_pages,
      on_cuda ? kv::kNoPageLimit : startup::resident_free_pages_for(s->resolved.kv, s->resolved.page_size));
  s->runner->bind_kv_caches(s->kv_pool->layer_caches());
  if (s->draft) s->draft->create_pool(s->kv_plan.num_pages_per_rank, s->resolved.kv.max_num_batched_tokens);
  if (s->runner->graphs_enabled()) {
    const auto start = std::chrono::steady_clock::now();
    const int graphs = s->runner->capture_graphs();
    const DeviceOps::GraphStats g = s->model->graph_stats();
    spdlog::info("CUDA graphs: {} decode batch sizes captured up to {} in {:.2f} s ({:.2f} s capturing), {} of device "
                 "memory (taken from the KV plan's reserve)",
                 graphs, s->resolved.cuda_graph_max_bs,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), g.capture_seconds,
                 format_bytes(g.memory_bytes));
  }

  s->metrics.set_info({{"model", s->model_name},
                       {"prefill_attention_backend", s->selection.prefill_backend},
                       {"decode_attention_backend", s->selection.decode_backend},
                       {"linear_kernel", s->model->linear_kernel_name()}});
  engine::EngineOptions engine_options;
  engine_options.model_name = s->model_name;
  engine_options.max_queued_requests = s->resolved.max_queued_requests;
  engine_options.enable_prefix_cache = s->resolved.kv.enable_prefix_cache;
  engine_options.scheduler.max_num_batched_tokens = s->resolved.kv.max_num_batched_tokens;
  engine_options.scheduler.max_running_requests = s->resolved.max_running_requests;
  engine_options.scheduler.max_model_len = s->resolved.kv.max_model_len;
  engine_options.cuda_device = on_cuda ? s->resolved.cuda_device : -1;
  if (s->draft) engine_options.proposer = s->draft->proposer.get();
  if (s->ngram) engine_options.proposer = s->ngram.get();
  engine_options.num_draft_tokens = engine_options.proposer ? spec.num_draft_tokens : 0;
  engine_options.speculate_always = spec.always;
  engine_options.decode_log_interval = spec.decode_log_interval;
  s->engine = std::make_unique<engine::Engine>(*s->runner, *s->tokenizer, s->chat_template ? &*s->chat_template : nullptr,
                                               *s->kv_pool, s->metrics, engine_options);
  s->engine->start();
  return s;
}

void log_serving_stack(const ServingStack& s) {
  spdlog::info("model {} ({}, {}), weights {}, linear kernel {}", s.model_name, s.model_dir.string(),
               architecture_name(s.model_config.architecture), format_bytes(s.model->weight_bytes()),
               s.model->linear_kernel_name());
  for (const auto& row : s.selection.rows) {
    if (row.chosen) {
      spdlog::info("{} attention: {} ({}){}", attn::phase_name(row.phase), row.backend, row.why,
                   s.selection.from_cache ? " [from cache]" : "");
    }
  }
  for (const auto& w : s.selection.warnings) spdlog::warn("{}", w);
  if (s.model->supports_graphs()) {
    if (s.runner->graphs_enabled()) {
      spdlog::info("CUDA graphs: decode steps of up to {} sequences replay a graph per batch size (1, 2, 4, 8, then "
                   "multiples of 8), captured at start and again when a buffer it reads has moved",
                   s.resolved.cuda_graph_max_bs);
    } else {
      spdlog::info("CUDA graphs: off, {}", s.runner->graphs_disabled_reason());
    }
  }
  if (s.draft) {
    for (const auto& row : s.draft->selection.rows) {
      if (row.chosen) spdlog::info("draft model {}: {} attention: {} ({})", s.draft->dir.string(), attn::phase_name(row.phase), row.backend, row.why);
    }
  }
  if (s.resolved.spec.algorithm != config::SpecAlgorithm::kNone) {
    spdlog::info("speculative decoding: {} proposer{}, {} draft tokens per step, {}",
                 config::spec_algorithm_name(s.resolved.spec.algorithm),
                 s.draft ? fmt::format(" ({}, weights {})", s.draft->dir.string(), format_bytes(s.draft->model->weight_bytes()))
                         : fmt::format(" (match windows {}-{})", s.resolved.spec.ngram_min_window, s.resolved.spec.ngram_max_window),
                 s.resolved.spec.num_draft_tokens,
                 s.resolved.spec.always ? "every decode step" : "skipped where measured decode steps say it costs more");
  }
  const kv::KvPlan& p = s.kv_plan;
  spdlog::info("KV plan: usable {} ({}), weights {}, workspace {} ({}), reserve {} -> KV {} for {} tokens ({} pages of {}), "
               "{} KV dtype, max model len {}; bound: {}; prefix cache keeps {}; resident at most {} bytes",
               format_bytes(p.usable_bytes), p.usable_bound, format_bytes(p.weight_bytes), format_bytes(p.workspace_bytes),
               p.workspace_source, format_bytes(p.reserve_bytes), format_bytes(p.kv_bytes_per_rank), p.max_total_tokens,
               p.num_pages_per_rank, p.page_size, dtype_name(s.resolved.kv_dtype), s.resolved.kv.max_model_len,
               kv::capacity_bound_name(p.bound),
               p.prefix_cache_pages == kv::kNoPageLimit ? std::string("every page not in use")
                                                        : fmt::format("{} pages", p.prefix_cache_pages),
               p.resident_bound_bytes);
  if (p.draft_kv_bytes_per_token > 0) {
    spdlog::info("KV plan, draft model: {} per token, its own pool of {} pages ({})", format_bytes(p.draft_kv_bytes_per_token),
                 p.num_pages_per_rank, format_bytes(p.draft_kv_bytes_per_rank));
  }
}

}  // namespace spindle::cli
