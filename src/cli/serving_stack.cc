#include "cli/serving_stack.h"

#include "startup/kv_scale_setup.h"

#include "model/gguf_model_config.h"

#include "model/model_loader.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <map>

#include "cli/format.h"
#include "attn/attention_backend.h"
#include "chat/reasoning_parser.h"
#include "chat/tool_call_parser.h"
#include "config/switch_config.h"
#include "kernels/cpu/linear.h"
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
  app.add_option("model_dir", f.model_dir,
                 "Hugging Face model folder or GGUF file (default: the embedded models/kjv-tiny)");
  app.add_option("--served-model-name", f.served_model_name, "Model name in the API (default: the folder name)");
  app.add_option("--chat-template", f.server.chat_template,
                 "a built-in template (chatml, llama3, llama2) or a path to a Jinja file (default: the model's own Jinja template)");
  app.add_option("--reasoning-parser", f.reasoning_parser,
                 "How reasoning sections are read into reasoning_content: deepseek_r1, qwen3, none, or auto "
                 "(from the chat template)");
  app.add_option("--tool-call-parser", f.tool_call_parser,
                 "How tool calls are read from the output: hermes, qwen3_coder, llama3_json, mistral, deepseek_v3, "
                 "generic (tools described in a system message, answers as one JSON object), none (tools refused), "
                 "or auto (from the chat template; generic when it teaches no tool syntax)");
  config::add_scheduler_flags(app, f.server);
  config::add_attention_flags(app, f.server);
  config::add_weights_memory_flag(app, f.server);
  config::add_quantization_flag(app, f.server);
  config::add_kv_flags(app, f.server.kv);
  config::add_spec_flags(app, f.server.spec);
  config::add_dp_flags(app, f.server.dp);
}

namespace {

// --reasoning-parser / --tool-call-parser: a name (checked), none, or auto (detected from the
// Jinja template's texts).
void choose_output_parsers(tokenizer::ChatTemplate& t, const ServingFlags& flags) {
  const std::string texts = t.text() + t.tool_use_text();
  std::string reasoning, tool_calls;
  if (flags.reasoning_parser == "auto") {
    if (const auto* f = chat::detect_reasoning_format(texts)) reasoning = f->name;
  } else if (flags.reasoning_parser != "none") {
    reasoning = chat::find_reasoning_format(flags.reasoning_parser).name;
  }
  if (flags.tool_call_parser == "auto") {
    const auto* f = chat::detect_tool_call_format(texts);
    tool_calls = f != nullptr ? f->name : "generic";
  } else if (flags.tool_call_parser != "none") {
    tool_calls = chat::find_tool_call_format(flags.tool_call_parser).name;
  }
  spdlog::info("output parsers: reasoning {}, tool calls {}", reasoning.empty() ? "none" : reasoning,
               tool_calls.empty() ? "none" : tool_calls);
  t.set_output_parsers(std::move(reasoning), std::move(tool_calls));
}

}  // namespace

ServingStack::~ServingStack() {
  for (auto& r : ranks) {
    if (r && r->engine) r->engine->stop();
  }
}

namespace {

// Restores the calling thread's CPU affinity on scope exit (a rank is built pinned to its share,
// so validation children and the model load run where the rank will).
class AffinityGuard {
 public:
  AffinityGuard() : cpus_(usable_cpus()) {}
  ~AffinityGuard() {
    try {
      pin_current_thread(cpus_);
    } catch (const std::exception& e) {
      spdlog::warn("could not restore the thread's CPU affinity: {}", e.what());
    }
  }

