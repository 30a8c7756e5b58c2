// The attention selection of a serving process (DESIGN.md section 2): attn::select_attention_backends
// with the real child-process validator (attn/select/validation.h) and the on-disk selection cache
// (attn/select/validation_cache.h) keyed by build, device fingerprint (the bound GPU included) and
// shape. Called after the worker bound its device (config::bind_worker_device).
#pragma once

#include <string>

#include "attn/select/attention_selection.h"
#include "config/server_config.h"
#include "platform/device_info.h"

namespace spindle::startup {

// executable: the spindle binary to re-execute (empty: /proc/self/exe).
attn::AttentionSelection select_attention(const config::ResolvedConfig& config, const DeviceInfo& device,
                                          const std::string& executable = "");

}  // namespace spindle::startup
