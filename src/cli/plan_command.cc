// spindle plan MODEL_DIR [--device cpu|cuda:N] [--dp-size N] [--kv-cache-dtype ...] [--page-size P] [--max-model-len L]
//   [--max-total-tokens N|auto] [--mem-fraction F] [--max-num-batched-tokens N] [--threads N]
//   [--max-running-requests N] [--prefix-cache-tokens N|auto] [--disable-prefix-cache]
//   [--estimate-workspace] [--json]:
// the KV cache capacity plan (DESIGN.md section 3) for this model on this machine, per DP rank,
// and how many sequences of max_model_len fit at once. On the CPU auto capacity is capped at what
// the scheduler can use (running requests x max model length + the prefix cache's budget); the
// output says which bound applied (memory, scheduler, page ids or explicit) and the most the plan
// lets the memory hold (the resident bound).
//
// The workspace is measured as serve measures it: the model is loaded (mmap) and one profiling
// step at --max-num-batched-tokens (startup::measure_workspace_bytes: on the CPU its scratch is
// reserved without running it, on CUDA it runs) with the highest-priority attention backend
// available here (not validated: the workspace does not depend on the backend). plan always
// measures; serve and generate take it from the on-disk cache (startup/workspace_cache.h). --estimate-workspace skips
// loading and uses startup::estimate_workspace_bytes (headers only, well under a second); the
// output says which it used.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <iostream>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/format.h"
#include "config/kv_config.h"
#include "startup/kv_planning.h"
#include "config/server_config.h"
#include "engine/runner.h"
#include "startup/workspace_probe.h"
#include "kv/capacity_planner.h"
#include "model/model.h"
#include "model/model_loader.h"
#include "platform/cuda_info.h"
#include "model/gguf_model_config.h"
#include "model/gguf_weights.h"
#include "model/model_config.h"
#include "model/safetensors.h"
#include "model/weight_map.h"
#include "platform/memory_info.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace spindle::cli {
namespace {

struct PlanArgs {
  std::string model_dir;
  config::ServerConfig flags;  // --kv-cache-dtype, --page-size, --threads and the KV flags
  std::string memory_root = "/";  // hidden: read /proc and cgroup files under this root (tests)
  bool estimate_workspace = false;
  bool json = false;
};

nlohmann::json plan_json(const std::string& dir, const ModelConfig& model, const kv::KvLayout& layout,
                         const config::ResolvedKvConfig& kv_config, const kv::KvPlan& p, const ExpertStats& experts) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& r : p.ranks) {
    ranks.push_back({{"rank", r.rank},
                     {"first_page", r.first_page},
                     {"num_pages", r.num_pages},
                     {"max_total_tokens", r.max_total_tokens},
                     {"kv_bytes", r.kv_bytes}});
  }
  return {{"model_dir", dir},
          {"architecture", architecture_name(model.architecture)},
          {"usable_bytes", p.usable_bytes},
          {"usable_bound", p.usable_bound},
          {"weight_bytes", p.weight_bytes},
          {"weights_subtracted", p.weights_subtracted},
          {"workspace_bytes_per_rank", p.workspace_bytes},
          {"workspace_source", p.workspace_source},
          {"max_num_batched_tokens", p.max_num_batched_tokens},
          {"reserve_bytes", p.reserve_bytes},
          {"budget_bytes", p.budget_bytes},
          {"mem_fraction", p.mem_fraction},
          {"dp_size", p.dp_size},
          {"kv_budget_bytes_per_rank", p.kv_budget_bytes_per_rank},
          {"kv_cache_dtype", dtype_name(layout.dtype)},
          {"kv_bytes_per_token", p.kv_bytes_per_token},
          {"page_size", p.page_size},
          {"bytes_per_page", p.bytes_per_page},
          {"max_total_tokens_source", p.explicit_max_total_tokens ? "explicit" : "auto"},
          {"auto_max_total_tokens_per_rank", p.auto_max_total_tokens},
          {"capped_by_page_ids", p.capped_by_page_ids},
          {"memory_max_total_tokens_per_rank", p.memory_max_total_tokens},
          {"max_running_requests", p.max_running_requests},
          {"running_tokens_per_rank", p.running_tokens},
          {"scheduler_max_total_tokens_per_rank", p.scheduler_tokens},
          {"capacity_bound", kv::capacity_bound_name(p.bound)},
          {"prefix_cache_pages_per_rank", p.prefix_cache_pages},
          {"prefix_cache_budget_source", p.prefix_cache_source},
          {"resident_bound_bytes", p.resident_bound_bytes},
          {"max_total_tokens_per_rank", p.max_total_tokens},
          {"num_pages_per_rank", p.num_pages_per_rank},
          {"num_pages", p.num_pages()},
          {"kv_bytes_per_rank", p.kv_bytes_per_rank},
          {"max_model_len", p.max_model_len},
          {"pages_per_sequence", p.pages_per_sequence},
          {"num_sequences_per_rank", p.num_sequences_per_rank},
          {"num_sequences", p.num_sequences_per_rank * p.dp_size},
          {"prefix_cache", kv_config.enable_prefix_cache},
          {"draft_kv_bytes_per_token", p.draft_kv_bytes_per_token},
          {"draft_kv_bytes_per_rank", p.draft_kv_bytes_per_rank},
          {"ranks", ranks},
          {"num_parameters", parameter_count(model)},
          {"num_active_parameters", active_parameter_count(model)},
          {"expert_bytes", experts.bytes},
          {"active_expert_bytes_per_token", experts.active_bytes}};
}