 private:
  std::vector<int> cpus_;
};

// chooser: the measured linear kernels (null on CUDA, where the CPU kernels do not run).
ModelOptions cpu_model_options(const config::ResolvedConfig& resolved, ThreadPool* pool,
                               std::shared_ptr<startup::LinearKernelChooser> chooser) {
  ModelOptions model_options;
  model_options.pool = pool;
  model_options.weights_memory = resolved.weights_memory;
  model_options.quantize_fp8 = resolved.quantize_fp8;
  model_options.quantization = resolved.quantization;
  if (chooser) model_options.make_linear = startup::make_linear_with(std::move(chooser));
  return model_options;
}

// Binds the rank's device, selects its backends for that device, loads the model, creates the
// backends (with its DpConfig) and the runner. No KV yet.
// The decode backend's per-machine values (util/switches.h: cuda_flash's split sizes), measured
// on the current device. A measurement that fails keeps the registry's values and says why.
void measure_machine_values(const std::string& backend, const attn::AttentionShape& shape) {
  const attn::BackendDescriptor& d = attn::attention_registry().get(backend);
  if (!d.measure_machine) return;
  try {
    spdlog::info("{}", d.measure_machine(shape));
  } catch (const std::exception& e) {
    spdlog::warn("{}: measuring this machine's values failed ({}); keeping the defaults", backend, e.what());
  }
}

void build_rank(const ServingStack& s, const ServingFlags& flags, ServingRank& r) {
  const bool on_cuda = r.resolved.device == attn::Device::kCuda;
  // The worker binds its device before validating backends and planning memory.
  r.device = config::bind_worker_device(r.resolved, s.device);
  if (r.cpus) {
    pin_current_thread(r.cpus->cpus);  // validation children inherit it
    r.pool = std::make_unique<ThreadPool>(r.resolved.num_threads, r.cpus->cpus);
  } else {
    r.pool = std::make_unique<ThreadPool>(r.resolved.num_threads);
  }
  r.selection = startup::select_attention(r.resolved, r.device);
  if (!on_cuda) {
    r.linear = std::make_shared<startup::LinearKernelChooser>(r.resolved, r.device);
    // A safetensors checkpoint's shapes are known from config.json: one round of children for all.
    // A GGUF file's types vary per tensor (Q4_K_M: Q4_K, Q6_K, ...): its shapes are selected as placed.
    if (!is_gguf_path(s.model_dir)) r.linear->select(startup::model_linear_shapes(s.model_config));
  }
  LoadOptions load_options;
  load_options.device = r.resolved.device;
  load_options.cuda_device = r.resolved.cuda_device;
  load_options.cuda_16bit_activations = r.resolved.bf16_activations;
  load_options.cuda_fp8_prefill_kernel = r.resolved.fp8_prefill_kernel;
  if (r.resolved.use_backend_cache) {  // --fp8-prefill-kernel auto's checks, next to the backend cache
    load_options.cuda_fp8_prefill_cache_dir = r.resolved.backend_cache_dir;
    load_options.cuda_cache_fingerprint = startup::cache_fingerprint(r.resolved, r.device);
  }
  load_options.cpu = cpu_model_options(r.resolved, r.pool.get(), r.linear);
  r.model = load_model(s.model_dir, load_options);
  const attn::AttentionShape shape = r.model->attention_shape(r.resolved.kv_dtype, r.resolved.page_size);
  attn::BackendOptions backend_options;
  backend_options.pool = r.pool.get();
  const attn::DpConfig dp{r.pool_size, r.local_rank};
  r.prefill_backend = attn::create_attention_backend(r.selection.prefill_backend, shape, dp, backend_options);
  r.decode_backend = attn::create_attention_backend(r.selection.decode_backend, shape, dp, backend_options);
  if (r.rank == 0) measure_machine_values(r.selection.decode_backend, shape);  // before any graph is captured
  engine::RunnerOptions runner_options;
  runner_options.max_graph_batch = r.resolved.cuda_graph_max_bs;
  runner_options.max_model_len = r.resolved.kv.max_model_len;
  r.runner = std::make_unique<engine::Runner>(*r.model, *r.prefill_backend, *r.decode_backend, runner_options);
  const config::ResolvedSpecConfig& spec = r.resolved.spec;
  if (spec.algorithm == config::SpecAlgorithm::kDraft) {
    r.draft = startup::load_draft_model(spec.draft_model_path, flags.server, r.resolved, r.device, *s.tokenizer,
                                        s.model_config, load_options, backend_options);
  } else if (spec.algorithm == config::SpecAlgorithm::kNgram) {
    r.ngram = std::make_unique<engine::speculative::NgramProposer>(spec.ngram_min_window, spec.ngram_max_window);
  }
}

// Plans the KV cache of the ranks sharing one pool (one memory: the host, or one GPU) with
// their count as the plan's dp_size (each gets an equal share), creates the pool, and binds
// every rank's runner to it.
std::unique_ptr<kv::PagePool> build_pool(const ServingStack& s, const std::vector<ServingRank*>& members) {
  ServingRank& first = *members.front();
  const config::ResolvedConfig& resolved = first.resolved;
  const bool on_cuda = resolved.device == attn::Device::kCuda;
  if (on_cuda) config::bind_worker_device(resolved, s.device);  // the pool is allocated on the current device
  config::ResolvedKvConfig kv = resolved.kv;
  kv.dp_size = static_cast<int>(members.size());
  const auto layout = startup::kv_layout_for(s.model_config, resolved.kv_dtype, resolved.page_size);
  // CUDA: the device's free memory now, with every sharing rank's weights already resident.
  const MemoryInfo usable = on_cuda ? startup::cuda_usable_memory(resolved.cuda_device) : s.device.memory;
  // The measured workspace comes from the on-disk cache next to the selection cache when an
  // earlier start measured it for this key (--no-backend-cache: measure every time).
  startup::WorkspaceProbe probe =
      startup::make_workspace_probe(*first.runner, resolved.kv_dtype, resolved.page_size, resolved.kv.max_model_len);
  std::optional<startup::WorkspaceCache> workspace_cache;
  bool workspace_from_cache = false;
  if (resolved.use_backend_cache) {
    workspace_cache.emplace(resolved.backend_cache_dir,
                            startup::workspace_cache_key(build_id(), startup::cache_fingerprint(resolved, first.device),
                                                         s.model_config, resolved,
                                                         {first.model->weight_bytes(), first.selection.prefill_backend,
                                                          first.selection.decode_backend}));
    probe = workspace_cache->wrap(std::move(probe), &workspace_from_cache);
  }
  // CPU ranks map the same weight files (one copy in the page cache) unless each copied them into
  // huge pages (below); ranks sharing a GPU each uploaded theirs, already out of the free memory
  // read above.
  uint64_t weight_bytes = first.model->weight_bytes();
  uint64_t draft_kv_bytes_per_token = 0;
  if (first.draft) {
    // The draft's weights, its KV per token (each rank's draft pool gets as many pages as the
    // rank) and its workspace (estimated), per rank like the target's.
    weight_bytes += first.draft->model->weight_bytes();
    draft_kv_bytes_per_token = first.draft->layout.bytes_per_token();
    const uint64_t draft_workspace = startup::estimate_workspace_bytes(first.draft->config, resolved.kv.max_num_batched_tokens);
    probe = [inner = std::move(probe), draft_workspace, &s](int tokens) {
      return (inner ? inner(tokens) : startup::estimate_workspace_bytes(s.model_config, tokens)) + draft_workspace;
    };
  }
  // CPU ranks with their weights in huge pages each hold a private copy (util/mapped_file.h).
  if (!on_cuda && resolved.weights_memory == FileMemory::kHugePageCopy) weight_bytes *= members.size();
  kv::KvPlan plan = startup::plan_kv_cache(kv, layout, s.model_config, usable, weight_bytes, probe,
                                           /*usable_after_weights=*/on_cuda,
                                           /*max_running_requests=*/on_cuda ? 0 : resolved.max_running_requests,
                                           draft_kv_bytes_per_token);
  if (workspace_from_cache) plan.workspace_source = "cached: measured by an earlier start, " + workspace_cache->path().string();
  auto pool = std::make_unique<kv::PagePool>(layout, plan.num_pages(), kv.dp_size, resolved.device);
  if (layout.dtype == DType::kF8E4M3) {
    pool->set_kv_scales(startup::choose_kv_scales(s.model_dir, resolved.calibrate_kv_scales, *first.model, *s.tokenizer,
                                                  resolved.page_size, first.pool.get()));
    const KvScales& scales = pool->kv_scales();
    const auto [k_min, k_max] = std::minmax_element(scales.k.begin(), scales.k.end());
    const auto [v_min, v_max] = std::minmax_element(scales.v.begin(), scales.v.end());
    spdlog::info("fp8_e4m3 KV cache: scales {} (K {:.4g} to {:.4g}, V {:.4g} to {:.4g} over {} layers x {} KV heads)",
                 scales.source, *k_min, *k_max, *v_min, *v_max, scales.num_layers, scales.num_kv_heads);
  }
  for (ServingRank* r : members) {
    r->kv_plan = plan;
    // CPU: cached pages beyond the prefix cache's budget are evicted, free pages beyond one step's
    // worth go back to the OS. GPU: the budget only when one was given (the device is the server's).
    pool->allocator(r->local_rank)
        .set_residency_limits(plan.prefix_cache_pages,
                              on_cuda ? kv::kNoPageLimit : startup::resident_free_pages_for(resolved.kv, resolved.page_size));
    r->runner->bind_kv_caches(pool->layer_caches());
    if (r->draft) r->draft->create_pool(plan.num_pages_per_rank, resolved.kv.max_num_batched_tokens);
    if (r->runner->graphs_enabled()) {
      const auto start = std::chrono::steady_clock::now();
      const int graphs = r->runner->capture_graphs();
      const DeviceOps::GraphStats g = r->model->graph_stats();
      spdlog::info(
          "rank {}: CUDA graphs: {} decode batch sizes captured up to {} in {:.2f} s ({:.2f} s capturing), {} "
          "of device memory (counted in the KV plan's workspace: the profiling step captured them too)",
          r->rank, graphs, resolved.cuda_graph_max_bs,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), g.capture_seconds,
          format_bytes(g.memory_bytes));
    }
  }
  return pool;
}

}  // namespace

