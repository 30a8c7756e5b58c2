#include "startup/backend_selection.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "attn/select/validation.h"
#include "attn/select/validation_cache.h"
#include "platform/cpu_info.h"
#include "startup/workspace_cache.h"
#include "util/build_info.h"

namespace spindle::startup {

attn::AttentionSelection select_attention(const config::ResolvedConfig& config, const DeviceInfo& device,
                                    const std::string& executable) {
  attn::ChildOptions child;
  child.executable = executable;
  child.timeout_s = config.backend_validation_timeout_s;
  child.cuda_device = config.device == attn::Device::kCuda ? config.cuda_device : -1;
  attn::BackendValidator validator = [child](const std::string& backend, const attn::AttentionShape& shape,
                                       bool timing) mutable {
    child.timing = timing;
    spdlog::info("validating attention backend {} on {}", backend, shape.to_string());
    return attn::validate_in_child(backend, shape, child);
  };
  if (!config.use_backend_cache) {
    return attn::select_attention_backends(device, config.attention_shape, config.attention, validator);
  }
  // The bound GPU is part of what was measured.
  attn::ValidationCache cache(config.backend_cache_dir,
                              attn::ValidationCache::make_key(build_id(), cache_fingerprint(config, device),
                                                              config.attention_shape));
  auto selection = attn::select_attention_backends(device, config.attention_shape, config.attention, cache.wrap(validator));
  selection.from_cache = cache.num_misses() == 0 && cache.num_hits() > 0;
  if (cache.num_misses() > 0) cache.save();
  return selection;
}

}  // namespace spindle::startup
