// Start-up probing: the measured workspace for the KV capacity planner (DESIGN.md section 3), one
// profiling step of the model at the largest batch the scheduler may form, and the unvalidated
// backends such a probe runs with. Shared by `spindle serve`/`generate` (cli/serving_stack.cc),
// `spindle plan` and bench/kv_fill.cc. This folder (startup/) holds the glue that joins a model,
// its backends and this machine before serving; config/ holds only the flags and resolve().
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "attn/attention_backend.h"
#include "config/kv_config.h"
#include "startup/kv_planning.h"
#include "config/server_config.h"
#include "platform/device_info.h"
#include "util/dtype.h"

namespace spindle {
class ThreadPool;
namespace engine {
class Runner;
}
}  // namespace spindle

namespace spindle::startup {

// The step it measures: num_tokens tokens, split into sequences of at most max_seq_len tokens
// (the scheduler never forms a longer one; --max-model-len), with one logit row per sequence.
// CUDA: runs that step through the runner on a scratch KV pool of exactly the pages it needs
// (freed on return; the runner's backends are left bound to it, so the caller binds its own pool
// afterwards) and takes the larger of the model's count and the device memory the step took;
// where the runner replays decode graphs, every graph size is captured there too (and dropped
// again), so their memory is part of the measured workspace.
// CPU: Transformer::reserve_workspace for that step, no forward (the forward allocates nothing
// more that is counted; tests/startup/workspace_probe_test.cc checks it), so it costs milliseconds.
// Returns
//   Transformer::workspace_bytes() after that step (scratch activations, RoPE table, step upload)
//   + num_tokens * vocab_size * 4   the engine's logits buffer for a step of num_tokens sequences
//   + (num_tokens - rows) * hidden * 4   the final-norm rows such a step adds to the workspace
// The last two are what a decode step of num_tokens sequences would add; they are counted rather
// than run because the LM head over every row would dominate the profile's time. CPU kernel
// scratch (oneDNN's buffers, attention tiles) is not included: the reserve covers it.
uint64_t measure_workspace_bytes(engine::Runner& runner, DType kv_dtype, int page_size, int num_tokens,
                                 int max_seq_len);

// measure_workspace_bytes for plan_kv_cache(); the runner must outlive the probe's use.
startup::WorkspaceProbe make_workspace_probe(engine::Runner& runner, DType kv_dtype, int page_size, int max_seq_len);

// Attention backends for a profiling (or benchmark) forward without the child-process validation
// serve runs: the highest-priority backend available for each phase on this machine and shape
// (explicit --attention-backend flags in `resolved` still win). The workspace does not depend on
// which backend runs.
struct UnvalidatedBackends {
  std::unique_ptr<attn::AttentionBackend> prefill;
  std::unique_ptr<attn::AttentionBackend> decode;
  std::string prefill_name, decode_name;
};
UnvalidatedBackends make_unvalidated_backends(const config::ResolvedConfig& resolved, const DeviceInfo& device,
                                              ThreadPool* pool);

}  // namespace spindle::startup