std::unique_ptr<ServingStack> build_serving_stack(const ServingFlags& flags) {
  // serve and generate name the SPINDLE_* variables no one reads (a typo, a retired A/B switch).
  const std::string undeclared =
      config::undeclared_switches_warning(config::resolve(read_process_environment()).undeclared);
  if (!undeclared.empty()) spdlog::warn("{}", undeclared);
  auto s = std::make_unique<ServingStack>();
  s->model_dir = flags.model_dir.empty() ? default_model_dir() : std::filesystem::path(flags.model_dir);
  s->model_name = flags.served_model_name.empty() ? s->model_dir.filename().string() : flags.served_model_name;
  if (s->model_name.empty()) s->model_name = s->model_dir.parent_path().filename().string();
  s->device = detect_device_info();
  // A GGUF file is the whole model (config, tokenizer, chat template from its metadata); it runs on
  // the CPU (the GPU path of its block types is the FP8 issue's).
  SPINDLE_CHECK(!is_gguf_path(s->model_dir) || flags.server.device == "cpu",
                "{}: GGUF files are served on the CPU only; run without --device {} (or serve the Hugging Face "
                "folder of this model on the GPU)", s->model_dir.string(), flags.server.device);
  s->model_config = load_model_config(s->model_dir);
  s->pooling = read_pooling_config(s->model_dir);
  s->resolved = config::resolve(flags.server, s->device, s->model_config);
  const int dp_size = s->resolved.kv.dp_size;
  const bool on_cuda = s->resolved.device == attn::Device::kCuda;

  s->tokenizer = std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::load(s->model_dir));
  // The model's Jinja template (a syntax error stops start-up, naming the file and line), unless
  // --chat-template names a built-in or a Jinja file; no template: chat completions are 400s.
  if (!flags.server.chat_template.empty()) {
    s->chat_template = tokenizer::ChatTemplate::from_choice(*s->tokenizer, flags.server.chat_template);
  } else if (!s->tokenizer->chat_template().empty()) {
    try {
      s->chat_template = tokenizer::ChatTemplate::from_model(*s->tokenizer);
    } catch (const Error& e) {
      SPINDLE_FAIL("{}; choose another template with --chat-template (chatml, llama3, llama2 or a Jinja file)",
                   e.message());
    }
  }
  if (s->chat_template) {
    choose_output_parsers(*s->chat_template, flags);
    spdlog::info("chat template: {}", s->chat_template->format() == tokenizer::ChatFormat::kJinja
                                          ? s->chat_template->source() + " (Jinja)"
                                          : std::string(tokenizer::to_string(s->chat_template->format())) + " (built in)");
  }

  // The rank layout: CUDA rank r on GPU base + r / ranks_per_gpu (ranks on one GPU share its pool);
  // CPU ranks share the host's memory (one pool) and each takes a disjoint core share.
  std::vector<CpuShare> shares;
  if (!on_cuda && dp_size > 1) {
    const std::vector<int> cpus = usable_cpus();
    config::check_cpu_rank_layout(dp_size, static_cast<int>(cpus.size()), flags.server.num_threads);
    shares = split_cpu_shares(cpus, read_cpu_numa_nodes(), dp_size);
  }
  const int ranks_per_pool = on_cuda ? s->resolved.dp.ranks_per_gpu : dp_size;
  {
    AffinityGuard restore_affinity;
    for (int r = 0; r < dp_size; ++r) {
      auto rank = std::make_unique<ServingRank>();
      rank->rank = r;
      rank->pool_index = r / ranks_per_pool;
      rank->local_rank = r % ranks_per_pool;
      rank->pool_size = std::min(ranks_per_pool, dp_size - rank->pool_index * ranks_per_pool);
      rank->resolved = s->resolved;
      if (on_cuda) rank->resolved.cuda_device = s->resolved.dp.base_gpu_id + rank->pool_index;
      if (!shares.empty()) rank->cpus = shares[static_cast<size_t>(r)];
      build_rank(*s, flags, *rank);
      s->ranks.push_back(std::move(rank));
    }
  }
  for (int p = 0; p * ranks_per_pool < dp_size; ++p) {
    std::vector<ServingRank*> members;
    for (auto& r : s->ranks) {
      if (r->pool_index == p) members.push_back(r.get());
    }
    s->kv_pools.push_back(build_pool(*s, members));
  }

  std::vector<engine::DpGroup::Rank> group_ranks;
  for (auto& rp : s->ranks) {
    ServingRank& r = *rp;
    std::map<std::string, std::string> info = {{"model", s->model_name},
                                               {"prefill_attention_backend", r.selection.prefill_backend},
                                               {"decode_attention_backend", r.selection.decode_backend},
                                               {"linear_kernel", r.model->linear_kernel_name()}};
    r.metrics.set_info(std::move(info));
    engine::EngineOptions engine_options;
    engine_options.model_name = s->model_name;
    engine_options.max_queued_requests = r.resolved.max_queued_requests;
    engine_options.enable_prefix_cache = r.resolved.kv.enable_prefix_cache;
    engine_options.scheduler.max_num_batched_tokens = r.resolved.kv.max_num_batched_tokens;
    engine_options.scheduler.max_mixed_prefill_tokens = r.resolved.kv.max_mixed_prefill_tokens;
    engine_options.scheduler.max_running_requests = r.resolved.max_running_requests;
    engine_options.scheduler.max_model_len = r.resolved.kv.max_model_len;
    engine_options.cuda_device = on_cuda ? r.resolved.cuda_device : -1;
    engine_options.dp_rank = r.local_rank;
    if (r.draft) engine_options.proposer = r.draft->proposer.get();
    if (r.ngram) engine_options.proposer = r.ngram.get();
    engine_options.num_draft_tokens = engine_options.proposer ? r.resolved.spec.num_draft_tokens : 0;
    engine_options.speculate_always = r.resolved.spec.always;
    engine_options.decode_log_interval = r.resolved.spec.decode_log_interval;
    engine_options.overlap_schedule = r.resolved.overlap_schedule;
    if (dp_size > 1) {
      engine_options.dp_name = fmt::format("DP rank {}", r.rank);
      const int rank_index = r.rank;
      ServingStack* stack = s.get();
      engine_options.on_step_failure = [stack, rank_index](const std::string& reason) {
        stack->group->mark_failed(rank_index, reason);
      };
      if (r.cpus) {
        const std::vector<int> cpus = r.cpus->cpus;
        const int threads = r.resolved.num_threads;
        engine_options.on_thread_start = [cpus, threads] {
          pin_current_thread(cpus);
          kernels::cpu::set_linear_threads_for_calling_thread(threads);
        };
      }
    }
    r.engine = std::make_unique<engine::Engine>(*r.runner, *s->tokenizer, s->chat_template ? &*s->chat_template : nullptr,
                                                *s->kv_pools[static_cast<size_t>(r.pool_index)], r.metrics,
                                                engine_options);
    group_ranks.push_back({r.engine.get(), &r.metrics});
  }
  engine::RouterOptions router;
  router.method = s->resolved.dp.load_balance_method;
  router.cache_threshold = s->resolved.dp.router_cache_threshold;
  router.balance_abs_threshold = s->resolved.dp.router_balance_abs_threshold;
  router.balance_rel_threshold = s->resolved.dp.router_balance_rel_threshold;
  router.index_pages_per_rank = config::resolve_router_index_pages(s->resolved.dp, s->ranks.front()->kv_plan.num_pages_per_rank);
  router.page_size = s->resolved.page_size;
  s->group = std::make_unique<engine::DpGroup>(std::move(group_ranks), router);  // before any engine can fail
  for (auto& r : s->ranks) r->engine->start();
  return s;
}

