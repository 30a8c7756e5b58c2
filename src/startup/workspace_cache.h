// The measured workspace (startup/workspace_probe.h) kept on disk next to the attention selection
// cache (attn/select/validation_cache.h), so that a second start measures nothing.
//
// One JSON file per key, <dir>/workspace-<hash of key>.json =
//   {"key": KEY, "num_tokens": T, "workspace_bytes": N}   (T: the probe's --max-num-batched-tokens).
// The key holds everything the measurement depends on: the build id, the device fingerprint (the
// bound GPU included), the device, the model's shape (architecture, sizes, vocabulary, positions,
// tied embeddings, weight dtype, the mixture of experts' sizes), the checkpoint's FP8 format
// (method, scale mode, modules left unconverted), the flags that change it (--max-num-batched-tokens,
// --max-model-len, --kv-cache-dtype, page size, --matmul-precision, --quantization (q8_0 and fp8
// alike), --fp8-prefill-kernel, --cuda-graph-max-bs) and what the loaded model and its backends add
// (WorkspaceKeyExtras: the weights' bytes, which tell a GGUF file's block types apart, and the
// attention backends the probe's step ran). A changed key means another file, so the workspace is
// measured again; a corrupt or foreign file is ignored with a warning and rewritten. `serve` and
// `generate` use it unless --no-backend-cache; `plan` always measures.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "config/server_config.h"
#include "model/model_config.h"
#include "platform/device_info.h"
#include "startup/kv_planning.h"

namespace spindle::startup {

// The device fingerprint that keys on-disk caches: the CPU's, plus the bound GPU's name and
// compute capability with --device cuda:N.
std::string cache_fingerprint(const config::ResolvedConfig& config, const DeviceInfo& device);

// What the loaded model and its bound backends add to the key (known once they are loaded).
struct WorkspaceKeyExtras {
  uint64_t weight_bytes = 0;   // Transformer::weight_bytes(): Q4_K and Q8_0 files of one shape differ here
  std::string prefill_backend;  // the attention backends the probe's step runs (their workspaces differ)
  std::string decode_backend;
};

// The key of one measurement (see above).
std::string workspace_cache_key(std::string_view build_id, std::string_view fingerprint, const ModelConfig& model,
                                const config::ResolvedConfig& config, const WorkspaceKeyExtras& extras);

class WorkspaceCache {
 public:
  WorkspaceCache(const std::filesystem::path& dir, std::string key);

  const std::filesystem::path& path() const { return path_; }
  // The stored bytes, when the file exists and holds this key and token count.
  std::optional<uint64_t> find(int num_tokens) const;
  // Writes the file atomically (temp file + rename); a failure is logged, never fatal.
  void store(int num_tokens, uint64_t workspace_bytes) const;

  // Wraps a probe: answers from the file when it holds the key and token count, else runs
  // `inner` and stores what it measured. *from_cache (when given) says which happened. The cache
  // must outlive the probe.
  WorkspaceProbe wrap(WorkspaceProbe inner, bool* from_cache) const;

 private:
  std::filesystem::path path_;
  std::string key_;
};

}  // namespace spindle::startup