void print_plan(const std::string& dir, const ModelConfig& model, const kv::KvLayout& layout,
                const config::ResolvedKvConfig& kv_config, const kv::KvPlan& p, bool on_cuda,
                const ExpertStats& experts) {
  fmt::print("KV cache plan for {} ({}, {} KV, page {}, dp {})\n", dir, architecture_name(model.architecture),
             dtype_name(layout.dtype), p.page_size, p.dp_size);
  fmt::print("  usable memory       {:>12}  bound: {}\n", format_bytes(p.usable_bytes), p.usable_bound);
  if (p.weights_subtracted) {
    fmt::print("  - weights           {:>12}  tensor bytes as loaded (mapped once, or copied into huge pages per rank)\n",
               format_bytes(p.weight_bytes));
  } else {
    fmt::print("    weights           {:>12}  resident on the device: already out of usable\n",
               format_bytes(p.weight_bytes));
  }
  if (model.moe.enabled()) {
    fmt::print("    of which experts  {:>12}  {} experts, top {}: all of them in the weights; {} read per token "
               "({} of {} parameters active)\n",
               format_bytes(experts.bytes), model.moe.num_experts, model.moe.num_experts_per_tok,
               format_bytes(experts.active_bytes), format_count(active_parameter_count(model)),
               format_count(parameter_count(model)));
  }
  const std::string how = p.workspace_source == "measured"
                              ? fmt::format("measured: profiling step at {} tokens{}", p.max_num_batched_tokens,
                                            on_cuda ? "" : " (CPU: its scratch reserved, not run)")
                              : fmt::format("estimated: f32 activations of one forward at {} tokens "
                                            "(--estimate-workspace)",
                                            p.max_num_batched_tokens);
  fmt::print("  - workspace         {:>12}  x {} rank(s); {}\n", format_bytes(p.workspace_bytes), p.dp_size, how);
  fmt::print("  - reserve           {:>12}  max(128 MiB, 2% of usable)\n", format_bytes(p.reserve_bytes));
  fmt::print("  = budget            {:>12}\n", format_bytes(p.budget_bytes));
  fmt::print("  KV budget per rank  {:>12}  budget x mem fraction {} / {} rank(s)\n",
             format_bytes(p.kv_budget_bytes_per_rank), p.mem_fraction, p.dp_size);
  fmt::print("  KV per token        {:>12}  {} layers x 2 x {} KV heads x {} x {} B\n",
             format_bytes(p.kv_bytes_per_token), layout.num_layers, layout.num_kv_heads, layout.head_dim,
             dtype_size(layout.dtype));
  fmt::print("  page                {:>12}  {} tokens\n", format_bytes(p.bytes_per_page), p.page_size);
  if (p.draft_kv_bytes_per_token > 0) {
    fmt::print("  draft KV per token  {:>12}  the draft model's own pool, as many pages (a page costs {} of the "
               "budget for both)\n",
               format_bytes(p.draft_kv_bytes_per_token), format_bytes(p.bytes_per_page + p.draft_bytes_per_page));
  }
  fmt::print("  memory holds        {:>12}  tokens per rank{}\n", p.memory_max_total_tokens,
             p.capped_by_page_ids ? " (capped by the int32 page-id range)" : "");
  const int64_t prefix_tokens = p.prefix_cache_pages < 0 ? -1 : p.prefix_cache_pages * p.page_size;
  if (p.max_running_requests > 0) {
    fmt::print("  scheduler can use   {:>12}  tokens per rank: {} running x {} pages of {} tokens + prefix cache {} "
               "tokens\n",
               p.scheduler_tokens, p.max_running_requests, p.pages_per_sequence, p.page_size,
               (p.scheduler_tokens - p.running_tokens));
  } else {
    fmt::print("  scheduler can use        (no cap)  GPU: planned from the device's free memory\n");
  }
  fmt::print("  max total tokens    {:>12}  per rank, {} pages, {}; bound: {}\n", p.max_total_tokens,
             p.num_pages_per_rank, format_bytes(p.kv_bytes_per_rank),
             p.explicit_max_total_tokens ? "explicit (--max-total-tokens)" : kv::capacity_bound_name(p.bound));
  fmt::print("  sequences of {} tokens at once: {} per rank, {} in all\n", p.max_model_len,
             p.num_sequences_per_rank, p.num_sequences_per_rank * p.dp_size);
  if (!kv_config.enable_prefix_cache) {
    fmt::print("  prefix cache        off (--disable-prefix-cache)\n");
  } else if (prefix_tokens < 0) {
    fmt::print("  prefix cache        keeps every page not in use (auto on a GPU)\n");
  } else {
    fmt::print("  prefix cache        {:>12}  tokens kept per rank ({} pages; {}{})\n", prefix_tokens,
               p.prefix_cache_pages, p.prefix_cache_source == "auto" ? "auto: a quarter of the running pages" : "--prefix-cache-tokens",
               p.max_running_requests > 0 ? "; beyond it evicted and given back to the OS" : "");
  }
  fmt::print("  resident at most    {:>12}  {}workspace + reserve + KV pool{}\n", format_bytes(p.resident_bound_bytes),
             p.weights_subtracted ? "weights + " : "", p.draft_kv_bytes_per_token > 0 ? "s (target and draft)" : "");
  for (const auto& r : p.ranks) {
    fmt::print("  rank {}: pages [{}, {}), {} tokens, {}\n", r.rank, r.first_page, r.first_page + r.num_pages,
               r.max_total_tokens, format_bytes(r.kv_bytes));
    if (p.draft_kv_bytes_per_token > 0) {
      fmt::print("  rank {}: draft pool {} pages, {}\n", r.rank, r.num_pages, format_bytes(p.draft_kv_bytes_per_rank));
    }
  }
}

