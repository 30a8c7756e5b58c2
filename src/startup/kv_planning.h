// Start-up planning glue: from a model, its resolved KV flags and this machine's memory to the
// capacity planner (kv/capacity_planner.h, plain numbers in, a plan out).
#pragma once

#include <cstdint>
#include <functional>

#include "config/kv_config.h"
#include "kv/capacity_planner.h"
#include "kv/kv_layout.h"
#include "model/model_config.h"
#include "platform/memory_info.h"

namespace spindle::startup {

// The KV geometry of one tensor-parallel rank: max(1, num_key_value_heads / tp_size) KV heads.
kv::KvLayout kv_layout_for(const ModelConfig& model, DType kv_dtype, int page_size, int tp_size = 1);

// Peak workspace bytes of one forward over max_num_batched_tokens tokens, measured by a profiling
// forward of the model (startup/workspace_probe.h makes one; serve and plan use it).
using WorkspaceProbe = std::function<uint64_t(int max_num_batched_tokens)>;

// Without a probe (plan --estimate-workspace): the f32 activation buffers of one forward over T tokens, reused across
// layers (H hidden, Q = heads * head_dim, K = kv_heads * head_dim, I intermediate, V vocab):
//   T * 4 * (3H      residual, normed input, projection output
//            + Q + 2K  q, k, v
//            + Q       attention output
//            + 2I      gate and up (the activation is applied in place)
//            + V)      logits (a decode step of T sequences samples T rows)
uint64_t estimate_workspace_bytes(const ModelConfig& model, int max_num_batched_tokens);

// The usable memory of the calling thread's current CUDA device (bound to cuda_device): its free
// bytes now (cudaMemGetInfo), so read it after the weights are loaded and pass
// usable_after_weights = true to plan_kv_cache. Throws without CUDA.
MemoryInfo cuda_usable_memory(int cuda_device);

// Plans the KV cache for this model on this memory: the probe's measurement when given
// (workspace_source "measured"), else estimate_workspace_bytes ("estimated"). weight_bytes: the
// bytes of weights loaded; usable_after_weights: memory was read with them already resident.
// max_running_requests > 0 caps auto capacity at what the scheduler can use (the CPU: pass
// ResolvedConfig::max_running_requests); 0 plans from the memory alone (GPUs).
kv::KvPlan plan_kv_cache(const config::ResolvedKvConfig& config, const kv::KvLayout& layout, const ModelConfig& model,
                         const MemoryInfo& memory, uint64_t weight_bytes, const WorkspaceProbe& probe = {},
                         bool usable_after_weights = false, int max_running_requests = 0,
                         uint64_t draft_kv_bytes_per_token = 0);

// The pages a CPU pool keeps resident while free (PageAllocator::set_residency_limits): one step's
// worth of new pages, ceil(max_num_batched_tokens / page_size), so a step does not fault in pages
// that were just given back.
int64_t resident_free_pages_for(const config::ResolvedKvConfig& config, int page_size);

}  // namespace spindle::startup