void log_serving_stack(const ServingStack& s) {
  const ServingRank& front = *s.ranks.front();
  const bool cpu = s.resolved.device == attn::Device::kCpu;
  spdlog::info("model {} ({}, {}), weights {}{}, linear kernel {}", s.model_name, s.model_dir.string(),
               architecture_name(s.model_config.architecture), format_bytes(front.model->weight_bytes()),
               !cpu ? "" : s.resolved.weights_memory == FileMemory::kHugePageCopy
                               ? " (a copy in transparent huge pages)"
                               : " (the checkpoint mapped)",
               front.model->linear_kernel_name());
  const int dp_size = static_cast<int>(s.ranks.size());
  if (dp_size > 1) {
    spdlog::info("data parallel: {} ranks, router {}{}", dp_size,
                 config::load_balance_method_name(s.resolved.dp.load_balance_method),
                 s.resolved.dp.load_balance_method == config::LoadBalanceMethod::kPrefixCacheAware
                     ? fmt::format(" (cache threshold {}, balance when > {} tokens and > {}x apart)",
                                   s.resolved.dp.router_cache_threshold, s.resolved.dp.router_balance_abs_threshold,
                                   s.resolved.dp.router_balance_rel_threshold)
                     : std::string());
  }
  for (const auto& rp : s.ranks) {
    const ServingRank& r = *rp;
    const std::string who = dp_size > 1 ? fmt::format("rank {}: ", r.rank) : std::string();
    if (dp_size > 1) {
      if (r.cpus) {
        spdlog::info("{}CPUs {} ({}), {} kernel thread(s) pinned there", who, fmt::join(r.cpus->cpus, ","),
                     r.cpus->numa_node >= 0 ? fmt::format("NUMA node {}", r.cpus->numa_node) : "no single NUMA node",
                     r.resolved.num_threads);
      } else {
        spdlog::info("{}CUDA device {} ({} of {} ranks sharing its memory)", who, r.resolved.cuda_device,
                     r.local_rank + 1, r.pool_size);
      }
    }
    for (const auto& row : r.selection.rows) {
      if (row.chosen) {
        spdlog::info("{}{} attention: {} ({}){}", who, attn::phase_name(row.phase), row.backend, row.why,
                     r.selection.from_cache ? " [from cache]" : "");
      }
    }
    for (const auto& w : r.selection.warnings) spdlog::warn("{}{}", who, w);
    if (r.model->supports_graphs()) {
      if (r.runner->graphs_enabled()) {
        spdlog::info("{}CUDA graphs: decode steps of up to {} sequences replay a graph per batch size (1, 2, 4, 8, then "
                     "multiples of 8), captured at start and again when a buffer it reads has moved",
                     who, r.resolved.cuda_graph_max_bs);
      } else {
        spdlog::info("{}CUDA graphs: off, {}", who, r.runner->graphs_disabled_reason());
      }
    }
    if (r.draft) {
      for (const auto& row : r.draft->selection.rows) {
        if (row.chosen) {
          spdlog::info("{}draft model {}: {} attention: {} ({})", who, r.draft->dir.string(), attn::phase_name(row.phase),
                       row.backend, row.why);
        }
      }
    }
    if (r.resolved.spec.algorithm != config::SpecAlgorithm::kNone) {
      spdlog::info(
          "{}speculative decoding: {} proposer{}, {} draft tokens per step, {}", who,
          config::spec_algorithm_name(r.resolved.spec.algorithm),
          r.draft ? fmt::format(" ({}, weights {}, proposing from the first {} of {} token ids)", r.draft->dir.string(),
                                format_bytes(r.draft->model->weight_bytes()), r.draft->model->num_logit_ids(),
                                r.draft->model->config().vocab_size)
                  : fmt::format(" (match windows {}-{})", r.resolved.spec.ngram_min_window,
                                r.resolved.spec.ngram_max_window),
          r.resolved.spec.num_draft_tokens,
          r.resolved.spec.always ? "every decode step" : "skipped where measured decode steps say it costs more");
    }
    const kv::KvPlan& p = r.kv_plan;
    spdlog::info("{}KV plan: usable {} ({}), weights {}, workspace {} ({}), reserve {}{} -> KV {} for {} tokens ({} pages "
                 "of {}), {} KV dtype, max model len {}; bound: {}; prefix cache keeps {}; resident at most {} bytes",
                 who, format_bytes(p.usable_bytes), p.usable_bound, format_bytes(p.weight_bytes),
                 format_bytes(p.workspace_bytes), p.workspace_source, format_bytes(p.reserve_bytes),
                 p.dp_size > 1 ? fmt::format(", split over {} ranks", p.dp_size) : std::string(),
                 format_bytes(p.kv_bytes_per_rank), p.max_total_tokens, p.num_pages_per_rank, p.page_size,
                 dtype_name(r.resolved.kv_dtype), r.resolved.kv.max_model_len, kv::capacity_bound_name(p.bound),
                 p.prefix_cache_pages == kv::kNoPageLimit ? std::string("every page not in use")
                                                          : fmt::format("{} pages", p.prefix_cache_pages),
                 p.resident_bound_bytes);
    if (p.draft_kv_bytes_per_token > 0) {
      spdlog::info("{}KV plan, draft model: {} per token, its own pool of {} pages ({})", who,
                   format_bytes(p.draft_kv_bytes_per_token), p.num_pages_per_rank, format_bytes(p.draft_kv_bytes_per_rank));
    }
  }
}

}  // namespace spindle::cli