// The bytes the weights hold once loaded on the CPU, without a forward: a folder's tensors as
// stored; a GGUF file's, or a folder's with --quantization (q8_0 or fp8), as CpuOps converts them
// (repacked block types, widened F16, FP8 codes and scales), so it is loaded.
uint64_t stored_weight_bytes(const std::string& path, const ModelConfig& model, WeightQuantization quantization,
                             bool quantize_fp8) {
  if (is_gguf_path(path) || quantization != WeightQuantization::kNone || quantize_fp8) {
    LoadOptions options;  // quantized at load: the repacked bytes as serve holds them
    options.cpu.quantization = quantization;
    options.cpu.quantize_fp8 = quantize_fp8;
    return load_model(path, options)->weight_bytes();
  }
  const Checkpoint checkpoint(path);
  check_weights(model, checkpoint);
  return weight_stats(checkpoint).num_bytes;
}

void run_plan(const PlanArgs& args) {
  SPINDLE_CHECK(!args.model_dir.empty(), "plan needs a MODEL_DIR (a Hugging Face model folder or a GGUF file)");
  const ModelConfig model = load_model_config(args.model_dir);

  // resolve() decides the KV dtype and page size; of the machine it needs the memory (read before
  // the weights are mapped, as serve reads it) and, for the profiling forward, the CPU.
  // --device cuda:N: the GPU's memory instead (cudaMemGetInfo on the bound device).
  DeviceInfo device;
  device.memory = read_memory_info(args.memory_root);
  if (!args.estimate_workspace) device.cpu = detect_cpu_info();
  if (args.flags.device != "cpu") {
    const CudaProbe probe = probe_cuda_devices();
    device.cuda_devices = probe.devices;
    device.cuda_status = probe.unavailable_reason;
  }
  const config::ResolvedConfig resolved = config::resolve(args.flags, device, model);
  const bool on_cuda = resolved.device == attn::Device::kCuda;
  device = config::bind_worker_device(resolved, device);
  const kv::KvLayout layout = startup::kv_layout_for(model, resolved.kv_dtype, resolved.page_size);

  // --speculative-algorithm draft: the draft's weights, its own KV pool (as many pages, its bytes
  // per token) and its workspace (estimated from its shape) are planned next to the target's.
  uint64_t draft_weight_bytes = 0, draft_kv_bytes_per_token = 0, draft_workspace = 0;
  if (resolved.spec.algorithm == config::SpecAlgorithm::kDraft) {
    const ModelConfig draft = load_model_config(resolved.spec.draft_model_path);
    const Checkpoint checkpoint(resolved.spec.draft_model_path);
    check_weights(draft, checkpoint);
    draft_weight_bytes = weight_stats(checkpoint).num_bytes;
    draft_kv_bytes_per_token = startup::kv_layout_for(draft, resolved.kv_dtype, resolved.page_size).bytes_per_token();
    draft_workspace = startup::estimate_workspace_bytes(draft, resolved.kv.max_num_batched_tokens);
  }
  auto with_draft = [&](MemoryInfo memory) {  // CUDA: the draft's weights would be resident too
    if (on_cuda) memory.usable_bytes -= std::min(memory.usable_bytes, draft_weight_bytes);
    return memory;
  };
  const uint64_t cpu_draft_weights = on_cuda ? 0 : draft_weight_bytes;
  // As serve counts them: CPU ranks that copy their weights into huge pages hold one copy each.
  const uint64_t weight_copies =
      !on_cuda && resolved.weights_memory == FileMemory::kHugePageCopy ? uint64_t(resolved.kv.dp_size) : 1;

  kv::KvPlan plan;
  if (args.estimate_workspace) {
    const uint64_t weight_bytes =
        stored_weight_bytes(args.model_dir, model, resolved.quantization, resolved.quantize_fp8);
    const MemoryInfo memory = on_cuda ? startup::cuda_usable_memory(resolved.cuda_device) : device.memory;
    const startup::WorkspaceProbe estimate = [&](int tokens) {
      return startup::estimate_workspace_bytes(model, tokens) + draft_workspace;
    };
    plan = startup::plan_kv_cache(resolved.kv, layout, model, with_draft(memory),
                                  (weight_bytes + cpu_draft_weights) * weight_copies,
                                  estimate, false, on_cuda ? 0 : resolved.max_running_requests,
                                  draft_kv_bytes_per_token);
    plan.workspace_source = "estimated";
  } else {
    ThreadPool pool(resolved.num_threads);
    LoadOptions options;
    options.device = resolved.device;
    options.cuda_device = resolved.cuda_device;
    options.cpu.pool = &pool;
    options.cpu.quantization = resolved.quantization;
    options.cpu.quantize_fp8 = resolved.quantize_fp8;  // --quantization fp8: the FP8 model's workspace, as serve's
    options.cuda_fp8_prefill_kernel = resolved.fp8_prefill_kernel;
    const std::unique_ptr<Transformer> loaded = load_model(args.model_dir, options);
    const startup::UnvalidatedBackends backends = startup::make_unvalidated_backends(resolved, device, &pool);
    engine::Runner runner(*loaded, *backends.prefill, *backends.decode);
    // CUDA: free memory read with the weights resident, before the profiling forward.
    const MemoryInfo memory = on_cuda ? startup::cuda_usable_memory(resolved.cuda_device) : device.memory;
    const startup::WorkspaceProbe measured =
        startup::make_workspace_probe(runner, resolved.kv_dtype, resolved.page_size, resolved.kv.max_model_len);
    plan = startup::plan_kv_cache(
        resolved.kv, layout, model, with_draft(memory), (loaded->weight_bytes() + cpu_draft_weights) * weight_copies,
        [&](int tokens) { return measured(tokens) + draft_workspace; },
        /*usable_after_weights=*/on_cuda, on_cuda ? 0 : resolved.max_running_requests, draft_kv_bytes_per_token);
  }
  const ExpertStats experts = !model.moe.enabled()           ? ExpertStats{}
                              : is_gguf_path(args.model_dir) ? gguf_expert_stats(model, gguf::GgufFile(args.model_dir))
                                                             : expert_stats(model, Checkpoint(args.model_dir).tensors());
  if (args.json) {
    std::cout << plan_json(args.model_dir, model, layout, resolved.kv, plan, experts).dump(2) << std::endl;
  } else {
    print_plan(args.model_dir, model, layout, resolved.kv, plan, on_cuda, experts);
  }
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto args = std::make_shared<PlanArgs>();
  auto* cmd = app.add_subcommand("plan", "Show the KV cache capacity plan for a model on this machine");
  cmd->add_option("model_dir", args->model_dir, "Hugging Face model folder (config.json + safetensors) or GGUF file");
  cmd->add_option("--kv-cache-dtype", args->flags.kv_cache_dtype,
                  "KV cache dtype: auto (bf16), bf16, fp16 (CUDA backends and the reference), f32 or fp8_e4m3");
  cmd->add_option("--page-size", args->flags.page_size, "Tokens per KV page (16)");
  config::add_kv_flags(*cmd, args->flags.kv);
  config::add_scheduler_flags(*cmd, args->flags);
  config::add_weights_memory_flag(*cmd, args->flags);
  config::add_quantization_flag(*cmd, args->flags);
  config::add_spec_flags(*cmd, args->flags.spec);
  cmd->add_option("--device", args->flags.device,
                  "Plan for cpu (default) or cuda / cuda:N (weights loaded onto that GPU, its free memory read)");
  cmd->add_option("--threads", args->flags.num_threads, "CPU threads for the profiling forward (all usable cores)");
  cmd->add_flag("--estimate-workspace", args->estimate_workspace,
                "Estimate the workspace from the model's shape instead of loading the model and measuring "
                "it with a profiling forward");
  cmd->add_option("--memory-root", args->memory_root, "Read /proc and cgroup files under this root (tests)")
      ->group("");
  cmd->add_flag("--json", args->json, "Print JSON");
  cmd->callback([args] { run_plan(*args); });
}

}  // namespace spindle::cli
