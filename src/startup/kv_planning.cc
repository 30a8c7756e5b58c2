#include "startup/kv_planning.h"

#include <fmt/format.h>

#include <algorithm>

#include "model/cpu_moe.h"
#include "platform/cuda_info.h"
#include "util/error.h"

namespace spindle::startup {

kv::KvLayout kv_layout_for(const ModelConfig& model, DType kv_dtype, int page_size, int tp_size) {
  SPINDLE_CHECK(tp_size >= 1, "tensor-parallel size {} must be at least 1", tp_size);
  kv::KvLayout layout;
  layout.num_layers = model.num_hidden_layers;
  layout.num_kv_heads = std::max(1, model.num_key_value_heads / tp_size);
  layout.head_dim = model.head_dim;
  layout.dtype = kv_dtype;
  layout.page_size = page_size;
  layout.check();
  return layout;
}

uint64_t estimate_workspace_bytes(const ModelConfig& m, int max_num_batched_tokens) {
  SPINDLE_CHECK(max_num_batched_tokens > 0, "--max-num-batched-tokens {} must be positive", max_num_batched_tokens);
  const uint64_t floats_per_token = 3 * uint64_t(m.hidden_size) + 2 * uint64_t(m.q_size()) +
                                    2 * uint64_t(m.kv_size()) + 2 * uint64_t(m.intermediate_size) +
                                    uint64_t(m.vocab_size);
  uint64_t bytes = uint64_t(max_num_batched_tokens) * sizeof(float) * floats_per_token;
  if (m.moe.enabled()) {  // CpuMoeScratch (model/cpu_moe.h): one chunk of rows, top_k copies of each
    const uint64_t rows = std::min<uint64_t>(uint64_t(max_num_batched_tokens), uint64_t(kMoeChunkRows));
    const uint64_t k = m.moe.num_experts_per_tok, h = m.hidden_size, f = m.moe.moe_intermediate_size;
    const uint64_t s = m.moe.shared_expert_intermediate_size;
    bytes += rows * sizeof(float) * (uint64_t(m.moe.num_experts) + 2 * k + k * (2 * h + 3 * f) + 3 * s + h + 1);
  }
  return bytes;
}

MemoryInfo cuda_usable_memory(int cuda_device) {
  const CudaMemory gpu = current_cuda_memory();
  MemoryInfo m;
  m.total_bytes = gpu.total_bytes;
  m.mem_available_bytes = gpu.free_bytes;
  m.usable_bytes = gpu.free_bytes;
  m.bound = fmt::format("cudaMemGetInfo free on cuda:{}, weights resident", cuda_device);
  return m;
}

kv::KvPlan plan_kv_cache(const config::ResolvedKvConfig& config, const kv::KvLayout& layout, const ModelConfig& model,
                         const MemoryInfo& memory, uint64_t weight_bytes, const WorkspaceProbe& probe,
                         bool usable_after_weights, int max_running_requests, uint64_t draft_kv_bytes_per_token) {
  kv::KvPlanInput in;
  in.usable_bytes = memory.usable_bytes;
  in.usable_bound = memory.bound;
  in.usable_after_weights = usable_after_weights;
  in.weight_bytes = weight_bytes;
  in.max_num_batched_tokens = config.max_num_batched_tokens;
  if (probe) {
    in.workspace_bytes = probe(config.max_num_batched_tokens);
    in.workspace_source = "measured";
  } else {
    in.workspace_bytes = estimate_workspace_bytes(model, config.max_num_batched_tokens);
    in.workspace_source = "estimated";
  }
  in.kv_bytes_per_token = layout.bytes_per_token();
  in.draft_kv_bytes_per_token = draft_kv_bytes_per_token;
  in.page_size = layout.page_size;
  in.mem_fraction = config.mem_fraction;
  in.dp_size = config.dp_size;
  in.max_model_len = config.max_model_len;
  in.max_total_tokens = config.max_total_tokens;
  in.max_running_requests = max_running_requests;
  in.prefix_cache_enabled = config.enable_prefix_cache;
  in.prefix_cache_tokens = config.prefix_cache_tokens;
  return kv::plan_kv_capacity(in);
}

int64_t resident_free_pages_for(const config::ResolvedKvConfig& config, int page_size) {
  SPINDLE_CHECK(page_size > 0, "--page-size {} must be positive", page_size);
  return (int64_t{config.max_num_batched_tokens} + page_size - 1) / page_size;
}

}  // namespace spindle::startup
